"""stoker on Ray Data: stoker.integrations.ray.read_lerobot's rows are the Loader's (as multisets per epoch
and row for row per read task), bad episodes raise or are skipped as in the Loader, a worker
killed mid-read changes nothing, a stalled object store ends in an error or in counted skips,
and stoker etl on Ray tasks writes the same bytes as a local run. One local cluster of 2 CPUs
for the module (several nodes: test_ray_cluster.py)."""

import collections
import glob
import os
import re
import signal
import threading
import time

import lerobot_datasets
import numpy as np
import pytest
from ray_task_log import event_log

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
    ds = stoker.LeRobotDataset(lerobot_v30.root, spec_for(lerobot_v30.cameras), progress=False, output="numpy")
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
    ds = stoker.LeRobotDataset(root, spec_for(lerobot_v21.cameras), progress=False, output="numpy")
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

    ds = stoker.LeRobotDataset(lerobot_v30.root, spec_for(lerobot_v30.cameras), progress=False, output="numpy")
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


# ---------------------------------------------------------------------------------------------
# Faults: a worker killed mid-read, an object store that stops answering


def test_a_worker_killed_mid_read_loses_and_repeats_no_row(lerobot_v30, tmp_path):
    """Read task 1 stops after handing its first block to Ray and waits there, once (its first
    try claims a marker file); the test kills its worker by PID with SIGKILL. Ray runs the task
    again in another worker: every row once, in the fault-free order (the Loader's, which the
    first test shows a fault-free read gives), pixels and all."""
    ds = stoker.LeRobotDataset(lerobot_v30.root, spec_for(lerobot_v30.cameras), progress=False, output="numpy")
    log, events = event_log(str(tmp_path / "events.jsonl"))
    claimed, pid_file = str(tmp_path / "claimed"), str(tmp_path / "pid")

    def hook(event):
        log(event)
        if event.task != 1 or event.event != "block" or event.rows <= 4:
            return
        try:  # the first try of task 1 only, as it builds its second block
            os.close(os.open(claimed, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
        with open(pid_file + ".part", "w") as f:
            f.write(str(event.pid))
        os.rename(pid_file + ".part", pid_file)
        time.sleep(120)  # killed here

    killed = []

    def kill_when_parked():
        deadline = time.monotonic() + 60
        while not os.path.exists(pid_file) and time.monotonic() < deadline:
            time.sleep(0.01)
        if os.path.exists(pid_file):
            pid = int(open(pid_file).read())
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    killer = threading.Thread(target=kill_when_parked, daemon=True)
    killer.start()
    rd = stoker_ray.read_lerobot(ds, seed=5, samples_per_task=8, rows_per_block=4,
                                 threads_per_task=1, num_cpus=1, task_hook=hook)
    got = list(rd.iter_batches(batch_size=None, batch_format="numpy"))
    killer.join(5)
    assert len(killed) == 1
    # Task 1 ran twice: the first try, killed after one block, and another try to its end.
    tries = {e["pid"]: e for e in events() if e["task"] == 1}
    assert killed[0] in tries and tries[killed[0]]["event"] == "block"
    assert tries[killed[0]]["rows"] == 8
    assert [e["event"] for p, e in tries.items() if p != killed[0]] == ["end"]

    expected = loader_batches(ds, batch_size=4, seed=5)
    mine = {k: np.concatenate([b[k] for b in got]) for k in got[0]}
    assert mine["index"].tolist() == [i for b in expected for i in b["index"].tolist()]
    assert sorted(mine["index"].tolist()) == list(range(len(ds)))
    for key in expected[0]:
        np.testing.assert_array_equal(mine[key], np.concatenate([b[key] for b in expected]),
                                      err_msg=key)


STALL_DEADLINE_S = 0.5  # total_timeout_s of every request: all its tries, within this


def stalled_read_options(s3_server, proxy):
    """Options reaching the store through ``proxy``, explicit (the workers do not see the
    test's environment) and with a small deadline."""
    return stoker.S3Options(
        access_key_id=s3_server.access_key_id, secret_access_key=s3_server.secret_access_key,
        endpoint_url=proxy.endpoint, region="us-east-1", max_attempts=2,
        total_timeout_s=STALL_DEADLINE_S, low_speed_timeout_s=STALL_DEADLINE_S,
        connect_timeout_s=STALL_DEADLINE_S,
        backoff_base_s=0.01, backoff_max_s=0.05)


def finished_within(seconds, call):
    """call()'s value or what it raised, and its wall time; fails (instead of hanging the
    suite) when it has not ended after ``seconds``."""
    done = {}

    def run():
        started = time.monotonic()
        try:
            done["value"] = call()
        except BaseException as error:  # noqa: BLE001 - handed to the test
            done["error"] = error
        done["seconds"] = time.monotonic() - started

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"still waiting after {seconds} s"
    return done


def test_a_stalled_store_ends_in_an_error_naming_sample_and_url_or_in_counted_skips(
        s3_server, fault_proxy, lerobot_v21, tmp_path):
    """The video of episode 1's top camera stops answering in the store, once before any byte
    (every request to it accepted, never answered) and once mid-body (the headers and half the
    body, then nothing): a Ray read task's request gives up within its deadline and the read
    ends in the Loader's error naming the sample, episode and URL; with on_error="skip" it
    finishes, the task's hook counting every sample of episode 1 skipped."""
    s3_server.create_bucket("stoker-ray")
    s3_server.upload_tree(lerobot_v21.root, "stoker-ray", "v21")
    top = lerobot_v21.cameras[0]
    key = "v21/" + os.path.relpath(lerobot_v21.video_paths[top][1], lerobot_v21.root)
    url = f"s3://stoker-ray/{key}"
    options = stalled_read_options(s3_server, fault_proxy)
    spec = spec_for(lerobot_v21.cameras)
    # Opened here before the stall (the index from the store); the workers open the videos.
    ds = stoker.LeRobotDataset("s3://stoker-ray/v21", spec, storage_options=options,
                               progress=False, episodes=[1], output="numpy")
    episode_1 = set(range(5, 12))

    fault_proxy.set_faults(stall=1.0, stall_hang=True, stall_mid_body=True, paths=re.escape(key))
    read = stoker_ray.read_lerobot(ds, seed=0, shuffle=False, samples_per_task=2,
                                   threads_per_task=1, num_cpus=1)
    done = finished_within(60, read.take_all)
    stalls = fault_proxy.faults_injected.get("stall", 0)
    message = str(done.get("error"))
    assert isinstance(done.get("error"), Exception), done
    assert re.search(r"sample (\d+) \(episode 1, batch \d+ of epoch 0\)", message), message
    assert int(re.search(r"sample (\d+) \(episode 1", message).group(1)) in episode_1
    # Given up by the stall detector or by the deadline, and the message says which.
    assert url in message, message
    assert "stalled" in message or "the request's deadline ran out" in message, message
    tried = re.search(r"failed after \d+ attempts? in ([\d.]+) s", message)
    assert tried and float(tried.group(1)) <= STALL_DEADLINE_S + 0.2, message
    # Every stalled request was given up within its deadline: the read ends when they are.
    assert stalls >= 1 and done["seconds"] < stalls * STALL_DEADLINE_S + 10

    log, events = event_log(str(tmp_path / "events.jsonl"))
    both = stoker.LeRobotDataset("s3://stoker-ray/v21", spec, storage_options=options,
                                 progress=False, episodes=[0, 1], output="numpy")
    fault_proxy.set_faults(stall=1.0, stall_hang=True, paths=re.escape(key))
    before = fault_proxy.faults_injected.get("stall", 0)
    read = stoker_ray.read_lerobot(both, seed=0, samples_per_task=4, threads_per_task=1,
                                   num_cpus=1, on_error="skip", task_hook=log)
    done = finished_within(60, read.take_all)
    stalls = fault_proxy.faults_injected.get("stall", 0) - before
    rows = done["value"]
    assert len(rows) == len(both) == 12
    assert {int(r["index"]) for r in rows} <= set(range(5))
    ends = [e for e in events() if e["event"] == "end"]
    assert sorted(e["task"] for e in ends) == [0, 1, 2]
    assert sum(e["skipped"] for e in ends) == len(episode_1)
    assert stalls >= 1 and done["seconds"] < stalls * STALL_DEADLINE_S + 10
