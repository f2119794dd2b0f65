#!/usr/bin/env python3
"""Opening many small shards: stoker.ShardDataset's cold and warm open against a listing of the
same shards with Python's tarfile (what an index built in Python costs), in one run.

    PYTHONPATH=python .venv/bin/python bench/shard_open_bench.py [--shards 2000] [--samples 3]
        [--sidecars] [--out bench/out]

1. Writes --shards tar shards of --samples samples each (a caption and a label), cached in
   --out/open_data; with --sidecars each gets the native sidecar index `stoker shard` writes.
2. Times, each in a fresh process: stoker's cold open (empty cache: sidecars or scans, then
   the cache written), its warm open (from the cache), and tarfile listing every member.
3. Prints seconds and shards/s, the ratio to tarfile, and writes shard_open_results.csv.
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

STOKER_OPEN = """
import os, sys, time
import stoker
urls = sorted(os.path.join(sys.argv[1], f) for f in os.listdir(sys.argv[1]) if f.endswith(".tar"))
began = time.perf_counter()
ds = stoker.ShardDataset(urls, {"caption": stoker.Text("txt"), "label": stoker.Label("cls")})
print(time.perf_counter() - began, len(ds))
"""

TARFILE_OPEN = """
import os, sys, tarfile, time
urls = sorted(os.path.join(sys.argv[1], f) for f in os.listdir(sys.argv[1]) if f.endswith(".tar"))
began = time.perf_counter()
members = 0
for url in urls:
    with tarfile.open(url) as tar:
        members += sum(1 for info in tar if info.isfile())
print(time.perf_counter() - began, members // 2)
"""


def make_shards(folder: Path, shards: int, samples: int, sidecars: bool) -> None:
    stamp = folder / f".recipe-{shards}-{samples}-{int(sidecars)}"
    if stamp.exists():
        return
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    from stoker import _core

    n = 0
    for s in range(shards):
        path = folder / f"shard-{s:06d}.tar"
        with tarfile.open(path, "w") as tar:
            for _ in range(samples):
                for field, data in (("txt", f"caption {n}".encode()), ("cls", str(n % 10).encode())):
                    info = tarfile.TarInfo(f"s{n:08d}.{field}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
                n += 1
        if sidecars:
            _core.write_shard_sidecar(str(path))
    stamp.touch()


def timed(script: str, folder: Path, cache: Path) -> tuple[float, int]:
    env = dict(os.environ, STOKER_CACHE_DIR=str(cache), PYTHONPATH=str(ROOT / "python"))
    out = subprocess.run([sys.executable, "-c", script, str(folder)], env=env, check=True,
                         capture_output=True, text=True).stdout.split()
    return float(out[0]), int(out[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shards", type=int, default=2000)
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--sidecars", action="store_true")
    parser.add_argument("--out", default=str(ROOT / "bench" / "out"))
    args = parser.parse_args()
    out = Path(args.out)
    folder = out / "open_data"
    make_shards(folder, args.shards, args.samples, args.sidecars)
    cache = out / "open_cache"
    shutil.rmtree(cache, ignore_errors=True)
    rows = []
    cold, n = timed(STOKER_OPEN, folder, cache)
    warm, _ = timed(STOKER_OPEN, folder, cache)
    listing, m = timed(TARFILE_OPEN, folder, cache)
    assert n == m == args.shards * args.samples, (n, m)
    print(f"{args.shards} shards of {args.samples} samples "
          f"({'with' if args.sidecars else 'without'} sidecars), {os.cpu_count()} cores")
    for name, seconds in (("stoker cold open", cold), ("stoker warm open", warm),
                          ("tarfile listing", listing)):
        print(f"  {name:18s} {seconds:7.2f} s  {args.shards / seconds:9.0f} shards/s  "
              f"{listing / seconds:5.2f}x tarfile")
        rows.append({"what": name, "seconds": round(seconds, 3), "shards": args.shards,
                     "ratio_vs_tarfile": round(listing / seconds, 3)})
    with open(out / "shard_open_results.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
