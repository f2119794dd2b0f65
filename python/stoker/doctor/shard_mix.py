"""Are a shard loader's first batches as mixed as the dataset? Shards written in label order
(all of class 0, then class 1, ...) and a shuffle buffer much smaller than a class's run give
batches of a few labels each: the model sees a narrow, drifting distribution.

    mix = stoker.doctor.check_batch_mix(loader)        # a loader over a ShardDataset
    if mix.narrow:
        print(mix.message)      # names the shuffle_buffer that would fix it

The check reads no pixel: the order of an epoch is a pure function of the seed, and the labels
(``cls`` members) are in the shard index. It compares the label histogram of the first
``batches`` batches with the whole dataset's by total variation distance, against the distance
a uniformly random draw of as many samples has; batches are narrow when theirs is more than
twice that and above 0.1. The suggested buffer is the smallest power-of-two multiple of the
current one whose first batches are not narrow.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from stoker import _core
from stoker._core import InvalidArgumentError

__all__ = ["BatchMix", "check_batch_mix"]


@dataclass
class BatchMix:
    """The first batches' label mix against the dataset's."""

    batches: int
    samples: int
    labels_in_dataset: int
    labels_seen: int
    distance: float  # total variation distance of the first batches' labels to the dataset's
    random_distance: float  # the same for a uniformly random draw of as many samples
    narrow: bool
    shuffle_buffer: int
    suggested_buffer: int | None
    message: str


def _distance(labels: np.ndarray, reference: np.ndarray, bins: int) -> float:
    seen = np.bincount(labels, minlength=bins) / max(len(labels), 1)
    return 0.5 * float(np.abs(seen - reference).sum())


def _narrow(distance: float, random_distance: float) -> bool:
    return distance > max(2.0 * random_distance, 0.1)


def check_batch_mix(loader: Any, batches: int = 4, epoch: int | None = None) -> BatchMix:
    """The label mix of ``loader``'s first ``batches`` batches of ``epoch`` (default: the
    current one) for its rank; see the module's notes."""
    dataset = loader.dataset
    labels = getattr(dataset, "labels", None)
    if labels is None or not getattr(loader, "_shards", False):
        raise InvalidArgumentError("check_batch_mix needs a loader over a stoker.ShardDataset")
    if (labels < 0).all():
        raise InvalidArgumentError(
            "the shards have no cls labels in their index: the batch mix cannot be checked"
        )
    epoch = loader._epoch if epoch is None else int(epoch)
    known = labels >= 0
    bins = int(labels.max()) + 1
    reference = np.bincount(labels[known], minlength=bins) / known.sum()
    count = min(batches * loader.batch_size, len(loader.epoch_order(epoch)))

    def first(order: np.ndarray) -> np.ndarray:
        chosen = labels[order[:count]]
        return chosen[chosen >= 0]

    rng = np.random.default_rng(0)
    random_distance = float(
        np.mean(
            [
                _distance(first(rng.permutation(np.flatnonzero(known))), reference, bins)
                for _ in range(5)
            ]
        )
    )
    taken = first(loader.epoch_order(epoch))
    distance = _distance(taken, reference, bins)
    narrow = _narrow(distance, random_distance)
    suggested = None
    if narrow:
        stream = loader.sampler.native.epoch_stream(epoch)
        buffer = max(loader.shuffle_buffer, 1)
        while buffer < len(stream):
            buffer *= 2
            order = _core.shuffle_buffer_order(stream, buffer, loader.seed, epoch, loader.rank)
            if not _narrow(_distance(first(order), reference, bins), random_distance):
                suggested = buffer
                break
    seen = int(len(np.unique(taken)))
    total = int((reference > 0).sum())
    head = (
        f"the first {batches} batches ({count} samples) hold {seen} of the dataset's {total} "
        f"labels; their label distribution is {distance:.2f} from the dataset's (total "
        f"variation; a random draw: {random_distance:.2f})"
    )
    if not narrow:
        message = head + ": well mixed."
    elif suggested is not None:
        message = (
            head + f": batches are narrow. Set shuffle_buffer={suggested} (now "
            f"{loader.shuffle_buffer}), or write shuffled shards (stoker shard --shuffle-seed)."
        )
    else:
        message = (
            head + ": batches are narrow, and no shuffle buffer within this rank's "
            f"{len(loader._stream(epoch, loader.rank))} samples fixes it: the rank's shards "
            "hold too few labels. Write shuffled shards (stoker shard --shuffle-seed 0)."
        )
    return BatchMix(
        batches=batches,
        samples=count,
        labels_in_dataset=total,
        labels_seen=seen,
        distance=distance,
        random_distance=random_distance,
        narrow=narrow,
        shuffle_buffer=loader.shuffle_buffer,
        suggested_buffer=suggested,
        message=message,
    )
