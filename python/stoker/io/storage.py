"""Where a dataset's bytes live: a local folder, an S3 bucket (or an S3-compatible store), or
files behind HTTP(S).

Conventions are the AWS SDKs' and CLI's, so existing setups just work: credentials from
``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN``, else
``~/.aws/credentials`` and ``~/.aws/config`` under ``AWS_PROFILE``; the region from ``AWS_REGION`` /
``AWS_DEFAULT_REGION``; the endpoint from ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL`` (with
path-style addressing). :class:`S3Options` overrides any of them; ``storage_options=`` dicts in
pyarrow's, fsspec's and s3fs's spellings are taken too (:func:`as_s3_options`).

Videos are read by the C++ engine (its remote sources, with the same options, registered per
dataset prefix). Metadata (JSON, Parquet) is read here, through a :class:`Root`:
:func:`open_dataset_root` gives one for a folder (the local file system, unchanged), an
``s3://bucket/prefix`` (``pyarrow.fs.S3FileSystem``) or an ``https://host/path`` (urllib; plain
HTTP cannot list, so such a dataset must be enumerable from its metadata).

An S3 root lists its prefix once, on the first question about its objects (which exist, their
sizes and versions), by ListObjectsV2: one request per 1,000 objects instead of a HEAD per
object, and answers every later question from that listing. A root is thus one look at the
store: open it again to see objects changed since. Where listing is refused (credentials
allowed to get objects but not to list them), it asks object by object, as before.

Every failure to read names the URL and says which of these it is: a missing bucket, a missing
object, credentials the store refused, or another error with the store's words.
"""

from __future__ import annotations

import abc
import dataclasses
import fnmatch
import functools
import glob as _glob
import io
import json
import os
import posixpath
import random
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Union

import pyarrow as pa
import pyarrow.json as pa_json
import pyarrow.parquet as pq

from stoker import _core
from stoker._core import DatasetError, InvalidArgumentError
from stoker.io.files import checked_path

__all__ = [
    "Root",
    "S3Options",
    "as_s3_options",
    "is_url",
    "join",
    "open_dataset_root",
    "register_remote_options",
]

_SCHEMES = ("s3://", "http://", "https://")


@dataclass(frozen=True)
class S3Options:
    """How to reach remote objects; mirrors the engine's ``RemoteOptions`` field by field.

    Empty strings and zeros (``-1`` for ``read_through_gap_bytes``) mean "from the environment"
    (see the module's notes) or the engine's default, given in brackets.

    Args:
        region: [``AWS_REGION``, ``AWS_DEFAULT_REGION``, the profile's, ``us-east-1``].
        endpoint_url: e.g. ``"http://127.0.0.1:9000"``; implies path-style addressing
            [``AWS_ENDPOINT_URL_S3``, ``AWS_ENDPOINT_URL``, the profile's; else AWS].
        profile: the profile of ``~/.aws/credentials`` and ``~/.aws/config`` [``AWS_PROFILE``,
            "default"].
        access_key_id, secret_access_key, session_token: explicit credentials.
        anonymous: unsigned requests (public buckets).
        max_attempts: tries per request, the first included [8].
        total_timeout_s: for one request, all tries and waits included [120].
        connect_timeout_s: [10]. low_speed_timeout_s: a transfer below 1 KiB/s this long is
            abandoned [15].
        backoff_base_s, backoff_max_s: the wait before try n is uniform in
            [0, min(backoff_max_s, backoff_base_s * 2**n)] [0.05, 5].
        read_through_gap_bytes: ranges closer than this are fetched by one request [64 KiB].
        min_request_bytes: a small read fetches this much ahead [256 KiB].
        cache_bytes: the process's in-memory range cache [256 MiB].
        disk_cache_dir, disk_cache_bytes: a range cache on local disk, kept across processes
            (for repeated epochs) [none].

    ``repr`` leaves the secrets out.
    """

    region: str = ""
    endpoint_url: str = ""
    profile: str = ""
    access_key_id: str = ""
    secret_access_key: str = field(default="", repr=False)
    session_token: str = field(default="", repr=False)
    anonymous: bool = False
    max_attempts: int = 0
    total_timeout_s: float = 0.0
    connect_timeout_s: float = 0.0
    low_speed_timeout_s: float = 0.0
    backoff_base_s: float = 0.0
    backoff_max_s: float = 0.0
    read_through_gap_bytes: int = -1
    min_request_bytes: int = 0
    cache_bytes: int = 0
    disk_cache_dir: str = ""
    disk_cache_bytes: int = 0

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.type in ("str", str) and not isinstance(value, str):
                raise InvalidArgumentError(f"S3Options.{f.name} must be a string, got {value!r}")
            if f.type in ("int", "float") and (
                isinstance(value, bool) or not isinstance(value, (int, float))
            ):
                raise InvalidArgumentError(f"S3Options.{f.name} must be a number, got {value!r}")
        if not isinstance(self.anonymous, bool):
            raise InvalidArgumentError(
                f"S3Options.anonymous must be a bool, got {self.anonymous!r}"
            )
        if self.endpoint_url and not self.endpoint_url.startswith(("http://", "https://")):
            raise InvalidArgumentError(
                f"S3Options.endpoint_url must start with http:// or https://, "
                f"got {self.endpoint_url!r}"
            )

    def native(self) -> Any:
        """The engine's ``RemoteOptions`` of these (the cache fields are process-wide, see
        :func:`register_remote_options`)."""
        return _core.RemoteOptions(**{name: getattr(self, name) for name in _NATIVE_FIELDS})

    def resolved(self) -> S3Options:
        """These options with every empty field of where-and-who filled from the environment
        and the shared AWS files, as the engine resolves them: what pyarrow is given."""
        try:
            filled = _core.resolve_remote_options(self.native())
        except _core.Error as e:
            raise DatasetError(str(e)) from None
        return dataclasses.replace(self, **{name: getattr(filled, name) for name in _NATIVE_FIELDS})


_NATIVE_FIELDS = tuple(
    f.name
    for f in dataclasses.fields(S3Options)
    if f.name not in ("cache_bytes", "disk_cache_dir", "disk_cache_bytes")
)

# fsspec / s3fs / boto3 spellings -> S3Options fields.
_ALIASES = {
    "key": "access_key_id",
    "aws_access_key_id": "access_key_id",
    "access_key": "access_key_id",
    "secret": "secret_access_key",
    "aws_secret_access_key": "secret_access_key",
    "secret_key": "secret_access_key",
    "token": "session_token",
    "aws_session_token": "session_token",
    "anon": "anonymous",
    "region_name": "region",
    "endpoint_override": "endpoint_url",
    "profile_name": "profile",
}
# Keys of s3fs's client_kwargs (boto3 client arguments) we take.
_CLIENT_KWARGS = {
    "endpoint_url": "endpoint_url",
    "region_name": "region",
    "aws_access_key_id": "access_key_id",
    "aws_secret_access_key": "secret_access_key",
    "aws_session_token": "session_token",
}


def as_s3_options(storage_options: Mapping[str, Any] | S3Options | None) -> S3Options:
    """:class:`S3Options` from ``storage_options``: None (the environment's), an S3Options, or
    a dict of its fields, also in fsspec / s3fs / boto3 spellings (``key``, ``secret``,
    ``token``, ``anon``, ``region_name``, ``endpoint_override``, ``profile_name``, and
    ``client_kwargs={"endpoint_url": ..., "region_name": ...}``).

    Raises:
        stoker.InvalidArgumentError: a key none of these spellings knows (named), one field given
            twice with different values, or a value of the wrong type.
    """
    if storage_options is None:
        return S3Options()
    if isinstance(storage_options, S3Options):
        return storage_options
    if not isinstance(storage_options, Mapping):
        raise InvalidArgumentError(
            "storage_options must be a dict or stoker.S3Options, "
            f"got {type(storage_options).__name__}"
        )
    fields = {f.name for f in dataclasses.fields(S3Options)}
    values: dict[str, Any] = {}
    given_as: dict[str, str] = {}
    unknown: list[str] = []

    def put(name: str, value: Any, spelling: str) -> None:
        if name in values and values[name] != value:
            raise InvalidArgumentError(
                f"storage_options gives {name} twice, as {given_as[name]!r} and {spelling!r}, "
                "with different values"
            )
        values[name], given_as[name] = value, spelling

    for key, value in storage_options.items():
        if key == "client_kwargs":
            if not isinstance(value, Mapping):
                raise InvalidArgumentError("storage_options['client_kwargs'] must be a dict")
            for inner, inner_value in value.items():
                if inner in _CLIENT_KWARGS:
                    put(_CLIENT_KWARGS[inner], inner_value, f"client_kwargs[{inner!r}]")
                else:
                    unknown.append(f"client_kwargs[{inner!r}]")
        elif key in fields:
            put(key, value, key)
        elif key in _ALIASES:
            put(_ALIASES[key], value, key)
        else:
            unknown.append(repr(key))
    if unknown:
        raise InvalidArgumentError(
            f"storage_options: unknown {', '.join(unknown)}; stoker takes the fields of "
            f"stoker.S3Options ({', '.join(sorted(fields))}) and the spellings "
            f"{', '.join(sorted(_ALIASES))}, client_kwargs={{{', '.join(sorted(_CLIENT_KWARGS))}}}"
        )
    for name in ("region", "endpoint_url", "profile"):
        if values.get(name) is None:
            values.pop(name, None)
    return S3Options(**values)


def is_url(path: Any) -> bool:
    """Whether ``path`` names a remote object: a string starting with s3://, http:// or
    https:// (the scheme in any case)."""
    return isinstance(path, str) and path[:8].lower().startswith(_SCHEMES)


def join(url_or_path: str, *parts: str) -> str:
    """``parts`` appended with "/" to a URL (its query string, if any, kept at the end), or
    with :func:`os.path.join` to a path."""
    if not is_url(url_or_path):
        return os.path.join(url_or_path, *parts)
    base, query = (url_or_path.split("?", 1) + [""])[:2]
    joined = posixpath.join(base.rstrip("/"), *(p.strip("/") for p in parts))
    return f"{joined}?{query}" if query else joined


def register_remote_options(prefix: str, options: S3Options) -> None:
    """Makes the engine open every URL starting with ``prefix`` with ``options`` (the videos a
    dataset's index names), and applies the process-wide range cache settings they carry."""
    _core.set_remote_options(prefix, options.native())
    if options.cache_bytes or options.disk_cache_dir:
        _core.configure_remote_cache(
            int(options.cache_bytes), options.disk_cache_dir, int(options.disk_cache_bytes)
        )


# ---------------------------------------------------------------------------------------------
# Roots: the folder of a dataset, wherever it is


Member = str  # a path relative to the root, or an absolute path / URL under it


class Root(abc.ABC):
    """A dataset's folder. Members are named by a path relative to it ("meta/info.json") or by
    their absolute path / URL (what :meth:`url` returns). ``what`` arguments name the member's
    role in messages ("meta file", "data file").

    Thread-safety: every method may be called from several threads.
    """

    #: The folder's absolute path, or its URL (no trailing "/").
    location: str
    #: Whether it is remote (a URL).
    remote: bool = False
    #: Whether :meth:`glob` works (plain HTTP cannot list).
    listable: bool = True
    #: The options remote reads use (S3Options() for a local root).
    options: S3Options = S3Options()

    @abc.abstractmethod
    def url(self, member: Member) -> str:
        """The absolute path or URL of a member: what indexes and messages name."""

    @abc.abstractmethod
    def exists(self, member: Member) -> bool:
        """Whether the member is there (a file, an object)."""

    @abc.abstractmethod
    def size(self, member: Member) -> int:
        """The member's size in bytes; -1 when it does not exist."""

    def sizes(self, members: Sequence[Member]) -> list[int]:
        """:meth:`size` of each member (-1 for one that does not exist), in order: for a
        remote root, from its listing, else by requests on a thread pool."""
        if not self.remote:
            return [self.size(member) for member in members]
        return _on_threads(self.size, list(members))

    @abc.abstractmethod
    def read_bytes(self, member: Member, what: str = "file") -> bytes:
        """The member's bytes; raises naming ``what`` and its URL when it cannot be read."""

    @abc.abstractmethod
    def glob(self, folder: Member, pattern: str = "*") -> list[str]:
        """The URLs (paths) of every file under ``folder``, at any depth, whose path relative to
        ``folder`` matches the glob ``pattern`` ("*" crosses "/"), sorted."""

    @abc.abstractmethod
    def versions(self, members: Sequence[Member]) -> list[tuple[int, str]]:
        """(size, version tag) of each member: the ETag for remote objects (an S3 root's
        listing, else the engine's HEAD requests on a thread pool), the mtime in ns for
        files. Raises naming the first that is missing."""

    @abc.abstractmethod
    def open_parquet(self, member: Member) -> Any:
        """What ``pyarrow.parquet`` reads: a path, or an open random-access file."""

    # Shared by every kind ----------------------------------------------------------------

    def read_json(self, member: Member, what: str = "meta file") -> dict[str, Any]:
        """The JSON object in a member; raises naming ``what`` and its URL when it is missing,
        unreadable, not JSON, or not an object."""
        url = self.url(member)
        try:
            value = json.loads(self.read_bytes(member, what).decode("utf-8"))
        except ValueError as e:
            raise DatasetError(f"cannot read {what} {url}: {e}") from None
        if not isinstance(value, dict):
            raise DatasetError(f"{what} {url} does not hold a JSON object")
        return value

    def read_jsonl_table(self, member: Member, what: str = "meta file") -> pa.Table:
        """A JSON-lines file as a table (empty file: an empty table)."""
        url = self.url(member)
        data = self.read_bytes(member, what)  # raises naming a missing member
        if not data:
            return pa.table({})
        try:
            return pa_json.read_json(io.BytesIO(data))
        except (OSError, pa.ArrowException) as e:
            raise DatasetError(f"cannot read {what} {url}: {e}") from None

    def read_parquet(
        self, member: Member, what: str = "file", columns: Sequence[str] | None = None
    ) -> pa.Table:
        url = self.url(member)
        if not self.exists(member):
            raise DatasetError(f"missing {what} {url}")
        with self._errors(url, what):
            return _read_parquet(self.open_parquet(member), columns, what, url)

    def read_schema(self, member: Member, what: str = "file") -> pa.Schema:
        url = self.url(member)
        with self._errors(url, what):
            return pq.read_schema(self.open_parquet(member))

    @contextmanager
    def _errors(self, url: str, what: str) -> Iterator[None]:
        try:
            yield
        except DatasetError:
            raise
        except (OSError, pa.ArrowException) as e:
            raise DatasetError(f"cannot read {what} {url}: {e}") from None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.location!r})"


def _read_parquet(where: Any, columns: Sequence[str] | None, what: str, url: str) -> pa.Table:
    """``pyarrow.parquet.read_table(where, columns=columns)`` of one file, read through
    ``ParquetFile``: the same table, without importing pyarrow's dataset module (and pandas with
    it), which made a process's first read take ~0.2 s and ~50 MB more. Raises naming the
    columns the file lacks (``what`` and ``url`` name the file), from the one read."""
    with pq.ParquetFile(where) as file:
        if columns is not None:
            missing = [name for name in columns if name not in file.schema_arrow.names]
            if missing:
                raise DatasetError(f"{what} {url} lacks the columns {missing}")
        return file.read(columns=columns)


class LocalRoot(Root):
    """A folder on the local file system, read as stoker always did (paths, os, pyarrow)."""

    def __init__(self, path: str):
        self.location = os.path.abspath(path)

    def url(self, member: Member) -> str:
        return os.path.join(self.location, member)

    def exists(self, member: Member) -> bool:
        return os.path.exists(self.url(member))

    def size(self, member: Member) -> int:
        path = self.url(member)
        try:
            return os.path.getsize(path) if os.path.isfile(path) else -1
        except OSError:
            return -1

    def read_bytes(self, member: Member, what: str = "file") -> bytes:
        path = self.url(member)
        try:
            with open(path, "rb") as f:
                return f.read()
        except FileNotFoundError:
            raise DatasetError(f"missing {what} {path}") from None
        except OSError as e:
            raise DatasetError(f"cannot read {what} {path}: {e}") from None

    def read_jsonl_table(self, member: Member, what: str = "meta file") -> pa.Table:
        path = self.url(member)  # pyarrow reads the file itself: as fast as before
        if not os.path.isfile(path):
            raise DatasetError(f"missing {what} {path}")
        if os.path.getsize(path) == 0:
            return pa.table({})
        try:
            return pa_json.read_json(path)
        except (OSError, pa.ArrowException) as e:
            raise DatasetError(f"cannot read {what} {path}: {e}") from None

    def read_parquet(
        self, member: Member, what: str = "file", columns: Sequence[str] | None = None
    ) -> pa.Table:
        path = self.url(member)
        if not os.path.isfile(path):
            raise DatasetError(f"missing {what} {path}")
        with self._errors(path, what):
            return _read_parquet(path, columns, what, path)

    def glob(self, folder: Member, pattern: str = "*") -> list[str]:
        return sorted(_glob.glob(os.path.join(self.url(folder), pattern)))

    def versions(self, members: Sequence[Member]) -> list[tuple[int, str]]:
        result = []
        for member in members:
            path = self.url(member)
            try:
                stat = os.stat(path)
            except OSError as e:
                raise DatasetError(f"cannot read {path}: {e.strerror}") from None
            result.append((stat.st_size, str(stat.st_mtime_ns)))
        return result

    def open_parquet(self, member: Member) -> Any:
        return self.url(member)


class S3Root(Root):
    """``s3://bucket/prefix``, read through ``pyarrow.fs.S3FileSystem``."""

    remote = True

    def __init__(self, url: str, options: S3Options):
        self.location = url.rstrip("/")
        self.options = options
        bucket_and_prefix = self.location[len("s3://") :]
        self.bucket = bucket_and_prefix.split("/", 1)[0]
        if not self.bucket:
            raise InvalidArgumentError(f"{url}: an S3 URL names a bucket, s3://bucket/prefix")
        self._fs = _s3_filesystem(options.resolved())
        # The objects under the root, url -> (size, ETag), listed on first use one top-level
        # folder at a time ("meta", "data", "videos"; "" for the whole root): what a warm open
        # asks of its meta files costs one request, whatever the number of videos. Listing
        # refused: objects are then asked one by one.
        self._listings: dict[str, dict[str, tuple[int, str]]] = {}
        self._listing_refused = False
        self._listing_lock = threading.Lock()

    def _listed(self, url: str) -> dict[str, tuple[int, str]] | None:
        """The listing that holds ``url`` when it lies under the root and listing is allowed,
        else None: its top-level folder's (one request per 1,000 objects, the first time), or
        for the root itself or an object at its top, the whole root's."""
        inside = self.location + "/"
        if not url.startswith(inside):
            return None
        relative = url[len(inside) :]
        folder = relative.split("/", 1)[0] if "/" in relative else ""
        with self._listing_lock:
            if self._listing_refused:
                return None
            whole = self._listings.get("")
            if whole is not None:
                return whole
            if folder not in self._listings:
                register_remote_options(inside, self.options)
                try:
                    # The engine opens these objects (the videos) with what the listing says,
                    # without a HEAD each.
                    objects = _core.list_objects(
                        inside + (folder + "/" if folder else ""), remember=True
                    )
                except _core.AccessDeniedError:
                    self._listing_refused = True  # allowed to get, not to list
                    return None
                except _core.Error as e:
                    raise DatasetError(str(e)) from None
                self._listings[folder] = {u: (int(size), str(tag)) for u, size, tag in objects}
            return self._listings[folder]

    def url(self, member: Member) -> str:
        if is_url(member):
            return member
        return f"{self.location}/{member}"

    def _key(self, member: Member) -> str:
        """The file system's path of a member: bucket/key."""
        return self.url(member)[len("s3://") :]

    def _info(self, members: Sequence[Member]) -> list[Any]:
        from pyarrow import fs

        urls = [self.url(m) for m in members]
        with self._errors(urls[0] if urls else self.location, "object"):
            infos = self._retrying(lambda: self._fs.get_file_info([self._key(m) for m in members]))
        if any(info.type == fs.FileType.NotFound for info in infos):
            self._check_bucket()
        return infos

    def _check_bucket(self) -> None:
        from pyarrow import fs

        with self._errors(f"s3://{self.bucket}", "bucket"):
            info = self._retrying(lambda: self._fs.get_file_info(self.bucket))
        if info.type == fs.FileType.NotFound:
            raise DatasetError(
                f"{self.location}: the bucket {self.bucket!r} does not exist "
                f"(at {self.options.resolved().endpoint_url or 'AWS'})"
            )

    def exists(self, member: Member) -> bool:
        from pyarrow import fs

        listing = self._listed(self.url(member))
        if listing is not None:
            return self.url(member) in listing
        return self._info([member])[0].type == fs.FileType.File

    def size(self, member: Member) -> int:
        from pyarrow import fs

        listing = self._listed(self.url(member))
        if listing is not None:
            return listing.get(self.url(member), (-1, ""))[0]
        info = self._info([member])[0]
        return info.size if info.type == fs.FileType.File else -1

    def sizes(self, members: Sequence[Member]) -> list[int]:
        """From the listings of their folders (those outside the root, or all of them when
        listing is refused, by a request each)."""
        urls = [self.url(m) for m in members]
        result: list[int | None] = []
        for url in urls:
            listing = self._listed(url)
            result.append(None if listing is None else listing.get(url, (-1, ""))[0])
        outside = [url for url, size in zip(urls, result) if size is None]
        asked = dict(zip(outside, _on_threads(self.size, outside)))
        return [asked[url] if size is None else size for url, size in zip(urls, result)]

    def read_bytes(self, member: Member, what: str = "file") -> bytes:
        url = self.url(member)

        def read() -> bytes:
            with self._fs.open_input_stream(self._key(member)) as f:
                return f.read()

        with self._errors(url, what):
            return self._retrying(read)

    def _retrying(self, call: Callable[[], Any]) -> Any:
        """``call()``, tried again as the engine's requests are (backoff with full jitter) when
        it fails on something other than a missing object or refused credentials: pyarrow
        retries failed requests, but not a body cut short or reset once it started."""
        attempts = int(self.options.max_attempts) or 8
        base = self.options.backoff_base_s or 0.05
        ceiling = self.options.backoff_max_s or 5.0
        for attempt in range(attempts):
            try:
                return call()
            except FileNotFoundError:
                raise
            except (OSError, pa.ArrowException) as e:
                text = str(e)
                final = (
                    attempt + 1 == attempts
                    or "NoSuchBucket" in text
                    or (_explain_s3_error("", "", text).find("refused the credentials") >= 0)
                )
                if final:
                    raise
                time.sleep(random.uniform(0, min(ceiling, base * 2**attempt)))
        raise AssertionError("unreachable")

    def glob(self, folder: Member, pattern: str = "*") -> list[str]:
        from pyarrow import fs

        base = self.url(folder).rstrip("/")
        listing = self._listed(base + "/")
        if listing is not None:
            return sorted(
                url
                for url in listing
                if url.startswith(base + "/")
                and not url.endswith("/")  # a "folder" marker
                and fnmatch.fnmatchcase(url[len(base) + 1 :], pattern)
            )
        with self._errors(base + "/", "folder"):
            selector = fs.FileSelector(base[len("s3://") :], recursive=True, allow_not_found=True)
            infos = self._retrying(lambda: self._fs.get_file_info(selector))
        prefix = base[len("s3://") :] + "/"
        return sorted(
            f"s3://{info.path}"
            for info in infos
            if info.type == fs.FileType.File
            and fnmatch.fnmatchcase(info.path[len(prefix) :], pattern)
        )

    def versions(self, members: Sequence[Member]) -> list[tuple[int, str]]:
        """(size, ETag) of each member: from the root's listing, and by a HEAD each for those
        it does not hold (outside the root, or missing: then the error names it)."""
        register_remote_options(self.location + "/", self.options)
        urls = [self.url(m) for m in members]
        found: dict[str, tuple[int, str]] = {}
        for url in urls:
            listing = self._listed(url)
            if listing is not None and url in listing:
                found[url] = listing[url]
        asked = [url for url in dict.fromkeys(urls) if url not in found]
        found.update(zip(asked, _stat_all(asked)))
        return [found[url] for url in urls]

    def open_parquet(self, member: Member) -> Any:
        # Read whole, so that a transfer cut short is retried here, not met mid-table.
        return pa.BufferReader(self.read_bytes(member, "file"))

    def read_schema(self, member: Member, what: str = "file") -> pa.Schema:
        """From the file's footer, by ranged reads (a v3.0 data file runs to hundreds of MB;
        every open asks the first one's schema)."""

        def read() -> pa.Schema:
            with self._fs.open_input_file(self._key(member)) as f:
                return pq.read_schema(f)

        with self._errors(self.url(member), what):
            return self._retrying(read)

    @contextmanager
    def _errors(self, url: str, what: str) -> Iterator[None]:
        try:
            yield
        except DatasetError:
            raise
        except FileNotFoundError:
            self._check_bucket()
            raise DatasetError(f"missing {what} {url}") from None
        except (OSError, pa.ArrowException) as e:
            raise DatasetError(_explain_s3_error(url, what, str(e))) from None


def _explain_s3_error(url: str, what: str, text: str) -> str:
    if "NO_SUCH_BUCKET" in text or "NoSuchBucket" in text:
        return f"{url}: the bucket does not exist ({text})"
    refused = (
        "ACCESS_DENIED",
        "AccessDenied",
        "SignatureDoesNotMatch",
        "InvalidAccessKeyId",
        "INVALID_ACCESS_KEY_ID",
        "SIGNATURE_DOES_NOT_MATCH",
        "ExpiredToken",
        "HTTP status 403",
    )
    if any(word in text for word in refused):
        return (
            f"cannot read {what} {url}: the store refused the credentials (access denied); "
            "check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_PROFILE or storage_options "
            f"({text})"
        )
    return f"cannot read {what} {url}: {text}"


def _stat_all(urls: Sequence[str]) -> list[tuple[int, str]]:
    """(size, ETag) of every URL by the engine's HEAD requests, on a thread pool."""

    def stat(url: str) -> tuple[int, str]:
        try:
            size, tag, _ = _core.stat_source(url)
        except _core.Error as e:
            raise DatasetError(str(e)) from None
        return int(size), str(tag)

    return _on_threads(stat, list(urls))


# Requests in flight at once for a remote root's per-object questions: they wait on the
# store's latency, not on the cores.
_REQUESTS_AT_ONCE = 32


def _on_threads(function: Callable[[Any], Any], items: list) -> list:
    """function(item) for every item, in order, on up to _REQUESTS_AT_ONCE threads; the first
    exception is raised."""
    if len(items) < 2:
        return [function(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(_REQUESTS_AT_ONCE, len(items))) as pool:
        return list(pool.map(function, items))


@functools.lru_cache(maxsize=16)
def _s3_filesystem(options: S3Options) -> Any:
    """pyarrow's S3 file system for resolved options (one per distinct options)."""
    from pyarrow import fs

    kwargs: dict[str, Any] = {"region": options.region or "us-east-1"}
    if options.anonymous:
        kwargs["anonymous"] = True
    elif options.access_key_id:
        kwargs.update(access_key=options.access_key_id, secret_key=options.secret_access_key)
        if options.session_token:
            kwargs["session_token"] = options.session_token
    if options.endpoint_url:
        parsed = urllib.parse.urlsplit(options.endpoint_url)
        kwargs.update(scheme=parsed.scheme, endpoint_override=parsed.netloc + parsed.path)
    if options.connect_timeout_s:
        kwargs["connect_timeout"] = float(options.connect_timeout_s)
    if options.total_timeout_s:
        kwargs["request_timeout"] = float(options.total_timeout_s)
    kwargs["retry_strategy"] = fs.AwsStandardS3RetryStrategy(
        max_attempts=int(options.max_attempts) or 8
    )
    return fs.S3FileSystem(**kwargs)


class HttpRoot(Root):
    """``https://host/path`` (or http), read with urllib: metadata only, and no listing."""

    remote = True
    listable = False

    def __init__(self, url: str, options: S3Options):
        self.location = url.rstrip("/")
        self.options = options
        self._timeout = options.total_timeout_s or 60

    def url(self, member: Member) -> str:
        if is_url(member):
            return member
        return f"{self.location}/{urllib.parse.quote(member)}"

    def _request(self, member: Member, method: str, what: str) -> Any:
        url = self.url(member)
        try:
            return urllib.request.urlopen(
                urllib.request.Request(url, method=method), timeout=self._timeout
            )
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            if e.code in (401, 403):
                raise DatasetError(
                    f"cannot read {what} {url}: the server refused access (HTTP {e.code}; an "
                    "expired or wrong presigned URL?)"
                ) from None
            raise DatasetError(f"cannot read {what} {url}: HTTP {e.code} {e.reason}") from None
        except OSError as e:
            raise DatasetError(f"cannot read {what} {url}: {e}") from None

    def _head(self, member: Member) -> tuple[int, str] | None:
        response = self._request(member, "HEAD", "file")
        if response is None:
            return None
        with response:
            tag = response.headers.get("ETag") or response.headers.get("Last-Modified") or ""
            return int(response.headers.get("Content-Length") or -1), tag

    def exists(self, member: Member) -> bool:
        return self._head(member) is not None

    def size(self, member: Member) -> int:
        head = self._head(member)
        return -1 if head is None else head[0]

    def read_bytes(self, member: Member, what: str = "file") -> bytes:
        response = self._request(member, "GET", what)
        if response is None:
            raise DatasetError(f"missing {what} {self.url(member)}")
        with response:
            try:
                return response.read()
            except OSError as e:
                raise DatasetError(f"cannot read {what} {self.url(member)}: {e}") from None

    def glob(self, folder: Member, pattern: str = "*") -> list[str]:
        raise DatasetError(
            f"cannot list {self.url(folder)}: plain HTTP(S) has no listing, so a dataset "
            "served over https must be enumerable from its metadata"
        )

    def versions(self, members: Sequence[Member]) -> list[tuple[int, str]]:
        return _stat_all([self.url(m) for m in members])

    def open_parquet(self, member: Member) -> Any:
        return pa.BufferReader(self.read_bytes(member, "file"))


def open_dataset_root(
    root: str | os.PathLike | Root, storage_options: Mapping[str, Any] | S3Options | None = None
) -> Root:
    """The :class:`Root` of a dataset folder: a local path, ``s3://bucket/prefix`` or
    ``http(s)://host/path``. A remote root registers its options with the engine for every
    URL under it (the videos its index names). ``storage_options`` is refused for a local
    folder."""
    if isinstance(root, Root):
        return root
    root = checked_path(root, "dataset folder")
    if not is_url(root):
        if storage_options is not None and as_s3_options(storage_options) != S3Options():
            raise InvalidArgumentError(
                f"storage_options are for remote datasets (s3://, https://), not the folder {root}"
            )
        return LocalRoot(root)
    options = as_s3_options(storage_options)
    scheme = root.split("://", 1)[0].lower()
    url = scheme + root[len(scheme) :]
    result: Root = S3Root(url, options) if scheme == "s3" else HttpRoot(url, options)
    if options != S3Options():  # else the engine reads the environment as we do
        register_remote_options(result.location + "/", options)
    return result


RootLike = Union[str, os.PathLike, Root]


# ---------------------------------------------------------------------------------------------
# Command line: the AWS CLI's flags, for commands that take a dataset URL


def add_storage_arguments(parser: Any) -> None:
    """Adds ``--endpoint-url``, ``--profile``, ``--region`` and ``--no-sign-request`` (as the
    AWS CLI spells them) to an argparse parser; without them the environment decides."""
    group = parser.add_argument_group("object storage (s3:// datasets; default: as the AWS CLI)")
    group.add_argument("--endpoint-url", default="", help="e.g. http://127.0.0.1:9000")
    group.add_argument("--profile", default="", help="a profile of ~/.aws/credentials")
    group.add_argument("--region", default="", help="the bucket's region")
    group.add_argument(
        "--no-sign-request", action="store_true", help="anonymous requests (public buckets)"
    )


def storage_options_from_args(args: Any) -> S3Options | None:
    """The :class:`S3Options` the flags of :func:`add_storage_arguments` give, or None."""
    options = S3Options(
        endpoint_url=args.endpoint_url,
        profile=args.profile,
        region=args.region,
        anonymous=args.no_sign_request,
    )
    return None if options == S3Options() else options
