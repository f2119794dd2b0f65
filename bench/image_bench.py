"""image_bench: one core's JPEG decode + resize rate, stoker vs Pillow + torchvision.

    PYTHONPATH=python .venv/bin/python bench/image_bench.py [--images 200] [--repeat 3]
        [--csv bench/out/image_bench.csv]

Data: --images synthetic photo-like 500x375 JPEGs (gradients, texture, flat blobs with hard
edges, sensor noise; quality 90, 4:2:0), encoded by Pillow in memory (tests/python/images.py).

Measured on ONE core (stoker threads=1, torch.set_num_threads(1)), best of --repeat passes over
all images, images per second of bytes -> [3, 224, 224]:
  - stoker uint8:    stoker.decode_images(..., Transforms(resize=(224, 224))), uint8 CHW: the
                     JPEG decoded at the smallest DCT scale >= 224 (5/8 here), then resized;
  - stoker float32:  the same with dtype="float32" (values in [0, 1]);
  - pillow:          Image.open().convert("RGB").resize((224, 224), BILINEAR) -> numpy (full
                     decode, then resize);
  - pillow+tv:       Pillow decode, torchvision Resize((224, 224)) + ToTensor() (float32 CHW);
  - pillow draft:    Pillow's draft("RGB", (224, 224)) (its own DCT scaling) + resize, for
                     reference: the fair "decode less" peer.
Ratios: stoker uint8 / pillow, stoker float32 / pillow+tv, stoker uint8 / pillow draft.
The decode + resize rate is one core's physical limit for issue 13's shard benchmark.
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import platform
import sys
import time

import numpy as np
from PIL import Image

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "python"))
from images import encode, photo  # noqa: E402

import stoker  # noqa: E402

SIZE = (224, 224)


def best_rates(peers, images, repeat):
    """Images per second of each peer, best of `repeat` passes taken in turn (round-robin), so
    that other load on the machine shifts every peer alike."""
    best = dict.fromkeys(peers, float("inf"))
    for _ in range(repeat):
        for name, fn in peers.items():
            start = time.perf_counter()
            fn(images)
            best[name] = min(best[name], time.perf_counter() - start)
    return {name: len(images) / seconds for name, seconds in best.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--csv", default=None)
    args = parser.parse_args()

    images = [encode(photo(500, 375, seed=k), "JPEG", quality=90) for k in range(args.images)]
    uint8 = stoker.Transforms(resize=SIZE)
    float32 = stoker.Transforms(resize=SIZE, dtype="float32")

    def pillow(batch):
        for data in batch:
            np.asarray(
                Image.open(io.BytesIO(data)).convert("RGB").resize(SIZE[::-1], Image.BILINEAR)
            )

    def pillow_draft(batch):
        for data in batch:
            image = Image.open(io.BytesIO(data))
            image.draft("RGB", SIZE[::-1])
            np.asarray(image.convert("RGB").resize(SIZE[::-1], Image.BILINEAR))

    peers = {
        "stoker uint8": lambda b: stoker.decode_images(b, uint8, threads=1),
        "stoker float32": lambda b: stoker.decode_images(b, float32, threads=1),
        "pillow": pillow,
        "pillow draft": pillow_draft,
    }
    try:
        import torch
        from torchvision import transforms as tv

        torch.set_num_threads(1)
        tv_pipeline = tv.Compose([tv.Resize(SIZE), tv.ToTensor()])

        def pillow_tv(batch):
            for data in batch:
                tv_pipeline(Image.open(io.BytesIO(data)).convert("RGB"))

        peers["pillow+tv"] = pillow_tv
    except ImportError:
        # torchvision's ToTensor on the Pillow-resized image is this conversion.
        import torch

        torch.set_num_threads(1)
        print("torchvision is not installed: pillow+tv is Pillow's resize + torch's ToTensor")

        def pillow_torch(batch):
            for data in batch:
                image = (
                    Image.open(io.BytesIO(data)).convert("RGB").resize(SIZE[::-1], Image.BILINEAR)
                )
                torch.from_numpy(np.array(image)).permute(2, 0, 1).float().div(255)

        peers["pillow+tv"] = pillow_torch
    rows = best_rates(peers, images, args.repeat)

    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; one core")
    print(
        f"data: {args.images} photo-like 500x375 JPEGs (q90, 4:2:0) -> 224x224, best of {args.repeat}"
    )
    for name, rate in rows.items():
        print(f"  {name:15s} {rate:8.0f} images/s")
    print(f"ratio stoker uint8 / pillow:          {rows['stoker uint8'] / rows['pillow']:.2f}x")
    if "pillow+tv" in rows:
        print(
            f"ratio stoker float32 / pillow+tv:     {rows['stoker float32'] / rows['pillow+tv']:.2f}x"
        )
    print(
        f"ratio stoker uint8 / pillow draft:    {rows['stoker uint8'] / rows['pillow draft']:.2f}x"
    )
    if args.csv:
        os.makedirs(os.path.dirname(args.csv) or ".", exist_ok=True)
        with open(args.csv, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["peer", "images_per_s"])
            writer.writerows(rows.items())


if __name__ == "__main__":
    main()
