#!/usr/bin/env python3
"""A mix of two datasets against its parts, in one run: does one native loader over a
stoker.MultiDataset read at the rate its parts' shares predict, from one pool of buffers?

    PYTHONPATH=python .venv/bin/python bench/mix_bench.py [--quick] [--threads N] [--out bench/out]

1. Two shard datasets of synthetic photo-like JPEGs (bench/shard_bench.py's), one at 500x375
   and one at 320x240, each with a caption, a label and a json object; N images each (1,600;
   400 with --quick), cached in --out.
2. One epoch each, in its own process, batch 256, random resized crop to 224 with flip and
   normalize to float32, threads=N: part A alone, part B alone, and the mix of A and B at
   weights 1:1 (each slot an independent draw).
3. The prediction: a mix spends, per sample, the share-weighted time of its parts' samples, so
   its rate should be 1 / (p_A / rate_A + p_B / rate_B) with p the fractions of the samples
   the mix actually drew from each part. Target: the mix at >= 95% of that.
4. Memory: the mix's batch pool (stats()["memory_bound_bytes"]) against one pool of
   (prefetch + 2) batches of its batch size; the mix's peak PSS against its parts'.

Prints the rates, the ratio against the prediction and the pools, and writes mix_results.csv.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

import shard_bench  # noqa: E402  (bench/: the photo shards and the peak-memory sampler)

BATCH = 256
PREFETCH = 2


def loader_of(urls_a: list[str], urls_b: list[str], which: str, threads: int):
    import stoker

    spec = shard_bench.stoker_spec()
    transforms = stoker.Transforms(
        random_resized_crop=(shard_bench.CROP, shard_bench.CROP),
        hflip=0.5,
        mean=shard_bench.MEAN,
        std=shard_bench.STD,
        dtype="float32",
    )
    parts = {"A": stoker.ShardDataset(urls_a, spec), "B": stoker.ShardDataset(urls_b, spec)}
    dataset = parts[which] if which in parts else stoker.MultiDataset(list(parts.values()))
    return stoker.Loader(
        dataset,
        batch_size=BATCH,
        seed=0,
        threads=threads,
        prefetch=PREFETCH,
        transforms=transforms,
        output="numpy",
    )


def run(which: str, urls_a: list[str], urls_b: list[str], threads: int) -> dict:
    """One epoch of `which` (A, B or mix) in this process."""
    loader = loader_of(urls_a, urls_b, which, threads)
    samples = 0
    drawn = [0, 0]
    start = time.perf_counter()
    for batch in loader:
        n = len(batch["caption"])
        samples += n
        if "dataset_index" in batch:
            b = int(batch["dataset_index"].sum())
            drawn[0] += n - b
            drawn[1] += b
    seconds = time.perf_counter() - start
    stats = loader.stats()
    return {
        "samples": samples,
        "seconds": seconds,
        "drawn": drawn,
        "memory_bound_bytes": stats["memory_bound_bytes"],
        "batch_bytes": stats["batch_bytes"],
        "pool_batches": stats["pool_batches"],
    }


def measure(which: str, urls_a: list[str], urls_b: list[str], threads: int) -> dict:
    command = [sys.executable, __file__, "--run", which, "--threads", str(threads)]
    command += ["--urls-a", *urls_a, "--urls-b", *urls_b]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
    child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)
    peak = 0
    while child.poll() is None:
        peak = max(peak, shard_bench._tree_pss(child.pid))
        time.sleep(0.05)
    out = child.stdout.read() if child.stdout else ""
    if child.returncode != 0:
        raise RuntimeError(f"{which} failed (exit {child.returncode})")
    result = json.loads(out.strip().splitlines()[-1])
    result["peak_bytes"] = peak
    result["rate"] = result["samples"] / result["seconds"]
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    parser.add_argument("--run", help=argparse.SUPPRESS)
    parser.add_argument("--urls-a", nargs="*", help=argparse.SUPPRESS)
    parser.add_argument("--urls-b", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run:
        print(json.dumps(run(args.run, args.urls_a, args.urls_b, args.threads)))
        return 0

    images = 400 if args.quick else 1600
    print(f"mix bench: {images} images per part, threads {args.threads}, batch {BATCH}")
    urls_a = shard_bench.make_shards(args.out / "mix_a", images)
    urls_b = shard_bench.make_shards(args.out / "mix_b", images, width=320, height=240)
    results = {w: measure(w, urls_a, urls_b, args.threads) for w in ("A", "B", "mix")}
    mix = results["mix"]
    drawn = mix["drawn"]
    shares = [d / sum(drawn) for d in drawn]
    predicted = 1 / (shares[0] / results["A"]["rate"] + shares[1] / results["B"]["rate"])
    ratio = mix["rate"] / predicted
    one_pool = (PREFETCH + 2) * mix["batch_bytes"]
    print(f"{'run':>5} {'samples/s':>10} {'peak MiB':>9} {'pool MiB':>9}")
    for name, r in results.items():
        print(
            f"{name:>5} {r['rate']:10.1f} {r['peak_bytes'] / 2**20:9.0f} "
            f"{r['memory_bound_bytes'] / 2**20:9.0f}"
        )
    print(f"mix drew A {drawn[0]}, B {drawn[1]} samples; predicted {predicted:.1f} samples/s")
    verdict = "MET" if ratio >= 0.95 else "NOT MET"
    print(f"mix / prediction: {ratio:.3f} (target >= 0.95: {verdict})")
    pool_verdict = "MET" if mix["memory_bound_bytes"] <= one_pool else "NOT MET"
    print(
        f"mix pool: {mix['memory_bound_bytes'] / 2**20:.0f} MiB = {mix['pool_batches']} batches "
        f"of {mix['batch_bytes'] / 2**20:.1f} MiB; one pool of prefetch + 2 = "
        f"{one_pool / 2**20:.0f} MiB ({pool_verdict})"
    )
    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / "mix_results.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["run", "samples_per_s", "peak_bytes", "pool_bytes"])
        for name, r in results.items():
            writer.writerow([name, f"{r['rate']:.2f}", r["peak_bytes"], r["memory_bound_bytes"]])
        writer.writerow(["prediction", f"{predicted:.2f}", "", ""])
    return 0


if __name__ == "__main__":
    sys.exit(main())
