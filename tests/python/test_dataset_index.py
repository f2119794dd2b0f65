"""The episode index: row -> episode -> frame mapping, columns, reuse and rebuild, cache folder,
packed-video drift, and bad datasets."""

import dataclasses
import gc
import glob
import os
import pickle
import shutil
import stat

import lerobot_datasets
import numpy as np
import pytest

import stoker
from stoker import _core
from stoker.datasets.lerobot.index import EpisodeIndex, index_paths, load_index
from stoker.datasets.lerobot.metadata import DatasetError, read_columns, read_lerobot_metadata

TOP, WRIST = "observation.images.top", "observation.images.wrist"


def load(root, **kwargs):
    kwargs.setdefault("progress", False)
    return load_index(root, **kwargs)


def check_rows_and_frames(index, lengths, marks_episodes=True):
    """Every row maps to its episode and, per camera, to the frame whose marks show it."""
    lengths = np.asarray(lengths)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    rows = np.arange(index.num_rows)
    episode = np.repeat(np.arange(len(lengths)), lengths)
    offset = rows - starts[episode]
    np.testing.assert_array_equal(index.episode_of_rows(rows), episode)
    for camera in index.cameras:
        frames = index.frames_of_rows(camera, rows)
        row_video = index.videos_of(camera)[episode]
        for v in np.unique(row_video):
            selected = row_video == v
            reader = stoker.VideoReader(index.video_files[v], frame_table=index.frame_table(v))
            shown_episode, shown_frame = lerobot_datasets.read_marks(
                reader.get_frames(frames[selected]))
            np.testing.assert_array_equal(shown_frame, offset[selected],
                                          err_msg=f"{camera}, {index.video_files[v]}")
            np.testing.assert_array_equal(
                shown_episode, episode[selected] if marks_episodes else 0)


# ---------------------------------------------------------------------------------------------
# Mapping and columns


@pytest.mark.parametrize("version", ["v21", "v30"])
def test_rows_map_to_episodes_and_frames(version, request, lerobot_copy):
    written = request.getfixturevalue(f"lerobot_{version}")
    root = lerobot_copy(written)
    index = load(root)
    lengths = np.array(written.lengths)
    assert index.path == os.path.join(root, ".stoker", "index-v1.bin")
    assert index.num_episodes == len(lengths) and index.num_rows == lengths.sum()
    assert index.fps == 30.0 and index.cameras == (TOP, WRIST)
    table = index.episode_table()
    np.testing.assert_array_equal(table["length"], lengths)
    np.testing.assert_array_equal(table["from_row"], np.cumsum(lengths) - lengths)
    np.testing.assert_array_equal(table["task"], written.episode_task)
    for camera in index.cameras:
        expected = [os.path.relpath(p, written.root) for p in written.video_paths[camera]]
        files = np.array(index.video_files)[index.videos_of(camera)]
        assert [os.path.relpath(p, root) for p in files] == expected
    check_rows_and_frames(index, lengths)

    # Single lookups agree with the vectorised ones; shapes are kept; bad input is refused.
    rows = np.array([[0, 7], [index.num_rows - 1, 3]])
    assert index.frames_of_rows(WRIST, rows).shape == (2, 2)
    for row in rows.reshape(-1):
        assert index.episode_of_row(row) == index.episode_of_rows([row])[0]
        assert index.frame_of_row(1, row) == index.frames_of_rows(WRIST, [row])[0]
    with pytest.raises(IndexError, match=f"row {index.num_rows} out of range"):
        index.episode_of_rows([0, index.num_rows])
    with pytest.raises(IndexError):
        index.frames_of_rows(TOP, [-1])
    with pytest.raises(IndexError):
        index.episode_of_row(index.num_rows)
    with pytest.raises(KeyError, match="unknown camera"):
        index.frames_of_rows("observation.images.side", [0])
    with pytest.raises(TypeError):
        index.episode_of_rows([0.5])


@pytest.mark.parametrize("version", ["v21", "v30"])
def test_columns_equal_read_columns(version, request, lerobot_copy):
    written = request.getfixturevalue(f"lerobot_{version}")
    root = lerobot_copy(written)
    index = load(root)
    expected_names = ["observation.state", "action", "timestamp", "frame_index",
                      "episode_index", "index", "task_index"]
    assert sorted(index.column_names) == sorted(expected_names)
    expected = read_columns(read_lerobot_metadata(root), expected_names)
    views = {}
    for name in expected_names:
        view = index.column(name)
        assert view.dtype == expected[name].dtype and view.shape == expected[name].shape
        np.testing.assert_array_equal(view, expected[name])
        assert not view.flags.writeable and view.flags.aligned
        with pytest.raises(ValueError):
            view[0] = 0
        assert np.shares_memory(view, index.column(name))  # a view of the mapping, not a copy
        views[name] = view
    with pytest.raises(KeyError, match="no column"):
        index.column("observation.images.top")
    # The views keep the mapping alive after the index object is gone.
    del index
    gc.collect()
    for name in expected_names:
        np.testing.assert_array_equal(views[name], expected[name])


# ---------------------------------------------------------------------------------------------
# Reuse, rebuild, cache folder


def test_index_is_reused_then_rebuilt_when_files_change(lerobot_v30, lerobot_copy):
    root = lerobot_copy(lerobot_v30)
    first = load(root)
    assert first.report is not None and first.stale_files() == []
    path = first.path
    built_at = os.stat(path).st_mtime_ns

    again = load(root)
    assert again.report is None and again.path == path  # mapped, not rebuilt
    assert os.stat(path).st_mtime_ns == built_at

    # Touching a Parquet file makes the index stale; the next load rebuilds it.
    data_file = os.path.join(root, "data", "chunk-000", "file-001.parquet")
    os.utime(data_file, ns=(built_at + 10**9, built_at + 10**9))
    assert first.stale_files() == [data_file]
    rebuilt = load(root)
    assert rebuilt.report is not None and rebuilt.stale_files() == []
    assert load(root).report is None

    # So does replacing a video file (same bytes, new file) and changing a meta file.
    video = rebuilt.video_files[1]
    shutil.copyfile(video, video + ".new")
    os.replace(video + ".new", video)
    assert rebuilt.stale_files() == [video]
    rebuilt = load(root)
    assert rebuilt.report is not None and rebuilt.stale_files() == []
    check_rows_and_frames(rebuilt, lerobot_v30.lengths)

    info = os.path.join(root, "meta", "info.json")
    os.utime(info, ns=(built_at + 2 * 10**9,) * 2)
    assert load(root).report is not None
    assert load(root, rebuild=True).report is not None


# ---------------------------------------------------------------------------------------------
# Opening again: the metadata comes from the index


def garble_keeping_size_and_time(path):
    """Overwrites a file's bytes (same size) and puts its modification time back: a change the
    index cannot see, and that any reader of the file would."""
    before = os.stat(path)
    with open(path, "r+b") as f:
        f.write(b"\xff" * before.st_size)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def episode_tables(root, version):
    if version == "v21":
        return [os.path.join(root, "meta", "episodes.jsonl")]
    return sorted(glob.glob(os.path.join(root, "meta", "episodes", "*", "*.parquet")))


def assert_same_metadata(got, expected):
    for field in dataclasses.fields(expected):
        a, b = getattr(got, field.name), getattr(expected, field.name)
        if field.name == "videos":
            assert a.keys() == b.keys()
            for camera in b:
                for part in dataclasses.fields(b[camera]):
                    x, y = getattr(a[camera], part.name), getattr(b[camera], part.name)
                    assert x.dtype == y.dtype, (camera, part.name)
                    np.testing.assert_array_equal(x, y, err_msg=f"{camera} {part.name}")
                    assert not x.flags.writeable
        elif isinstance(b, np.ndarray):
            assert a.dtype == b.dtype, field.name
            np.testing.assert_array_equal(a, b, err_msg=field.name)
            assert not a.flags.writeable, field.name
        elif field.name != "source":
            assert a == b, field.name


@pytest.mark.parametrize("version", ["v21", "v30"])
def test_opening_again_reads_no_episode_table(version, request, lerobot_copy):
    """A dataset opened again with its index current takes the metadata its index was built
    from (issue 22: a 10^6-episode dataset read 335 episode files on every open)."""
    written = request.getfixturevalue(f"lerobot_{version}")
    root = lerobot_copy(written)
    first = stoker.LeRobotDataset(root, progress=False, output="numpy")
    expected = read_lerobot_metadata(root)
    for path in episode_tables(root, version):
        garble_keeping_size_and_time(path)
    with pytest.raises(DatasetError, match="cannot read meta file"):
        read_lerobot_metadata(root)  # what reading the tables would meet

    again = stoker.LeRobotDataset(root, progress=False, output="numpy")
    assert again.index.path == first.index.path and again.index.report is None
    assert_same_metadata(again.metadata, expected)
    assert len(again) == len(first) and again.meta.total_episodes == len(written.lengths)
    for i in (0, len(first) - 1):
        item, wanted = again[i], first[i]
        assert item.keys() == wanted.keys()
        for key in wanted:
            np.testing.assert_array_equal(np.asarray(item[key]), np.asarray(wanted[key]))
    # So does a copy unpickled in another process (a spawn worker).
    copy = pickle.loads(pickle.dumps(again))
    assert_same_metadata(copy.metadata, expected)
    np.testing.assert_array_equal(copy[3]["index"], first[3]["index"])
    # The arguments load_index takes are checked all the same.
    with pytest.raises(ValueError, match="threads"):
        stoker.LeRobotDataset(root, progress=False, threads=0, output="numpy")
    with pytest.raises(TypeError, match="progress"):
        stoker.LeRobotDataset(root, progress="yes", output="numpy")


def test_an_episode_table_file_that_came_since_the_build_is_read(lerobot_v30, lerobot_copy):
    root = lerobot_copy(lerobot_v30)
    stoker.LeRobotDataset(root, progress=False, output="numpy")
    first = episode_tables(root, "v30")[0]
    shutil.copyfile(first, os.path.join(os.path.dirname(first), "file-009.parquet"))
    with pytest.raises(DatasetError, match="more than once") as cold:
        read_lerobot_metadata(root)
    with pytest.raises(DatasetError) as again:
        stoker.LeRobotDataset(root, progress=False, output="numpy")
    assert str(again.value) == str(cold.value)


def test_a_camera_left_out_needs_its_videos_when_opened_again(lerobot_v21, lerobot_copy):
    # The index of TOP only neither tracks nor scans WRIST's videos; the metadata checks they
    # are there, opened again as the first time.
    root = lerobot_copy(lerobot_v21)
    stoker.LeRobotDataset(root, cameras=[TOP], progress=False, output="numpy")
    os.remove(os.path.join(root, os.path.relpath(lerobot_v21.video_paths[WRIST][1],
                                                 lerobot_v21.root)))
    with pytest.raises(DatasetError, match=f"missing video files of camera '{WRIST}'") as cold:
        read_lerobot_metadata(root)
    with pytest.raises(DatasetError) as again:
        stoker.LeRobotDataset(root, cameras=[TOP], progress=False, output="numpy")
    assert str(again.value) == str(cold.value)


OPEN_AGAIN = """
import sys
import stoker
stoker.LeRobotDataset(sys.argv[1], progress=False)
print(sorted(name for name in ("pandas", "pyarrow.dataset") if name in sys.modules))
"""


def test_opening_again_imports_neither_pandas_nor_pyarrow_dataset(lerobot_v30, lerobot_copy):
    # pyarrow imports them for to_numpy(), pa.array() and read_table(): ~0.4 s and ~50 MB of a
    # process's first open, for nothing stoker uses.
    import subprocess
    import sys

    root = lerobot_copy(lerobot_v30)
    stoker.LeRobotDataset(root, progress=False, output="numpy")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(["python", os.environ.get("PYTHONPATH", "")])}
    found = subprocess.run([sys.executable, "-c", OPEN_AGAIN, root], capture_output=True,
                           text=True, env=env, check=True).stdout
    assert found.strip() == "[]"


def test_copied_dataset_does_not_reuse_the_original_index(lerobot_v21, lerobot_copy, tmp_path):
    root = lerobot_copy(lerobot_v21)
    load(root)
    copy = str(tmp_path / "copy")
    shutil.copytree(root, copy)  # .stoker/ comes along, naming the original's files
    index = load(copy)
    assert index.report is not None
    assert all(p.startswith(copy + os.sep) for p in index.video_files)


def test_unwritable_dataset_folder_falls_back_to_the_cache(lerobot_v21, lerobot_copy, tmp_path,
                                                           monkeypatch):
    root = lerobot_copy(lerobot_v21)
    # A regular file where .stoker/ should be: the folder cannot be created, even for root.
    with open(os.path.join(root, ".stoker"), "w") as f:
        f.write("not a folder")
    cache = str(tmp_path / "cache")
    index = load(root, cache_dir=cache)
    assert index.report is not None
    assert index.path == index_paths(root, cache)[1]
    assert index.path.startswith(cache + os.sep)
    assert load(root, cache_dir=cache).report is None  # found there on later loads
    check_rows_and_frames(index, lerobot_v21.lengths)

    # Without cache_dir: $STOKER_CACHE_DIR.
    monkeypatch.setenv("STOKER_CACHE_DIR", str(tmp_path / "env-cache"))
    index = load(root)
    assert index.path.startswith(str(tmp_path / "env-cache") + os.sep)


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0,
                    reason="root ignores folder permissions")
def test_read_only_dataset_folder_uses_the_cache(lerobot_v21, lerobot_copy, tmp_path):
    root = lerobot_copy(lerobot_v21)
    mode = os.stat(root).st_mode
    os.chmod(root, mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    try:
        index = load(root, cache_dir=str(tmp_path / "cache"))
        assert index.path.startswith(str(tmp_path / "cache") + os.sep)
        assert not os.path.exists(os.path.join(root, ".stoker"))
    finally:
        os.chmod(root, mode)


def test_progress(lerobot_v30, lerobot_copy, capsys, caplog):
    root = lerobot_copy(lerobot_v30)
    calls = []
    load(root, progress=lambda done, total: calls.append((done, total)))
    assert calls and calls[-1] == (5, 5)  # 3 top + 2 wrist files
    assert [done for done, _ in calls] == sorted(done for done, _ in calls)

    def fail(done, total):
        raise RuntimeError("stop here")

    with pytest.raises(RuntimeError, match="stop here"):
        load(root, rebuild=True, progress=fail)

    # Issue 33: every first open printed its indexing lines to stderr. Off a terminal they are
    # INFO logs of the stoker logger: quiet unless the application shows them.
    index = load(root, rebuild=True, progress=True)
    assert capsys.readouterr().err == ""
    with caplog.at_level("INFO", logger="stoker"):
        load(root, rebuild=True, progress=True)
    logged = caplog.text
    assert "indexing videos" in logged and "5/5" in logged
    assert f"indexed 5 episodes of {root}: 5 video files" in logged and "max drift" in logged
    assert capsys.readouterr().err == ""
    assert len(index.report.max_drift_s) == 5
    assert load(root, progress=True).report is None
    assert capsys.readouterr().err == ""


# ---------------------------------------------------------------------------------------------
# Packed v3.0 videos whose stated offsets drift


def test_packed_file_drift_is_snapped_and_reported(tmp_path, lerobot_cache):
    """120 episodes of 4 frames at 30 fps packed in one file: by the end, the summed
    from_timestamp (the writers' nominal offsets) is more than half a frame from the real pts,
    so the nearest frame to it is the wrong one. The index still starts every episode at its
    own first frame, and reports the drift."""
    episodes, length, fps = 120, 4, 30
    written = lerobot_datasets.write_v30(
        tmp_path / "packed", [length] * episodes, [TOP], fps=fps, episodes_per_file=episodes,
        mark_episodes=False, cache_dir=lerobot_cache)
    index = load(written.root)
    assert len(index.video_files) == 1
    starts = np.arange(episodes) * length
    reader = stoker.VideoReader(index.video_files[0], frame_table=index.frame_table(0))
    stated = written.from_timestamp[TOP]
    naive_drift = reader.pts[starts] - stated
    assert naive_drift[-1] > 0.5 / fps  # the premise: past half a frame
    assert int(np.argmin(np.abs(reader.pts - stated[-1]))) != starts[-1]

    np.testing.assert_array_equal(index.first_frames(TOP), starts)
    np.testing.assert_allclose(index.drifts(TOP), naive_drift, atol=1e-9)
    assert index.report.max_drift_s.shape == (1,)
    assert index.report.max_drift_s[0] > 0.5 / fps
    np.testing.assert_allclose(index.report.max_drift_s[0], np.abs(naive_drift).max())
    assert "max drift" in index.report.summary()
    # Every row of every episode shows its own frame (marks count frames within episodes).
    check_rows_and_frames(index, written.lengths, marks_episodes=False)
    frames = reader.get_frames(index.first_frames(TOP))
    np.testing.assert_array_equal(lerobot_datasets.read_marks(frames)[1], 0)


# ---------------------------------------------------------------------------------------------
# Bad input


def test_video_shorter_than_its_rows_v21(lerobot_v21, lerobot_copy):
    root = lerobot_copy(lerobot_v21)
    # Episode 1 has 7 rows; give its wrist camera episode 0's 5-frame video.
    meta = read_lerobot_metadata(root)
    wrist = meta.videos[WRIST].paths
    os.unlink(wrist[1])
    shutil.copyfile(wrist[0], wrist[1])
    with pytest.raises(DatasetError) as e:
        load(root)
    message = str(e.value)
    assert "episode 1" in message and f"camera '{WRIST}'" in message and wrist[1] in message
    assert "needs 7 frames" in message and "has 5" in message
    assert not os.path.exists(os.path.join(root, ".stoker", "index-v1.bin"))


def test_video_shorter_than_its_rows_v30(lerobot_v30, lerobot_copy):
    root = lerobot_copy(lerobot_v30)
    # Top file-001 holds episodes 2 and 3 (6 + 4 rows); put episode 4's 8 frames there.
    meta = read_lerobot_metadata(root)
    top = meta.videos[TOP].paths
    os.unlink(top[2])
    shutil.copyfile(top[4], top[2])
    with pytest.raises(DatasetError) as e:
        load(root)
    message = str(e.value)
    assert "episode 3" in message and f"camera '{TOP}'" in message and top[2] in message


def test_unreadable_video_names_its_file(lerobot_v21, lerobot_copy):
    root = lerobot_copy(lerobot_v21)
    wrist = read_lerobot_metadata(root).videos[WRIST].paths
    with open(wrist[1], "wb") as f:
        f.write(b"\0" * 1000)
    with pytest.raises(DatasetError, match="cannot open") as e:
        load(root)
    assert wrist[1] in str(e.value)


def test_unreadable_video_names_its_episodes_and_camera(lerobot_v21, lerobot_copy):
    root = lerobot_copy(lerobot_v21)
    wrist = read_lerobot_metadata(root).videos[WRIST].paths
    with open(wrist[1], "wb") as f:
        f.write(b"\0" * 1000)
    with pytest.raises(DatasetError) as e:
        load(root)
    assert "episode 1" in str(e.value) and WRIST in str(e.value)


def test_corrupted_index_is_rebuilt(lerobot_v21, lerobot_copy):
    root = lerobot_copy(lerobot_v21)
    path = load(root).path
    size = os.path.getsize(path)
    for corrupt in (lambda data: b"garbage!" + data[8:],  # foreign magic
                    lambda data: data[:size // 2],  # truncated
                    lambda data: data[:8] + b"\x07" + data[9:]):  # another format version
        with open(path, "rb") as f:
            data = f.read()
        with open(path, "wb") as f:
            f.write(corrupt(data))
        with pytest.raises(DatasetError, match="malformed"):
            EpisodeIndex.open(path)
        index = load(root)
        assert index.report is not None and os.path.getsize(path) == size
        check_rows_and_frames(index, lerobot_v21.lengths)


def test_empty_dataset(lerobot_v21, lerobot_copy, tmp_path):
    root = lerobot_copy(lerobot_v21)
    with open(os.path.join(root, "meta", "episodes.jsonl"), "w"):
        pass
    with pytest.raises(DatasetError, match="empty dataset"):
        load(root)
    # The core refuses it too: for the core, an empty source is a bad argument.
    none = np.zeros(0, np.int64)
    with pytest.raises(_core.InvalidArgumentError, match="no episodes"):
        _core.build_episode_index(
            str(tmp_path / "index.bin"),
            fps=30.0,
            episode_from_row=none,
            episode_length=none,
            episode_task=none,
            row_timestamp=np.zeros(0),
            cameras=[],
            video_files=[],
            episode_video=np.zeros((0, 0), np.int64),
            episode_video_offset=np.zeros((0, 0)),
            columns=[],
            tracked_files=[],
            tolerance_s=1e-4,
            threads=1,
        )
    assert not os.path.exists(tmp_path / "index.bin")


def test_missing_dataset_folder(tmp_path):
    with pytest.raises(DatasetError, match="does not exist"):
        load(tmp_path / "absent")
    with pytest.raises(ValueError, match="threads"):
        load(tmp_path, threads=0)


# A rank of a job opening the dataset at once with the others: waits for the file "go", then
# loads the index and prints whether it built it, and the index's checksum.
RANK = """
import os, sys, time
from stoker.datasets.lerobot.index import load_index
root, go = sys.argv[1], sys.argv[2]
while not os.path.exists(go):
    time.sleep(0.001)
index = load_index(root, progress=False)
print("built" if index.report is not None else "found", index._core.checksum)
"""


def test_ranks_opening_a_dataset_at_once_build_its_index_once(lerobot_v30, lerobot_copy, tmp_path):
    import subprocess
    import sys

    root = lerobot_copy(lerobot_v30)
    go = str(tmp_path / "go")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(["python", os.environ.get("PYTHONPATH", "")])}
    ranks = [
        subprocess.Popen([sys.executable, "-c", RANK, root, go], stdout=subprocess.PIPE, text=True,
                         env=env)
        for _ in range(3)
    ]
    open(go, "w").close()
    outputs = [rank.communicate(timeout=120)[0].split() for rank in ranks]
    assert all(rank.returncode == 0 for rank in ranks)
    assert sorted(what for what, _ in outputs) == ["built", "found", "found"]
    assert len({checksum for _, checksum in outputs}) == 1  # all map the one build


def test_stoker_index_builds_ahead_of_a_job_and_says_where_ranks_find_it(
    lerobot_v21, lerobot_copy, tmp_path
):
    import subprocess
    import sys

    root = lerobot_copy(lerobot_v21)
    env = {**os.environ, "PYTHONPATH": "python"}
    command = [sys.executable, "-m", "stoker", "index", root, "--quiet"]
    first = subprocess.run(command, capture_output=True, text=True, env=env, check=True).stdout
    assert f"{root}: 3 episodes, 18 rows, 6 video files: built in" in first
    assert "ranks find it beside the dataset" in first
    again = subprocess.run(command, capture_output=True, text=True, env=env, check=True).stdout
    assert "already current, found in" in again
    assert load_index(root, progress=False).report is None  # a rank maps it, builds nothing
    missing = subprocess.run(command[:4] + [str(tmp_path / "nothing")], capture_output=True,
                             text=True, env=env)
    assert missing.returncode == 1
    assert missing.stderr.startswith("stoker index: error: ") and "nothing" in missing.stderr


# ---------------------------------------------------------------------------------------------
# Issue 33 item 7: a build killed while its index file is being written. The build of a small
# dataset takes ~0.05 s, too short to kill by chance: the debug hook STOKER_DEBUG_PAUSE_WRITING
# (src/core/file.h) pauses the write of a file whose path holds its text, with the temporary
# file half written or whole but not renamed, and says so on stderr.

_BUILD = "import sys; from stoker.datasets.lerobot.index import load_index; " \
         "load_index(sys.argv[1], progress=False)"


@pytest.mark.parametrize("moment", ["half", "whole"])
def test_a_build_killed_while_writing_its_index_leaves_no_partial_index(
        lerobot_v21, lerobot_copy, moment):
    import signal
    import subprocess
    import sys

    root = lerobot_copy(lerobot_v21)
    path = index_paths(root)[0]
    env = dict(os.environ, STOKER_DEBUG_PAUSE_WRITING=f"{moment}:{os.path.basename(path)}",
               PYTHONPATH=os.path.dirname(os.path.dirname(stoker.__file__)))
    child = subprocess.Popen([sys.executable, "-c", _BUILD, root], env=env,
                             stderr=subprocess.PIPE, text=True)
    try:
        while True:
            line = child.stderr.readline()
            assert line, f"the build ended without pausing (exit {child.wait()})"
            if "stoker debug: paused writing" in line and path in line:
                break
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
        child.stderr.close()
    assert child.returncode == -signal.SIGKILL
    temporaries = glob.glob(path + ".tmp*")
    assert temporaries and not os.path.exists(path)  # killed in the middle, as meant
    size = os.path.getsize(temporaries[0])
    assert 0 < size  # a partial file, or a whole one under another name
    # Reopened: the partial file is never taken for the index; a whole one is built.
    index = load(root)
    assert index.report is not None and index.path == path
    check_rows_and_frames(index, lerobot_v21.lengths)
    assert load(root).report is None  # and reused from then on
