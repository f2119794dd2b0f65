"""stoker doctor: synthetic steps of known cost flip the verdict as the decision table says,
and the reported times add up to the wall time measured independently."""

import json
import os
import subprocess
import sys
import time

import lerobot_datasets
import numpy as np
import pytest

import stoker
from stoker.doctor import SweepPoint

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
    ds = stoker.LeRobotDataset(written.root, spec(size), progress=False, output="numpy")
    return stoker.Loader(ds, batch_size=batch_size, threads=threads, seed=0)


def made_up(compute, supply, together, wait_share, threads=2, sweep=(), stages=None,
            materialized=None, decode_work=None, steps=40, other_cpus=0.0):
    """A Diagnosis of chosen numbers (the verdict's and the checks' inputs), concluded."""
    from stoker.doctor.verdict import conclude
    wall = steps / together
    waits = np.full(steps, wall * wait_share / steps)
    d = stoker.Diagnosis(
        batch_size=8, threads=threads, cores=2, compute_batches_per_s=compute,
        input_batches_per_s=supply, step_seconds=np.full(steps, wall / steps) - waits,
        data_wait=waits, wall_seconds=wall,
        stage_seconds=stages or {"decode": 0.9 * threads / supply, "convert": 0.05},
        sweep=list(sweep), decode_work=decode_work or {}, materialized=materialized,
        precision={"compute": 0.02, "input": 0.04, "together": 0.04},
        phase_cpus={"input": {"others": other_cpus, "mine": 1.0},
                    "together": {"others": 0.0, "mine": 1.0}})
    conclude(d)
    return d


def test_a_together_rate_above_the_input_rate_is_a_measurement_problem_shown_first():
    d = made_up(compute=10.0, supply=1.0, together=2.0, wait_share=0.5, other_cpus=1.6)
    assert len(d.problems) == 1 and "above the input-only" in d.problems[0]
    assert "contention: other processes kept 1.6 CPUs busy" in d.problems[0]
    assert d.summary().startswith("MEASUREMENT PROBLEM")
    assert "2.00 batches/s" in d.headline  # the higher rate stands for the loader's
    # Without other processes to blame, the input-only run came first: warm-up.
    d = made_up(compute=10.0, supply=1.0, together=2.0, wait_share=0.5)
    assert "warm-up" in d.problems[0]
    # Within the rates' precision, nothing is flagged.
    assert not made_up(compute=10.0, supply=1.9, together=2.0, wait_share=0.5).problems


def test_stage_times_that_do_not_fit_the_threads_time_are_a_measurement_problem():
    # 2 threads at 1 batch/s have 2 thread-seconds per batch; the stages claim 5.
    d = made_up(compute=10.0, supply=1.0, together=1.0, wait_share=0.8,
                stages={"decode": 5.0})
    assert any("more than the 2 threads had" in p for p in d.problems), d.problems
    d = made_up(compute=10.0, supply=1.0, together=1.0, wait_share=0.8,
                stages={"decode": 0.4})
    assert any("spent the rest in no stage" in p for p in d.problems), d.problems
    assert not made_up(compute=10.0, supply=1.0, together=1.0, wait_share=0.8).problems


def test_a_dataset_stoker_etl_wrote_is_not_sent_through_its_defaults_again():
    work = {"source_pixels": 96 * 96, "output_pixels": 96 * 96, "decoded_per_kept": 4.0,
            "source_size": "96x96", "output_size": "96x96"}
    fresh = made_up(compute=10.0, supply=1.0, together=1.0, wait_share=0.8, decode_work=work)
    assert fresh.verdict == "decode-bound"
    etl = made_up(compute=10.0, supply=1.0, together=1.0, wait_share=0.8, decode_work=work,
                  materialized={"size": [96, 96], "gop": 10, "codec": "h264"})
    text = " ".join(etl.advice)
    assert "already at its training size" in text
    assert "--gop 5" in text and "--gop 10" not in text, etl.advice


def test_the_meter_stops_when_the_rate_is_known_and_not_before():
    from stoker.doctor.measure import MIN_BLOCKS, Meter
    steady = Meter("steady", tolerance=0.05, budget_s=60, block=2, progress=False)
    added = 0
    while not steady.add(0.1 * (1 + 0.01 * (added % 2))):
        added += 1
    assert added + 1 == MIN_BLOCKS * 2 and steady.precision <= 0.05
    assert abs(steady.rate - 1 / 0.1005) < 0.1
    rng = np.random.default_rng(0)
    noisy = Meter("noisy", tolerance=0.05, budget_s=60, block=2, progress=False)
    while not noisy.add(float(rng.uniform(0.05, 0.15))):
        pass
    assert noisy.precision <= 0.05 and len(noisy.times) > 4 * MIN_BLOCKS * 2
    capped = Meter("capped", tolerance=0.05, budget_s=60, block=2, limit=6, progress=False)
    assert [capped.add(float(v)) for v in rng.uniform(0.05, 0.15, 6)][-1]
    assert capped.precision > 0.05  # reported as reached, not as asked


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
    # On a busy machine the measured sweep need not scale; the verdict then rests on the
    # sweep projected from the CPUs each point got, which must.
    sweep = report.projected_sweep or report.sweep
    assert sweep[-1].batches_per_s > 1.15 * sweep[0].batches_per_s, report.summary()


def test_a_sweep_held_back_by_other_processes_is_projected_for_a_quiet_machine():
    held_back = [SweepPoint(1, 2.0, 0.03, cpus=0.9, other_cpus=1.1),
                 SweepPoint(2, 2.1, 0.03, cpus=0.95, other_cpus=1.05)]
    d = made_up(compute=10.0, supply=2.0, together=2.0, wait_share=0.8, threads=1,
                sweep=held_back)
    assert d.verdict == "add-threads", d.summary()
    assert [round(p.batches_per_s, 2) for p in d.projected_sweep] == [2.0, 4.42]  # 1 thread had its CPU
    assert "projected for a quiet machine" in d.advice[0]
    # The same rates with the machine to itself: more threads do not help.
    quiet = [SweepPoint(1, 2.0, 0.03, cpus=1.0), SweepPoint(2, 2.1, 0.03, cpus=1.9)]
    d = made_up(compute=10.0, supply=2.0, together=2.0, wait_share=0.8, threads=1, sweep=quiet)
    assert d.verdict != "add-threads" and not d.projected_sweep, d.summary()


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
    with stoker.profile(loader, report=None, show=False) as prof:  # nothing else timed
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
    for name in ("rates.png", "stages.png", "sweep.png", "data_wait.png", "report.json"):
        assert os.path.getsize(tmp_path / "report" / name) > 0
    saved = json.loads((tmp_path / "report" / "report.json").read_text())
    assert saved["verdict"] == report.verdict
    assert len(saved["data_wait_ms_per_step"]) == len(report.data_wait) > 0
    assert saved["data_wait_ms_per_step"][0] == pytest.approx(report.data_wait[0] * 1000)
    config = saved["config"]
    assert config["dataset"] == camera_dataset.root and config["batch_size"] == 4
    assert config["stoker_version"] == stoker.__version__ and config["date"]
    assert config["spec"]["size"] == [96, 96] and CAMERAS[0] in config["spec"]["delta_timestamps"]
    assert set(saved["precision"]) == {"compute", "input", "together"}
    assert "Configuration:" in text and "stoker_version" in text
    assert report.other_cpus is not None and report.other_cpus >= 0
    assert "stages.png" in open(path).read()


def test_distributed_runs_report_rank_balance(camera_dataset):
    ds = stoker.LeRobotDataset(camera_dataset.root, spec(), progress=False, output="numpy")
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
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "stoker", "doctor", camera_dataset.root,
                           "--spec", str(spec_file), "--batch-size", "4", "--quick",
                           "--budget", "6", "--step-ms", "30", "--report", str(tmp_path / "r")],
                          capture_output=True, text=True, env=env, timeout=300)
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    assert "stoker doctor:" in done.stdout and "-bound" in done.stdout
    assert f"Report: {tmp_path / 'r' / 'index.html'}" in done.stdout
    assert "ETA" in done.stderr and "(goal +-10%)" in done.stderr
    assert took < 60, took

    def doctor(*args):
        return subprocess.run([sys.executable, "-m", "stoker", *args], capture_output=True,
                              text=True, env=env, timeout=120)

    for args, needle in [
        (("doctor", camera_dataset.root, "--spec", str(tmp_path / "missing.yaml")),
         "missing.yaml"),
        (("doctor", str(tmp_path / "nowhere")), "nowhere"),
        (("doctor", camera_dataset.root, "--threads", "0"), "--threads"),
        (("doctor", camera_dataset.root, "--steps", "2"), "at least 4"),
    ]:
        bad = doctor(*args)
        lines = bad.stderr.strip().splitlines()
        assert bad.returncode == 2, (args, bad.stderr)
        assert needle in lines[-1] and "Traceback" not in bad.stderr, bad.stderr
        assert len([line for line in lines if "error" in line]) == 1, bad.stderr
    version = doctor("--version")
    assert version.returncode == 0 and version.stdout.strip() == f"stoker {stoker.__version__}"


def test_a_dataset_written_by_stoker_etl_is_recognized(camera_dataset, tmp_path):
    from stoker.writers.etl import materialize
    dst = str(tmp_path / "etl")
    materialize(camera_dataset.root, dst, size=(96, 96), progress=False)
    ds = stoker.LeRobotDataset(dst, spec(), progress=False, output="numpy")
    report = stoker.diagnose(stoker.Loader(ds, batch_size=4, seed=0), step=0.1, steps=8,
                             sweep=False, progress=False)
    assert report.materialized is not None and report.materialized["size"] == [96, 96]
    assert report.decode_work["source_size"] == "96x96"
    assert not any("--size 96x96`" in line for line in report.advice), report.advice
    assert "dataset written by stoker etl: 96x96" in report.summary()
