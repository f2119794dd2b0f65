"""How ``stoker etl`` and its Ray tasks encode: the codecs offered, and the native encoder and
transcode options made from a run's arguments (the same on the driver and in a Ray task)."""

from __future__ import annotations

from stoker import _core

CODECS = ("h264", "av1")


def encoder_options(codec, gop, crf, preset, fast_decode) -> _core.EncoderOptions:
    """The C++ encoder options of the arguments; None leaves C++'s default."""
    if codec not in CODECS:
        raise ValueError(f"codec must be one of {CODECS}, got {codec!r}")
    for name, value in (("gop", gop), ("crf", crf)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ValueError(f"{name} must be an integer, got {value!r}")
    encoder = _core.EncoderOptions()
    encoder.codec = getattr(_core.VideoCodec, codec)
    if gop is not None:
        encoder.gop = gop
    if crf is not None:
        encoder.crf = crf
    encoder.preset = preset or ""
    encoder.fast_decode = bool(fast_decode)
    return encoder


def transcode_options(options: dict) -> _core.TranscodeOptions:
    """The native transcode options of a run's ``options`` (the same in a Ray task)."""
    transcode = _core.TranscodeOptions()
    transcode.height, transcode.width = options["size"]
    transcode.encoder = encoder_options(
        options["codec"], options["gop"], options["crf"], options["preset"], options["fast_decode"]
    )
    transcode.interpolation = getattr(_core.Interpolation, options["interpolation"])
    return transcode
