"""_core.ShardStreamSampler, the native order of a shard dataset's epoch, against a re-statement
in numpy (from _core.deal_shards and _core.shuffle_buffer_order) of the order the Python shard
loader defined, and against what stoker.Loader over the same shards takes (epoch_order,
batches_in_epoch, the batches' ids), on shards that stoker.write_shards writes."""

import gc

import numpy as np
import pytest

import stoker
from stoker import _core

BATCH_SIZE = 7


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """About twenty shards of equal bytes holding unequal sample counts: each sample a caption
    of 50 bytes to 6 KB and a label."""
    src = tmp_path_factory.mktemp("stream-src")
    rng = np.random.default_rng(0)
    for i in range(240):
        (src / f"t{i:04d}.txt").write_text("x" * int(rng.integers(50, 6000)))
        (src / f"t{i:04d}.cls").write_text(str(i % 4))
    dst = tmp_path_factory.mktemp("stream-dst")
    report = stoker.write_shards(src, dst, shard_bytes=40_000, workers=1, progress=False)
    ds = stoker.ShardDataset(
        [str(dst / name) for name in report.shards],
        {"caption": stoker.Text("txt"), "label": stoker.Label("cls")},
        cache_dir=tmp_path_factory.mktemp("stream-cache"),
    )
    assert len(ds) == 240 and len(ds.urls) >= 8
    assert len(set(ds.shard_samples.tolist())) > 1  # equal bytes, unequal counts
    return ds


def counts_and_bytes(ds):
    return (
        np.ascontiguousarray(ds.shard_samples, np.int64),
        np.ascontiguousarray(ds.shard_bytes, np.int64),
    )


def reference_order(counts, shard_bytes, epoch, o):
    """(rank o["rank"]'s stream, its order) in ``epoch``, ``o`` being the sampler's options:
    the shards dealt by bytes, each read in turn (shard s holds ids first[s] .. first[s] +
    counts[s] - 1), through the shuffle buffer (none without shuffle), cut to the fewest of any
    rank with equal_batches, then to a multiple of batch_size with drop_last."""
    first = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    ranks = _core.deal_shards(shard_bytes, o["shuffle"], o["seed"], epoch, o["world_size"])
    lengths = [int(counts[np.asarray(shards, np.int64)].sum()) for shards in ranks]
    mine = ranks[o["rank"]]
    stream = np.zeros(0, np.int64)
    if len(mine):
        stream = np.concatenate(
            [np.arange(first[s], first[s] + counts[s], dtype=np.int64) for s in mine]
        )
    buffer = o["shuffle_buffer"] if o["shuffle"] else 0
    order = _core.shuffle_buffer_order(stream, buffer, o["seed"], epoch, o["rank"])
    if o["equal_batches"]:
        order = order[: min(lengths)]
    if o["drop_last"]:
        order = order[: len(order) - len(order) % o["batch_size"]]
    return stream, order


# (seed, shuffle, shuffle_buffer, rank, world_size, equal_batches, drop_last)
CASES = [
    (0, True, 8192, 0, 1, False, False),  # a buffer larger than the stream
    (1, True, 16, 0, 2, False, False),
    (1, True, 16, 1, 2, True, False),
    (2, True, 0, 2, 3, False, True),
    (3, True, 1, 1, 3, True, True),
    (4, False, 64, 0, 2, False, False),  # no shuffle: no buffer either
    (4, False, 64, 1, 2, True, True),
    (5, True, 50, 3, 4, True, False),
    (6, True, 33, 0, 4, False, True),
]


@pytest.mark.parametrize(
    "seed,shuffle,shuffle_buffer,rank,world_size,equal_batches,drop_last", CASES
)
def test_native_order_is_the_shard_loaders(
    dataset, seed, shuffle, shuffle_buffer, rank, world_size, equal_batches, drop_last
):
    options = dict(
        shuffle=shuffle,
        seed=seed,
        shuffle_buffer=shuffle_buffer,
        rank=rank,
        world_size=world_size,
        equal_batches=equal_batches,
        drop_last=drop_last,
        batch_size=BATCH_SIZE,
    )
    counts, shard_bytes = counts_and_bytes(dataset)
    sampler = _core.ShardStreamSampler(counts, shard_bytes, **options)
    loader_options = {k: v for k, v in options.items() if k != "batch_size"}
    loader = stoker.Loader(dataset, BATCH_SIZE, threads=1, output="numpy", **loader_options)
    try:
        assert sampler.size == sampler.epoch_size(0)
        for epoch in range(4):
            stream, order = reference_order(counts, shard_bytes, epoch, options)
            assert sampler.epoch_stream(epoch).tolist() == stream.tolist()
            assert sampler.epoch_order(epoch).tolist() == order.tolist()
            assert sampler.epoch_size(epoch) == len(order)
            assert sampler.fill(epoch, 0, len(order)).tolist() == order.tolist()
            middle = len(order) // 3
            assert sampler.fill(epoch, middle, 5).tolist() == order[middle : middle + 5].tolist()
            assert sampler.at(epoch, middle) == order[middle]
            assert loader.epoch_order(epoch).tolist() == order.tolist()
            assert loader.batches_in_epoch(epoch) == -(-len(order) // BATCH_SIZE)
            ids = [i for batch in loader for i in batch["__index__"].tolist()]
            assert ids == order.tolist()  # iterating the epoch moves on to the next
    finally:
        loader.close()


def test_ranks_and_epochs_get_different_counts_and_together_every_sample_once(dataset):
    counts, shard_bytes = counts_and_bytes(dataset)
    sizes = set()
    for epoch in range(3):
        ids = []
        for rank in range(3):
            sampler = _core.ShardStreamSampler(
                counts, shard_bytes, seed=9, shuffle_buffer=20, rank=rank, world_size=3
            )
            ids += sampler.epoch_order(epoch).tolist()
            sizes.add(sampler.epoch_size(epoch))
        assert sorted(ids) == list(range(len(dataset)))
    assert len(sizes) > 1


def test_epoch_arrays_are_read_only_views_that_outlive_the_sampler(dataset):
    counts, shard_bytes = counts_and_bytes(dataset)
    sampler = _core.ShardStreamSampler(counts, shard_bytes, seed=1, shuffle_buffer=16, world_size=2)
    order = sampler.epoch_order(2)
    stream = sampler.epoch_stream(2)
    expected = order.tolist()
    assert not order.flags.writeable and not stream.flags.writeable
    assert order.dtype == np.int64 and stream.dtype == np.int64
    del sampler
    gc.collect()
    assert order.tolist() == expected and sorted(stream.tolist()) == sorted(expected)


def test_it_is_a_sampler_wherever_one_is_taken(dataset):
    counts, shard_bytes = counts_and_bytes(dataset)
    sampler = _core.ShardStreamSampler(counts, shard_bytes, seed=3, shuffle_buffer=16)
    assert isinstance(sampler, _core.Sampler)
    ids = np.arange(len(dataset), dtype=np.int64)[::-1].copy()
    mapped = _core.MappedSampler(sampler, ids)
    assert mapped.fill(1, 0, 10).tolist() == ids[sampler.fill(1, 0, 10)].tolist()


def test_bad_arguments_and_ranges_are_named(dataset):
    counts, shard_bytes = counts_and_bytes(dataset)
    with pytest.raises(stoker.InvalidArgumentError, match="counts and"):
        _core.ShardStreamSampler(counts, shard_bytes[:-1], seed=0, shuffle_buffer=16)
    with pytest.raises(stoker.InvalidArgumentError, match="rank"):
        _core.ShardStreamSampler(counts, shard_bytes, seed=0, shuffle_buffer=16, rank=2, world_size=2)
    with pytest.raises(stoker.InvalidArgumentError, match="batch_size"):
        _core.ShardStreamSampler(
            counts, shard_bytes, seed=0, shuffle_buffer=16, drop_last=True, batch_size=0
        )
    sampler = _core.ShardStreamSampler(counts, shard_bytes, seed=0, shuffle_buffer=16, world_size=2)
    n = sampler.epoch_size(1)
    with pytest.raises(stoker.InvalidArgumentError, match=f"epoch 1's {n} positions"):
        sampler.fill(1, n - 2, 3)
