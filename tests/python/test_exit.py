"""The interpreter exits cleanly after a typical stoker workload: nothing left running in
native code (which aborts the process), no native object left alive (which nanobind reports
as "leaked instances")."""

import pytest
from child import describe, run_python

pytest.importorskip("torch")

WORKLOAD = """
    import pickle, sys, threading, time
    import numpy as np
    import torch
    import stoker

    root, top = sys.argv[1], sys.argv[2]
    spec = stoker.WindowSpec(delta_timestamps={top: [-0.1, 0.0], "action": [0.0, 1 / 30]},
                             size=(32, 32))
    ds = stoker.LeRobotDataset(root, spec, progress=False)
    items = [ds[i] for i in range(0, len(ds), 3)]
    again = pickle.loads(pickle.dumps(ds))[4]
    costs = ds.sample_costs()

    reader = stoker.VideoReader(ds.index.video_files[0])
    frames = reader.get_frames([0, 2, 1], size=(16, 16))
    in_memory = stoker.VideoReader(open(ds.index.video_files[1], "rb").read(), name="clip")
    in_memory = pickle.loads(pickle.dumps(in_memory))
    try:
        reader.get_frames([10_000])
    except stoker.InvalidArgumentError as error:
        failure = error  # kept, with its traceback, until exit

    samplers = [stoker.RandomSampler(len(ds), seed=1), stoker.DistributedSampler(len(ds)),
                stoker.WeightedSampler(np.ones(len(ds)), seed=2),
                stoker.LoadBalancedSampler(costs, batch_size=4)]
    orders = [list(sampler) for sampler in samplers]
    states = [sampler.state_dict() for sampler in samplers]

    transforms = stoker.Transforms(random_resized_crop=(24, 24), hflip=0.5, dtype="float32",
                                   mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25))
    loader = stoker.Loader(ds, batch_size=4, seed=0, threads=2, transforms=transforms)
    for epoch in range(2):
        for batch in loader:
            loss = batch[top].mean()
    kept = next(iter(loader))  # a batch alive at exit
    stats = loader.stats()
    weighted = stoker.Loader(ds, batch_size=4, sampler=samplers[2], threads=1)
    suspended = iter(weighted)
    next(suspended)  # an iteration left open at exit

    # A daemon thread waiting for batches when the interpreter exits.
    background = stoker.Loader(ds, batch_size=2, threads=1, prefetch=1,
                               transforms=stoker.Transforms(resize=(480, 640)))
    def consume():
        while True:
            for batch in background:
                pass
    threading.Thread(target=consume, daemon=True).start()
    time.sleep(0.2)
    print("workload done", flush=True)
"""


def test_a_typical_workload_exits_cleanly(lerobot_v30):
    child = run_python(WORKLOAD, lerobot_v30.root, lerobot_v30.cameras[0])
    assert child.returncode == 0, describe(child)
    assert "workload done" in child.stdout, describe(child)
    assert "leaked" not in child.stderr, describe(child)
    assert "terminate called" not in child.stderr, describe(child)


CLOSED_FROM_A_DAEMON_THREAD = """
    import sys, threading, time
    import stoker
    from stoker.datasets.lerobot.dataset import LeRobotDataset, WindowSpec

    root, top = sys.argv[1], sys.argv[2]
    # Big frames: the loader's threads are inside a decode pass when close() stops them, so
    # close() is still joining them when the main thread, told of the close, moves on.
    ds = LeRobotDataset(root, WindowSpec(delta_timestamps={top: [-0.5, -0.2, 0.0]},
                                         size=(720, 960)), progress=False)

    def close_later(loader):
        time.sleep(0.3)
        loader.close()

    for attempt in range(3):
        loader = stoker.Loader(ds, batch_size=2, threads=2, output="numpy")
        threading.Thread(target=close_later, args=(loader,), daemon=True).start()
        try:
            while True:
                for batch in loader:
                    pass
        except RuntimeError as error:
            print(attempt, error, flush=True)
        del loader
    print("workload done", flush=True)
"""


def test_a_loader_closed_from_a_daemon_thread_exits_cleanly(lerobot_large):
    """A daemon thread still inside close() (joining the loader's threads, the GIL released)
    when the interpreter finalizes was killed on its way back into Python: the unwinding met a
    frame that may not throw, and the process aborted ("terminate called without an active
    exception") in 2 of 3 runs. Five runs, each of which must exit cleanly."""
    for run in range(5):
        child = run_python(CLOSED_FROM_A_DAEMON_THREAD, lerobot_large.root,
                           lerobot_large.cameras[0])
        assert child.returncode == 0, f"run {run}: " + describe(child)
        assert "workload done" in child.stdout, describe(child)
        assert child.stdout.count("the loader was closed") == 3, describe(child)
        assert "terminate called" not in child.stderr, describe(child)
