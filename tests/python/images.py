"""Photo-like test images, encoded by Pillow: shared by the image tests and bench/image_bench.py."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image


def photo(width: int, height: int, seed: int = 0) -> np.ndarray:
    """An [H, W, 3] uint8 picture with gradients, a texture, flat blobs with hard edges and
    sensor-like noise: what JPEG and a resize see in photographs."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    image = np.stack(
        [255 * x / width, 255 * y / height, 128 + 100 * np.sin(x / 9.0 + y / 13.0)], axis=-1
    )
    for _ in range(12):
        cx, cy, radius = rng.integers(0, width), rng.integers(0, height), rng.integers(10, 80)
        image[(x - cx) ** 2 + (y - cy) ** 2 < radius**2] = rng.integers(0, 255, 3)
    image += rng.normal(0, 6, image.shape)
    return np.clip(image, 0, 255).astype(np.uint8)


def encode(image: np.ndarray | Image.Image, fmt: str, **params) -> bytes:
    """`image` encoded by Pillow as `fmt` ("JPEG", "PNG")."""
    if isinstance(image, np.ndarray):
        image = Image.fromarray(image)
    buffer = io.BytesIO()
    image.save(buffer, fmt, **params)
    return buffer.getvalue()
