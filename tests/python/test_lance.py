"""LeRobot datasets stored as Lance (``"storage_format": "lance"``, the layout
``lerobot-lance-convert`` of PyPI ``lerobot-lancedb`` 0.3.1 writes): items and Loader batches
equal those of the MP4 copy they were converted from, locally and from S3; video bytes are read
by the engine as byte slices of the tables' files (inline, packed and dedicated blobs); what
stoker cannot map is refused by name.

The Lance copy is made with lerobot-lancedb's converter when it is importable (it needs Python
>= 3.12 and lerobot), else written here with pylance directly, table for table as the converter
writes them (see ``write_lance_copy``)."""

import json
import os
import shutil

import lerobot_datasets
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import stoker
from stoker import _core

lance = pytest.importorskip("lance")
CAMERAS = ("observation.images.top", "observation.images.wrist")
FPS = 30
BUCKET = "stoker-lance"


# ---------------------------------------------------------------------------------------------
# The Lance copy, as lerobot-lance-convert writes it


def _moov(path):
    """(offset, size) of the MP4's moov box (what the converter stores; stoker does not use it)."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        offset = 0
        while offset < size:
            f.seek(offset)
            header = f.read(16)
            box, kind = int.from_bytes(header[:4], "big"), header[4:8]
            if box == 1:
                box = int.from_bytes(header[8:16], "big")
            elif box == 0:
                box = size - offset
            if kind == b"moov":
                return offset, box
            offset += box
    raise ValueError(f"no moov box in {path}")


def _keyframes(path):
    import av

    indices, positions = [], []
    with av.open(path) as container:
        stream = container.streams.video[0]
        fps = float(stream.average_rate)
        for packet in container.demux(stream):
            if packet.pts is not None and packet.is_keyframe and packet.pos is not None:
                indices.append(round(float(packet.pts * packet.time_base) * fps))
                positions.append(packet.pos)
    return indices, positions


def write_lance_copy(src, dst, blob_field_options=None):
    """The three-table Lance layout of v3.0 dataset ``src`` in ``dst``: lerobot-lancedb's
    converter when importable (with its own blob thresholds), else the same tables written with
    pylance; ``blob_field_options`` (e.g. ``inline_size_threshold=0``) choose where Lance puts
    the video bytes (inline, packed, dedicated) in the latter."""
    try:
        from lerobot_lancedb.convert import convert
    except ImportError:
        convert = None
    if convert is not None and blob_field_options is None:
        from pathlib import Path

        convert(Path(dst), root=Path(src))
        return dst
    os.makedirs(dst)
    shutil.copytree(os.path.join(src, "meta"), os.path.join(dst, "meta"))
    info_path = os.path.join(dst, "meta", "info.json")
    with open(info_path) as f:
        info = json.load(f)
    info["storage_format"] = "lance"
    with open(info_path, "w") as f:
        json.dump(info, f, indent=4)

    meta_files = sorted(
        os.path.relpath(os.path.join(d, n), os.path.join(dst, "meta"))
        for d, _, names in os.walk(os.path.join(dst, "meta"))
        for n in names
    )
    meta = pa.table(
        {
            "path": pa.array(meta_files, pa.string()),
            "data": pa.array(
                [open(os.path.join(dst, "meta", p), "rb").read() for p in meta_files],
                pa.large_binary(),
            ),
        }
    )
    lance.write_dataset(meta, os.path.join(dst, "meta.lance"))

    files = sorted(
        os.path.join(d, n) for d, _, names in os.walk(os.path.join(src, "data")) for n in names
    )
    table = pa.concat_tables([pq.read_table(f) for f in files]).replace_schema_metadata(None)
    columns, fields = [], []
    for field in table.schema:
        column = table.column(field.name).combine_chunks()
        if pa.types.is_list(field.type) or pa.types.is_large_list(field.type):
            width = len(column[0])
            column = pa.FixedSizeListArray.from_arrays(column.flatten(), width)
        columns.append(column)
        fields.append(pa.field(field.name.replace(".", "_"), column.type))
    lance.write_dataset(pa.Table.from_arrays(columns, schema=pa.schema(fields)),
                        os.path.join(dst, "frames.lance"))

    videos = sorted(
        os.path.join(d, n) for d, _, names in os.walk(os.path.join(src, "videos")) for n in names
    )
    rows = {name: [] for name in ("video_key", "chunk_index", "file_index", "file_size",
                                  "moov_offset", "moov_size", "kf_indices", "kf_positions")}
    payloads = []
    for path in videos:
        parts = path.split(os.sep)
        rows["video_key"].append(parts[-3])
        rows["chunk_index"].append(int(parts[-2].split("-")[1]))
        rows["file_index"].append(int(os.path.splitext(parts[-1])[0].split("-")[1]))
        rows["file_size"].append(os.path.getsize(path))
        moov_offset, moov_size = _moov(path)
        rows["moov_offset"].append(moov_offset)
        rows["moov_size"].append(moov_size)
        indices, positions = _keyframes(path)
        rows["kf_indices"].append(indices)
        rows["kf_positions"].append(positions)
        payloads.append(open(path, "rb").read())
    schema = pa.schema(
        [
            pa.field("video_key", pa.string()),
            pa.field("chunk_index", pa.int64()),
            pa.field("file_index", pa.int64()),
            pa.field("file_size", pa.int64()),
            pa.field("moov_offset", pa.int64()),
            pa.field("moov_size", pa.int64()),
            pa.field("kf_indices", pa.list_(pa.int64())),
            pa.field("kf_positions", pa.list_(pa.int64())),
            lance.blob_field("video_bytes", **(blob_field_options or {})),
        ]
    )
    arrays = [pa.array(rows[f.name], f.type) for f in schema if f.name != "video_bytes"]
    lance.write_dataset(pa.Table.from_arrays([*arrays, lance.blob_array(payloads)], schema=schema),
                        os.path.join(dst, "videos.lance"))
    return dst


# Where Lance puts the bytes: blob v2 keeps small values in the data file (inline), medium ones
# in a shared .blob sidecar (packed), large ones in a sidecar each (dedicated).
LAYOUTS = {
    "inline": None,
    "packed": dict(inline_size_threshold=0),
    "dedicated": dict(inline_size_threshold=0, dedicated_size_threshold=1),
}


@pytest.fixture(scope="module")
def mp4_dataset(tmp_path_factory, lerobot_cache):
    """A v3.0 dataset: 4 episodes (5, 7, 6, 4 frames), two H.264 cameras packing 2 and 3
    episodes per file."""
    return lerobot_datasets.write_v30(
        tmp_path_factory.mktemp("lance-src") / "v30", [5, 7, 6, 4], CAMERAS, fps=FPS,
        codec="h264", size=(48, 64), episodes_per_file=2,
        video_episodes_per_file={CAMERAS[1]: 3}, cache_dir=lerobot_cache)


@pytest.fixture(scope="module")
def lance_copies(tmp_path_factory, mp4_dataset):
    root = tmp_path_factory.mktemp("lance")
    return {name: write_lance_copy(mp4_dataset.root, str(root / name), options)
            for name, options in LAYOUTS.items()}


SPEC = stoker.WindowSpec(delta_timestamps={
    CAMERAS[0]: [-2 / FPS, 0.0], CAMERAS[1]: [0.0, 1 / FPS], "action": [0.0, 1 / FPS, 2 / FPS]})


def open_ds(root, **kwargs):
    return stoker.LeRobotDataset(root, SPEC, progress=False, **kwargs, output="numpy")


def assert_same_items(a, b):
    assert len(a) == len(b)
    for i in range(len(a)):
        x, y = a[i], b[i]
        assert set(x) == set(y), i
        for key in x:
            if isinstance(x[key], (str, list, dict)):
                assert x[key] == y[key], (i, key)
            else:
                np.testing.assert_array_equal(np.asarray(x[key]), np.asarray(y[key]), err_msg=key)


def assert_same_batches(a, b, **kwargs):
    batches = [list(stoker.Loader(ds, batch_size=3, shuffle=True, seed=5, **kwargs))
               for ds in (a, b)]
    assert len(batches[0]) == len(batches[1]) > 0
    for x, y in zip(*batches):
        assert set(x) == set(y)
        for key in x:
            if isinstance(x[key], (list, tuple)):
                assert list(x[key]) == list(y[key]), key
            else:
                np.testing.assert_array_equal(np.asarray(x[key]), np.asarray(y[key]), err_msg=key)


# ---------------------------------------------------------------------------------------------
# Reading


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_a_lance_copy_gives_the_items_and_batches_of_its_mp4_copy(mp4_dataset, lance_copies,
                                                                   layout):
    mp4 = open_ds(mp4_dataset.root)
    copy = open_ds(lance_copies[layout])
    assert_same_items(mp4, copy)
    assert_same_batches(mp4, copy, threads=2)
    # The frames show the episodes and frames written (not just the same wrong pixels).
    episodes, frames = lerobot_datasets.read_marks(np.asarray(copy[7][CAMERAS[0]]), "NCHW")
    assert list(episodes) == [1, 1] and list(frames) == [0, 2]


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_videos_are_byte_slices_of_the_tables_files_read_by_the_engine(lance_copies, layout):
    ds = open_ds(lance_copies[layout])
    files = ds.index.video_files
    assert files
    wholes = set()
    for name in files:
        whole, offset, length = _core.parse_byte_slice(name)
        assert whole.startswith(os.path.join(lance_copies[layout], "videos.lance", "data", ""))
        assert os.path.getsize(whole) >= offset + length
        wholes.add(whole)
        if layout == "inline":
            assert whole.endswith(".lance")
        else:
            assert whole.endswith(".blob")
    # Packed videos share one sidecar; dedicated ones have a file each.
    assert len(wholes) == (1 if layout != "dedicated" else len(files))
    # Opening again maps the index it built: the slices' files are tracked, unchanged.
    again = open_ds(lance_copies[layout])
    assert again.index.path == ds.index.path and not again.index.native.stale_files()


def test_a_file_holding_videos_rewritten_in_place_makes_the_index_stale(lance_copies, tmp_path):
    root = str(tmp_path / "copy")
    shutil.copytree(lance_copies["packed"], root, ignore=shutil.ignore_patterns(".stoker"))
    ds = open_ds(root)
    whole = _core.parse_byte_slice(ds.index.video_files[0])[0]
    os.utime(whole, ns=(1, 1))
    assert ds.index.native.stale_files() == [ds.index.video_files[0]] or whole in " ".join(
        ds.index.native.stale_files())


def test_episodes_and_cameras_select_as_for_mp4(mp4_dataset, lance_copies):
    kwargs = dict(episodes=[1, 3], cameras=[CAMERAS[1]])
    spec = stoker.WindowSpec(delta_timestamps={CAMERAS[1]: [0.0, 1 / FPS]})
    a = stoker.LeRobotDataset(mp4_dataset.root, spec, progress=False, **kwargs, output="numpy")
    b = stoker.LeRobotDataset(lance_copies["inline"], spec, progress=False, **kwargs, output="numpy")
    assert_same_items(a, b)


def _findings(report):
    return sorted((f.check, f.severity, f.episode, f.camera) for f in report.findings)


def test_check_finds_in_a_lance_copy_what_it_finds_in_its_mp4_copy(mp4_dataset, lance_copies,
                                                                   tmp_path):
    mp4 = stoker.check(mp4_dataset.root)
    for layout in ("inline", "packed"):
        report = stoker.check(lance_copies[layout])
        assert "videos" in report.checks and "drift" in report.checks
        assert _findings(report) == _findings(mp4), layout
    # Its video checks read the blobs' byte ranges: a cut sidecar is found, by camera.
    root = _copy(lance_copies, tmp_path, "dedicated")
    whole = _core.parse_byte_slice(open_ds(lance_copies["dedicated"]).index.video_files[0])[0]
    cut = os.path.join(root, os.path.relpath(whole, lance_copies["dedicated"]))
    os.truncate(cut, os.path.getsize(cut) // 2)
    report = stoker.check(root)
    assert report.errors and any(CAMERAS[0] == f.camera for f in report.findings
                                 if f.severity == "error")


def test_the_doctor_measures_a_lance_dataset(lance_copies, tmp_path):
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run([sys.executable, "-m", "stoker", "doctor", lance_copies["packed"],
                           "--batch-size", "2", "--quick", "--budget", "4", "--step-ms", "20",
                           "--report", str(tmp_path / "r")],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "stoker doctor:" in done.stdout and "-bound" in done.stdout


# ---------------------------------------------------------------------------------------------
# S3


@pytest.fixture(scope="module")
def lance_in_s3(s3_server, lance_copies):
    s3_server.create_bucket(BUCKET)
    for name, root in lance_copies.items():
        s3_server.upload_tree(root, BUCKET, f"ds/{name}")
    return s3_server


@pytest.mark.parametrize("layout", ["inline", "dedicated"])
def test_a_lance_dataset_in_s3_gives_the_items_of_the_local_mp4_copy(
        mp4_dataset, lance_in_s3, s3_environment, layout):
    mp4 = open_ds(mp4_dataset.root)
    remote = open_ds(f"s3://{BUCKET}/ds/{layout}")
    assert all(name.startswith(f"s3://{BUCKET}/ds/{layout}/videos.lance/")
               for name in remote.index.video_files)
    assert_same_items(mp4, remote)
    assert_same_batches(mp4, remote, threads=2)
    # A warm open maps the cached index and reads the same.
    assert_same_items(mp4, open_ds(f"s3://{BUCKET}/ds/{layout}"))


def test_a_lance_dataset_reads_through_store_faults(mp4_dataset, lance_in_s3, fault_proxy):
    # The ranged reads of the packed sidecar (the engine's, and Lance's checks of them) meet
    # 503s, 500s, resets and short bodies, from the index build on.
    fault_proxy.set_faults(slowdown=0.2, error=0.1, reset=0.05, truncate=0.05, paths=r"\.blob$")
    before = _core.remote_stats()["retries"]
    remote = open_ds(f"s3://{BUCKET}/ds/packed")
    assert_same_items(open_ds(mp4_dataset.root), remote)
    assert_same_batches(open_ds(mp4_dataset.root), remote, threads=2)
    assert _core.remote_stats()["retries"] > before


# ---------------------------------------------------------------------------------------------
# Refusals


def _copy(lance_copies, tmp_path, layout="inline"):
    root = str(tmp_path / layout)
    shutil.copytree(lance_copies[layout], root, ignore=shutil.ignore_patterns(".stoker"))
    return root


def test_a_frames_column_that_maps_to_no_feature_is_refused_by_name(lance_copies, tmp_path):
    root = _copy(lance_copies, tmp_path)
    frames = lance.dataset(os.path.join(root, "frames.lance"))
    frames.add_columns({"mystery_gain": "index * 2"})
    with pytest.raises(stoker.DatasetError, match="mystery_gain.*map to no feature"):
        open_ds(root)


def test_a_blob_outside_the_dataset_is_refused_by_name(lance_copies, mp4_dataset, tmp_path):
    root = _copy(lance_copies, tmp_path)
    shutil.rmtree(os.path.join(root, "videos.lance"))
    videos = sorted(os.path.join(d, n) for d, _, names in
                    os.walk(os.path.join(mp4_dataset.root, "videos")) for n in names)
    parts = [p.split(os.sep) for p in videos]
    schema = pa.schema([pa.field("video_key", pa.string()), pa.field("chunk_index", pa.int64()),
                        pa.field("file_index", pa.int64()), pa.field("file_size", pa.int64()),
                        lance.blob_field("video_bytes")])
    table = pa.Table.from_arrays([
        pa.array([p[-3] for p in parts]),
        pa.array([int(p[-2].split("-")[1]) for p in parts], pa.int64()),
        pa.array([int(p[-1][5:8]) for p in parts], pa.int64()),
        pa.array([os.path.getsize(v) for v in videos], pa.int64()),
        lance.blob_array([lance.blob.Blob.from_uri("file://" + v) for v in videos]),
    ], schema=schema)
    lance.write_dataset(table, os.path.join(root, "videos.lance"),
                        allow_external_blob_outside_bases=True)
    with pytest.raises(stoker.DatasetError, match="external blob"):
        open_ds(root)


def test_a_plain_binary_video_column_is_refused_by_name(lance_copies, tmp_path):
    root = _copy(lance_copies, tmp_path)
    shutil.rmtree(os.path.join(root, "videos.lance"))
    table = lance.dataset(os.path.join(lance_copies["inline"], "videos.lance")).to_table(
        columns=["video_key", "chunk_index", "file_index", "file_size"])
    table = table.append_column("video_bytes", pa.array([b"x"] * table.num_rows, pa.large_binary()))
    lance.write_dataset(table, os.path.join(root, "videos.lance"))
    with pytest.raises(stoker.DatasetError, match="not a Lance blob v2 column"):
        open_ds(root)


def test_a_video_missing_from_the_videos_table_is_refused_by_name(lance_copies, tmp_path):
    root = _copy(lance_copies, tmp_path)
    videos = lance.dataset(os.path.join(root, "videos.lance"))
    videos.delete(f"video_key = '{CAMERAS[1]}'")
    with pytest.raises(stoker.DatasetError, match="lacks the videos"):
        open_ds(root)


def test_another_storage_format_is_still_refused_by_name(lance_copies, tmp_path):
    root = _copy(lance_copies, tmp_path)
    info_path = os.path.join(root, "meta", "info.json")
    info = json.load(open(info_path))
    info["storage_format"] = "zarr"
    json.dump(info, open(info_path, "w"))
    with pytest.raises(stoker.DatasetError, match="storage_format 'zarr' is not supported"):
        open_ds(root)
