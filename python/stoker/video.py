"""Frame-exact random access to one video file."""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from stoker import _core

_LAYOUTS = ("NHWC", "NCHW")
_INTERPOLATIONS = ("bilinear", "area")


class VideoReader:
    """Reads frames of one video (MP4, MKV, WebM, MOV) by index or by time.

    Opening scans the file's packets once, without decoding, to build a frame table (the
    timestamps and keyframes of every frame). Pass ``frame_table=`` (bytes from
    :attr:`frame_table` of an earlier open) to skip that scan.

    A reader may be shared by threads: each calling thread decodes with its own pooled
    container and decoder, and the GIL is released while it works.

    Args:
        path: the video file.
        threads: decoder threads per call. Default 1: parallelism comes from decoding many
            videos at once.
        frame_table: a saved frame table of this same file.
    """

    def __init__(
        self, path: str | os.PathLike, *, threads: int = 1, frame_table: bytes | None = None
    ):
        if not isinstance(threads, int) or threads < 1:
            raise ValueError(f"threads must be a positive integer, got {threads!r}")
        if frame_table is not None and not isinstance(frame_table, (bytes, bytearray)):
            raise TypeError("frame_table must be bytes from VideoReader.frame_table")
        self._reader = _core.VideoReader(
            os.fspath(path), threads, None if frame_table is None else bytes(frame_table)
        )
        self._pts = self._reader.pts()
        self._pts.flags.writeable = False
        self._is_key = self._reader.is_key().view(np.bool_)
        self._is_key.flags.writeable = False

    @property
    def path(self) -> str:
        return self._reader.path

    @property
    def codec(self) -> str:
        """FFmpeg's codec name, e.g. ``"h264"``, ``"hevc"``, ``"av1"``, ``"vp9"``."""
        return self._reader.codec

    @property
    def width(self) -> int:
        return self._reader.width

    @property
    def height(self) -> int:
        return self._reader.height

    @property
    def fps(self) -> float:
        """Average frame rate: (num_frames - 1) / (last pts - first pts)."""
        return self._reader.fps

    @property
    def num_frames(self) -> int:
        return self._reader.num_frames

    def __len__(self) -> int:
        return self._reader.num_frames

    @property
    def duration(self) -> float:
        """Seconds from the first frame's pts to the end of the last frame."""
        return self._reader.duration

    @property
    def pts(self) -> np.ndarray:
        """Presentation time of each frame in seconds (float64, read-only), in frame order."""
        return self._pts

    @property
    def is_key(self) -> np.ndarray:
        """Whether each frame is a keyframe (bool, read-only)."""
        return self._is_key

    @property
    def frame_table(self) -> bytes:
        """The frame table in a versioned binary form, for ``VideoReader(..., frame_table=)``."""
        return self._reader.frame_table()

    def frame_at(self, seconds: float, *, tolerance: float | None = None) -> int:
        """Index of the frame shown at ``seconds`` (the nearest pts)."""
        return self._reader.frame_at(float(seconds), tolerance)

    def get_frames(
        self,
        indices: Sequence[int] | np.ndarray,
        *,
        size: tuple[int, int] | None = None,
        layout: str = "NHWC",
        interpolation: str = "bilinear",
        out: np.ndarray | None = None,
    ) -> np.ndarray:
        """Frames ``indices`` (any order, repeats allowed) as uint8 RGB.

        Returns an array of shape [N, H, W, 3] (``layout="NHWC"``) or [N, 3, H, W]
        (``layout="NCHW"``), in the requested order. Each distinct frame is decoded once.
        ``size=(h, w)`` resizes (``interpolation``: ``"bilinear"`` or ``"area"``) while
        converting. ``out=`` is a C-contiguous uint8 array of that shape to write into.

        Raises :class:`stoker.DecodeError` naming the file and frame on any failure.
        """
        index_array = _as_index_array(indices, "indices")
        if index_array.size and index_array.dtype.kind not in "iu":
            raise TypeError(f"indices must be integers, got dtype {index_array.dtype}")
        index_array = np.ascontiguousarray(index_array, dtype=np.int64)
        height, width, channels_first, area = self._output_options(size, layout, interpolation)
        out = self._output(len(index_array), height, width, channels_first, out)
        self._reader.get_frames(
            index_array, out.reshape(-1) if out.size else out, height, width, channels_first, area
        )
        return out

    def get_frames_at(
        self,
        seconds: Sequence[float] | np.ndarray,
        *,
        tolerance: float | None = None,
        size: tuple[int, int] | None = None,
        layout: str = "NHWC",
        interpolation: str = "bilinear",
        out: np.ndarray | None = None,
    ) -> np.ndarray:
        """The frame shown at each time in ``seconds`` (nearest pts), like :meth:`get_frames`.

        With ``tolerance``, a time farther than that from every pts raises
        :class:`stoker.DecodeError`; without, a time outside the video's span does.
        """
        time_array = np.ascontiguousarray(_as_index_array(seconds, "seconds"), dtype=np.float64)
        if tolerance is not None and not tolerance >= 0:
            raise ValueError(f"tolerance must be non-negative, got {tolerance!r}")
        height, width, channels_first, area = self._output_options(size, layout, interpolation)
        out = self._output(len(time_array), height, width, channels_first, out)
        self._reader.get_frames_at(
            time_array,
            None if tolerance is None else float(tolerance),
            out.reshape(-1) if out.size else out,
            height,
            width,
            channels_first,
            area,
        )
        return out

    def __repr__(self) -> str:
        return (
            f"VideoReader({self.path!r}, codec={self.codec!r}, {self.width}x{self.height}, "
            f"{self.num_frames} frames at {self.fps:.3f} fps)"
        )

    def _output_options(self, size, layout, interpolation):
        if layout not in _LAYOUTS:
            raise ValueError(f"layout must be one of {_LAYOUTS}, got {layout!r}")
        if interpolation not in _INTERPOLATIONS:
            raise ValueError(
                f"interpolation must be one of {_INTERPOLATIONS}, got {interpolation!r}"
            )
        if size is None:
            height, width = self.height, self.width
        else:
            try:
                height, width = (int(v) for v in size)
            except (TypeError, ValueError):
                raise ValueError(f"size must be (height, width), got {size!r}") from None
            if height <= 0 or width <= 0:
                raise ValueError(f"size must be positive, got {size!r}")
        return height, width, layout == "NCHW", interpolation == "area"

    @staticmethod
    def _output(n, height, width, channels_first, out):
        shape = (n, 3, height, width) if channels_first else (n, height, width, 3)
        if out is None:
            return np.empty(shape, dtype=np.uint8)
        if not isinstance(out, np.ndarray) or out.dtype != np.uint8:
            raise TypeError("out must be a numpy uint8 array")
        if out.shape != shape:
            raise ValueError(f"out has shape {out.shape}, expected {shape}")
        if not out.flags.c_contiguous or not out.flags.writeable:
            raise ValueError("out must be C-contiguous and writeable")
        return out


def _as_index_array(values, name: str) -> np.ndarray:
    array = np.asarray(values)
    if array.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {array.shape}")
    return array
