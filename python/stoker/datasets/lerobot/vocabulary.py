"""What stoker understands of a LeRobot dataset's ``meta/info.json``: the one list of every key,
feature attribute and dtype it reads, ignores on purpose, or refuses (docs/datasets.md, "What
stoker reads of info.json", prints the same lists).

Never guess a format: a feature attribute or dtype that describes how values are stored and
that stoker does not know is refused by name, never read as the nearest known thing. Top-level
keys it does not know are named in a warning, as LeRobot 0.6.1 does (``DatasetInfo.from_dict``):
values are described by the features, which are checked strictly.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from stoker._core import DatasetError

_log = logging.getLogger("stoker")

#: Top-level keys and what stoker does with each.
TOP_LEVEL_KEYS: dict[str, str] = {
    "codebase_version": "read: v2.0, v2.1 and v3.0 are read, any other is refused",
    "fps": "read: the frame rate of rows and videos",
    "features": "read: each feature's dtype, shape and info (below)",
    "data_path": "read: where the data files are",
    "video_path": "read: where the videos are",
    "chunks_size": "read: files per chunk folder",
    "storage_format": "read: 'parquet' (default) and 'lance' are read, any other is refused",
    "robot_type": "given back in ds.meta.robot_type",
    "tools": "given back in ds.meta.tools (LeRobot 0.6's tool schemas, for chat templates)",
    "total_episodes": "checked against the episode table",
    "total_frames": "checked against the data files",
    "total_tasks": "ignored: the tasks table is read",
    "total_chunks": "ignored (v2.x): the files are listed",
    "total_videos": "ignored (v2.x): the files are listed",
    "splits": "ignored: samplers and episodes= choose what is read",
    "data_files_size_in_mb": "ignored: a writer's setting",
    "video_files_size_in_mb": "ignored: a writer's setting",
}

#: The feature dtypes stoker reads: numbers become arrays; "video" and "image" cameras; "string"
#: columns are not read; "language" columns (LeRobot 0.6) are read as records.
NUMERIC_DTYPES = frozenset(
    {"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"}
    | {"float16", "float32", "float64"}
)
FEATURE_DTYPES = NUMERIC_DTYPES | {"video", "image", "string", "language"}

#: Keys of one feature: dtype, shape, names (given back in ds.meta.features), and the attributes
#: of its stored values in "info" (v2.1 and later) or "video_info" (v2.0). "fps" (some v2.x
#: features carry the dataset's) is read only to check it is the dataset's.
FEATURE_KEYS = frozenset({"dtype", "shape", "names", "info", "video_info", "fps"})

#: Feature attributes (in "info") stoker reads, and which LeRobot version writes each.
READ_ATTRIBUTES: dict[str, str] = {
    "is_depth_map": "LeRobot 0.6: a depth camera, 12-bit quantized (the video.depth_* below)",
    "video.is_depth_map": "LeRobot 0.4-0.5: a depth camera whose samples are stored as they are",
    "video.depth_min": "LeRobot 0.6: metres at code 0 (default 0.01, as LeRobot)",
    "video.depth_max": "LeRobot 0.6: metres at code 4095 (default 10, as LeRobot)",
    "video.shift": "LeRobot 0.6: metres added before the log quantizer's log (default 3.5)",
    "video.use_log": "LeRobot 0.6: log (true, default) or linear quantizer",
    "depth_unit": "LeRobot 0.6: the unit depth was recorded in; its statistics are in it",
    "video.depth_scale": "stoker: metres per stored sample (affine depth)",
    "video.depth_offset": "stoker: metres added (affine depth)",
    "video.pix_fmt": "checked: quantized depth must be gray12le, as LeRobot 0.6 writes it",
}

#: Feature attributes stoker ignores on purpose: what the decoder reads from the stream itself,
#: or how the video was encoded (which does not change what its frames decode to).
IGNORED_ATTRIBUTES: dict[str, str] = {
    "video.height": "the stream's own size is decoded",
    "video.width": "the stream's own size is decoded",
    "video.channels": "the stream's own pixel format is decoded",
    "video.codec": "the stream's own codec is decoded",
    "video.fps": "frames are matched to rows by their timestamps",
    "has_audio": "stoker reads the video stream only",
    "video.g": "an encoder setting",
    "video.crf": "an encoder setting",
    "video.preset": "an encoder setting",
    "video.fast_decode": "an encoder setting",
    "video.video_backend": "an encoder setting",
    "video.extra_options": "an encoder setting",
    "video.bit_rate": "an encoder setting",
    "video.profile": "an encoder setting",
}
#: Attribute prefixes ignored on purpose: an audio stream, which stoker does not read.
IGNORED_PREFIXES = ("audio.",)


def check_info_vocabulary(raw: Mapping[str, Any], path: str, fps: float) -> None:
    """Refuses (:class:`stoker.DatasetError`, naming the feature, the key and what to do) a
    feature whose dtype, keys or info attributes stoker does not understand, or whose info is
    not an object; logs a warning naming unknown top-level keys."""
    unknown = sorted(key for key in raw if key not in TOP_LEVEL_KEYS)
    if unknown:
        _log.warning(
            "%s: info.json keys %s are not known to stoker and are ignored (LeRobot 0.6.1 "
            "ignores them too); the features, which say how values are stored, are checked",
            path,
            unknown,
        )
    features = raw.get("features")
    if not isinstance(features, Mapping):
        return  # read_info names it
    for name, spec in features.items():
        if not isinstance(spec, Mapping):
            raise DatasetError(f"{path}: feature {name!r} is not an object")
        dtype = spec.get("dtype")
        if dtype not in FEATURE_DTYPES:
            raise DatasetError(
                f"{path}: feature {name!r} has dtype {dtype!r}, which stoker does not know "
                f"(it reads {sorted(FEATURE_DTYPES)}); reading it as another would guess its "
                "values. A LeRobot newer than 0.6.1 may write it: tell stoker's developers"
            )
        extra = sorted(set(spec) - FEATURE_KEYS)
        if extra:
            raise DatasetError(
                f"{path}: feature {name!r} has keys {extra}, which stoker does not know (it "
                f"reads {sorted(FEATURE_KEYS)}); they may change what the feature holds. If "
                "they do not, remove them from info.json"
            )
        feature_fps = spec.get("fps")
        if feature_fps is not None and feature_fps != fps:
            raise DatasetError(
                f"{path}: feature {name!r} says fps {feature_fps!r}, the dataset {fps:g}: "
                "stoker reads every feature at the dataset's frame rate"
            )
        for key in ("info", "video_info"):
            info = spec.get(key)
            if info is None:
                continue
            if not isinstance(info, Mapping):
                raise DatasetError(f"{path}: feature {name!r} has {key} {info!r}, not an object")
            _check_attributes(name, dtype, info, path)


def _check_attributes(name: str, dtype: str, info: Mapping[str, Any], path: str) -> None:
    unknown = sorted(
        key
        for key in info
        if key not in READ_ATTRIBUTES
        and key not in IGNORED_ATTRIBUTES
        and not key.startswith(IGNORED_PREFIXES)
    )
    if unknown:
        raise DatasetError(
            f"{path}: feature {name!r} has info attributes {unknown}, which stoker does not "
            "know: they may change how its values are stored (as video.depth_min or "
            "is_depth_map do). stoker reads what LeRobot up to 0.6.1 writes (docs/datasets.md, "
            "'What stoker reads of info.json'); if they do not change the stored values, "
            "remove them from info.json"
        )
    depth = info.get("is_depth_map") is True or info.get("video.is_depth_map") is True
    if depth and dtype != "video":
        raise DatasetError(
            f"{path}: feature {name!r} is a depth map stored as {dtype!r} features (LeRobot 0.6 "
            "can keep depth as images); stoker reads depth from video only. Encode it as "
            "LeRobot 0.6 does (12-bit HEVC), or open the dataset with cameras= without it"
        )
