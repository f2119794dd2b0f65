"""The data files' rows (or the episode index's columns, when it built): every row's
default columns and numeric features, checked against the episode table (row ranges, episode
and frame indices, tasks) and for timestamps 1/fps apart."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from stoker._core import DatasetError
from stoker.checks.lerobot.metadata import Meta
from stoker.checks.lerobot.run import Run, listing, parallel
from stoker.datasets.lerobot import format as lerobot_format
from stoker.datasets.lerobot import lance_layout
from stoker.datasets.lerobot.format import Feature

_ROW_COLUMNS = ("index", "episode_index", "frame_index", "timestamp", "task_index")


def _numeric_features(meta: Meta) -> dict[str, Feature]:
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
class Rows:
    """Every row's default columns (NaN / -1 where a file could not be read), which rows are
    known (``valid``), and the numeric features' columns, [rows, dim] float64."""

    columns: dict[str, np.ndarray]
    valid: np.ndarray  # bool [rows]
    features: dict[str, np.ndarray]
    schemas: dict[str, pa.Schema | None]  # per data file; None when unreadable
    # The first row of the first data file whose rows are not its episodes' lengths: the rows
    # after it are placed by lengths that the data contradicts (the index column is not
    # compared there: one wrong length would name every later episode).
    placed_until: int = -1


def rows_from_index(meta: Meta, index: Any) -> Rows:
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
    return Rows(columns, np.ones(meta.num_rows, bool), features, schemas)


def _data_schema(meta: Meta, path: str) -> pa.Schema:
    """A data file's schema, named by feature: a Parquet file or the Lance frames table."""
    if meta.info.storage_format == "lance":
        return lance_layout.frames_schema(
            meta.source, meta.info.features, lerobot_format.DEFAULT_COLUMNS
        )
    return meta.source.read_schema(path, "data file")


def _data_table(meta: Meta, path: str, columns: list[str]) -> pa.Table:
    if meta.info.storage_format == "lance":
        return lance_layout.read_frames(
            meta.source, meta.info.features, lerobot_format.DEFAULT_COLUMNS, columns
        )
    return meta.source.read_parquet(path, "data file", columns=columns)


def _schemas(meta: Meta) -> dict[str, pa.Schema | None]:
    def schema(path: str) -> pa.Schema | None:
        if path in meta.missing_data:
            return None
        try:
            return _data_schema(meta, path).remove_metadata()
        except (DatasetError, OSError, ValueError, pa.ArrowException):
            return None

    found = parallel(schema, meta.data_files, meta.source.remote)
    return dict(zip(meta.data_files, found))


def _wrong_lengths(run: Run, meta: Meta, path: str, table: pa.Table, episodes, claimed) -> None:
    """A data file whose rows are not its episodes' lengths: each episode whose rows (by the
    file's episode_index column) are not its length, named; the file as a whole when that
    column cannot tell."""
    fix = (
        "rewrite the episodes' lengths (and info.json's totals) from the data, or restore the rows"
    )
    column = table.column("episode_index") if "episode_index" in table.column_names else None
    if column is not None and column.null_count == 0 and pa.types.is_integer(column.type):
        held = dict(zip(*np.unique(column.to_numpy(zero_copy_only=False), return_counts=True)))
        named = 0
        for e in episodes:
            number = int(meta.episode_index[e])
            rows = int(held.get(number, 0))
            if rows == int(meta.length[e]):
                continue
            named += 1
            claimed_rows = int(meta.length[e])
            run.add(
                "error",
                "rows",
                f"episode {number}: the episode table says {claimed_rows} rows, data file "
                f"{meta.relative(path)} holds {rows} of its rows ({abs(rows - claimed_rows)} "
                f"{'fewer' if rows < claimed_rows else 'more'})",
                fix,
                episode=number,
                expected=int(meta.length[e]),
                found=rows,
                file=path,
            )
        if named:
            return
    run.add(
        "error",
        "rows",
        f"data file {meta.relative(path)} has {table.num_rows} rows, its episodes "
        f"{listing(meta.episode_index[episodes])} have {claimed} in the episode table",
        fix,
        episode=int(meta.episode_index[episodes[0]]),
        expected=claimed,
        found=table.num_rows,
        file=path,
    )


def rows_from_files(run: Run, meta: Meta) -> Rows:
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

    results = parallel(read, range(len(meta.data_files)), meta.source.remote)
    placed_until = -1
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
            _wrong_lengths(run, meta, path, table, episodes, stop - start)
            placed_until = start if placed_until < 0 else min(placed_until, start)
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
    return Rows(columns, valid, features, schemas, placed_until)


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


def check_rows(run: Run, meta: Meta, rows: Rows) -> np.ndarray:
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
        placed = np.arange(meta.num_rows) < (
            rows.placed_until if rows.placed_until >= 0 else meta.num_rows
        )
        bad = np.flatnonzero(valid & placed & (cols["index"] != np.arange(meta.num_rows)))
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
                expected=f"one of {listing(np.flatnonzero(meta.task_texts != ''))}",
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
