"""Checks of the arguments users pass to the samplers, the Loader, the datasets and the Ray
reader, shared by them so that one argument is refused with the same words everywhere. Each
returns the value in its canonical form (an ``int``, a contiguous numpy array, a ``(height,
width)`` pair) or raises naming the argument:
:class:`stoker.InvalidArgumentError` for a wrong type or range of a scalar, ``ValueError`` for a
wrong list (as numpy does)."""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from stoker._core import InvalidArgumentError

MAX_EPOCH = 2**32 - 1
MAX_SEED = 2**64 - 1
MAX_INT64 = 2**63 - 1


def check_int(name: str, value: Any, low: int, high: int) -> int:
    """``value`` as an int, or :class:`stoker.InvalidArgumentError` naming ``name``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise InvalidArgumentError(
            f"{name} must be an integer, got {value!r} ({type(value).__name__})"
        )
    value = int(value)
    if not low <= value <= high:
        raise InvalidArgumentError(f"{name} must be in [{low}, {high}], got {value}")
    return value


def check_bool(name: str, value: Any) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise InvalidArgumentError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def check_seed(seed: Any) -> int:
    return check_int("seed", seed, 0, MAX_SEED)


def check_size(num_samples: Any) -> int:
    if not isinstance(num_samples, numbers.Integral) and hasattr(num_samples, "__len__"):
        num_samples = len(num_samples)
    return check_int("num_samples", num_samples, 0, MAX_INT64)


# How stoker takes a frame size, everywhere (the Python API and the command line).
FRAME_SIZE_RULE = (
    "(height, width), as arrays are shaped, e.g. (240, 320); or the string 'WIDTHxHEIGHT', as "
    "FFmpeg and the command line write it, e.g. '320x240'"
)


def check_frame_size(name: str, value: Any) -> tuple[int, int]:
    """A frame size as ``(height, width)``: from a pair ``(height, width)``, or from a string
    ``"WIDTHxHEIGHT"`` (:data:`FRAME_SIZE_RULE`). Raises ``ValueError`` naming ``name``, the
    value and the rule."""
    try:
        if isinstance(value, str):
            width, height = (int(part) for part in value.lower().split("x"))
        elif isinstance(value, bool) or not hasattr(value, "__iter__"):
            raise ValueError
        else:
            height, width = (int(side) for side in value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be {FRAME_SIZE_RULE}; got {value!r}") from None
    if height <= 0 or width <= 0:
        raise ValueError(f"{name} must have positive sides, {FRAME_SIZE_RULE}; got {value!r}")
    return height, width


def check_partition(rank: Any, world_size: Any):
    world_size = check_int("world_size", world_size, 1, MAX_INT64)
    rank = check_int("rank", rank, 0, world_size - 1)
    return world_size, rank


def check_indices(name: str, values: Any) -> np.ndarray:
    array = np.asarray(values)
    if array.ndim != 1 or (array.size and array.dtype.kind not in "iu"):
        raise ValueError(f"{name} must be a one-dimensional list of integers")
    if array.size and array.min() < 0:
        raise ValueError(f"{name} must be non-negative")
    return np.ascontiguousarray(array, dtype=np.int64)


def check_values(name: str, values: Any) -> np.ndarray:
    array = np.asarray(values)
    if array.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {array.shape}")
    if array.size and array.dtype.kind not in "iuf":
        raise ValueError(f"{name} must be numbers, got dtype {array.dtype}")
    array = np.ascontiguousarray(array, dtype=np.float64)
    bad = ~(np.isfinite(array) & (array >= 0))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{name}[{i}] must be finite and non-negative, got {array[i]}")
    return array
