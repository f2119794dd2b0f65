"""JPEG, PNG and WebP decoding in C++ (libjpeg-turbo, libspng, libwebp), for single images and
for batches.

    image = stoker.decode_image(data)                       # [H, W, 3] uint8, as Pillow decodes
    small = stoker.decode_image(data, size=(224, 224))      # decoded at a reduced DCT scale
    batch = stoker.decode_images(list_of_bytes, stoker.Transforms(random_resized_crop=(224, 224),
                                 hflip=0.5, dtype="float32"), seed=0, ids=sample_ids)

A JPEG is decoded at the smallest of libjpeg-turbo's n/8 scales whose output still covers the
target size, then resized by the same code as video frames (see :class:`stoker.Transforms`); PNG
and WebP are decoded at full size, then resized the same way.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from stoker import _core
from stoker.transforms import Transforms

_NUMPY_DTYPES = {
    "uint8": np.uint8,
    "float16": np.float16,
    "float32": np.float32,
    "bfloat16": np.uint16,  # numpy has no bfloat16: its bits, as torch.from_numpy(...).view()
}


def probe_image(data: bytes) -> tuple[str, int, int, int, int]:
    """``(format, width, height, channels, bit_depth)`` read from the header only."""
    return _core.probe_image(bytes(data))


def decode_image(
    data: bytes | bytearray | memoryview,
    size: tuple[int, int] | None = None,
    *,
    keep_16bit_gray: bool = False,
) -> np.ndarray:
    """Decodes one JPEG, PNG or WebP (still, lossy or lossless) to ``[H, W, 3]`` uint8 RGB.

    Args:
        data: the encoded bytes.
        size: ``(height, width)`` to resize to (bilinear), decoding a JPEG at the smallest DCT
            scale that covers it; default: the stored size, pixel-for-pixel what Pillow's
            ``Image.open(...).convert("RGB")`` gives for 8-bit images (alpha dropped).
        keep_16bit_gray: a single-channel 16-bit PNG (a depth map) comes back as ``[H, W]``
            uint16 values instead. Other images are unaffected.

    Raises:
        stoker.DecodeError: bytes that are not a JPEG, PNG or WebP, truncated or damaged, or
            an animated WebP.
    """
    data = bytes(data)
    if size is None:
        return np.asarray(_core.decode_image(data, keep_16bit_gray=keep_16bit_gray))
    return decode_images([data], Transforms(resize=size), layout="THWC")[0]


def decode_images(
    images: Sequence[bytes],
    transforms: Transforms | None = None,
    *,
    size: tuple[int, int] | None = None,
    layout: str = "TCHW",
    seed: int = 0,
    epoch: int = 0,
    ids: Sequence[int] | np.ndarray | None = None,
    camera: int = 0,
    threads: int = 1,
) -> np.ndarray:
    """Decodes and transforms a batch of JPEG / PNG / WebP images into one array.

    Each image goes through ``transforms`` (crop, resize, flip, dtype, normalize) into its slot
    of a ``[N, 3, H, W]`` (``layout="TCHW"``) or ``[N, H, W, 3]`` array; random parameters are
    drawn from ``(seed, epoch, ids[k], camera)`` as the Loader draws them for video frames, so
    they do not depend on ``threads``.

    Args:
        images: the encoded bytes of each image.
        transforms: default: none (every image must then have the same size).
        size: the output ``(height, width)`` when ``transforms`` gives none (no resize or crop);
            default: the first image's size.
        layout: ``"TCHW"`` or ``"THWC"``, when ``transforms`` does not say.
        ids: per image, the id its random parameters are drawn with; default ``0..N-1``.
        threads: threads decoding at once; 0: every usable core.
    """
    if transforms is None:
        transforms = Transforms()
    if not isinstance(transforms, Transforms):
        raise TypeError(f"transforms must be stoker.Transforms, got {type(transforms).__name__}")
    if layout not in ("TCHW", "THWC"):
        raise ValueError(f"layout must be 'TCHW' or 'THWC', got {layout!r}")
    images = [bytes(image) for image in images]
    options = transforms.core_options(size, layout)
    if transforms.center_crop or transforms.random_resized_crop:
        height, width = transforms.center_crop or transforms.random_resized_crop  # type: ignore[misc]
    elif options.resize_height > 0:
        height, width = options.resize_height, options.resize_width
    elif images:
        _, width, height, _, _ = _core.probe_image(images[0])
    else:
        height, width = 1, 1
    ids_array = None
    if ids is not None:
        ids_array = np.ascontiguousarray(ids, dtype=np.int64)
        if ids_array.shape != (len(images),):
            raise ValueError(f"ids needs one id per image ({len(images)}), got {ids_array.shape}")
    shape = (3, height, width) if options.layout == _core.Layout.NCHW else (height, width, 3)
    out = np.empty((len(images), *shape), dtype=_NUMPY_DTYPES[options.dtype.name])
    if images:
        _core.decode_images(
            images,
            options,
            out,
            height,
            width,
            seed=seed,
            epoch=epoch,
            ids=ids_array,
            camera=camera,
            threads=threads,
        )
    return out
