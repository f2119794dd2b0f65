"""Frame-exact random access to one video: a file, an object in S3 or behind HTTP(S), or its
bytes held in memory."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from stoker import _core
from stoker._core import InvalidArgumentError
from stoker.arguments import check_frame_size
from stoker.io.files import checked_path
from stoker.io.storage import (
    S3Options,
    as_s3_options,
    is_url,
    register_remote_options,
)

_LAYOUTS = {"NHWC": _core.Layout.NHWC, "NCHW": _core.Layout.NCHW}
_INTERPOLATIONS = {"bilinear": _core.Interpolation.bilinear, "area": _core.Interpolation.area}
_PIXEL_FORMATS = {"rgb24": _core.PixelFormat.rgb24, "gray16": _core.PixelFormat.gray16}


class VideoReader:
    """Reads frames of one video (MP4, MKV, WebM, MOV) by index or by time.

    The video is a file, a URL (``s3://bucket/key``, ``https://...``, a presigned URL
    included; read by ranged requests, see :mod:`stoker.io.storage` for credentials and
    ``storage_options``), or its bytes in memory (``bytes``, ``bytearray`` or ``memoryview``,
    e.g. a member of a tar shard), decoded by the same code; bytes are copied once, and
    ``name=`` names them in error messages.

    Opening scans the video's packets once, without decoding, to build a frame table (the
    timestamps and keyframes of every frame). Pass ``frame_table=`` (bytes from
    :attr:`frame_table` of an earlier open) to skip that scan.

    A reader may be shared by threads: each calling thread decodes with its own pooled
    container and decoder, and the GIL is released while it works. It may be used in a child
    process forked after the parent read from it: the child opens the file again. It pickles
    (for spawn-based workers, Ray tasks) as what reopens it: the path and its frame table, or
    the bytes and the table (copied out of the reader's own copy when pickled).

    Args:
        source: the video file's path, or the video's bytes.
        threads: decoder threads per call. Default 1: parallelism comes from decoding many
            videos at once.
        frame_table: a saved frame table of this same video.
        name: what messages call a video given as bytes; default ``"<memory>"``.
        storage_options: for a URL: :class:`stoker.S3Options` or a dict of its fields (fsspec
            spellings too); default: the environment's (AWS_* variables, ~/.aws).
    """

    def __init__(
        self,
        source: str | os.PathLike | bytes | bytearray | memoryview,
        *,
        threads: int = 1,
        frame_table: bytes | None = None,
        name: str | None = None,
        storage_options: Mapping[str, Any] | S3Options | None = None,
    ):
        if not isinstance(threads, int) or threads < 1:
            raise ValueError(f"threads must be a positive integer, got {threads!r}")
        if frame_table is not None and not isinstance(frame_table, (bytes, bytearray)):
            raise TypeError("frame_table must be bytes from VideoReader.frame_table")
        table = None if frame_table is None else bytes(frame_table)
        self._threads = threads
        self._storage_options: S3Options | None = None
        if storage_options is not None and not is_url(source):
            raise InvalidArgumentError("storage_options are for videos named by a URL")
        if isinstance(source, (bytes, bytearray, memoryview)):
            if name is not None and "\0" in name:
                raise InvalidArgumentError(f"name {name!r} holds a NUL character")
            self._reader = _core.VideoReader.from_bytes(
                name or "<memory>", bytes(source), threads, table
            )
        else:
            if name is not None:
                raise ValueError("name= is for videos given as bytes; a file is named by its path")
            path = checked_path(source, "video path")
            if is_url(path):
                if storage_options is not None:
                    self._storage_options = as_s3_options(storage_options)
                    register_remote_options(path, self._storage_options)
            self._reader = _core.VideoReader(path, threads, table)
        self._pts = self._reader.pts()
        self._pts.flags.writeable = False
        self._is_key = self._reader.is_key().view(np.bool_)
        self._is_key.flags.writeable = False

    @property
    def path(self) -> str:
        """The file's path (or URL), or the name of a video given as bytes."""
        return self._reader.name

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

    def packet_bytes(self, frames: Sequence[int] | None = None) -> list[tuple[int, int]]:
        """Where the video's packets lie in its file, as ``(offset, size)`` pairs: every packet
        in decode order, or, given ``frames``, the byte ranges that decoding those frames reads
        (from each frame's keyframe to its own packet, adjacent ones merged): what a remote
        read of them fetches. Empty when the container does not store packets verbatim
        (MPEG-TS, AVI): those are read through the demuxer."""
        return self._reader.packet_bytes(None if frames is None else [int(f) for f in frames])

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
        pixel_format: str = "rgb24",
    ) -> np.ndarray:
        """Frames ``indices`` (any order, repeats allowed) as uint8 RGB.

        Returns an array of shape [N, H, W, 3] (``layout="NHWC"``) or [N, 3, H, W]
        (``layout="NCHW"``), in the requested order. Each distinct frame is decoded once.
        ``size=(h, w)`` resizes (``interpolation``: ``"bilinear"`` or ``"area"``) while
        converting. ``out=`` is a C-contiguous array of that shape to write into.

        ``pixel_format="gray16"`` (depth maps: gray10le / gray12le / gray16le video) returns
        uint16 [N, 1, H, W] (or [N, H, W, 1]) instead: the samples exactly as stored, not
        rescaled (a gray12le sample v comes back as v); ``size`` then resizes by nearest
        neighbour whatever ``interpolation`` says, so no value is invented. A stream of RGB
        pixels raises :class:`stoker.DecodeError`.

        Raises :class:`stoker.DecodeError` naming the file and frame when the video cannot
        produce a frame, and :class:`stoker.InvalidArgumentError` (a ``ValueError``) for an
        index out of range.
        """
        index_array = _as_index_array(indices, "indices")
        if index_array.size and index_array.dtype.kind not in "iu":
            raise TypeError(f"indices must be integers, got dtype {index_array.dtype}")
        index_array = np.ascontiguousarray(index_array, dtype=np.int64)
        height, width = self._output_size(size)
        options = self._conversion(layout, interpolation, pixel_format)
        out = self._output(len(index_array), height, width, layout == "NCHW", pixel_format, out)
        self._reader.get_frames(index_array, _bytes_of(out), height, width, *options)
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
        pixel_format: str = "rgb24",
    ) -> np.ndarray:
        """The frame shown at each time in ``seconds`` (nearest pts), like :meth:`get_frames`.

        With ``tolerance``, a time farther than that from every pts raises
        :class:`stoker.InvalidArgumentError`; without, a time outside the video's span does.
        """
        time_array = np.ascontiguousarray(_as_index_array(seconds, "seconds"), dtype=np.float64)
        if tolerance is not None and not tolerance >= 0:
            raise ValueError(f"tolerance must be non-negative, got {tolerance!r}")
        height, width = self._output_size(size)
        options = self._conversion(layout, interpolation, pixel_format)
        out = self._output(len(time_array), height, width, layout == "NCHW", pixel_format, out)
        self._reader.get_frames_at(
            time_array,
            None if tolerance is None else float(tolerance),
            _bytes_of(out),
            height,
            width,
            *options,
        )
        return out

    def __reduce__(self):
        """Pickles as what reopens the video without a scan: its path (or its bytes and name)
        and its frame table. The reopened file must be the one scanned: a file changed since
        is refused (:class:`stoker.Error` naming it)."""
        arguments: dict[str, Any] = {"threads": self._threads, "frame_table": self.frame_table}
        if self._storage_options is not None:
            arguments["storage_options"] = self._storage_options
        data = self._reader.source_bytes()  # a copy, made only here, of what C++ holds
        if data is not None:
            return (_reopen, (data, dict(arguments, name=self.path)))
        return (_reopen, (self.path, arguments))

    def __repr__(self) -> str:
        return (
            f"VideoReader({self.path!r}, codec={self.codec!r}, {self.width}x{self.height}, "
            f"{self.num_frames} frames at {self.fps:.3f} fps)"
        )

    @staticmethod
    def _conversion(layout, interpolation, pixel_format):
        if layout not in _LAYOUTS:
            raise ValueError(f"layout must be one of {tuple(_LAYOUTS)}, got {layout!r}")
        if interpolation not in _INTERPOLATIONS:
            raise ValueError(
                f"interpolation must be one of {tuple(_INTERPOLATIONS)}, got {interpolation!r}"
            )
        if pixel_format not in _PIXEL_FORMATS:
            raise ValueError(
                f"pixel_format must be one of {tuple(_PIXEL_FORMATS)}, got {pixel_format!r}"
            )
        return _LAYOUTS[layout], _INTERPOLATIONS[interpolation], _PIXEL_FORMATS[pixel_format]

    def _output_size(self, size):
        if size is None:
            return self.height, self.width
        return check_frame_size("size", size)

    @staticmethod
    def _output(n, height, width, channels_first, pixel_format, out):
        channels, dtype = (1, np.uint16) if pixel_format == "gray16" else (3, np.uint8)
        shape = (n, channels, height, width) if channels_first else (n, height, width, channels)
        if out is None:
            return np.empty(shape, dtype=dtype)
        if not isinstance(out, np.ndarray) or out.dtype != dtype:
            raise TypeError(f"out must be a numpy {np.dtype(dtype).name} array")
        if out.shape != shape:
            raise ValueError(f"out has shape {out.shape}, expected {shape}")
        if not out.flags.c_contiguous or not out.flags.writeable:
            raise ValueError("out must be C-contiguous and writeable")
        return out


def _reopen(source, arguments) -> VideoReader:
    """A pickled :class:`VideoReader` opened again."""
    return VideoReader(source, **arguments)


def _bytes_of(out: np.ndarray) -> np.ndarray:
    """``out``'s memory as the flat uint8 array the native reader writes into."""
    return out.reshape(-1).view(np.uint8) if out.size else out.view(np.uint8)


def _as_index_array(values, name: str) -> np.ndarray:
    array = np.asarray(values)
    if array.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {array.shape}")
    return array
