#!/usr/bin/env python3
"""soak_bench: stoker.Loader's memory over a long run; after warm-up its RSS must stay flat.

    PYTHONPATH=python .venv/bin/python bench/soak_bench.py [--samples 20000000]
        [--batch-size 600] [--threads 2] [--interval 2] [--warmup 0.1]
        [--plot bench/out/soak_rss.png] [--csv bench/out/soak_rss.csv]
        [--workdir bench/out/soak_data]

Data: a LeRobot v3.0 dataset written with tests/python/lerobot_datasets.write_v30 (real FFmpeg
encodes, libx264 g=2 crf 30, stream-copy packed): 4 episodes of 300 frames, one camera at
32x32, all in one video file; 1,200 samples (2 batches per epoch), kept in --workdir and
reused. Tiny frames and big batches so that 20 million samples take minutes: a batch of 600
asks for half the file's frames, which the decoder reads forward instead of seeking.

Run, in this process: stoker.Loader(batch --batch-size, shuffled, --threads threads, numpy
output) over the dataset, epoch after epoch, until --samples samples were delivered (a sample:
its frame, state, action and the scalar columns). A thread reads VmRSS from /proc/self/status
every --interval seconds. The warm-up is the first --warmup fraction of the samples.

Printed: the samples/s reached and what 20 million samples take at that rate; RSS before the
first batch, after the warm-up and at the end; the largest distance of RSS after the warm-up
from its value at the end of the warm-up ("max drift"), and the least-squares trend after it
(MB per 10^6 samples); pass or fail of the target: max drift <= 20 MB. Writes every RSS sample
to --csv and a plot of RSS over samples to --plot (with matplotlib; without it, says so).
With the defaults, 20 million samples at 21,000-34,000 samples/s on 2 idle cores take 10-16
minutes (half that rate, twice as long, while other jobs share the cores).
"""

from __future__ import annotations

import argparse
import csv
import os
import platform
import sys
import threading
import time
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent / "tests" / "python"))

EPISODES = [300] * 4
EPISODES_PER_FILE = 4
FRAME_SIZE = (32, 32)
CODEC = "h264"
DRIFT_TARGET_MB = 20.0
REFERENCE_SAMPLES = 20_000_000  # the run


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def write_data(workdir: Path) -> Path:
    """The dataset, written once (a stamp file names the recipe)."""
    from lerobot_datasets import write_v30

    root = workdir / "v30-soak"
    stamp = root / f".recipe-{len(EPISODES)}x{EPISODES[0]}-{FRAME_SIZE[1]}x{FRAME_SIZE[0]}-{CODEC}"
    if not stamp.exists():
        import shutil

        shutil.rmtree(root, ignore_errors=True)
        write_v30(
            root,
            EPISODES,
            codec=CODEC,
            size=FRAME_SIZE,
            episodes_per_file=EPISODES_PER_FILE,
            cache_dir=str(workdir / "encodes"),
        )
        stamp.touch()
    return root


class RssSampler:
    """(seconds, samples delivered, RSS MB) every `interval` seconds, on a thread."""

    def __init__(self, interval: float):
        self.interval = interval
        self.samples_done = 0  # written by the loop
        self.points: list[tuple[float, int, float]] = []
        self._stop = threading.Event()
        self._started = time.perf_counter()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self.record()
        self._thread.start()

    def record(self) -> None:
        self.points.append((time.perf_counter() - self._started, self.samples_done, rss_mb()))

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.record()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.record()


def write_plot(path: Path, points, warm_index: int, warm_rss: float, title: str) -> str | None:
    """The plot; None when matplotlib is missing (with why)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        return f"no plot: matplotlib cannot be imported ({e})"
    samples = np.array([p[1] for p in points]) / 1e6
    rss = np.array([p[2] for p in points])
    fig, axes = plt.subplots(figsize=(9, 4.5))
    axes.plot(samples, rss, color="tab:blue", lw=1.2, label="VmRSS")
    axes.axvline(samples[warm_index], color="gray", ls="--", lw=1, label="end of warm-up")
    axes.axhspan(
        warm_rss - DRIFT_TARGET_MB,
        warm_rss + DRIFT_TARGET_MB,
        color="tab:green",
        alpha=0.12,
        label=f"warm-up RSS +/- {DRIFT_TARGET_MB:g} MB",
    )
    axes.set_xlabel("samples delivered (millions)")
    axes.set_ylabel("RSS (MB)")
    axes.set_title(title, fontsize=9)
    axes.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=REFERENCE_SAMPLES)
    parser.add_argument("--batch-size", type=int, default=600)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between RSS reads")
    parser.add_argument(
        "--warmup", type=float, default=0.1, help="fraction of the samples that is warm-up"
    )
    parser.add_argument("--plot", type=Path, default=BENCH / "out" / "soak_rss.png")
    parser.add_argument("--csv", type=Path, default=BENCH / "out" / "soak_rss.csv")
    parser.add_argument("--workdir", type=Path, default=BENCH / "out" / "soak_data")
    args = parser.parse_args()
    if not 0 < args.warmup < 1:
        parser.error("--warmup is a fraction in (0, 1)")

    import stoker

    print("stoker soak benchmark: Loader memory over a long run")
    print(f"  command: {' '.join(sys.argv)}")
    print(
        f"  machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; "
        f"Python {platform.python_version()}; stoker {stoker.__version__}; load average "
        f"{os.getloadavg()[0]:.2f} at start"
    )
    root = write_data(args.workdir.resolve())
    dataset = stoker.LeRobotDataset(str(root), progress=False)
    print(
        f"  data: {root}: LeRobot v3.0, {len(EPISODES)} episodes x {EPISODES[0]} frames, one "
        f"{FRAME_SIZE[1]}x{FRAME_SIZE[0]} {CODEC} camera; {len(dataset)} samples"
    )
    loader = stoker.Loader(
        dataset,
        batch_size=args.batch_size,
        shuffle=True,
        seed=0,
        threads=args.threads,
        output="numpy",
    )
    print(
        f"  loader: batch {args.batch_size}, shuffled, {args.threads} threads, numpy; "
        f"{len(loader)} batches per epoch; RSS read every {args.interval:g} s; warm-up: the "
        f"first {args.warmup:.0%} of {args.samples:,} samples"
    )

    sampler = RssSampler(args.interval)
    start_rss = rss_mb()
    sampler.start()
    warm_samples = int(args.samples * args.warmup)
    warm_rss = warm_time = None
    began = time.perf_counter()
    done = epochs = 0
    while done < args.samples:
        for batch in loader:
            done += len(batch["index"])
            sampler.samples_done = done
            del batch
            if warm_rss is None and done >= warm_samples:
                warm_rss, warm_time = rss_mb(), time.perf_counter() - began
                sampler.record()
            if done >= args.samples:
                break
        epochs += 1
    seconds = time.perf_counter() - began
    sampler.stop()
    end_rss = rss_mb()
    stats = loader.stats()
    loader.close()

    points = sampler.points
    warm_index = next(i for i, p in enumerate(points) if p[1] >= warm_samples)
    after = np.array([p[2] for p in points[warm_index:]])
    at = np.array([p[1] for p in points[warm_index:]], np.float64)
    drift = float(np.max(np.abs(after - warm_rss)))
    slope = float(np.polyfit(at / 1e6, after, 1)[0]) if len(after) >= 3 else float("nan")
    rate = done / seconds
    ok = drift <= DRIFT_TARGET_MB

    print(
        f"\n{'samples':>12} {'epochs':>7} {'seconds':>8} {'samples/s':>10} | "
        f"{'RSS start':>9} {'warm-up':>8} {'end':>8} {'peak':>8} | {'max drift':>9} "
        f"{'MB/10^6':>8}"
    )
    print(
        f"{done:>12,} {epochs:>7} {seconds:>8.1f} {rate:>10.0f} | {start_rss:>9.1f} "
        f"{warm_rss:>8.1f} {end_rss:>8.1f} {max(p[2] for p in points):>8.1f} | "
        f"{drift:>9.1f} {slope:>8.3f}"
    )
    print(
        f"  RSS in MB: before the first batch, after the warm-up ({warm_samples:,} samples, "
        f"{warm_time:.0f} s), at the end, and the largest read; max drift: after the warm-up, "
        f"the largest |RSS - warm-up RSS|; MB/10^6: least-squares trend after the warm-up "
        f"({len(after)} reads)"
    )
    print(
        f"  at {rate:,.0f} samples/s, {REFERENCE_SAMPLES:,} samples take "
        f"{REFERENCE_SAMPLES / rate / 60:.1f} min"
    )
    print(
        f"  loader: memory bound {stats['memory_bound_bytes'] / 2**20:.1f} MB (batch pool), "
        f"{len(stats['data_wait'])} per-batch wait records held by stats() (8 B each), "
        f"data_wait p95 {stats['data_wait_p95'] * 1e3:.2f} ms"
    )
    print(
        f"\nTarget: RSS flat within {DRIFT_TARGET_MB:g} MB after warm-up over {done:,} samples: "
        f"max drift {drift:.1f} MB -> {'met' if ok else 'NOT met'}"
    )

    args.csv.parent.mkdir(parents=True, exist_ok=True)
    with args.csv.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["seconds", "samples", "rss_mb"])
        writer.writerows((f"{s:.2f}", n, f"{r:.2f}") for s, n, r in points)
    title = (
        f"stoker.Loader soak: {done:,} samples, batch {args.batch_size}, {args.threads} "
        f"threads; max drift {drift:.1f} MB after warm-up ({'met' if ok else 'NOT met'})"
    )
    why = write_plot(args.plot, points, warm_index, warm_rss, title)
    print(f"wrote {args.csv}" + (f" and {args.plot}" if why is None else f"; {why}"))
    print(f"load average {os.getloadavg()[0]:.2f} at end (other jobs on this machine slow it)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
