"""stoker as a drop-in for LeRobot: LeRobot's constructor arguments and cache layout, episode
subsets, metadata and statistics, images as LeRobot returns them, image transforms, record
columns, refused dataset kinds, the EpisodeAwareSampler, DataLoader-like iteration and the
torchdata adapter. On real datasets written by the tests (frames and rows encode their
(episode, frame))."""

import json
import os
import shutil

import lerobot_datasets
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import stoker
from stoker.datasets.lerobot import format as lerobot_format

torch = pytest.importorskip("torch")
FPS = 30


def open_ds(root, **kwargs):
    return stoker.LeRobotDataset(root, progress=False, **kwargs, output="numpy")


# ---- Constructor and cache ------------------------------------------------------------------


def test_a_repo_id_reads_lerobots_cache_and_says_how_to_fetch_a_missing_one(
        lerobot_v30, tmp_path, monkeypatch):
    home = tmp_path / "lerobot-home"
    shutil.copytree(lerobot_v30.root, home / "someone" / "pick_cube")
    monkeypatch.setenv("HF_LEROBOT_HOME", str(home))
    ds = stoker.LeRobotDataset("someone/pick_cube", progress=False, output="numpy")
    assert ds.repo_id == ds.meta.repo_id == "someone/pick_cube"
    assert ds.root == str(home / "someone" / "pick_cube")
    assert len(ds) == sum(lerobot_v30.lengths)
    with pytest.raises(stoker.DatasetError) as error:
        stoker.LeRobotDataset("someone/other", progress=False, output="numpy")
    message = str(error.value)
    assert str(home / "someone" / "other") in message
    assert "huggingface-cli download someone/other --repo-type dataset" in message
    # The default home, under HF_HOME.
    monkeypatch.delenv("HF_LEROBOT_HOME")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(stoker.DatasetError, match=str(tmp_path / "hf" / "lerobot" / "someone")):
        stoker.LeRobotDataset("someone/pick_cube", progress=False, output="numpy")


def test_lerobots_arguments_and_the_old_ones_give_the_same_items(lerobot_v30):
    top, _ = lerobot_v30.cameras
    deltas = {top: [-1 / FPS, 0.0], "action": [0.0, 1 / FPS]}
    old = stoker.LeRobotDataset(lerobot_v30.root, stoker.WindowSpec(delta_timestamps=deltas),
                                progress=False, output="numpy")
    as_lerobot = stoker.LeRobotDataset("local/v30", root=lerobot_v30.root,
                                       delta_timestamps=deltas, tolerance_s=1e-4,
                                       video_backend="pyav", revision="main", progress=False, output="numpy")
    positional_root = stoker.LeRobotDataset("local/v30", lerobot_v30.root,
                                            delta_timestamps=deltas, progress=False, output="numpy")
    for i in (0, 7, len(old) - 1):
        for other in (as_lerobot, positional_root):
            a, b = old[i], other[i]
            assert set(a) == set(b)
            for key in a:
                np.testing.assert_array_equal(np.asarray(a[key]), np.asarray(b[key]))
    with pytest.raises(TypeError, match="unexpected keyword"):
        stoker.LeRobotDataset(lerobot_v30.root, frobnicate=1, progress=False, output="numpy")
    with pytest.raises(TypeError, match="not both"):
        stoker.LeRobotDataset(lerobot_v30.root, stoker.WindowSpec(), delta_timestamps=deltas,
                              progress=False, output="numpy")
    with pytest.raises(ValueError, match="whole number of frames"):
        stoker.LeRobotDataset("local/v30", root=lerobot_v30.root,
                              delta_timestamps={"action": [0.01]}, progress=False, output="numpy")


def test_a_one_frame_camera_window_is_squeezed_as_lerobot_squeezes_it(lerobot_v30):
    """Issue 24: LeRobot's item for delta_timestamps {camera: [0.0]} is [3, H, W] (it squeezes
    a one-frame video window); stoker gave [1, 3, H, W], breaking every policy that observes one
    frame. Features keep LeRobot's [1, dim]; the pad masks their [1]. A WindowSpec keeps its
    own shapes."""
    top, wrist = lerobot_v30.cameras
    deltas = {wrist: [0.0], top: [-1 / FPS, 0.0], "observation.state": [0.0],
              "action": [0.0, 1 / FPS]}
    ours = stoker.LeRobotDataset("local/v30", root=lerobot_v30.root, delta_timestamps=deltas,
                                 progress=False, output="numpy")
    spec = stoker.LeRobotDataset(lerobot_v30.root, stoker.WindowSpec(delta_timestamps=deltas),
                                 progress=False, output="numpy")
    assert ours.one_frame_cameras == {wrist} and spec.one_frame_cameras == set()
    item, windowed = ours[3], spec[3]
    assert item[wrist].shape == windowed[wrist].shape[1:] == (3, 64, 64)
    np.testing.assert_array_equal(item[wrist], windowed[wrist][0])
    assert item[f"{wrist}_is_pad"].shape == (1,)
    assert item[top].shape == (2, 3, 64, 64)
    assert item["observation.state"].shape == windowed["observation.state"].shape == (1, 6)
    loader = stoker.Loader(ours, batch_size=4, shuffle=False, threads=1, output="numpy")
    assert loader.fields[wrist][1] == (4, 3, 64, 64)
    batch = next(iter(loader))
    assert batch[wrist].shape == (4, 3, 64, 64) and batch[f"{wrist}_is_pad"].shape == (4, 1)
    for j, row in enumerate(batch["index"].tolist()):
        np.testing.assert_array_equal(batch[wrist][j], ours[row][wrist])
    assert batch["observation.state"].shape == (4, 1, 6)
    mixed = stoker.MultiDataset([ours, ours])
    batch = next(iter(stoker.Loader(mixed, batch_size=4, threads=1, output="numpy")))
    assert batch[wrist].shape == (4, 3, 64, 64)


# ---- Episodes ---------------------------------------------------------------------------------


def test_episodes_restrict_len_items_and_the_loader(lerobot_v30):
    top, _ = lerobot_v30.cameras
    lengths = lerobot_v30.lengths  # 5, 7, 6, 4, 8
    starts = np.concatenate([[0], np.cumsum(lengths)])
    chosen = [3, 1]
    ds = stoker.LeRobotDataset("local/v30", root=lerobot_v30.root, episodes=chosen,
                               delta_timestamps={top: [-1 / FPS, 0.0]}, progress=False, output="numpy")
    rows = np.concatenate([np.arange(starts[e], starts[e + 1]) for e in sorted(chosen)])
    assert len(ds) == len(rows) == lengths[1] + lengths[3]
    assert ds.num_episodes == 2 and ds.episodes == chosen
    np.testing.assert_array_equal(ds.rows, rows)
    for i, row in enumerate(rows):
        item = ds[i]
        episode = int(np.searchsorted(starts, row, side="right") - 1)
        # The dataset's own index and episode_index, as LeRobot gives them for a subset.
        assert item["index"] == row and item["episode_index"] == episode
        frame = row - starts[episode]
        marks = lerobot_datasets.read_marks(item[top], layout="NCHW")
        np.testing.assert_array_equal(marks[0], episode)
        np.testing.assert_array_equal(marks[1], [max(frame - 1, 0), frame])
    loader = stoker.Loader(ds, batch_size=3, seed=2, threads=2)
    seen = np.concatenate([b["index"].numpy() for b in loader])
    assert sorted(seen.tolist()) == rows.tolist()
    costs = ds.sample_costs()
    assert costs.shape == (len(ds),)
    with pytest.raises(stoker.DatasetError, match=r"episodes \[9\] are not in the dataset"):
        open_ds(lerobot_v30.root, episodes=[1, 9])
    with pytest.raises(stoker.InvalidArgumentError, match="more than once"):
        open_ds(lerobot_v30.root, episodes=[1, 1])


def test_a_subset_skips_to_samples_of_its_own_episodes(lerobot_v21, lerobot_copy):
    root = lerobot_copy(lerobot_v21)
    top = lerobot_v21.cameras[0]
    bad = os.path.join(root, os.path.relpath(lerobot_v21.video_paths[top][1], lerobot_v21.root))
    lerobot_datasets.corrupt_media_data(bad)
    ds = open_ds(root, episodes=[1, 2])  # episode 1 (rows 5-11) cannot be decoded
    loader = stoker.Loader(ds, batch_size=4, seed=0, threads=2, on_error="skip")
    seen = np.concatenate([b["index"].numpy() for b in loader])
    assert set(seen.tolist()) <= set(range(12, 18))  # replacements from episode 2 only
    assert loader.stats()["skipped"] == 7


# ---- Metadata ----------------------------------------------------------------------------------


def _episode_stats(values):
    return {"min": values.min(0), "max": values.max(0), "mean": values.mean(0),
            "std": values.std(0), "count": np.array([len(values)])}


def test_meta_is_lerobots_and_stats_aggregate_the_episodes(lerobot_v21, lerobot_copy):
    root = lerobot_copy(lerobot_v21)
    lengths = lerobot_v21.lengths
    per_episode = [lerobot_datasets.state_values(e, np.arange(n)).astype(np.float64)
                   for e, n in enumerate(lengths)]
    with open(os.path.join(root, lerobot_format.V21_EPISODES_STATS_PATH), "w") as f:
        for e, values in enumerate(per_episode):
            stats = {k: v.tolist() for k, v in _episode_stats(values).items()}
            f.write(json.dumps({"episode_index": e, "stats": {"observation.state": stats}}) + "\n")
    ds = open_ds(root)
    meta = ds.meta
    assert meta.fps == FPS and meta.total_frames == sum(lengths)
    assert meta.total_episodes == len(lengths)
    assert meta.camera_keys == list(lerobot_v21.cameras) == meta.video_keys
    assert meta.features["observation.state"]["shape"] == [6]
    assert meta.features["observation.state"]["names"][0] == "joint_0"
    assert meta.tasks == dict(enumerate(lerobot_v21.tasks))
    np.testing.assert_array_equal(meta.episodes["length"], lengths)
    assert meta.episodes[1]["dataset_from_index"] == lengths[0]
    assert meta.episodes[1]["tasks"] == [lerobot_v21.tasks[lerobot_v21.episode_task[1]]]
    # Aggregated as LeRobot does: equal to the statistics of all rows together.
    everything = np.concatenate(per_episode)
    stats = meta.stats["observation.state"]
    np.testing.assert_allclose(stats["mean"], everything.mean(0), rtol=1e-12)
    np.testing.assert_allclose(stats["std"], everything.std(0), rtol=1e-9)
    np.testing.assert_array_equal(stats["min"], everything.min(0))
    np.testing.assert_array_equal(stats["max"], everything.max(0))
    assert stats["count"].tolist() == [len(everything)]
    # The subset's metadata is the dataset's, as LeRobot's.
    assert open_ds(root, episodes=[2]).meta.total_frames == sum(lengths)


def test_v30_stats_come_from_stats_json_else_from_the_episode_columns(lerobot_v30, lerobot_copy):
    root = lerobot_copy(lerobot_v30)
    assert open_ds(root).meta.stats == {}
    episodes_file = os.path.join(root, "meta/episodes/chunk-000/file-000.parquet")
    files = sorted(os.path.join(d, f) for d, _, fs in os.walk(os.path.join(root, "meta/episodes"))
                   for f in fs)
    assert episodes_file in files
    actions = []
    for path in files:
        table = pq.read_table(path)
        columns = {name: [] for name in ("min", "max", "mean", "std", "count")}
        for e in table.column("episode_index").to_pylist():
            values = lerobot_datasets.action_values(e, np.arange(lerobot_v30.lengths[e]))
            actions.append(values.astype(np.float64))
            for name, value in _episode_stats(values.astype(np.float64)).items():
                columns[name].append(value.tolist())
        for name, values in columns.items():
            table = table.append_column(f"stats/action/{name}", pa.array(values))
        pq.write_table(table, path)
    stats = open_ds(root).meta.stats["action"]
    everything = np.concatenate(actions)
    np.testing.assert_allclose(stats["mean"], everything.mean(0), rtol=1e-12)
    np.testing.assert_allclose(stats["std"], everything.std(0), rtol=1e-9)
    lerobot_format.write_stats(root, {"action": {"mean": [1.5] * 6}})
    assert open_ds(root).meta.stats["action"]["mean"].tolist() == [1.5] * 6


# ---- Images and transforms ---------------------------------------------------------------------


def test_images_are_float_in_the_loader_too_and_uint8_is_an_option(lerobot_v21):
    top = lerobot_v21.cameras[0]
    ds = open_ds(lerobot_v21.root, delta_timestamps={top: [0.0]})
    batch = next(iter(stoker.Loader(ds, batch_size=4, shuffle=False)))
    # LeRobot's shape: a one-frame window squeezed.
    assert batch[top].dtype == torch.float32 and tuple(batch[top].shape) == (4, 3, 64, 64)
    fast = next(iter(stoker.Loader(ds, batch_size=4, shuffle=False,
                                   transforms=stoker.Transforms(dtype="uint8"))))
    assert fast[top].dtype == torch.uint8
    torch.testing.assert_close(fast[top].float() / 255, batch[top], rtol=0, atol=1e-7)
    as_bytes = open_ds(lerobot_v21.root, delta_timestamps={top: [0.0]}, image_dtype="uint8")
    assert next(iter(stoker.Loader(as_bytes, batch_size=4)))[top].dtype == torch.uint8
    with pytest.raises(ValueError, match="float dtype"):
        stoker.Loader(as_bytes, batch_size=4,
                      transforms=stoker.Transforms(mean=(0.5,) * 3, std=(0.5,) * 3))


def test_builtin_image_transforms_run_in_the_loader_and_in_items(lerobot_v21):
    top = lerobot_v21.cameras[0]
    transforms = stoker.Transforms(resize=(32, 40), mean=(0.5,) * 3, std=(0.25,) * 3)
    ds = open_ds(lerobot_v21.root, delta_timestamps={top: [0.0]}, image_transforms=transforms)
    batch = next(iter(stoker.Loader(ds, batch_size=3, shuffle=False, threads=2)))
    assert tuple(batch[top].shape) == (3, 3, 32, 40)
    for j in range(3):
        np.testing.assert_array_equal(ds[j][top], batch[top][j].numpy())
    random = open_ds(lerobot_v21.root, image_transforms=stoker.Transforms(hflip=0.5))
    with pytest.raises(stoker.InvalidArgumentError, match="stoker.Loader"):
        random[0]
    flipped = next(iter(stoker.Loader(random, batch_size=2)))
    assert flipped[top].dtype == torch.float32


def test_a_python_image_transform_runs_per_sample_and_is_timed(lerobot_v21):
    top, wrist = lerobot_v21.cameras
    calls = []

    def crop_and_darken(frames):
        calls.append(tuple(frames.shape))
        return frames[..., 8:24, 8:40] * 0.5

    plain = open_ds(lerobot_v21.root, delta_timestamps={top: [-1 / FPS, 0.0]})
    ds = open_ds(lerobot_v21.root, delta_timestamps={top: [-1 / FPS, 0.0]},
                 image_transforms=crop_and_darken)
    item = ds[4]
    assert calls == [(2, 3, 64, 64), (3, 64, 64)]  # each camera of the sample
    np.testing.assert_array_equal(item[top], plain[4][top][..., 8:24, 8:40] * 0.5)
    assert item[wrist].shape == (3, 16, 32)
    loader = stoker.Loader(ds, batch_size=4, shuffle=False, threads=2)
    batch = next(iter(loader))
    assert tuple(batch[top].shape) == (4, 2, 3, 16, 32)
    for j in range(4):
        np.testing.assert_array_equal(batch[top][j].numpy(), ds[j][top])
    assert loader.stats()["python_transform_s"] > 0
    with pytest.raises(TypeError, match="image_transforms"):
        open_ds(lerobot_v21.root, image_transforms=42)


# ---- Columns of records, dataset kinds ----------------------------------------------------------


def _language(episode, frame):
    return [{"role": "user", "content": f"episode {episode} frame {frame}", "time": frame / FPS}]


def test_language_columns_come_back_as_python_lists(lerobot_v30, lerobot_copy):
    root = lerobot_copy(lerobot_v30)
    kind = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string()),
                               ("time", pa.float64())]))
    for path in sorted({p.replace(lerobot_v30.root, root) for p in lerobot_v30.data_paths}):
        table = pq.read_table(path)
        values = [_language(e, f) for e, f in zip(table.column("episode_index").to_pylist(),
                                                 table.column("frame_index").to_pylist())]
        pq.write_table(table.append_column("language_persistent", pa.array(values, kind)), path)
    ds = open_ds(root)
    assert ds.record_columns == ("language_persistent",)
    item = ds[8]  # episode 1, frame 3
    assert item["language_persistent"] == _language(1, 3)
    batch = next(iter(stoker.Loader(ds, batch_size=5, shuffle=True, seed=1)))
    expected = [_language(int(e), int(f))
                for e, f in zip(batch["episode_index"], batch["frame_index"])]
    assert batch["language_persistent"] == expected


def _rewrite_info(root, **changes):
    path = os.path.join(root, lerobot_format.INFO_PATH)
    with open(path) as f:
        info = json.load(f)
    info.update(changes)
    with open(path, "w") as f:
        json.dump(info, f)


def test_other_storage_and_unknown_versions_are_refused_by_name(lerobot_v21, lerobot_copy):
    root = lerobot_copy(lerobot_v21)
    _rewrite_info(root, storage_format="zarr")
    with pytest.raises(stoker.DatasetError, match="storage_format 'zarr' is not supported"):
        open_ds(root)
    # Lance copies are of v3.0 datasets (tests/python/test_lance.py reads them).
    _rewrite_info(root, storage_format="lance")
    with pytest.raises(stoker.DatasetError, match="Lance dataset of codebase_version 'v2.1'"):
        open_ds(root)
    _rewrite_info(root, storage_format="parquet", codebase_version="v4.0")
    with pytest.raises(stoker.DatasetError, match="unknown codebase_version 'v4.0'"):
        open_ds(root)


def test_a_v20_dataset_reads_as_its_v21_twin(lerobot_v21, lerobot_copy):
    """v2.0 is v2.1 without per-episode statistics: the same files, read alike."""
    root = lerobot_copy(lerobot_v21)
    _rewrite_info(root, codebase_version="v2.0")
    lerobot_format.write_stats(root, {"action": {"mean": [0.25] * 6, "std": [1.0] * 6}})
    top = lerobot_v21.cameras[0]
    deltas = {top: [-1 / FPS, 0.0], "action": [0.0, 1 / FPS]}
    v20 = open_ds(root, delta_timestamps=deltas)
    v21 = open_ds(lerobot_v21.root, delta_timestamps=deltas)
    assert v20.meta.codebase_version == "v2.0" and len(v20) == len(v21)
    for i in range(len(v21)):
        a, b = v20[i], v21[i]
        assert set(a) == set(b)
        for key in a:
            np.testing.assert_array_equal(np.asarray(a[key]), np.asarray(b[key]), err_msg=key)
    assert v20.meta.stats["action"]["mean"].tolist() == [0.25] * 6


# ---- Samplers and the Loader's shape ------------------------------------------------------------


def test_episode_aware_sampler_drops_frames_filters_and_resumes(lerobot_v30):
    ds = open_ds(lerobot_v30.root)
    lengths = lerobot_v30.lengths  # 5, 7, 6, 4, 8
    starts = np.concatenate([[0], np.cumsum(lengths)])
    sampler = stoker.EpisodeAwareSampler(ds, episode_indices_to_use=[0, 2, 4],
                                         drop_n_first_frames=1, drop_n_last_frames=2)
    expected = [r for e in (0, 2, 4) for r in range(starts[e] + 1, starts[e + 1] - 2)]
    assert sampler.indices().tolist() == expected  # in order without shuffle
    # LeRobot's signature: per-episode bounds, episodes by position.
    lists = stoker.EpisodeAwareSampler(starts[:-1].tolist(), starts[1:].tolist(),
                                       episode_indices_to_use=[0, 2, 4],
                                       drop_n_first_frames=1, drop_n_last_frames=2)
    assert lists.indices().tolist() == expected
    shuffled = stoker.EpisodeAwareSampler(ds, drop_n_last_frames=1, shuffle=True, seed=4)
    epoch0, epoch1 = shuffled.indices(0), shuffled.indices(1)
    kept = sorted(r for e in range(5) for r in range(starts[e], starts[e + 1] - 1))
    assert sorted(epoch0.tolist()) == kept and epoch0.tolist() != epoch1.tolist()
    again = stoker.EpisodeAwareSampler(ds, drop_n_last_frames=1, shuffle=True, seed=4)
    assert again.indices(0).tolist() == epoch0.tolist()

    loader = stoker.Loader(ds, batch_size=4, sampler=shuffled, threads=2)
    whole = [b["index"].tolist() for b in loader]
    assert sorted(sum(whole, [])) == kept
    loader.set_epoch(0)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    del it
    resumed = stoker.Loader(ds, batch_size=4, sampler=stoker.EpisodeAwareSampler(
        ds, drop_n_last_frames=1, shuffle=True, seed=4), threads=1)
    resumed.load_state_dict(state)
    assert [b["index"].tolist() for b in resumed] == whole[1:]
    with pytest.raises(ValueError, match="unknown episodes"):
        stoker.EpisodeAwareSampler(ds, episode_indices_to_use=[7])


def test_iteration_restarts_the_epoch_and_the_loader_closes_as_a_context(lerobot_v21):
    ds = open_ds(lerobot_v21.root)
    with stoker.Loader(ds, batch_size=4, seed=1, threads=2) as loader:
        first = [b["index"].tolist() for b in loader]
        assert loader.epoch == 1
        loader.set_epoch(0)
        for batch in loader:
            break
        assert [b["index"].tolist() for b in loader] == first  # from the epoch's beginning
    assert loader._core is None or not loader._core.running


def test_threads_default_to_the_cores_shared_by_the_local_ranks(lerobot_v21, monkeypatch):
    ds = open_ds(lerobot_v21.root)
    cores = stoker.usable_cores()
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert stoker.Loader(ds, batch_size=2).threads == max(1, cores // 2)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(4 * cores))
    assert stoker.Loader(ds, batch_size=2).threads == 1
    monkeypatch.delenv("LOCAL_WORLD_SIZE")
    assert stoker.Loader(ds, batch_size=2).threads == cores


def test_the_loader_is_a_torchdata_node_whose_state_is_the_loaders(lerobot_v21):
    nodes = pytest.importorskip("torchdata.nodes")
    from stoker.integrations.torchdata import loader_node

    ds = open_ds(lerobot_v21.root)
    reference = [b["index"].tolist() for b in stoker.Loader(ds, batch_size=4, seed=3)]
    pipeline = nodes.Loader(loader_node(stoker.Loader(ds, batch_size=4, seed=3, threads=2)))
    it = iter(pipeline)
    taken = [next(it)["index"].tolist() for _ in range(2)]
    state = pipeline.state_dict()
    assert taken == reference[:2]
    again = nodes.Loader(loader_node(stoker.Loader(ds, batch_size=4, seed=3, threads=1)))
    again.load_state_dict(state)
    assert [b["index"].tolist() for b in again] == reference[2:]
