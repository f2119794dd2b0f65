"""stoker.Loader: batches of temporal windows from a dataset, built by native threads.

    ds = stoker.LeRobotDataset(root, spec=stoker.WindowSpec(delta_timestamps=..., size=(224, 224)))
    loader = stoker.Loader(ds, batch_size=32, shuffle=True, seed=0)
    for epoch in range(epochs):
        for batch in loader:        # dict of torch.Tensor (numpy arrays without PyTorch)
            train_step(batch)

A drop-in for ``torch.utils.data.DataLoader(ds, batch_size, shuffle=True)`` over a LeRobot
dataset: the same keys, shapes and pad masks, batched. Batches arrive in order and are a
function of (seed, epoch, rank, world size) alone, whatever ``threads`` is; each epoch draws a
new order. Arrays point into the loader's batch buffers (zero-copy, through DLPack for torch);
a buffer goes back to the loader's bounded pool when the batch's arrays are released.

Tools that time the consumer's side (``stoker.profile``) plug in as a :class:`LoaderObserver`,
told of every wait for a batch and every batch handed over.

Sample ids are split between ranks as ``torch.utils.data.DistributedSampler`` splits them.
The ranks that split the data are the data-parallel ones: ``process_group=`` (Megatron's
``parallel_state.get_data_parallel_group()``, a device mesh's ``mesh["dp"].get_group()``) gives
their group, and the ranks of one model-parallel group, which share a data-parallel rank, read
the same batches. ``rank=`` and ``world_size=`` give the same numbers by hand. With neither,
they are ``torch.distributed``'s global rank and size when it is initialized, else the ``RANK``
and ``WORLD_SIZE`` environment variables, else 0 of 1; when that world spans more than one node
(``WORLD_SIZE`` > ``LOCAL_WORLD_SIZE``), the first batch logs which rank and size were used
(logger ``stoker.loader``), since under tensor or pipeline parallelism they would be wrong.

A state saved by W ranks loads into a loader of W' ranks (an elastic resume): every rank r of W
had read the global positions r, r + W, ... of the epoch's global order (the shard stream: its
own order), so what they had not read is known from one state (or from every rank's, when they
stood at different batches), and is dealt to the W' ranks, each sample once plus the padding
equal batches need; the next epochs are those of a W'-rank run. See docs/scale-out.md.
"""

from __future__ import annotations

import atexit
import functools
import logging
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from typing import Any, cast

import numpy as np

from stoker import _core
from stoker._core import DatasetError, InvalidArgumentError
from stoker.arguments import MAX_EPOCH, MAX_INT64, check_int, check_seed
from stoker.datasets.lerobot.dataset import LeRobotDataset
from stoker.datasets.mix import MixFront, MultiDataset
from stoker.datasets.shards import DEFAULT_SHUFFLE_BUFFER, Json, ShardDataset, Tokens
from stoker.sampling import (
    DistributedSampler,
    LoadBalancedSampler,
    MixSampler,
    Sampler,
)
from stoker.transforms import Transforms

logger = logging.getLogger("stoker.loader")
_STATE_VERSION = 1
# The keys of a state_dict(), which load_state_dict() requires.
_STATE_KEYS = (
    "version",
    "epoch",
    "batch",
    "seed",
    "shuffle",
    "balance",
    "batch_size",
    "drop_last",
    "rank",
    "world_size",
    "num_samples",
)
_ERROR_POLICIES = {"raise": _core.ErrorPolicy.raise_error, "skip": _core.ErrorPolicy.skip}
# What the native loader's next() returns: arrays by name, each sample's row and episode, the
# epoch and the batch's index in it.
_NativeBatch = tuple[dict[str, Any], np.ndarray, np.ndarray, int, int]
# The torch module, imported by the first Loader: PyTorch is optional, and slow to import.
torch: Any = None


def _import_torch():
    global torch
    if torch is None:
        try:
            import torch as module
        except ImportError:
            return None
        torch = module
    return torch


def _torch_distributed():
    """``torch.distributed`` when it is initialized, else None. It is initialized only in a
    process that imported torch: one that did not (numpy batches, a JAX trainer, a Ray read
    task) is not made to import it (a second, and half a gigabyte with a CUDA build)."""
    distributed = getattr(sys.modules.get("torch"), "distributed", None)
    if distributed is not None and distributed.is_available() and distributed.is_initialized():
        return distributed
    return None


def _group_partition(process_group, rank, world_size) -> tuple[int, int]:
    """This process's (rank, size) in the data-parallel ``process_group``; ``rank`` and
    ``world_size``, when given too, must be the same numbers."""
    distributed = _torch_distributed()
    if distributed is None:
        raise InvalidArgumentError(
            "process_group= needs torch.distributed initialized (init_process_group) in this "
            "process; without it give rank= and world_size="
        )
    try:
        group_rank = distributed.get_rank(group=process_group)
        group_size = distributed.get_world_size(group=process_group)
    except (RuntimeError, ValueError, TypeError) as error:
        raise InvalidArgumentError(
            f"process_group must be a torch.distributed process group, got "
            f"{type(process_group).__name__}: {error}"
        ) from error
    if group_rank < 0:
        raise InvalidArgumentError(
            f"this process (global rank {distributed.get_rank()}) is not in the process_group "
            "given: pass the data-parallel group this rank belongs to"
        )
    for name, given, found in (("rank", rank, group_rank), ("world_size", world_size, group_size)):
        if given is not None and int(given) != found:
            raise InvalidArgumentError(
                f"{name}={given}, but this process's {name} in process_group is {found}"
            )
    return group_rank, group_size


def _distributed_defaults(rank, world_size):
    """(rank, world size, where they came from) for the arguments, None where not given: the
    global ``torch.distributed`` group, else ``RANK`` / ``WORLD_SIZE``, else 0 of 1."""
    if rank is not None and world_size is not None:
        return int(rank), int(world_size), "given"
    found_rank, found_world, source = 0, 1, "default"
    distributed = _torch_distributed()
    if distributed is not None:
        found_rank, found_world = distributed.get_rank(), distributed.get_world_size()
        source = "torch.distributed's global group"
    elif "WORLD_SIZE" in os.environ:
        found_rank = int(os.environ.get("RANK", "0"))
        found_world = int(os.environ["WORLD_SIZE"])
        source = "the RANK and WORLD_SIZE environment variables"
    return (
        found_rank if rank is None else int(rank),
        found_world if world_size is None else int(world_size),
        source if rank is None and world_size is None else "given",
    )


def _partition_notice(rank: int, world_size: int, source: str) -> str | None:
    """What the first batch logs when the data-parallel rank and size were guessed from a
    world spanning more than one node (``LOCAL_WORLD_SIZE``, as torchrun sets it, names a
    node's ranks; unset, a world of several ranks is taken to span nodes)."""
    if source not in (
        "torch.distributed's global group",
        "the RANK and WORLD_SIZE environment variables",
    ):
        return None
    try:
        local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    except ValueError:
        local = 1
    if world_size <= max(1, local):
        return None
    return (
        f"stoker.Loader reads as data-parallel rank {rank} of {world_size}, taken from "
        f"{source} (no process_group= given). Under tensor or pipeline parallelism the "
        "ranks of one model-parallel group must read the same batches: pass "
        "process_group=<the data-parallel group> (Megatron: "
        "parallel_state.get_data_parallel_group(); a device mesh: mesh['dp'].get_group())"
    )


def default_threads() -> int:
    """Worker threads when ``threads=None``: the cores this process may run on, divided by
    ``LOCAL_WORLD_SIZE`` (the ranks on this node, as torchrun sets it) when several processes
    share the node; at least 1."""
    cores = _core.usable_cores()
    try:
        local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    except ValueError:
        local = 1
    return max(1, cores // max(1, local))


def _load_cuda_runtime() -> None:
    """Initializes CUDA through torch and points stoker's pinned allocator at the CUDA runtime
    library torch loaded (found in this process's memory map)."""
    torch.cuda.init()
    if os.environ.get("STOKER_CUDART"):
        return
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if "libcudart.so" in os.path.basename(path):
                os.environ["STOKER_CUDART"] = path
                return


class LoaderObserver:
    """Sees a :class:`Loader`'s iterations from the consumer's side; register one with
    :meth:`Loader.add_observer`.

    Each method does nothing by default: override those you need. They are called on the
    consumer's thread, inside its ``next()`` on the loader's iterator, so keep them short.
    ``now`` is ``time.perf_counter()`` at the event, the same for every observer.

    For one iteration the calls are: :meth:`iteration_started`, then per batch
    :meth:`wait_started` and :meth:`batch_received`, and :meth:`iteration_ended` once, whether
    the iteration finished (after a last :meth:`wait_started` that gets no batch), broke off,
    or failed.
    """

    def iteration_started(self, now: float) -> None:
        """The consumer asked for the first batch of an iteration."""

    def wait_started(self, now: float) -> None:
        """The consumer asked for the next batch: its wait (``data_wait``) begins."""

    def batch_received(self, batch: dict[str, Any], now: float) -> None:
        """The batch is ready and about to be handed to the consumer: the wait ends. Do not
        keep the batch: its buffers go back to the loader's pool when it is released."""

    def iteration_ended(self, now: float) -> None:
        """The iteration finished, broke off or failed: no batch of it follows."""


def observed_batches(
    batches: Generator[dict[str, Any], None, None], observers: Sequence[LoaderObserver]
) -> Generator[dict[str, Any], None, None]:
    """``batches``, with ``observers`` told of the iteration's events."""
    now = time.perf_counter()
    for observer in observers:
        observer.iteration_started(now)
    try:
        while True:
            now = time.perf_counter()
            for observer in observers:
                observer.wait_started(now)
            try:
                batch = next(batches)
            except StopIteration:
                return
            now = time.perf_counter()
            for observer in observers:
                observer.batch_received(batch, now)
            yield batch
            del batch  # the consumer alone decides how long a batch lives
    finally:
        batches.close()
        now = time.perf_counter()
        for observer in observers:
            observer.iteration_ended(now)


# Loaders alive in this process: closed at exit, so that no native thread (the loader's, or a
# consumer's daemon thread waiting in next()) is running while the interpreter finalizes.
_live_loaders: weakref.WeakSet[Loader] = weakref.WeakSet()
# Set by the exit hook: from then on no iteration starts (a daemon consumer looping over a
# loader would otherwise start its native threads again while the interpreter finalizes).
_exiting = False
# The threads inside a native stop() (close() from any thread, or a loader's deletion), with
# the GIL released while it joins the loader's threads, by number of calls. A daemon thread
# still inside one when the interpreter finalizes is ended on its way back into Python
# (pthread_exit, whose unwinding meets a native frame that may not throw: std::terminate,
# "terminate called without an active exception", SIGABRT): the exit hook waits for them. Once
# it has closed every loader (`_stopped_all`), a stop() has nothing left to join and none
# starts.
_stopping: dict[threading.Thread, int] = {}
_stopping_changed = threading.Condition(threading.Lock())
_stopped_all = False


def _stop_native(core: Any) -> None:
    """``core.stop()``, counted in ``_stopping`` while it runs (see there); nothing once the
    exit hook has closed every loader."""
    me = threading.current_thread()
    with _stopping_changed:
        if _stopped_all:
            return
        _stopping[me] = _stopping.get(me, 0) + 1
    try:
        core.stop()
    finally:
        with _stopping_changed:
            _stopping[me] -= 1
            if not _stopping[me]:
                del _stopping[me]
            _stopping_changed.notify_all()


def _forget_stopping_after_fork() -> None:
    """In a forked child: the parent's threads inside stop() are not here, and the lock may
    have been held by one of them at the fork."""
    global _stopping_changed
    _stopping.clear()
    _stopping_changed = threading.Condition(threading.Lock())


os.register_at_fork(after_in_child=_forget_stopping_after_fork)


@atexit.register
def _close_live_loaders() -> None:
    """Closes every loader. A consumer thread (a daemon: the others were joined before) that
    waited for a batch gets the error saying the loader was closed, and is given up to 2 s
    to leave, as is a thread inside close() (joining a loader's threads): a thread still inside
    a native call when the interpreter finalizes aborts the process, and one still running
    Python keeps what it references from being released."""
    global _exiting, _stopped_all
    _exiting = True
    loaders = list(_live_loaders)
    # The threads waiting in next(), and those iterating between two next() calls.
    consumers = {loader._waiting for loader in loaders} | {loader._owner for loader in loaders}
    consumers -= {None, threading.current_thread()}
    for loader in loaders:
        try:
            loader.close()
        except Exception:  # noqa: BLE001 - at exit, a loader that cannot close is left as it is
            pass
    deadline = time.monotonic() + 2.0
    me = threading.current_thread()
    with _stopping_changed:
        _stopped_all = True
        # Another thread's close() or deletion still joining a loader's threads.
        _stopping_changed.wait_for(
            lambda: not set(_stopping) - {me}, timeout=max(0.0, deadline - time.monotonic())
        )
    for thread in consumers:
        if thread is not None:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))


def raise_if_iterated_elsewhere(owner: threading.Thread | None, me: threading.Thread) -> None:
    """Raises ``RuntimeError`` naming ``owner`` when that live thread, not ``me``, is iterating
    a loader: one thread iterates a loader at a time, whatever its kind."""
    if owner is not None and owner is not me and owner.is_alive():
        raise RuntimeError(
            f"this Loader is being iterated by thread {owner.name!r} (ident {owner.ident}); a "
            "Loader is iterated by one thread at a time: end that iteration (finish or break "
            "its loop, or call close()) first"
        )


def raise_if_iteration_ended(run: int, current: int, closed: tuple[int, str] | None) -> None:
    """Raises ``RuntimeError`` when iteration ``run`` of a loader is not its ``current`` one:
    ended by close() (``closed``: the run it ended and the closing thread's name) or replaced
    by a newer iteration. Every loader's iterations end with these words."""
    if run == current:
        return
    if closed is not None and closed[0] == run:
        raise RuntimeError(
            f"the loader was closed (Loader.close() on thread {closed[1]!r}) during this iteration"
        )
    raise RuntimeError("another iteration of this loader started; one iteration at a time")


_NOT_A_DATASET = (
    "a stoker.Loader is the iterator itself (it builds batches on its own threads), not a "
    "Dataset: iterate it (`for batch in loader`) instead of handing it to "
    "torch.utils.data.DataLoader, pickle or another process. Where several processes read, "
    "each makes its own stoker.Loader from the dataset, which pickles"
)


class Loader:
    """Batches of a stoker dataset (:class:`stoker.LeRobotDataset`, :class:`stoker.ShardDataset`
    or a :class:`stoker.MultiDataset` of those), built on native threads by one native engine.

    Args:
        dataset: the dataset; its ``spec`` gives the window (a LeRobot dataset) or the fields
            (shards).
        batch_size: samples per batch.
        shuffle: a new random order each epoch (else dataset order). Default: True.
        seed: keys the order, the random transforms and the replacements of skipped samples.
        threads: worker threads; default: the cores this process may run on, divided by
            ``LOCAL_WORLD_SIZE`` when several ranks share the node (see :func:`default_threads`).
        prefetch: batches in the pipeline ahead of the consumer, ready or being built.
        drop_last: drop each epoch's short last batch (and, across ranks, the samples that do
            not divide evenly, as DistributedSampler does); else pad ranks by repeating samples
            and deliver the short batch.
        rank, world_size: this process's share of each epoch; see the module's notes.
        process_group: the data-parallel ``torch.distributed`` group (see the module's notes):
            this process's rank and size in it are ``rank`` and ``world_size``.
        transforms: a :class:`stoker.Transforms`; default: the dataset's ``image_transforms``
            when they are one, else the spec's size and layout, in the dataset's
            ``image_dtype`` (float32 in [0, 1] unless it says otherwise, as LeRobot). A dataset
            whose ``image_transforms`` is a Python callable has it applied to each sample's
            frames after the batch is built (the slow path, timed in :meth:`stats`). The
            dataset's depth cameras take the transforms' geometry (resize, crops and flips, the
            same draws) but keep their own dtype: uint16 samples, or float32 metres, one
            channel (see ``depth_unit`` of :class:`stoker.LeRobotDataset`).
        device: ``None`` or ``"cpu"`` keeps batches on the host; ``"cuda"`` (or ``"cuda:N"``)
            builds them in pinned memory and copies them on a side stream, the copy of batch
            n + 1 overlapping the step on batch n.
        on_error: ``"raise"`` (a failing sample stops the epoch with a :class:`stoker.Error`
            naming it) or ``"skip"`` (it is replaced by another sample drawn from the seed; the
            batch keeps its shape; see :meth:`stats`).
        output: ``"torch"``, ``"numpy"`` or ``"auto"`` (torch when it can be imported).
        balance: give every rank the same decode work in each step
            (:class:`stoker.LoadBalancedSampler` over ``dataset.sample_costs()``) instead of
            DistributedSampler's split; with one rank it only reorders inside each batch.
        sampler: any stoker sampler over the dataset's samples (a
            :class:`stoker.WeightedSampler` over episodes, for instance) instead of the order
            ``shuffle``, ``balance``, ``rank`` and ``world_size`` describe; the sampler's own
            rank and world size apply. Batches are its ids in order, as deterministic and
            resumable as the default order; ``seed`` still keys the transforms and
            replacements.
        keep_language: batches of LeRobot datasets leave out their language columns
            (``"dtype": "language"``: ``language_persistent``, ``language_events``), as
            LeRobot's training collate (``lerobot_collate_fn``) does; True keeps them, each a
            list over the batch of what ``ds[i]`` holds (lists of dicts), for training that
            renders them into prompts. Items (``ds[i]``) always hold them, as LeRobot's.

    Iteration is a DataLoader's: ``iter(loader)`` starts the current epoch from its beginning
    (resuming mid-epoch only right after :meth:`load_state_dict`), and the loader is a context
    manager that :meth:`close` s on exit.

    Threads: they start with the first iteration and keep building batches across epoch
    boundaries, so the next epoch's first batch is ready when its loop starts. They end when
    an iteration stops early (``break``, an exception in the loop, an error), on
    :meth:`close`, or when the loader is deleted.

    Thread-safety: one iteration at a time, on one thread. Starting a new one on the same
    thread ends the previous one; starting one on another thread while one is going raises a
    ``RuntimeError`` naming the thread that iterates. :meth:`close` may be called from any
    thread: a consumer waiting for a batch then gets a ``RuntimeError`` saying so.

    Processes: in a child forked after iteration started (``os.fork``, a fork-based
    ``multiprocessing`` or DataLoader worker), the next iteration starts new threads at the
    loader's position (the parent's stayed in the parent). A loader is not picklable, and not
    a Dataset for ``torch.utils.data.DataLoader`` (both raise a ``TypeError`` saying so): it is
    the iterator itself. Under spawn, pass the dataset (which pickles) and create a Loader in
    each process.
    """

    def __init__(
        self,
        dataset,
        batch_size: int,
        *,
        shuffle: bool | None = None,
        seed: int = 0,
        threads: int | None = None,
        prefetch: int = 2,
        drop_last: bool = False,
        rank: int | None = None,
        world_size: int | None = None,
        process_group: Any = None,
        transforms: Transforms | None = None,
        device=None,
        on_error: str = "raise",
        max_replacements: int = 8,
        output: str = "auto",
        balance: bool = False,
        sampler: Sampler | None = None,
        shuffle_buffer: int | None = None,
        equal_batches: bool | None = None,
        keep_language: bool = False,
        **unknown: Any,
    ):
        if unknown:
            raise TypeError(_unknown_arguments(unknown))
        if not isinstance(dataset, (LeRobotDataset, ShardDataset, MultiDataset)):
            raise TypeError(
                "stoker.Loader reads a stoker.LeRobotDataset, a stoker.ShardDataset or a "
                f"stoker.MultiDataset of those, got {type(dataset).__name__}"
                + (
                    ": a Loader is not a dataset; give it the dataset it was made from"
                    if isinstance(dataset, Loader)
                    else ""
                )
            )
        self._shards = isinstance(dataset, ShardDataset)
        if not isinstance(keep_language, bool):
            raise TypeError(f"keep_language must be True or False, got {keep_language!r}")
        # The row keys batches leave out: LeRobot's language columns, unless kept.
        self._keep_language = keep_language
        self._dropped: frozenset[str] = frozenset(
            () if keep_language else getattr(dataset, "language_columns", ())
        )
        self._mix: MixFront | None = None
        if isinstance(dataset, MultiDataset) and (balance or sampler is not None):
            raise TypeError(
                "a stoker.MultiDataset draws every slot by the datasets' weights "
                "(stoker.MixSampler): balance= and sampler= do not apply"
            )
        if isinstance(dataset, MultiDataset) and shuffle is False:
            raise ValueError(
                "a stoker.MultiDataset draws every slot at random by the datasets' weights: "
                "shuffle=False does not apply (there is no dataset order to keep)"
            )
        if not self._shards and (shuffle_buffer is not None or equal_batches is not None):
            raise TypeError(
                "shuffle_buffer= and equal_batches= order a stoker.ShardDataset's stream; "
                f"{type(dataset).__name__} samples are drawn by its sampler"
            )
        if self._shards and (balance or sampler is not None):
            raise TypeError(
                "a stoker.ShardDataset is read as a stream of shards dealt to ranks by bytes: "
                "balance= and sampler= do not apply (see docs/shards.md)"
            )
        if not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        if threads is not None and (not isinstance(threads, (int, np.integer)) or threads < 1):
            raise ValueError(f"threads must be a positive integer or None, got {threads!r}")
        if not isinstance(prefetch, (int, np.integer)) or prefetch < 1:
            raise ValueError(f"prefetch must be a positive integer, got {prefetch!r}")
        if on_error not in _ERROR_POLICIES:
            raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
        if output not in ("auto", "torch", "numpy"):
            raise ValueError(f"output must be 'auto', 'torch' or 'numpy', got {output!r}")
        if output != "numpy":
            _import_torch()
        if output == "torch" and torch is None:
            raise ValueError("output='torch' needs PyTorch, which cannot be imported")
        if shuffle_buffer is not None and (
            not isinstance(shuffle_buffer, (int, np.integer)) or shuffle_buffer < 0
        ):
            raise ValueError(
                f"shuffle_buffer must be a non-negative integer, got {shuffle_buffer!r}"
            )
        transforms_given = transforms
        if transforms is None:
            transforms = getattr(dataset, "transforms", None) or Transforms()
        if not isinstance(transforms, Transforms):
            raise TypeError(f"transforms must be a stoker.Transforms, got {type(transforms)}")
        self._torch = torch is not None and output != "numpy"
        image_dtype = getattr(dataset, "image_dtype", "uint8")
        if transforms.resolved_dtype(image_dtype) == "bfloat16" and not self._torch:
            raise ValueError("bfloat16 batches need PyTorch (numpy has no bfloat16)")
        self.device = check_device(device)
        if process_group is not None:
            rank, world_size = _group_partition(process_group, rank, world_size)

        self._arguments = dict(
            shuffle=shuffle,
            seed=seed,
            threads=threads,
            prefetch=prefetch,
            drop_last=drop_last,
            rank=rank,
            world_size=world_size,
            transforms=transforms,
            device=device,
            on_error=on_error,
            max_replacements=max_replacements,
            output=output,
            balance=balance,
            sampler=sampler,
        )
        if self._shards:
            self._arguments.update(shuffle_buffer=shuffle_buffer, equal_batches=equal_batches)
        self.dataset: Any = dataset
        self.batch_size = int(batch_size)
        self.seed = check_seed(seed)
        self.drop_last = bool(drop_last)
        self.balance = bool(balance)
        self.transforms = transforms
        self.on_error = on_error
        options = _core.LoaderOptions()
        options.batch_size = self.batch_size
        options.threads = default_threads() if threads is None else int(threads)
        options.prefetch = int(prefetch)
        options.drop_last = self.drop_last
        options.seed = self.seed
        options.on_error = _ERROR_POLICIES[on_error]
        options.max_replacements = int(max_replacements)
        options.pinned_memory = self.device is not None
        # What builds the native loader from the order's native sampler: the dataset's own
        # call (its native_loader), again in a forked child, where the parent's cannot run,
        # and when the order changes.
        self._native_loader: Callable[[Any], Any]
        self.sampler: Sampler | _ShardStream
        self._partition_notice: str | None = None  # logged with the first batch
        if self._shards:
            self._init_shards(
                dataset, shuffle, rank, world_size, shuffle_buffer, equal_batches, options
            )
        elif isinstance(dataset, MultiDataset):
            self._init_mix(dataset, transforms_given, rank, world_size, options)
        else:
            self._init_episodes(dataset, sampler, shuffle, rank, world_size, options)
        self._core: Any = self._native_loader(self.sampler.native)  # None: to build again
        self._remote_base = _core.remote_stats()
        self._pid = os.getpid()
        self._threads = int(self._core.stats()["threads"])
        self._epoch = 0
        self._batch = 0
        self._observers: list[LoaderObserver] = []
        # Iterations: each has a run number; one that is not the current run has ended (a
        # newer one started, or close()). `_owner` is the thread of the current run, until it
        # ends; `_waiting` the thread inside the native next(), which no other call may join.
        # Reentrant: a generator of this loader finalized by the garbage collector while the
        # guard is held ends its iteration under it.
        self._guard = threading.Condition(threading.RLock())
        self._run = 0
        self._owner: threading.Thread | None = None
        self._waiting: threading.Thread | None = None
        self._closed: tuple[int, str] | None = None  # (run, closing thread's name)
        self._position_generation = 0  # bumped by set_epoch and load_state_dict
        # Set by load_state_dict: the next iteration resumes mid-epoch instead of starting the
        # epoch from its beginning.
        self._resume = False
        self._python_transform_base = self._python_transform_seconds()
        _live_loaders.add(self)

    # ---- Iteration --------------------------------------------------------------------------

    def _init_episodes(self, dataset, sampler, shuffle, rank, world_size, options):
        """The order and native arguments of a dataset of episodes (a LeRobotDataset)."""
        self.sampler = self._sampler(sampler, shuffle, rank, world_size)
        self.rank, self.world_size = self.sampler.rank, self.sampler.world_size
        self.shuffle = bool(self.sampler.config.get("shuffle", False))
        self._check_epoch_has_a_batch()
        self._native_loader = functools.partial(
            dataset.native_loader, options=options, transforms=self.transforms
        )

    def _init_shards(
        self, dataset, shuffle, rank, world_size, shuffle_buffer, equal_batches, options
    ):
        """The order and native arguments of a stream of shards: shards dealt to ranks by
        bytes each epoch, read through a shuffle buffer (stoker/shard_order.h)."""
        if dataset.damaged and self.on_error == "raise":
            url, damage = dataset.damaged[0]
            raise DatasetError(
                f"{url}: {damage} ({len(dataset.damaged)} damaged shard(s) in the dataset; "
                "on_error='skip' reads the samples before the damage and names the shards in "
                "stats()['damaged_shards'])"
            )
        self.rank, self.world_size, source = _distributed_defaults(rank, world_size)
        self._partition_notice = _partition_notice(self.rank, self.world_size, source)
        if not 0 <= self.rank < self.world_size:
            raise ValueError(
                f"rank must be in [0, world_size), got {self.rank} of {self.world_size}"
            )
        self.shuffle = True if shuffle is None else bool(shuffle)
        self.shuffle_buffer = (
            DEFAULT_SHUFFLE_BUFFER if shuffle_buffer is None else int(shuffle_buffer)
        )
        self.equal_batches = bool(equal_batches)
        self.balance = False
        self.sampler = _ShardStream(self, dataset)
        self._check_shards_make_a_batch()
        self._native_loader = functools.partial(
            dataset.native_loader, options=options, transforms=self.transforms
        )

    def _init_mix(self, dataset, transforms, rank, world_size, options):
        """The order and native parts of a mix: each slot an independent weighted draw
        (stoker.MixSampler), built by its dataset's source in one native loader."""
        rank, world_size, source = _distributed_defaults(rank, world_size)
        self._partition_notice = _partition_notice(rank, world_size, source)
        self.sampler = MixSampler(
            dataset.weights,
            dataset.sizes,
            seed=self.seed,
            rank=rank,
            world_size=world_size,
            drop_last=self.drop_last,
        )
        self.rank, self.world_size = rank, world_size
        self.shuffle = True
        self._check_epoch_has_a_batch()
        self._mix = MixFront(dataset, transforms, keep_language=self._keep_language)
        self._arguments["transforms"] = transforms  # None: each dataset's own
        self._native_loader = functools.partial(self._mix.native, options=options)

    def __reduce__(self):
        raise TypeError(_NOT_A_DATASET + " (a Loader does not pickle)")

    def __getitem__(self, index):
        raise TypeError(_NOT_A_DATASET + " (a Loader has no items to index)")

    def __len__(self) -> int:
        """Batches in the current epoch for this rank (for a ShardDataset, ranks and epochs
        may differ by about a shard's worth: see docs/shards.md)."""
        return self._batches_in(self._epoch)

    @property
    def _stream(self) -> _ShardStream:
        """A ShardDataset's order."""
        return cast(_ShardStream, self.sampler)

    def _batches_in(self, epoch: int) -> int:
        return int(self._native().batches_in_epoch(epoch))

    def batches_in_epoch(self, epoch: int) -> int:
        """Batches of ``epoch`` for this rank."""
        return self._batches_in(check_int("epoch", epoch, 0, MAX_EPOCH))

    def epoch_order(self, epoch: int | None = None) -> np.ndarray:
        """The sample ids this rank's batches take in ``epoch`` (default: the current one), in
        order, before any replacement of a skipped sample."""
        epoch = self._epoch if epoch is None else check_int("epoch", epoch, 0, MAX_EPOCH)
        if self._shards:
            return self._stream.epoch_order(epoch)
        return cast(Sampler, self.sampler).indices(epoch)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        """An iteration over the rest of the current epoch, as a DataLoader's: it starts the
        epoch from its beginning, unless :meth:`load_state_dict` just set a position mid-epoch
        (an iteration broken off mid-epoch does not leave one). An epoch iterated to its end
        moves the loader on to the next."""
        host = self._host_batches()
        batches = host if self.device is None else copied_to_device(host, self.device)
        if self._observers:
            batches = observed_batches(batches, tuple(self._observers))
        return batches

    def add_observer(self, observer: LoaderObserver) -> None:
        """Tells ``observer`` of the events of every iteration that starts from now on (see
        :class:`LoaderObserver`). Observers are fixed when an iteration starts."""
        if not isinstance(observer, LoaderObserver):
            raise TypeError(f"observer must be a stoker.LoaderObserver, got {type(observer)}")
        self._observers.append(observer)

    def remove_observer(self, observer: LoaderObserver) -> None:
        """Stops telling ``observer`` of the iterations that start from now on. Raises
        ``ValueError`` when it is not registered."""
        self._observers.remove(observer)

    @property
    def threads(self) -> int:
        """The worker threads building batches (the ``threads`` argument, or the cores this
        process may run on)."""
        return self._threads

    @property
    def fields(self) -> dict[str, tuple[str, tuple[int, ...]]]:
        """The arrays of a batch, as built: name -> (dtype, shape), ``shape[0]`` being the
        batch size (the last batch of an epoch may be shorter). Batches also hold ``task``."""
        fields = {}
        for name, dtype, shape in self._native().fields:
            fields[name] = (dtype, tuple(shape))
        return fields

    def set_epoch(self, epoch: int) -> None:
        """Starts the next iteration at the beginning of ``epoch`` (0 <= epoch < 2**32;
        iteration otherwise moves to the next epoch by itself each time one is finished). An
        iteration going on ends at its next step."""
        epoch = check_int("epoch", epoch, 0, MAX_EPOCH)
        with self._guard:
            self._epoch, self._batch = epoch, 0
            self._position_generation += 1

    def set_position(self, epoch: int, batch: int) -> None:
        """Starts the next iteration at batch ``batch`` of ``epoch`` (what a state_dict saved
        there restores, without one: a Ray read task's first block). An iteration going on
        ends at its next step. Raises :class:`stoker.InvalidArgumentError` for an epoch
        outside [0, 2**32) or a batch outside [0, batches_in_epoch(epoch)]."""
        epoch = check_int("epoch", epoch, 0, MAX_EPOCH)
        batch = check_int("batch", batch, 0, self._batches_in(epoch))
        with self._guard:
            self._epoch, self._batch = epoch, batch
            self._position_generation += 1
            self._resume = True

    @property
    def epoch(self) -> int:
        return self._epoch

    def state_dict(self) -> dict[str, Any]:
        """Where iteration stands: restoring it with :meth:`load_state_dict` (in this or a new
        process) continues with exactly the batches that had not been delivered. For a
        ShardDataset it also holds the shard cursor and the shuffle buffer at that point (the
        next shard to read from and its next sample, the ids held), which loading checks."""
        state: dict[str, Any] = {
            "version": _STATE_VERSION,
            "epoch": self._epoch,
            "batch": self._batch,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "balance": self.balance,
            "batch_size": self.batch_size,
            "drop_last": self.drop_last,
            "rank": self.rank,
            "world_size": self.world_size,
            "num_samples": len(self.dataset),
            "sampler": self.sampler.config,
        }
        if self._shards:
            state["cursor"] = self._stream.cursor(self._epoch, self._batch * self.batch_size)
        state["elastic"] = _elastic_entry(self.sampler.resume, self._epoch, self._shards)
        return state

    def load_state_dict(self, state: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> None:
        """Continues from a :meth:`state_dict` (of a loader with the same dataset, batch size,
        seed and order): the next iteration delivers exactly the batches that had not been
        delivered. An iteration going on ends at its next step.

        A state saved on another world size resumes elastically: the samples the saving ranks
        had not delivered in that epoch are dealt over this loader's ranks (each once, plus
        the padding equal batches need), and the next epochs are this world size's. One rank's
        state is enough when every rank saved at the same batch (synchronous data-parallel
        training); otherwise pass every rank's states as a list (e.g. from
        ``torch.distributed.all_gather_object``), which a shard stream's ranks may need.

        Raises :class:`stoker.InvalidArgumentError` (a ``ValueError``) naming the field, for
        a state that is not one (missing keys, wrong types, an epoch outside [0, 2**32) or a
        batch outside the epoch) or that another configuration saved (dataset, seed, batch
        size, order), and :class:`stoker.DatasetError` when the shards changed since.
        """
        states = self._checked_states(state)
        first = states[0]
        epoch = check_int("state['epoch']", first["epoch"], 0, MAX_EPOCH)
        if first["world_size"] != self.world_size:
            self._resume_elastically(states, epoch)
            return
        mine = states[self.rank] if len(states) > 1 else first
        self._use_order(self._order_resumed(mine.get("elastic"), epoch, self.rank, self.world_size))
        batch = check_int("state['batch']", mine["batch"], 0, self._batches_in(epoch))
        if self._shards and self._stream.cursor(epoch, batch * self.batch_size) != mine.get(
            "cursor"
        ):
            raise DatasetError(
                "the shard cursor and shuffle buffer recomputed for this position differ from "
                "the saved ones: the shards changed since the state was saved"
            )
        self.set_position(epoch, batch)

    def _checked_states(self, state) -> list[Mapping[str, Any]]:
        """A state, or every rank's, checked against this loader's configuration: a list
        ordered by rank."""
        if isinstance(state, Mapping):
            states = [state]
        elif isinstance(state, Sequence) and not isinstance(state, (str, bytes)) and state:
            states = list(state)
        else:
            raise InvalidArgumentError(
                "a loader state is the dict Loader.state_dict() returns (or a list of every "
                f"rank's), got {type(state).__name__}"
            )
        mine = self.state_dict()
        # States saved before samplers were recorded have no "sampler": shuffle and balance
        # describe their order.
        keys = ["seed", "shuffle", "balance", "batch_size", "drop_last", "num_samples"]
        for one in states:
            if not isinstance(one, Mapping):
                raise InvalidArgumentError(
                    f"a loader state is a dict, got {type(one).__name__} in the list of states"
                )
            missing = [key for key in _STATE_KEYS if key not in one]
            if missing:
                raise InvalidArgumentError(
                    f"the loader state lacks {', '.join(repr(k) for k in missing)}: it is not a "
                    "Loader.state_dict()"
                )
            if one["version"] != _STATE_VERSION:
                raise InvalidArgumentError(
                    f"state['version'] is {one['version']!r}: this loader reads version "
                    f"{_STATE_VERSION}"
                )
            check_int("state['world_size']", one["world_size"], 1, MAX_INT64)
            for key in keys + (["sampler"] if "sampler" in one else []):
                if one[key] != mine[key]:
                    raise InvalidArgumentError(
                        f"the state was saved with {key}={one[key]!r}, this loader "
                        f"has {key}={mine[key]!r}; the remaining batches would differ"
                    )
        if len(states) == 1:
            return states
        world = states[0]["world_size"]
        ranks = sorted(one["rank"] for one in states)
        if any(one["world_size"] != world for one in states) or ranks != list(range(world)):
            raise InvalidArgumentError(
                f"a list of states holds every rank's state once; got ranks {ranks} of "
                f"world_size {sorted({one['world_size'] for one in states})}"
            )
        for key in ("epoch", "elastic"):
            if len({repr(one.get(key)) for one in states}) > 1:
                raise InvalidArgumentError(
                    f"the ranks' states differ in {key!r}: they were not saved at the same step"
                )
        return sorted(states, key=lambda one: one["rank"])

    def _order_resumed(self, elastic, epoch: int, rank: int, world_size: int):
        """This loader's order for rank ``rank`` of ``world_size``, resuming as a state's
        ``"elastic"`` entry says (None: whole epochs)."""
        resume = _resume_of(elastic, epoch, self._shards)
        if (rank, world_size, resume) == (self.rank, self.world_size, self.sampler.resume):
            return self.sampler
        return self.sampler.repartitioned(rank, world_size, resume=resume)

    def _resume_elastically(self, states: list[Mapping[str, Any]], epoch: int) -> None:
        """Loads states saved on another world size: deals what their ranks had not
        delivered of ``epoch`` over this loader's ranks."""
        b = self.batch_size
        world = int(states[0]["world_size"])
        elastic = states[0].get("elastic")
        batches = [one["batch"] for one in states] if len(states) > 1 else [states[0]["batch"]]
        batches = batches * (world if len(states) == 1 else 1)
        if not self._shards:
            if len(set(batches)) > 1:
                raise InvalidArgumentError(
                    f"the ranks' states stand at batches {sorted(set(batches))}: resuming on "
                    "another world size needs every rank at the same batch, as synchronous "
                    "data-parallel training saves them"
                )
            saved = cast(Sampler, self._order_resumed(elastic, epoch, 0, world))
            in_epoch = saved.native.epoch_size(epoch)
            saved_batches = in_epoch // b if self.drop_last else -(-in_epoch // b)
            batch = check_int("state['batch']", batches[0], 0, saved_batches)
            try:  # the sampler's arithmetic: what the saving ranks had consumed of the epoch
                consumed = saved.native.elastic_remainder(epoch, batch * b)
            except InvalidArgumentError as error:
                raise InvalidArgumentError(
                    f"the state stands at batch {batch} of {b} samples: {error}"
                ) from None
            if batch == saved_batches:
                self._finish_epoch(epoch)
                return
            self._use_order(self.sampler.repartitioned(self.rank, self.world_size, resume=consumed))
            self.set_position(epoch, 0)
            return
        streams = [
            cast(_ShardStream, self._order_resumed(elastic, epoch, k, world)) for k in range(world)
        ]
        done = True
        for k, stream in enumerate(streams):
            in_epoch = stream.native.epoch_size(epoch)
            rank_batches = in_epoch // b if self.drop_last else -(-in_epoch // b)
            check_int(f"state['batch'] of rank {k}", batches[k], 0, rank_batches)
            done = done and batches[k] == rank_batches
        for one in states:
            k = int(one["rank"]) if len(states) > 1 else int(states[0]["rank"])
            if streams[k].cursor(epoch, batches[k] * b) != one.get("cursor"):
                raise DatasetError(
                    f"the shard cursor and shuffle buffer of rank {k} recomputed for its saved "
                    "position differ from the saved ones: the shards changed since the state "
                    "was saved"
                )
        if done:
            self._finish_epoch(epoch)
            return
        rest = streams[0].native.remainder(epoch, [batch * b for batch in batches])
        self._use_order(self._stream.repartitioned(self.rank, self.world_size, resume=rest))
        self.set_position(epoch, 0)

    def _finish_epoch(self, epoch: int) -> None:
        """Loads a state saved at the end of ``epoch``: the next iteration starts the next."""
        self._use_order(self._order_resumed(None, epoch, self.rank, self.world_size))
        if epoch < MAX_EPOCH:
            self.set_position(epoch + 1, 0)
        else:
            self.set_position(epoch, self._batches_in(epoch))

    def _use_order(self, order) -> None:
        """Draws from ``order`` from now on (a sampler, or a shard stream): the native loader
        is built again with it. An iteration going on ends at its next step."""
        if order is self.sampler:
            return
        self._adopt_process()
        with self._guard:
            if not self._guard.wait_for(lambda: self._waiting is None, timeout=60):
                raise RuntimeError(
                    f"thread {getattr(self._waiting, 'name', '?')!r} did not leave this "
                    "Loader's next() within 60 s"
                )
            self._position_generation += 1
            old, self._core = self._core, None
            self.sampler = order
        if old is not None:
            _stop_native(old)

    def stats(self) -> dict[str, Any]:
        """Per-stage seconds (summed over threads), data_wait per batch (seconds the consumer
        blocked in ``next``: the latest 65,536 batches', a bound on the memory of a long run)
        with its p50 / p95 / max and ``data_wait_total`` over every batch, the ready-queue
        depth, decoder work, skipped samples with their reasons, the memory bound of the batch
        pool, and under ``"remote"`` the object-storage reads (requests, retries, failures,
        bytes fetched, cache hits and misses, seconds waited) of this process since the stats
        were last reset."""
        s = self._native().stats()
        wait = s["data_wait"]
        s["data_wait_p50"] = float(np.percentile(wait, 50)) if len(wait) else 0.0
        s["data_wait_p95"] = float(np.percentile(wait, 95)) if len(wait) else 0.0
        s["data_wait_max"] = float(wait.max()) if len(wait) else 0.0
        s["memory_bound_bytes"] = s["batch_bytes"] * max(s["pool_batches"], s["buffers_allocated"])
        # Remote reads (S3, HTTP) since the loader was made or its stats reset: requests,
        # retries, failures, bytes, cache hits, wait. Counted per process, so loaders that run
        # at the same time share them.
        now = _core.remote_stats()
        s["remote"] = {key: now[key] - self._remote_base.get(key, 0) for key in now}
        # The dataset's Python image_transforms, run on the consumer's thread: the slow path.
        s["python_transform_s"] = self._python_transform_seconds() - self._python_transform_base
        if self._shards:
            s["damaged_shards"] = [f"{url}: {why}" for url, why in self.dataset.damaged]
        return s

    def with_options(self, **changes) -> Loader:
        """A new loader over the same dataset with the same arguments except ``changes``
        (e.g. ``threads=4``), starting at epoch 0."""
        arguments = dict(self._arguments, **changes)
        batch_size = arguments.pop("batch_size", self.batch_size)
        return Loader(self.dataset, batch_size, **arguments)

    def reset_stats(self) -> None:
        self._native().reset_stats()
        self._remote_base = _core.remote_stats()
        self._python_transform_base = self._python_transform_seconds()

    def __enter__(self) -> Loader:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        """Ends iteration now: drops the batches in flight and joins the threads. May be called
        from any thread: a consumer waiting for a batch gets a ``RuntimeError`` saying the loader
        was closed. A later iteration starts the threads again."""
        self._adopt_process()
        with self._guard:
            self._closed = (self._run, threading.current_thread().name)
            self._run += 1
            self._owner = None
        if self._core is not None:
            _stop_native(self._core)

    def __del__(self):
        core = getattr(self, "_core", None)
        if core is not None:
            _stop_native(core)  # in a forked child, stop() does nothing and the destructor leaks

    def __repr__(self) -> str:
        return (
            f"Loader({self.dataset!r}, batch_size={self.batch_size}, shuffle={self.shuffle}, "
            f"seed={self.seed}, rank={self.rank}/{self.world_size}, "
            f"{len(self)} batches per epoch)"
        )

    # ---- Internals --------------------------------------------------------------------------

    def _sampler(self, sampler, shuffle, rank, world_size) -> Sampler:
        """The order: the sampler given, checked against the dataset and the other arguments,
        or the one ``shuffle``, ``balance``, ``rank`` and ``world_size`` describe."""
        if sampler is None:
            rank, world_size, source = _distributed_defaults(rank, world_size)
            self._partition_notice = _partition_notice(rank, world_size, source)
            shuffle = True if shuffle is None else shuffle
            if self.balance:
                return LoadBalancedSampler(
                    self.dataset.sample_costs(),
                    batch_size=self.batch_size,
                    rank=rank,
                    world_size=world_size,
                    shuffle=shuffle,
                    seed=self.seed,
                    drop_last=self.drop_last,
                )
            return DistributedSampler(
                len(self.dataset),
                rank=rank,
                world_size=world_size,
                shuffle=shuffle,
                seed=self.seed,
                drop_last=self.drop_last,
            )
        if not isinstance(sampler, Sampler):
            raise TypeError(f"sampler must be a stoker sampler, got {type(sampler).__name__}")
        if self.balance or shuffle is not None:
            raise ValueError(
                "a sampler decides the order: give sampler= without shuffle= or balance="
            )
        if sampler.dataset_size != len(self.dataset):
            raise ValueError(
                f"the sampler draws from {sampler.dataset_size} samples, the dataset has "
                f"{len(self.dataset)}"
            )
        for name, given, its in (
            ("rank", rank, sampler.rank),
            ("world_size", world_size, sampler.world_size),
        ):
            if given is not None and int(given) != its:
                raise ValueError(f"{name}={given}, but the sampler's {name} is {its}")
        return sampler

    def _check_epoch_has_a_batch(self) -> None:
        """Refuses a configuration whose epochs have no batch, with its numbers (the native
        loader refuses it too, with fewer words)."""
        samples, n = len(cast(Sampler, self.sampler)), len(self.dataset)
        if n == 0:
            raise InvalidArgumentError(f"the dataset {self.dataset!r} is empty: it has no sample")
        if samples >= self.batch_size or (samples > 0 and not self.drop_last):
            return
        given = (
            f"an epoch would have no batch: the sampler gives rank {self.rank} (world_size "
            f"{self.world_size}) {samples} samples per epoch (the dataset has {n})"
        )
        if samples > 0:
            why = (
                f": fewer than batch_size {self.batch_size}, and drop_last=True drops a short "
                "batch. Use a smaller batch_size, drop_last=False or fewer ranks"
            )
        elif self.drop_last:
            why = (
                f", so no batch of batch_size {self.batch_size}: drop_last=True drops the "
                "samples left over after an equal split between the ranks. Use drop_last=False "
                "or fewer ranks"
            )
        else:
            why = f", so no batch of batch_size {self.batch_size} (drop_last=False)"
        raise InvalidArgumentError(given + why)

    def _adopt_process(self) -> None:
        """In a child forked after this loader was made: forgets the parent's threads and
        locks, and drops the native loader (whose threads stayed in the parent; in a child its
        destructor leaves its memory to the parent's pages instead of joining them). The
        position stays; :meth:`_native` builds a new native loader when one is needed."""
        if self._pid == os.getpid():
            return
        self._guard = threading.Condition(threading.RLock())
        self._owner = self._waiting = None
        self._core = None
        self._pid = os.getpid()

    def _native(self) -> Any:
        """The native loader of this process."""
        self._adopt_process()
        if self._core is None:
            self._core = self._native_loader(self.sampler.native)
        return self._core

    def _begin(self) -> tuple[int, int, Any]:
        """Starts an iteration on this thread: its run number, the position generation it
        started at, and the native loader, running from the loader's position."""
        self._adopt_process()
        if _exiting:
            raise RuntimeError("the interpreter is exiting: a Loader starts no new iteration")
        me = threading.current_thread()
        with self._guard:
            raise_if_iterated_elsewhere(self._owner, me)
            # A closed iteration's consumer may still be leaving the native next(): it was
            # woken and returns at once.
            if not self._guard.wait_for(lambda: self._waiting in (None, me), timeout=60):
                raise RuntimeError(
                    f"thread {getattr(self._waiting, 'name', '?')!r} did not leave this "
                    "Loader's next() within 60 s of its iteration's end"
                )
            self._run += 1
            self._owner = me
            run, generation = self._run, self._position_generation
            # An epoch whose last batch was taken without asking for the next one (islice,
            # zip, a break on it) is over: go on with the next.
            if self._batch >= len(self):
                self._epoch, self._batch = self._epoch + 1, 0
            elif not self._resume:
                self._batch = 0  # as a DataLoader: a new iteration starts its epoch
            self._resume = False
        try:
            core = self._start_if_needed()
        except BaseException:
            self._end(run, stop=False)
            raise
        return run, generation, core

    def _start_if_needed(self) -> Any:
        """The native loader, running from the loader's position. The run goes on across
        epochs: when one finishes, its threads are already building the next epoch's first
        batches; an iteration that starts elsewhere restarts it."""
        core = self._native()
        position = (self._epoch, self._batch)
        if not (core.running and core.position == position):
            core.start(*position, 0)
        return core

    def _end(self, run: int, stop: bool) -> None:
        """Ends iteration ``run``: when it is still the current one, forgets its thread and,
        with ``stop``, ends the native run (joining its threads)."""
        self._adopt_process()
        with self._guard:
            current = run == self._run
            if current:
                self._owner = None
        if current and stop and self._core is not None:
            _stop_native(self._core)

    def _next(self, run: int, generation: int, core: Any) -> tuple[Any, Any]:
        """The next native batch of iteration ``run`` and the native loader that gave it; no
        batch (None) when the position was moved under the iteration (set_epoch,
        load_state_dict). Raises when the iteration was closed or replaced."""
        self._adopt_process()
        me = threading.current_thread()
        with self._guard:
            self._raise_if_ended(run)
            if generation != self._position_generation:
                return None, core
            self._owner = self._waiting = me  # an iterator may be handed to another thread
        failure: BaseException | None = None
        try:
            if core is not self._native():  # a forked child goes on with its parent's run
                core = self._start_if_needed()
            got = core.next(self._torch)
        except BaseException as error:
            failure = error
        with self._guard:
            self._waiting = None
            self._guard.notify_all()
            ended = run != self._run
        if ended and (failure is None or isinstance(failure, _core.Error)):
            self._raise_if_ended(run)  # the native error only says the run stopped under it
        if failure is not None:
            raise failure
        if got is None:
            raise RuntimeError("the loader's native run ended during iteration")
        return got, core

    def _raise_if_ended(self, run: int) -> None:
        """Raises when iteration ``run`` was closed or replaced by a newer one."""
        raise_if_iteration_ended(run, self._run, self._closed)

    def _host_batches(self):
        run, generation, core = self._begin()
        n = len(self)
        epoch, batch = self._epoch, self._batch
        delivered_all = False
        try:
            while batch < n:
                got, core = self._next(run, generation, core)
                if got is None:
                    return  # set_epoch / load_state_dict: the next iteration starts there
                arrays, samples, episodes, _, _ = cast(_NativeBatch, got)
                batch += 1
                delivered_all = batch == n
                with self._guard:
                    if generation == self._position_generation:
                        # The epoch's last batch moves the position to the next epoch: every
                        # iteration that starts after it gets a whole epoch.
                        self._epoch, self._batch = (
                            (epoch + 1, 0) if delivered_all else (epoch, batch)
                        )
                if self._partition_notice is not None:
                    logger.warning(self._partition_notice)
                    self._partition_notice = None
                yield self._item(arrays, samples, episodes)
        finally:
            # After the epoch's last batch the run goes on: its threads build the next epoch's
            # first batches. Otherwise (a break, an error, the generator dropped) they stop.
            self._end(run, stop=not delivered_all)

    def _item(
        self, arrays: dict[str, Any], samples: np.ndarray, episodes: np.ndarray
    ) -> dict[str, Any]:
        if self._shards:
            return self._shard_item(arrays, samples)
        if self._mix is not None:
            return self._mix.item(arrays, samples, episodes, torch if self._torch else None)
        return self.dataset.batch_items(
            arrays,
            samples,
            episodes,
            torch_module=torch if self._torch else None,
            stack=self._stack,
            dropped=self._dropped,
        )

    def _shard_item(self, arrays: dict[str, Any], samples: np.ndarray) -> dict[str, Any]:
        """A shard batch in the spec's order: each field (a json field as its keys, tokens
        with ``<name>_length``), then ``__key__`` and ``__index__``."""
        item: dict[str, Any] = {}
        for name, decoder in self.dataset.spec.items():
            if isinstance(decoder, Json):
                for key in decoder.keys:
                    item[key] = arrays[key]
                continue
            item[name] = arrays[name]
            if isinstance(decoder, Tokens):
                item[f"{name}_length"] = arrays[f"{name}_length"]
        item["__key__"] = arrays["__key__"]
        item["__index__"] = torch.from_numpy(samples) if self._torch else samples
        return item

    def _check_shards_make_a_batch(self) -> None:
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
        lengths = self._stream.rank_lengths(0)
        fewest = min(range(world), key=lambda r: lengths[r])
        samples = lengths[fewest]
        if samples >= self.batch_size or (samples > 0 and not self.drop_last):
            return
        cut = ", and equal_batches=True cuts every rank to that count" if self.equal_batches else ""
        given = (
            f"an epoch would have no batch: the shards dealt to rank {fewest} (world_size "
            f"{world}) hold {samples} samples in epoch 0 (the dataset has {n} in "
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

    def _stack(self, values):
        return torch.stack(values) if self._torch else np.stack(values)

    def _python_transform_seconds(self) -> float:
        seconds = getattr(self.dataset, "python_transform_seconds", None)
        return seconds() if seconds is not None else 0.0


# torch.utils.data.DataLoader's arguments that stoker.Loader answers otherwise, and how.
_DATALOADER_EQUIVALENTS = {
    "num_workers": "threads= (native decode threads in this process, no worker processes; "
    "default: the cores divided by LOCAL_WORLD_SIZE)",
    "pin_memory": "device='cuda' (batches built in pinned memory, copied on a side stream)",
    "pin_memory_device": "device='cuda:N'",
    "persistent_workers": "nothing: the loader's threads keep building across epochs",
    "prefetch_factor": "prefetch= (batches in flight for the whole loader, not per worker)",
    "collate_fn": "nothing: every sample is written straight into its slot of the batch; "
    "change the batch dict in your loop, or use transforms=",
    "worker_init_fn": "nothing: there are no worker processes",
    "multiprocessing_context": "nothing: there are no worker processes",
    "generator": "seed= (the order, the transforms and the replacements are keyed by it)",
    "batch_sampler": "sampler= (a stoker sampler) with batch_size=",
    "timeout": "nothing: a failing sample is an error or a replacement (on_error=)",
    "in_order": "nothing: batches always come in order",
    "image_dtype": "an argument of the dataset, not the loader: "
    "stoker.LeRobotDataset(..., image_dtype='uint8')",
}


def _unknown_arguments(unknown: Mapping[str, Any]) -> str:
    """The TypeError's message for arguments stoker.Loader does not take: each DataLoader
    argument with its stoker equivalent."""
    lines = [f"stoker.Loader got unexpected arguments {sorted(unknown)}"]
    for name in sorted(unknown):
        if name in _DATALOADER_EQUIVALENTS:
            lines.append(f"  {name}=: use {_DATALOADER_EQUIVALENTS[name]}")
    return "\n".join(lines)


class _ShardStream:
    """The order of a ShardDataset's epochs for one rank: the native ShardStreamSampler
    (stoker/shard_order.h) the loader draws its ids from, with what a state_dict records."""

    def __init__(
        self,
        loader: Loader,
        dataset: ShardDataset,
        rank: int | None = None,
        world_size: int | None = None,
        resume: tuple[int, int, list[tuple[int, int, int]]] | None = None,
    ):
        self.rank = loader.rank if rank is None else rank
        self.world_size = loader.world_size if world_size is None else world_size
        # An elastic resume: (epoch, saving world size, [(rank, begin, end), ...]), or None.
        self.resume = resume
        self._loader = loader
        self._dataset = dataset
        self._buffer = loader.shuffle_buffer if loader.shuffle else 0
        self._seed = loader.seed
        self.native = _core.ShardStreamSampler(
            dataset.shard_samples.astype(np.int64),
            dataset.shard_bytes,
            shuffle=loader.shuffle,
            seed=loader.seed,
            shuffle_buffer=self._buffer,
            rank=self.rank,
            world_size=self.world_size,
            equal_batches=loader.equal_batches,
            drop_last=loader.drop_last,
            batch_size=loader.batch_size,
            resume=resume,
        )
        self.config = {
            "kind": "ShardStream",
            "shuffle": loader.shuffle,
            "shuffle_buffer": loader.shuffle_buffer,
            "equal_batches": loader.equal_batches,
            "num_shards": len(dataset.urls),
        }

    def repartitioned(self, rank: int, world_size: int, *, resume=None) -> _ShardStream:
        """The same stream for rank ``rank`` of ``world_size``, resuming as ``resume`` says
        (what :meth:`_core.ShardStreamSampler.remainder` gives, or None)."""
        return _ShardStream(self._loader, self._dataset, rank, world_size, resume)

    def rank_lengths(self, epoch: int) -> list[int]:
        """Samples each rank's shards hold in ``epoch``."""
        ranks = _core.deal_shards(
            self._dataset.shard_bytes, self._loader.shuffle, self._seed, epoch, self.world_size
        )
        return [int(self._dataset.shard_samples[np.asarray(r, np.int64)].sum()) for r in ranks]

    def epoch_order(self, epoch: int) -> np.ndarray:
        """The sample ids this rank's batches take in ``epoch``, in order."""
        return self.native.epoch_order(epoch)

    def cursor(self, epoch: int, emitted: int) -> dict[str, Any]:
        """After ``emitted`` ids of ``epoch``: the next shard to read from and its next
        sample, and the ids the shuffle buffer holds."""
        stream = self.native.epoch_stream(epoch)
        # A resumed epoch's stream is its order: the buffers had shuffled it already.
        buffer = 0 if self.resume is not None and self.resume[0] == epoch else self._buffer
        consumed, held = _core.shuffle_buffer_state(
            stream, buffer, self._seed, epoch, self.rank, min(emitted, len(stream))
        )
        ds = self._dataset
        shard: str | None = None
        in_shard = 0
        if consumed < len(stream):
            sample = int(stream[consumed])
            shard_number = int(ds.sample_shard[sample])
            shard = ds.urls[shard_number]
            in_shard = sample - int(ds.shard_first[shard_number])
        return {
            "emitted": int(emitted),
            "shard": shard,
            "sample_in_shard": in_shard,
            "buffer": [int(i) for i in held],
        }


def _elastic_entry(resume, epoch: int, shards: bool) -> dict[str, Any] | None:
    """What a state_dict records of an elastic resume that cut ``epoch``, as plain values."""
    if resume is None or resume[0] != epoch:
        return None
    if shards:
        return {
            "epoch": int(resume[0]),
            "world_size": int(resume[1]),
            "pieces": [[int(v) for v in piece] for piece in resume[2]],
        }
    return {"epoch": int(resume[0]), "start": int(resume[1])}


def _resume_of(elastic, epoch: int, shards: bool):
    """The resume a state's ``"elastic"`` entry describes (for its epoch), or None."""
    if elastic is None:
        return None
    try:
        if int(elastic["epoch"]) != epoch:
            raise ValueError("another epoch")
        if shards:
            return (
                epoch,
                int(elastic["world_size"]),
                [(int(r), int(b), int(e)) for r, b, e in elastic["pieces"]],
            )
        return (epoch, int(elastic["start"]))
    except (KeyError, TypeError, ValueError) as error:
        raise InvalidArgumentError(
            f"state['elastic'] is not an elastic resume of epoch {epoch}: {elastic!r} ({error})"
        ) from None


def check_device(device):
    """The CUDA device batches go to (``torch.device``), or None for host batches (``None`` or
    ``"cpu"``); the same checks and errors for every loader. Raises ``ValueError`` naming what
    is missing (PyTorch, CUDA) or wrong."""
    if device is None:
        return None
    if _import_torch() is None:
        raise ValueError("device= needs PyTorch, which cannot be imported")
    device = torch.device(device)
    if device.type == "cpu":
        return None
    if device.type != "cuda":
        raise ValueError(f"device must be None, 'cpu' or a CUDA device, got {device}")
    if not torch.cuda.is_available():
        raise ValueError(f"device={str(device)!r}, but torch.cuda.is_available() is False")
    _load_cuda_runtime()
    return device


def copied_to_device(host_batches, device):
    """The batches of the generator ``host_batches`` on ``device``, each copied on a side
    stream; batch n + 1's copy is issued before batch n is handed over, so it overlaps the step
    on batch n. A host batch is kept until its copy has finished; the consumer's stream waits
    for the copy before using the tensors."""
    stream = torch.cuda.Stream(device)
    pending = None
    copying = []  # (event, host batch) whose copies may still be running
    try:
        for host in host_batches:
            with torch.cuda.stream(stream):
                moved = {
                    k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v
                    for k, v in host.items()
                }
            copied = stream.record_event()
            copying.append((copied, host))
            del host
            if pending is not None:
                yield _hand_over(device, *pending)
            pending = (moved, copied)
            while len(copying) > 2:  # the oldest copy was awaited a step ago
                event, _ = copying.pop(0)
                event.synchronize()
        if pending is not None:
            yield _hand_over(device, *pending)
    finally:
        for event, _ in copying:
            event.synchronize()
        host_batches.close()


def _hand_over(device, moved, copied):
    current = torch.cuda.current_stream(device)
    current.wait_event(copied)
    for value in moved.values():
        if isinstance(value, torch.Tensor):
            value.record_stream(current)
    return moved
