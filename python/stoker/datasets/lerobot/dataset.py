"""LeRobot datasets (v2.1 and v3.0) read by stoker: temporal windows of frames and rows.

    ds = stoker.LeRobotDataset("path/to/dataset", spec=stoker.WindowSpec(
        delta_timestamps={"observation.images.front": [-0.1, 0.0],
                          "action": [0.0, 1 / 30, 2 / 30]},
        size=(224, 224)))
    item = ds[123]   # dict of numpy arrays, keyed and shaped as LeRobotDataset's items

The index (episodes, frame tables, columns) is built once per dataset and memory-mapped on later
opens; see :func:`stoker.datasets.lerobot.index.load_index`.
"""

from __future__ import annotations

import json
import numbers
import os
import threading
import time
import warnings
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, NamedTuple, Union

import numpy as np
import pyarrow as pa

from stoker import _core
from stoker._core import DatasetError, InvalidArgumentError
from stoker.arguments import check_frame_size
from stoker.datasets.lerobot.index import (
    EpisodeIndex,
    checked_cameras,
    checked_index_arguments,
    checked_on_error,
    counted,
    current_index_and_metadata,
    current_remote_index_and_metadata,
    indexed_cameras,
    listed,
    load_index,
    load_remote_index,
    remember_indexed_objects,
)
from stoker.datasets.lerobot.meta_view import DatasetMeta, looks_like_repo_id, resolve_repo_id
from stoker.datasets.lerobot.metadata import (
    DepthInfo,
    LeRobotMetadata,
    attached_metadata,
    depth_cameras,
    read_data_schema,
    read_data_table,
    read_lerobot_metadata,
)
from stoker.io.files import checked_path
from stoker.io.storage import S3Options, is_url, open_dataset_root
from stoker.transforms import Transforms, dtype_name

# LeRobot's arguments about downloading and its own decoders: accepted so that LeRobot's calls
# run unchanged, with no effect (stoker reads the local copy itself, with its own decoder).
_LEROBOT_ONLY = ("revision", "force_cache_sync", "download_videos", "video_backend", "token")
# LeRobot 0.6.1's arguments about writing a dataset (LeRobotDataset.create / resume take them):
# refused, never accepted and ignored.
_LEROBOT_WRITING = (
    "batch_encoding_size",
    "rgb_encoder",
    "depth_encoder",
    "encoder_threads",
    "streaming_encoding",
    "encoder_queue_maxsize",
)
_ITEM_DTYPES = ("uint8", "float16", "float32")
_MM_PER = {"mm": 1.0, "m": 1000.0}

_LAYOUTS = {"TCHW": "NCHW", "THWC": "NHWC"}
_DEPTH_UNITS = ("mm", "m", "raw")

Offsets = Union[Sequence[float], tuple[str, Sequence[float]]]


class WindowSpec:
    """Which rows and frames around a sample make one training example.

    Args:
        delta_timestamps: per key, offsets in seconds from the sample's time, as LeRobot's
            ``delta_timestamps``. A key is a camera or a feature (``"action"``); to read one
            source as several output keys (past / current / future segments), map a new name to
            ``(source, offsets)``.
        delta_indices: the same in frames (rows) instead of seconds.
        size: ``(height, width)`` to resize frames to while converting; default: the video's.
        layout: ``"TCHW"`` (default, as LeRobot) or ``"THWC"``.
        tolerance_s: how far an offset in seconds may be from a whole number of frames.

    Keys of the dataset not read by a window key come back for the sample's own row only,
    without a time axis, as LeRobot returns them. Offsets that fall outside the sample's
    episode (however far: even ``2**63 - 1`` rows) read its first or last row and set the pad
    mask. Offsets in seconds must be finite, offsets in rows integers of int64's range:
    :class:`stoker.InvalidArgumentError` (a ``ValueError``) names the key of one that is not.
    """

    def __init__(
        self,
        delta_timestamps: Mapping[str, Offsets] | None = None,
        delta_indices: Mapping[str, Offsets] | None = None,
        size: tuple[int, int] | None = None,
        layout: str = "TCHW",
        tolerance_s: float = 1e-4,
    ):
        if layout not in _LAYOUTS:
            raise ValueError(f"layout must be one of {tuple(_LAYOUTS)}, got {layout!r}")
        if size is not None:
            size = check_frame_size("size", size)
        if not tolerance_s >= 0:
            raise ValueError(f"tolerance_s must be non-negative, got {tolerance_s!r}")
        self.delta_timestamps = dict(delta_timestamps or {})
        self.delta_indices = dict(delta_indices or {})
        for name, value in self.delta_timestamps.items():
            _offsets(f"delta_timestamps[{name!r}]", name, value, seconds=True)
        for name, value in self.delta_indices.items():
            _offsets(f"delta_indices[{name!r}]", name, value, seconds=False)
        overlap = set(self.delta_timestamps) & set(self.delta_indices)
        if overlap:
            raise ValueError(
                f"keys {sorted(overlap)} are in both delta_timestamps and delta_indices"
            )
        self.size = size
        self.layout = layout
        self.tolerance_s = float(tolerance_s)

    def resolve(self, fps: float) -> dict[str, tuple[str, np.ndarray]]:
        """Output key -> (source key, offsets in rows), checking seconds against ``fps``."""
        keys = {}
        for name, value in self.delta_timestamps.items():
            source, seconds = _offsets(f"delta_timestamps[{name!r}]", name, value, seconds=True)
            rows = np.round(seconds * fps)
            off = np.abs(seconds - rows / fps)
            if np.any(off > self.tolerance_s):
                bad = seconds[np.argmax(off)]
                raise ValueError(
                    f"delta_timestamps[{name!r}]: {bad} s is not a whole number of "
                    f"frames at {fps} fps (tolerance {self.tolerance_s} s)"
                )
            # Beyond 2**62 rows every offset is outside any episode: clamped there, it stays so.
            keys[name] = (source, np.clip(rows, -(2.0**62), 2.0**62).astype(np.int64))
        for name, value in self.delta_indices.items():
            keys[name] = _offsets(f"delta_indices[{name!r}]", name, value, seconds=False)
        return keys

    def __repr__(self) -> str:
        return (
            f"WindowSpec(delta_timestamps={self.delta_timestamps!r}, "
            f"delta_indices={self.delta_indices!r}, size={self.size!r}, "
            f"layout={self.layout!r})"
        )


def _source_and_offsets(name, value):
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str):
        return value
    return name, value


_INT64 = np.iinfo(np.int64)


def _offsets(what: str, name: Any, value: Any, seconds: bool) -> tuple[str, np.ndarray]:
    """(source, offsets) of one window key: float64 seconds, all finite, or int64 rows.
    Raises :class:`stoker.InvalidArgumentError` naming the key ``what`` otherwise."""
    if not isinstance(name, str):
        raise InvalidArgumentError(f"{what}: window keys are strings, got {type(name).__name__}")
    source, offsets = _source_and_offsets(name, value)
    if isinstance(offsets, (str, bytes)):
        offsets = None  # not a sequence of numbers, refused below
    try:
        array = np.asarray(offsets)
    except (TypeError, ValueError):
        array = np.asarray(None)
    if array.ndim != 1:
        raise InvalidArgumentError(
            f"{what} must be a list of {'seconds' if seconds else 'rows'} (or (source, list)), "
            f"got {value!r}"
        )
    if seconds:
        if array.size and array.dtype.kind not in "iuf":
            raise InvalidArgumentError(f"{what} must be numbers of seconds, got {value!r}")
        array = array.astype(np.float64)
        finite = np.isfinite(array)
        if not finite.all():
            bad = array[np.flatnonzero(~finite)[0]]
            raise InvalidArgumentError(
                f"{what} holds {bad}: offsets in seconds must be finite numbers"
            )
        return source, array
    if array.size and array.dtype.kind == "O":  # Python ints beyond 64 bits, or not numbers
        items = array.tolist()
        for item in items:
            if isinstance(item, bool) or not isinstance(item, numbers.Integral):
                raise InvalidArgumentError(f"{what} must be integers (rows), got {item!r}")
            if not _INT64.min <= int(item) <= _INT64.max:
                raise InvalidArgumentError(
                    f"{what} holds {item}, outside int64's [{_INT64.min}, {_INT64.max}]"
                )
        array = np.asarray(items, dtype=np.int64)
    if array.size and array.dtype.kind not in "iu":
        raise InvalidArgumentError(f"{what} must be integers (rows), got {value!r}")
    if array.size and array.dtype.kind == "u" and array.max() > _INT64.max:
        raise InvalidArgumentError(
            f"{what} holds {int(array.max())}, outside int64's [{_INT64.min}, {_INT64.max}]"
        )
    return source, array.astype(np.int64)


class ItemKey(NamedTuple):
    """One key of a dataset's items (and of a Loader's batches), as the window resolved it.

    ``name`` is the key, read from ``source`` (a camera or an indexed column). A ``timed`` key
    is read through the window: at the rows ``offsets`` (int64, relative to the sample's row,
    read-only), with a time axis and a ``<name>_is_pad`` mask. The others are read at the
    sample's own row (``offsets`` is empty).
    """

    name: str
    source: str
    timed: bool
    offsets: np.ndarray

    @property
    def native(self) -> _core.WindowKey:
        """The key as the native planner and loader take it."""
        return _core.WindowKey(self.name, self.source, np.ascontiguousarray(self.offsets, np.int64))


class LeftOutEpisode(NamedTuple):
    """An episode a :class:`LeRobotDataset` opened with ``on_error="skip"`` does not read: the
    video of one of its cameras cannot serve it (it does not open, has too few frames for the
    episode's rows, or shows them at other times)."""

    episode_index: int
    camera: str
    file: str
    why: str

    def __str__(self) -> str:
        return (
            f"episode {self.episode_index}, camera '{self.camera}', file '{self.file}': {self.why}"
        )


class LeRobotDataset:
    """A LeRobot dataset (codebase v2.0, v2.1 or v3.0), read by stoker, called as LeRobot's
    ``LeRobotDataset`` is or with a folder and a :class:`WindowSpec`::

        stoker.LeRobotDataset("lerobot/pusht", delta_timestamps={...})   # LeRobot's cache
        stoker.LeRobotDataset("lerobot/pusht", root="/data/pusht", episodes=[0, 3])
        stoker.LeRobotDataset("/data/pusht", stoker.WindowSpec(delta_timestamps={...}))

    Opening reads the metadata and maps the stoker index (building it the first time, or when
    the dataset's files changed); a local dataset opened again with its index current takes
    the metadata from the index instead of reading its episode tables (a 10^6-episode dataset
    opens in ~0.1 s). ``len(ds)`` is the number of frames (rows) of the episodes
    read, and ``ds[i]`` is sample i: a dict with the keys, shapes and pad masks LeRobot's
    ``LeRobotDataset`` returns for the same ``delta_timestamps`` — images float32 in [0, 1]
    [T, C, H, W] (or [T, H, W, C]; uint8 with ``image_dtype="uint8"``), features [T, dim],
    ``<key>_is_pad`` bool [T], and the scalars ``timestamp``, ``frame_index``,
    ``episode_index``, ``index``, ``task_index`` and the ``task`` text; columns of records
    (``language_persistent``, ``language_events``: lists of structs) as Python lists.

    Args:
        repo_id: LeRobot's dataset name (``owner/name``), or (as before) the dataset folder or
            its URL. Without ``root``, a folder that exists or a URL is read where it is; a
            name ``owner/name`` is read from LeRobot's local cache,
            ``$HF_LEROBOT_HOME/<repo_id>`` (default ``~/.cache/huggingface/lerobot``), and
            :class:`stoker.DatasetError` says how to fetch it when it is not there: stoker
            does not download.
        root: the dataset folder (or URL), as LeRobot's ``root``: ``repo_id`` then only names
            the dataset. May also be the second positional argument.
        spec: the window; without one, items hold the sample's own row and frames. Give it or
            ``delta_timestamps``/``delta_indices``, not both. A WindowSpec may also be the
            second positional argument, as before.
        episodes: the ``episode_index`` values to read (LeRobot's ``episodes``): ``len``, the
            samples and every sampler then cover their rows only, in dataset order; items keep
            the dataset's ``index`` and ``episode_index``, as LeRobot's do (sample 0 is the
            first row of the first chosen episode). Default: every episode.
        cameras: the cameras (video or image features) items hold, as names in any order;
            default every camera, as LeRobot's items. The others are not indexed (their videos
            are not even scanned), decoded or returned, and no window may read them: a camera a
            policy does not use costs nothing, and a broken video of it does not matter.
            ``ds.cameras`` lists the ones read, in the dataset's order.
        on_error: what an episode that a camera read cannot serve (its video does not open,
            has too few frames for its rows, or shows them at other times) does when the
            dataset opens: ``"raise"`` (default) refuses the dataset with
            :class:`stoker.DatasetError`, naming each such episode, camera, file and why, and
            the ways out (``on_error="skip"``, the ``episodes=`` of the others, the
            ``cameras=`` without the camera); ``"skip"`` leaves those episodes out of the
            samples (as ``episodes=`` would: ``len``, samplers, the Loader and its
            replacements never see them) with a ``UserWarning`` naming them and the
            ``episodes=`` that reads the same samples without it; ``ds.broken_episodes``
            lists them. This is the dataset's policy, applied when it opens, before any Loader
            exists; a Loader's ``on_error`` is about samples that fail while it reads.
        delta_timestamps, tolerance_s: LeRobot's; they make the :class:`WindowSpec`.
        image_transforms: a :class:`stoker.Transforms`, which a :class:`stoker.Loader` over
            this dataset runs fused into decoding (``ds[i]`` applies its resize, dtype,
            normalization and layout, and refuses its crops and flips, which are drawn per
            epoch by the Loader); or any Python callable, applied to each camera's frames (a
            torch tensor when PyTorch is installed, else a numpy array) of every sample after
            decoding, as LeRobot applies its ``image_transforms``: the slow path, its time is
            ``python_transform_s`` in :meth:`stoker.Loader.stats`.
        image_dtype: the dtype of frames: ``"float32"`` in [0, 1] (default, as LeRobot),
            ``"uint8"`` (the fast path: normalize on the GPU) or ``"float16"``. Depth cameras
            (features whose info says ``"video.is_depth_map": true``) are not images of this
            dtype: see ``depth_unit``.
        return_uint8: LeRobot's: True gives uint8 frames (``image_dtype="uint8"``).
        depth_output_unit: how depth cameras come out, one channel ([T, 1, H, W], or
            [T, H, W, 1]): ``"mm"`` float32 millimetres (the default for LeRobot 0.6's
            quantized depth, as LeRobot), ``"m"`` float32 metres, ``"raw"`` the samples as
            stored, uint16 (the default for depth whose info says only ``video.is_depth_map``,
            and for stoker's affine ``video.depth_scale`` / ``video.depth_offset``). LeRobot 0.6's
            12-bit codes are dequantized as LeRobot 0.6.1 does; affine samples become
            ``sample * scale + offset`` metres (``depth_scale`` stands in for the scale).
            Their resize takes the nearest pixel (no value is invented); crops and flips are
            the colour cameras'. ``depth_unit`` (``"raw"`` or ``"m"``) is its earlier name.
        depth_scale: metres per stored unit for every affine depth camera (e.g. ``0.001`` for
            millimetres), in place of ``video.depth_scale``; with a distance unit only.
        episode_filter: LeRobot's: a predicate over each episode's row of ``ds.meta.episodes``
            (``episode_index``, ``length``, ``dataset_from_index``, ``dataset_to_index``,
            ``task_index``, ``tasks``); the episodes it accepts (of ``episodes``, when given)
            are read.
        output: what ``ds[i]`` holds: ``"auto"`` (default) torch tensors when PyTorch can be
            imported, as LeRobot's items, else numpy; ``"torch"`` or ``"numpy"``
            (:meth:`numpy_item` always gives numpy).
        revision, force_cache_sync, download_videos, video_backend, token: LeRobot's, accepted
            without effect (they concern downloading and LeRobot's decoders). Its arguments
            about writing a dataset (``batch_encoding_size``, ``rgb_encoder``, ...) are a
            ``TypeError``.
        storage_options: for a URL, :class:`stoker.S3Options` or a dict of its fields (fsspec
            spellings too); default: the environment's (AWS_* variables, ~/.aws), as the AWS CLI.
        cache_dir, rebuild, threads, progress: passed to
            :func:`stoker.datasets.lerobot.index.load_index`.

    Attributes: ``meta`` (a :class:`stoker.datasets.lerobot.meta_view.DatasetMeta`: ``fps``,
    ``features``, ``camera_keys``, ``stats``, ``episodes``, ``tasks``, ``total_frames``, ...
    as LeRobot's metadata, of the whole dataset), ``repo_id``, ``root``, ``episodes`` (the
    episode_index values read, or None), ``cameras`` (those read), ``broken_episodes`` (those
    left out under ``on_error="skip"``), ``spec``, ``index``, ``metadata`` (stoker's checked
    :class:`LeRobotMetadata`).

    Thread-safety: ``ds[i]`` may be called from several threads; decoding releases the GIL.

    Processes: a dataset read in a parent may be read in children forked after it (a fork-based
    ``torch.utils.data.DataLoader``): each child opens the videos again. It pickles (spawn or
    forkserver workers, Ray tasks) as its folder, spec and index file; unpickling reads the
    metadata and maps the index again, and refuses (:class:`stoker.DatasetError`) a dataset
    or index changed since. A remote dataset pickles with its storage options, registered again
    in the process that unpickles it (its objects are not re-checked there: the index is keyed
    by their versions when opened).
    """

    def __init__(
        self,
        repo_id: str | os.PathLike,
        spec_or_root: WindowSpec | str | os.PathLike | None = None,
        *,
        root: str | os.PathLike | None = None,
        spec: WindowSpec | None = None,
        episodes: Sequence[int] | None = None,
        cameras: Sequence[str] | None = None,
        on_error: str = "raise",
        image_transforms: Transforms | Callable[[Any], Any] | None = None,
        delta_timestamps: Mapping[str, Offsets] | None = None,
        delta_indices: Mapping[str, Offsets] | None = None,
        tolerance_s: float | None = None,
        image_dtype: Any = None,
        return_uint8: bool | None = None,
        depth_output_unit: str | None = None,
        depth_unit: str | None = None,
        depth_scale: float | None = None,
        episode_filter: Callable[[dict[str, Any]], bool] | None = None,
        output: str = "auto",
        storage_options: Mapping[str, Any] | S3Options | None = None,
        cache_dir: str | None = None,
        rebuild: bool = False,
        threads: int | None = None,
        progress: bool = True,
        **lerobot_options: Any,
    ):
        writing = sorted(set(lerobot_options) & set(_LEROBOT_WRITING))
        if writing:
            raise TypeError(
                f"LeRobotDataset() got {writing}: LeRobot's arguments for writing a dataset "
                "(its LeRobotDataset.create and resume take them); stoker reads datasets. "
                "Record with LeRobot, then read with stoker"
            )
        unknown = sorted(set(lerobot_options) - set(_LEROBOT_ONLY))
        if unknown:
            raise TypeError(f"LeRobotDataset() got unexpected keyword arguments {unknown}")
        if isinstance(spec_or_root, WindowSpec):
            if spec is not None:
                raise TypeError("spec given twice: positionally and as spec=")
            spec = spec_or_root
        elif spec_or_root is not None:
            if root is not None:
                raise TypeError("root given twice: positionally and as root=")
            root = spec_or_root
        # LeRobot's call (windows from delta_timestamps, no WindowSpec): items shaped as its.
        self._lerobot_call = spec is None
        spec = _window_spec(spec, delta_timestamps, delta_indices, tolerance_s)
        self._image_dtype = _item_dtype(image_dtype, return_uint8)
        self._depth_unit, self._depth_scale = _depth_arguments(
            depth_output_unit, depth_unit, depth_scale
        )
        if output not in ("auto", "torch", "numpy"):
            raise ValueError(f"output must be 'auto', 'torch' or 'numpy', got {output!r}")
        self._output = output
        if episode_filter is not None and not callable(episode_filter):
            raise TypeError(f"episode_filter must be callable, got {episode_filter!r}")
        self._episode_filter = episode_filter
        self.transforms, self.image_transforms = _image_transforms(image_transforms)
        location, self.repo_id = _locate(repo_id, root)
        self._episodes_arg = None if episodes is None else _episode_list(episodes)
        self._on_error = checked_on_error(on_error)
        chosen = checked_cameras(cameras)
        if is_url(location):
            source = open_dataset_root(checked_path(location, "dataset URL"), storage_options)
            if threads is not None and (not isinstance(threads, int) or threads < 1):
                raise ValueError(f"threads must be a positive integer or None, got {threads!r}")
            if cache_dir is not None:
                cache_dir = checked_path(cache_dir, "cache_dir")
            # Opened again with its index current: the metadata comes from the index, and the
            # objects' versions too (no listing of the videos, no episode table read).
            warm = None if rebuild else current_remote_index_and_metadata(source, chosen, cache_dir)
            if warm is not None:
                index, metadata = warm
                self._cameras_arg = _camera_selection(metadata, chosen)
            else:
                metadata = read_lerobot_metadata(source)
                self._cameras_arg = _camera_selection(metadata, chosen)
                # Broken episodes are recorded in the index (skip) and judged here, by this
                # dataset's policy and episodes.
                index = load_remote_index(
                    source,
                    metadata,
                    rebuild=rebuild,
                    threads=threads or 0,
                    progress=progress,
                    cache_dir=cache_dir,
                    cameras=self._cameras_arg,
                    on_error="skip",
                )
            self._storage_options: S3Options | None = source.options
            self._open(source.location, metadata, index, spec)
            return
        location = os.path.abspath(checked_path(location, "dataset folder"))
        # Opened again with its index current: the metadata comes from the index (no episode
        # table read). Else (or with storage_options, which a folder refuses) as the first time.
        warm = (
            None
            if rebuild or storage_options is not None
            else current_index_and_metadata(location, chosen, cache_dir)
        )
        if warm is not None:
            index, metadata = warm
            self._cameras_arg = _camera_selection(metadata, chosen)
            checked_index_arguments(threads, progress, 1e-4, cache_dir)  # as load_index would
        else:
            metadata = read_lerobot_metadata(location, storage_options)
            self._cameras_arg = _camera_selection(metadata, chosen)
            index = load_index(
                location,
                rebuild=rebuild,
                threads=threads,
                progress=progress,
                cache_dir=cache_dir,
                cameras=self._cameras_arg,
                on_error="skip",
            )
        self._storage_options = None
        self._open(location, metadata, index, spec)

    def __getstate__(self) -> dict[str, Any]:
        state = {
            "root": self.root,
            "spec": self.spec,
            "index": self.index,
            "repo_id": self.repo_id,
            "episodes": self._episodes_arg,
            "cameras": self._cameras_arg,
            "on_error": self._on_error,
            "image_dtype": self._image_dtype,
            "depth_unit": self._depth_unit,
            "output": self._output,
            "depth_scale": self._depth_scale,
            "transforms": self.transforms,
            "image_transforms": self.image_transforms,
            "lerobot_call": self._lerobot_call,
        }
        if self._storage_options is not None:
            state["storage_options"] = self._storage_options
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        index = state["index"]
        self.repo_id = state.get("repo_id")
        self._episodes_arg = state.get("episodes")
        self._cameras_arg = state.get("cameras")
        self._on_error = state.get("on_error", "raise")
        self._image_dtype = state.get("image_dtype", "float32")
        self._depth_unit = state.get("depth_unit")
        self._output = state.get("output", "auto")
        self._episode_filter = None  # applied when opened: the episodes it chose are kept
        self._depth_scale = state.get("depth_scale")
        self.transforms = state.get("transforms")
        self.image_transforms = state.get("image_transforms")
        self._lerobot_call = state.get("lerobot_call", False)
        self._storage_options = state.get("storage_options")
        if self._storage_options is not None:
            # Registers the options again, for the videos this process will open.
            source = open_dataset_root(state["root"], self._storage_options)
            metadata = attached_metadata(index.native, source) or read_lerobot_metadata(source)
            remember_indexed_objects(index)
            self._open(state["root"], metadata, index, state["spec"], warn=False)
            return
        stale = index.stale_files()
        if stale:
            raise DatasetError(
                f"the dataset {state['root']} changed since it was pickled: "
                f"{', '.join(stale[:3])}{' ...' if len(stale) > 3 else ''} changed or went; "
                "open it again"
            )
        # The parent warned of the episodes it left out; its copies leave out the same quietly.
        source = open_dataset_root(state["root"])
        metadata = attached_metadata(index.native, source) or read_lerobot_metadata(source)
        self._open(state["root"], metadata, index, state["spec"], warn=False)

    def _open(
        self,
        root: str,
        metadata: LeRobotMetadata,
        index: EpisodeIndex,
        spec,
        warn: bool = True,
    ) -> None:
        self.root = root
        self.metadata = metadata
        self.index = index
        self.spec = spec
        self._depth, stat_scales = self._depth_outputs()
        self.meta = DatasetMeta(metadata, self.repo_id, stat_scales)
        if self._episode_filter is not None:
            self._episodes_arg = self._filtered_episodes(self._episode_filter)
            self._episode_filter = None
        self._item_keys = self._resolve_keys()
        self._one_frame = frozenset(
            key.name
            for key in self._item_keys
            if self._lerobot_call
            and key.timed
            and key.source in self.cameras
            and len(key.offsets) == 1
        )
        self._planner = _core.WindowPlanner(
            self.index.native, [key.native for key in self._item_keys]
        )
        # The index's first rows (it was built from these), without copying them.
        self._episode_from_row = self.metadata.dataset_from_index
        self._task_texts = [str(text) for text in self.metadata.tasks]
        self._item_reader: tuple[int, Any] | None = None  # (pid, the engine's loader) of ds[i]
        self._item_reader_lock = threading.Lock()
        self._positions, self._left_out = self._choose_episodes(warn)
        self._rows = self._select_rows()
        self._records = _record_columns(metadata)
        language = [n for n, f in metadata.features.items() if f.dtype == "language"]
        self._language = tuple(name for name in language if name in self._records)
        self._python_transform_ns = 0
        self._python_transform_lock = threading.Lock()

    def _choose_episodes(self, warn: bool) -> tuple[np.ndarray | None, list[LeftOutEpisode]]:
        """(the positions in dataset order of the episodes read, None for all of them; those
        left out because a camera read cannot serve them). Applies ``on_error`` to the broken
        episodes the index recorded among the chosen ones: refuses them, or warns (``warn``)."""
        episode_index = self.metadata.episode_index
        chosen = None
        if self._episodes_arg is not None:
            # In dataset order, whatever the order given, as LeRobot reads them.
            wanted = sorted(self._episodes_arg)
            chosen = np.searchsorted(episode_index, wanted)
            chosen = np.minimum(chosen, len(episode_index) - 1)
            missing = [e for e, p in zip(wanted, chosen.tolist()) if episode_index[p] != e]
            if missing:
                raise DatasetError(
                    f"episodes {missing} are not in the dataset {self.root} (its episode_index "
                    f"values run from {episode_index[0]} to {episode_index[-1]}, "
                    f"{len(episode_index)} episodes)"
                )
        read = None if chosen is None else set(chosen.tolist())
        left_out = [
            LeftOutEpisode(int(episode_index[b.episode]), b.camera, b.file, b.why)
            for b in self.index.broken_episodes
            if read is None or b.episode in read
        ]
        if not left_out:
            return chosen, []
        broken = {int(b.episode) for b in self.index.broken_episodes}
        every = np.arange(len(episode_index)) if chosen is None else chosen
        kept = np.asarray([p for p in every.tolist() if p not in broken], np.int64)
        message = self._broken_message(left_out, episode_index[kept].tolist(), len(kept) == 0)
        if self._on_error == "raise" or len(kept) == 0:
            raise DatasetError(message)
        if warn:
            warnings.warn(message, stacklevel=4)
        return kept, left_out

    def _broken_message(self, left_out: list[LeftOutEpisode], kept: list[int], none_left) -> str:
        """What refusing or leaving out the episodes ``left_out`` says: each problem, then the
        ways to read the dataset without them (``kept``: the episode_index values that would be
        read)."""
        gone = sorted({b.episode_index for b in left_out})
        cameras = sorted({b.camera for b in left_out}, key=self.cameras.index)
        others = [c for c in self.cameras if c not in cameras]
        named = ", ".join(f"'{c}'" for c in cameras)
        without = (
            f"cameras={others!r} reads every episode without {named} (and without a window on it)"
            if others
            else ""
        )
        every = self.metadata.episode_index
        if len(kept) <= 12:
            episodes = f"episodes={kept}"
        elif len(gone) > _LISTED_EPISODES:
            episodes = f"episodes= without those {len(gone)} episodes (ds.broken_episodes)"
        elif self._episodes_arg is None and np.array_equal(every, np.arange(len(every))):
            episodes = f"episodes=[e for e in range({len(every)}) if e not in {set(gone)}]"
        else:
            episodes = f"episodes= without {sorted(gone)}"
        problems = f"{counted(len(gone), 'episode')} of {self.root}"
        if none_left:
            return (
                f"{problems} cannot be read from {'its' if len(gone) == 1 else 'their'} "
                f"videos: no episode is left to read, even with on_error='skip':"
                f"{listed(left_out)}" + (f"\n{without}" if without else "")
            )
        if self._on_error == "raise":
            return (
                f"{problems} cannot be read from {'its' if len(gone) == 1 else 'their'} "
                f"videos:{listed(left_out)}\nTo read the others: on_error='skip' leaves "
                f"{'it' if len(gone) == 1 else 'them'} out (with a warning), or {episodes} "
                "reads only those" + (f"; {without}" if without else "")
            )
        return (
            f"stoker: left out {problems} (on_error='skip'): a camera's video cannot serve "
            f"{'it' if len(gone) == 1 else 'them'}:{listed(left_out)}\n{episodes} reads the "
            "same samples without this warning" + (f"; {without}" if without else "")
        )

    def _select_rows(self) -> np.ndarray | None:
        """The dataset rows of the episodes read (read-only int64), None for all of them."""
        if self._positions is None:
            return None
        table = self.index.episode_table()
        rows = np.concatenate(
            [
                np.arange(table["from_row"][p], table["from_row"][p] + table["length"][p])
                for p in self._positions.tolist()
            ]
        ).astype(np.int64)
        rows.flags.writeable = False
        return rows

    @property
    def episodes(self) -> list[int] | None:
        """The ``episode_index`` values this dataset reads (as given, less those left out
        under ``on_error="skip"``), or None for all."""
        if not self._left_out:
            return None if self._episodes_arg is None else list(self._episodes_arg)
        gone = {b.episode_index for b in self._left_out}
        given = self._episodes_arg
        if given is None:
            given = self.metadata.episode_index.tolist()
        return [int(e) for e in given if e not in gone]

    @property
    def broken_episodes(self) -> list[LeftOutEpisode]:
        """The episodes left out under ``on_error="skip"`` (of those chosen), one entry per
        camera whose video cannot serve them, with why; empty when nothing was left out."""
        return list(self._left_out)

    @property
    def rows(self) -> np.ndarray | None:
        """The dataset row (``index``) of each sample when only some episodes are read (int64,
        read-only), None when every row is a sample (sample i is row i)."""
        return self._rows

    @property
    def image_dtype(self) -> str:
        return self._image_dtype

    @property
    def depth_cameras(self) -> dict[str, str]:
        """The depth cameras (``is_depth_map``, or LeRobot 0.4-0.5's ``video.is_depth_map``) and
        the dtype items hold them in: ``"uint16"`` (as stored) or ``"float32"`` (millimetres
        or metres: ``depth_output_unit``)."""
        return {name: "float32" if d.metric else "uint16" for name, d in self._depth.items()}

    def native_depth_cameras(self) -> list[_core.DepthCamera]:
        """The depth cameras as the native Loader takes them (``EpisodeOptions.depth_cameras``)."""
        return list(self._depth.values())

    def _depth_outputs(self) -> tuple[dict[str, _core.DepthCamera], dict[str, float]]:
        """The depth cameras read, as the native Loader takes them, and the factor by which
        each one's statistics (in its recorded ``depth_unit``) become its output unit."""
        every = depth_cameras(self.metadata)
        if self._depth_scale is not None and not every:
            raise InvalidArgumentError(
                f"depth_scale was given, but the dataset {self.root} has no depth camera (no "
                "video feature whose info says is_depth_map: true)"
            )
        outputs, stat_scales = {}, {}
        for name, info in every.items():
            if name not in self.cameras:
                continue
            unit, camera = self._depth_camera(name, info)
            outputs[name] = camera
            if info.recorded_unit is not None and unit in ("mm", "m"):
                stat_scales[name] = _MM_PER[info.recorded_unit] / _MM_PER[unit]
        return outputs, stat_scales

    def _depth_camera(self, name: str, info: DepthInfo) -> tuple[str, _core.DepthCamera]:
        quantized = info.coding in ("lerobot_log", "lerobot_linear")
        # LeRobot 0.6's quantized depth comes out in millimetres by default, as LeRobot's;
        # depth whose coding the dataset does not say comes out as stored.
        unit = self._depth_unit or ("mm" if quantized else "raw")
        where = f"depth camera {name!r} of {self.root}"
        if unit == "raw":
            return unit, _core.DepthCamera(name)
        metric_unit = _core.DepthUnit.millimetres if unit == "mm" else _core.DepthUnit.metres
        if quantized:
            if self._depth_scale is not None:
                raise InvalidArgumentError(
                    f"depth_scale was given, but {where} is LeRobot 0.6's quantized depth "
                    "(video.depth_min, video.depth_max): its info says how codes map to metres"
                )
            camera = _core.DepthCamera(
                name,
                True,
                coding=_core.DepthCoding.__members__[info.coding],
                depth_min=info.depth_min,
                depth_max=info.depth_max,
                shift=info.shift,
                unit=metric_unit,
            )
            return unit, camera
        scale = self._depth_scale if self._depth_scale is not None else info.scale
        if scale is None:
            raise DatasetError(
                f"depth_output_unit={unit!r}: {where} says only video.is_depth_map (as LeRobot "
                "0.4-0.5 wrote it), not how its samples map to distances. Give depth_scale= "
                "(metres per stored unit), or depth_output_unit='raw' for the samples as "
                "stored. (LeRobot 0.6.1 would read it with its default log quantizer; if "
                'LeRobot 0.6 wrote it so, set "is_depth_map": true in its info)'
            )
        return unit, _core.DepthCamera(name, True, scale, info.offset, unit=metric_unit)

    def _filtered_episodes(self, predicate: Callable[[dict[str, Any]], bool]) -> list[int]:
        """LeRobot's ``episode_filter``: the episode_index of each episode (of ``episodes``,
        when given) whose row of ``ds.meta.episodes`` the predicate accepts."""
        table = self.meta.episodes
        wanted = None if self._episodes_arg is None else set(self._episodes_arg)
        chosen = []
        for position, episode in enumerate(self.metadata.episode_index.tolist()):
            if wanted is not None and episode not in wanted:
                continue
            if predicate(table[position]):
                chosen.append(int(episode))
        if not chosen:
            raise InvalidArgumentError(
                f"episode_filter chose no episode of {self.root}"
                + ("" if wanted is None else f" among episodes={sorted(wanted)}")
            )
        return chosen

    @property
    def num_episodes(self) -> int:
        """Episodes read (all, or those of ``episodes``, less those left out)."""
        return self.metadata.num_episodes if self._positions is None else len(self._positions)

    @property
    def num_frames(self) -> int:
        """Frames (samples) read."""
        return len(self)

    @property
    def fps(self) -> float:
        return self.metadata.fps

    @property
    def cameras(self) -> tuple[str, ...]:
        """The cameras read (every one, or those of ``cameras=``), in the dataset's order: the
        video features, then the image features (PNG / JPEG stored in the data files)."""
        return tuple(self.index.cameras)

    @property
    def features(self) -> dict[str, dict[str, Any]]:
        """info.json's features, as LeRobot's ``ds.features``."""
        return self.meta.features

    @property
    def record_columns(self) -> tuple[str, ...]:
        """The columns of records (lists of structs, such as ``language_persistent``) that
        items hold as Python objects."""
        return tuple(self._records)

    @property
    def language_columns(self) -> tuple[str, ...]:
        """LeRobot 0.6's language columns (features of ``"dtype": "language"``), which items
        hold and Loader batches leave out unless ``keep_language=True``, as LeRobot's training
        collate does."""
        return self._language

    @property
    def item_keys(self) -> tuple[ItemKey, ...]:
        """The keys items read from the dataset's files, in item order: the window's, then
        every camera and indexed column it does not read, at the sample's row. Items also hold
        :meth:`row_keys`."""
        return self._item_keys

    def episode_bounds(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(episode_index, first sample, end sample (exclusive)) of every episode read, in
        sample order: what :class:`stoker.EpisodeAwareSampler` takes."""
        table = self.index.episode_table()
        if self._positions is None:
            starts = np.asarray(table["from_row"], np.int64)
            return self.metadata.episode_index, starts, starts + table["length"]
        lengths = np.asarray(table["length"], np.int64)[self._positions]
        ends = np.cumsum(lengths)
        return self.metadata.episode_index[self._positions], ends - lengths, ends

    def __len__(self) -> int:
        return self.index.num_rows if self._rows is None else len(self._rows)

    @property
    def one_frame_cameras(self) -> frozenset[str]:
        """The camera keys whose window is one frame, under LeRobot's call (``delta_timestamps``
        given to the dataset, no :class:`WindowSpec`): as LeRobot squeezes such a window, their
        items hold ``[C, H, W]`` (batches ``[B, C, H, W]``), not ``[1, C, H, W]``; their
        ``<key>_is_pad`` keeps its ``[1]``, and features keep ``[1, dim]``, as LeRobot's do."""
        return self._one_frame

    def __getitem__(self, i: int) -> dict[str, Any]:
        """Sample ``i`` as LeRobot's items hold it: arrays as torch tensors (0-dim for scalars)
        when ``output`` is ``"torch"``, or ``"auto"`` and PyTorch can be imported; else numpy
        arrays and scalars (:meth:`numpy_item`)."""
        item = self.numpy_item(i)
        torch = self._torch_module()
        if torch is None:
            return item
        for key, value in item.items():
            if isinstance(value, (np.ndarray, np.generic)):
                array = np.asarray(value)
                if not array.flags.c_contiguous:
                    array = np.ascontiguousarray(array)
                item[key] = torch.from_numpy(array)
        return item

    def _torch_module(self):
        if self._output == "numpy":
            return None
        try:
            import torch
        except ImportError:
            if self._output == "torch":
                raise ValueError("output='torch' needs PyTorch, which cannot be imported") from None
            return None
        return torch

    def numpy_item(self, i: int) -> dict[str, Any]:
        """Sample ``i`` with numpy arrays and scalars, whatever ``output`` says."""
        if not isinstance(i, (int, np.integer)):
            raise TypeError(f"dataset indices are integers, got {type(i).__name__}")
        i = int(i)
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(f"sample {i} is out of range: the dataset has {len(self)} samples")
        row = i if self._rows is None else int(self._rows[i])
        if self.transforms is not None and (
            self.transforms.is_random or self.transforms.center_crop is not None
        ):
            raise InvalidArgumentError(
                "this dataset's image_transforms crop or flip frames, which stoker.Loader does "
                "(drawn per sample and epoch, fused into decoding); ds[i] does not. Read "
                "batches with stoker.Loader, or give a Python callable as image_transforms"
            )
        dtype = self._image_dtype
        if self.transforms is not None and self.transforms.resolved_dtype(dtype) == "bfloat16":
            raise InvalidArgumentError(
                "ds[i] returns numpy arrays, which have no bfloat16: read bfloat16 batches "
                "with stoker.Loader"
            )
        arrays, rows, episodes, _, _ = self._items().read(np.array([row], np.int64), 0, False)
        batch = self.batch_items(arrays, rows, episodes)
        item = {
            name: np.array(value[0])
            if isinstance(value, np.ndarray) and value.ndim > 1
            else value[0]
            for name, value in batch.items()
        }
        if self.image_transforms is not None:
            self.apply_image_transforms(item, self._camera_names(), None)
        return item

    def _items(self) -> Any:
        """The engine's loader ds[i] reads through (Loader.read, a batch of one on the calling
        thread): one per dataset and process, made on first use."""
        with self._item_reader_lock:
            if self._item_reader is None or self._item_reader[0] != os.getpid():
                options = _core.LoaderOptions()
                options.batch_size = options.threads = options.prefetch = 1
                every = _core.DistributedSampler(len(self), shuffle=False)
                transforms = self.transforms if self.transforms is not None else Transforms()
                self._item_reader = (os.getpid(), self.native_loader(every, options, transforms))
            return self._item_reader[1]

    def native_loader(self, order: Any, options: Any, transforms: Transforms) -> Any:
        """The engine's loader of this dataset (stoker.Loader's batches and ds[i]'s items are
        built by it): ``order`` a native sampler over the dataset's samples (0 .. len - 1),
        mapped here to the index's rows (replacements drawn among them); ``options`` a
        ``_core.LoaderOptions``; ``transforms`` the
        :class:`stoker.Transforms` decoding applies."""
        rows: list[int] = []
        if self._rows is not None:
            order = _core.MappedSampler(order, self._rows)
            rows = self._rows.tolist()
        return _core.Loader(
            self.index.native,
            self.native_keys(),
            order,
            transforms.core_options(self.spec.size, self.spec.layout, self._image_dtype),
            options,
            replacement_rows=rows,
            depth_cameras=self.native_depth_cameras(),
            row_keys=self.native_row_keys(),
        )

    def native_row_keys(self) -> _core.RowKeys:
        """The row keys the engine puts in batches (``index``, ``episode_index``,
        ``frame_index``, ``task_index`` and ``task``), but those an item key is named as."""
        named = {key.name for key in self._item_keys}
        return _core.RowKeys(
            **{name: name not in named for name in ENGINE_ROW_KEYS},
            episode_numbers=np.asarray(self.metadata.episode_index, np.int64).tolist(),
            tasks=self._task_texts,
        )

    def native_keys(self) -> list[_core.WindowKey]:
        """The item keys as the engine reads them: a one-frame camera window of LeRobot's call
        (:attr:`one_frame_cameras`) without its time axis, as items hold it."""
        return [
            _core.WindowKey(
                key.name,
                key.source,
                np.ascontiguousarray(key.offsets, np.int64),
                drop_time_axis=key.name in self._one_frame,
            )
            for key in self._item_keys
        ]

    def batch_items(
        self,
        arrays: dict[str, Any],
        rows: np.ndarray,
        episodes: np.ndarray,
        *,
        torch_module: Any = None,
        stack: Any = None,
        dropped: Collection[str] = frozenset(),
    ) -> dict[str, Any]:
        """A batch of the engine's loader (:meth:`native_loader`: arrays by key, in the items'
        shapes, the samples' rows and episodes) as a batch of this dataset's items: each item
        key, its ``_is_pad``, then :meth:`row_keys` but ``dropped``, arrays as tensors of
        ``torch_module`` when given. With ``stack``, the callable ``image_transforms`` is
        applied to each sample (``stack`` stacks them)."""
        item: dict[str, Any] = {}
        for key in self._item_keys:
            item[key.name] = arrays[key.name]
            if key.timed:
                item[f"{key.name}_is_pad"] = arrays[f"{key.name}_is_pad"]
        if all(name in arrays for name in ENGINE_ROW_KEYS):  # the engine's (native_row_keys)
            for name in ENGINE_ROW_KEYS:
                item[name] = arrays[name]
            row_keys = self.record_keys(rows, skip=item.keys() | set(dropped))
        else:  # an item key is named as a row key: as LeRobot's items, task is then replaced
            row_keys = self.row_keys(rows, episodes, skip=item.keys() | set(dropped))
        for name, value in row_keys.items():  # arrays, and lists (task, records) as they are
            is_array = isinstance(value, np.ndarray)
            item[name] = torch_module.from_numpy(value) if torch_module and is_array else value
        if stack is not None and self.image_transforms is not None:
            self.apply_image_transforms(item, self._camera_names(), stack)
        return item

    def _camera_names(self) -> list[str]:
        """The item keys of cameras."""
        cameras = set(self.cameras)
        return [key.name for key in self._item_keys if key.source in cameras]

    def row_keys(self, rows, episodes, skip: Collection[str] = ()) -> dict[str, Any]:
        """What items say about their sample's row besides the files' indexed columns:
        ``index``, ``episode_index``, ``frame_index``, ``task_index`` (int64 arrays shaped like
        ``rows``), ``task`` (a list of the texts, "" for an episode without a task) and the
        :attr:`record_columns` (a list of Python objects each: :meth:`record_keys`).

        ``rows`` are dataset rows, ``episodes`` their episodes (positions in dataset order).
        Keys in ``skip`` (those an item already has from :attr:`item_keys`) are left out, but
        ``task`` is always given. The engine computes the first five for ``ds[i]`` and the
        Loader's batches (:meth:`native_row_keys`); they take only the records from here.
        """
        rows = np.asarray(rows, dtype=np.int64)
        episodes = np.asarray(episodes, dtype=np.int64)
        task_index = self.metadata.task_index[episodes]
        values = {
            "index": rows,
            "episode_index": self.metadata.episode_index[episodes],
            "frame_index": rows - self._episode_from_row[episodes],
            "task_index": task_index,
        }
        keys: dict[str, Any] = {name: value for name, value in values.items() if name not in skip}
        texts = self._task_texts
        keys["task"] = [texts[t] if 0 <= t < len(texts) else "" for t in task_index.tolist()]
        keys.update(self.record_keys(rows, skip))
        return keys

    def record_keys(self, rows, skip: Collection[str] = ()) -> dict[str, Any]:
        """The :attr:`record_columns` at dataset rows ``rows`` (a list of Python objects each;
        language columns with their tool calls parsed), but those in ``skip``."""
        keys: dict[str, Any] = {}
        if self._records:
            take = pa.array(np.asarray(rows, dtype=np.int64))
            for name, column in self._records.items():
                if name in skip:
                    continue
                values = column.take(take).to_pylist()
                keys[name] = _with_tool_calls(values) if name in self._language else values
        return keys

    def apply_image_transforms(self, item: dict[str, Any], keys: Sequence[str], stack) -> None:
        """Applies the callable ``image_transforms`` to ``item[key]`` for each camera key: per
        sample (``stack`` is None: ``item`` is one sample) or to each sample of a batch (``stack``
        stacks the per-sample results back into a batch). Its time is added to
        :meth:`python_transform_seconds`."""
        function = self.image_transforms
        if function is None:
            return
        started = time.perf_counter_ns()
        for key in keys:
            value = item[key]
            if stack is None:
                item[key] = _call_on_frames(function, value)
            else:
                item[key] = stack([_call_on_frames(function, one) for one in value])
        with self._python_transform_lock:
            self._python_transform_ns += time.perf_counter_ns() - started

    def python_transform_seconds(self) -> float:
        """Seconds spent in the callable ``image_transforms`` so far, in this process."""
        return self._python_transform_ns / 1e9

    def sample_costs(self, samples=None) -> np.ndarray:
        """Estimated decode cost of each sample (float64), for
        :class:`stoker.LoadBalancedSampler`: per camera, the packets a decoder must process for
        the sample's frames (from the keyframe before each run of frames to its last frame),
        times the frame's pixels. ``samples``: which samples (default: all)."""
        samples = np.arange(len(self)) if samples is None else np.asarray(samples)
        if samples.ndim != 1 or samples.dtype.kind not in "iu":
            raise ValueError("rows must be a one-dimensional integer array")
        if self._rows is not None:
            if samples.size and (samples.min() < 0 or samples.max() >= len(self)):
                raise InvalidArgumentError(
                    f"samples out of range: the dataset has {len(self)} samples"
                )
            samples = self._rows[samples]
        return self._planner.costs(np.ascontiguousarray(samples, dtype=np.int64))

    def __repr__(self) -> str:
        chosen = "" if self._episodes_arg is None else f" (episodes {self.episodes})"
        if self._left_out:
            gone = sorted({b.episode_index for b in self._left_out})
            chosen += f", left out episodes {gone} (see broken_episodes)"
        return (
            f"LeRobotDataset({self.root!r}, {self.metadata.codebase_version}, "
            f"{self.num_episodes} episodes{chosen}, {len(self)} frames at {self.fps} fps, "
            f"cameras {list(self.cameras)})"
        )

    def _resolve_keys(self) -> tuple[ItemKey, ...]:
        resolved = self.spec.resolve(self.fps)
        sources = set(self.cameras) | set(self.index.column_names)
        every_camera = set(indexed_cameras(self.metadata, None))
        for name, (source, _) in resolved.items():
            if source not in sources and source in every_camera:
                raise DatasetError(
                    f"window key {name!r} reads {source!r}, which cameras= leaves out "
                    f"(cameras={list(self.cameras)}): add it to cameras, or drop the key"
                )
            if source not in sources:
                raise DatasetError(
                    f"window key {name!r} reads {source!r}, which the dataset "
                    f"{self.root} does not have (it has {sorted(sources)})"
                )
        keys: list[ItemKey] = []
        for name, (source, rows) in resolved.items():
            offsets = np.ascontiguousarray(rows, dtype=np.int64)
            offsets.flags.writeable = False
            keys.append(ItemKey(name, source, True, offsets))
        # A source read through a window key is not also returned at the sample's own row.
        windowed = {key.source for key in keys} | {key.name for key in keys}
        no_offsets = np.zeros(0, np.int64)
        no_offsets.flags.writeable = False
        for source in list(self.cameras) + list(self.index.column_names):
            if source not in windowed:
                keys.append(ItemKey(source, source, False, no_offsets))
        return tuple(keys)


# The row keys the engine puts in batches (stoker/episode_source.h, RowKeys).
ENGINE_ROW_KEYS = ("index", "episode_index", "frame_index", "task_index", "task")

# Episodes left out that a message spells as a set literal; beyond, it counts them.
_LISTED_EPISODES = 20


def _camera_selection(metadata: LeRobotMetadata, cameras) -> tuple[str, ...] | None:
    """The cameras an index is asked for: None when every camera is read (the full index, the
    one ``stoker index`` and a dataset without ``cameras=`` map), else those named, checked."""
    if cameras is None:
        return None
    chosen = indexed_cameras(metadata, cameras)
    return None if chosen == indexed_cameras(metadata, None) else chosen


def _window_spec(spec, delta_timestamps, delta_indices, tolerance_s) -> WindowSpec:
    if spec is not None:
        if delta_timestamps is not None or delta_indices is not None or tolerance_s is not None:
            raise TypeError(
                "give a WindowSpec or delta_timestamps / delta_indices / tolerance_s, not both"
            )
        if not isinstance(spec, WindowSpec):
            raise TypeError(f"spec must be a stoker.WindowSpec, got {type(spec).__name__}")
        return spec
    return WindowSpec(
        delta_timestamps=delta_timestamps,
        delta_indices=delta_indices,
        tolerance_s=1e-4 if tolerance_s is None else tolerance_s,
    )


def _depth_arguments(output_unit: Any, unit: Any, scale: Any) -> tuple[str | None, float | None]:
    """The depth cameras' output (None: each camera's default) from ``depth_output_unit`` and
    its earlier name ``depth_unit``, and ``depth_scale``."""
    if unit is not None:
        if unit not in ("raw", "m"):
            raise ValueError(f"depth_unit must be 'raw' or 'm', got {unit!r}")
        if output_unit is not None and output_unit != unit:
            raise ValueError(
                f"depth_unit={unit!r} and depth_output_unit={output_unit!r} disagree: "
                "depth_unit is depth_output_unit's earlier name; give one"
            )
        output_unit = unit
    if output_unit is not None and output_unit not in _DEPTH_UNITS:
        raise ValueError(f"depth_output_unit must be one of {_DEPTH_UNITS}, got {output_unit!r}")
    if scale is None:
        return output_unit, None
    if output_unit not in ("m", "mm"):
        raise ValueError(
            "depth_scale converts stored depth to distances: give it with "
            "depth_output_unit='m' or 'mm'"
        )
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise ValueError(f"depth_scale must be a number (metres per unit), got {scale!r}")
    value = float(scale)
    if not (np.isfinite(value) and value > 0):
        raise ValueError(f"depth_scale must be finite and positive, got {scale!r}")
    return output_unit, value


def _item_dtype(dtype: Any, return_uint8: Any) -> str:
    """The frames' dtype from ``image_dtype`` and LeRobot's ``return_uint8`` (True: uint8)."""
    if return_uint8 is not None:
        if not isinstance(return_uint8, bool):
            raise TypeError(f"return_uint8 must be True or False, got {return_uint8!r}")
        if dtype is not None and _item_dtype(dtype, None) != ("uint8" if return_uint8 else dtype):
            raise ValueError(
                f"return_uint8={return_uint8} and image_dtype={dtype!r} disagree: "
                "return_uint8=True is image_dtype='uint8'; give one"
            )
        return "uint8" if return_uint8 else _item_dtype(dtype or "float32", None)
    if dtype is None:
        return "float32"
    try:
        name = dtype_name(dtype)
    except ValueError:
        name = None
    if name not in _ITEM_DTYPES:
        raise ValueError(
            f"image_dtype must be one of {_ITEM_DTYPES}, got {dtype!r} (bfloat16 batches: "
            "stoker.Transforms(dtype='bfloat16') in the Loader)"
        )
    return name


def _image_transforms(value) -> tuple[Transforms | None, Callable[[Any], Any] | None]:
    """(built-in transforms, Python callable): one of them, or neither."""
    if value is None:
        return None, None
    if isinstance(value, Transforms):
        return value, None
    if callable(value):
        return None, value
    raise TypeError(
        f"image_transforms must be a stoker.Transforms or a callable, got {type(value).__name__}"
    )


def _locate(repo_id, root) -> tuple[str, str | None]:
    """(the dataset's folder or URL, its repo_id) from LeRobot's (repo_id, root) or stoker's
    (folder) arguments; see :class:`LeRobotDataset`."""
    if root is not None:
        if not isinstance(repo_id, str):
            raise TypeError(f"repo_id must be a string, got {type(repo_id).__name__}")
        return os.fspath(root), repo_id
    if isinstance(repo_id, str) and is_url(repo_id):
        return repo_id, None
    path = os.fspath(checked_path(repo_id, "dataset folder"))
    if os.path.isdir(path):
        return path, None
    if isinstance(repo_id, str) and looks_like_repo_id(repo_id):
        return resolve_repo_id(repo_id), repo_id
    return path, None


def _episode_list(episodes) -> list[int]:
    values = list(episodes)
    for value in values:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
            raise InvalidArgumentError(
                f"episodes must be episode_index integers, got {value!r} ({type(value).__name__})"
            )
    result = [int(v) for v in values]
    if not result:
        raise InvalidArgumentError("episodes is empty: give at least one episode, or None for all")
    if len(set(result)) != len(result):
        repeated = sorted({v for v in result if result.count(v) > 1})
        raise InvalidArgumentError(f"episodes lists {repeated} more than once")
    return result


def _record_columns(metadata: LeRobotMetadata) -> dict[str, Any]:
    """Columns of records (structs, lists of structs: ``language_persistent``,
    ``language_events``) of the data files, each as one Arrow array over every row."""

    def nested(kind) -> bool:
        if pa.types.is_struct(kind):
            return True
        if pa.types.is_list(kind) or pa.types.is_large_list(kind):
            return pa.types.is_struct(kind.value_type)
        return False

    skipped = {name for name, f in metadata.features.items() if f.dtype in ("image", "video")}
    schema = read_data_schema(metadata, str(metadata.data_files[0]))
    names = [f.name for f in schema if nested(f.type) and f.name not in skipped]
    if not names:
        return {}
    parts = [read_data_table(metadata, str(path), names) for path in metadata.data_files]
    table = pa.concat_tables(parts)
    if table.num_rows != metadata.num_frames:
        raise DatasetError(
            f"the data files of {metadata.root} hold {table.num_rows} rows, the metadata says "
            f"{metadata.num_frames}"
        )
    return {name: table.column(name).combine_chunks() for name in names}


def _with_tool_calls(rows: list) -> list:
    """Language rows as LeRobot's items give them: each message's ``tool_calls`` (JSON, stored
    as strings) parsed."""
    for messages in rows:
        for message in messages or ():
            calls = message.get("tool_calls") if isinstance(message, dict) else None
            if calls:
                message["tool_calls"] = [
                    json.loads(call) if isinstance(call, str) else call for call in calls
                ]
    return rows


def _call_on_frames(function, frames):
    """``function`` on one sample's frames of one camera, as a torch tensor when PyTorch can
    be imported (as LeRobot hands them), and the result as the item held the frames."""
    try:
        import torch
    except ImportError:
        return function(frames)
    if isinstance(frames, torch.Tensor):
        return function(frames)
    return np.asarray(function(torch.from_numpy(np.ascontiguousarray(frames))))
