"""index_bench: episode-index lookup latency and build time, from 1 to 30,000 episodes.

    PYTHONPATH=python .venv/bin/python bench/index_bench.py [--sizes 1,10,...] [--workdir DIR]
        [--csv bench/out/index_bench.csv]

Data: LeRobot v2.1 datasets of N tiny episodes (4 rows at 30 fps, one camera, 64x64 H.264),
one Parquet file and one MP4 per episode. To make 30,000 video files cheap, ONE episode video
is encoded once and hard-linked for every episode; the Parquet tables and meta files are
written directly with pyarrow. Datasets are kept in --workdir (default: a temporary folder,
removed at the end) and reused when present.

Printed per size:
  - write: seconds to write the dataset (not stoker's cost; for orientation);
  - load_index: seconds of a first load_index() (pyarrow reads of metadata and every Parquet
    file, the C++ build: video scans on all cores, the index file written), then "build", the
    C++ part alone (EpisodeIndex::build, from the report), and "reload", a second load_index()
    (maps the file, stats every tracked file to check it is current);
  - lookup: ns per sample of episode_of_rows + frames_of_rows on a batch of 4096 random rows
    (vectorised, one call each for the whole batch), and ns per single-row lookup pair
    (episode_of_row + frame_of_row, one Python call each), through the stoker wrapper; best
    of 5. Target (issue 3): <= 2 us per sample, flat in the number of episodes.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import shutil
import subprocess
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from stoker.datasets.lerobot.index import load_index

CAMERA = "observation.images.top"
LENGTH = 4
FPS = 30
DIM = 6
BATCH = 4096


def encode_episode(path: str) -> None:
    subprocess.run(["ffmpeg", "-nostdin", "-y", "-loglevel", "error", "-f", "lavfi", "-i",
                    f"testsrc2=size=64x64:rate={FPS}", "-frames:v", str(LENGTH), "-c:v",
                    "libx264", "-preset", "veryfast", "-g", "2", "-pix_fmt", "yuv420p", path],
                   check=True)


def write_dataset(root: str, episodes: int, video: str) -> None:
    """A v2.1 dataset of `episodes` episodes of LENGTH rows, every video a hard link."""
    data_template = "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
    video_template = "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4"
    chunks_size = 1000
    frame = np.arange(LENGTH, dtype=np.int64)
    timestamp = pa.array((frame / FPS).astype(np.float32))
    frame_index = pa.array(frame)
    for e in range(episodes):
        chunk = e // chunks_size
        state = (e * 1000 + frame[:, None] + np.arange(DIM) / 8).astype(np.float32)
        vectors = pa.FixedSizeListArray.from_arrays(pa.array(state.reshape(-1)), DIM)
        table = pa.table({
            "observation.state": vectors,
            "action": pa.FixedSizeListArray.from_arrays(pa.array(-state.reshape(-1)), DIM),
            "timestamp": timestamp, "frame_index": frame_index,
            "episode_index": pa.array(np.full(LENGTH, e, np.int64)),
            "index": pa.array(e * LENGTH + frame),
            "task_index": pa.array(np.zeros(LENGTH, np.int64)),
        })
        path = os.path.join(root, data_template.format(episode_chunk=chunk, episode_index=e))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        pq.write_table(table, path)
        target = os.path.join(root, video_template.format(episode_chunk=chunk, video_key=CAMERA,
                                                          episode_index=e))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.link(video, target)
    os.makedirs(os.path.join(root, "meta"), exist_ok=True)
    with open(os.path.join(root, "meta", "episodes.jsonl"), "w") as f:
        f.writelines(json.dumps({"episode_index": e, "tasks": ["bench"], "length": LENGTH}) + "\n"
                     for e in range(episodes))
    with open(os.path.join(root, "meta", "tasks.jsonl"), "w") as f:
        f.write(json.dumps({"task_index": 0, "task": "bench"}) + "\n")
    vector = {"dtype": "float32", "shape": [DIM], "names": None}
    scalar = {"dtype": "int64", "shape": [1], "names": None}
    info = {
        "codebase_version": "v2.1", "fps": FPS, "chunks_size": chunks_size,
        "total_episodes": episodes, "total_frames": episodes * LENGTH,
        "data_path": data_template, "video_path": video_template,
        "features": {
            "observation.state": vector, "action": vector,
            CAMERA: {"dtype": "video", "shape": [64, 64, 3], "names": None},
            "timestamp": {"dtype": "float32", "shape": [1], "names": None},
            "frame_index": scalar, "episode_index": scalar, "index": scalar, "task_index": scalar,
        },
    }
    with open(os.path.join(root, "meta", "info.json"), "w") as f:
        json.dump(info, f)
    # Written last: a folder with it is complete.
    with open(os.path.join(root, "meta", ".complete"), "w"):
        pass


def best_seconds(fn, repeats=5):
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def measure(root: str, episodes: int):
    start = time.perf_counter()
    index = load_index(root, rebuild=True, progress=False)
    load_s = time.perf_counter() - start
    build_s = index.report.seconds
    start = time.perf_counter()
    again = load_index(root, progress=False)
    reload_s = time.perf_counter() - start
    assert again.report is None and again.num_episodes == episodes

    rows = np.random.default_rng(0).integers(0, index.num_rows, BATCH, dtype=np.int64)

    def vectorised():
        index.episode_of_rows(rows)
        index.frames_of_rows(CAMERA, rows)

    single_rows = rows[:1000].tolist()

    def single():
        episode_of_row, frame_of_row = index.episode_of_row, index.frame_of_row
        for row in single_rows:
            episode_of_row(row)
            frame_of_row(0, row)

    # Correctness at the same time: tiny episodes, so row r is frame r % LENGTH of episode
    # r // LENGTH.
    np.testing.assert_array_equal(index.episode_of_rows(rows), rows // LENGTH)
    np.testing.assert_array_equal(index.frames_of_rows(CAMERA, rows), rows % LENGTH)
    batch_ns = best_seconds(vectorised) / BATCH * 1e9
    single_ns = best_seconds(single) / len(single_rows) * 1e9
    return dict(episodes=episodes, rows=index.num_rows, load_s=load_s, build_s=build_s,
                reload_s=reload_s, batch_ns_per_sample=batch_ns, single_ns_per_call=single_ns)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,10,100,1000,10000,30000")
    parser.add_argument("--workdir", default=None,
                        help="keep the datasets here, to reuse them (default: a temp folder)")
    parser.add_argument("--csv", default=os.path.join(os.path.dirname(__file__), "out",
                                                      "index_bench.csv"))
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]

    workdir = args.workdir or tempfile.mkdtemp(prefix="stoker-index-bench-")
    os.makedirs(workdir, exist_ok=True)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}")
    print(f"data: LeRobot v2.1, {LENGTH}-row episodes at {FPS} fps, one 64x64 H.264 camera "
          f"(one encode, hard-linked), in {workdir}")
    print(f"\n{'episodes':>8} {'rows':>7} | {'write s':>7} {'load_index s':>12} {'build s':>8} "
          f"{'reload s':>8} | {'batch ns/sample':>15} {'single ns/call':>14}")
    try:
        video = os.path.join(workdir, "episode.mp4")
        if not os.path.exists(video):
            encode_episode(video)
        results = []
        for episodes in sizes:
            root = os.path.join(workdir, f"v21-{episodes}")
            start = time.perf_counter()
            if not os.path.exists(os.path.join(root, "meta", ".complete")):
                shutil.rmtree(root, ignore_errors=True)
                write_dataset(root, episodes, video)
            write_s = time.perf_counter() - start
            r = measure(root, episodes)
            r["write_s"] = write_s
            results.append(r)
            print(f"{episodes:>8} {r['rows']:>7} | {write_s:>7.2f} {r['load_s']:>12.2f} "
                  f"{r['build_s']:>8.2f} {r['reload_s']:>8.3f} | "
                  f"{r['batch_ns_per_sample']:>15.1f} {r['single_ns_per_call']:>14.1f}",
                  flush=True)
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)

    batch = [r["batch_ns_per_sample"] for r in results]
    print(f"\nvectorised lookup: {min(batch):.1f}-{max(batch):.1f} ns per sample "
          f"(target <= 2000 ns, flat in episodes: max/min = {max(batch) / min(batch):.2f})")
    os.makedirs(os.path.dirname(os.path.abspath(args.csv)), exist_ok=True)
    with open(args.csv, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(results[0]))
        writer.writeheader()
        writer.writerows(results)
    print(f"wrote {args.csv}")


if __name__ == "__main__":
    main()
