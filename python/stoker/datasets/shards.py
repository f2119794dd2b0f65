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

The index of a shard (each member's name, data offset and size, and the checksum of its tar
header; stoker/shard_index.h) is native: it comes from a sidecar ``<shard>.index`` when the
writer left one (``stoker shard``) and it matches the shard's headers, else from one
sequential pass over the shard's tar headers (8 MiB ranged reads for remote shards, data
skipped), shards opened 16 at a time. Either way it is cached in ``<cache_dir>/shards/`` under
a key made of the shard's URL, size, version (ETag or mtime) and the index format's version,
checksummed, as the episode index is. With it, a sample is a few byte ranges of one shard: a
batch reads each shard it touches with one call, and every member's tar header is read with
its data and checked against the index, so a shard replaced, rewritten or resized since its
index was made, or a sidecar of another shard, is an error, never another sample's bytes.

A damaged shard (truncated, or a corrupt header) keeps the samples before the damage; the
Loader refuses it under ``on_error="raise"`` and reads what is left under ``"skip"``, naming
it in ``stats()``.
"""

from __future__ import annotations

import collections
import functools
import glob as _glob
import os
import re
import threading
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from stoker import _core
from stoker._core import DatasetError, InvalidArgumentError
from stoker.arguments import check_frame_size
from stoker.datasets.lerobot.index import default_cache_dir
from stoker.io.files import checked_path
from stoker.io.storage import S3Options, as_s3_options, is_url, open_dataset_root
from stoker.transforms import Transforms

__all__ = [
    "DEFAULT_SHUFFLE_BUFFER",
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

# The version of a folder's index.json (the list of shards `stoker shard` wrote).
INDEX_VERSION = 1
INDEX_SUFFIX = ".index"
# The folder index `stoker shard` writes next to its shards: the shards that are the dataset.
FOLDER_INDEX = "index.json"
FOLDER_FORMAT = "stoker-shards"
IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "webp")
CLIP_EXTENSIONS = ("mp4", "webm", "mkv")
_JSON_TYPES = ("int64", "float64", "float32", "bool", "str")
# Samples in each rank's shuffle buffer when a Loader of shards shuffles and is given no size.
DEFAULT_SHUFFLE_BUFFER = 8192
# Shards whose indexes are opened at once (for remote shards, requests in flight).
_OPEN_THREADS = 16


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
            object.__setattr__(self, "size", check_frame_size("Image size", self.size))


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
        object.__setattr__(self, "size", check_frame_size("Clip size", self.size))
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
    (``*``, ``?``, ``[...]``, local or s3://), a folder ``stoker shard`` wrote (a local folder,
    or a URL ending in ``/``: the shards its ``index.json`` lists), or a list of those.

    A glob in a folder holding an ``index.json`` finds only shards the index lists: a file of a
    shard's name that the writer's index leaves out (an older run's) is not part of the dataset.
    """
    if isinstance(urls_or_pattern, (str, os.PathLike)):
        items = [os.fspath(urls_or_pattern)]
    else:
        items = [os.fspath(u) for u in urls_or_pattern]
    out: list[str] = []
    for item in items:
        for url in _expand_braces(item):
            if (is_url(url) and url.endswith("/")) or (not is_url(url) and os.path.isdir(url)):
                folder = url.rstrip("/") if is_url(url) else url
                names = folder_shards(folder, storage_options)
                if names is None:
                    raise DatasetError(
                        f"{url} is a folder without the {FOLDER_INDEX} that stoker shard writes: "
                        f"give its shards as a glob ({folder}/*.tar), a brace pattern or a list"
                    )
                out.extend(_join(folder, name) for name in names)
                continue
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
            found = _listed(found, storage_options)
            if not found:
                raise DatasetError(f"no shard matches {url!r}")
            out.extend(found)
    if not out:
        raise InvalidArgumentError("no shards given")
    return out


def folder_shards(
    folder: str, storage_options: Mapping[str, Any] | S3Options | None = None
) -> list[str] | None:
    """The shard names the ``index.json`` of ``folder`` (a path or URL) lists, in its order;
    None when the folder holds none.

    Raises:
        stoker.DatasetError: naming the file and what is wrong, when it is not stoker shard's
            index (another format, no list of names).
    """
    root = open_dataset_root(folder, storage_options if is_url(folder) else None)
    if not root.exists(FOLDER_INDEX):
        return None
    index = root.read_json(FOLDER_INDEX, "shard folder index")
    where = root.url(FOLDER_INDEX)
    if index.get("format") != FOLDER_FORMAT:
        raise DatasetError(
            f"{where}: format is {index.get('format')!r}, not {FOLDER_FORMAT!r} (stoker shard's)"
        )
    names = index.get("shards")
    if not isinstance(names, list) or not all(
        isinstance(n, str) and n and "/" not in n for n in names
    ):
        raise DatasetError(f"{where}: field 'shards' is not a list of file names")
    return names


def _join(folder: str, name: str) -> str:
    return f"{folder}/{name}" if is_url(folder) else os.path.join(folder, name)


def _listed(found: list[str], storage_options: Any) -> list[str]:
    """The glob's matches less those that a folder's index.json leaves out."""
    kept = []
    indexes: dict[str, set[str] | None] = {}
    for url in found:
        folder, _, name = url.rpartition("/")
        if folder not in indexes:
            names = folder_shards(folder or ".", storage_options)
            indexes[folder] = None if names is None else set(names)
        listed = indexes[folder]
        if listed is None or name in listed:
            kept.append(url)
    return kept


def member_field(name: str) -> tuple[str, str]:
    """(key, field) of a tar member: ``dir/x.seg.png`` -> (``dir/x``, ``seg.png``)."""
    folder, _, base = name.rpartition("/")
    stem, dot, ext = base.partition(".")
    key = f"{folder}/{stem}" if folder else stem
    return key, ext.lower() if dot else ""


# ---------------------------------------------------------------------------------------------
# The dataset


class ShardDataset:
    """Samples of tar shards in WebDataset's layout, for :class:`stoker.Loader`.

    Args:
        urls_or_pattern: a brace pattern (``"train-{000000..000511}.tar"``), a glob, a folder
            ``stoker shard`` wrote (its ``index.json``'s shards), a list of paths / URLs, local
            or ``s3://`` / ``https://``; see :func:`expand_urls`.
        spec: a :class:`ShardSpec` (or a dict of output name -> decoder).
        storage_options: for remote shards: :class:`stoker.S3Options` or a dict of its fields.
        cache_dir: where shard indexes are cached; default ``$STOKER_CACHE_DIR`` or
            ``~/.cache/stoker``.

    The samples are grouped natively (``stoker._core.ShardSamples``, stoker/shard_samples.h)
    and their table saved in the cache: a second open of the same shards at the same versions
    maps it, and an unpickled dataset (a Ray read task, a spawned worker) maps it without
    touching a shard or a member.

    Attributes (numpy arrays over samples, in shard then tar order): ``sample_shard``,
    ``labels`` (the cls value, -1 where a sample has none), and :meth:`field_ranges`;
    ``bad_samples``: sample id -> why it cannot be read (a field the spec reads that it has
    twice), which the loader raises or skips by its ``on_error``.
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
        self._register_storage()
        cache = checked_path(cache_dir, "cache_dir") if cache_dir else default_cache_dir()
        self._cache_dir = os.fspath(cache)
        self.samples, notes = _core.ShardSamples.open(self.urls, self._cache_dir, _OPEN_THREADS)
        damage = self.samples.damage
        refused = [note for note, why in zip(notes, damage) if note and not why]
        if refused:
            warnings.warn(
                f"{len(refused)} sidecar index(es) did not match their shard and were ignored "
                f"(the shards were scanned instead); the first: {refused[0]}",
                stacklevel=2,
            )
        self._opened(notes)

    def _register_storage(self, check_paths: bool = True) -> None:
        """The storage options registered once per folder of remote shards; local shards
        checked to be paths (not when unpickled: the table names them, and each is checked
        when read)."""
        folders = set()
        for url in self.urls:
            if is_url(url) and self.storage_options != S3Options():
                folders.add(url.rsplit("/", 1)[0])
            elif check_paths and not is_url(url):
                checked_path(url, "shard")
        for folder in sorted(folders):
            open_dataset_root(folder, self.storage_options)

    def _opened(self, notes: Mapping[int, str] | Sequence[str]) -> None:
        """What every open, and every unpickling, sets: the damaged shards and the emptiness
        check. Nothing here is per sample or per member."""
        # Shards damaged (truncated, corrupt header): (url, what and where); their samples
        # before the damage are kept. The Loader refuses them under on_error="raise".
        self.damaged = [
            (self.urls[s], f"{why} ({members} members read; {notes[s]})" if notes[s] else why)
            for s, why, members in self.samples.damaged
        ]
        if len(self.samples) == 0:
            why = f" ({self.damaged[0][0]}: {self.damaged[0][1]})" if self.damaged else ""
            raise DatasetError(f"the shards {self.urls[:3]}... hold no sample{why}")
        self._item_loader: Any = None
        self._item_lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.samples)

    # Per-sample arrays: views of the native table, made on first use (an unpickled dataset
    # that only feeds a Loader never makes them).

    @property
    def shard_bytes(self) -> np.ndarray:
        return self.samples.shard_bytes

    @property
    def fields(self) -> list[str]:
        """The field names the members have, sorted."""
        return self.samples.fields

    @functools.cached_property
    def sample_shard(self) -> np.ndarray:
        return self.samples.sample_shard.astype(np.int64)

    @functools.cached_property
    def sample_first_member(self) -> np.ndarray:
        return self.samples.first_member.astype(np.int64)

    @property
    def labels(self) -> np.ndarray:
        return self.samples.labels

    @functools.cached_property
    def shard_first(self) -> np.ndarray:
        return self.samples.shard_first[:-1].copy()

    @functools.cached_property
    def shard_samples(self) -> np.ndarray:
        return np.diff(self.samples.shard_first)

    @functools.cached_property
    def keys(self) -> list[str]:
        """Every sample's key (the member names' common stem)."""
        return self.samples.keys

    @functools.cached_property
    def bad_samples(self) -> dict[int, str]:
        read = [name for decoder in self.spec.values() for name in decoder.fields]
        return dict(self.samples.bad_samples(read))

    @functools.cached_property
    def indexes(self) -> Sequence[Any]:
        """Per shard, its index (``stoker._core.ShardIndex``), opened on first use."""
        return _Indexes(self.samples)

    @functools.cached_property
    def member_sizes(self) -> list[np.ndarray]:
        """Per shard, per member: its size in bytes."""
        return [index.sizes for index in self.indexes]

    def field_ranges(self, field_name: str) -> tuple[np.ndarray, np.ndarray]:
        """(offsets, sizes) of field ``field_name`` for every sample; -1 where it is missing."""
        offsets = np.full(len(self), -1, np.int64)
        sizes = np.full(len(self), -1, np.int64)
        members: Any = self.samples.field_members(field_name)
        if members is None:
            return offsets, sizes
        first = self.samples.shard_first
        for s in range(len(self.urls)):
            ids = np.arange(first[s], first[s + 1])
            held = ids[members[ids] >= 0]
            if len(held):
                index = self.samples.index(s)
                offsets[held] = index.offsets[members[held]]
                sizes[held] = index.sizes[members[held]]
        return offsets, sizes

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

    def resolve_members(self, decoder: Decoder, ids: np.ndarray) -> np.ndarray:
        """For samples ``ids``: the number, in its shard's index, of the member of the first of
        ``decoder``'s fields each has (-1 when none): what :meth:`read_members` takes."""
        return self.samples.resolve(list(decoder.fields), np.ascontiguousarray(ids, np.int64))

    def read_members(self, shard: int, members: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(bytes, starts): members ``members`` of shard ``shard`` read with one call, member
        i's data at ``bytes[starts[i]:]``, each checked against its tar header (a shard
        changed since its index was made is a :class:`stoker.DatasetError`)."""
        return self.samples.index(shard).read(np.ascontiguousarray(members, np.int64))

    def shard_of(self, sample: int) -> str:
        return self.urls[int(self.samples.sample_shard[sample])]

    def unsized_images(self, transforms: Transforms | None = None) -> list[str]:
        """The image fields whose output size neither the spec (``stoker.Image(size=...)``) nor
        ``transforms`` give: a Loader needs transforms that give one."""
        transforms = Transforms() if transforms is None else transforms
        return [
            name
            for name, decoder in self.spec.items()
            if isinstance(decoder, Image) and _output_size(decoder, transforms) == (0, 0)
        ]

    def native_fields(
        self, transforms: Transforms | None = None, unsized: tuple[int, int] | None = None
    ) -> list[Any]:
        """The spec as the native loader reads it: per field its kind, options and the member
        fields it reads (the source finds each sample's). Image fields take ``transforms``
        (default: the spec's size); one with no size is refused, or takes ``unsized`` when
        given (the size a schema-only read lays it out at)."""
        transforms = Transforms() if transforms is None else transforms
        out = []
        for name, decoder in self.spec.items():
            field = _core.ShardField()
            field.name = name
            field.alternatives = list(decoder.fields)
            if isinstance(decoder, Image):
                field.kind = _core.ShardFieldKind.image
                options = transforms.core_options(decoder.size, transforms.layout or "TCHW")
                height, width = _output_size(decoder, transforms)
                if (not height or not width) and unsized is not None:
                    height, width = unsized
                if not height or not width:
                    raise InvalidArgumentError(
                        f"image field {name!r} has no output size: give stoker.Image(size=...) "
                        "in the spec, or transforms with resize, center_crop or "
                        "random_resized_crop"
                    )
                field.transform, field.height, field.width = options, height, width
            elif isinstance(decoder, Clip):
                field.kind = _core.ShardFieldKind.clip
                field.frames = [int(f) for f in decoder.frames]
                field.height, field.width = decoder.size
                chw = decoder.layout == "TCHW"
                field.layout = _core.Layout.NCHW if chw else _core.Layout.NHWC
            elif isinstance(decoder, Text):
                field.kind = _core.ShardFieldKind.text
            elif isinstance(decoder, Label):
                field.kind = _core.ShardFieldKind.label
            elif isinstance(decoder, Tokens):
                field.kind = _core.ShardFieldKind.tokens
                field.pad = int(decoder.pad)
                field.max_length = int(decoder.max_length or 0)
            elif isinstance(decoder, Array):
                field.kind = _core.ShardFieldKind.array
            else:
                field.kind = _core.ShardFieldKind.json
                field.json_keys = list(decoder.keys.items())
            out.append(field)
        return out

    def __getitem__(self, i: int) -> dict[str, Any]:
        """Sample ``i`` decoded as a batch of one would hold it, without the batch axis: each
        field (images ``[3, H, W]`` uint8 at the spec's size, text a str, a json field as its
        keys), ``__key__`` and ``__index__``. Read by the native loader's source, one loader
        kept per dataset (``Loader.read``), so its errors are the loader's (naming shard, key
        and field). Images need a size in the spec (``stoker.Image(size=...)``)."""
        if not isinstance(i, (int, np.integer)):
            raise TypeError(f"dataset indices are integers, got {type(i).__name__}")
        i = int(i) + (len(self) if i < 0 else 0)
        if not 0 <= i < len(self):
            raise IndexError(f"sample {i} is out of range: the dataset has {len(self)} samples")
        arrays, samples, _, _, _ = cast(
            tuple[Any, ...], self._items().read(np.array([i], np.int64), 0, False)
        )
        item: dict[str, Any] = {}
        for name, decoder in self.spec.items():
            names = list(decoder.keys) if isinstance(decoder, Json) else [name]
            if isinstance(decoder, Tokens):
                names.append(f"{name}_length")
            for key in names:
                value = arrays[key][0]
                item[key] = value.copy() if isinstance(value, np.ndarray) else value
        item["__key__"] = arrays["__key__"][0]
        item["__index__"] = int(samples[0])
        return item

    def _items(self) -> Any:
        """The engine's loader ``__getitem__`` reads through (Loader.read, a batch of one on
        the calling thread): one per dataset and process, made on first use."""
        with self._item_lock:
            if self._item_loader is None or self._item_loader[0] != os.getpid():
                options = _core.LoaderOptions()
                options.batch_size = options.threads = options.prefetch = 1
                every = _core.DistributedSampler(len(self), shuffle=False)
                self._item_loader = (os.getpid(), self.native_loader(every, options))
            return self._item_loader[1]

    def native_loader(self, order: Any, options: Any, transforms: Transforms | None = None) -> Any:
        """The engine's loader of this dataset (stoker.Loader's batches and ``ds[i]``'s items
        are built by it): ``order`` a native sampler over its samples, ``options`` a
        ``_core.LoaderOptions``, ``transforms`` what image fields are decoded with (default:
        the spec's sizes)."""
        return _core.Loader.for_shards(self.samples, self.native_fields(transforms), order, options)

    def __reduce__(self):
        """Pickled as what opens it again: the URLs, spec, storage options and cache folder,
        and the saved table of its samples with that file's version. Unpickling maps the
        table (one stat, one map; nothing per shard or member); when the table is gone or
        changed, the shards are opened again as a new dataset would open them."""
        reopen = functools.partial(
            _reopen,
            table=self.samples.table_path,
            version=self.samples.table_version,
            cache_dir=self._cache_dir,
        )
        return (reopen, (self.urls, self.spec, self.storage_options))

    def __repr__(self) -> str:
        return (
            f"ShardDataset({len(self.urls)} shards, {len(self)} samples, "
            f"fields {self.fields}, {self.urls[0]!r}...)"
        )


class _Indexes(Sequence):
    """The shards' indexes as a sequence, each opened when first asked for."""

    def __init__(self, samples: Any):
        self._samples = samples

    def __len__(self) -> int:
        return len(self._samples.urls)

    def __getitem__(self, shard):
        if isinstance(shard, slice):
            return [self[s] for s in range(len(self))[shard]]
        shard = int(shard) + (len(self) if shard < 0 else 0)
        if not 0 <= shard < len(self):
            raise IndexError(f"shard {shard} is out of range: the dataset has {len(self)}")
        return self._samples.index(shard)


def _reopen(
    urls: list[str],
    spec: ShardSpec,
    storage_options: S3Options,
    *,
    table: str,
    version: str,
    cache_dir: str,
) -> ShardDataset:
    """A pickled ShardDataset, from its saved table when that is still the file it was;
    else opened again from its shards."""
    if table:
        try:
            samples = _core.ShardSamples.reopen(table, version, cache_dir)
        except (DatasetError, OSError):
            samples = None
        if samples is not None:  # the file it was: the table of these URLs at their versions
            ds = ShardDataset.__new__(ShardDataset)
            ds.spec, ds.storage_options, ds.urls = spec, storage_options, urls
            ds._register_storage(check_paths=False)
            ds._cache_dir, ds.samples = cache_dir, samples
            ds._opened(collections.defaultdict(str))
            return ds
    return ShardDataset(urls, spec, storage_options, cache_dir=cache_dir)


def _output_size(image: Image, transforms: Transforms) -> tuple[int, int]:
    """(height, width) of ``image``'s output under ``transforms``; (0, 0) when neither gives
    one."""
    options = transforms.core_options(image.size, transforms.layout or "TCHW")
    if options.crop != _core.CropMode.none:
        return int(options.crop_height), int(options.crop_width)
    if options.resize_height and options.resize_width:
        return int(options.resize_height), int(options.resize_width)
    return 0, 0
