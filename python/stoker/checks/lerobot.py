"""The LeRobot checks of ``stoker check``: episodes, cameras, metadata and (``deep``) decoding.

:func:`check_lerobot` reads a LeRobot dataset (v2.0, v2.1 or v3.0; local, ``s3://`` or
``https://``) leniently, so that one problem does not hide the others: every meta file, the
episode and task tables, the data files' schemas and columns, and every video's frame table.
The frame tables come from stoker's episode index when it builds (nothing is scanned twice; an
index already built is mapped), else from one scan of each video, on all cores. Each problem
becomes a :class:`~stoker.checks.findings.Finding` naming the episode, the camera and the frame
or row where it matters, what was expected and found, and what to do; docs/check.md lists the
checks and their severities.

The checks compare whole numpy columns (per episode at most, never per row in Python); with
``deep``, :meth:`stoker.VideoReader.verify` decodes every video in C++, one video per thread of
a pool as wide as the usable cores, and every image of an image feature is decoded too.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from stoker import _core
from stoker._core import DatasetError
from stoker.checks.findings import CheckReport, Finding
from stoker.datasets.lerobot import format as lerobot_format
from stoker.datasets.lerobot import lance_layout
from stoker.datasets.lerobot.format import Feature, Info
from stoker.io.storage import Root, open_dataset_root
from stoker.progress import ProgressBar

__all__ = ["CHECKS", "DEFAULT_TOLERANCE_S", "check_lerobot"]

#: LeRobot's default ``tolerance_s``: how far a frame may sit from its row's time.
DEFAULT_TOLERANCE_S = 1e-4

#: Every check of this module, in the order they run (docs/check.md describes each).
CHECKS = (
    "info",
    "files",
    "episodes",
    "counts",
    "tasks",
    "rows",
    "timestamps",
    "features",
    "videos",
    "fps",
    "missing_frames",
    "duplicate_frames",
    "extra_frames",
    "overlapping_episodes",
    "camera_offsets",
    "drift",
    "stats",
    "stats_consistency",
    "index",
)
DEEP_CHECKS = ("decode", "frame_format", "packets", "images")

# Findings of one kind listed one by one before the rest are summed up in one more.
_MAX_FINDINGS_PER_CHECK = 50
# Relative difference of a video's frame rate from info.json's that is an error.
_FPS_TOLERANCE = 0.01
# A consecutive frame pair differing by less than this share of the episode's median
# difference (in luma levels) is the same picture twice.
_DUPLICATE_SHARE = 0.05
# Per-episode statistics compared with the data for at most this many episodes.
_STATS_SAMPLE_EPISODES = 20
# Statistics within the rounding of LeRobot's own computation agree with the data (_compare):
# its per-episode mean and sqrt(E[x²] - E[x]²) sum the rows one by one in the data's float
# type, so their error grows with the episode's length n. Running LeRobot's get_feature_stats
# and aggregate_stats on float32 features (up to 20,000 rows an episode, offsets up to 1e5,
# some constant) stays within 0.62·n eps of the mean's magnitude and of E[x²]; this allows
# 16 + 2n.
_ROUNDING_ULPS = 16
_ROUNDING_ULPS_PER_ROW = 2
# A stated std this many times below the data's (LeRobot normalizes by std + 1e-8) makes the
# normalized feature that many times wider than it should be: a warning even when rounding
# explains it.
_AMPLIFIED = 100.0


# ---------------------------------------------------------------------------------------------
# The run: where findings go


class _Run:
    """One check: the dataset's root, the options, and the findings so far."""

    def __init__(self, report: CheckReport, tolerance_s: float, progress: bool, deep: bool):
        self.report = report
        self.tolerance_s = tolerance_s
        self.progress = progress
        self.deep = deep
        self._counts: dict[str, int] = {}

    def add(self, severity: str, check: str, message: str, fix: str = "", **where: Any) -> None:
        """Adds a finding; past _MAX_FINDINGS_PER_CHECK of one check, only counts them."""
        count = self._counts.get(check, 0) + 1
        self._counts[check] = count
        if count <= _MAX_FINDINGS_PER_CHECK:
            self.report.findings.append(Finding(severity, check, message, fix, **where))

    def close(self) -> None:
        for check, count in self._counts.items():
            if count > _MAX_FINDINGS_PER_CHECK:
                worst = min(
                    (f.severity for f in self.report.findings if f.check == check),
                    key=("error", "warning", "info").index,
                )
                self.report.findings.append(
                    Finding(
                        worst,
                        check,
                        f"{count - _MAX_FINDINGS_PER_CHECK} more findings of this check are "
                        f"not listed ({count} in all)",
                        "fix the ones listed and check again",
                    )
                )

    def has_errors(self, checks: Iterable[str] | None = None) -> bool:
        wanted = None if checks is None else set(checks)
        return any(
            f.severity == "error" and (wanted is None or f.check in wanted)
            for f in self.report.findings
        )


# ---------------------------------------------------------------------------------------------
# What the metadata says, read leniently


@dataclass
class _Camera:
    """Where one video camera's episodes are: ``files`` (distinct, in dataset order), each
    episode's file number and stated start in it (``from_timestamp``, as the table says: NaN
    stays NaN, as the index build sees it)."""

    name: str
    files: list[str]
    file_of: np.ndarray  # int64 [E], -1 when the metadata does not say
    from_timestamp: np.ndarray  # float64 [E]


@dataclass
class _Meta:
    root: str
    source: Root
    info: Info
    episodes_table: pa.Table  # sorted by episode_index
    episode_index: np.ndarray  # int64 [E], sorted
    length: np.ndarray  # int64 [E]
    from_row: np.ndarray  # int64 [E]: first row, in dataset order
    task_texts: np.ndarray | None  # str [T] by task_index ("" where undefined); None: unreadable
    data_files: list[str]
    data_file_of: np.ndarray  # int64 [E]
    cameras: list[_Camera]
    image_cameras: tuple[str, ...]
    missing_data: set[str] = field(default_factory=set)
    missing_videos: set[str] = field(default_factory=set)

    @property
    def num_episodes(self) -> int:
        return len(self.episode_index)

    @property
    def num_rows(self) -> int:
        return int(self.length.sum()) if len(self.length) else 0

    def relative(self, path: str) -> str:
        prefix = self.root.rstrip("/") + "/"
        return path[len(prefix) :] if path.startswith(prefix) else path


def _listing(values: Iterable[Any], limit: int = 10) -> str:
    items = [str(v) for v in values]
    text = ", ".join(items[:limit])
    return text + (f" and {len(items) - limit} more" if len(items) > limit else "")


def _read_meta(run: _Run, source: Root) -> _Meta | None:
    """The metadata as far as it can be read; None when too little is readable to go on."""
    info_path = source.url(lerobot_format.INFO_PATH)
    try:
        info = lerobot_format.read_info(source)
    except (DatasetError, OSError, ValueError) as e:
        run.add(
            "error",
            "info",
            f"meta/info.json cannot be read: {e}",
            "restore meta/info.json (LeRobot writes it with codebase_version, fps, features, "
            "data_path and video_path)",
            file=info_path,
        )
        return None
    version = info.codebase_version
    where = lerobot_format.episodes_location(source, version)
    try:
        table = lerobot_format.read_episode_table(source, version)
    except (DatasetError, OSError, ValueError, pa.ArrowException) as e:
        run.add(
            "error",
            "files",
            f"the episode table cannot be read: {e}",
            "restore the episode table (meta/episodes.jsonl in v2.1, meta/episodes/ in v3.0)",
            file=where,
        )
        return None
    for name in ("episode_index", "length"):
        if name not in table.column_names or table.column(name).null_count == table.num_rows:
            run.add(
                "error",
                "episodes",
                f"the episode table has no {name!r} column",
                "rewrite the episode table with LeRobot's columns",
                file=where,
                field=name,
            )
            return None
    if table.num_rows == 0:
        run.add("error", "episodes", "the episode table lists no episodes", "", file=where)
        return None
    table = table.sort_by("episode_index")
    try:
        episode_index = lerobot_format.int_column(table, "episode_index", where)
        length = lerobot_format.int_column(table, "length", where)
    except DatasetError as e:
        run.add("error", "episodes", str(e), "rewrite the episode table", file=where)
        return None

    # Episode numbers: distinct, and 0, 1, ... (LeRobot v3.0 addresses episodes by position).
    repeated = np.flatnonzero(np.diff(episode_index) == 0) + 1
    for k in repeated:
        run.add(
            "error",
            "episodes",
            f"episode_index {episode_index[k]} is listed more than once; the repeat is ignored",
            "remove the duplicate row from the episode table",
            episode=int(episode_index[k]),
            file=where,
        )
    if repeated.size:
        keep = np.ones(len(episode_index), bool)
        keep[repeated] = False
        table = table.filter(pa.array(keep))
        episode_index, length = episode_index[keep], length[keep]
    expected = np.arange(len(episode_index))
    if np.any(episode_index != expected):
        gaps = np.setdiff1d(np.arange(int(episode_index.max()) + 1), episode_index)
        severity = "error" if version == "v3.0" else "warning"
        run.add(
            severity,
            "episodes",
            f"episode indices are not contiguous: {len(gaps)} missing ({_listing(gaps)})"
            + (
                "; LeRobot v3.0 reads episode e at position e of the table, so every episode "
                "after the gap reads another's rows and videos"
                if version == "v3.0"
                else ""
            ),
            "renumber the episodes 0, 1, ... (meta files, data files and videos together), or "
            "restore the missing ones",
            expected=f"0..{len(episode_index) - 1}",
            found=f"{len(gaps)} missing: {_listing(gaps)}",
            episode=int(gaps[0]) if gaps.size else None,
            file=where,
        )
    for k in np.flatnonzero(length <= 0):
        run.add(
            "error" if length[k] < 0 else "warning",
            "episodes",
            f"episode {episode_index[k]} has length {length[k]}",
            "drop the episode or restore its rows",
            episode=int(episode_index[k]),
            file=where,
            expected="at least 1 row",
            found=int(length[k]),
        )
    length = np.maximum(length, 0)
    from_row = np.zeros(len(length), np.int64)
    np.cumsum(length[:-1], out=from_row[1:])
    if version == "v3.0":
        _check_row_ranges(run, table, episode_index, length, from_row, where)

    task_texts = _read_tasks(run, source, version, table, episode_index)
    data_files, data_file_of = _data_files(run, source, info, table, episode_index, where)
    if data_files is None:
        return None
    cameras = []
    for camera in info.cameras:
        located = _camera_files(run, source, info, table, episode_index, camera, where)
        if located is None:
            return None
        cameras.append(located)
    meta = _Meta(
        root=source.location,
        source=source,
        info=info,
        episodes_table=table,
        episode_index=episode_index,
        length=length,
        from_row=from_row,
        task_texts=task_texts,
        data_files=data_files,
        data_file_of=data_file_of,
        cameras=cameras,
        image_cameras=tuple(n for n, f in info.features.items() if f.dtype == "image"),
    )
    _check_files_present(run, meta)
    _check_counts(run, meta)
    return meta


def _check_row_ranges(run, table, episode_index, length, from_row, where) -> None:
    for name in ("dataset_from_index", "dataset_to_index"):
        if name not in table.column_names or table.column(name).null_count:
            run.add(
                "error",
                "episodes",
                f"the episode table lacks {name!r}",
                "rewrite the episode table",
                file=where,
                field=name,
            )
            return
    start = lerobot_format.int_column(table, "dataset_from_index", where)
    stop = lerobot_format.int_column(table, "dataset_to_index", where)
    for k in np.flatnonzero((start != from_row) | (stop != start + length)):
        run.add(
            "error",
            "episodes",
            f"episode {episode_index[k]}'s row range [{start[k]}, {stop[k]}) does not follow "
            f"the episodes before it and its length {length[k]}",
            "set dataset_from_index / dataset_to_index to the running sum of the lengths",
            episode=int(episode_index[k]),
            expected=f"[{from_row[k]}, {from_row[k] + length[k]})",
            found=f"[{start[k]}, {stop[k]})",
            file=where,
        )


def _read_tasks(run, source, version, table, episode_index) -> np.ndarray | None:
    tasks_file = lerobot_format.TASKS_PATH if version == "v3.0" else lerobot_format.V21_TASKS_PATH
    try:
        texts, _ = lerobot_format.read_tasks(source, version)
    except (DatasetError, OSError, ValueError, pa.ArrowException) as e:
        run.add(
            "error",
            "files",
            f"the tasks table cannot be read: {e}",
            f"restore {tasks_file}",
            file=source.url(tasks_file),
        )
        return None
    lists = lerobot_format.task_lists(table).to_pylist()
    known = {str(t) for t in texts if t != ""}
    for episode, names in zip(episode_index, lists):
        unknown = [name for name in (names or []) if name not in known]
        if unknown:
            run.add(
                "error",
                "tasks",
                f"episode {episode} names tasks the tasks table does not define: {unknown}",
                f"add the tasks to {tasks_file}, or correct the episode's tasks",
                episode=int(episode),
                expected=f"one of the {len(known)} tasks of {tasks_file}",
                found=unknown,
            )
    return texts


def _data_files(run, source, info, table, episode_index, where):
    if info.storage_format == "lance":  # one frames table holds every row
        return [source.url(lance_layout.FRAMES_TABLE)], np.zeros(len(episode_index), np.int64)
    if info.codebase_version != "v3.0":
        try:
            paths = lerobot_format.format_paths(
                source,
                info.data_path,
                "data_path",
                episode_chunk=episode_index // info.chunks_size,
                episode_index=episode_index,
            )
        except DatasetError as e:
            run.add("error", "info", str(e), "correct data_path in meta/info.json")
            return None, None
        return [str(p) for p in paths], np.arange(len(paths), dtype=np.int64)
    for name in ("data/chunk_index", "data/file_index"):
        if name not in table.column_names or table.column(name).null_count:
            run.add(
                "error",
                "episodes",
                f"the episode table lacks {name!r}: which data file holds an episode is unknown",
                "rewrite the episode table",
                file=where,
                field=name,
            )
            return None, None
    number = lerobot_format.int_column(
        table, "data/chunk_index", where
    ) * info.chunks_size + lerobot_format.int_column(table, "data/file_index", where)
    distinct, first, group = np.unique(number, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")  # files in the order their episodes come
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    data_file_of = rank[group.reshape(-1)].astype(np.int64)
    for k in np.flatnonzero(np.diff(data_file_of) < 0) + 1:
        run.add(
            "error",
            "episodes",
            f"episode {episode_index[k]} lies in a data file before the previous episode's",
            "rewrite the data files with episodes in order",
            episode=int(episode_index[k]),
            file=where,
        )
    ordered = distinct[order]
    try:
        paths = lerobot_format.format_paths(
            source,
            info.data_path,
            "data_path",
            chunk_index=ordered // info.chunks_size,
            file_index=ordered % info.chunks_size,
        )
    except DatasetError as e:
        run.add("error", "info", str(e), "correct data_path in meta/info.json")
        return None, None
    return [str(p) for p in paths], data_file_of


def _camera_files(run, source, info, table, episode_index, camera, where) -> _Camera | None:
    if info.codebase_version != "v3.0":
        try:
            paths = lerobot_format.format_paths(
                source,
                str(info.video_path),
                "video_path",
                episode_chunk=episode_index // info.chunks_size,
                episode_index=episode_index,
                video_key=camera,
            )
        except DatasetError as e:
            run.add("error", "info", str(e), "correct video_path in meta/info.json")
            return None
        return _Camera(
            camera,
            [str(p) for p in paths],
            np.arange(len(paths), dtype=np.int64),
            np.zeros(len(paths)),
        )
    columns = [f"videos/{camera}/{f}" for f in ("chunk_index", "file_index", "from_timestamp")]
    file_of = np.full(len(episode_index), -1, np.int64)
    from_timestamp = np.zeros(len(episode_index))
    if any(c not in table.column_names for c in columns):
        run.add(
            "error",
            "episodes",
            f"the episode table has no {', '.join(columns)} columns: where camera {camera!r}'s "
            "episodes are is unknown",
            "rewrite the episode table with the camera's video columns",
            camera=camera,
            file=where,
        )
        return _Camera(camera, [], file_of, from_timestamp)
    chunk = table.column(columns[0]).to_numpy(zero_copy_only=False)
    number = table.column(columns[1]).to_numpy(zero_copy_only=False)
    start = table.column(columns[2]).to_numpy(zero_copy_only=False)
    present = ~(
        np.isnan(np.asarray(chunk, np.float64))
        | np.isnan(np.asarray(number, np.float64))
        | np.isnan(np.asarray(start, np.float64))
    )
    for k in np.flatnonzero(~present):
        run.add(
            "error",
            "files",
            f"episode {episode_index[k]} has no video of camera {camera!r} in the episode table",
            "record or restore the camera's video for this episode, or drop the episode",
            episode=int(episode_index[k]),
            camera=camera,
            file=where,
        )
    numbers = np.where(present, np.nan_to_num(chunk) * info.chunks_size + np.nan_to_num(number), -1)
    numbers = numbers.astype(np.int64)
    distinct = np.unique(numbers[present])
    try:
        paths = (
            lerobot_format.format_paths(
                source,
                str(info.video_path),
                "video_path",
                chunk_index=distinct // info.chunks_size,
                file_index=distinct % info.chunks_size,
                video_key=camera,
            )
            if distinct.size
            else np.array([], dtype=str)
        )
    except DatasetError as e:
        run.add("error", "info", str(e), "correct video_path in meta/info.json")
        return None
    if info.storage_format == "lance" and distinct.size:  # the MP4s are blobs of videos.lance
        keys = [(camera, int(n // info.chunks_size), int(n % info.chunks_size)) for n in distinct]
        try:
            slices = lance_layout.video_slices(source, keys)
        except DatasetError as e:
            run.add(
                "error",
                "files",
                str(e),
                "convert the v3.0 dataset again with lerobot-lance-convert",
                camera=camera,
                file=source.url(lance_layout.VIDEOS_TABLE),
            )
            return None
        paths = np.array([slices[key] for key in keys], dtype=str)
    file_of[present] = np.searchsorted(distinct, numbers[present])
    from_timestamp[present] = np.asarray(start, np.float64)[present]
    bad = present & ~np.isfinite(from_timestamp)
    for k in np.flatnonzero(bad):
        run.add(
            "error",
            "episodes",
            f"episode {episode_index[k]}, camera {camera!r}: from_timestamp is {start[k]}",
            "set from_timestamp to the episode's start in its video file",
            episode=int(episode_index[k]),
            camera=camera,
            field=columns[2],
        )
    return _Camera(camera, [str(p) for p in paths], file_of, from_timestamp)


def _exists(source: Root, path: str) -> bool:
    if path.endswith(".lance"):  # a Lance table (a folder of files)
        return lance_layout.table_opens(source, path)
    path = lance_layout.whole_file(path)  # a video in a Lance table: the file holding it
    try:
        if not source.remote:
            return os.path.isfile(path) and os.path.getsize(path) > 0
        return source.size(path) > 0
    except (OSError, DatasetError):
        return False


def _parallel(function: Callable[[Any], Any], items: Sequence[Any], remote: bool) -> list[Any]:
    """function(item) for every item, on a pool: one thread per usable core locally, 32
    requests in flight for a remote dataset (they wait on latency, not on the cores)."""
    if len(items) < 2:
        return [function(item) for item in items]
    threads = 32 if remote else _core.usable_cores()
    with ThreadPoolExecutor(max_workers=min(len(items), threads)) as pool:
        return list(pool.map(function, items))


def _check_files_present(run: _Run, meta: _Meta) -> None:
    remote = meta.source.remote

    def absent(files: Sequence[str], file_of: np.ndarray):
        """(path, its episodes) of each file of ``files`` that is missing or empty."""
        present = _parallel(lambda p: _exists(meta.source, p), files, remote)
        for f, ok in enumerate(present):
            if not ok:
                yield files[f], meta.episode_index[file_of == f]

    def plural(episodes: np.ndarray) -> str:
        return f"episode{'s' if len(episodes) > 1 else ''} {_listing(episodes)}"

    for path, episodes in absent(meta.data_files, meta.data_file_of):
        meta.missing_data.add(path)
        run.add(
            "error",
            "files",
            f"data file {meta.relative(path)} is missing or empty: the rows of "
            f"{plural(episodes)} are lost",
            "restore the file, or drop its episodes from the metadata",
            episode=int(episodes[0]) if len(episodes) else None,
            file=path,
        )
    for camera in meta.cameras:
        for path, episodes in absent(camera.files, camera.file_of):
            meta.missing_videos.add(path)
            run.add(
                "error",
                "files",
                f"video file {meta.relative(path)} of camera {camera.name!r} is missing or empty"
                f" ({plural(episodes)})",
                "restore the video, or drop its episodes",
                episode=int(episodes[0]) if len(episodes) else None,
                camera=camera.name,
                file=path,
            )


def _check_counts(run: _Run, meta: _Meta) -> None:
    raw = meta.info.raw
    info_file = meta.source.url(lerobot_format.INFO_PATH)
    defined = int(np.count_nonzero(meta.task_texts != "")) if meta.task_texts is not None else -1
    counts = [
        ("total_episodes", meta.num_episodes, "error", "episodes in the episode table"),
        ("total_frames", meta.num_rows, "error", "rows the episodes' lengths add up to"),
        ("total_tasks", defined, "warning", "tasks in the tasks table"),
    ]
    if meta.info.codebase_version != "v3.0" and "total_videos" in raw:
        counts.append(
            (
                "total_videos",
                meta.num_episodes * len(meta.cameras),
                "warning",
                "episodes x video cameras",
            )
        )
    for name, actual, severity, what in counts:
        if name not in raw or actual < 0:  # a table that could not be read: said already
            continue
        stated = raw[name]
        if stated != actual:
            run.add(
                severity,
                "counts",
                f"info.json says {name} {stated}, the dataset has {actual} ({what})"
                + (
                    "; LeRobot sizes the dataset by it"
                    if name in ("total_episodes", "total_frames")
                    else ""
                ),
                f"set {name} to {actual} in meta/info.json",
                field=name,
                expected=actual,
                found=stated,
                file=info_file,
            )


# ---------------------------------------------------------------------------------------------
# Rows: the data files' columns


_ROW_COLUMNS = ("index", "episode_index", "frame_index", "timestamp", "task_index")


def _numeric_features(meta: _Meta) -> dict[str, Feature]:
    """The fixed-size numeric features (state, action, ...), not LeRobot's default columns."""
    found = {}
    for name, feature in meta.info.features.items():
        if name in _ROW_COLUMNS or feature.dtype in ("video", "image", "string"):
            continue
        try:
            kind = np.dtype(feature.dtype).kind
        except TypeError:
            continue
        if kind in "biuf" and len(feature.shape) <= 1 and all(d > 0 for d in feature.shape):
            found[name] = feature
    return found


@dataclass
class _Rows:
    """Every row's default columns (NaN / -1 where a file could not be read), which rows are
    known (``valid``), and the numeric features' columns, [rows, dim] float64."""

    columns: dict[str, np.ndarray]
    valid: np.ndarray  # bool [rows]
    features: dict[str, np.ndarray]
    schemas: dict[str, pa.Schema | None]  # per data file; None when unreadable


def _rows_from_index(meta: _Meta, index: Any) -> _Rows:
    names = set(index.column_names)
    columns = {}
    for name in _ROW_COLUMNS:
        if name in names:
            columns[name] = np.asarray(index.column(name))
    features = {}
    for name in _numeric_features(meta):
        if name in names:
            values = np.asarray(index.column(name), np.float64)
            features[name] = values.reshape(len(values), -1)
    schemas = _schemas(meta)
    return _Rows(columns, np.ones(meta.num_rows, bool), features, schemas)


def _data_schema(meta: _Meta, path: str) -> pa.Schema:
    """A data file's schema, named by feature: a Parquet file or the Lance frames table."""
    if meta.info.storage_format == "lance":
        return lance_layout.frames_schema(
            meta.source, meta.info.features, lerobot_format.DEFAULT_COLUMNS
        )
    return meta.source.read_schema(path, "data file")


def _data_table(meta: _Meta, path: str, columns: list[str]) -> pa.Table:
    if meta.info.storage_format == "lance":
        return lance_layout.read_frames(
            meta.source, meta.info.features, lerobot_format.DEFAULT_COLUMNS, columns
        )
    return meta.source.read_parquet(path, "data file", columns=columns)


def _schemas(meta: _Meta) -> dict[str, pa.Schema | None]:
    def schema(path: str) -> pa.Schema | None:
        if path in meta.missing_data:
            return None
        try:
            return _data_schema(meta, path).remove_metadata()
        except (DatasetError, OSError, ValueError, pa.ArrowException):
            return None

    found = _parallel(schema, meta.data_files, meta.source.remote)
    return dict(zip(meta.data_files, found))


def _rows_from_files(run: _Run, meta: _Meta) -> _Rows:
    rows = meta.num_rows
    columns = {name: np.full(rows, np.nan) for name in _ROW_COLUMNS}
    valid = np.zeros(rows, bool)
    numeric = _numeric_features(meta)
    features = {
        name: np.full((rows, max(1, int(np.prod(f.shape)))), np.nan) for name, f in numeric.items()
    }
    starts = np.concatenate([[0], np.cumsum(meta.length)]).astype(np.int64)
    wanted = [*_ROW_COLUMNS, *numeric]

    def read(f: int) -> tuple[pa.Schema | None, pa.Table | None, str]:
        path = meta.data_files[f]
        if path in meta.missing_data:
            return None, None, ""
        try:
            schema = _data_schema(meta, path).remove_metadata()
            present = [name for name in wanted if name in schema.names]
            return schema, _data_table(meta, path, present), ""
        except (DatasetError, OSError, ValueError, pa.ArrowException) as e:
            return None, None, str(e)

    results = _parallel(read, range(len(meta.data_files)), meta.source.remote)
    schemas: dict[str, pa.Schema | None] = {}
    for f, (schema, table, error) in enumerate(results):
        path = meta.data_files[f]
        schemas[path] = schema
        episodes = np.flatnonzero(meta.data_file_of == f)
        if not episodes.size:
            continue
        if table is None:
            if error:
                run.add(
                    "error",
                    "files",
                    f"data file {meta.relative(path)} cannot be read: {error}",
                    "restore the file from its source",
                    episode=int(meta.episode_index[episodes[0]]),
                    file=path,
                )
            continue
        start, stop = int(starts[episodes[0]]), int(starts[episodes[-1] + 1])
        if table.num_rows != stop - start:
            run.add(
                "error",
                "rows",
                f"data file {meta.relative(path)} has {table.num_rows} rows, its episodes "
                f"{_listing(meta.episode_index[episodes])} have {stop - start} in the episode "
                "table",
                "rewrite the episodes' lengths (and info.json's totals) from the data, or "
                "restore the rows",
                episode=int(meta.episode_index[episodes[0]]),
                expected=stop - start,
                found=table.num_rows,
                file=path,
            )
            continue
        for name in _ROW_COLUMNS:
            if name in table.column_names:
                column = table.column(name)
                if pa.types.is_integer(column.type) or pa.types.is_floating(column.type):
                    columns[name][start:stop] = column.to_numpy(zero_copy_only=False)
        for name, values in features.items():
            if name not in table.column_names:
                continue
            flat = _fixed_values(table.column(name), values.shape[1])
            if flat is not None:
                values[start:stop] = flat
        valid[start:stop] = True
    return _Rows(columns, valid, features, schemas)


def _fixed_values(column: pa.ChunkedArray, dim: int) -> np.ndarray | None:
    """A numeric or list column as float64 [rows, dim]; None when its rows hold other than
    ``dim`` values (the features check says so)."""
    column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    kind = column.type
    if pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind):
        if dim != 1:
            return None
        return np.asarray(column.to_numpy(zero_copy_only=False), np.float64).reshape(-1, 1)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        import pyarrow.compute as pc

        lengths = pc.list_value_length(column).to_numpy(zero_copy_only=False)
        if len(lengths) and (np.any(lengths != dim)):
            return None
        values = column.flatten().to_numpy(zero_copy_only=False)
        try:
            return np.asarray(values, np.float64).reshape(len(column), dim)
        except (TypeError, ValueError):
            return None
    return None


def _check_rows(run: _Run, meta: _Meta, rows: _Rows) -> np.ndarray:
    """The row checks; returns, per episode, whether its rows are sound enough to match to
    frames (known, with finite timestamps)."""
    E = meta.num_episodes
    episode_of_row = np.repeat(np.arange(E), meta.length)
    offset = np.arange(meta.num_rows) - meta.from_row[episode_of_row]
    valid = rows.valid
    usable = np.ones(E, bool)
    usable[np.unique(episode_of_row[~valid])] = False
    data_file = meta.data_files

    def episode_file(e: int) -> str:
        return data_file[int(meta.data_file_of[e])]

    def per_episode(bad_rows: np.ndarray) -> list[tuple[int, int]]:
        """(episode position, its first bad row) of every episode with a bad row."""
        if not bad_rows.size:
            return []
        episodes, first = np.unique(episode_of_row[bad_rows], return_index=True)
        return [(int(e), int(bad_rows[i])) for e, i in zip(episodes, first)]

    cols = rows.columns
    if "episode_index" in cols:
        found = cols["episode_index"]
        bad = np.flatnonzero(valid & (found != meta.episode_index[episode_of_row]))
        for e, r in per_episode(bad):
            usable[e] = False
            run.add(
                "error",
                "rows",
                f"episode {meta.episode_index[e]}'s rows carry episode_index {_num(found[r])} "
                f"from row {r} (row {r - meta.from_row[e]} of the episode)",
                "rewrite the episode_index column, or the episode's length in the episode table",
                episode=int(meta.episode_index[e]),
                row=r,
                expected=int(meta.episode_index[e]),
                found=_num(found[r]),
                file=episode_file(e),
            )
    if "index" in cols:
        bad = np.flatnonzero(valid & (cols["index"] != np.arange(meta.num_rows)))
        for e, r in per_episode(bad)[:1]:  # every later row is off too: once is enough
            run.add(
                "error",
                "rows",
                f"the index column does not count the rows from 0: row {r} (episode "
                f"{meta.episode_index[e]}) has index {_num(cols['index'][r])}",
                "rewrite the index column as 0, 1, ... in dataset order",
                episode=int(meta.episode_index[e]),
                row=r,
                expected=r,
                found=_num(cols["index"][r]),
                file=episode_file(e),
            )
    if "frame_index" in cols:
        bad = np.flatnonzero(valid & (cols["frame_index"] != offset))
        for e, r in per_episode(bad):
            run.add(
                "error",
                "rows",
                f"episode {meta.episode_index[e]}: frame_index is {_num(cols['frame_index'][r])}"
                f" at row {r - meta.from_row[e]} of the episode",
                "rewrite frame_index as 0, 1, ... within each episode",
                episode=int(meta.episode_index[e]),
                row=r,
                expected=int(offset[r]),
                found=_num(cols["frame_index"][r]),
                file=episode_file(e),
            )
    if "task_index" in cols and meta.task_texts is not None:
        task = cols["task_index"]
        defined = np.zeros(len(meta.task_texts) + 1, bool)
        defined[: len(meta.task_texts)] = meta.task_texts != ""
        known = np.nan_to_num(task, nan=-1)
        inside = (known >= 0) & (known < len(meta.task_texts))
        ok = np.zeros(len(task), bool)
        ok[inside] = defined[known[inside].astype(np.int64)]
        for e, r in per_episode(np.flatnonzero(valid & ~ok)):
            run.add(
                "error",
                "tasks",
                f"episode {meta.episode_index[e]}: row {r - meta.from_row[e]} has task_index "
                f"{_num(task[r])}, which the tasks table does not define",
                "add the task to the tasks table, or correct the task_index column",
                episode=int(meta.episode_index[e]),
                row=r,
                expected=f"one of {_listing(np.flatnonzero(meta.task_texts != ''))}",
                found=_num(task[r]),
                file=episode_file(e),
            )
    if "timestamp" in cols:
        usable &= _check_timestamps(run, meta, cols["timestamp"], valid, episode_of_row, offset)
    else:
        usable[:] = False
    return usable


def _num(value: Any) -> Any:
    value = float(value)
    return int(value) if value.is_integer() else value


def _check_timestamps(run, meta, timestamp, valid, episode_of_row, offset) -> np.ndarray:
    """Row timestamps increase within each episode, by 1 / fps each (within tolerance_s)."""
    E = meta.num_episodes
    usable = np.ones(E, bool)
    fps = meta.info.fps
    ts = timestamp.astype(np.float64)
    usable[np.unique(episode_of_row[~np.isfinite(ts)])] = False
    nonempty = meta.length > 0
    first = np.zeros(E)
    first[nonempty] = ts[meta.from_row[nonempty]]
    step = np.diff(ts, prepend=np.nan)
    inside = offset > 0  # rows after their episode's first
    backwards = np.flatnonzero(valid & inside & ~(step > 0))
    reported = set()
    for e in np.unique(episode_of_row[backwards]):
        r = int(backwards[np.searchsorted(episode_of_row[backwards], e)])
        reported.add(int(e))
        run.add(
            "error",
            "timestamps",
            f"episode {meta.episode_index[e]}: timestamps do not increase at row "
            f"{r - meta.from_row[e]} of the episode ({ts[r - 1]:.6f} s, then {ts[r]:.6f} s)",
            "rewrite the episode's timestamp column as frame_index / fps",
            episode=int(meta.episode_index[e]),
            row=r,
            expected=f"> {ts[r - 1]:.6f}",
            found=round(float(ts[r]), 6),
        )
    error = np.abs(ts - first[episode_of_row] - offset / fps)
    bad = np.flatnonzero(valid & (error > run.tolerance_s))
    for e in np.unique(episode_of_row[bad]):
        if int(e) in reported:
            continue
        in_episode = bad[episode_of_row[bad] == e]
        r = int(in_episode[0])
        run.add(
            "error",
            "timestamps",
            f"episode {meta.episode_index[e]}: timestamps are not spaced 1/fps ({fps:g} fps) "
            f"from row {r - meta.from_row[e]} on ({len(in_episode)} rows off, by up to "
            f"{error[in_episode].max() * 1e3:.3f} ms)",
            "rewrite the timestamps as frame_index / fps, or give the fps the data were "
            "recorded at in meta/info.json",
            episode=int(meta.episode_index[e]),
            row=r,
            expected=round(float(first[e] + offset[r] / fps), 6),
            found=round(float(ts[r]), 6),
        )
    return usable


# ---------------------------------------------------------------------------------------------
# Features: info.json against the Parquet columns


_ARROW_KINDS = {
    "bool": ("bool",),
    "string": ("string", "large_string"),
}


def _element_type(kind: pa.DataType) -> tuple[pa.DataType, int | None]:
    """(the element type, the fixed list size or None) of a column type, lists unwrapped."""
    size: int | None = 1
    while (
        pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)
    ):
        size = kind.list_size if pa.types.is_fixed_size_list(kind) else None
        kind = kind.value_type
    return kind, size


def _dtype_match(feature: Feature, kind: pa.DataType) -> str:
    """ "same", "width" (the same kind of number in another width: read with a cast) or
    "kind" (another kind: integers for floats, text for numbers) for a feature's dtype
    against its column's type."""
    element, _ = _element_type(kind)
    if feature.dtype == "image":
        image = (
            pa.types.is_struct(kind) or pa.types.is_binary(kind) or pa.types.is_large_binary(kind)
        )
        return "same" if image else "kind"
    if feature.dtype in _ARROW_KINDS:
        return "same" if str(element) in _ARROW_KINDS[feature.dtype] else "kind"
    try:
        wanted = np.dtype(feature.dtype)
    except TypeError:
        return "same"  # a dtype numpy does not know: nothing to compare
    try:
        found = np.dtype(element.to_pandas_dtype())
    except (NotImplementedError, TypeError):
        return "kind"
    if found == wanted:
        return "same"
    return "width" if found.kind == wanted.kind else "kind"


def _check_features(run: _Run, meta: _Meta, rows: _Rows) -> None:
    schemas = [(p, s) for p, s in rows.schemas.items() if s is not None]
    if not schemas:
        return
    reference_path, reference = schemas[0]
    for path, schema in schemas[1:]:
        if schema.equals(reference):
            continue
        differences = [f"column {n!r} missing" for n in reference.names if n not in schema.names]
        differences += [f"extra column {n!r}" for n in schema.names if n not in reference.names]
        differences += [
            f"column {n!r} is {schema.field(n).type}, not {reference.field(n).type}"
            for n in reference.names
            if n in schema.names and not schema.field(n).type.equals(reference.field(n).type)
        ]
        run.add(
            "error",
            "features",
            f"data file {meta.relative(path)} differs in schema from "
            f"{meta.relative(reference_path)}: "
            + ("; ".join(differences) or "columns in another order"),
            "rewrite the file with the dataset's schema",
            file=path,
            expected=str(reference),
            found=str(schema),
        )
    features = meta.info.features
    for name, feature in features.items():
        if feature.dtype == "video":
            continue
        if name not in reference.names:
            run.add(
                "error",
                "features",
                f"feature {name!r} of info.json is not a column of the data files",
                f"add the column, or remove feature {name!r} from meta/info.json",
                field=name,
                expected=f"{feature.dtype} {list(feature.shape)}",
                found="no column",
                file=reference_path,
            )
            continue
        kind = reference.field(name).type
        match = _dtype_match(feature, kind)
        if match != "same":
            run.add(
                "error" if match == "kind" else "warning",
                "features",
                f"feature {name!r} is {feature.dtype} in info.json, its column holds {kind}"
                + (": read with a cast to the feature's dtype" if match == "width" else ""),
                f"give feature {name!r} the column's dtype in meta/info.json, or rewrite the "
                "column",
                field=name,
                expected=feature.dtype,
                found=str(_element_type(kind)[0]),
                file=reference_path,
            )
            if match == "kind":
                continue
        _, size = _element_type(kind)
        dim = int(np.prod(feature.shape)) if feature.shape else 1
        if feature.dtype in ("image", "string") or len(feature.shape) > 1:
            continue
        if size is not None and size != dim:
            run.add(
                "error",
                "features",
                f"feature {name!r} has shape {list(feature.shape)} in info.json, its column "
                f"holds {size} value{'s' if size != 1 else ''} a row",
                f"set feature {name!r}'s shape to [{size}] in meta/info.json, or rewrite the "
                "column",
                field=name,
                expected=list(feature.shape),
                found=[size],
                file=reference_path,
            )
        elif size is None and name in rows.features and rows.valid.any():
            if np.isnan(rows.features[name][rows.valid]).all():
                run.add(
                    "error",
                    "features",
                    f"feature {name!r} has shape {list(feature.shape)} in info.json, but its "
                    "rows hold lists of other lengths",
                    f"set feature {name!r}'s shape to its lists' length, or rewrite the column",
                    field=name,
                    expected=list(feature.shape),
                    file=reference_path,
                )
    extra = [n for n in reference.names if n not in features and not n.startswith("__")]
    for name in extra:
        run.add(
            "warning",
            "features",
            f"column {name!r} of the data files is not a feature of info.json: LeRobot's "
            "loader, which casts the files to info.json's features, refuses it",
            f"add feature {name!r} to meta/info.json, or drop the column",
            field=name,
            file=reference_path,
        )


# ---------------------------------------------------------------------------------------------
# Videos: frame tables


@dataclass
class _Video:
    """One video file's frame table, as far as the check needs it."""

    path: str
    reader: Any  # _core.VideoReader
    pts: np.ndarray  # float64 [frames], presentation order
    width: int
    height: int
    codec: str

    @property
    def num_frames(self) -> int:
        return len(self.pts)

    @property
    def fps(self) -> float:
        """The frame rate of the typical frame step (a dropped or extra frame moves it not)."""
        if len(self.pts) < 2:
            return math.nan
        return 1.0 / float(np.median(np.diff(self.pts)))


def _open_videos(run: _Run, meta: _Meta, index: Any) -> dict[str, _Video | str]:
    """Every video file's frame table: from the index when it built (no scan), else from one
    scan of each file on the pool. A value that is a str says why the file cannot be read."""
    paths = [p for camera in meta.cameras for p in camera.files if p not in meta.missing_videos]
    paths = list(dict.fromkeys(paths))
    tables: dict[str, bytes] = {}
    if index is not None:
        for v, path in enumerate(index.video_files):
            tables[path] = index.frame_table(v)

    def open_one(path: str) -> _Video | str:
        try:
            table = tables.get(path)
            reader = (
                _core.VideoReader(path, 1, table) if table is not None else _core.VideoReader(path)
            )
            return _Video(path, reader, reader.pts(), reader.width, reader.height, reader.codec)
        except (_core.Error, OSError, ValueError) as e:
            return str(e)

    threads = 32 if meta.source.remote else _core.usable_cores()
    label = "scanning videos" if run.progress and index is None else None
    found = _pooled(open_one, paths, threads, label)
    return dict(zip(paths, found))


def _pooled(
    function: Callable[[Any], Any],
    items: Sequence[Any],
    threads: int,
    label: str | None,
    weights: Sequence[int] | None = None,
) -> list[Any]:
    """function(item) for every item on a pool of ``threads`` threads, in order; with a
    ``label``, a progress bar (count, rate, ETA) drawn by this thread as items finish, each
    counting its weight (default 1)."""
    if not items:
        return []
    weights = [1] * len(items) if weights is None else list(weights)
    total = sum(weights)
    bar = ProgressBar(label) if label else None
    results: list[Any] = [None] * len(items)
    try:
        with ThreadPoolExecutor(max_workers=max(1, min(threads, len(items)))) as pool:
            futures = {pool.submit(function, item): k for k, item in enumerate(items)}
            done = 0
            for future in as_completed(futures):
                k = futures[future]
                results[k] = future.result()
                done += weights[k]
                if bar is not None:
                    bar(done, total)
    finally:
        if bar is not None:
            bar.close()
    return results


def _check_videos(run: _Run, meta: _Meta, videos: dict[str, _Video | str]) -> set[str]:
    """Unreadable videos, streams whose size or codec disagree with info.json, frame rates
    other than info.json's. Returns the files whose frames cannot be matched to rows (wrong
    frame rate)."""
    skip = set()
    fps = meta.info.fps
    raw_features = meta.info.raw.get("features", {})
    for camera in meta.cameras:
        spec = raw_features.get(camera.name, {}) or {}
        stated = _stated_size(meta.info.features[camera.name], spec)
        stated_fps = (spec.get("info") or {}).get("video.fps")
        if isinstance(stated_fps, (int, float)) and abs(stated_fps - fps) > _FPS_TOLERANCE * fps:
            run.add(
                "warning",
                "fps",
                f"camera {camera.name!r}: info.json's video.fps is {stated_fps}, its fps {fps:g}",
                f"set video.fps of feature {camera.name!r} to the videos' frame rate",
                camera=camera.name,
                field=camera.name,
                expected=fps,
                found=stated_fps,
            )
        for v, path in enumerate(camera.files):
            video = videos.get(path)
            if video is None:
                continue
            episodes = meta.episode_index[camera.file_of == v]
            first = int(episodes[0]) if len(episodes) else None
            which = f"episode{'s' if len(episodes) > 1 else ''} {_listing(episodes)}"
            if isinstance(video, str):
                run.add(
                    "error",
                    "videos",
                    f"camera {camera.name!r}: video {meta.relative(path)} ({which}) cannot be "
                    f"read: {video}",
                    "re-encode the video from its source, or drop its episodes",
                    episode=first,
                    camera=camera.name,
                    file=path,
                )
                skip.add(path)
                continue
            if stated is not None and (video.height, video.width) != stated:
                run.add(
                    "error",
                    "features",
                    f"camera {camera.name!r}: video {meta.relative(path)} ({which}) is "
                    f"{video.width}x{video.height}, info.json says {stated[1]}x{stated[0]}",
                    f"set feature {camera.name!r}'s shape to the videos' size, or re-encode "
                    "them at the stated size",
                    episode=first,
                    camera=camera.name,
                    file=path,
                    field=camera.name,
                    expected=f"{stated[1]}x{stated[0]}",
                    found=f"{video.width}x{video.height}",
                )
            video_fps = video.fps
            if math.isfinite(video_fps) and abs(video_fps - fps) > _FPS_TOLERANCE * fps:
                run.add(
                    "error",
                    "fps",
                    f"camera {camera.name!r}: video {meta.relative(path)} ({which}) runs at "
                    f"{video_fps:.3f} fps, info.json says {fps:g}: its frames cannot be at "
                    "the rows' timestamps",
                    f"re-encode the video at {fps:g} fps (ffmpeg -r {fps:g}), or give info.json "
                    "the fps the data were recorded at",
                    episode=first,
                    camera=camera.name,
                    file=path,
                    expected=fps,
                    found=round(video_fps, 3),
                )
                skip.add(path)
    return skip


def _stated_size(feature: Feature, spec: dict[str, Any]) -> tuple[int, int] | None:
    """(height, width) info.json states for a video feature, or None."""
    info = spec.get("info") or {}
    if isinstance(info.get("video.height"), int) and isinstance(info.get("video.width"), int):
        return info["video.height"], info["video.width"]
    names = spec.get("names")
    shape = feature.shape
    if (
        isinstance(names, list)
        and "height" in names
        and "width" in names
        and len(shape) == len(names)
    ):
        return shape[names.index("height")], shape[names.index("width")]
    if len(shape) == 3:
        return (
            (shape[1], shape[2])
            if shape[0] in (1, 3) and shape[2] not in (1, 3)
            else (shape[0], shape[1])
        )
    return None


# ---------------------------------------------------------------------------------------------
# Frames against rows


@dataclass
class _Placement:
    """Per camera, per episode: its first frame in its file (-1: unplaced) and drift (the first
    frame's pts minus the stated start), and the frames its rows read (by time); as stoker's
    engine places them (:func:`_place`)."""

    first: np.ndarray  # int64 [E]
    drift: np.ndarray  # float64 [E], NaN when unplaced
    frames: list[np.ndarray | None]  # per episode, the frame each row reads; -1 where none
    # Per episode, how far the frame it snapped to is from its stated start plus the drift of
    # the episode before it in its file (0 where its file's episodes tile it).
    snap: np.ndarray  # float64 [E]
    # The placed episodes, file by file, each file's in the order they follow each other in it.
    order: np.ndarray  # int64
    # Per episode position, why the index build records it as broken (the engine's words).
    problems: dict[int, str]

    def in_file(self, camera: _Camera, v: int) -> np.ndarray:
        """The placed episodes of file ``v``, in their order in it."""
        return self.order[camera.file_of[self.order] == v]


def _place(run: _Run, meta: _Meta, camera: int, videos, timestamp: np.ndarray) -> _Placement:
    """Where each episode of a camera starts in its file: placed by stoker's engine, exactly
    as its index build places them (_core.place_episodes: in the order of their stated
    offsets, tiling a file whose frames are its episodes' rows, else snapped to the frame
    nearest each stated start following the drift of the episodes before it). Episodes whose
    file is unknown or unreadable are left unplaced, and those whose stated start is not a
    number (a from_timestamp or first row time): the engine says why."""
    cam = meta.cameras[camera]
    E = meta.num_episodes
    readers = [
        video.reader if isinstance(video, _Video) else None
        for video in (videos.get(path) for path in cam.files)
    ]
    nowhere = len(cam.files)  # the file of episodes whose file the metadata does not say
    placed = _core.place_episodes(
        fps=float(meta.info.fps),
        episode_from_row=np.ascontiguousarray(meta.from_row, np.int64),
        episode_length=np.ascontiguousarray(meta.length, np.int64),
        row_timestamp=np.ascontiguousarray(timestamp, np.float64),
        episode_video=np.where(cam.file_of >= 0, cam.file_of, nowhere).astype(np.int64),
        episode_video_offset=np.ascontiguousarray(cam.from_timestamp, np.float64),
        video_files=[*cam.files, ""],
        frame_tables=[*readers, None],
        tolerance_s=run.tolerance_s,
        camera=cam.name,
    )
    return _Placement(
        placed["first_frame"],
        placed["drift"],
        [None] * E,
        placed["snap"],
        placed["order"],
        {int(e): why for e, _, _, why in placed["problems"]},
    )


def _check_frames(run: _Run, meta: _Meta, rows: _Rows, usable, videos, skip) -> list:
    """Per camera and episode: a frame for every row's time (within tolerance_s), no two rows
    on one frame, no frame between two rows that no row reads; per file, frames no episode
    reads and frames two episodes read; per episode, cameras whose starts disagree, and per
    file the drift of summed offsets. Returns each camera's placement (for the deep check)."""
    timestamp = rows.columns.get("timestamp")
    if timestamp is None:
        return []
    timestamp = timestamp.astype(np.float64)
    fps = meta.info.fps
    half_frame = 0.5 / fps
    # Rows of data files that could not be read have no time: their episodes are placed by
    # their stated offsets alone (the data files check names them).
    known_times = np.where(rows.valid, timestamp, 0.0)
    placements = []
    for c, cam in enumerate(meta.cameras):
        placement = _place(run, meta, c, videos, known_times)
        placements.append(placement)
        for v, path in enumerate(cam.files):
            video = videos.get(path)
            if not isinstance(video, _Video) or path in skip:
                continue
            in_file = placement.in_file(cam, v)
            read_by = np.full(video.num_frames, -1, np.int64)  # episode reading each frame
            for e in in_file:
                if not usable[e]:
                    continue
                _match_episode(run, meta, cam, e, video, placement, timestamp, read_by)
            if all(usable[e] and placement.first[e] >= 0 for e in in_file):
                # Frames of episodes whose rows are unknown are not extra: only then.
                _check_coverage(run, meta, cam, v, video, in_file, placement, read_by)
        _check_drift(run, meta, cam, placement, videos, half_frame)
    _check_camera_offsets(run, meta, placements, usable, half_frame)
    return placements


def _match_episode(run, meta, cam, e, video, placement, timestamp, read_by) -> None:
    """The rows of episode e against camera ``cam``'s frames, from its placed first frame."""
    episode = int(meta.episode_index[e])
    rows = slice(int(meta.from_row[e]), int(meta.from_row[e] + meta.length[e]))
    ts = timestamp[rows]
    first = int(placement.first[e])
    n = video.num_frames
    fps = meta.info.fps
    tolerance = run.tolerance_s
    if first < 0:  # the engine could not place it: its words say why
        run.add(
            "error",
            "missing_frames",
            f"episode {episode}, camera {cam.name!r}: stoker cannot place the episode in "
            f"{meta.relative(video.path)}: {placement.problems.get(e, 'it is not placed')}",
            "correct the episode's from_timestamp (its start in the file) and its rows' timestamps",
            episode=episode,
            camera=cam.name,
            row=rows.start,
            file=video.path,
        )
        return
    start = float(video.pts[first])
    if abs(placement.snap[e]) > 0.5 / fps:
        # No frame near the stated start (the first frames are missing): the rows are where
        # the metadata says, and the frames nearest them are compared.
        start -= float(placement.snap[e])
    wanted = start + (ts - ts[0])
    k = np.clip(np.searchsorted(video.pts, wanted), 1, max(n - 1, 1))
    if n > 1:
        nearer_before = (wanted - video.pts[k - 1]) <= (video.pts[k] - wanted)
        k = np.where(nearer_before, k - 1, k)
    else:
        k = np.zeros(len(wanted), np.int64)
    distance = np.abs(video.pts[k] - wanted)
    missing = np.flatnonzero(distance > tolerance)
    placement.frames[e] = np.where(distance > tolerance, -1, k)
    if missing.size:
        r = int(missing[0])
        past_end = wanted[r] > video.pts[-1] + tolerance
        run.add(
            "error",
            "missing_frames",
            f"episode {episode}, camera {cam.name!r}: {missing.size} row"
            f"{'s have' if missing.size > 1 else ' has'} no frame within {tolerance:g} s, from "
            f"row {r} of the episode (at {wanted[r]:.6f} s in {meta.relative(video.path)}; "
            + (
                f"the video ends at {video.pts[-1]:.6f} s"
                if past_end
                else f"the nearest frame is at {video.pts[k[r]]:.6f} s"
            )
            + ")",
            "re-encode the episode's video with a frame for every row (a recorder that drops "
            "frames leaves rows without pictures), or drop the episode",
            episode=episode,
            camera=cam.name,
            frame=r,
            row=rows.start + r,
            expected=round(float(wanted[r]), 6),
            found=round(float(video.pts[k[r]]), 6),
            file=video.path,
        )
    matched = k[distance <= tolerance]
    repeated = np.flatnonzero(np.diff(matched) == 0)
    if repeated.size:
        rows_of = np.flatnonzero(distance <= tolerance)
        r = int(rows_of[repeated[0] + 1])
        run.add(
            "error",
            "duplicate_frames",
            f"episode {episode}, camera {cam.name!r}: rows {r - 1} and {r} of the episode read "
            f"the same frame ({matched[repeated[0]]}, at {video.pts[matched[repeated[0]]]:.6f} s)"
            f"; {repeated.size} such pair{'s' if repeated.size > 1 else ''}",
            "rewrite the rows' timestamps (one frame period apart), or re-encode the video "
            "with a frame for each row",
            episode=episode,
            camera=cam.name,
            frame=r,
            row=rows.start + r,
            file=video.path,
        )
    if matched.size:
        lo, hi = int(matched.min()), int(matched.max())
        unread = np.setdiff1d(np.arange(lo, hi + 1), matched)
        if unread.size:
            f = int(unread[0])
            run.add(
                "error",
                "extra_frames",
                f"episode {episode}, camera {cam.name!r}: {unread.size} frame"
                f"{'s' if unread.size > 1 else ''} between the episode's rows that no row reads"
                f", from frame {f - first} of the episode (at {video.pts[f]:.6f} s): an "
                "inserted frame shifts every frame after it for a reader that counts frames",
                "re-encode the episode's video with one frame per row",
                episode=episode,
                camera=cam.name,
                frame=f - first,
                file=video.path,
            )
        overlap = matched[read_by[matched] >= 0]
        if overlap.size:
            other = int(meta.episode_index[read_by[overlap[0]]])
            run.add(
                "error",
                "overlapping_episodes",
                f"episodes {other} and {episode}, camera {cam.name!r}: both read {overlap.size} "
                f"frame{'s' if overlap.size > 1 else ''} of {meta.relative(video.path)}, from "
                f"{video.pts[overlap[0]]:.6f} s: one of them shows the other's pictures",
                "correct the episodes' from_timestamp / to_timestamp in the episode table",
                episode=episode,
                camera=cam.name,
                file=video.path,
                found=f"episode {other}",
            )
        read_by[lo : hi + 1] = e  # the whole span: frames inside it are its own


def _check_coverage(run, meta, cam, v, video, in_file, placement, read_by) -> None:
    """Frames of a file that no episode reads: extra frames (a warning: nothing reads them,
    but a frame count that disagrees with the rows often means a duplicated frame)."""
    if not np.any(read_by >= 0):
        return
    unread = np.flatnonzero(read_by < 0)
    if not unread.size:
        return
    runs = np.split(unread, np.flatnonzero(np.diff(unread) != 1) + 1)
    for group in runs:
        f = int(group[0])
        before = read_by[:f][read_by[:f] >= 0]
        after = read_by[f:][read_by[f:] >= 0]
        owner = int(before[-1]) if before.size else int(after[0])
        episode = int(meta.episode_index[owner])
        where = "after the last row of" if before.size else "before the first row of"
        per_episode_file = len(in_file) == 1
        run.add(
            "warning",
            "extra_frames",
            f"episode {episode}, camera {cam.name!r}: {len(group)} frame"
            f"{'s' if len(group) > 1 else ''} of {meta.relative(video.path)} "
            f"(from {video.pts[f]:.6f} s) {'lie' if len(group) > 1 else 'lies'} {where} the "
            "episode and no row reads them"
            + (
                f"; the video has {video.num_frames} frames for {meta.length[owner]} rows "
                "(a frame duplicated inside the episode would shift every row after it: "
                "stoker check --deep looks for it)"
                if per_episode_file
                else ""
            ),
            "re-encode the video with one frame per row, or leave it: no row reads them",
            episode=episode,
            camera=cam.name,
            frame=f - int(placement.first[owner]) if placement.first[owner] >= 0 else None,
            file=video.path,
            expected=int(meta.length[owner]) if per_episode_file else None,
            found=video.num_frames if per_episode_file else None,
        )


def _check_drift(run, meta, cam, placement, videos, half_frame) -> None:
    """How far the stated starts of a camera's episodes in packed files (from_timestamp, summed
    durations) are from their frames: one finding per camera, naming the worst file."""
    worst: tuple[float, int, str] | None = None  # (|drift|, episode position, file)
    files = 0
    episodes = 0
    first_episode = None
    for v, path in enumerate(cam.files):
        in_file = np.flatnonzero(cam.file_of == v)
        if len(in_file) < 2 or not isinstance(videos.get(path), _Video):
            continue
        drift = placement.drift[in_file]
        magnitude = np.where(np.isfinite(drift), np.abs(drift), 0.0)
        beyond = np.flatnonzero(magnitude > run.tolerance_s)
        if not beyond.size:
            continue
        files += 1
        episodes += beyond.size
        e = int(in_file[beyond[0]])
        first_episode = e if first_episode is None else min(first_episode, e)
        k = int(np.argmax(magnitude))
        if worst is None or magnitude[k] > worst[0]:
            worst = (float(magnitude[k]), int(in_file[k]), path)
    if worst is None:
        return
    largest, e_worst, path = worst
    packed = sum(np.count_nonzero(cam.file_of == v) > 1 for v in range(len(cam.files)))
    run.add(
        "warning",
        "drift",
        f"camera {cam.name!r}: in {files} of its {packed} packed video files, the stated "
        f"starts (from_timestamp) of {episodes} episode{'s' if episodes > 1 else ''} are off "
        f"their frames by more than {run.tolerance_s:g} s, from episode "
        f"{meta.episode_index[first_episode]}; the most, {largest * 1e3:.3f} ms, at episode "
        f"{meta.episode_index[e_worst]} in {meta.relative(path)}"
        + (
            ": beyond half a frame, a reader that trusts from_timestamp (LeRobot's) shows "
            "the wrong frame; stoker places each episode on its frames"
            if largest > half_frame
            else ": LeRobot's reader refuses frames beyond tolerance_s; stoker places each "
            "episode on its frames"
        ),
        "rewrite from_timestamp / to_timestamp from the files' frame times (stoker etl "
        "writes them so)",
        episode=int(meta.episode_index[e_worst]),
        camera=cam.name,
        file=path,
        expected=f"|drift| <= {run.tolerance_s:g} s",
        found=round(float(placement.drift[e_worst]), 6),
    )


def _check_camera_offsets(run, meta, placements, usable, half_frame) -> None:
    """Per episode, the spread of the cameras' start offsets (drifts): cameras whose stated
    starts disagree with their frames by different amounts show different moments."""
    if len(placements) < 2:
        return
    drifts = np.stack([p.drift for p in placements])  # [C, E]
    known = np.all(np.isfinite(drifts), axis=0) & usable
    if not known.any():
        return
    spread = np.zeros(drifts.shape[1])
    spread[known] = drifts[:, known].max(axis=0) - drifts[:, known].min(axis=0)
    # Below a quarter of a frame, a reader taking the frame nearest each time picks the same
    # frame for every camera: not worth a finding (the drift check covers tolerance_s).
    for e in np.flatnonzero(spread > max(run.tolerance_s, half_frame / 2)):
        offsets = drifts[:, e]
        c = int(np.argmax(np.abs(offsets - np.median(offsets))))
        if np.all(np.abs(offsets - np.median(offsets)) == np.abs(offsets[c] - np.median(offsets))):
            c = int(np.argmax(np.abs(offsets)))
        error = spread[e] > half_frame
        run.add(
            "error" if error else "warning",
            "camera_offsets",
            f"episode {meta.episode_index[e]}: the cameras' start offsets differ by "
            f"{spread[e] * 1e3:.3f} ms ({spread[e] * meta.info.fps:.2f} frames); camera "
            f"{meta.cameras[c].name!r} is off by {offsets[c] * 1e3:+.3f} ms"
            + (
                ": read by their stated starts, the cameras show different moments" if error else ""
            ),
            f"correct camera {meta.cameras[c].name!r}'s from_timestamp for this episode in the "
            "episode table (its frames start elsewhere in the file)",
            episode=int(meta.episode_index[e]),
            camera=meta.cameras[c].name,
            expected="0 s spread",
            found={cam.name: round(float(offsets[i]), 6) for i, cam in enumerate(meta.cameras)},
        )


# ---------------------------------------------------------------------------------------------
# Statistics


def _stat_values(value: Any) -> np.ndarray | None:
    try:
        return np.asarray(value, np.float64)
    except (TypeError, ValueError):
        return None


def _check_stats(run: _Run, meta: _Meta, rows: _Rows) -> None:
    source = meta.source
    version = meta.info.codebase_version
    stats = None
    stats_file = source.url(lerobot_format.STATS_PATH)
    try:
        stats = lerobot_format.read_stats(source)
    except (DatasetError, OSError, ValueError) as e:
        run.add(
            "error",
            "stats",
            f"meta/stats.json cannot be read: {e}",
            "recompute the statistics (LeRobot's compute_stats)",
            file=stats_file,
        )
    per_episode = None
    episodes_stats_file = source.url(lerobot_format.V21_EPISODES_STATS_PATH)
    try:
        per_episode = lerobot_format.read_episode_stats(source, meta.episodes_table)
    except (DatasetError, OSError, ValueError) as e:
        run.add(
            "error",
            "stats",
            f"the per-episode statistics cannot be read: {e}",
            "recompute the per-episode statistics",
            file=episodes_stats_file,
        )
    if stats is None and per_episode is None:
        wanted = "meta/stats.json" if version == "v3.0" else "meta/episodes_stats.jsonl"
        run.add(
            "warning",
            "stats",
            f"the dataset has no statistics ({wanted}): policies that normalize by them "
            "(LeRobot's) cannot train on it",
            "compute them (LeRobot's compute_stats, or its recorder's consolidate step)",
            file=source.url(wanted),
        )
        return
    if stats is None and version == "v3.0":
        run.add(
            "warning",
            "stats",
            "the dataset has no meta/stats.json (only per-episode statistics): LeRobot v3.0 "
            "reads the dataset's statistics from it",
            "aggregate the per-episode statistics into meta/stats.json",
            file=stats_file,
        )
    if stats is not None:
        for feature, values in stats.items():
            if not isinstance(values, dict):
                continue
            for statistic, value in values.items():
                array = _stat_values(value)
                if array is None:
                    run.add(
                        "error",
                        "stats",
                        f"meta/stats.json: {feature}/{statistic} is not an array of numbers",
                        "recompute the statistics",
                        field=feature,
                        file=stats_file,
                    )
                elif not np.all(np.isfinite(array)):
                    run.add(
                        "error",
                        "stats",
                        f"meta/stats.json: {feature}/{statistic} holds "
                        f"{_non_finite(array)}: normalizing by it makes every batch NaN",
                        "recompute the statistics (a NaN in the data, or a zero count, gives them)",
                        field=feature,
                        file=stats_file,
                        expected="finite numbers",
                        found=array.tolist() if array.size <= 16 else _non_finite(array),
                    )
    if per_episode is not None:
        for episode, features in per_episode.items():
            for feature, values in features.items():
                for statistic, array in values.items():
                    if not np.all(np.isfinite(array)):
                        run.add(
                            "error",
                            "stats",
                            f"episode {episode}: the per-episode {feature}/{statistic} holds "
                            f"{_non_finite(array)}, which the dataset's statistics aggregate",
                            "recompute the episode's statistics",
                            episode=int(episode),
                            field=feature,
                            file=episodes_stats_file if version != "v3.0" else None,
                            expected="finite numbers",
                            found=array.tolist() if array.size <= 16 else _non_finite(array),
                        )
    _check_stats_against_data(run, meta, rows, stats, per_episode)


def _non_finite(array: np.ndarray) -> str:
    nan = int(np.count_nonzero(np.isnan(array)))
    inf = int(np.count_nonzero(np.isinf(array)))
    return " and ".join(p for p in (f"{nan} NaN" if nan else "", f"{inf} inf" if inf else "") if p)


def _rounding_eps(feature: Feature | None) -> float:
    """The machine epsilon LeRobot's statistics of ``feature`` are computed in: the data's own
    float type (numpy's mean of float32 rows is float32), float64 for integers and booleans."""
    try:
        kind = np.dtype(feature.dtype) if feature is not None else np.dtype(np.float64)
    except TypeError:
        kind = np.dtype(np.float64)
    return float(np.finfo(kind if kind.kind == "f" else np.float64).eps)


def _compare(stat: dict[str, Any], values: np.ndarray, eps: float, pass_rows: int) -> list[str]:
    """How a feature's statistics disagree with ``values`` [rows, dim], each as text.

    Differences within the rounding of the way LeRobot computes them are not disagreements:
    it sums ``pass_rows`` rows (an episode's) at a time in the data's float type (``eps``),
    so its mean is off by up to about that many eps of the values' magnitude, and its std is
    sqrt(E[x²] - E[x]²), whose variance is off by as many eps of E[x²] (a joint that barely
    moves about 90 degrees gets a std several times its own, or 0). Recomputing with LeRobot
    gives the same."""
    out = []
    data = {
        "min": values.min(axis=0),
        "max": values.max(axis=0),
        "mean": values.mean(axis=0),
        "std": values.std(axis=0),
    }
    scale = np.maximum(np.abs(data["max"] - data["min"]), 1e-6)
    ulps = eps * (_ROUNDING_ULPS + _ROUNDING_ULPS_PER_ROW * pass_rows)
    magnitude = np.abs(values).max(axis=0)
    mean_of_squares = np.mean(values**2, axis=0)
    for name, actual in data.items():
        if name not in stat:
            continue
        stated = _stat_values(stat[name])
        if stated is None or not np.all(np.isfinite(stated)):
            continue
        try:
            stated = np.broadcast_to(stated.reshape(-1), actual.shape)
        except ValueError:
            out.append(f"{name} has {stated.size} values for {actual.size} dimensions")
            continue
        if name == "std":
            off = np.abs(stated - actual) > 0.1 * np.maximum(actual, 1e-6) + 1e-6
            off &= np.abs(stated**2 - actual**2) > ulps * mean_of_squares
        else:
            rounding = ulps * magnitude if name == "mean" else 0.0
            off = np.abs(stated - actual) > 1e-3 * scale + 1e-6 + rounding
        if off.any():
            j = int(np.argmax(off))
            out.append(f"{name}[{j}] is {stated[j]:.6g}, the data's {actual[j]:.6g}")
    if "count" in stat:
        count = _stat_values(stat["count"])
        if (
            count is not None
            and count.size
            and np.all(np.isfinite(count))
            and int(count.reshape(-1)[0]) != len(values)
        ):
            out.append(f"count is {int(count.reshape(-1)[0])}, the data have {len(values)} rows")
    return out


def _amplified(stat: dict[str, Any], values: np.ndarray) -> tuple[int, float, float] | None:
    """The dimension whose stated std is so far below the data's that normalizing by it
    (LeRobot's (x - mean) / (std + 1e-8)) gives that dimension a std above _AMPLIFIED, as
    (dimension, stated, actual); None when there is none."""
    stated = _stat_values(stat.get("std"))
    actual = values.std(axis=0)
    if stated is None or not np.all(np.isfinite(stated)):
        return None
    try:
        stated = np.broadcast_to(stated.reshape(-1), actual.shape)
    except ValueError:
        return None
    amplified = actual > _AMPLIFIED * (np.abs(stated) + 1e-8)
    if not amplified.any():
        return None
    j = int(np.argmax(amplified))
    return j, float(stated[j]), float(actual[j])


def _check_stats_against_data(run, meta, rows, stats, per_episode) -> None:
    """Statistics that disagree with the data: warnings only (LeRobot computes image
    statistics from sampled frames and quantiles approximately, and its mean and std in the
    data's float type; only numeric features' min, max, mean, std and count are compared,
    beyond that rounding, on every row for the dataset's, on a sample of episodes for theirs)."""
    for name, values in rows.features.items():
        known = rows.valid & np.all(np.isfinite(values), axis=1)
        if not known.any():
            continue
        eps = _rounding_eps(meta.info.features.get(name))
        if stats is not None and isinstance(stats.get(name), dict):
            longest = max(int(meta.length.max()), 0) if meta.num_episodes else len(values)
            differences = _compare(stats[name], values[known], eps, longest)
            if differences:
                run.add(
                    "warning",
                    "stats_consistency",
                    f"meta/stats.json's {name} disagrees with the data: "
                    + "; ".join(differences[:4]),
                    "recompute the statistics from the data",
                    field=name,
                    file=meta.source.url(lerobot_format.STATS_PATH),
                )
            else:
                amplified = _amplified(stats[name], values[known])
                if amplified is not None:
                    j, stated, actual = amplified
                    run.add(
                        "warning",
                        "stats_consistency",
                        f"meta/stats.json's {name} std[{j}] is {stated:.6g}, the data's "
                        f"{actual:.6g} (the rounding of a std computed as "
                        "sqrt(E[x²] - E[x]²) in the data's float type, for a dimension that "
                        "barely varies about a large value): normalizing by mean and std "
                        f"multiplies that dimension's variation "
                        f"{actual / (abs(stated) + 1e-8):.3g} times",
                        f"recompute {name}'s std in float64, or normalize that dimension by "
                        "min and max",
                        field=name,
                        file=meta.source.url(lerobot_format.STATS_PATH),
                        expected=actual,
                        found=stated,
                    )
        if per_episode is None:
            continue
        sample = np.unique(
            np.linspace(0, meta.num_episodes - 1, _STATS_SAMPLE_EPISODES).astype(int)
        )
        for e in sample:
            episode = int(meta.episode_index[e])
            stat = per_episode.get(episode, {}).get(name)
            rows_of = slice(int(meta.from_row[e]), int(meta.from_row[e] + meta.length[e]))
            if stat is None or not known[rows_of].all() or meta.length[e] == 0:
                continue
            differences = _compare(stat, values[rows_of], eps, int(meta.length[e]))
            if differences:
                run.add(
                    "warning",
                    "stats_consistency",
                    f"episode {episode}: its {name} statistics disagree with its rows: "
                    + "; ".join(differences[:4]),
                    "recompute the episode's statistics",
                    episode=episode,
                    field=name,
                )


# ---------------------------------------------------------------------------------------------
# Deep: every frame decoded


def _deep_videos(run: _Run, meta: _Meta, videos: dict[str, _Video | str], placements) -> None:
    """Every video decoded end to end (stoker's decoder, no conversion), one video per thread
    of a pool as wide as the usable cores; what came out mapped back to episodes."""
    readable = [v for v in videos.values() if isinstance(v, _Video)]
    if not readable:
        return
    total = sum(v.num_frames for v in readable)

    def verify(video: _Video) -> dict[str, Any] | str:
        try:
            return video.reader.verify()
        except (_core.Error, OSError) as e:
            return str(e)

    # Largest first: the pool ends together rather than waiting on one big file at the end.
    order = sorted(readable, key=lambda v: -v.num_frames)
    found = _pooled(
        verify,
        order,
        _core.usable_cores(),
        "decoding videos (frames)" if run.progress else None,
        [v.num_frames for v in order],
    )
    results = dict(zip((v.path for v in order), found))
    run.report.scanned["decoded_frames"] = total
    for c, cam in enumerate(meta.cameras):
        placement = placements[c] if c < len(placements) else None
        for v, path in enumerate(cam.files):
            result = results.get(path)
            video = videos.get(path)
            if result is None or not isinstance(video, _Video):
                continue
            in_file = np.flatnonzero(cam.file_of == v)
            if isinstance(result, str):
                run.add(
                    "error",
                    "decode",
                    f"camera {cam.name!r}: {meta.relative(path)} cannot be decoded: {result}",
                    "re-encode the video from its source",
                    episode=int(meta.episode_index[in_file[0]]) if in_file.size else None,
                    camera=cam.name,
                    file=path,
                )
                continue
            _deep_findings(run, meta, cam, video, in_file, placement, result)


def _episode_spans(meta, in_file, placement, n) -> tuple[np.ndarray, np.ndarray]:
    """Per frame of a file: the episode (position) showing it, -1 for none; and per frame
    its number within that episode."""
    owner = np.full(n, -1, np.int64)
    within = np.full(n, -1, np.int64)
    if placement is None:
        return owner, within
    for e in in_file:
        first = int(placement.first[e])
        if first < 0:
            continue
        stop = min(n, first + int(meta.length[e]))
        owner[first:stop] = e
        within[first:stop] = np.arange(stop - first)
    return owner, within


def _deep_findings(run, meta, cam, video, in_file, placement, result) -> None:
    n = video.num_frames
    owner, within = _episode_spans(meta, in_file, placement, n)
    names = result["pixel_format_names"]
    width, height, pixel_format = result["width"], result["height"], result["pixel_format"]
    stream_format = pixel_format[width > 0][0] if np.any(width > 0) else -1

    def locate(frames: np.ndarray) -> dict[int, np.ndarray]:
        """The frames grouped by the episode showing them (-1: none)."""
        groups: dict[int, np.ndarray] = {}
        for e in np.unique(owner[frames]):
            groups[int(e)] = frames[owner[frames] == e]
        return groups

    def where(e: int, frames: np.ndarray) -> dict[str, Any]:
        f = int(frames[0])
        if e < 0:
            return {"camera": cam.name, "file": video.path}
        return {
            "episode": int(meta.episode_index[e]),
            "camera": cam.name,
            "frame": int(within[f]),
            "row": int(meta.from_row[e] + within[f]),
            "file": video.path,
        }

    def named(e: int, frames: np.ndarray) -> str:
        f = int(frames[0])
        at = f"{video.pts[f]:.6f} s"
        if e < 0:
            return f"{meta.relative(video.path)}, frame {f} of the file (at {at}, no episode's)"
        return (
            f"episode {meta.episode_index[e]}, camera {cam.name!r}: frame {within[f]} of the "
            f"episode (frame {f} of {meta.relative(video.path)}, at {at})"
        )

    missing = np.flatnonzero(width == 0)
    flagged = np.flatnonzero(result["corrupt"] != 0)
    bad = np.union1d(missing, flagged)
    why = "; ".join(f"packet {p}: {w}" for p, w in result["refused"][:3])
    if result["stopped"]:
        why = (why + "; " if why else "") + f"stopped {result['stopped']}"
    for e, frames in locate(bad).items():
        lost = np.intersect1d(frames, missing).size
        run.add(
            "error",
            "decode",
            f"{named(e, frames)} is the first of {frames.size} bad frame"
            f"{'s' if frames.size > 1 else ''} ({lost} not produced, {frames.size - lost} "
            f"flagged corrupt by the decoder){': ' + why if why else ''}",
            "re-encode the video from its source (or drop the episode): training would read "
            "garbage or fail here",
            **where(e, frames),
        )
    size = (width > 0) & ((width != video.width) | (height != video.height))
    fmt = (width > 0) & (pixel_format != stream_format)
    for e, frames in locate(np.flatnonzero(size | fmt)).items():
        f = int(frames[0])
        run.add(
            "error",
            "frame_format",
            f"{named(e, frames)} decodes to {width[f]}x{height[f]} "
            f"{names.get(int(pixel_format[f]), '?')}, the stream is {video.width}x{video.height} "
            f"{names.get(int(stream_format), '?')} ({frames.size} such frame"
            f"{'s' if frames.size > 1 else ''}): silently resized or converted, or garbage",
            "re-encode the video at one size and pixel format",
            expected=f"{video.width}x{video.height} {names.get(int(stream_format), '?')}",
            found=f"{width[f]}x{height[f]} {names.get(int(pixel_format[f]), '?')}",
            **where(e, frames),
        )
    unmatched = [(p, f) for p, f in result["unmatched"]]
    if unmatched:
        frames = np.array([f for _, f in unmatched if f >= 0], np.int64)
        packets = [p for p, _ in unmatched]
        groups = locate(frames) if frames.size else {-1: np.array([0], np.int64)}
        for e, group in groups.items():
            run.add(
                "error",
                "packets",
                f"{named(e, group)}: {len(packets)} packet{'s' if len(packets) > 1 else ''} "
                f"no longer match the frame table's checksums ({_listing(packets)}): the file "
                "changed or is damaged",
                "restore the video (or rebuild stoker's index if it was replaced on purpose)",
                **where(e, group),
            )
    _deep_duplicates(run, meta, cam, video, in_file, placement, result, owner, within)


def _deep_duplicates(run, meta, cam, video, in_file, placement, result, owner, within) -> None:
    """Consecutive frames of an episode that are the same picture: with more frames than the
    episode has rows, a duplicated frame (every later row shows the moment before its own);
    otherwise a still scene, or a frame repeated in place of a lost one (a warning)."""
    difference = result["difference"]
    for e in in_file:
        first = int(placement.first[e]) if placement is not None else -1
        if first < 0 or meta.length[e] < 3:
            continue
        stop = min(video.num_frames, first + int(meta.length[e]) + 1)
        d = difference[first + 1 : stop]
        known = d >= 0
        if known.sum() < 2:
            continue
        typical = float(np.median(d[known]))
        if typical <= 0.5:
            continue  # a still scene: repeats are expected
        same = np.flatnonzero(known & (d < _DUPLICATE_SHARE * typical))
        if not same.size:
            continue
        f = int(same[0]) + 1  # frame (within the episode) repeating the one before it
        extra = video.num_frames > int(meta.length[e]) and len(in_file) == 1
        run.add(
            "error" if extra else "warning",
            "duplicate_frames",
            f"episode {meta.episode_index[e]}, camera {cam.name!r}: frame {f} of the episode "
            f"repeats frame {f - 1} (they differ by {d[same[0]]:.2f} luma levels, frames "
            f"typically by {typical:.2f})"
            + (
                f"; with {video.num_frames} frames for {meta.length[e]} rows, every row from "
                f"{f} on shows the frame before its own"
                if extra
                else ": a duplicated frame, or a still moment"
            ),
            "re-encode the episode's video without the repeated frame"
            if extra
            else "check the episode's video around this frame",
            episode=int(meta.episode_index[e]),
            camera=cam.name,
            frame=f,
            row=int(meta.from_row[e] + f),
            file=video.path,
        )


def _deep_images(run: _Run, meta: _Meta, index: Any) -> None:
    """Every image of every image feature decoded (PNG / JPEG bytes in the data files)."""
    if not meta.image_cameras or index is None:
        return
    rows = index.num_rows
    threads = _core.usable_cores()
    for camera in meta.image_cameras:
        if camera not in index.image_cameras:
            continue
        c = index.cameras.index(camera)
        shape = meta.info.features[camera].shape
        height, width = (shape[0], shape[1]) if len(shape) == 3 and shape[2] in (1, 3) else (64, 64)
        transform = _core.TransformOptions()
        transform.resize_height, transform.resize_width = height, width
        transform.layout = _core.Layout.NHWC
        batch = 256
        out = np.empty((batch, height, width, 3), np.uint8)
        for start in range(0, rows, batch):
            count = min(batch, rows - start)
            images = [index.native.image_bytes(c, r) for r in range(start, start + count)]
            errors = _core.decode_images(
                images, transform, out[:count], height, width, threads=threads, collect_errors=True
            )
            for k, error in enumerate(errors):
                if not error:
                    continue
                r = start + k
                e = int(np.searchsorted(meta.from_row, r, side="right") - 1)
                run.add(
                    "error",
                    "images",
                    f"episode {meta.episode_index[e]}, camera {camera!r}: the image of row "
                    f"{r - meta.from_row[e]} of the episode cannot be decoded: {error}",
                    "re-encode the image from its source",
                    episode=int(meta.episode_index[e]),
                    camera=camera,
                    frame=int(r - meta.from_row[e]),
                    row=r,
                )
        run.report.scanned["decoded_images"] = run.report.scanned.get("decoded_images", 0) + rows


# ---------------------------------------------------------------------------------------------
# The check


def check_lerobot(
    dataset: Any,
    *,
    deep: bool = False,
    progress: bool = True,
    tolerance_s: float | None = None,
) -> CheckReport:
    """Checks a LeRobot dataset (a folder, a URL, or a :class:`stoker.LeRobotDataset`, whose
    mapped index is reused) and returns its :class:`CheckReport` (``seconds`` is left for the
    caller, :func:`stoker.check`, to fill)."""
    from stoker.datasets.lerobot.dataset import LeRobotDataset
    from stoker.datasets.lerobot.index import load_index

    index = None
    if isinstance(dataset, LeRobotDataset):
        location = dataset.root
        index = dataset.index
        if tolerance_s is None:
            tolerance_s = dataset.spec.tolerance_s
        options = getattr(dataset, "_storage_options", None)
        source = (
            open_dataset_root(location, options)
            if options is not None
            else open_dataset_root(location)
        )
    else:
        location = os.fspath(dataset)
        source = open_dataset_root(location)
        if not source.remote:
            location = os.path.abspath(location)
            if not os.path.isdir(location):
                raise DatasetError(f"dataset folder {location} does not exist")
            source = open_dataset_root(location)
    tolerance = DEFAULT_TOLERANCE_S if tolerance_s is None else float(tolerance_s)
    report = CheckReport(dataset=source.location, kind="lerobot", deep=deep)
    run = _Run(report, tolerance, progress, deep)
    report.checks = list(CHECKS) + (list(DEEP_CHECKS) if deep else [])
    try:
        _check(run, source, index, load_index)
    finally:
        run.close()
    return report


def _describes(index: Any, meta: _Meta) -> bool:
    """Whether an episode index can stand for the videos' frame tables in this check: it has
    every episode, row and camera of the metadata, and no episode it could not place (an
    index built with ``on_error="skip"``)."""
    cameras = [c.name for c in meta.cameras] + list(meta.image_cameras)
    return (
        index.num_episodes == meta.num_episodes
        and index.num_rows == meta.num_rows
        and all(name in index.cameras for name in cameras)
        and not getattr(index, "broken_episodes", ())
    )


def _check(run: _Run, source: Root, index: Any, load_index) -> None:
    meta = _read_meta(run, source)
    if meta is None:
        return
    report = run.report
    report.scanned.update(
        episodes=meta.num_episodes,
        rows=meta.num_rows,
        cameras=len(meta.cameras),
        video_files=sum(len(c.files) for c in meta.cameras),
    )
    index_error = ""
    if index is not None and not _describes(index, meta):
        index = None  # a LeRobotDataset's index of some cameras, or with broken episodes
    if index is None and not run.has_errors(("info", "files", "episodes")):
        try:
            index = load_index(
                source.location if source.remote else meta.root,
                progress=run.progress,
                tolerance_s=run.tolerance_s,
            )
        except (_core.Error, OSError) as e:
            index_error = str(e)
    if index is not None and not _describes(index, meta):
        index = None
    rows = _rows_from_index(meta, index) if index is not None else _rows_from_files(run, meta)
    usable = _check_rows(run, meta, rows)
    _check_features(run, meta, rows)
    videos = _open_videos(run, meta, index)
    skip = _check_videos(run, meta, videos)
    report.scanned["frames"] = sum(v.num_frames for v in videos.values() if isinstance(v, _Video))
    if videos and not run.deep:
        report.not_decoded = "videos"
    placements = _check_frames(run, meta, rows, usable, videos, skip)
    _check_stats(run, meta, rows)
    if index_error:
        explained = run.has_errors()
        run.add(
            "info" if explained else "error",
            "index",
            "stoker's episode index refuses the dataset"
            + (" (the errors above explain it)" if explained else "")
            + f": {index_error}",
            "fix the errors above; the index is then built on the next open"
            if explained
            else "report this: the index found a problem none of the checks names",
        )
    if run.deep:
        _deep_videos(run, meta, videos, placements)
        _deep_images(run, meta, index)
