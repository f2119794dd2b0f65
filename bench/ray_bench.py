#!/usr/bin/env python3
"""stoker on Ray Data against Ray's own LeRobot reader and stoker's in-process Loader.

    PYTHONPATH=python .venv-lerobot/bin/python bench/ray_bench.py [--quick] [--out DIR] [--cpus N]

Same dataset, same windows, same CPUs, one run:

1. Writes a LeRobot v3.0 dataset (cached in --out/ray_data): 8 episodes x 240 frames (--quick:
   4 x 90) at 30 fps, two cameras at 640x480 (the size of LeRobot's ALOHA and Koch recordings)
   of camera-like footage (tests/python/lerobot_datasets.write_v30, content="camera"), AV1
   (libsvtav1, g=2: LeRobot's default), two episodes per video file.
2. Windows: the top camera's frames -2, -1, 0 and the next 8 actions (delta_timestamps), the
   wrist camera at the sample's frame, uint8. The model trains at 224x224: stoker resizes inside
   its read tasks (Transforms(resize=...)), so only training-size pixels enter the object store;
   Ray's reader has no resize and hands over the recorded 640x480 frames.
3. Starts a local Ray cluster with --cpus CPUs (default: the CPUs this process may use) and
   reports its start-up time and the memory (summed RSS) of its processes once idle.
4. One epoch (every sample once) per reader, after a short read that starts the workers:
     stoker.integrations.ray   stoker.integrations.ray.read_lerobot(root, spec, shuffle=True, threads_per_task=1,
                  num_cpus=1, concurrency=cpus), samples in stoker's random order: every
                  window drawn from anywhere in the dataset (random access);
     stoker.integrations.ray/b the same with shuffle="block" (the case study's block-level shuffle):
                  read tasks of 256 windows in dataset order, run in a random order, each
                  mixed by a local shuffle buffer;
     ray          ray.data.read_lerobot(root, delta_timestamps=..., num_cpus=1,
                  concurrency=cpus): torchcodec decode, episode-aligned reads in dataset order;
     loader       stoker.Loader(ds, batch_size=32, threads=cpus, shuffle=True) in this process,
                  without Ray.
   The Ray readers are consumed with iter_batches(batch_size=32, batch_format="pyarrow"); the
   bytes of their blocks per sample are what the read tasks put into the object store.
5. Prints, per reader: samples/s over the whole epoch (from the call to the last row, Ray's
   per-execution start included), the time to the first batch, and the steady rate after it
   (samples/s and per CPU); then the targets:
     >= 3x Ray's reader per CPU          stoker.integrations.ray/b against Ray's reader: both decode in
                                         dataset order, where neighbouring windows share
                                         frames (whole-epoch rates: both pay Ray's start);
                                         stoker.integrations.ray's random access is printed beside
     <= 1/2 of its object-store bytes per sample
     stoker on Ray within 20% of the in-process Loader per CPU (steady rates: Ray's own start
       per epoch, measured and printed beside, is a fixed cost an epoch of a real dataset does
       not notice, and this epoch is seconds long)
   and writes ray_results.csv to --out. When Ray's reader cannot run, the reason is printed.

Ray 2.60's reader imports the module layout of lerobot's next release (0.5:
`lerobot.datasets.dataset_metadata`, `lerobot.datasets.feature_utils`); the newest lerobot on PyPI
(0.4.4) has the same classes and functions under `lerobot.datasets.lerobot_dataset` and
`lerobot.datasets.utils`. This script then registers the two module names as aliases of those,
in the driver and (with Ray's worker_process_setup_hook) in every worker, and says so.

--quick takes about 2 minutes on 2 cores once the data is cached (the first run encodes it);
`make bench` runs the full one in .venv-lerobot (lerobot, Ray and torchcodec; made by
`make test-lerobot`); without lerobot the run says so and compares the other two.
"""

from __future__ import annotations

import argparse
import csv
import importlib.abc
import importlib.util
import sys
import time
import traceback
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
CAMERAS = ("observation.images.top", "observation.images.wrist")
FPS = 30
BATCH = 32
RECORDED = (480, 640)  # height, width of the videos
TRAINING = (224, 224)  # the model's input size


def write_dataset(out: Path, quick: bool) -> str:
    sys.path.insert(0, str(ROOT / "tests" / "python"))
    import lerobot_datasets  # the tests' writer: the layout stoker's tests and LeRobot agree on

    episodes = [90] * 4 if quick else [240] * 8
    height, width = RECORDED
    root = out / "ray_data" / f"v30-{len(episodes)}x{episodes[0]}-{width}x{height}"
    if not (root / "meta" / "info.json").exists():
        print(f"ray_bench: encoding {len(episodes)} episodes x {episodes[0]} frames x "
              f"{len(CAMERAS)} cameras at {width}x{height} (once; cached in {root})")
        lerobot_datasets.write_v30(root, episodes, CAMERAS, fps=FPS, size=RECORDED,
                                   episodes_per_file=2, content="camera",
                                   cache_dir=str(out / "ray_data" / "encodes"))
    return str(root)


def delta_timestamps() -> dict[str, list[float]]:
    return {CAMERAS[0]: [-2 / FPS, -1 / FPS, 0.0], "action": [k / FPS for k in range(8)]}


# lerobot 0.5's module names, and where lerobot 0.4 keeps what Ray's reader takes from them.
LEROBOT_05_ALIASES = {
    "lerobot.datasets.dataset_metadata": ("lerobot.datasets.lerobot_dataset",
                                          ("LeRobotDatasetMetadata",)),
    "lerobot.datasets.feature_utils": ("lerobot.datasets.utils",
                                       ("check_delta_timestamps", "get_delta_indices")),
}


class Lerobot05Aliases(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """An import finder, last on sys.meta_path, that answers lerobot 0.5's module names (when no
    installed lerobot has them) with modules holding the same names from lerobot 0.4's modules.
    Nothing is imported before Ray's reader asks for them: stoker's read tasks never do."""

    def find_spec(self, name, path, target=None):
        if name not in LEROBOT_05_ALIASES:
            return None
        return importlib.util.spec_from_loader(name, self)

    def create_module(self, spec):
        return None  # the default module object

    def exec_module(self, module) -> None:
        source, names = LEROBOT_05_ALIASES[module.__name__]
        real = importlib.import_module(source)
        for name in names:
            setattr(module, name, getattr(real, name))


def install_lerobot_05_aliases() -> None:
    """Runs in the driver and (worker_process_setup_hook) in every Ray worker."""
    if not any(isinstance(finder, Lerobot05Aliases) for finder in sys.meta_path):
        sys.meta_path.append(Lerobot05Aliases())


def lerobot_note() -> str | None:
    """Why Ray's reader cannot run here, or None; and says when the aliases are used."""
    try:
        import lerobot
    except ImportError:
        return "lerobot is not installed (make test-lerobot makes .venv-lerobot, which has it)"
    if importlib.util.find_spec("lerobot.datasets.dataset_metadata") is None:
        install_lerobot_05_aliases()
        print(f"ray_bench: lerobot {lerobot.__version__} predates the module names Ray 2.60's "
              "reader imports; they are registered as aliases of 0.4's")
    return None


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


@dataclass
class Pass:
    rows: int
    nbytes: int
    seconds: float  # from the call to the last row
    first_batch: float  # from the call to the first batch
    steady: float  # samples/s after the first batch

    @property
    def rate(self) -> float:
        return self.rows / self.seconds


def timed(batches: Iterable[tuple[int, int]]) -> Pass:
    """Consumes (rows, bytes) pairs, timing the whole and what follows the first."""
    started = time.perf_counter()
    rows = nbytes = first_rows = 0
    first = None
    for count, size in batches:
        if first is None:
            first, first_rows = time.perf_counter(), count
        rows += count
        nbytes += size
    end = time.perf_counter()
    assert first is not None, "no batch"
    steady = (rows - first_rows) / (end - first) if end > first else float("nan")
    return Pass(rows, nbytes, end - started, first - started, steady)


def ray_batches(dataset) -> Iterable[tuple[int, int]]:
    for table in dataset.iter_batches(batch_size=BATCH, batch_format="pyarrow"):
        yield table.num_rows, table.nbytes


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
    ds = stoker.LeRobotDataset(root, spec, image_dtype="uint8", progress=False)
    transforms = stoker.Transforms(resize=TRAINING, dtype="uint8")
    n = len(ds)
    print(f"ray_bench: {root}: {n} samples, {ds.num_episodes} episodes, cameras "
          f"{RECORDED[1]}x{RECORDED[0]} AV1; window: {CAMERAS[0]} frames -2..0, 8 actions; "
          f"stoker resizes to {TRAINING[1]}x{TRAINING[0]}; {cpus} CPUs")

    results: dict[str, Pass] = {}

    # In-process Loader first, without Ray running.
    loader = stoker.Loader(ds, batch_size=BATCH, threads=cpus, seed=0, output="numpy",
                           transforms=transforms)
    row_bytes = sum(np.dtype(d).itemsize * int(np.prod(s[1:])) for d, s in loader.fields.values())

    def loader_batches() -> Iterable[tuple[int, int]]:
        for batch in loader:
            yield len(batch["index"]), len(batch["index"]) * row_bytes

    for epoch in range(2):  # the first warms the page cache and the decoders' pools
        loader.set_epoch(epoch)
        results["loader"] = timed(loader_batches())
    loader.close()

    import ray

    why_not_ray = lerobot_note()
    started = time.perf_counter()
    ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False,
             runtime_env={"worker_process_setup_hook": install_lerobot_05_aliases})
    startup = time.perf_counter() - started
    ray.data.DataContext.get_current().enable_progress_bars = False
    time.sleep(2)
    idle_memory = cluster_memory()
    print(f"Ray: ray.init {startup:.1f} s; its processes {idle_memory / 2**20:.0f} MiB RSS "
          "when idle (before any task)")

    import stoker.integrations.ray

    def ours(epoch: int):
        return stoker.integrations.ray.read_lerobot(ds, shuffle=True, seed=0, epoch=epoch,
                                       transforms=transforms, threads_per_task=1, num_cpus=1,
                                       concurrency=cpus,
                                       samples_per_task=-(-n // (cpus * BATCH)) * BATCH,
                                       rows_per_block=BATCH)

    def ours_in_blocks(epoch: int):
        # The case study's block-level shuffle, with read_lerobot's defaults otherwise.
        return stoker.integrations.ray.read_lerobot(ds, shuffle="block", seed=0, epoch=epoch,
                                       transforms=transforms, threads_per_task=1, num_cpus=1,
                                       concurrency=cpus, rows_per_block=BATCH)

    def theirs(epoch: int):
        return ray.data.read_lerobot(root, delta_timestamps=delta_timestamps(), num_cpus=1,
                                     concurrency=cpus)

    failures: dict[str, str] = {}
    if why_not_ray:
        failures["ray"] = why_not_ray
    peak_memory = idle_memory
    for name, make in (("stoker.integrations.ray", ours), ("stoker.integrations.ray/b", ours_in_blocks), ("ray", theirs)):
        if name in failures:
            continue
        try:
            timed(ray_batches(make(0).limit(BATCH)))  # worker processes start, imports
            results[name] = timed(ray_batches(make(1)))
        except Exception as error:  # noqa: BLE001 - reported, not hidden
            failures[name] = f"{type(error).__name__}: {str(error).splitlines()[0][:300]}"
            traceback.print_exc(limit=3, file=sys.stderr)
            continue
        peak_memory = max(peak_memory, cluster_memory())
        if results[name].rows != n:
            print(f"  note: {name} gave {results[name].rows} rows for {n} samples")
    print(f"Ray: its processes {peak_memory / 2**20:.0f} MiB RSS after the reads")
    ray.shutdown()

    print(f"\n  {'reader':12s} {'samples/s':>10s} {'per CPU':>9s} {'1st batch':>10s} "
          f"{'steady/s':>9s} {'per CPU':>8s} {'bytes/sample':>13s}")
    for name, r in results.items():
        print(f"  {name:12s} {r.rate:10.1f} {r.rate / cpus:9.1f} {r.first_batch:9.2f}s "
              f"{r.steady:9.1f} {r.steady / cpus:8.1f} {r.nbytes / r.rows:13.0f}")
    for name, why in failures.items():
        print(f"  {name:12s} could not run: {why}")

    def target(label: str, value: float, goal: str, met: bool) -> None:
        print(f"  {label}: {value:.2f} (target {goal}) {'met' if met else 'NOT met'}")

    print()
    mine = results.get("stoker.integrations.ray")
    blocks = results.get("stoker.integrations.ray/b")
    if blocks and "ray" in results:
        theirs_ = results["ray"]
        speed = blocks.rate / theirs_.rate
        target("stoker.integrations.ray/b / ray.data.read_lerobot, samples/s per CPU (whole epoch; both "
               "decode in dataset order)", speed, ">= 3", speed >= 3)
        if mine:
            print(f"  (stoker.integrations.ray, every window drawn at random from the whole dataset: "
                  f"{mine.rate / theirs_.rate:.2f}x Ray's reader's dataset-order read)")
    if mine and "ray" in results:
        theirs_ = results["ray"]
        share = (mine.nbytes / mine.rows) / (theirs_.nbytes / theirs_.rows)
        target("stoker.integrations.ray / ray.data.read_lerobot, object-store bytes per sample", share,
               "<= 0.5", share <= 0.5)
    if mine:
        near = mine.steady / results["loader"].steady
        target("stoker.integrations.ray / in-process Loader, samples/s per CPU (steady)", near, ">= 0.8",
               near >= 0.8)
        print(f"  (over the whole epoch, Ray's per-execution start of {mine.first_batch:.1f} s "
              f"included: {mine.rate / results['loader'].rate:.2f})")
    print(f"  Ray's own cost: {startup:.1f} s to start, {idle_memory / 2**20:.0f} MiB idle, "
          f"{peak_memory / 2**20:.0f} MiB after the reads (the Loader needs neither)")

    with open(out / "ray_results.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["reader", "samples_per_s", "per_cpu", "first_batch_s", "steady_per_s",
                         "bytes_per_sample", "cpus", "why_not"])
        for name, r in results.items():
            writer.writerow([name, f"{r.rate:.2f}", f"{r.rate / cpus:.2f}",
                             f"{r.first_batch:.3f}", f"{r.steady:.2f}",
                             f"{r.nbytes / r.rows:.0f}", cpus, ""])
        for name, why in failures.items():
            writer.writerow([name, "", "", "", "", "", cpus, why])
    return 0


if __name__ == "__main__":
    sys.exit(main())
