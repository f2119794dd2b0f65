"""``stoker.check(dataset)``: what is wrong with a dataset, found before it costs a training run.

:func:`check` takes a LeRobot dataset (its folder or URL, or a :class:`stoker.LeRobotDataset`),
a shard dataset (a folder, a pattern or list of shards, or a :class:`stoker.ShardDataset`) or a
:class:`stoker.MultiDataset`, runs the checks that apply (docs/check.md lists them) and returns
a :class:`CheckReport` of :class:`Finding` values. ``stoker check`` (:mod:`stoker.checks.command`)
is the same from the command line, with an exit status of 1 when any finding is an error.

The package itself is callable, so that ``stoker.check(dataset)`` and ``import stoker.check``
(``stoker.checks.lerobot``, ...) both work: calling it calls :func:`check`.

The families live beside this module: :mod:`stoker.checks.lerobot` (episodes, cameras,
metadata, decoding), :mod:`stoker.checks.shards` and :mod:`stoker.checks.mix`, imported when a
dataset of their kind is checked.
"""

from __future__ import annotations

import os
import time
from typing import Any

from stoker._core import DatasetError
from stoker.checks.findings import SEVERITIES, CheckReport, Finding
from stoker.io.files import checked_path
from stoker.io.storage import is_url

__all__ = ["SEVERITIES", "CheckReport", "Finding", "check"]


def check(
    dataset: Any,
    *,
    deep: bool = False,
    progress: bool = True,
    tolerance_s: float | None = None,
) -> CheckReport:
    """Checks ``dataset`` and returns every finding (see docs/check.md).

    Args:
        dataset: a LeRobot dataset (a folder holding ``meta/info.json``, an ``s3://`` or
            ``https://`` URL of one, or a :class:`stoker.LeRobotDataset`), a shard dataset (a
            folder ``stoker shard`` wrote, a brace pattern or glob of ``.tar`` shards, a list
            of them, or a :class:`stoker.ShardDataset`), or a :class:`stoker.MultiDataset`,
            whose parts are checked too.
        deep: also decode everything (every video frame on all cores, every image), naming
            the first bad frame; without it only metadata, tables and frame tables are read.
        progress: a progress bar on stderr while indexing and decoding.
        tolerance_s: how far a frame's time may sit from its row's timestamp, in seconds.
            Default: the :class:`stoker.LeRobotDataset`'s when one is given, else 1e-4
            (LeRobot's default).

    Returns:
        A :class:`CheckReport`; ``report.ok`` is False when a finding is an error.

    Raises:
        stoker.DatasetError: ``dataset`` names nothing that exists, or nothing of a kind
            stoker checks.
        TypeError: ``dataset`` is not a path, URL, list of shards or stoker dataset.
    """
    if tolerance_s is not None and not tolerance_s >= 0:
        raise ValueError(f"tolerance_s must be non-negative, got {tolerance_s!r}")
    started = time.perf_counter()
    report = _dispatch(dataset, deep=bool(deep), progress=bool(progress), tolerance_s=tolerance_s)
    report.seconds = time.perf_counter() - started
    return report


def _dispatch(
    dataset: Any, *, deep: bool, progress: bool, tolerance_s: float | None
) -> CheckReport:
    from stoker.datasets.lerobot.dataset import LeRobotDataset
    from stoker.datasets.mix import MultiDataset
    from stoker.datasets.shards import ShardDataset

    def part(member: Any) -> CheckReport:
        return check(member, deep=deep, progress=progress, tolerance_s=tolerance_s)

    if isinstance(dataset, MultiDataset):
        from stoker.checks.mix import check_mix

        return check_mix(dataset, deep=deep, progress=progress, check_part=part)
    if isinstance(dataset, ShardDataset):
        from stoker.checks.shards import check_shards

        return check_shards(dataset, deep=deep, progress=progress)
    if isinstance(dataset, LeRobotDataset):
        from stoker.checks.lerobot import check_lerobot

        return check_lerobot(dataset, deep=deep, progress=progress, tolerance_s=tolerance_s)
    if isinstance(dataset, (list, tuple)):
        from stoker.checks.shards import check_shards

        return check_shards(dataset, deep=deep, progress=progress)
    if not isinstance(dataset, (str, os.PathLike)):
        raise TypeError(
            "check() takes a dataset's path or URL, a list of shards, a stoker.LeRobotDataset, "
            f"a stoker.ShardDataset or a stoker.MultiDataset, not {type(dataset).__name__}"
        )
    location = checked_path(dataset, "dataset")
    kind = dataset_kind(location)
    if kind == "lerobot":
        from stoker.checks.lerobot import check_lerobot

        return check_lerobot(location, deep=deep, progress=progress, tolerance_s=tolerance_s)
    from stoker.checks.shards import check_shards

    return check_shards(location, deep=deep, progress=progress)


def dataset_kind(location: str) -> str:
    """ "lerobot" for a folder or URL holding ``meta/info.json``, "shards" for anything else
    that names shards (a pattern, a ``.tar``, a folder ``stoker shard`` wrote). Raises
    :class:`stoker.DatasetError` for a local path that does not exist."""
    if is_url(location):
        from stoker.io.storage import open_dataset_root

        if location.rstrip("/").endswith(".tar") or any(c in location for c in "{*?["):
            return "shards"
        try:
            root = open_dataset_root(location)
            if root.exists("meta/info.json"):
                return "lerobot"
        except (DatasetError, OSError):
            pass
        return "shards"
    if any(c in location for c in "{*?[") and not os.path.exists(location):
        return "shards"
    if not os.path.exists(location):
        raise DatasetError(
            f"{location} does not exist: give a LeRobot dataset's folder (holding "
            "meta/info.json) or URL, a folder of shards, or a shard pattern"
        )
    if os.path.isdir(location) and os.path.isfile(os.path.join(location, "meta", "info.json")):
        return "lerobot"
    if os.path.isdir(location) and os.path.isdir(os.path.join(location, "meta")):
        return "lerobot"  # a LeRobot layout whose info.json is missing: the check says so
    return "shards"
