"""stoker's samplers through the public Python API: coverage, equal counts, determinism,
resume, weighted frequencies, load balance, and bad input."""

import threading

import numpy as np
import pytest

import stoker


def lognormal_costs(n, sigma=1.5, seed=0):
    return np.random.default_rng(seed).lognormal(0.0, sigma, n)


def all_ranks(make, world_size):
    return [make(rank).indices() for rank in range(world_size)]


# ---- Sequential, random, distributed ---------------------------------------------------

def test_sequential_is_the_identity():
    sampler = stoker.SequentialSampler(7)
    assert len(sampler) == 7
    assert list(sampler) == list(range(7))
    assert list(sampler) == list(range(7))  # every epoch
    assert sampler.indices().dtype == np.int64


def test_random_visits_each_sample_once_per_epoch():
    for n in (1, 2, 3, 10, 1000, 4099):
        sampler = stoker.RandomSampler(n, seed=3)
        for epoch in range(3):
            ids = np.fromiter(sampler, dtype=np.int64)
            assert sorted(ids.tolist()) == list(range(n))
            assert sampler.epoch == epoch + 1  # a finished epoch moves on


def test_order_depends_on_seed_and_epoch():
    a, b, c = (stoker.RandomSampler(500, seed=s) for s in (1, 1, 2))
    np.testing.assert_array_equal(a.indices(0), b.indices(0))
    assert not np.array_equal(a.indices(0), a.indices(1))
    assert not np.array_equal(a.indices(0), c.indices(0))
    assert list(a) == a.indices(0).tolist()
    assert list(a) == a.indices(1).tolist()  # the second pass is epoch 1


def test_set_epoch_restarts_that_epoch():
    sampler = stoker.RandomSampler(100, seed=5)
    it = iter(sampler)
    [next(it) for _ in range(10)]
    sampler.set_epoch(4)
    assert list(it) == []  # a reset stops the running iterator
    assert sampler.state_dict() == {"epoch": 4, "position": 0}
    assert list(sampler) == sampler.indices(4).tolist()


@pytest.mark.parametrize("n", [1, 5, 10, 11, 13, 101])
@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("shuffle", [False, True])
def test_distributed_pads_with_equal_counts(n, world_size, shuffle):
    order = stoker.DistributedSampler(n, shuffle=shuffle, seed=9).indices()
    per_rank = -(-n // world_size)
    ranks = all_ranks(lambda r: stoker.DistributedSampler(
        n, rank=r, world_size=world_size, shuffle=shuffle, seed=9), world_size)
    for rank, ids in enumerate(ranks):
        assert len(ids) == per_rank
    counts = np.bincount(np.concatenate(ranks), minlength=n)
    assert counts.min() >= 1  # each at least once ...
    assert (counts - 1).sum() == per_rank * world_size - n  # ... exactly once but the padding
    # Padding repeats the order from its start, as torch's DistributedSampler does.
    padded = np.resize(order, per_rank * world_size)
    for rank, ids in enumerate(ranks):
        np.testing.assert_array_equal(ids, padded[rank::world_size])


@pytest.mark.parametrize("n", [0, 1, 5, 10, 11, 103])
@pytest.mark.parametrize("world_size", [1, 2, 3, 7])
def test_distributed_drop_last_cuts_the_tail(n, world_size):
    ranks = all_ranks(lambda r: stoker.DistributedSampler(
        n, rank=r, world_size=world_size, seed=1, drop_last=True), world_size)
    assert all(len(ids) == n // world_size for ids in ranks)
    joined = np.concatenate(ranks) if ranks else np.array([], np.int64)
    assert len(np.unique(joined)) == len(joined)  # no repeats


@pytest.mark.parametrize("drop_last", [False, True])
def test_unshuffled_distributed_matches_torch(drop_last):
    torch_data = pytest.importorskip("torch.utils.data")
    for n, world_size in ((10, 3), (16, 4), (5, 8), (101, 6)):
        for rank in range(world_size):
            theirs = list(torch_data.DistributedSampler(range(n), num_replicas=world_size,
                                                        rank=rank, shuffle=False,
                                                        drop_last=drop_last))
            ours = stoker.DistributedSampler(n, rank=rank, world_size=world_size,
                                             shuffle=False, drop_last=drop_last)
            assert list(ours) == theirs


def test_empty_dataset_is_an_empty_epoch():
    for sampler in (stoker.SequentialSampler(0), stoker.RandomSampler(0),
                    stoker.DistributedSampler(0, rank=1, world_size=2),
                    stoker.LoadBalancedSampler([], batch_size=4, world_size=2)):
        assert len(sampler) == 0
        assert list(sampler) == []
        assert sampler.indices().shape == (0,)


def test_accepts_a_dataset_for_its_length():
    assert len(stoker.RandomSampler(list(range(12)))) == 12


def test_a_window_of_a_huge_epoch():
    sampler = stoker.RandomSampler(10**15, seed=1)
    assert len(sampler) == 10**15
    window = sampler.indices(start=10**14, count=1000)
    assert window.shape == (1000,) and len(np.unique(window)) == 1000
    assert ((window >= 0) & (window < 10**15)).all()
    np.testing.assert_array_equal(window[10:20], sampler.indices(start=10**14 + 10, count=10))
    it = iter(sampler)
    assert next(it) == sampler.indices(count=1)[0]
    with pytest.raises(ValueError):
        sampler.indices(start=10**15, count=1)


# ---- Resume and threads ----------------------------------------------------------------

def samplers():
    costs = lognormal_costs(3000, 1.0)
    return [
        lambda: stoker.SequentialSampler(3000),
        lambda: stoker.RandomSampler(3000, seed=7),
        lambda: stoker.DistributedSampler(3000, rank=2, world_size=3, seed=7),
        lambda: stoker.WeightedSampler(costs, seed=7, rank=1, world_size=2),
        lambda: stoker.LoadBalancedSampler(costs, batch_size=16, rank=1, world_size=4, seed=7),
    ]


@pytest.mark.parametrize("make", samplers())
def test_resume_from_a_mid_epoch_state(make):
    sampler = make()
    sampler.set_epoch(3)
    expected = sampler.indices(3).tolist()
    it = iter(sampler)
    first = [next(it) for _ in range(321)]
    state = sampler.state_dict()
    assert state == {"epoch": 3, "position": 321}

    restored = make()
    restored.load_state_dict(state)
    assert first + list(restored) == expected
    assert restored.state_dict() == {"epoch": 4, "position": 0}
    # The interrupted sampler itself also carries on from where it stopped.
    assert first + list(sampler) == expected


@pytest.mark.parametrize("make", samplers())
def test_threads_read_the_same_ids(make):
    sampler = make()
    expected = sampler.indices(5)
    results = [None] * 6

    def read(i):
        results[i] = sampler.indices(5)

    threads = [threading.Thread(target=read, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for got in results:
        np.testing.assert_array_equal(got, expected)


# ---- Weighted --------------------------------------------------------------------------

def test_weighted_frequencies_match_weights():
    weights = np.array([1, 2, 3, 4, 0, 10, 0.5, 0.5, 7, 2])
    draws = 200_000
    sampler = stoker.WeightedSampler(weights, num_samples=draws, seed=11)
    assert len(sampler) == draws
    counts = np.bincount(sampler.indices(), minlength=len(weights))
    assert counts[weights == 0].sum() == 0
    expected = draws * weights / weights.sum()
    keep = weights > 0
    chi2 = (((counts - expected) ** 2)[keep] / expected[keep]).sum()
    dof = keep.sum() - 1
    assert chi2 < dof + 5 * np.sqrt(2 * dof)


def test_weighted_is_deterministic_per_seed_and_epoch():
    a, b = (stoker.WeightedSampler(np.ones(50), seed=4) for _ in range(2))
    np.testing.assert_array_equal(a.indices(0), b.indices(0))
    assert not np.array_equal(a.indices(0), a.indices(1))
    assert len(stoker.WeightedSampler([1, 2], num_samples=7, world_size=2, rank=1)) == 4
    assert len(stoker.WeightedSampler([1, 2], num_samples=7, world_size=2, drop_last=True)) == 3


def test_group_weights_mix_datasets_by_ratio():
    weights = stoker.expand_group_weights([3, 1], [10, 1000])
    assert weights.shape == (1010,)
    np.testing.assert_allclose(weights[:10], 0.3)
    np.testing.assert_allclose(weights[10:], 0.001)
    np.testing.assert_array_equal(stoker.expand_group_weights([3, 1], [2, 1], mode="per_sample"),
                                  [3, 3, 1])
    ids = stoker.WeightedSampler(weights, num_samples=40_000, seed=1).indices()
    assert abs((ids < 10).mean() - 0.75) < 0.011


# ---- Load-balanced ---------------------------------------------------------------------

@pytest.mark.parametrize("world_size", [2, 4, 8])
def test_load_balancer_lowers_imbalance_with_equal_counts(world_size):
    costs = lognormal_costs(4096)
    make = lambda r: stoker.LoadBalancedSampler(costs, batch_size=8, rank=r,  # noqa: E731
                                                world_size=world_size, seed=1)
    report = make(0).imbalance()
    assert report["steps"] == -(-4096 // world_size // 8)
    before, after = report["before"], report["after"]
    assert before["mean"] > 1.3
    assert 1.0 <= after["mean"] < before["mean"]
    assert after["worst"] < before["worst"]
    assert after["total"] - 1 < 0.5 * (before["total"] - 1)
    ranks = all_ranks(make, world_size)
    assert {len(ids) for ids in ranks} == {4096 // world_size}
    assert sorted(np.concatenate(ranks).tolist()) == list(range(4096))  # each sample once
    # The report's after-imbalance is what the ranks' batches really cost.
    step_costs = np.stack([costs[ids].reshape(-1, 8).sum(axis=1) for ids in ranks])
    ratios = step_costs.max(axis=0) / step_costs.mean(axis=0)
    assert ratios.max() == pytest.approx(after["worst"])
    assert ratios.mean() == pytest.approx(after["mean"])


def test_load_balancer_pads_and_drops_like_distributed():
    costs = lognormal_costs(103)
    for drop_last in (False, True):
        ranks = all_ranks(lambda r: stoker.LoadBalancedSampler(
            costs, batch_size=4, rank=r, world_size=4, drop_last=drop_last), 4)
        per_rank = 103 // 4 if drop_last else -(-103 // 4)
        assert {len(ids) for ids in ranks} == {per_rank}
        counts = np.bincount(np.concatenate(ranks), minlength=103)
        if drop_last:
            assert counts.max() == 1
        else:
            assert counts.min() == 1 and (counts - 1).sum() == per_rank * 4 - 103


# ---- Bad input -------------------------------------------------------------------------

@pytest.mark.parametrize("make", [
    lambda: stoker.DistributedSampler(10, world_size=0),
    lambda: stoker.DistributedSampler(10, world_size=-1),
    lambda: stoker.DistributedSampler(10, rank=2, world_size=2),
    lambda: stoker.DistributedSampler(10, rank=-1, world_size=2),
    lambda: stoker.DistributedSampler(-1),
    lambda: stoker.DistributedSampler(10, shuffle="yes"),
    lambda: stoker.RandomSampler(10, seed=-1),
    lambda: stoker.RandomSampler(10, seed=2**64),
    lambda: stoker.RandomSampler(2.5),
    lambda: stoker.WeightedSampler([]),
    lambda: stoker.WeightedSampler([0, 0, 0]),
    lambda: stoker.WeightedSampler([1, -1]),
    lambda: stoker.WeightedSampler([1, np.nan]),
    lambda: stoker.WeightedSampler([1, np.inf]),
    lambda: stoker.WeightedSampler([[1, 2]]),
    lambda: stoker.WeightedSampler(["a"]),
    lambda: stoker.WeightedSampler([1, 2], num_samples=-1),
    lambda: stoker.WeightedSampler([1, 2], rank=1),
    lambda: stoker.LoadBalancedSampler([1, -2], batch_size=2),
    lambda: stoker.LoadBalancedSampler([1, np.nan], batch_size=2),
    lambda: stoker.LoadBalancedSampler([1, 2], batch_size=0),
    lambda: stoker.LoadBalancedSampler([1, 2], batch_size=2, world_size=0),
    lambda: stoker.LoadBalancedSampler([1, 2], batch_size=2, rank=5, world_size=2),
    lambda: stoker.expand_group_weights([1, 2], [1]),
    lambda: stoker.expand_group_weights([1, 2], [0, 1]),
    lambda: stoker.expand_group_weights([1], [-1]),
    lambda: stoker.expand_group_weights([1], [1], mode="mean"),
])
def test_bad_arguments_raise_value_error(make):
    with pytest.raises(ValueError):
        make()


def test_bad_states_raise_value_error():
    sampler = stoker.RandomSampler(10)
    for state in ({"epoch": 0}, {"epoch": -1, "position": 0}, {"epoch": 0, "position": 11},
                  {"epoch": 2**32, "position": 0}, {"epoch": 0.5, "position": 0}, [0, 0]):
        with pytest.raises(ValueError):
            sampler.load_state_dict(state)
    with pytest.raises(ValueError):
        sampler.set_epoch(-1)
    with pytest.raises(ValueError):
        sampler.indices(2**32)
    assert sampler.state_dict() == {"epoch": 0, "position": 0}


def test_core_rejects_what_the_wrapper_would():
    # The C++ checks stand behind the wrapper's: a direct call still gets ValueError.
    with pytest.raises(ValueError):
        stoker._core.DistributedSampler(10, rank=3, world_size=2)
    with pytest.raises(ValueError):
        stoker._core.WeightedSampler(np.zeros(3))
    with pytest.raises(ValueError):
        stoker._core.LoadBalancedSampler(np.array([-1.0]))
    with pytest.raises(ValueError):
        stoker.RandomSampler(10)._core.fill(0, 5, 6)
