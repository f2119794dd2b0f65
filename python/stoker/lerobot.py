"""LeRobot datasets (v2.1 and v3.0) read by stoker: temporal windows of frames and rows.

    ds = stoker.LeRobotDataset("path/to/dataset", spec=stoker.WindowSpec(
        delta_timestamps={"observation.images.front": [-0.1, 0.0],
                          "action": [0.0, 1 / 30, 2 / 30]},
        size=(224, 224)))
    item = ds[123]   # dict of numpy arrays, keyed and shaped as LeRobotDataset's items

The index (episodes, frame tables, columns) is built once per dataset and memory-mapped on later
opens; see :func:`stoker.dataset_index.load_index`.
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Collection, Mapping, Sequence
from typing import Any, NamedTuple, Union

import numpy as np

from stoker import _core
from stoker._core import DatasetError, InvalidArgumentError
from stoker._files import checked_path
from stoker.dataset_index import EpisodeIndex, load_index, load_remote_index
from stoker.lerobot_meta import read_lerobot_metadata
from stoker.storage import S3Options, is_url, open_dataset_root
from stoker.video import VideoReader

_LAYOUTS = {"TCHW": "NCHW", "THWC": "NHWC"}

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
            checked = tuple(int(v) for v in size)
            if len(checked) != 2 or min(checked) <= 0:
                raise ValueError(f"size must be (height, width), got {checked!r}")
            size = (checked[0], checked[1])
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


class LeRobotDataset:
    """A LeRobot dataset folder (codebase v2.1 or v3.0), read by stoker.

    Opening reads the metadata and maps the stoker index (building it the first time, or when
    the dataset's files changed). With a ``spec``, ``len(ds)`` is the number of frames (rows)
    and ``ds[i]`` is sample i: a dict of numpy arrays with the keys, shapes and pad masks
    LeRobot's ``LeRobotDataset`` returns for the same ``delta_timestamps`` — images uint8
    [T, C, H, W] (or [T, H, W, C]), features [T, dim], ``<key>_is_pad`` bool [T], and the
    scalars ``timestamp``, ``frame_index``, ``episode_index``, ``index``, ``task_index`` and the
    ``task`` text.

    Args:
        root: the dataset folder, or its URL: ``s3://bucket/prefix/dataset`` (or an
            S3-compatible store), ``https://host/path``. Metadata is read with pyarrow, videos
            by ranged requests; the index is cached locally (see :mod:`stoker.dataset_index`).
        spec: the window; without one, items hold the sample's own row and frames.
        storage_options: for a URL, :class:`stoker.S3Options` or a dict of its fields (fsspec
            spellings too); default: the environment's (AWS_* variables, ~/.aws), as the AWS CLI.
        cache_dir, rebuild, threads, progress: passed to :func:`stoker.dataset_index.load_index`.

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
        root: str | os.PathLike,
        spec: WindowSpec | None = None,
        *,
        storage_options: Mapping[str, Any] | S3Options | None = None,
        cache_dir: str | None = None,
        rebuild: bool = False,
        threads: int | None = None,
        progress: bool = True,
    ):
        spec = spec if spec is not None else WindowSpec()
        if is_url(root):
            source = open_dataset_root(checked_path(root, "dataset URL"), storage_options)
            meta = read_lerobot_metadata(source)
            if threads is not None and (not isinstance(threads, int) or threads < 1):
                raise ValueError(f"threads must be a positive integer or None, got {threads!r}")
            if cache_dir is not None:
                cache_dir = checked_path(cache_dir, "cache_dir")
            index = load_remote_index(
                source,
                meta,
                rebuild=rebuild,
                threads=threads or 0,
                progress=progress,
                cache_dir=cache_dir,
            )
            self._storage_options: S3Options | None = source.options
            self._open(source.location, meta, index, spec)
            return
        root = os.path.abspath(checked_path(root, "dataset folder"))
        meta = read_lerobot_metadata(root, storage_options)
        index = load_index(
            root, rebuild=rebuild, threads=threads, progress=progress, cache_dir=cache_dir
        )
        self._storage_options = None
        self._open(root, meta, index, spec)

    def __getstate__(self) -> dict[str, Any]:
        state = {"root": self.root, "spec": self.spec, "index": self.index}
        if self._storage_options is not None:
            state["storage_options"] = self._storage_options
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        index = state["index"]
        self._storage_options = state.get("storage_options")
        if self._storage_options is not None:
            # Registers the options again, for the videos this process will open.
            source = open_dataset_root(state["root"], self._storage_options)
            self._open(state["root"], read_lerobot_metadata(source), index, state["spec"])
            return
        stale = index.stale_files()
        if stale:
            raise DatasetError(
                f"the dataset {state['root']} changed since it was pickled: "
                f"{', '.join(stale[:3])}{' ...' if len(stale) > 3 else ''} changed or went; "
                "open it again"
            )
        self._open(state["root"], read_lerobot_metadata(state["root"]), index, state["spec"])

    def _open(self, root: str, meta, index: EpisodeIndex, spec: WindowSpec) -> None:
        self.root = root
        self.meta = meta
        self.index = index
        self.spec = spec
        self._item_keys = self._resolve_keys()
        self._planner = _core.WindowPlanner(
            self.index.native, [key.native for key in self._item_keys]
        )
        self._episode_from_row = np.asarray(self.index.episode_table()["from_row"], np.int64)
        self._task_texts = [str(text) for text in self.meta.tasks]
        self._readers: dict[int, VideoReader] = {}

    @property
    def num_episodes(self) -> int:
        return self.meta.num_episodes

    @property
    def num_frames(self) -> int:
        return self.meta.num_frames

    @property
    def fps(self) -> float:
        return self.meta.fps

    @property
    def cameras(self) -> tuple[str, ...]:
        """Every camera: the video features, then the image features (PNG / JPEG stored in the
        data files)."""
        return tuple(self.index.cameras)

    @property
    def features(self):
        return self.meta.features

    @property
    def item_keys(self) -> tuple[ItemKey, ...]:
        """The keys items read from the dataset's files, in item order: the window's, then
        every camera and indexed column it does not read, at the sample's row. Items also hold
        :meth:`row_keys`."""
        return self._item_keys

    def __len__(self) -> int:
        return self.index.num_rows

    def __getitem__(self, i: int) -> dict[str, np.ndarray]:
        if not isinstance(i, (int, np.integer)):
            raise TypeError(f"dataset indices are integers, got {type(i).__name__}")
        i = int(i)
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(f"sample {i} is out of range: the dataset has {len(self)} samples")
        plan = self._planner.plan(i)
        item: dict[str, Any] = {}
        frames = [self._decode(read) for read in plan["reads"]]
        rows, pad, begin = plan["rows"], plan["pad"], plan["key_begin"]
        for k, key in enumerate(self._item_keys):
            key_rows = rows[begin[k] : begin[k + 1]]
            read = plan["key_read"][k]
            if read >= 0:  # a camera key: its frames are a slice of its camera's one read
                first = plan["key_read_begin"][k]
                value = frames[read][first : first + len(key_rows)]
            else:
                value = self.index.column(key.source)[key_rows]
            if key.timed:
                item[key.name] = value
                item[f"{key.name}_is_pad"] = pad[begin[k] : begin[k + 1]].astype(bool)
            else:
                item[key.name] = value[0]
        row_keys = self.row_keys([i], [int(plan["episode"])], skip=item)
        item.update((name, value[0]) for name, value in row_keys.items())
        return item

    def row_keys(self, rows, episodes, skip: Collection[str] = ()) -> dict[str, Any]:
        """What items say about their sample's row besides the files' columns: ``index``,
        ``episode_index``, ``frame_index``, ``task_index`` (int64 arrays shaped like ``rows``)
        and ``task`` (a list of the texts, "" for an episode without a task).

        ``episodes`` are the rows' episodes (positions in dataset order). Keys in ``skip``
        (those an item already has from :attr:`item_keys`) are left out, but ``task`` is always
        given. ``ds[i]`` and the Loader's batches both take these keys from here.
        """
        rows = np.asarray(rows, dtype=np.int64)
        episodes = np.asarray(episodes, dtype=np.int64)
        task_index = self.meta.task_index[episodes]
        values = {
            "index": rows,
            "episode_index": self.meta.episode_index[episodes],
            "frame_index": rows - self._episode_from_row[episodes],
            "task_index": task_index,
        }
        keys: dict[str, Any] = {name: value for name, value in values.items() if name not in skip}
        texts = self._task_texts
        keys["task"] = [texts[t] if 0 <= t < len(texts) else "" for t in task_index.tolist()]
        return keys

    def sample_costs(self, rows=None) -> np.ndarray:
        """Estimated decode cost of each sample (float64), for
        :class:`stoker.LoadBalancedSampler`: per camera, the packets a decoder must process for
        the sample's frames (from the keyframe before each run of frames to its last frame),
        times the frame's pixels. ``rows``: which samples (default: all)."""
        rows = np.arange(len(self)) if rows is None else np.asarray(rows)
        if rows.ndim != 1 or rows.dtype.kind not in "iu":
            raise ValueError("rows must be a one-dimensional integer array")
        return self._planner.costs(np.ascontiguousarray(rows, dtype=np.int64))

    def __repr__(self) -> str:
        return (
            f"LeRobotDataset({self.root!r}, {self.meta.codebase_version}, "
            f"{self.num_episodes} episodes, {self.num_frames} frames at {self.fps} fps, "
            f"cameras {list(self.cameras)})"
        )

    def _resolve_keys(self) -> tuple[ItemKey, ...]:
        resolved = self.spec.resolve(self.fps)
        sources = set(self.cameras) | set(self.index.column_names)
        for name, (source, _) in resolved.items():
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

    def _decode(self, read) -> np.ndarray:
        video = int(read["video_file"])
        if video < 0:
            return self._decode_images(int(read["camera"]), read["frames"])
        try:
            reader = self._readers.get(video)
            if reader is None:
                reader = VideoReader(
                    self.index.video_files[video], frame_table=self.index.frame_table(video)
                )
                self._readers[video] = reader
            return reader.get_frames(
                read["frames"], size=self.spec.size, layout=_LAYOUTS[self.spec.layout]
            )
        except (_core.DecodeError, _core.InvalidArgumentError) as error:
            # The frames and the frame table come from the index: a video that cannot give them
            # (damaged, changed since the index was built) is the dataset's problem.
            raise DatasetError(f"camera {self.cameras[int(read['camera'])]!r}: {error}") from error

    def _decode_images(self, camera: int, rows: np.ndarray) -> np.ndarray:
        """An image camera's images at ``rows``, uint8 in the spec's size and layout: decoded in
        C++ from the index's mapped side file through the Loader's own path (sample ``i``'s
        random parameters are the Loader's for it; a spec has none)."""
        height, width = self._image_size(camera)
        options = _core.TransformOptions()
        if self.spec.size is not None:
            options.resize_height, options.resize_width = self.spec.size
        chw = self.spec.layout == "TCHW"
        options.layout = _core.Layout.NCHW if chw else _core.Layout.NHWC
        shape = (len(rows), 3, height, width) if chw else (len(rows), height, width, 3)
        out = np.empty(shape, np.uint8)
        rows = np.ascontiguousarray(rows, np.int64)
        _core.decode_index_images(self.index.native, camera, rows, options, out, height, width)
        return out

    def _image_size(self, camera: int) -> tuple[int, int]:
        """(height, width) every image of ``camera`` comes out at: the spec's size, or the
        first image's (as the Loader's batches hold it)."""
        if self.spec.size is not None:
            return self.spec.size
        _, width, height, _, _ = _core.probe_image(self.index.image_bytes(camera, 0))
        return height, width
