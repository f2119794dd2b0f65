"""stoker: a data-loading engine for multimodal ML training, so the GPU never waits for data.

Start with :class:`VideoReader` for frame-exact random access to a video file.
"""

from stoker._core import DecodeError, Error
from stoker.video import VideoReader

__all__ = ["DecodeError", "Error", "VideoReader"]
__version__ = "0.1.0"
