"""What a LeRobot dataset's metadata says, read leniently so that one problem does not
hide the others: meta/info.json, the episode and task tables, where each episode's rows and
each camera's videos are (:class:`Meta`, :class:`Camera`), which files are missing, and the
counts info.json states."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from stoker._core import DatasetError
from stoker.checks.lerobot.run import Run, listing, parallel
from stoker.datasets.lerobot import format as lerobot_format
from stoker.datasets.lerobot import lance_layout
from stoker.datasets.lerobot.format import Info
from stoker.io.storage import Root


@dataclass
class Camera:
    """Where one video camera's episodes are: ``files`` (distinct, in dataset order), each
    episode's file number and stated start in it (``from_timestamp``, as the table says: NaN
    stays NaN, as the index build sees it)."""

    name: str
    files: list[str]
    file_of: np.ndarray  # int64 [E], -1 when the metadata does not say
    from_timestamp: np.ndarray  # float64 [E]


@dataclass
class Meta:
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
    cameras: list[Camera]
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


def read_meta(run: Run, source: Root) -> Meta | None:
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
            f"episode indices are not contiguous: {len(gaps)} missing ({listing(gaps)})"
            + (
                "; LeRobot v3.0 reads episode e at position e of the table, so every episode "
                "after the gap reads another's rows and videos"
                if version == "v3.0"
                else ""
            ),
            "renumber the episodes 0, 1, ... (meta files, data files and videos together), or "
            "restore the missing ones",
            expected=f"0..{len(episode_index) - 1}",
            found=f"{len(gaps)} missing: {listing(gaps)}",
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
    meta = Meta(
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
    _check_unreferenced(run, meta)
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
    # Each episode on its own: its range against its length, its start against the end of the
    # episode before it (not against the running sum of the lengths, which one wrong length
    # moves for every episode after it).
    follows = np.concatenate([[0], stop[:-1]]) if len(stop) else stop
    for k in np.flatnonzero((start != follows) | (stop != start + length)):
        own = stop[k] - start[k]
        why = (
            f"its length {length[k]} is not the {own} rows of its range"
            if stop[k] != start[k] + length[k]
            else f"it does not start where episode {episode_index[k - 1]} ends ({follows[k]})"
            if k
            else "the first episode does not start at row 0"
        )
        run.add(
            "error",
            "episodes",
            f"episode {episode_index[k]}'s row range [{start[k]}, {stop[k]}): {why}",
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


def _camera_files(run, source, info, table, episode_index, camera, where) -> Camera | None:
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
        return Camera(
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
        return Camera(camera, [], file_of, from_timestamp)
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
    return Camera(camera, [str(p) for p in paths], file_of, from_timestamp)


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


def _check_unreferenced(run: Run, meta: Meta) -> None:
    """Data and video files in the dataset's folders that no episode's metadata names: left
    over from another recording or a failed edit, read by no loader (LeRobot's or stoker's),
    and often a sign that the metadata lost episodes."""
    if meta.info.storage_format == "lance":
        return  # the frames and videos are tables of the Lance layout, not files per episode
    named = {meta.relative(p) for p in meta.data_files}
    for camera in meta.cameras:
        named.update(meta.relative(lance_layout.whole_file(p)) for p in camera.files)
    for folder, pattern, kind in (
        ("data", "*/*.parquet", "data"),
        ("videos", "*/*/*.mp4", "video"),
    ):
        try:
            found = meta.source.glob(folder, pattern)
        except (DatasetError, OSError):
            continue  # a folder that cannot be listed: the files check names what is missing
        for path in found:
            relative = meta.relative(path)
            if relative in named:
                continue
            run.add(
                "warning",
                "unreferenced_files",
                f"{kind} file {relative} is named by no episode of the metadata: no loader "
                "reads it",
                "delete it if it is left over, or restore the episode table entries that named it",
                file=path,
            )


def _check_files_present(run: Run, meta: Meta) -> None:
    remote = meta.source.remote

    def absent(files: Sequence[str], file_of: np.ndarray):
        """(path, its episodes) of each file of ``files`` that is missing or empty."""
        present = parallel(lambda p: _exists(meta.source, p), files, remote)
        for f, ok in enumerate(present):
            if not ok:
                yield files[f], meta.episode_index[file_of == f]

    def plural(episodes: np.ndarray) -> str:
        return f"episode{'s' if len(episodes) > 1 else ''} {listing(episodes)}"

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


def _check_counts(run: Run, meta: Meta) -> None:
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
