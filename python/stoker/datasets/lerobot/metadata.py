"""The metadata of a LeRobot dataset (codebase versions v2.1 and v3.0), checked, and its Parquet
columns as numpy arrays.

:func:`read_lerobot_metadata` reads the meta files (through
:mod:`stoker.datasets.lerobot.format`, which knows the layout of each version) and checks
that they agree with each other and with the files on disk; :func:`read_columns` loads whole
columns of the data files and checks the rows. Both hand whole numpy columns onward, never
per-row Python objects.

Every problem with the dataset raises :class:`stoker.DatasetError` naming the offending
episodes and files (all of them, when a check covers many).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stoker import _core
from stoker._core import DatasetError
from stoker.datasets.lerobot import format as lerobot_format
from stoker.datasets.lerobot import lance_layout
from stoker.datasets.lerobot.format import (
    DEFAULT_COLUMNS,
    Feature,
    float_column,
    format_paths,
    int_column,
)
from stoker.io.storage import LocalRoot, Root, RootLike, S3Options, open_dataset_root

__all__ = [
    "CameraVideos",
    "DatasetError",
    "DepthInfo",
    "Feature",
    "LeRobotMetadata",
    "depth_cameras",
    "image_cameras",
    "read_columns",
    "read_image_column",
    "read_data_schema",
    "read_data_table",
    "read_lerobot_metadata",
    "stored_data_files",
]

# How many offenders a message lists before it says "and N more".
_MAX_LISTED = 20


@dataclass(frozen=True)
class CameraVideos:
    """Where one camera's frames are, per episode.

    ``files`` are the distinct video files (absolute paths, or URLs) in dataset order, and
    ``file_index[e]`` says which of them holds the e-th episode (the e-th entry of
    :attr:`LeRobotMetadata.episode_index`). ``from_timestamp[e]`` / ``to_timestamp[e]`` are the
    episode's span in that file in seconds, as the metadata states it (v2.1: 0 and
    length / fps). In packed v3.0 files ``from_timestamp`` is a running sum of durations, which
    can drift from the real pts (see ``shared/PEERS.md``): treat it as an estimate to snap to.
    """

    files: np.ndarray  # str [V]
    file_index: np.ndarray  # int32 [E]
    from_timestamp: np.ndarray  # float64 [E]
    to_timestamp: np.ndarray  # float64 [E]

    @property
    def paths(self) -> np.ndarray:
        """The video file of every episode: str [E]."""
        return self.files[self.file_index]


@dataclass(frozen=True)
class LeRobotMetadata:
    """Everything about a LeRobot dataset except its rows and pixels, as numpy columns.

    Per-episode arrays have one entry per episode, sorted by ``episode_index``. Rows are
    numbered in dataset order (the ``index`` column): episode e covers rows
    ``dataset_from_index[e]`` to ``dataset_to_index[e]`` (exclusive). All arrays are read-only.
    ``root`` is the folder's absolute path, or its URL; ``source`` reads its files.
    """

    root: str
    codebase_version: str
    fps: float
    cameras: tuple[str, ...]  # video keys, in info.json order
    features: dict[str, Feature]  # every feature of info.json, videos included
    chunks_size: int  # files per chunk folder
    info: dict[str, Any]  # the whole of meta/info.json as read (checked by lerobot_format)
    tasks: np.ndarray  # str [T]: the text of task_index t is tasks[t] ("" where undefined)
    num_episodes: int
    num_frames: int
    # Per episode.
    episode_index: np.ndarray  # int64 [E]
    length: np.ndarray  # int64 [E]
    dataset_from_index: np.ndarray  # int64 [E]
    dataset_to_index: np.ndarray  # int64 [E]
    task_index: np.ndarray  # int64 [E], the episode's first task; -1 when it lists none
    episode_data_file: np.ndarray  # int32 [E]: index into data_files
    # Per data file, in dataset order.
    data_files: np.ndarray  # str [F], absolute paths (URLs)
    data_file_from_index: np.ndarray  # int64 [F]
    data_file_to_index: np.ndarray  # int64 [F], exclusive
    # Per camera.
    videos: dict[str, CameraVideos]
    source: Root = dataclasses.field(
        default_factory=lambda: LocalRoot("."), compare=False, repr=False
    )


def read_lerobot_metadata(
    root: RootLike, storage_options: Mapping[str, Any] | S3Options | None = None
) -> LeRobotMetadata:
    """Reads the metadata of the LeRobot dataset in folder ``root``: a path, an
    ``s3://bucket/prefix`` or ``https://`` URL (with ``storage_options``, see
    :mod:`stoker.io.storage`), or a :class:`stoker.io.storage.Root`.

    Checks that the meta files exist and agree: a known ``codebase_version``, at least one
    episode with frames, episode row ranges that are contiguous and match the lengths, every
    data file present, every camera present in every episode, every video file present.
    Parquet contents are not read here (see :func:`read_columns`), only the metadata tables.

    Raises:
        stoker.DatasetError: naming the meta file, or all the offending episodes and files.
    """
    source = open_dataset_root(root, storage_options)
    info = lerobot_format.read_info(source)
    if info.codebase_version == "v3.0":
        parts = _read_v30(source, info)
    else:
        parts = _read_v21(source, info)
    meta = LeRobotMetadata(
        root=source.location,
        source=source,
        codebase_version=info.codebase_version,
        fps=info.fps,
        cameras=info.cameras,
        features=info.features,
        chunks_size=info.chunks_size,
        info=info.raw,
        **parts,
    )
    _freeze(meta)
    return meta


def _freeze(meta: LeRobotMetadata) -> None:
    """Makes every array of ``meta`` read-only."""
    for value in vars(meta).values():
        if isinstance(value, np.ndarray):
            value.flags.writeable = False
    for videos in meta.videos.values():
        for value in vars(videos).values():
            value.flags.writeable = False


# What an index attaches of the metadata it was built from (see metadata_attachments): names
# under this prefix, and the layout of the set, which a reader checks before trusting it.
_ATTACHED = "meta/"
_ATTACHED_LAYOUT = "1"


def metadata_attachments(
    meta: LeRobotMetadata,
) -> tuple[list[tuple[str, np.ndarray]], list[tuple[str, list[str]]]]:
    """What of ``meta`` an episode index keeps beside its own arrays, as (named arrays, named
    lists of strings), so that :func:`attached_metadata` gives ``meta`` back from the index
    without reading the episode tables: the fields the index does not hold itself (its
    episodes' first rows, lengths and tasks are ``meta``'s), and the meta files they were read
    from."""
    arrays = [
        ("episode_index", meta.episode_index),
        ("dataset_to_index", meta.dataset_to_index),
        ("episode_data_file", meta.episode_data_file),
        ("data_file_from_index", meta.data_file_from_index),
        ("data_file_to_index", meta.data_file_to_index),
    ]
    strings = [
        ("layout", [_ATTACHED_LAYOUT]),
        ("meta_files", lerobot_format.meta_files(meta.source, meta.codebase_version)),
        ("cameras", list(meta.cameras)),
        ("data_files", [str(p) for p in meta.data_files]),
    ]
    for camera, videos in meta.videos.items():
        prefix = f"videos/{camera}/"
        arrays += [
            (prefix + "file_index", videos.file_index),
            (prefix + "from_timestamp", videos.from_timestamp),
            (prefix + "to_timestamp", videos.to_timestamp),
        ]
        strings.append((prefix + "files", [str(p) for p in videos.files]))
    return (
        [(_ATTACHED + name, np.ascontiguousarray(values)) for name, values in arrays],
        [(_ATTACHED + name, values) for name, values in strings],
    )


def attached_metadata(
    index: Any, source: Root, info: lerobot_format.Info | None = None
) -> LeRobotMetadata | None:
    """The metadata an episode index was built from (what :func:`read_lerobot_metadata` gave
    then), from what it attached (:func:`metadata_attachments`) and its own per-episode arrays,
    with the info and tasks read again (``info``: already read); its arrays are views of the
    mapped index, so a dataset of millions of episodes costs no memory until they are read.

    REQUIRES: the index (an ``_core.EpisodeIndex``) is current (its tracked files unchanged),
    so that the meta files it tracks hold what they held at its build. Returns None, for the
    caller to read the metadata instead, when the index attaches no metadata (or another
    layout of it), when the meta files are not the same set (a file of the episode table came
    since), or when a video file of a camera the index does not cover (and does not track) is
    missing or empty: what read_lerobot_metadata would refuse.
    """
    try:
        if index.attached_strings(_ATTACHED + "layout") != [_ATTACHED_LAYOUT]:
            return None
        info = info if info is not None else lerobot_format.read_info(source)
        if list(info.cameras) != index.attached_strings(_ATTACHED + "cameras"):
            return None
        meta_files = lerobot_format.meta_files(source, info.codebase_version)
        if meta_files != index.attached_strings(_ATTACHED + "meta_files"):
            return None

        def array(name: str) -> np.ndarray:
            return index.attached_array(_ATTACHED + name)

        def paths(name: str) -> np.ndarray:
            return np.array(index.attached_strings(_ATTACHED + name), dtype=str)

        indexed = set(index.cameras)
        videos = {}
        for camera in info.cameras:
            prefix = f"videos/{camera}/"
            files = paths(prefix + "files")
            if camera not in indexed and _absent(source, files):
                return None
            videos[camera] = CameraVideos(
                files=files,
                file_index=array(prefix + "file_index"),
                from_timestamp=array(prefix + "from_timestamp"),
                to_timestamp=array(prefix + "to_timestamp"),
            )
        from_index, length, task_index = index.episode_views()
        to_index = array("dataset_to_index")
        task_texts, _ = lerobot_format.read_tasks(source, info.codebase_version)
        meta = LeRobotMetadata(
            root=source.location,
            source=source,
            codebase_version=info.codebase_version,
            fps=info.fps,
            cameras=info.cameras,
            features=info.features,
            chunks_size=info.chunks_size,
            info=info.raw,
            tasks=task_texts,
            num_episodes=len(length),
            num_frames=int(to_index[-1]),
            episode_index=array("episode_index"),
            length=length,
            dataset_from_index=from_index,
            dataset_to_index=to_index,
            task_index=task_index,
            episode_data_file=array("episode_data_file"),
            data_files=paths("data_files"),
            data_file_from_index=array("data_file_from_index"),
            data_file_to_index=array("data_file_to_index"),
            videos=videos,
        )
    except KeyError:  # not attached: an index built without them
        return None
    _freeze(meta)
    return meta


def read_columns(
    meta: LeRobotMetadata, names: Iterable[str], *, tolerance_s: float = 1e-4
) -> dict[str, np.ndarray]:
    """Loads Parquet columns of the whole dataset as contiguous numpy arrays.

    ``names`` may be any of :data:`DEFAULT_COLUMNS` and the numeric features of info.json
    (e.g. ``observation.state``, ``action``). A scalar column comes back 1-D [rows]; a
    fixed-length list feature comes back 2-D [rows, dim]. Files are concatenated in dataset
    order, so row r of every array is the row with ``index`` r.

    Checks, whatever ``names`` asks for: the schema is the same in every data file; every
    file holds exactly its episodes' rows; ``index`` runs 0, 1, ... in row order; each
    episode's rows carry its ``episode_index`` and number its ``length``; within each
    episode ``timestamp`` advances by 1 / fps per row, within ``tolerance_s``; and, when
    asked for, ``frame_index`` counts 0, 1, ... within each episode.

    Raises:
        ValueError: a name that is not a readable column.
        stoker.DatasetError: naming the offending files or episodes.
    """
    names = list(dict.fromkeys([names] if isinstance(names, str) else names))
    readable = readable_columns(meta)
    unknown = [name for name in names if name not in readable]
    if unknown:
        raise ValueError(
            f"cannot read columns {unknown}: the readable columns of this dataset "
            f"are {sorted(readable)}"
        )
    if not tolerance_s >= 0:
        raise ValueError(f"tolerance_s must be non-negative, got {tolerance_s!r}")

    _check_schemas(meta)
    needed = list(dict.fromkeys(["index", "episode_index", "timestamp", *names]))
    columns = _load_columns(meta, needed, readable)
    _check_rows(meta, columns, tolerance_s)
    return {name: columns[name] for name in names}


def image_cameras(meta: LeRobotMetadata) -> tuple[str, ...]:
    """The image features (``"dtype": "image"``: PNG or JPEG bytes stored in the data files), in
    info.json order. Unlike :attr:`LeRobotMetadata.cameras`, they have no video files."""
    return tuple(name for name, feature in meta.features.items() if feature.dtype == "image")


#: LeRobot 0.6.1's depth quantizer defaults (lerobot.configs.video): what its reader takes for a
#: quantizer parameter a feature's info does not give.
LEROBOT_DEPTH_DEFAULTS = {"video.depth_min": 0.01, "video.depth_max": 10.0, "video.shift": 3.5}
_QUANTIZER_KEYS = ("video.depth_min", "video.depth_max", "video.shift", "video.use_log")
_AFFINE_KEYS = ("video.depth_scale", "video.depth_offset")


@dataclass(frozen=True)
class DepthInfo:
    """What a depth camera's feature info says about its samples.

    ``coding``: ``"lerobot_log"`` / ``"lerobot_linear"`` (LeRobot 0.6: ``is_depth_map`` or the
    quantizer's ``video.depth_min``, ``video.depth_max``, ``video.shift``, ``video.use_log``,
    12-bit codes between ``depth_min`` and ``depth_max`` metres; a parameter not given takes
    LeRobot 0.6.1's default, as its reader does); ``"affine"`` (stoker's own
    ``video.depth_scale``, metres per stored unit, and ``video.depth_offset``, default 0);
    ``"stored"`` (LeRobot 0.4-0.5's ``video.is_depth_map`` alone: samples whose meaning the
    dataset does not say). ``recorded_unit``: info's ``depth_unit`` (LeRobot 0.6: the unit the
    statistics are in), or None.
    """

    coding: str
    scale: float | None = None
    offset: float = 0.0
    depth_min: float = LEROBOT_DEPTH_DEFAULTS["video.depth_min"]
    depth_max: float = LEROBOT_DEPTH_DEFAULTS["video.depth_max"]
    shift: float = LEROBOT_DEPTH_DEFAULTS["video.shift"]
    recorded_unit: str | None = None


def depth_cameras(meta: LeRobotMetadata) -> dict[str, DepthInfo]:
    """The depth cameras among the video features, in info.json order: those whose ``info`` (or
    v2.0's ``video_info``) says ``"is_depth_map": true`` (LeRobot 0.6) or ``"video.is_depth_map":
    true`` (earlier), single-channel high-bit-depth video (gray10le / gray12le / gray16le) that
    stoker decodes to its stored uint16 samples. Raises :class:`stoker.DatasetError` naming the
    feature when those fields are not what they should be: booleans; finite numbers, a
    positive scale, depth_min < depth_max, depth_min + shift > 0 for the log quantizer; a
    quantized stream other than gray12le; both codings at once."""
    features = meta.info.get("features", {})
    found: dict[str, DepthInfo] = {}
    for camera in meta.cameras:
        feature = features.get(camera, {})
        info = {**(feature.get("video_info") or {}), **(feature.get("info") or {})}
        flags = {key: info[key] for key in ("is_depth_map", "video.is_depth_map") if key in info}
        for key, flag in flags.items():
            if not isinstance(flag, bool):
                raise DatasetError(
                    f"{meta.root}: feature {camera!r} has {key} {flag!r}; info.json should say "
                    "true or false"
                )
        if not any(flags.values()):
            continue
        found[camera] = _depth_info(meta, camera, info, lerobot_06="is_depth_map" in flags)
    return found


def _depth_info(meta: LeRobotMetadata, camera: str, info: Mapping, lerobot_06: bool) -> DepthInfo:
    where = f"{meta.root}: depth feature {camera!r}"
    unit = info.get("depth_unit")
    if unit not in (None, "mm", "m"):
        raise DatasetError(f"{where} has depth_unit {unit!r}; LeRobot writes 'mm' or 'm'")
    quantized = lerobot_06 or any(key in info for key in _QUANTIZER_KEYS)
    affine = [key for key in _AFFINE_KEYS if key in info]
    if quantized and affine:
        raise DatasetError(
            f"{where} has both LeRobot 0.6's quantizer and stoker's {affine}: which one made "
            "its samples cannot be told; keep one in info.json"
        )
    if not quantized:
        scale = _depth_number(meta, camera, info, "video.depth_scale")
        if scale is not None and scale <= 0:
            raise DatasetError(
                f"{where} has video.depth_scale {scale}; metres per stored unit must be positive"
            )
        offset = _depth_number(meta, camera, info, "video.depth_offset")
        return DepthInfo(
            coding="stored" if not affine else "affine",
            scale=scale,
            offset=0.0 if offset is None else offset,
            recorded_unit=unit,
        )
    pix_fmt = info.get("video.pix_fmt", "gray12le")
    if pix_fmt != "gray12le":
        raise DatasetError(
            f"{where} is LeRobot 0.6's quantized depth stored as {pix_fmt!r}: LeRobot writes its "
            "12-bit codes as gray12le and reads any stream as gray12le (another format's "
            "samples would be rescaled); stoker reads quantized depth from gray12le only"
        )
    use_log = info.get("video.use_log", True)
    if not isinstance(use_log, bool):
        raise DatasetError(f"{where} has video.use_log {use_log!r}; it should be true or false")
    values = {key: _depth_number(meta, camera, info, key) for key in LEROBOT_DEPTH_DEFAULTS}
    low, high, shift = (
        LEROBOT_DEPTH_DEFAULTS[key] if value is None else value for key, value in values.items()
    )
    if not low < high:
        raise DatasetError(f"{where}: video.depth_min {low} must be below video.depth_max {high}")
    if use_log and not low + shift > 0:
        raise DatasetError(
            f"{where}: the log quantizer needs video.depth_min + video.shift > 0, got "
            f"{low} + {shift}"
        )
    return DepthInfo(
        coding="lerobot_log" if use_log else "lerobot_linear",
        depth_min=low,
        depth_max=high,
        shift=shift,
        recorded_unit=unit,
    )


def _depth_number(meta: LeRobotMetadata, camera: str, info: Mapping, name: str) -> float | None:
    value = info.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value):
        raise DatasetError(
            f"{meta.root}: feature {camera!r} has {name} {value!r}; info.json should give a "
            "finite number"
        )
    return float(value)


def _is_lance(meta: LeRobotMetadata) -> bool:
    return meta.info.get("storage_format") == "lance"


def read_data_table(
    meta: LeRobotMetadata, path: str, columns: Sequence[str] | None = None
) -> pa.Table:
    """The columns ``columns`` (None: all) of data file ``path`` of ``meta``, named by feature:
    a Parquet file, or the Lance frames table (:mod:`stoker.datasets.lerobot.lance_layout`).
    A column the file lacks is refused by name."""
    if _is_lance(meta):
        return lance_layout.read_frames(meta.source, meta.features, DEFAULT_COLUMNS, columns)
    return meta.source.read_parquet(
        path, "data file", columns=None if columns is None else list(columns)
    )


def read_data_schema(meta: LeRobotMetadata, path: str) -> pa.Schema:
    """The schema of data file ``path`` of ``meta``, named by feature (see read_data_table)."""
    if _is_lance(meta):
        return lance_layout.frames_schema(meta.source, meta.features, DEFAULT_COLUMNS)
    return meta.source.read_schema(path, "data file")


def stored_data_files(meta: LeRobotMetadata) -> list[str]:
    """The files that hold the rows of ``meta``'s data files (the Parquet files, or the Lance
    frames table's files): what a change of the rows changes."""
    if _is_lance(meta):
        return lance_layout.stored_frames_files(meta.source)
    return [str(p) for p in meta.data_files]


def read_image_column(meta: LeRobotMetadata, f: int, name: str) -> tuple[np.ndarray, list]:
    """Image feature ``name`` of data file ``f``: (each row's byte length, int64 [rows]; the
    Arrow buffers holding the rows' encoded images back to back, in row order).

    The column is LeRobot's ``{bytes, path}`` struct (or plain binary). The bytes are never
    copied into Python objects: the buffers are slices of what pyarrow read.

    Raises:
        stoker.DatasetError: the file's rows do not match its episodes, or a row has no image
            bytes (a null, or an image stored only by ``path``), naming the file and row.
    """
    path = meta.data_files[f]
    start, stop = int(meta.data_file_from_index[f]), int(meta.data_file_to_index[f])
    table = read_data_table(meta, path, [name])
    if table.num_rows != stop - start:
        raise DatasetError(
            f"data file {path} has {table.num_rows} rows, but its episodes have {stop - start} "
            "in the metadata"
        )
    lengths = np.empty(stop - start, np.int64)
    buffers = []
    row = 0
    for chunk in table.column(name).chunks:
        if pa.types.is_struct(chunk.type):
            if chunk.type.get_field_index("bytes") < 0:
                raise DatasetError(
                    f"data file {path}: image column {name!r} is {chunk.type}, with no 'bytes'"
                )
            nulls = np.asarray(chunk.is_null(), bool)
            chunk = chunk.flatten()[chunk.type.get_field_index("bytes")]
            nulls |= np.asarray(chunk.is_null(), bool)
        else:
            nulls = np.asarray(chunk.is_null(), bool)
        if not (pa.types.is_binary(chunk.type) or pa.types.is_large_binary(chunk.type)):
            raise DatasetError(
                f"data file {path}: image column {name!r} holds {chunk.type}, not image bytes"
            )
        if nulls.any():
            raise DatasetError(
                f"data file {path}: image column {name!r} has no image bytes at row "
                f"{start + row + int(np.argmax(nulls))} (images stored only by path are not read)"
            )
        offset_type = np.int64 if pa.types.is_large_binary(chunk.type) else np.int32
        _, offsets_buffer, data = chunk.buffers()
        offsets = np.frombuffer(offsets_buffer, offset_type)[
            chunk.offset : chunk.offset + len(chunk) + 1
        ].astype(np.int64)
        lengths[row : row + len(chunk)] = np.diff(offsets)
        if len(chunk):
            buffers.append(data.slice(int(offsets[0]), int(offsets[-1] - offsets[0])))
        row += len(chunk)
    if lengths.size and lengths.min() <= 0:
        bad = int(np.argmin(lengths))
        raise DatasetError(f"data file {path}: image column {name!r} is empty at row {start + bad}")
    return lengths, buffers


# ---------------------------------------------------------------------------------------------
# v2.1


def _read_v21(root: Root, info: lerobot_format.Info) -> dict[str, Any]:
    where = lerobot_format.episodes_location(root, info.codebase_version)
    episodes = lerobot_format.read_episode_table(
        root, info.codebase_version, columns=("episode_index", "length", "tasks")
    )
    task_texts, task_index = lerobot_format.read_tasks(root, info.codebase_version)
    _require_columns(episodes, ("episode_index", "length"), where)
    if episodes.num_rows == 0:
        raise DatasetError(f"empty dataset: {where} lists no episodes")
    episodes = episodes.sort_by("episode_index")
    episode_index = int_column(episodes, "episode_index", where)
    length = int_column(episodes, "length", where)
    _check_episode_indices(episode_index, where)
    _check_lengths(episode_index, length, where)
    episode_task = _episode_tasks(episodes, task_texts, task_index, episode_index, where)

    from_index = np.zeros(len(length), np.int64)
    np.cumsum(length[:-1], out=from_index[1:])
    to_index = from_index + length

    episode_chunk = episode_index // info.chunks_size
    data_files = format_paths(
        root, info.data_path, "data_path", episode_chunk=episode_chunk, episode_index=episode_index
    )
    _check_files_exist(root, data_files, episode_index, "missing data files")

    videos = {}
    for camera in info.cameras:
        paths = format_paths(
            root,
            str(info.video_path),
            "video_path",
            episode_chunk=episode_chunk,
            episode_index=episode_index,
            video_key=camera,
        )
        _check_files_exist(
            root,
            paths,
            episode_index,
            f"missing video files of camera {camera!r} (the camera is missing from these episodes)",
        )
        videos[camera] = CameraVideos(
            files=paths,
            file_index=np.arange(len(paths), dtype=np.int32),
            from_timestamp=np.zeros(len(paths)),
            to_timestamp=length / info.fps,
        )

    return dict(
        **_episode_rows(task_texts, episode_index, length, from_index, to_index, episode_task),
        episode_data_file=np.arange(len(data_files), dtype=np.int32),
        data_files=data_files,
        data_file_from_index=from_index.copy(),
        data_file_to_index=to_index.copy(),
        videos=videos,
    )


def _episode_rows(
    task_texts, episode_index, length, from_index, to_index, episode_task
) -> dict[str, Any]:
    """The fields of LeRobotMetadata every layout gives the same way: the tasks, and each
    episode's index, length, rows and task."""
    return dict(
        tasks=task_texts,
        num_episodes=len(episode_index),
        num_frames=int(to_index[-1]),
        episode_index=episode_index,
        length=length,
        dataset_from_index=from_index,
        dataset_to_index=to_index,
        task_index=episode_task,
    )


# ---------------------------------------------------------------------------------------------
# v3.0

_VIDEO_FIELDS = ("chunk_index", "file_index", "from_timestamp", "to_timestamp")


def _read_v30(root: Root, info: lerobot_format.Info) -> dict[str, Any]:
    task_texts, task_index = lerobot_format.read_tasks(root, info.codebase_version)
    wanted = [
        "episode_index",
        "length",
        "data/chunk_index",
        "data/file_index",
        "dataset_from_index",
        "dataset_to_index",
        "tasks",
    ]
    for camera in info.cameras:
        wanted += [f"videos/{camera}/{field}" for field in _VIDEO_FIELDS]
    episodes = lerobot_format.read_episode_table(root, info.codebase_version, columns=wanted)
    where = lerobot_format.episodes_location(root, info.codebase_version)
    _require_columns(episodes, wanted[:6], where)
    if episodes.num_rows == 0:
        raise DatasetError(f"empty dataset: {where} lists no episodes")
    episodes = episodes.sort_by("episode_index")
    episode_index = int_column(episodes, "episode_index", where)
    length = int_column(episodes, "length", where)
    from_index = int_column(episodes, "dataset_from_index", where)
    to_index = int_column(episodes, "dataset_to_index", where)
    _check_episode_indices(episode_index, where)
    _check_lengths(episode_index, length, where)
    expected_from = np.zeros(len(length), np.int64)
    np.cumsum(length[:-1], out=expected_from[1:])
    bad = np.flatnonzero((from_index != expected_from) | (to_index != from_index + length))
    if bad.size:
        raise DatasetError(
            f"{where}: the row ranges of episodes are not contiguous or do not match their "
            "lengths: "
            + _listing(
                f"episode {episode_index[i]} (dataset_from_index {from_index[i]}, "
                f"dataset_to_index {to_index[i]}, length {length[i]}; expected from "
                f"{expected_from[i]})"
                for i in bad
            )
        )
    episode_task = _episode_tasks(episodes, task_texts, task_index, episode_index, where)

    rows = _episode_rows(task_texts, episode_index, length, from_index, to_index, episode_task)
    if info.storage_format == "lance":
        return dict(**rows, **_lance_tables(root, info, episodes, episode_index, where))

    data_chunk = int_column(episodes, "data/chunk_index", where)
    data_file = int_column(episodes, "data/file_index", where)
    first, episode_data_file = _unique_in_order(data_chunk * info.chunks_size + data_file)
    if np.any(np.diff(episode_data_file) < 0):
        bad = np.flatnonzero(np.diff(episode_data_file) < 0) + 1
        raise DatasetError(
            f"{where}: data files do not hold episodes in dataset order: "
            + _listing(f"episode {episode_index[i]}" for i in bad)
        )
    data_files = format_paths(
        root,
        info.data_path,
        "data_path",
        chunk_index=data_chunk[first],
        file_index=data_file[first],
    )
    _check_files_exist(root, data_files, None, "missing data files")
    file_from = from_index[first]
    file_to = np.maximum.reduceat(to_index, np.flatnonzero(np.diff(episode_data_file, prepend=-1)))

    videos = {
        camera: _camera_videos_v30(root, info, episodes, episode_index, camera, where)
        for camera in info.cameras
    }

    return dict(
        **rows,
        episode_data_file=episode_data_file.astype(np.int32),
        data_files=data_files,
        data_file_from_index=file_from,
        data_file_to_index=file_to,
        videos=videos,
    )


def _lance_tables(
    root: Root,
    info: lerobot_format.Info,
    episodes: pa.Table,
    episode_index: np.ndarray,
    where: str,
) -> dict[str, Any]:
    """A Lance dataset's data file (its frames table: one, holding every row) and videos (each
    MP4 of the v3.0 copy, a byte slice of a file of its videos table)."""
    lance_layout.frames_columns(root, info.features, DEFAULT_COLUMNS)  # refuses what it cannot map
    num_frames = int(int_column(episodes, "dataset_to_index", where).max())
    files = {
        camera: _video_files_v30(info, episodes, episode_index, camera, where)
        for camera in info.cameras
    }
    wanted = [
        (camera, int(c), int(f))
        for camera, (chunks, file_numbers, _) in files.items()
        for c, f in zip(chunks, file_numbers)
    ]
    slices = lance_layout.video_slices(root, wanted) if wanted else {}
    videos = {
        camera: _camera_videos(
            episodes,
            camera,
            where,
            np.array([slices[camera, int(c), int(f)] for c, f in zip(chunks, file_numbers)], str),
            file_index,
        )
        for camera, (chunks, file_numbers, file_index) in files.items()
    }
    return dict(
        episode_data_file=np.zeros(len(episode_index), np.int32),
        data_files=np.array([root.url(lance_layout.FRAMES_TABLE)], dtype=str),
        data_file_from_index=np.zeros(1, np.int64),
        data_file_to_index=np.array([num_frames], np.int64),
        videos=videos,
    )


def _video_files_v30(
    info: lerobot_format.Info,
    episodes: pa.Table,
    episode_index: np.ndarray,
    camera: str,
    where: str,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The chunk_index and file_index of each of a camera's video files, in the order episodes
    first use them, and the position of each episode's file among them."""
    prefix = f"videos/{camera}/"
    missing = np.zeros(episodes.num_rows, bool)
    for field in _VIDEO_FIELDS:
        missing |= lerobot_format.null_flags(episodes.column(prefix + field))
    if missing.any():
        raise DatasetError(
            f"camera {camera!r} is missing from some episodes (no {prefix}* entries in "
            f"{where}): " + _listing(f"episode {e}" for e in episode_index[missing])
        )
    chunk = int_column(episodes, prefix + "chunk_index", where)
    file = int_column(episodes, prefix + "file_index", where)
    first, file_index = _unique_in_order(chunk * info.chunks_size + file)
    return chunk[first], file[first], file_index.astype(np.int32)


def _camera_videos(
    episodes: pa.Table, camera: str, where: str, files: np.ndarray, file_index: np.ndarray
) -> CameraVideos:
    prefix = f"videos/{camera}/"
    return CameraVideos(
        files=files,
        file_index=file_index,
        from_timestamp=float_column(episodes, prefix + "from_timestamp", where),
        to_timestamp=float_column(episodes, prefix + "to_timestamp", where),
    )


def _camera_videos_v30(
    root: Root,
    info: lerobot_format.Info,
    episodes: pa.Table,
    episode_index: np.ndarray,
    camera: str,
    where: str,
) -> CameraVideos:
    chunks, file_numbers, file_index = _video_files_v30(
        info, episodes, episode_index, camera, where
    )
    files = format_paths(
        root,
        str(info.video_path),
        "video_path",
        video_key=camera,
        chunk_index=chunks,
        file_index=file_numbers,
    )
    absent = _absent(root, files)
    if absent:
        raise DatasetError(
            f"missing video files of camera {camera!r}: "
            + _listing(
                f"{files[i]} (episodes {_ranges(episode_index[file_index == i])})" for i in absent
            )
        )
    return _camera_videos(episodes, camera, where, files, file_index)


# ---------------------------------------------------------------------------------------------
# Checks shared by both versions


def _require_columns(table: pa.Table, names: Sequence[str], where: str) -> None:
    """Raises when a non-empty table lacks one of ``names`` (or has it only as nulls)."""
    if table.num_rows == 0:
        return
    missing = [
        name
        for name in names
        if name not in table.column_names or table.column(name).null_count == table.num_rows
    ]
    if missing:
        raise DatasetError(f"{where} lacks the columns {missing}")


def _check_episode_indices(episode_index: np.ndarray, where: str) -> None:
    repeated = np.unique(episode_index[1:][np.diff(episode_index) == 0])
    if repeated.size:
        raise DatasetError(
            f"{where} lists episodes more than once: " + _listing(f"episode {e}" for e in repeated)
        )
    if episode_index[0] < 0:
        raise DatasetError(f"{where}: negative episode_index {episode_index[0]}")


def _check_lengths(episode_index: np.ndarray, length: np.ndarray, where: str) -> None:
    bad = np.flatnonzero(length < 0)
    if bad.size:
        raise DatasetError(
            f"{where}: negative episode lengths: "
            + _listing(f"episode {episode_index[i]}" for i in bad)
        )
    if length.sum() == 0:
        raise DatasetError(f"empty dataset: the episodes in {where} have no frames")


def _episode_tasks(episodes, texts, task_index, episode_index, where) -> np.ndarray:
    """The task_index of each episode's first listed task, -1 where it lists none. Computed on
    Arrow arrays: no Python object per episode."""
    result = np.full(episodes.num_rows, -1, np.int64)
    if "tasks" not in episodes.column_names or texts.size == 0:
        return result
    column = episodes.column("tasks")
    if pa.types.is_null(column.type):
        return result
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        values = column.combine_chunks()  # one text per episode
        first = np.arange(len(values), dtype=np.int64)  # where each episode's text is
        listing = np.ones(len(values), bool)
    else:  # lists of texts
        column = column.combine_chunks()
        counts = lerobot_format.numbers(pc.list_value_length(column), np.int64, fill=0)
        values = column.flatten()  # every episode's texts, back to back
        first = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        listing = counts > 0
    listed = lerobot_format.string_array(texts[task_index])
    found = lerobot_format.numbers(pc.index_in(values, value_set=listed), np.int64, fill=-1)
    position = np.full(len(result), -1, np.int64)
    position[listing] = found[first[listing]]
    has_task = listing.copy()
    has_task[listing] = ~lerobot_format.null_flags(values)[first[listing]]
    unknown = has_task & (position < 0)
    if unknown.any():
        raise DatasetError(
            f"{where}: episodes name tasks missing from the tasks table: "
            + _listing(f"episode {e}" for e in episode_index[unknown])
        )
    result[has_task] = task_index[position[has_task]]
    return result


def _nonempty_file(path: str) -> bool:
    try:
        return os.path.isfile(path) and os.path.getsize(path) > 0
    except OSError:
        return False


def _absent(root: Root, paths: np.ndarray) -> list[int]:
    """Positions of the paths (members of ``root``) that are missing or empty; a byte slice
    (a video in a Lance table) by its whole file."""
    paths = np.array([lance_layout.whole_file(str(p)) for p in paths], dtype=str)
    if not root.remote:
        return [i for i, path in enumerate(paths) if not _nonempty_file(path)]
    sizes = root.sizes([str(p) for p in paths])  # an S3 root's listing: no request per path
    return [i for i, size in enumerate(sizes) if size <= 0]


def _check_files_exist(
    root: Root, paths: np.ndarray, episode_index: np.ndarray | None, what: str
) -> None:
    """Raises ``what: <the absent or empty files>`` when any of ``paths`` is missing."""
    absent = _absent(root, paths)
    if absent:
        if episode_index is None:
            items = (str(paths[i]) for i in absent)
        else:
            items = (f"episode {episode_index[i]} ({paths[i]})" for i in absent)
        raise DatasetError(f"{what}: " + _listing(items))


def _unique_in_order(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(position of each distinct key's first occurrence, in order; each entry's group)."""
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return first[order], rank[inverse.reshape(-1)]


def _listing(items: Iterable[str]) -> str:
    items = list(items)
    text = ", ".join(items[:_MAX_LISTED])
    if len(items) > _MAX_LISTED:
        text += f", and {len(items) - _MAX_LISTED} more"
    return text


def _ranges(values: np.ndarray) -> str:
    """'3-7' for a run of integers, '3, 5' otherwise."""
    values = np.asarray(values)
    if values.size and np.all(np.diff(values) == 1) and values.size > 2:
        return f"{values[0]}-{values[-1]}"
    return ", ".join(str(v) for v in values)


# ---------------------------------------------------------------------------------------------
# Parquet columns


def readable_columns(meta: LeRobotMetadata) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Column name -> (numpy dtype, per-row shape) of every column read_columns can load."""
    readable = {}
    for name, feature in meta.features.items():
        if feature.dtype in ("video", "image", "string"):
            continue
        try:
            dtype = np.dtype(feature.dtype).name
        except TypeError:
            continue
        if np.dtype(dtype).kind not in "biuf":
            continue
        shape = () if feature.shape in ((), (1,)) else feature.shape
        # A dimension of -1 marks a variable-length list (HF datasets' Sequence(length=-1)):
        # not a fixed array, so not readable as one.
        if len(shape) <= 1 and all(d > 0 for d in shape):
            readable[name] = (dtype, shape)
    defaults = {"timestamp": "float32"}
    for name in DEFAULT_COLUMNS:
        readable.setdefault(name, (defaults.get(name, "int64"), ()))
    return readable


# Requests in flight while reading a remote dataset's files: they wait on the store's latency,
# not on the cores (S3 takes thousands per second per prefix).
_REMOTE_READS = 32


def _parallel(function, items, remote: bool = False) -> list:
    """function(item) for every item, on a thread pool (pyarrow releases the GIL while it
    reads), in order; the first exception is raised. One thread per core for local files,
    ``_REMOTE_READS`` for remote ones."""
    items = list(items)
    if len(items) < 2:
        return [function(item) for item in items]
    threads = _REMOTE_READS if remote else _core.usable_cores()
    with ThreadPoolExecutor(max_workers=min(len(items), threads)) as pool:
        return list(pool.map(function, items))


def _check_schemas(meta: LeRobotMetadata) -> None:
    paths = meta.data_files
    schemas = _parallel(
        lambda path: read_data_schema(meta, str(path)).remove_metadata(),
        paths,
        remote=meta.source.remote,
    )
    reference = schemas[0]
    offenders = []
    for path, schema in zip(paths[1:], schemas[1:]):
        if schema.equals(reference):
            continue
        differences = []
        for field in reference:
            if field.name not in schema.names:
                differences.append(f"column {field.name!r} missing")
            elif not schema.field(field.name).type.equals(field.type):
                differences.append(
                    f"column {field.name!r} is {schema.field(field.name).type}, not {field.type}"
                )
        differences += [
            f"extra column {name!r}" for name in schema.names if name not in reference.names
        ]
        if not differences:
            differences.append("columns in a different order")
        offenders.append(f"{path} ({'; '.join(differences)})")
    if offenders:
        raise DatasetError(
            f"data files differ in schema from the first one, {paths[0]}: " + _listing(offenders)
        )


def _load_columns(meta: LeRobotMetadata, names: list[str], readable) -> dict[str, np.ndarray]:
    """The columns ``names`` of every data file, concatenated into preallocated arrays."""
    out = {}
    for name in names:
        dtype, shape = readable[name]
        out[name] = np.empty((meta.num_frames, *shape), dtype=dtype)

    def load(f: int) -> None:  # each file fills its own rows of the arrays
        path = meta.data_files[f]
        start, stop = int(meta.data_file_from_index[f]), int(meta.data_file_to_index[f])
        # Refused naming the columns it lacks, from the one read of the file.
        table = read_data_table(meta, path, names)
        if table.num_rows != stop - start:
            episodes = meta.episode_index[meta.episode_data_file == f]
            raise DatasetError(
                f"data file {path} has {table.num_rows} rows, but its episodes "
                f"{_ranges(episodes)} have {stop - start} in the metadata"
            )
        for name in names:
            _fill(out[name][start:stop], table.column(name), name, path)

    _parallel(load, range(len(meta.data_files)), remote=meta.source.remote)
    return out


def _fill(target: np.ndarray, column: pa.ChunkedArray, name: str, path: str) -> None:
    if column.null_count:
        raise DatasetError(f"data file {path}: column {name!r} has missing values")
    if target.ndim == 1:
        if not (
            pa.types.is_integer(column.type)
            or pa.types.is_floating(column.type)
            or pa.types.is_boolean(column.type)
        ):
            raise DatasetError(f"data file {path}: column {name!r} is {column.type}, not numbers")
        target[:] = column.to_numpy()
        return
    dim = target.shape[1]
    if not (
        pa.types.is_list(column.type)
        or pa.types.is_large_list(column.type)
        or pa.types.is_fixed_size_list(column.type)
    ):
        raise DatasetError(
            f"data file {path}: column {name!r} is {column.type}, not a list of {dim} numbers"
        )
    row = 0
    for chunk in column.chunks:
        if chunk.values.null_count:
            raise DatasetError(f"data file {path}: column {name!r} has missing values")
        lengths = pc.list_value_length(chunk).to_numpy(zero_copy_only=False)
        bad = np.flatnonzero(lengths != dim)
        if bad.size:
            raise DatasetError(
                f"data file {path}: column {name!r} has {lengths[bad[0]]} values "
                f"in row {row + bad[0]} of the file, info.json says {dim}"
            )
        values = chunk.flatten().to_numpy(zero_copy_only=False)
        target[row : row + len(chunk)] = values.reshape(len(chunk), dim)
        row += len(chunk)


def _check_rows(meta: LeRobotMetadata, columns: dict[str, np.ndarray], tolerance_s: float):
    rows = np.arange(meta.num_frames, dtype=np.int64)

    def file_of(row: int) -> str:
        return str(meta.data_files[np.searchsorted(meta.data_file_to_index, row, side="right")])

    index = columns["index"]
    wrong = np.flatnonzero(index != rows)
    if wrong.size:
        r = int(wrong[0])
        backwards = np.flatnonzero(np.diff(index) <= 0)
        if backwards.size:
            r = int(backwards[0]) + 1
            raise DatasetError(
                f"rows are not ordered by index: in {file_of(r)}, index "
                f"{index[r]} follows {index[r - 1]} (dataset row {r})"
            )
        raise DatasetError(
            f"index does not count the rows: dataset row {r} in {file_of(r)} has index {index[r]}"
        )

    starts = meta.dataset_from_index
    episode_of_row = np.repeat(np.arange(meta.num_episodes), meta.length)
    offset_in_episode = rows - starts[episode_of_row]
    nonempty = meta.length > 0

    def offenders(bad_rows: np.ndarray) -> np.ndarray:
        counts = np.zeros(meta.num_episodes, np.int64)
        np.add.at(counts, episode_of_row[bad_rows], 1)
        return np.flatnonzero(counts)

    def describe(episodes: np.ndarray, detail) -> str:
        return _listing(
            f"episode {meta.episode_index[e]} ({detail(e)}; "
            f"{meta.data_files[meta.episode_data_file[e]]})"
            for e in episodes
        )

    episode_col = columns["episode_index"]
    listed, counts = np.unique(episode_col, return_counts=True)
    k = np.minimum(np.searchsorted(listed, meta.episode_index), len(listed) - 1)
    found = np.where(listed[k] == meta.episode_index, counts[k], 0)
    misplaced = np.zeros(meta.num_episodes, bool)
    misplaced[offenders(np.flatnonzero(episode_col != meta.episode_index[episode_of_row]))] = True
    bad = np.flatnonzero(misplaced | (found != meta.length))
    if bad.size:
        raise DatasetError(
            "episode rows do not match the episode lengths: "
            + describe(
                bad,
                lambda e: (
                    f"{found[e]} rows carry its episode_index, its length is {meta.length[e]}"
                ),
            )
        )

    timestamp = columns["timestamp"].astype(np.float64)
    first = np.zeros(meta.num_episodes)
    first[nonempty] = timestamp[starts[nonempty]]
    error = np.abs(timestamp - first[episode_of_row] - offset_in_episode / meta.fps)
    bad_rows = np.flatnonzero(error > tolerance_s)
    if bad_rows.size:
        worst = np.zeros(meta.num_episodes)
        np.maximum.at(worst, episode_of_row[bad_rows], error[bad_rows])
        raise DatasetError(
            f"timestamps inconsistent with fps {meta.fps:g} (beyond {tolerance_s:g} s): "
            + describe(offenders(bad_rows), lambda e: f"off by up to {worst[e]:.6f} s")
        )

    if "frame_index" in columns:
        bad = offenders(np.flatnonzero(columns["frame_index"] != offset_in_episode))
        if bad.size:
            raise DatasetError(
                "frame_index does not count 0, 1, ... within episodes: "
                + describe(bad, lambda e: "wrong frame_index")
            )


def source_fingerprint(meta: LeRobotMetadata) -> str:
    """Hash of the size and modification time of the source's info.json, data and videos."""
    files = [meta.source.url(lerobot_format.INFO_PATH), *stored_data_files(meta)]
    for videos in meta.videos.values():
        files += [lance_layout.whole_file(str(p)) for p in videos.files]
    files = list(dict.fromkeys(files))
    digest = hashlib.sha256()
    # Local files: size and mtime in ns; remote objects: size and ETag (or modification time).
    for path, (size, version) in zip(files, meta.source.versions(files)):
        name = (
            path[len(meta.root) + 1 :] if meta.source.remote else os.path.relpath(path, meta.root)
        )
        digest.update(f"{name}\0{size}\0{version}\n".encode("utf-8", "surrogateescape"))
    return digest.hexdigest()
