"""Parity with LeRobot's own LeRobotDataset, when the lerobot package is installed
(`make test-lerobot` installs it into a separate virtual environment, as it brings PyTorch).

Same dataset, same delta_timestamps: the same keys, shapes, rows, pad masks and frames. LeRobot
returns images as float32 in [0, 1], stoker as uint8; they must agree to within the rounding of
the two colour conversions.
"""

import os

import numpy as np
import pytest

import lerobot_datasets
import stoker

lerobot_dataset = pytest.importorskip("lerobot.datasets.lerobot_dataset")

FPS = 30
TOP = "observation.images.top"
DELTAS = {TOP: [-2 / FPS, 0.0], "observation.state": [-1 / FPS, 0.0],
          "action": [0.0, 1 / FPS, 2 / FPS]}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    # LeRobot's own packing scheme: offsets summed from the probed container durations.
    root = tmp_path_factory.mktemp("parity") / "v30"
    return lerobot_datasets.write_v30(root, [5, 7, 6, 9], [TOP], fps=FPS, episodes_per_file=2,
                                      offsets="probed")


def test_items_match_lerobot(dataset, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    theirs = lerobot_dataset.LeRobotDataset("local/parity", root=dataset.root,
                                            delta_timestamps=DELTAS, video_backend="pyav")
    ours = stoker.LeRobotDataset(dataset.root, stoker.WindowSpec(delta_timestamps=DELTAS),
                                 progress=False)
    assert len(ours) == len(theirs)
    for i in range(len(ours)):
        mine, reference = ours[i], theirs[i]
        assert set(mine) == set(reference), i
        for key, expected in reference.items():
            if key == "task":
                assert mine[key] == expected
                continue
            expected = expected.numpy()
            got = mine[key]
            assert np.shape(got) == expected.shape, (i, key)
            if key == TOP:
                assert got.dtype == np.uint8
                difference = np.abs(got / 255.0 - expected).mean()
                assert difference < 2 / 255, (i, key, difference)
                np.testing.assert_array_equal(
                    lerobot_datasets.read_marks(got, layout="NCHW"),
                    lerobot_datasets.read_marks((expected * 255).round().astype(np.uint8),
                                                layout="NCHW"))
            else:
                np.testing.assert_array_equal(got, expected.astype(got.dtype), err_msg=f"{i} {key}")


def test_loader_batches_match_lerobot_through_a_dataloader(dataset, monkeypatch):
    """stoker.Loader as a drop-in: its batches hold what torch's DataLoader collates from
    LeRobot's items for the same samples (keys, dtypes, shapes, pad masks, rows, task text)."""
    import torch

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    theirs = lerobot_dataset.LeRobotDataset("local/parity", root=dataset.root,
                                            delta_timestamps=DELTAS, video_backend="pyav")
    ours = stoker.LeRobotDataset(dataset.root, stoker.WindowSpec(delta_timestamps=DELTAS),
                                 progress=False)
    loader = stoker.Loader(ours, batch_size=4, shuffle=True, seed=3, threads=2)
    for batch in loader:
        rows = batch["index"].tolist()
        reference = torch.utils.data.default_collate([theirs[i] for i in rows])
        assert set(batch) == set(reference)
        for key, expected in reference.items():
            got = batch[key]
            if key == "task":
                assert got == expected
                continue
            assert tuple(got.shape) == tuple(expected.shape), key
            if key == TOP:
                assert got.dtype == torch.uint8
                assert (got.float() / 255 - expected).abs().mean() < 2 / 255
            else:
                torch.testing.assert_close(got, expected.to(got.dtype), rtol=0, atol=0)
