"""One undecodable video in a LeRobot dataset (issue 24).

A dataset that does not read the broken camera (``cameras=``) opens and loads as if nothing were
wrong: its index covers only the cameras read. One that reads it leaves the broken episodes out
with a warning naming them and the ``episodes=`` that reads the rest (``on_error="skip"``), or
refuses to open, naming the problem and the ways out (``on_error="raise"``, the default). The
index cache keeps the indexes of different cameras apart, and an index records the episodes it
could not serve, so an open under another policy never reuses it silently.
"""

import os
import pickle
import shutil
import warnings

import lerobot_datasets
import numpy as np
import pytest

import stoker
from stoker import DatasetError
from stoker.datasets.lerobot.index import load_index
from stoker.datasets.lerobot.metadata import read_lerobot_metadata

TOP, WRIST = "observation.images.top", "observation.images.wrist"
FPS = 30


def break_video(path, how):
    """Replaces a video by 1000 zero bytes (no demuxer opens them) or by its first half (its
    index box and most frames gone). Replaced, not written through: a fixture's videos may be
    links into the session's shared encodes."""
    with open(path, "rb") as f:
        data = f.read()
    os.unlink(path)
    with open(path, "wb") as f:
        f.write(b"\0" * 1000 if how == "zeros" else data[: len(data) // 2])


def broken_v21(written, lerobot_copy, how="zeros"):
    """A copy of the v2.1 dataset (episodes of 5, 7, 6 rows) whose wrist video of episode 1
    is broken: (root, that video's path)."""
    root = lerobot_copy(written)
    wrist = read_lerobot_metadata(root).videos[WRIST].paths[1]
    break_video(wrist, how)
    return root, wrist


def open_dataset(root, **kwargs):
    kwargs.setdefault("progress", False)
    return stoker.LeRobotDataset(root, **kwargs, output="numpy")


def epoch(ds, **kwargs):
    """Every batch of one epoch, as numpy."""
    loader = stoker.Loader(ds, batch_size=4, threads=2, output="numpy", **kwargs)
    return list(loader)


def rows_of(batches):
    return np.concatenate([batch["index"] for batch in batches])


# ---------------------------------------------------------------------------------------------
# (a) A camera the dataset does not read


@pytest.mark.parametrize("how", ["zeros", "truncated"])
def test_a_broken_camera_left_out_of_cameras_changes_nothing(lerobot_v21, lerobot_copy, how):
    root, _ = broken_v21(lerobot_v21, lerobot_copy, how)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = open_dataset(
            root, cameras=[TOP], delta_timestamps={TOP: [-1 / FPS, 0.0], "action": [0.0]}
        )
    assert ds.cameras == (TOP,) and ds.index.cameras == (TOP,)
    assert len(ds) == 18 and ds.num_episodes == 3 and ds.rows is None
    assert ds.broken_episodes == []
    item = ds[7]  # episode 1, frame 2: the episode whose wrist video is broken
    assert WRIST not in item and f"{WRIST}_is_pad" not in item
    assert item["episode_index"] == 1
    episode, frame = lerobot_datasets.read_marks(item[TOP], layout="NCHW")
    np.testing.assert_array_equal(episode, [1, 1])
    np.testing.assert_array_equal(frame, [1, 2])
    batches = epoch(ds)
    assert sorted(rows_of(batches).tolist()) == list(range(18))  # every sample, once
    assert all(WRIST not in batch for batch in batches)


def test_cameras_is_checked_and_a_window_on_a_camera_left_out_is_refused(
    lerobot_v21, lerobot_copy
):
    root = lerobot_copy(lerobot_v21)
    with pytest.raises(stoker.InvalidArgumentError, match="unknown cameras.*'front'"):
        open_dataset(root, cameras=[TOP, "front"])
    with pytest.raises(stoker.InvalidArgumentError, match="more than once"):
        open_dataset(root, cameras=[TOP, TOP])
    with pytest.raises(DatasetError, match=f"reads '{WRIST}', which cameras= leaves out"):
        open_dataset(root, cameras=[TOP], delta_timestamps={WRIST: [0.0]})
    # No camera at all: a dataset of states and actions, indexed without its videos.
    ds = open_dataset(root, cameras=[], delta_timestamps={"action": [0.0, 1 / FPS]})
    assert ds.cameras == () and len(ds) == 18
    assert set(ds[0]) >= {"action", "action_is_pad", "observation.state"}
    assert not {TOP, WRIST} & set(ds[0])
    assert sorted(rows_of(epoch(ds)).tolist()) == list(range(18))


# ---------------------------------------------------------------------------------------------
# (b) on_error="skip": the broken episode is left out, with a warning


@pytest.mark.parametrize("how", ["zeros", "truncated"])
def test_skip_leaves_the_broken_episode_out_with_a_warning(lerobot_v21, lerobot_copy, how):
    root, wrist = broken_v21(lerobot_v21, lerobot_copy, how)
    window = {TOP: [0.0], WRIST: [-1 / FPS, 0.0], "action": [0.0]}
    with pytest.warns(UserWarning) as caught:
        ds = open_dataset(root, delta_timestamps=window, on_error="skip")
    assert len(caught) == 1
    message = str(caught[0].message)
    assert "left out 1 episode" in message
    assert f"episode 1, camera '{WRIST}', file '{wrist}'" in message
    assert "episodes=[0, 2]" in message  # how to read the rest without the warning
    assert f"cameras=['{TOP}']" in message  # or without the camera

    kept = np.r_[0:5, 12:18]
    assert len(ds) == len(kept) == 11
    np.testing.assert_array_equal(ds.rows, kept)
    assert ds.num_episodes == 2 and ds.episodes == [0, 2]
    assert [(b.episode_index, b.camera, b.file) for b in ds.broken_episodes] == [(1, WRIST, wrist)]
    assert "left out episodes [1]" in repr(ds)
    assert [ds[i]["index"] for i in range(len(ds))] == kept.tolist()
    _, starts, ends = ds.episode_bounds()
    assert starts.tolist() == [0, 5] and ends.tolist() == [5, 11]

    # The Loader reads each kept sample once and none of episode 1, in order or shuffled, and
    # its skip policy has nothing of episode 1 to draw replacements from either.
    for options in ({"shuffle": False}, {"seed": 3}, {"on_error": "skip", "seed": 4}):
        batches = epoch(ds, **options)
        assert sorted(rows_of(batches).tolist()) == kept.tolist(), options
        assert 1 not in np.concatenate([b["episode_index"] for b in batches]).tolist()
        assert batches[0][WRIST].shape == (4, 2, 3, 64, 64)
    # Its frames are the kept episodes' own.
    batch = epoch(ds, shuffle=False)[1]  # rows 4, 12, 13, 14
    marks = lerobot_datasets.read_marks(batch[WRIST][:, 1], layout="NCHW")
    np.testing.assert_array_equal(marks[0], [0, 2, 2, 2])

    # A pickled copy (spawn workers, Ray) reads the same samples, without warning again.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        copy = pickle.loads(pickle.dumps(ds))
    np.testing.assert_array_equal(copy.rows, kept)
    assert copy.broken_episodes == ds.broken_episodes


def test_skip_leaves_every_episode_of_a_broken_packed_file_out(lerobot_v30, lerobot_copy):
    """v3.0: the wrist camera's first file holds episodes 0, 1 and 2 (of 5, 7, 6, 4, 8 rows);
    truncated, all three are left out, episode 0 among them (the Loader's layout reads frame
    sizes from a camera's video: not from a broken one)."""
    root = lerobot_copy(lerobot_v30)
    wrist = read_lerobot_metadata(root).videos[WRIST].files[0]
    break_video(str(wrist), "truncated")
    with pytest.warns(UserWarning) as caught:
        ds = open_dataset(root, delta_timestamps={WRIST: [0.0]}, on_error="skip")
    message = str(caught[0].message)
    assert "left out 3 episodes" in message and str(wrist) in message
    for episode in (0, 1, 2):
        assert f"episode {episode}, camera '{WRIST}'" in message
    assert "episodes=[3, 4]" in message
    kept = list(range(18, 30))
    assert ds.rows.tolist() == kept and ds.episodes == [3, 4]
    batches = epoch(ds)
    assert sorted(rows_of(batches).tolist()) == kept
    assert set(np.concatenate([b["episode_index"] for b in batches]).tolist()) == {3, 4}


def test_skip_with_episodes_leaves_out_only_the_broken_ones_chosen(lerobot_v21, lerobot_copy):
    root, _ = broken_v21(lerobot_v21, lerobot_copy)
    with pytest.warns(UserWarning, match="episode 1") as caught:
        ds = open_dataset(root, episodes=[2, 1], on_error="skip")
    assert "episodes=[2]" in str(caught[0].message)
    assert ds.episodes == [2] and ds.rows.tolist() == list(range(12, 18))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # episode 1 is not read: nothing to say
        ds = open_dataset(root, episodes=[0, 2], on_error="skip")
    assert ds.episodes == [0, 2] and ds.broken_episodes == [] and len(ds) == 11


def test_skip_with_every_episode_broken_is_refused(lerobot_v21, lerobot_copy):
    root = lerobot_copy(lerobot_v21)
    for path in read_lerobot_metadata(root).videos[WRIST].paths:
        break_video(path, "zeros")
    with pytest.raises(DatasetError, match="no episode is left"):
        open_dataset(root, on_error="skip")
    assert len(open_dataset(root, cameras=[TOP])) == 18


# ---------------------------------------------------------------------------------------------
# (c) on_error="raise": the problem and the ways out


def test_raise_names_the_problem_and_the_ways_out(lerobot_v21, lerobot_copy):
    root, wrist = broken_v21(lerobot_v21, lerobot_copy)
    window = {WRIST: [-1 / FPS, 0.0]}
    with pytest.raises(DatasetError) as error:
        open_dataset(root, delta_timestamps=window)
    message = str(error.value)
    assert f"episode 1, camera '{WRIST}', file '{wrist}'" in message and "cannot open" in message
    assert "on_error='skip'" in message  # way out 1: leave it out, with a warning
    assert "episodes=[0, 2]" in message  # way out 2: do not read it
    assert f"cameras=['{TOP}']" in message  # (and: do not read its camera)
    # Each way out works as said.
    with pytest.warns(UserWarning, match="episode 1"):
        assert len(open_dataset(root, delta_timestamps=window, on_error="skip")) == 11
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = open_dataset(root, delta_timestamps=window, episodes=[0, 2])
        assert len(open_dataset(root, cameras=[TOP])) == 18
    assert sorted(rows_of(epoch(ds)).tolist()) == np.r_[0:5, 12:18].tolist()


def test_on_error_is_checked(lerobot_v21, lerobot_copy):
    root = lerobot_copy(lerobot_v21)
    with pytest.raises(ValueError, match="on_error must be 'raise' or 'skip'"):
        open_dataset(root, on_error="ignore")
    with pytest.raises(ValueError, match="on_error must be 'raise' or 'skip'"):
        load_index(root, on_error="ignore")


# ---------------------------------------------------------------------------------------------
# (d) The index cache, across cameras and policies


def test_the_index_cache_keeps_cameras_and_left_out_episodes_apart(lerobot_v21, lerobot_copy):
    root, wrist = broken_v21(lerobot_v21, lerobot_copy)
    top_only = open_dataset(root, cameras=[TOP])
    assert top_only.index.cameras == (TOP,) and top_only.index.broken_episodes == ()

    # Every camera: not the top camera's index, which never looked at the wrist videos.
    with pytest.warns(UserWarning, match="episode 1"):
        both = open_dataset(root, on_error="skip")
    assert both.index.path != top_only.index.path
    assert both.index.cameras == (TOP, WRIST) and len(both) == 11

    # The index says what it left out: an open under raise refuses, however it reaches it.
    with pytest.raises(DatasetError, match=f"episode 1, camera '{WRIST}'"):
        open_dataset(root)
    with pytest.raises(DatasetError, match=f"episode 1, camera '{WRIST}'") as error:
        load_index(root, progress=False)
    assert "on_error='skip'" in str(error.value)
    index = load_index(root, progress=False, on_error="skip")
    assert index.report is None and index.path == both.index.path  # mapped, not rebuilt
    assert [(b.episode, b.camera, b.file) for b in index.broken_episodes] == [(1, WRIST, wrist)]
    assert "cannot open" in index.broken_episodes[0].why

    # The top camera's index is still there, mapped again; every camera named (in any order)
    # is the index of every camera.
    again = open_dataset(root, cameras=[TOP])
    assert again.index.report is None and again.index.path == top_only.index.path
    assert len(again) == 18
    with pytest.warns(UserWarning, match="episode 1"):
        named = open_dataset(root, cameras=[WRIST, TOP], on_error="skip")
    assert named.index.path == both.index.path and named.index.report is None

    # Repaired (replaced by rename), the video makes every index of the wrist camera stale:
    # the next open rebuilds it and reads every episode, without a warning.
    source = read_lerobot_metadata(lerobot_v21.root).videos[WRIST].paths[1]
    shutil.copyfile(source, wrist + ".new")
    os.replace(wrist + ".new", wrist)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fixed = open_dataset(root)
    assert fixed.index.report is not None and fixed.index.path == both.index.path
    assert fixed.broken_episodes == [] and len(fixed) == 18 and fixed.rows is None
    assert open_dataset(root, cameras=[TOP]).index.report is None  # its files did not change


def test_an_index_of_some_cameras_is_never_taken_for_another(lerobot_v21, lerobot_copy):
    root = lerobot_copy(lerobot_v21)
    top = load_index(root, progress=False, cameras=[TOP])
    wrist = load_index(root, progress=False, cameras=[WRIST])
    every = load_index(root, progress=False)
    assert top.cameras == (TOP,) and wrist.cameras == (WRIST,)
    assert every.cameras == (TOP, WRIST)
    assert len({top.path, wrist.path, every.path}) == 3
    assert os.path.dirname(top.path) == os.path.dirname(every.path)
    # A file holding another set of cameras than its name says (swapped by hand) is rebuilt.
    shutil.copyfile(wrist.path, top.path + ".new")
    os.replace(top.path + ".new", top.path)
    rebuilt = load_index(root, progress=False, cameras=[TOP])
    assert rebuilt.report is not None and rebuilt.cameras == (TOP,)


def test_stoker_index_builds_the_index_a_job_with_cameras_or_skip_maps(lerobot_v21, lerobot_copy):
    import subprocess
    import sys

    root, wrist = broken_v21(lerobot_v21, lerobot_copy)
    env = {**os.environ, "PYTHONPATH": "python"}
    command = [sys.executable, "-m", "stoker", "index", root, "--quiet"]

    def run(*arguments):
        return subprocess.run(command + list(arguments), capture_output=True, text=True, env=env)

    refused = run()
    assert refused.returncode == 1 and f"episode 1, camera '{WRIST}'" in refused.stderr
    top = run("--cameras", TOP)
    assert top.returncode == 0 and "built in" in top.stdout, top.stderr
    assert open_dataset(root, cameras=[TOP]).index.report is None  # the job maps it
    skipped = run("--on-error", "skip")
    assert skipped.returncode == 0, skipped.stderr
    assert "1 episode its videos cannot serve" in skipped.stdout
    assert f"episode 1, camera '{WRIST}', file '{wrist}'" in skipped.stdout
    with pytest.warns(UserWarning, match="episode 1"):
        ds = open_dataset(root, on_error="skip")
    assert ds.index.report is None and len(ds) == 11
    # Every camera named is the full index.
    assert "already current" in run("--cameras", WRIST, TOP, "--on-error", "skip").stdout


def test_the_doctor_runs_on_a_dataset_whose_first_episode_was_left_out(lerobot_v21, lerobot_copy):
    """The doctor reads a camera's source size from a video the dataset reads: with episode 0
    left out under skip, not episode 0's (the broken one)."""
    root = lerobot_copy(lerobot_v21)
    break_video(read_lerobot_metadata(root).videos[WRIST].paths[0], "zeros")
    with pytest.warns(UserWarning, match="left out 1 episode"):
        ds = open_dataset(root, delta_timestamps={WRIST: [0.0], "action": [0.0]},
                          on_error="skip")
    loader = stoker.Loader(ds, batch_size=4, threads=2, output="numpy")
    report = stoker.diagnose(loader, step=0.1, steps=6, sweep=False, progress=False)
    kept = stoker.VideoReader(read_lerobot_metadata(root).videos[WRIST].paths[1])
    assert report.decode_work["source_size"] == f"{kept.width}x{kept.height}", report.summary()
