"""``stoker shard SRC DST``: write samples into tar shards of equal bytes, in WebDataset's layout.

    $ stoker shard photos/ shards/ --shard-bytes 256MB --resize 256 --shuffle-seed 0

SRC is one of:

* a folder of files grouped by name: ``x.jpg``, ``x.json``, ``x.txt`` are the fields of sample
  ``x`` (subfolders are part of the key, as in the shards);
* an ImageFolder tree, ``SRC/<class>/<image>``: every top-level entry a folder holding images
  (and, beside an image, files of the same stem: ``x.jpg`` with ``x.txt`` is one sample with a
  caption); the class (its rank among the sorted folder names) becomes the ``cls`` field, and
  ``classes.json`` in DST names them. Files whose stem has no image are left out, and named in
  the summary; two images of one stem (``cat/a.jpg``, ``cat/a.png``) are refused;
* a Parquet manifest (``*.parquet``): a column ``key`` (optional), columns named after a file
  extension (``jpg``, ``png``, ``mp4``, ``npy``, ...) holding paths relative to the manifest's
  folder, ``txt`` holding text, ``cls`` holding integers; any other column goes into the
  sample's ``json`` member;
* a LeRobot dataset (a folder holding ``meta/info.json``, or its URL): each episode, or each
  window of ``--clip-seconds``, becomes a clip sample (``<camera>.mp4`` per camera, ``json``,
  ``<feature>.npy``); see :mod:`stoker.writers.clips`.

The samples are shuffled with ``--shuffle-seed`` (write-time shuffle: shards hold a mix, so a
reader's shuffle buffer need not be large), images are optionally resized so their shorter
side is ``--resize`` (Pillow, quality 95 for JPEG; never enlarged), and cut into
``round(total / shard_bytes)`` shards whose sizes differ from their mean by at most one
sample. Next to the shards go a sidecar index per shard (``<shard>.index``, which
:class:`stoker.ShardDataset` reads instead of scanning), ``index.json`` (the shards, their
sizes and sample counts) and ``columns.parquet``: per sample its key and shard, its label and
its json members as typed columns (:mod:`stoker.writers.typed_columns`).

The run is resumable and atomic: its plan (which sample goes where) is saved in
``DST/.stoker_shard/`` first; each shard is written to a temporary file and renamed into place,
then journaled. Running the same command again after an interruption writes only the shards
that are missing. With ``--resize``, images are encoded twice: once to measure (so that the
shards come out equal in bytes), once to write.

A run owns DST: it holds its lock (a second run refuses), refuses files of its shards' names
that no run wrote, removes at the end the files of its names that its index does not list, and
writes ``index.json`` last. A write that fails for want of room names the shard and leaves no
partial file. Two source files that would be one member (``x.jpg``, ``x.JPG``) are refused.

Every image, json, text, npy and cls file is checked before the plan (images decoded whole by
the engine): a file the loader could not read stops the run, naming each, or with
``--skip-bad`` its sample is left out and listed in the summary.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import errno
import hashlib
import io
import json
import os
import re
import shutil
import tarfile
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from stoker import _core
from stoker._core import DatasetError, InvalidArgumentError
from stoker.datasets.shards import (
    FOLDER_FORMAT,
    FOLDER_INDEX,
    IMAGE_EXTENSIONS,
    INDEX_SUFFIX,
    INDEX_VERSION,
    folder_shards,
    member_field,
)
from stoker.io.files import FolderLock, remove_file, write_json, write_parquet
from stoker.io.storage import add_storage_arguments, storage_options_from_args
from stoker.progress import ProgressBar
from stoker.writers.clips import ClipCut, is_lerobot_dataset, lerobot_clip_samples
from stoker.writers.typed_columns import convert_json_columns

__all__ = ["ShardReport", "write_shards"]

STATE_DIR = ".stoker_shard"
_PLAN_VERSION = 1
_BLOCK = 512
_RESIZABLE = ("jpg", "jpeg", "png")


@dataclass
class ShardReport:
    """What a run wrote: the shards, their sizes, and how much of it was done before."""

    shards: list[str]
    shard_bytes: list[int]
    samples: int
    resumed: int
    #: How SRC was read: "folder", "ImageFolder tree", "Parquet manifest" or "LeRobot dataset".
    mode: str = "folder"
    #: Each field, and how many samples have it.
    fields: dict[str, int] = dataclasses.field(default_factory=dict)
    #: Source files that are in no sample (an ImageFolder file whose stem has no image).
    left_out: list[str] = dataclasses.field(default_factory=list)
    #: With skip_bad: the files the loader could not read ("path: what is wrong"); their
    #: samples are left out.
    bad: list[str] = dataclasses.field(default_factory=list)

    def summary(self) -> str:
        sizes = np.array(self.shard_bytes, np.float64)
        spread = (sizes.max() - sizes.min()) / sizes.mean() if len(sizes) else 0.0
        fields = ", ".join(f"{name} ({count})" for name, count in self.fields.items())
        text = (
            f"{self.samples} samples ({self.mode}; fields: {fields}) in {len(self.shards)} "
            f"shards of {sizes.mean() / 1e6:.1f} MB on average (spread {spread:.1%}); "
            f"{self.resumed} shards were already written"
        )
        if self.left_out:
            shown = ", ".join(self.left_out[:5]) + (", ..." if len(self.left_out) > 5 else "")
            text += f"; left out {len(self.left_out)} files without an image: {shown}"
        if self.bad:
            text += f"; left out {len(self.bad)} samples with bad files: " + "; ".join(self.bad)
        return text


def parse_bytes(value: str | int) -> int:
    """``256MB``, ``1.5GiB``, ``1000000`` -> bytes."""
    if isinstance(value, int):
        return value
    match = re.fullmatch(r"\s*([\d.]+)\s*([KMGT]?)(i?)B?\s*", str(value), re.IGNORECASE)
    if match is None:
        raise ValueError(f"a size is a number with an optional unit (256MB, 1GiB), got {value!r}")
    base = 1024 if match.group(3) else 1000
    power = " KMGT".index(match.group(2).upper() or " ")
    return int(float(match.group(1)) * base**power)


# ---------------------------------------------------------------------------------------------
# Sources: each gives samples as (key, [(field, path or bytes), ...])

Sample = tuple[str, list[tuple[str, Any]]]


def _folder_samples(root: str) -> list[Sample]:
    groups: dict[str, list[tuple[str, Any]]] = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if name.startswith("."):
                continue
            rel = os.path.relpath(os.path.join(folder, name), root).replace(os.sep, "/")
            key, field = member_field(rel)
            if not field:
                continue
            groups.setdefault(key, []).append((field, os.path.join(folder, name)))
    return sorted(groups.items())


def _is_image_folder(root: str) -> bool:
    """Whether ``root`` is an ImageFolder tree: every top-level entry a folder of files (no
    deeper folders) of which at least one is an image, whatever sidecar files they hold."""
    entries = [e for e in os.listdir(root) if not e.startswith(".")]
    if not entries or not all(os.path.isdir(os.path.join(root, e)) for e in entries):
        return False
    for entry in entries:
        files = [f for f in os.listdir(os.path.join(root, entry)) if not f.startswith(".")]
        if any(os.path.isdir(os.path.join(root, entry, f)) for f in files):
            return False
        if not any(member_field(f)[1] in IMAGE_EXTENSIONS for f in files):
            return False
    return True


def _image_folder_samples(root: str) -> tuple[list[Sample], list[str], list[str]]:
    """The samples of an ImageFolder tree (an image and the files of its stem, and ``cls``),
    its classes, and the files left out (their stem has no image)."""
    classes = sorted(e for e in os.listdir(root) if not e.startswith("."))
    samples: list[Sample] = []
    left_out: list[str] = []
    for label, name in enumerate(classes):
        stems: dict[str, list[tuple[str, Any]]] = {}
        for file in sorted(os.listdir(os.path.join(root, name))):
            if not file.startswith("."):
                stem, field = member_field(file)
                stems.setdefault(stem, []).append((field, os.path.join(root, name, file)))
        for stem, members in stems.items():
            images = [path for field, path in members if field in IMAGE_EXTENSIONS]
            if len(images) > 1:
                # Each image of a tree is a sample (as torchvision's ImageFolder counts them),
                # and these would all be sample name/stem: one image field, the others lost.
                raise DatasetError(
                    f"{root}: {' and '.join(images)} are both sample {name + '/' + stem!r} (an "
                    "ImageFolder tree's sample is one image and the files of its stem): rename "
                    "or remove one"
                )
            if images:
                samples.append((f"{name}/{stem}", [*members, ("cls", str(label).encode())]))
            else:
                left_out += [f"{name}/{os.path.basename(path)}" for _, path in members]
    return samples, classes, left_out


def _manifest_samples(path: str) -> list[Sample]:
    table = pq.read_table(path)
    folder = os.path.dirname(os.path.abspath(path))
    names = table.column_names
    rows = table.to_pylist()
    file_columns = [n for n in names if n in IMAGE_EXTENSIONS + ("mp4", "webm", "mkv", "npy")]
    samples: list[Sample] = []
    for r, row in enumerate(rows):
        key = str(row["key"]) if "key" in names else f"{r:09d}"
        members: list[tuple[str, Any]] = []
        for name in file_columns:
            if row[name] is not None:
                members.append((name, os.path.join(folder, str(row[name]))))
        if "txt" in names and row["txt"] is not None:
            members.append(("txt", str(row["txt"]).encode()))
        if "cls" in names and row["cls"] is not None:
            members.append(("cls", str(int(row["cls"])).encode()))
        extra = {
            n: row[n] for n in names if n not in file_columns and n not in ("key", "txt", "cls")
        }
        if extra:
            members.append(("json", json.dumps(extra, sort_keys=True).encode()))
        if not members:
            raise DatasetError(f"{path}: row {r} names no member")
        samples.append((key, members))
    return samples


# ---------------------------------------------------------------------------------------------
# Members: bytes as they go into the tar


def _member_bytes(field: str, value: Any, resize: int | None) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, ClipCut):
        return value.read()
    with open(value, "rb") as f:
        data = f.read()
    if resize is None or field.rsplit(".", 1)[-1] not in _RESIZABLE:
        return data
    from PIL import Image as PILImage

    try:
        with PILImage.open(io.BytesIO(data)) as image:
            width, height = image.size
            if min(width, height) <= resize:
                return data
            scale = resize / min(width, height)
            size = (max(1, round(width * scale)), max(1, round(height * scale)))
            resized = image.convert("RGB").resize(size, PILImage.Resampling.BILINEAR)
            out = io.BytesIO()
            if field.endswith("png"):
                resized.save(out, format="PNG")
            else:
                resized.save(out, format="JPEG", quality=95)
            return out.getvalue()
    except OSError as error:
        raise DatasetError(f"{value}: cannot resize the image: {error}") from None


def _tar_bytes(key: str, sizes: Sequence[tuple[str, int]]) -> int:
    """Bytes a sample takes in a tar: per member a header (plus a long-name header for names
    over 100 bytes) and its data padded to 512."""
    total = 0
    for field, size in sizes:
        name = f"{key}.{field}"
        total += _BLOCK + (
            _BLOCK + -(-len(name.encode()) // _BLOCK) * _BLOCK if len(name) > 100 else 0
        )
        total += -(-size // _BLOCK) * _BLOCK
    return total


def _cut(sample_bytes: np.ndarray, shard_bytes: int) -> list[int]:
    """Where each shard starts: ``round(total / shard_bytes)`` shards, each ending at the
    sample boundary nearest its share of the total."""
    total = int(sample_bytes.sum())
    shards = max(1, min(len(sample_bytes), round(total / shard_bytes)))
    ends = np.cumsum(sample_bytes)
    starts = [0]
    for k in range(1, shards):
        target = total * k / shards
        i = int(np.searchsorted(ends, target))
        # the boundary after sample i or the one before it, whichever is nearer the target
        if i > 0 and abs(ends[i - 1] - target) <= abs(ends[min(i, len(ends) - 1)] - target):
            i -= 1
        starts.append(max(starts[-1] + 1, i + 1))
    return starts


# ---------------------------------------------------------------------------------------------
# The run


def write_shards(
    src: str | os.PathLike,
    dst: str | os.PathLike,
    *,
    shard_bytes: int | str = "256MB",
    resize: int | None = None,
    shuffle_seed: int | None = 0,
    prefix: str = "shard",
    workers: int | None = None,
    progress: bool | Callable[[int, int], None] = True,
    clip_seconds: float | None = None,
    cameras: Sequence[str] | None = None,
    storage_options: Any = None,
    skip_bad: bool = False,
) -> ShardReport:
    """Writes the samples of ``src`` into tar shards in ``dst``; see the module's notes.

    Args:
        shard_bytes: the target size of a shard (``"256MB"`` or bytes).
        resize: the shorter side images are resized to (never enlarged); None keeps them.
        shuffle_seed: the write-time shuffle's seed; None keeps the source's order.
        prefix: shards are ``<prefix>-000000.tar``, ...
        workers: threads reading and encoding; default: the usable cores.
        progress: True draws a progress bar on stderr; a callable gets (done, total) shards.
        clip_seconds: for a LeRobot ``src``: each window of this many seconds of an episode is
            one clip sample (a tail shorter than a window is left out); None: whole episodes.
            See :mod:`stoker.writers.clips`.
        cameras: for a LeRobot ``src``: the cameras given as clips (default: all).
        storage_options: for a LeRobot ``src`` given by URL (``s3://``), see
            :mod:`stoker.io.storage`.
        skip_bad: every image, json, text, npy and cls file is checked as it is read (images
            decoded whole, by the engine: ``_core.check_members``); a bad one stops the run
            before any shard is written, naming each (DatasetError), unless this is True:
            then their samples are left out and listed in the report.
    """
    src, dst = os.fspath(src), os.fspath(dst)
    target = parse_bytes(shard_bytes)
    if target < 1:
        raise InvalidArgumentError(f"shard_bytes must be positive, got {shard_bytes!r}")
    if resize is not None and int(resize) < 1:
        raise InvalidArgumentError(f"resize must be positive, got {resize!r}")
    workers = int(workers) if workers else _core.usable_cores()
    lerobot = is_lerobot_dataset(src)
    if not lerobot and (clip_seconds is not None or cameras is not None or storage_options):
        raise InvalidArgumentError(
            f"{src}: clip_seconds, cameras and storage_options are for LeRobot datasets "
            "(a folder with meta/info.json, or its URL)"
        )
    if lerobot and resize is not None:
        raise InvalidArgumentError(
            f"{src}: resize is for images; LeRobot clips keep their videos' size"
        )
    state = os.path.join(dst, STATE_DIR)
    own = re.compile(re.escape(prefix) + _OWN_SUFFIX)
    with FolderLock(state, dst, "stoker shard"):
        _claim(dst, state, own)
        fingerprint = ""
        classes: list[str] | None = None
        left_out: list[str] = []
        mode = "folder"
        if lerobot:
            mode = "LeRobot dataset"
            samples, fingerprint = lerobot_clip_samples(
                src,
                state,
                clip_seconds=clip_seconds,
                cameras=cameras,
                storage_options=storage_options,
                progress=progress is True,
            )
        elif os.path.isfile(src) and src.endswith(".parquet"):
            samples, mode = _manifest_samples(src), "Parquet manifest"
        elif os.path.isdir(src) and _is_image_folder(src):
            samples, classes, left_out = _image_folder_samples(src)
            mode = f"ImageFolder tree of {len(classes)} classes"
        elif os.path.isdir(src):
            samples = _folder_samples(src)
        else:
            raise InvalidArgumentError(f"{src}: not a folder or a Parquet manifest")
        if not samples:
            raise DatasetError(f"{src}: no sample found")
        _check_unique(samples, src)
        bad = _bad_files(samples, workers)
        if bad and not skip_bad:
            named = "; ".join(problem for problems in bad.values() for problem in problems)
            raise DatasetError(
                f"{src}: {sum(len(p) for p in bad.values())} files cannot be read as their "
                f"kind: {named}; fix or remove them, or leave their samples out with "
                "--skip-bad (skip_bad=True)"
            )
        samples = [sample for i, sample in enumerate(samples) if i not in bad]
        if not samples:
            raise DatasetError(f"{src}: no sample left without a bad file")
        plan = _plan(
            samples, src, state, target, resize, shuffle_seed, prefix, workers, fingerprint
        )
        done = _journaled(os.path.join(state, "done.jsonl"))
        order = plan["order"]
        starts = plan["starts"] + [len(order)]
        names = [f"{prefix}-{k:06d}.tar" for k in range(len(starts) - 1)]
        bar = ProgressBar("writing shards") if progress is True else None
        callback = bar if bar is not None else (progress if callable(progress) else None)
        resumed = 0
        sizes = []
        with ThreadPoolExecutor(workers, thread_name_prefix="stoker-shard") as pool:
            for k, name in enumerate(names):
                path = os.path.join(dst, name)
                if name in done and os.path.exists(path) and os.path.getsize(path) == done[name]:
                    resumed += 1
                    sizes.append(done[name])
                else:
                    chosen = [samples[i] for i in order[starts[k] : starts[k + 1]]]
                    with _writing(f"shard {path!r}"):
                        sizes.append(_write_shard(chosen, path, resize, pool))
                        with open(os.path.join(state, "done.jsonl"), "a", encoding="utf-8") as f:
                            f.write(json.dumps({"shard": name, "bytes": sizes[-1]}) + "\n")
                if callback is not None:
                    callback(k + 1, len(names))
        if bar is not None:
            bar.close()
        counts = [starts[k + 1] - starts[k] for k in range(len(names))]
        with _writing(f"the index files of {dst!r}"):
            _write_columns(samples, order, starts, names, os.path.join(dst, "columns.parquet"))
            if classes is not None:
                write_json(os.path.join(dst, "classes.json"), classes)
            else:
                remove_file(os.path.join(dst, "classes.json"))
            # The folder is this run's: shards of its names that its index leaves out (an
            # earlier run's, cut otherwise) go, so that no glob finds them.
            listed = set(names) | {name + INDEX_SUFFIX for name in names}
            for entry in os.listdir(dst):
                if own.fullmatch(entry) and entry not in listed:
                    remove_file(os.path.join(dst, entry))
            # Last: until it is there, the folder is not a finished dataset.
            write_json(
                os.path.join(dst, FOLDER_INDEX),
                {
                    "format": FOLDER_FORMAT,
                    "version": INDEX_VERSION,
                    "shards": names,
                    "shard_bytes": sizes,
                    "samples": counts,
                },
            )
        # Staged clips are in the shards now; a rerun finds every shard journaled.
        shutil.rmtree(os.path.join(state, "clips"), ignore_errors=True)
    fields: dict[str, int] = {}
    for _, members in samples:
        for name in dict.fromkeys(name for name, _ in members):
            fields[name] = fields.get(name, 0) + 1
    bad_files = [problem for problems in bad.values() for problem in problems]
    return ShardReport(names, sizes, len(order), resumed, mode, fields, left_out, bad_files)


# Files a run of prefix P owns in its folder: P-000000.tar, its sidecar, their temporaries.
_OWN_SUFFIX = r"-\d{6}\.tar(\.index)?(\.tmp|\.\d+\.partial)?"
# A write that fails for want of room: a full disk, a quota, a file size limit.
_NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def _claim(dst: str, state: str, own: re.Pattern[str]) -> None:
    """Makes ``dst`` this run's (called with its lock held): refuses a folder holding files of
    the run's names that no stoker shard run wrote (no plan in ``state``, no index.json), so
    that they are never overwritten or removed; else removes what says the folder is finished
    (index.json, rewritten at the end) and the temporaries an interrupted run left."""
    entries = os.listdir(dst)
    theirs = [e for e in entries if own.fullmatch(e)]
    planned = os.path.exists(os.path.join(state, "plan.json"))
    if theirs and not planned and folder_shards(dst) is None:
        if os.listdir(state) == ["lock"]:  # only the lock this run made
            shutil.rmtree(state, ignore_errors=True)
        raise DatasetError(
            f"{dst} holds {', '.join(sorted(theirs)[:3])}{', ...' if len(theirs) > 3 else ''} "
            f"and no stoker shard run wrote them (no {STATE_DIR}/plan.json, no {FOLDER_INDEX}): "
            "write to a new folder, or another --prefix"
        )
    remove_file(os.path.join(dst, FOLDER_INDEX))
    for entry in theirs:
        if entry.endswith((".tmp", ".partial")):
            remove_file(os.path.join(dst, entry))


def _journaled(path: str) -> dict[str, int]:
    """Shard name -> size of the shards the journal says were written; a line cut short (the
    run stopped while writing it) is not taken: that shard is written again."""
    done: dict[str, int] = {}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    entry = json.loads(line)
                    done[str(entry["shard"])] = int(entry["bytes"])
                except (ValueError, KeyError, TypeError):
                    continue
    return done


@contextlib.contextmanager
def _writing(what: str) -> Iterator[None]:
    """Names ``what`` was being written when a write fails for want of room, and says how to
    go on: the shards written so far are kept, the partial one is removed."""
    try:
        yield
    except OSError as error:
        if error.errno not in _NO_ROOM:
            raise
        raise OSError(
            error.errno,
            f"cannot write {what}: {error.strerror}; the shards written so far are kept: make "
            "room and run the same command again to continue",
        ) from None


def _check_unique(samples: list[Sample], src: str) -> None:
    """Refuses two source files that would be one member (``x.jpg`` and ``x.JPG``: fields are
    lower case) or two samples of one key, which the shards' readers could not tell apart. (Two
    images of one stem in an ImageFolder tree, ``cat/a.jpg`` and ``cat/a.png``, are refused as
    the tree is read.)"""

    def origin(value: Any) -> str:
        return value if isinstance(value, str) else "a value of the source"

    keys: dict[str, Any] = {}
    for key, members in samples:
        if key in keys:
            raise DatasetError(
                f"{src}: {origin(keys[key])} and {origin(members[0][1])} are both sample "
                f"{key!r}: rename or remove one (a sample's key is its path up to the first dot)"
            )
        keys[key] = members[0][1]
        fields: dict[str, Any] = {}
        for field, value in members:
            if field in fields:
                raise DatasetError(
                    f"{src}: {origin(fields[field])} and {origin(value)} are both field "
                    f"{field!r} of sample {key!r} (fields are lower case): rename or remove one"
                )
            fields[field] = value


# Fields the writer checks (the engine's member_check.h): the last extension decides.
_CHECKED = ("jpg", "jpeg", "png", "webp", "json", "txt", "text", "npy", "cls")


def _bad_files(samples: list[Sample], workers: int) -> dict[int, list[str]]:
    """Sample number -> "file: what is wrong" for each member the loader could not read,
    checked by the engine with the GIL released, ``workers`` samples at a time."""

    def check(i: int) -> list[str]:
        _, members = samples[i]
        fields, blobs, origins = [], [], []
        for field, value in members:
            if field.rsplit(".", 1)[-1].lower() not in _CHECKED or isinstance(value, ClipCut):
                continue
            if isinstance(value, bytes):
                blobs.append(value)
                origins.append(f"{samples[i][0]}.{field}")
            else:
                with open(value, "rb") as f:
                    blobs.append(f.read())
                origins.append(value)
            fields.append(field)
        problems = _core.check_members(fields, blobs)
        return [f"{origin}: {problem}" for origin, problem in zip(origins, problems) if problem]

    with ThreadPoolExecutor(workers, thread_name_prefix="stoker-shard-check") as pool:
        found = list(pool.map(check, range(len(samples))))
    return {i: problems for i, problems in enumerate(found) if problems}


def _plan(
    samples, src, state, target, resize, shuffle_seed, prefix, workers, source_fingerprint
) -> dict[str, Any]:
    """The run's plan (sample order and shard starts), saved in the state folder; an existing
    plan of the same source and options is taken as it is."""
    listing = hashlib.sha1(source_fingerprint.encode())
    for key, members in samples:
        listing.update(key.encode())
        for field, value in members:
            if isinstance(value, bytes):
                stat: Any = (len(value), 0)
            elif isinstance(value, ClipCut):
                stat = value.describe()
            else:
                stat = _stat(value)
            listing.update(f"{field}:{stat}".encode())
    options = {
        "src": os.path.abspath(src),
        "shard_bytes": target,
        "resize": resize,
        "shuffle_seed": shuffle_seed,
        "prefix": prefix,
        "version": _PLAN_VERSION,
    }
    fingerprint = hashlib.sha1(json.dumps(options, sort_keys=True).encode() + listing.digest())
    path = os.path.join(state, "plan.json")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            plan = json.load(f)
        if plan.get("fingerprint") == fingerprint.hexdigest():
            return plan
        raise InvalidArgumentError(
            f"{os.path.dirname(state)} holds a run of other options or another source "
            f"({plan.get('options')}); write to a new folder, or remove {state} to start over"
        )
    n = len(samples)
    order = (
        np.random.default_rng(shuffle_seed).permutation(n)
        if shuffle_seed is not None
        else np.arange(n)
    )

    def member_size(field: str, value: Any) -> int:
        if isinstance(value, bytes):
            return len(value)
        if isinstance(value, ClipCut):
            return value.size()  # cut (and staged) now
        if resize is None:
            return os.path.getsize(value)
        return len(_member_bytes(field, value, resize))

    def measure(i: int) -> int:
        key, members = samples[i]
        return _tar_bytes(key, [(f, member_size(f, v)) for f, v in members])

    clips = any(isinstance(v, ClipCut) for _, members in samples for _, v in members)
    if resize is None and not clips:
        sizes = [measure(i) for i in range(n)]
    else:
        with ThreadPoolExecutor(workers) as pool:
            sizes = list(pool.map(measure, range(n)))
    sample_bytes = np.array(sizes, np.int64)[order]
    plan = {
        "fingerprint": fingerprint.hexdigest(),
        "options": options,
        "order": [int(i) for i in order],
        "starts": _cut(sample_bytes, target),
    }
    write_json(path, plan)
    return plan


def _stat(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns


def _write_shard(samples: list[Sample], path: str, resize: int | None, pool) -> int:
    """Writes one shard (temporary file, then renamed into place) and its sidecar index."""

    def encode(sample: Sample) -> list[tuple[str, bytes]]:
        key, members = sample
        return [(f"{key}.{field}", _member_bytes(field, value, resize)) for field, value in members]

    temporary = path + ".tmp"
    try:
        with tarfile.open(temporary, "w", format=tarfile.GNU_FORMAT) as tar:
            for encoded in pool.map(encode, samples):
                for name, data in encoded:
                    info = tarfile.TarInfo(name)
                    info.size, info.mtime, info.mode = len(data), 0, 0o644
                    tar.addfile(info, io.BytesIO(data))
        size = os.path.getsize(temporary)
        _core.commit_file(temporary, path)
    except BaseException:
        remove_file(temporary)  # a partial shard holds the room a full disk lacks
        raise
    # The sidecar: the native index of what was just written, bound to its tar headers.
    _core.write_shard_sidecar(path)
    return size


def _write_columns(samples, order, starts, names, path) -> None:
    keys, shards, labels, texts = [], [], [], []
    for k in range(len(names)):
        for i in order[starts[k] : starts[k + 1]]:
            key, members = samples[i]
            fields = dict(members)
            keys.append(key)
            shards.append(names[k])
            label = fields.get("cls")
            labels.append(int(label.decode()) if isinstance(label, bytes) else None)
            value = fields.get("json")
            if isinstance(value, str):
                with open(value, "rb") as f:
                    value = f.read()
            texts.append(value.decode() if isinstance(value, bytes) else None)
    table = pa.table({"__key__": keys, "__shard__": shards, "cls": pa.array(labels, pa.int64())})
    if any(t is not None for t in texts):
        if any(t is None for t in texts):
            raise DatasetError("some samples have a json member and others none")
        table = table.append_column("json", pa.array(texts, pa.string()))
        table = convert_json_columns(table, ["json"], row_label=lambda r: f"sample {keys[r]!r}")[0]
    write_parquet(table, path)


# ---------------------------------------------------------------------------------------------
# Command line


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "src",
        help="a folder of samples, an ImageFolder tree, a Parquet manifest, or a LeRobot "
        "dataset (a folder with meta/info.json, or its s3:// URL) whose episodes become clip "
        "samples: <camera>.mp4 per camera (cut without re-encoding when the clip starts on a "
        "keyframe, else re-encoded with libx264), json (episode_index, start_frame, fps, task, "
        "...) and <feature>.npy per numeric feature (observation.state.npy, action.npy)",
    )
    parser.add_argument("dst", help="the folder the shards go to")
    parser.add_argument("--shard-bytes", default="256MB", help="target shard size (256MB)")
    parser.add_argument("--resize", type=int, help="shorter side of resized images")
    parser.add_argument("--shuffle-seed", type=int, default=0, help="write-time shuffle seed")
    parser.add_argument("--no-shuffle", action="store_true", help="keep the source's order")
    parser.add_argument("--prefix", default="shard", help="shard names: PREFIX-000000.tar")
    parser.add_argument("--workers", type=int, help="threads; default: the usable cores")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument(
        "--skip-bad",
        action="store_true",
        help="leave out samples with a file the loader could not read (an image that does not "
        "decode whole, bad json, text, npy or cls) and list them; default: name them and stop",
    )
    lerobot = parser.add_argument_group("LeRobot sources (episodes as clips)")
    lerobot.add_argument(
        "--clip-seconds",
        type=float,
        help="each window of this many seconds of an episode is one sample (windows from the "
        "episode's start, a shorter tail left out); default: whole episodes",
    )
    lerobot.add_argument(
        "--cameras", nargs="+", metavar="KEY", help="the cameras given as clips (default: all)"
    )
    add_storage_arguments(parser)


def main(args: argparse.Namespace) -> int:
    from stoker.cli import report_errors

    def run() -> None:
        report = write_shards(
            args.src,
            args.dst,
            shard_bytes=args.shard_bytes,
            resize=args.resize,
            shuffle_seed=None if args.no_shuffle else args.shuffle_seed,
            prefix=args.prefix,
            workers=args.workers,
            progress=not args.no_progress,
            clip_seconds=args.clip_seconds,
            cameras=args.cameras,
            storage_options=storage_options_from_args(args),
            skip_bad=args.skip_bad,
        )
        print(report.summary())

    return report_errors("shard", run)
