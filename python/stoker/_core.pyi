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
