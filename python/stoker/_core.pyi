"""stoker's C++ core"""

from collections.abc import Callable, Sequence
from typing import Annotated

import numpy
from numpy.typing import NDArray


class Error(RuntimeError):
    """Base class of every error stoker raises."""

class DecodeError(Error):
    """
    A video could not be opened or decoded as asked; the message names the file and frame.
    """

class DatasetError(Error):
    """
    A dataset is malformed or inconsistent; the message names the episode, camera and file.
    """

class VideoReader:
    def __init__(self, path: str, threads: int = 1, frame_table: bytes | None = None) -> None: ...

    @property
    def path(self) -> str: ...

    @property
    def codec(self) -> str: ...

    @property
    def width(self) -> int: ...

    @property
    def height(self) -> int: ...

    @property
    def fps(self) -> float: ...

    @property
    def num_frames(self) -> int: ...

    @property
    def duration(self) -> float: ...

    def pts(self) -> NDArray[numpy.float64]: ...

    def is_key(self) -> NDArray[numpy.uint8]: ...

    def frame_table(self) -> bytes: ...

    def frame_at(self, arg0: float, arg1: float | None, /) -> int: ...

    def get_frames(self, indices: Annotated[NDArray[numpy.int64], dict(shape=(None,), order='C', device='cpu', writable=False)], out: Annotated[NDArray[numpy.uint8], dict(order='C', device='cpu')], height: int, width: int, channels_first: bool, area: bool) -> None: ...

    def get_frames_at(self, seconds: Annotated[NDArray[numpy.float64], dict(shape=(None,), order='C', device='cpu', writable=False)], tolerance: float | None, out: Annotated[NDArray[numpy.uint8], dict(order='C', device='cpu')], height: int, width: int, channels_first: bool, area: bool) -> None: ...

def build_episode_index(path: str, fps: float, episode_from_row: Annotated[NDArray[numpy.int64], dict(shape=(None,), order='C', device='cpu', writable=False)], episode_length: Annotated[NDArray[numpy.int64], dict(shape=(None,), order='C', device='cpu', writable=False)], episode_task: Annotated[NDArray[numpy.int64], dict(shape=(None,), order='C', device='cpu', writable=False)], row_timestamp: Annotated[NDArray[numpy.float64], dict(shape=(None,), order='C', device='cpu', writable=False)], cameras: Sequence[str], video_files: Sequence[str], episode_video: Annotated[NDArray[numpy.int64], dict(shape=(None, None), order='C', device='cpu', writable=False)], episode_video_offset: Annotated[NDArray[numpy.float64], dict(shape=(None, None), order='C', device='cpu', writable=False)], columns: Sequence[tuple[str, Annotated[NDArray, dict(order='C', device='cpu')]]], tracked_files: Sequence[str], tolerance_s: float, threads: int, progress: Callable | None) -> dict:
    """
    Builds the episode index of a dataset from its columns and writes it to `path`.
    Returns {'seconds': float, 'max_drift_s': float64 array, one per video file}.
    """

class EpisodeIndex:
    @staticmethod
    def open(path: str) -> EpisodeIndex: ...

    @property
    def num_rows(self) -> int: ...

    @property
    def num_episodes(self) -> int: ...

    @property
    def fps(self) -> float: ...

    @property
    def cameras(self) -> list[str]: ...

    @property
    def video_files(self) -> list[str]: ...

    @property
    def column_names(self) -> list[tuple[str, str, int]]: ...

    def stale_files(self) -> list[str]: ...

    def episode_of_row(self, row: int) -> int: ...

    def frame_of_row(self, camera: int, row: int) -> int: ...

    def episode_of_rows(self, rows: Annotated[NDArray[numpy.int64], dict(shape=(None,), order='C', device='cpu', writable=False)]) -> NDArray[numpy.int64]: ...

    def frames_of_rows(self, camera: int, rows: Annotated[NDArray[numpy.int64], dict(shape=(None,), order='C', device='cpu', writable=False)]) -> NDArray[numpy.int64]: ...

    def episode_table(self) -> tuple: ...

    def videos_of(self, camera: int) -> NDArray[numpy.int64]: ...

    def first_frames(self, camera: int) -> NDArray[numpy.int64]: ...

    def drifts(self, camera: int) -> NDArray[numpy.float64]: ...

    def frame_table(self, video: int) -> bytes: ...

    def column(self, name: str) -> object:
        """
        A read-only [rows, dim] view of a column in the mapped file; it keeps the index alive.
        """

class WindowPlanner:
    def __init__(self, index: EpisodeIndex, names: Sequence[str], sources: Sequence[str], offsets: Sequence[Annotated[NDArray[numpy.int64], dict(shape=(None,), order='C', device='cpu', writable=False)]]) -> None: ...

    def plan(self, row: int) -> dict:
        """
        Rows, pad masks and per-camera frames of sample `row` (see stoker/window_plan.h).
        """

    def costs(self, rows: Annotated[NDArray[numpy.int64], dict(shape=(None,), order='C', device='cpu', writable=False)]) -> NDArray[numpy.float64]:
        """Estimated decode cost of each sample (see WindowPlanner::cost)."""

class Sampler:
    @property
    def size(self) -> int: ...

    def at(self, epoch: int, position: int) -> int: ...

    def fill(self, epoch: int, start: int, count: int) -> NDArray[numpy.int64]: ...

class DistributedSampler(Sampler):
    def __init__(self, n: int, shuffle: bool, seed: int, rank: int, world_size: int, drop_last: bool) -> None: ...

class WeightedSampler(Sampler):
    def __init__(self, weights: Annotated[NDArray[numpy.float64], dict(shape=(None,), order='C', device='cpu', writable=False)], num_samples: int | None, seed: int, rank: int, world_size: int, drop_last: bool) -> None: ...

class LoadBalancedSampler(Sampler):
    def __init__(self, costs: Annotated[NDArray[numpy.float64], dict(shape=(None,), order='C', device='cpu', writable=False)], batch_size: int, shuffle: bool, seed: int, rank: int, world_size: int, drop_last: bool) -> None: ...

    def report(self, epoch: int) -> dict: ...

def expand_group_weights(weights: Annotated[NDArray[numpy.float64], dict(shape=(None,), order='C', device='cpu', writable=False)], sizes: Annotated[NDArray[numpy.int64], dict(shape=(None,), order='C', device='cpu', writable=False)], per_sample: bool) -> NDArray[numpy.float64]: ...

class Loader:
    def __init__(self, index: EpisodeIndex, names: Sequence[str], sources: Sequence[str], offsets: Sequence[Annotated[NDArray[numpy.int64], dict(shape=(None,), order='C', device='cpu', writable=False)]], *, batch_size: int, shuffle: bool, seed: int, rank: int, world_size: int, drop_last: bool, threads: int, prefetch: int, on_error: str, max_replacements: int, resize: tuple[int, int] | None, crop: str, crop_size: tuple[int, int], scale: tuple[float, float], ratio: tuple[float, float], hflip: float, mean: Sequence[float] | None, std: Sequence[float] | None, dtype: str, layout: str, interpolation: str, pinned_memory: bool, costs: Annotated[NDArray[numpy.float64], dict(shape=(None,), order='C', device='cpu', writable=False)] | None) -> None: ...

    @property
    def batches_per_epoch(self) -> int: ...

    @property
    def pipeline_depth(self) -> int: ...

    @property
    def fields(self) -> list:
        """
        [(name, dtype, shape)] of every batch array; shape[0] is the batch size.
        """

    def start(self, epoch: int, batch: int, epochs: int = 1) -> None:
        """Starts a run at (epoch, batch) for `epochs` epochs (0: until stop())."""

    @property
    def position(self) -> tuple[int, int]:
        """(epoch, batch) that next() delivers next."""

    @property
    def running(self) -> bool: ...

    def next(self, torch: bool) -> object:
        """
        The next batch as (arrays, samples, episodes, epoch, index), or None at the end.
        """

    def stop(self) -> None: ...

    def stats(self) -> dict: ...

    def reset_stats(self) -> None: ...

def transcode(source: str, frame_table: bytes | None, first_frame: int, num_frames: int, target: str, height: int, width: int, codec: str, gop: int, crf: int, preset: str, fast_decode: bool, area: bool, threads: int, chunk_frames: int) -> dict:
    """
    Re-encodes frames [first_frame, first_frame + num_frames) of `source` into the MP4 `target` (atomically, checked), keeping their timestamps. Returns frames, bytes, duration, seconds and pts (float64 seconds from 0).
    """
