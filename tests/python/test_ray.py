"""stoker on Ray Data: stoker.integrations.ray.read_lerobot's rows are the Loader's (as multisets per epoch
and row for row per read task), bad episodes raise or are skipped as in the Loader, and
stoker etl on Ray tasks writes the same bytes as a local run. One local cluster of 2 CPUs for
the module."""

import collections
import glob
import os

import lerobot_datasets
import numpy as np
import pytest

import stoker
from stoker.writers import etl

ray = pytest.importorskip("ray")
stoker_ray = pytest.importorskip("stoker.integrations.ray")


@pytest.fixture(scope="module", autouse=True)
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": os.environ.get("PYTHONPATH", "")}})
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.execution_options.preserve_order = True
    yield
    ray.shutdown()


def spec_for(cameras):
    return stoker.WindowSpec(
        delta_timestamps={cameras[0]: [-1 / 30, 0.0], "action": [0.0, 1 / 30, 2 / 30]},
        size=(32, 32))


def loader_batches(ds, **kwargs):
    loader = stoker.Loader(ds, output="numpy", threads=2, rank=0, world_size=1, **kwargs)
    return [{k: np.array(v) for k, v in b.items() if k != "task"} for b in loader]


def test_rows_are_the_loaders_row_for_row_per_task_and_as_multisets(lerobot_v30):
    ds = stoker.LeRobotDataset(lerobot_v30.root, spec_for(lerobot_v30.cameras), progress=False)
    transforms = stoker.Transforms(random_resized_crop=(24, 24), hflip=0.5, dtype="float32")
    blocks = loader_batches(ds, batch_size=4, seed=7, transforms=transforms)
    # 30 samples in blocks of 4: tasks of 2 blocks, the last task one short block.
    rd = stoker_ray.read_lerobot(ds, seed=7, epoch=0, samples_per_task=8, rows_per_block=4,
                                 transforms=transforms, threads_per_task=1, num_cpus=1)
    got = list(rd.iter_batches(batch_size=None, batch_format="numpy"))
    # Each Loader batch is one block, neither merged nor split by Ray (so it streams), and the
    # tasks' blocks in task order are the Loader's batches in order: task k's are 2k and 2k + 1.
    assert [len(b["index"]) for b in got] == [len(b["index"]) for b in blocks]
    mine = {k: np.concatenate([b[k] for b in got]) for k in got[0]}
    theirs = {k: np.concatenate([b[k] for b in blocks]) for k in blocks[0]}
    assert set(mine) == set(theirs) and len(mine["index"]) == len(ds)
    for key in theirs:
        np.testing.assert_array_equal(mine[key], theirs[key], err_msg=key)
    assert mine["observation.images.top"].dtype == np.float32
    assert mine["observation.images.top"].shape == (len(ds), 2, 3, 24, 24)

    # Another epoch: another order, each sample once, as the Loader's next epoch.
    loader = stoker.Loader(ds, batch_size=4, seed=7, output="numpy", threads=2)
    loader.set_epoch(1)
    expected = collections.Counter(int(i) for b in loader for i in b["index"])
    rows = stoker_ray.read_lerobot(ds, seed=7, epoch=1, samples_per_task=8).take_all()
    assert collections.Counter(int(r["index"]) for r in rows) == expected
    assert sorted(expected) == list(range(len(ds))) and set(expected.values()) == {1}
    assert [int(r["index"]) for r in rows] != sorted(expected)

    # The block-level shuffle: the same multiset, decoded in runs of dataset order.
    rows = stoker_ray.read_lerobot(ds, shuffle="block", seed=7, samples_per_task=8,
                                   rows_per_block=4, task_text=True).take_all()
    assert sorted(int(r["index"]) for r in rows) == list(range(len(ds)))
    assert [int(r["index"]) for r in rows] != list(range(len(ds)))
    first = next(r for r in rows if int(r["index"]) == 0)
    assert first["task"] == ds[0]["task"]


def test_torch_batches_have_lerobots_keys(lerobot_v30):
    torch = pytest.importorskip("torch")
    spec = spec_for(lerobot_v30.cameras)
    rd = stoker_ray.read_lerobot(lerobot_v30.root, spec, samples_per_task=16)
    batch = next(iter(rd.iter_torch_batches(batch_size=6)))
    top = lerobot_v30.cameras[0]
    # float32 in [0, 1], channels first: the dataset's default, as LeRobot returns images
    assert batch[top].dtype == torch.float32 and tuple(batch[top].shape) == (6, 2, 3, 32, 32)
    assert tuple(batch["action"].shape) == (6, 3, 6) and batch["action_is_pad"].dtype == torch.bool
    assert {"index", "episode_index", "frame_index", "timestamp", "task_index"} <= set(batch)


def test_a_bad_episode_raises_with_the_loaders_message_or_is_skipped(lerobot_v21, lerobot_copy):
    root = lerobot_copy(lerobot_v21)
    top = lerobot_v21.cameras[0]
    bad = os.path.join(root, os.path.relpath(lerobot_v21.video_paths[top][1], lerobot_v21.root))
    lerobot_datasets.corrupt_media_data(bad)
    ds = stoker.LeRobotDataset(root, spec_for(lerobot_v21.cameras), progress=False)
    episode_1 = set(range(5, 12))  # episode lengths 5, 7, 6

    with pytest.raises(stoker.Error) as loader_raised:
        for _ in stoker.Loader(ds, batch_size=4, seed=0, threads=1, shuffle=False):
            pass
    with pytest.raises(Exception) as raised:
        stoker_ray.read_lerobot(ds, seed=0, shuffle=False, samples_per_task=4).take_all()
    assert str(loader_raised.value) in str(raised.value)
    assert "episode 1" in str(raised.value) and bad in str(raised.value)

    rows = stoker_ray.read_lerobot(ds, seed=0, samples_per_task=4, on_error="skip").take_all()
    assert len(rows) == len(ds)
    assert not {int(r["index"]) for r in rows} & episode_1
    expected = loader_batches(ds, batch_size=4, seed=0, on_error="skip")
    assert sorted(int(r["index"]) for r in rows) == sorted(
        int(i) for b in expected for i in b["index"])


def test_etl_on_ray_writes_the_same_bytes_as_a_local_run(lerobot_v30, tmp_path):
    local = etl.materialize(lerobot_v30.root, str(tmp_path / "local"), size=(32, 48), gop=4,
                            workers=2, progress=False)
    on_ray = etl.materialize(lerobot_v30.root, str(tmp_path / "ray"), size=(32, 48), gop=4,
                             progress=False, ray=True)
    assert on_ray.verified and on_ray.units_transcoded == local.units_transcoded > 0

    def files(root):
        paths = glob.glob(os.path.join(root, "videos", "**", "*.mp4"), recursive=True)
        paths += glob.glob(os.path.join(root, "data", "**", "*.parquet"), recursive=True)
        return {os.path.relpath(p, root): open(p, "rb").read() for p in sorted(paths)}

    mine, theirs = files(tmp_path / "ray"), files(tmp_path / "local")
    assert sorted(mine) == sorted(theirs)
    assert [p for p in mine if mine[p] != theirs[p]] == []

    # Resumable as a local run: a run with its videos gone redoes just those.
    removed = sorted(glob.glob(str(tmp_path / "ray" / "videos" / "**" / "*.mp4"),
                               recursive=True))[:2]
    for path in removed:
        os.remove(path)
    again = etl.materialize(lerobot_v30.root, str(tmp_path / "ray"), size=(32, 48), gop=4,
                            progress=False, ray=True)
    assert again.units_transcoded == 2 and again.units_resumed == local.units_transcoded - 2
    assert files(tmp_path / "ray") == theirs


def test_doctor_sweeps_the_cpus_of_read_tasks_and_names_a_line_of_the_table(lerobot_v30,
                                                                             tmp_path):
    from stoker.doctor import ray_sweep

    ds = stoker.LeRobotDataset(lerobot_v30.root, spec_for(lerobot_v30.cameras), progress=False)
    result = ray_sweep.sweep(ds, address="local", batch_size=2, step_ms=5, steps=4)
    assert [p.cpus for p in result.points] == [1, 2]
    assert all(p.steps == 4 and p.samples_per_s > 0 for p in result.points)
    assert result.verdict in ("scale-pool", "run-etl", "stop-tuning")
    assert result.verdict in result.summary()
    path = result.write_report(tmp_path)
    assert os.path.exists(path) and os.path.exists(tmp_path / "ray_sweep.json")

    # The decision table, on given points.
    def verdict(rates_and_waits):
        made = ray_sweep.RaySweep("x", 2, 5.0, 1, 4, [
            ray_sweep.RayPoint(c, c, rate, wait, 1.0, 4)
            for c, (rate, wait) in zip([1, 2, 4], rates_and_waits)])
        made.conclude()
        return made.verdict

    assert verdict([(10, 0.8), (19, 0.6), (36, 0.4)]) == "scale-pool"
    assert verdict([(10, 0.8), (14, 0.7), (14.5, 0.7)]) == "run-etl"
    assert verdict([(10, 0.2), (11, 0.05), (11.2, 0.04)]) == "stop-tuning"


def test_shards_are_read_by_the_same_read_tasks_row_for_row(tmp_path):
    """stoker.integrations.ray reads a ShardDataset through the read tasks of read_lerobot: the rows of a
    one-rank Loader of the same seed and epoch, block for block, every sample once."""
    import io
    import tarfile

    path = tmp_path / "rows.tar"
    with tarfile.open(path, "w") as tar:
        for i in range(30):
            for field, data in (("txt", f"caption {i}".encode()), ("cls", str(i % 4).encode())):
                info = tarfile.TarInfo(f"s{i:03d}.{field}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    spec = {"caption": stoker.Text(), "label": stoker.Label()}
    ds = stoker.ShardDataset(str(path), spec, cache_dir=tmp_path / "cache")
    for epoch in (0, 1):
        loader = stoker.Loader(ds, batch_size=4, seed=3, output="numpy", threads=1)
        loader.set_epoch(epoch)
        blocks = list(loader)
        rd = stoker_ray.read_shards(ds, seed=3, epoch=epoch, samples_per_task=8,
                                    rows_per_block=4, threads_per_task=1, num_cpus=1)
        got = list(rd.iter_batches(batch_size=None, batch_format="numpy"))
        # Rows of text have a size known only once read: Ray may cut a block, never reorder.
        assert sum(len(b["__index__"]) for b in got) == sum(len(b["__index__"]) for b in blocks)
        index = np.concatenate([b["__index__"] for b in got])
        assert index.tolist() == [i for b in blocks for i in b["__index__"].tolist()]
        assert sorted(index.tolist()) == list(range(30))
        assert [str(c) for b in got for c in b["caption"]] == [
            c for b in blocks for c in b["caption"]
        ]
        np.testing.assert_array_equal(np.concatenate([b["label"] for b in got]), index % 4)
