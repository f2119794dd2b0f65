"""stoker etl: a LeRobot dataset materialized at training size, as a valid LeRobot v3.0 dataset
with the same frames (resized, within encoder tolerance), the same timestamps and the same rows;
JSON columns typed; resumable after an interruption; bad episodes raised or skipped."""

import json
import os
import signal
import subprocess
import sys
import time

import lerobot_datasets
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import stoker
from stoker.datasets.lerobot import format as lerobot_format
from stoker.writers import etl
from stoker.writers.typed_columns import TypedColumnError, convert_json_columns

SIZE = (32, 48)  # (height, width) of the materialized frames
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def materialize(src, dst, **kwargs):
    kwargs.setdefault("size", SIZE)
    kwargs.setdefault("workers", 2)
    kwargs.setdefault("progress", False)
    return etl.materialize(src, dst, **kwargs)


def all_items(ds):
    return [ds[i] for i in range(len(ds))]


@pytest.fixture(params=["v21", "v30"])
def written(request, lerobot_v21, lerobot_v30):
    return {"v21": lerobot_v21, "v30": lerobot_v30}[request.param]


def test_round_trip_keeps_frames_times_and_rows(written, tmp_path):
    dst = str(tmp_path / "dst")
    report = materialize(written.root, dst)
    assert report.verified and report.max_time_error_s <= 1e-6
    assert report.episodes_done == list(range(len(written.lengths)))
    assert report.units_transcoded == report.units_total == len(written.lengths) * 2
    assert report.frames == sum(written.lengths)

    # Valid LeRobot v3.0 metadata, with the new video size and codec.
    info = json.load(open(os.path.join(dst, "meta", "info.json")))
    assert info["codebase_version"] == "v3.0"
    assert info["total_episodes"] == len(written.lengths)
    assert info["total_frames"] == sum(written.lengths)
    for camera in written.cameras:
        feature = info["features"][camera]
        assert feature["shape"] == [*SIZE, 3]
        assert feature["info"]["video.codec"] == "h264"
        assert (feature["info"]["video.height"], feature["info"]["video.width"]) == SIZE
    meta = stoker.datasets.lerobot.metadata.read_lerobot_metadata(dst)
    assert meta.codebase_version == "v3.0" and list(meta.length) == written.lengths
    assert os.path.exists(os.path.join(dst, etl.REPORT_PATH))
    assert json.load(open(os.path.join(dst, etl.REPORT_PATH)))["verified"] is True

    # One file per episode and camera, starting at 0, lasting the episode.
    episodes = pq.read_table(lerobot_format.file_path(
        dst, lerobot_format.EPISODES_PATH, 0, info["chunks_size"])).to_pydict()
    for camera in written.cameras:
        assert episodes[f"videos/{camera}/from_timestamp"] == [0.0] * len(written.lengths)
        for e, n in enumerate(written.lengths):
            path = meta.videos[camera].paths[e]
            chunk, file = divmod(e, info["chunks_size"])  # the source's chunks_size
            assert path.endswith(f"videos/{camera}/chunk-{chunk:03d}/file-{file:03d}.mp4")
            reader = stoker.VideoReader(path)
            assert (reader.codec, reader.height, reader.width, reader.num_frames) == \
                ("h264", *SIZE, n)
            assert episodes[f"videos/{camera}/to_timestamp"][e] == pytest.approx(
                reader.duration, abs=1e-9)
            # Frame times: the source's, relative to the episode's first frame.
            source = stoker.VideoReader(written.video_paths[camera][e])
            first = int(np.argmin(np.abs(source.pts - written.from_timestamp[camera][e])))
            expected = source.pts[first:first + n] - source.pts[first]
            np.testing.assert_allclose(reader.pts, expected, rtol=0, atol=1e-6)
            assert np.flatnonzero(reader.is_key).tolist() == list(range(0, n, etl.DEFAULT_GOP))

    # Items: the same rows, the same frames resized (identity exact, pixels within tolerance).
    ours = stoker.LeRobotDataset(dst, progress=False, output="numpy")
    theirs = stoker.LeRobotDataset(written.root, stoker.WindowSpec(size=SIZE), progress=False, output="numpy")
    assert len(ours) == len(theirs) == sum(written.lengths)
    for mine, reference in zip(all_items(ours), all_items(theirs)):
        assert set(mine) == set(reference)
        for key, expected in reference.items():
            if key in written.cameras:
                got = mine[key]
                assert got.shape == expected.shape == (3, *SIZE)
                assert np.abs(got.astype(int) - expected.astype(int)).mean() < 4, key
                assert lerobot_datasets.read_marks(got[None], "NCHW") == \
                    lerobot_datasets.read_marks(expected[None], "NCHW")
            elif key == "task":
                assert mine[key] == expected
            else:
                np.testing.assert_array_equal(mine[key], expected, err_msg=key)
    # The stoker index of DST was built by the run.
    assert os.path.exists(os.path.join(dst, ".stoker", "index-v1.bin"))


def test_loader_reads_the_materialized_dataset(lerobot_v30, tmp_path):
    dst = str(tmp_path / "dst")
    materialize(lerobot_v30.root, dst, gop=4)
    camera = lerobot_v30.cameras[0]
    spec = stoker.WindowSpec(delta_indices={camera: [-1, 0], "action": [0, 1, 2]})
    ds = stoker.LeRobotDataset(dst, spec, progress=False, output="numpy")
    rows, marks = [], []
    for batch in stoker.Loader(ds, batch_size=4, shuffle=True, seed=0, threads=2,
                               output="numpy"):
        assert batch[camera].shape[1:] == (2, 3, *SIZE)
        rows.append(np.array(batch["index"]))
        episode, frame = lerobot_datasets.read_marks(batch[camera][:, 1], "NCHW")
        marks.append(np.stack([episode, frame], axis=1))
        np.testing.assert_array_equal(
            batch["action"][:, 0], lerobot_datasets.action_values(episode, frame))
    rows, marks = np.concatenate(rows), np.concatenate(marks)
    assert sorted(rows.tolist()) == list(range(sum(lerobot_v30.lengths)))
    starts = np.cumsum([0] + lerobot_v30.lengths)
    expected_episode = np.searchsorted(starts, rows, side="right") - 1
    np.testing.assert_array_equal(marks[:, 0], expected_episode)
    np.testing.assert_array_equal(marks[:, 1], rows - starts[expected_episode])


def test_av1_and_a_camera_subset(lerobot_v21, tmp_path):
    dst = str(tmp_path / "dst")
    top = lerobot_v21.cameras[0]
    report = materialize(lerobot_v21.root, dst, size=(64, 64), codec="av1", gop=3,
                         cameras=[top])
    assert report.units_total == len(lerobot_v21.lengths)
    meta = stoker.datasets.lerobot.metadata.read_lerobot_metadata(dst)
    assert meta.cameras == (top,)
    assert not os.path.exists(os.path.join(dst, "videos", lerobot_v21.cameras[1]))
    reader = stoker.VideoReader(meta.videos[top].paths[1])
    assert reader.codec == "av1" and reader.num_frames == lerobot_v21.lengths[1]
    frames = reader.get_frames(np.arange(reader.num_frames))
    episode, frame = lerobot_datasets.read_marks(frames)
    assert episode.tolist() == [1] * reader.num_frames
    assert frame.tolist() == list(range(reader.num_frames))


# ---------------------------------------------------------------------------------------------
# Typed columns


def test_json_columns_become_typed_columns(lerobot_v30, lerobot_copy, tmp_path):
    src = lerobot_copy(lerobot_v30)
    copied = lerobot_datasets.WrittenDataset(
        src, "v3.0", lerobot_v30.lengths, 30, lerobot_v30.cameras, lerobot_v30.tasks,
        lerobot_v30.episode_task,
        data_paths=[p.replace(lerobot_v30.root, src) for p in lerobot_v30.data_paths])
    lerobot_datasets.add_json_column(copied)
    dst = str(tmp_path / "dst")
    report = materialize(src, dst)

    table = pq.read_table(os.path.join(dst, "data", "chunk-000", "file-000.parquet"))
    types = {field.name: field.type for field in table.schema}
    assert "annotation" not in types
    assert types["annotation.score"] == pa.float64()
    assert types["annotation.count"] == pa.int64()
    assert types["annotation.visible"] == pa.bool_()
    assert types["annotation.label"] == pa.string()
    assert types["annotation.box"] == pa.list_(pa.int64(), 4)
    assert types["annotation.corners"] == pa.list_(pa.float64(), 4)  # 2 x 2, flattened
    assert pa.types.is_list(types["annotation.track"])  # 0-2 values: variable length
    assert types["annotation.pose.x"] == pa.float64()
    assert pa.types.is_list(types["annotation.objects.xy"])
    assert types["annotation.objects.xy"].value_type == pa.list_(pa.int64(), 2)
    assert types["annotation.objects.name"] == pa.string()  # lists of strings stay JSON
    # The columns keep their place: after the source's columns, where "annotation" was.
    assert table.column_names[:7] == ["observation.state", "action", "timestamp", "frame_index",
                                      "episode_index", "index", "task_index"]

    # Every value is the one the JSON held.
    rows = pa.concat_tables([pq.read_table(p) for p in sorted(
        __import__("glob").glob(os.path.join(dst, "data", "*", "*.parquet")))]).to_pylist()
    for row in rows:
        value = lerobot_datasets.annotation(row["episode_index"], row["frame_index"])
        assert row["annotation.score"] == value["score"]
        assert row["annotation.count"] == value["count"]
        assert row["annotation.visible"] == value["visible"]
        assert row["annotation.label"] == value["label"]
        assert row["annotation.box"] == value["box"]
        assert row["annotation.corners"] == [v for pair in value["corners"] for v in pair]
        assert row["annotation.track"] == value["track"]
        assert row["annotation.pose.y"] == value["pose"]["y"]
        assert row["annotation.objects.xy"] == [o["xy"] for o in value["objects"]]
        assert json.loads(row["annotation.objects.name"]) == [o["name"] for o in value["objects"]]

    # info.json describes them as LeRobot features; the report says what became what.
    features = json.load(open(os.path.join(dst, "meta", "info.json")))["features"]
    assert "annotation" not in features
    assert features["annotation.box"] == {"dtype": "int64", "shape": [4], "names": None}
    assert features["annotation.track"]["shape"] == [-1]
    assert features["annotation.objects.xy"]["shape"] == [-1, 2]
    (typed,) = report.typed_columns
    assert typed["source"] == "annotation"
    assert typed["columns"]["annotation.corners"]["json_shape"] == [2, 2]
    assert "annotation.objects.name" in typed["kept_as_json"]

    # stoker reads the fixed-size numeric ones as arrays, in windows, without parsing.
    spec = stoker.WindowSpec(delta_indices={"annotation.box": [0, 1]})
    ds = stoker.LeRobotDataset(dst, spec, progress=False, output="numpy")
    assert ds.index.column("annotation.corners").shape == (sum(lerobot_v30.lengths), 4)
    item = ds[3]  # episode 0, frame 3
    np.testing.assert_array_equal(item["annotation.box"], [[3, 0, 7, 4], [4, 0, 8, 4]])
    assert item["annotation.score"] == pytest.approx(3 / 8)


def test_mismatched_json_structure_raises_naming_column_and_row(lerobot_v21, lerobot_copy,
                                                               tmp_path):
    src = lerobot_copy(lerobot_v21)
    copied = lerobot_datasets.WrittenDataset(
        src, "v2.1", lerobot_v21.lengths, 30, lerobot_v21.cameras, lerobot_v21.tasks,
        lerobot_v21.episode_task,
        data_paths=[p.replace(lerobot_v21.root, src) for p in lerobot_v21.data_paths])

    def odd(episode, frame):  # episode 1, frame 3 (dataset row 8) lacks "y"
        return {"x": frame, "y": [1, 2]} if (episode, frame) != (1, 3) else {"x": frame}

    lerobot_datasets.add_json_column(copied, "ann", odd)
    dst = str(tmp_path / "dst")
    with pytest.raises(TypedColumnError) as raised:
        materialize(src, dst)
    message = str(raised.value)
    assert "'ann'" in message and "row 8 (episode 1, frame 3)" in message, message
    assert "lacks 'y'" in message, message
    assert isinstance(raised.value, stoker.DatasetError)
    assert not os.path.exists(os.path.join(dst, "meta", "info.json"))
    # As text it goes through untouched.
    materialize(src, dst, json_columns="none")
    table = pq.read_table(os.path.join(dst, "data", "chunk-000", "file-000.parquet"))
    assert table.schema.field("ann").type == pa.string()


def test_typed_column_inference():
    rows = [{"a": 1, "b": [1, 2.5], "c": {"d": [[1, 2], [3, 4]]}},
            {"a": 2, "b": [3, 4], "c": {"d": [[5, 6], [7, 8]]}}]
    table = pa.table({"j": [json.dumps(r) for r in rows], "text": ["x", "y"]})
    out, typed, features = convert_json_columns(table, ["j"])
    assert out.column_names == ["j.a", "j.b", "j.c.d", "text"]
    assert out.column("j.b").type == pa.list_(pa.float64(), 2)
    assert out.column("j.c.d").to_pylist() == [[1, 2, 3, 4], [5, 6, 7, 8]]
    assert features["j.c.d"] == {"dtype": "int64", "shape": [4], "names": None}
    assert typed[0].columns["j.c.d"][2] == [2, 2]
    for bad, says in [(['{"a": 1}', '{"a": "x"}'], "j.a is a string, but an integer"),
                      (['[1, 2]', '[1, [2]]'], "j[1] is a list, but an integer"),
                      (['{"a": 1}', '{"a": null}'], "j.a is null"),
                      (['{"a": 1}', 'not json'], "row 1 is not JSON"),
                      (['{"a": 1}', None], "row 1 is null")]:
        with pytest.raises(TypedColumnError, match=None) as raised:
            convert_json_columns(pa.table({"j": pa.array(bad, pa.string())}), ["j"])
        assert says in str(raised.value), str(raised.value)


# ---------------------------------------------------------------------------------------------
# Bad input


def test_an_episode_that_cannot_be_decoded_raises_or_is_skipped(lerobot_v21, lerobot_copy,
                                                                tmp_path):
    src = lerobot_copy(lerobot_v21)
    top, wrist = lerobot_v21.cameras
    bad = os.path.join(src, os.path.relpath(lerobot_v21.video_paths[top][1], lerobot_v21.root))
    lerobot_datasets.corrupt_media_data(bad)

    dst = str(tmp_path / "raised")
    with pytest.raises(stoker.DecodeError) as raised:
        materialize(src, dst)
    message = str(raised.value)
    assert "episode 1" in message and bad in message and repr(top) in message, message
    assert not os.path.exists(os.path.join(dst, "meta", "info.json"))

    dst = str(tmp_path / "skipped")
    report = materialize(src, dst, on_error="skip")
    assert list(report.episodes_skipped) == [1]
    assert bad in report.episodes_skipped[1]
    assert report.episode_map == report.episodes_done == [0, 2]
    saved = json.load(open(os.path.join(dst, etl.REPORT_PATH)))
    assert list(saved["episodes_skipped"]) == ["1"]
    # A valid dataset without it: episodes renumbered, rows contiguous.
    ds = stoker.LeRobotDataset(dst, progress=False, output="numpy")
    lengths = [lerobot_v21.lengths[0], lerobot_v21.lengths[2]]
    assert len(ds) == sum(lengths) and ds.num_episodes == 2
    items = all_items(ds)
    assert [int(i["index"]) for i in items] == list(range(sum(lengths)))
    assert [int(i["episode_index"]) for i in items] == [0] * lengths[0] + [1] * lengths[1]
    source_episode = [lerobot_datasets.read_marks(i[top][None], "NCHW")[0][0] for i in items]
    assert source_episode == [0] * lengths[0] + [2] * lengths[1]
    np.testing.assert_array_equal(  # rows follow their frames
        np.stack([i["observation.state"] for i in items[lengths[0]:]]),
        lerobot_datasets.state_values(2, np.arange(lengths[1])))
    # The other camera's video of the skipped episode is not left behind.
    assert len(os.listdir(os.path.join(dst, "videos", wrist, "chunk-000"))) == 2


# ---------------------------------------------------------------------------------------------
# Interruption and resume


def _video_files(dst, suffix=".mp4"):
    """Finished videos (or, with suffix=".partial", unfinished ones): path -> (inode, mtime)."""
    found = {}
    for folder, _, names in os.walk(os.path.join(dst, "videos")):
        for name in names:
            if not name.endswith(suffix):
                continue
            path = os.path.join(folder, name)
            stat = os.stat(path)
            found[path] = (stat.st_ino, stat.st_mtime_ns)
    return found


def test_an_interrupted_run_resumes_without_redoing_finished_episodes(lerobot_v30, tmp_path):
    dst = str(tmp_path / "dst")
    calls = []

    def stop_after_three(done, total):
        calls.append((done, total))
        if done == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        materialize(lerobot_v30.root, dst, workers=1, progress=stop_after_three)
    assert not os.path.exists(os.path.join(dst, "meta", "info.json"))
    finished = _video_files(dst)
    # The three reported, and the one running when the interruption came: it was let finish.
    assert 3 <= len(finished) <= 4

    # Other arguments are refused rather than mixed into the same folder.
    with pytest.raises(ValueError, match="differs"):
        materialize(lerobot_v30.root, dst, gop=3)

    report = materialize(lerobot_v30.root, dst)
    assert report.units_resumed == len(finished)
    assert report.units_transcoded == report.units_total - len(finished)
    assert report.verified
    after = _video_files(dst)
    for path, identity in finished.items():
        assert after[path] == identity, path  # the same file: not rewritten
    assert len(stoker.LeRobotDataset(dst, progress=False, output="numpy")) == sum(lerobot_v30.lengths)


def _contents(paths):
    return {path: open(path, "rb").read() for path in paths}


def test_a_damaged_finished_video_is_redone_on_resume(lerobot_v30, tmp_path):
    """A finished-named video damaged after its run wrote it (cut to half its bytes; one byte
    changed) fails its journaled size or SHA-256 on the next run and is encoded again (the
    issue: every rerun failed with 'the episode needs N frames, the file has M'); the result is
    the uninterrupted run's, byte for byte."""
    dst = str(tmp_path / "dst")
    first = materialize(lerobot_v30.root, dst)
    videos = sorted(_video_files(dst))
    original = _contents(videos)
    cut, flipped = videos[-1], videos[0]
    with open(cut, "r+b") as f:
        f.truncate(len(original[cut]) // 2)
    with open(flipped, "r+b") as f:
        f.seek(len(original[flipped]) - 100)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    report = materialize(lerobot_v30.root, dst)
    assert report.verified
    assert report.units_redone == report.units_transcoded == 2
    assert report.units_resumed == first.units_total - 2
    assert _contents(videos) == original

    # Without the journal (a run killed between a rename and its journal line), a file is
    # checked by reading it back: the cut one is redone, the others are kept and journaled.
    os.remove(os.path.join(dst, etl.STATE_DIR, "units.jsonl"))
    with open(cut, "r+b") as f:
        f.truncate(len(original[cut]) // 2)
    report = materialize(lerobot_v30.root, dst)
    assert report.verified and report.units_redone == report.units_transcoded == 1
    assert _contents(videos) == original
    with open(os.path.join(dst, etl.STATE_DIR, "units.jsonl")) as f:
        journaled = {json.loads(line)["target"] for line in f}
    assert journaled == {os.path.relpath(path, dst) for path in videos}


def test_a_run_failing_after_its_metadata_leaves_no_info_json(lerobot_v30, tmp_path,
                                                              monkeypatch):
    """meta/info.json is removed whatever fails after it was written (here DST's index
    build; the issue saw it left behind), so an unfinished DST is never taken for a dataset."""
    dst = str(tmp_path / "dst")
    build_index = etl.load_index

    def failing(path, **kwargs):
        if os.path.abspath(path) == dst:
            raise stoker.DatasetError(f"{path}: the index cannot be built")
        return build_index(path, **kwargs)

    monkeypatch.setattr(etl, "load_index", failing)
    with pytest.raises(stoker.DatasetError, match="the index cannot be built"):
        materialize(lerobot_v30.root, dst)
    assert not os.path.exists(os.path.join(dst, "meta", "info.json"))
    monkeypatch.setattr(etl, "load_index", build_index)
    assert materialize(lerobot_v30.root, dst).verified


def test_a_killed_command_resumes(tmp_path):
    # Slow units (AV1 at a slow preset, one at a time) so the kill lands mid-run.
    written = lerobot_datasets.write_v21(tmp_path / "src", [20] * 8, ("cam",), codec="h264",
                                         cache_dir=str(tmp_path / "encodes"))
    dst = str(tmp_path / "dst")
    command = [sys.executable, "-m", "stoker", "etl", written.root, dst, "--size", "64x64",
               "--codec", "av1", "--preset", "4", "--workers", "1", "--no-progress"]
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not _video_files(dst) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not os.path.exists(os.path.join(dst, "meta", "info.json")), \
        "the run ended before it could be interrupted"
    finished = _video_files(dst)
    assert finished

    result = subprocess.run(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    assert result.returncode == 0, result.stderr
    after = _video_files(dst)
    assert len(after) == 8
    for path, identity in finished.items():
        assert after[path] == identity, path
    report = json.load(open(os.path.join(dst, etl.REPORT_PATH)))
    assert report["verified"] and report["units_resumed"] == len(finished)
    assert not _video_files(dst, ".partial")


def test_command_line_errors_are_reported(lerobot_v21, tmp_path):
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    result = subprocess.run([sys.executable, "-m", "stoker", "etl", lerobot_v21.root,
                             str(tmp_path / "dst"), "--size", "33x32"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert result.returncode == 1
    assert "even" in result.stderr
    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "file").write_text("x")
    with pytest.raises(FileExistsError):
        materialize(lerobot_v21.root, str(occupied))
