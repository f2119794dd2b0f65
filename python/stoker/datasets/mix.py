"""Several datasets read as one: :class:`MultiDataset`, and how the one native loader reads it.

    mix = stoker.MultiDataset([lerobot_ds, shard_ds], weights=[3, 1])
    item = mix[i]                      # lerobot_ds's or shard_ds's item, with every key of both
    loader = stoker.Loader(mix, batch_size=32)   # each slot drawn: lerobot_ds 3 times in 4

The datasets may be of any kind (:class:`stoker.LeRobotDataset`, :class:`stoker.ShardDataset`)
and have different keys. A key that only some of them have is in every item and batch: zeros
(None in lists, "" in texts) where its dataset lacks it, with a mask saying so:
``<key>_is_pad`` (all True over the time axis for a window key, which has that mask anyway; one
bool per sample for the other keys). Keys the datasets share must agree in dtype and shape, and
the datasets' images share one dtype (a LeRobot dataset's float32 and a shard dataset's uint8
are refused by name until the Loader's ``transforms`` or ``image_dtype=`` sets one).
``dataset_index`` says which dataset each sample comes from.

One native loader reads a mix (stoker/mix_source.h): one pool of buffers, one set of threads,
each slot of a batch an independent weighted draw (:class:`stoker.MixSampler`), decoded by its
dataset's source straight into the batch. The schema is taken from the sources' fields, without
decoding anything.

Unlike LeRobot's ``MultiLeRobotDataset``, which drops the keys that not every dataset has,
nothing is dropped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from stoker import _core
from stoker._core import DatasetError, InvalidArgumentError
from stoker.arguments import check_values
from stoker.datasets.lerobot.dataset import ENGINE_ROW_KEYS, LeRobotDataset
from stoker.datasets.shards import Image, ShardDataset
from stoker.sampling import MixSampler, expand_group_weights
from stoker.transforms import Transforms

__all__ = ["MixFront", "MultiDataset"]

_PAD = "_is_pad"
# The layout size a schema-only read gives a shard image without a size (the native loader
# lays fields out by size); the schema reports its height and width as None.
_LAYOUT_SIZE_OF_UNSIZED = (1, 1)


class MultiDataset:
    """Datasets (each a :class:`stoker.LeRobotDataset` or a :class:`stoker.ShardDataset`) read
    as one, sample ``i`` of dataset ``k`` being sample ``offsets[k] + i``.

    Args:
        datasets: at least one; they share nothing but must agree on the keys they share.
        weights: one non-negative number per dataset, the chance that a draw (each slot of a
            :class:`stoker.Loader`'s batches) takes it. Default: the datasets' sizes (every
            sample equally likely, as a plain concatenation).

    :attr:`schema` (and a Loader over the mix) raises :class:`stoker.DatasetError` naming both
    datasets when two give one key different dtypes or shapes (their frames at different
    sizes, for instance: give their specs one ``size``).
    """

    def __init__(self, datasets: Sequence[Any], weights: Sequence[float] | None = None):
        self.datasets = list(datasets)
        if not self.datasets:
            raise InvalidArgumentError("MultiDataset needs at least one dataset")
        for k, ds in enumerate(self.datasets):
            if not isinstance(ds, (LeRobotDataset, ShardDataset)) or len(ds) == 0:
                raise InvalidArgumentError(
                    f"datasets[{k}] is not a non-empty stoker.LeRobotDataset or "
                    f"stoker.ShardDataset: {ds!r}"
                )
        sizes = np.array([len(ds) for ds in self.datasets], np.int64)
        self.sizes = sizes
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        values = check_values("weights", sizes if weights is None else weights)
        if len(values) != len(self.datasets):
            raise InvalidArgumentError(
                f"{len(values)} weights for {len(self.datasets)} datasets: give one per dataset"
            )
        if not values.sum() > 0:
            raise InvalidArgumentError("weights are all zero: nothing can be drawn")
        self.weights = values
        self._schema: dict[str, Any] | None = None

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def locate(self, i: int) -> tuple[int, int]:
        """(dataset, its sample) of sample ``i``."""
        if not isinstance(i, (int, np.integer)):
            raise TypeError(f"dataset indices are integers, got {type(i).__name__}")
        i = int(i) + (len(self) if i < 0 else 0)
        if not 0 <= i < len(self):
            raise IndexError(f"sample {i} is out of range: the datasets have {len(self)} samples")
        k = int(np.searchsorted(self.offsets, i, side="right") - 1)
        return k, i - int(self.offsets[k])

    @property
    def schema(self) -> dict[str, tuple[str, tuple[int | None, ...]] | None]:
        """Every key of an item: (dtype, shape) of its arrays, None for the keys whose values
        are Python objects (texts, lists, records, variable-length arrays). Taken from the
        datasets' native sources and metadata, without decoding. A shard dataset's image
        without a size (no ``stoker.Image(size=...)``) has None for its height and width: the
        Loader's ``transforms`` give them. Raises :class:`stoker.DatasetError` naming both
        datasets when two disagree on a key, as a Loader over the mix does."""
        if self._schema is None:
            self._schema = MixFront(self, None, schema_only=True).item_schema()
        return self._schema

    def __getitem__(self, i: int) -> dict[str, Any]:
        k, local = self.locate(i)
        schema = self.schema
        dataset = self.datasets[k]
        item = dataset.numpy_item(local) if hasattr(dataset, "numpy_item") else dataset[local]
        unsized = [
            key
            for key, kind in schema.items()
            if kind is not None and None in kind[1] and key not in item
        ]
        if unsized:
            raise InvalidArgumentError(
                f"sample {i} (dataset {k}) pads key {unsized[0]!r}, an image without a size in "
                "another dataset of the mix: give its stoker.Image a size (a Loader over the mix "
                "may give it with transforms=stoker.Transforms(resize=...) instead)"
            )
        item = pad_to_schema(item, schema)
        item["dataset_index"] = np.int64(k)
        return item

    def sampler(
        self,
        *,
        num_samples: int | None = None,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        drop_last: bool = False,
    ) -> MixSampler:
        """The :class:`stoker.MixSampler` a Loader over the mix draws from: ``num_samples``
        (default: ``len(self)``) independent draws per epoch, each a dataset by weight, then
        one of its samples."""
        return MixSampler(
            self.weights,
            self.sizes,
            num_samples=num_samples,
            seed=seed,
            rank=rank,
            world_size=world_size,
            drop_last=drop_last,
        )

    def sample_weights(self) -> np.ndarray:
        """Per sample: its dataset's weight spread evenly over the dataset's samples."""
        return expand_group_weights(self.weights, self.sizes, mode="total")

    def __repr__(self) -> str:
        parts = ", ".join(f"{ds!r} (weight {w:g})" for ds, w in zip(self.datasets, self.weights))
        return f"MultiDataset([{parts}])"


def pad_to_schema(item: dict[str, Any], schema: Mapping[str, Any]) -> dict[str, Any]:
    """``item`` (one sample) with every key of ``schema``: the keys it lacks as zeros (None
    for Python objects), their masks True; its own keys' added masks False."""
    torch, device = _torch_of(item)
    result = dict(item)
    for key, kind in schema.items():
        if key in item or key == "dataset_index":
            continue
        if kind is None:
            result[key] = None
            continue
        dtype, shape = kind
        missing_value = key.endswith(_PAD) and key[: -len(_PAD)] not in item
        if torch is not None:
            result[key] = torch.full(
                shape, int(missing_value), dtype=getattr(torch, dtype), device=device
            )
        else:
            result[key] = np.full(shape, missing_value, dtype=dtype)
    return result


def _torch_of(item: Mapping[str, Any]):
    """(the torch module, the device) when ``item`` holds tensors, else (None, None)."""
    for value in item.values():
        if type(value).__module__.startswith("torch"):
            import torch

            return torch, value.device
    return None, None


class _Member:
    """One dataset of a mix as the native mix reads it: its source's arguments, and the keys
    its Python front adds to each sample (a LeRobot dataset's row keys, a shard's __index__)."""

    def __init__(
        self,
        k: int,
        dataset: Any,
        transforms: Transforms | None,
        schema_only: bool = False,
        keep_language: bool = False,
    ):
        self.k, self.dataset = k, dataset
        self.unsized: list[str] = []  # image fields without a size (schema_only)
        self.name = _name_of(dataset)
        transforms = transforms or getattr(dataset, "transforms", None) or Transforms()
        # The keys the front adds: (dtype, shape) of an array key, None for a list.
        self.extras: dict[str, tuple[str, tuple[int, ...]] | None]
        # The dtype of its colour images (None: it has none), and the key of one of them.
        self.image_dtype: str | None = None
        self.image_key = ""
        if isinstance(dataset, ShardDataset):
            images = [name for name, d in dataset.spec.items() if isinstance(d, Image)]
            if images:
                self.image_dtype = transforms.resolved_dtype("uint8")
                self.image_key = images[0]
            if schema_only:  # an image without a size is laid out 1x1, reported as None
                self.unsized = dataset.unsized_images(transforms)
                self.fields = dataset.native_fields(transforms, unsized=_LAYOUT_SIZE_OF_UNSIZED)
            else:
                self.fields = dataset.native_fields(transforms)
            self.extras = {"__index__": ("int64", ())}
            return
        if getattr(dataset, "image_transforms", None) is not None:
            raise InvalidArgumentError(
                f"dataset {k} ({self.name}) has Python image_transforms: a mix applies "
                "stoker.Transforms only (give the dataset transforms=stoker.Transforms(...))"
            )
        spec, keys = dataset.spec, dataset.item_keys
        colour = [
            key.name
            for key in keys
            if key.source in dataset.cameras and key.source not in dataset.depth_cameras
        ]
        if colour:
            self.image_dtype = transforms.resolved_dtype(dataset.image_dtype)
            self.image_key = colour[0]
        self.keys = dataset.native_keys()
        self.transform = transforms.core_options(spec.size, spec.layout, dataset.image_dtype)
        self.depth = dataset.native_depth_cameras()
        self.rows = [] if dataset.rows is None else dataset.rows.tolist()
        # What the native fields and columns hold already (the item keys, the engine's row
        # keys), and the language columns batches leave out.
        self.row_keys = dataset.native_row_keys()
        self.skip = {key.name for key in keys} | {
            name for name in ENGINE_ROW_KEYS if getattr(self.row_keys, name)
        }
        if not keep_language:
            self.skip.update(dataset.language_columns)
        first = 0 if dataset.rows is None else int(dataset.rows[0])
        probe = self.front_values(np.array([first]), np.array([0]))
        self.extras = {
            name: None if isinstance(value, list) else (str(value.dtype), tuple(value.shape[1:]))
            for name, value in probe.items()
        }

    def part(self, options: Any) -> Any:
        """A new native part (one loader takes it)."""
        front = list(self.extras)
        if isinstance(self.dataset, ShardDataset):
            ds = self.dataset
            return _core.MixPart.for_shards(ds.samples, self.fields, options, front, self.name)
        return _core.MixPart.for_episodes(
            self.dataset.index.native,
            self.keys,
            self.transform,
            options,
            self.depth,
            self.rows,
            front,
            self.name,
            row_keys=self.row_keys,
        )

    def extra_values(self, samples: np.ndarray, episodes: np.ndarray) -> dict[str, Any]:
        """The front's keys for these samples of this dataset."""
        if isinstance(self.dataset, ShardDataset):
            return {"__index__": samples}
        return self.front_values(samples, episodes)

    def front_values(self, rows: np.ndarray, episodes: np.ndarray) -> dict[str, Any]:
        """What a LeRobot dataset's front adds at these rows: the records, and the row keys
        its engine source does not hold (all of them when an item key is named as one)."""
        if all(getattr(self.row_keys, name) for name in ENGINE_ROW_KEYS):
            return self.dataset.record_keys(rows, skip=self.skip)
        values = self.dataset.row_keys(rows, episodes, skip=self.skip)
        return {name: value for name, value in values.items() if name not in self.skip}


def _name_of(dataset: Any) -> str:
    root = getattr(dataset, "root", None) or getattr(dataset, "repo_id", None)
    if root is None and isinstance(dataset, ShardDataset):
        root = dataset.urls[0] if len(dataset.urls) == 1 else f"{len(dataset.urls)} shards"
    return f"{type(dataset).__name__} {root}" if root is not None else type(dataset).__name__


def _check_one_image_dtype(members: list[_Member]) -> None:
    """Raises :class:`stoker.DatasetError` when the datasets give their images in different
    dtypes (a LeRobot dataset's float32 in [0, 1] by default, a shard dataset's uint8): one mix,
    one rule, which the Loader's ``transforms`` or the datasets' arguments set."""
    with_images = [m for m in members if m.image_dtype is not None]
    dtypes = {m.image_dtype for m in with_images}
    if len(dtypes) < 2:
        return
    listed = "; ".join(
        f"dataset {m.k} ({m.name}) gives {m.image_key!r} as {m.image_dtype}"
        + (" in [0, 1]" if m.image_dtype != "uint8" else " 0-255")
        for m in with_images
    )
    raise DatasetError(
        f"the datasets of the mix give images in different dtypes ({listed}): give the Loader "
        "transforms=stoker.Transforms(dtype='uint8') (or 'float32'), which every dataset of the "
        "mix then follows, or give the LeRobot datasets image_dtype='uint8', a shard dataset's "
        "dtype"
    )


class MixFront:
    """A mix as a :class:`stoker.Loader` reads it: its native parts, and how a native batch
    becomes the batch dict (the fronts' keys merged by slot, masked where a dataset lacks
    them)."""

    def __init__(
        self,
        mix: MultiDataset,
        transforms: Transforms | None,
        schema_only: bool = False,
        keep_language: bool = False,
    ):
        self.mix = mix
        self.members = [
            _Member(k, ds, transforms, schema_only, keep_language)
            for k, ds in enumerate(mix.datasets)
        ]
        self.unsized = {name for m in self.members for name in m.unsized}
        _check_one_image_dtype(self.members)
        # The fronts' keys, in order, with the (dtype, shape) of an array key (None: a list).
        self.extras: dict[str, tuple[str, tuple[int, ...]] | None] = {}
        for member in self.members:
            for name, kind in member.extras.items():
                if name in self.extras and self.extras[name] != kind:
                    raise DatasetError(
                        f"datasets of the mix disagree on key {name!r}: {self.extras[name]} "
                        f"against {kind} in dataset {member.k} ({member.name})"
                    )
                self.extras.setdefault(name, kind)

    def native(self, sampler: Any, options: Any) -> Any:
        """A native loader of the mix (its parts made anew)."""
        return _core.Loader.for_mix([m.part(options) for m in self.members], sampler, options)

    def item_schema(self) -> dict[str, tuple[str, tuple[int | None, ...]] | None]:
        """The keys of one sample: the native fields and columns (taken from a loader of
        batches of one, which decodes nothing until iterated) and the fronts' keys."""
        options = _core.LoaderOptions()
        options.batch_size = options.threads = options.prefetch = 1
        one = _core.DistributedSampler(len(self.mix), shuffle=False)
        native = self.native(one, options)
        schema: dict[str, Any] = {}
        for name, dtype, shape in native.fields:
            shape = tuple(shape[1:])
            if name in self.unsized:  # [3, 1, 1] or [1, 1, 3]: the 1x1 layout's height, width
                shape = tuple(None if n == 1 else n for n in shape)
            schema[name] = (dtype, shape)
        for name in native.column_names:
            schema[name] = None
        for name, kind in self.extras.items():
            schema.setdefault(name, kind)
        return schema

    def item(self, arrays: dict[str, Any], samples: np.ndarray, episodes: np.ndarray, torch):
        """The batch dict of a native batch: its fields (in the items' shapes), its columns
        (None where the slot's dataset lacks a text), the fronts' keys merged by slot."""
        item: dict[str, Any] = dict(arrays)
        dataset_index = arrays["dataset_index"]
        which = dataset_index.numpy() if torch is not None else np.asarray(dataset_index)
        size = len(which)
        for name, value in item.items():
            mask = arrays.get(name + _PAD)
            if isinstance(value, list) and mask is not None:
                missing = np.asarray(mask.numpy() if torch is not None else mask)
                item[name] = [None if m else v for v, m in zip(value, missing.tolist())]
        merged: dict[str, Any] = {}
        for name, kind in self.extras.items():
            merged[name] = [None] * size if kind is None else np.zeros((size, *kind[1]), kind[0])
        for member in self.members:
            slots = np.flatnonzero(which == member.k)
            if slots.size == 0:
                continue
            values = member.extra_values(samples[slots], episodes[slots])
            for name, value in values.items():
                if name not in merged:
                    continue
                if isinstance(merged[name], list):
                    for slot, one in zip(slots.tolist(), value):
                        merged[name][slot] = one
                else:
                    merged[name][slots] = value
        for name, value in merged.items():
            if name not in item:
                is_array = not isinstance(value, list)
                item[name] = torch.from_numpy(value) if torch is not None and is_array else value
        return item
