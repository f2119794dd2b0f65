"""Elastic resume: a loader state saved by W ranks loads into W' ranks. The rest of the saved
epoch is dealt to the new ranks, each sample once (plus the padding equal batches need), and
the next epochs are those of a W'-rank run — for every order: shuffled, sequential,
load-balanced, a sampler over some episodes, weighted draws, a mix's draws, and a shard stream
with its shuffle buffers. Refused, naming the field, where it cannot be honoured."""

import io
import os
import tarfile
from collections import Counter

import numpy as np
import pytest

import stoker
from stoker import DatasetError, InvalidArgumentError
from stoker.datasets.lerobot.dataset import LeRobotDataset, WindowSpec


@pytest.fixture
def episodes(lerobot_v21, tmp_path, monkeypatch):
    """make(**loader_kwargs) -> rank loaders over the 18-sample v2.1 dataset, one frame of the
    top camera, numpy batches."""
    monkeypatch.setenv("STOKER_CACHE_DIR", str(tmp_path / "cache"))
    top = lerobot_v21.cameras[0]
    dataset = LeRobotDataset(
        lerobot_v21.root, WindowSpec(delta_timestamps={top: [0.0]}), progress=False, output="numpy"
    )

    def make(rank, world_size, **kwargs):
        kwargs = {"batch_size": 2, "threads": 1, "output": "numpy", "seed": 3, **kwargs}
        if callable(kwargs.get("sampler")):
            kwargs["sampler"] = kwargs["sampler"](dataset, rank, world_size)
        return stoker.Loader(dataset, rank=rank, world_size=world_size, **kwargs)

    return make


def take(loader, batches, key="index"):
    """The sample ids of the next ``batches`` batches (all that are left: None)."""
    ids = []
    for n, batch in enumerate(loader):
        ids += [int(i) for i in np.asarray(batch[key]).reshape(-1)]
        if batches is not None and n + 1 == batches:
            break
    return ids


ORDERS = {
    "shuffled": {},
    "sequential": {"shuffle": False},
    "balanced": {"balance": True},
    "some_episodes": {
        "sampler": lambda ds, rank, world: stoker.EpisodeAwareSampler(
            ds, episode_indices_to_use=[0, 2], drop_n_last_frames=1, shuffle=True, seed=3,
            rank=rank, world_size=world
        )
    },
}


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("new_world", [2, 4])
def test_a_state_saved_on_three_ranks_resumes_on_another_world_size(episodes, order, new_world):
    kwargs = ORDERS[order]
    saving = [episodes(rank, 3, **kwargs) for rank in range(3)]
    every = sorted(set(saving[0].epoch_order(0)) | set(saving[1].epoch_order(0))
                   | set(saving[2].epoch_order(0)))
    delivered = []
    for loader in saving:
        delivered += take(loader, 1)
    state = saving[1].state_dict()  # any rank's: they stand at the same batch
    resumed = [episodes(rank, new_world, threads=2, **kwargs) for rank in range(new_world)]
    counts = set()
    for loader in resumed:
        loader.load_state_dict(state)
        counts.add(len(loader))
        delivered += take(loader, None)
    assert len(counts) == 1, "every new rank takes as many batches"
    seen = Counter(delivered)
    assert sorted(seen) == every, "each sample of the epoch is delivered"
    assert sum(seen.values()) - len(every) < new_world, "only padding repeats a sample"
    # The next epoch is a plain new_world-rank run's.
    for rank, loader in enumerate(resumed):
        assert loader.epoch == 1
        plain = episodes(rank, new_world, **kwargs)
        plain.set_epoch(1)
        assert take(loader, None) == take(plain, None)


def test_a_resumed_epoch_saves_and_resumes_exactly_and_elastically_again(episodes):
    saving = [episodes(rank, 3) for rank in range(3)]
    delivered = []
    for loader in saving:
        delivered += take(loader, 1)
    middle = [episodes(rank, 2) for rank in range(2)]
    for loader in middle:
        loader.load_state_dict(saving[0].state_dict())
        delivered += take(loader, 1)
    state = middle[0].state_dict()
    assert state["elastic"] == {"epoch": 0, "start": 6}
    # The same world size: exactly the batches the resumed loader gives after its first.
    again = episodes(1, 2)
    again.load_state_dict(middle[1].state_dict())
    rest = take(again, None)
    middle[1].load_state_dict(middle[1].state_dict() | {"batch": 0})
    assert take(middle[1], None)[2:] == rest
    # Another world size again: every sample of the epoch once, counting all three runs.
    for rank in range(3):
        last = episodes(rank, 3)
        last.load_state_dict(state)
        delivered += take(last, None)
    assert sorted(set(delivered)) == list(range(18))
    assert len(delivered) == 18 + 1  # 8 left for 3 ranks: one padding


def test_a_state_saved_at_the_end_of_an_epoch_starts_the_next_on_the_new_ranks(episodes):
    saving = episodes(2, 3)
    saving.set_position(0, len(saving))  # where a loader that delivered epoch 0 stands
    resumed = episodes(0, 2)
    resumed.load_state_dict(saving.state_dict())
    plain = episodes(0, 2)
    plain.set_epoch(1)
    assert resumed.epoch == 1
    assert take(resumed, None) == take(plain, None)


def test_weighted_draws_resume_where_the_saving_ranks_left_the_sequence(episodes):
    def weighted(ds, rank, world):
        return stoker.WeightedSampler(np.arange(1, 19), num_samples=30, seed=4, rank=rank,
                                      world_size=world)

    one = episodes(0, 1, sampler=weighted)
    draws = [int(i) for i in one.epoch_order(0)]  # draw g of the epoch, whoever makes it
    saving = episodes(2, 3, sampler=weighted)
    take(saving, 2)  # every rank made 4 draws: draws [0, 12) are made
    for rank in range(2):
        loader = episodes(rank, 2, sampler=weighted)
        loader.load_state_dict(saving.state_dict())
        ids = [int(i) for i in loader.epoch_order(0)]
        assert ids == [draws[12 + rank + 2 * p] for p in range(9)]
        assert take(loader, None) == ids


def write_shards(folder, counts):
    """Tar shards of ``counts[k]`` samples each, every sample's caption its global number."""
    urls, number = [], 0
    for k, count in enumerate(counts):
        path = os.path.join(folder, f"part-{k}.tar")
        with tarfile.open(path, "w") as tar:
            for _ in range(count):
                data = f"{number}".encode()
                info = tarfile.TarInfo(f"s{number:05d}.txt")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
                number += 1
        urls.append(path)
    return urls, number


def test_a_shard_stream_resumes_on_another_world_size_with_its_buffers_samples(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("STOKER_CACHE_DIR", str(tmp_path / "cache"))
    urls, n = write_shards(str(tmp_path), [23, 17, 31, 12, 20, 25])
    dataset = stoker.ShardDataset(urls, {"caption": stoker.Text()})

    def make(rank, world, **kwargs):
        return stoker.Loader(dataset, batch_size=3, rank=rank, world_size=world, threads=1,
                             output="numpy", seed=8, shuffle_buffer=10, **kwargs)

    saving = [make(rank, 3) for rank in range(3)]
    delivered = []
    for rank, loader in enumerate(saving):
        delivered += take(loader, 2 + rank, key="__index__")  # ranks stopped apart
    states = [loader.state_dict() for loader in saving]
    assert all(len(state["cursor"]["buffer"]) == 10 for state in states)
    # Ranks that stood apart are resumed from the list of their states.
    resumed = [make(rank, 2) for rank in range(2)]
    lengths = []
    for loader in resumed:
        loader.load_state_dict(states)
        lengths.append(len(loader))
        delivered += take(loader, None, key="__index__")
    assert sorted(delivered) == list(range(n)), "every sample once, the buffers' included"
    assert abs(lengths[0] - lengths[1]) <= 1
    for rank, loader in enumerate(resumed):
        plain = make(rank, 2)
        plain.set_epoch(1)
        assert take(loader, None, key="__index__") == take(plain, None, key="__index__")


def test_a_mix_resumes_on_another_world_size_continuing_its_draws(lerobot_v21, tmp_path,
                                                                   monkeypatch):
    monkeypatch.setenv("STOKER_CACHE_DIR", str(tmp_path / "cache"))
    top = lerobot_v21.cameras[0]
    urls, _ = write_shards(str(tmp_path), [15])
    mix = stoker.MultiDataset([
        LeRobotDataset(lerobot_v21.root, WindowSpec(delta_timestamps={top: [0.0]}),
                       progress=False, output="numpy"),
        stoker.ShardDataset(urls, {"caption": stoker.Text()}),
    ], weights=[1, 2])

    def make(rank, world):
        return stoker.Loader(mix, batch_size=2, rank=rank, world_size=world, threads=1,
                             output="numpy", seed=5)

    draws = [int(i) for i in make(0, 1).epoch_order(0)]
    saving = make(0, 2)
    take(saving, 3, key="dataset_index")  # draws [0, 12) made by the two ranks
    for rank in range(3):
        loader = make(rank, 3)
        loader.load_state_dict(saving.state_dict())
        # 21 draws left for 3 ranks: rank r makes draws 12 + r, 15 + r, ...
        assert [int(i) for i in loader.epoch_order(0)] == [draws[12 + rank + 3 * p]
                                                            for p in range(7)]
        assert len(take(loader, None, key="dataset_index")) == 7


def test_what_cannot_be_resumed_elastically_is_refused_naming_the_field(episodes):
    saving = [episodes(rank, 3) for rank in range(3)]
    take(saving[0], 1)
    state = saving[0].state_dict()
    with pytest.raises(InvalidArgumentError, match="seed=3, this loader has seed=4"):
        episodes(0, 2, seed=4).load_state_dict(state)
    with pytest.raises(InvalidArgumentError, match="batch_size=2, this loader has batch_size=3"):
        episodes(0, 2, batch_size=3).load_state_dict(state)
    with pytest.raises(InvalidArgumentError, match="at batches \\[0, 1\\]"):
        episodes(0, 2).load_state_dict([s.state_dict() for s in saving])
    with pytest.raises(InvalidArgumentError, match="every rank's state once; got ranks \\[0, 0"):
        episodes(0, 2).load_state_dict([state, state, state])
    with pytest.raises(InvalidArgumentError, match="not an elastic resume"):
        episodes(0, 2).load_state_dict({**state, "elastic": {"epoch": 0}})


def test_a_changed_shard_set_is_refused_on_elastic_resume(tmp_path, monkeypatch):
    monkeypatch.setenv("STOKER_CACHE_DIR", str(tmp_path / "cache"))
    urls, _ = write_shards(str(tmp_path), [10, 12, 9])
    dataset = stoker.ShardDataset(urls, {"caption": stoker.Text()})
    loader = stoker.Loader(dataset, batch_size=2, rank=0, world_size=3, threads=1,
                           output="numpy")
    take(loader, 1, key="__index__")
    state = loader.state_dict()
    state["cursor"] = {**state["cursor"], "sample_in_shard": 99}
    with pytest.raises(DatasetError, match="rank 0 .* the shards changed"):
        stoker.Loader(dataset, batch_size=2, rank=0, world_size=2, threads=1,
                      output="numpy").load_state_dict(state)
