"""Frames against rows. Each camera's episodes are placed in their video files by
stoker's engine, exactly as its index build places them (``_core.place_episodes``); then per
episode every row needs a frame at its time (within tolerance_s), no two rows one frame, no
frame between two rows unread; per file, frames no episode reads and frames two episodes read;
per camera, the drift of the stated starts in packed files; per episode, cameras whose starts
disagree."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stoker import _core
from stoker.checks.lerobot.metadata import Camera, Meta
from stoker.checks.lerobot.rows import Rows
from stoker.checks.lerobot.run import Run
from stoker.checks.lerobot.videos import Video


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

    def in_file(self, camera: Camera, v: int) -> np.ndarray:
        """The placed episodes of file ``v``, in their order in it."""
        return self.order[camera.file_of[self.order] == v]


def _place(run: Run, meta: Meta, camera: int, videos, timestamp: np.ndarray) -> _Placement:
    """Where each episode of a camera starts in its file: placed by stoker's engine, exactly
    as its index build places them (_core.place_episodes: in the order of their stated
    offsets, tiling a file whose frames are its episodes' rows, else snapped to the frame
    nearest each stated start following the drift of the episodes before it). Episodes whose
    file is unknown or unreadable are left unplaced, and those whose stated start is not a
    number (a from_timestamp or first row time): the engine says why."""
    cam = meta.cameras[camera]
    E = meta.num_episodes
    readers = [
        video.reader if isinstance(video, Video) else None
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


def check_frames(run: Run, meta: Meta, rows: Rows, usable, videos, skip) -> list:
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
            if not isinstance(video, Video) or path in skip:
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
        if len(in_file) < 2 or not isinstance(videos.get(path), Video):
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
