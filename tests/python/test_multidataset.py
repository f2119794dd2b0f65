"""stoker.MultiDataset: datasets with different features read as one, the keys one lacks padded
and masked, per-dataset weights, dataset_index; and the Loader over it."""

import numpy as np
import pytest

import lerobot_datasets
import stoker

torch = pytest.importorskip("torch")
FPS = 30
TOP, WRIST = "observation.images.top", "observation.images.wrist"


@pytest.fixture(scope="module")
def one_camera(tmp_path_factory, lerobot_cache):
    """A v3.0 dataset with the top camera only: 2 episodes (5, 7 frames)."""
    return lerobot_datasets.write_v30(tmp_path_factory.mktemp("multi") / "top_only", [5, 7],
                                      [TOP], fps=FPS, cache_dir=lerobot_cache)


def datasets(lerobot_v21, one_camera):
    deltas = {TOP: [-1 / FPS, 0.0], "action": [0.0, 1 / FPS]}
    both = stoker.LeRobotDataset(lerobot_v21.root, delta_timestamps=deltas, progress=False)
    top_only = stoker.LeRobotDataset(one_camera.root, delta_timestamps=deltas, progress=False)
    return both, top_only


def test_items_hold_every_key_with_masks_and_their_dataset(lerobot_v21, one_camera):
    both, top_only = datasets(lerobot_v21, one_camera)
    mix = stoker.MultiDataset([both, top_only])
    assert len(mix) == len(both) + len(top_only)
    first, last = mix[0], mix[len(both)]
    assert set(first) == set(last)
    assert first["dataset_index"] == 0 and last["dataset_index"] == 1
    # The wrist camera (no window there) is zeros in the dataset that lacks it, and masked.
    assert first[f"{WRIST}_is_pad"] == np.False_ and last[f"{WRIST}_is_pad"] == np.True_
    assert last[WRIST].shape == first[WRIST].shape and not last[WRIST].any()
    np.testing.assert_array_equal(last[TOP], top_only[0][TOP])
    np.testing.assert_array_equal(first[TOP], both[0][TOP])
    assert last["task"] == top_only[0]["task"]


def test_disagreeing_keys_are_refused_by_name(lerobot_v21, one_camera):
    both = stoker.LeRobotDataset(lerobot_v21.root, progress=False)
    small = stoker.LeRobotDataset(one_camera.root, stoker.WindowSpec(size=(32, 32)),
                                  progress=False)
    with pytest.raises(stoker.DatasetError, match="disagree on key 'observation.images.top'"):
        stoker.MultiDataset([both, small])
    with pytest.raises(stoker.InvalidArgumentError, match="one per dataset"):
        stoker.MultiDataset([both], weights=[1, 2])


def test_the_sampler_draws_each_datasets_share(lerobot_v21, one_camera):
    both, top_only = datasets(lerobot_v21, one_camera)
    mix = stoker.MultiDataset([both, top_only], weights=[1, 3])
    ids = mix.sampler(num_samples=4000, seed=1).indices()
    share = np.mean(ids >= len(both))
    assert abs(share - 0.75) < 0.03


def test_loader_batches_mix_the_datasets_by_weight_and_resume(lerobot_v21, one_camera):
    both, top_only = datasets(lerobot_v21, one_camera)
    mix = stoker.MultiDataset([both, top_only], weights=[1, 1])
    loader = stoker.Loader(mix, batch_size=6, seed=2, threads=2)
    assert len(loader) == -(-len(mix) // 6)
    epoch = list(loader)
    for batch in epoch:
        assert batch["dataset_index"].tolist() == [0, 0, 0, 1, 1, 1]
        assert tuple(batch[WRIST].shape) == (6, 3, 64, 64)
        assert batch[f"{WRIST}_is_pad"].tolist() == [False] * 3 + [True] * 3
        assert not batch[WRIST][3:].any()
        assert len(batch["task"]) == 6
        for j in range(6):  # each slot is its dataset's item
            ds = both if j < 3 else top_only
            item = ds[int(batch["index"][j])]
            np.testing.assert_array_equal(batch[TOP][j].numpy(), item[TOP])
            np.testing.assert_array_equal(batch["action"][j].numpy(), item["action"])
    loader.set_epoch(0)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    del it
    again = stoker.Loader(mix, batch_size=6, seed=2, threads=1)
    again.load_state_dict(state)
    rest = list(again)
    assert len(rest) == len(epoch) - 1
    for a, b in zip(rest, epoch[1:]):
        assert a["index"].tolist() == b["index"].tolist()
        assert a["dataset_index"].tolist() == b["dataset_index"].tolist()
    with pytest.raises(stoker.InvalidArgumentError, match="no sample per batch"):
        stoker.Loader(stoker.MultiDataset([both, top_only], weights=[1, 0.01]), batch_size=4)
    with pytest.raises(ValueError, match="do not apply"):
        stoker.Loader(mix, batch_size=4, sampler=stoker.RandomSampler(len(mix)))
