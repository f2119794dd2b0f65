"""Batches of a :class:`stoker.ShardDataset`: what ``stoker.Loader(shard_dataset, ...)`` returns.

    ds = stoker.ShardDataset("train-{000000..000007}.tar", spec)
    loader = stoker.Loader(ds, batch_size=256, shuffle=True, seed=0,
                           transforms=stoker.Transforms(random_resized_crop=(224, 224), hflip=0.5))
    for epoch in range(epochs):
        loader.set_epoch(epoch)          # optional: iterating to the end moves to the next epoch
        for batch in loader:
            ...

The order of one epoch, for one rank, is a pure function of (seed, epoch, rank, world size)
and the shards' sizes (stoker/shard_order.h): shards are permuted per epoch, dealt to ranks by
equal bytes, read in that order, and passed through a bounded shuffle buffer of
``shuffle_buffer`` samples. Every sample is in exactly one rank's epoch, once. The order is
cut into batches, built ``prefetch`` batches ahead of the consumer (default one) while it
works on the current one: its shards' byte ranges read in one call per shard, its images
decoded in C++ into the batch by ``threads`` native threads at once, its clips by as many,
random transforms drawn from (seed, epoch, sample id). One batch decoded by every thread,
rather than a batch per thread, keeps the image batches in memory to the one being consumed and
the ``prefetch`` being built: a batch is written into the array of the batch the consumer held
before (recycled once the consumer lets go of it, as a ``for`` loop does when it takes the next).
The bytes of a batch do not depend on the thread count, and :meth:`state_dict` resumes
mid-epoch exactly: the shard cursor and the buffer's contents at the position are recomputed
and checked against the saved ones.

Ranks get equal bytes, not equal sample counts, so their batch counts in one epoch may differ
by about a shard's worth: use ``drop_last=True`` with ``equal_batches=True`` for trainers
(DDP) that need every rank to take the same number of steps.
"""

from __future__ import annotations

import io
import json
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Generator, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from stoker import _core
from stoker._core import DatasetError, InvalidArgumentError
from stoker.loader import (
    LoaderObserver,
    copied_to_device,
    observed_batches,
    raise_if_iterated_elsewhere,
    raise_if_iteration_ended,
)
from stoker.sampling import _check_seed
from stoker.shards import Array, Clip, Image, Json, Label, ShardDataset, Text, Tokens
from stoker.transforms import Transforms
from stoker.video import VideoReader

_STATE_VERSION = 1
_STATE_CONFIG = (
    "seed",
    "shuffle",
    "shuffle_buffer",
    "batch_size",
    "drop_last",
    "equal_batches",
    "rank",
    "world_size",
    "num_samples",
    "num_shards",
)
_NUMPY_DTYPES = {"uint8": np.uint8, "float16": np.float16, "float32": np.float32}
_JSON_NUMPY = {"int64": np.int64, "float64": np.float64, "float32": np.float32, "bool": np.bool_}
DEFAULT_SHUFFLE_BUFFER = 8192
_KEPT_ERRORS = 20


class _SampleError(Exception):
    """A bad member of one sample: the message names the shard, key and field."""


class ShardLoader:
    """Batches of a :class:`stoker.ShardDataset`, built on threads; made by
    ``stoker.Loader(shard_dataset, ...)``.

    Args:
        dataset: the :class:`stoker.ShardDataset`.
        batch_size: samples per batch.
        shuffle: permute shards per epoch and pass samples through the shuffle buffer.
            Default: True.
        seed: keys the order and the random transforms.
        shuffle_buffer: samples in the bounded shuffle buffer of each rank (default 8192). The
            buffer holds sample ids, not bytes (samples are read by ranged reads when their
            batch is built), so a large one costs no memory, only locality: a batch then
            reads from more shards.
        threads: native threads decoding each batch; default: as :class:`stoker.Loader`'s, the
            cores this process may use divided by ``LOCAL_WORLD_SIZE``
            (:func:`stoker.loader.default_threads`).
        prefetch: batches built ahead of the consumer, each by all the threads; default 1.
        drop_last: drop each epoch's short last batch.
        equal_batches: every rank takes the same number of batches per epoch (the smallest
            rank's), the samples beyond dropped; default False (every sample exactly once).
        rank, world_size: this process's share; default as :class:`stoker.Loader`.
        transforms: a :class:`stoker.Transforms` for the image fields; the size comes from it,
            else from the spec's :class:`stoker.Image` size.
        device: as :class:`stoker.Loader`'s: ``None``/``"cpu"``, or a CUDA device the batches
            are copied to on a side stream (the same checks and errors).
        on_error: ``"raise"`` (a bad member stops the epoch with a :class:`stoker.Error`
            naming shard, key and field) or ``"skip"`` (the sample is left out of its batch,
            which comes out smaller; counted and named in :meth:`stats`).
        output: ``"torch"``, ``"numpy"`` or ``"auto"``.

    A batch is a dict: per spec field its array (images ``[B, 3, H, W]`` or ``[B, H, W, 3]``,
    clips ``[B, T, 3, H, W]``, labels int64 ``[B]``, tokens ``[B, L]`` with
    ``<name>_length``), text as a list of strings, json keys as typed columns (str keys as
    lists), ``__key__`` (the samples' keys) and ``__index__`` (their ids in the dataset).

    Thread-safety, as :class:`stoker.Loader`'s: one iteration at a time, on one thread. A new
    one on the same thread ends the previous one; one started on another thread while one is
    going raises a ``RuntimeError`` naming the thread that iterates. :meth:`close` (also on
    leaving a ``with`` block: the loader is a context manager) ends the threads, and may be
    called from any thread: the consumer then gets a ``RuntimeError`` saying so.

    Raises :class:`stoker.InvalidArgumentError` when a rank's epoch would have no batch (more
    ranks than shards, or too few samples for ``batch_size`` under ``drop_last``), on every rank.
    """

    def __init__(
        self,
        dataset: ShardDataset,
        batch_size: int,
        *,
        shuffle: bool | None = None,
        seed: int = 0,
        shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER,
        threads: int | None = None,
        prefetch: int | None = None,
        drop_last: bool = False,
        equal_batches: bool = False,
        rank: int | None = None,
        world_size: int | None = None,
        transforms: Transforms | None = None,
        device: Any = None,
        on_error: str = "raise",
        output: str = "auto",
        **unsupported: Any,
    ):
        from stoker import loader as _loader

        if unsupported:
            raise TypeError(
                f"stoker.Loader over a ShardDataset does not take {sorted(unsupported)} "
                "(see docs/shards.md for its arguments)"
            )
        if not isinstance(dataset, ShardDataset):
            raise TypeError(f"dataset must be a stoker.ShardDataset, got {type(dataset).__name__}")
        if not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        if not isinstance(shuffle_buffer, (int, np.integer)) or shuffle_buffer < 0:
            raise ValueError(
                f"shuffle_buffer must be a non-negative integer, got {shuffle_buffer!r}"
            )
        if threads is not None and (not isinstance(threads, (int, np.integer)) or threads < 1):
            raise ValueError(f"threads must be a positive integer or None, got {threads!r}")
        if prefetch is not None and (not isinstance(prefetch, (int, np.integer)) or prefetch < 1):
            raise ValueError(f"prefetch must be a positive integer or None, got {prefetch!r}")
        if on_error not in ("raise", "skip"):
            raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
        if output not in ("auto", "torch", "numpy"):
            raise ValueError(f"output must be 'auto', 'torch' or 'numpy', got {output!r}")
        torch = _loader._import_torch() if output != "numpy" else None
        if output == "torch" and torch is None:
            raise ValueError("output='torch' needs PyTorch, which cannot be imported")
        self._torch = torch
        transforms = Transforms() if transforms is None else transforms
        if not isinstance(transforms, Transforms):
            raise TypeError(f"transforms must be a stoker.Transforms, got {type(transforms)}")
        if transforms.dtype == "bfloat16" and torch is None:
            raise ValueError("bfloat16 batches need PyTorch (numpy has no bfloat16)")
        self.device = _loader.check_device(device)
        if self.device is not None and torch is None:
            raise ValueError("device= needs torch batches: give output='torch' or 'auto'")
        self.dataset = dataset
        self.batch_size = int(batch_size)
        self.shuffle = True if shuffle is None else bool(shuffle)
        self.seed = _check_seed(seed)
        self.shuffle_buffer = int(shuffle_buffer)
        self.threads = int(threads) if threads is not None else _loader.default_threads()
        self.prefetch = int(prefetch) if prefetch is not None else 1
        self.drop_last = bool(drop_last)
        self.equal_batches = bool(equal_batches)
        self.rank, self.world_size = _loader._distributed_defaults(rank, world_size)
        if not 0 <= self.rank < self.world_size:
            raise ValueError(
                f"rank must be in [0, world_size), got {self.rank} of {self.world_size}"
            )
        self.transforms = transforms
        self.on_error = on_error
        self._observers: list[LoaderObserver] = []
        if dataset.damaged and on_error == "raise":
            url, damage = dataset.damaged[0]
            raise DatasetError(
                f"{url}: {damage} ({len(dataset.damaged)} damaged shard(s) in the dataset; "
                "on_error='skip' reads the samples before the damage and names the shards in "
                "stats()['damaged_shards'])"
            )
        self._images = self._image_options()
        self._epoch = 0
        self._batch = 0
        self._orders: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._executor: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._stats = {"batches": 0, "samples": 0, "skipped": 0, "bytes_read": 0, "built": 0}
        self._seconds = {"read_s": 0.0, "decode_s": 0.0, "wait_s": 0.0}
        self._errors: deque[str] = deque(maxlen=_KEPT_ERRORS)
        self._remote_base = _core.remote_stats()
        # Image batches are written into recycled arrays: a fresh 150 MB float batch costs a
        # page fault per 4 KiB on its first write, a quarter of its decode time. The consumer's
        # batch and the ones being built: no more while the consumer lets go of its old batches.
        self._buffers = _BufferPool(self.prefetch + 1)
        # Iterations, as stoker.Loader's: each has a run number, and one that is not the current
        # run has ended (a newer one started, or close()). `_owner` is the thread of the current
        # run until it ends; `_pending` its batches being built. Reentrant: a generator of this
        # loader finalized by the garbage collector while the guard is held ends under it.
        self._guard = threading.Condition(threading.RLock())
        self._run = 0
        self._owner: threading.Thread | None = None
        self._closed: tuple[int, str] | None = None  # (run, closing thread's name)
        self._pending: deque[Future] = deque()
        self._check_epoch_has_a_batch()

    def _check_epoch_has_a_batch(self) -> None:
        """Refuses a configuration in which a rank's epoch has no batch, with its numbers, on
        every rank alike (under DDP a rank that takes no step leaves the others waiting): more
        ranks than shards (shards are dealt whole), or a rank whose samples make no batch
        (``drop_last`` with fewer than ``batch_size``; ``equal_batches`` cutting every rank to
        a rank's few)."""
        ds, world = self.dataset, self.world_size
        shards, n = len(ds.urls), len(ds)
        if shards < world:
            raise InvalidArgumentError(
                f"an epoch would have no batch: the dataset has {shards} shards for world_size "
                f"{world}, so {world - shards} of the ranks get no shard (shards are dealt whole "
                "to ranks, by bytes; shards < ranks). Use fewer ranks, or write more shards "
                "(stoker shard --shard-bytes)"
            )
        lengths = self._rank_lengths(self._epoch)
        fewest = min(range(world), key=lambda r: lengths[r])
        samples = lengths[fewest]
        cut = ", and equal_batches=True cuts every rank to that count" if self.equal_batches else ""
        if samples >= self.batch_size or (samples > 0 and not self.drop_last):
            return
        given = (
            f"an epoch would have no batch: the shards dealt to rank {fewest} (world_size "
            f"{world}) hold {samples} samples in epoch {self._epoch} (the dataset has {n} in "
            f"{shards} shards){cut}"
        )
        if samples > 0:
            why = (
                f": fewer than batch_size {self.batch_size}, and drop_last=True drops a short "
                "batch. Use a smaller batch_size, drop_last=False or fewer ranks"
            )
        else:
            why = f", so no batch of batch_size {self.batch_size}. Use fewer ranks"
        raise InvalidArgumentError(given + why)

    # -- order ----------------------------------------------------------------------------------

    def _stream(self, epoch: int, rank: int) -> np.ndarray:
        """Rank ``rank``'s samples in reading order: its shards in the epoch's order."""
        ds = self.dataset
        ranks = _core.deal_shards(ds.shard_bytes, self.shuffle, self.seed, epoch, self.world_size)
        shards = ranks[rank]
        if len(shards) == 0:
            return np.zeros(0, np.int64)
        return np.concatenate(
            [np.arange(ds.shard_first[s], ds.shard_first[s] + ds.shard_samples[s]) for s in shards]
        ).astype(np.int64)

    def _rank_lengths(self, epoch: int) -> list[int]:
        ranks = _core.deal_shards(
            self.dataset.shard_bytes, self.shuffle, self.seed, epoch, self.world_size
        )
        return [int(self.dataset.shard_samples[np.asarray(r)].sum()) for r in ranks]

    def _epoch_order(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """(this rank's stream, its order after the shuffle buffer) in ``epoch``, cut to the
        samples the epoch's batches take."""
        if epoch not in self._orders:
            stream = self._stream(epoch, self.rank)
            buffer = self.shuffle_buffer if self.shuffle else 0
            order = _core.shuffle_buffer_order(stream, buffer, self.seed, epoch, self.rank)
            if self.equal_batches:
                order = order[: min(self._rank_lengths(epoch))]
            if self.drop_last:
                order = order[: len(order) - len(order) % self.batch_size]
            self._orders = {epoch: (stream, order)}
        return self._orders[epoch]

    def epoch_order(self, epoch: int | None = None) -> np.ndarray:
        """The sample ids this rank's batches take in ``epoch`` (default: the current one), in
        order."""
        return self._epoch_order(self._epoch if epoch is None else int(epoch))[1]

    def batches_in_epoch(self, epoch: int) -> int:
        return -(-len(self._epoch_order(epoch)[1]) // self.batch_size)

    def __len__(self) -> int:
        """Batches in the current epoch for this rank (ranks may differ; see the module)."""
        return self.batches_in_epoch(self._epoch)

    def set_epoch(self, epoch: int) -> None:
        """Starts epoch ``epoch`` at its first batch."""
        if not isinstance(epoch, (int, np.integer)) or epoch < 0:
            raise ValueError(f"epoch must be a non-negative integer, got {epoch!r}")
        self._epoch, self._batch = int(epoch), 0

    # -- state ----------------------------------------------------------------------------------

    def _config(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "shuffle": self.shuffle,
            "shuffle_buffer": self.shuffle_buffer,
            "batch_size": self.batch_size,
            "drop_last": self.drop_last,
            "equal_batches": self.equal_batches,
            "rank": self.rank,
            "world_size": self.world_size,
            "num_samples": len(self.dataset),
            "num_shards": len(self.dataset.urls),
        }

    def _cursor(self, epoch: int, emitted: int) -> dict[str, Any]:
        stream, order = self._epoch_order(epoch)
        buffer = self.shuffle_buffer if self.shuffle else 0
        consumed, held = _core.shuffle_buffer_state(
            stream, buffer, self.seed, epoch, self.rank, min(emitted, len(stream))
        )
        ds = self.dataset
        if consumed < len(stream):
            sample = int(stream[consumed])
            shard = ds.urls[int(ds.sample_shard[sample])]
            in_shard = sample - int(ds.shard_first[ds.sample_shard[sample]])
        else:
            shard, in_shard = None, 0
        return {
            "emitted": int(emitted),
            "shard": shard,
            "sample_in_shard": in_shard,
            "buffer": [int(i) for i in held],
        }

    def state_dict(self) -> dict[str, Any]:
        """Where iteration stands: the epoch, the next batch, the configuration it depends on,
        and the shard cursor and shuffle buffer at that point (the next shard to read from and
        its next sample, the ids held)."""
        emitted = self._batch * self.batch_size
        return {
            "version": _STATE_VERSION,
            "kind": "shards",
            "epoch": self._epoch,
            "batch": self._batch,
            **self._config(),
            "cursor": self._cursor(self._epoch, emitted),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resumes at ``state``'s position; the configuration must match this loader's, and
        the recomputed cursor and buffer must equal the saved ones (else the shards changed)."""
        if state.get("version") != _STATE_VERSION or state.get("kind") != "shards":
            raise InvalidArgumentError(
                "not a state_dict of a loader over a ShardDataset (or another version)"
            )
        config = self._config()
        for key in _STATE_CONFIG:
            if state.get(key) != config[key]:
                raise InvalidArgumentError(
                    f"the state was saved with {key}={state.get(key)!r}, this loader has "
                    f"{key}={config[key]!r}; the remaining batches would differ"
                )
        epoch, batch = int(state["epoch"]), int(state["batch"])
        cursor = self._cursor(epoch, batch * self.batch_size)
        if cursor != state.get("cursor"):
            raise DatasetError(
                "the shard cursor and shuffle buffer recomputed for this position differ from "
                "the saved ones: the shards changed since the state was saved"
            )
        self._epoch, self._batch = epoch, batch

    # -- statistics -----------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Counters since the loader was made: batches and samples delivered, batches built
        (delivered or ahead of the consumer), samples skipped (with the last messages naming
        shard, key and field), bytes read, and seconds spent reading and decoding (summed over
        threads) and waiting for batches; under ``"remote"`` the object-storage reads
        (requests, retries, failures, bytes fetched, cache hits and misses, seconds waited)
        since the loader was made, as :class:`stoker.Loader` counts them: per process, so
        loaders running at the same time share them."""
        now = _core.remote_stats()
        with self._lock:
            return {
                **self._stats,
                **self._seconds,
                "threads": self.threads,
                "errors": list(self._errors),
                "damaged_shards": [f"{url}: {why}" for url, why in self.dataset.damaged],
                "remote": {key: now[key] - self._remote_base.get(key, 0) for key in now},
            }

    # -- iteration ------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[dict[str, Any]]:
        """The rest of the current epoch's batches. As :class:`stoker.Loader`'s: one thread
        iterates at a time (another thread's iteration raises a ``RuntimeError`` naming the
        thread that iterates; a new one on the same thread ends the previous one), and
        :meth:`close` from any thread ends the iteration with a ``RuntimeError`` saying so.
        With ``device``, batches are copied to it as :class:`stoker.Loader`'s are; observers
        (:meth:`add_observer`) see the iteration as they see the Loader's."""
        batches = self._batches()
        if self.device is not None:
            batches = copied_to_device(batches, self.device)
        if self._observers:
            batches = observed_batches(batches, tuple(self._observers))
        return batches

    def add_observer(self, observer: LoaderObserver) -> None:
        """As :meth:`stoker.Loader.add_observer`: ``observer`` sees every iteration that starts
        from now on."""
        if not isinstance(observer, LoaderObserver):
            raise TypeError(f"observer must be a stoker.LoaderObserver, got {type(observer)}")
        self._observers.append(observer)

    def remove_observer(self, observer: LoaderObserver) -> None:
        self._observers.remove(observer)

    def __enter__(self) -> ShardLoader:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def _begin(self) -> tuple[int, int, int, int, np.ndarray, ThreadPoolExecutor]:
        """Starts an iteration on this thread: its run number, epoch, first and end batch, the
        epoch's order and the executor building its batches."""
        me = threading.current_thread()
        with self._guard:
            raise_if_iterated_elsewhere(self._owner, me)
            for future in self._pending:  # the previous iteration's, which this one ends
                future.cancel()
            self._pending = deque()
            self._run += 1
            self._owner = me
            epoch, start = self._epoch, self._batch
            n = self.batches_in_epoch(epoch)
            if start >= n:
                epoch, start = epoch + 1, 0
                self._epoch, self._batch = epoch, 0
                n = self.batches_in_epoch(epoch)
            if n == 0:
                self._owner = None
                raise InvalidArgumentError(
                    f"epoch {epoch} has no batch for rank {self.rank} (world_size "
                    f"{self.world_size}): its shards hold {len(self._epoch_order(epoch)[0])} "
                    f"samples, batch_size {self.batch_size}, drop_last={self.drop_last}, "
                    f"equal_batches={self.equal_batches}"
                )
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    self.prefetch, thread_name_prefix="stoker-shards"
                )
            return self._run, epoch, start, n, self._epoch_order(epoch)[1], self._executor

    def _raise_if_ended(self, run: int) -> None:
        """Raises when iteration ``run`` was closed or replaced by a newer one (guard held)."""
        raise_if_iteration_ended(run, self._run, self._closed)

    def _batches(self) -> Generator[dict[str, Any], None, None]:
        run, epoch, start, n, order, executor = self._begin()
        pending = self._pending
        submitted = start

        def build_ahead() -> None:
            """Submits batches until ``prefetch`` are being built (guard held, run current: a
            close() takes the executor under the guard, so none is submitted to a closed one)."""
            nonlocal submitted
            while submitted < n and len(pending) < self.prefetch:
                ids = order[submitted * self.batch_size : (submitted + 1) * self.batch_size]
                future = executor.submit(self._build, epoch, ids)
                future.add_done_callback(self._notify)
                pending.append(future)
                submitted += 1

        try:
            for b in range(start, n):
                began = time.perf_counter()
                self._buffers.consumer_waits(True)
                try:
                    with self._guard:
                        self._raise_if_ended(run)
                        self._owner = threading.current_thread()  # an iterator may move
                        build_ahead()
                        future = pending[0]
                        self._wait(future, run)
                        self._raise_if_ended(run)
                        pending.popleft()
                finally:
                    self._buffers.consumer_waits(False)
                batch = future.result()
                del future
                with self._guard:
                    self._raise_if_ended(run)
                    build_ahead()  # the next batches are built while the consumer works
                    self._batch = b + 1
                    if self._batch == n:
                        self._epoch, self._batch = epoch + 1, 0
                with self._lock:
                    self._seconds["wait_s"] += time.perf_counter() - began
                    self._stats["batches"] += 1
                    self._stats["samples"] += len(batch["__key__"])
                yield batch
                del batch
        finally:
            for future in pending:
                future.cancel()
            # A build under way must not wait for the batch this consumer may keep.
            self._buffers.consumer_waits(True)
            with self._guard:
                if run == self._run:
                    self._owner = None

    def _wait(self, future: Future, run: int) -> None:
        """Waits (guard held) until ``future`` is done or iteration ``run`` ends (close(), a
        new iteration): both notify the guard."""
        while not future.done() and run == self._run:
            self._guard.wait()

    def _notify(self, _future: Future) -> None:
        with self._guard:
            self._guard.notify_all()

    def close(self) -> None:
        """Ends iteration now and joins the threads (a build under way finishes). May be
        called from any thread: the iterating consumer gets a ``RuntimeError`` saying the loader
        was closed, at once if it is waiting for a batch. A later iteration starts new
        threads."""
        self._buffers.consumer_waits(True)  # a build under way finishes without waiting
        with self._guard:
            self._closed = (self._run, threading.current_thread().name)
            self._run += 1
            self._owner = None
            for future in self._pending:
                future.cancel()
            executor, self._executor = self._executor, None
            self._guard.notify_all()
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)

    def __del__(self):
        executor = getattr(self, "_executor", None)
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)

    # -- building a batch -----------------------------------------------------------------------

    def _image_options(self) -> dict[str, Any]:
        """Per image field: the C++ transform options and the output shape and dtype."""
        out = {}
        self._decode: Any = getattr(_core, "decode_images", None)
        for name, decoder in self.dataset.spec.items():
            if not isinstance(decoder, Image):
                continue
            options = self.transforms.core_options(decoder.size, self.transforms.layout or "TCHW")
            if options.crop != _core.CropMode.none:
                height, width = options.crop_height, options.crop_width
            else:
                height, width = options.resize_height, options.resize_width
            if not height or not width:
                raise InvalidArgumentError(
                    f"image field {name!r} has no output size: give stoker.Image(size=...) in "
                    "the spec, or transforms with resize, center_crop or random_resized_crop"
                )
            if self._decode is None:
                raise InvalidArgumentError(
                    f"image field {name!r}: this stoker was built without the image decoder"
                )
            chw = options.layout == _core.Layout.NCHW
            shape = (3, height, width) if chw else (height, width, 3)
            out[name] = (options, shape)
        return out

    def _build(self, epoch: int, ids: np.ndarray) -> dict[str, Any]:
        """Batch of samples ``ids`` (runs on a loader thread)."""
        ds = self.dataset
        ids = np.asarray(ids, np.int64)
        began = time.perf_counter()
        members, failed = self._read(ids)
        read_s = time.perf_counter() - began
        began = time.perf_counter()
        columns: dict[str, Any] = {}
        for name, decoder in ds.spec.items():
            got = members[name]
            if isinstance(decoder, Image):
                columns[name] = self._decode_images(name, ids, got, epoch, failed)
            elif isinstance(decoder, Json):
                columns.update(self._per_sample(name, decoder, ids, got, failed))
            else:
                columns[name] = self._per_sample(name, decoder, ids, got, failed)
        decode_s = time.perf_counter() - began
        keep = np.array([i not in failed for i in range(len(ids))], bool)
        if failed and self.on_error == "raise":
            first = min(failed)
            raise DatasetError(failed[first])
        batch: dict[str, Any] = {}
        for name, value in columns.items():
            if isinstance(value, tuple):  # tokens: (padded, lengths)
                padded, lengths = value
                batch[name] = self._tensor(padded[keep])
                batch[f"{name}_length"] = self._tensor(lengths[keep])
            elif isinstance(value, list):
                batch[name] = [v for v, k in zip(value, keep) if k]
            else:
                batch[name] = self._tensor(value if keep.all() else value[keep])
        batch["__key__"] = [ds.keys[i] for i in ids[keep]]
        batch["__index__"] = self._tensor(ids[keep])
        with self._lock:
            self._seconds["read_s"] += read_s
            self._seconds["decode_s"] += decode_s
            self._stats["built"] += 1
            self._stats["skipped"] += len(failed)
            self._errors.extend(failed[i] for i in sorted(failed))
        return batch

    def _tensor(self, array: np.ndarray) -> Any:
        if self._torch is None:
            return array
        if array.dtype == np.uint16 and array.ndim and self.transforms.dtype == "bfloat16":
            return self._torch.from_numpy(array.view(np.int16)).view(self._torch.bfloat16)
        return self._torch.from_numpy(np.ascontiguousarray(array))

    def _read(self, ids: np.ndarray) -> tuple[dict[str, list[Any]], dict[int, str]]:
        """The members every spec field needs, per sample (a memoryview, or None where the
        sample lacks the field), read with one call per shard; and the samples that fail,
        with why."""
        ds = self.dataset
        n = len(ids)
        failed: dict[int, str] = {}
        wanted = {name: ds.resolve_members(decoder, ids) for name, decoder in ds.spec.items()}
        members: dict[str, list[Any]] = {name: [None] * n for name in wanted}
        shards = ds.sample_shard[ids]
        bytes_read = 0
        for shard in np.unique(shards):
            rows = np.flatnonzero(shards == shard)
            numbers = []
            where: list[tuple[str, int]] = []
            for name, member in wanted.items():
                present = rows[member[rows] >= 0]
                numbers.append(member[present])
                where.extend((name, int(r)) for r in present)
            wanted_members = np.concatenate(numbers)
            try:
                data, starts = ds.read_members(int(shard), wanted_members)
            except _core.Error as error:
                # The shard cannot be read as indexed (changed, shrunk, deleted, refused by
                # its store): its samples in this batch fail, named; the others go on.
                for slot in rows.tolist():
                    failed.setdefault(slot, self._where(int(ids[slot]), "all", str(error)))
                continue
            view = memoryview(data.data)
            sizes = ds.member_sizes[int(shard)]
            for (name, slot), start, member in zip(where, starts, wanted_members):
                members[name][slot] = view[int(start) : int(start + sizes[member])]
            bytes_read += len(data)
        if ds.bad_samples:
            for row in range(n):
                why = ds.bad_samples.get(int(ids[row]))
                if why is not None:
                    failed[row] = why
        for name in wanted:
            for row in range(n):
                if members[name][row] is None and row not in failed:
                    decoder = ds.spec[name]
                    failed[row] = self._where(
                        int(ids[row]), "|".join(decoder.fields), "the sample has no such member"
                    )
        with self._lock:
            self._stats["bytes_read"] += bytes_read
        return members, failed

    def _where(self, sample: int, field: str, why: str) -> str:
        ds = self.dataset
        return f"{ds.shard_of(sample)}: sample {ds.keys[sample]!r}, field {field!r}: {why}"

    def _decode_images(
        self, name: str, ids: np.ndarray, got: list[Any], epoch: int, failed: dict[int, str]
    ) -> np.ndarray:
        options, shape = self._images[name]
        dtype = options.dtype.name  # resolved: the transforms', else the default
        out = self._buffers.take(
            (len(ids), *shape), np.uint16 if dtype == "bfloat16" else _NUMPY_DTYPES[dtype]
        )
        rows = [r for r in range(len(ids)) if got[r] is not None]
        if len(rows) < len(ids):  # the slots no image fills are zeros, as the Loader's pads
            out[[r for r in range(len(ids)) if got[r] is None]] = 0
        if not rows:
            return out
        # The binding takes one bytes object per image: a copy of each member (cheap next to
        # its decode). Samples lacking the field are already failed; the others decode into
        # their slots (directly when none is missing).
        images = [bytes(got[r]) for r in rows]
        target = out if len(rows) == len(ids) else np.zeros((len(rows), *out.shape[1:]), out.dtype)
        height, width = (shape[1], shape[2]) if shape[0] == 3 else (shape[0], shape[1])
        errors = self._decode(
            images,
            options,
            target,
            height,
            width,
            seed=self.seed,
            epoch=epoch,
            ids=np.ascontiguousarray(ids[rows]),
            threads=self.threads,
            collect_errors=True,
        )
        if target is not out:
            out[rows] = target
        field = self.dataset.resolve(self.dataset.spec[name], ids)[2]
        for k, error in enumerate(errors):
            if error and rows[k] not in failed:
                failed[rows[k]] = self._where(int(ids[rows[k]]), field[rows[k]], error)
        return out

    def _per_sample(
        self, name: str, decoder: Any, ids: np.ndarray, got: list[Any], failed: dict[int, str]
    ) -> Any:
        """A field decoded sample by sample in Python (text, labels, json, tokens, clips: the
        cheap ones, and clips, whose decode is native inside VideoReader)."""
        fields = self.dataset.resolve(decoder, ids)[2]
        n = len(ids)
        values: list[Any] = [None] * n
        clips = None
        if isinstance(decoder, Clip):
            h, w = decoder.size
            frame = (3, h, w) if decoder.layout == "TCHW" else (h, w, 3)
            clips = np.zeros((n, len(decoder.frames), *frame), np.uint8)

        def decode(row: int) -> str | None:
            """Decodes sample ``row``'s member; returns why it failed, or None."""
            member = got[row]
            try:
                if clips is not None:
                    reader = VideoReader(
                        member, name=f"{self.dataset.shard_of(int(ids[row]))}:{fields[row]}"
                    )
                    layout = "NCHW" if decoder.layout == "TCHW" else "NHWC"
                    reader.get_frames(
                        decoder.frames, size=decoder.size, layout=layout, out=clips[row]
                    )
                else:
                    values[row] = _decode_member(decoder, member)
            except (ValueError, KeyError, TypeError, _core.Error, OSError) as error:
                return self._where(int(ids[row]), fields[row], str(error) or type(error).__name__)
            return None

        rows = [row for row in range(n) if got[row] is not None and row not in failed]
        if clips is not None and self.threads > 1 and len(rows) > 1:
            # Clips decode natively (the GIL released): as many at once as there are threads.
            with ThreadPoolExecutor(self.threads, thread_name_prefix="stoker-clips") as pool:
                outcomes = list(pool.map(decode, rows))
        else:
            outcomes = [decode(row) for row in rows]
        for row, why in zip(rows, outcomes):
            if why is not None:
                failed[row] = why
        if clips is not None:
            return clips
        if isinstance(decoder, Text):
            return ["" if v is None else v for v in values]
        if isinstance(decoder, Label):
            return np.array([-1 if v is None else v for v in values], np.int64)
        if isinstance(decoder, Tokens):
            return _pad(values, decoder)
        if isinstance(decoder, Array):
            return self._stack(values, ids, fields, failed)
        columns: dict[str, Any] = {}
        for key, kind in decoder.keys.items():
            column = [None if v is None else v[key] for v in values]
            if kind == "str":
                columns[key] = ["" if c is None else str(c) for c in column]
            else:
                columns[key] = np.array([0 if c is None else c for c in column], _JSON_NUMPY[kind])
        return columns

    def _stack(
        self, values: list[Any], ids: np.ndarray, fields: list[str], failed: dict[int, str]
    ) -> np.ndarray:
        """Arrays of one shape stacked ``[B, *shape]`` (shape and dtype: the first decoded
        one's); one of another shape or dtype fails its sample; failed rows are zeros."""
        first = next(
            (v for row, v in enumerate(values) if v is not None and row not in failed), None
        )
        if first is None:
            return np.zeros((len(values), 0))
        out = np.zeros((len(values), *first.shape), first.dtype)
        for row, value in enumerate(values):
            if value is None or row in failed:
                continue
            if value.shape != first.shape or value.dtype != first.dtype:
                failed[row] = self._where(
                    int(ids[row]),
                    fields[row],
                    f"an array of shape {value.shape} and dtype {value.dtype}, where the batch's "
                    f"first is {first.shape} {first.dtype}",
                )
                continue
            out[row] = value
        return out


class _BufferPool:
    """Arrays handed out again once nobody else holds them (the consumer dropped its batch, and
    with it the tensors viewing them): at most ``capacity`` kept. When all are held, ``take``
    waits for one to be let go while the consumer is busy with its batch (a ``for`` loop lets go
    of the old batch as it takes the next, a moment later), and makes a fresh array when the
    consumer is waiting for a batch (so one that keeps its batches never blocks the loader).
    With ``STOKER_POISON_BATCHES=<0..255>`` in the environment when the pool is made (a
    debugging aid, docs/loader.md), every array ``take`` hands out, fresh or recycled, is first
    filled with that byte, as the native Loader's pool does. Thread-safe."""

    def __init__(self, capacity: int):
        self._capacity = capacity
        self._arrays: list[np.ndarray] = []
        self._lock = threading.Lock()
        self._consumer_waiting = threading.Event()
        self._poison = self._poison_from_environment()

    def consumer_waits(self, waiting: bool) -> None:
        """The consumer is (or is no longer) blocked waiting for a batch."""
        if waiting:
            self._consumer_waiting.set()
        else:
            self._consumer_waiting.clear()

    @staticmethod
    def _poison_from_environment() -> int | None:
        """The byte ``STOKER_POISON_BATCHES`` asks for, read as the native Loader reads it
        (src/pipeline/batch_pool.h); None when unset or empty."""
        value = os.environ.get("STOKER_POISON_BATCHES", "")
        if not value:
            return None
        byte = int(value) if value.isascii() and value.isdigit() else -1
        if not 0 <= byte <= 255:
            raise InvalidArgumentError(
                f"STOKER_POISON_BATCHES must be a byte value, 0 to 255, not {value!r}"
            )
        return byte

    def take(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        array = self._take(shape, dtype)
        if self._poison is not None:
            array.view(np.uint8).fill(self._poison)
        return array

    def _take(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        dtype = np.dtype(dtype)
        while True:
            with self._lock:
                same = [a for a in self._arrays if a.shape == shape and a.dtype == dtype]
                for array in same:
                    # References: the list's, `same`'s, the loop's and getrefcount's argument.
                    if sys.getrefcount(array) <= 4:
                        return array
                if len(same) < self._capacity or self._consumer_waiting.is_set():
                    return self._fresh(shape, dtype)
            # Polled: an array is let go by dropping a reference, which signals nothing.
            self._consumer_waiting.wait(0.001)

    def _fresh(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """A new array, kept for reuse in place of one nobody holds when the pool is full
        (one of another shape: the last batch of an epoch). Called with the lock held."""
        array = np.empty(shape, dtype)
        if len(self._arrays) < self._capacity:
            self._arrays.append(array)
        else:
            for k in range(len(self._arrays)):
                if sys.getrefcount(self._arrays[k]) <= 2:  # the list's and the argument
                    self._arrays[k] = array
                    break
        return array


_INT64 = np.iinfo(np.int64)


def _int64(value: int, what: str) -> int:
    """``value`` when an int64 column holds it; else a bad member's ValueError."""
    if not _INT64.min <= value <= _INT64.max:
        text = str(value)
        text = text if len(text) <= 40 else f"{text[:20]}...{text[-8:]} ({len(text)} digits)"
        raise ValueError(f"{what} {text} lies outside int64 [{_INT64.min}, {_INT64.max}]")
    return value


def _load_array(member: memoryview) -> np.ndarray:
    """The array of a ``.npy`` member; a member that holds none (empty, an ``.npz`` archive,
    pickled objects, not an npy) is a bad member's ValueError."""
    if len(member) == 0:
        raise ValueError("the member is empty (zero bytes), not a .npy array")
    try:
        array = np.load(io.BytesIO(member), allow_pickle=False)
    except (EOFError, OSError, ValueError) as error:
        raise ValueError(f"not a .npy array: {error}") from None
    if not isinstance(array, np.ndarray):  # np.load opens an .npz archive as an NpzFile
        names = list(getattr(array, "files", []))
        if hasattr(array, "close"):
            array.close()
        raise ValueError(f"an .npz archive (arrays {names[:5]}), not a .npy array") from None
    return array


def _decode_member(decoder: Any, member: memoryview) -> Any:
    if isinstance(decoder, Text):
        return bytes(member).decode("utf-8")
    if isinstance(decoder, Label):
        text = bytes(member).decode("ascii").strip()
        try:
            value = int(text)
        except ValueError:
            raise ValueError(f"a cls member holds an integer, not {text[:40]!r}") from None
        return _int64(value, "the cls label")
    if isinstance(decoder, Array):
        return _load_array(member)
    if isinstance(decoder, Tokens):
        array = _load_array(member)
        if array.dtype.kind not in "iu":
            raise ValueError(
                f"token ids are an integer array, this one is {array.dtype} ({array.dtype.str})"
            )
        if array.ndim != 1:
            raise ValueError(f"a token array is 1-D, this one has shape {array.shape}")
        if array.dtype == np.uint64 and array.size and int(array.max()) > _INT64.max:
            _int64(int(array.max()), "the token id")
        return array[: decoder.max_length] if decoder.max_length else array
    value = json.loads(bytes(member))
    if not isinstance(value, dict):
        raise ValueError(f"the json holds a {type(value).__name__}, not an object")
    for key, kind in decoder.keys.items():
        if key not in value:
            raise KeyError(f"the json has no key {key!r}")
        item = value[key]
        ok = {
            "str": isinstance(item, str),
            "bool": isinstance(item, bool),
            "int64": isinstance(item, int) and not isinstance(item, bool),
        }.get(kind, isinstance(item, (int, float)) and not isinstance(item, bool))
        if not ok:
            raise TypeError(f"the json's {key!r} is {item!r}, not a {kind}")
        if kind == "int64":
            _int64(item, f"the json's {key!r}")
        elif kind in ("float32", "float64") and isinstance(item, int):
            try:
                float(item)
            except OverflowError:
                raise ValueError(f"the json's {key!r} is an integer beyond any {kind}") from None
    return value


def _pad(values: list[Any], decoder: Tokens) -> tuple[np.ndarray, np.ndarray]:
    """Token arrays (integer, within int64: see _decode_member) padded to the longest, in the
    smallest integer type that holds them all and the pad (int64 for signed and uint64 mixed,
    exact since the ids fit int64)."""
    arrays = [v for v in values if v is not None]
    dtype = np.dtype(np.int64)
    if arrays:
        dtype = np.result_type(*{a.dtype for a in arrays}, np.min_scalar_type(decoder.pad))
    if dtype.kind not in "iu":
        dtype = np.dtype(np.int64)
    lengths = np.array([0 if v is None else len(v) for v in values], np.int64)
    padded = np.full((len(values), int(lengths.max(initial=0))), decoder.pad, dtype)
    for row, v in enumerate(values):
        if v is not None:
            padded[row, : len(v)] = v
    return padded, lengths


__all__ = ["DEFAULT_SHUFFLE_BUFFER", "ShardLoader"]
