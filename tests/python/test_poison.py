"""Every byte of a batch is written by the batch that owns it (STYLE.md): an epoch built twice
by fresh loaders, once over batch buffers poisoned with 0x00 and once with 0xFF
(``STOKER_POISON_BATCHES``, read where each pool is made), in batches enough for the pools to
recycle their buffers, is the same byte for byte, for every kind of field: LeRobot video
cameras (resized, cropped, float and uint8), depth cameras, image cameras, pad masks and
padded windows beyond an episode's ends, state and action rows; shard images of odd sizes at
several DCT scales, random resized crops, clips, tokens, arrays, text, labels and json.

A byte left unwritten comes out as the poison, so the two epochs differ where it is; a byte
computed from memory outside the image (issue 21 item 4: swscale read 3 bytes past a decoded
image, see src/media/frame_converter.cc) takes whatever the decode threads held, which
differs between runs."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import tarfile

import lerobot_datasets
import numpy as np
import pytest
from images import encode, photo

import stoker
from stoker.datasets.lerobot.dataset import LeRobotDataset, WindowSpec

POISONS = ("0", "255")


def digest(batch) -> dict:
    """Each field of a batch as (dtype, shape, SHA-256 of its bytes), or its value for lists:
    what the batch holds, kept without keeping its buffers (which the pool must recycle)."""
    out = {}
    for name, value in batch.items():
        if isinstance(value, np.ndarray):
            data = np.ascontiguousarray(value).tobytes()
            out[name] = (value.dtype.str, value.shape, hashlib.sha256(data).hexdigest())
        else:
            out[name] = repr(value)
    return out


def poisoned_epochs(monkeypatch, make_loader, epochs=1):
    """``epochs`` epochs of a fresh ``make_loader()`` per poison, as digests."""
    runs = []
    for poison in POISONS:
        monkeypatch.setenv("STOKER_POISON_BATCHES", poison)
        loader = make_loader()
        runs.append([digest(batch) for _ in range(epochs) for batch in loader])
    monkeypatch.delenv("STOKER_POISON_BATCHES")
    return runs


def assert_same_epochs(runs):
    first, second = runs
    assert len(first) == len(second) and len(first) >= 4  # enough batches to recycle buffers
    for k, (a, b) in enumerate(zip(first, second)):
        assert a.keys() == b.keys()
        differ = [name for name in a if a[name] != b[name]]
        assert not differ, f"batch {k}: {differ} differ between poisons 0x00 and 0xFF"


# ---------------------------------------------------------------------------------------------
# LeRobot datasets: the native Loader's pool

TOP, WRIST = "observation.images.top", "observation.images.wrist"
DEPTH, IMAGE = "observation.images.depth", "observation.images.still"
# An odd width over twice the resized widths below, stored and at the DCT scales they pick
# (1/2: 49x21 for 20x24, 5/8: 61x26 for 21x23).
IMAGE_SIZE = (41, 97)


@pytest.fixture(scope="module")
def lerobot_poison(tmp_path_factory, lerobot_cache):
    """v3.0, three episodes (5, 7, 6 frames): two H.264 cameras, a gray16le depth camera and a
    JPEG image camera of odd size."""
    base = tmp_path_factory.mktemp("poison")
    written = lerobot_datasets.write_v30(
        base / "v30",
        [5, 7, 6],
        [TOP, WRIST],
        fps=30,
        codec="h264",
        episodes_per_file=2,
        cache_dir=lerobot_cache,
    )
    lerobot_datasets.add_depth_camera(
        written, DEPTH, (24, 32), "gray16le", {"video.depth_scale": 0.001}
    )
    lerobot_datasets.add_image_camera(written, IMAGE, IMAGE_SIZE, image_format="JPEG")
    return written


# Windows reaching before an episode's start and past its end: pad masks, and padded slots.
WINDOWS = {
    TOP: [-1, 0, 2],
    WRIST: [0],
    DEPTH: [-2, 0, 1],
    IMAGE: [-1, 0, 3],
    "observation.state": [-2, -1, 0],
    "action": list(range(8)),
}


@pytest.mark.parametrize(
    "transforms, image_dtype, depth_unit",
    [
        (stoker.Transforms(resize=(20, 24)), "uint8", "raw"),
        (stoker.Transforms(resize=(21, 23), dtype="float32", layout="THWC"), "float32", "m"),
        (stoker.Transforms(random_resized_crop=(16, 16), hflip=0.5), "uint8", "m"),
        (
            stoker.Transforms(
                center_crop=(15, 17),
                resize=(20, 40),
                mean=(0.5,) * 3,
                std=(0.25,) * 3,
                dtype="float32",
            ),
            "float32",
            "raw",
        ),
    ],
    ids=["resize-uint8", "resize-float-thwc", "random-crop", "centre-crop-normalized"],
)
@pytest.mark.parametrize("threads", [1, 2])
def test_lerobot_batches_are_the_same_over_any_poison(
    lerobot_poison, monkeypatch, transforms, image_dtype, depth_unit, threads
):
    ds = LeRobotDataset(
        lerobot_poison.root,
        WindowSpec(delta_indices=WINDOWS),
        progress=False,
        image_dtype=image_dtype,
        depth_unit=depth_unit, output="numpy"
    )

    def make_loader():
        # 18 samples in batches of 4 (the last short) through a pool of prefetch + 2 buffers.
        return stoker.Loader(
            ds,
            batch_size=4,
            shuffle=True,
            seed=7,
            threads=threads,
            prefetch=1,
            transforms=transforms,
            output="numpy",
        )

    runs = poisoned_epochs(monkeypatch, make_loader, epochs=2)
    assert {f"{DEPTH}_is_pad", f"{IMAGE}_is_pad", "action_is_pad"} <= runs[0][0].keys()
    assert_same_epochs(runs)


def test_a_poison_that_is_not_a_byte_is_refused(lerobot_poison, monkeypatch):
    ds = LeRobotDataset(lerobot_poison.root, progress=False, output="numpy")
    for bad in ("256", "-1", "0x10", "x"):
        monkeypatch.setenv("STOKER_POISON_BATCHES", bad)
        with pytest.raises(stoker.InvalidArgumentError, match="STOKER_POISON_BATCHES"):
            stoker.Loader(ds, batch_size=4, output="numpy")


# ---------------------------------------------------------------------------------------------
# Shard datasets: the shard loader's image arrays, and its per-sample fields


def npy(array) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


# Stored sizes that a 224 x 224 output decodes at 8/8 (the two of issue 21), 4/8, 2/8 and 1/8
# (an odd width over twice 224 at each scale), and odd sizes of other shapes.
JPEG_SIZES = [(479, 252), (567, 240), (897, 448), (1793, 900), (3585, 1792), (333, 217), (97, 61)]
PNG_SIZES = [(481, 199), (97, 41), (225, 225)]


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    """Two small H.264 clips of different content, as shard members."""
    out = []
    for k, source in enumerate(["testsrc2", "testsrc"]):
        path = tmp_path_factory.mktemp("clips") / f"c{k}.mp4"
        subprocess.run(
            [
                "ffmpeg",
                "-nostdin",
                "-y",
                "-loglevel",
                "error",
                "-f",
                "lavfi",
                "-i",
                f"{source}=size=66x50:rate=10:duration=1",
                "-c:v",
                "libx264",
                "-preset",
                "veryfast",
                "-pix_fmt",
                "yuv420p",
                "-g",
                "4",
                str(path),
            ],
            check=True,
        )
        out.append(path.read_bytes())
    return out


@pytest.fixture(scope="module")
def shard_urls(tmp_path_factory, clips):
    """Two shards of 36 samples: a JPEG (sizes above), a PNG, tokens of 1..9 ids, a 4x3
    float32 array, a caption, a label, json and a clip each."""
    folder = tmp_path_factory.mktemp("poison-shards")
    jpegs = [encode(photo(w, h, seed=w), "JPEG", quality=90) for w, h in JPEG_SIZES]
    pngs = [encode(photo(w, h, seed=h), "PNG") for w, h in PNG_SIZES]
    urls, n = [], 0
    for s in range(2):
        path = folder / f"poison-{s:03d}.tar"
        with tarfile.open(path, "w") as tar:
            for _ in range(18):
                fields = {
                    "jpg": jpegs[n % len(jpegs)],
                    "png": pngs[n % len(pngs)],
                    "tok.npy": npy(np.arange(1 + n % 9, dtype=np.int32) + n),
                    "emb.npy": npy(np.full((4, 3), n / 7, np.float32)),
                    "txt": f"caption {n}".encode(),
                    "cls": str(n % 5).encode(),
                    "json": json.dumps({"w": n, "score": n / 4, "url": f"u{n}"}).encode(),
                    "mp4": clips[n % 2],
                }
                for field, data in fields.items():
                    info = tarfile.TarInfo(f"s{n:04d}.{field}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
                n += 1
        urls.append(str(path))
    return urls


@pytest.mark.parametrize(
    "transforms",
    [
        None,
        stoker.Transforms(resize=(224, 224), layout="THWC"),
        stoker.Transforms(random_resized_crop=(32, 32), hflip=0.5, dtype="float32"),
        stoker.Transforms(random_resized_crop=(48, 40), dtype="float16", layout="THWC"),
    ],
    ids=["image-sizes", "resize-224-thwc", "random-crop-float32", "random-crop-float16"],
)
@pytest.mark.parametrize("threads", [1, 3])
def test_shard_batches_are_the_same_over_any_poison(
    shard_urls, tmp_path, monkeypatch, transforms, threads
):
    monkeypatch.setenv("STOKER_CACHE_DIR", str(tmp_path / "cache"))
    spec = stoker.ShardSpec(
        photo=stoker.Image("jpg", size=(224, 224)),
        small=stoker.Image("png", size=(37, 45)),
        tokens=stoker.Tokens("tok.npy", pad=-1),
        embedding=stoker.Array("emb.npy"),
        caption=stoker.Text(),
        label=stoker.Label(),
        meta=stoker.Json(keys={"w": "int64", "score": "float32", "url": "str"}),
        clip=stoker.Clip("mp4", frames=(0, 3, 7), size=(23, 31)),
    )
    ds = stoker.ShardDataset(shard_urls, spec)

    def make_loader():
        return stoker.Loader(
            ds,
            batch_size=8,
            shuffle=True,
            seed=5,
            threads=threads,
            prefetch=1,
            transforms=transforms,
            output="numpy",
        )

    runs = poisoned_epochs(monkeypatch, make_loader, epochs=2)
    assert {
        "photo",
        "small",
        "tokens",
        "tokens_length",
        "embedding",
        "caption",
        "label",
        "w",
        "score",
        "url",
        "clip",
    } <= runs[0][0].keys()
    assert_same_epochs(runs)


def test_a_shard_loader_refuses_a_poison_that_is_not_a_byte(shard_urls, tmp_path, monkeypatch):
    monkeypatch.setenv("STOKER_CACHE_DIR", str(tmp_path / "cache"))
    ds = stoker.ShardDataset(shard_urls, {"photo": stoker.Image("jpg", size=(32, 32))})
    monkeypatch.setenv("STOKER_POISON_BATCHES", "300")
    with pytest.raises(stoker.InvalidArgumentError, match="STOKER_POISON_BATCHES"):
        stoker.Loader(ds, batch_size=4, output="numpy")
