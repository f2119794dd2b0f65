"""The doctor's measurements: the compute-only, input-only and together runs, the stage times,
the thread sweep (:func:`diagnose`), and the same timings around the user's own loop
(:class:`profile`, a :class:`stoker.LoaderObserver`)."""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from collections.abc import Generator
from typing import Any, Callable

import numpy as np

from stoker import _core
from stoker.doctor.report import Diagnosis, SweepPoint
from stoker.doctor.verdict import conclude
from stoker.loader import Loader, LoaderObserver
from stoker.sampling import LoadBalancedSampler
from stoker.video import VideoReader


def synthetic_step(milliseconds: float) -> Callable[[Any], None]:
    """A training step of known cost that holds no CPU, as a GPU step would not: it sleeps."""
    seconds = float(milliseconds) / 1000

    def step(batch: Any) -> None:
        time.sleep(seconds)

    return step


def _sweep_counts(cores: int) -> list[int]:
    counts, t = [], 1
    while t < cores:
        counts.append(t)
        t *= 2
    counts.append(cores)
    return counts


class _OtherLoad:
    """CPUs that other processes kept busy while this one measured (from /proc/stat and this
    process's CPU time): a sweep on a shared machine understates scaling."""

    def __init__(self):
        self._start = self._sample()

    @staticmethod
    def _sample():
        try:
            with open("/proc/stat") as f:
                fields = [int(v) for v in f.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        ticks = os.sysconf("SC_CLK_TCK")
        busy = (sum(fields) - fields[3] - (fields[4] if len(fields) > 4 else 0)) / ticks
        mine = sum(os.times()[:4])
        return time.monotonic(), busy, mine

    def cpus(self) -> float | None:
        end = self._sample()
        if self._start is None or end is None or end[0] <= self._start[0]:
            return None
        (t0, busy0, mine0), (t1, busy1, mine1) = self._start, end
        return max(0.0, ((busy1 - busy0) - (mine1 - mine0)) / (t1 - t0))


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


def _synchronize(loader: Loader) -> None:
    if loader.device is not None:
        _torch().cuda.synchronize(loader.device)


def _forever(loader: Loader) -> Generator[dict[str, Any], None, None]:
    """Batches across epochs, without end."""
    while True:
        produced = False
        for batch in loader:
            produced = True
            yield batch
        if not produced:
            raise ValueError("the loader delivers no batches (is the dataset or rank empty?)")


def _stage_seconds(stats: dict[str, Any], h2d_per_batch: float) -> dict[str, float]:
    batches = max(stats["batches"], 1)
    stages = stats["stage_seconds"]
    seek = stats["decode"]["seek_seconds"]
    convert = stats["decode"]["convert_seconds"]
    return {
        "sampling": stages["sampling"] / batches,
        "index": stages["index"] / batches,
        "seek": seek / batches,
        "decode": max(stages["decode"] - seek - convert, 0.0) / batches,
        "convert": convert / batches,
        "transform": stages["transform"] / batches,
        "collate": stages["collate"] / batches,
        "h2d": h2d_per_batch,
    }


def _decode_work(loader: Loader, stats: dict[str, Any]) -> dict[str, Any]:
    """Source vs output pixels per frame, and frames decoded per frame kept."""
    ds = loader.dataset
    source, output, sizes, output_sizes = [], [], [], []
    fields = loader.fields
    for key in ds.item_keys:
        if key.source not in ds.cameras:
            continue
        if key.source in ds.index.image_cameras:  # images stored per row: the first one's size
            _, width, height, _, _ = _core.probe_image(ds.index.image_bytes(key.source, 0))
        else:
            video = int(ds.index.videos_of(key.source)[0])
            reader = VideoReader(
                ds.index.video_files[video], frame_table=ds.index.frame_table(video)
            )
            width, height = reader.width, reader.height
        source.append(width * height)
        sizes.append(f"{width}x{height}")
        _, shape = fields[key.name]
        h, w = (shape[-2], shape[-1]) if shape[-3] == 3 else (shape[-3], shape[-2])
        output.append(h * w)
        output_sizes.append(f"{w}x{h}")
    decode = stats["decode"]
    return {
        "source_pixels": float(np.mean(source)) if source else 0.0,
        "output_pixels": float(np.mean(output)) if output else 0.0,
        "decoded_per_kept": decode["packets_decoded"] / max(decode["frames_converted"], 1),
        "source_size": sizes[0] if sizes else "",
        "output_size": output_sizes[0] if output_sizes else "",
    }


def _balance(loader: Loader) -> dict[str, float] | None:
    if loader.world_size <= 1:
        return None
    sampler = loader.sampler
    if not isinstance(sampler, LoadBalancedSampler):  # the loader's order, dealt by cost
        sampler = LoadBalancedSampler(
            loader.dataset.sample_costs(),
            batch_size=loader.batch_size,
            shuffle=loader.shuffle,
            seed=loader.seed,
            rank=loader.rank,
            world_size=loader.world_size,
            drop_last=loader.drop_last,
        )
    report = sampler.imbalance(loader.epoch)
    return {"before": float(report["before"]["total"]), "after": float(report["after"]["total"])}


def _input_rate(loader: Loader, batches: int, warmup: int = 2) -> float:
    iterator = _forever(loader)
    try:
        for _ in range(warmup):
            next(iterator)
        started = time.perf_counter()
        for _ in range(batches):
            next(iterator)
        return batches / (time.perf_counter() - started)
    finally:
        iterator.close()


def _held_batch(loader: Loader) -> dict[str, Any]:
    """One batch of the real shape and dtype, copied out of the loader's pool (and, with a
    device, already there)."""
    iterator = _forever(loader)
    try:
        batch = next(iterator)
    finally:
        iterator.close()
    torch = _torch()
    held = {}
    for key, value in batch.items():
        if torch is not None and isinstance(value, torch.Tensor):
            held[key] = value.clone()
        elif isinstance(value, np.ndarray):
            held[key] = value.copy()
        else:
            held[key] = value
    _synchronize(loader)
    return held


def _h2d_seconds(loader: Loader, host: dict[str, Any], repeats: int = 5) -> float:
    if loader.device is None:
        return 0.0
    torch = _torch()
    host = {k: v.cpu() for k, v in host.items() if isinstance(v, torch.Tensor)}
    started = time.perf_counter()
    for _ in range(repeats):
        for value in host.values():
            value.to(loader.device, non_blocking=False)
    torch.cuda.synchronize(loader.device)
    return (time.perf_counter() - started) / repeats


def _compute_rate(loader: Loader, step, batch, repeats: int) -> float:
    step(batch)  # warm-up (allocations, kernels)
    _synchronize(loader)
    started = time.perf_counter()
    for _ in range(repeats):
        step(batch)
    _synchronize(loader)
    return repeats / (time.perf_counter() - started)


class profile(contextlib.AbstractContextManager, LoaderObserver):
    """Measures ``data_wait`` and step times around the user's own training loop.

        with stoker.profile(loader) as prof:
            for batch in loader:
                step(batch)
        print(prof.report().summary())

    Inside the ``with`` block it observes the loader's iterations: a step is the time from
    receiving a batch to asking for the next one (or to the iteration's end). The
    compute-only and input-only rates are estimated from those times and the loader's stage
    times (:func:`diagnose` measures them); the report says so.
    """

    def __init__(self, loader: Loader):
        self.loader = loader
        self.data_wait: list[float] = []
        self.step_seconds: list[float] = []
        self.wall_seconds = 0.0
        self._started = 0.0
        self._asked = 0.0  # when the consumer asked for the batch it waits for
        self._returned: float | None = None  # when the consumer got its last batch

    def __enter__(self) -> profile:
        self.loader.reset_stats()
        self.loader.add_observer(self)
        self._started = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        now = time.perf_counter()
        self._end_step(now)  # the step on the last batch, when the iteration is still open
        self.wall_seconds = now - self._started
        self.loader.remove_observer(self)

    # LoaderObserver
    def wait_started(self, now: float) -> None:
        self._end_step(now)
        self._asked = now

    def batch_received(self, batch: dict[str, Any], now: float) -> None:
        self.data_wait.append(now - self._asked)
        self._returned = now

    def iteration_ended(self, now: float) -> None:
        self._end_step(now)

    def _end_step(self, now: float) -> None:
        if self._returned is not None:
            self.step_seconds.append(now - self._returned)
            self._returned = None

    def report(self) -> Diagnosis:
        loader = self.loader
        stats = loader.stats()
        steps = np.asarray(self.step_seconds, dtype=np.float64)
        waits = np.asarray(
            self.data_wait[: len(steps)] if len(steps) else self.data_wait, dtype=np.float64
        )
        stages = _stage_seconds(stats, 0.0)
        work = sum(stages.values())
        threads = stats["threads"] or _core.usable_cores()
        compute = 1 / float(np.median(steps)) if len(steps) else math.inf
        input_rate = threads / work if work > 0 else math.inf
        d = Diagnosis(
            batch_size=loader.batch_size,
            threads=threads,
            cores=_core.usable_cores(),
            compute_batches_per_s=compute,
            input_batches_per_s=input_rate,
            step_seconds=steps,
            data_wait=waits,
            wall_seconds=self.wall_seconds,
            stage_seconds=stages,
            sweep=[],
            decode_work=_decode_work(loader, stats),
            balance=_balance(loader),
            estimated=[
                "compute rate (median step)",
                "input rate (threads / thread-seconds per batch)",
            ],
        )
        conclude(d)
        return d


def diagnose(
    loader: Loader,
    step: None | float | Callable[[Any], None] = None,
    steps: int = 200,
    sweep: bool = True,
    sweep_batches: int | None = None,
    progress: bool = True,
) -> Diagnosis:
    """Measures the loader and the step and returns a :class:`Diagnosis` with the verdict.

    Args:
        loader: the loader as it will be used in training.
        step: ``step(batch)``, the training step (forward, backward, optimizer); a number is
            a synthetic step of that many milliseconds; default: a 100 ms synthetic step.
        steps: steps of the input-only and together runs (the compute-only run takes a
            quarter of them, at least 5).
        sweep: run the thread sweep (1, 2, 4, ... up to the core count).
        sweep_batches: batches per sweep point (default: a quarter of ``steps``, at least 8).
    """
    if step is None:
        step = synthetic_step(100)
    elif not callable(step):
        step = synthetic_step(float(step))
    if steps < 4:
        raise ValueError(f"steps must be at least 4, got {steps}")
    say = (
        (lambda text: print(f"stoker doctor: {text}", file=sys.stderr, flush=True))
        if progress
        else (lambda text: None)
    )

    others = _OtherLoad()
    say("compute-only rate (the step on one held batch)")
    held = _held_batch(loader)
    h2d = _h2d_seconds(loader, held)
    compute = _compute_rate(loader, step, held, max(5, steps // 4))
    del held

    say(f"input-only rate ({steps} batches, {loader.threads} threads)")
    loader.reset_stats()
    input_rate = _input_rate(loader, steps)
    stats = loader.stats()
    stages = _stage_seconds(stats, h2d)
    work = _decode_work(loader, stats)

    say(f"both together ({steps} steps)")
    waits, step_times = [], []
    iterator = _forever(loader)
    try:
        next(iterator)  # the pipeline's start is not a steady-state wait
        started = time.perf_counter()
        for _ in range(steps):
            asked = time.perf_counter()
            batch = next(iterator)
            got = time.perf_counter()
            step(batch)
            _synchronize(loader)
            waits.append(got - asked)
            step_times.append(time.perf_counter() - got)
            del batch
        wall = time.perf_counter() - started
    finally:
        iterator.close()

    points = []
    if sweep:
        per_point = sweep_batches or max(8, steps // 4)
        for threads in _sweep_counts(_core.usable_cores()):
            say(f"thread sweep: {threads} thread(s)")
            probe = loader.with_options(threads=threads, device=None)
            points.append(SweepPoint(threads, _input_rate(probe, per_point)))
            probe.close()

    d = Diagnosis(
        batch_size=loader.batch_size,
        threads=stats["threads"],
        cores=_core.usable_cores(),
        compute_batches_per_s=compute,
        input_batches_per_s=input_rate,
        step_seconds=np.asarray(step_times),
        data_wait=np.asarray(waits),
        wall_seconds=wall,
        stage_seconds=stages,
        sweep=points,
        decode_work=work,
        balance=_balance(loader),
        other_cpus=others.cpus(),
    )
    conclude(d)
    return d
