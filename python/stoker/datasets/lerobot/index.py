"""The persistent episode index of a LeRobot dataset: build once, memory-map afterwards.

:func:`load_index` reads the dataset's metadata and Parquet columns with pyarrow
(:mod:`stoker.datasets.lerobot.metadata`), scans every video once in C++ (in parallel, with the GIL
released) and writes one versioned binary file, ``index-v1.bin``:

* in ``<root>/.stoker/`` when the dataset folder is writable;
* otherwise in a cache folder, ``<cache_dir>/<hash of the absolute root>/``, where
  ``cache_dir`` defaults to ``$STOKER_CACHE_DIR`` or ``~/.cache/stoker``.

A dataset with image features (``"dtype": "image"``: PNG or JPEG bytes in the Parquet data
files) gets a side file beside its index, ``index-v1.images.bin``: every image column read
once with pyarrow, its encoded images written back to back, and per camera and row the
image's (offset, length) stored in the index. The engine maps that file (processes share its
pages); Python never holds the images.

Later calls map the file and return at once, unless a dataset file (meta files, Parquet tables,
videos) changed size or modification time since the build, in which case the index is rebuilt.
An index file that cannot be read (corrupted, from another format version) is rebuilt too. The
index also carries the metadata it was built from (:func:`metadata.metadata_attachments`), which
:func:`current_index_and_metadata` hands back with a current index: a dataset opened again
reads no episode table.

An index covers the cameras asked for (``cameras=``, default every camera): the index of some
cameras is a file of its own beside the full one, ``index-v1-cameras-<hash of their names>.bin``,
and one whose cameras are not the ones asked for is never used (it is rebuilt). A video that
cannot serve an episode (it does not open, has too few frames, or shows them at other times
than the rows) refuses the index (``on_error="raise"``, leaving no index file), or is recorded
in it (``on_error="skip"``): :attr:`EpisodeIndex.broken_episodes` lists those episodes, every
later open sees them (under ``"raise"`` it refuses the index again), the window planner refuses
their rows, and repairing the video makes the index stale.

A remote dataset (``s3://``, ``https://``) has its index in the local cache folder,
``<cache_dir>/index/<name>-<hash of the URL>/index-v1-<key>.bin`` (for some cameras,
``index-v1-cameras-<hash>-<key>.bin``), where the key hashes the URL and the size and version
tag (ETag) of every object read, from the root's listing (a HEAD per object where listing is
refused); an object changed since gives another key, hence a rebuild.

Lookups are vectorised: pass numpy arrays of rows, get numpy arrays back; each costs O(1) per
row whatever the number of episodes or files.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Callable, Literal, NamedTuple, Union, cast

import numpy as np

from stoker import _core
from stoker._core import DatasetError, InvalidArgumentError
from stoker.datasets.lerobot import format as lerobot_format
from stoker.datasets.lerobot.lance_layout import whole_file
from stoker.datasets.lerobot.metadata import (
    LeRobotMetadata,
    attached_metadata,
    image_cameras,
    metadata_attachments,
    read_columns,
    read_image_column,
    read_lerobot_metadata,
    readable_columns,
    stored_data_files,
)
from stoker.io.files import checked_path
from stoker.io.storage import Root, S3Options, is_url, open_dataset_root
from stoker.progress import ProgressBar

# What an index build says besides its progress bar (the summary, a wait for another process):
# INFO, so quiet unless the application shows stoker's logs (logging.basicConfig(level=INFO)).
logger = logging.getLogger(__name__)

__all__ = ["BrokenEpisode", "EpisodeIndex", "IndexReport", "default_cache_dir", "load_index"]

INDEX_FILE = "index-v1.bin"
_ERROR_POLICIES = ("raise", "skip")
_LISTED = 20  # broken episodes named in a message; the others are counted
_INDEXED_DTYPES = ("float32", "float64", "int64")

Progress = Union[bool, Callable[[int, int], None]]


@dataclass(frozen=True)
class IndexReport:
    """What building an index found.

    ``max_drift_s[v]`` is, for video file ``video_files[v]``, the largest distance between an
    episode's stated start (LeRobot v3.0's ``from_timestamp``) and the pts of the frame it was
    snapped to. In packed files this grows with the number of episodes before it; beyond half a
    frame, naive nearest-timestamp lookups pick the wrong frame, which the index avoids.
    """

    seconds: float
    video_files: tuple[str, ...]
    max_drift_s: np.ndarray  # float64 [V]

    def summary(self) -> str:
        """One line: the build time and the largest drift, with its file."""
        text = f"{len(self.video_files)} video files in {self.seconds:.2f} s"
        if len(self.max_drift_s):
            worst = int(np.argmax(self.max_drift_s))
            text += (
                f"; max drift {self.max_drift_s[worst] * 1e3:.3f} ms "
                f"({os.path.basename(self.video_files[worst])})"
            )
        return text


class BrokenEpisode(NamedTuple):
    """An episode that one camera's video could not serve when the index was built: its file
    does not open, has too few frames for the episode's rows, or shows them at other times."""

    episode: int  # position in dataset order (LeRobot's episode_index in its datasets)
    camera: str
    file: str
    why: str

    def __str__(self) -> str:
        return f"episode {self.episode}, camera '{self.camera}', file '{self.file}': {self.why}"


class EpisodeIndex:
    """A dataset's mapped index: episodes, per-camera frames, frame tables and columns.

    Obtained from :func:`load_index` (or :meth:`open` for a known index file). Immutable, and
    safe to share between threads. ``camera`` arguments are a camera name or its position in
    :attr:`cameras`.

    It pickles as its path (for spawn-based workers and Ray tasks): unpickling maps the file
    again, and refuses (:class:`stoker.DatasetError`) an index file rebuilt or replaced since
    this one was mapped, whose rows and frames may differ.
    """

    def __init__(self, core: _core.EpisodeIndex, path: str, report: IndexReport | None = None):
        self._core = core
        self._path = path
        self._report = report
        self._cameras = tuple(core.cameras)
        self._image_cameras = self._cameras[core.num_video_cameras :]
        self._camera_ids = {name: c for c, name in enumerate(self._cameras)}
        self._video_files = tuple(core.video_files)
        self._video_ids = {path: v for v, path in enumerate(self._video_files)}
        self._columns = {name: (dtype, dim) for name, dtype, dim in core.column_names}
        broken = core.broken_episodes
        videos = {c: core.videos_of(c) for c in {c for _, c, _ in broken}}
        self._broken = tuple(
            BrokenEpisode(e, self._cameras[c], self._video_files[int(videos[c][e])], why)
            for e, c, why in broken
        )

    @classmethod
    def open(cls, path: str | os.PathLike) -> EpisodeIndex:
        """Maps an index file. Raises :class:`stoker.DatasetError` when it is not a valid one,
        :class:`stoker.InvalidArgumentError` for a path holding a NUL character."""
        path = os.path.abspath(checked_path(path, "index file"))
        return cls(_core.EpisodeIndex.open(path), path)

    def __reduce__(self):
        return (_reopen_index, (self._path, self._core.checksum, self._report))

    @property
    def path(self) -> str:
        """The index file."""
        return self._path

    @property
    def report(self) -> IndexReport | None:
        """What the build found, when this call built the index; None when it was mapped."""
        return self._report

    @property
    def num_rows(self) -> int:
        return self._core.num_rows

    @property
    def num_episodes(self) -> int:
        return self._core.num_episodes

    @property
    def fps(self) -> float:
        return self._core.fps

    @property
    def cameras(self) -> tuple[str, ...]:
        return self._cameras

    @property
    def broken_episodes(self) -> tuple[BrokenEpisode, ...]:
        """The episodes that a camera's video could not serve when the index was built under
        ``on_error="skip"`` (empty otherwise): their rows must not be read (the window planner
        refuses them). See :func:`load_index`."""
        return self._broken

    @property
    def image_cameras(self) -> tuple[str, ...]:
        """The cameras whose frames are images stored per row (the last of :attr:`cameras`)."""
        return self._image_cameras

    def image_bytes(self, camera: str | int, row: int) -> bytes:
        """A copy of the encoded image (PNG or JPEG) of an image camera at one row."""
        return self._core.image_bytes(self._camera(camera), int(row))

    @property
    def video_files(self) -> tuple[str, ...]:
        """Every video file of every camera (absolute paths); ``v`` arguments index this."""
        return self._video_files

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(self._columns)

    def column_shape(self, name: str) -> tuple[int, ...]:
        """The shape of one row of a column, as :meth:`column` returns it: ``()`` for a scalar
        column, ``(dim,)`` for a vector feature."""
        if name not in self._columns:
            raise KeyError(f"the index has no column {name!r}; it has {sorted(self._columns)}")
        _, dim = self._columns[name]
        return () if dim == 1 else (dim,)

    @property
    def native(self) -> _core.EpisodeIndex:
        """The compiled index, which the native stages (the window planner, the Loader's
        threads) read: immutable and shared, it keeps the file mapped while referenced."""
        return self._core

    def stale_files(self) -> list[str]:
        """The dataset files changed or gone since the build; empty when the index is current."""
        return list(self._core.stale_files())

    # Lookups ---------------------------------------------------------------------------------

    def episode_of_row(self, row: int) -> int:
        """The episode (position in dataset order) of one row."""
        return self._core.episode_of_row(int(row))

    def frame_of_row(self, camera: str | int, row: int) -> int:
        """The frame of ``camera``'s video file (see :meth:`videos_of`) showing one row."""
        return self._core.frame_of_row(self._camera(camera), int(row))

    def episode_of_rows(self, rows) -> np.ndarray:
        """The episode of every row: int64 array shaped like ``rows``.

        Raises ``IndexError`` for a row outside ``[0, num_rows)``.
        """
        array = _rows(rows)
        return self._core.episode_of_rows(array.reshape(-1)).reshape(array.shape)

    def frames_of_rows(self, camera: str | int, rows) -> np.ndarray:
        """The frame showing every row in ``camera``'s video file of the row's episode."""
        array = _rows(rows)
        c = self._camera(camera)
        return self._core.frames_of_rows(c, array.reshape(-1)).reshape(array.shape)

    def episode_table(self) -> dict[str, np.ndarray]:
        """Per episode: ``from_row``, ``length`` and ``task`` (task index, -1 for none)."""
        from_row, length, task = self._core.episode_table()
        return {"from_row": from_row, "length": length, "task": task}

    def videos_of(self, camera: str | int) -> np.ndarray:
        """Per episode: the index in :attr:`video_files` of ``camera``'s file."""
        return self._core.videos_of(self._camera(camera))

    def first_frames(self, camera: str | int) -> np.ndarray:
        """Per episode: its first frame in ``camera``'s file (snapped, in packed files)."""
        return self._core.first_frames(self._camera(camera))

    def drifts(self, camera: str | int) -> np.ndarray:
        """Per episode: the first frame's pts minus the stated start, in seconds."""
        return self._core.drifts(self._camera(camera))

    def frame_table(self, video: int | str) -> bytes:
        """The saved frame table of a video file (by index or path), for
        ``stoker.VideoReader(path, frame_table=...)``, which then skips its scan."""
        if isinstance(video, (str, os.PathLike)):
            key = os.path.abspath(os.fspath(video))
            if key not in self._video_ids:
                raise KeyError(f"{key} is not a video file of this index")
            video = self._video_ids[key]
        return self._core.frame_table(int(video))

    def column(self, name: str) -> np.ndarray:
        """A low-dimensional column as a read-only, zero-copy view of the mapped file.

        [rows] for a scalar column, [rows, dim] for a vector feature, as
        :func:`stoker.datasets.lerobot.metadata.read_columns` returns it. The view keeps the
        index mapped.
        """
        shape = self.column_shape(name)
        view = cast(np.ndarray, self._core.column(name))
        return view.reshape(-1) if shape == () else view

    def __repr__(self) -> str:
        return (
            f"EpisodeIndex({self._path!r}, {self.num_episodes} episodes, {self.num_rows} "
            f"rows, cameras={list(self._cameras)})"
        )

    def _camera(self, camera: str | int) -> int:
        if isinstance(camera, str):
            if camera not in self._camera_ids:
                raise KeyError(f"unknown camera {camera!r}; the cameras are {list(self._cameras)}")
            return self._camera_ids[camera]
        if isinstance(camera, (int, np.integer)) and 0 <= camera < len(self._cameras):
            return int(camera)
        raise KeyError(f"unknown camera {camera!r}; the cameras are {list(self._cameras)}")


def _reopen_index(path: str, checksum: int, report: IndexReport | None):
    """A pickled :class:`EpisodeIndex` mapped again, if its file holds the same bytes (the
    checksum of its contents, checked when mapped)."""
    index = EpisodeIndex.open(path)
    if index.native.checksum != checksum:
        raise DatasetError(
            f"the index file {path} was rebuilt or replaced since this EpisodeIndex was "
            f"pickled (checksum {index.native.checksum:08x}, was {checksum:08x}): its rows and "
            "frames may differ; open the dataset again"
        )
    index._report = report
    return index


def default_cache_dir() -> str:
    """``$STOKER_CACHE_DIR``, or ``~/.cache/stoker``."""
    return os.environ.get("STOKER_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "stoker"
    )


def index_paths(
    root, cache_dir: str | None = None, cameras: Sequence[str] | None = None
) -> tuple[str, str]:
    """(the index file in the dataset folder, the one in the cache folder) of dataset ``root``,
    for ``cameras`` (default: every camera)."""
    root = os.path.abspath(os.fspath(root))
    digest = hashlib.sha256(root.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    cache = os.path.abspath(os.fspath(cache_dir)) if cache_dir is not None else default_cache_dir()
    name = f"index-v1{_cameras_tag(cameras)}.bin"
    return (
        os.path.join(root, ".stoker", name),
        os.path.join(cache, f"{os.path.basename(root) or 'root'}-{digest}", name),
    )


def _cameras_tag(cameras: Sequence[str] | None) -> str:
    """What an index file's name says of its cameras: nothing for every camera, else a hash of
    their names (in any order)."""
    if cameras is None:
        return ""
    names = "\0".join(sorted(cameras)).encode("utf-8", "surrogateescape")
    return "-cameras-" + hashlib.sha256(names).hexdigest()[:16]


def checked_cameras(cameras: Any) -> tuple[str, ...] | None:
    """``cameras`` as a tuple of names (None: every camera); refuses anything else by name."""
    if cameras is None:
        return None
    if isinstance(cameras, (str, bytes)):
        raise InvalidArgumentError(
            f"cameras must be a list of camera names, got the string {cameras!r}: "
            f"write cameras=[{cameras!r}]"
        )
    try:
        names = tuple(cameras)
    except TypeError:
        raise InvalidArgumentError(
            f"cameras must be a list of camera names, got {type(cameras).__name__}"
        ) from None
    for name in names:
        if not isinstance(name, str):
            raise InvalidArgumentError(
                f"cameras must be camera names (strings), got {name!r} ({type(name).__name__})"
            )
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise InvalidArgumentError(f"cameras lists {repeated} more than once")
    return names


def checked_on_error(on_error: Any) -> str:
    if on_error not in _ERROR_POLICIES:
        raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    return on_error


def indexed_cameras(meta: LeRobotMetadata, cameras: Sequence[str] | None) -> tuple[str, ...]:
    """The cameras an index of ``cameras`` (None: every camera) holds, in the dataset's order:
    video cameras, then image cameras. Raises :class:`stoker.InvalidArgumentError` for a name
    that is not a camera of the dataset."""
    every = (*meta.cameras, *image_cameras(meta))
    if cameras is None:
        return every
    unknown = [name for name in cameras if name not in every]
    if unknown:
        raise InvalidArgumentError(
            f"unknown cameras {unknown}: the cameras of {meta.root} are {list(every)}"
        )
    return tuple(name for name in every if name in cameras)


def listed(problems: Sequence[Any]) -> str:
    """One indented line per problem (the first 20, then how many more), for messages."""
    lines = [f"\n  {problem}" for problem in problems[:_LISTED]]
    if len(problems) > _LISTED:
        lines.append(f"\n  ... and {len(problems) - _LISTED} more")
    return "".join(lines)


def counted(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def load_index(
    root,
    *,
    rebuild: bool = False,
    threads: int | None = None,
    progress: Progress = True,
    cache_dir: str | None = None,
    tolerance_s: float = 1e-4,
    storage_options: Mapping[str, Any] | S3Options | None = None,
    cameras: Sequence[str] | None = None,
    on_error: str = "raise",
) -> EpisodeIndex:
    """The episode index of the LeRobot dataset in folder ``root``, built when needed.

    An existing index (in ``<root>/.stoker/`` or the cache folder) of the same cameras that is
    current is mapped and returned. Otherwise (none yet, a dataset file changed, an unreadable
    index file, or ``rebuild=True``) the metadata and columns are read, the cameras' videos are
    scanned, and the index is written to ``<root>/.stoker/``, or, when that folder cannot be
    created or written, to the cache folder.

    Args:
        root: the dataset folder, or its URL (``s3://bucket/prefix``, ``https://...``: the
            index then lives in ``cache_dir``, keyed by the objects' versions, see above).
        rebuild: build even when a current index exists.
        threads: threads scanning videos. Default: one per core.
        progress: True shows a progress bar on stderr while scanning and logs a one-line
            summary (build time, max drift) when built (INFO of the ``stoker`` logger: shown
            when the application shows INFO logs); False is silent; a callable is called with
            (done, total) after each video file.
        cache_dir: where indexes of read-only datasets go. Default: ``$STOKER_CACHE_DIR`` or
            ``~/.cache/stoker``; each dataset gets a subfolder named after its path's hash.
        tolerance_s: how far a frame's pts may sit from the time its row states (after
            snapping each episode's start), in seconds.
        storage_options: for a URL, see :mod:`stoker.io.storage`.
        cameras: the cameras (video or image features) to index, in any order; default every
            camera. Videos of the others are not scanned, so a broken one does not matter. The
            index of some cameras is a file of its own (see the module's notes).
        on_error: what an episode that some camera's video cannot serve does: ``"raise"``
            (default) refuses the index, naming every such episode, camera, file and why,
            and leaves no index file; ``"skip"`` returns the index with them recorded in
            :attr:`EpisodeIndex.broken_episodes` (the caller leaves them out, as
            :class:`stoker.LeRobotDataset` does). An index built under ``"skip"`` that
            recorded some is refused under ``"raise"`` when found later.

    Returns:
        The mapped :class:`EpisodeIndex`; its :attr:`~EpisodeIndex.report` tells what the
        build found when this call built it.

    Raises:
        stoker.DatasetError: a bad dataset (see :mod:`stoker.datasets.lerobot.metadata`), or
            (under ``on_error="raise"``) videos that do not match the rows: missing or
            unreadable files, fewer frames than rows, or frame times that do not match the row
            timestamps, naming the episode, camera and file.
        stoker.InvalidArgumentError: ``cameras`` names a camera the dataset does not have.
    """
    threads, cache_dir = checked_index_arguments(threads, progress, tolerance_s, cache_dir)
    cameras = checked_cameras(cameras)
    on_error = checked_on_error(on_error)
    if isinstance(root, Root) or is_url(root):
        source = open_dataset_root(root, storage_options)
        if source.remote:
            return load_remote_index(
                source,
                None,
                rebuild=rebuild,
                threads=threads,
                progress=progress,
                cache_dir=cache_dir,
                tolerance_s=tolerance_s,
                cameras=cameras,
                on_error=on_error,
            )
        root = source.location
    elif storage_options is not None:
        open_dataset_root(root, storage_options)  # refuses options for a local folder
    root = os.path.abspath(checked_path(root, "dataset folder"))
    if not os.path.isdir(root):
        raise DatasetError(f"dataset folder {root} does not exist")
    local, cached = index_paths(root, cache_dir, cameras)

    def current() -> EpisodeIndex | None:
        return _current_local_index(root, cache_dir, cameras)

    found = None if rebuild else current()
    if found is not None:
        return _applied(found, root, on_error)
    path = local if _writable_folder(os.path.dirname(local)) else cached
    if path == cached and not _writable_folder(os.path.dirname(cached)):
        raise DatasetError(
            f"cannot write the index of {root}: neither {os.path.dirname(local)} "
            f"nor the cache folder {os.path.dirname(cached)} is writable"
        )
    with _building(path, root, progress):
        if not rebuild:  # another process may have built it while this one waited
            found = current()
            if found is not None:
                return _applied(found, root, on_error)
        meta = read_lerobot_metadata(root)
        chosen = indexed_cameras(meta, cameras)
        names = _indexable_columns(meta)
        columns = read_columns(
            meta, list(dict.fromkeys([*names, "timestamp"])), tolerance_s=tolerance_s
        )
        index = _build_and_open(
            meta, chosen, columns, names, path, _tracked_files(meta), threads, progress, tolerance_s
        )
        if index.broken_episodes and on_error == "raise":
            _remove_index(path)  # a refused dataset leaves no index behind
        return _applied(index, root, on_error)


def checked_index_arguments(
    threads: Any, progress: Any, tolerance_s: Any, cache_dir: Any
) -> tuple[int, str | None]:
    """Refuses the arguments of :func:`load_index` that are not what it takes, as it does;
    returns (threads, 0 for the default; cache_dir, checked)."""
    if threads is None:
        threads = 0
    elif not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a positive integer or None, got {threads!r}")
    if not (progress is True or progress is False or callable(progress)):
        raise TypeError(f"progress must be a bool or a callable, got {progress!r}")
    if not tolerance_s >= 0:
        raise ValueError(f"tolerance_s must be non-negative, got {tolerance_s!r}")
    if cache_dir is not None:
        cache_dir = checked_path(cache_dir, "cache_dir")
    return threads, cache_dir


def _current_local_index(
    root: str, cache_dir: str | None, cameras: Sequence[str] | None
) -> EpisodeIndex | None:
    """The index of ``cameras`` (None: every camera) of the local dataset folder ``root``
    (absolute) that is current: in the dataset's ``.stoker/``, else in the cache folder; for
    cameras named, the full index is current too. None when there is none (or none readable)."""
    candidates = list(index_paths(root, cache_dir, cameras))
    # Every camera named is the full index's cameras: found there too when it is current.
    if cameras is not None:
        candidates += list(index_paths(root, cache_dir))
    for path in candidates:
        if not os.path.exists(path):
            continue
        try:
            index = EpisodeIndex.open(path)
        except DatasetError:
            continue  # unreadable (corrupted, another version): rebuilt by load_index
        if not index.stale_files() and _describes(index, root, cameras):
            return index
    return None


def current_index_and_metadata(
    root: str, cameras: Sequence[str] | None, cache_dir: Any = None
) -> tuple[EpisodeIndex, LeRobotMetadata] | None:
    """The current index of the local dataset folder ``root`` (absolute) for ``cameras`` (names,
    checked by :func:`checked_cameras`; None: every camera), as :func:`load_index` would map it,
    with the metadata its build read (:func:`metadata.attached_metadata`): a dataset opened
    again reads its info and tasks, stats its files and maps its index, but reads no episode
    table. None whenever that cannot be had, for the caller to read the metadata and call
    :func:`load_index` (which says what is wrong, if anything): no current index, a camera the
    dataset does not have, an argument :func:`load_index` would refuse, an index that attaches
    no metadata, or meta files that came or went since."""
    try:
        if cache_dir is not None:
            cache_dir = checked_path(cache_dir, "cache_dir")
        source = open_dataset_root(root)
        info = lerobot_format.read_info(source)
        chosen = _index_cameras(info, cameras)
        if chosen is False:
            return None
        index = _current_local_index(root, cache_dir, chosen)
        if index is None:
            return None
        meta = attached_metadata(index.native, source, info)
    except (_core.Error, OSError):  # whatever it is, the first open's way says it
        return None
    return (index, meta) if meta is not None else None


def _index_cameras(
    info: lerobot_format.Info, cameras: Sequence[str] | None
) -> tuple[str, ...] | None | Literal[False]:
    """The cameras (videos and image features, in info.json order) whose index serves
    ``cameras``: None for every camera's (the full index), False when one of ``cameras`` is
    not the dataset's."""
    images = [name for name, f in info.features.items() if f.dtype == "image"]
    every = (*info.cameras, *images)
    if cameras is None:
        return None
    if any(name not in every for name in cameras):
        return False
    picked = tuple(name for name in every if name in cameras)
    return None if picked == every else picked


def _applied(index: EpisodeIndex, root: str, on_error: str) -> EpisodeIndex:
    """``index``, or under ``on_error="raise"`` the refusal of one that holds broken episodes."""
    broken = index.broken_episodes
    if not broken or on_error == "skip":
        return index
    raise DatasetError(
        f"{counted(len({b.episode for b in broken}), 'episode')} of {root} cannot be read from "
        f"its videos:{listed(broken)}\nload_index(..., on_error='skip') returns the index with "
        "them in its broken_episodes, for the caller to leave out (as "
        "stoker.LeRobotDataset(..., on_error='skip') does); load_index(..., cameras=[...]) "
        "without their camera does not read its videos"
    )


def _remove_index(path: str) -> None:
    for name in (path, image_file_of(path)):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name)


@contextlib.contextmanager
def _building(path: str, dataset: str, progress: Progress) -> Iterator[None]:
    """Holds the build lock of the index at ``path`` (an exclusive ``flock`` of ``path +
    ".lock"``): of the processes that open a dataset at once (a job's ranks, on one node or on
    nodes sharing the cache folder), one builds its index and the others wait, then find it
    built and map it. A process that waits says so (with ``progress``)."""
    lock = open(path + ".lock", "a+b")  # noqa: SIM115 (held across the yield)
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if progress is True:
                logger.info("waiting for another process to finish indexing %s", dataset)
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield
    finally:
        lock.close()  # releases the lock


def load_remote_index(
    source: Root,
    meta: LeRobotMetadata | None,
    *,
    rebuild: bool = False,
    threads: int = 0,
    progress: Progress = True,
    cache_dir: str | None = None,
    tolerance_s: float = 1e-4,
    cameras: Sequence[str] | None = None,
    on_error: str = "raise",
) -> EpisodeIndex:
    """:func:`load_index` of a remote dataset (``meta``: its metadata, when already read).
    Arguments are checked by the caller."""
    if meta is None:
        meta = read_lerobot_metadata(source)
    chosen = indexed_cameras(meta, cameras)
    if chosen == indexed_cameras(meta, None):
        cameras = None  # every camera: the full index
    path = remote_index_path(source, meta.codebase_version, cache_dir, cameras)

    def current() -> EpisodeIndex | None:
        """The cached index, when current, the engine told of its objects' versions."""
        if os.path.exists(path):
            # An index that cannot be read (corrupted, another version) is rebuilt below.
            with contextlib.suppress(DatasetError):
                index = EpisodeIndex.open(path)
                if _describes(index, source.location, cameras):
                    remember_indexed_objects(index)
                    return index
        return None

    found = None if rebuild else current()
    if found is not None:
        return _applied(found, source.location, on_error)
    folder = os.path.dirname(path)
    if not _writable_folder(folder):
        raise DatasetError(
            f"cannot write the index of {source.location}: the cache folder {folder} "
            "is not writable"
        )
    with _building(path, source.location, progress):
        found = None if rebuild else current()
        if found is not None:
            return _applied(found, source.location, on_error)
        names = _indexable_columns(meta)
        columns = read_columns(
            meta, list(dict.fromkeys([*names, "timestamp"])), tolerance_s=tolerance_s
        )
        # No file is tracked for the engine to stat: the key (the meta files' versions) and the
        # objects' versions the index records say what changed. Scanning remote videos waits on
        # the store's latency more than on the cores.
        scans = threads or _REMOTE_SCANS
        index = _build_and_open(
            meta,
            chosen,
            columns,
            names,
            path,
            [],
            scans,
            progress,
            tolerance_s,
            attached=_object_attachments(source, meta),
        )
        remember_indexed_objects(index)
        if index.broken_episodes and on_error == "raise":
            _remove_index(path)
    kept = {os.path.basename(f) for f in (path, image_file_of(path), path + ".lock")}
    tag = _cameras_tag(cameras)
    for other in os.listdir(folder):  # indexes of older versions of the objects
        if _remote_index_tag(other) == tag and other not in kept:
            try:
                os.unlink(os.path.join(folder, other))
            except OSError:
                pass
    return _applied(index, source.location, on_error)


def _remote_index_tag(name: str) -> str | None:
    """The cameras tag of a remote index file's name (and of its side and lock files):
    ``index-v1<tag>-<key>...``; None for a name that is not one."""
    if not name.startswith("index-v1-"):
        return None
    if name.startswith("index-v1-cameras-"):
        return name[len("index-v1") : len("index-v1-cameras-") + 16]
    return ""


# Remote videos scanned at once by a remote dataset's index build, unless threads= says.
_REMOTE_SCANS = 16


def remote_index_path(
    source: Root,
    codebase_version: str,
    cache_dir: str | None = None,
    cameras: Sequence[str] | None = None,
) -> str:
    """Where the index of ``cameras`` (default: every camera) of remote dataset ``source`` in
    its present state is cached: keyed by its URL and the size and version tag of each of its
    meta files (info.json, the tasks, the episode table's files), learned from the listing of
    its ``meta/`` folder (:meth:`Root.versions`): a few requests whatever the number of videos.

    The meta files say which data and video files there are and what they hold (each episode's
    rows, timestamps and statistics), so a dataset that gains, loses or rewrites episodes gets
    a new key. The index records the size and ETag of every data and video file it was built
    from (:func:`remember_indexed_objects`): a video rewritten in place under unchanged meta
    files is refused by name at its first read, never decoded against a stale index."""
    objects = lerobot_format.meta_files(source, codebase_version)
    versions = source.versions(objects)
    key = hashlib.sha256(f"{source.location}\0meta-files".encode())
    for url, (size, tag) in zip(objects, versions):
        key.update(f"\n{url}\0{size}\0{tag}".encode("utf-8", "surrogateescape"))
    url_digest = hashlib.sha256(source.location.encode("utf-8")).hexdigest()[:16]
    name = source.location.rstrip("/").rsplit("/", 1)[-1] or "root"
    cache = os.path.abspath(cache_dir) if cache_dir is not None else default_cache_dir()
    return os.path.join(
        cache,
        "index",
        f"{name}-{url_digest}",
        f"index-v1{_cameras_tag(cameras)}-{key.hexdigest()[:32]}.bin",
    )


# What a remote index attaches of the objects it was built from: every data and video file's
# URL, size and ETag (see remember_indexed_objects).
_OBJECTS = "remote/objects"
_OBJECT_SIZES = "remote/object_sizes"
_OBJECT_TAGS = "remote/object_etags"


def _object_attachments(
    source: Root, meta: LeRobotMetadata
) -> tuple[list[tuple[str, np.ndarray]], list[tuple[str, list[str]]]]:
    """The size and ETag of every data and video file of ``meta``, as index attachments: from
    the listings of the data and video folders (a request per 1,000 objects, at the build)."""
    # A video in a Lance table is a slice of a file: the file is the object.
    objects = sorted({*map(whole_file, _video_files(meta)), *stored_data_files(meta)})
    versions = source.versions(objects)
    sizes = np.array([size for size, _ in versions], dtype=np.int64)
    return [(_OBJECT_SIZES, sizes)], [(_OBJECTS, objects), (_OBJECT_TAGS, [t for _, t in versions])]


def remember_indexed_objects(index: EpisodeIndex) -> None:
    """Tells the engine the size and ETag that each data and video file of remote index
    ``index`` had when it was built, so that it opens them without a HEAD each and reads them
    with ``If-Match``: one rewritten since is refused by name as a changed object. Nothing for
    an index that attaches none (a local one)."""
    try:
        objects = index.native.attached_strings(_OBJECTS)
        tags = index.native.attached_strings(_OBJECT_TAGS)
        sizes = index.native.attached_array(_OBJECT_SIZES)
    except KeyError:
        return
    _core.remember_objects(objects, np.ascontiguousarray(sizes, np.int64), tags)


def current_remote_index_and_metadata(
    source: Root, cameras: Sequence[str] | None, cache_dir: str | None = None
) -> tuple[EpisodeIndex, LeRobotMetadata] | None:
    """:func:`current_index_and_metadata` of a remote dataset: its cached index, when one is
    current (the meta files unchanged), with the metadata the build read, and the engine told
    of the objects' versions (:func:`remember_indexed_objects`). A warm open so reads info.json,
    the tasks and the listing of ``meta/``, whatever the number of objects. None whenever that
    cannot be had, for the caller to read the metadata and call :func:`load_remote_index`."""
    try:
        info = lerobot_format.read_info(source)
        chosen = _index_cameras(info, cameras)
        if chosen is False:
            return None
        path = remote_index_path(source, info.codebase_version, cache_dir, chosen)
        if not os.path.exists(path):
            return None
        index = EpisodeIndex.open(path)
        if not _describes(index, source.location, chosen):
            return None
        meta = attached_metadata(index.native, source, info)
        if meta is None:
            return None
        remember_indexed_objects(index)
    except (_core.Error, OSError):  # whatever it is, the first open's way says it
        return None
    return index, meta


def _build_and_open(
    meta: LeRobotMetadata,
    cameras: tuple[str, ...],
    columns: dict[str, np.ndarray],
    names: list[str],
    path: str,
    tracked: list[str],
    threads: int,
    progress: Progress,
    tolerance_s: float,
    attached: tuple[list[tuple[str, np.ndarray]], list[tuple[str, list[str]]]] = ([], []),
) -> EpisodeIndex:
    """Builds the index at ``path`` and maps it; ``attached``: (arrays, string lists) it keeps
    besides the metadata's."""
    timestamp = columns["timestamp"].astype(np.float64)
    report = _build(
        meta,
        cameras,
        timestamp,
        {name: columns[name] for name in names},
        path,
        tracked,
        threads,
        progress,
        tolerance_s,
        attached,
    )
    index = EpisodeIndex.open(path)
    index._report = report
    if progress is True:
        broken = len({b.episode for b in index.broken_episodes})
        left_out = f"; {counted(broken, 'episode')} its videos cannot serve" if broken else ""
        logger.info(
            "indexed %d episodes of %s: %s%s",
            meta.num_episodes,
            meta.root,
            report.summary(),
            left_out,
        )
    return index


# ---------------------------------------------------------------------------------------------
# Building


def _indexable_columns(meta: LeRobotMetadata) -> list[str]:
    """Every fixed-length numeric column of float32, float64 or int64 values."""
    return [name for name, (dtype, _) in readable_columns(meta).items() if dtype in _INDEXED_DTYPES]


def _tracked_files(meta: LeRobotMetadata) -> list[str]:
    """The meta files the metadata was read from, and every file holding the data's rows."""
    return lerobot_format.meta_files(meta.source, meta.codebase_version) + stored_data_files(meta)


def _video_files(meta: LeRobotMetadata) -> list[str]:
    """Every camera's video files, camera after camera, as a full index numbers them."""
    return [str(p) for camera in meta.cameras for p in meta.videos[camera].files]


def image_file_of(index_path: str) -> str:
    """The side file holding the images of the index at ``index_path``."""
    base = index_path[:-4] if index_path.endswith(".bin") else index_path
    return base + ".images.bin"


def _write_images(meta: LeRobotMetadata, cameras: tuple[str, ...], path: str) -> list[tuple]:
    """Writes every row's image of every image camera to ``path`` (atomically) and returns, per
    camera, (name, offset, length) of each row's image in it."""
    located = []
    partial = f"{path}.part-{os.getpid()}"
    try:
        with open(partial, "wb") as out:
            position = 0
            for camera in cameras:
                offset = np.empty(meta.num_frames, np.int64)
                length = np.empty(meta.num_frames, np.int64)
                for f in range(len(meta.data_files)):
                    start = int(meta.data_file_from_index[f])
                    lengths, buffers = read_image_column(meta, f, camera)
                    stop = start + len(lengths)
                    length[start:stop] = lengths
                    offset[start:stop] = position + np.concatenate(([0], np.cumsum(lengths)[:-1]))
                    for buffer in buffers:
                        out.write(memoryview(buffer))
                    position += int(lengths.sum())
                located.append((camera, offset, length))
        os.replace(partial, path)
    except BaseException:
        if os.path.exists(partial):
            os.unlink(partial)
        raise
    return located


def _build(
    meta: LeRobotMetadata,
    cameras: tuple[str, ...],
    timestamp: np.ndarray,
    columns: dict[str, np.ndarray],
    path: str,
    tracked: list[str],
    threads: int,
    progress: Progress,
    tolerance_s: float,
    attached: tuple[list[tuple[str, np.ndarray]], list[tuple[str, list[str]]]],
) -> IndexReport:
    video_files: list[str] = []
    video_cameras = [camera for camera in meta.cameras if camera in cameras]
    episode_video = np.zeros((len(video_cameras), meta.num_episodes), np.int64)
    episode_offset = np.zeros((len(video_cameras), meta.num_episodes), np.float64)
    for c, camera in enumerate(video_cameras):
        videos = meta.videos[camera]
        episode_video[c] = videos.file_index.astype(np.int64) + len(video_files)
        episode_offset[c] = videos.from_timestamp
        video_files.extend(str(p) for p in videos.files)

    images = tuple(camera for camera in image_cameras(meta) if camera in cameras)
    image_file = image_file_of(path) if images else ""
    located = _write_images(meta, images, image_file) if images else []
    if images:
        tracked = [*tracked, image_file]

    if progress is True:
        callback: Callable[[int, int], None] | None = (
            ProgressBar("indexing videos") if video_files else None
        )
    elif progress is False:
        callback = None
    else:
        callback = progress
    attached_arrays, attached_strings = metadata_attachments(meta)
    attached_arrays += attached[0]
    attached_strings += attached[1]
    try:
        result = _core.build_episode_index(
            path,
            fps=float(meta.fps),
            episode_from_row=np.ascontiguousarray(meta.dataset_from_index, np.int64),
            episode_length=np.ascontiguousarray(meta.length, np.int64),
            episode_task=np.ascontiguousarray(meta.task_index, np.int64),
            row_timestamp=timestamp,
            cameras=video_cameras,
            video_files=video_files,
            episode_video=episode_video,
            episode_video_offset=episode_offset,
            columns=[(name, np.ascontiguousarray(values)) for name, values in columns.items()],
            tracked_files=tracked,
            tolerance_s=float(tolerance_s),
            threads=int(threads),
            progress=callback,
            image_cameras=located,
            image_file=image_file,
            keep_broken_episodes=True,
            attached_arrays=attached_arrays,
            attached_strings=attached_strings,
        )
    finally:
        if isinstance(callback, ProgressBar):
            callback.close()
    return IndexReport(
        seconds=result["seconds"], video_files=tuple(video_files), max_drift_s=result["max_drift_s"]
    )


def _describes(index: EpisodeIndex, root: str, cameras: Sequence[str] | None) -> bool:
    """False for an index of another folder (a dataset copied or moved with its .stoker/): its
    absolute paths name the original's files (videos, the side file of images), which may well
    be unchanged. False too for an index of other cameras than ``cameras`` (a file renamed or
    swapped by hand: the name says which cameras, this checks them)."""
    if cameras is not None and set(index.cameras) != set(cameras):
        return False
    prefix = root.rstrip("/") + "/" if is_url(root) else os.path.join(root, "")
    images = index.native.image_file
    # The side file of images lies beside its own index; a copied index names the original's.
    return all(path.startswith(prefix) for path in index.video_files) and (
        not images or images == image_file_of(index.path)
    )


def _writable_folder(folder: str) -> bool:
    """Creates ``folder`` if needed and checks that a file can be created in it."""
    try:
        os.makedirs(folder, exist_ok=True)
        probe = os.path.join(folder, f".write-probe-{os.getpid()}")
        with open(probe, "wb"):
            pass
        os.unlink(probe)
        return True
    except OSError:
        return False


def _rows(rows) -> np.ndarray:
    array = np.asarray(rows)
    if array.size and array.dtype.kind not in "iu":
        raise TypeError(f"rows must be integers, got dtype {array.dtype}")
    return np.ascontiguousarray(array, dtype=np.int64)
