"""stoker doctor: synthetic steps of known cost flip the verdict as the decision table says,
and the reported times add up to the wall time measured independently."""

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

import lerobot_datasets
import stoker

CAMERAS = ("observation.images.front", "observation.images.wrist")
FPS = 30


@pytest.fixture(scope="module")
def camera_dataset(tmp_path_factory):
    """4 episodes of 3 s, two cameras at 320x240 with camera-like content (H.264)."""
    root = tmp_path_factory.mktemp("doctor") / "v30"
    return lerobot_datasets.write_v30(root, [90] * 4, CAMERAS, fps=FPS, codec="h264",
                                      size=(240, 320), content="camera")


def spec(size=(96, 96)):
    return stoker.WindowSpec(delta_timestamps={
        CAMERAS[0]: [-4 / FPS, -2 / FPS, 0.0], CAMERAS[1]: [0.0],
        "action": [k / FPS for k in range(4)]}, size=size)


def loader_for(written, threads=None, size=(96, 96), batch_size=4):
    ds = stoker.LeRobotDataset(written.root, spec(size), progress=False)
    return stoker.Loader(ds, batch_size=batch_size, threads=threads, seed=0)


def test_a_200_ms_step_is_compute_bound(camera_dataset):
    report = stoker.diagnose(loader_for(camera_dataset), step=200, steps=10, sweep=False,
                             progress=False)
    assert report.bound == "compute" and report.verdict == "compute-bound", report.summary()
    assert report.compute_batches_per_s < report.input_batches_per_s
    assert "Stop tuning the loader" in report.advice[0]
    assert abs(1 / report.compute_batches_per_s - 0.2) < 0.02


def test_a_0_1_ms_step_is_input_bound(camera_dataset):
    report = stoker.diagnose(loader_for(camera_dataset), step=0.1, steps=24, sweep=False,
                             progress=False)
    assert report.bound == "input", report.summary()
    assert report.data_wait_share > 0.5
    assert report.dominant_stage in ("seek", "decode", "convert")


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to sweep")
def test_limited_threads_say_add_threads(camera_dataset):
    report = stoker.diagnose(loader_for(camera_dataset, threads=1), step=0.1, steps=24,
                             sweep_batches=30, progress=False)
    assert report.verdict == "add-threads", report.summary()
    cores = len(os.sched_getaffinity(0))
    assert f"Raise threads from 1 to " in report.advice[0]
    assert [p.threads for p in report.sweep][-1] == cores
    assert report.sweep[-1].batches_per_s > 1.15 * report.sweep[0].batches_per_s


def test_far_higher_resolution_than_training_is_decode_bound_with_etl_advice(camera_dataset):
    report = stoker.diagnose(loader_for(camera_dataset, size=(24, 32)), step=0.1, steps=24,
                             sweep_batches=20, progress=False)
    assert report.bound == "input", report.summary()
    assert report.verdict == "decode-bound", report.summary()
    etl = [line for line in report.advice if "stoker etl" in line]
    assert etl and "--size 32x24`" in etl[0], report.advice
    assert report.decode_work["source_size"] == "320x240"
    assert report.decode_work["source_pixels"] / report.decode_work["output_pixels"] == 100


def test_data_wait_plus_compute_is_the_wall_time(camera_dataset):
    report = stoker.diagnose(loader_for(camera_dataset), step=20, steps=20, sweep=False,
                             progress=False)
    total = report.data_wait.sum() + report.step_seconds.sum()
    assert abs(total - report.wall_seconds) <= 0.05 * report.wall_seconds

    # And around a loop of the user's own, timed independently.
    loader = loader_for(camera_dataset)
    started = time.perf_counter()
    with stoker.profile(loader) as prof:
        for k, batch in enumerate(loader):
            time.sleep(0.01)
            if k == 14:
                break
    wall = time.perf_counter() - started
    measured = sum(prof.data_wait) + sum(prof.step_seconds)
    assert abs(measured - wall) <= 0.05 * wall, (measured, wall)
    assert len(prof.data_wait) == 15
    # The loader's own (native) data_wait is part of what the trainer waited.
    native = loader.stats()["data_wait"]
    assert native.sum() <= sum(prof.data_wait) + 1e-3
    report = prof.report()
    assert report.bound in ("compute", "input") and report.estimated
    assert abs(np.median(report.step_seconds) - 0.01) < 0.005


def test_report_files_and_summary(camera_dataset, tmp_path):
    report = stoker.diagnose(loader_for(camera_dataset), step=5, steps=8, sweep_batches=8,
                             progress=False)
    text = report.summary()
    for needle in ("compute only", "input only", "data_wait per step", "thread sweep", "seek",
                   "What to do"):
        assert needle in text
    path = report.write_report(tmp_path / "report")
    assert os.path.basename(path) == "index.html"
    for name in ("stages.png", "sweep.png", "data_wait.png", "report.json"):
        assert os.path.getsize(tmp_path / "report" / name) > 0
    saved = json.loads((tmp_path / "report" / "report.json").read_text())
    assert saved["verdict"] == report.verdict
    assert report.other_cpus is not None and report.other_cpus >= 0
    assert "stages.png" in open(path).read()


def test_distributed_runs_report_rank_balance(camera_dataset):
    ds = stoker.LeRobotDataset(camera_dataset.root, spec(), progress=False)
    loader = stoker.Loader(ds, batch_size=4, rank=0, world_size=2)
    report = stoker.diagnose(loader, step=1, steps=6, sweep=False, progress=False)
    assert report.balance is not None
    assert report.balance["after"] <= report.balance["before"]
    assert "ranks: step imbalance" in report.summary()


def test_command_line(camera_dataset, tmp_path):
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(f"delta_timestamps:\n  {CAMERAS[0]}: [-0.0666666666666667, 0.0]\n"
                         f"  front_next: [{CAMERAS[0]}, [0.0333333333333333]]\n"
                         "size: [64, 64]\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run([sys.executable, "-m", "stoker", "doctor", camera_dataset.root,
                           "--spec", str(spec_file), "--batch-size", "4", "--steps", "6",
                           "--step-ms", "30", "--no-sweep", "--report", str(tmp_path / "r")],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "stoker doctor:" in done.stdout and "-bound" in done.stdout
    assert f"Report: {tmp_path / 'r' / 'index.html'}" in done.stdout
    bad = subprocess.run([sys.executable, "-m", "stoker", "doctor", camera_dataset.root,
                          "--spec", str(tmp_path / "missing.yaml")],
                         capture_output=True, text=True, env=env, timeout=120)
    assert bad.returncode != 0 and "missing.yaml" in bad.stderr
