"""stoker.LeRobotDataset: windows of frames and rows, pad masks and output shapes, on real v2.1
and v3.0 datasets written by the tests (frames and rows encode their (episode, frame))."""

import lerobot_datasets
import numpy as np
import pytest

import stoker
from stoker.datasets.lerobot.dataset import LeRobotDataset, WindowSpec

FPS = 30


def spec_for(cameras, **kwargs):
    top, wrist = cameras
    return WindowSpec(delta_timestamps={
        top: [-2 / FPS, 0.0],
        "wrist_past": (wrist, [-3 / FPS, -1 / FPS]),
        "wrist_future": (wrist, [1 / FPS, 3 / FPS]),
        "observation.state": [-1 / FPS, 0.0],
        "action": [0.0, 1 / FPS, 2 / FPS],
    }, **kwargs)


def expected(lengths, i, offsets):
    """(episode, clamped frames, pad) of sample i at row offsets, as LeRobot clamps."""
    starts = np.concatenate([[0], np.cumsum(lengths)])
    episode = int(np.searchsorted(starts, i, side="right") - 1)
    frame = i - starts[episode]
    wanted = frame + np.asarray(offsets)
    clamped = np.clip(wanted, 0, lengths[episode] - 1)
    return episode, clamped, wanted != clamped


@pytest.mark.parametrize("fixture", ["lerobot_v21", "lerobot_v30"])
def test_every_sample_window(request, fixture):
    written = request.getfixturevalue(fixture)
    top, wrist = written.cameras
    ds = LeRobotDataset(written.root, spec_for(written.cameras), progress=False, output="numpy")
    assert len(ds) == ds.num_frames == sum(written.lengths)
    assert ds.num_episodes == len(written.lengths)
    assert ds.fps == FPS and ds.cameras == (top, wrist)
    for i in range(len(ds)):
        item = ds[i]
        for key, source, offsets in [(top, top, [-2, 0]), ("wrist_past", wrist, [-3, -1]),
                                     ("wrist_future", wrist, [1, 3])]:
            episode, frames, pad = expected(written.lengths, i, offsets)
            images = item[key]
            # float32 in [0, 1], channels first: LeRobot's default.
            assert images.dtype == np.float32 and images.shape == (2, 3, 64, 64)
            assert 0 <= images.min() and images.max() <= 1
            marks = lerobot_datasets.read_marks(images, layout="NCHW")
            np.testing.assert_array_equal(marks[0], episode, err_msg=f"{key} of sample {i}")
            np.testing.assert_array_equal(marks[1], frames, err_msg=f"{key} of sample {i}")
            np.testing.assert_array_equal(item[f"{key}_is_pad"], pad)
            assert item[f"{key}_is_pad"].dtype == np.bool_
        episode, frames, pad = expected(written.lengths, i, [-1, 0])
        np.testing.assert_array_equal(item["observation.state"],
                                      lerobot_datasets.state_values(episode, frames))
        np.testing.assert_array_equal(item["observation.state_is_pad"], pad)
        episode, frames, pad = expected(written.lengths, i, [0, 1, 2])
        np.testing.assert_array_equal(item["action"], lerobot_datasets.action_values(episode, frames))
        np.testing.assert_array_equal(item["action_is_pad"], pad)
        # Keys without offsets: the sample's own row, without a time axis, as LeRobot returns.
        assert item["index"] == i and item["episode_index"] == episode
        assert item["frame_index"] == expected(written.lengths, i, [0])[1][0]
        assert item["timestamp"] == pytest.approx(item["frame_index"] / FPS, abs=1e-6)
        assert item["task"] == written.tasks[written.episode_task[episode]]
        assert wrist not in item  # read only through its named groups


def test_plain_keys_layout_and_size(lerobot_v30):
    top, wrist = lerobot_v30.cameras
    ds = LeRobotDataset(lerobot_v30.root, WindowSpec(size=(32, 48), layout="THWC"),
                        progress=False, output="numpy")
    item = ds[7]
    assert item[top].shape == (32, 48, 3) and item[wrist].shape == (32, 48, 3)
    assert item["observation.state"].shape == (6,)
    full = LeRobotDataset(lerobot_v30.root, progress=False, output="numpy")[7]
    marks = lerobot_datasets.read_marks(full[top][None], layout="NCHW")
    assert (marks[0][0], marks[1][0]) == (1, 2)  # row 7 is frame 2 of episode 1
    assert ds[-1]["index"] == len(ds) - 1


def test_uint8_is_one_option_away_and_holds_the_same_pixels(lerobot_v30):
    top, _ = lerobot_v30.cameras
    spec = WindowSpec(delta_indices={top: [-1, 0]})
    floats = LeRobotDataset(lerobot_v30.root, spec, progress=False, output="numpy")
    bytes_ = LeRobotDataset(lerobot_v30.root, spec, image_dtype="uint8", progress=False, output="numpy")
    for i in (0, 9, len(floats) - 1):
        assert bytes_[i][top].dtype == np.uint8
        np.testing.assert_array_equal(floats[i][top],
                                      bytes_[i][top].astype(np.float32) / np.float32(255))
    with pytest.raises(ValueError, match="image_dtype"):
        LeRobotDataset(lerobot_v30.root, spec, image_dtype="int8", progress=False, output="numpy")


def test_bad_requests(lerobot_v21):
    ds = LeRobotDataset(lerobot_v21.root, progress=False, output="numpy")
    with pytest.raises(IndexError, match="out of range"):
        ds[len(ds)]
    with pytest.raises(TypeError):
        ds["0"]
    with pytest.raises(stoker.DatasetError, match="'observation.images.side'"):
        LeRobotDataset(lerobot_v21.root, WindowSpec(
            delta_timestamps={"observation.images.side": [0.0]}), progress=False, output="numpy")
    with pytest.raises(ValueError, match="not a whole number of frames"):
        LeRobotDataset(lerobot_v21.root, WindowSpec(
            delta_timestamps={"action": [0.01]}), progress=False, output="numpy")
    with pytest.raises(ValueError, match="layout"):
        WindowSpec(layout="CHW")


def test_delta_indices_and_threads(lerobot_v30):
    import threading

    top, _ = lerobot_v30.cameras
    ds = LeRobotDataset(lerobot_v30.root, WindowSpec(delta_indices={top: [-1, 0, 1]}),
                        progress=False, output="numpy")
    expected_items = [ds[i][top] for i in range(len(ds))]
    failures = []

    def work(seed):
        for i in np.random.default_rng(seed).integers(0, len(ds), 20):
            if not np.array_equal(ds[int(i)][top], expected_items[int(i)]):
                failures.append(int(i))

    threads = [threading.Thread(target=work, args=(s,)) for s in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


def test_sample_costs_feed_the_load_balancer(lerobot_v30):
    top, wrist = lerobot_v30.cameras
    narrow = LeRobotDataset(lerobot_v30.root, WindowSpec(delta_indices={top: [0]}), progress=False, output="numpy")
    wide = LeRobotDataset(lerobot_v30.root, WindowSpec(delta_indices={top: [-3, 0, 3],
                                                                      wrist: [0]}),
                          progress=False, output="numpy")
    costs = wide.sample_costs()
    assert costs.shape == (len(wide),) and costs.dtype == np.float64 and (costs > 0).all()
    assert (costs > narrow.sample_costs()).all()
    np.testing.assert_array_equal(wide.sample_costs([3, 1]), costs[[3, 1]])
    sampler = stoker.LoadBalancedSampler(costs, batch_size=2, rank=0, world_size=2, seed=0)
    assert len(sampler.indices()) == len(sampler)
    with pytest.raises(stoker.InvalidArgumentError, match="out of range"):
        wide.sample_costs([len(wide)])
