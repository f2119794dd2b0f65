"""The LeRobot dataset layout on disk, read and written: paths, info.json, the episode and task
tables, statistics.

Reads codebase versions v2.0 / v2.1 and v3.0; writes v3.0 (what ``stoker etl`` produces). This
module knows where each file is and what it holds; :mod:`stoker.datasets.lerobot.metadata`
builds on it and checks that the files agree with each other, and with the data files.

Layouts (facts from LeRobot's ``lerobot.datasets.utils``):

* **v2.1** (v2.0 is read the same way): ``meta/info.json``, ``meta/episodes.jsonl``
  (``episode_index``, ``tasks``, ``length``), ``meta/tasks.jsonl`` (``task_index``, ``task``),
  optionally ``meta/episodes_stats.jsonl``; one Parquet file per episode at
  ``info["data_path"]`` (default :data:`V21_DATA_PATH`) and one MP4 per camera per episode at
  ``info["video_path"]`` (default :data:`V21_VIDEO_PATH`), with
  ``episode_chunk = episode_index // info["chunks_size"]``. Video time starts at 0 in every file.
* **v3.0**: ``meta/info.json``, ``meta/tasks.parquet`` (task strings as the pandas index,
  column ``task_index``) and ``meta/episodes/chunk-XXX/file-XXX.parquet`` with one row per
  episode (its per-episode statistics in ``stats/<feature>/<statistic>`` columns). Data and
  video files hold many episodes back to back, at ``info["data_path"]`` (default
  :data:`DATA_PATH`) and ``info["video_path"]`` (default :data:`VIDEO_PATH`); file n of a kind
  is ``chunk-{n // chunks_size}/file-{n % chunks_size}``. A frame's time in its video file is
  the episode's ``videos/<camera>/from_timestamp`` plus the row's ``timestamp``.

Both may have ``meta/stats.json``, the statistics of the whole dataset.

Readers raise :class:`stoker.DatasetError` naming the file and the problem. Writers write every
file atomically (under a temporary name, then renamed), and replace what an earlier write left
in the same folder.
"""

from __future__ import annotations

import glob
import json
import math
import os
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from stoker._core import DatasetError
from stoker.datasets.lerobot.vocabulary import check_info_vocabulary
from stoker.io.files import remove_file, write_json, write_parquet
from stoker.io.storage import Root, RootLike, open_dataset_root

SUPPORTED_VERSIONS = ("v2.0", "v2.1", "v3.0")
#: info.json's ``storage_format``: Parquet data files and MP4 videos (the default), or their
#: Lance copy (:mod:`stoker.datasets.lerobot.lance_layout`).
STORAGE_FORMATS = ("parquet", "lance")

#: Columns every LeRobot data file has, besides the features of info.json.
DEFAULT_COLUMNS = ("timestamp", "frame_index", "episode_index", "index", "task_index")

DEFAULT_CHUNKS_SIZE = 1000
DATA_FILES_SIZE_IN_MB = 100  # LeRobot's default data_files_size_in_mb
VIDEO_FILES_SIZE_IN_MB = 500

INFO_PATH = "meta/info.json"
STATS_PATH = "meta/stats.json"

# v2.1
V21_DATA_PATH = "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
V21_VIDEO_PATH = "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4"
V21_EPISODES_PATH = "meta/episodes.jsonl"
V21_TASKS_PATH = "meta/tasks.jsonl"
V21_EPISODES_STATS_PATH = "meta/episodes_stats.jsonl"

# v3.0
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
EPISODES_PATH = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
TASKS_PATH = "meta/tasks.parquet"
SUBTASKS_PATH = "meta/subtasks.parquet"
_EPISODE_FILES = "meta/episodes/chunk-*/file-*.parquet"  # every file of the episode table

#: The statistics LeRobot keeps per feature.
STATISTICS = ("min", "max", "mean", "std", "count")

# Per-episode statistics: feature -> statistic -> values.
FeatureStats = dict[str, dict[str, np.ndarray]]


class Feature(NamedTuple):
    """One entry of info.json's ``features``: its dtype string and shape."""

    dtype: str
    shape: tuple[int, ...]


@dataclass(frozen=True)
class Info:
    """``meta/info.json``, checked: the fields stoker interprets, and the whole file as read."""

    path: str
    codebase_version: str
    fps: float
    features: dict[str, Feature]
    chunks_size: int
    data_path: str
    video_path: str | None
    raw: dict[str, Any]  # every field, as read (robot_type, feature names, video info, ...)

    @property
    def storage_format(self) -> str:
        """ "parquet" (data files and MP4s) or "lance" (frames.lance and videos.lance)."""
        return str(self.raw.get("storage_format", "parquet"))

    @property
    def cameras(self) -> tuple[str, ...]:
        """The video features, in info.json order."""
        return tuple(name for name, feature in self.features.items() if feature.dtype == "video")


# ---------------------------------------------------------------------------------------------
# Reading


def read_info(root: RootLike) -> Info:
    """Reads and checks ``meta/info.json`` of the dataset in folder ``root`` (a path, or a
    :class:`stoker.io.storage.Root` for remote ones, as every reader here): a known
    ``codebase_version``, a positive ``fps``, ``features`` with dtypes and integer shapes, a
    ``data_path``, a ``video_path`` when there are video features, and a positive integer
    ``chunks_size`` (default 1000)."""
    source = open_dataset_root(root)
    path = source.url(INFO_PATH)
    raw = source.read_json(INFO_PATH)
    version = raw.get("codebase_version")
    if version not in SUPPORTED_VERSIONS:
        raise DatasetError(
            f"unknown codebase_version {version!r} in {path}: stoker reads LeRobot "
            f"datasets of versions {', '.join(SUPPORTED_VERSIONS)}"
        )
    storage = raw.get("storage_format", "parquet")
    if storage not in STORAGE_FORMATS:
        raise DatasetError(
            f"{path}: storage_format {storage!r} is not supported: stoker reads LeRobot "
            "datasets stored as Parquet files with MP4 videos, and their Lance copies "
            "(storage_format 'lance', written by lerobot-lance-convert)"
        )
    if storage == "lance" and version != "v3.0":
        raise DatasetError(
            f"{path}: a Lance dataset of codebase_version {version!r}: lerobot-lance-convert "
            "converts v3.0 datasets only, stoker reads those"
        )
    for key in ("fps", "features", "data_path"):
        if key not in raw:
            raise DatasetError(f"{path} has no {key!r}")
    fps = raw["fps"]
    if isinstance(fps, bool) or not isinstance(fps, (int, float)) or not 0 < fps < math.inf:
        raise DatasetError(
            f"{path}: 'fps' must be a positive number of frames per second, got {json.dumps(fps)}"
        )
    fps = float(fps)
    check_info_vocabulary(raw, path, fps)
    chunks_size = raw.get("chunks_size", DEFAULT_CHUNKS_SIZE)
    if not isinstance(chunks_size, int) or chunks_size < 1:
        raise DatasetError(f"{path}: chunks_size must be a positive integer, got {chunks_size!r}")
    info = Info(
        path=path,
        codebase_version=version,
        fps=fps,
        features=_parse_features(raw["features"], path),
        chunks_size=chunks_size,
        data_path=raw["data_path"],
        video_path=raw.get("video_path"),
        raw=raw,
    )
    if info.cameras and not info.video_path:
        raise DatasetError(f"{path} has video features {list(info.cameras)} but no video_path")
    return info


def read_tasks(root: RootLike, version: str) -> tuple[np.ndarray, np.ndarray]:
    """The tasks table (v2.1 ``meta/tasks.jsonl``, v3.0 ``meta/tasks.parquet``) as (task texts
    by task_index, with "" where an index is unused; the task_index values in table order)."""
    source = open_dataset_root(root)
    if version == "v3.0":
        path = source.url(TASKS_PATH)
        table = source.read_parquet(TASKS_PATH, "meta file")
    else:
        path = source.url(V21_TASKS_PATH)
        table = source.read_jsonl_table(V21_TASKS_PATH)
    if table.num_rows == 0:
        return np.array([], dtype=str), np.array([], dtype=np.int64)
    text_column = None
    pandas_meta = (table.schema.metadata or {}).get(b"pandas")
    if pandas_meta:
        index_columns = json.loads(pandas_meta).get("index_columns", [])
        if index_columns and isinstance(index_columns[0], str):
            text_column = index_columns[0]
    for name in ("task", "__index_level_0__"):
        if text_column is None and name in table.column_names:
            text_column = name
    if text_column is None or "task_index" not in table.column_names:
        raise DatasetError(f"{path} lacks the task texts or the task_index column")
    task_index = int_column(table, "task_index", path)
    if np.any(task_index < 0):
        raise DatasetError(f"{path}: negative task_index")
    texts = np.full(int(task_index.max()) + 1, "", dtype=object)
    texts[task_index] = table.column(text_column).to_pylist()
    return texts.astype(str), task_index


def episodes_location(root: RootLike, version: str) -> str:
    """Where the episode table is: the file (v2.1) or the folder of files (v3.0)."""
    source = open_dataset_root(root)
    if version == "v3.0":
        return source.url(os.path.join("meta", "episodes"))
    return source.url(V21_EPISODES_PATH)


def read_episode_table(
    root: RootLike, version: str, columns: Sequence[str] | None = None
) -> pa.Table:
    """The per-episode table as stored (v2.1 ``meta/episodes.jsonl``, v3.0 every file of
    ``meta/episodes/``), in file order. With ``columns``, exactly those columns, a column the
    files lack coming back as nulls; else every column."""
    source = open_dataset_root(root)
    if version != "v3.0":
        table = source.read_jsonl_table(V21_EPISODES_PATH)
        return table if columns is None else _with_columns(table, columns)
    paths = _episode_files(source)
    if not paths:
        raise DatasetError(f"missing meta files {source.url(_EPISODE_FILES)}")
    tables = []
    for path in paths:
        if columns is None:
            tables.append(source.read_parquet(path, "meta file"))
            continue
        present = set(source.read_schema(path, "meta file").names)
        table = source.read_parquet(
            path, "meta file", columns=[name for name in columns if name in present]
        )
        tables.append(_with_columns(table, columns))
    try:
        return pa.concat_tables(tables, promote_options="permissive")
    except pa.ArrowException as e:
        raise DatasetError(
            f"episode tables in {episodes_location(source, version)} disagree on column types: {e}"
        ) from None


def task_lists(episodes: pa.Table) -> pa.ChunkedArray:
    """The ``tasks`` column of an episode table as lists of strings, whichever way the file
    stored it (a list, one string, or no column: no tasks)."""
    if "tasks" not in episodes.column_names:
        return pa.chunked_array([pa.nulls(episodes.num_rows, pa.list_(pa.string()))])
    tasks = episodes.column("tasks")
    if pa.types.is_string(tasks.type) or pa.types.is_large_string(tasks.type):
        lists = [[t] if t is not None else [] for t in tasks.to_pylist()]
        return pa.chunked_array([pa.array(lists, pa.list_(pa.string()))])
    return tasks.cast(pa.list_(pa.string()))


def read_episode_stats(root: RootLike, episodes: pa.Table) -> dict[int, FeatureStats] | None:
    """Per-episode statistics, by episode_index: from the ``stats/<feature>/<statistic>``
    columns of the episode table (v3.0), else from ``meta/episodes_stats.jsonl`` (v2.1). None
    when the dataset has neither."""
    columns = [name for name in episodes.column_names if name.startswith("stats/")]
    if columns:
        result: dict[int, FeatureStats] = {}
        episode_index = episodes.column("episode_index").to_pylist()
        for row, episode in enumerate(episode_index):
            entry: FeatureStats = {}
            for name in columns:
                feature, statistic = name[len("stats/") :].rsplit("/", 1)
                value = episodes[name][row].as_py()
                if value is not None:
                    entry.setdefault(feature, {})[statistic] = np.asarray(value, np.float64)
            result[int(episode)] = entry
        return result
    source = open_dataset_root(root)
    path = source.url(V21_EPISODES_STATS_PATH)
    if not source.exists(V21_EPISODES_STATS_PATH):
        return None
    result = {}
    for number, record in _json_lines(source, V21_EPISODES_STATS_PATH):
        try:
            result[int(record["episode_index"])] = {
                feature: {k: np.asarray(v, np.float64) for k, v in values.items()}
                for feature, values in record["stats"].items()
            }
        except (KeyError, TypeError, ValueError, AttributeError):
            raise DatasetError(
                f"{path}, line {number}: not an episode_index with its stats of numbers per feature"
            ) from None
    return result


def stats_columns(episodes: pa.Table, features: Collection[str]) -> list[str]:
    """The per-episode statistics columns of an episode table (``stats/<feature>/<statistic>``)
    that belong to ``features``."""
    return [
        name
        for name in episodes.column_names
        if name.startswith("stats/") and name[len("stats/") :].rsplit("/", 1)[0] in features
    ]


def read_stats(root: RootLike) -> dict[str, Any] | None:
    """``meta/stats.json``, or None when the dataset has none."""
    source = open_dataset_root(root)
    return source.read_json(STATS_PATH) if source.exists(STATS_PATH) else None


def meta_files(root: RootLike, version: str) -> list[str]:
    """The meta files the metadata of the dataset is read from, those that exist."""
    source = open_dataset_root(root)
    if version == "v3.0":
        names = [INFO_PATH, TASKS_PATH]
        tables = _episode_files(source)
    else:
        names = [INFO_PATH, V21_EPISODES_PATH, V21_TASKS_PATH]
        tables = []
    return [source.url(name) for name in names if source.exists(name)] + tables


def format_paths(
    root: RootLike, template: str, template_name: str, **columns: np.ndarray | str
) -> np.ndarray:
    """Absolute paths (URLs, for a remote root) from a path template of info.json
    (``template_name`` says which), one per entry of the array arguments; a string argument is
    the same in every path."""
    source = open_dataset_root(root)
    n = len(next(v for v in columns.values() if isinstance(v, np.ndarray)))
    values = {k: (v.tolist() if isinstance(v, np.ndarray) else [v] * n) for k, v in columns.items()}
    try:
        paths = [
            source.url(template.format(**dict(zip(values, row)))) for row in zip(*values.values())
        ]
    except (KeyError, IndexError, ValueError) as e:
        raise DatasetError(
            f"{source.url(INFO_PATH)}: cannot fill {template_name} {template!r}: {e!r}"
        ) from None
    return np.array(paths, dtype=str)


def int_column(table: pa.Table, name: str, where: str) -> np.ndarray:
    """Column ``name`` as int64; raises naming ``where`` for missing or non-integer values."""
    column = table.column(name)
    if column.null_count:
        raise DatasetError(f"{where}: column {name!r} has missing values")
    if not (pa.types.is_integer(column.type) or pa.types.is_null(column.type)):
        raise DatasetError(f"{where}: column {name!r} is {column.type}, not integers")
    return numbers(column, np.int64)


def float_column(table: pa.Table, name: str, where: str) -> np.ndarray:
    """Column ``name`` as float64; raises naming ``where`` for missing or non-numeric values."""
    column = table.column(name)
    if column.null_count:
        raise DatasetError(f"{where}: column {name!r} has missing values")
    if not (pa.types.is_floating(column.type) or pa.types.is_integer(column.type)):
        raise DatasetError(f"{where}: column {name!r} is {column.type}, not numbers")
    return numbers(column, np.float64)


def numbers(
    column: pa.ChunkedArray | pa.Array, dtype: npt.DTypeLike, fill: Any = None
) -> np.ndarray:
    """The values of a column of integers or floats as a new contiguous numpy array of
    ``dtype``, read from the Arrow buffers: what ``column.to_numpy()`` gives, without the pandas
    that pyarrow's conversions import (~0.4 s on a process's first call). Nulls become ``fill``;
    without one, a column with nulls raises ValueError (a column of the null type, only when
    empty)."""
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    out = np.empty(len(column), dtype)
    at = 0
    for chunk in chunks:
        n = len(chunk)
        if n == 0:
            continue
        kind = chunk.type
        if pa.types.is_floating(kind):
            stored = np.dtype(f"float{kind.bit_width}")
        elif pa.types.is_signed_integer(kind):
            stored = np.dtype(f"int{kind.bit_width}")
        elif pa.types.is_unsigned_integer(kind):
            stored = np.dtype(f"uint{kind.bit_width}")
        else:
            raise TypeError(f"not a column of numbers: {kind}")
        if chunk.null_count and fill is None:
            raise ValueError("the column has missing values")
        validity, data = chunk.buffers()[:2]
        part = out[at : at + n]
        part[:] = np.frombuffer(data, stored, count=n, offset=chunk.offset * stored.itemsize)
        if chunk.null_count:
            bits = np.unpackbits(np.frombuffer(validity, np.uint8), bitorder="little")
            part[bits[chunk.offset : chunk.offset + n] == 0] = fill
        at += n
    return out


def null_flags(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Whether each value of ``column`` is null: a bool array, made without pandas (see
    :func:`numbers`)."""
    flags = pc.cast(column.is_null(), pa.int8())
    return numbers(flags, np.int8).astype(bool)


def string_array(texts: Sequence[str] | np.ndarray) -> pa.StringArray:
    """``pa.array(texts, pa.string())``, built from its buffers: ``pa.array`` imports pandas
    (see :func:`numbers`)."""
    encoded = [str(text).encode("utf-8", "surrogateescape") for text in texts]
    offsets = np.zeros(len(encoded) + 1, np.int32)
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    return pa.StringArray.from_buffers(
        len(encoded), pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))
    )


def _parse_features(raw: Any, path: str) -> dict[str, Feature]:
    if not isinstance(raw, dict):
        raise DatasetError(f"{path}: 'features' is not an object")
    features = {}
    for name, spec in raw.items():
        try:
            features[name] = Feature(str(spec["dtype"]), tuple(int(d) for d in spec["shape"]))
        except (KeyError, TypeError, ValueError):
            raise DatasetError(
                f"{path}: feature {name!r} lacks a dtype or an integer shape"
            ) from None
    return features


def _json_lines(source: Root, member: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, JSON object) of every non-blank line of a JSON-lines file."""
    path = source.url(member)
    try:
        lines = source.read_bytes(member, "meta file").decode("utf-8").splitlines()
    except ValueError as e:
        raise DatasetError(f"cannot read meta file {path}: {e}") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as e:
            raise DatasetError(f"cannot read meta file {path}, line {number}: {e}") from None
        if not isinstance(record, dict):
            raise DatasetError(f"meta file {path}, line {number}: not a JSON object")
        yield number, record


def _episode_files(source: Root) -> list[str]:
    """The files of a v3.0 episode table, in order. Where the root cannot be listed (plain
    HTTP), files 0, 1, ... are probed (chunks of info.json's ``chunks_size``) up to the first
    missing one."""
    if source.listable:
        return source.glob(os.path.join("meta", "episodes"), "chunk-*/file-*.parquet")
    chunks_size = read_info(source).chunks_size
    files: list[str] = []
    while True:
        path = file_path("", EPISODES_PATH, len(files), chunks_size)
        if not source.exists(path):
            return files
        files.append(source.url(path))


def _with_columns(table: pa.Table, columns: Sequence[str]) -> pa.Table:
    """``table`` with exactly ``columns``, in that order; those it lacks are nulls."""
    for name in columns:
        if name not in table.column_names:
            table = table.append_column(name, pa.nulls(table.num_rows))
    return table.select(list(columns))


# ---------------------------------------------------------------------------------------------
# Writing (v3.0)


class EpisodeVideos(NamedTuple):
    """Where one camera's episodes are in a v3.0 dataset being written, per episode: the number
    of its video file (see :func:`file_path`) and its span in that file, in seconds."""

    file: np.ndarray  # int
    from_timestamp: np.ndarray  # float64
    to_timestamp: np.ndarray  # float64


def file_path(root: str, template: str, number: int, chunks_size: int, **keys: str) -> str:
    """The absolute path of file ``number`` of a v3.0 kind (:data:`DATA_PATH`,
    :data:`VIDEO_PATH` with ``video_key=``, :data:`EPISODES_PATH`): chunk
    ``number // chunks_size``, file ``number % chunks_size``."""
    return os.path.join(
        root,
        template.format(chunk_index=number // chunks_size, file_index=number % chunks_size, **keys),
    )


def data_files_by_size(
    lengths: npt.ArrayLike, bytes_per_row: float, size_in_mb: float
) -> np.ndarray:
    """The data file number of each episode when whole episodes, in order, fill files of about
    ``size_in_mb`` each: a file takes the next episode unless that would take it past the size.
    """
    starts = np.concatenate([[0], np.cumsum(lengths)])
    file = np.zeros(len(starts) - 1, np.int64)
    number, first = 0, 0
    for k in range(len(file)):
        if k > first and (starts[k + 1] - starts[first]) * bytes_per_row > size_in_mb * 1e6:
            number, first = number + 1, k
        file[k] = number
    return file


def write_data(
    root: str, rows: pa.Table, lengths: npt.ArrayLike, file_of_episode: np.ndarray, chunks_size: int
) -> list[str]:
    """Writes the data files: ``rows`` holds whole episodes back to back in dataset order, and
    episode e goes to data file ``file_of_episode[e]`` (consecutive episodes share a file).
    Removes any other data file. Returns the paths written, in order."""
    starts = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    paths = []
    for number, first, stop in _runs(file_of_episode):
        path = file_path(root, DATA_PATH, number, chunks_size)
        write_parquet(rows.slice(starts[first], starts[stop] - starts[first]), path)
        paths.append(path)
    _remove_others(os.path.join(root, "data"), "*.parquet", paths)
    return paths


def episode_columns(
    lengths: npt.ArrayLike,
    tasks: pa.ChunkedArray | Sequence[list[str]],
    data_file: np.ndarray,
    videos: Mapping[str, EpisodeVideos],
    chunks_size: int,
) -> dict[str, Any]:
    """The columns of a v3.0 episode table, episodes numbered 0, 1, ... in dataset order:
    ``tasks`` (each episode's task texts), lengths and row ranges, data files, and per camera
    its video files and spans (see :class:`EpisodeVideos`). Add per-episode statistics
    (``stats/...``) before :func:`write_episodes` when there are."""
    lengths = np.asarray(lengths, np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    data_file = np.asarray(data_file, np.int64)
    if not isinstance(tasks, pa.ChunkedArray):
        tasks = pa.array(tasks, pa.list_(pa.string()))
    columns: dict[str, Any] = {
        "episode_index": pa.array(np.arange(len(lengths), dtype=np.int64)),
        "tasks": tasks,
        "length": pa.array(lengths),
        "data/chunk_index": pa.array(data_file // chunks_size),
        "data/file_index": pa.array(data_file % chunks_size),
        "dataset_from_index": pa.array(starts[:-1]),
        "dataset_to_index": pa.array(starts[1:]),
    }
    for camera, where in videos.items():
        file = np.asarray(where.file, np.int64)
        columns[f"videos/{camera}/chunk_index"] = pa.array(file // chunks_size)
        columns[f"videos/{camera}/file_index"] = pa.array(file % chunks_size)
        columns[f"videos/{camera}/from_timestamp"] = pa.array(
            np.asarray(where.from_timestamp, np.float64)
        )
        columns[f"videos/{camera}/to_timestamp"] = pa.array(
            np.asarray(where.to_timestamp, np.float64)
        )
    return columns


def write_episodes(
    root: str,
    columns: Mapping[str, Any],
    chunks_size: int,
    file_of_episode: np.ndarray | None = None,
) -> None:
    """Writes the episode table ``meta/episodes/`` from :func:`episode_columns`: episode e into
    file ``file_of_episode[e]`` (default: all into file 0), each row saying where it is
    (``meta/episodes/chunk_index``, ``file_index``). Removes any other episode file."""
    table = pa.table(dict(columns))
    file = (
        np.zeros(table.num_rows, np.int64)
        if file_of_episode is None
        else np.asarray(file_of_episode, np.int64)
    )
    table = table.append_column("meta/episodes/chunk_index", pa.array(file // chunks_size))
    table = table.append_column("meta/episodes/file_index", pa.array(file % chunks_size))
    paths = []
    for number, first, stop in _runs(file):
        path = file_path(root, EPISODES_PATH, number, chunks_size)
        write_parquet(table.slice(first, stop - first), path)
        paths.append(path)
    _remove_others(os.path.join(root, "meta", "episodes"), "*.parquet", paths)


def defined_tasks(texts: Sequence[str] | np.ndarray) -> tuple[np.ndarray, list[str]]:
    """(task_index, text) of every task of a by-index list of texts ("" where unused)."""
    indices = [t for t, text in enumerate(texts) if text != ""]
    return np.array(indices, np.int64), [str(texts[t]) for t in indices]


def write_tasks(root: str, texts: Sequence[str] | np.ndarray) -> None:
    """Writes ``meta/tasks.parquet`` as LeRobot does (with pandas: the task texts are the
    table's index, ``task_index`` its column). ``texts[t]`` is the text of task t; indices
    whose text is "" are unused and left out."""
    indices, defined = defined_tasks(texts)
    table = pa.table(
        {
            "task_index": pa.array(indices, pa.int64()),
            "__index_level_0__": pa.array(defined, pa.string()),
        }
    )
    pandas_meta = {
        "index_columns": ["__index_level_0__"],
        "column_indexes": [
            {
                "name": None,
                "field_name": None,
                "pandas_type": "unicode",
                "numpy_type": "object",
                "metadata": {"encoding": "UTF-8"},
            }
        ],
        "columns": [
            {
                "name": "task_index",
                "field_name": "task_index",
                "pandas_type": "int64",
                "numpy_type": "int64",
                "metadata": None,
            },
            {
                "name": None,
                "field_name": "__index_level_0__",
                "pandas_type": "unicode",
                "numpy_type": "object",
                "metadata": None,
            },
        ],
        "creator": {"library": "pyarrow", "version": pa.__version__},
        "pandas_version": "2.2.3",
    }
    write_parquet(
        table.replace_schema_metadata({b"pandas": json.dumps(pandas_meta).encode()}),
        os.path.join(root, TASKS_PATH),
    )


def aggregate_stats(
    per_episode: Sequence[FeatureStats], features: Collection[str]
) -> dict[str, dict[str, list]]:
    """Statistics of a set of episodes from theirs, as LeRobot aggregates them: count-weighted
    mean, pooled variance, min of the minima, max of the maxima. Covers those of ``features``
    that the first episode has, when every episode that has the feature has all five
    :data:`STATISTICS`."""
    result = {}
    for feature in per_episode[0] if per_episode else {}:
        if feature not in features:
            continue
        items = [s[feature] for s in per_episode if feature in s]
        if not all(k in s for s in items for k in STATISTICS):
            continue
        means = np.stack([s["mean"] for s in items])
        counts = np.stack([s["count"] for s in items]).astype(np.float64)
        total = counts.sum(axis=0)
        weights = counts.reshape(counts.shape + (1,) * (means.ndim - counts.ndim))
        mean = (means * weights).sum(axis=0) / total
        spread = np.stack([s["std"] for s in items]) ** 2 + (means - mean) ** 2
        variance = (spread * weights).sum(axis=0) / total
        result[feature] = {
            "min": np.min(np.stack([s["min"] for s in items]), axis=0).tolist(),
            "max": np.max(np.stack([s["max"] for s in items]), axis=0).tolist(),
            "mean": mean.tolist(),
            "std": np.sqrt(variance).tolist(),
            "count": total.astype(np.int64).tolist(),
        }
    return result


def write_stats(root: str, stats: Mapping[str, Any]) -> None:
    """Writes ``meta/stats.json``."""
    write_json(os.path.join(root, STATS_PATH), stats)


def video_feature(
    feature: Mapping[str, Any], height: int, width: int, codec: str
) -> dict[str, Any]:
    """A copy of a video feature of info.json describing frames of ``height`` x ``width``
    encoded with ``codec`` (as yuv420p, 3 channels); its other fields are kept."""
    result = json.loads(json.dumps(feature))
    result["shape"] = [height, width, 3]
    result.setdefault("names", ["height", "width", "channels"])
    video = result.get("info") or {}
    video.update(
        {
            "video.height": height,
            "video.width": width,
            "video.codec": codec,
            "video.pix_fmt": "yuv420p",
            "video.channels": 3,
        }
    )
    video.setdefault("video.is_depth_map", False)
    video.setdefault("has_audio", False)
    result["info"] = video
    return result


def v30_info(
    base: Mapping[str, Any],
    *,
    features: Mapping[str, Any],
    num_episodes: int,
    num_frames: int,
    num_tasks: int,
    chunks_size: int,
    has_videos: bool,
    data_files_size_in_mb: int = DATA_FILES_SIZE_IN_MB,
    video_files_size_in_mb: int = VIDEO_FILES_SIZE_IN_MB,
) -> dict[str, Any]:
    """The info.json of a v3.0 dataset at the default path templates: ``base`` (e.g. the
    source's info.json, or at least ``fps``) with the layout's fields set and v2.1's dropped."""
    info = dict(base)
    info.update(
        {
            "codebase_version": "v3.0",
            "total_episodes": num_episodes,
            "total_frames": num_frames,
            "total_tasks": num_tasks,
            "chunks_size": chunks_size,
            "data_files_size_in_mb": data_files_size_in_mb,
            "video_files_size_in_mb": video_files_size_in_mb,
            "splits": {"train": f"0:{num_episodes}"},
            "data_path": DATA_PATH,
            "video_path": VIDEO_PATH if has_videos else None,
            "features": dict(features),
        }
    )
    for key in ("total_chunks", "total_videos"):  # v2.1 only
        info.pop(key, None)
    return info


def write_info(root: str, info: Mapping[str, Any]) -> None:
    """Writes ``meta/info.json``. Write it last: a dataset without it is not a dataset."""
    write_json(os.path.join(root, INFO_PATH), info)


def _runs(numbers: np.ndarray) -> Iterator[tuple[int, int, int]]:
    """(number, first, stop) of every run of equal consecutive values."""
    numbers = np.asarray(numbers)
    if numbers.size == 0:
        return
    starts = np.flatnonzero(np.diff(numbers, prepend=numbers[0] - 1))
    stops = np.append(starts[1:], len(numbers))
    for first, stop in zip(starts, stops):
        yield int(numbers[first]), int(first), int(stop)


def _remove_others(folder: str, pattern: str, keep: Sequence[str]) -> None:
    """Removes the files under ``folder`` matching ``pattern`` that are not in ``keep``."""
    kept = set(keep)
    for path in glob.glob(os.path.join(folder, "**", pattern), recursive=True):
        if path not in kept:
            remove_file(path)
