#!/usr/bin/env python3
"""Image shards: stoker's ShardDataset + Loader against webdataset + torch DataLoader, in one run.

    PYTHONPATH=python .venv/bin/python bench/shard_bench.py [--quick] [--images N]
        [--threads N] [--out bench/out]

1. Writes N (default 5000; 800 with --quick) synthetic photo-like JPEGs at 500x375 (smooth
   gradients and blobs with light grain, quality 90) with a caption (txt), a label (cls) and a
   json object (width, url) each, in 8 tar shards (cached in --out/shard_data, rebuilt when the
   recipe changes); and as many 8x8 JPEGs with the same fields, for the front's overhead.
2. Runs each contender in its own process, one epoch, batch 256, random resized crop to 224,
   horizontal flip, normalize to float32:
   - stoker: ShardDataset + Loader, threads=N, shuffle buffer 2048 (JPEG decoded in C++ at the
     smallest DCT scale still covering the crop, fused crop/resize/flip/normalize);
   - webdataset: WebDataset(shardshuffle) .shuffle(2048) .decode("pil") + DataLoader with N
     workers; the transforms with Pillow + numpy (RandomResizedCrop as torchvision draws it,
     Pillow bilinear resize, flip, normalize): torchvision has no release for this torch.
   Peak memory is the sampled sum of PSS (proportional set size: forked workers' shared pages
   counted once) over the process and its children.
3. The physical limit: one core's decode + random-resized-crop of these JPEGs by stoker's
   batch decoder (libjpeg-turbo, threads=1) times N cores.
4. The front's overhead: stoker's loader over the 8x8 JPEGs, whose decode costs almost
   nothing, so what remains is scheduling, reading, assembly and Python: its CPU time per batch
   (every thread's), against a real batch's decode summed over threads (256 x one image's).
5. Prints samples/s, peak memory, ratios against the targets (>= 3x webdataset's samples/s at
   <= 1/2 its peak memory; >= 85% of the physical limit; the front <= 1% of a batch's decode),
   and writes shard_results.csv.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import platform
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SHARDS = 8
WIDTH, HEIGHT = 500, 375
CROP = 224
BATCH = 256
BUFFER = 2048
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


def photo(rng: np.random.Generator) -> np.ndarray:
    y, x = np.mgrid[0:HEIGHT, 0:WIDTH].astype(np.float32)
    image = np.empty((HEIGHT, WIDTH, 3), np.float32)
    for c in range(3):
        a, b, p, q = rng.uniform(0.004, 0.03, 4)
        image[..., c] = 127 + 70 * np.sin(a * x + p * 300) * np.cos(b * y + q * 300)
    for _ in range(6):  # blobs
        cx, cy, r = rng.uniform(0, WIDTH), rng.uniform(0, HEIGHT), rng.uniform(20, 90)
        blob = np.exp(-((x - cx) ** 2 + (y - cy) ** 2) / (2 * r * r))
        image += blob[..., None] * rng.uniform(-90, 90, 3)
    image += rng.normal(0, 4, image.shape)  # grain
    return np.clip(image, 0, 255).astype(np.uint8)


def make_shards(folder: Path, images: int, width: int = WIDTH, height: int = HEIGHT) -> list[str]:
    from PIL import Image

    recipe = {"images": images, "shards": SHARDS, "size": [width, height], "version": 2}
    stamp = folder / "recipe.json"
    urls = [str(folder / f"bench-{s:06d}.tar") for s in range(SHARDS)]
    if stamp.exists() and json.loads(stamp.read_text()) == recipe:
        return urls
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    per_shard = -(-images // SHARDS)
    for s, url in enumerate(urls):
        with tarfile.open(url, "w") as tar:
            for i in range(s * per_shard, min(images, (s + 1) * per_shard)):
                out = io.BytesIO()
                pixels = photo(rng)[:height, :width]
                Image.fromarray(pixels).save(out, format="JPEG", quality=90)
                meta = {"width": width, "url": f"https://example.com/photos/{i}.jpg"}
                for field, data in (
                    ("jpg", out.getvalue()),
                    ("txt", f"a synthetic photo number {i}".encode()),
                    ("cls", str(i % 100).encode()),
                    ("json", json.dumps(meta).encode()),
                ):
                    info = tarfile.TarInfo(f"{i:07d}.{field}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
        print(f"  wrote {url}", flush=True)
    stamp.write_text(json.dumps(recipe))
    return urls


# ---------------------------------------------------------------------------------------------
# Contenders, each run in a child process: `shard_bench.py --run NAME --urls ... --threads N`


def stoker_spec() -> dict:
    """The fields stoker reads from each sample: the image, caption, label and json."""
    import stoker

    return {
        "image": stoker.Image("jpg"),
        "caption": stoker.Text(),
        "label": stoker.Label(),
        "meta": stoker.Json(keys={"width": "int64", "url": "str"}),
    }


def run_stoker(urls: list[str], threads: int, output: str = "torch") -> tuple[int, float]:
    import stoker

    spec = stoker_spec()
    ds = stoker.ShardDataset(urls, spec)
    transforms = stoker.Transforms(
        random_resized_crop=(CROP, CROP), hflip=0.5, mean=MEAN, std=STD, dtype="float32"
    )
    loader = stoker.Loader(
        ds,
        batch_size=BATCH,
        shuffle=True,
        seed=0,
        threads=threads,
        transforms=transforms,
        shuffle_buffer=BUFFER,
        output=output,
    )
    return _time(loader)


def run_stoker_numpy(urls: list[str], threads: int) -> tuple[int, float]:
    """stoker with numpy batches in a process that never imports torch (a JAX or numpy
    trainer's): what stoker itself holds."""
    samples, seconds = run_stoker(urls, threads, output="numpy")
    assert "torch" not in sys.modules, "stoker imported torch for numpy batches"
    return samples, seconds


class _PillowTransform:
    """RandomResizedCrop(224) + RandomHorizontalFlip + ToTensor + Normalize, with Pillow and
    numpy (torchvision's parameter draw: 10 tries, then a centre crop)."""

    def __init__(self):
        import math
        import random

        self.math, self.random = math, random
        self.mean = np.array(MEAN, np.float32)[:, None, None]
        self.std = np.array(STD, np.float32)[:, None, None]

    def __call__(self, image):
        from PIL import Image

        math, random = self.math, self.random
        width, height = image.size
        area = width * height
        box = None
        for _ in range(10):
            target = area * random.uniform(0.08, 1.0)
            ratio = math.exp(random.uniform(math.log(3 / 4), math.log(4 / 3)))
            w = int(round(math.sqrt(target * ratio)))
            h = int(round(math.sqrt(target / ratio)))
            if 0 < w <= width and 0 < h <= height:
                left, top = random.randint(0, width - w), random.randint(0, height - h)
                box = (left, top, left + w, top + h)
                break
        if box is None:
            side = min(width, height)
            box = (
                (width - side) // 2,
                (height - side) // 2,
                (width + side) // 2,
                (height + side) // 2,
            )
        image = image.resize((CROP, CROP), Image.Resampling.BILINEAR, box=box)
        if random.random() < 0.5:
            image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        array = np.asarray(image, np.float32).transpose(2, 0, 1) / 255.0
        import torch

        return torch.from_numpy((array - self.mean) / self.std)


def run_webdataset(urls: list[str], threads: int) -> tuple[int, float]:
    import torch
    import webdataset as wds

    dataset = (
        wds.WebDataset(urls, shardshuffle=len(urls), empty_check=False)
        .shuffle(BUFFER)
        .decode("pil")
        .to_tuple("jpg", "cls", "txt", "json")
        .map_tuple(_PillowTransform(), lambda c: int(c), lambda t: t, lambda j: j)
    )
    loader = torch.utils.data.DataLoader(dataset, batch_size=BATCH, num_workers=threads)
    return _time(loader)


def _time(loader) -> tuple[int, float]:
    samples = 0
    began = time.perf_counter()
    for batch in loader:
        images = batch["image"] if isinstance(batch, dict) else batch[0]
        samples += len(images)
    return samples, time.perf_counter() - began


def run_limit(urls: list[str], threads: int) -> tuple[int, float]:
    """One core's decode + random resized crop of these JPEGs (stoker's batch decoder with
    threads=1), over up to 512 of them; returns (images, seconds)."""
    import stoker
    from stoker import _core

    ds = stoker.ShardDataset(urls, {"image": stoker.Image("jpg")})
    offsets, sizes = ds.field_ranges("jpg")
    first = np.flatnonzero(ds.sample_shard == 0)[:512]
    data = _core.read_ranges(urls[0], offsets[first], sizes[first]).tobytes()
    ends = np.cumsum(sizes[first])
    images = [data[end - size : end] for end, size in zip(ends, sizes[first])]
    transforms = stoker.Transforms(
        random_resized_crop=(CROP, CROP), hflip=0.5, mean=MEAN, std=STD, dtype="float32"
    )
    options = transforms.core_options(None, "TCHW")
    out = np.empty((len(first), 3, CROP, CROP), np.float32)
    ids = np.ascontiguousarray(first, np.int64)
    _core.decode_images(images, options, out, CROP, CROP, seed=0, epoch=0, ids=ids)  # warm
    began = time.perf_counter()
    _core.decode_images(images, options, out, CROP, CROP, seed=0, epoch=1, ids=ids)
    return len(first), time.perf_counter() - began


def run_stoker_cpu(urls: list[str], threads: int) -> tuple[int, float]:
    """stoker over `urls` (the 8x8 JPEGs, cropped to 8x8), numpy batches: (samples, CPU
    seconds of every thread of the process) over three epochs after one that warms it up."""
    import resource

    import stoker

    def cpu() -> float:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    spec = stoker_spec()
    # 8x8 out of 8x8: no pixel work to speak of, the same steps.
    transforms = stoker.Transforms(
        random_resized_crop=(8, 8), hflip=0.5, mean=MEAN, std=STD, dtype="float32"
    )
    loader = stoker.Loader(
        stoker.ShardDataset(urls, spec),
        batch_size=BATCH,
        seed=0,
        threads=threads,
        transforms=transforms,
        shuffle_buffer=BUFFER,
        output="numpy",
    )
    for _ in loader:  # warm: pages of the pool touched, the shards in the page cache
        pass
    samples = 0
    began = cpu()
    for _ in range(3):
        samples += _time(loader)[0]
    return samples, cpu() - began


def run_tiny_limit(urls: list[str], threads: int) -> tuple[int, float]:
    """One core's decode + 8x8 random crop of the 8x8 JPEGs (what the front's run decodes):
    (images, CPU seconds), the best of 20 rounds: libjpeg's fixed cost per image is most of it,
    and it is decoding, not the front."""
    import stoker
    from stoker import _core

    ds = stoker.ShardDataset(urls, {"image": stoker.Image("jpg")})
    offsets, sizes = ds.field_ranges("jpg")
    first = np.flatnonzero(ds.sample_shard == 0)
    data = _core.read_ranges(urls[0], offsets[first], sizes[first]).tobytes()
    ends = np.cumsum(sizes[first])
    images = [data[end - size : end] for end, size in zip(ends, sizes[first])]
    transforms = stoker.Transforms(
        random_resized_crop=(8, 8), hflip=0.5, mean=MEAN, std=STD, dtype="float32"
    )
    options = transforms.core_options(None, "TCHW")
    out = np.empty((len(first), 3, 8, 8), np.float32)
    ids = np.ascontiguousarray(first, np.int64)
    best = float("inf")
    for epoch in range(20):
        began = time.process_time()
        _core.decode_images(images, options, out, 8, 8, seed=0, epoch=epoch, ids=ids)
        best = min(best, time.process_time() - began)
    return len(first), best


def run_imports(urls: list[str], threads: int) -> tuple[int, float]:
    """The floor under both contenders' memory: a process that imports what they import
    (torch, stoker, webdataset) and does nothing else."""
    import torch  # noqa: F401
    import webdataset  # noqa: F401

    import stoker  # noqa: F401

    time.sleep(1.0)  # long enough for the parent's 4 Hz sampling to see it
    return 0, 1.0


RUNNERS = {
    "stoker": run_stoker,
    "stoker-numpy": run_stoker_numpy,
    "stoker-cpu": run_stoker_cpu,
    "tiny-limit": run_tiny_limit,
    "webdataset": run_webdataset,
    "limit": run_limit,
    "imports": run_imports,
}


# ---------------------------------------------------------------------------------------------
# The parent: runs each child, samples its memory


def _tree_pss(pid: int) -> int:
    """PSS bytes of `pid` and its descendants."""
    total, stack = 0, [pid]
    while stack:
        p = stack.pop()
        try:
            with open(f"/proc/{p}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1]) * 1024
                        break
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    stack.extend(int(c) for c in f.read().split())
        except OSError:
            continue
    return total


def measure(name: str, urls: list[str], threads: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
    command = [sys.executable, __file__, "--run", name, "--threads", str(threads), "--urls", *urls]
    child = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)
    peak = 0
    # PSS at 4 Hz: reading smaps_rollup of a large process costs milliseconds of this (parent)
    # process's CPU, taken from the two cores the contenders decode on.
    while child.poll() is None:
        peak = max(peak, _tree_pss(child.pid))
        time.sleep(0.25)
    out = child.stdout.read() if child.stdout else ""
    if child.returncode != 0:
        raise RuntimeError(f"{name} failed ({child.returncode}): {out[-2000:]}")
    samples, seconds = json.loads(out.strip().splitlines()[-1])
    return {
        "name": name,
        "samples": samples,
        "seconds": seconds,
        "rate": samples / seconds,
        "peak_mb": peak / 1e6,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="800 images")
    parser.add_argument("--images", type=int, help="images (default 5000)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=str(ROOT / "bench" / "out"))
    parser.add_argument("--run", choices=sorted(RUNNERS), help=argparse.SUPPRESS)
    parser.add_argument("--urls", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run:
        samples, seconds = RUNNERS[args.run](args.urls, args.threads)
        print(json.dumps([samples, seconds]))
        return 0
    images = args.images or (800 if args.quick else 5000)
    out = Path(args.out)
    print(
        f"shard_bench: {images} JPEGs {WIDTH}x{HEIGHT} in {SHARDS} shards, batch {BATCH}, "
        f"{args.threads} threads, on {platform.processor() or platform.machine()} "
        f"({os.cpu_count()} CPUs)"
    )
    urls = make_shards(out / "shard_data" / str(images), images)
    limit = measure("limit", urls, args.threads)
    per_image = limit["seconds"] / limit["samples"]
    physical = args.threads / per_image
    results = [measure(name, urls, args.threads) for name in ("stoker", "webdataset")]
    by = {r["name"]: r for r in results}
    for r in results:
        print(
            f"  {r['name']:<11} {r['rate']:8.1f} samples/s   peak {r['peak_mb']:7.1f} MB   "
            f"({r['samples']} samples in {r['seconds']:.2f} s)"
        )
    print(
        f"  physical limit: {physical:.1f} samples/s ({args.threads} cores x one core's "
        f"decode + crop, {per_image * 1e3:.2f} ms per image)"
    )
    floor = measure("imports", urls, args.threads)["peak_mb"]
    print(
        f"  importing torch, stoker and webdataset alone: {floor:.1f} MB (torch's CUDA build "
        f"is most of it); beyond it: stoker {by['stoker']['peak_mb'] - floor:.1f} MB, "
        f"webdataset {by['webdataset']['peak_mb'] - floor:.1f} MB (its workers share the "
        "imports' pages with their parent)"
    )
    speed = by["stoker"]["rate"] / by["webdataset"]["rate"]
    memory = by["stoker"]["peak_mb"] / by["webdataset"]["peak_mb"]
    share = by["stoker"]["rate"] / physical
    alone = measure("stoker-numpy", urls, args.threads)
    print(
        f"  stoker with numpy batches, torch never imported: {alone['rate']:.1f} samples/s, "
        f"peak {alone['peak_mb']:.1f} MB ({alone['peak_mb'] / by['webdataset']['peak_mb']:.2f} "
        "of webdataset's): the rest of stoker's peak above is torch's import"
    )
    print(
        f"  stoker / webdataset: {speed:.2f}x samples/s (target >= 3x) "
        f"{'MET' if speed >= 3 else 'NOT MET'}"
    )
    print(
        f"  stoker / webdataset peak memory: {memory:.2f} (target <= 0.5) "
        f"{'MET' if memory <= 0.5 else 'NOT MET'}"
    )
    print(
        f"  stoker / physical limit: {share:.0%} (target >= 85%) "
        f"{'MET' if share >= 0.85 else 'NOT MET'}"
    )
    # The front: the same loader over 8x8 JPEGs with the same fields. Its CPU time per batch
    # (every thread's, the consumer's included) against a real batch's decode.
    tiny_urls = make_shards(out / "shard_data" / f"{images}-8x8", images, 8, 8)
    tiny = measure("stoker-cpu", tiny_urls, args.threads)
    tiny_decode = measure("tiny-limit", tiny_urls, args.threads)
    per_batch = tiny["seconds"] / tiny["samples"] * BATCH
    decoding = tiny_decode["seconds"] / tiny_decode["samples"] * BATCH
    front = per_batch - decoding  # below 0: within the noise of the two measurements
    real = per_image * BATCH
    print(
        f"  the front: {per_batch * 1e3:.2f} ms of CPU per batch of {BATCH} 8x8 JPEGs (image, "
        f"label, text, json), of which {decoding * 1e3:.2f} ms their decode on one core; the "
        f"rest, {front * 1e3:+.2f} ms, is {front / real:+.2%} of a real batch's "
        f"{real * 1e3:.0f} ms of decode summed over threads (target <= 1%) "
        f"{'MET' if front <= 0.01 * real else 'NOT MET'}"
    )
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "shard_results.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["name", "samples", "seconds", "rate", "peak_mb"])
        writer.writeheader()
        writer.writerows(results + [limit])
    return 0


if __name__ == "__main__":
    sys.exit(main())
