"""stoker doctor: which roofline bounds training, the model's or the data supply's, and what to
change.

    report = stoker.diagnose(loader, step=train_step, steps=200)
    print(report.summary())
    report.write_report("doctor-report")       # HTML with PNG plots

    with stoker.profile(loader) as prof:        # around your own loop instead
        for batch in loader:
            train_step(batch)
    print(prof.report().summary())

    $ stoker doctor path/to/dataset --batch-size 32 --step-ms 120

One run measures:
1. the compute-only rate: the step repeated on one batch held in memory, already on the
   device, synchronized on a GPU;
2. the input-only rate: the loader iterated with no step;
3. both together: ``data_wait`` per step (the time the trainer blocked in ``next``), the step
   time and the wall time;
4. the stage breakdown: sampling, index, decode (split into seek, decode and convert),
   transform, collate and host-to-device copy;
5. a thread sweep of the input-only rate from 1 thread to the core count.

The verdict follows docs/doctor.md's decision table.
"""

from __future__ import annotations

import argparse
import contextlib
import html
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Union

import numpy as np

from stoker.loader import Loader, LoaderObserver
from stoker.video import VideoReader

# A step's wait for data is "small" below this share of the wall time.
SMALL_WAIT_SHARE = 0.05
# A thread count "helps" when it adds this much rate; the plateau is the first count within
# PLATEAU of the best rate.
STILL_SCALES = 1.15
PLATEAU = 0.9
STAGES = ("sampling", "index", "seek", "decode", "convert", "transform", "collate", "h2d")


def synthetic_step(milliseconds: float) -> Callable[[Any], None]:
    """A training step of known cost that holds no CPU, as a GPU step would not: it sleeps."""
    seconds = float(milliseconds) / 1000

    def step(batch):
        time.sleep(seconds)

    step.milliseconds = float(milliseconds)
    return step


def _cores() -> int:
    return len(os.sched_getaffinity(0))


def _sweep_counts(cores: int) -> List[int]:
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

    def cpus(self) -> Optional[float]:
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


def _forever(loader: Loader) -> Iterator[Dict[str, Any]]:
    """Batches across epochs, without end."""
    while True:
        produced = False
        for batch in loader:
            produced = True
            yield batch
        if not produced:
            raise ValueError("the loader delivers no batches (is the dataset or rank empty?)")


@dataclass
class SweepPoint:
    threads: int
    batches_per_s: float


@dataclass
class Diagnosis:
    """What :func:`diagnose` (or :class:`profile`) measured, and the verdict.

    Rates are in batches per second. ``stage_seconds`` are thread-seconds per batch.
    ``bound`` is ``"compute"`` or ``"input"``; ``verdict`` is one of ``"compute-bound"``,
    ``"add-threads"``, ``"decode-bound"``, ``"stage-bound"`` (another stage dominates once
    decode is not the problem: the bottleneck has moved).
    """

    batch_size: int
    threads: int
    cores: int
    compute_batches_per_s: float
    input_batches_per_s: float
    step_seconds: np.ndarray
    data_wait: np.ndarray
    wall_seconds: float
    stage_seconds: Dict[str, float]
    sweep: List[SweepPoint]
    decode_work: Dict[str, float]
    balance: Optional[Dict[str, float]] = None
    bound: str = ""
    verdict: str = ""
    headline: str = ""
    advice: List[str] = field(default_factory=list)
    dominant_stage: str = ""
    plateau_threads: Optional[int] = None  # where more threads stop helping (the sweep's)
    other_cpus: Optional[float] = None  # CPUs other processes used meanwhile (diagnose only)
    estimated: List[str] = field(default_factory=list)  # which numbers are estimates

    # ---- Derived numbers ----------------------------------------------------------------

    @property
    def data_wait_share(self) -> float:
        return float(self.data_wait.sum() / self.wall_seconds) if self.wall_seconds else 0.0

    @property
    def overlap(self) -> float:
        """The share of the input pipeline's work that was hidden behind the steps."""
        if not self.input_batches_per_s or not len(self.data_wait):
            return 0.0
        alone = len(self.data_wait) / self.input_batches_per_s
        return float(min(1.0, max(0.0, 1 - self.data_wait.sum() / alone)))

    @property
    def achieved_batches_per_s(self) -> float:
        return len(self.step_seconds) / self.wall_seconds if self.wall_seconds else 0.0

    def percentile_ms(self, values: np.ndarray, q: float) -> float:
        return float(np.percentile(values, q) * 1000) if len(values) else 0.0

    # ---- Output -------------------------------------------------------------------------

    def summary(self) -> str:
        b = self.batch_size
        lines = [f"stoker doctor: {self.bound}-bound. {self.headline}", ""]
        rows = [
            ("compute only (step on a held batch)", self.compute_batches_per_s),
            (f"input only (loader, {self.threads} threads)", self.input_batches_per_s),
            ("together (achieved)", self.achieved_batches_per_s),
        ]
        lines.append(f"{'rate':40s} {'batches/s':>10s} {'samples/s':>10s}")
        for name, rate in rows:
            lines.append(f"{name:40s} {rate:10.2f} {rate * b:10.1f}")
        lines.append("")
        lines.append(f"data_wait per step: p50 {self.percentile_ms(self.data_wait, 50):.2f} ms, "
                     f"p95 {self.percentile_ms(self.data_wait, 95):.2f} ms, "
                     f"max {self.percentile_ms(self.data_wait, 100):.2f} ms; "
                     f"{self.data_wait_share:.1%} of wall time")
        lines.append(f"step: p50 {self.percentile_ms(self.step_seconds, 50):.2f} ms; "
                     f"input work hidden behind steps: {self.overlap:.0%}; "
                     f"wall {self.wall_seconds:.2f} s over {len(self.step_seconds)} steps")
        lines.append("")
        total = sum(self.stage_seconds.values()) or 1.0
        lines.append(f"{'stage (thread-ms per batch)':28s} {'ms':>9s} {'share':>7s}")
        for stage in STAGES:
            seconds = self.stage_seconds.get(stage, 0.0)
            lines.append(f"{stage:28s} {seconds * 1000:9.2f} {seconds / total:7.1%}")
        lines.append("")
        if self.sweep:
            sweep = ", ".join(f"{p.threads}: {p.batches_per_s:.2f}" for p in self.sweep)
            lines.append(f"thread sweep (threads: batches/s): {sweep}; more threads stop "
                         f"helping at {self.plateau_threads}")
        if self.balance:
            lines.append(f"ranks: step imbalance (max / mean rank cost) "
                         f"{self.balance['before']:.2f} as dealt; "
                         f"{self.balance['after']:.2f} balanced (Loader(..., balance=True))")
        if self.estimated:
            lines.append("estimated, not measured: " + ", ".join(self.estimated))
        if self.other_cpus is not None and self.other_cpus > 0.2:
            lines.append(f"warning: other processes kept {self.other_cpus:.1f} CPUs busy during "
                         f"the measurement; rates and the sweep are lower than on a quiet "
                         f"machine")
        lines.append("")
        lines.append("What to do:")
        lines.extend(f"  - {line}" for line in self.advice)
        return "\n".join(lines)

    def to_dict(self) -> Dict[str, Any]:
        return {
            "bound": self.bound, "verdict": self.verdict, "headline": self.headline,
            "advice": self.advice, "dominant_stage": self.dominant_stage,
            "batch_size": self.batch_size, "threads": self.threads, "cores": self.cores,
            "compute_batches_per_s": self.compute_batches_per_s,
            "input_batches_per_s": self.input_batches_per_s,
            "achieved_batches_per_s": self.achieved_batches_per_s,
            "data_wait_ms": {"p50": self.percentile_ms(self.data_wait, 50),
                             "p95": self.percentile_ms(self.data_wait, 95),
                             "max": self.percentile_ms(self.data_wait, 100),
                             "total": float(self.data_wait.sum() * 1000)},
            "step_ms_p50": self.percentile_ms(self.step_seconds, 50),
            "step_ms_total": float(self.step_seconds.sum() * 1000),
            "wall_seconds": self.wall_seconds, "overlap": self.overlap,
            "stage_ms_per_batch": {k: v * 1000 for k, v in self.stage_seconds.items()},
            "sweep": [{"threads": p.threads, "batches_per_s": p.batches_per_s}
                      for p in self.sweep],
            "plateau_threads": self.plateau_threads, "other_cpus": self.other_cpus,
            "decode_work": self.decode_work, "balance": self.balance,
            "estimated": self.estimated,
        }

    def write_report(self, folder: Union[str, os.PathLike]) -> str:
        """Writes ``index.html``, ``report.json`` and the plots (``stages.png``,
        ``sweep.png``, ``data_wait.png``) into ``folder``; returns the HTML file's path."""
        folder = os.fspath(folder)
        os.makedirs(folder, exist_ok=True)
        plots = _plot(self, folder)
        with open(os.path.join(folder, "report.json"), "w") as f:
            json.dump(self.to_dict(), f, indent=2)
        images = "".join(f'<figure><img src="{name}" alt="{html.escape(title)}">'
                         f"<figcaption>{html.escape(title)}</figcaption></figure>"
                         for name, title in plots)
        if not plots:
            images = "<p>(matplotlib is not installed: no plots)</p>"
        page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>stoker doctor</title>
<style>body{{font-family:sans-serif;max-width:960px;margin:2em auto}}
pre{{background:#f4f4f4;padding:1em;overflow-x:auto}} img{{max-width:100%}}
h1 span{{font-weight:normal}}</style></head><body>
<h1>stoker doctor: <span>{html.escape(self.bound)}-bound ({html.escape(self.verdict)})</span></h1>
<p><b>{html.escape(self.headline)}</b></p>
<ul>{''.join(f'<li>{html.escape(a)}</li>' for a in self.advice)}</ul>
{images}
<h2>Measurements</h2><pre>{html.escape(self.summary())}</pre>
</body></html>"""
        path = os.path.join(folder, "index.html")
        with open(path, "w") as f:
            f.write(page)
        return path


def _plot(d: Diagnosis, folder: str):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    plots = []
    fig, ax = plt.subplots(figsize=(7, 3.2))
    values = [d.stage_seconds.get(s, 0.0) * 1000 for s in STAGES]
    colours = ["tab:red" if s == d.dominant_stage else "tab:blue" for s in STAGES]
    ax.barh(STAGES, values, color=colours)
    ax.invert_yaxis()
    ax.set_xlabel("thread-milliseconds per batch")
    ax.set_title("Time per stage")
    fig.tight_layout()
    fig.savefig(os.path.join(folder, "stages.png"), dpi=110)
    plt.close(fig)
    plots.append(("stages.png", "Time per stage (thread-ms per batch); the dominant one in red"))

    fig, ax = plt.subplots(figsize=(7, 3.6))
    threads = [p.threads for p in d.sweep]
    ax.plot(threads, [p.batches_per_s for p in d.sweep], "o-", label="input only (loader)")
    ax.axhline(d.compute_batches_per_s, color="tab:red", linestyle="--",
               label="compute only (step)")
    ax.set_xlabel("loader threads")
    ax.set_ylabel("batches / s")
    ax.set_xticks(threads)
    ax.set_ylim(bottom=0)
    ax.legend()
    ax.set_title("Thread sweep")
    fig.tight_layout()
    fig.savefig(os.path.join(folder, "sweep.png"), dpi=110)
    plt.close(fig)
    plots.append(("sweep.png", "Input-only rate by thread count, and the compute rate"))

    fig, ax = plt.subplots(figsize=(7, 3.2))
    ax.hist(d.data_wait * 1000, bins=40, color="tab:blue")
    ax.set_xlabel("data_wait per step (ms)")
    ax.set_ylabel("steps")
    ax.set_title("How long the trainer waited for each batch")
    fig.tight_layout()
    fig.savefig(os.path.join(folder, "data_wait.png"), dpi=110)
    plt.close(fig)
    plots.append(("data_wait.png", "Histogram of data_wait over steps"))
    return plots


# ---- Measuring ------------------------------------------------------------------------------


def _stage_seconds(stats: Dict[str, Any], h2d_per_batch: float) -> Dict[str, float]:
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


def _decode_work(loader: Loader, stats: Dict[str, Any]) -> Dict[str, Any]:
    """Source vs output pixels per frame, and frames decoded per frame kept."""
    ds = loader.dataset
    source, output, sizes, output_sizes = [], [], [], []
    fields = loader.fields
    for key in ds.item_keys:
        if key.source not in ds.cameras:
            continue
        video = int(ds.index.videos_of(key.source)[0])
        reader = VideoReader(ds.index.video_files[video], frame_table=ds.index.frame_table(video))
        source.append(reader.width * reader.height)
        sizes.append(f"{reader.width}x{reader.height}")
        _, shape = fields[key.name]
        h, w = (shape[-2], shape[-1]) if shape[-3] == 3 else (shape[-3], shape[-2])
        output.append(h * w)
        output_sizes.append(f"{w}x{h}")
    decode = stats["decode"]
    return {"source_pixels": float(np.mean(source)) if source else 0.0,
            "output_pixels": float(np.mean(output)) if output else 0.0,
            "decoded_per_kept": decode["packets_decoded"] / max(decode["frames_converted"], 1),
            "source_size": sizes[0] if sizes else "",
            "output_size": output_sizes[0] if output_sizes else ""}


def _balance(loader: Loader) -> Optional[Dict[str, float]]:
    if loader.world_size <= 1:
        return None
    from stoker.sampling import LoadBalancedSampler

    costs = loader.dataset.sample_costs()
    sampler = LoadBalancedSampler(costs, batch_size=loader.batch_size, shuffle=loader.shuffle,
                                  seed=loader.seed, rank=loader.rank,
                                  world_size=loader.world_size, drop_last=loader.drop_last)
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


def _held_batch(loader: Loader) -> Dict[str, Any]:
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


def _h2d_seconds(loader: Loader, host: Dict[str, Any], repeats: int = 5) -> float:
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
        self.data_wait: List[float] = []
        self.step_seconds: List[float] = []
        self.wall_seconds = 0.0
        self._started = 0.0
        self._asked = 0.0  # when the consumer asked for the batch it waits for
        self._returned: Optional[float] = None  # when the consumer got its last batch

    def __enter__(self) -> "profile":
        self.loader.reset_stats()
        self.loader.add_observer(self)
        self._started = time.perf_counter()
        return self

    def __exit__(self, *exc) -> bool:
        now = time.perf_counter()
        self._end_step(now)  # the step on the last batch, when the iteration is still open
        self.wall_seconds = now - self._started
        self.loader.remove_observer(self)
        return False

    # LoaderObserver
    def wait_started(self, now: float) -> None:
        self._end_step(now)
        self._asked = now

    def batch_received(self, batch: Dict[str, Any], now: float) -> None:
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
        waits = np.asarray(self.data_wait[:len(steps)] if len(steps) else self.data_wait,
                           dtype=np.float64)
        stages = _stage_seconds(stats, 0.0)
        work = sum(stages.values())
        threads = stats["threads"] or _cores()
        compute = 1 / float(np.median(steps)) if len(steps) else math.inf
        input_rate = threads / work if work > 0 else math.inf
        d = Diagnosis(batch_size=loader.batch_size, threads=threads, cores=_cores(),
                      compute_batches_per_s=compute, input_batches_per_s=input_rate,
                      step_seconds=steps, data_wait=waits,
                      wall_seconds=self.wall_seconds, stage_seconds=stages, sweep=[],
                      decode_work=_decode_work(loader, stats), balance=_balance(loader),
                      estimated=["compute rate (median step)",
                                 "input rate (threads / thread-seconds per batch)"])
        _conclude(d)
        return d


def diagnose(loader: Loader, step: Union[None, float, Callable[[Any], None]] = None,
             steps: int = 200, sweep: bool = True, sweep_batches: Optional[int] = None,
             progress: bool = True) -> Diagnosis:
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
    say = (lambda text: print(f"stoker doctor: {text}", file=sys.stderr, flush=True)) \
        if progress else (lambda text: None)

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
        for threads in _sweep_counts(_cores()):
            say(f"thread sweep: {threads} thread(s)")
            probe = loader.with_options(threads=threads, device=None)
            points.append(SweepPoint(threads, _input_rate(probe, per_point)))
            probe.close()

    d = Diagnosis(batch_size=loader.batch_size, threads=stats["threads"], cores=_cores(),
                  compute_batches_per_s=compute, input_batches_per_s=input_rate,
                  step_seconds=np.asarray(step_times), data_wait=np.asarray(waits),
                  wall_seconds=wall, stage_seconds=stages, sweep=points, decode_work=work,
                  balance=_balance(loader), other_cpus=others.cpus())
    _conclude(d)
    return d


# ---- The verdict ----------------------------------------------------------------------------


def _plateau(sweep: List[SweepPoint]) -> Optional[SweepPoint]:
    """The fewest threads within PLATEAU of the best rate."""
    if not sweep:
        return None
    best = max(p.batches_per_s for p in sweep)
    return min((p for p in sweep if p.batches_per_s >= PLATEAU * best), key=lambda p: p.threads)


def _conclude(d: Diagnosis) -> None:
    """Fills bound, verdict, headline and advice from the measurements (docs/doctor.md)."""
    plateau = _plateau(d.sweep)
    d.plateau_threads = plateau.threads if plateau else None
    b = d.batch_size
    compute, supply = d.compute_batches_per_s, d.input_batches_per_s
    small_wait = d.data_wait_share < SMALL_WAIT_SHARE
    stages = d.stage_seconds
    groups = {"decode": stages.get("seek", 0) + stages.get("decode", 0) + stages.get("convert", 0),
              "transform": stages.get("transform", 0), "collate": stages.get("collate", 0),
              "index": stages.get("index", 0) + stages.get("sampling", 0),
              "h2d": stages.get("h2d", 0)}
    dominant = max(groups, key=groups.get)
    d.dominant_stage = {"decode": max(("seek", "decode", "convert"),
                                      key=lambda s: stages.get(s, 0)),
                        "index": "index"}.get(dominant, dominant)
    share = groups[dominant] / (sum(groups.values()) or 1)

    if compute < supply and small_wait:
        d.bound, d.verdict = "compute", "compute-bound"
        d.headline = (f"The step runs at {compute:.2f} batches/s and the loader can supply "
                      f"{supply:.2f}; the trainer waited for data {d.data_wait_share:.1%} of "
                      f"the time.")
        d.advice = ["Stop tuning the loader: it is not the bottleneck.",
                    "Look at the model's side: a larger batch size if memory allows, mixed "
                    "precision, a faster kernel or compiled model."]
        if supply > 2 * compute:
            threads_needed = max(1, math.ceil(d.threads * compute / supply * 1.25))
            d.advice.append(f"The loader has headroom: about {threads_needed} thread(s) would "
                            f"still keep up, freeing cores for other work.")
        return

    d.bound = "input"
    d.headline = (f"The trainer waited for data {d.data_wait_share:.1%} of the time: the loader "
                  f"supplies {supply:.2f} batches/s ({supply * b:.0f} samples/s); the step "
                  f"alone runs at {compute:.2f}.")
    current = next((p for p in d.sweep if p.threads == d.threads), None)
    threads_note = "more threads no longer help"
    if plateau is not None:
        last, before_last = d.sweep[-1], d.sweep[-2] if len(d.sweep) > 1 else None
        still_scales = before_last is not None and \
            last.batches_per_s >= STILL_SCALES * before_last.batches_per_s
        enough = [p for p in d.sweep if p.batches_per_s >= compute]
        target = min(enough, key=lambda p: p.threads) if enough else plateau
        below_target = d.threads < target.threads and (
            current is None or target.batches_per_s >= STILL_SCALES * current.batches_per_s)
        if below_target:
            d.verdict = "add-threads"
            d.advice = [f"Raise threads from {d.threads} to {target.threads}: the sweep gives "
                        f"{target.batches_per_s:.2f} batches/s there "
                        f"({'enough for' if target.batches_per_s >= compute else 'still below'} "
                        f"the step's {compute:.2f})."]
            if still_scales and target.threads == d.cores and target.batches_per_s < compute:
                d.advice.append(f"The sweep still scales at {d.cores} cores: more cores (or "
                                f"less work per sample, see below) would help further.")
            _decode_advice(d, groups, share)
            return
        if still_scales and d.threads >= d.cores:
            threads_note = (f"the loader already runs on all {d.cores} cores (the sweep still "
                            f"scales: more cores would help too)")
    if dominant == "decode":
        d.verdict = "decode-bound"
        d.advice = [f"Per-sample cost bounds the supply, and decoding is {share:.0%} of it "
                    f"(dominant part: {d.dominant_stage}); {threads_note}."]
        _decode_advice(d, groups, share, force=True)
    else:
        d.verdict = "stage-bound"
        d.advice = [f"Per-sample cost bounds the supply, and {d.dominant_stage} is {share:.0%} "
                    f"of it: the bottleneck has moved off decoding; {threads_note}."]
        if dominant == "transform":
            d.advice.append("Output uint8 and normalize on the GPU, or use a cheaper dtype "
                            "(float16/bfloat16 halve the bytes written).")
        elif dominant == "collate":
            d.advice.append("Fewer or smaller per-sample columns, or a smaller batch.")
        elif dominant == "h2d":
            d.advice.append("Use device='cuda' (pinned memory, overlapped copies) and uint8 "
                            "images, normalized on the GPU.")
        else:
            d.advice.append("Planning and sampling dominate: check the window spec.")


def _decode_advice(d: Diagnosis, groups: Dict[str, float], share: float, force=False) -> None:
    """What re-encoding at training size or a shorter GOP, or fewer frames, would gain."""
    work = d.decode_work
    if not work or not work.get("output_pixels"):
        return
    if not force and share < 0.5:
        return
    pixels = work["source_pixels"] / work["output_pixels"]
    decode = groups["decode"]
    other = sum(groups.values()) - decode
    if pixels > 1.3:
        # Decode cost scales about with the pixels decoded; stoker etl's encodes are also tuned
        # for fast decoding, which bench/etl_bench.py measures as a further gain.
        after = other + decode / pixels
        new_rate = d.threads / after if after > 0 else math.inf
        size = work["output_size"]
        d.advice.append(
            f"Frames are decoded at {work['source_size']} and used at {size} "
            f"({pixels:.1f}x the pixels). Re-encoding once with `stoker etl SRC DST --size "
            f"{size}` should cut decode cost at least {pixels:.1f}x, to an input rate near "
            f"{min(new_rate, 1e9):.1f} batches/s.")
    if work["decoded_per_kept"] > 2:
        d.advice.append(f"Each kept frame costs {work['decoded_per_kept']:.1f} decoded ones (the "
                        f"GOP structure): a shorter GOP (`stoker etl --gop`) or a window whose "
                        f"frames sit in fewer GOPs would decode fewer.")


# ---- Command line ---------------------------------------------------------------------------


def _load_spec(path: Optional[str], dataset_root: str):
    from stoker.lerobot import WindowSpec

    if path is None:
        return None
    with open(path) as f:
        text = f.read()
    if path.endswith((".yaml", ".yml")):
        try:
            import yaml
        except ImportError:
            raise SystemExit("reading a YAML spec needs PyYAML (pip install pyyaml); "
                             "or give the spec as JSON") from None
        value = yaml.safe_load(text)
    else:
        value = json.loads(text)
    if not isinstance(value, dict):
        raise SystemExit(f"{path}: a spec is a mapping (delta_timestamps, size, layout)")
    known = {"delta_timestamps", "delta_indices", "size", "layout", "tolerance_s"}
    unknown = set(value) - known
    if unknown:
        raise SystemExit(f"{path}: unknown spec keys {sorted(unknown)}; known: {sorted(known)}")
    delta = {k: (tuple(v) if isinstance(v, list) and len(v) == 2 and isinstance(v[0], str)
                 else v) for k, v in (value.get("delta_timestamps") or {}).items()}
    return WindowSpec(delta_timestamps=delta, delta_indices=value.get("delta_indices"),
                      size=value.get("size"), layout=value.get("layout", "TCHW"),
                      tolerance_s=value.get("tolerance_s", 1e-4))


def default_spec(dataset_root: str):
    """Every camera's last three frames at 224x224, and the next 16 actions when there are."""
    from stoker.lerobot import WindowSpec
    from stoker.lerobot_meta import read_lerobot_metadata

    meta = read_lerobot_metadata(dataset_root)
    fps = meta.fps
    delta = {camera: [-2 / fps, -1 / fps, 0.0] for camera in meta.cameras}
    if "action" in meta.features:
        delta["action"] = [k / fps for k in range(16)]
    return WindowSpec(delta_timestamps=delta, size=(224, 224))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dataset", help="a LeRobot dataset folder (v2.1 or v3.0)")
    parser.add_argument("--spec", help="window spec, YAML or JSON: delta_timestamps, size, "
                        "layout (default: each camera's last 3 frames at 224x224, 16 actions)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--step-ms", type=float, default=120.0,
                        help="the synthetic training step's cost (default 120 ms)")
    parser.add_argument("--threads", type=int, default=None,
                        help="loader threads (default: all cores)")
    parser.add_argument("--steps", type=int, default=100,
                        help="steps per measurement (default 100)")
    parser.add_argument("--device", default=None, help="e.g. cuda (default: host memory)")
    parser.add_argument("--report", default="stoker-doctor",
                        help="folder for the HTML report (default ./stoker-doctor)")
    parser.add_argument("--no-sweep", action="store_true", help="skip the thread sweep")


def main(args: argparse.Namespace) -> int:
    import stoker

    spec = _load_spec(args.spec, args.dataset) or default_spec(args.dataset)
    ds = stoker.LeRobotDataset(args.dataset, spec)
    loader = stoker.Loader(ds, batch_size=args.batch_size, threads=args.threads,
                           device=args.device)
    report = diagnose(loader, step=synthetic_step(args.step_ms), steps=args.steps,
                      sweep=not args.no_sweep)
    print(report.summary())
    path = report.write_report(args.report)
    print(f"\nReport: {path}")
    return 0
