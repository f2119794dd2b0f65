"""Samplers: which sample ids this rank visits each epoch, and in what order.

Every sampler is a pure function of (seed, epoch, position) computed in C++ by a counter-based
RNG (Philox4x32-10): nothing is stored per sample, any thread may ask, and the order resumes
exactly from :meth:`Sampler.state_dict` (two numbers: the epoch and the next position).

Every rank r of W visits the global positions r, r + W, ... of the epoch's global order, so what
W ranks had consumed is a prefix of that order whatever W: :meth:`Sampler.repartitioned` makes
the same order for other ranks, and with ``resume=(epoch, start)`` deals only the rest of that
epoch, from global position ``start`` on, over them (an elastic resume: :class:`stoker.Loader`
does this when a state saved on another world size is loaded).

Samplers follow torch's protocol (iterable of ints, ``len()``, ``set_epoch()``) and can be
passed to a ``torch.utils.data.DataLoader`` as ``sampler=``. Iterating hands out the ids from
the current (epoch, position) to the end of the epoch, advancing the position as it goes; an
epoch iterated to its end moves the sampler on to the next epoch, so iterating twice gives two
different orders. :meth:`Sampler.indices` returns a whole epoch as a numpy array instead.

An empty dataset gives an empty epoch for the samplers that only order samples; a
:class:`WeightedSampler` cannot draw from nothing and raises ``ValueError``.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, cast

import numpy as np

from stoker import _core
from stoker._core import InvalidArgumentError
from stoker.arguments import (
    MAX_EPOCH,
    MAX_INT64,
    check_bool,
    check_indices,
    check_int,
    check_partition,
    check_seed,
    check_size,
    check_values,
)

_CHUNK = 8192  # ids fetched per call while iterating
# An elastic resume: (epoch, global start), or None.
Resume = tuple[int, int] | None
# Builds a sampler's C++ order for (rank, world_size, resume).
_MakeCore = Callable[[int, int, Resume], _core.Sampler]

__all__ = [
    "DistributedSampler",
    "EpisodeAwareSampler",
    "LoadBalancedSampler",
    "MixSampler",
    "RandomSampler",
    "Sampler",
    "SequentialSampler",
    "WeightedSampler",
    "expand_group_weights",
]


def _distributed(n: int, shuffle: bool, seed: int, drop_last: bool) -> Callable[..., Any]:
    """(rank, world_size, resume) -> the native DistributedSampler of that rank over ``n``
    samples."""
    return lambda rank, world, resume: _core.DistributedSampler(
        n,
        shuffle=shuffle,
        seed=seed,
        rank=rank,
        world_size=world,
        drop_last=drop_last,
        resume=resume,
    )


class Sampler:
    """What every stoker sampler offers. Not constructed directly.

    Besides iterating, a sampler can drive a :class:`stoker.Loader` (``sampler=``): the loader
    reads the order by (epoch, position) from the same C++ sampler, with its own iteration
    state, so the batches are a function of the sampler's arguments and the epoch alone.
    """

    def __init__(
        self,
        make_core: _MakeCore,
        *,
        dataset_size: int,
        global_size: int,
        rank: int,
        world_size: int,
        config: dict[str, Any],
    ):
        self._make_core = make_core
        self._core = make_core(rank, world_size, None)
        self.resume: Resume = None
        self.global_size = global_size
        self._epoch = 0
        self._position = 0
        self._generation = 0  # bumped by set_epoch / load_state_dict: running iterators stop
        self.dataset_size = dataset_size
        self.rank = rank
        self.world_size = world_size
        self._config = {"kind": type(self).__name__, **config}

    @property
    def native(self) -> _core.Sampler:
        """The C++ sampler, which a :class:`stoker.Loader` draws its ids from."""
        return self._core

    @property
    def config(self) -> dict[str, Any]:
        """What determines the order, as plain values (arrays by their SHA-1): two samplers
        with equal configs give the same ids. A loader's ``state_dict`` keeps it."""
        return dict(self._config)

    def __len__(self) -> int:
        """Ids this rank visits in the current epoch (every epoch's count but the one an
        elastic resume cuts)."""
        return self._core.epoch_size(self._epoch)

    def repartitioned(self, rank: int, world_size: int, *, resume: Resume = None) -> Sampler:
        """The same order for rank ``rank`` of ``world_size``, at epoch 0. With ``resume=(epoch,
        start)``, that epoch deals only the global positions from ``start`` on (what a run of
        any world size had not consumed: ``start`` = positions per rank x its world size),
        padded or cut as a whole epoch is; the other epochs are whole.

        Raises :class:`stoker.InvalidArgumentError` for a rank outside [0, world_size), an
        epoch outside [0, 2**32) or a negative start."""
        world_size, rank = check_partition(rank, world_size)
        if resume is not None:
            resume = (
                check_int("resume epoch", resume[0], 0, MAX_EPOCH),
                check_int("resume start", resume[1], 0, MAX_INT64),
            )
        other = copy.copy(self)
        other._core = self._make_core(rank, world_size, resume)
        other.rank, other.world_size, other.resume = rank, world_size, resume
        other._epoch = other._position = other._generation = 0
        return other

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def position(self) -> int:
        """The next position of the current epoch that iteration hands out."""
        return self._position

    def set_epoch(self, epoch: int) -> None:
        """Starts epoch ``epoch`` (0 <= epoch < 2**32) from its beginning."""
        self._epoch = check_int("epoch", epoch, 0, MAX_EPOCH)
        self._position = 0
        self._generation += 1

    def state_dict(self) -> dict[str, int]:
        """``{"epoch": e, "position": p}``: restoring it continues with the identical remainder."""
        return {"epoch": self._epoch, "position": self._position}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores a :meth:`state_dict` (of a sampler built with the same arguments).

        Raises :class:`stoker.InvalidArgumentError` (a ``ValueError``) naming the field, for
        anything else than ``{"epoch": e, "position": p}`` with integers e in [0, 2**32) and p
        in [0, len(self)]."""
        if not isinstance(state, Mapping) or set(state) != {"epoch", "position"}:
            raise InvalidArgumentError(
                f"a sampler state is a dict with keys 'epoch' and 'position', got {state!r}"
            )
        epoch = check_int("state['epoch']", state["epoch"], 0, MAX_EPOCH)
        position = check_int("state['position']", state["position"], 0, len(self))
        self._epoch, self._position = epoch, position
        self._generation += 1

    def indices(
        self, epoch: int | None = None, *, start: int = 0, count: int | None = None
    ) -> np.ndarray:
        """The ids at positions [start, start + count) of an epoch (default: the current
        epoch, all of it) for this rank, as int64, in order. Computed in C++ with the GIL
        released; does not change the sampler's state."""
        epoch = self._epoch if epoch is None else check_int("epoch", epoch, 0, MAX_EPOCH)
        size = self._core.epoch_size(epoch)
        start = check_int("start", start, 0, size)
        count = size - start if count is None else check_int("count", count, 0, size - start)
        return self._core.fill(epoch, start, count)

    def __iter__(self) -> Iterator[int]:
        generation, epoch, size = self._generation, self._epoch, len(self)
        while self._position < size:
            ids = self._core.fill(epoch, self._position, min(_CHUNK, size - self._position))
            for sample_id in ids.tolist():
                if self._generation != generation:
                    return  # the state was reset under this iterator
                self._position += 1
                yield sample_id
        if self._generation == generation and self._epoch < MAX_EPOCH:
            self._epoch += 1
            self._position = 0

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(len={len(self)}, epoch={self._epoch}, "
            f"position={self._position})"
        )


class DistributedSampler(Sampler):
    """Every sample once per epoch, split between ``world_size`` ranks, as torch's
    ``DistributedSampler``: rank r takes positions r, r + world_size, ... of the epoch's order.

    Args:
        num_samples: the dataset's size, or the dataset (anything with ``len()``).
        rank, world_size: this process's rank in [0, world_size), and the number of ranks.
        shuffle: a new random order each epoch (keyed by seed and epoch) instead of 0, 1, 2, ...
        seed: the same on every rank.
        drop_last: when num_samples is not a multiple of world_size, False pads every rank to
            ceil(num_samples / world_size) by repeating the order from its start; True drops the
            order's tail, leaving floor(num_samples / world_size) per rank.
    """

    def __init__(
        self,
        num_samples: int | Any,
        *,
        rank: int = 0,
        world_size: int = 1,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
    ):
        n = check_size(num_samples)
        world_size, rank = check_partition(rank, world_size)
        shuffle, seed = check_bool("shuffle", shuffle), check_seed(seed)
        drop_last = check_bool("drop_last", drop_last)
        super().__init__(
            _distributed(n, shuffle, seed, drop_last),
            dataset_size=n,
            global_size=n,
            rank=rank,
            world_size=world_size,
            config={"shuffle": shuffle, "seed": seed, "drop_last": drop_last},
        )


class SequentialSampler(DistributedSampler):
    """0, 1, ..., num_samples - 1, every epoch."""

    def __init__(self, num_samples: int | Any):
        super().__init__(num_samples, shuffle=False)


class RandomSampler(DistributedSampler):
    """Every sample once per epoch, in a new random order each epoch (without replacement; for
    draws with replacement use :class:`WeightedSampler` with equal weights). The order is
    computed position by position, never stored, so any size is fine."""

    def __init__(self, num_samples: int | Any, *, seed: int = 0):
        super().__init__(num_samples, shuffle=True, seed=seed)


class EpisodeAwareSampler(Sampler):
    """The samples of chosen episodes, without the first and last frames of each, as LeRobot's
    ``EpisodeAwareSampler``: every kept sample once per epoch, in episode order or (with
    ``shuffle``) in a new random order each epoch keyed by (seed, epoch), split between ranks
    as :class:`DistributedSampler` splits them. Deterministic and resumable like every stoker
    sampler (LeRobot's draws from torch's global RNG).

    Args:
        dataset_from_indices: a stoker dataset (its :meth:`episode_bounds`: episodes are then
            chosen by ``episode_index``), or LeRobot's per-episode first samples (episodes are
            then chosen by their position in this list, as LeRobot does).
        dataset_to_indices: with lists, each episode's end sample (exclusive).
        episode_indices_to_use: the episodes to keep; default: all.
        drop_n_first_frames, drop_n_last_frames: samples left out at each episode's start and
            end (an episode shorter than both together gives none).
        shuffle, seed, rank, world_size, drop_last: as :class:`DistributedSampler`.
    """

    def __init__(
        self,
        dataset_from_indices: Any,
        dataset_to_indices: Sequence[int] | np.ndarray | None = None,
        episode_indices_to_use: Sequence[int] | None = None,
        drop_n_first_frames: int = 0,
        drop_n_last_frames: int = 0,
        shuffle: bool = False,
        *,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        drop_last: bool = False,
    ):
        if hasattr(dataset_from_indices, "episode_bounds"):
            if dataset_to_indices is not None:
                raise ValueError("give a dataset, or dataset_from_indices with dataset_to_indices")
            names, starts, ends = dataset_from_indices.episode_bounds()
            dataset_size = len(dataset_from_indices)
        else:
            if dataset_to_indices is None:
                raise ValueError("dataset_to_indices is required with dataset_from_indices")
            starts = check_indices("dataset_from_indices", dataset_from_indices)
            ends = check_indices("dataset_to_indices", dataset_to_indices)
            if len(starts) != len(ends) or bool((ends < starts).any()):
                raise ValueError(
                    "dataset_from_indices and dataset_to_indices must pair up, each start "
                    "before its end"
                )
            names = np.arange(len(starts), dtype=np.int64)
            dataset_size = int(ends.max()) if len(ends) else 0
        first = check_int("drop_n_first_frames", drop_n_first_frames, 0, MAX_INT64)
        last = check_int("drop_n_last_frames", drop_n_last_frames, 0, MAX_INT64)
        keep = np.ones(len(names), bool)
        if episode_indices_to_use is not None:
            wanted = check_indices("episode_indices_to_use", episode_indices_to_use)
            unknown = sorted(set(wanted.tolist()) - set(np.asarray(names).tolist()))
            if unknown:
                raise ValueError(f"episode_indices_to_use names unknown episodes {unknown}")
            keep = np.isin(names, wanted)
        ids = [
            np.arange(start + first, end - last, dtype=np.int64)
            for start, end, kept in zip(
                np.asarray(starts).tolist(), np.asarray(ends).tolist(), keep
            )
            if kept and end - last > start + first
        ]
        self.ids = np.concatenate(ids) if ids else np.zeros(0, np.int64)
        self.ids.flags.writeable = False
        world_size, rank = check_partition(rank, world_size)
        shuffle, seed = check_bool("shuffle", shuffle), check_seed(seed)
        drop_last = check_bool("drop_last", drop_last)
        kept: np.ndarray = self.ids
        inner = _distributed(len(kept), shuffle, seed, drop_last)
        super().__init__(
            lambda rank, world, resume: _core.MappedSampler(inner(rank, world, resume), kept),
            dataset_size=dataset_size,
            global_size=len(kept),
            rank=rank,
            world_size=world_size,
            config={
                "ids": _digest(self.ids),
                "shuffle": shuffle,
                "seed": seed,
                "drop_last": drop_last,
            },
        )


class WeightedSampler(Sampler):
    """Draws with replacement, sample i with probability weights[i] / sum(weights).

    Each draw is a pure function of (seed, epoch, draw index); ranks split one sequence of draws
    (rank r makes draws r, r + world_size, ...). For per-episode or per-dataset weights, expand
    them first with :func:`expand_group_weights`.

    Args:
        weights: one non-negative, finite weight per sample; not all zero.
        num_samples: draws per epoch over all ranks. Default: len(weights).
        rank, world_size, drop_last: as :class:`DistributedSampler`: each rank makes
            ceil (or, with drop_last, floor) of num_samples / world_size draws.
    """

    def __init__(
        self,
        weights: Sequence[float] | np.ndarray,
        *,
        num_samples: int | None = None,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        drop_last: bool = False,
    ):
        weights = check_values("weights", weights)
        if weights.size == 0:
            raise ValueError("weights is empty: cannot draw from an empty dataset")
        if not weights.sum() > 0:
            raise ValueError("weights are all zero: nothing can be drawn")
        if not np.isfinite(weights.sum()):
            raise ValueError("weights sum to infinity")
        if num_samples is not None:
            num_samples = check_int("num_samples", num_samples, 0, MAX_INT64)
        world_size, rank = check_partition(rank, world_size)
        seed, drop_last = check_seed(seed), check_bool("drop_last", drop_last)
        super().__init__(
            lambda rank, world, resume: _core.WeightedSampler(
                weights,
                num_samples=num_samples,
                seed=seed,
                rank=rank,
                world_size=world,
                drop_last=drop_last,
                resume=resume,
            ),
            dataset_size=len(weights),
            global_size=len(weights) if num_samples is None else num_samples,
            rank=rank,
            world_size=world_size,
            config={
                "weights": _digest(weights),
                "num_samples": num_samples,
                "seed": seed,
                "drop_last": drop_last,
            },
        )


class MixSampler(Sampler):
    """Draws from several datasets laid end to end (dataset k's sample i is id
    ``offsets[k] + i``): each draw picks dataset k with probability ``weights[k] / sum``,
    independently of every other draw, then one of its samples uniformly, both pure functions
    of (seed, epoch, draw index). Its memory is one number per dataset, whatever their sizes.
    What a :class:`stoker.Loader` over a :class:`stoker.MultiDataset` draws.

    Args:
        weights: one non-negative, finite weight per dataset; not all zero.
        sizes: the datasets' sample counts (a positive weight needs a non-empty dataset).
        num_samples: draws per epoch over all ranks. Default: the datasets' total size.
        seed, rank, world_size, drop_last: as :class:`WeightedSampler`.
    """

    def __init__(
        self,
        weights: Sequence[float] | np.ndarray,
        sizes: Sequence[int] | np.ndarray,
        *,
        num_samples: int | None = None,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        drop_last: bool = False,
    ):
        weights = check_values("weights", weights)
        sizes = np.ascontiguousarray(sizes, dtype=np.int64)
        if sizes.ndim != 1 or len(sizes) != len(weights):
            raise ValueError(
                f"{len(weights)} weights for {sizes.size} dataset sizes: give one per dataset"
            )
        if num_samples is not None:
            num_samples = check_int("num_samples", num_samples, 0, MAX_INT64)
        world_size, rank = check_partition(rank, world_size)
        seed, drop_last = check_seed(seed), check_bool("drop_last", drop_last)
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        super().__init__(
            lambda rank, world, resume: _core.MixSampler(
                weights,
                sizes,
                num_samples=num_samples,
                seed=seed,
                rank=rank,
                world_size=world,
                drop_last=drop_last,
                resume=resume,
            ),
            dataset_size=int(self.offsets[-1]),
            global_size=int(self.offsets[-1]) if num_samples is None else num_samples,
            rank=rank,
            world_size=world_size,
            config={
                "weights": weights.tolist(),
                "sizes": sizes.tolist(),
                "num_samples": num_samples,
                "seed": seed,
                "drop_last": drop_last,
            },
        )


class LoadBalancedSampler(Sampler):
    """:class:`DistributedSampler`'s order, with each global step (world_size * batch_size
    samples) re-dealt so that every rank gets the same number of samples and about the same
    total cost: heaviest first, each to the rank with the least total so far. Rank ids and the
    order inside each batch are then shuffled, so no rank is always the heavy one.

    Every rank computes the same assignment from the same costs, without communicating.

    Args:
        costs: one non-negative, finite cost per sample (e.g. frames to decode plus pixels).
        batch_size: samples per rank per step (the DataLoader's batch_size).
        rank, world_size, shuffle, seed, drop_last: as :class:`DistributedSampler`.
    """

    def __init__(
        self,
        costs: Sequence[float] | np.ndarray,
        *,
        batch_size: int,
        rank: int = 0,
        world_size: int = 1,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
    ):
        costs = check_values("costs", costs)
        batch_size = check_int("batch_size", batch_size, 1, MAX_INT64)
        world_size, rank = check_partition(rank, world_size)
        shuffle, seed = check_bool("shuffle", shuffle), check_seed(seed)
        drop_last = check_bool("drop_last", drop_last)
        self.batch_size = batch_size
        super().__init__(
            lambda rank, world, resume: _core.LoadBalancedSampler(
                costs,
                batch_size=batch_size,
                shuffle=shuffle,
                seed=seed,
                rank=rank,
                world_size=world,
                drop_last=drop_last,
                resume=resume,
            ),
            dataset_size=len(costs),
            global_size=len(costs),
            rank=rank,
            world_size=world_size,
            config={
                "costs": _digest(costs),
                "batch_size": batch_size,
                "shuffle": shuffle,
                "seed": seed,
                "drop_last": drop_last,
            },
        )

    def imbalance(self, epoch: int | None = None) -> dict[str, Any]:
        """How uneven the ranks' step costs are in an epoch (default: the current one), before
        (dealt round-robin, as :class:`DistributedSampler` does) and after balancing.

        Returns ``{"steps": n, "before": {...}, "after": {...}}``, each side with ``mean`` (the
        average step's max/mean rank cost), ``worst`` (the largest step's) and ``total`` (sum
        of the steps' max rank cost / sum of their mean: how much longer synchronous steps take
        than perfectly balanced ones). 1.0 is perfect balance.
        """
        epoch = self._epoch if epoch is None else check_int("epoch", epoch, 0, MAX_EPOCH)
        return cast(_core.LoadBalancedSampler, self._core).report(epoch)


def expand_group_weights(
    weights: Sequence[float] | np.ndarray, sizes: Sequence[int] | np.ndarray, *, mode: str = "total"
) -> np.ndarray:
    """Per-sample weights (float64) from weights of groups of consecutive samples (episodes,
    datasets), for :class:`WeightedSampler`.

    ``mode="total"``: a group's weight is its share of all draws, spread evenly over its samples
    (datasets mixed by ratio; episodes drawn equally often whatever their length).
    ``mode="per_sample"``: every sample of the group gets the group's weight.
    """
    if mode not in ("total", "per_sample"):
        raise ValueError(f"mode must be 'total' or 'per_sample', got {mode!r}")
    weights = check_values("weights", weights)
    sizes_array = np.asarray(sizes)
    if sizes_array.ndim != 1 or (sizes_array.size and sizes_array.dtype.kind not in "iu"):
        raise ValueError("sizes must be a one-dimensional array of integers")
    if len(sizes_array) != len(weights):
        raise ValueError(f"{len(weights)} weights for {len(sizes_array)} group sizes")
    if (sizes_array < 0).any():
        raise ValueError("group sizes must be non-negative")
    if mode == "total" and ((sizes_array == 0) & (weights > 0)).any():
        group = int(np.flatnonzero((sizes_array == 0) & (weights > 0))[0])
        raise ValueError(f"group {group} is empty but has a positive weight")
    return _core.expand_group_weights(
        weights, np.ascontiguousarray(sizes_array, dtype=np.int64), mode == "per_sample"
    )


def _digest(values: np.ndarray) -> str:
    return hashlib.sha1(np.ascontiguousarray(values, dtype=np.float64).tobytes()).hexdigest()
