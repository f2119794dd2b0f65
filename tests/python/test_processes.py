"""stoker across processes: readers, datasets and loaders used in forked children after the
parent used them, and pickled into spawned ones, give exactly what one process gives."""

import hashlib
import multiprocessing
import os
import pickle

import numpy as np
import pytest

import stoker
from stoker import Loader, VideoReader
from stoker.datasets.lerobot.dataset import LeRobotDataset, WindowSpec
from stoker.datasets.lerobot.index import EpisodeIndex, load_index

torch = pytest.importorskip("torch")
FPS = 30
TIMEOUT_S = 60  # for a child's answer: far above the seconds the work takes


def large_spec(cameras):
    top, wrist = cameras
    return WindowSpec(delta_timestamps={
        top: [-20 / FPS, -7 / FPS, 0.0],
        wrist: [0.0, 5 / FPS],
        "action": [0.0, 1 / FPS, 2 / FPS],
    })


def digest(mapping) -> str:
    """One hash of a dataset item or a batch: every key, dtype, shape and byte."""
    h = hashlib.sha256()
    for key in sorted(mapping):
        value = mapping[key]
        h.update(key.encode())
        if key == "task":
            h.update(repr(value).encode())
            continue
        array = value.numpy() if isinstance(value, torch.Tensor) else np.asarray(value)
        h.update(f"{array.dtype}{array.shape}".encode())
        h.update(np.ascontiguousarray(array).tobytes())
    return h.hexdigest()


def test_large_fixture_videos_exceed_ffmpegs_read_buffer(lerobot_large):
    sizes = {os.path.getsize(p) for paths in lerobot_large.video_paths.values() for p in paths}
    assert min(sizes) >= 62_000, sizes  # smaller files hid the shared-file-position bug


@pytest.mark.filterwarnings("ignore:This DataLoader will create 4 worker processes")
def test_forked_dataloader_workers_give_the_items_the_parent_reads(lerobot_large):
    ds = LeRobotDataset(lerobot_large.root, large_spec(lerobot_large.cameras), progress=False, output="numpy")
    # The parent reads every item first: each video is open (and positioned) in this process
    # when the workers fork.
    expected = [digest(ds[i]) for i in range(len(ds))]
    for _ in range(2):
        workers = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=4,
                                              multiprocessing_context="fork",
                                              timeout=TIMEOUT_S)
        got = [digest(item) for item in workers]
        assert got == expected, [i for i, (a, b) in enumerate(zip(got, expected)) if a != b]
    assert [digest(ds[i]) for i in range(len(ds))] == expected  # the parent's readers still work


_READER = None  # the parent's reader, inherited by forked children


def _read_in_child(seed):
    order = np.random.default_rng(seed).permutation(_READER.num_frames)
    frames = _READER.get_frames(order)
    return [hashlib.sha256(frames[np.argsort(order)][i].tobytes()).hexdigest()
            for i in range(_READER.num_frames)]


def test_a_reader_used_in_the_parent_reads_exact_frames_in_forked_children(lerobot_large):
    global _READER
    path = lerobot_large.video_paths[lerobot_large.cameras[0]][0]
    _READER = VideoReader(path, threads=2)
    frames = _READER.get_frames(np.arange(_READER.num_frames))
    expected = [hashlib.sha256(frame.tobytes()).hexdigest() for frame in frames]
    _READER.get_frames([_READER.num_frames // 2, 3])  # leave the parent's file mid-way
    try:
        with multiprocessing.get_context("fork").Pool(3) as pool:
            results = pool.map_async(_read_in_child, range(6)).get(TIMEOUT_S)
    finally:
        _READER = None
    assert all(result == expected for result in results)


def _batches_in_child(loader, iterator, answers):
    """In a forked child: the rest of the parent's iteration (its next batch, then the others),
    then a whole epoch, each batch as its digest."""
    try:
        inherited = [digest(next(iterator))]
        rest = [digest(batch) for batch in iterator]
        following = [digest(batch) for batch in loader]
        answers.put(("ok", inherited, rest, following, loader.epoch))
    except BaseException as error:  # reported to the parent, which fails the test
        answers.put(("error", f"{type(error).__name__}: {error}"))


def test_a_loader_iterated_in_the_parent_restarts_in_a_forked_child(lerobot_large):
    ds = LeRobotDataset(lerobot_large.root, large_spec(lerobot_large.cameras), progress=False, output="numpy")
    loader = Loader(ds, batch_size=4, seed=5, threads=2, prefetch=3)
    iterator = iter(loader)
    taken = [next(iterator) for _ in range(3)]  # the parent's threads are building batches
    del taken
    state = loader.state_dict()

    fresh = Loader(ds, batch_size=4, seed=5, threads=1)
    fresh.load_state_dict(state)
    remaining = [digest(batch) for batch in fresh]
    next_epoch = [digest(batch) for batch in fresh]

    context = multiprocessing.get_context("fork")
    answers = context.Queue()
    child = context.Process(target=_batches_in_child, args=(loader, iterator, answers))
    child.start()
    try:
        answer = answers.get(timeout=TIMEOUT_S)
    finally:
        child.join(timeout=TIMEOUT_S)
        if child.is_alive():
            child.kill()
            child.join()
    assert answer[0] == "ok", answer
    _, inherited, rest, following, epoch = answer
    assert inherited + rest == remaining
    assert following == next_epoch
    assert epoch == 2
    assert child.exitcode == 0

    # The parent goes on where it was.
    assert [digest(next(iterator))] + [digest(batch) for batch in iterator] == remaining


def test_readers_indexes_and_datasets_pickle_as_what_reopens_them(lerobot_v30):
    path = lerobot_v30.video_paths[lerobot_v30.cameras[0]][0]
    reader = VideoReader(path)
    frames = reader.get_frames(np.arange(reader.num_frames))
    again = pickle.loads(pickle.dumps(reader))
    assert again.path == reader.path and again.frame_table == reader.frame_table
    np.testing.assert_array_equal(again.get_frames(np.arange(reader.num_frames)), frames)

    with open(path, "rb") as f:
        data = f.read()
    in_memory = VideoReader(data, name="clip.mp4")
    again = pickle.loads(pickle.dumps(in_memory))
    assert again.path == "clip.mp4" and again.frame_table == in_memory.frame_table
    np.testing.assert_array_equal(again.get_frames(np.arange(reader.num_frames)), frames)

    index = load_index(lerobot_v30.root, progress=False)
    again = pickle.loads(pickle.dumps(index))
    assert isinstance(again, EpisodeIndex) and again.path == index.path
    assert again.video_files == index.video_files and again.num_rows == index.num_rows
    np.testing.assert_array_equal(again.column("action"), index.column("action"))

    ds = LeRobotDataset(lerobot_v30.root, large_spec(lerobot_v30.cameras), progress=False, output="numpy")
    again = pickle.loads(pickle.dumps(ds))
    assert again.index.path == ds.index.path and len(again) == len(ds)
    assert [digest(again[i]) for i in range(len(ds))] == [digest(ds[i]) for i in range(len(ds))]


def test_unpickling_refuses_a_dataset_or_index_changed_since(lerobot_v21, lerobot_copy):
    root = lerobot_copy(lerobot_v21)
    ds = LeRobotDataset(root, progress=False, output="numpy")
    pickled_index, pickled_ds = pickle.dumps(ds.index), pickle.dumps(ds)
    os.utime(lerobot_v21.data_paths[0].replace(lerobot_v21.root, root), ns=(1, 1))
    with pytest.raises(stoker.DatasetError, match="changed since it was pickled"):
        pickle.loads(pickled_ds)
    load_index(root, progress=False)  # rebuilds the index file, replacing it by rename
    with pytest.raises(stoker.DatasetError, match="rebuilt or replaced since"):
        pickle.loads(pickled_index)


def test_spawned_dataloader_workers_give_the_in_process_items(lerobot_v30):
    ds = LeRobotDataset(lerobot_v30.root, large_spec(lerobot_v30.cameras), progress=False, output="numpy")
    expected = [digest(ds[i]) for i in range(len(ds))]
    workers = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2,
                                          multiprocessing_context="spawn", timeout=TIMEOUT_S)
    assert [digest(item) for item in workers] == expected
