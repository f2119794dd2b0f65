#!/usr/bin/env python3
"""stoker on Ray Data against Ray's own LeRobot reader and stoker's in-process Loader.

    PYTHONPATH=python .venv/bin/python bench/ray_bench.py [--quick] [--out DIR] [--cpus N]

Same dataset, same windows, same CPUs, one run:

1. Writes a LeRobot v3.0 dataset (cached in --out/ray_data): 16 episodes x 240 frames (--quick:
   4 x 90) at 30 fps, two cameras at 320x240 of camera-like footage (tests/python/
   lerobot_datasets.write_v30, content="camera"), AV1 (libsvtav1, g=2: LeRobot's default), two
   episodes per video file.
2. Windows: the top camera's frames -2, -1, 0 and the next 8 actions (delta_timestamps), the
   wrist camera at the sample's frame, frames at their recorded size (Ray's reader does not
   resize), uint8.
3. Starts a local Ray cluster with --cpus CPUs (default: the CPUs this process may use) and
   reports its start-up time and the memory (summed RSS) of its processes once idle.
4. One epoch (every sample once) per reader, each read first once to warm the workers up:
     stoker.ray   stoker.ray.read_lerobot(root, spec, shuffle=True, threads_per_task=1,
                  num_cpus=1, concurrency=cpus), samples in stoker's random order;
     ray          ray.data.read_lerobot(root, delta_timestamps=..., num_cpus=1,
                  concurrency=cpus): torchcodec decode, episode-aligned reads in dataset order;
     loader       stoker.Loader(ds, batch_size=32, threads=cpus, shuffle=True) in this process,
                  without Ray.
   The Ray readers are consumed with iter_batches(batch_size=32, batch_format="pyarrow"); the
   bytes of their blocks per sample are what the read tasks put into the object store.
5. Prints samples/s, samples/s per CPU, bytes per sample, the ratios and the targets (>= 3x
   Ray's reader per CPU, <= 1/2 of its bytes per sample, stoker on Ray within 20% of the
   Loader per CPU), and writes ray_results.csv to --out. When Ray's reader cannot run, the
   reason is printed instead of its numbers.

--quick takes about 1 minute on 2 cores once the data is cached (the first run encodes it);
`make bench` runs the full one. Ray's reader needs the `lerobot` package
(``pip install 'lerobot[dataset]'``), which requirements-dev.txt does not install (it brings its
own PyTorch pins); without it the run says so and compares the other two.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import time
import traceback
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
CAMERAS = ("observation.images.top", "observation.images.wrist")
FPS = 30
BATCH = 32


def write_dataset(out: Path, quick: bool) -> str:
    sys.path.insert(0, str(ROOT / "tests" / "python"))
    import lerobot_datasets  # the tests' writer: the layout stoker's tests and LeRobot agree on

    # The full run's epoch is long enough (3,840 samples) for Ray's fixed cost per dataset
    # execution, about 2 s here, not to be most of what is measured.
    episodes = [90] * 4 if quick else [240] * 16
    root = out / "ray_data" / f"v30-{len(episodes)}x{episodes[0]}"
    if not (root / "meta" / "info.json").exists():
        lerobot_datasets.write_v30(root, episodes, CAMERAS, fps=FPS, size=(240, 320),
                                   episodes_per_file=2, content="camera",
                                   cache_dir=str(out / "ray_data" / "encodes"))
    return str(root)


def delta_timestamps() -> dict[str, list[float]]:
    return {CAMERAS[0]: [-2 / FPS, -1 / FPS, 0.0], "action": [k / FPS for k in range(8)]}


def cluster_memory() -> int:
    """Summed RSS of this process's descendants (the local cluster's processes)."""
    import psutil

    total = 0
    for child in psutil.Process().children(recursive=True):
        try:
            total += child.memory_info().rss
        except psutil.Error:
            continue
    return total


def consume(dataset) -> tuple[int, int, float]:
    """(rows, block bytes, seconds) of one pass over a Ray dataset."""
    rows = nbytes = 0
    started = time.perf_counter()
    for table in dataset.iter_batches(batch_size=BATCH, batch_format="pyarrow"):
        rows += table.num_rows
        nbytes += table.nbytes
    return rows, nbytes, time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default="bench/out")
    parser.add_argument("--cpus", type=int, default=None)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    import stoker

    cpus = args.cpus or stoker.usable_cores()
    root = write_dataset(out, args.quick)
    spec = stoker.WindowSpec(delta_timestamps=delta_timestamps())
    # uint8 frames, as Ray's reader gives them (stoker's default is LeRobot's float32)
    ds = stoker.LeRobotDataset(root, spec, image_dtype="uint8", progress=False)
    n = len(ds)
    print(f"ray_bench: {root}: {n} samples, {ds.num_episodes} episodes, cameras 320x240 AV1; "
          f"window: {CAMERAS[0]} frames -2..0, 8 actions; {cpus} CPUs")

    results: dict[str, dict[str, float]] = {}

    # In-process Loader first, without Ray running.
    loader = stoker.Loader(ds, batch_size=BATCH, threads=cpus, seed=0, output="numpy")
    for epoch in range(2):  # the first warms the page cache and the decoders' pools
        loader.set_epoch(epoch)
        started = time.perf_counter()
        rows = sum(len(b["index"]) for b in loader)
        seconds = time.perf_counter() - started
    bytes_per_sample = sum(
        np.dtype(d).itemsize * int(np.prod(s[1:])) for d, s in loader.fields.values())
    loader.close()
    results["loader"] = {"samples_per_s": rows / seconds, "bytes_per_sample": bytes_per_sample}

    import ray

    started = time.perf_counter()
    ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False)
    startup = time.perf_counter() - started
    ray.data.DataContext.get_current().enable_progress_bars = False
    time.sleep(2)
    idle_memory = cluster_memory()
    print(f"Ray: ray.init {startup:.1f} s; its processes {idle_memory / 2**20:.0f} MiB RSS "
          "when idle (before any task)")

    import stoker.ray

    def ours(epoch: int):
        return stoker.ray.read_lerobot(ds, shuffle=True, seed=0, epoch=epoch,
                                       threads_per_task=1, num_cpus=1, concurrency=cpus,
                                       samples_per_task=-(-n // (cpus * BATCH)) * BATCH,
                                       rows_per_block=BATCH)

    def theirs(epoch: int):
        return ray.data.read_lerobot(root, delta_timestamps=delta_timestamps(), num_cpus=1,
                                     concurrency=cpus)

    failures: dict[str, str] = {}
    peak_memory = idle_memory
    for name, make in (("stoker.ray", ours), ("ray", theirs)):
        try:
            consume(make(0))  # warm-up: worker processes start, imports
            rows, nbytes, seconds = consume(make(1))
        except Exception as error:  # noqa: BLE001 - reported, not hidden
            failures[name] = f"{type(error).__name__}: {str(error).splitlines()[0][:300]}"
            traceback.print_exc(limit=3, file=sys.stderr)
            continue
        peak_memory = max(peak_memory, cluster_memory())
        if rows != n:
            print(f"  note: {name} gave {rows} rows for {n} samples")
        results[name] = {"samples_per_s": rows / seconds, "bytes_per_sample": nbytes / rows}
    print(f"Ray: its processes {peak_memory / 2**20:.0f} MiB RSS after the reads")
    ray.shutdown()

    print(f"\n  {'reader':12s} {'samples/s':>10s} {'per CPU':>9s} {'bytes/sample':>13s}")
    for name, r in results.items():
        print(f"  {name:12s} {r['samples_per_s']:10.1f} {r['samples_per_s'] / cpus:9.1f} "
              f"{r['bytes_per_sample']:13.0f}")
    for name, why in failures.items():
        print(f"  {name:12s} could not run: {why}")

    def target(label: str, value: float, goal: str, met: bool) -> None:
        print(f"  {label}: {value:.2f} (target {goal}) {'met' if met else 'NOT met'}")

    print()
    mine = results.get("stoker.ray")
    if mine and "ray" in results:
        speed = mine["samples_per_s"] / results["ray"]["samples_per_s"]
        target("stoker.ray / ray.data.read_lerobot, samples/s per CPU", speed, ">= 3", speed >= 3)
        share = mine["bytes_per_sample"] / results["ray"]["bytes_per_sample"]
        target("stoker.ray / ray.data.read_lerobot, object-store bytes per sample", share,
               "<= 0.5", share <= 0.5)
    if mine:
        near = mine["samples_per_s"] / results["loader"]["samples_per_s"]
        target("stoker.ray / in-process Loader, samples/s per CPU", near, ">= 0.8", near >= 0.8)
    print(f"  Ray's own cost: {startup:.1f} s to start, {idle_memory / 2**20:.0f} MiB idle, "
          f"{peak_memory / 2**20:.0f} MiB after the reads (the Loader needs neither)")

    with open(out / "ray_results.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["reader", "samples_per_s", "per_cpu", "bytes_per_sample", "cpus"])
        for name, r in results.items():
            writer.writerow([name, f"{r['samples_per_s']:.2f}",
                             f"{r['samples_per_s'] / cpus:.2f}",
                             f"{r['bytes_per_sample']:.0f}", cpus])
        for name, why in failures.items():
            writer.writerow([name, "", "", "", cpus, why])
    return 0


if __name__ == "__main__":
    sys.exit(main())
