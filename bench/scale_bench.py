#!/usr/bin/env python3
"""scale_bench: how stoker's costs grow with size (samplers, the episode index, shard listing,
object storage), every case measured in a fresh process so that cases do not pollute each other.

    PYTHONPATH=python .venv/bin/python bench/scale_bench.py [--parts samplers,index,shards,s3]
        [--sampler-sizes 6,8,10] [--array-max 8] [--episodes 10000,100000,1000000]
        [--shards 1000,10000,100000] [--objects 1000,10000] [--cold-limit 150]
        [--workdir bench/out/scale_data] [--csv bench/out/scale_bench.csv]

Memory is the growth of the process's resident set (/proc/self/status VmRSS) over a step, and
its peak (VmHWM, reset before the step through /proc/self/clear_refs where the kernel allows),
in a process that has already imported stoker, numpy and pyarrow. Times are wall seconds on
one process; ratios compare each size's per-item cost with the smallest size's in this run
(1.00 = linear growth, i.e. a constant cost per item).

1. Samplers at 10^6, 10^8, 10^10 samples (--sampler-sizes, as powers of ten). The samplers that
   take only sizes (RandomSampler, DistributedSampler rank 3 of 8, SequentialSampler,
   MixSampler over 3 datasets, and DistributedSampler and MixSampler moved by
   ``repartitioned(1, 3, resume=(0, n // 2))``, an elastic resume) at every size; those that
   take one value per sample (WeightedSampler: weights; LoadBalancedSampler: costs, batch 32,
   rank 3 of 8; EpisodeAwareSampler: episodes of 100 samples, first and last dropped) up to
   10^--array-max, as the caller's arrays have to fit in memory; the shard stream
   (stoker._core.ShardStreamSampler as stoker.Loader's _ShardStream builds it: shards of 1,000
   samples, shuffled, a shuffle buffer of 8,192, one rank; also resumed from a 2-rank run's
   remainder onto rank 1 of 3) up to the same size, since it keeps each epoch's order (16 bytes
   per sample). Per case: construction, the first block of 8,192 ids, then ns per id over 128
   blocks of 8,192 fetched with indices(epoch, start=..., count=...) at starts spread over the
   epoch, and the RSS growth and peak from constructing and fetching (the caller's input
   arrays excluded, shown apart). Checked: O(1) memory for the samplers that take sizes only.
2. The episode index of packed LeRobot v3.0 datasets of 10^4, 10^5, 10^6 episodes (--episodes):
   episodes of 1, 2, 3 frames in turn, 3,000 episodes per data and per video file (one 32x32
   H.264 camera; one encode per distinct file length, hard-linked). Per size: the dataset's
   write (cached in --workdir), the index build (load_index(rebuild=True); "C++" is
   EpisodeIndex::build alone), the index file's size, and in fresh processes its open
   (load_index of a current index: map, stat the tracked files) with the RSS it adds, lookups
   (episode_of_rows + frames_of_rows, 4,096 random rows per call, and one row per call), and a
   stoker.LeRobotDataset open (metadata read too). Targets (issue 22): open of a 10^6-episode
   index <= 1 s and <= 100 MB resident.
3. Shard listing at 10^3, 10^4, 10^5 local tar shards (--shards) of 3 samples (a caption and a
   label) each, cached in --workdir: stoker.ShardDataset of the folder's glob, cold (empty
   index cache) and warm (from the cache), each in a fresh process, and the time from building
   stoker.Loader (batch 32, shuffled, 2 threads) to its first batch.
4. Object storage: LeRobot v2.1 datasets of N objects (--objects; 10^5 possible, slow to
   upload: the time per object is printed first) on moto's S3 server (tests/python/
   s3_server.py, signature checking on) behind its FaultProxy adding 20 ms to every request.
   Cold (an empty stoker cache) and warm (the cache the cold run left), each in a fresh
   process: stoker.LeRobotDataset("s3://...") ("open") then stoker.Loader's first batch; the
   proxy counts the requests of each phase by HTTP method. A cold open still running after
   --cold-limit seconds is stopped and reported with the requests made by then (its warm run
   then has no index to find).

Prints a table per part and the issue's targets, met or not, and writes the rows to --csv.
With the defaults it takes about 10 minutes on 2 cores once the data is written (the first run
writes about 1.5 GB under --workdir).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import platform
import queue
import shutil
import socketserver
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(ROOT / "tests" / "python"))

RESULT = "@@result "  # a worker's last stdout line: its result as JSON
PHASE = "@@phase "  # an s3 worker's phase mark; it waits for a line on stdin after each

# Part 1: samplers.
BLOCK = 8192  # ids per indices() call (the loader's chunk)
BLOCKS = 128
SIZE_ONLY = (
    "RandomSampler",
    "DistributedSampler",
    "SequentialSampler",
    "MixSampler",
    "Distributed resumed",
    "Mix resumed",
)
PER_SAMPLE = ("WeightedSampler", "LoadBalancedSampler", "EpisodeAwareSampler")
STREAMS = ("ShardStream", "ShardStream resumed")
EPISODE_SAMPLES = 100  # EpisodeAwareSampler's episodes
SHARD_SAMPLES = 1000  # the shard stream's shards
SHUFFLE_BUFFER = 8192  # stoker.datasets.shards.DEFAULT_SHUFFLE_BUFFER
O1_SLACK_MB = 1.0  # "O(1)": the largest size grows the process by at most this over the smallest

# Part 2: the episode index.
CAMERA = "observation.images.top"
FPS = 30
LENGTHS = (1, 2, 3)  # episode lengths, in turn
EPISODES_PER_FILE = 3000
FRAME_SIZE = (32, 32)
DIM = 6
LOOKUP_BATCH = 4096
OPEN_TARGET_S = 1.0
OPEN_TARGET_MB = 100.0
TARGET_EPISODES = 10**6

# Part 3: shards.
SHARD_MEMBERS = 3  # samples per shard

# Part 4: object storage.
BUCKET = "bench"
LATENCY_S = 0.02
META_OBJECTS = 3  # info.json, episodes.jsonl, tasks.jsonl
UPLOAD_THREADS = 8

BATCH_SIZE = 32
LOADER_THREADS = 2


# --------------------------------------------------------------------------------------------
# Measuring


def memory() -> dict[str, float]:
    """VmRSS, VmHWM, RssAnon and RssFile of this process, in MB."""
    values = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                values[key] = int(rest.split()[0]) / 1024
    return values


def reset_peak() -> bool:
    """Resets VmHWM to the current RSS (Linux >= 4.0); False where it cannot."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class Step:
    """Wall time, RSS growth and peak growth (MB) of the code in a with-block."""

    def __enter__(self) -> Step:
        self.peak_reset = reset_peak()
        self.before = memory()
        self.started = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.seconds = time.perf_counter() - self.started
        self.after = memory()
        self.growth_mb = self.after["VmRSS"] - self.before["VmRSS"]
        self.peak_mb = self.after["VmHWM"] - self.before["VmRSS"]


def run_worker(spec: dict, env: dict | None = None, timeout: float = 1800) -> dict:
    """Runs one case in a fresh process; its result, or {"error": why}."""
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "python"), full_env.get("PYTHONPATH", "")])
    full_env.update(env or {})
    try:
        done = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(spec)],
            env=full_env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"ran past {timeout:.0f} s"}
    for line in reversed(done.stdout.splitlines()):
        if line.startswith(RESULT):
            return json.loads(line[len(RESULT) :])
    lines = [x for x in done.stderr.splitlines() if x.strip()]
    return {"error": f"exit {done.returncode}: {lines[-1] if lines else 'no output'}"}


def power(n: int) -> str:
    """10^k for powers of ten, else the number."""
    k = len(str(n)) - 1
    return f"10^{k}" if n == 10**k else f"{n:,}"


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


class Rows:
    """The CSV rows: (part, case, size, metric, value)."""

    def __init__(self) -> None:
        self.rows: list[dict] = []

    def add(self, part: str, case: str, size: int, **metrics) -> None:
        for metric, value in metrics.items():
            if value is not None:
                self.rows.append(
                    {"part": part, "case": case, "size": size, "metric": metric, "value": value}
                )

    def write(self, path: str) -> None:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=["part", "case", "size", "metric", "value"])
            writer.writeheader()
            writer.writerows(self.rows)


# --------------------------------------------------------------------------------------------
# Part 1: samplers


def sampler_inputs(kind: str, n: int) -> dict:
    """What the caller holds before constructing: per-sample arrays, per-shard sizes."""
    if kind == "WeightedSampler":
        return {"weights": np.random.default_rng(0).random(n) + 0.5}
    if kind == "LoadBalancedSampler":
        return {"costs": np.random.default_rng(0).random(n) + 0.5}
    if kind == "EpisodeAwareSampler":
        starts = np.arange(0, n, EPISODE_SAMPLES, dtype=np.int64)
        return {"starts": starts, "ends": np.minimum(starts + EPISODE_SAMPLES, n)}
    if kind in STREAMS:
        counts = np.full(n // SHARD_SAMPLES, SHARD_SAMPLES, np.int64)
        if n % SHARD_SAMPLES:
            counts = np.append(counts, n % SHARD_SAMPLES)
        return {"counts": counts, "bytes": counts * 1000}
    return {}


def shard_stream(inputs: dict, rank: int, world: int, resume=None):
    """stoker._core.ShardStreamSampler with the arguments loader.py's _ShardStream gives it for
    Loader(shards, batch_size=32, shuffle=True, seed=1) (equal_batches and drop_last off)."""
    from stoker import _core

    return _core.ShardStreamSampler(
        inputs["counts"],
        inputs["bytes"],
        seed=1,
        shuffle_buffer=SHUFFLE_BUFFER,
        rank=rank,
        world_size=world,
        batch_size=BATCH_SIZE,
        resume=resume,
    )


def build_sampler(kind: str, n: int, inputs: dict):
    import stoker

    thirds = [n // 2, n // 4, n - n // 2 - n // 4]
    if kind == "RandomSampler":
        return stoker.RandomSampler(n, seed=1)
    if kind == "DistributedSampler":
        return stoker.DistributedSampler(n, rank=3, world_size=8, seed=1)
    if kind == "SequentialSampler":
        return stoker.SequentialSampler(n)
    if kind == "MixSampler":
        return stoker.MixSampler([0.5, 0.3, 0.2], thirds, seed=1)
    if kind == "Distributed resumed":
        saved = stoker.DistributedSampler(n, rank=0, world_size=8, seed=1)
        return saved.repartitioned(1, 3, resume=(0, n // 2))
    if kind == "Mix resumed":
        saved = stoker.MixSampler([0.5, 0.3, 0.2], thirds, seed=1, world_size=8)
        return saved.repartitioned(1, 3, resume=(0, n // 2))
    if kind == "WeightedSampler":
        return stoker.WeightedSampler(inputs["weights"], seed=1)
    if kind == "LoadBalancedSampler":
        return stoker.LoadBalancedSampler(
            inputs["costs"], batch_size=BATCH_SIZE, rank=3, world_size=8, seed=1
        )
    if kind == "EpisodeAwareSampler":
        return stoker.EpisodeAwareSampler(
            inputs["starts"],
            inputs["ends"],
            drop_n_first_frames=1,
            drop_n_last_frames=1,
            shuffle=True,
            seed=1,
        )
    if kind == "ShardStream":
        return shard_stream(inputs, 0, 1)
    if kind == "ShardStream resumed":  # a 2-rank run stopped half-way, resumed on 3 ranks
        saving = shard_stream(inputs, 0, 2)
        half = saving.epoch_size(0) // 2
        return shard_stream(inputs, 1, 3, saving.remainder(0, [half, half]))
    raise ValueError(kind)


def worker_sampler(spec: dict) -> dict:
    import stoker  # noqa: F401  (imported before the first measurement)

    kind, n = spec["kind"], spec["n"]
    with Step() as made:
        inputs = sampler_inputs(kind, n)
    with Step() as built:
        sampler = build_sampler(kind, n, inputs)
    if hasattr(sampler, "indices"):
        fetch = sampler.indices
    else:  # the native shard stream: indices() is the Python samplers' name for fill()

        def fetch(epoch, start, count):
            return sampler.fill(epoch, start, count)

    size = len(sampler) if hasattr(sampler, "indices") else sampler.epoch_size(0)
    count = min(BLOCK, size)
    with Step() as first:
        fetch(0, start=0, count=count)
    starts = np.linspace(0, size - count, BLOCKS).astype(np.int64).tolist()
    with Step() as blocks:
        for start in starts:
            ids = fetch(0, start=start, count=count)
    assert len(ids) == count and int(ids.min()) >= 0 and int(ids.max()) < max(n, 1)
    peak = max(
        built.peak_mb,
        built.growth_mb + first.peak_mb,
        built.growth_mb + first.growth_mb + blocks.peak_mb,
    )
    return {
        "ids_per_rank": size,
        "input_mb": made.growth_mb,
        "construct_s": built.seconds,
        "first_block_s": first.seconds,
        "ns_per_id": blocks.seconds / (len(starts) * count) * 1e9,
        "growth_mb": built.growth_mb + first.growth_mb + blocks.growth_mb,
        "peak_mb": peak,
        "peak_reset": built.peak_reset,
    }


def measured_sizes(results: dict, kind: str, sizes: list[int]) -> list[tuple[int, dict]]:
    """(n, result) of the sizes at which `kind` ran without error."""
    return [
        (n, results[(kind, n)])
        for n in sizes
        if "error" not in results.get((kind, n), {"error": 1})
    ]


def part_samplers(args, rows: Rows) -> list[str]:
    sizes = [10 ** int(k) for k in args.sampler_sizes.split(",")]
    array_max = 10**args.array_max
    print(
        f"\n1. Samplers: per case a fresh process; {BLOCKS} blocks of {BLOCK} ids at starts "
        f"spread over epoch 0, after a first block at 0. growth/peak: RSS from constructing and "
        f"fetching (the caller's arrays apart, as 'input'); B/sample = peak / n."
    )
    print(
        f"{'sampler':<22} {'n':>6} {'ids/rank':>13} | {'input MB':>8} {'build s':>8} "
        f"{'1st blk s':>9} {'ns/id':>7} | {'growth MB':>9} {'peak MB':>8} {'B/sample':>9}"
    )
    results: dict[tuple[str, int], dict] = {}
    skipped: list[str] = []
    for kind in SIZE_ONLY + PER_SAMPLE + STREAMS:
        for n in sizes:
            if kind not in SIZE_ONLY and n > array_max:
                skipped.append(f"{kind} at {power(n)}")
                continue
            r = run_worker({"case": "sampler", "kind": kind, "n": n})
            results[(kind, n)] = r
            if "error" in r:
                print(f"{kind:<22} {power(n):>6} could not run: {r['error']}", flush=True)
                continue
            per_sample = r["peak_mb"] * 2**20 / n
            print(
                f"{kind:<22} {power(n):>6} {r['ids_per_rank']:>13,} | {r['input_mb']:>8.1f} "
                f"{r['construct_s']:>8.3f} {r['first_block_s']:>9.4f} {r['ns_per_id']:>7.1f} | "
                f"{r['growth_mb']:>9.1f} {r['peak_mb']:>8.1f} {per_sample:>9.3f}",
                flush=True,
            )
            rows.add("samplers", kind, n, **{k: v for k, v in r.items() if k != "peak_reset"})
    if skipped:
        print(
            f"  not run (over --array-max {args.array_max}: memory per sample, see below): "
            + ", ".join(skipped)
        )
    if any(not r.get("peak_reset", True) for r in results.values()):
        print("  (VmHWM could not be reset: peaks include the input arrays' creation)")

    targets = []
    for kind in SIZE_ONLY:
        done = measured_sizes(results, kind, sizes)
        if len(done) < 2:
            targets.append(f"{kind}: O(1) memory in n: not measured (fewer than two sizes)")
            continue
        (small, a), (large, b) = done[0], done[-1]
        grown = b["peak_mb"] - a["peak_mb"]
        ratio = b["ns_per_id"] / a["ns_per_id"]
        targets.append(
            f"{kind}: O(1) memory in n: peak {a['peak_mb']:.1f} MB at {power(small)}, "
            f"{b['peak_mb']:.1f} MB at {power(large)} (+{grown:.1f} MB, allowed "
            f"{O1_SLACK_MB:g}) -> {verdict(grown <= O1_SLACK_MB)}; ns/id {ratio:.2f}x of "
            f"{power(small)}'s"
        )
    for kind in PER_SAMPLE + STREAMS:
        done = measured_sizes(results, kind, sizes)
        if not done:
            continue
        n, r = done[-1]
        per_sample = r["peak_mb"] * 2**20 / n
        kept = r["growth_mb"] * 2**20 / n
        given = r["input_mb"] * 2**20 / n
        what = "the epoch's order" if kind in STREAMS else "per-sample arrays"
        targets.append(
            f"{kind} (O(n) by design: {what}): at {power(n)}, peak {per_sample:.1f} B and "
            f"kept {kept:.1f} B per sample, besides the caller's {given:.1f} B; "
            f"{power(sizes[-1])} would need ~{(per_sample + given) * sizes[-1] / 1e9:,.0f} GB"
        )
    return targets


# --------------------------------------------------------------------------------------------
# Part 2: the episode index


def episode_layout(episodes: int) -> dict[str, np.ndarray]:
    """Lengths, first rows, video file of each episode and first row of each file."""
    lengths = np.resize(np.array(LENGTHS, np.int64), episodes)
    starts = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    file = np.arange(episodes, dtype=np.int64) // EPISODES_PER_FILE
    return {
        "lengths": lengths,
        "starts": starts,
        "file": file,
        "file_first_row": starts[np.arange(0, episodes, EPISODES_PER_FILE)],
    }


def write_packed_v30(root: str, episodes: int, video_cache: str) -> None:
    """A LeRobot v3.0 dataset of tiny episodes, EPISODES_PER_FILE per data and video file, with
    stoker's v3.0 writer (stoker.datasets.lerobot.format); each file's video is one encode of
    its frame count (tests/python/lerobot_datasets.encode_episode), hard-linked."""
    import pyarrow as pa
    from lerobot_datasets import encode_episode

    from stoker.datasets.lerobot import format as lerobot_format

    chunks = lerobot_format.DEFAULT_CHUNKS_SIZE
    layout = episode_layout(episodes)
    lengths, starts, file = layout["lengths"], layout["starts"], layout["file"]
    rows = int(starts[-1])
    episode = np.repeat(np.arange(episodes, dtype=np.int64), lengths)
    frame = np.arange(rows, dtype=np.int64) - starts[:-1][episode]
    state = (episode[:, None] * 1000 + frame[:, None] + np.arange(DIM) / 8).astype(np.float32)
    table = pa.table(
        {
            "observation.state": pa.FixedSizeListArray.from_arrays(
                pa.array(state.reshape(-1)), DIM
            ),
            "action": pa.FixedSizeListArray.from_arrays(pa.array(-state.reshape(-1)), DIM),
            "timestamp": pa.array((frame / FPS).astype(np.float32)),
            "frame_index": pa.array(frame),
            "episode_index": pa.array(episode),
            "index": pa.array(np.arange(rows, dtype=np.int64)),
            "task_index": pa.array(np.zeros(rows, np.int64)),
        }
    )
    lerobot_format.write_data(root, table, lengths, file, chunks)
    first_row = starts[file * EPISODES_PER_FILE]  # of each episode's file
    height, width = FRAME_SIZE
    for number in np.unique(file).tolist():
        frames = int(lengths[file == number].sum())
        source = os.path.join(video_cache, f"h264_{width}x{height}_{FPS}fps_{frames}.mp4")
        if not os.path.exists(source):
            os.makedirs(video_cache, exist_ok=True)
            encode_episode(source + ".part.mp4", frames, FPS, "h264", FRAME_SIZE, None)
            os.replace(source + ".part.mp4", source)
        target = lerobot_format.file_path(
            root, lerobot_format.VIDEO_PATH, number, chunks, video_key=CAMERA
        )
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(target)
        os.link(source, target)
    videos = {
        CAMERA: lerobot_format.EpisodeVideos(
            file, (starts[:-1] - first_row) / FPS, (starts[1:] - first_row) / FPS
        )
    }
    tasks = pa.array([["bench"]] * episodes, pa.list_(pa.string()))
    columns = lerobot_format.episode_columns(lengths, tasks, file, videos, chunks)
    lerobot_format.write_episodes(root, columns, chunks, file_of_episode=file)
    lerobot_format.write_tasks(root, ["bench"])
    vector = {"dtype": "float32", "shape": [DIM], "names": None}
    features = {
        "observation.state": vector,
        "action": vector,
        CAMERA: lerobot_format.video_feature(
            {"dtype": "video", "info": {"video.fps": FPS}}, height, width, "h264"
        ),
        "timestamp": {"dtype": "float32", "shape": [1], "names": None},
    }
    for name in ("frame_index", "episode_index", "index", "task_index"):
        features[name] = {"dtype": "int64", "shape": [1], "names": None}
    info = lerobot_format.v30_info(
        {"fps": FPS},
        features=features,
        num_episodes=episodes,
        num_frames=rows,
        num_tasks=1,
        chunks_size=chunks,
        has_videos=True,
    )
    lerobot_format.write_info(root, info)


def worker_index(spec: dict) -> dict:
    import stoker
    from stoker.datasets.lerobot.index import load_index

    root, what = spec["root"], spec["what"]
    if what == "build":
        with Step() as step:
            index = load_index(root, rebuild=True, progress=False)
        return {
            "build_s": step.seconds,
            "cxx_s": index.report.seconds,
            "peak_mb": step.peak_mb,
            "file_mb": os.path.getsize(index.path) / 1e6,
            "rows": index.num_rows,
        }
    if what == "dataset":
        with Step() as step:
            dataset = stoker.LeRobotDataset(root, progress=False)
        assert len(dataset) > 0
        return {
            "open_s": step.seconds,
            "growth_mb": step.growth_mb,
            "peak_mb": step.peak_mb,
            "rss_mb": step.after["VmRSS"],
        }
    with Step() as step:
        index = load_index(root, progress=False)
    assert index.report is None, "the index was built, not opened"
    layout = episode_layout(index.num_episodes)
    rows = np.random.default_rng(0).integers(0, index.num_rows, LOOKUP_BATCH, dtype=np.int64)
    expected = np.searchsorted(layout["starts"], rows, side="right") - 1
    np.testing.assert_array_equal(index.episode_of_rows(rows), expected)
    first = layout["file_first_row"][layout["file"][expected]]
    np.testing.assert_array_equal(index.frames_of_rows(CAMERA, rows), rows - first)

    def vectorised():
        index.episode_of_rows(rows)
        index.frames_of_rows(CAMERA, rows)

    single_rows = rows[:1000].tolist()

    def single():
        episode_of_row, frame_of_row = index.episode_of_row, index.frame_of_row
        for row in single_rows:
            episode_of_row(row)
            frame_of_row(0, row)

    batch_s = min(timed(vectorised) for _ in range(5))
    single_s = min(timed(single) for _ in range(5))
    return {
        "open_s": step.seconds,
        "growth_mb": step.growth_mb,
        "anon_mb": step.after["RssAnon"] - step.before["RssAnon"],
        "file_backed_mb": step.after["RssFile"] - step.before["RssFile"],
        "rss_mb": step.after["VmRSS"],
        "after_lookups_mb": memory()["VmRSS"] - step.before["VmRSS"],
        "batch_ns": batch_s / LOOKUP_BATCH * 1e9,
        "single_ns": single_s / len(single_rows) * 1e9,
    }


def timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def part_index(args, rows: Rows) -> list[str]:
    sizes = [int(s) for s in args.episodes.split(",")]
    print(
        f"\n2. Episode index: LeRobot v3.0, episodes of {'/'.join(map(str, LENGTHS))} frames in "
        f"turn, {EPISODES_PER_FILE} episodes per data and video file, one "
        f"{FRAME_SIZE[1]}x{FRAME_SIZE[0]} H.264 camera at {FPS} fps; in {args.workdir}"
    )
    print(
        f"{'episodes':>9} {'rows':>9} {'files':>5} | {'write s':>7} {'build s':>7} "
        f"{'C++ s':>6} {'build peak MB':>13} {'file MB':>8} | {'open s':>7} {'open MB':>7} "
        f"{'anon MB':>7} {'ns/row':>6} {'ns/call':>7} | {'dataset s':>9} {'dataset MB':>10}"
    )
    results = {}
    for episodes in sizes:
        root = os.path.join(args.workdir, f"v30-packed-{episodes}")
        stamp = os.path.join(root, f".recipe-{EPISODES_PER_FILE}-{'-'.join(map(str, LENGTHS))}")
        started = time.perf_counter()
        if not os.path.exists(stamp):
            shutil.rmtree(root, ignore_errors=True)
            write_packed_v30(root, episodes, os.path.join(args.workdir, "videos"))
            Path(stamp).touch()
        write_s = time.perf_counter() - started
        build = run_worker({"case": "index", "root": root, "what": "build"})
        opened = run_worker({"case": "index", "root": root, "what": "open"})
        dataset = run_worker({"case": "index", "root": root, "what": "dataset"})
        failed = [r["error"] for r in (build, opened, dataset) if "error" in r]
        if failed:
            print(f"{episodes:>9} could not run: {failed[0]}", flush=True)
            continue
        results[episodes] = (build, opened, dataset)
        files = -(-episodes // EPISODES_PER_FILE)
        print(
            f"{episodes:>9} {build['rows']:>9} {files:>5} | {write_s:>7.1f} "
            f"{build['build_s']:>7.2f} {build['cxx_s']:>6.2f} {build['peak_mb']:>13.0f} "
            f"{build['file_mb']:>8.1f} | {opened['open_s']:>7.3f} {opened['growth_mb']:>7.1f} "
            f"{opened['anon_mb']:>7.1f} {opened['batch_ns']:>6.1f} {opened['single_ns']:>7.0f} | "
            f"{dataset['open_s']:>9.3f} {dataset['growth_mb']:>10.1f}",
            flush=True,
        )
        rows.add("index", "write", episodes, seconds=write_s)
        rows.add("index", "build", episodes, **build)
        rows.add("index", "open", episodes, **opened)
        rows.add("index", "LeRobotDataset", episodes, **dataset)
    if not results:
        return ["episode index: not measured"]
    print(
        "  open: load_index() of a current index in a fresh process; open MB: its RSS growth "
        "(anon: of that, not file-backed); ns/row: episode_of_rows + frames_of_rows per row of "
        f"{LOOKUP_BATCH}; ns/call: episode_of_row + frame_of_row; dataset: "
        "stoker.LeRobotDataset() (metadata too)"
    )
    measured = sorted(results)
    smallest = measured[0]
    for episodes in measured[1:]:
        b0, o0, d0 = results[smallest]
        b, o, d = results[episodes]
        scale = episodes / smallest
        print(
            f"  {power(episodes)} vs {power(smallest)} ({scale:g}x the episodes): build "
            f"{b['build_s'] / b0['build_s']:.1f}x, file {b['file_mb'] / b0['file_mb']:.1f}x, "
            f"open {o['open_s'] / o0['open_s']:.1f}x, LeRobotDataset open "
            f"{d['open_s'] / d0['open_s']:.1f}x, ns/row {o['batch_ns'] / o0['batch_ns']:.2f}x"
        )

    targets = []
    for name, pick in (("load_index open", 1), ("LeRobotDataset open", 2)):
        if TARGET_EPISODES in results:
            seconds = results[TARGET_EPISODES][pick]["open_s"]
            mb = results[TARGET_EPISODES][pick]["growth_mb"]
            how = "measured"
        elif len(measured) >= 2:  # linear through the two largest sizes
            (n1, r1), (n2, r2) = [(n, results[n][pick]) for n in measured[-2:]]

            def at(key, n1=n1, n2=n2, r1=r1, r2=r2):
                slope = (r2[key] - r1[key]) / (n2 - n1)
                return r2[key] + slope * (TARGET_EPISODES - n2)

            seconds, mb = at("open_s"), at("growth_mb")
            how = f"EXTRAPOLATED linearly from {power(n1)} and {power(n2)}"
        else:
            targets.append(f"{name} of a 10^6-episode index: not measured")
            continue
        targets.append(
            f"{name} of a 10^6-episode index <= {OPEN_TARGET_S:g} s: {seconds:.3f} s ({how}) "
            f"-> {verdict(seconds <= OPEN_TARGET_S)}"
        )
        targets.append(
            f"{name} of a 10^6-episode index <= {OPEN_TARGET_MB:g} MB resident (growth): "
            f"{mb:.1f} MB ({how}) -> {verdict(mb <= OPEN_TARGET_MB)}"
        )
    return targets


# --------------------------------------------------------------------------------------------
# Part 3: shards


def tar_member(name: str, data: bytes) -> bytes:
    info = tarfile.TarInfo(name)
    info.size, info.mtime = len(data), 0
    return info.tobuf(format=tarfile.USTAR_FORMAT) + data + b"\0" * (-len(data) % 512)


def write_shards(folder: str, shards: int) -> None:
    """`shards` tar shards of SHARD_MEMBERS samples (a .txt caption and a .cls label), written
    directly (no 10 KiB record padding) to keep 10^5 of them small."""
    os.makedirs(folder, exist_ok=True)
    n = 0
    for s in range(shards):
        parts = []
        for _ in range(SHARD_MEMBERS):
            parts.append(tar_member(f"s{n:09d}.txt", f"caption {n}".encode()))
            parts.append(tar_member(f"s{n:09d}.cls", str(n % 10).encode()))
            n += 1
        parts.append(b"\0" * 1024)
        with open(os.path.join(folder, f"shard-{s:06d}.tar"), "wb") as f:
            f.write(b"".join(parts))


def worker_shards(spec: dict) -> dict:
    import stoker

    with Step() as opened:
        dataset = stoker.ShardDataset(
            os.path.join(spec["folder"], "*.tar"),
            {"caption": stoker.Text("txt"), "label": stoker.Label("cls")},
            cache_dir=spec["cache"],
        )
    assert len(dataset) == spec["shards"] * SHARD_MEMBERS, len(dataset)
    with Step() as first:
        loader = stoker.Loader(
            dataset,
            batch_size=BATCH_SIZE,
            shuffle=True,
            seed=0,
            threads=LOADER_THREADS,
            output="numpy",
        )
        batch = next(iter(loader))
    assert len(batch["label"]) == BATCH_SIZE
    loader.close()
    return {
        "open_s": opened.seconds,
        "open_mb": opened.growth_mb,
        "first_batch_s": first.seconds,
        "rss_mb": first.after["VmRSS"],
    }


def part_shards(args, rows: Rows) -> list[str]:
    sizes = [int(s) for s in args.shards.split(",")]
    print(
        f"\n3. Shards: local tar shards of {SHARD_MEMBERS} samples (caption + label) each, "
        f"stoker.ShardDataset('<folder>/*.tar') in a fresh process: cold (empty index cache), "
        f"then warm (from it); first batch: stoker.Loader(batch {BATCH_SIZE}, shuffled, "
        f"{LOADER_THREADS} threads) built to its first batch. In {args.workdir}"
    )
    print(
        f"{'shards':>7} {'samples':>8} {'write s':>7} | {'cold s':>7} {'us/shard':>8} "
        f"{'x per shard':>11} {'first s':>7} | {'warm s':>7} {'us/shard':>8} "
        f"{'x per shard':>11} {'first s':>7} {'open MB':>7} | {'cache MB':>8}"
    )
    base: dict[str, float] = {}
    for shards in sizes:
        folder = os.path.join(args.workdir, f"shards-{shards}")
        stamp = os.path.join(folder, f".recipe-{SHARD_MEMBERS}")
        started = time.perf_counter()
        if not os.path.exists(stamp):
            shutil.rmtree(folder, ignore_errors=True)
            write_shards(folder, shards)
            Path(stamp).touch()
        write_s = time.perf_counter() - started
        cache = os.path.join(args.workdir, f"shard-cache-{shards}")
        shutil.rmtree(cache, ignore_errors=True)
        spec = {"case": "shards", "folder": folder, "cache": cache, "shards": shards}
        cold = run_worker(spec)
        warm = run_worker(spec)
        cache_mb = sum(p.stat().st_size for p in Path(cache).rglob("*") if p.is_file()) / 1e6
        shutil.rmtree(cache, ignore_errors=True)
        if "error" in cold or "error" in warm:
            print(f"{shards:>7} could not run: {cold.get('error') or warm.get('error')}")
            continue
        per = {k: r["open_s"] / shards * 1e6 for k, r in (("cold", cold), ("warm", warm))}
        base = base or per
        print(
            f"{shards:>7} {shards * SHARD_MEMBERS:>8} {write_s:>7.1f} | {cold['open_s']:>7.2f} "
            f"{per['cold']:>8.0f} {per['cold'] / base['cold']:>11.2f} "
            f"{cold['first_batch_s']:>7.3f} | {warm['open_s']:>7.2f} {per['warm']:>8.0f} "
            f"{per['warm'] / base['warm']:>11.2f} {warm['first_batch_s']:>7.3f} "
            f"{warm['open_mb']:>7.1f} | {cache_mb:>8.1f}",
            flush=True,
        )
        rows.add("shards", "cold", shards, **cold)
        rows.add("shards", "warm", shards, **warm, cache_mb=cache_mb)
    print(
        f"  x per shard: the open's cost per shard over the first size's ({power(sizes[0])}); "
        "1.00 = linear. open MB: RSS growth of the warm open; cache MB: the index cache's files"
    )
    return []


# --------------------------------------------------------------------------------------------
# Part 4: object storage


def mark(name: str) -> None:
    """Tells the driver a phase starts, and waits until it has read the proxy's counters."""
    print(PHASE + name, flush=True)
    sys.stdin.readline()


def worker_s3(spec: dict) -> dict:
    import stoker

    mark("open")
    with Step() as opened:
        dataset = stoker.LeRobotDataset(spec["url"], progress=False)
    mark("first batch")
    with Step() as first:
        loader = stoker.Loader(
            dataset,
            batch_size=BATCH_SIZE,
            shuffle=True,
            seed=0,
            threads=LOADER_THREADS,
            output="numpy",
        )
        batch = next(iter(loader))
    mark("end")
    assert len(batch["index"]) == BATCH_SIZE
    loader.close()
    return {"samples": len(dataset), "open_s": opened.seconds, "first_batch_s": first.seconds}


def quiet_disconnects() -> None:
    """The proxy's threads print a traceback for every client that hangs up at exit; those are
    not errors of the benchmark."""
    report = socketserver.BaseServer.handle_error

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], ConnectionError):
            report(self, request, client_address)

    socketserver.BaseServer.handle_error = handle_error  # type: ignore[method-assign]


def run_s3_worker(spec: dict, env: dict, proxy, limit_s: float) -> dict:
    """Runs worker_s3 in a fresh process; per phase its seconds and the proxy's requests by
    method. An open still going after limit_s seconds is stopped."""
    full_env = dict(os.environ)
    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL_S3", "AWS_SESSION_TOKEN"):
        full_env.pop(name, None)
    full_env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "python"), full_env.get("PYTHONPATH", "")])
    full_env.update(env)
    child = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(spec)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=full_env,
    )
    lines: queue.Queue = queue.Queue()
    threading.Thread(
        target=lambda: [lines.put(x) for x in child.stdout] + [lines.put(None)], daemon=True
    ).start()
    errors: list[str] = []
    threading.Thread(target=lambda: errors.extend(child.stderr), daemon=True).start()

    def counters():
        return proxy.requests, dict(getattr(proxy, "methods", {}))

    phases: dict[str, dict] = {}
    current, since, began = None, counters(), time.perf_counter()
    result: dict = {}
    while True:
        try:
            line = lines.get(
                timeout=max(0.1, limit_s - (time.perf_counter() - began))
                if current == "open"
                else 1800
            )
        except queue.Empty:
            child.kill()
            now = counters()
            phases["open"] = {
                "requests": now[0] - since[0],
                "methods": diff(now[1], since[1]),
                "seconds": time.perf_counter() - began,
            }
            result["stopped"] = f"the open ran past {limit_s:g} s and was stopped"
            break
        if line is None:
            break
        if line.startswith(PHASE):
            now = counters()
            if current is not None:
                phases[current] = {"requests": now[0] - since[0], "methods": diff(now[1], since[1])}
            current, since = line[len(PHASE) :].strip(), now
            if current == "open":
                began = time.perf_counter()
            child.stdin.write("go\n")
            child.stdin.flush()
        elif line.startswith(RESULT):
            result.update(json.loads(line[len(RESULT) :]))
    child.wait()
    if child.returncode not in (0, -9) and "open_s" not in result:
        result["error"] = f"exit {child.returncode}: {errors[-1].strip() if errors else ''}"
    result["phases"] = phases
    return result


def diff(after: dict, before: dict) -> dict:
    return {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0)}


def describe_methods(methods: dict) -> str:
    return " ".join(f"{k} {v}" for k, v in sorted(methods.items())) or "-"


def part_s3(args, rows: Rows) -> list[str]:
    import index_bench
    from s3_server import FaultProxy, Faults, S3Server

    quiet_disconnects()
    sizes = [int(s) for s in args.objects.split(",")]
    print(
        f"\n4. Object storage: LeRobot v2.1 datasets (index_bench's: one Parquet file and one "
        f"64x64 MP4 per 4-row episode, 3 meta files) on moto's S3 server behind FaultProxy "
        f"(+{LATENCY_S * 1e3:.0f} ms per request); per phase in a fresh process: requests by "
        f"method at the proxy, seconds. open: stoker.LeRobotDataset('s3://...'); first: "
        f"stoker.Loader(batch {BATCH_SIZE}, shuffled, {LOADER_THREADS} threads) to its first "
        f"batch. A cold open is stopped after --cold-limit {args.cold_limit:g} s."
    )
    video = os.path.join(args.workdir, "v21-episode.mp4")
    if not os.path.exists(video):
        os.makedirs(args.workdir, exist_ok=True)
        index_bench.encode_episode(video)
    results = []
    with S3Server() as server:
        server.create_bucket(BUCKET)
        client = server.client()
        print(
            f"{'objects':>8} {'upload s':>8} | {'phase':<11} {'open s':>8} {'requests':>8} "
            f"{'by method':<22} {'first s':>7} {'requests':>8} {'by method':<16}"
        )
        for objects in sizes:
            episodes = max(1, (objects - META_OBJECTS) // 2)
            root = os.path.join(args.workdir, f"v21-{episodes}")
            if not os.path.exists(os.path.join(root, "meta", ".complete")):
                shutil.rmtree(root, ignore_errors=True)
                index_bench.write_dataset(root, episodes, video)
            files = [
                str(p)
                for p in sorted(Path(root).rglob("*"))
                if p.is_file() and not any(x.startswith(".") for x in p.relative_to(root).parts)
            ]
            prefix = f"v21-{episodes}"

            def upload(path, prefix=prefix, root=root):
                client.upload_file(path, BUCKET, f"{prefix}/{os.path.relpath(path, root)}")

            started = time.perf_counter()
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(UPLOAD_THREADS) as pool:
                list(pool.map(upload, files))
            upload_s = time.perf_counter() - started
            print(
                f"{len(files):>8} {upload_s:>8.1f} | ({upload_s / len(files) * 1e3:.1f} ms per "
                f"object with {UPLOAD_THREADS} threads: 10^5 objects would take "
                f"~{upload_s / len(files) * 1e5 / 60:.0f} min)",
                flush=True,
            )
            cache = tempfile.mkdtemp(prefix="stoker-scale-s3-")
            with FaultProxy(server.endpoint, seed=0, faults=Faults(latency_s=LATENCY_S)) as proxy:
                env = {**server.env(proxy.endpoint), "STOKER_CACHE_DIR": cache}
                spec = {"case": "s3", "url": f"s3://{BUCKET}/{prefix}"}
                for phase in ("cold", "warm"):
                    limit = args.cold_limit if phase == "cold" else 1800
                    r = run_s3_worker(spec, env, proxy, limit)
                    results.append((objects, len(files), phase, r))
                    print_s3_row(len(files), phase, r)
                    rows.add(
                        "s3",
                        phase,
                        len(files),
                        open_s=r.get("open_s", r["phases"].get("open", {}).get("seconds")),
                        first_batch_s=r.get("first_batch_s"),
                        **{f"{p}_requests": v["requests"] for p, v in r["phases"].items()},
                        **{
                            f"{p}_{m}": c
                            for p, v in r["phases"].items()
                            for m, c in v["methods"].items()
                        },
                    )
                    if r.get("stopped") or "error" in r:
                        if phase == "cold":
                            print(
                                f"{'':>8} {'':>8} | warm        not measured: the cold open "
                                "did not finish (no index in the cache)"
                            )
                        break
            shutil.rmtree(cache, ignore_errors=True)
            # Not deleting the objects: moto keeps them in memory until the server stops.
    targets = []
    per_object = {}  # phase -> requests per object of the last finished open
    for _, count, phase, r in results:
        opened = r["phases"].get("open")
        if not opened:
            continue
        if not r.get("stopped"):
            per_object[phase] = opened["requests"] / count
            targets.append(
                f"{phase} open, {count} objects: {opened['requests']} requests, "
                f"{opened['requests'] / count:.2f} per object "
                f"({describe_methods(opened['methods'])}); {r['open_s']:.1f} s"
            )
            continue
        rate = opened["requests"] / opened["seconds"]
        line = (
            f"{phase} open, {count} objects: STOPPED after {opened['seconds']:.0f} s, "
            f"{opened['requests']} requests made ({rate:.0f}/s: "
            f"{describe_methods(opened['methods'])})"
        )
        if phase in per_object:
            needed = per_object[phase] * count
            line += (
                f"; at the smaller dataset's {per_object[phase]:.2f} requests per object it "
                f"needs ~{needed:,.0f}, ~{needed / rate:,.0f} s at this rate (an estimate)"
            )
        targets.append(line)
    return targets


def print_s3_row(objects: int, phase: str, r: dict) -> None:
    if "error" in r:
        print(f"{'':>8} {'':>8} | {phase:<11} could not run: {r['error']}")
        return
    opened = r["phases"].get("open", {})
    first = r["phases"].get("first batch", {})
    open_s = r.get("open_s")
    open_text = f"{open_s:>8.2f}" if open_s is not None else f">{opened.get('seconds', 0):>7.0f}"
    first_text = (
        f"{r['first_batch_s']:>7.2f} {first.get('requests', 0):>8} "
        f"{describe_methods(first.get('methods', {})):<16}"
        if "first_batch_s" in r
        else "stopped"
    )
    print(
        f"{'':>8} {'':>8} | {phase:<11} {open_text} {opened.get('requests', 0):>8} "
        f"{describe_methods(opened.get('methods', {})):<22} {first_text}",
        flush=True,
    )


# --------------------------------------------------------------------------------------------


def worker_main(spec_json: str) -> int:
    spec = json.loads(spec_json)
    workers = {
        "sampler": worker_sampler,
        "index": worker_index,
        "shards": worker_shards,
        "s3": worker_s3,
    }
    result = workers[spec["case"]](spec)
    print(RESULT + json.dumps(result), flush=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", default="samplers,index,shards,s3")
    parser.add_argument("--sampler-sizes", default="6,8,10", help="powers of ten")
    parser.add_argument(
        "--array-max",
        type=int,
        default=8,
        help="largest power of ten for samplers taking per-sample arrays",
    )
    parser.add_argument("--episodes", default="10000,100000,1000000")
    parser.add_argument("--shards", default="1000,10000,100000")
    parser.add_argument("--objects", default="1000,10000", help="e.g. 1000,10000,100000")
    parser.add_argument(
        "--cold-limit",
        type=float,
        default=150.0,
        help="seconds after which a cold object-storage open is stopped",
    )
    parser.add_argument(
        "--workdir",
        default=str(BENCH / "out" / "scale_data"),
        help="datasets and shards, kept and reused",
    )
    parser.add_argument("--csv", default=str(BENCH / "out" / "scale_bench.csv"))
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # internal: one case
    args = parser.parse_args()
    if args.worker:
        return worker_main(args.worker)
    args.workdir = os.path.abspath(args.workdir)
    os.makedirs(args.workdir, exist_ok=True)
    parts = args.parts.split(",")
    unknown = set(parts) - {"samplers", "index", "shards", "s3"}
    if unknown:
        parser.error(f"unknown parts {sorted(unknown)}")

    started = time.time()
    print("stoker scale benchmark")
    print(f"  command: {' '.join(sys.argv)}")
    print(
        f"  machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB; "
        f"Python {platform.python_version()}; load average {os.getloadavg()[0]:.2f} at start"
    )
    rows = Rows()
    targets: list[tuple[str, list[str]]] = []
    for name, part in (
        ("samplers", part_samplers),
        ("index", part_index),
        ("shards", part_shards),
        ("s3", part_s3),
    ):
        if name in parts:
            began = time.time()
            lines = part(args, rows)
            targets.append((f"{name} ({time.time() - began:.0f} s)", lines))
    print("\nChecks and targets:")
    for name, lines in targets:
        if lines:
            print(f"  {name}:")
        for line in lines:
            print(f"    {line}")
    rows.write(args.csv)
    print(
        f"\nwrote {args.csv}; took {time.time() - started:.0f} s; load average "
        f"{os.getloadavg()[0]:.2f} at end"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
