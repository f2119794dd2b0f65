"""Per-frame image transforms, run by the loader's threads after frame selection.

    stoker.Transforms(random_resized_crop=(224, 224), hflip=0.5,
                      mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225), dtype="bfloat16")

They run in one fixed order, as the torchvision pipeline of the same names would:
resize -> center crop (or: random resized crop of the source frame) -> horizontal flip ->
to float in [0, 1] -> (x - mean) / std -> dtype. Crop and resize are fused into the decoder's
colour conversion; float outputs are one table lookup per value. Random parameters are drawn
per sample and camera from (seed, epoch, sample id), so they do not depend on the thread
count, and every frame of one camera in one sample gets the same crop and flip.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from stoker import _core
from stoker.arguments import check_frame_size

DTYPES = ("uint8", "float16", "bfloat16", "float32")
INTERPOLATIONS = ("bilinear", "area")


class _Defaults(NamedTuple):
    """The defaults of C++'s TransformOptions (stoker/image_transform.h), as plain values: the
    module keeps no native object, which would outlive the interpreter's teardown."""

    scale: tuple[float, float]
    ratio: tuple[float, float]
    hflip: float
    dtype: str
    interpolation: str


def _cpp_defaults() -> _Defaults:
    options = _core.TransformOptions()
    return _Defaults(
        scale=(options.scale_min, options.scale_max),
        ratio=(options.ratio_min, options.ratio_max),
        hflip=options.hflip_probability,
        dtype=options.dtype.name,
        interpolation=options.interpolation.name,
    )


_DEFAULTS = _cpp_defaults()


def _size(name, value):
    return None if value is None else check_frame_size(name, value)


def _pair(name, value, low_exclusive=0.0):
    try:
        lo, hi = (float(v) for v in value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a pair (min, max), got {value!r}") from None
    if not low_exclusive < lo <= hi:
        raise ValueError(f"{name} must satisfy {low_exclusive} < min <= max, got {value!r}")
    return lo, hi


def dtype_name(dtype) -> str:
    """'float32' from 'float32', numpy.float32 or torch.float32."""
    name = getattr(dtype, "__name__", None) or str(dtype)
    name = name.rsplit(".", 1)[-1]
    if name not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    return name


@dataclass(frozen=True)
class Transforms:
    """What the loader does to each selected frame.

    Args:
        resize: ``(height, width)``; default: the dataset spec's ``size``.
        center_crop: ``(height, width)`` taken from the middle of the resized frame.
        random_resized_crop: ``(height, width)`` output of a random region of the source
            frame with area fraction in ``scale`` and aspect ratio (width / height) in
            ``ratio``; it replaces the resize.
        hflip: probability of mirroring a sample's frames left to right.
        mean, std: per channel (R, G, B), applied to values in [0, 1]; float dtypes only.
        dtype: ``"uint8"``, ``"float16"``, ``"bfloat16"`` or ``"float32"`` (torch dtypes are
            accepted). Float outputs hold values scaled to [0, 1]. Default: the dataset's
            ``image_dtype`` (float32 unless the dataset says otherwise, as LeRobot returns
            images); ``"uint8"`` with normalization on the GPU is the faster path.
        layout: ``"TCHW"`` or ``"THWC"``; default: the spec's.
        interpolation: ``"bilinear"`` (default) or ``"area"``.
    """

    resize: tuple[int, int] | None = None
    center_crop: tuple[int, int] | None = None
    random_resized_crop: tuple[int, int] | None = None
    scale: tuple[float, float] = _DEFAULTS.scale
    ratio: tuple[float, float] = _DEFAULTS.ratio
    hflip: float = _DEFAULTS.hflip
    mean: Sequence[float] | None = None
    std: Sequence[float] | None = None
    dtype: str | None = None
    layout: str | None = None
    interpolation: str = _DEFAULTS.interpolation

    def __post_init__(self):
        set_ = object.__setattr__
        set_(self, "resize", _size("resize", self.resize))
        set_(self, "center_crop", _size("center_crop", self.center_crop))
        set_(self, "random_resized_crop", _size("random_resized_crop", self.random_resized_crop))
        if self.center_crop and self.random_resized_crop:
            raise ValueError("give center_crop or random_resized_crop, not both")
        if self.random_resized_crop and self.resize:
            raise ValueError("random_resized_crop resizes to its own size; give no resize")
        set_(self, "scale", _pair("scale", self.scale))
        if self.scale[1] > 1:
            raise ValueError(f"scale must not exceed 1, got {self.scale!r}")
        set_(self, "ratio", _pair("ratio", self.ratio))
        if not 0.0 <= float(self.hflip) <= 1.0:
            raise ValueError(f"hflip is a probability in [0, 1], got {self.hflip!r}")
        set_(self, "hflip", float(self.hflip))
        if self.dtype is not None:
            set_(self, "dtype", dtype_name(self.dtype))
        if (self.mean is None) != (self.std is None):
            raise ValueError("give both mean and std, or neither")
        if self.mean is not None and self.std is not None:
            if self.dtype == "uint8":
                raise ValueError("mean/std normalization needs a float dtype")
            for name in ("mean", "std"):
                values = tuple(float(v) for v in getattr(self, name))
                if len(values) != 3:
                    raise ValueError(f"{name} needs one value per channel (R, G, B)")
                set_(self, name, values)
            if min(self.std) <= 0:
                raise ValueError(f"std must be positive, got {self.std!r}")
        if self.layout is not None and self.layout not in ("TCHW", "THWC"):
            raise ValueError(f"layout must be 'TCHW' or 'THWC', got {self.layout!r}")
        if self.interpolation not in INTERPOLATIONS:
            raise ValueError(f"interpolation must be one of {INTERPOLATIONS}")

    def resolved_dtype(self, default: str) -> str:
        """The output dtype: this one's, else ``default`` (the dataset's image dtype)."""
        return self.dtype if self.dtype is not None else dtype_name(default)

    @property
    def is_random(self) -> bool:
        """Whether the output depends on random draws (a random crop, a flip)."""
        return self.random_resized_crop is not None or self.hflip > 0

    def core_options(
        self, spec_size, spec_layout: str, default_dtype: str = _DEFAULTS.dtype
    ) -> _core.TransformOptions:
        """These transforms as the C++ options, for a dataset spec's size and layout, with
        ``default_dtype`` where this one gives none. Raises ``ValueError`` for mean/std with a
        uint8 output."""
        dtype = self.resolved_dtype(default_dtype)
        if self.mean is not None and dtype == "uint8":
            raise ValueError("mean/std normalization needs a float dtype, the output is uint8")
        options = _core.TransformOptions()
        resize = self.resize if self.resize else spec_size
        if self.center_crop:
            options.crop = _core.CropMode.center
            options.crop_height, options.crop_width = self.center_crop
        elif self.random_resized_crop:
            options.crop = _core.CropMode.random_resized
            options.crop_height, options.crop_width = self.random_resized_crop
            resize = None
        if resize:
            options.resize_height, options.resize_width = resize
        options.scale_min, options.scale_max = self.scale
        options.ratio_min, options.ratio_max = self.ratio
        options.hflip_probability = self.hflip
        if self.mean is not None and self.std is not None:
            options.normalize = True
            options.mean, options.std = self.mean, self.std
        options.dtype = getattr(_core.DType, dtype)
        layout = self.layout or spec_layout
        options.layout = _core.Layout.NCHW if layout == "TCHW" else _core.Layout.NHWC
        options.interpolation = getattr(_core.Interpolation, self.interpolation)
        return options
