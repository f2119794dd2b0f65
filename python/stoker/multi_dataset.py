"""Several datasets read as one: :class:`MultiDataset`, and the Loader over it.

    mix = stoker.MultiDataset([ds_a, ds_b], weights=[3, 1])
    item = mix[i]                       # ds_a's or ds_b's item, padded to every key of both
    loader = stoker.Loader(mix, batch_size=32)   # each batch: 24 samples of ds_a, 8 of ds_b

The datasets may have different features. A key that only some of them have is in every item
and batch: zeros where its dataset lacks it, with a mask saying so: ``<key>_is_pad`` (all True
over the time axis for a window key, which has that mask anyway; one bool for the other
keys). Keys the datasets share must agree in dtype and shape. ``dataset_index`` says which
dataset each sample comes from.

Unlike LeRobot's ``MultiLeRobotDataset``, which drops the keys that not every dataset has,
nothing is dropped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from stoker._core import DatasetError, InvalidArgumentError
from stoker.sampling import WeightedSampler, _check_values, expand_group_weights

__all__ = ["MultiDataset"]

# Keys whose values are Python lists per batch (texts, records), not arrays.
_LIST_KEYS = ("task",)


class MultiDataset:
    """Datasets (each a :class:`stoker.LeRobotDataset`) read as one, sample ``i`` of dataset
    ``k`` being sample ``offsets[k] + i``.

    Args:
        datasets: at least one; they share nothing but must agree on the keys they share.
        weights: one non-negative number per dataset, the share of samples drawn from it
            (by :meth:`sampler`, and in each of a :class:`stoker.Loader`'s batches). Default:
            the datasets' sizes (every sample equally likely, as a plain concatenation).

    Raises :class:`stoker.DatasetError` when two datasets give one key different dtypes or
    shapes (their frames at different sizes, for instance: give their specs one ``size``).
    """

    def __init__(self, datasets: Sequence[Any], weights: Sequence[float] | None = None):
        self.datasets = list(datasets)
        if not self.datasets:
            raise InvalidArgumentError("MultiDataset needs at least one dataset")
        for k, ds in enumerate(self.datasets):
            if not hasattr(ds, "item_keys") or len(ds) == 0:
                raise InvalidArgumentError(
                    f"datasets[{k}] is not a non-empty stoker dataset: {ds!r}"
                )
        sizes = np.array([len(ds) for ds in self.datasets], np.int64)
        self.sizes = sizes
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        values = _check_values("weights", sizes if weights is None else weights)
        if len(values) != len(self.datasets):
            raise InvalidArgumentError(
                f"{len(values)} weights for {len(self.datasets)} datasets: give one per dataset"
            )
        if not values.sum() > 0:
            raise InvalidArgumentError("weights are all zero: nothing can be drawn")
        self.weights = values
        self.schema = union_schema([item_schema(ds[0]) for ds in self.datasets])

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

    def __getitem__(self, i: int) -> dict[str, Any]:
        k, local = self.locate(i)
        item = self.datasets[k][local]
        padded = pad_to_schema(item, self.schema, batch=None)
        padded["dataset_index"] = np.int64(k)
        return padded

    def sample_weights(self) -> np.ndarray:
        """Per sample: its dataset's weight spread evenly over the dataset's samples."""
        return expand_group_weights(self.weights, self.sizes, mode="total")

    def sampler(
        self,
        *,
        num_samples: int | None = None,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        drop_last: bool = False,
    ) -> WeightedSampler:
        """A :class:`stoker.WeightedSampler` drawing each dataset's share (``weights``) of
        ``num_samples`` (default: ``len(self)``) draws per epoch, with replacement."""
        return WeightedSampler(
            self.sample_weights(),
            num_samples=num_samples,
            seed=seed,
            rank=rank,
            world_size=world_size,
            drop_last=drop_last,
        )

    def __repr__(self) -> str:
        parts = ", ".join(f"{ds!r} (weight {w:g})" for ds, w in zip(self.datasets, self.weights))
        return f"MultiDataset([{parts}])"


# ---------------------------------------------------------------------------------------------
# Keys, padding


def item_schema(item: Mapping[str, Any]) -> dict[str, tuple[str, tuple[int, ...]] | None]:
    """key -> (dtype, shape) of an item's (or, without the batch axis, a batch's) arrays; None
    for the keys whose values are Python objects (texts, records)."""
    schema: dict[str, tuple[str, tuple[int, ...]] | None] = {}
    for key, value in item.items():
        if isinstance(value, (list, str)) or key in _LIST_KEYS:
            schema[key] = None
        else:
            schema[key] = (_dtype_name(value), tuple(value.shape))
    return schema


def _dtype_name(value) -> str:
    return str(value.dtype).replace("torch.", "")


def union_schema(schemas: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Every key of ``schemas``, with a ``<key>_is_pad`` mask added for a key that some lack
    and that has none; raises :class:`stoker.DatasetError` for a shared key whose dtype or
    shape differs."""
    union: dict[str, Any] = {}
    owner: dict[str, int] = {}
    for k, schema in enumerate(schemas):
        for key, kind in schema.items():
            if key in union and union[key] != kind:
                raise DatasetError(
                    f"datasets {owner[key]} and {k} disagree on key {key!r}: "
                    f"{_describe(union[key])} against {_describe(kind)}"
                )
            union.setdefault(key, kind)
            owner.setdefault(key, k)
    for key in list(union):
        if key.endswith("_is_pad") or union[key] is None:
            continue
        if all(key in schema for schema in schemas):
            continue
        if f"{key}_is_pad" not in union:
            union[f"{key}_is_pad"] = ("bool", ())
    return union


def _describe(kind) -> str:
    return "Python objects" if kind is None else f"{kind[0]} {list(kind[1])}"


def pad_to_schema(item: dict[str, Any], schema: Mapping[str, Any], batch: int | None):
    """``item`` (one sample, or with ``batch`` a batch of that many) with every key of
    ``schema``: the keys it lacks as zeros (None in lists), their masks True; its own keys'
    added masks False."""
    torch, device = _torch_of(item)
    result = dict(item)
    lead = () if batch is None else (batch,)
    for key, kind in schema.items():
        if key in item:
            continue
        if kind is None:
            result[key] = None if batch is None else [None] * batch
            continue
        dtype, shape = kind
        missing_value = key.endswith("_is_pad") and key[: -len("_is_pad")] not in item
        result[key] = _full(torch, device, lead + tuple(shape), dtype, bool(missing_value))
    return result


def _torch_of(item: Mapping[str, Any]):
    """(the torch module, the device) when ``item`` holds tensors, else (None, None)."""
    for value in item.values():
        if type(value).__module__.startswith("torch"):
            import torch

            return torch, value.device
    return None, None


def _full(torch, device, shape, dtype: str, value: bool):
    if torch is not None:
        return torch.full(shape, int(value), dtype=getattr(torch, dtype), device=device)
    return np.full(shape, value, dtype=dtype)


# ---------------------------------------------------------------------------------------------
# The Loader


def batch_shares(batch_size: int, weights: np.ndarray) -> np.ndarray:
    """Samples of each dataset in a batch of ``batch_size``: its share of the weights, rounded
    by largest remainder so that they add up to ``batch_size``."""
    exact = batch_size * weights / weights.sum()
    shares = np.floor(exact).astype(np.int64)
    order = np.argsort(-(exact - shares), kind="stable")
    shares[order[: batch_size - int(shares.sum())]] += 1
    return shares


class MultiLoader:
    """A :class:`stoker.Loader` over a :class:`MultiDataset` (``stoker.Loader(mix, ...)``
    makes one): every batch holds each dataset's share of ``batch_size``
    (:func:`batch_shares` of the weights), drawn with replacement by a
    :class:`stoker.WeightedSampler` per dataset, built by one native loader per dataset (the
    threads split between them by share) and joined per batch, with every key of every
    dataset (see :mod:`stoker.multi_dataset`) and ``dataset_index``. An epoch has as many
    samples as the datasets together (split between ranks), rounded up to whole batches
    (down, with ``drop_last``).

    Iteration, ``state_dict`` / ``load_state_dict`` (exact resume), ``set_epoch``, ``len``,
    ``close`` and the context manager are the Loader's. ``stats()`` gives each dataset's
    loader's under ``"datasets"``. ``sampler=`` and ``balance=`` do not apply (each batch's
    composition is fixed by the weights); the other arguments are the Loader's.
    """

    def __init__(self, dataset: MultiDataset, batch_size: int, **arguments: Any):
        from stoker.loader import Loader, _distributed_defaults, default_threads

        if arguments.pop("sampler", None) is not None or arguments.pop("balance", False):
            raise ValueError(
                "a MultiDataset's loader composes every batch by the datasets' weights: "
                "sampler= and balance= do not apply"
            )
        arguments.pop("shuffle", None)  # draws are random: there is no dataset order to keep
        if not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        self.dataset = dataset
        self.batch_size = int(batch_size)
        self.shares = batch_shares(self.batch_size, dataset.weights)
        starved = np.flatnonzero((dataset.weights > 0) & (self.shares == 0))
        if starved.size:
            raise InvalidArgumentError(
                f"batch_size {batch_size} gives datasets {starved.tolist()} no sample per batch "
                f"at weights {dataset.weights.tolist()}: use a larger batch_size"
            )
        rank, world_size = _distributed_defaults(
            arguments.pop("rank", None), arguments.pop("world_size", None)
        )
        self.rank, self.world_size = rank, world_size
        drop_last = bool(arguments.get("drop_last", False))
        per_rank = len(dataset) // world_size if drop_last else -(-len(dataset) // world_size)
        batches = per_rank // self.batch_size if drop_last else -(-per_rank // self.batch_size)
        if batches < 1:
            raise InvalidArgumentError(
                f"an epoch would have no batch: {per_rank} samples per rank, batch_size "
                f"{batch_size} and drop_last=True"
            )
        threads = arguments.pop("threads", None)
        threads = default_threads() if threads is None else int(threads)
        seed = int(arguments.get("seed", 0))
        self.active = [k for k in range(len(dataset.datasets)) if self.shares[k] > 0]
        self.loaders = []
        for k in self.active:
            share = int(self.shares[k])
            sampler = WeightedSampler(
                np.ones(len(dataset.datasets[k])),
                num_samples=batches * share * world_size,
                seed=(seed + k) % 2**64,
                rank=rank,
                world_size=world_size,
            )
            self.loaders.append(
                Loader(
                    dataset.datasets[k],
                    share,
                    sampler=sampler,
                    threads=max(1, round(threads * share / self.batch_size)),
                    **arguments,
                )
            )
        self._schema: dict[str, Any] | None = None

    def __len__(self) -> int:
        return len(self.loaders[0])

    @property
    def epoch(self) -> int:
        return self.loaders[0].epoch

    def __iter__(self):
        iterators: list[Any] = [iter(loader) for loader in self.loaders]
        try:
            for parts in zip(*iterators):
                yield self._join(parts)
        finally:
            for iterator in iterators:
                iterator.close()

    def _join(self, parts) -> dict[str, Any]:
        marked = []
        for k, part in zip(self.active, parts):
            part = dict(part)
            n = len(part["task"])
            torch, device = _torch_of(part)
            part["dataset_index"] = (
                torch.full((n,), k, dtype=torch.int64, device=device)
                if torch is not None
                else np.full(n, k, np.int64)
            )
            marked.append(part)
        if self._schema is None:
            self._schema = union_schema([_without_batch_axis(item_schema(p)) for p in marked])
        padded = [pad_to_schema(p, self._schema, batch=len(p["task"])) for p in marked]
        torch, _ = _torch_of(padded[0])
        joined: dict[str, Any] = {}
        for key in self._schema:
            values = [p[key] for p in padded]
            if isinstance(values[0], list):
                joined[key] = [v for value in values for v in value]
            elif torch is not None:
                joined[key] = torch.cat(values)
            else:
                joined[key] = np.concatenate(values)
        return joined

    def set_epoch(self, epoch: int) -> None:
        for loader in self.loaders:
            loader.set_epoch(epoch)

    def state_dict(self) -> dict[str, Any]:
        return {
            "kind": "MultiLoader",
            "shares": self.shares.tolist(),
            "loaders": [loader.state_dict() for loader in self.loaders],
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if (
            not isinstance(state, Mapping)
            or state.get("kind") != "MultiLoader"
            or state.get("shares") != self.shares.tolist()
            or len(state.get("loaders", ())) != len(self.loaders)
        ):
            raise InvalidArgumentError(
                "the state is not a state_dict() of a MultiDataset loader with the same "
                f"batch shares {self.shares.tolist()}"
            )
        for loader, part in zip(self.loaders, state["loaders"]):
            loader.load_state_dict(part)

    def stats(self) -> dict[str, Any]:
        return {"datasets": [loader.stats() for loader in self.loaders]}

    def reset_stats(self) -> None:
        for loader in self.loaders:
            loader.reset_stats()

    def close(self) -> None:
        for loader in self.loaders:
            loader.close()

    def __enter__(self) -> MultiLoader:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"MultiLoader({self.dataset!r}, batch_size={self.batch_size}, shares "
            f"{self.shares.tolist()}, {len(self)} batches per epoch)"
        )


def _without_batch_axis(schema: Mapping[str, Any]) -> dict[str, Any]:
    return {
        key: None if kind is None else (kind[0], tuple(kind[1][1:])) for key, kind in schema.items()
    }
