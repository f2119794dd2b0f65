"""A ``ray.data.Datasource`` whose read tasks decode samples of any stoker dataset (a LeRobot
dataset, tar shards) with :class:`stoker.Loader`.

How an epoch is cut into read tasks: stoker's sampler orders the epoch's samples from
``(seed, epoch)`` (the order a one-rank :class:`stoker.Loader` with the same seed gives; for
shards, the shard stream's: shards permuted, then the shuffle buffer), the
order is cut into blocks of ``rows_per_block`` samples (the Loader's batches of that size), and
read task k takes blocks ``k * m`` to ``k * m + m - 1`` (``m = samples_per_task /
rows_per_block``). Inside the task a :class:`stoker.Loader` positioned at block ``k * m``
builds those batches on ``threads_per_task`` native threads (frames grouped by file and GOP,
transforms applied), and each batch becomes one Arrow block with tensor columns. So the tasks,
their rows and their blocks depend on ``(seed, epoch, samples_per_task, rows_per_block)``
alone, never on the cluster's size, and task k's rows are the Loader's batches ``k * m`` ...
of the same seed, row for row.

Shuffling (``shuffle=``):

* ``True``: stoker's sampler permutes the whole epoch (a counter-based permutation: nothing is
  materialized, whatever the dataset's size), so every block is already a uniform draw.
* ``"block"``: the case study's block-level shuffle. Samples are decoded in dataset order,
  where neighbouring windows share frames and GOPs (each frame decoded once per block), the
  read tasks run in an order permuted by ``(seed, epoch)``, and each task mixes its rows
  through a local shuffle buffer of ``local_shuffle_buffer_size`` rows (default: one task).
  ``iter_torch_batches(local_shuffle_buffer_size=...)`` on the consumer mixes across tasks.
* ``False``: dataset order.

A ``task_hook`` sees each read task from the inside: a :class:`ReadTaskEvent` when it starts,
after each block it builds and when it ends, with the node it runs on, its process, its rows
and its skips. ``stoker doctor --ray`` reports per node from them; a test finds a task's worker
by them.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from stoker.arguments import check_int, check_seed
from stoker.datasets.lerobot.dataset import LeRobotDataset, WindowSpec
from stoker.datasets.shards import Clip, Image, Label, ShardDataset
from stoker.io.storage import S3Options
from stoker.loader import Loader
from stoker.transforms import Transforms

try:
    import ray
    from ray.data import Datasource, ReadTask
    from ray.data.block import BlockAccessor, BlockMetadata
except ImportError as error:  # pragma: no cover - depends on the environment
    raise ImportError(
        "stoker.integrations.ray needs Ray Data: pip install 'ray[data]' "
        "(stoker itself does not need it)"
    ) from error

logger = logging.getLogger("stoker.integrations.ray")

_SHUFFLES = (True, False, "block")


@dataclass(frozen=True)
class ReadTaskEvent:
    """What a read task tells its ``task_hook``.

    ``event``: ``"start"`` (before its Loader opens), ``"block"`` (a block built, just before it
    is handed to Ray: ``rows`` counts it) or ``"end"`` (every block handed on). A task that Ray
    runs again (its worker died) reports again from ``"start"``, from another ``pid``.
    """

    task: int  # the read task's number: its blocks are LoaderDatasource.task_blocks(task)
    event: str
    node_id: str  # Ray's id of the node the task runs on (hex)
    pid: int  # the worker process
    rows: int  # rows built so far
    skipped: int  # samples skipped so far (on_error="skip"), replaced by others
    seconds: float  # since the task started


TaskHook = Callable[[ReadTaskEvent], None]


class LoaderDatasource(Datasource):
    """A stoker dataset's samples (a LeRobot dataset's windows, a ShardDataset's samples) as Ray
    Data blocks; see the module's notes, and :func:`read_lerobot` and :func:`read_shards`, which
    check the arguments and build one."""

    def __init__(
        self,
        dataset: LeRobotDataset | ShardDataset,
        *,
        shuffle: bool | str,
        seed: int,
        epoch: int,
        transforms: Transforms | None,
        samples_per_task: int,
        rows_per_block: int,
        threads_per_task: int,
        on_error: str,
        max_replacements: int,
        local_shuffle_buffer_size: int | None,
        task_text: bool,
        task_hook: TaskHook | None = None,
    ):
        super().__init__()
        self.task_text = task_text
        self.task_hook = task_hook
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = epoch
        self.transforms = transforms
        self.samples_per_task = samples_per_task
        self.rows_per_block = rows_per_block
        self.threads_per_task = threads_per_task
        self.on_error = on_error
        self.max_replacements = max_replacements
        self.local_shuffle_buffer_size = local_shuffle_buffer_size
        # A loader on the driver, never iterated: it checks the arguments as the tasks' will be
        # and gives the number of blocks and the bytes of a row.
        probe = self.loader(threads=1)
        self.num_blocks = probe.batches_in_epoch(epoch)
        # The epoch's samples: the dataset's, or for shards the stream's epoch (the same count
        # of samples, every one once).
        self.num_samples = len(dataset)
        self.row_bytes = sum(
            int(np.dtype(dtype).itemsize * math.prod(shape[1:]))
            for dtype, shape in probe.fields.values()
        ) + _variable_row_bytes(dataset)
        probe.close()
        self.blocks_per_task = samples_per_task // rows_per_block

    def loader(self, threads: int | None = None) -> Loader:
        """The Loader whose batches are this datasource's blocks (before the block shuffle)."""
        return Loader(
            self.dataset,
            self.rows_per_block,
            shuffle=self.shuffle is True,
            seed=self.seed,
            threads=threads or self.threads_per_task,
            rank=0,
            world_size=1,
            transforms=self.transforms,
            on_error=self.on_error,
            max_replacements=self.max_replacements,
            output="numpy",
        )

    @property
    def num_tasks(self) -> int:
        return -(-self.num_blocks // self.blocks_per_task)

    def task_blocks(self, task: int) -> range:
        """The Loader batches (of :meth:`loader`) that read task ``task`` delivers."""
        first = task * self.blocks_per_task
        return range(first, min(first + self.blocks_per_task, self.num_blocks))

    def task_order(self) -> list[int]:
        """The order the read tasks are handed to Ray: permuted by (seed, epoch) for the
        block-level shuffle, else in order."""
        order = list(range(self.num_tasks))
        if self.shuffle == "block":
            np.random.default_rng([self.seed, self.epoch, 0]).shuffle(order)
        return order

    def get_name(self) -> str:
        return "StokerShards" if isinstance(self.dataset, ShardDataset) else "StokerLeRobot"

    def estimate_inmemory_data_size(self) -> int | None:
        return self.row_bytes * len(self.dataset)

    def get_read_tasks(
        self,
        parallelism: int,
        per_task_row_limit: int | None = None,
        data_context: Any = None,
    ) -> list[ReadTask]:
        # `parallelism` is Ray's suggestion; the tasks are fixed by samples_per_task so that
        # their rows do not depend on the cluster.
        n = self.num_samples
        tasks = []
        for task in self.task_order():
            blocks = self.task_blocks(task)
            rows = min(blocks.stop * self.rows_per_block, n) - blocks.start * self.rows_per_block
            metadata = BlockMetadata(
                num_rows=rows,
                size_bytes=rows * self.row_bytes,
                input_files=None,
                exec_stats=None,
            )
            tasks.append(
                ReadTask(
                    functools.partial(self.read_task, task),
                    metadata,
                    per_task_row_limit=per_task_row_limit,
                )
            )
        return tasks

    def read_task(self, task: int) -> Iterator[Any]:
        """Runs in the read task: the blocks of task ``task``, as Arrow tables."""
        report = _Reporter(self.task_hook, task)
        report("start")
        for batch in self.batches(task, report):
            if not self.task_text:
                batch.pop("task", None)
            report("block", len(next(iter(batch.values()))))
            yield BlockAccessor.batch_to_block(batch)
        report("end")

    def batches(self, task: int, report: _Reporter | None = None) -> Iterator[dict[str, Any]]:
        """Task ``task``'s rows as dicts of numpy arrays, one per block, after the local shuffle
        buffer. Skipped samples are logged (as the Loader's stats give them) when the task ends,
        and counted in ``report``."""
        loader = self.loader()
        if report is not None:
            report.loader = loader
        blocks = self.task_blocks(task)
        loader.set_position(self.epoch, blocks.start)
        iterator = iter(loader)
        try:
            built = (_owned(next(iterator)) for _ in blocks)
            if self.shuffle == "block" or self.local_shuffle_buffer_size is not None:
                size = self.local_shuffle_buffer_size or self.samples_per_task
                rng = np.random.default_rng([self.seed, self.epoch, 1, task])
                yield from _shuffle_buffer(built, size, self.rows_per_block, rng)
            else:
                yield from built
        finally:
            stats = loader.stats()
            if report is not None:
                report.loader, report.skipped = None, int(stats["skipped"])
            loader.close()
            if stats["skipped"]:
                reasons = "; ".join(
                    f"sample {s['sample']}: {s['reason']}" for s in stats["skips"][:5]
                )
                logger.warning(
                    "stoker.integrations.ray: read task %d (epoch %d) skipped %d samples, "
                    "replaced by others drawn from the seed: %s",
                    task,
                    self.epoch,
                    stats["skipped"],
                    reasons,
                )


class _Reporter:
    """A read task's calls of its ``task_hook`` (nothing without one): the task, its node and
    process, the rows and skips so far, the time since it started."""

    def __init__(self, hook: TaskHook | None, task: int):
        self.hook = hook
        self.task = task
        self.rows = 0
        self.skipped = 0
        self.loader: Loader | None = None  # while it runs, for its skips so far
        self.started = time.perf_counter()
        self.node_id = ray.get_runtime_context().get_node_id() if hook is not None else ""

    def __call__(self, event: str, rows: int = 0) -> None:
        if self.hook is None:
            return
        self.rows += rows
        if self.loader is not None:
            self.skipped = int(self.loader.stats()["skipped"])
        self.hook(
            ReadTaskEvent(
                task=self.task,
                event=event,
                node_id=self.node_id,
                pid=os.getpid(),
                rows=self.rows,
                skipped=self.skipped,
                seconds=time.perf_counter() - self.started,
            )
        )


def _variable_row_bytes(dataset: LeRobotDataset | ShardDataset) -> int:
    """A shard sample's bytes in its variable-size columns (text, json, arrays), estimated by
    their members' mean size, and its key's; 0 for a LeRobot dataset, whose rows are arrays."""
    if not isinstance(dataset, ShardDataset):
        return 0
    total = 8 + max(len(key) for key in dataset.keys[:1000])  # __key__
    for decoder in dataset.spec.values():
        if isinstance(decoder, (Image, Clip, Label)):
            continue  # in the buffer's arrays
        sizes = [dataset.field_ranges(name)[1] for name in decoder.fields]
        present = np.concatenate([s[s >= 0] for s in sizes])
        total += int(present.mean()) if len(present) else 0
    return total


def _owned(batch: dict[str, Any]) -> dict[str, np.ndarray]:
    """A batch's arrays as they are, its lists of text (``task``, a shard's captions and keys)
    as numpy arrays of str. Not copied: a pooled buffer goes back to the loader's pool only once
    nothing references it, here once Ray has serialized the block built on it into the object
    store."""
    return {
        name: np.asarray(value, dtype=object) if isinstance(value, list) else np.asarray(value)
        for name, value in batch.items()
    }


def _shuffle_buffer(
    batches: Iterator[dict[str, np.ndarray]], size: int, block_rows: int, rng: np.random.Generator
) -> Iterator[dict[str, np.ndarray]]:
    """Blocks of ``block_rows`` rows drawn at random from a buffer of at least ``size`` rows
    (fewer at the end), filled from ``batches`` in order. The buffer holds references to the
    batches' rows: each row is copied once, into the block that takes it."""
    held: list[tuple[dict[str, np.ndarray], int]] = []  # (batch, row), in arrival order
    exhausted = False
    while True:
        while not exhausted and len(held) < size + block_rows:
            batch = next(batches, None)
            if batch is None:
                exhausted = True
            else:
                rows = len(next(iter(batch.values())))
                held.extend((batch, row) for row in range(rows))
        if not held:
            return
        chosen = rng.choice(len(held), size=min(block_rows, len(held)), replace=False)
        picked = [held[k] for k in chosen]
        left = np.ones(len(held), bool)
        left[chosen] = False
        held = [entry for entry, keep in zip(held, left) if keep]
        block = {}
        for name, column in picked[0][0].items():
            out = np.empty((len(picked), *column.shape[1:]), column.dtype)
            for k, (batch, row) in enumerate(picked):
                out[k] = batch[name][row]
            block[name] = out
        yield block


def read_lerobot(
    root: str | LeRobotDataset,
    spec: WindowSpec | None = None,
    *,
    shuffle: bool | str = True,
    seed: int = 0,
    epoch: int = 0,
    storage_options: Mapping[str, Any] | S3Options | None = None,
    transforms: Transforms | None = None,
    samples_per_task: int = 256,
    rows_per_block: int | None = None,
    threads_per_task: int = 2,
    num_cpus: float | None = None,
    concurrency: int | None = None,
    on_error: str = "raise",
    max_replacements: int = 8,
    local_shuffle_buffer_size: int | None = None,
    task_text: bool = False,
    ray_remote_args: dict[str, Any] | None = None,
    task_hook: TaskHook | None = None,
) -> ray.data.Dataset:
    """A ``ray.data.Dataset`` of a LeRobot dataset's samples, decoded by stoker in Ray tasks.

    Rows have the keys, dtypes and shapes of :class:`stoker.Loader`'s batches (LeRobot's keys:
    images uint8 ``[T, C, H, W]`` or the transform's dtype, features ``[T, dim]``,
    ``<key>_is_pad``, the scalars, and with ``task_text`` ``task``), one row per sample.

    Args:
        root: the dataset folder or URL (``s3://...``), or an open :class:`stoker.LeRobotDataset`.
        spec: the window (ignored when ``root`` is a dataset, which has its own).
        shuffle: ``True``, ``"block"`` or ``False``; see :mod:`stoker.integrations.ray.datasource`.
        seed, epoch: fix the order (and the random transforms): the same pair gives the same
            rows in the same tasks, whatever the cluster. Build one dataset per epoch.
        storage_options: for a URL, as :class:`stoker.LeRobotDataset`'s.
        transforms: a :class:`stoker.Transforms`, run inside the tasks so that only
            training-size pixels enter the object store. ``dtype="bfloat16"`` is refused (numpy
            has none): cast in ``iter_torch_batches(dtypes=...)``.
        samples_per_task: samples each read task decodes (a multiple of ``rows_per_block``).
        rows_per_block: rows per output block (the task's Loader batch). Default:
            ``min(64, samples_per_task)``.
        threads_per_task: stoker's native decode threads inside each task.
        num_cpus: CPUs Ray reserves per read task. Default: ``threads_per_task``.
        concurrency: the most read tasks running at once (default: as many as the CPUs allow).
        on_error: ``"raise"``: a sample that cannot be read fails the dataset with the
            Loader's error (naming the sample and file); ``"skip"``: it is replaced by another
            sample drawn from the seed, as the Loader does, and the task logs the skips.
        max_replacements: as the Loader's.
        local_shuffle_buffer_size: rows each task mixes its output through (``shuffle="block"``
            uses one task's rows by default; ``None`` otherwise: no buffer).
        task_text: include ``task``, the task's text (as LeRobot's items do). Off by default:
            ``iter_torch_batches`` cannot turn text into tensors; ``task_index`` is always there
            (the texts are ``dataset.meta.tasks``).
        ray_remote_args: more arguments for the read tasks' ``ray.remote`` (memory, resources).
        task_hook: called inside each read task with a :class:`ReadTaskEvent` when the task
            starts, after each block it builds and when it ends; pickled to the workers with the
            dataset. It runs between blocks (keep it quick), and what it raises fails the task.
    """
    if isinstance(root, LeRobotDataset):
        dataset = root
    else:
        dataset = LeRobotDataset(root, spec, storage_options=storage_options, progress=False)
    return _read(
        dataset,
        shuffle=shuffle,
        seed=seed,
        epoch=epoch,
        transforms=transforms,
        samples_per_task=samples_per_task,
        rows_per_block=rows_per_block,
        threads_per_task=threads_per_task,
        num_cpus=num_cpus,
        concurrency=concurrency,
        on_error=on_error,
        max_replacements=max_replacements,
        local_shuffle_buffer_size=local_shuffle_buffer_size,
        task_text=task_text,
        ray_remote_args=ray_remote_args,
        task_hook=task_hook,
    )


def read_shards(
    urls_or_dataset: Any,
    spec: Mapping[str, Any] | None = None,
    *,
    shuffle: bool | str = True,
    seed: int = 0,
    epoch: int = 0,
    storage_options: Mapping[str, Any] | S3Options | None = None,
    transforms: Transforms | None = None,
    samples_per_task: int = 256,
    rows_per_block: int | None = None,
    threads_per_task: int = 2,
    num_cpus: float | None = None,
    concurrency: int | None = None,
    on_error: str = "raise",
    max_replacements: int = 8,
    local_shuffle_buffer_size: int | None = None,
    ray_remote_args: dict[str, Any] | None = None,
    task_hook: TaskHook | None = None,
) -> ray.data.Dataset:
    """A ``ray.data.Dataset`` of tar shards' samples, decoded by stoker in Ray tasks: the read
    tasks of :func:`read_lerobot`, over a :class:`stoker.ShardDataset`.

    Rows have the keys of :class:`stoker.Loader`'s shard batches (each spec field, a json
    field as its keys, ``__key__`` and ``__index__``), one row per sample, in the order of a
    one-rank Loader of the same seed and epoch (``shuffle=True``: shards permuted and the
    shuffle buffer; ``"block"``: shard order, tasks permuted, each mixed through its local
    buffer). ``urls_or_dataset``: what :class:`stoker.ShardDataset` takes (a pattern, a folder
    ``stoker shard`` wrote, a list), with ``spec``; or an open ShardDataset. The other
    arguments are :func:`read_lerobot`'s.
    """
    if isinstance(urls_or_dataset, ShardDataset):
        dataset = urls_or_dataset
    else:
        if spec is None:
            raise ValueError("read_shards needs a spec (the fields to decode) with its URLs")
        dataset = ShardDataset(urls_or_dataset, spec, storage_options)
    return _read(
        dataset,
        shuffle=shuffle,
        seed=seed,
        epoch=epoch,
        transforms=transforms,
        samples_per_task=samples_per_task,
        rows_per_block=rows_per_block,
        threads_per_task=threads_per_task,
        num_cpus=num_cpus,
        concurrency=concurrency,
        on_error=on_error,
        max_replacements=max_replacements,
        local_shuffle_buffer_size=local_shuffle_buffer_size,
        task_text=False,
        ray_remote_args=ray_remote_args,
        task_hook=task_hook,
    )


def _read(
    dataset: LeRobotDataset | ShardDataset,
    *,
    shuffle: bool | str,
    seed: int,
    epoch: int,
    transforms: Transforms | None,
    samples_per_task: int,
    rows_per_block: int | None,
    threads_per_task: int,
    num_cpus: float | None,
    concurrency: int | None,
    on_error: str,
    max_replacements: int,
    local_shuffle_buffer_size: int | None,
    task_text: bool,
    ray_remote_args: dict[str, Any] | None,
    task_hook: TaskHook | None,
) -> ray.data.Dataset:
    """The arguments checked, and the dataset's read tasks handed to Ray."""
    if shuffle not in _SHUFFLES or not isinstance(shuffle, (bool, str)):
        raise ValueError(f"shuffle must be True, False or 'block', got {shuffle!r}")
    seed = check_seed(seed)
    epoch = check_int("epoch", epoch, 0, 2**32 - 1)
    samples_per_task = check_int("samples_per_task", samples_per_task, 1, 2**40)
    if rows_per_block is None:
        rows_per_block = min(64, samples_per_task)
    rows_per_block = check_int("rows_per_block", rows_per_block, 1, samples_per_task)
    if samples_per_task % rows_per_block:
        raise ValueError(
            f"samples_per_task ({samples_per_task}) must be a multiple of rows_per_block "
            f"({rows_per_block}): a task delivers whole blocks"
        )
    threads_per_task = check_int("threads_per_task", threads_per_task, 1, 4096)
    if num_cpus is None:
        num_cpus = float(threads_per_task)
    elif not num_cpus > 0:
        raise ValueError(f"num_cpus must be positive, got {num_cpus!r}")
    if concurrency is not None:
        concurrency = check_int("concurrency", concurrency, 1, 2**31)
    if local_shuffle_buffer_size is not None:
        local_shuffle_buffer_size = check_int(
            "local_shuffle_buffer_size", local_shuffle_buffer_size, 1, 2**40
        )
    if task_hook is not None and not callable(task_hook):
        raise ValueError(f"task_hook must be callable, got {task_hook!r}")
    if transforms is not None and getattr(transforms, "dtype", None) == "bfloat16":
        raise ValueError(
            "transforms.dtype='bfloat16' cannot be a block column (numpy has no bfloat16): use "
            "float16 or float32, or cast with iter_torch_batches(dtypes=torch.bfloat16)"
        )
    source = LoaderDatasource(
        dataset,
        shuffle=shuffle,
        seed=seed,
        epoch=epoch,
        transforms=transforms,
        samples_per_task=samples_per_task,
        rows_per_block=rows_per_block,
        threads_per_task=threads_per_task,
        on_error=on_error,
        max_replacements=max_replacements,
        local_shuffle_buffer_size=local_shuffle_buffer_size,
        task_text=bool(task_text),
        task_hook=task_hook,
    )
    # Each Loader batch leaves its task as one block, as soon as it is built:
    # - override_num_blocks: else Ray splits the output of a read with fewer tasks than its
    #   default parallelism (SplitBlocks), cutting blocks into single rows and holding a task's
    #   rows back until the task ended;
    # - target_max_block_size under one block's bytes (and over 2/3 of them, where Ray would
    #   slice): else Ray merges a task's blocks up to 128 MiB (a copy) before handing them on.
    # Both measured in bench/ray_bench.py: see docs/ray.md.
    read = ray.data.read_datasource(
        source,
        override_num_blocks=source.num_tasks,
        num_cpus=num_cpus,
        concurrency=concurrency,
        ray_remote_args=ray_remote_args,
    )
    read.context.target_max_block_size = max(1, source.row_bytes * rows_per_block * 3 // 4)
    return read
