#!/usr/bin/env python3
"""What the Python front costs on a dataset of many shard members, in fresh processes:
opening, unpickling, and reading one sample (``ds[i]``) against a Loader's batch of one.

    PYTHONPATH=python .venv/bin/python bench/shard_front_bench.py [--members 1000000]
        [--small 8000] [--items 1000] [--out bench/out] [--tree .]

1. Writes two datasets of text samples (one ``.txt`` member each, so members = samples):
   --small samples in shards of 500, and --members samples in shards of 1,000 (cached in
   --out/front_data; written directly, no tarfile, to keep 10^6 members quick).
2. For each, in a fresh process after a cold open filled the cache: the warm open, the
   unpickling of the opened dataset (median of 5), ``ds[i]`` per item over --items random
   samples once one item of every shard was read (a shard's index opens on its first read),
   and a Loader's batch of one (``batch_size=1, threads=1``) per batch.
3. Prints the figures and the ratios the targets name (issue 34): warm open of 10^6 members
   <= 0.3 s; unpickling <= 5% of the warm open; ``ds[i]`` at the large size within 1.3x of the
   small, and <= 2x the Loader's batch of one; writes shard_front_results.csv.

--tree runs the measurements with another checkout's python/ (a before/after comparison, its
own .venv when it has one).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SMALL_SHARD, LARGE_SHARD = 500, 1000

WORKER = r"""
import json, os, pickle, statistics, sys, time
import numpy as np
import stoker

folder, items = sys.argv[1], int(sys.argv[2])
spec = {"caption": stoker.Text("txt")}
began = time.perf_counter()
ds = stoker.ShardDataset(os.path.join(folder, "*.tar"), spec)
opened = time.perf_counter() - began
data = pickle.dumps(ds)
unpickle = []
for _ in range(5):
    began = time.perf_counter()
    copy = pickle.loads(data)
    unpickle.append(time.perf_counter() - began)
    assert len(copy) == len(ds)
# Warm: one item of every shard first (each shard's index opens on its first read), so that
# what follows is the steady cost of an item, as in a training epoch.
for first in ds.shard_first:
    ds[int(first)]
ids = np.random.default_rng(0).integers(0, len(ds), items)
began = time.perf_counter()
for i in ids:
    item = ds[int(i)]
per_item = (time.perf_counter() - began) / items
assert item["caption"] == f"caption {int(ids[-1])}", item
loader = stoker.Loader(ds, batch_size=1, shuffle=True, seed=0, threads=1, output="numpy")
batches = iter(loader)
for _ in range(20):
    next(batches)
began = time.perf_counter()
for _ in range(items):
    next(batches)
per_batch = (time.perf_counter() - began) / items
loader.close()
print(json.dumps({"samples": len(ds), "warm_open_s": opened,
                  "unpickle_s": statistics.median(unpickle), "item_s": per_item,
                  "loader_batch_s": per_batch}))
"""

COLD = r"""
import os, sys, stoker
stoker.ShardDataset(os.path.join(sys.argv[1], "*.tar"), {"caption": stoker.Text("txt")})
"""


def tar_member(name: str, data: bytes) -> bytes:
    info = tarfile.TarInfo(name)
    info.size, info.mtime = len(data), 0
    return info.tobuf(format=tarfile.USTAR_FORMAT) + data + b"\0" * (-len(data) % 512)


def make_dataset(folder: Path, samples: int, per_shard: int) -> None:
    stamp = folder / f".recipe-{samples}-{per_shard}"
    if stamp.exists():
        return
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.tar"):
        old.unlink()
    n = 0
    for s in range((samples + per_shard - 1) // per_shard):
        parts = []
        for _ in range(min(per_shard, samples - n)):
            parts.append(tar_member(f"s{n:09d}.txt", f"caption {n}".encode()))
            n += 1
        parts.append(b"\0" * 1024)
        (folder / f"shard-{s:06d}.tar").write_bytes(b"".join(parts))
    stamp.touch()


def run(script: str, args: list[str], tree: Path, cache: Path) -> str:
    venv = tree / ".venv" / "bin" / "python"
    python = str(venv) if venv.exists() else sys.executable
    env = dict(os.environ, STOKER_CACHE_DIR=str(cache), PYTHONPATH=str(tree / "python"))
    done = subprocess.run([python, "-c", script, *args], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"worker failed:\n{done.stderr[-3000:]}")
    return done.stdout


def measure(folder: Path, items: int, tree: Path, cache: Path) -> dict:
    run(COLD, [str(folder)], tree, cache)  # fills the cache: what follows is warm
    return json.loads(run(WORKER, [str(folder), str(items)], tree, cache).splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--members", type=int, default=1_000_000)
    parser.add_argument("--small", type=int, default=8000)
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--out", default=str(ROOT / "bench" / "out"))
    parser.add_argument("--tree", default=str(ROOT), help="the checkout whose python/ is measured")
    args = parser.parse_args()
    out, tree = Path(args.out), Path(args.tree).resolve()
    cache = out / f"front_cache-{os.getpid()}"
    small, large = out / "front_data" / "small", out / "front_data" / "large"
    make_dataset(small, args.small, SMALL_SHARD)
    make_dataset(large, args.members, LARGE_SHARD)
    rows = []
    for name, folder in (("small", small), ("large", large)):
        r = measure(folder, args.items, tree, cache)
        r["dataset"] = name
        rows.append(r)
        print(
            f"{name:5s} {r['samples']:>9,} samples: warm open {r['warm_open_s']:.3f} s, "
            f"unpickle {r['unpickle_s'] * 1e3:.2f} ms ({r['unpickle_s'] / r['warm_open_s']:.1%}"
            f" of the open), ds[i] {r['item_s'] * 1e3:.3f} ms, Loader batch of one "
            f"{r['loader_batch_s'] * 1e3:.3f} ms ({r['item_s'] / r['loader_batch_s']:.2f}x)"
        )
    s, big = rows
    print(f"tree {tree}")
    print(f"  warm open of {big['samples']:,} members: {big['warm_open_s']:.3f} s (target <= 0.3)")
    print(f"  unpickle / warm open: {big['unpickle_s'] / big['warm_open_s']:.1%} (target <= 5%)")
    print(f"  ds[i] large / small: {big['item_s'] / s['item_s']:.2f}x (target <= 1.3)")
    print(
        f"  ds[i] / Loader batch of one (large): {big['item_s'] / big['loader_batch_s']:.2f}x "
        "(target <= 2)"
    )
    shutil.rmtree(cache, ignore_errors=True)
    with open(out / "shard_front_results.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
