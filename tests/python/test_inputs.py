"""Bad inputs get stoker's own errors at the call, naming what is wrong: paths with a NUL,
offsets that are not finite or overflow, states and seeds that are not ones. Offsets far
outside an episode are clamped and padded, never wrapped."""

import numpy as np
import pytest

import stoker
import stoker.writers.etl
from stoker import (
    DistributedSampler,
    InvalidArgumentError,
    LoadBalancedSampler,
    Loader,
    RandomSampler,
    VideoReader,
    WeightedSampler,
)
from stoker.datasets.lerobot.dataset import LeRobotDataset, WindowSpec
from stoker.datasets.lerobot.index import EpisodeIndex, load_index

INT64_MAX, INT64_MIN = 2**63 - 1, -(2**63)


def test_a_path_holding_a_nul_is_refused_naming_it(lerobot_v21, tmp_path):
    video = lerobot_v21.video_paths[lerobot_v21.cameras[0]][0]
    index = load_index(lerobot_v21.root, progress=False).path
    cases = [
        (lambda: VideoReader(video + "\0.mp4"), "video path"),
        (lambda: LeRobotDataset(lerobot_v21.root + "\0x", progress=False, output="numpy"), "dataset folder"),
        (lambda: load_index(lerobot_v21.root + "\0x", progress=False), "dataset folder"),
        (lambda: load_index(lerobot_v21.root, cache_dir=str(tmp_path) + "\0"), "cache_dir"),
        (lambda: EpisodeIndex.open(index + "\0"), "index file"),
        (lambda: stoker.writers.etl.materialize(lerobot_v21.root, str(tmp_path) + "\0out",
                                        size=(32, 32)), "destination folder"),
    ]
    for call, what in cases:
        with pytest.raises(InvalidArgumentError, match=f"{what} '.*\\\\x00.*' holds a NUL") as e:
            call()
        assert isinstance(e.value, ValueError)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_offsets_in_seconds_that_are_not_finite_are_refused_naming_the_key(bad):
    with pytest.raises(InvalidArgumentError,
                       match=f"delta_timestamps\\['action'\\] holds {bad}: offsets in seconds "
                             "must be finite"):
        WindowSpec(delta_timestamps={"observation.state": [0.0], "action": [0.0, bad]})
    with pytest.raises(InvalidArgumentError, match="delta_timestamps\\['past'\\] holds"):
        WindowSpec(delta_timestamps={"past": ("action", [bad])})


def test_offsets_that_are_not_numbers_or_overflow_int64_are_refused_naming_the_key():
    for kwargs, match in [
        ({"delta_timestamps": {"action": "0.1"}}, "delta_timestamps\\['action'\\] must be a list"),
        ({"delta_timestamps": {"action": [[0.0], [0.1]]}}, "must be a list"),
        ({"delta_timestamps": {"action": ["a"]}}, "must be numbers of seconds"),
        ({"delta_indices": {"action": [0.5]}}, "delta_indices\\['action'\\] must be integers"),
        ({"delta_indices": {"action": [2**63]}}, "holds 9223372036854775808, outside int64"),
        ({"delta_indices": {"action": [INT64_MIN - 1]}}, "outside int64"),
        ({"delta_indices": {"action": [0, None]}}, "must be integers .rows., got None"),
        ({"delta_indices": {3: [0]}}, "window keys are strings"),
    ]:
        with pytest.raises(InvalidArgumentError, match=match):
            WindowSpec(**kwargs)


def test_offsets_of_int64s_extremes_are_clamped_to_the_episode_and_padded(lerobot_v21):
    top = lerobot_v21.cameras[0]
    ds = LeRobotDataset(lerobot_v21.root, WindowSpec(
        delta_indices={"action": [INT64_MIN, -1, 0, 1, INT64_MAX], top: [INT64_MAX, 0]},
        delta_timestamps={"far": ("observation.state", [-1e15, 1e15])}), progress=False, output="numpy")
    first, last = 5, 11  # episode 1 holds rows 5 .. 11
    for row in (5, 8, 11):
        item = ds[row]
        want = np.clip(row + np.array([-(2**40), -1, 0, 1, 2**40]), first, last) - first
        np.testing.assert_array_equal(item["action"],
                                      [-(1000 + f + np.arange(6) / 8) for f in want])
        pad = [True, row == first, False, row == last, True]
        assert item["action_is_pad"].tolist() == pad
        assert item[f"{top}_is_pad"].tolist() == [True, False]
        np.testing.assert_array_equal(item[top][0], ds[last][top][1])  # the last frame
        assert item["far_is_pad"].tolist() == [True, True]

    loader = Loader(ds, batch_size=6, shuffle=False, threads=2, output="numpy")
    for batch in loader:
        for j, row in enumerate(batch["index"]):
            item = ds[int(row)]
            for key in ("action", "action_is_pad", top, f"{top}_is_pad", "far", "far_is_pad"):
                np.testing.assert_array_equal(batch[key][j], item[key], err_msg=key)


def test_bad_loader_states_are_refused_naming_the_field(lerobot_v21):
    ds = LeRobotDataset(lerobot_v21.root, progress=False, output="numpy")
    loader = Loader(ds, batch_size=4, seed=3, threads=1)
    good = loader.state_dict()
    cases = [
        ({"epoch": -1}, "state\\['epoch'\\] must be in \\[0, 4294967295\\], got -1"),
        ({"epoch": 2**40}, "state\\['epoch'\\] must be in \\[0, 4294967295\\]"),
        ({"epoch": 1.5}, "state\\['epoch'\\] must be an integer, got 1.5"),
        ({"epoch": "1"}, "state\\['epoch'\\] must be an integer, got '1'"),
        ({"batch": -1}, "state\\['batch'\\] must be in \\[0, 5\\], got -1"),
        ({"batch": 6}, "state\\['batch'\\] must be in \\[0, 5\\], got 6"),
        ({"batch": None}, "state\\['batch'\\] must be an integer, got None"),
        ({"version": 99}, "state\\['version'\\] is 99"),
        ({"seed": 4}, "saved with seed=4"),
    ]
    for change, match in cases:
        with pytest.raises(InvalidArgumentError, match=match):
            loader.load_state_dict(dict(good, **change))
    for missing in ("epoch", "batch", "seed", "version"):
        state = {k: v for k, v in good.items() if k != missing}
        with pytest.raises(InvalidArgumentError, match=f"the loader state lacks '{missing}'"):
            loader.load_state_dict(state)
    with pytest.raises(InvalidArgumentError, match="a loader state is a dict, got tuple in the list"):
        loader.load_state_dict([("epoch", 0)])  # a list holds every rank's state
    with pytest.raises(InvalidArgumentError, match="Loader.state_dict.. returns .or a list"):
        loader.load_state_dict("state")
    loader.load_state_dict(dict(good, epoch=2**32 - 1, batch=5))  # the largest, and valid
    assert loader.state_dict()["epoch"] == 2**32 - 1
    with pytest.raises(InvalidArgumentError, match="epoch must be in"):
        loader.set_epoch(2**32)


def test_bad_sampler_states_and_seeds_are_refused_naming_the_field():
    sampler = RandomSampler(10, seed=1)
    for state, match in [
        ({"epoch": -1, "position": 0}, "state\\['epoch'\\] must be in"),
        ({"epoch": 2**32, "position": 0}, "state\\['epoch'\\] must be in"),
        ({"epoch": 0, "position": 11}, "state\\['position'\\] must be in \\[0, 10\\]"),
        ({"epoch": 0, "position": "3"}, "state\\['position'\\] must be an integer"),
        ({"epoch": 0}, "keys 'epoch' and 'position'"),
        ("epoch=0", "keys 'epoch' and 'position'"),
    ]:
        with pytest.raises(InvalidArgumentError, match=match):
            sampler.load_state_dict(state)

    makers = [
        lambda seed: RandomSampler(10, seed=seed),
        lambda seed: DistributedSampler(10, seed=seed),
        lambda seed: WeightedSampler(np.ones(10), seed=seed),
        lambda seed: LoadBalancedSampler(np.ones(10), batch_size=2, seed=seed),
    ]
    for make in makers:
        for seed, match in [(-1, "seed must be in \\[0, 18446744073709551615\\], got -1"),
                            (2**64, "seed must be in"),
                            (1.0, "seed must be an integer, got 1.0"),
                            ("7", "seed must be an integer, got '7'"),
                            (True, "seed must be an integer, got True")]:
            with pytest.raises(InvalidArgumentError, match=match):
                make(seed)
        make(2**64 - 1)  # the largest seed is one


def test_bad_loader_seeds_are_refused_naming_the_field(lerobot_v21):
    ds = LeRobotDataset(lerobot_v21.root, progress=False, output="numpy")
    for seed in (-1, 2**64, 0.5, "1", None):
        with pytest.raises(InvalidArgumentError, match="seed must be"):
            Loader(ds, batch_size=2, seed=seed)
    assert Loader(ds, batch_size=2, seed=2**64 - 1, threads=1).seed == 2**64 - 1


def test_a_frame_size_is_height_width_or_a_width_x_height_string_everywhere():
    """One rule, in the API as on the command line: a pair is (height, width), as arrays are
    shaped; a string is 'WIDTHxHEIGHT', as FFmpeg and `stoker etl --size` write it."""
    from stoker.writers.etl import _parse_size

    sizes = {
        "WindowSpec": lambda size: stoker.WindowSpec(size=size).size,
        "Image": lambda size: stoker.Image(size=size).size,
        "Clip": lambda size: stoker.Clip(size=size).size,
        "resize": lambda size: stoker.Transforms(resize=size).resize,
        "center_crop": lambda size: stoker.Transforms(center_crop=size).center_crop,
        "random_resized_crop": lambda size: stoker.Transforms(
            random_resized_crop=size
        ).random_resized_crop,
        "etl": _parse_size,
    }
    for where, size_of in sizes.items():
        assert size_of((48, 64)) == (48, 64), where
        assert size_of("64x48") == (48, 64), where
        assert size_of("64X48") == (48, 64), where
        for bad in ("64", "64x48x3", "axb", (48,), 48, (0, 64), "-64x48"):
            with pytest.raises(ValueError, match="'WIDTHxHEIGHT'.*got"):
                size_of(bad)
