"""Every video's frame table, from the episode index when it built, else from one scan
of each file on the pool (:class:`Video`); videos that do not open, and streams whose size or
frame rate disagree with info.json."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from stoker import _core
from stoker.checks.lerobot.metadata import Meta
from stoker.checks.lerobot.run import Run, listing, pooled
from stoker.datasets.lerobot.format import Feature

# Relative difference of a video's frame rate from info.json's that is an error.
_FPS_TOLERANCE = 0.01


@dataclass
class Video:
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


def open_videos(run: Run, meta: Meta, index: Any) -> dict[str, Video | str]:
    """Every video file's frame table: from the index when it built (no scan), else from one
    scan of each file on the pool. A value that is a str says why the file cannot be read."""
    paths = [p for camera in meta.cameras for p in camera.files if p not in meta.missing_videos]
    paths = list(dict.fromkeys(paths))
    tables: dict[str, bytes] = {}
    if index is not None:
        for v, path in enumerate(index.video_files):
            tables[path] = index.frame_table(v)

    def open_one(path: str) -> Video | str:
        try:
            table = tables.get(path)
            reader = (
                _core.VideoReader(path, 1, table) if table is not None else _core.VideoReader(path)
            )
            return Video(path, reader, reader.pts(), reader.width, reader.height, reader.codec)
        except (_core.Error, OSError, ValueError) as e:
            return str(e)

    threads = 32 if meta.source.remote else _core.usable_cores()
    label = "scanning videos" if run.progress and index is None else None
    found = pooled(open_one, paths, threads, label)
    return dict(zip(paths, found))


def check_videos(run: Run, meta: Meta, videos: dict[str, Video | str]) -> set[str]:
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
            which = f"episode{'s' if len(episodes) > 1 else ''} {listing(episodes)}"
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
