""":func:`check_lerobot`: the dataset opened (a folder, a URL or a
:class:`stoker.LeRobotDataset`, whose index is reused), its episode index mapped or built, and
the checks run in order."""

from __future__ import annotations

import os
from typing import Any

from stoker import _core
from stoker._core import DatasetError
from stoker.checks.findings import CheckReport
from stoker.checks.lerobot.deep import deep_images, deep_videos
from stoker.checks.lerobot.features import check_features
from stoker.checks.lerobot.frames import check_frames
from stoker.checks.lerobot.metadata import Meta, read_meta
from stoker.checks.lerobot.rows import check_rows, rows_from_files, rows_from_index
from stoker.checks.lerobot.run import CHECKS, DEEP_CHECKS, DEFAULT_TOLERANCE_S, Run
from stoker.checks.lerobot.stats import check_stats
from stoker.checks.lerobot.values import check_values
from stoker.checks.lerobot.videos import Video, check_videos, open_videos
from stoker.io.storage import Root, open_dataset_root


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
    run = Run(report, tolerance, progress, deep)
    report.checks = list(CHECKS) + (list(DEEP_CHECKS) if deep else [])
    try:
        _check(run, source, index, load_index)
    finally:
        run.close()
    return report


def _describes(index: Any, meta: Meta) -> bool:
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


def _check(run: Run, source: Root, index: Any, load_index) -> None:
    meta = read_meta(run, source)
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
    rows = rows_from_index(meta, index) if index is not None else rows_from_files(run, meta)
    usable = check_rows(run, meta, rows)
    check_features(run, meta, rows)
    check_values(run, meta, rows)
    videos = open_videos(run, meta, index)
    skip = check_videos(run, meta, videos)
    report.scanned["frames"] = sum(v.num_frames for v in videos.values() if isinstance(v, Video))
    if videos and not run.deep:
        report.not_decoded = "videos"
    placements = check_frames(run, meta, rows, usable, videos, skip)
    check_stats(run, meta, rows)
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
        deep_videos(run, meta, videos, placements)
        deep_images(run, meta, index)
