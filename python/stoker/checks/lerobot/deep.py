"""``deep``: every video decoded end to end by stoker's decoder (one video per thread of a
pool as wide as the usable cores) and every image of an image feature decoded; bad, resized or
changed frames and repeated pictures mapped back to their episodes."""

from __future__ import annotations

from typing import Any

import numpy as np

from stoker import _core
from stoker.checks.lerobot.metadata import Meta
from stoker.checks.lerobot.run import Run, listing, pooled
from stoker.checks.lerobot.videos import Video

# A consecutive frame pair differing by less than this share of the episode's median
# difference (in luma levels) is the same picture twice.
_DUPLICATE_SHARE = 0.05


def deep_videos(run: Run, meta: Meta, videos: dict[str, Video | str], placements) -> None:
    """Every video decoded end to end (stoker's decoder, no conversion), one video per thread
    of a pool as wide as the usable cores; what came out mapped back to episodes."""
    readable = [v for v in videos.values() if isinstance(v, Video)]
    if not readable:
        return
    total = sum(v.num_frames for v in readable)

    def verify(video: Video) -> dict[str, Any] | str:
        try:
            return video.reader.verify()
        except (_core.Error, OSError) as e:
            return str(e)

    # Largest first: the pool ends together rather than waiting on one big file at the end.
    order = sorted(readable, key=lambda v: -v.num_frames)
    found = pooled(
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
            if result is None or not isinstance(video, Video):
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
                f"no longer match the frame table's checksums ({listing(packets)}): the file "
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


def deep_images(run: Run, meta: Meta, index: Any) -> None:
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
