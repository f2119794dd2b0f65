"""stoker check on LeRobot datasets: each defect made on purpose in a real dataset (videos
re-encoded by FFmpeg with a dropped, duplicated or resized frame, at another fps; metadata
edited: a camera offset, counts, shapes, tasks, statistics; files removed or damaged) is found
and named exactly (the episode, and the camera where it matters); clean datasets, and one
written by stoker etl, have no error; the command's exit status, --json and --report."""

import glob
import json
import os
import shutil
import subprocess

import lerobot_datasets
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import stoker
from stoker.checks.command import main as command_main
from stoker.cli import main as cli_main
from stoker.datasets.lerobot import format as lerobot_format

TOP, WRIST = "observation.images.top", "observation.images.wrist"


# ---------------------------------------------------------------------------------------------
# Making defects


def check(root, **kwargs):
    kwargs.setdefault("progress", False)
    return stoker.check(root, **kwargs)


def ffmpeg(*args):
    subprocess.run(["ffmpeg", "-nostdin", "-y", "-loglevel", "error", *args], check=True)


def v21_video(root, camera, episode):
    return os.path.join(
        root,
        lerobot_format.V21_VIDEO_PATH.format(
            episode_chunk=0, video_key=camera, episode_index=episode
        ),
    )


def v21_data(root, episode):
    return os.path.join(
        root, lerobot_format.V21_DATA_PATH.format(episode_chunk=0, episode_index=episode)
    )


X264 = ["-c:v", "libx264", "-preset", "veryfast", "-g", "30", "-pix_fmt", "yuv420p"]


def reencode(path, vf, *options):
    """Re-encodes the video at ``path`` through filter ``vf`` (replacing the file: dataset
    videos are links into a shared encode cache)."""
    partial = path + ".new.mp4"
    ffmpeg("-i", path, "-vf", vf, *options, *X264, partial)
    os.unlink(path)
    os.replace(partial, path)


def edit_info(root, change):
    path = os.path.join(root, lerobot_format.INFO_PATH)
    with open(path) as f:
        info = json.load(f)
    change(info)
    lerobot_format.write_info(root, info)


def edit_v30_episodes(root, column, episode, change):
    for path in glob.glob(os.path.join(root, "meta", "episodes", "*", "*.parquet")):
        table = pq.read_table(path)
        episodes = table.column("episode_index").to_pylist()
        if episode not in episodes:
            continue
        values = table.column(column).to_pylist()
        values[episodes.index(episode)] = change(values[episodes.index(episode)])
        kind = table.schema.field(column).type
        table = table.set_column(table.column_names.index(column), column, pa.array(values, kind))
        pq.write_table(table, path)


def edit_rows(path, column, change):
    table = pq.read_table(path)
    values = np.array(table.column(column).to_pylist())
    values = change(values)
    kind = table.schema.field(column).type
    table = table.set_column(table.column_names.index(column), column, pa.array(values, kind))
    pq.write_table(table, path)


def only(report, name, severity="error"):
    found = [f for f in report.findings if f.check == name and f.severity == severity]
    assert len(found) == 1, f"expected one {severity} of {name}, got {found}\n{report}"
    return found[0]


def errors(report):
    return [(f.check, f.episode, f.camera) for f in report.errors()]


def data_stats(written):
    """meta/stats.json of a dataset the tests wrote, computed from its rows."""
    episode = np.repeat(np.arange(len(written.lengths)), written.lengths)
    frame = np.concatenate([np.arange(n) for n in written.lengths])
    stats = {}
    for name, values in (
        ("observation.state", lerobot_datasets.state_values(episode, frame)),
        ("action", lerobot_datasets.action_values(episode, frame)),
    ):
        values = values.astype(np.float64)
        stats[name] = {
            "min": values.min(0).tolist(),
            "max": values.max(0).tolist(),
            "mean": values.mean(0).tolist(),
            "std": values.std(0).tolist(),
            "count": [len(values)],
        }
    return stats


# ---------------------------------------------------------------------------------------------
# Clean datasets


@pytest.mark.parametrize("fixture", ["lerobot_v21", "lerobot_v30"])
def test_clean_datasets_have_no_error_shallow_or_deep(request, fixture, lerobot_copy):
    root = lerobot_copy(request.getfixturevalue(fixture))
    shallow = check(root)
    assert shallow.ok, shallow
    assert shallow.kind == "lerobot" and not shallow.deep
    assert shallow.scanned["episodes"] == len(request.getfixturevalue(fixture).lengths)
    assert "missing_frames" in shallow.checks and "decode" not in shallow.checks
    # The index it built is reused: the deep check maps it and decodes every frame.
    deep = check(root, deep=True)
    assert deep.ok, deep
    assert deep.scanned["decoded_frames"] == deep.scanned["frames"] > 0
    assert {f.check for f in deep.findings} <= {"stats", "drift", "camera_offsets"}


def test_a_shallow_check_says_the_videos_were_not_decoded_and_points_to_deep(
        lerobot_v21, lerobot_copy):
    """Issue 33: a shallow check printed `OK: no errors` on a video with garbage mid-file, as
    if it had been read. Its verdict says the videos were not decoded and how to decode them."""
    root = lerobot_copy(lerobot_v21)
    lerobot_datasets.corrupt_media_data(v21_video(root, TOP, 1))
    shallow = check(root)
    assert shallow.ok and shallow.not_decoded == "videos"
    verdict = str(shallow).splitlines()[-1]
    assert verdict.startswith("  OK: no errors (the videos were not decoded: `stoker check --deep`")
    assert shallow.to_dict()["not_decoded"] == "videos"
    deep = check(root, deep=True)
    assert not deep.ok and "not decoded" not in str(deep)
    assert any(f.episode == 1 for f in deep.errors()), deep


def test_a_dataset_written_by_stoker_etl_has_no_warning_but_drift(lerobot_v30, tmp_path):
    from stoker.writers import etl

    dst = str(tmp_path / "etl")
    etl.materialize(lerobot_v30.root, dst, size=(32, 48), workers=2, progress=False)
    report = check(dst, deep=True)
    assert report.ok, report
    # Its from_timestamp values are the files' own frame times: no drift, no offsets.
    assert not [f for f in report.findings if f.check in ("drift", "camera_offsets")], report


def test_a_lerobot_dataset_object_is_checked_with_its_index(lerobot_v21):
    ds = stoker.LeRobotDataset(lerobot_v21.root, progress=False, output="numpy")
    report = stoker.check(ds, progress=False)
    assert isinstance(report, stoker.CheckReport) and report.ok, report
    assert report.dataset == lerobot_v21.root and report.seconds > 0


# ---------------------------------------------------------------------------------------------
# Frames against rows


def test_a_dropped_frame_is_a_missing_frame_of_its_episode_camera_and_row(
    lerobot_v21, lerobot_copy
):
    root = lerobot_copy(lerobot_v21)
    # Frame 3 of episode 1 dropped, the others keeping their times (a recorder's drop).
    reencode(v21_video(root, TOP, 1), r"select='not(eq(n\,3))'", "-fps_mode", "passthrough")
    report = check(root)
    found = only(report, "missing_frames")
    assert (found.episode, found.camera, found.frame, found.row) == (1, TOP, 3, 5 + 3)
    assert found.expected == pytest.approx(0.1) and found.fix
    assert errors(report) == [("missing_frames", 1, TOP)]  # the index's refusal is explained
    assert only(report, "index", "info")


def test_the_checks_public_names_stay_where_they_were():
    # checks/lerobot.py became a package of that name: what it exported still imports.
    from stoker.checks.lerobot import CHECKS, DEEP_CHECKS, DEFAULT_TOLERANCE_S, check_lerobot

    assert callable(check_lerobot) and DEFAULT_TOLERANCE_S > 0
    assert "values" in CHECKS and "decode" in DEEP_CHECKS


def test_an_episode_table_claiming_rows_the_data_lacks_names_that_episode_only(
    lerobot_v30, lerobot_copy
):
    root = lerobot_copy(lerobot_v30)
    edit_v30_episodes(root, "length", 3, lambda n: n + 5)
    report = check(root)
    rows = only(report, "rows")
    assert (rows.episode, rows.expected, rows.found) == (3, lerobot_v30.lengths[3] + 5,
                                                         lerobot_v30.lengths[3])
    assert "5 fewer" in rows.message
    episodes = only(report, "episodes")
    assert episodes.episode == 3 and "is not the" in episodes.message
    # No other episode is named: a wrong length does not move the episodes after it.
    assert {e for _, e, _ in errors(report)} == {3, None}, str(report)


@pytest.mark.parametrize("fixture", ["lerobot_v21", "lerobot_v30"])
def test_a_nan_or_an_infinity_in_a_data_column_is_an_error_naming_episode_row_and_dimension(
    request, fixture, lerobot_copy
):
    written = request.getfixturevalue(fixture)
    root = lerobot_copy(written)
    assert check(root).by_check("values") == []  # the clean copy: nothing
    # Episode 1, its row 2: action dimension 3 NaN, and dimension 5 infinite.
    paths = sorted(glob.glob(os.path.join(root, "data", "*", "*.parquet")))
    for path in paths:
        table = pq.read_table(path)
        episodes = np.asarray(table.column("episode_index").to_pylist())
        if 1 not in episodes:
            continue
        row = int(np.flatnonzero(episodes == 1)[0]) + 2
        actions = table.column("action").to_pylist()
        actions[row][3], actions[row][5] = float("nan"), float("inf")
        kind = table.schema.field("action").type
        at = table.column_names.index("action")
        pq.write_table(table.set_column(at, "action", pa.array(actions, kind)), path)
    report = check(root)
    found = only(report, "values")
    assert (found.episode, found.field, found.row) == (1, "action", written.lengths[0] + 2)
    assert "row 2 of the episode" in found.message and "dimensions 3, 5" in found.message
    assert "nan" in found.message


@pytest.mark.parametrize("fixture", ["lerobot_v21", "lerobot_v30"])
def test_data_and_video_files_no_episode_names_are_warnings(request, fixture, lerobot_copy):
    root = lerobot_copy(request.getfixturevalue(fixture))
    assert check(root).by_check("unreferenced_files") == []
    data = sorted(glob.glob(os.path.join(root, "data", "*", "*.parquet")))[0]
    video = sorted(glob.glob(os.path.join(root, "videos", "**", "*.mp4"), recursive=True))[0]
    stray_data = os.path.join(os.path.dirname(data), "left-over.parquet")
    stray_video = os.path.join(os.path.dirname(video), "left-over.mp4")
    shutil.copyfile(data, stray_data)
    shutil.copyfile(video, stray_video)
    report = check(root)
    found = sorted(f.file for f in report.by_check("unreferenced_files"))
    assert found == sorted([stray_data, stray_video]), str(report)
    assert all(f.severity == "warning" for f in report.by_check("unreferenced_files"))
    assert report.ok  # warnings only


def test_a_duplicated_frame_is_extra_shallow_and_named_deep(lerobot_v21, lerobot_copy):
    root = lerobot_copy(lerobot_v21)
    # Frame 2 of episode 1 shown twice: 8 frames for 7 rows, every later row a frame late.
    reencode(v21_video(root, TOP, 1), "loop=loop=1:size=1:start=3,setpts=N/30/TB", "-r", "30")
    shallow = check(root)
    assert shallow.ok
    extra = only(shallow, "extra_frames", "warning")
    assert (extra.episode, extra.camera, extra.frame, extra.expected, extra.found) == (
        1,
        TOP,
        7,
        7,
        8,
    )
    deep = check(root, deep=True)
    duplicate = only(deep, "duplicate_frames")
    assert (duplicate.episode, duplicate.camera, duplicate.frame) == (1, TOP, 3)
    assert errors(deep) == [("duplicate_frames", 1, TOP)]


def test_rows_on_one_frame_are_duplicate_frames_and_backward_timestamps(lerobot_v21, lerobot_copy):
    root = lerobot_copy(lerobot_v21)

    def repeat_row_2(ts):
        ts[3] = ts[2]
        return ts

    edit_rows(v21_data(root, 2), "timestamp", repeat_row_2)
    report = check(root)
    stamps = only(report, "timestamps")
    assert (stamps.episode, stamps.row) == (2, 12 + 3)
    # Both cameras: rows 2 and 3 read frame 2, frame 3 is read by no row.
    duplicates = {
        (f.episode, f.camera, f.frame) for f in report.errors() if f.check == "duplicate_frames"
    }
    assert duplicates == {(2, TOP, 3), (2, WRIST, 3)}
    assert {e for _, e, _ in errors(report)} == {2}
    assert {f.check for f in report.warnings()} == {"stats"}, report  # statistics: absent


def test_video_fps_other_than_info_json(lerobot_v21, lerobot_copy):
    root = lerobot_copy(lerobot_v21)
    reencode(v21_video(root, WRIST, 0), "setpts=N/25/TB", "-r", "25")
    report = check(root)
    found = only(report, "fps")
    assert (found.episode, found.camera, found.expected, found.found) == (0, WRIST, 30, 25)
    assert errors(report) == [("fps", 0, WRIST)]


def test_a_camera_offset_in_v30_metadata_reports_the_spread(lerobot_v30, lerobot_copy):
    root = lerobot_copy(lerobot_v30)
    # The wrist camera's episode 2 stated 3 frames later than where its frames are.
    edit_v30_episodes(root, f"videos/{WRIST}/from_timestamp", 2, lambda t: t + 0.1)
    report = check(root)
    found = only(report, "camera_offsets")
    assert (found.episode, found.camera) == (2, WRIST)
    assert found.found[WRIST] == pytest.approx(-0.1, abs=2e-3)
    assert abs(found.found[TOP]) < 2e-3
    assert "ms" in found.message and errors(report) == [("camera_offsets", 2, WRIST)]


def test_drift_of_summed_offsets_is_a_warning_naming_camera_and_file(lerobot_v30, lerobot_copy):
    root = lerobot_copy(lerobot_v30)
    # Offsets summed from durations 3 ms too long each: they drift along the wrist files.
    for e in range(5):
        edit_v30_episodes(
            root, f"videos/{WRIST}/from_timestamp", e, lambda t, e=e: t + 0.003 * (e % 3)
        )
    report = check(root)
    assert report.ok, report
    drifts = [f for f in report.findings if f.check == "drift" and f.camera == WRIST]
    assert len(drifts) == 1 and drifts[0].episode == 2  # the worst, in the first file
    assert drifts[0].file.endswith(f"{WRIST}/chunk-000/file-000.mp4")
    assert drifts[0].found == pytest.approx(-0.006, abs=2e-3)
    # A looser tolerance accepts it.
    assert not [f for f in check(root, tolerance_s=0.01).findings if f.check == "drift"]


def test_a_packed_file_is_placed_as_the_index_build_places_it(lerobot_v30, lerobot_copy):
    """Issue 34: the check placed episodes in packed files with its own Python copy of the
    index build's rule. It now calls the engine's place_episodes: in a wrist file whose
    episodes are stated in another order than the dataset's (1, 2, then 0) and whose last
    frames are gone, the episode the index build records as broken is the one the check
    names, at the frames the build placed the others on."""
    from stoker.datasets.lerobot.index import load_index

    root = lerobot_copy(lerobot_v30)
    # The wrist camera's first file holds episodes 0, 1, 2 (5, 7 and 6 rows).
    for e, start in ((0, 13 / 30), (1, 0.0), (2, 7 / 30)):
        length = lerobot_v30.lengths[e]
        edit_v30_episodes(root, f"videos/{WRIST}/from_timestamp", e, lambda _, t=start: t)
        edit_v30_episodes(
            root, f"videos/{WRIST}/to_timestamp", e, lambda _, t=start, n=length: t + n / 30
        )
    path = lerobot_format.file_path(root, lerobot_format.VIDEO_PATH, 0, 2, video_key=WRIST)
    reencode(path, "trim=end_frame=15,setpts=N/30/TB", "-r", "30")  # 15 frames, 18 rows
    index = load_index(root, on_error="skip", progress=False)
    broken = {(b.episode, b.camera) for b in index.broken_episodes}
    assert broken == {(0, WRIST)}
    assert "needs 5 frames from frame 13" in index.broken_episodes[0].why
    assert list(index.first_frames(index.cameras.index(WRIST))[1:3]) == [0, 7]
    report = check(root)
    assert {(e, c) for k, e, c in errors(report) if k == "missing_frames"} == broken
    assert errors(report) == [("missing_frames", 0, WRIST)], report
    found = only(report, "missing_frames")
    assert (found.frame, found.found) == (2, pytest.approx(14 / 30))  # past frame 14, the last
    assert "needs 5 frames from frame 13" in only(report, "index", "info").message


def test_a_start_that_is_no_number_leaves_its_episode_out_as_the_index_build_does(
    lerobot_v30, lerobot_copy
):
    """A NaN from_timestamp: the check read it as 0 and placed the episode first in its file;
    the index build sorted it by a comparison NaN breaks and placed it wherever that left it.
    The engine now records it as a problem and snaps the file's other episodes to their
    stated starts (tiling needs every episode's place): the check and the index agree."""
    from stoker.datasets.lerobot.index import load_index

    root = lerobot_copy(lerobot_v30)
    edit_v30_episodes(root, f"videos/{WRIST}/from_timestamp", 1, lambda _: float("nan"))
    index = load_index(root, on_error="skip", progress=False)
    assert [(b.episode, b.camera) for b in index.broken_episodes] == [(1, WRIST)]
    assert "its stated start is not a number" in index.broken_episodes[0].why
    assert list(index.first_frames(index.cameras.index(WRIST))[[0, 2]]) == [0, 12]
    report = check(root)
    assert errors(report) == [("files", 1, WRIST)], report


# ---------------------------------------------------------------------------------------------
# Decoding (--deep)


def damage_packet(path, packet):
    """Overwrites a packet's bytes (but its first two) with seeded noise."""
    offset, size = stoker.VideoReader(path).packet_bytes()[packet]
    data = bytearray(open(path, "rb").read())
    data[offset + 2 : offset + size] = (
        np.random.default_rng(1).integers(0, 256, size - 2, dtype=np.uint8).tobytes()
    )
    os.unlink(path)
    open(path, "wb").write(bytes(data))


def test_a_damaged_packet_is_found_deep_at_its_frame(lerobot_v21, lerobot_copy):
    root = lerobot_copy(lerobot_v21)
    damage_packet(v21_video(root, WRIST, 2), 3)
    assert check(root).ok  # frame tables and timestamps are intact
    deep = check(root, deep=True)
    found = only(deep, "decode")
    assert (found.episode, found.camera, found.frame, found.row) == (2, WRIST, 3, 12 + 3)
    assert errors(deep) == [("decode", 2, WRIST)]


def test_frames_of_another_size_mid_stream(lerobot_v21, lerobot_copy, tmp_path):
    root = lerobot_copy(lerobot_v21)
    path = v21_video(root, TOP, 0)
    # Frames 3 and 4 of episode 0 at 48x48 in a 64x64 stream (headers in band, joined).
    inband = [*X264, "-x264-params", "repeat-headers=1"]
    a, b = str(tmp_path / "a.mp4"), str(tmp_path / "b.mp4")
    ffmpeg("-i", path, "-vf", "trim=end_frame=3", *inband, a)
    ffmpeg("-i", path, "-vf", "trim=start_frame=3,setpts=PTS-STARTPTS,scale=48:48", *inband, b)
    listing = tmp_path / "list.txt"
    listing.write_text(f"file '{a}'\nfile '{b}'\n")
    os.unlink(path)
    ffmpeg("-f", "concat", "-safe", "0", "-i", str(listing), "-c", "copy", path)
    assert check(root).ok
    found = only(check(root, deep=True), "frame_format")
    assert (found.episode, found.camera, found.frame) == (0, TOP, 3)
    assert (found.expected, found.found) == ("64x64 yuv420p", "48x48 yuv420p")


def test_a_packet_whose_checksum_no_longer_matches_the_frame_table(
    lerobot_v21, lerobot_copy, tmp_path
):
    root = lerobot_copy(lerobot_v21)
    path = v21_video(root, TOP, 1)
    # An AVI (no pts: the frame table keeps each packet's CRC-32C) under the episode's name.
    ffmpeg("-i", path, *X264, "-bf", "2", "-f", "avi", str(tmp_path / "e.avi"))
    os.unlink(path)
    shutil.copyfile(tmp_path / "e.avi", path)
    assert check(root).ok  # builds the index, which keeps the frame table
    probe = subprocess.run(
        [
            "ffprobe",
            "-v",
            "error",
            "-select_streams",
            "v",
            "-show_entries",
            "packet=pos,size",
            "-of",
            "csv=p=0",
            path,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    size, offset = map(int, probe[4].split(","))
    stat = os.stat(path)
    with open(path, "r+b") as f:  # bit rot: the bytes change, the size and mtime do not
        f.seek(offset + size - 3)
        f.write(b"\x00\x11\x22")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    deep = check(root, deep=True)
    found = only(deep, "packets")
    assert (found.episode, found.camera) == (1, TOP) and "checksum" in found.message
    assert {(c, e, cam) for c, e, cam in errors(deep)} <= {("packets", 1, TOP), ("decode", 1, TOP)}


def test_an_image_that_does_not_decode(tmp_path, lerobot_cache):
    written = lerobot_datasets.write_v30(
        tmp_path / "images", [4, 5], (TOP,), fps=30, cache_dir=lerobot_cache
    )
    lerobot_datasets.add_image_camera(written)
    path = written.data_paths[1]
    table = pq.read_table(path)
    images = table.column(WRIST).to_pylist()
    images[4 + 2]["bytes"] = images[4 + 2]["bytes"][:40]  # episode 1, row 2: truncated
    column = pa.array(images, table.schema.field(WRIST).type)
    pq.write_table(table.set_column(table.column_names.index(WRIST), WRIST, column), path)
    assert check(written.root).ok
    found = only(check(written.root, deep=True), "images")
    assert (found.episode, found.camera, found.frame, found.row) == (1, WRIST, 2, 6)


# ---------------------------------------------------------------------------------------------
# Metadata


def test_a_missing_video_is_named_with_its_episode_and_camera(lerobot_v21, lerobot_copy):
    root = lerobot_copy(lerobot_v21)
    os.unlink(v21_video(root, WRIST, 2))
    report = check(root)
    found = only(report, "files")
    assert (found.episode, found.camera, found.file) == (2, WRIST, v21_video(root, WRIST, 2))
    assert errors(report) == [("files", 2, WRIST)]


def test_a_missing_data_file(lerobot_v30, lerobot_copy):
    root = lerobot_copy(lerobot_v30)
    path = lerobot_format.file_path(root, lerobot_format.DATA_PATH, 1, 2)  # episodes 2 and 3
    os.unlink(path)
    found = only(check(root), "files")
    assert (found.episode, found.file) == (2, path) and "2, 3" in found.message


def test_an_unreadable_data_file_and_a_missing_info_json(lerobot_v30, lerobot_copy):
    root = lerobot_copy(lerobot_v30)
    path = lerobot_format.file_path(root, lerobot_format.DATA_PATH, 0, 2)  # episodes 0 and 1
    os.unlink(path)
    open(path, "wb").write(b"not parquet" * 100)
    report = check(root)
    found = only(report, "files")
    assert (found.episode, found.file) == (0, path) and "cannot be read" in found.message
    assert errors(report) == [("files", 0, None)]  # their frames are not called extra
    os.unlink(os.path.join(root, lerobot_format.INFO_PATH))
    assert errors(check(root)) == [("info", None, None)]


def test_an_unreadable_video(lerobot_v21, lerobot_copy):
    root = lerobot_copy(lerobot_v21)
    path = v21_video(root, TOP, 0)
    os.unlink(path)
    open(path, "wb").write(b"not a video" * 100)
    found = only(check(root), "videos")
    assert (found.episode, found.camera) == (0, TOP)


def test_counts_in_info_json_that_disagree_with_the_tables(lerobot_v21, lerobot_copy):
    root = lerobot_copy(lerobot_v21)
    edit_info(root, lambda info: info.update(total_frames=19, total_tasks=5))
    report = check(root)
    frames = only(report, "counts")
    assert (frames.field, frames.expected, frames.found) == ("total_frames", 18, 19)
    tasks = only(report, "counts", "warning")
    assert (tasks.field, tasks.expected, tasks.found) == ("total_tasks", 2, 5)


def test_episode_indices_with_a_gap(lerobot_v30, lerobot_copy):
    root = lerobot_copy(lerobot_v30)
    edit_v30_episodes(root, "episode_index", 4, lambda e: 6)  # episodes 0-3, then 6
    report = check(root)
    gap = [f for f in report.errors() if f.check == "episodes"]
    assert len(gap) == 1 and gap[0].episode == 4 and "4, 5" in gap[0].found


def test_a_task_index_the_tasks_table_does_not_define(lerobot_v21, lerobot_copy):
    root = lerobot_copy(lerobot_v21)
    edit_rows(v21_data(root, 1), "task_index", lambda t: np.full_like(t, 7))
    found = only(check(root), "tasks")
    assert (found.episode, found.found) == (1, 7)


def test_a_feature_whose_shape_or_dtype_disagrees_with_its_column(lerobot_v21, lerobot_copy):
    root = lerobot_copy(lerobot_v21)

    def change(info):
        info["features"]["observation.state"]["shape"] = [7]
        info["features"]["action"]["dtype"] = "int64"
        info["features"]["frame_index"]["dtype"] = "int32"  # read with a cast: a warning

    edit_info(root, change)
    report = check(root)
    features = {f.field: f for f in report.errors() if f.check == "features"}
    assert set(features) == {"observation.state", "action"}, report
    assert (features["observation.state"].expected, features["observation.state"].found) == (
        [7],
        [6],
    )
    assert (features["action"].expected, features["action"].found) == ("int64", "float")
    cast = only(report, "features", "warning")
    assert (cast.field, cast.expected, cast.found) == ("frame_index", "int32", "int64")


def test_a_video_whose_size_disagrees_with_info_json(lerobot_v21, lerobot_copy):
    root = lerobot_copy(lerobot_v21)
    reencode(v21_video(root, WRIST, 1), "scale=32:32")
    found = only(check(root), "features")
    assert (found.episode, found.camera, found.expected, found.found) == (
        1,
        WRIST,
        "64x64",
        "32x32",
    )


# ---------------------------------------------------------------------------------------------
# Statistics


def test_nan_and_inf_in_statistics_are_errors(lerobot_v21, lerobot_copy):
    root = lerobot_copy(lerobot_v21)
    stats = data_stats(lerobot_v21)
    stats["action"]["std"][2] = float("nan")
    lerobot_format.write_stats(root, stats)
    lines = []
    for e, n in enumerate(lerobot_v21.lengths):
        values = lerobot_datasets.state_values(np.full(n, e), np.arange(n)).astype(np.float64)
        entry = {
            "min": values.min(0).tolist(),
            "max": values.max(0).tolist(),
            "mean": values.mean(0).tolist(),
            "std": values.std(0).tolist(),
            "count": [n],
        }
        if e == 1:
            entry["max"][0] = float("inf")
        lines.append(json.dumps({"episode_index": e, "stats": {"observation.state": entry}}))
    with open(os.path.join(root, lerobot_format.V21_EPISODES_STATS_PATH), "w") as f:
        f.write("\n".join(lines) + "\n")
    report = check(root)
    found = {(f.episode, f.field) for f in report.errors() if f.check == "stats"}
    assert found == {(None, "action"), (1, "observation.state")}, report
    assert errors(report) == [("stats", None, None), ("stats", 1, None)]


def test_statistics_that_disagree_with_the_data_are_warnings_only(lerobot_v30, lerobot_copy):
    root = lerobot_copy(lerobot_v30)
    stats = data_stats(lerobot_v30)
    stats["observation.state"]["mean"][1] += 50.0
    stats["action"]["std"][3] *= 1.5  # beyond LeRobot's float32 rounding: still a warning
    # Image statistics from sampled frames, as LeRobot's recorder writes them: not compared.
    stats[TOP] = {
        "min": [[[0.0]]] * 3,
        "max": [[[1.0]]] * 3,
        "mean": [[[0.4]]] * 3,
        "std": [[[0.2]]] * 3,
        "count": [10],
    }
    lerobot_format.write_stats(root, stats)
    report = check(root)
    assert report.ok, report
    found = {f.field: f for f in report.warnings() if f.check == "stats_consistency"}
    assert set(found) == {"observation.state", "action"}, report
    assert "mean[1]" in found["observation.state"].message
    assert "std[3]" in found["action"].message
    assert not [f for f in report.findings if f.check == "stats"]


def lerobot_float32_stats(values):
    """The statistics LeRobot's recorder computes for one episode's rows [n, dim]: min, max,
    and the mean and sqrt(E[x²] - E[x]²) summed in the data's float32 (row by row)."""
    values = values.astype(np.float32)
    mean, mean_of_squares = values.mean(axis=0), (values**2).mean(axis=0)
    return {
        "min": values.min(0),
        "max": values.max(0),
        "mean": mean,
        "std": np.sqrt(np.maximum(0, mean_of_squares - mean**2)),
        "count": np.array([len(values)]),
    }


def lerobot_aggregate(stats):
    """LeRobot's aggregate_stats of per-episode statistics: count-weighted means, and the
    variances joined by the parallel algorithm."""
    counts = np.array([s["count"][0] for s in stats], np.float64)[:, None]
    means = np.stack([s["mean"] for s in stats])
    mean = (means * counts).sum(0) / counts.sum()
    variance = ((np.stack([s["std"] for s in stats]) ** 2 + (means - mean) ** 2) * counts).sum(
        0
    ) / counts.sum()
    return {
        "min": np.min([s["min"] for s in stats], axis=0),
        "max": np.max([s["max"] for s in stats], axis=0),
        "mean": mean,
        "std": np.sqrt(variance),
        "count": np.array([int(counts.sum())]),
    }


def write_a_still_joint(root, written, seed=0):
    """Rewrites dimension 0 of every row's observation.state as a joint that barely moves
    (90 degrees, a servo's jitter of 0.01) and gives the dataset the statistics LeRobot's
    recorder computes for those rows (meta/stats.json and meta/episodes_stats.jsonl).
    Returns the rows of each episode and the per-episode statistics."""
    rng = np.random.default_rng(seed)
    rows, per_episode = [], []
    for e in range(len(written.lengths)):
        path = v21_data(root, e)
        table = pq.read_table(path)
        values = np.stack(table.column("observation.state").to_numpy(zero_copy_only=False))
        values[:, 0] = 90 + 0.01 * rng.normal(size=len(values))
        values = values.astype(np.float32)
        kind = table.schema.field("observation.state").type
        column = pa.array(values.tolist(), kind)
        table = table.set_column(
            table.column_names.index("observation.state"), "observation.state", column
        )
        pq.write_table(table, path)
        rows.append(values)
        per_episode.append(lerobot_float32_stats(values))
    lines = [
        json.dumps(
            {
                "episode_index": e,
                "stats": {"observation.state": {k: v.tolist() for k, v in stat.items()}},
            }
        )
        for e, stat in enumerate(per_episode)
    ]
    with open(os.path.join(root, lerobot_format.V21_EPISODES_STATS_PATH), "w") as f:
        f.write("\n".join(lines) + "\n")
    stats = data_stats(written)
    stats["observation.state"] = {k: v.tolist() for k, v in lerobot_aggregate(per_episode).items()}
    lerobot_format.write_stats(root, stats)
    return rows, per_episode


def test_statistics_rounded_as_lerobots_recorder_rounds_them_agree_with_the_data(
    lerobot_v21, lerobot_copy
):
    """A regression: LeRobot's own recorder computes a std as sqrt(E[x²] - E[x]²) in float32,
    which for a joint that barely moves about 90 degrees comes out several times the data's, or
    0, and a mean a few float32 steps off; the check took that for statistics that disagree
    with the data (a warning per episode on every dataset LeRobot records with such a joint)."""
    root = lerobot_copy(lerobot_v21)
    rows, per_episode = write_a_still_joint(root, lerobot_v21)
    # The rounding is there: LeRobot's stds of the still joint are far off the rows' own.
    true_std = [float(x[:, 0].astype(np.float64).std()) for x in rows]
    assert any(abs(s["std"][0] - t) > 0.1 * t for s, t in zip(per_episode, true_std))
    report = check(root)
    assert report.ok, report
    assert not [f for f in report.findings if f.check in ("stats", "stats_consistency")], report


def test_a_std_rounded_far_below_the_data_is_a_warning_naming_the_blow_up(
    lerobot_v21, lerobot_copy
):
    """Within LeRobot's rounding, but so small that normalizing by it (x - mean) / (std + 1e-8)
    widens that joint a million times: a warning that says so, naming the dimension."""
    root = lerobot_copy(lerobot_v21)
    write_a_still_joint(root, lerobot_v21)
    stats = lerobot_format.read_stats(root)
    stats["observation.state"]["std"][0] = 0.0  # what LeRobot's clamp of E[x²] - E[x]² gives
    lerobot_format.write_stats(root, stats)
    report = check(root)
    assert report.ok, report
    found = only(report, "stats_consistency", "warning")
    assert (found.field, found.episode, found.found) == ("observation.state", None, 0.0)
    assert found.expected == pytest.approx(0.01, rel=0.5)
    assert "std[0]" in found.message and "multiplies" in found.message, found


# ---------------------------------------------------------------------------------------------
# The command


def test_the_command_exits_0_on_a_clean_dataset_and_prints_json(lerobot_v21, lerobot_copy, capsys):
    root = lerobot_copy(lerobot_v21)
    assert cli_main(["check", root, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is True and report["kind"] == "lerobot" and report["counts"]["error"] == 0


def test_the_command_exits_1_on_an_error_and_writes_the_report(
    lerobot_v21, lerobot_copy, tmp_path, capsys
):
    root = lerobot_copy(lerobot_v21)
    os.unlink(v21_video(root, WRIST, 2))
    folder = tmp_path / "report"
    assert cli_main(["check", root, "--report", str(folder), "--quiet"]) == 1
    out = capsys.readouterr().out
    assert "error: [files] episode 2, camera 'observation.images.wrist'" in out
    saved = json.loads((folder / "report.json").read_text())
    assert saved["ok"] is False and saved["findings"][0]["episode"] == 2
    page = (folder / "report.html").read_text()
    assert "<svg" in page and "camera observation.images.wrist" in page
    assert "episode 2: 1 error" in page and "<h3 id='files'>files (1)</h3>" in page


def test_the_command_refuses_a_path_that_does_not_exist(tmp_path, capsys):
    parser_args = ["check", str(tmp_path / "nothing")]
    assert cli_main(parser_args) == 2
    assert "does not exist" in capsys.readouterr().err
    with pytest.raises(stoker.DatasetError, match="does not exist"):
        stoker.check(str(tmp_path / "nothing"))


def test_the_command_takes_a_tolerance(lerobot_v30, lerobot_copy, capsys):
    root = lerobot_copy(lerobot_v30)
    edit_v30_episodes(root, f"videos/{WRIST}/from_timestamp", 2, lambda t: t + 0.1)
    import argparse

    from stoker.checks.command import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert command_main(parser.parse_args([root, "--quiet"])) == 1
    capsys.readouterr()
    assert command_main(parser.parse_args([root, "--quiet", "--tolerance-s", "0.2"])) == 0


def test_the_doctor_points_at_stoker_check_when_samples_are_skipped(lerobot_v21, lerobot_copy):
    root = lerobot_copy(lerobot_v21)
    damage_packet(v21_video(root, WRIST, 2), 3)
    ds = stoker.LeRobotDataset(root, progress=False, output="numpy")
    loader = stoker.Loader(ds, batch_size=3, threads=1, on_error="skip")
    with stoker.profile(loader, report=None, show=False) as prof:
        for _ in loader:
            pass
    advice = [line for line in prof.report().advice if "stoker check" in line]
    assert len(advice) == 1 and f"stoker check {root} --deep" in advice[0], prof.report().advice


def test_a_dataset_in_s3_is_checked_where_it_is(lerobot_v21, lerobot_copy, s3_environment):
    root = lerobot_copy(lerobot_v21)
    s3_environment.create_bucket("stoker-check")
    s3_environment.upload_tree(root, "stoker-check", "clean")
    os.unlink(v21_video(root, WRIST, 2))
    s3_environment.upload_tree(root, "stoker-check", "broken")
    clean = check("s3://stoker-check/clean", deep=True)
    assert clean.ok and clean.dataset == "s3://stoker-check/clean", clean
    assert clean.scanned["decoded_frames"] == sum(lerobot_v21.lengths) * 2
    broken = check("s3://stoker-check/broken")
    found = only(broken, "files")
    assert (found.episode, found.camera) == (2, WRIST)
    assert found.file == "s3://stoker-check/broken/" + os.path.relpath(
        v21_video(root, WRIST, 2), root
    )
