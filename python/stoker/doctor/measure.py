"""The doctor's measurements: the compute-only, input-only and together runs, the stage times,
the thread sweep (:func:`diagnose`), and the same timings around the user's own loop
(:class:`profile`, a :class:`stoker.LoaderObserver`)."""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import time
import warnings
from collections.abc import Generator
from typing import Any, Callable

import numpy as np

from stoker import _core
from stoker.datasets.shards import Image, ShardDataset
from stoker.doctor.report import Diagnosis, SweepPoint, plotting_missing
from stoker.doctor.verdict import conclude, falls
from stoker.io.video import VideoReader
from stoker.loader import Loader, LoaderObserver
from stoker.sampling import LoadBalancedSampler


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
        """CPUs the other processes kept busy, on average, since this object was made."""
        usage = self.usage()
        return None if usage is None else usage[0]

    def usage(self) -> tuple[float, float] | None:
        """(CPUs other processes kept busy, CPUs this process kept busy), on average."""
        end = self._sample()
        if self._start is None or end is None or end[0] <= self._start[0]:
            return None
        (t0, busy0, mine0), (t1, busy1, mine1) = self._start, end
        mine = (mine1 - mine0) / (t1 - t0)
        return max(0.0, (busy1 - busy0) / (t1 - t0) - mine), mine


# Two-sided 95% quantiles of Student's t by degrees of freedom; a count between two rows takes
# the smaller row's (wider) value.
_T95 = (
    (1, 12.706),
    (2, 4.303),
    (3, 3.182),
    (4, 2.776),
    (5, 2.571),
    (6, 2.447),
    (7, 2.365),
    (8, 2.306),
    (9, 2.262),
    (10, 2.228),
    (12, 2.179),
    (15, 2.131),
    (20, 2.086),
    (30, 2.042),
    (60, 2.000),
    (120, 1.980),
)


def _t95(df: int) -> float:
    if df > 120:
        return 1.960
    return [t for d, t in _T95 if d <= df][-1]


#: The rule that ends a measurement: the rate is known to within this fraction, at 95%
#: confidence (see :class:`Meter`).
TOLERANCE = 0.05
QUICK_TOLERANCE = 0.10
#: Blocks a rate needs at the least before its spread is trusted.
MIN_BLOCKS = 4


class Meter:
    """Times one phase batch by batch and says when its rate is known well enough.

    The rule: consecutive batch times are grouped in blocks of ``block`` batches (block means:
    a pipeline delivers in bursts, and a block spans one); with ``k`` blocks of mean ``m`` and
    standard deviation ``s``, the 95% confidence interval of the time per batch is
    ``m +- t(k-1) * s / sqrt(k)`` (Student's t). The phase stops when that half-width is at
    most ``tolerance * m`` (then the rate, its inverse, is known to about +-tolerance) and at
    least ``MIN_BLOCKS`` blocks were timed; or when its time ``budget_s`` is spent, or after
    ``limit`` batches, whichever comes first: :attr:`precision` then says how well it is known.
    """

    def __init__(
        self,
        label: str,
        *,
        tolerance: float,
        budget_s: float,
        block: int = 1,
        limit: int | None = None,
        progress: bool = True,
        stream=None,
    ):
        self.label = label
        self.tolerance = tolerance
        self.budget_s = budget_s
        self.block = max(1, block)
        self.limit = limit
        self.times: list[float] = []
        self._started = time.perf_counter()
        self._stream = stream if stream is not None else sys.stderr
        self._progress = progress
        self._tty = progress and getattr(self._stream, "isatty", lambda: False)()
        self._last_draw = 0.0

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self._started

    def _blocks(self) -> np.ndarray:
        k = len(self.times) // self.block
        return np.asarray(self.times[: k * self.block]).reshape(k, self.block).mean(axis=1)

    @property
    def precision(self) -> float:
        """The relative half-width of the 95% interval of the rate (inf: too few blocks)."""
        blocks = self._blocks()
        if len(blocks) < 2 or blocks.mean() <= 0:
            return math.inf
        half = _t95(len(blocks) - 1) * blocks.std(ddof=1) / math.sqrt(len(blocks))
        return float(half / blocks.mean())

    @property
    def met_goal(self) -> bool:
        """Whether the rate is known to +-``tolerance`` (enough blocks, interval narrow)."""
        return len(self.times) >= MIN_BLOCKS * self.block and self.precision <= self.tolerance

    @property
    def rate(self) -> float:
        total = float(np.sum(self.times))
        return len(self.times) / total if total > 0 else math.inf

    def add(self, seconds: float) -> bool:
        """Records one batch's time; True when the phase should stop."""
        self.times.append(seconds)
        done = (
            (self.limit is not None and len(self.times) >= self.limit)
            or self.elapsed >= self.budget_s
            or (
                len(self.times) >= MIN_BLOCKS * self.block
                and len(self.times) % self.block == 0
                and self.precision <= self.tolerance
            )
        )
        self._draw(done)
        return done

    def eta(self) -> float:
        """Seconds until the rule is met (or the budget spent), from the spread so far."""
        left = self.budget_s - self.elapsed
        if self.limit is not None:
            left = min(left, (self.limit - len(self.times)) / self.rate)
        precision = self.precision
        if math.isfinite(precision):
            blocks = len(self.times) / self.block
            needed = max(MIN_BLOCKS, blocks * (precision / self.tolerance) ** 2)
            left = min(left, (needed - blocks) * self.block / self.rate)
        return max(0.0, left)

    def _draw(self, done: bool) -> None:
        if not self._progress:
            return
        now = time.perf_counter()
        if not done and now - self._last_draw < (0.2 if self._tty else 5.0):
            return
        self._last_draw = now
        precision = self.precision
        known = f"+-{precision:.0%}" if math.isfinite(precision) else "+-?"
        if not done:
            end = f"ETA {self.eta():.0f} s"
        elif self.met_goal:
            end = "done"
        else:  # not "done": the rate is less precise than asked, and the report says so
            spent = (
                f"stopped after {self.limit} batches"
                if self.limit is not None and len(self.times) >= self.limit
                else "stopped: its share of the time is spent"
            )
            end = f"{spent}, {known} is short of the goal (see the report)"
        line = (
            f"stoker doctor: {self.label}: {len(self.times)} batches, {self.rate:.2f}/s "
            f"{known} (goal +-{self.tolerance:.0%}), {end}"
        )
        if self._tty:
            self._stream.write("\r\033[K" + line + ("\n" if done else ""))
        else:
            self._stream.write(line + "\n")
        self._stream.flush()


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
    if isinstance(ds, ShardDataset):  # images: the first sample's, per image field
        for name, decoder in ds.spec.items():
            if not isinstance(decoder, Image):
                continue
            member = ds.resolve_members(decoder, np.zeros(1, np.int64))
            if member[0] < 0:
                continue
            data, starts = ds.read_members(int(ds.sample_shard[0]), member)
            size = int(ds.member_sizes[int(ds.sample_shard[0])][member[0]])
            _, width, height, _, _ = _core.probe_image(
                bytes(data[int(starts[0]) : int(starts[0]) + size])
            )
            source.append(width * height)
            sizes.append(f"{width}x{height}")
            _, shape = fields[name]
            h, w = (shape[-2], shape[-1]) if shape[-3] == 3 else (shape[-3], shape[-2])
            output.append(h * w)
            output_sizes.append(f"{w}x{h}")
    # The first row the dataset reads: not the index's row 0, whose episode may have been left
    # out (a broken video under on_error="skip", or episodes=).
    first_row = 0 if getattr(ds, "rows", None) is None else int(ds.rows[0])
    for key in getattr(ds, "item_keys", ()):
        if key.source not in ds.cameras:
            continue
        if key.source in ds.index.image_cameras:  # images stored per row: the first one's size
            _, width, height, _, _ = _core.probe_image(ds.index.image_bytes(key.source, first_row))
        else:
            episode = ds.index.episode_of_row(first_row)
            video = int(ds.index.videos_of(key.source)[episode])
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
    if loader.world_size <= 1 or isinstance(loader.dataset, ShardDataset):
        return None  # shards are dealt to ranks by bytes
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


def _input_rate(loader: Loader, meter: Meter, warmup: int = 2) -> float:
    """Iterates the loader with no step until ``meter`` says stop; its rate in batches/s."""
    iterator = _forever(loader)
    try:
        for _ in range(warmup):  # opening files, filling the pipeline: not steady state
            next(iterator)
        last = time.perf_counter()
        while True:
            next(iterator)
            now = time.perf_counter()
            if meter.add(now - last):
                break
            last = now
        return meter.rate
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


def _compute_rate(loader: Loader, step, batch, meter: Meter) -> float:
    step(batch)  # warm-up (allocations, kernels)
    _synchronize(loader)
    while True:
        started = time.perf_counter()
        step(batch)
        _synchronize(loader)
        if meter.add(time.perf_counter() - started):
            return meter.rate


class profile(contextlib.AbstractContextManager, LoaderObserver):
    """Measures ``data_wait`` and step times around the user's own training loop, and on
    leaving the block prints the verdict and writes the report.

        with stoker.profile(loader) as prof:
            for batch in loader:
                step(batch)
        # printed: the summary (prof.report().summary()); written: stoker-profile/index.html

    Inside the ``with`` block it observes the loader's iterations: a step is the time from
    receiving a batch to asking for the next one (or to the iteration's end). The
    compute-only and input-only rates are estimated from those times and the loader's stage
    times (:func:`diagnose` measures them, and the thread sweep); the report says so.

    Args:
        loader: the loader the loop iterates.
        report: the folder the report is written into on exit (``index.html``, the plots,
            ``report.json``); None writes none. Default ``stoker-profile``.
        show: print the summary on exit (default True); ``str(prof)`` is the same text.

    Nothing is printed or written when the block ends with an exception (other than
    KeyboardInterrupt: a loop stopped by hand is reported), or when no batch was taken.
    """

    def __init__(
        self,
        loader: Loader,
        report: str | os.PathLike | None = "stoker-profile",
        show: bool = True,
    ):
        self.loader = loader
        self.report_folder = report
        self.show = show
        self.report_path: str | None = None  # the index.html written on exit
        self.data_wait: list[float] = []
        self.step_seconds: list[float] = []
        self.wall_seconds = 0.0
        self._started = 0.0
        self._asked = 0.0  # when the consumer asked for the batch it waits for
        self._returned: float | None = None  # when the consumer got its last batch
        self._diagnosis: Diagnosis | None = None

    def __enter__(self) -> profile:
        self.loader.reset_stats()
        self.loader.add_observer(self)
        self._diagnosis, self.wall_seconds = None, 0.0
        self._started = time.perf_counter()
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        now = time.perf_counter()
        self._end_step(now)  # the step on the last batch, when the iteration is still open
        self.wall_seconds = now - self._started
        self.loader.remove_observer(self)
        if kind is not None and not issubclass(kind, KeyboardInterrupt):
            return
        if not self.data_wait:
            if self.show:
                print("stoker profile: no batch was taken from the loader: nothing to report")
            return
        diagnosis = self.report()
        if self.report_folder is not None:
            with warnings.catch_warnings():  # said below, as the command says it
                warnings.simplefilter("ignore")
                self.report_path = diagnosis.write_report(self.report_folder)
        if self.show:
            print(diagnosis.summary())
            if self.report_path is not None:
                print(f"\nReport: {self.report_path}")
                missing = plotting_missing()
                if missing is not None:
                    print(f"  ({missing})")

    def __str__(self) -> str:
        """The verdict and the measurements (the summary), once a batch was taken."""
        if not self.data_wait:
            return "stoker profile: no batch was taken from the loader yet"
        return self.report().summary()

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
        """The diagnosis of what was observed (made once, on leaving the block or at the
        first call, from the loader's stats of then)."""
        if self._diagnosis is not None:
            return self._diagnosis
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
        _check_advice(d, loader)
        if self._started and self.wall_seconds:  # the block has ended: these stay
            self._diagnosis = d
        return d


#: How a run's time is shared between its phases (fractions of ``budget_s``).
_SHARES = {"compute": 0.1, "input": 0.3, "together": 0.35, "sweep": 0.25}


def diagnose(
    loader: Loader,
    step: None | float | Callable[[Any], None] = None,
    steps: int | None = None,
    sweep: bool = True,
    sweep_batches: int | None = None,
    progress: bool = True,
    *,
    quick: bool = False,
    tolerance: float | None = None,
    budget_s: float | None = None,
    config: dict[str, Any] | None = None,
) -> Diagnosis:
    """Measures the loader and the step and returns a :class:`Diagnosis` with the verdict.

    Each rate is measured until it is known to +-``tolerance`` at 95% confidence (the rule is
    :class:`Meter`'s) or its share of ``budget_s`` is spent; :attr:`Diagnosis.precision` says
    how well each was known.

    Args:
        loader: the loader as it will be used in training.
        step: ``step(batch)``, the training step (forward, backward, optimizer); a number is
            a synthetic step of that many milliseconds; default: a 100 ms synthetic step.
        steps: at most this many steps (batches) per phase (default: no limit but the rule
            and the time budget).
        sweep: run the thread sweep (1, 2, 4, ... up to the core count; the loader's own
            thread count reuses the input-only run).
        sweep_batches: at most this many batches per sweep point (default: ``steps``).
        progress: a progress line with the phase's rate, precision and ETA on stderr.
        quick: +-10% and half the time (unless ``tolerance`` or ``budget_s`` say otherwise).
        tolerance: the relative precision each rate is measured to (default 0.05).
        budget_s: the measurements' total time, roughly (default 60 s; 30 s quick); opening
            the dataset and the first batches of each phase come on top.
        config: what the report states as the run's configuration (dataset, spec, ...);
            batch size, threads, stoker's version and the date are added.
    """
    if step is None:
        step = synthetic_step(100)
    elif not callable(step):
        step = synthetic_step(float(step))
    if steps is not None and steps < 4:
        raise ValueError(f"steps must be at least 4, got {steps}")
    tolerance = tolerance or (QUICK_TOLERANCE if quick else TOLERANCE)
    if not 0 < tolerance < 1:
        raise ValueError(f"tolerance must be between 0 and 1, got {tolerance}")
    budget_s = budget_s or (30.0 if quick else 60.0)
    deadline = time.perf_counter() + budget_s
    shares = dict(_SHARES) if sweep else {"compute": 0.1, "input": 0.4, "together": 0.5}
    say = (
        (lambda text: print(f"stoker doctor: {text}", file=sys.stderr, flush=True))
        if progress
        else (lambda text: None)
    )
    block = max(2, min(loader.threads, 8))  # a block spans the batches built at once

    def budget(phase: str, part: float = 1.0) -> float:
        """The phase's share of the time left (warm-ups so far included)."""
        left = max(deadline - time.perf_counter(), 0.0)
        share = shares[phase] / sum(shares.values())
        shares[phase] *= 1 - part  # what is left of it for the phase's later parts
        if not shares[phase]:
            del shares[phase]
        return left * share * part

    def meter(label: str, phase: str, block: int = block, limit: int | None = steps) -> Meter:
        return Meter(
            label,
            tolerance=tolerance,
            budget_s=budget(phase),
            block=block,
            limit=limit,
            progress=progress,
        )

    others = _OtherLoad()
    load: dict[str, tuple[float, float]] = {}
    say("compute only: the step on one held batch")
    held = _held_batch(loader)
    h2d = _h2d_seconds(loader, held)
    phase = _OtherLoad()
    compute_meter = meter("compute only", "compute", block=1)
    compute = _compute_rate(loader, step, held, compute_meter)
    load["compute"] = phase.usage() or (0.0, 0.0)
    del held

    loader.reset_stats()
    phase = _OtherLoad()
    input_meter = meter(f"input only ({loader.threads} threads)", "input")
    input_rate = _input_rate(loader, input_meter)
    load["input"] = phase.usage() or (0.0, 0.0)
    stats = loader.stats()
    stages = _stage_seconds(stats, h2d)
    work = _decode_work(loader, stats)

    waits, step_times = [], []
    together_meter = meter("together (loader + step)", "together")
    iterator = _forever(loader)
    try:
        next(iterator)  # the pipeline's start is not a steady-state wait
        phase = _OtherLoad()
        started = time.perf_counter()
        while True:
            asked = time.perf_counter()
            batch = next(iterator)
            got = time.perf_counter()
            step(batch)
            _synchronize(loader)
            done = time.perf_counter()
            waits.append(got - asked)
            step_times.append(done - got)
            del batch
            if together_meter.add(done - asked):
                break
        wall = time.perf_counter() - started
        load["together"] = phase.usage() or (0.0, 0.0)
    finally:
        iterator.close()

    points: list[SweepPoint] = []
    if sweep:
        counts = _sweep_counts(_core.usable_cores())
        measured = [t for t in counts if not (t == loader.threads and loader.device is None)]
        given: dict[int, float] = {}  # each point's time

        def sweep_point(threads: int, seconds: float, times: int = 1) -> SweepPoint:
            probe = loader.with_options(threads=threads, device=None)
            try:
                point_meter = Meter(
                    f"thread sweep, {threads} thread(s)"
                    + (" (again: the sweep fell)" if times > 1 else ""),
                    tolerance=tolerance,
                    budget_s=seconds,
                    block=max(2, min(threads, 8)),
                    limit=sweep_batches or steps,
                    progress=progress,
                )
                point_load = _OtherLoad()
                rate = _input_rate(probe, point_meter)
                others_cpus, mine = point_load.usage() or (0.0, 0.0)
            finally:
                probe.close()
            return SweepPoint(threads, rate, point_meter.precision, mine, others_cpus, times)

        phase = _OtherLoad()
        for threads in counts:
            if threads not in measured:  # the input-only run is this point
                others_cpus, mine = load["input"]
                points.append(
                    SweepPoint(threads, input_rate, input_meter.precision, mine, others_cpus)
                )
                continue
            given[threads] = budget("sweep", 1 / (len(measured) - measured.index(threads)))
            points.append(sweep_point(threads, given[threads]))
        # More threads measured slower: contention, or a disturbance of one point. Both
        # points are measured again (more threads first), in the time left or half their
        # first time; the verdict flags a fall that stays.
        fallen = falls(points, tolerance)
        if fallen:
            again = sorted({p.threads for pair in fallen for p in pair}, reverse=True)
            say(
                "the thread sweep fell with more threads ("
                + ", ".join(
                    f"{a.threads}: {a.batches_per_s:.2f} -> {b.threads}: {b.batches_per_s:.2f}"
                    for a, b in fallen
                )
                + f"): measuring {', '.join(map(str, again))} thread(s) again"
            )
            typical = float(np.mean(list(given.values()))) if given else 1.0
            left = max(deadline - time.perf_counter(), 0.0) / len(again)
            for threads in again:
                k = next(i for i, p in enumerate(points) if p.threads == threads)
                seconds = max(left, 0.5 * given.get(threads, typical))
                points[k] = sweep_point(threads, seconds, times=points[k].measured + 1)
        load["sweep"] = phase.usage() or (0.0, 0.0)

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
        precision={
            "compute": compute_meter.precision,
            "input": input_meter.precision,
            "together": together_meter.precision,
        },
        tolerance=tolerance,
        phase_cpus={k: {"others": v[0], "mine": v[1]} for k, v in load.items()},
        materialized=_materialized(loader),
        config=_configuration(loader, config),
    )
    conclude(d)
    _check_advice(d, loader)
    return d


def _check_advice(d: Diagnosis, loader: Loader) -> None:
    """One more line of advice when the loader skipped samples (decode errors, damaged shards):
    ``stoker check --deep`` names every bad episode, camera and frame, or shard member."""
    stats = loader.stats()
    skipped = int(stats.get("skipped", 0))
    damaged = stats.get("damaged_shards") or []
    if not skipped and not damaged:
        return
    dataset = getattr(loader.dataset, "root", None) or d.config.get("dataset") or "DATASET"
    reasons = [str(s.get("reason", "")) for s in stats.get("skips", [])][:1] + damaged[:1]
    d.advice.append(
        f"The loader skipped {skipped} samples{' and damaged shards' if damaged else ''}"
        + (f" (first: {reasons[0]})" if reasons else "")
        + f": run `stoker check {dataset} --deep` to find every bad episode, camera and frame."
    )


def _configuration(loader: Loader, given: dict[str, Any] | None) -> dict[str, Any]:
    """The run's configuration as the report states it."""
    import datetime

    from stoker.version import __version__

    ds = loader.dataset
    config: dict[str, Any] = {"dataset": getattr(ds, "root", type(ds).__name__)}
    spec = getattr(ds, "spec", None)
    if isinstance(ds, ShardDataset):
        config["dataset"] = f"{len(ds.urls)} shards: {ds.urls[0]} ..."
        config["spec"] = {name: repr(decoder) for name, decoder in ds.spec.items()}
    elif spec is not None:
        config["spec"] = _plain(
            {
                "delta_timestamps": spec.delta_timestamps,
                "delta_indices": spec.delta_indices,
                "size": spec.size,
                "layout": spec.layout,
            }
        )
    config.update(given or {})
    config.update(
        batch_size=loader.batch_size,
        threads=loader.threads,
        cores=_core.usable_cores(),
        device=str(loader.device) if loader.device is not None else "host memory",
        stoker_version=__version__,
        date=datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
    )
    return config


def _plain(value: Any) -> Any:
    """``value`` with tuples and arrays as lists, as JSON writes them."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items() if v is not None and v != {}}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def _materialized(loader: Loader) -> dict[str, Any] | None:
    """The options of ``stoker etl`` when it wrote the loader's dataset (its report), else
    None: the advice then does not send the dataset through the ETL again."""
    from stoker.io.storage import open_dataset_root
    from stoker.writers.etl import REPORT_PATH

    ds = loader.dataset
    root = getattr(ds, "root", None)
    if root is None:
        return None
    try:
        source = open_dataset_root(root, getattr(ds, "_storage_options", None))
        if not source.exists(REPORT_PATH):
            return None
        options = json.loads(source.read_bytes(REPORT_PATH, "stoker etl report"))["options"]
    except (OSError, ValueError, KeyError, TypeError, _core.Error):
        return None
    return options if isinstance(options, dict) else None
