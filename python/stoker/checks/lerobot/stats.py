"""meta/stats.json and the per-episode statistics: present, finite, and within LeRobot's
own rounding of the data's (compared on whole columns, for a sample of episodes)."""

from __future__ import annotations

from typing import Any

import numpy as np

from stoker._core import DatasetError
from stoker.checks.lerobot.metadata import Meta
from stoker.checks.lerobot.rows import Rows
from stoker.checks.lerobot.run import Run
from stoker.datasets.lerobot import format as lerobot_format
from stoker.datasets.lerobot.format import Feature

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


def _stat_values(value: Any) -> np.ndarray | None:
    try:
        return np.asarray(value, np.float64)
    except (TypeError, ValueError):
        return None


def check_stats(run: Run, meta: Meta, rows: Rows) -> None:
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
