"""Cross-checks with lerobot-lancedb itself (PyPI ``lerobot-lancedb`` 0.3.1, Python >= 3.12 with
lerobot 0.6.1; skipped where it is not importable, as in the main 3.11 test venv): its converter's
output reads in stoker exactly as the MP4 copy it came from, and its reader
(``LanceDBDataset``) gives the same tabular values and pad masks as stoker's items.

Videos are compared with the MP4 copy only: on the tests' packed files, LanceDBDataset 0.3.1
(torchcodec, approximate seeks over its sparse blob source) returns the frame after the one asked
and refuses with a FrameTimestampError (seen 2026-12 on AV1 and H.264 files starting at pts 0)."""

from pathlib import Path

import lerobot_datasets
import numpy as np
import pytest

import stoker

lerobot_lancedb = pytest.importorskip("lerobot_lancedb")
from lerobot_lancedb.convert import convert  # noqa: E402

CAMERAS = ("observation.images.top", "observation.images.wrist")
FPS = 30
DELTAS = {CAMERAS[0]: [-2 / FPS, 0.0], CAMERAS[1]: [0.0, 1 / FPS], "action": [0.0, 1 / FPS]}


def _same(a, b, key):
    a = np.asarray(a.numpy() if hasattr(a, "numpy") else a)
    b = np.asarray(b.numpy() if hasattr(b, "numpy") else b)
    np.testing.assert_array_equal(a, b, err_msg=key)


def test_the_converters_output_reads_as_its_mp4_copy(tmp_path, lerobot_cache):
    src = lerobot_datasets.write_v30(tmp_path / "src", [5, 7, 6, 4], CAMERAS, fps=FPS,
                                     codec="h264", size=(48, 64), episodes_per_file=2,
                                     cache_dir=lerobot_cache)
    convert(tmp_path / "lance", root=Path(src.root))
    spec = stoker.WindowSpec(delta_timestamps=DELTAS)
    mp4 = stoker.LeRobotDataset(src.root, spec, progress=False, output="numpy")
    copy = stoker.LeRobotDataset(str(tmp_path / "lance"), spec, progress=False, output="numpy")
    assert len(mp4) == len(copy)
    for i in range(len(mp4)):
        for key, value in mp4[i].items():
            if isinstance(value, str):
                assert copy[i][key] == value
            else:
                _same(value, copy[i][key], key)


def test_lancedb_datasets_tabular_items_equal_stokers(tmp_path, lerobot_cache):
    src = lerobot_datasets.write_v30(tmp_path / "src", [5, 7, 6], (), fps=FPS,
                                     episodes_per_file=2, cache_dir=lerobot_cache)
    convert(tmp_path / "lance", root=Path(src.root))
    deltas = {"action": [-1 / FPS, 0.0, 1 / FPS]}
    theirs = lerobot_lancedb.LanceDBDataset(root=str(tmp_path / "lance"), delta_timestamps=deltas)
    ours = stoker.LeRobotDataset(str(tmp_path / "lance"), delta_timestamps=deltas, progress=False, output="numpy")
    assert len(theirs) == len(ours)
    for i in range(len(ours)):
        a, b = theirs[i], ours[i]
        for key in ("action", "action_is_pad", "observation.state", "index", "episode_index",
                    "frame_index", "task_index", "timestamp"):
            _same(a[key], b[key], key)
        assert a["task"] == b["task"]
