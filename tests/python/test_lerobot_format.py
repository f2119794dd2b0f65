"""The LeRobot layout module: checked reads of the meta files, the v3.0 writer's round trip, and
the statistics stoker etl writes."""

import glob
import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stoker.datasets.lerobot import format as lerobot_format
from stoker.datasets.lerobot.metadata import DatasetError, read_lerobot_metadata
from stoker.writers import etl

STATE = "observation.state"


# ---------------------------------------------------------------------------------------------
# Reading


def test_columns_become_numpy_arrays_as_to_numpy_gives_them():
    # numbers(), null_flags() and string_array() stand in for pyarrow's to_numpy() and
    # pa.array(), which import pandas: the same values, sliced chunks and nulls included.
    chunks = [pa.array([1, 2, None, 4], pa.int32()).slice(1), pa.array([7], pa.int32())]
    column = pa.chunked_array(chunks)
    np.testing.assert_array_equal(lerobot_format.numbers(column, np.int64, fill=-1), [2, -1, 4, 7])
    np.testing.assert_array_equal(lerobot_format.null_flags(column), [False, True, False, False])
    with pytest.raises(ValueError, match="missing"):
        lerobot_format.numbers(column, np.int64)
    for values in (pa.array([1.5, -2.0], pa.float16()), pa.array([2**40, 3], pa.uint64()),
                   pa.array([0.25, 1e300], pa.float64()), pa.array([-3, 9], pa.int8())):
        got = lerobot_format.numbers(values.slice(1), np.float64)
        assert got.dtype == np.float64
        np.testing.assert_array_equal(got, values.slice(1).to_numpy().astype(np.float64))
    assert lerobot_format.numbers(pa.chunked_array([], pa.int64()), np.int64).shape == (0,)
    texts = ["pick", "", "place the cube", "é"]
    assert lerobot_format.string_array(texts).equals(pa.array(texts, pa.string()))


@pytest.mark.parametrize("tasks,expected", [
    ([["TWO"], [], None], [1, -1, -1]),  # lists: the first; none listed, or no list: -1
    ([["ONE", "TWO"], [None, "ONE"], ["TWO"]], [0, -1, 1]),  # a null first task: none
    (["TWO", None, "ONE"], [1, -1, 0]),  # one text per episode, as older writers stored it
])
def test_each_episode_has_its_first_tasks_index(tasks, expected, lerobot_v21, lerobot_copy):
    root = lerobot_copy(lerobot_v21)
    texts = {t: text for t, text in enumerate(lerobot_v21.tasks)}
    assert len(texts) == 2
    named = [
        None if t is None else ([texts[0] if x == "ONE" else texts[1] if x else x for x in t]
                                if isinstance(t, list) else texts[0 if t == "ONE" else 1])
        for t in tasks
    ]
    with open(os.path.join(root, "meta", "episodes.jsonl"), "w") as f:
        for e, n in enumerate(lerobot_v21.lengths):
            f.write(json.dumps({"episode_index": e, "tasks": named[e], "length": n}) + "\n")
    np.testing.assert_array_equal(read_lerobot_metadata(root).task_index, expected)
    # A task the tasks table does not have is named with its episode.
    named[2] = ["no such task"] if isinstance(tasks[0], list) else "no such task"
    with open(os.path.join(root, "meta", "episodes.jsonl"), "w") as f:
        for e, n in enumerate(lerobot_v21.lengths):
            f.write(json.dumps({"episode_index": e, "tasks": named[e], "length": n}) + "\n")
    with pytest.raises(DatasetError, match="missing from the tasks table: episode 2"):
        read_lerobot_metadata(root)


@pytest.mark.parametrize("text,problem", [
    ("{\"codebase_version\": \"v3.0\",", "cannot read meta file"),
    ("[1, 2, 3]", "does not hold a JSON object"),
])
def test_a_malformed_info_json_raises_naming_the_file(text, problem, lerobot_v30, lerobot_copy):
    root = lerobot_copy(lerobot_v30)
    path = os.path.join(root, "meta", "info.json")
    with open(path, "w") as f:
        f.write(text)
    with pytest.raises(DatasetError, match=problem) as error:
        read_lerobot_metadata(root)
    assert path in str(error.value)


@pytest.mark.parametrize("field,value,problem", [
    ("fps", "fast", "'fps' must be a positive number of frames per second, got \"fast\""),
    ("fps", None, "'fps' must be a positive number of frames per second, got null"),
    ("fps", True, "'fps' must be a positive number of frames per second, got true"),
    ("fps", 0, "'fps' must be a positive number of frames per second, got 0"),
    ("chunks_size", 0, "chunks_size must be a positive integer"),
    ("features", {"action": {"dtype": "float32"}}, "feature 'action' lacks"),
    ("video_path", None, "no video_path"),
])
def test_bad_info_fields_raise_naming_the_file(field, value, problem, lerobot_v21, lerobot_copy):
    root = lerobot_copy(lerobot_v21)
    path = os.path.join(root, "meta", "info.json")
    with open(path) as f:
        info = json.load(f)
    info[field] = value
    with open(path, "w") as f:
        json.dump(info, f)
    with pytest.raises(DatasetError, match=problem) as error:
        lerobot_format.read_info(root)
    assert path in str(error.value)


def test_the_metadata_keeps_info_json_and_its_chunks_size(lerobot_v30):
    meta = read_lerobot_metadata(lerobot_v30.root)
    assert meta.chunks_size == 2
    assert meta.info["robot_type"] == "stoker_test"
    assert meta.info["features"][STATE]["names"][0] == "joint_0"


def test_a_malformed_episodes_stats_line_raises_naming_file_and_line(lerobot_v21, lerobot_copy):
    root = lerobot_copy(lerobot_v21)
    path = os.path.join(root, lerobot_format.V21_EPISODES_STATS_PATH)
    with open(path, "w") as f:
        f.write(json.dumps({"episode_index": 0, "stats": {}}) + "\n\n{oops\n")
    episodes = lerobot_format.read_episode_table(root, "v2.1")
    with pytest.raises(DatasetError, match="line 3") as error:
        lerobot_format.read_episode_stats(root, episodes)
    assert path in str(error.value)


# ---------------------------------------------------------------------------------------------
# Writing v3.0


def test_written_tables_read_back(tmp_path):
    root = str(tmp_path)
    lengths = [3, 0, 5]
    videos = {"cam": lerobot_format.EpisodeVideos(np.array([0, 0, 1]), np.array([0.0, 0.1, 0.0]),
                                                  np.array([0.1, 0.1, 0.2]))}
    columns = lerobot_format.episode_columns(lengths, [["a"], [], ["b", "a"]], np.array([0, 0, 1]),
                                             videos, chunks_size=2)
    lerobot_format.write_episodes(root, columns, chunks_size=2, file_of_episode=np.array([0, 1, 2]))
    assert os.path.exists(lerobot_format.file_path(root, lerobot_format.EPISODES_PATH, 2, 2))
    assert lerobot_format.file_path(root, lerobot_format.EPISODES_PATH, 2, 2).endswith(
        "meta/episodes/chunk-001/file-000.parquet")
    table = lerobot_format.read_episode_table(root, "v3.0")
    assert table.column("dataset_from_index").to_pylist() == [0, 3, 3]
    assert table.column("dataset_to_index").to_pylist() == [3, 3, 8]
    assert table.column("videos/cam/file_index").to_pylist() == [0, 0, 1]
    assert table.column("meta/episodes/chunk_index").to_pylist() == [0, 0, 1]
    assert lerobot_format.task_lists(table).to_pylist() == [["a"], [], ["b", "a"]]

    # Rewriting with fewer files removes the ones no longer written.
    lerobot_format.write_episodes(root, columns, chunks_size=2)
    assert not os.path.exists(lerobot_format.file_path(root, lerobot_format.EPISODES_PATH, 2, 2))
    assert lerobot_format.read_episode_table(root, "v3.0").num_rows == 3

    lerobot_format.write_tasks(root, ["pick", "", "place"])
    texts, task_index = lerobot_format.read_tasks(root, "v3.0")
    assert list(texts) == ["pick", "", "place"] and list(task_index) == [0, 2]


def test_data_files_hold_whole_episodes_up_to_the_size():
    # 100 bytes per row, files of 0.001 MB = 10 rows: an episode never straddles two files.
    file = lerobot_format.data_files_by_size([4, 4, 4, 12, 1], bytes_per_row=100, size_in_mb=1e-3)
    assert file.tolist() == [0, 0, 1, 2, 3]


def test_aggregated_stats_are_those_of_the_pooled_values():
    rng = np.random.default_rng(0)
    parts = [rng.normal(size=(n, 3)) for n in (4, 9, 2)]

    def stats(values):
        return {"min": values.min(0), "max": values.max(0), "mean": values.mean(0),
                "std": values.std(0), "count": np.array([len(values)])}

    result = lerobot_format.aggregate_stats([{STATE: stats(p), "other": stats(p)} for p in parts],
                                            {STATE})
    assert set(result) == {STATE}
    expected = stats(np.concatenate(parts))
    for key in ("min", "max", "mean", "std", "count"):
        np.testing.assert_allclose(result[STATE][key], expected[key], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("version", ["v21", "v30"])
def test_etl_aggregates_the_kept_episodes_statistics(version, request, lerobot_copy, tmp_path):
    written = request.getfixturevalue(f"lerobot_{version}")
    root = lerobot_copy(written)
    cameras = written.cameras
    rng = np.random.default_rng(1)
    per_episode = [{feature: {"min": rng.random(6), "max": 1 + rng.random(6),
                              "mean": rng.random(6), "std": rng.random(6), "count": np.array([n])}
                    for feature in (STATE, cameras[0], cameras[1])}
                   for n in written.lengths]
    if version == "v21":
        with open(os.path.join(root, lerobot_format.V21_EPISODES_STATS_PATH), "w") as f:
            for e, stats in enumerate(per_episode):
                f.write(json.dumps({"episode_index": e, "stats": {
                    feature: {k: v.tolist() for k, v in values.items()}
                    for feature, values in stats.items()}}) + "\n")
    else:
        for path in glob.glob(os.path.join(root, "meta", "episodes", "*", "*.parquet")):
            table = pq.read_table(path)
            episodes = table.column("episode_index").to_pylist()
            for feature in per_episode[0]:
                for statistic in per_episode[0][feature]:
                    table = table.append_column(f"stats/{feature}/{statistic}", pa.array(
                        [per_episode[e][feature][statistic].tolist() for e in episodes]))
            pq.write_table(table, path)

    dst = str(tmp_path / "dst")
    etl.materialize(root, dst, size=(32, 32), cameras=[cameras[0]], workers=2, progress=False)
    with open(os.path.join(dst, lerobot_format.STATS_PATH)) as f:
        saved = json.load(f)
    # The camera left out has no statistics in DST; the others are LeRobot's aggregate.
    assert set(saved) == {STATE, cameras[0]}
    expected = lerobot_format.aggregate_stats(per_episode, {STATE, cameras[0]})
    for feature, values in expected.items():
        for key, value in values.items():
            np.testing.assert_allclose(saved[feature][key], value, rtol=1e-12)
    if version == "v30":  # and the per-episode columns of the kept features come along
        table = lerobot_format.read_episode_table(dst, "v3.0")
        assert f"stats/{STATE}/mean" in table.column_names
        assert f"stats/{cameras[1]}/mean" not in table.column_names
