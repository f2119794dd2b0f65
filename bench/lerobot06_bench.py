#!/usr/bin/env python3
"""LeRobot 0.6 windows from the MP4 copy and the Lance copy: stoker on each against LeRobot's
readers, and depth windows against RGB windows of the same size.

    .venv-lerobot/bin/python bench/lerobot06_bench.py [--out DIR] [--batches N] [--max-seconds S]

What it does:

1. Records (once, cached in --out/lerobot06_data) a v3.0 dataset with LeRobot 0.6's own
   recorder (tests/python/lerobot_datasets.record_with_lerobot): 4 episodes x 90 frames at
   30 fps, three 224x224 RGB cameras (AV1, LeRobot's settings) and a 224x224 depth camera
   (LeRobot's 12-bit log quantizer, lossless HEVC gray12le); then its Lance copy with
   lerobot-lancedb's converter (``lerobot_lancedb.convert.convert``).
2. Times, each in a fresh subprocess, batches of 32 windows of the three RGB cameras, 9 frames
   per camera (every other frame of the last 17), float32 in [0, 1] as LeRobot returns them:
     stoker/mp4      stoker.LeRobotDataset + stoker.Loader (every core as threads), MP4 copy
     stoker/lance    the same on the Lance copy
     lerobot/mp4     LeRobot 0.6.1's LeRobotDataset + torch DataLoader (a worker per core)
     lancedb/lance   lerobot-lancedb 0.3.1's LanceDBDataset + torch DataLoader (a worker per
                     core), the Lance copy
   and stoker's Loader on 9-frame windows of the depth camera (float32 millimetres, LeRobot's
   default) against 9-frame windows of one RGB camera of the same size.
3. Each loop takes its batches as a training loop does (every tensor touched), 2 warm-up
   batches, then --batches batches or --max-seconds; prints samples/s, peak RSS + PSS of the
   process tree, and the ratios the issue asks for: stoker on Lance >= 0.95 of stoker on MP4
   and >= 3x the best of the others; depth windows <= 1.2x the cost of the RGB windows.
Rows whose library is missing or fails read "not measured: <why>".
"""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT / "python"), str(ROOT / "tests" / "python")]

from loader_bench import run_worker, time_loop, timed_loop_arguments  # noqa: E402

FPS = 30
EPISODES = [90] * 4
CAMERAS = {f"observation.images.cam{k}": (224, 224) for k in range(3)}
DEPTH = "observation.images.depth"
BATCH_SIZE = 32
OFFSETS = [k / FPS for k in range(-16, 1, 2)]  # 9 frames of the last 17
RGB_WINDOW = {camera: OFFSETS for camera in CAMERAS}
ONE_RGB = {next(iter(CAMERAS)): OFFSETS}
DEPTH_WINDOW = {DEPTH: OFFSETS}


def write_data(data_dir: Path) -> tuple[Path, Path]:
    """The recorded dataset and its Lance copy (made once)."""
    import lerobot_datasets

    mp4, lance = data_dir / "mp4", data_dir / "lance"
    if not (mp4 / "meta" / "info.json").exists():
        partial = data_dir / "mp4.partial"
        lerobot_datasets.record_with_lerobot(partial, EPISODES, cameras=CAMERAS,
                                             image_camera=None, depth_camera=DEPTH)
        partial.rename(mp4)
    if not (lance / "meta" / "info.json").exists():
        from lerobot_lancedb.convert import convert

        convert(lance, root=mp4)
    return mp4, lance


def touch(batch) -> int:
    import torch

    size = 0
    for value in batch.values():
        if isinstance(value, torch.Tensor):
            value.float().sum()
            size = len(value)
    return size


def batches(kind: str, root: str, window: dict):
    import torch

    if kind == "stoker":
        import stoker

        dataset = stoker.LeRobotDataset(root, progress=False, delta_timestamps=window,
                                        cameras=list(window))
        loader = stoker.Loader(dataset, batch_size=BATCH_SIZE, shuffle=True, seed=0)
    else:
        if kind == "lerobot":
            from lerobot.datasets.lerobot_dataset import LeRobotDataset

            dataset = LeRobotDataset("local/bench", root=root, delta_timestamps=window,
                                     video_backend="pyav")
        else:
            from lerobot_lancedb import LanceDBDataset

            dataset = LanceDBDataset(root=root, delta_timestamps=window)
        loader = torch.utils.data.DataLoader(dataset, batch_size=BATCH_SIZE, shuffle=True,
                                             num_workers=len(os.sched_getaffinity(0)),
                                             prefetch_factor=2)
    while True:
        yield from loader


def worker(spec: dict) -> None:
    time_loop(batches(spec["kind"], spec["root"], spec["window"]), spec, touch)


def run(name: str, kind: str, root: Path, window: dict, out: Path, args) -> dict:
    result_path = out / f"lerobot06_{name.replace('/', '_')}.json"
    spec = {"kind": kind, "root": str(root), "window": window, "batches": args.batches,
            "max_seconds": args.max_seconds, "result": str(result_path)}
    result = run_worker(spec, sys.executable, result_path.with_suffix(".log"),
                        script=Path(__file__).resolve())
    if "error" not in result:
        result.update(samples_per_s=result["samples"] / result["seconds"],
                      peak_mb=(result["peak_rss_mb"] + result["peak_pss_mb"]) / 2)
    return result


def main() -> int:
    args = timed_loop_arguments(__doc__.splitlines()[0], 40, worker)
    if args is None:
        return 0
    out = Path(args.out)
    try:
        mp4, lance = write_data(out / "lerobot06_data")
    except ImportError as e:
        print(f"lerobot06: not measured: {e}; run with .venv-lerobot/bin/python "
              "(`make test-lerobot` creates it)")
        return 0
    rows = {
        "stoker/mp4": run("stoker/mp4", "stoker", mp4, RGB_WINDOW, out, args),
        "stoker/lance": run("stoker/lance", "stoker", lance, RGB_WINDOW, out, args),
        "lerobot/mp4": run("lerobot/mp4", "lerobot", mp4, RGB_WINDOW, out, args),
        "lancedb/lance": run("lancedb/lance", "lancedb", lance, RGB_WINDOW, out, args),
        "stoker/rgb-1cam": run("stoker/rgb-1cam", "stoker", mp4, ONE_RGB, out, args),
        "stoker/depth-1cam": run("stoker/depth-1cam", "stoker", mp4, DEPTH_WINDOW, out, args),
    }
    lines = [f"lerobot06: 3 cameras x 9 frames of 224x224, batch {BATCH_SIZE} "
             f"({platform.node()}, {len(os.sched_getaffinity(0))} CPUs, "
             f"Python {platform.python_version()})",
             f"{'loader':<20}{'samples/s':>12}{'peak MB':>10}"]
    for name, row in rows.items():
        if "error" in row:
            lines.append(f"{name:<20}{row['error']}")
        else:
            lines.append(f"{name:<20}{row['samples_per_s']:>12.1f}{row['peak_mb']:>10.0f}")

    def rate(name):
        return rows[name].get("samples_per_s")

    if rate("stoker/lance") and rate("stoker/mp4"):
        lines.append(f"stoker lance / stoker mp4: {rate('stoker/lance') / rate('stoker/mp4'):.2f}"
                     " (target >= 0.95)")
    others = [rate(n) for n in ("lerobot/mp4", "lancedb/lance") if rate(n)]
    if rate("stoker/lance") and others:
        lines.append(f"stoker lance / best other: {rate('stoker/lance') / max(others):.2f}"
                     " (target >= 3)")
    if rate("stoker/depth-1cam") and rate("stoker/rgb-1cam"):
        lines.append(f"depth window cost / RGB window cost: "
                     f"{rate('stoker/rgb-1cam') / rate('stoker/depth-1cam'):.2f} (target <= 1.2)")
    report = "\n".join(lines)
    print(report)
    (out / "lerobot06_report.txt").write_text(report + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
