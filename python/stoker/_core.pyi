"""stoker's C++ core"""

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
