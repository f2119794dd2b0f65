"""stoker.Loader on real LeRobot datasets: batches equal the dataset's items, determinism over
thread counts, resume, ranks, transforms, bad videos, bounded memory and clean shutdown."""

import gc
import os
import time

import lerobot_datasets
import numpy as np
import pytest

import stoker
from stoker import Loader, Transforms
from stoker.datasets.lerobot.dataset import LeRobotDataset, WindowSpec

torch = pytest.importorskip("torch")
FPS = 30


def spec_for(cameras, **kwargs):
    top, wrist = cameras
    return WindowSpec(delta_timestamps={
        top: [-2 / FPS, 0.0],
        "wrist_past": (wrist, [-3 / FPS, -1 / FPS]),
        "observation.state": [-1 / FPS, 0.0],
        "action": [0.0, 1 / FPS, 2 / FPS],
    }, **kwargs)


def dataset(written, **spec):
    return LeRobotDataset(written.root, spec_for(written.cameras, **spec), progress=False, output="numpy")


def as_numpy(value):
    if isinstance(value, torch.Tensor):  # bfloat16, which numpy lacks, as its bits
        return (value.view(torch.int16) if value.dtype == torch.bfloat16 else value).numpy()
    return np.asarray(value)


def native_threads():
    return len(os.listdir("/proc/self/task"))


def wait_for_threads(count, seconds=5.0):
    deadline = time.monotonic() + seconds
    while native_threads() > count and time.monotonic() < deadline:
        time.sleep(0.01)
    return native_threads()


def epoch_arrays(loader):
    """Every batch of one epoch as {key: numpy copy} (tasks as lists)."""
    return [{k: (list(v) if k == "task" else as_numpy(v).copy()) for k, v in batch.items()}
            for batch in loader]


def same_batches(a, b):
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x.keys() != y.keys():
            return False
        for k in x:
            if k == "task":
                if x[k] != y[k]:
                    return False
            elif x[k].dtype != y[k].dtype or x[k].shape != y[k].shape or \
                    x[k].tobytes() != y[k].tobytes():
                return False
    return True


@pytest.mark.parametrize("fixture", ["lerobot_v21", "lerobot_v30"])
@pytest.mark.parametrize("output", ["torch", "numpy"])
def test_batches_are_the_datasets_items_batched(request, fixture, output):
    written = request.getfixturevalue(fixture)
    ds = dataset(written, size=(32, 48))
    loader = Loader(ds, batch_size=4, shuffle=True, seed=1, threads=2, output=output)
    assert len(loader) == -(-len(ds) // 4)
    seen = []
    for batch in loader:
        kind = torch.Tensor if output == "torch" else np.ndarray
        assert all(isinstance(v, kind) for k, v in batch.items() if k != "task")
        rows = as_numpy(batch["index"])
        seen.extend(rows.tolist())
        for j, row in enumerate(rows):
            item = ds[int(row)]
            assert set(item) == set(batch), (set(item) ^ set(batch))
            for key, value in item.items():
                if key == "task":
                    assert batch["task"][j] == value
                    continue
                got = as_numpy(batch[key])[j]
                want = np.asarray(value)
                assert got.dtype == want.dtype, key
                assert got.shape == want.shape, key
                np.testing.assert_array_equal(got, want, err_msg=f"{key} of sample {row}")
    assert sorted(seen) == list(range(len(ds)))


def test_same_seed_gives_bit_identical_batches_with_1_2_and_4_threads(lerobot_v30):
    ds = dataset(lerobot_v30)
    transforms = Transforms(random_resized_crop=(24, 24), hflip=0.5, dtype="float16",
                            mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25))
    runs = [epoch_arrays(Loader(ds, batch_size=4, seed=7, threads=t, transforms=transforms))
            for t in (1, 2, 4)]
    assert same_batches(runs[0], runs[1])
    assert same_batches(runs[0], runs[2])
    other_seed = epoch_arrays(Loader(ds, batch_size=4, seed=8, threads=2, transforms=transforms))
    assert not same_batches(runs[0], other_seed)


def test_resuming_mid_epoch_gives_the_remaining_batches(lerobot_v30):
    ds = dataset(lerobot_v30, size=(32, 32))
    whole = Loader(ds, batch_size=4, seed=3, threads=2)
    first_epoch = epoch_arrays(whole)
    second_epoch = epoch_arrays(whole)  # epochs advance by themselves
    assert not same_batches(first_epoch, second_epoch)

    interrupted = Loader(ds, batch_size=4, seed=3, threads=1)
    it = iter(interrupted)
    for _ in range(3):
        next(it)
    state = interrupted.state_dict()
    del it, interrupted
    resumed = Loader(ds, batch_size=4, seed=3, threads=4)
    resumed.load_state_dict(state)
    assert same_batches(epoch_arrays(resumed), first_epoch[3:])
    assert same_batches(epoch_arrays(resumed), second_epoch)

    with pytest.raises(ValueError, match="seed"):
        Loader(ds, batch_size=4, seed=4).load_state_dict(state)
    with pytest.raises(ValueError, match="batch_size"):
        Loader(ds, batch_size=5, seed=3).load_state_dict(state)


def test_set_epoch_and_len(lerobot_v21):
    ds = dataset(lerobot_v21)
    loader = Loader(ds, batch_size=5, seed=0, drop_last=True)
    assert len(loader) == len(ds) // 5
    loader.set_epoch(4)
    a = epoch_arrays(loader)
    assert loader.epoch == 5
    loader.set_epoch(4)
    assert same_batches(epoch_arrays(loader), a)
    assert all(len(batch["index"]) == 5 for batch in a)


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_every_sample_once_across_ranks(lerobot_v21, world_size):
    ds = dataset(lerobot_v21)  # 18 samples
    per_rank = -(-len(ds) // world_size)
    counts = np.zeros(len(ds), dtype=int)
    for rank in range(world_size):
        loader = Loader(ds, batch_size=4, seed=2, rank=rank, world_size=world_size)
        rows = np.concatenate([as_numpy(b["index"]) for b in loader])
        assert len(rows) == per_rank  # equal steps on every rank
        np.add.at(counts, rows, 1)
    assert counts.min() == 1
    padding = per_rank * world_size - len(ds)  # repeats only to even out the ranks
    assert counts.sum() - len(ds) == padding
    if padding == 0:
        assert (counts == 1).all()


def test_rank_and_world_size_from_the_environment(lerobot_v21, monkeypatch):
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "3")
    loader = Loader(dataset(lerobot_v21), batch_size=2)
    assert (loader.rank, loader.world_size) == (2, 3)
    assert Loader(dataset(lerobot_v21), batch_size=2, rank=0, world_size=1).world_size == 1
    with pytest.raises(ValueError, match="rank"):
        Loader(dataset(lerobot_v21), batch_size=2, rank=3, world_size=3)


def test_transforms_follow_their_definitions(lerobot_v21):
    ds = dataset(lerobot_v21, size=(40, 40))
    top = lerobot_v21.cameras[0]
    uint8 = Transforms(dtype="uint8")
    plain = epoch_arrays(Loader(ds, batch_size=6, seed=5, threads=2, transforms=uint8))
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    normalized = epoch_arrays(Loader(ds, batch_size=6, seed=5, threads=2, transforms=Transforms(
        dtype="float32", mean=mean, std=std)))
    flipped = epoch_arrays(Loader(ds, batch_size=6, seed=5, threads=2,
                                  transforms=Transforms(hflip=1.0, dtype="uint8")))
    hwc = list(Loader(ds, batch_size=6, seed=5, threads=2,
                      transforms=Transforms(layout="THWC", dtype=torch.bfloat16)))
    for p, n, f in zip(plain, normalized, flipped):
        frames = p[top]  # [B, T, 3, H, W] uint8
        m = np.asarray(mean, np.float32).reshape(3, 1, 1)
        s = np.asarray(std, np.float32).reshape(3, 1, 1)
        expected = (frames.astype(np.float32) / np.float32(255) - m) / s
        assert n[top].dtype == np.float32
        np.testing.assert_allclose(n[top], expected, rtol=0, atol=1e-6)
        np.testing.assert_array_equal(f[top], frames[..., ::-1])
        np.testing.assert_array_equal(f["observation.state"], p["observation.state"])
    for p, h in zip(plain, hwc):
        # [B, T, H, W, 3]; bfloat16 keeps 8 bits of mantissa: within 1/256 relative of x / 255
        assert h[top].dtype == torch.bfloat16
        expected = torch.from_numpy(p[top].transpose(0, 1, 3, 4, 2).copy()).float() / 255
        torch.testing.assert_close(h[top].float(), expected, rtol=1 / 256, atol=0)


def test_bfloat16_batches_are_torch_tensors(lerobot_v21):
    ds = dataset(lerobot_v21, size=(16, 16))
    batch = next(iter(Loader(ds, batch_size=3, transforms=Transforms(dtype="bfloat16"))))
    top = lerobot_v21.cameras[0]
    assert batch[top].dtype == torch.bfloat16
    reference = next(iter(Loader(ds, batch_size=3, transforms=Transforms(dtype="uint8"))))
    reference = reference[top].float() / 255
    torch.testing.assert_close(batch[top].float(), reference, rtol=1 / 128, atol=0)
    with pytest.raises(ValueError, match="bfloat16"):
        Loader(ds, batch_size=3, transforms=Transforms(dtype="bfloat16"), output="numpy")


def test_center_and_random_resized_crops(lerobot_v21):
    ds = dataset(lerobot_v21, size=(48, 48))
    top = lerobot_v21.cameras[0]
    center = next(iter(Loader(ds, batch_size=4, seed=1, transforms=Transforms(
        center_crop=(32, 24), dtype="uint8"))))
    assert tuple(center[top].shape) == (4, 2, 3, 32, 24)
    rrc = next(iter(Loader(ds, batch_size=4, seed=1, transforms=Transforms(
        random_resized_crop=(20, 30)))))
    assert tuple(rrc[top].shape) == (4, 2, 3, 20, 30)
    # The centre crop of the resized frame shows the middle of the full resized frame.
    full = next(iter(Loader(ds, batch_size=4, seed=1, transforms=Transforms(dtype="uint8"))))
    full = full[top].numpy().astype(int)
    middle = full[..., 8:40, 12:36]
    assert np.abs(center[top].numpy().astype(int) - middle).mean() < 6


def test_bad_arguments(lerobot_v21):
    ds = dataset(lerobot_v21)
    for kwargs, match in [({"batch_size": 0}, "batch_size"),
                          ({"batch_size": 2, "on_error": "ignore"}, "on_error"),
                          ({"batch_size": 2, "threads": 0}, "threads"),
                          ({"batch_size": 2, "prefetch": 0}, "prefetch"),
                          ({"batch_size": 2, "output": "jax"}, "output")]:
        with pytest.raises(ValueError, match=match):
            Loader(ds, **kwargs)
    for kwargs, match in [({"center_crop": (9, 9), "random_resized_crop": (9, 9)}, "not both"),
                          ({"mean": (0, 0, 0)}, "both"),
                          ({"mean": (0, 0, 0), "std": (1, 1, 1), "dtype": "uint8"}, "float"),
                          ({"hflip": 2}, "probability"),
                          ({"dtype": "int8"}, "dtype"),
                          ({"resize": (0, 4)}, "resize")]:
        with pytest.raises(ValueError, match=match):
            Transforms(**kwargs)
    with pytest.raises(ValueError):  # a centre crop larger than the frame it is taken from
        Loader(ds, batch_size=2, transforms=Transforms(resize=(16, 16), center_crop=(32, 32)))
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="cuda"):
            Loader(ds, batch_size=2, device="cuda")


def test_a_corrupt_video_raises_naming_the_sample_or_is_skipped(lerobot_v21, lerobot_copy):
    root = lerobot_copy(lerobot_v21)
    top = lerobot_v21.cameras[0]
    bad = os.path.join(root, os.path.relpath(lerobot_v21.video_paths[top][1], lerobot_v21.root))
    lerobot_datasets.corrupt_media_data(bad)
    ds = LeRobotDataset(root, spec_for(lerobot_v21.cameras), progress=False, output="numpy")
    episode_1 = set(range(5, 12))  # episode lengths 5, 7, 6

    threads_before = native_threads()
    with pytest.raises(stoker.Error) as raised:
        for _ in Loader(ds, batch_size=4, seed=0, threads=2):
            pass
    message = str(raised.value)
    assert "sample " in message and "episode 1" in message and bad in message, message
    # Issue 33: the README said decode failures raise stoker.DecodeError, and the Loader raised
    # `stoker._core.DatasetError`. It raises stoker.DatasetError, under the name it is exported
    # as, and the README's Loader section names it.
    assert type(raised.value) is stoker.DatasetError
    assert f"{type(raised.value).__module__}.{type(raised.value).__qualname__}" == (
        "stoker.DatasetError")
    readme = open(os.path.join(os.path.dirname(__file__), "..", "..", "README.md")).read()
    assert "A corrupt video raises `stoker.DatasetError`" in " ".join(readme.split())
    assert wait_for_threads(threads_before) <= threads_before

    loader = Loader(ds, batch_size=4, seed=0, threads=2, on_error="skip")
    batches = epoch_arrays(loader)
    assert [len(b["index"]) for b in batches] == [4, 4, 4, 4, 2]
    rows = np.concatenate([b["index"] for b in batches])
    assert not set(rows.tolist()) & episode_1
    stats = loader.stats()
    assert stats["skipped"] == len(episode_1)
    assert {s["sample"] for s in stats["skips"]} == episode_1
    assert all(bad in s["reason"] for s in stats["skips"])
    # Skipping is deterministic too.
    assert same_batches(epoch_arrays(Loader(ds, batch_size=4, seed=0, threads=1,
                                            on_error="skip")), batches)


def test_no_thread_survives_break_delete_or_an_exception_in_the_consumer(lerobot_v30):
    ds = dataset(lerobot_v30, size=(32, 32))
    gc.collect()
    before = native_threads()
    loader = Loader(ds, batch_size=2, threads=3, prefetch=4)
    for _ in loader:
        break
    assert wait_for_threads(before) == before

    # A finished epoch keeps the run (its threads build the next epoch's first batches) until
    # the loader goes.
    for _ in loader:
        pass
    assert loader._core.running and native_threads() == before + 3
    del loader
    assert wait_for_threads(before) == before
    loader = Loader(ds, batch_size=2, threads=3, prefetch=4)

    it = iter(loader)
    next(it)
    assert native_threads() > before  # the run's threads
    del it, loader
    gc.collect()
    assert wait_for_threads(before) == before

    loader = Loader(ds, batch_size=2, threads=3)
    with pytest.raises(KeyboardInterrupt):
        for _ in loader:
            raise KeyboardInterrupt
    assert wait_for_threads(before) == before
    held = next(iter(loader))  # a batch outlives its loader
    del loader
    gc.collect()
    assert held[lerobot_v30.cameras[0]].float().mean() > 0


def test_batch_buffers_are_reused_and_memory_stays_flat(lerobot_v21):
    ds = dataset(lerobot_v21, size=(32, 32))
    loader = Loader(ds, batch_size=4, threads=2, prefetch=2)
    top = lerobot_v21.cameras[0]

    def rss_kib():
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS"))

    pointers = set()
    batches = 0
    warm = None
    while batches < 2000:
        for batch in loader:
            pointers.add(batch[top].data_ptr())
            batches += 1
            if batches == 300:
                gc.collect()
                warm = rss_kib()
            if batches == 2000:
                break
    gc.collect()
    growth = rss_kib() - warm
    stats = loader.stats()
    assert len(pointers) <= stats["pool_batches"]  # every batch in a pooled buffer
    assert stats["buffers_allocated"] <= stats["pool_batches"]
    assert growth < 8 * 1024, f"RSS grew by {growth} KiB over 1700 batches"
    assert stats["memory_bound_bytes"] == stats["batch_bytes"] * stats["pool_batches"]


def test_stats_report_stages_and_data_wait(lerobot_v30):
    loader = Loader(dataset(lerobot_v30), batch_size=4, threads=2)
    n = len(epoch_arrays(loader))
    stats = loader.stats()
    assert stats["batches"] == n and stats["samples"] == len(loader.dataset)
    assert len(stats["data_wait"]) == n
    assert stats["stage_seconds"]["decode"] > 0
    assert stats["stage_seconds"]["index"] > 0
    assert 0 <= stats["data_wait_p50"] <= stats["data_wait_p95"] <= stats["data_wait_max"]
    assert stats["decode"]["frames_converted"] > 0
    assert stats["threads"] == 2
    loader.reset_stats()
    assert loader.stats()["batches"] == 0


def test_balanced_ranks_get_equal_work_per_step(lerobot_v30):
    ds = dataset(lerobot_v30)  # 30 samples
    costs = ds.sample_costs()

    def step_costs(balance):
        per_rank = []
        for rank in range(2):
            loader = Loader(ds, batch_size=3, seed=4, rank=rank, world_size=2, balance=balance)
            per_rank.append([costs[as_numpy(b["index"])].sum() for b in loader])
        return np.array(per_rank)  # [rank, step]

    plain, balanced = step_costs(False), step_costs(True)
    assert plain.shape == balanced.shape  # the same steps on every rank
    imbalance = lambda c: c.max(axis=0).sum() / c.mean(axis=0).sum()  # noqa: E731
    assert imbalance(balanced) <= imbalance(plain)
    rows = np.concatenate([as_numpy(b["index"]) for rank in range(2) for b in
                           Loader(ds, batch_size=3, seed=4, rank=rank, world_size=2,
                                  balance=True)])
    assert set(rows.tolist()) == set(range(len(ds)))
    assert same_batches(epoch_arrays(Loader(ds, batch_size=3, seed=4, threads=1, balance=True)),
                        epoch_arrays(Loader(ds, batch_size=3, seed=4, threads=3, balance=True)))
    state = Loader(ds, batch_size=3, balance=True).state_dict()
    with pytest.raises(ValueError, match="balance"):
        Loader(ds, batch_size=3).load_state_dict(state)


def test_a_weighted_sampler_drives_the_loader(lerobot_v30):
    ds = dataset(lerobot_v30, size=(32, 32))  # 5 episodes, 30 samples
    # Episode 0 drawn as often as the four others together, whatever its length.
    episode_weights = [4.0, 1.0, 1.0, 1.0, 1.0]
    lengths = np.bincount(ds.index.episode_of_rows(np.arange(len(ds))))
    weights = stoker.expand_group_weights(episode_weights, lengths)

    def weighted(**kwargs):
        return stoker.WeightedSampler(weights, num_samples=40, seed=7, **kwargs)

    loader = Loader(ds, batch_size=4, seed=2, threads=2, sampler=weighted())
    assert len(loader) == 10 and loader.rank == 0 and loader.world_size == 1
    epoch = epoch_arrays(loader)
    drawn = np.concatenate([b["index"] for b in epoch])
    np.testing.assert_array_equal(drawn, weighted().indices(0))  # the sampler's ids, in order
    episodes = np.concatenate([b["episode_index"] for b in epoch])
    assert (episodes == 0).mean() > 0.3  # a fifth of the samples, drawn half the time
    # The items are the dataset's own.
    item = ds[int(drawn[5])]
    np.testing.assert_array_equal(epoch[1]["action"][1], item["action"])

    # Deterministic whatever the threads; resumable mid-epoch, in a new loader.
    same = Loader(ds, batch_size=4, seed=2, threads=1, sampler=weighted())
    assert same_batches(epoch_arrays(same), epoch)
    interrupted = Loader(ds, batch_size=4, seed=2, threads=3, sampler=weighted())
    it = iter(interrupted)
    for _ in range(4):
        next(it)
    state = interrupted.state_dict()
    del it, interrupted
    resumed = Loader(ds, batch_size=4, seed=2, threads=2, sampler=weighted())
    resumed.load_state_dict(state)
    assert same_batches(epoch_arrays(resumed), epoch[4:])
    with pytest.raises(ValueError, match="sampler"):  # another order: refused
        other = stoker.WeightedSampler(weights, num_samples=40, seed=8)
        Loader(ds, batch_size=4, seed=2, sampler=other).load_state_dict(state)

    # Ranks split the draws; the sampler's rank is the loader's.
    ranks = [Loader(ds, batch_size=4, seed=2, sampler=weighted(rank=r, world_size=2))
             for r in range(2)]
    assert [len(r) for r in ranks] == [5, 5]
    with pytest.raises(ValueError, match="rank"):
        Loader(ds, batch_size=4, rank=0, world_size=2, sampler=weighted(rank=1, world_size=2))
    with pytest.raises(ValueError, match="without shuffle"):
        Loader(ds, batch_size=4, shuffle=False, sampler=weighted())
    with pytest.raises(ValueError, match="draws from 3 samples"):
        Loader(ds, batch_size=4, sampler=stoker.WeightedSampler([1.0, 1.0, 1.0]))
    with pytest.raises(TypeError, match="stoker sampler"):
        Loader(ds, batch_size=4, sampler=range(30))


def test_an_observer_sees_every_wait_and_batch_and_the_end(lerobot_v30):
    class Recorder(stoker.LoaderObserver):
        def __init__(self):
            self.events = []

        def iteration_started(self, now):
            self.events.append(("start", now, None))

        def wait_started(self, now):
            self.events.append(("wait", now, None))

        def batch_received(self, batch, now):
            self.events.append(("batch", now, as_numpy(batch["index"]).copy()))

        def iteration_ended(self, now):
            self.events.append(("end", now, None))

    loader = Loader(dataset(lerobot_v30), batch_size=4, shuffle=False, threads=2)
    recorder = Recorder()
    loader.add_observer(recorder)
    delivered = [as_numpy(batch["index"]).copy() for batch in loader]
    kinds = [kind for kind, _, _ in recorder.events]
    # A last wait finds no batch: the epoch is over.
    assert kinds == ["start"] + ["wait", "batch"] * len(loader) + ["wait", "end"]
    times = [now for _, now, _ in recorder.events]
    assert times == sorted(times)
    seen = [index for kind, _, index in recorder.events if kind == "batch"]
    assert all(np.array_equal(a, b) for a, b in zip(seen, delivered))

    recorder.events.clear()
    for k, _ in enumerate(loader):
        if k == 1:
            break  # breaking off ends the iteration at once
    assert [kind for kind, _, _ in recorder.events] == ["start", "wait", "batch", "wait",
                                                        "batch", "end"]

    loader.remove_observer(recorder)
    recorder.events.clear()
    next(iter(loader))
    assert recorder.events == []
    with pytest.raises(ValueError):
        loader.remove_observer(recorder)
    with pytest.raises(TypeError, match="LoaderObserver"):
        loader.add_observer(object())


def test_public_keys_fields_and_threads(lerobot_v30):
    ds = dataset(lerobot_v30)
    top = lerobot_v30.cameras[0]
    keys = {key.name: key for key in ds.item_keys}
    assert keys["wrist_past"].source == lerobot_v30.cameras[1] and keys["wrist_past"].timed
    assert keys["action"].offsets.tolist() == [0, 1, 2]
    assert not keys["timestamp"].timed and keys["timestamp"].offsets.size == 0
    with pytest.raises(ValueError):
        keys["action"].offsets[0] = 5  # read-only
    assert ds.index.column_shape("timestamp") == () and ds.index.column_shape("action") == (6,)

    loader = Loader(ds, batch_size=4, threads=3, output="numpy")
    assert loader.threads == 3
    assert Loader(ds, batch_size=4).threads == len(os.sched_getaffinity(0))
    batch = next(iter(loader))
    for name, (dtype, shape) in loader.fields.items():
        assert (str(batch[name].dtype), batch[name].shape) == (dtype, shape), name
    assert loader.fields[top][1] == (4, 2, 3, 64, 64)

    rows = ds.row_keys([0, 7], [0, 1])
    assert rows["index"].tolist() == [0, 7] and rows["frame_index"].tolist() == [0, 2]
    assert rows["task"] == [lerobot_v30.tasks[t] for t in lerobot_v30.episode_task[:2]]
    assert set(ds.row_keys([0], [0], skip={"index", "task"})) == {
        "episode_index", "frame_index", "task_index", "task"}
