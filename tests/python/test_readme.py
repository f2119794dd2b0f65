"""The README's Python blocks run as written (issue 24: its LeRobot loop raised on ``task``).

Every ```python block of README.md runs, in order, in one namespace, in a folder that holds
what the blocks name: ``path/to/lerobot_dataset`` (a real v2.1 dataset with a front camera),
LeRobot's cache with ``lerobot/pusht`` (``HF_LEROBOT_HOME``), ``episode_000042/front.mp4``,
``clip.mp4`` and ``photo.jpg`` (real encodes), and a moto S3 server holding
``s3://bucket/prefix/my_dataset`` and ``s3://bucket/train-{000000..000003}.tar``. The names a
block takes from the user's own script (``repo_id``, ``cfg``, ``policy``, ``train_step``, ...)
are defined as a training script would. Two things are changed, and only these: the README's
example endpoint becomes the moto server's, and ``device="cuda"`` becomes ``"cpu"`` on a
machine without CUDA.
"""

import io
import os
import shutil
import tarfile
import types

import lerobot_datasets
import numpy as np
import pytest
import torch
from conftest import X264, encode
from PIL import Image as PILImage

README = os.path.join(os.path.dirname(__file__), "..", "..", "README.md")
FRONT = "observation.images.front"
EXAMPLE_ENDPOINT = "http://127.0.0.1:9000"


def blocks():
    """(heading, code) of every python block of the README, in order."""
    found, heading, code = [], "", None
    for line in open(README, encoding="utf-8"):
        if code is not None:
            if line.startswith("```"):
                found.append((heading, "".join(code)))
                code = None
            else:
                code.append(line)
        elif line.startswith("```python"):
            code = []
        elif line.startswith("#"):
            heading = line.strip()
    return found


def jpeg(seed):
    out = io.BytesIO()
    pixels = np.random.default_rng(seed).integers(0, 255, (96, 128, 3), dtype=np.uint8)
    PILImage.fromarray(pixels).save(out, format="JPEG", quality=90)
    return out.getvalue()


@pytest.fixture(scope="module")
def world(tmp_path_factory, lerobot_cache, s3_server):
    folder = tmp_path_factory.mktemp("readme")
    written = lerobot_datasets.write_v21(folder / "path" / "to" / "lerobot_dataset", [45, 30],
                                         [FRONT], fps=30, codec="h264", size=(96, 128),
                                         cache_dir=lerobot_cache)
    shutil.copytree(written.root, folder / "hf" / "lerobot" / "pusht")
    os.makedirs(folder / "episode_000042")
    encode(str(folder / "episode_000042" / "front.mp4"), 160, 120, 6, X264 + ["-g", "30"])
    encode(str(folder / "clip.mp4"), 64, 48, 1, X264)
    (folder / "photo.jpg").write_bytes(jpeg(0))
    s3_server.create_bucket("bucket")
    s3_server.upload_tree(written.root, "bucket", "prefix/my_dataset")
    for k in range(4):
        data = io.BytesIO()
        with tarfile.open(fileobj=data, mode="w") as tar:
            for i in range(3):
                for field, value in (("jpg", jpeg(10 * k + i)), ("txt", b"a caption"),
                                     ("cls", str(i).encode())):
                    info = tarfile.TarInfo(f"s{k}{i:03d}.{field}")
                    info.size = len(value)
                    tar.addfile(info, io.BytesIO(value))
        s3_server.put("bucket", f"train-{k:06d}.tar", data.getvalue())
    return folder


def test_every_python_block_of_the_readme_runs_as_written(world, s3_server, monkeypatch,
                                                          tmp_path):
    monkeypatch.chdir(world)
    monkeypatch.setenv("HF_LEROBOT_HOME", str(world / "hf"))
    monkeypatch.setenv("STOKER_CACHE_DIR", str(tmp_path / "cache"))
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    forwarded = []
    namespace = {
        # What the README's blocks take from the user's script.
        "repo_id": "lerobot/pusht",
        "root": None,
        "delta": {FRONT: [-1 / 30, 0.0], "action": [0.0, 1 / 30]},
        "cfg": types.SimpleNamespace(batch_size=4, num_workers=2),
        "policy": types.SimpleNamespace(forward=forwarded.append),
        "device": "cpu",
        "train_step": lambda batch: None,
        "epochs": 1,
    }
    found = blocks()
    assert len(found) >= 8, "the README's python blocks were not found"
    for number, (heading, code) in enumerate(found):
        code = code.replace(EXAMPLE_ENDPOINT, s3_server.endpoint)
        if not torch.cuda.is_available():
            code = code.replace('device="cuda"', 'device="cpu"')
        try:
            exec(compile(code, f"README.md block {number} ({heading})", "exec"), namespace)
        except Exception as error:
            pytest.fail(f"README.md block {number} under {heading!r} raised {error!r}")
    # The LeRobot loop ran over batches holding the task strings.
    assert forwarded and all(isinstance(batch["task"], list) for batch in forwarded)
