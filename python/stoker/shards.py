"""Sharded multimodal datasets: samples (images, clips, text, labels, arrays, json) kept in tar
shards in WebDataset's layout, read by ranged reads through a shard index.

    spec = stoker.ShardSpec(
        image=stoker.Image("jpg;png"),          # decoded in C++ into the batch
        caption=stoker.Text("txt"),             # a list of strings
        label=stoker.Label("cls"),              # int64
        tokens=stoker.Tokens("npy"),            # padded array + tokens_length
        action=stoker.Array("action.npy"),      # stacked [B, *shape]
        clip=stoker.Clip("mp4", frames=(0, 2, 4, 6), size=(112, 112)),
        meta=stoker.Json("json", keys={"width": "int64", "url": "str"}),
    )
    ds = stoker.ShardDataset("s3://bucket/train-{000000..000511}.tar", spec)
    loader = stoker.Loader(ds, batch_size=256, shuffle=True, seed=0)

Layout: a shard's members are grouped into samples by key, the member's path up to the first
dot of its file name (``dir/x.seg.png`` is field ``seg.png`` of sample ``dir/x``); consecutive
members with one key make one sample, as WebDataset groups them.

The index of a shard (each sample's key and each field's byte offset and size) comes from a
sidecar ``<shard>.index`` when the writer left one (``stoker shard``), else from one
sequential pass over the shard's tar headers (8 MiB ranged reads, data skipped for local
files). Either way it is cached in ``<cache_dir>/shards/`` under a key made of the shard's
URL, size, version (ETag or mtime) and the index format's version, as the episode index is.
With it, a sample is a few byte ranges of one shard: a batch reads each shard it touches with
one call (pread for local files; for remote ones, all its ranges prefetched together through
the engine's range cache).
"""

from __future__ import annotations

import contextlib
import glob as _glob
import hashlib
import io
import json
import os
import re
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from stoker import _core
from stoker._core import DatasetError, InvalidArgumentError
from stoker._files import checked_path, write_json
from stoker.dataset_index import default_cache_dir
from stoker.storage import S3Options, as_s3_options, is_url, open_dataset_root

__all__ = [
    "Array",
    "Clip",
    "Image",
    "Json",
    "Label",
    "ShardDataset",
    "ShardSpec",
    "Text",
    "Tokens",
    "expand_urls",
    "member_field",
]

INDEX_VERSION = 1
INDEX_SUFFIX = ".index"
IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "webp")
CLIP_EXTENSIONS = ("mp4", "webm", "mkv")
_JSON_TYPES = ("int64", "float64", "float32", "bool", "str")
_SCAN_CHUNK = 8 << 20
# cls members up to this size are kept in the index: the doctor reads labels from it.
_MAX_LABEL_BYTES = 32


# ---------------------------------------------------------------------------------------------
# The spec: which fields to decode, and how


def _fields(value: str, allowed: Sequence[str] | None, what: str) -> tuple[str, ...]:
    names = tuple(v.strip().lower() for v in str(value).split(";") if v.strip())
    if not names:
        raise ValueError(f"{what} needs a field name (an extension such as 'jpg'), got {value!r}")
    if allowed is not None:
        for name in names:
            if name.rsplit(".", 1)[-1] not in allowed:
                raise ValueError(f"{what} reads fields ending in {allowed}, not {name!r}")
    return names


@dataclass(frozen=True)
class Image:
    """An image field (``"jpg"``, or alternatives ``"jpg;png"``: the first a sample has),
    decoded in C++ into its slot of the batch with the loader's transforms.

    Args:
        fields: the field name(s), ``;``-separated.
        size: ``(height, width)`` to resize to when the loader's transforms give no size.
    """

    fields: str = "jpg;jpeg;png;webp"
    size: tuple[int, int] | None = None

    def __post_init__(self):
        object.__setattr__(self, "fields", _fields(self.fields, IMAGE_EXTENSIONS, "Image"))
        if self.size is not None:
            size = tuple(int(v) for v in self.size)
            if len(size) != 2 or min(size) <= 0:
                raise ValueError(f"Image size must be (height, width), got {self.size!r}")
            object.__setattr__(self, "size", size)


@dataclass(frozen=True)
class Clip:
    """A video field decoded with :class:`stoker.VideoReader` from the member's bytes.

    Args:
        fields: the field name(s), ``;``-separated (``"mp4"``, ``"webm"``, ``"mkv"``).
        frames: the window: frame indices from the clip's start, e.g. ``range(0, 16, 2)``.
        size: ``(height, width)`` of the output frames. The batch holds
            ``[B, T, 3, H, W]`` (``TCHW``) or ``[B, T, H, W, 3]`` uint8.
        layout: ``"TCHW"`` or ``"THWC"``.
    """

    fields: str = "mp4"
    frames: Sequence[int] = (0,)
    size: tuple[int, int] = (224, 224)
    layout: str = "TCHW"

    def __post_init__(self):
        object.__setattr__(self, "fields", _fields(self.fields, CLIP_EXTENSIONS, "Clip"))
        frames = tuple(int(f) for f in self.frames)
        if not frames or min(frames) < 0:
            raise ValueError(f"Clip frames must be non-negative indices, got {self.frames!r}")
        object.__setattr__(self, "frames", frames)
        object.__setattr__(self, "size", tuple(int(v) for v in self.size))
        if self.layout not in ("TCHW", "THWC"):
            raise ValueError(f"Clip layout must be 'TCHW' or 'THWC', got {self.layout!r}")


@dataclass(frozen=True)
class Text:
    """A UTF-8 text field (``"txt"``): the batch holds a list of strings."""

    fields: str = "txt"

    def __post_init__(self):
        object.__setattr__(self, "fields", _fields(self.fields, None, "Text"))


@dataclass(frozen=True)
class Label:
    """An integer label (``"cls"``, the number as text): the batch holds int64 ``[B]``."""

    fields: str = "cls"

    def __post_init__(self):
        object.__setattr__(self, "fields", _fields(self.fields, None, "Label"))


@dataclass(frozen=True)
class Tokens:
    """A 1-D ``.npy`` array (token ids): the batch holds ``[B, L]`` padded with ``pad`` to the
    batch's longest, and ``<name>_length`` int64 ``[B]``. ``max_length`` truncates."""

    fields: str = "npy"
    pad: int = 0
    max_length: int | None = None

    def __post_init__(self):
        object.__setattr__(self, "fields", _fields(self.fields, None, "Tokens"))
        if self.max_length is not None and int(self.max_length) < 1:
            raise ValueError(f"max_length must be positive, got {self.max_length!r}")


@dataclass(frozen=True)
class Array:
    """A ``.npy`` array of the same shape in every sample (a clip's actions ``[T, D]``, an
    embedding): the batch holds them stacked, ``[B, *shape]``, in their dtype. A sample whose
    array has another shape or dtype than the batch's first is a bad member (``on_error``)."""

    fields: str = "npy"

    def __post_init__(self):
        object.__setattr__(self, "fields", _fields(self.fields, None, "Array"))


@dataclass(frozen=True)
class Json:
    """A json field whose ``keys`` become typed columns of the batch, one per key, named after
    the key: ``{"width": "int64", "score": "float32", "url": "str"}`` (types: int64, float64,
    float32, bool, str; str columns are lists of strings)."""

    fields: str = "json"
    keys: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self):
        object.__setattr__(self, "fields", _fields(self.fields, None, "Json"))
        keys = dict(self.keys)
        for key, kind in keys.items():
            if kind not in _JSON_TYPES:
                raise ValueError(
                    f"Json key {key!r}: type must be one of {_JSON_TYPES}, got {kind!r}"
                )
        object.__setattr__(self, "keys", keys)


Decoder = Image | Clip | Text | Label | Tokens | Array | Json


class ShardSpec(dict):
    """What a :class:`ShardDataset` gives per sample: output name -> decoder
    (:class:`Image`, :class:`Clip`, :class:`Text`, :class:`Label`, :class:`Tokens`,
    :class:`Array`, :class:`Json`). A plain dict of the same is accepted wherever a spec is."""

    def __init__(self, fields: Mapping[str, Decoder] | None = None, **named: Decoder):
        super().__init__({**(fields or {}), **named})
        if not self:
            raise ValueError("a ShardSpec needs at least one field")
        for name, decoder in self.items():
            if not isinstance(decoder, (Image, Clip, Text, Label, Tokens, Array, Json)):
                raise TypeError(
                    f"spec field {name!r}: expected stoker.Image, Clip, Text, Label, Tokens, "
                    f"Array or Json, got {type(decoder).__name__}"
                )
        names = set(self)
        for name, decoder in self.items():
            if isinstance(decoder, Json):
                for key in decoder.keys:
                    if key in names:
                        raise ValueError(f"json key {key!r} of {name!r} collides with a field")
                    names.add(key)


# ---------------------------------------------------------------------------------------------
# Shard URLs


def _expand_braces(pattern: str) -> list[str]:
    match = re.search(r"\{(\d+)\.\.(\d+)\}", pattern)
    if match is None:
        match_list = re.search(r"\{([^{}]*,[^{}]*)\}", pattern)
        if match_list is None:
            return [pattern]
        head, tail = pattern[: match_list.start()], pattern[match_list.end() :]
        return [
            u for part in match_list.group(1).split(",") for u in _expand_braces(head + part + tail)
        ]
    first, last = match.group(1), match.group(2)
    width = len(first) if first.startswith("0") or len(first) == len(last) else 0
    lo, hi = int(first), int(last)
    if hi < lo:
        raise ValueError(f"the range {match.group(0)} in {pattern!r} is empty")
    head, tail = pattern[: match.start()], pattern[match.end() :]
    return [u for i in range(lo, hi + 1) for u in _expand_braces(f"{head}{i:0{width}d}{tail}")]


def expand_urls(
    urls_or_pattern: str | os.PathLike | Sequence[str | os.PathLike],
    storage_options: Mapping[str, Any] | S3Options | None = None,
) -> list[str]:
    """The shard URLs of a brace pattern (``train-{000000..000511}.tar``, ``{a,b}``), a glob
    (``*``, ``?``, ``[...]``, local or s3://), or a list of those."""
    if isinstance(urls_or_pattern, (str, os.PathLike)):
        items = [os.fspath(urls_or_pattern)]
    else:
        items = [os.fspath(u) for u in urls_or_pattern]
    out: list[str] = []
    for item in items:
        for url in _expand_braces(item):
            if not any(c in url for c in "*?["):
                out.append(url)
                continue
            if is_url(url):
                if not url.lower().startswith("s3://"):
                    raise InvalidArgumentError(
                        f"{url}: HTTP(S) cannot list; give the shards' names"
                    )
                folder, pattern = url.rsplit("/", 1)
                found = open_dataset_root(folder, storage_options).glob("", pattern)
            else:
                found = sorted(_glob.glob(url))
            if not found:
                raise DatasetError(f"no shard matches {url!r}")
            out.extend(found)
    if not out:
        raise InvalidArgumentError("no shards given")
    return out


def member_field(name: str) -> tuple[str, str]:
    """(key, field) of a tar member: ``dir/x.seg.png`` -> (``dir/x``, ``seg.png``)."""
    folder, _, base = name.rpartition("/")
    stem, dot, ext = base.partition(".")
    key = f"{folder}/{stem}" if folder else stem
    return key, ext.lower() if dot else ""


# ---------------------------------------------------------------------------------------------
# The shard index


class _RangeFile(io.RawIOBase):
    """A seekable, read-only file over a shard, read in large ranges through the engine's byte
    sources (local pread, or remote ranged GETs): tar's header reads cost no request each."""

    def __init__(self, url: str, size: int):
        self._url, self._size, self._pos = url, size, 0
        self._chunk_start, self._chunk = 0, b""

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        want = min(len(view), self._size - self._pos)
        if want <= 0:
            return 0
        end = self._chunk_start + len(self._chunk)
        if not (self._chunk_start <= self._pos and self._pos + want <= end):
            length = min(max(want, _SCAN_CHUNK), self._size - self._pos)
            self._chunk = _core.read_ranges(
                self._url, np.array([self._pos], np.int64), np.array([length], np.int64)
            ).tobytes()
            self._chunk_start = self._pos
        at = self._pos - self._chunk_start
        view[:want] = self._chunk[at : at + want]
        self._pos += want
        return want


def _scan_shard(url: str, size: int) -> dict[str, Any]:
    """One pass over a shard's tar headers: its members (name, data offset, size) in order,
    and the values of its small cls members."""
    members: list[list[Any]] = []
    labels: dict[str, int] = {}
    try:
        with tarfile.open(fileobj=io.BufferedReader(_RangeFile(url, size)), mode="r:") as tar:
            for info in tar:
                if not info.isfile():
                    continue
                members.append([info.name, info.offset_data, info.size])
                key, ext = member_field(info.name)
                if ext == "cls" and info.size <= _MAX_LABEL_BYTES:
                    handle = tar.extractfile(info)
                    text = handle.read() if handle is not None else b""
                    # A label that is not an integer is reported when its sample is read, by
                    # shard, key and field; the index leaves it out.
                    with contextlib.suppress(ValueError):
                        labels[key] = int(text.decode().strip())
    except tarfile.TarError as error:
        raise DatasetError(f"{url}: not a readable tar shard: {error}") from None
    return {"members": members, "labels": labels}


def _cache_path(url: str, size: int, version: str, cache_dir: str) -> str:
    digest = hashlib.sha1(f"{url}\0{size}\0{version}\0{INDEX_VERSION}".encode()).hexdigest()
    name = re.sub(r"[^A-Za-z0-9._-]", "_", url.rstrip("/").rsplit("/", 1)[-1])[:64]
    return os.path.join(cache_dir, "shards", f"{name}-{digest[:20]}.json")


def _valid_index(index: Any, size: int) -> bool:
    return (
        isinstance(index, dict)
        and index.get("format") == "stoker-shard-index"
        and index.get("version") == INDEX_VERSION
        and index.get("shard_bytes") == size
        and isinstance(index.get("members"), list)
    )


def shard_index(url: str, cache_dir: str | None = None) -> dict[str, Any]:
    """The index of one shard: ``{"members": [[name, offset, size], ...], "labels": {key: int},
    "shard_bytes": size}``, from the cache, the sidecar ``<shard>.index`` or a scan."""
    size, tag, mtime = _core.stat_source(url)
    version = tag or str(mtime)
    path = _cache_path(url, size, version, cache_dir or default_cache_dir())
    try:
        with open(path) as f:
            cached = json.load(f)
        if _valid_index(cached, size):
            return cached
    except (OSError, ValueError):
        pass
    index = None
    sidecar = url + INDEX_SUFFIX
    try:
        sidecar_size = _core.stat_source(sidecar)[0]
    except _core.Error:
        sidecar_size = -1
    if sidecar_size > 0:
        raw = _core.read_ranges(
            sidecar, np.array([0], np.int64), np.array([sidecar_size], np.int64)
        ).tobytes()
        try:
            index = json.loads(raw)
        except ValueError:
            index = None
        if not _valid_index(index, size):
            index = None  # stale or foreign: scan instead
    if index is None:
        index = {
            "format": "stoker-shard-index",
            "version": INDEX_VERSION,
            "shard_bytes": size,
            **_scan_shard(url, size),
        }
    # A cache that cannot be written only costs the next process a scan.
    with contextlib.suppress(OSError):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_json(path, index)
    return index


# ---------------------------------------------------------------------------------------------
# The dataset


class ShardDataset:
    """Samples of tar shards in WebDataset's layout, for :class:`stoker.Loader`.

    Args:
        urls_or_pattern: a brace pattern (``"train-{000000..000511}.tar"``), a glob, a list of
            paths / URLs, local or ``s3://`` / ``https://``.
        spec: a :class:`ShardSpec` (or a dict of output name -> decoder).
        storage_options: for remote shards: :class:`stoker.S3Options` or a dict of its fields.
        cache_dir: where shard indexes are cached; default ``$STOKER_CACHE_DIR`` or
            ``~/.cache/stoker``.

    Attributes (numpy arrays over samples, in shard then tar order): ``sample_shard``,
    ``labels`` (the cls value, -1 where a sample has none), and :meth:`field_ranges`.
    """

    def __init__(
        self,
        urls_or_pattern: str | os.PathLike | Sequence[str | os.PathLike],
        spec: Mapping[str, Decoder],
        storage_options: Mapping[str, Any] | S3Options | None = None,
        *,
        cache_dir: str | os.PathLike | None = None,
    ):
        self.spec = spec if isinstance(spec, ShardSpec) else ShardSpec(dict(spec))
        self.storage_options = as_s3_options(storage_options)
        self.urls = expand_urls(urls_or_pattern, storage_options)
        folders = set()  # the options registered once per folder of shards
        for url in self.urls:
            if is_url(url) and self.storage_options != S3Options():
                folders.add(url.rsplit("/", 1)[0])
            elif not is_url(url):
                checked_path(url, "shard")
        for folder in sorted(folders):
            open_dataset_root(folder, self.storage_options)
        cache = checked_path(cache_dir, "cache_dir") if cache_dir is not None else None
        indexes = [shard_index(url, cache) for url in self.urls]
        self.shard_bytes = np.array([ix["shard_bytes"] for ix in indexes], np.int64)
        self._build(indexes)

    def _build(self, indexes: list[dict[str, Any]]) -> None:
        keys: list[str] = []
        shard_of: list[int] = []
        members: dict[str, dict[int, tuple[int, int]]] = {}
        labels: list[int] = []
        for s, index in enumerate(indexes):
            current = None
            shard_labels = index.get("labels", {})
            for name, offset, size in index["members"]:
                key, ext = member_field(name)
                if key != current:
                    current = key
                    keys.append(key)
                    shard_of.append(s)
                    label = int(shard_labels.get(key, -1))
                    # A label no int64 holds (an index made before this was checked) is a bad
                    # member, reported when its sample is read: the index has none for it.
                    labels.append(label if -(2**63) <= label < 2**63 else -1)
                sample = len(keys) - 1
                slots = members.setdefault(ext, {})
                if sample in slots:
                    raise DatasetError(f"{self.urls[s]}: sample {key!r} has two {ext!r} members")
                slots[sample] = (int(offset), int(size))
        n = len(keys)
        if n == 0:
            raise DatasetError(f"the shards {self.urls[:3]}... hold no sample")
        self.keys = keys
        self.sample_shard = np.array(shard_of, np.int64)
        self.labels = np.array(labels, np.int64)
        self.shard_first = np.searchsorted(self.sample_shard, np.arange(len(self.urls)))
        self.shard_samples = np.bincount(self.sample_shard, minlength=len(self.urls))
        self._offsets: dict[str, np.ndarray] = {}
        self._sizes: dict[str, np.ndarray] = {}
        for ext, slots in members.items():
            offsets = np.full(n, -1, np.int64)
            sizes = np.full(n, -1, np.int64)
            ids = np.fromiter(slots.keys(), np.int64, len(slots))
            values = np.array(list(slots.values()), np.int64).reshape(-1, 2)
            offsets[ids], sizes[ids] = values[:, 0], values[:, 1]
            self._offsets[ext], self._sizes[ext] = offsets, sizes
        self.fields = sorted(members)

    def __len__(self) -> int:
        return len(self.keys)

    def field_ranges(self, field_name: str) -> tuple[np.ndarray, np.ndarray]:
        """(offsets, sizes) of field ``field_name`` for every sample; -1 where it is missing."""
        if field_name not in self._offsets:
            missing = np.full(len(self), -1, np.int64)
            return missing, missing
        return self._offsets[field_name], self._sizes[field_name]

    def resolve(
        self, decoder: Decoder, ids: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, list[str]]:
        """For samples ``ids``: the byte offset and size of the first of ``decoder``'s fields
        each has (-1 when none), and which field that is ("" when none)."""
        offsets = np.full(len(ids), -1, np.int64)
        sizes = np.full(len(ids), -1, np.int64)
        names = [""] * len(ids)
        for name in decoder.fields:
            o, s = self.field_ranges(name)
            found = (offsets < 0) & (o[ids] >= 0)
            offsets[found], sizes[found] = o[ids][found], s[ids][found]
            for i in np.flatnonzero(found):
                names[i] = name
        return offsets, sizes, names

    def shard_of(self, sample: int) -> str:
        return self.urls[int(self.sample_shard[sample])]

    def __repr__(self) -> str:
        return (
            f"ShardDataset({len(self.urls)} shards, {len(self)} samples, "
            f"fields {self.fields}, {self.urls[0]!r}...)"
        )
