"""stoker.Loader under torch.distributed: 2 and 3 processes (gloo on CPU, spawned), each with its
own Loader taking rank and world size from torch.distributed. Every rank gets the same number
of steps; an epoch's union covers every sample once plus the documented padding (the first
samples of the order repeated up to world_size * ceil(n / world_size)); balance=True keeps each
step's decode work within the imbalance its sampler reports; a checkpoint taken on every rank
continues exactly in a fresh set of processes."""

import json
import os
import socket

import lerobot_datasets
import numpy as np
import pytest

import stoker

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

BATCH = 4
LENGTHS = [5, 7, 6, 4, 9]  # 31 samples: no world size of 2 or 3 divides them


@pytest.fixture(scope="module")
def dataset_root(tmp_path_factory, lerobot_cache):
    written = lerobot_datasets.write_v30(
        tmp_path_factory.mktemp("distributed") / "ds", LENGTHS, ("observation.images.top",),
        fps=30, episodes_per_file=2, cache_dir=lerobot_cache)
    stoker.LeRobotDataset(written.root, progress=False, output="numpy")  # builds the index once
    return written.root


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def open_dataset(root):
    spec = stoker.WindowSpec(delta_timestamps={"observation.images.top": [-1 / 30, 0.0]},
                             size=(32, 32))
    return stoker.LeRobotDataset(root, spec, progress=False, output="numpy")


def indices(batches):
    return [[int(i) for i in b["index"]] for b in batches]


def _rank(rank, world, port, root, phase, out):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    try:
        ds = open_dataset(root)
        result = {}
        if phase == "run":
            loader = stoker.Loader(ds, batch_size=BATCH, seed=3, threads=1, output="numpy")
            assert (loader.rank, loader.world_size) == (rank, world)
            result["epoch"] = indices(loader)
            balanced = stoker.Loader(ds, batch_size=BATCH, seed=3, threads=1, output="numpy",
                                     balance=True)
            result["balanced"] = indices(balanced)
            result["imbalance"] = balanced.sampler.imbalance(0)
            # A checkpoint after 2 steps, and what an uninterrupted run delivers after it.
            reference = indices(stoker.Loader(ds, batch_size=BATCH, seed=3, threads=1,
                                              output="numpy"))
            loader = stoker.Loader(ds, batch_size=BATCH, seed=3, threads=1, output="numpy")
            iterator = iter(loader)
            for _ in range(2):
                next(iterator)
            iterator.close()
            result["state"] = loader.state_dict()
            loader.set_epoch(1)
            result["rest"] = reference[2:] + indices(loader)[:1]
        else:
            with open(os.path.join(out, f"run-{world}.json")) as f:
                saved = json.load(f)[rank]
            loader = stoker.Loader(ds, batch_size=BATCH, seed=3, threads=1, output="numpy")
            loader.load_state_dict(saved["state"])
            resumed = indices(loader)
            resumed += indices(loader)[:1]  # the next epoch follows
            result["resumed"] = resumed
        gathered = [None] * world
        dist.all_gather_object(gathered, result)
        if rank == 0:
            with open(os.path.join(out, f"{phase}-{world}.json"), "w") as f:
                json.dump(gathered, f)
    finally:
        dist.destroy_process_group()


def spawn(world, root, phase, out):
    mp.spawn(_rank, args=(world, free_port(), root, phase, out), nprocs=world, join=True)
    with open(os.path.join(out, f"{phase}-{world}.json")) as f:
        return json.load(f)


@pytest.mark.parametrize("world", [2, 3])
def test_ranks_split_an_epoch_balance_it_and_resume_it(world, dataset_root, tmp_path):
    out = str(tmp_path)
    ranks = spawn(world, dataset_root, "run", out)
    n = sum(LENGTHS)
    per_rank = -(-n // world)

    # The same number of steps everywhere, the same batch sizes step by step.
    steps = [[len(b) for b in r["epoch"]] for r in ranks]
    assert all(s == steps[0] for s in steps) and sum(steps[0]) == per_rank
    # Every sample once, plus world * ceil(n / world) - n repeats (the padding).
    seen = np.bincount(np.concatenate([np.concatenate(r["epoch"]) for r in ranks]), minlength=n)
    assert (seen >= 1).all() and seen.sum() - n == world * per_rank - n
    assert (seen > 1).sum() == world * per_rank - n

    # balance=True: same sample multiset per step, each step's cost spread within the reported
    # imbalance, and no worse than the plain split.
    costs = open_dataset(dataset_root).sample_costs()
    balanced = [r["balanced"] for r in ranks]
    assert [[len(b) for b in r] for r in balanced] == [steps[0]] * world
    step_costs = np.array([[costs[b].sum() for b in r] for r in balanced])  # ranks x steps
    worst = (step_costs.max(axis=0) / step_costs.mean(axis=0)).max()
    report = ranks[0]["imbalance"]
    assert all(r["imbalance"] == report for r in ranks)
    assert worst <= report["after"]["worst"] + 1e-9
    assert report["after"]["total"] <= report["before"]["total"] + 1e-9
    plain = np.array([[costs[b].sum() for b in r["epoch"]] for r in ranks])
    assert step_costs.max(axis=0).sum() <= plain.max(axis=0).sum() + 1e-9

    # A checkpoint taken on every rank, loaded by fresh processes, continues exactly.
    resumed = spawn(world, dataset_root, "resume", out)
    for rank in range(world):
        assert resumed[rank]["resumed"] == ranks[rank]["rest"], rank


# ---- Data-parallel groups: a 2 x 2 (tensor x data) grid --------------------------------------


def _grid_rank(rank, world, port, root, out):
    """Ranks 2d and 2d + 1 form tensor-parallel group d (adjacent, as Megatron lays them out);
    the data-parallel groups are {0, 2} and {1, 3}."""
    import logging

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    try:
        data_groups = [dist.new_group([0, 2]), dist.new_group([1, 3])]
        data_group = data_groups[rank % 2]
        ds = open_dataset(root)
        loader = stoker.Loader(ds, batch_size=BATCH, seed=5, threads=1, output="numpy",
                               process_group=data_group)
        batches = list(loader)
        result = {
            "partition": [loader.rank, loader.world_size],
            "epoch": indices(batches),
            "frames": [float(b["observation.images.top"].sum()) for b in batches],
        }
        try:
            stoker.Loader(ds, batch_size=BATCH, process_group=data_group, world_size=4)
        except stoker.InvalidArgumentError as e:
            result["mismatch"] = str(e)
        # No group given, in a world said to span two nodes: the first batch says what it used.
        os.environ["LOCAL_WORLD_SIZE"] = "2"
        records = []
        handler = logging.Handler()
        handler.emit = records.append
        logging.getLogger("stoker.loader").addHandler(handler)
        guessed = stoker.Loader(ds, batch_size=BATCH, seed=5, threads=1, output="numpy")
        result["guessed"] = [guessed.rank, guessed.world_size]
        iterator = iter(guessed)
        next(iterator)
        next(iterator)
        iterator.close()
        result["logged"] = [r.getMessage() for r in records]
        gathered = [None] * world
        dist.all_gather_object(gathered, result)
        if rank == 0:
            with open(os.path.join(out, "grid.json"), "w") as f:
                json.dump(gathered, f)
    finally:
        dist.destroy_process_group()


def test_the_ranks_of_a_tensor_group_read_the_same_batches(dataset_root, tmp_path):
    mp.spawn(_grid_rank, args=(4, free_port(), dataset_root, str(tmp_path)), nprocs=4, join=True)
    with open(tmp_path / "grid.json") as f:
        ranks = json.load(f)
    # Global rank r's data-parallel rank is its place in {0, 2} or {1, 3}: r // 2.
    assert [r["partition"] for r in ranks] == [[0, 2], [0, 2], [1, 2], [1, 2]]
    assert ranks[0]["epoch"] == ranks[1]["epoch"] and ranks[0]["frames"] == ranks[1]["frames"]
    assert ranks[2]["epoch"] == ranks[3]["epoch"] and ranks[2]["frames"] == ranks[3]["frames"]
    n = sum(LENGTHS)
    per_rank = -(-n // 2)
    seen = np.bincount(np.concatenate(ranks[0]["epoch"] + ranks[2]["epoch"]), minlength=n)
    assert (seen >= 1).all() and seen.sum() == 2 * per_rank  # every sample, plus the padding
    assert (seen > 1).sum() == 2 * per_rank - n
    for rank, r in enumerate(ranks):
        assert "world_size=4, but this process's world_size in process_group is 2" in r["mismatch"]
        assert r["guessed"] == [rank, 4]
        assert len(r["logged"]) == 1, r["logged"]  # once, with the first batch
        assert f"data-parallel rank {rank} of 4" in r["logged"][0]
        assert "process_group=" in r["logged"][0]


def test_a_process_group_needs_torch_distributed(dataset_root):
    assert not dist.is_initialized()
    with pytest.raises(stoker.InvalidArgumentError, match="needs torch.distributed initialized"):
        stoker.Loader(open_dataset(dataset_root), batch_size=BATCH, process_group=object())
