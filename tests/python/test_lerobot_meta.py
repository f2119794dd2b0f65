"""Reading LeRobot v2.1 / v3.0 metadata and tables, bad datasets, and packed-video drift."""

import json
import os

import lerobot_datasets
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import stoker
from stoker.datasets.lerobot.metadata import DatasetError, read_columns, read_lerobot_metadata

TOP, WRIST = "observation.images.top", "observation.images.wrist"
ROW_COLUMNS = ["observation.state", "action", "timestamp", "frame_index", "episode_index",
               "index", "task_index"]


def expected_rows(written):
    episode = np.repeat(np.arange(len(written.lengths)), written.lengths)
    frame = np.concatenate([np.arange(n) for n in written.lengths])
    return episode, frame


def test_dataset_error_is_a_stoker_error():
    assert issubclass(DatasetError, stoker.Error)
    assert DatasetError.__name__ == "DatasetError"


# ---------------------------------------------------------------------------------------------
# Metadata


def check_common(meta, written):
    lengths = np.array(written.lengths)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    assert meta.root == written.root
    assert meta.fps == 30.0
    assert meta.cameras == (TOP, WRIST)
    assert meta.num_episodes == len(lengths)
    assert meta.num_frames == lengths.sum()
    np.testing.assert_array_equal(meta.episode_index, np.arange(len(lengths)))
    np.testing.assert_array_equal(meta.length, lengths)
    np.testing.assert_array_equal(meta.dataset_from_index, starts)
    np.testing.assert_array_equal(meta.dataset_to_index, starts + lengths)
    np.testing.assert_array_equal(meta.task_index, written.episode_task)
    assert list(meta.tasks) == written.tasks
    assert meta.features["observation.state"] == ("float32", (6,))
    assert meta.features["action"] == ("float32", (6,))
    assert meta.features[TOP] == ("video", (64, 64, 3))
    assert meta.features["index"] == ("int64", (1,))
    for camera in meta.cameras:
        videos = meta.videos[camera]
        assert list(videos.paths) == written.video_paths[camera]
        assert all(os.path.isabs(p) for p in videos.files)
        np.testing.assert_allclose(videos.from_timestamp, written.from_timestamp[camera])
        np.testing.assert_allclose(videos.to_timestamp - videos.from_timestamp, lengths / 30)
    for e, path in enumerate(written.data_paths):
        assert meta.data_files[meta.episode_data_file[e]] == path
    for value in (meta.length, meta.videos[TOP].from_timestamp):
        assert not value.flags.writeable


def test_v21_metadata(lerobot_v21):
    meta = read_lerobot_metadata(lerobot_v21.root)
    assert meta.codebase_version == "v2.1"
    check_common(meta, lerobot_v21)
    # One file per episode, videos starting at 0.
    np.testing.assert_array_equal(meta.data_file_from_index, [0, 5, 12])
    np.testing.assert_array_equal(meta.data_file_to_index, [5, 12, 18])
    assert meta.data_files[1].endswith("data/chunk-000/episode_000001.parquet")
    assert meta.videos[WRIST].files[2].endswith(
        "videos/chunk-000/observation.images.wrist/episode_000002.mp4")
    np.testing.assert_array_equal(meta.videos[TOP].from_timestamp, 0.0)


def test_v30_metadata(lerobot_v30):
    meta = read_lerobot_metadata(lerobot_v30.root)
    assert meta.codebase_version == "v3.0"
    check_common(meta, lerobot_v30)
    # Two episodes per data file, two files per chunk.
    assert [p[len(meta.root) + 1:] for p in meta.data_files] == [
        "data/chunk-000/file-000.parquet", "data/chunk-000/file-001.parquet",
        "data/chunk-001/file-000.parquet"]
    np.testing.assert_array_equal(meta.episode_data_file, [0, 0, 1, 1, 2])
    np.testing.assert_array_equal(meta.data_file_from_index, [0, 12, 22])
    np.testing.assert_array_equal(meta.data_file_to_index, [12, 22, 30])
    # Offsets differ by camera: top packs 2 episodes per file, wrist 3.
    top, wrist = meta.videos[TOP], meta.videos[WRIST]
    assert len(top.files) == 3 and len(wrist.files) == 2
    assert wrist.files[1].endswith("videos/observation.images.wrist/chunk-000/file-001.mp4")
    np.testing.assert_array_equal(top.file_index, [0, 0, 1, 1, 2])
    np.testing.assert_array_equal(wrist.file_index, [0, 0, 0, 1, 1])
    np.testing.assert_allclose(top.from_timestamp, [0, 5 / 30, 0, 6 / 30, 0])
    np.testing.assert_allclose(wrist.from_timestamp, [0, 5 / 30, 12 / 30, 0, 4 / 30])


@pytest.mark.parametrize("version", ["v21", "v30"])
def test_read_columns(version, request):
    written = request.getfixturevalue(f"lerobot_{version}")
    meta = read_lerobot_metadata(written.root)
    columns = read_columns(meta, ROW_COLUMNS)
    assert list(columns) == ROW_COLUMNS
    episode, frame = expected_rows(written)
    rows = meta.num_frames
    state = columns["observation.state"]
    assert state.shape == (rows, 6) and state.dtype == np.float32 and state.flags.c_contiguous
    np.testing.assert_array_equal(state, lerobot_datasets.state_values(episode, frame))
    np.testing.assert_array_equal(columns["action"], lerobot_datasets.action_values(episode, frame))
    np.testing.assert_array_equal(columns["episode_index"], episode)
    np.testing.assert_array_equal(columns["frame_index"], frame)
    np.testing.assert_array_equal(columns["index"], np.arange(rows))
    np.testing.assert_array_equal(columns["task_index"], np.array(written.episode_task)[episode])
    assert columns["timestamp"].dtype == np.float32
    np.testing.assert_allclose(columns["timestamp"], frame / 30, atol=1e-6)
    assert columns["index"].dtype == np.int64


def test_read_columns_of_variable_lists_without_videos(tmp_path):
    written = lerobot_datasets.write_v30(tmp_path / "ds", [3, 4, 2], cameras=[],
                                         episodes_per_file=2, list_type="list", state_dim=3)
    meta = read_lerobot_metadata(written.root)
    assert meta.cameras == () and meta.videos == {}
    state = read_columns(meta, "observation.state")["observation.state"]
    episode, frame = expected_rows(written)
    np.testing.assert_array_equal(state, lerobot_datasets.state_values(episode, frame, 3))


def test_read_columns_rejects_unknown_names(lerobot_v21):
    meta = read_lerobot_metadata(lerobot_v21.root)
    with pytest.raises(ValueError, match="observation.velocity"):
        read_columns(meta, ["observation.velocity"])
    with pytest.raises(ValueError, match=TOP):
        read_columns(meta, [TOP])


def test_v30_frames_at_offsets_show_their_rows(lerobot_v30):
    """from_timestamp + timestamp finds each row's frame in the packed files, per camera."""
    meta = read_lerobot_metadata(lerobot_v30.root)
    timestamp = read_columns(meta, ["timestamp"])["timestamp"].astype(np.float64)
    episode, frame = expected_rows(lerobot_v30)
    for camera in meta.cameras:
        videos = meta.videos[camera]
        for f, path in enumerate(videos.files):
            in_file = np.flatnonzero(videos.file_index[episode] == f)
            seconds = videos.from_timestamp[episode[in_file]] + timestamp[in_file]
            reader = stoker.VideoReader(path)
            assert reader.num_frames == len(in_file)
            marks = lerobot_datasets.read_marks(reader.get_frames_at(seconds, tolerance=1e-3))
            np.testing.assert_array_equal(marks[0], episode[in_file])
            np.testing.assert_array_equal(marks[1], frame[in_file])


def test_v21_videos_start_at_zero(lerobot_v21):
    meta = read_lerobot_metadata(lerobot_v21.root)
    for e, path in enumerate(meta.videos[WRIST].paths):
        reader = stoker.VideoReader(path)
        assert reader.num_frames == meta.length[e] and reader.pts[0] == 0.0
        marks = lerobot_datasets.read_marks(reader.get_frames([0, meta.length[e] - 1]))
        assert marks[0].tolist() == [e, e] and marks[1].tolist() == [0, meta.length[e] - 1]


# ---------------------------------------------------------------------------------------------
# Bad input


def edit_json(path, change):
    with open(path) as f:
        value = json.load(f)
    change(value)
    with open(path, "w") as f:
        json.dump(value, f)


def rewrite_parquet(path, change):
    table = change(pq.read_table(path))
    pq.write_table(table, path)


def replace_column(table, name, values):
    return table.set_column(table.schema.get_field_index(name), name, values)


@pytest.mark.parametrize("version,meta_file", [
    ("v21", "info.json"), ("v21", "episodes.jsonl"), ("v21", "tasks.jsonl"),
    ("v30", "info.json"), ("v30", "tasks.parquet"), ("v30", "episodes")])
def test_missing_meta_files(version, meta_file, request, lerobot_copy):
    root = lerobot_copy(request.getfixturevalue(f"lerobot_{version}"))
    path = os.path.join(root, "meta", meta_file)
    if os.path.isdir(path):
        import shutil
        shutil.rmtree(path)
    else:
        os.remove(path)
    with pytest.raises(DatasetError, match="missing meta file") as error:
        read_lerobot_metadata(root)
    assert path in str(error.value)


@pytest.mark.parametrize("version", ["v21", "v30"])
def test_unknown_codebase_version(version, request, lerobot_copy):
    root = lerobot_copy(request.getfixturevalue(f"lerobot_{version}"))
    edit_json(os.path.join(root, "meta", "info.json"),
              lambda info: info.update(codebase_version="v1.6"))
    with pytest.raises(DatasetError, match=r"unknown codebase_version 'v1.6' in .*info.json"):
        read_lerobot_metadata(root)


def test_empty_dataset_v21(lerobot_v21, lerobot_copy):
    root = lerobot_copy(lerobot_v21)
    open(os.path.join(root, "meta", "episodes.jsonl"), "w").close()
    with pytest.raises(DatasetError, match="empty dataset"):
        read_lerobot_metadata(root)


def test_empty_dataset_v30(lerobot_v30, lerobot_copy):
    root = lerobot_copy(lerobot_v30)
    for path in sorted(pq.ParquetDataset(os.path.join(root, "meta", "episodes")).files):
        rewrite_parquet(path, lambda table: table.slice(0, 0))
    with pytest.raises(DatasetError, match="empty dataset"):
        read_lerobot_metadata(root)


def test_camera_missing_from_some_episodes_v30(lerobot_v30, lerobot_copy):
    root = lerobot_copy(lerobot_v30)
    path = os.path.join(root, "meta", "episodes", "chunk-000", "file-001.parquet")  # episodes 2, 3
    for field in ("chunk_index", "file_index", "from_timestamp", "to_timestamp"):
        name = f"videos/{WRIST}/{field}"
        rewrite_parquet(path, lambda t: replace_column(
            t, name, pa.nulls(2, t.schema.field(name).type)))
    with pytest.raises(DatasetError, match=f"camera '{WRIST}' is missing from some episodes") as e:
        read_lerobot_metadata(root)
    assert "episode 2, episode 3" in str(e.value) and "episode 4" not in str(e.value)


def test_camera_missing_from_some_episodes_v21(lerobot_v21, lerobot_copy):
    root = lerobot_copy(lerobot_v21)
    paths = [os.path.join(root, f"videos/chunk-000/{WRIST}/episode_00000{e}.mp4") for e in (0, 2)]
    for path in paths:
        os.remove(path)
    with pytest.raises(DatasetError, match=f"missing video files of camera '{WRIST}'") as e:
        read_lerobot_metadata(root)
    assert f"episode 0 ({paths[0]})" in str(e.value) and f"episode 2 ({paths[1]})" in str(e.value)


def test_missing_video_file_v30(lerobot_v30, lerobot_copy):
    root = lerobot_copy(lerobot_v30)
    path = os.path.join(root, "videos", WRIST, "chunk-000", "file-001.mp4")
    os.remove(path)
    with pytest.raises(DatasetError, match=f"missing video files of camera '{WRIST}'") as e:
        read_lerobot_metadata(root)
    assert f"{path} (episodes 3, 4)" in str(e.value)


def test_empty_video_file_v21(lerobot_v21, lerobot_copy):
    root = lerobot_copy(lerobot_v21)
    path = os.path.join(root, f"videos/chunk-000/{TOP}/episode_000001.mp4")
    open(path, "w").close()
    with pytest.raises(DatasetError, match="episode 1") as e:
        read_lerobot_metadata(root)
    assert path in str(e.value)


def test_missing_data_file_v30(lerobot_v30, lerobot_copy):
    root = lerobot_copy(lerobot_v30)
    path = os.path.join(root, "data", "chunk-001", "file-000.parquet")
    os.remove(path)
    with pytest.raises(DatasetError, match="missing data files") as e:
        read_lerobot_metadata(root)
    assert path in str(e.value)


@pytest.mark.parametrize("version", ["v21", "v30"])
def test_schema_mismatch(version, request, lerobot_copy):
    root = lerobot_copy(request.getfixturevalue(f"lerobot_{version}"))
    meta = read_lerobot_metadata(root)
    changed = [meta.data_files[1], meta.data_files[2]]
    rewrite_parquet(changed[0], lambda t: replace_column(
        t, "index", t.column("index").cast(pa.int32())))
    rewrite_parquet(changed[1], lambda t: t.drop_columns(["action"]))
    with pytest.raises(DatasetError, match="differ in schema") as e:
        read_columns(meta, ["observation.state"])
    message = str(e.value)
    assert f"{changed[0]} (column 'index' is int32, not int64)" in message
    assert f"{changed[1]} (column 'action' missing)" in message


def test_inconsistent_timestamps_name_every_episode(lerobot_v30, lerobot_copy):
    root = lerobot_copy(lerobot_v30)
    meta = read_lerobot_metadata(root)
    # File 1 holds episodes 2 and 3: a 25 fps clock in both.
    rewrite_parquet(meta.data_files[1], lambda t: replace_column(
        t, "timestamp", pa.array((t.column("frame_index").to_numpy() / 25).astype(np.float32))))
    with pytest.raises(DatasetError, match="timestamps inconsistent with fps 30") as e:
        read_columns(meta, ["action"])
    message = str(e.value)
    assert "episode 2 (" in message and "episode 3 (" in message and "episode 1 (" not in message
    assert meta.data_files[1] in message
    # A looser tolerance accepts them (off by at most 7 frames * (1/25 - 1/30) = 0.0467 s).
    read_columns(meta, ["action"], tolerance_s=0.05)


def test_episode_rows_must_match_lengths_v21(lerobot_v21, lerobot_copy):
    root = lerobot_copy(lerobot_v21)
    meta = read_lerobot_metadata(root)
    rewrite_parquet(meta.data_files[1], lambda t: t.slice(0, 6))
    with pytest.raises(DatasetError, match="has 6 rows, but its episodes 1 have 7") as e:
        read_columns(meta, ["action"])
    assert meta.data_files[1] in str(e.value)


def test_episode_rows_must_carry_their_episode_v30(lerobot_v30, lerobot_copy):
    root = lerobot_copy(lerobot_v30)
    meta = read_lerobot_metadata(root)
    # In file 0 (episodes 0: 5 rows, 1: 7 rows), give episode 1's first row to episode 0.
    episode = np.repeat([0, 1], [6, 6])
    rewrite_parquet(meta.data_files[0], lambda t: replace_column(t, "episode_index",
                                                                 pa.array(episode)))
    with pytest.raises(DatasetError, match="do not match the episode lengths") as e:
        read_columns(meta, ["timestamp"])
    message = str(e.value)
    assert "episode 0 (6 rows carry its episode_index, its length is 5" in message
    assert "episode 1 (6 rows carry its episode_index, its length is 7" in message


def test_rows_must_be_ordered_by_index(lerobot_v30, lerobot_copy):
    root = lerobot_copy(lerobot_v30)
    meta = read_lerobot_metadata(root)
    rewrite_parquet(meta.data_files[1], lambda t: t.take([0, 2, 1] + list(range(3, t.num_rows))))
    with pytest.raises(DatasetError, match="not ordered by index") as e:
        read_columns(meta, ["action"])
    assert meta.data_files[1] in str(e.value)


def test_v30_row_ranges_must_match_lengths(lerobot_v30, lerobot_copy):
    root = lerobot_copy(lerobot_v30)
    path = os.path.join(root, "meta", "episodes", "chunk-000", "file-001.parquet")  # episodes 2, 3
    rewrite_parquet(path, lambda t: replace_column(t, "length", pa.array([6, 5])))
    with pytest.raises(DatasetError, match="not contiguous or do not match their lengths") as e:
        read_lerobot_metadata(root)
    assert "episode 3 (" in str(e.value)


# ---------------------------------------------------------------------------------------------
# Drift of packed v3.0 videos


def packed(tmp_path, cache, codec, fps, length, offsets="nominal", episodes=120):
    """A v3.0 dataset of ``episodes`` equal episodes packed into one video file."""
    written = lerobot_datasets.write_v30(
        tmp_path / f"packed-{offsets}", [length] * episodes, [TOP], fps=fps, codec=codec,
        episodes_per_file=episodes, mark_episodes=False, offsets=offsets, cache_dir=cache)
    meta = read_lerobot_metadata(written.root)
    videos = meta.videos[TOP]
    assert len(videos.files) == 1
    reader = stoker.VideoReader(videos.files[0])
    assert reader.num_frames == episodes * length
    # Frame arithmetic inside each episode holds: its frames are 1 / fps apart.
    np.testing.assert_allclose(np.diff(reader.pts.reshape(episodes, length), axis=1), 1 / fps,
                               atol=1e-4)
    drift = reader.pts[meta.dataset_from_index] - videos.from_timestamp
    past = np.flatnonzero(np.abs(drift) > 0.5 / fps)
    print(f"\n{codec} {fps} fps, {length}-frame episodes, {offsets} offsets: drift (ms) at "
          f"episodes 1, 2, 3, 50, {episodes - 1} = "
          f"{np.round(drift[[1, 2, 3, 50, -1]] * 1e3, 3).tolist()}; half a frame = "
          f"{500 / fps:.2f} ms; first episode past it: {past[0] if past.size else None}")
    return meta, reader, drift


@pytest.mark.parametrize("codec,fps,length", [("av1", 30, 4), ("av1", 15, 10), ("h264", 30, 4),
                                              ("av1", 30, 3)])
def test_packed_video_drift(codec, fps, length, tmp_path, lerobot_cache):
    """Stream-copy packing of 120 episodes: summed length / fps drifts from the real pts.

    Measured, not assumed. An MP4's container duration is its stream duration rounded up to
    whole milliseconds, and the concat demuxer starts each next file that much later. So where
    length / fps is not a whole number of milliseconds (4 / 30 s, 10 / 15 s) every boundary
    adds 1/3 or 2/3 ms (quantised to the 1/15360 s time base) and the drift passes half a frame
    long before episode 120; where it is (3 / 30 s = 100 ms) there is none. The codec does not
    matter.
    """
    meta, reader, drift = packed(tmp_path, lerobot_cache, codec, fps, length)
    if (length * 1000) % fps == 0:
        assert np.abs(drift).max() < 1e-4
    else:
        assert drift[1] > 1e-4  # already beyond LeRobot's default tolerance at episode 1
        assert np.all(np.diff(drift) >= 0)
        assert drift[-1] > 0.5 / fps
        # Nearest-timestamp matching now picks the wrong frame for the last episode's start.
        from_timestamp = meta.videos[TOP].from_timestamp
        nearest = int(np.argmin(np.abs(reader.pts - from_timestamp[-1])))
        assert nearest != meta.dataset_from_index[-1]


def test_packed_video_drift_with_probed_durations(tmp_path, lerobot_cache):
    """Summing ffprobe's container durations, as LeRobot's own code does, does not drift.

    The container durations are the same millisecond-rounded values the concat demuxer
    offsets by, so the summed from_timestamp stays within one time-base tick (1/15360 s at
    30 fps) of the real first-frame pts, inside LeRobot's 1e-4 s tolerance, over 120 episodes.
    """
    _, _, drift = packed(tmp_path, lerobot_cache, "av1", 30, 4, offsets="probed")
    assert np.abs(drift).max() < 1e-4
