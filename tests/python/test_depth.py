"""Depth cameras: LeRobot video features with ``"video.is_depth_map": true`` (single-channel
gray16le / gray12le FFV1 here) come back as their stored uint16 samples, [T, 1, H, W], or as
float32 metres; items and batches are checked against the samples written
(:func:`lerobot_datasets.depth_values`) and against PyAV's full decode of the files."""

import json
import os
import tarfile

import lerobot_datasets
import numpy as np
import pytest

import stoker
from stoker.datasets.lerobot.dataset import LeRobotDataset, WindowSpec

FPS = 30
VIDEO = "observation.images.top"
DEPTH = "observation.images.depth"
SIZE = (24, 32)


@pytest.fixture(scope="module")
def depth_datasets(tmp_path_factory, lerobot_cache):
    """v2.1 with an H.264 camera and a gray16le depth camera (scale 1 mm); v3.0 (two episodes a
    file) with a gray12le depth camera, scale 0.25 mm and offset 0.1 m."""
    base = tmp_path_factory.mktemp("depth")
    v21 = lerobot_datasets.write_v21(base / "v21", [4, 5], [VIDEO], fps=FPS, codec="h264",
                                     cache_dir=lerobot_cache)
    lerobot_datasets.add_depth_camera(v21, DEPTH, SIZE, "gray16le",
                                      {"video.depth_scale": 0.001})
    v30 = lerobot_datasets.write_v30(base / "v30", [3, 5, 4], [VIDEO], fps=FPS, codec="h264",
                                     episodes_per_file=2, cache_dir=lerobot_cache)
    lerobot_datasets.add_depth_camera(v30, DEPTH, SIZE, "gray12le",
                                      {"video.depth_scale": 0.00025, "video.depth_offset": 0.1})
    return {"v21": (v21, 16, 0.001, 0.0), "v30": (v30, 12, 0.00025, 0.1)}


def dataset(root, spec=None, **kwargs):
    kwargs.setdefault("image_dtype", "uint8")
    return LeRobotDataset(str(root), spec, progress=False, **kwargs, output="numpy")


def episode_and_frame(written, row):
    starts = np.cumsum([0, *written.lengths])
    e = int(np.searchsorted(starts, row, side="right") - 1)
    return e, row - int(starts[e])


def pyav_decode(path):
    """Every frame of ``path`` as PyAV decodes it: uint16 [N, H, W] for gray16le/gray12le."""
    av = pytest.importorskip("av")
    with av.open(path) as container:
        return np.stack([frame.to_ndarray() for frame in container.decode(video=0)])


@pytest.mark.parametrize("name", ["v21", "v30"])
def test_items_hold_the_stored_samples(depth_datasets, name):
    written, bits, _, _ = depth_datasets[name]
    ds = dataset(written.root, WindowSpec(delta_indices={DEPTH: [-1, 0]}))
    assert ds.depth_cameras == {DEPTH: "uint16"}
    for row in range(len(ds)):
        item = ds[row]
        e, f = episode_and_frame(written, row)
        assert item[DEPTH].dtype == np.uint16
        assert item[DEPTH].shape == (2, 1, *SIZE)
        want = lerobot_datasets.depth_values(e, f, SIZE, bits)
        np.testing.assert_array_equal(item[DEPTH][1, 0], want)
        np.testing.assert_array_equal(
            item[DEPTH][0, 0], lerobot_datasets.depth_values(e, max(f - 1, 0), SIZE, bits)
        )
        assert item[VIDEO].shape == (3, 64, 64)  # the colour camera is untouched
    assert item[DEPTH].max() >= (1 << (bits - 1))  # the stored range, not shifted or cut


@pytest.mark.parametrize("name", ["v21", "v30"])
def test_samples_equal_pyav_and_the_video_reader(depth_datasets, name):
    written, _, _, _ = depth_datasets[name]
    path = written.video_paths[DEPTH][-1]
    decoded = pyav_decode(path)
    reader = stoker.VideoReader(path)
    frames = reader.get_frames(np.arange(len(reader)), pixel_format="gray16", layout="NCHW")
    assert frames.dtype == np.uint16
    np.testing.assert_array_equal(frames[:, 0], decoded)
    nhwc = reader.get_frames([2, 0], pixel_format="gray16")
    np.testing.assert_array_equal(nhwc[..., 0], decoded[[2, 0]])


def test_resize_takes_the_nearest_stored_sample(depth_datasets):
    written, bits, _, _ = depth_datasets["v21"]
    ds = dataset(written.root, WindowSpec(size=(10, 50)))
    item = ds[6]
    e, f = episode_and_frame(written, 6)
    full = lerobot_datasets.depth_values(e, f, SIZE, bits)
    ys = (2 * np.arange(10) + 1) * SIZE[0] // 20
    xs = (2 * np.arange(50) + 1) * SIZE[1] // 100
    assert item[DEPTH].shape == (1, 10, 50)
    np.testing.assert_array_equal(item[DEPTH][0], full[np.ix_(ys, xs)])
    assert item[VIDEO].shape == (3, 10, 50)


@pytest.mark.parametrize("name", ["v21", "v30"])
def test_metres_use_the_features_scale_and_offset(depth_datasets, name):
    written, bits, scale, offset = depth_datasets[name]
    ds = dataset(written.root, depth_unit="m", image_dtype="float32")
    assert ds.depth_cameras == {DEPTH: "float32"}
    item = ds[4]
    e, f = episode_and_frame(written, 4)
    want = (lerobot_datasets.depth_values(e, f, SIZE, bits) * scale + offset).astype(np.float32)
    assert item[DEPTH].dtype == np.float32
    np.testing.assert_array_equal(item[DEPTH][0], want)
    # depth_scale= in place of the feature's: millimetres.
    item = dataset(written.root, depth_unit="m", depth_scale=0.002)[4]
    want = (lerobot_datasets.depth_values(e, f, SIZE, bits) * 0.002 + offset).astype(np.float32)
    np.testing.assert_array_equal(item[DEPTH][0], want)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("unit", ["raw", "m"])
def test_loader_batches_equal_the_items(depth_datasets, threads, unit):
    written, _, _, _ = depth_datasets["v30"]
    ds = dataset(written.root, WindowSpec(delta_indices={DEPTH: [-2, 0], "action": [0]}),
                 depth_unit=unit)
    loader = stoker.Loader(ds, batch_size=5, shuffle=True, seed=5, threads=threads,
                           output="numpy")
    assert loader.fields[DEPTH] == ("uint16" if unit == "raw" else "float32", (5, 2, 1, *SIZE))
    seen = []
    for batch in loader:
        rows = np.asarray(batch["index"])
        seen += rows.tolist()
        for j, row in enumerate(rows):
            item = ds[int(row)]
            for key in (DEPTH, f"{DEPTH}_is_pad", VIDEO):
                got, want = np.asarray(batch[key][j]), np.asarray(item[key])
                assert got.dtype == want.dtype, key
                np.testing.assert_array_equal(got, want, err_msg=f"{key} of sample {row}")
    assert sorted(seen) == list(range(len(ds)))


def test_torch_batches_hold_uint16(depth_datasets):
    torch = pytest.importorskip("torch")
    written, _, _, _ = depth_datasets["v21"]
    ds = dataset(written.root)
    batch = next(iter(stoker.Loader(ds, batch_size=4, threads=1)))
    assert batch[DEPTH].dtype == torch.uint16
    row = int(batch["index"][1])
    np.testing.assert_array_equal(batch[DEPTH][1].numpy(), ds[row][DEPTH])


def test_random_crops_and_flips_are_the_colour_cameras(depth_datasets):
    """Random crops and flips drawn per (seed, epoch, sample, camera) as for colour: the same for
    any thread count, different per sample, and made of stored values only."""
    written, _, _, _ = depth_datasets["v30"]
    ds = dataset(written.root)
    transforms = stoker.Transforms(random_resized_crop=(8, 8), hflip=0.5)

    def epoch(threads):
        loader = stoker.Loader(ds, batch_size=4, seed=3, threads=threads, transforms=transforms,
                               shuffle=False, output="numpy")
        return np.concatenate([np.asarray(b[DEPTH]) for b in loader])

    one, two = epoch(1), epoch(2)
    np.testing.assert_array_equal(one, two)
    assert one.shape == (len(ds), 1, 8, 8) and one.dtype == np.uint16
    assert len({one[row].tobytes() for row in range(len(ds))}) == len(ds)
    # Every value is one that the sample's frame stores: nearest neighbour invents none.
    for row in range(len(ds)):
        stored = set(ds[row][DEPTH].ravel().tolist())
        assert set(one[row].ravel().tolist()) <= stored, row


def test_bad_depth_fields_and_arguments_are_refused(depth_datasets, tmp_path):
    written, _, _, _ = depth_datasets["v21"]
    with pytest.raises(ValueError, match="depth_unit"):
        dataset(written.root, depth_unit="mm")
    with pytest.raises(ValueError, match="depth_output_unit='m' or 'mm'"):
        dataset(written.root, depth_scale=0.001)
    with pytest.raises(ValueError, match="positive"):
        dataset(written.root, depth_unit="m", depth_scale=-1.0)
    # A depth camera without a scale cannot give metres.
    copy = tmp_path / "no_scale"
    import shutil

    shutil.copytree(written.root, copy)
    info_path = os.path.join(copy, "meta", "info.json")
    with open(info_path) as f:
        info = json.load(f)
    del info["features"][DEPTH]["info"]["video.depth_scale"]
    with open(info_path, "w") as f:
        json.dump(info, f)
    assert dataset(copy)[0][DEPTH].dtype == np.uint16
    with pytest.raises(stoker.DatasetError, match="only video.is_depth_map.*depth_scale="):
        dataset(copy, depth_unit="m")
    info["features"][DEPTH]["info"]["video.is_depth_map"] = "yes"
    with open(info_path, "w") as f:
        json.dump(info, f)
    with pytest.raises(stoker.DatasetError, match="is_depth_map"):
        dataset(copy)


def test_a_colour_stream_marked_as_depth_is_refused_by_name(depth_datasets, tmp_path):
    import shutil

    written, _, _, _ = depth_datasets["v21"]
    copy = tmp_path / "colour_depth"
    shutil.copytree(written.root, copy)
    # FFV1 in planar RGB: not a depth map, whatever info.json says.
    target = os.path.join(copy, os.path.relpath(written.video_paths[DEPTH][0], written.root))
    lerobot_datasets._ffmpeg(["-f", "lavfi", "-i", f"testsrc2=size=32x24:rate={FPS}",
                              "-frames:v", "4", "-c:v", "ffv1", "-pix_fmt", "gbrp", "-f", "mov",
                              target])
    ds = dataset(copy, rebuild=True)
    with pytest.raises(stoker.DatasetError, match="cannot read 16-bit samples"):
        ds[0]


def test_etl_refuses_depth_cameras_and_materializes_the_others(depth_datasets, tmp_path):
    """`stoker etl` writes 8-bit colour: a depth camera would lose its samples, so it is
    refused by name, and left out with --cameras the colour camera is materialized."""
    from stoker.writers import etl

    written = depth_datasets["v21"][0]
    with pytest.raises(ValueError, match=f"'{DEPTH}'.* is a depth camera") as raised:
        etl.materialize(written.root, str(tmp_path / "all"), size=(16, 16), progress=False)
    assert "--cameras" in str(raised.value)
    report = etl.materialize(written.root, str(tmp_path / "colour"), size=(16, 16),
                             cameras=[VIDEO], progress=False)
    assert report.verified and report.units_transcoded == len(written.lengths)


@pytest.mark.parametrize("clip_seconds", [None, 2 / FPS])
def test_shard_clips_refuse_depth_cameras_and_cut_the_others(depth_datasets, tmp_path,
                                                             clip_seconds):
    """`stoker shard` clips are read back by stoker.Clip as 8-bit RGB: a depth camera's 16-bit
    samples would come back as 256 levels (the FFV1 clips were copied losslessly, and read
    lossily), so it is refused by name with the way out, and left out with --cameras the
    colour camera is cut."""
    written = depth_datasets["v21"][0]
    with pytest.raises(stoker.InvalidArgumentError,
                       match=f"'{DEPTH}'.* is a depth camera") as raised:
        stoker.write_shards(written.root, tmp_path / "all", clip_seconds=clip_seconds,
                            progress=False)
    assert f"--cameras {VIDEO}" in str(raised.value)
    assert not list((tmp_path / "all").glob("*.tar"))
    with pytest.raises(stoker.InvalidArgumentError, match="no other camera"):
        stoker.write_shards(written.root, tmp_path / "depth", cameras=[DEPTH],
                            clip_seconds=clip_seconds, progress=False)

    dst = tmp_path / "colour"
    stoker.write_shards(written.root, dst, clip_seconds=clip_seconds, cameras=[VIDEO],
                        progress=False)
    shards = sorted(str(p) for p in dst.glob("*.tar"))
    ds = stoker.ShardDataset(shards, {VIDEO: stoker.Clip(f"{VIDEO}.mp4", frames=(0,),
                                                         size=(64, 64))})
    want = sum(n // 2 for n in written.lengths) if clip_seconds else len(written.lengths)
    assert len(ds.keys) == want
    names = {m.name for shard in shards for m in tarfile.open(shard).getmembers()}
    assert not any(DEPTH in name for name in names)
