#!/usr/bin/env python3
"""What `stoker etl` buys a training run: the Loader on a source dataset and on its
materialized copy, in one run.

    PYTHONPATH=python .venv/bin/python bench/etl_bench.py [--codecs h264_gop30 av1_g2]
        [--out bench/out] [--gop N] [--batches N] [--threads N]

1. Writes a LeRobot v3.0 source dataset per source codec (cached in --out/etl_data, rebuilt
   only when its recipe changes) with the tests' writer: 6 episodes x 150 frames at 30 fps,
   3 cameras at 640x480 (sharing one encode per episode), episodes packed into one file per
   camera, loader_bench.py's camera-like pictures (testsrc2 with light grain, a different
   stretch per episode), encoded with compare_decoders.py's settings: H.264 (libx264 medium, crf 21, GOP 30, 3 B-frames) and AV1
   (libsvtav1, g=2, crf 30: LeRobot's defaults).
2. Runs `stoker etl` on it to 224x224 (H.264, the default GOP and crf unless --gop says
   otherwise), into a fresh folder, and times it.
3. Measures stoker.Loader on both with the same window as loader_bench.py (per camera 9 frames in
   3 segments: -20 -18 -16, -2 -1 0, +16 +18 +20; observation.state at -1, 0; action at 0..15),
   frames at 224x224 (the source is resized while converting; the materialized one is already
   that size), batches of 32, shuffled, threads = usable CPUs: 2 warm-up batches, then up to
   --batches batches. Reported: samples/s, and the per-sample decode cost: the Loader's decode
   stage seconds (summed over threads, the fused conversion included) per sample.
4. Prints the ratios and whether the issue's target (per-sample decode at least 5x cheaper) is
   met, and writes etl_report.txt and etl_results.csv to --out.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import compare_decoders
import loader_bench
import numpy as np

import stoker
from stoker.writers import etl

ROOT = Path(__file__).resolve().parent.parent
EPISODES = [150] * 6
OUT_SIZE = loader_bench.OUT_SIZE  # (224, 224)
BATCH_SIZE = 32
WARMUP_BATCHES = 2
DECODE_SPEEDUP_TARGET = 5.0
SOURCES = ("h264_gop30", "av1_g2")


def source_dataset(name: str, data_dir: Path) -> Path:
    """The LeRobot v3.0 source dataset for source codec `name`, written unless it is there."""
    root = data_dir / name
    stamp = root / "stoker_bench_recipe.json"
    args = compare_decoders.CODECS[name]["args"]
    recipe = {"episodes": EPISODES, "fps": loader_bench.FPS, "size": loader_bench.FRAME_SIZE,
              "cameras": loader_bench.CAMERAS, "args": args, "source": loader_bench.SOURCE,
              "offsets": "probed"}
    if stamp.exists() and json.loads(stamp.read_text()) == json.loads(json.dumps(recipe)):
        return root
    sys.path.insert(0, str(ROOT / "tests" / "python"))
    import lerobot_datasets  # the tests' writer: the layout stoker's tests and LeRobot agree on

    print(f"writing {root} ({len(EPISODES)} episodes x {EPISODES[0]} frames, "
          f"{len(loader_bench.CAMERAS)} cameras, {args})", flush=True)
    shutil.rmtree(root, ignore_errors=True)
    encodes = data_dir / "encodes" / name
    shutil.rmtree(encodes, ignore_errors=True)
    codec = "av1" if "svtav1" in args else "h264"

    def encode_episode(path, length, fps, codec, size, episode=0, content="marks"):
        # The writer asks for each episode's encode through this module function; the bench
        # puts loader_bench's camera-like pictures in it, with this source codec's settings.
        height, width = size
        source = loader_bench.SOURCE.format(width=width, height=height, fps=fps,
                                            start=(episode or 0) * length)
        subprocess.run(["ffmpeg", "-nostdin", "-y", "-loglevel", "error", "-f", "lavfi", "-i",
                        source, "-frames:v", str(length), *shlex.split(args), "-an", "-r",
                        str(fps), path], check=True, stdout=subprocess.DEVNULL)

    original = lerobot_datasets.encode_episode
    lerobot_datasets.encode_episode = encode_episode
    try:
        lerobot_datasets.write_v30(root, EPISODES, loader_bench.CAMERAS, fps=loader_bench.FPS,
                                   codec=codec, size=loader_bench.FRAME_SIZE,
                                   episodes_per_file=len(EPISODES), offsets="probed",
                                   cache_dir=str(encodes))
    finally:
        lerobot_datasets.encode_episode = original
    shutil.rmtree(encodes, ignore_errors=True)  # the packed files hold the frames now
    stamp.write_text(json.dumps(recipe))
    return root


# The ETL's H.264 encoder settings: C++'s defaults.
ENCODER = stoker._core.EncoderOptions().with_codec_defaults()


def measure(root: Path, threads: int, batches: int) -> dict:
    spec = stoker.WindowSpec(delta_indices={k: list(v) for k, v in loader_bench.WINDOWS.items()},
                             size=OUT_SIZE)
    ds = stoker.LeRobotDataset(root, spec, progress=False)
    loader = stoker.Loader(ds, batch_size=BATCH_SIZE, shuffle=True, seed=0, threads=threads,
                           output="numpy")
    iterator = iter(loader)
    for _ in range(WARMUP_BATCHES):
        next(iterator)
    loader.reset_stats()
    samples = 0
    started = time.perf_counter()
    for _ in range(batches):
        try:
            batch = next(iterator)
        except StopIteration:
            iterator = iter(loader)
            batch = next(iterator)
        samples += len(batch["index"])
        del batch
    seconds = time.perf_counter() - started
    stats = loader.stats()
    loader.close()
    decode = stats["stage_seconds"]["decode"]
    return {"samples": samples, "seconds": seconds, "samples_per_s": samples / seconds,
            "decode_ms_per_sample": decode / samples * 1e3,
            "data_wait_p50_ms": stats["data_wait_p50"] * 1e3}


def doctor_verdict(root: Path, threads: int, step_ms: float) -> str:
    """The doctor's verdict with a synthetic step of `step_ms` per batch."""
    spec = stoker.WindowSpec(delta_indices={k: list(v) for k, v in loader_bench.WINDOWS.items()},
                             size=OUT_SIZE)
    ds = stoker.LeRobotDataset(root, spec, progress=False)
    loader = stoker.Loader(ds, batch_size=BATCH_SIZE, shuffle=True, seed=0, threads=threads,
                           output="numpy")
    report = stoker.diagnose(loader, step=step_ms, steps=8, sweep=False, progress=False)
    loader.close()
    return f"{report.verdict} ({report.input_batches_per_s * BATCH_SIZE:.0f} samples/s supplied)"


def file_megabytes(root: Path) -> float:
    return sum(p.stat().st_size for p in (root / "videos").rglob("*.mp4")) / 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--codecs", nargs="+", default=list(SOURCES), choices=SOURCES)
    parser.add_argument("--out", default=str(ROOT / "bench" / "out"))
    parser.add_argument("--gop", type=int, default=etl.DEFAULT_GOP)
    parser.add_argument("--batches", type=int, default=12)
    parser.add_argument("--threads", type=int, default=loader_bench.cpus())
    parser.add_argument("--step-ms", type=float, default=400.0,
                        help="the doctor's synthetic step per batch of 32 (default 400 ms: a "
                        "compute rate of 80 samples/s, between the two datasets' supply)")
    args = parser.parse_args()
    out = Path(args.out)
    data_dir = out / "etl_data"
    data_dir.mkdir(parents=True, exist_ok=True)

    rows = []
    lines = [
        "stoker etl: the Loader on a source dataset and on its materialized copy",
        f"  machine: {compare_decoders.cpu_model()}, {loader_bench.cpus()} usable CPUs, "
        f"load average before {os.getloadavg()[0]:.2f}; python {platform.python_version()}",
        f"  data: LeRobot v3.0, {len(EPISODES)} episodes x {EPISODES[0]} frames, "
        f"{len(loader_bench.CAMERAS)} cameras at {loader_bench.FRAME_SIZE[1]}x"
        f"{loader_bench.FRAME_SIZE[0]}; window: 9 frames per camera in 3 segments, state, "
        f"16 actions; batches of {BATCH_SIZE}, {args.threads} threads, frames at "
        f"{OUT_SIZE[1]}x{OUT_SIZE[0]}",
        f"  etl: --size {OUT_SIZE[1]}x{OUT_SIZE[0]} --codec h264 --gop {args.gop} (crf "
        f"{ENCODER.crf}, preset {ENCODER.preset})",
        "  command: PYTHONPATH=python .venv/bin/python bench/etl_bench.py " +
        " ".join(sys.argv[1:]),
        "",
    ]
    for name in args.codecs:
        src = source_dataset(name, data_dir)
        dst = data_dir / f"{name}_etl_{OUT_SIZE[1]}x{OUT_SIZE[0]}_gop{args.gop}"
        shutil.rmtree(dst, ignore_errors=True)
        stoker.load_index(src, progress=False)  # built once, outside the ETL's time
        print(f"materializing {src.name} ...", flush=True)
        report = etl.materialize(src, dst, size=OUT_SIZE, gop=args.gop, workers=args.threads,
                                 progress=sys.stderr.isatty())
        frames = report.frames * len(loader_bench.CAMERAS)
        print(f"measuring the Loader on {src.name} and its copy ...", flush=True)
        before = measure(src, args.threads, args.batches)
        after = measure(dst, args.threads, args.batches)
        print(f"asking the doctor about both, with a {args.step_ms:.0f} ms step ...", flush=True)
        verdicts = [doctor_verdict(root, args.threads, args.step_ms) for root in (src, dst)]
        decode_speedup = before["decode_ms_per_sample"] / after["decode_ms_per_sample"]
        rate_speedup = after["samples_per_s"] / before["samples_per_s"]
        met = "met" if decode_speedup >= DECODE_SPEEDUP_TARGET else "NOT met"
        lines += [
            f"source {name}: {compare_decoders.CODECS[name]['label']}",
            f"  etl: {frames} frames in {report.seconds:.1f} s ({frames / report.seconds:.0f} "
            f"frames/s, {args.threads} workers), videos {file_megabytes(src):.1f} MB -> "
            f"{file_megabytes(dst):.1f} MB, timestamps verified to "
            f"{report.max_time_error_s * 1e6:.3f} us",
            f"  {'':24} {'samples/s':>10} {'decode ms/sample':>17} {'data_wait p50 ms':>17}",
            f"  {'source (640x480)':24} {before['samples_per_s']:10.1f} "
            f"{before['decode_ms_per_sample']:17.2f} {before['data_wait_p50_ms']:17.1f}",
            f"  {'materialized (224x224)':24} {after['samples_per_s']:10.1f} "
            f"{after['decode_ms_per_sample']:17.2f} {after['data_wait_p50_ms']:17.1f}",
            f"  per-sample decode {decode_speedup:.1f}x cheaper (target >= "
            f"{DECODE_SPEEDUP_TARGET:.0f}x: {met}); samples/s {rate_speedup:.1f}x",
            f"  stoker doctor with a {args.step_ms:.0f} ms step per batch "
            f"({BATCH_SIZE / args.step_ms * 1000:.0f} samples/s of compute): source "
            f"{verdicts[0]}; materialized {verdicts[1]}",
            "",
        ]
        for label, m in (("source", before), ("materialized", after)):
            rows.append({"source_codec": name, "dataset": label, "gop": args.gop,
                         "samples_per_s": round(m["samples_per_s"], 2),
                         "decode_ms_per_sample": round(m["decode_ms_per_sample"], 3),
                         "data_wait_p50_ms": round(m["data_wait_p50_ms"], 2),
                         "samples": m["samples"], "etl_seconds": round(report.seconds, 2)})
    lines.append(f"  load average after {os.getloadavg()[0]:.2f} (above {loader_bench.cpus()}: "
                 "other jobs shared the CPUs)")
    text = "\n".join(lines)
    print(text)
    (out / "etl_report.txt").write_text(text + "\n")
    with open(out / "etl_results.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
