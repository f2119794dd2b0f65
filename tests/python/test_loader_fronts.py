"""One Loader, one behaviour: stoker.Loader over a LeRobot dataset, over a ShardDataset and over
a mix of both (the same class, the same native engine) answer the same misuse the same way. Iterated by two threads, the
second gets an error naming the first; closed from another thread, the consumer gets an error
saying so (never a raw executor error, never a finished epoch); a new iteration on the same
thread ends the previous one; both are context managers that close on exit. Each test runs
against both kinds of loader, so that they stay alike."""

import io
import os
import random
import subprocess
import sys
import tarfile
import threading
import time

import numpy as np
import pytest
from PIL import Image as PILImage

import stoker
from stoker import _core
from stoker.datasets.lerobot.dataset import LeRobotDataset, WindowSpec

KINDS = ["lerobot", "shards", "mix"]


def write_shards(folder, n, images=False):
    """One tar shard of ``n`` samples: a caption each, and a small JPEG with ``images``."""
    path = os.path.join(folder, "fronts.tar")
    rng = np.random.default_rng(0)
    with tarfile.open(path, "w") as tar:
        for i in range(n):
            members = {"txt": f"caption {i}".encode()}
            if images:
                out = io.BytesIO()
                pixels = rng.integers(0, 255, (48, 64, 3), dtype=np.uint8)
                PILImage.fromarray(pixels).save(out, format="JPEG", quality=90)
                members["jpg"] = out.getvalue()
            for field, data in members.items():
                info = tarfile.TarInfo(f"s{i:05d}.{field}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture
def make_loader(request, tmp_path, monkeypatch):
    """make_loader(slow=False, **kwargs) -> a loader of the kind the test is parametrized with,
    of many batches; ``slow``: each batch takes a while to build (big frames, one thread), so
    the consumer spends its time waiting for the next."""
    kind = request.param
    monkeypatch.setenv("STOKER_CACHE_DIR", str(tmp_path / "cache"))

    def lerobot(slow):
        written = request.getfixturevalue("lerobot_large" if slow else "lerobot_v21")
        top = written.cameras[0]
        spec = WindowSpec(
            delta_timestamps={top: [-0.5, -0.2, 0.0] if slow else [0.0]},
            size=(720, 960) if slow else None,
        )
        return LeRobotDataset(written.root, spec, progress=False, output="numpy")

    def shards(slow, kwargs):
        if slow and not hasattr(_core, "decode_images"):
            pytest.skip("stoker built without the image decoder")
        url = write_shards(str(tmp_path), 160 if slow else 18, images=slow)
        spec = {"caption": stoker.Text()}
        if slow:
            spec["image"] = stoker.Image("jpg", size=(720, 960))
            kwargs["transforms"] = stoker.Transforms(dtype="float32")
        return stoker.ShardDataset(url, spec)

    def make(slow=False, **kwargs):
        kwargs = {"batch_size": 2, "threads": 1, "prefetch": 1, "output": "numpy", **kwargs}
        if kind == "lerobot":
            dataset = lerobot(slow)
        elif kind == "shards":
            dataset = shards(slow, kwargs)
        else:
            dataset = stoker.MultiDataset([lerobot(slow), shards(slow, kwargs)])
        loader = stoker.Loader(dataset, **kwargs)
        assert type(loader) is stoker.Loader  # one class for every dataset kind
        return loader

    return make


def native_threads():
    return len(os.listdir("/proc/self/task"))


@pytest.mark.parametrize("make_loader", KINDS, indirect=True)
def test_a_second_thread_iterating_any_loader_gets_an_error_naming_the_thread_that_iterates(
    make_loader,
):
    loader = make_loader()
    for attempt in range(3):
        iterating, answers = threading.Event(), []

        def first():
            for _ in loader:
                iterating.set()
                time.sleep(0.01)  # a slow step: the other thread comes while this one iterates

        def second():
            iterating.wait()
            try:
                answers.append(f"{sum(1 for _ in loader)} batches")
            except RuntimeError as error:
                answers.append(str(error))

        a = threading.Thread(target=first, name=f"trainer-{attempt}")
        b = threading.Thread(target=second, name="intruder")
        a.start()
        b.start()
        a.join(60)
        b.join(60)
        assert not a.is_alive() and not b.is_alive()
        assert answers[0].startswith(
            f"this Loader is being iterated by thread 'trainer-{attempt}'"
        ), answers[0]
        # Once the first thread's iteration is over, another thread may iterate: a whole epoch.
        counts = []
        c = threading.Thread(target=lambda: counts.append(sum(1 for _ in loader)))
        c.start()
        c.join(60)
        assert counts == [len(loader)]


@pytest.mark.parametrize("make_loader", KINDS, indirect=True)
def test_close_from_another_thread_ends_any_loaders_consumer_with_a_clear_error(make_loader):
    rng = random.Random(0)
    for attempt in range(6):
        before = native_threads()
        loader = make_loader(slow=True, seed=attempt)
        batches = iter(loader)
        next(batches)
        closed_at = []

        def close():
            closed_at.append(time.monotonic())
            loader.close()

        closer = threading.Timer(rng.uniform(0.0, 0.03), close)
        closer.start()
        taken = 0
        try:
            for _ in batches:
                taken += 1
            outcome = "finished the epoch"
        except RuntimeError as error:
            outcome = str(error)
        ended = time.monotonic()
        closer.join(60)
        assert outcome.startswith("the loader was closed (Loader.close() on thread "), outcome
        assert ended - closed_at[0] < 5, f"the consumer ended {ended - closed_at[0]} s after close"
        assert taken < len(loader) - 1, f"attempt {attempt}: the close came after the epoch"
        deadline = time.monotonic() + 5  # a joined thread may linger a moment in the kernel
        while native_threads() > before and time.monotonic() < deadline:
            time.sleep(0.01)
        assert native_threads() <= before, "close() left threads running"
        again = iter(loader)
        assert next(again)  # a closed loader iterates again
        loader.close()


@pytest.mark.parametrize("make_loader", KINDS, indirect=True)
def test_a_new_iteration_on_the_same_thread_ends_the_previous_one_of_any_loader(make_loader):
    loader = make_loader()
    old = iter(loader)
    next(old)
    new = iter(loader)
    next(new)
    with pytest.raises(RuntimeError, match="another iteration of this loader started"):
        next(old)
    assert sum(1 for _ in new) > 0  # the new one goes on


@pytest.mark.parametrize("make_loader", KINDS, indirect=True)
def test_any_loader_is_a_context_manager_that_closes_on_exit(make_loader):
    before = native_threads()
    with make_loader() as loader:
        batches = iter(loader)
        next(batches)
    with pytest.raises(RuntimeError, match=r"the loader was closed \(Loader.close\(\) on thread"):
        next(batches)
    deadline = time.monotonic() + 5
    while native_threads() > before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert native_threads() <= before, "leaving the with block left threads running"


@pytest.mark.parametrize("make_loader", KINDS, indirect=True)
def test_device_means_the_same_for_any_loader(make_loader):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        with pytest.raises(
            ValueError, match=r"device='cuda', but torch.cuda.is_available\(\) is False"
        ):
            make_loader(device="cuda", output="auto")
        return
    loader = make_loader(device="cuda", output="auto")
    batch = next(iter(loader))
    assert all(v.is_cuda for v in batch.values() if isinstance(v, torch.Tensor))
    loader.close()


@pytest.mark.parametrize("make_loader", KINDS, indirect=True)
def test_any_loaders_threads_default_to_the_cores_shared_by_the_nodes_ranks(
    make_loader, monkeypatch
):
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert make_loader(threads=None).threads == max(1, _core.usable_cores() // 2)


@pytest.mark.parametrize("make_loader", KINDS, indirect=True)
def test_any_loader_refuses_another_configurations_state_with_one_error_type(make_loader):
    state = make_loader(seed=1).state_dict()
    with pytest.raises(stoker.InvalidArgumentError, match="seed"):
        make_loader(seed=2).load_state_dict(state)


@pytest.mark.parametrize("make_loader", KINDS, indirect=True)
def test_observers_see_any_loaders_iterations(make_loader):
    class Counting(stoker.LoaderObserver):
        def __init__(self):
            self.events = []

        def iteration_started(self, now):
            self.events.append("started")

        def batch_received(self, batch, now):
            self.events.append("batch")

        def iteration_ended(self, now):
            self.events.append("ended")

    loader = make_loader()
    seen = Counting()
    loader.add_observer(seen)
    batches = sum(1 for _ in loader)
    assert seen.events == ["started"] + ["batch"] * batches + ["ended"]


@pytest.mark.parametrize("make_loader", KINDS, indirect=True)
def test_profile_and_diagnose_measure_any_loader(make_loader):
    loader = make_loader()
    with stoker.profile(loader, report=None, show=False) as prof:
        for k, _ in enumerate(loader):
            time.sleep(0.002)
            if k == 5:
                break
    assert len(prof.data_wait) == 6
    assert prof.report().bound in ("compute", "input")
    report = stoker.diagnose(make_loader(), step=2, steps=6, sweep=False, progress=False)
    assert report.bound in ("compute", "input")
    assert "What to do" in report.summary()


@pytest.mark.parametrize("make_loader", KINDS, indirect=True)
def test_every_loader_is_one_class_with_its_stats(make_loader):
    loader = make_loader()
    assert type(loader) is stoker.Loader
    batches = sum(1 for _ in loader)
    stats = loader.stats()
    assert stats["batches"] == batches and stats["pool_batches"] == loader._core.pipeline_depth + 2
    assert stats["memory_bound_bytes"] >= stats["batch_bytes"] > 0


def test_stoker_doctor_measures_a_shard_pattern(tmp_path, monkeypatch):
    if not hasattr(_core, "decode_images"):
        pytest.skip("stoker built without the image decoder")
    monkeypatch.setenv("STOKER_CACHE_DIR", str(tmp_path / "cache"))
    url = write_shards(str(tmp_path), 24, images=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run(
        [sys.executable, "-m", "stoker", "doctor", url, "--batch-size", "4", "--quick",
         "--budget", "6", "--step-ms", "20", "--no-sweep", "--report", str(tmp_path / "r")],
        capture_output=True, text=True, env=env, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "-bound" in done.stdout and "fronts.tar" in done.stdout
