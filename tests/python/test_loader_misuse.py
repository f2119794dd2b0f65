"""stoker.Loader used the way users use it, and misuse it: closed from another thread while the
consumer waits, iterated by two threads, configured for epochs without a batch, taken with
islice or zip, short of memory or threads, its videos replaced while it runs. Each case ends
with the right batches or a clear error: never a signal, a hang or a wrong value. Cases whose
failure would be a crash or a hang run in a child interpreter, with a timeout."""

import itertools
import os
import shutil
import struct

import lerobot_datasets
import numpy as np
import pytest
from child import describe, run_python

import stoker
from stoker import Loader, WeightedSampler
from stoker.datasets.lerobot.dataset import LeRobotDataset, WindowSpec

torch = pytest.importorskip("torch")
FPS = 30


def dataset(written, root=None, **spec):
    """``written`` (or its copy at ``root``), each item holding two frames of the first camera
    and two actions."""
    top = written.cameras[0]
    return LeRobotDataset(root or written.root, WindowSpec(delta_timestamps={
        top: [-2 / FPS, 0.0], "action": [0.0, 1 / FPS]}, **spec), progress=False, output="numpy")


def rows_of(batches):
    return [np.asarray(batch["index"]).tolist() for batch in batches]


# close() from another thread: tests/python/test_loader_fronts.py, for every kind of loader.


# ---- Two threads ------------------------------------------------------------------------------

TWO_THREADS = """
    import sys, threading, time
    import stoker
    from stoker.datasets.lerobot.dataset import LeRobotDataset, WindowSpec

    root, top = sys.argv[1], sys.argv[2]
    ds = LeRobotDataset(root, WindowSpec(delta_timestamps={top: [-0.1, 0.0]}), progress=False)
    loader = stoker.Loader(ds, batch_size=2, threads=1, prefetch=1, output="numpy")
    for attempt in range(10):
        iterating, answers = threading.Event(), []
        def first():
            for i, batch in enumerate(loader):
                iterating.set()
                time.sleep(0.002)  # a slow step: the other thread comes while this one iterates
        def second():
            iterating.wait()
            try:
                answers.append(f"{sum(1 for _ in loader)} batches")
            except RuntimeError as error:
                answers.append(str(error))
        a = threading.Thread(target=first, name=f"trainer-{attempt}")
        b = threading.Thread(target=second, name="intruder")
        a.start(); b.start(); a.join(); b.join()
        # Once the first thread's iteration is over, another thread may iterate.
        counts = []
        c = threading.Thread(target=lambda: counts.append(sum(1 for _ in loader)))
        c.start(); c.join()
        print(f"{attempt}|{answers[0]}|{counts[0]}|{len(loader)}", flush=True)
"""


def test_a_second_thread_iterating_gets_an_error_naming_the_thread_that_iterates(lerobot_large):
    child = run_python(TWO_THREADS, lerobot_large.root, lerobot_large.cameras[0], timeout=180)
    assert child.returncode == 0, describe(child)
    lines = [line.split("|") for line in child.stdout.splitlines()]
    assert len(lines) == 10, describe(child)
    for attempt, answer, count, batches in lines:
        assert answer.startswith(f"this Loader is being iterated by thread 'trainer-{attempt}'"), \
            answer
        assert count == batches


def test_a_new_iteration_on_the_same_thread_ends_the_previous_one(lerobot_v21):
    ds = dataset(lerobot_v21)
    loader = Loader(ds, batch_size=4, seed=0, threads=2)
    old = iter(loader)
    first = next(old)
    for second in loader:  # starting a new one ends the previous one
        break
    with pytest.raises(RuntimeError, match="another iteration of this loader started"):
        next(old)
    whole = rows_of(Loader(ds, batch_size=4, seed=0, threads=1))
    assert rows_of([first]) == rows_of([second]) == whole[:1]  # each started the epoch
    state = loader.state_dict()  # after one batch of the second iteration
    # A new iteration starts the epoch from its beginning, as a DataLoader's; resuming
    # mid-epoch is explicit, through load_state_dict.
    assert rows_of(loader) == whole
    loader.load_state_dict(state)
    assert rows_of(loader) == whole[1:]


# ---- Epochs without a batch -------------------------------------------------------------------

@pytest.fixture(scope="module")
def one_frame(tmp_path_factory, lerobot_cache):
    """A dataset of one episode of one frame."""
    return lerobot_datasets.write_v21(tmp_path_factory.mktemp("lerobot") / "one", [1],
                                      cache_dir=lerobot_cache)


def test_an_epoch_without_a_batch_is_refused_at_construction_with_its_numbers(lerobot_v21,
                                                                             one_frame):
    ds = dataset(lerobot_v21)  # 18 samples
    cases = [
        (dict(batch_size=32, drop_last=True),
         "rank 0 .world_size 1. 18 samples per epoch .the dataset has 18.: fewer than "
         "batch_size 32, and drop_last=True drops a short batch"),
        (dict(batch_size=1, drop_last=True, rank=5, world_size=32),
         "rank 5 .world_size 32. 0 samples per epoch .the dataset has 18., so no batch of "
         "batch_size 1: drop_last=True drops the samples left over after an equal split"),
        (dict(batch_size=2, sampler=WeightedSampler(np.ones(18), num_samples=0)),
         "rank 0 .world_size 1. 0 samples per epoch .the dataset has 18., so no batch of "
         "batch_size 2 .drop_last=False."),
    ]
    for kwargs, numbers in cases:
        with pytest.raises(stoker.InvalidArgumentError,
                           match="an epoch would have no batch: the sampler gives " + numbers):
            Loader(ds, **kwargs)
    tiny = dataset(one_frame)
    with pytest.raises(ValueError, match="rank 0 .world_size 1. 1 samples per epoch .the dataset "
                                         "has 1.: fewer than batch_size 2, and drop_last=True"):
        Loader(tiny, batch_size=2, drop_last=True)
    # Without drop_last the same configurations have a batch.
    assert rows_of(Loader(tiny, batch_size=2)) == [[0]]
    assert len(Loader(ds, batch_size=1, rank=5, world_size=32)) == 1


# ---- An epoch taken exactly ------------------------------------------------------------------

def test_every_loop_after_an_epoch_taken_exactly_gets_a_whole_epoch(lerobot_v21):
    ds = dataset(lerobot_v21)
    n = len(Loader(ds, batch_size=4))
    reference = Loader(ds, batch_size=4, seed=2, threads=1)
    epochs = [rows_of(reference) for _ in range(4)]

    def islice(loader):
        return list(itertools.islice(loader, n))

    def zipped(loader):
        return [batch for _, batch in zip(range(n), loader)]

    def break_on_the_last(loader):
        taken = []
        for batch in loader:
            taken.append(batch)
            if len(taken) == n:
                break
        return taken

    for take in (islice, zipped, break_on_the_last):
        loader = Loader(ds, batch_size=4, seed=2, threads=2)
        got = [rows_of(take(loader)) for _ in range(3)]
        assert loader.epoch == 3 and loader.state_dict()["batch"] == 0
        got.append(rows_of(loader))  # and a plain loop after them
        assert got == epochs, take.__name__


# ---- Resources -------------------------------------------------------------------------------

THREADS_UNDER_A_LIMIT = """
    import os, resource, sys
    import stoker
    from stoker.datasets.lerobot.dataset import LeRobotDataset, WindowSpec

    root, top = sys.argv[1], sys.argv[2]
    ds = LeRobotDataset(root, WindowSpec(delta_timestamps={top: [0.0]}), progress=False)
    loader = stoker.Loader(ds, batch_size=2, threads=1500, output="numpy")
    threads = lambda: len(os.listdir("/proc/self/task"))
    with open("/proc/self/status") as status:
        vm = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize:"))
    limit = vm + (1 << 30)  # room for about 120 threads' stacks, not 1500
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    before = threads()
    for attempt in range(2):
        try:
            next(iter(loader))
            print("no error")
        except stoker.ResourceError as error:
            print(f"ResourceError|{error}|{before}|{threads()}", flush=True)
"""


def test_threads_the_system_refuses_raise_a_resource_error_with_the_started_ones_joined(
        lerobot_v21):
    child = run_python(THREADS_UNDER_A_LIMIT, lerobot_v21.root, lerobot_v21.cameras[0])
    assert child.returncode == 0, describe(child)
    lines = [line.split("|") for line in child.stdout.splitlines()]
    assert len(lines) == 2, describe(child)
    for kind, message, before, after in lines:
        assert kind == "ResourceError" and "thread" in message, message
        assert after == before


def test_a_batch_pool_larger_than_the_machine_is_refused_at_construction(lerobot_v21):
    ds = dataset(lerobot_v21, size=(224, 224))
    sample_bytes = Loader(ds, batch_size=1, prefetch=1, threads=1).stats()["batch_bytes"]
    machine = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    # prefetch=100000 keeps up to 100002 batches: a batch size that makes them twice the
    # machine's memory (16 samples of 224x224 frames here: about 480 GB).
    batch_size = max(16, -(-2 * machine // (100_002 * sample_bytes)))
    with pytest.raises(stoker.ResourceError, match="prefetch 100000 keeps up to 100002 batches"
                                                   ".* GiB of memory available") as raised:
        Loader(ds, batch_size=batch_size, prefetch=100_000, threads=1)
    assert isinstance(raised.value, MemoryError)


# ---- Videos replaced under a running loader --------------------------------------------------

def same_size_copy(source: str, size: int, target: str) -> None:
    """Writes ``source`` padded with a trailing MP4 ``free`` box to ``size`` bytes."""
    with open(source, "rb") as f:
        data = f.read()
    pad = size - len(data)
    assert pad >= 8, "the replacement must be smaller than the file it replaces"
    with open(target, "wb") as f:
        f.write(data + struct.pack(">I4s", pad, b"free") + bytes(pad - 8))


def check_frames_match_rows(batch, written, top):
    """Every frame of ``batch`` shows the (episode, frame) of its row and offset."""
    episodes = np.asarray(batch["episode_index"])
    frames = np.asarray(batch["frame_index"])
    video = np.asarray(batch[top])  # [B, T, 3, H, W]
    offsets = np.array([-2, 0])
    for j in range(len(episodes)):
        length = written.lengths[episodes[j]]
        want = np.clip(frames[j] + offsets, 0, length - 1)
        got_episode, got_frame = lerobot_datasets.read_marks(video[j], layout="NCHW")
        assert got_episode.tolist() == [episodes[j]] * 2 and got_frame.tolist() == want.tolist(), \
            f"row {int(np.asarray(batch['index'])[j])}: frames of {got_episode}, {got_frame}"


@pytest.mark.parametrize("on_error", ["raise", "skip"])
@pytest.mark.parametrize("size", ["other size", "same size"])
@pytest.mark.parametrize("how", ["copied over in place", "renamed over"])
def test_a_video_replaced_under_a_running_loader_is_refused_by_name(lerobot_v21, lerobot_copy,
                                                                   how, size, on_error):
    root = lerobot_copy(lerobot_v21)
    top = lerobot_v21.cameras[0]
    paths = [os.path.join(root, os.path.relpath(p, lerobot_v21.root))
             for p in lerobot_v21.video_paths[top]]
    target, source = paths[1], paths[2]  # episode 1's video gets episode 2's frames
    ds = dataset(lerobot_v21, root)
    loader = Loader(ds, batch_size=2, seed=0, threads=1, prefetch=1, on_error=on_error,
                    output="numpy")
    batches = iter(loader)
    check_frames_match_rows(next(batches), lerobot_v21, top)  # every video is open now

    replacement = os.path.join(root, "replacement.mp4")
    if size == "same size":
        same_size_copy(source, os.path.getsize(target), replacement)
    else:
        shutil.copyfile(source, replacement)
    if how == "renamed over":
        os.replace(replacement, target)
    else:
        shutil.copyfile(replacement, target)

    errors, delivered = [], 0
    # The rest of this run (videos open before the change), then three epochs of new runs
    # (videos opened after it).
    for run in range(4):
        try:
            for batch in batches:
                check_frames_match_rows(batch, lerobot_v21, top)
                delivered += 1
        except stoker.Error as error:
            errors.append(str(error))
        loader.close()
        batches = iter(loader)
    episode_1 = range(5, 12)
    with pytest.raises(stoker.DatasetError, match="episode_000001.mp4"):  # a fresh reader
        dataset(lerobot_v21, root)[episode_1[3]]
    if on_error == "raise":
        assert errors, "no error in four runs"
        assert all(target in message for message in errors), errors
    else:
        assert not errors, errors
        skips = loader.stats()["skips"]
        assert loader.stats()["skipped"] > 0 and skips
        assert all(target in skip["reason"] for skip in skips), skips
        assert delivered > 3 * len(loader)


def test_dataloader_arguments_name_their_stoker_equivalents(lerobot_v21):
    ds = dataset(lerobot_v21)
    with pytest.raises(TypeError) as raised:
        stoker.Loader(ds, batch_size=2, num_workers=4, pin_memory=True, collate_fn=list,
                      image_dtype="uint8", frobnicate=1)
    message = str(raised.value)
    assert "['collate_fn', 'frobnicate', 'image_dtype', 'num_workers', 'pin_memory']" in message
    assert "num_workers=: use threads=" in message
    assert "pin_memory=: use device='cuda'" in message
    assert "collate_fn=: use nothing: every sample is written straight into its slot" in message
    assert "image_dtype=: use an argument of the dataset" in message
    assert "frobnicate=:" not in message
