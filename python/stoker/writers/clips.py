"""LeRobot episodes as clip samples for ``stoker shard``: each episode, or each window of
``clip_seconds`` of an episode, becomes one sample of the shards.

    $ stoker shard path/to/lerobot shards/ --clip-seconds 4 --shard-bytes 256MB

Per sample (key ``episode_000012-frame_000120``: the episode index and the clip's first frame):

* ``<camera>.mp4`` per camera (``observation.images.top.mp4``): the clip's frames of that
  camera's video. When the clip starts on a keyframe and its packets are a contiguous run in
  decode order (always, for streams without B-frames; at GOP boundaries otherwise), they are
  copied into a new MP4 by the media layer's muxer (``_core.ClipSource``, see
  ``stoker/clip_cutter.h``): the same bytes, decoding to the same frames. Otherwise the clip
  is re-encoded by the native transcoder (``_core.transcode``, as ``stoker etl`` does) with
  libx264 at :data:`REENCODE_CRF`, at the source's size, timestamps kept.
  Depth cameras (``video.is_depth_map``) are refused by name: :class:`stoker.Clip` reads clips
  as 8-bit RGB, which would quantize their 16-bit samples.
* ``json``: ``episode_index``, ``start_frame`` (within the episode), ``num_frames``, ``fps``,
  ``timestamp`` (the first frame's), ``task_index``, ``task`` (its text), and ``copied``
  (whether every camera's clip is the source's packets).
* ``<feature>.npy`` per numeric feature of the data files (``observation.state.npy``,
  ``action.npy``, ...): that feature's rows of the clip, ``[frames, dim]`` (or ``[frames]``).

Windows start at frames 0, n, 2n, ... of each episode (n = ``round(clip_seconds * fps)``), and
a tail shorter than n is left out, so every clip has n frames (what a batch of clips needs).
Without ``clip_seconds`` each episode is one clip. Clips are staged in
``DST/.stoker_shard/clips/`` as they are cut (so that their sizes are known before the shards
are cut to equal bytes) and the folder is removed when the run completes.
"""

from __future__ import annotations

import io
import json
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from stoker import _core
from stoker._core import DatasetError, InvalidArgumentError
from stoker.datasets.lerobot.index import EpisodeIndex, load_index, load_remote_index
from stoker.datasets.lerobot.metadata import (
    DEFAULT_COLUMNS,
    LeRobotMetadata,
    depth_cameras,
    read_columns,
    read_lerobot_metadata,
    readable_columns,
    source_fingerprint,
)
from stoker.io.storage import open_dataset_root
from stoker.io.video import VideoReader

__all__ = ["CLIP_FORMAT", "REENCODE_CRF", "ClipCut", "is_lerobot_dataset", "lerobot_clip_samples"]

# Re-encoded clips: x264 at this constant rate factor (near-transparent; x264's default is 23).
REENCODE_CRF = 18
# The container of every clip member (``<camera>.mp4``), copied or re-encoded.
CLIP_FORMAT = "mp4"


def is_lerobot_dataset(src: str) -> bool:
    """Whether ``src`` is a LeRobot dataset: a URL, or a folder holding ``meta/info.json``."""
    return _core.is_remote_url(src) or os.path.isfile(os.path.join(src, "meta", "info.json"))


class _Videos:
    """What the clips of one run share: the index, and each video file's reader and clip
    source, opened once (thread-safe)."""

    def __init__(self, index: EpisodeIndex):
        self.index = index
        self._lock = threading.Lock()
        self._readers: dict[int, VideoReader] = {}
        self._sources: dict[int, _core.ClipSource] = {}

    def reader(self, video: int) -> VideoReader:
        with self._lock:
            if video not in self._readers:
                path = self.index.video_files[video]
                self._readers[video] = VideoReader(path, frame_table=self.index.frame_table(video))
            return self._readers[video]

    def source(self, video: int) -> _core.ClipSource:
        """The file as the native cutter copies clips from it (``_core.ClipSource``: its
        source and the index's frame table)."""
        with self._lock:
            if video not in self._sources:
                path = self.index.video_files[video]
                self._sources[video] = _core.ClipSource(path, self.index.frame_table(video))
            return self._sources[video]

    def copyable(self, video: int, first: int, count: int) -> bool:
        """Whether frames [first, first + count) of the file copy into an MP4 without
        re-encoding: a run of packets from a keyframe, in a codec MP4 stores."""
        return self.source(video).refusal(first, count, CLIP_FORMAT) is None


@dataclass(frozen=True)
class ClipCut:
    """Frames [first, first + count) (presentation order) of video file ``video`` of the index,
    as an MP4 member: copied when ``copy``, else re-encoded; staged at ``staged``."""

    video: int
    first: int
    count: int
    copy: bool
    staged: str
    videos: _Videos = field(compare=False, repr=False)

    def describe(self) -> str:
        return f"clip:{self.video}:{self.first}:{self.count}:{self.copy}"

    def size(self) -> int:
        self.stage()
        return os.path.getsize(self.staged)

    def read(self) -> bytes:
        self.stage()
        with open(self.staged, "rb") as f:
            return f.read()

    def stage(self) -> None:
        """Writes the clip to ``staged`` unless it is there (atomically: a staged file is
        complete)."""
        if os.path.exists(self.staged):
            return
        os.makedirs(os.path.dirname(self.staged), exist_ok=True)
        path = self.videos.index.video_files[self.video]
        last = self.first + self.count - 1
        if self.copy:
            try:
                source = self.videos.source(self.video)
                source.copy(self.first, self.count, self.staged, CLIP_FORMAT)
            except _core.Error as error:
                raise DatasetError(
                    f"stoker shard: cannot copy frames {self.first}-{last} of {path}: {error}"
                ) from None
            return
        reader = self.videos.reader(self.video)
        options = _core.TranscodeOptions()
        options.height, options.width = reader.height, reader.width
        options.encoder.crf = REENCODE_CRF
        try:
            _core.transcode(
                path,
                self.videos.index.frame_table(self.video),
                self.first,
                self.count,
                self.staged,
                options,
            )
        except _core.Error as error:
            raise DatasetError(
                f"stoker shard: cannot re-encode frames {self.first}-{last} of {path}: {error}"
            ) from None


def _npy(array: np.ndarray) -> bytes:
    out = io.BytesIO()
    np.save(out, np.ascontiguousarray(array), allow_pickle=False)
    return out.getvalue()


def lerobot_clip_samples(
    src: str,
    state_dir: str,
    *,
    clip_seconds: float | None,
    cameras: Sequence[str] | None,
    storage_options: Any = None,
    progress: bool = False,
) -> tuple[list[tuple[str, list[tuple[str, Any]]]], str]:
    """The clip samples of the LeRobot dataset ``src`` (see the module) and a fingerprint of
    the source and the options (files' sizes and versions, cameras, clip length)."""

    source = open_dataset_root(src, storage_options)
    meta: LeRobotMetadata = read_lerobot_metadata(source)
    if not meta.cameras:
        raise DatasetError(f"{src}: the dataset has no video camera to cut clips from")
    chosen = list(meta.cameras) if cameras is None else list(dict.fromkeys(cameras))
    unknown = [c for c in chosen if c not in meta.cameras]
    if unknown:
        raise InvalidArgumentError(f"unknown cameras {unknown}; {src} has {list(meta.cameras)}")
    # stoker.Clip decodes a clip to 8-bit RGB, copied or not: a depth map's 10- to 16-bit
    # samples would come back quantized to 256 levels, silently. Refused, as stoker etl does.
    depth = [c for c in chosen if c in depth_cameras(meta)]
    if depth:
        others = [c for c in chosen if c not in depth]
        how = (
            f"leave {'it' if len(depth) == 1 else 'them'} out with --cameras "
            + " ".join(others)
            + f" (cameras={others!r})"
            if others
            else "the dataset has no other camera to give as clips"
        )
        raise InvalidArgumentError(
            f"{src}: {depth} {'is a depth camera' if len(depth) == 1 else 'are depth cameras'} "
            "(video.is_depth_map): stoker.Clip reads clips back as 8-bit RGB, which would lose "
            f"their high-bit-depth samples; {how}"
        )
    window: int | None = None
    if clip_seconds is not None:
        window = int(round(float(clip_seconds) * meta.fps))
        if window < 1:
            raise InvalidArgumentError(
                f"clip_seconds={clip_seconds} is less than one frame at {meta.fps} fps"
            )
    if source.remote:
        index = load_remote_index(source, meta, progress=progress)
    else:
        index = load_index(source.location, progress=progress)
    videos = _Videos(index)
    numeric = [n for n in readable_columns(meta) if n not in DEFAULT_COLUMNS]
    columns = read_columns(meta, [*numeric, "timestamp"])
    clips_dir = os.path.join(state_dir, "clips")
    per_camera = {c: (index.videos_of(c), index.first_frames(c)) for c in chosen}
    samples: list[tuple[str, list[tuple[str, Any]]]] = []
    for e in range(meta.num_episodes):
        length = int(meta.length[e])
        episode = int(meta.episode_index[e])
        step = window or length
        if step == 0:
            continue  # an empty episode
        for start in range(0, length - step + 1, step):
            key = f"episode_{episode:06d}-frame_{start:06d}"
            members: list[tuple[str, Any]] = []
            copied = True
            for camera in chosen:
                video = int(per_camera[camera][0][e])
                first = int(per_camera[camera][1][e]) + start
                copy = videos.copyable(video, first, step)
                copied = copied and copy
                staged = os.path.join(clips_dir, f"{key}.{camera}.mp4")
                members.append((f"{camera}.mp4", ClipCut(video, first, step, copy, staged, videos)))
            row = int(meta.dataset_from_index[e]) + start
            task = int(meta.task_index[e])
            info = {
                "episode_index": episode,
                "start_frame": start,
                "num_frames": step,
                "fps": float(meta.fps),
                "timestamp": float(columns["timestamp"][row]),
                "task_index": task,
                "task": str(meta.tasks[task]) if task >= 0 else "",
                "copied": copied,
            }
            members.append(("json", json.dumps(info, sort_keys=True).encode()))
            for name in numeric:
                members.append((f"{name}.npy", _npy(columns[name][row : row + step])))
            samples.append((key, members))
    if not samples:
        raise DatasetError(
            f"{src}: no episode is as long as one clip of {window} frames"
            if window
            else f"{src}: every episode is empty"
        )
    fingerprint = "|".join(
        [source_fingerprint(meta), ",".join(chosen), str(window), str(REENCODE_CRF)]
    )
    return samples, fingerprint
