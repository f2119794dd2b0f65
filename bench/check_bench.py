"""check_bench: ``stoker check`` (shallow and --deep) against the obvious alternative, a Python
loop over LeRobot-style item reads with LeRobot's own timestamp checks.

    PYTHONPATH=python .venv/bin/python bench/check_bench.py [--episodes 200] [--frames 30]
        [--workdir DIR] [--max-seconds 30] [--csv bench/out/check_bench.csv]

Data: a LeRobot v3.0 dataset as LeRobot's recorder packs it (tests/python/lerobot_datasets.
write_v30): --episodes episodes of --frames rows at 30 fps, two cameras of 96x128 camera-like
footage (a moving pattern with grain), AV1 with LeRobot's settings (libsvtav1, g=2), 50
episodes per video file. Written once into --workdir (default: a temporary folder) and reused.

Measured, each in this process, best of 3 where it is quick:
  - shallow, cold: ``stoker.check(root)`` with no index yet (the index is built: one scan of
    every video, as opening the dataset does);
  - shallow: ``stoker.check(root)`` with the index built (metadata, tables, frame tables);
  - deep: ``stoker.check(root, deep=True)`` (every frame decoded);
  - decode rate: every video decoded end to end by ``VideoReader.verify`` on a pool of
    ``usable_cores()`` threads, nothing else: the cores' decode rate with stoker's decoder,
    which --deep should reach (issue 23: at least 90% of it);
  - python loop: for each row, each camera's frame at ``from_timestamp + timestamp`` read as
    LeRobot's ``LeRobotDataset.__getitem__`` reads it with its PyAV backend (open the video,
    seek to the keyframe before, decode forward to the time, convert to RGB, assert the nearest
    frame is within tolerance_s), rows read from the Parquet table. With ``lerobot`` importable
    (``.venv-lerobot``, see ``make test-lerobot``), LeRobot's own ``LeRobotDataset`` items
    instead. It stops after --max-seconds and is projected to the whole dataset.

Printed: seconds and frames/s of each, and the ratios (python loop / shallow, python loop /
deep, deep rate / decode rate); a CSV row per measurement with the machine.
"""

from __future__ import annotations

import argparse
import csv
import os
import platform
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT / "python"), str(ROOT / "tests" / "python")]

import numpy as np  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

import stoker  # noqa: E402
from stoker import _core  # noqa: E402

CAMERAS = ("observation.images.front", "observation.images.wrist")
FPS = 30
SIZE = (96, 128)
PER_FILE = 50
TOLERANCE_S = 1e-4


def write_dataset(root: str, episodes: int, frames: int) -> None:
    import lerobot_datasets

    if os.path.exists(os.path.join(root, "meta", "info.json")):
        return
    partial = root + ".part"
    shutil.rmtree(partial, ignore_errors=True)
    lerobot_datasets.write_v30(
        partial,
        [frames] * episodes,
        CAMERAS,
        fps=FPS,
        size=SIZE,
        episodes_per_file=PER_FILE,
        content="camera",
        mark_episodes=False,
        cache_dir=os.path.join(root + ".encodes"),
    )
    os.replace(partial, root)


def timed(function, repeats: int = 1) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeats):
        started = time.perf_counter()
        result = function()
        best = min(best, time.perf_counter() - started)
    return best, result


def decode_rate(root: str) -> tuple[float, int]:
    """Every video decoded by VideoReader.verify on a pool of usable_cores() threads."""
    files = sorted(str(p) for p in Path(root, "videos").rglob("*.mp4"))
    readers = [_core.VideoReader(path) for path in files]  # scanned before the clock starts

    def run() -> int:
        with ThreadPoolExecutor(_core.usable_cores()) as pool:
            return sum(len(r["width"]) for r in pool.map(lambda r: r.verify(), readers))

    seconds, frames = timed(run, 3)
    return seconds, int(frames)  # type: ignore[arg-type]


class LeRobotStyleReader:
    """Items read as LeRobot's ``LeRobotDataset.__getitem__`` reads them (its PyAV backend, no
    delta_timestamps): per camera, the video opened, seeked to the keyframe before the row's
    time, decoded forward to it, converted to RGB, the nearest frame checked within tolerance."""

    def __init__(self, root: str):
        meta = stoker.datasets.lerobot.metadata.read_lerobot_metadata(root)
        self.meta = meta
        tables = [pq.read_table(str(p)) for p in meta.data_files]
        self.timestamp = np.concatenate([t.column("timestamp").to_numpy() for t in tables])
        self.state = np.concatenate(
            [np.stack(t.column("observation.state").to_numpy(zero_copy_only=False)) for t in tables]
        )
        self.episode_of_row = np.repeat(np.arange(meta.num_episodes), meta.length)

    def __len__(self) -> int:
        return self.meta.num_frames

    def __getitem__(self, row: int) -> dict:
        import av

        episode = int(self.episode_of_row[row])
        item = {"observation.state": self.state[row], "timestamp": float(self.timestamp[row])}
        for camera in self.meta.cameras:
            videos = self.meta.videos[camera]
            path = str(videos.paths[episode])
            query = float(videos.from_timestamp[episode] + self.timestamp[row])
            with av.open(path) as container:
                stream = container.streams.video[0]
                container.seek(
                    int(query / stream.time_base), stream=stream, backward=True, any_frame=False
                )
                loaded, times = [], []
                for frame in container.decode(stream):
                    t = float(frame.pts * stream.time_base)
                    loaded.append(frame.to_ndarray(format="rgb24"))
                    times.append(t)
                    if t >= query:
                        break
            distance = np.abs(np.asarray(times) - query)
            nearest = int(np.argmin(distance))
            if not distance[nearest] < TOLERANCE_S:
                raise AssertionError(
                    f"row {row}, camera {camera}: no frame within {TOLERANCE_S} s of {query}"
                )
            item[camera] = loaded[nearest]
        return item


def lerobot_items(root: str):
    """LeRobot's own LeRobotDataset when importable, else the LeRobot-style reader; and which."""
    try:
        from lerobot.datasets.lerobot_dataset import LeRobotDataset
    except ImportError:
        return LeRobotStyleReader(root), "LeRobot-style loop (PyAV, LeRobot's checks)"
    return LeRobotDataset("bench/check", root=root), "LeRobot's LeRobotDataset items"


def python_loop(root: str, max_seconds: float) -> tuple[float, int, int, str]:
    """(seconds projected for the whole dataset, rows read, rows in all, what read them)."""
    items, what = lerobot_items(root)
    total = len(items)
    order = np.random.default_rng(0).permutation(total)  # as a shuffled epoch reads them
    started = time.perf_counter()
    done = 0
    for row in order:
        items[int(row)]
        done += 1
        if time.perf_counter() - started > max_seconds:
            break
    seconds = time.perf_counter() - started
    return seconds * total / done, done, total, what


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument("--frames", type=int, default=30)
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--max-seconds", type=float, default=30.0)
    parser.add_argument("--csv", default=str(HERE / "out" / "check_bench.csv"))
    args = parser.parse_args()

    workdir = args.workdir or tempfile.mkdtemp(prefix="check-bench-")
    root = os.path.join(workdir, f"v30-{args.episodes}x{args.frames}")
    started = time.perf_counter()
    write_dataset(root, args.episodes, args.frames)
    print(
        f"data: {root}: {args.episodes} episodes x {args.frames} rows, {len(CAMERAS)} "
        f"cameras {SIZE[1]}x{SIZE[0]} AV1 g=2, {PER_FILE} episodes per file "
        f"(written or found in {time.perf_counter() - started:.1f} s)"
    )
    print(
        f"machine: {platform.processor() or platform.machine()}, "
        f"{_core.usable_cores()} usable cores, stoker {stoker.__version__}"
    )

    shutil.rmtree(os.path.join(root, ".stoker"), ignore_errors=True)
    cold, report = timed(lambda: stoker.check(root, progress=False))
    assert report.ok, report  # type: ignore[attr-defined]
    shallow, _ = timed(lambda: stoker.check(root, progress=False), 3)
    deep, report = timed(lambda: stoker.check(root, deep=True, progress=False))
    frames = report.scanned["decoded_frames"]  # type: ignore[attr-defined]
    raw, raw_frames = decode_rate(root)
    loop, done, total, what = python_loop(root, args.max_seconds)

    rows = [
        ("shallow, index built by it", cold, None),
        ("shallow", shallow, None),
        ("deep", deep, frames / deep),
        ("decode rate (VideoReader.verify, all cores)", raw, raw_frames / raw),
        (
            f"python loop: {what} ({done} of {total} rows, projected)",
            loop,
            total * len(CAMERAS) / loop,
        ),
    ]
    print(f"\n{'':58s} {'seconds':>9s} {'frames/s':>10s}")
    for name, seconds, rate in rows:
        print(f"{name:58s} {seconds:9.3f} {rate if rate else float('nan'):10.0f}")
    print(
        f"\npython loop / shallow: {loop / shallow:.0f}x; python loop / deep: "
        f"{loop / deep:.1f}x; deep's decode rate / the cores' decode rate: "
        f"{(frames / deep) / (raw_frames / raw):.2f} (target >= 0.90)"
    )

    os.makedirs(os.path.dirname(os.path.abspath(args.csv)), exist_ok=True)
    with open(args.csv, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(
            ["measurement", "seconds", "frames_per_s", "episodes", "rows", "cores", "machine"]
        )
        for name, seconds, rate in rows:
            writer.writerow(
                [
                    name,
                    f"{seconds:.4f}",
                    f"{rate:.1f}" if rate else "",
                    args.episodes,
                    total,
                    _core.usable_cores(),
                    platform.machine(),
                ]
            )
    print(f"CSV: {args.csv}")
    if args.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
