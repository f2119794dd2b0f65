#!/usr/bin/env python3
"""stoker reading a LeRobot dataset from object storage, against its local copy and the S3
readers users reach for, end to end.

    PYTHONPATH=python .venv/bin/python bench/remote_bench.py [--quick] [--out DIR]
        [--loaders ...] [--batches N] [--max-seconds S]

What it does:

1. Writes a LeRobot v3.0 dataset with loader_bench.py's writer and its H.264 recipe (libx264,
   GOP 30, 3 B-frames, crf 21; 3 cameras at 640x480, 30 fps, all episodes of a camera in one
   file): 8 episodes x 300 frames (loader_bench's own dataset, shared with it), with --quick
   4 episodes x 150 frames. Cached in --out/remote_data.
2. Serves it from moto's S3 server on loopback (tests/python/s3_server.py: signature checking
   on, a real IAM key) behind FaultProxy with Faults(latency_s=0.02, bandwidth=100e6): every
   request waits 20 ms, and every response body is sent at 100 MB/s (the cap is per response:
   concurrent requests each get it). The proxy counts the requests and body bytes it sends.
3. Reads loader_bench's windows (per camera 9 frames in 3 segments, -20..+20 around the sample;
   state and action rows; frames resized to 224x224; batches of 32, shuffled) with, each in a
   fresh process:
     stoker local  stoker.Loader(stoker.LeRobotDataset(local copy), threads=2): warm-up batches,
                   then timed ones;
     stoker s3     the same from s3://bench/...: the index built from the store first (its own
                   cache folder, so it is really built; timed apart), then the first epoch from
                   a cold range cache: its first batch ("first", pipeline start included) and
                   the rest of it ("cold"; at most --cold-batches in all), together "epoch1";
                   then up to --batches more ("steady": what later epochs see);
     torchcodec s3fs  a torch DataLoader with 2 workers over a map-style Dataset that opens each
                   camera's video per item with s3fs.S3FileSystem(...).open(url, "rb") and
                   decodes the window's frames with torchcodec's VideoDecoder(file_object,
                   seek_mode="exact") get_frames_at, resized by the decoder: what Ray's
                   read_lerobot does. The Dataset's tables come from the local copy (read once,
                   not timed);
     lerobot       LeRobot's LeRobotDataset from the server, if .venv-lerobot exists and it can
                   read it.
4. Per phase: samples/s; the proxy's requests and bytes per sample (snapshots at the phase
   marks the worker prints; for stoker also loader.stats()["remote"] through
   _core.remote_stats()); and what the decoder needs for the same batches (the worker records
   their sample ids), from the local copy's packet table (PyAV's demux: every packet's position
   and size): per batch and camera file, the packets from each wanted frame's keyframe to its
   own packet, united ("needed bytes"; what FrameTable::byte_ranges asks for), and the
   contiguous runs of them ("file groups": one ranged GET each at best). Each batch is counted
   on its own: a cache that serves a later batch from an earlier one's bytes reads less.
5. Prints a table, the issue's targets met / not met, and writes remote_report.txt,
   remote_results.csv and remote_results.png to --out. Each run reports the CPUs that the S3
   server and the proxy used meanwhile ("store", on this machine: a real store's would not)
   and those that other jobs used ("others"), and the targets it feeds are flagged when the
   latter is above 0.2.

--quick takes about 2 minutes on 2 cores once the data is written; the full run about 6.
`make bench` runs the full one; `make bench REMOTE_BENCH_ARGS=--quick` the quick one.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent / "tests" / "python"))

import compare_decoders  # noqa: E402
import loader_bench as lb  # noqa: E402

ROOT = lb.ROOT
DATASET = "h264_gop30"
FULL_EPISODES = [300] * 8  # loader_bench's
QUICK_EPISODES = [150] * 4
THREADS = 2
BATCH_SIZE = lb.BATCH_SIZE
BUCKET = "bench"
REGION = "us-east-1"
LATENCY_S = 0.02
BANDWIDTH = 100e6  # bytes/s per response

LOADERS = ("stoker_local", "stoker_s3", "torchcodec_s3fs", "lerobot_s3")

# The issue's targets.
LOCAL_FRACTION_TARGET = 0.90  # stoker s3 samples/s over stoker local
REQUESTS_PER_GROUP_TARGET = 1.0  # requests per file group (camera file, contiguous GOP run)
BYTES_OVER_NEEDED_TARGET = 1.2  # bytes read over the packets the decoder needs
PEER_SPEEDUP_TARGET = 3.0
PEER_BYTES_TARGET = 0.25  # stoker's bytes per sample over the peer's
BUSY_LOAD = lb.BUSY_LOAD

PHASE = "@@phase "  # a worker's stdout line: "@@phase <name>" starts a phase, "@@phase end"


@dataclass
class Settings:
    warmup: int  # batches before the steady phase of local stoker (peers: rounds of workers)
    batches: int  # steady batches at most
    max_seconds: float  # a steady phase stops after this long
    cold_batches: int  # stoker s3's cold phase: the first epoch, at most this many batches
    peer_max_seconds: float  # a peer's steady phase (in whole rounds of workers)


FULL = Settings(warmup=2, batches=20, max_seconds=15.0, cold_batches=40, peer_max_seconds=30.0)
QUICK = Settings(warmup=2, batches=6, max_seconds=6.0, cold_batches=18, peer_max_seconds=10.0)


def mark(name: str) -> None:
    print(PHASE + name, flush=True)


# --------------------------------------------------------------------------------------------
# Workers


def remote_counters() -> dict | None:
    from stoker import _core

    return dict(_core.remote_stats()) if hasattr(_core, "remote_stats") else None


def counter_delta(after: dict | None, before: dict | None) -> dict | None:
    if after is None or before is None:
        return None
    return {k: after[k] - before.get(k, 0) for k in after}


def endless(loader):
    """Batches of one epoch after another (an iteration of a Loader is one epoch)."""
    while True:
        got = False
        for batch in loader:
            got = True
            yield batch
        if not got:
            raise RuntimeError("the loader gave an empty epoch")


def run_phase(batches, name: str, most: int, max_seconds: float, rounds_of: int = 1) -> dict:
    """Times up to `most` batches (whole rounds of `rounds_of`) or max_seconds, recording the
    sample ids; prints the phase's mark first."""
    before = remote_counters()
    mark(name)
    start = time.perf_counter()
    ids: list[int] = []
    count = 0
    while count < most:
        batch = next(batches)
        ids.extend(int(i) for i in lb.as_numpy(batch["index"]))
        count += 1
        del batch
        if count % rounds_of == 0 and time.perf_counter() - start > max_seconds:
            break
    seconds = time.perf_counter() - start
    phase = {
        "name": name,
        "batches": count,
        "samples": len(ids),
        "seconds": seconds,
        "samples_per_s": len(ids) / seconds,
        "ids": ids,
    }
    phase["stoker_remote"] = counter_delta(remote_counters(), before)
    return phase


def worker_stoker(spec: dict) -> dict:
    import stoker

    window = stoker.WindowSpec(delta_timestamps=lb.delta_timestamps(), size=lb.OUT_SIZE)
    result: dict = {"version": f"stoker {stoker.__version__}", "phases": []}
    remote = spec["url"] is not None
    mark("index")
    started = time.perf_counter()
    if remote:
        dataset = stoker.LeRobotDataset(
            spec["url"], spec=window, progress=False, storage_options=spec["storage_options"]
        )
    else:
        dataset = stoker.LeRobotDataset(spec["root"], spec=window, progress=False)
    result["index_s"] = time.perf_counter() - started
    before = remote_counters()
    loader = stoker.Loader(
        dataset, batch_size=BATCH_SIZE, shuffle=True, seed=0, threads=spec["threads"]
    )
    result["batches_per_epoch"] = len(loader)
    batches = endless(loader)
    if remote:
        cold = min(spec["cold_batches"], len(loader))
        result["phases"].append(run_phase(batches, "first", 1, float("inf")))
        result["phases"].append(run_phase(batches, "cold", cold - 1, float("inf")))
    else:
        result["phases"].append(run_phase(batches, "warmup", spec["warmup"], float("inf")))
    result["phases"].append(run_phase(batches, "steady", spec["batches"], spec["max_seconds"]))
    mark("end")
    stats = dict(loader.stats())
    result["loader_remote"] = lb.jsonable(stats.get("remote"))
    result["process_remote"] = counter_delta(remote_counters(), before)
    result["stats"] = lb.jsonable({k: v for k, v in stats.items() if k != "remote"})
    loader.close()
    print(lb.TIMING_DONE, flush=True)
    return result


class S3TorchCodecDataset(lb.PeerDataset):
    """loader_bench's torchcodec Dataset with each video opened from S3 through s3fs: an
    S3FileSystem per process, a file object per item per camera, given to VideoDecoder."""

    def __init__(self, root: str, s3_prefix: str, options: dict):
        super().__init__(root)
        from torchcodec.decoders import VideoDecoder

        try:
            from torchcodec.transforms import Resize

            self.transforms = [Resize(size=lb.OUT_SIZE)]
        except ImportError:
            self.transforms = None
        self.VideoDecoder = VideoDecoder
        self.local_root = str(Path(root))
        self.s3_prefix = s3_prefix  # bucket/prefix
        self.options = options
        self._fs = None
        self._pid = -1

    def fs(self):
        if self._fs is None or self._pid != os.getpid():  # one per DataLoader worker
            import s3fs

            self._fs = s3fs.S3FileSystem(**self.options)
            self._pid = os.getpid()
        return self._fs

    def decode(self, camera, rows):
        import torch

        episode = self.layout.episode_index[rows[0]]
        local = self.layout.video_path[camera][episode]
        url = self.s3_prefix + local[len(self.local_root) :]
        with self.fs().open(url, "rb") as f:
            decoder = self.VideoDecoder(
                f, seek_mode="exact", num_ffmpeg_threads=1, transforms=self.transforms
            )
            frames = decoder.get_frames_at(
                indices=self.layout.file_frames(camera, rows).tolist()
            ).data
        if self.transforms is None:
            resized = torch.nn.functional.interpolate(
                frames.float(), size=lb.OUT_SIZE, mode="bilinear", antialias=True
            )
            frames = resized.round().clamp(0, 255).to(torch.uint8)
        return frames


def worker_peer(spec: dict) -> dict:
    import torch
    from torch.utils.data import DataLoader

    if spec["kind"] == "torchcodec_s3fs":
        import s3fs
        import torchcodec

        dataset = S3TorchCodecDataset(spec["root"], spec["s3_prefix"], spec["s3fs_options"])
        version = (
            f"torchcodec {torchcodec.__version__}, s3fs {s3fs.__version__} (block size "
            f"{s3fs.S3FileSystem.default_block_size / 2**20:g} MiB)"
        )
    else:  # LeRobot's own, in its venv, pointed at the server
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import lerobot
        from lerobot.datasets.lerobot_dataset import LeRobotDataset
        from torchvision.transforms import v2

        dataset = LeRobotDataset(
            "local/stoker_bench",
            root=spec["url"],
            delta_timestamps=lb.delta_timestamps(),
            image_transforms=v2.Resize(lb.OUT_SIZE, antialias=True),
        )
        version = f"lerobot {lerobot.__version__}"
    result = {"version": f"{version}, torch {torch.__version__}", "phases": []}
    n = spec["threads"]
    loader = DataLoader(
        dataset,
        batch_size=BATCH_SIZE,
        shuffle=True,
        num_workers=n,
        drop_last=True,
        generator=torch.Generator().manual_seed(0),
    )
    batches = endless(loader)
    result["phases"].append(run_phase(batches, "warmup", n, float("inf"), n))
    result["phases"].append(
        run_phase(batches, "steady", max(n, spec["batches"]), spec["max_seconds"], n)
    )
    mark("end")
    print(lb.TIMING_DONE, flush=True)
    return result


def worker_main(spec_json: str) -> int:
    spec = json.loads(spec_json)
    if spec["kind"].startswith("stoker"):
        result = worker_stoker(spec)
    else:
        result = worker_peer(spec)
    Path(spec["result"]).write_text(json.dumps(result))
    return 0


# --------------------------------------------------------------------------------------------
# The driver


def process_cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_worker(spec: dict, python: str, log: Path, proxy, server_pid: int) -> dict:
    """Runs one worker; its result with the proxy's counters per phase, peak_rss_mb, store_load
    (CPUs the S3 server and the proxy used meanwhile) and other_load, or {"error": why}."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "python"), env.get("PYTHONPATH", "")])
    env.setdefault("OMP_NUM_THREADS", "1")
    env.update(spec.get("env", {}))
    Path(spec["result"]).unlink(missing_ok=True)
    marks = []  # (phase, proxy requests, proxy bytes) at each mark
    busy, own, started = lb.busy_cpu_seconds(), lb.own_cpu_seconds(), time.monotonic()
    server = process_cpu_seconds(server_pid)
    self_cpu = time.process_time()
    with log.open("w") as err:
        child = subprocess.Popen(
            [python, str(Path(__file__).resolve()), "--worker", json.dumps(spec)],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=env,
            cwd=ROOT,
        )
        memory = lb.TreeMemory(child.pid)
        memory.start()
        for line in child.stdout:
            if line.startswith(PHASE):  # counted when read: a request or two may straddle it
                marks.append((line[len(PHASE) :].strip(), proxy.requests, proxy.bytes_sent))
            elif line.strip() == lb.TIMING_DONE:
                memory.stop_peak()
            else:
                err.write(line)
        code = child.wait()
        memory.stop_peak()
    elapsed = time.monotonic() - started
    store = process_cpu_seconds(server_pid) - server + time.process_time() - self_cpu
    others = (
        (lb.busy_cpu_seconds() - busy)
        - (lb.own_cpu_seconds() - own)
        - (process_cpu_seconds(server_pid) - server)
    )
    result_path = Path(spec["result"])
    if code != 0 or not result_path.exists():
        lines = [x for x in log.read_text().splitlines() if x.strip()]
        return {"error": f"failed ({lines[-1].strip() if lines else f'exit {code}'}; see {log})"}
    result = json.loads(result_path.read_text())
    for (name, requests, sent), (_, next_requests, next_sent) in zip(marks, marks[1:]):
        proxied = {"requests": next_requests - requests, "bytes": next_sent - sent}
        if name == "index":
            result["index_proxy"] = proxied
        for phase in result["phases"]:
            if phase["name"] == name:
                phase["proxy"] = proxied
    result["peak_rss_mb"] = memory.peak_rss_kb / 1024
    result["store_load"] = store / elapsed
    result["other_load"] = max(0.0, others) / elapsed
    return result


def add_epoch_phase(run: dict) -> None:
    """stoker s3's first pass from a cold cache, "epoch1": its first batch and the rest of the
    cold phase together (the targets' cold numbers)."""
    parts = [p for p in run.get("phases", []) if p["name"] in ("first", "cold")]
    if len(parts) != 2:
        return
    merged = {"name": "epoch1", "ids": parts[0]["ids"] + parts[1]["ids"]}
    for key in ("batches", "samples", "seconds"):
        merged[key] = parts[0][key] + parts[1][key]
    merged["samples_per_s"] = merged["samples"] / merged["seconds"]
    for source in ("proxy", "stoker_remote"):
        if all(p.get(source) for p in parts):
            merged[source] = {
                k: parts[0][source][k] + parts[1][source][k] for k in parts[0][source]
            }
    run["phases"].insert(2, merged)


class PacketMap:
    """A camera file's packets (decode order) from PyAV's demux: position, size, and per frame
    its packet and the keyframe packet decoding starts from."""

    def __init__(self, path: str):
        import av

        with av.open(path) as container:
            stream = container.streams.video[0]
            packets = [
                (p.pts, p.pos, p.size, p.is_keyframe) for p in container.demux(stream) if p.size
            ]
        pts = np.array([p[0] for p in packets], np.int64)
        self.pos = np.array([p[1] for p in packets], np.int64)
        self.size = np.array([p[2] for p in packets], np.int64)
        key = np.array([p[3] for p in packets])
        self.packet_of_frame = np.argsort(pts, kind="stable")
        sync = np.maximum.accumulate(np.where(key, np.arange(len(pts)), 0))
        self.sync_of_frame = sync[self.packet_of_frame]
        self.addressable = bool((self.pos >= 0).all() and (np.diff(self.pos) > 0).all())

    def needed(self, frames: np.ndarray) -> np.ndarray:
        """Whether each packet is needed for `frames`: from each frame's keyframe to its own."""
        wanted = np.zeros(len(self.size) + 1, np.int64)
        frames = np.unique(frames)
        np.add.at(wanted, self.sync_of_frame[frames], 1)
        np.add.at(wanted, self.packet_of_frame[frames] + 1, -1)
        # Overlapping [sync, packet] intervals: a packet is needed when inside any of them.
        return np.cumsum(wanted)[:-1] > 0


def needed_reads(layout: lb.Layout, maps: dict[str, PacketMap], ids: list[int]) -> dict:
    """Needed bytes and file groups of `ids` read in batches of BATCH_SIZE (each batch on its
    own), and the bytes of all their packets together."""
    total_bytes = groups = 0
    union = {path: np.zeros(len(m.size), bool) for path, m in maps.items()}
    for start in range(0, len(ids), BATCH_SIZE):
        batch = ids[start : start + BATCH_SIZE]
        per_file: dict[str, list[np.ndarray]] = {}
        for i in batch:
            rows, _ = layout.window(i, lb.CAMERA_OFFSETS)
            for camera in lb.CAMERAS:
                path = layout.video_path[camera][layout.episode_index[i]]
                per_file.setdefault(path, []).append(layout.file_frames(camera, rows))
        for path, frames in per_file.items():
            need = maps[path].needed(np.concatenate(frames))
            total_bytes += int(maps[path].size[need].sum())
            groups += int(
                np.count_nonzero(np.diff(np.concatenate([[0], need.astype(np.int8)])) == 1)
            )
            union[path] |= need
    unique = sum(int(maps[p].size[u].sum()) for p, u in union.items())
    return {"bytes": total_bytes, "groups": groups, "unique_bytes": unique}


def describe_dataset(layout: lb.Layout, maps: dict[str, PacketMap]) -> str:
    path = layout.video_path[lb.CAMERAS[0]][0]
    m = maps[path]
    size = sum(Path(p).stat().st_size for p in maps)
    mbit = m.size.sum() * 8 / (len(m.size) / lb.FPS) / 1e6
    return (
        f"{len(layout.episode_from)} episodes, {layout.num_rows} samples, "
        f"{len(lb.CAMERAS)} cameras in one H.264 file each ({len(m.size)} frames, "
        f"{mbit:.2f} Mbit/s, {m.size.mean() / 1e3:.1f} kB per packet); "
        f"{size / 1e6:.1f} MB of video"
    )


def lerobot_python() -> str | None:
    python = ROOT / ".venv-lerobot" / "bin" / "python"
    return str(python) if python.exists() else None


def write_data(out: Path, episodes: list[int]) -> Path:
    lb.EPISODES = episodes  # write_dataset and its recipe stamp read it
    return lb.write_dataset(DATASET, out / "remote_data" / f"{len(episodes)}x{episodes[0]}")


# Report -------------------------------------------------------------------------------------


def per_sample(phase: dict, key: str, source: str = "proxy") -> float | None:
    counts = phase.get(source)
    if not counts or not phase["samples"]:
        return None
    return counts[key] / phase["samples"]


def fmt(value: float | None, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def busy_note(*runs: dict | None) -> str:
    return lb.busy_note(*runs)


def report(runs: dict[str, dict], needs: dict[tuple, dict], settings: Settings) -> tuple:
    """Prints the table and the targets; returns the target lines and the CSV rows."""
    rows: list[dict] = []
    header = (
        f"  {'loader / phase':<28}{'samples/s':>10}{'samples':>8}{'s':>6}{'req/smp':>9}"
        f"{'kB/smp':>9}{'need kB':>9}{'groups':>8}{'req/grp':>8}{'B/need':>9}"
        f"{'RSS MB':>8}{'store':>6}{'others':>8}"
    )
    print(header)
    print("  " + "-" * (len(header) - 2))
    for loader in LOADERS:
        run = runs.get(loader)
        if run is None:
            continue
        if "phases" not in run:
            why = run.get("error") or run.get("missing") or "no result"
            print(f"  {loader:<28}{'n/a':>10}   {why}")
            rows.append({"loader": loader, "status": why})
            continue
        for phase in run["phases"]:
            need = needs.get((loader, phase["name"]))
            req = per_sample(phase, "requests")
            kb = per_sample(phase, "bytes")
            need_kb = need["bytes"] / phase["samples"] / 1e3 if need else None
            groups = need["groups"] / phase["samples"] if need else None
            req_per_group = req / groups if req is not None and groups else None
            over_need = kb * 1e3 / (need_kb * 1e3) if kb is not None and need_kb else None
            print(
                f"  {loader + ' / ' + phase['name']:<28}{phase['samples_per_s']:>10.2f}"
                f"{phase['samples']:>8}{phase['seconds']:>6.1f}{fmt(req, '.3f'):>9}"
                f"{fmt(None if kb is None else kb / 1e3, '.0f'):>9}{fmt(need_kb, '.0f'):>9}"
                f"{fmt(groups, '.2f'):>8}{fmt(req_per_group):>8}{fmt(over_need):>9}"
                f"{run['peak_rss_mb']:>8.0f}{run['store_load']:>6.2f}"
                f"{run['other_load']:>7.2f}{'!' if run['other_load'] > BUSY_LOAD else ' '}"
            )
            rows.append(
                {
                    "loader": loader,
                    "phase": phase["name"],
                    "samples_per_s": phase["samples_per_s"],
                    "samples": phase["samples"],
                    "seconds": phase["seconds"],
                    "requests_per_sample": req,
                    "bytes_per_sample": None if kb is None else kb,
                    "needed_bytes_per_sample": None if need_kb is None else need_kb * 1e3,
                    "file_groups_per_sample": groups,
                    "unique_needed_bytes_per_sample": need["unique_bytes"] / phase["samples"]
                    if need
                    else None,
                    "stoker_requests_per_sample": per_sample(phase, "requests", "stoker_remote"),
                    "stoker_bytes_per_sample": per_sample(phase, "bytes_fetched", "stoker_remote"),
                    "peak_rss_mb": run["peak_rss_mb"],
                    "store_load": run["store_load"],
                    "other_load": run["other_load"],
                    "status": "ok",
                }
            )
    print(
        "  (req/smp, kB/smp: the proxy's requests and body kB per sample in the phase; need kB:"
        " the packets the decoder needs per sample, each\n   batch on its own; groups: contiguous"
        " runs of them per sample (camera file x GOP run, per batch); req/grp and B/need: the\n"
        "   ratios the targets use; store: CPUs the S3 server and the proxy used, others: CPUs "
        f"of other jobs, ! above {BUSY_LOAD}: unreliable)"
    )

    s3 = runs.get("stoker_s3", {})
    if "phases" in s3:
        print(
            f"  stoker s3: index built from the store in {s3['index_s']:.2f} s "
            f"({s3.get('index_proxy', {}).get('requests', '?')} requests, "
            f"{s3.get('index_proxy', {}).get('bytes', 0) / 1e6:.2f} MB); "
            f"{s3['batches_per_epoch']} batches per epoch"
        )
        for phase in s3["phases"]:
            if phase.get("stoker_remote"):
                print(
                    f"  stoker s3 {phase['name']}: _core.remote_stats() delta: "
                    f"{lb.describe_stats(phase['stoker_remote'])}"
                )
        if s3.get("loader_remote"):
            print(
                f"  stoker s3: loader.stats()['remote'] after the run: "
                f"{lb.describe_stats(s3['loader_remote'])}"
            )
        print(f"  stoker s3: loader.stats(): {lb.describe_stats(s3['stats'])}")
    for loader in LOADERS:
        run = runs.get(loader, {})
        if "phases" in run:
            needed = needs.get((loader, "steady"))
            if needed:
                print(
                    f"  {loader} steady: {needed['unique_bytes'] / 1e6:.1f} MB of distinct "
                    f"packets needed over the phase ({needed['bytes'] / 1e6:.1f} MB counting "
                    f"each batch on its own)"
                )
    versions = sorted({run["version"] for run in runs.values() if "version" in run})
    print(f"  versions: {'; '.join(versions)}")

    def phase_of(loader, name):
        for phase in runs.get(loader, {}).get("phases", []):
            if phase["name"] == name:
                return phase
        return None

    def why(loader):
        run = runs.get(loader)
        if run is None:
            return "not run (see --loaders)"
        return run.get("error") or run.get("missing") or "no result"

    targets = []
    local = phase_of("stoker_local", "steady")
    for name in ("epoch1", "steady"):
        phase = phase_of("stoker_s3", name)
        if phase is None or local is None:
            targets.append(
                f"stoker s3 {name} >= {LOCAL_FRACTION_TARGET:.0%} of stoker local "
                f"({THREADS} threads): not measured ("
                f"{why('stoker_s3') if phase is None else why('stoker_local')})"
            )
            continue
        fraction = phase["samples_per_s"] / local["samples_per_s"]
        targets.append(
            f"stoker s3 {name} >= {LOCAL_FRACTION_TARGET:.0%} of stoker local "
            f"({THREADS} threads): {phase['samples_per_s']:.1f} / "
            f"{local['samples_per_s']:.1f} samples/s = {fraction:.0%} -> "
            f"{compare_decoders.verdict(fraction >= LOCAL_FRACTION_TARGET)}"
            f"{busy_note(runs.get('stoker_s3'), runs.get('stoker_local'))}"
        )
    for name in ("first", "epoch1", "steady"):
        phase = phase_of("stoker_s3", name)
        need = needs.get(("stoker_s3", name))
        if phase is None or need is None or "proxy" not in phase:
            targets.append(f"stoker s3 {name} requests and bytes: not measured")
            continue
        ratio = phase["proxy"]["requests"] / max(1, need["groups"])
        targets.append(
            f"stoker s3 {name} <= {REQUESTS_PER_GROUP_TARGET:g} request per file "
            f"group: {phase['proxy']['requests']} requests / {need['groups']} groups "
            f"= {ratio:.2f} -> "
            f"{compare_decoders.verdict(ratio <= REQUESTS_PER_GROUP_TARGET)}"
        )
        over = phase["proxy"]["bytes"] / max(1, need["bytes"])
        targets.append(
            f"stoker s3 {name} bytes <= {BYTES_OVER_NEEDED_TARGET:g}x the needed "
            f"packets: {phase['proxy']['bytes'] / 1e6:.1f} MB / "
            f"{need['bytes'] / 1e6:.1f} MB = {over:.2f}x -> "
            f"{compare_decoders.verdict(over <= BYTES_OVER_NEEDED_TARGET)}"
        )
    for peer in ("torchcodec_s3fs", "lerobot_s3"):
        theirs = phase_of(peer, "steady")
        if theirs is None:
            targets.append(
                f">= {PEER_SPEEDUP_TARGET:g}x {peer} samples/s, <= "
                f"{PEER_BYTES_TARGET:g}x its bytes: not measured: {why(peer)}"
            )
            continue
        for name in ("epoch1", "steady"):
            ours = phase_of("stoker_s3", name)
            if ours is None:
                targets.append(f"stoker s3 {name} vs {peer}: not measured ({why('stoker_s3')})")
                continue
            speedup = ours["samples_per_s"] / theirs["samples_per_s"]
            targets.append(
                f"stoker s3 {name} >= {PEER_SPEEDUP_TARGET:g}x {peer}: "
                f"{speedup:.2f}x -> "
                f"{compare_decoders.verdict(speedup >= PEER_SPEEDUP_TARGET)}"
                f"{busy_note(runs.get('stoker_s3'), runs.get(peer))}"
            )
            ours_b, theirs_b = per_sample(ours, "bytes"), per_sample(theirs, "bytes")
            if ours_b is not None and theirs_b:
                fraction = ours_b / theirs_b
                targets.append(
                    f"stoker s3 {name} bytes per sample <= {PEER_BYTES_TARGET:g}x "
                    f"{peer}'s: {ours_b / 1e3:.0f} kB / {theirs_b / 1e3:.0f} kB = "
                    f"{fraction:.3f}x -> "
                    f"{compare_decoders.verdict(fraction <= PEER_BYTES_TARGET)}"
                )
    return targets, rows


def write_csv(rows: list[dict], path: Path) -> None:
    fields = [
        "loader",
        "phase",
        "samples_per_s",
        "samples",
        "seconds",
        "requests_per_sample",
        "bytes_per_sample",
        "needed_bytes_per_sample",
        "unique_needed_bytes_per_sample",
        "file_groups_per_sample",
        "stoker_requests_per_sample",
        "stoker_bytes_per_sample",
        "peak_rss_mb",
        "store_load",
        "other_load",
        "status",
    ]
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        for row in rows:
            writer.writerow(
                {k: (f"{v:.4f}" if isinstance(v, float) else v) for k, v in row.items()}
            )


def write_png(rows: list[dict], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    measured = [r for r in rows if r.get("status") == "ok"]
    if not measured:
        return False
    labels = [f"{r['loader']}\n{r['phase']}" for r in measured]
    x = np.arange(len(measured))
    fig, (rate, data) = plt.subplots(1, 2, figsize=(13, 4.5))
    rate.bar(x, [r["samples_per_s"] for r in measured], color="tab:blue")
    rate.set_ylabel("samples/s (batch 32, 3 cameras x 9 frames)")
    rate.set_title(
        f"{THREADS} threads / workers; store +{LATENCY_S * 1e3:.0f} ms, {BANDWIDTH / 1e6:.0f} MB/s"
    )
    width = 0.4
    data.bar(
        x - width / 2,
        [(r["bytes_per_sample"] or 0) / 1e3 for r in measured],
        width,
        label="read from the store",
    )
    data.bar(
        x + width / 2,
        [(r["needed_bytes_per_sample"] or 0) / 1e3 for r in measured],
        width,
        label="packets the decoder needs",
    )
    data.set_yscale("symlog")
    data.set_ylabel("kB per sample")
    data.set_title("Bytes per sample")
    data.legend(fontsize=8)
    for axes in (rate, data):
        axes.set_xticks(x)
        axes.set_xticklabels(labels, fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smaller dataset, fewer batches")
    parser.add_argument(
        "--out",
        type=Path,
        default=ROOT / "bench" / "out",
        help="dataset, logs and results (default: bench/out)",
    )
    parser.add_argument("--loaders", nargs="+", default=list(LOADERS), choices=list(LOADERS))
    parser.add_argument("--batches", type=int, help="steady batches at most per loader")
    parser.add_argument("--max-seconds", type=float, help="steady phase per loader at most")
    parser.add_argument("--cold-batches", type=int, help="stoker s3's cold phase at most")
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # internal: one measurement
    args = parser.parse_args()
    if args.worker:
        return worker_main(args.worker)

    settings = QUICK if args.quick else FULL
    for name in ("batches", "max_seconds", "cold_batches"):
        if getattr(args, name) is not None:
            setattr(settings, name, getattr(args, name))
    episodes = QUICK_EPISODES if args.quick else FULL_EPISODES
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    sys.stdout = compare_decoders.Tee(sys.stdout, (args.out / "remote_report.txt").open("w"))
    started = time.time()
    print("stoker remote (object storage) benchmark")
    print(f"  command: {' '.join(shlex.quote(a) for a in sys.argv)}")
    print(
        f"  machine: {compare_decoders.cpu_model()}, {os.cpu_count()} cores, {lb.cpus()} "
        f"usable; load average {os.getloadavg()[0]:.2f} at start"
    )
    print(f"  python {platform.python_version()}; {compare_decoders.library_versions()}")
    try:
        print(f"  stoker: {compare_decoders.stoker_version()}")
    except Exception as e:
        print(f"  stoker: cannot import ({type(e).__name__}: {e})")

    root = write_data(args.out, episodes)
    layout = lb.Layout(root)
    maps = {
        path: PacketMap(path) for camera in lb.CAMERAS for path in set(layout.video_path[camera])
    }
    print(
        f"  data: LeRobot v3.0, {lb.DATASETS[DATASET]['label']}; {describe_dataset(layout, maps)}"
    )
    if not all(m.addressable for m in maps.values()):
        print("  (PyAV gives no byte position for some packets: needed bytes are approximate)")
    print(
        f"  window: loader_bench's (cameras {list(lb.CAMERA_OFFSETS)}, 224x224), batch "
        f"{BATCH_SIZE}, shuffled; {THREADS} stoker threads / DataLoader workers"
    )
    print(
        f"  store: moto server on loopback behind FaultProxy: +{LATENCY_S * 1e3:.0f} ms per "
        f"request, bodies at {BANDWIDTH / 1e6:.0f} MB/s per response"
    )
    print(
        f"  timing: stoker local {settings.warmup} warm-up batches then up to "
        f"{settings.batches} batches or {settings.max_seconds:g} s; stoker s3 the first "
        f"epoch cold (at most {settings.cold_batches} batches) then the same steady phase; "
        f"peers one round of workers, then up to {settings.peer_max_seconds:g} s in rounds"
    )
    try:  # the local index, built here so that the timed local run does not build it
        import stoker

        stoker.LeRobotDataset(str(root), progress=False)
    except Exception as e:
        print(f"  stoker cannot open the local dataset ({type(e).__name__}: {e})")

    from s3_server import FaultProxy, Faults, S3Server

    work = args.out / "remote_work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    prefix = f"remote/{root.name}"
    url = f"s3://{BUCKET}/{prefix}"
    runs: dict[str, dict] = {}
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(S3Server())
        server.create_bucket(BUCKET)
        upload = time.perf_counter()
        keys = server.upload_tree(root, BUCKET, prefix)
        print(f"  uploaded {len(keys)} objects to {url} in {time.perf_counter() - upload:.1f} s")
        proxy = stack.enter_context(
            FaultProxy(
                server.endpoint, seed=0, faults=Faults(latency_s=LATENCY_S, bandwidth=BANDWIDTH)
            )
        )
        stoker_options = {
            "endpoint_url": proxy.endpoint,
            "key": server.access_key_id,
            "secret": server.secret_access_key,
            "region": REGION,
        }
        s3fs_options = {
            "key": server.access_key_id,
            "secret": server.secret_access_key,
            "client_kwargs": {"endpoint_url": proxy.endpoint, "region_name": REGION},
        }
        common = {
            "root": str(root),
            "threads": THREADS,
            "warmup": settings.warmup,
            "batches": settings.batches,
            "max_seconds": settings.max_seconds,
            "cold_batches": settings.cold_batches,
            "url": None,
            "env": server.env(proxy.endpoint),
        }
        cache = Path(tempfile.mkdtemp(prefix="stoker_remote_bench_"))
        stack.callback(shutil.rmtree, cache, True)
        specs = {
            "stoker_local": {"kind": "stoker_local"},
            "stoker_s3": {
                "kind": "stoker_s3",
                "url": url,
                "storage_options": stoker_options,
                "env": {**common["env"], "STOKER_CACHE_DIR": str(cache)},
            },
            "torchcodec_s3fs": {
                "kind": "torchcodec_s3fs",
                "s3_prefix": f"{BUCKET}/{prefix}",
                "s3fs_options": s3fs_options,
                "max_seconds": settings.peer_max_seconds,
            },
            "lerobot_s3": {
                "kind": "lerobot_s3",
                "url": url,
                "max_seconds": settings.peer_max_seconds,
            },
        }
        for loader in LOADERS:
            if loader not in args.loaders:
                continue
            python = sys.executable
            if loader == "lerobot_s3":
                python = lerobot_python()
                if python is None:
                    runs[loader] = {"missing": "no .venv-lerobot (`make test-lerobot` creates it)"}
                    continue
            spec = {**common, **specs[loader], "result": str(work / f"{loader}.json")}
            print(f"{loader}: running", flush=True)
            runs[loader] = run_worker(
                spec, python, work / f"{loader}.log", proxy, server._process.pid
            )
            if loader == "stoker_s3":
                add_epoch_phase(runs[loader])
            if loader == "lerobot_s3" and "error" in runs[loader]:
                runs[loader]["error"] = (
                    f"not measured: cannot read the server: {runs[loader]['error']}"
                )

    needs = {}
    for loader, run in runs.items():
        for phase in run.get("phases", []):
            needs[(loader, phase["name"])] = needed_reads(layout, maps, phase["ids"])
    print()
    targets, rows = report(runs, needs, settings)
    print(
        f"\nTargets ({THREADS} threads; store +{LATENCY_S * 1e3:.0f} ms per request, "
        f"{BANDWIDTH / 1e6:.0f} MB/s):"
    )
    for line in targets:
        print("  " + line)
    write_csv(rows, args.out / "remote_results.csv")
    png = write_png(rows, args.out / "remote_results.png")
    print(
        f"\nwrote {args.out / 'remote_report.txt'}, {args.out / 'remote_results.csv'}"
        + (f" and {args.out / 'remote_results.png'}" if png else " (no PNG)")
    )
    print(f"took {time.time() - started:.0f} s; load average {os.getloadavg()[0]:.2f} at end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
