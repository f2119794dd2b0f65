#!/usr/bin/env python3
"""The parity row: LeRobot's own training loop against the same loop on stoker, same items.

    .venv-lerobot/bin/python bench/parity_bench.py [--out DIR] [--batches N] [--max-seconds S]

What it does:

1. Writes (once, cached in --out/parity_data) a LeRobot v3.0 dataset as LeRobot's recorder does:
   4 episodes x 150 frames at 30 fps, 2 cameras at 640x480, AV1 (libsvtav1, g=2: LeRobot's
   settings), through tests/python/lerobot_datasets.write_v30.
2. Runs the data side of LeRobot's ``lerobot_train.py`` with a diffusion-policy window
   (2 observation steps, a horizon of 16 actions, ``drop_n_last_frames=7``):
     lerobot  its ``LeRobotDataset(repo_id, root, delta_timestamps)``, its
              ``EpisodeAwareSampler(dataset_from_index, dataset_to_index, drop_n_last_frames=7,
              shuffle=True)``, and ``torch.utils.data.DataLoader(num_workers=4, batch_size=8,
              prefetch_factor=2, drop_last=False)``: the defaults of LeRobot's
              ``TrainPipelineConfig`` (num_workers 4, batch_size 8);
     stoker   ``stoker.LeRobotDataset(root, WindowSpec(delta_timestamps))`` and ``stoker.Loader``
              with ``batch_size=8``, ``Transforms(dtype="float32")`` (LeRobot's float32 frames
              in [0, 1]), every core as threads, and a ``WeightedSampler`` whose weights are 0
              on each episode's last 7 frames and 1 elsewhere: the same samples are eligible
              (drawn with replacement, so the order is stoker's, not LeRobot's).
   Each loop takes its batches as the training loop does (``next`` on a cycled iterator, every
   tensor of the batch touched) with no model step: the rate is the data side's ceiling.
3. Times each in a fresh subprocess: 2 warm-up batches (worker start-up included), then
   --batches batches or --max-seconds, whichever ends first; samples/s, and the peak of the
   summed RSS and PSS of the process and its DataLoader workers (loader_bench.TreeMemory).
4. Prints one table and writes parity_report.txt to --out. Without lerobot importable by this
   Python (the .venv-lerobot that `make test-lerobot` creates), the LeRobot row reads
   "not measured: <why>".
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT / "python"), str(ROOT / "tests" / "python")]

from loader_bench import (  # noqa: E402
    TIMING_DONE,
    TreeMemory,
    busy_cpu_seconds,
    own_cpu_seconds,
    time_loop,
    timed_loop_arguments,
)

FPS = 30
EPISODES = [150] * 4
CAMERAS = ("observation.images.front", "observation.images.wrist")
SIZE = (480, 640)
BATCH_SIZE = 8  # LeRobot's TrainPipelineConfig.batch_size
NUM_WORKERS = 4  # LeRobot's TrainPipelineConfig.num_workers
DROP_N_LAST = 7  # diffusion policy: horizon - n_action_steps - n_obs_steps + 1
DELTA = {
    **{camera: [-1 / FPS, 0.0] for camera in CAMERAS},
    "observation.state": [-1 / FPS, 0.0],
    "action": [k / FPS for k in range(-1, 15)],
}


def write_dataset(data_dir: Path) -> Path:
    import lerobot_datasets

    root = data_dir / "lerobot_v30"
    if (root / "meta" / "info.json").exists():
        return root
    partial = data_dir / "lerobot_v30.partial"
    lerobot_datasets.write_v30(str(partial), EPISODES, CAMERAS, fps=FPS, codec="av1", size=SIZE,
                               episodes_per_file=4, content="camera",
                               cache_dir=str(data_dir / "encodes"))
    partial.rename(root)
    return root


def touch(batch) -> int:
    """What a training step does with a batch before the model: every tensor read once (the
    ``.to(device)`` of a CPU run); returns the batch's size."""
    import torch

    size = 0
    for value in batch.values():
        if isinstance(value, torch.Tensor):
            value.sum()
            size = len(value)
    return size


def lerobot_batches(root: str):
    import torch
    from lerobot.datasets.lerobot_dataset import LeRobotDataset
    from lerobot.datasets.sampler import EpisodeAwareSampler

    torch.manual_seed(0)
    dataset = LeRobotDataset("local/parity", root=root, delta_timestamps=DELTA)
    sampler = EpisodeAwareSampler(
        dataset.meta.episodes["dataset_from_index"],
        dataset.meta.episodes["dataset_to_index"],
        episode_indices_to_use=dataset.episodes,
        drop_n_last_frames=DROP_N_LAST,
        shuffle=True,
    )
    loader = torch.utils.data.DataLoader(
        dataset, num_workers=NUM_WORKERS, batch_size=BATCH_SIZE, shuffle=False, sampler=sampler,
        pin_memory=False, drop_last=False, prefetch_factor=2)
    while True:
        yield from loader


def stoker_batches(root: str):
    import numpy as np

    import stoker

    dataset = stoker.LeRobotDataset(root, stoker.WindowSpec(delta_timestamps=DELTA),
                                    progress=False)
    weights = np.concatenate([[1.0] * (n - DROP_N_LAST) + [0.0] * DROP_N_LAST for n in EPISODES])
    loader = stoker.Loader(dataset, batch_size=BATCH_SIZE,
                           sampler=stoker.WeightedSampler(weights, seed=0),
                           transforms=stoker.Transforms(dtype="float32"))
    while True:
        yield from loader


def worker(spec: dict) -> None:
    batches = (lerobot_batches if spec["kind"] == "lerobot" else stoker_batches)(spec["root"])
    time_loop(batches, spec, touch)


def run(kind: str, root: Path, out: Path, args) -> dict:
    spec = {"kind": kind, "root": str(root), "batches": args.batches,
            "max_seconds": args.max_seconds, "result": str(out / f"parity_{kind}.json")}
    Path(spec["result"]).unlink(missing_ok=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "python"),
                                                       os.environ.get("PYTHONPATH", "")]))
    env.setdefault("OMP_NUM_THREADS", "1")
    log = out / f"parity_{kind}.log"
    busy, own, started = busy_cpu_seconds(), own_cpu_seconds(), time.monotonic()
    with log.open("w") as err:
        child = subprocess.Popen([sys.executable, __file__, "--worker", json.dumps(spec)],
                                 stdout=subprocess.PIPE, stderr=err, text=True, env=env)
        memory = TreeMemory(child.pid)
        memory.start()
        assert child.stdout is not None
        for line in child.stdout:
            if line.strip() == TIMING_DONE:
                memory.stop_peak()
        code = child.wait()
        memory.stop_peak()
    others = max(0.0, (busy_cpu_seconds() - busy) - (own_cpu_seconds() - own))
    if code != 0 or not Path(spec["result"]).exists():
        lines = [line for line in log.read_text().splitlines() if line.strip()]
        return {"error": f"not measured: {lines[-1] if lines else f'exit {code}'} (see {log})"}
    result = json.loads(Path(spec["result"]).read_text())
    result.update(samples_per_s=result["samples"] / result["seconds"],
                  peak_rss_mb=memory.peak_rss_kb / 1024, peak_pss_mb=memory.peak_pss_kb / 1024,
                  other_cpus=others / (time.monotonic() - started))
    return result


def lerobot_missing() -> str | None:
    try:
        import lerobot.datasets.lerobot_dataset  # noqa: F401
    except ImportError as e:
        return (f"not measured: lerobot is not importable by {sys.executable} ({e}); run this "
                f"with .venv-lerobot/bin/python (`make test-lerobot` creates it)")
    return None


def main() -> int:
    args = timed_loop_arguments(__doc__.splitlines()[0], 120, worker)
    if args is None:
        return 0
    out = Path(args.out)
    root = write_dataset(out / "parity_data")
    missing = lerobot_missing()
    results = {"lerobot": {"error": missing} if missing else run("lerobot", root, out, args),
               "stoker": run("stoker", root, out, args)}
    cpus = len(os.sched_getaffinity(0))
    lines = [
        f"parity: LeRobot's training loop vs the same loop on stoker ({platform.node()}, "
        f"{cpus} CPUs, Python {platform.python_version()})",
        f"data: {len(EPISODES)} episodes x {EPISODES[0]} frames, {len(CAMERAS)} cameras "
        f"{SIZE[1]}x{SIZE[0]} AV1 g=2; window: 2 frames per camera, 2 states, 16 actions; "
        f"batch {BATCH_SIZE}; drop_n_last_frames {DROP_N_LAST}",
        f"command: .venv-lerobot/bin/python bench/parity_bench.py --batches {args.batches} "
        f"--max-seconds {args.max_seconds:g}",
        "",
        f"{'loop':62s} {'samples/s':>10s} {'peak RSS MB':>12s} {'peak PSS MB':>12s} "
        f"{'others':>7s}",
    ]
    names = {"lerobot": f"LeRobotDataset + EpisodeAwareSampler + DataLoader({NUM_WORKERS} "
                        "workers)",
             "stoker": f"stoker.LeRobotDataset + Loader({cpus} threads)"}
    for kind, result in results.items():
        if "error" in result:
            lines.append(f"{names[kind]:62s} {result['error']}")
        else:
            lines.append(f"{names[kind]:62s} {result['samples_per_s']:10.1f} "
                         f"{result['peak_rss_mb']:12.0f} {result['peak_pss_mb']:12.0f} "
                         f"{result['other_cpus']:7.1f}")
    if all("error" not in r for r in results.values()):
        ratio = results["stoker"]["samples_per_s"] / results["lerobot"]["samples_per_s"]
        memory = results["stoker"]["peak_pss_mb"] / results["lerobot"]["peak_pss_mb"]
        lines.append("")
        lines.append(f"stoker / LeRobot: {ratio:.2f}x the samples/s, {memory:.2f}x the peak PSS")
    if any(r.get("other_cpus", 0) > 0.2 for r in results.values()):
        lines.append("others: CPUs other processes kept busy meanwhile; above 0.2 the rates "
                     "are lower than on a quiet machine")
    text = "\n".join(lines)
    print(text)
    (out / "parity_report.txt").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
