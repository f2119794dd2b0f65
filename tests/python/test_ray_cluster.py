"""stoker on a Ray cluster of several nodes: three nodes of one CPU each on this machine
(ray.cluster_utils.Cluster), in a pytest process of its own (see the Makefile). The rows are the
in-process Loader's for the same seed, row for row, as on one node (test_ray.py shows the
one-node read gives the Loader's rows too), with read tasks run on several nodes; and
``stoker doctor --ray`` reports the read tasks node by node."""

import json
import os

import numpy as np
import pytest
from ray_task_log import event_log

import stoker

ray = pytest.importorskip("ray")
stoker_ray = pytest.importorskip("stoker.integrations.ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")

NODES = 3


@pytest.fixture(scope="module")
def cluster():
    made = cluster_utils.Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "include_dashboard": False},
    )
    for _ in range(NODES - 1):
        made.add_node(num_cpus=1)
    ray.init(address=made.address, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": os.environ.get("PYTHONPATH", "")}})
    made.wait_for_nodes()
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.execution_options.preserve_order = True
    yield made
    ray.shutdown()
    made.shutdown()


def spec_for(cameras):
    return stoker.WindowSpec(
        delta_timestamps={cameras[0]: [-1 / 30, 0.0], "action": [0.0, 1 / 30, 2 / 30]},
        size=(32, 32))


def test_three_nodes_give_the_loaders_rows_row_for_row(cluster, lerobot_v30, tmp_path):
    assert len([n for n in ray.nodes() if n["Alive"]]) == NODES
    ds = stoker.LeRobotDataset(lerobot_v30.root, spec_for(lerobot_v30.cameras), progress=False, output="numpy")
    transforms = stoker.Transforms(random_resized_crop=(24, 24), hflip=0.5, dtype="float32")
    loader = stoker.Loader(ds, batch_size=4, seed=7, transforms=transforms, output="numpy",
                           threads=2, rank=0, world_size=1)
    expected = [{k: np.array(v) for k, v in b.items() if k != "task"} for b in loader]

    hook, events = event_log(str(tmp_path / "events.jsonl"))
    rd = stoker_ray.read_lerobot(ds, seed=7, samples_per_task=4, rows_per_block=4,
                                 transforms=transforms, threads_per_task=1, num_cpus=1,
                                 task_hook=hook)
    got = list(rd.iter_batches(batch_size=None, batch_format="numpy"))
    assert [len(b["index"]) for b in got] == [len(b["index"]) for b in expected]
    for key in expected[0]:
        np.testing.assert_array_equal(np.concatenate([b[key] for b in got]),
                                      np.concatenate([b[key] for b in expected]), err_msg=key)
    # The read really spread: its 8 tasks ran on more than one node, each to its end once.
    ends = [e for e in events() if e["event"] == "end"]
    assert sorted(e["task"] for e in ends) == list(range(len(expected)))
    alive = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    assert {e["node_id"] for e in ends} <= alive
    assert len({e["node_id"] for e in ends}) >= 2


def test_the_doctor_reports_read_tasks_node_by_node(cluster, lerobot_v30, tmp_path, capsys):
    ds = stoker.LeRobotDataset(lerobot_v30.root, spec_for(lerobot_v30.cameras), progress=False, output="numpy")
    from stoker.doctor import ray_sweep

    result = ray_sweep.sweep(ds, address=cluster.address, batch_size=2, step_ms=5, steps=6,
                             samples_per_task=2)
    assert [p.cpus for p in result.points] == [1, 2, 3]
    widest = result.points[-1]
    alive = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]}
    # Every task counted once, on the node it ran on, and the nodes add up to the tasks.
    assert widest.tasks and {t.node_id for t in widest.tasks} <= set(alive)
    assert sum(n.tasks for n in widest.nodes) == len(widest.tasks)
    assert sum(n.rows for n in widest.nodes) == sum(t.rows for t in widest.tasks)
    assert len(widest.nodes) >= 2 and all(n.address == alive[n.node_id] for n in widest.nodes)
    assert all(n.rows > 0 and n.rows_per_s > 0 for n in widest.nodes)
    # At least the rows the consumer took: 6 measured steps and 2 of warm-up, 2 rows each.
    assert sum(n.rows for n in widest.nodes) >= 16
    summary = result.summary()
    assert "Read tasks by node at 3 CPUs" in summary
    for node in widest.nodes:
        assert node.node_id[:8] in summary

    # The same through the command, on the cluster this process is connected to.
    from stoker import cli

    assert cli.main(["doctor", lerobot_v30.root, "--ray", cluster.address, "--batch-size", "2",
                     "--step-ms", "5", "--steps", "4", "--report", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert "Read tasks by node at 3 CPUs" in out
    saved = json.loads((tmp_path / "r" / "ray_sweep.json").read_text())
    assert saved["points"][-1]["nodes"], saved["points"][-1]
