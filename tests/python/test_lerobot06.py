"""LeRobot 0.6's datasets read as LeRobot 0.6.1 reads them (issue 32): depth as 12-bit
quantized HEVC dequantized to millimetres or metres, language columns, the new constructor
arguments, and every info.json attribute that could change values either understood or refused
by name. Datasets written by the tests (tests/python/lerobot_datasets.py), videos encoded by
FFmpeg; `make test-lerobot` compares the same with LeRobot 0.6.1's own reader."""

import json
import logging
import os
import shutil

import lerobot_datasets
import numpy as np
import pytest

import stoker

FPS = 30
VIDEO = "observation.images.top"
DEPTH = "observation.images.depth"
SIZE = (24, 32)
DELTA = {DEPTH: [-2 / FPS, 0.0], VIDEO: [0.0]}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, lerobot_cache):
    """A v3.0 dataset (two episodes a file) with an H.264 camera, a depth camera as LeRobot 0.6
    writes it (12-bit log-quantized codes, lossless HEVC gray12le, its info attributes) and
    LeRobot 0.6's language columns; and a copy whose depth uses the linear quantizer over
    0.2-4 m."""
    base = tmp_path_factory.mktemp("lerobot06")
    log = lerobot_datasets.write_v30(base / "log", [3, 5, 4], [VIDEO], fps=FPS, codec="h264",
                                     episodes_per_file=2, cache_dir=lerobot_cache)
    lerobot_datasets.add_depth_camera(log, DEPTH, SIZE, "gray12le",
                                      lerobot_datasets.LEROBOT_06_DEPTH_INFO, codec="hevc")
    lerobot_datasets.add_language_columns(log.root)
    linear = lerobot_datasets.write_v30(base / "linear", [3, 5, 4], [VIDEO], fps=FPS,
                                        codec="h264", episodes_per_file=2,
                                        cache_dir=lerobot_cache)
    lerobot_datasets.add_depth_camera(
        linear, DEPTH, SIZE, "gray12le",
        {**lerobot_datasets.LEROBOT_06_DEPTH_INFO, "video.use_log": False,
         "video.depth_min": 0.2, "video.depth_max": 4.0}, codec="hevc")
    return {"log": log, "linear": linear}


def lerobot_metres(codes, log, low=0.01, high=10.0, shift=3.5):
    """LeRobot 0.6.1's dequantizer (lerobot.datasets.depth_utils), in double."""
    codes = np.asarray(codes, np.float64)
    if not log:
        return np.clip(low + codes * (high - low) / 4095, low, high)
    a, b = np.log(low + shift), np.log(high + shift)
    return np.clip(np.exp(a + codes * (b - a) / 4095) - shift, low, high)


def stored_codes(written, row, offset=0):
    starts = np.cumsum([0, *written.lengths])
    e = int(np.searchsorted(starts, row, side="right") - 1)
    frame = max(row - int(starts[e]) + offset, 0)
    return lerobot_datasets.depth_values(e, frame, SIZE, bits=12)


@pytest.mark.parametrize("kind", ["log", "linear"])
def test_quantized_depth_comes_out_in_millimetres_metres_or_codes(recorded, kind):
    """Millimetres by default (float32, whole millimetres, as LeRobot), metres, or the stored
    12-bit codes; one frame (1, H, W), windows (T, 1, H, W) with pad masks."""
    written = recorded[kind]
    params = dict(log=True) if kind == "log" else dict(log=False, low=0.2, high=4.0)
    millimetres = stoker.LeRobotDataset(written.root, progress=False, output="numpy")
    metres = stoker.LeRobotDataset(written.root, progress=False, depth_output_unit="m",
                                   delta_timestamps=DELTA, output="numpy")
    codes = stoker.LeRobotDataset(written.root, progress=False, depth_output_unit="raw", output="numpy")
    assert millimetres.depth_cameras == {DEPTH: "float32"}
    assert codes.depth_cameras == {DEPTH: "uint16"}
    for row in range(len(millimetres)):
        stored = stored_codes(written, row)
        item = millimetres[row][DEPTH]
        assert item.shape == (1, *SIZE) and item.dtype == np.float32
        want = lerobot_metres(stored, **params) * 1000
        assert np.all(item == np.round(item))
        assert np.abs(item[0] - want).max() <= 0.5 + 1e-3, row
        window = metres[row]
        assert window[DEPTH].shape == (2, 1, *SIZE) and window[DEPTH].dtype == np.float32
        for t, offset in enumerate((-2, 0)):
            want = lerobot_metres(stored_codes(written, row, offset), **params)
            np.testing.assert_allclose(window[DEPTH][t, 0], want, rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(codes[row][DEPTH][0], stored)


def test_the_loader_dequantizes_into_the_batch_as_items_do(recorded):
    written = recorded["log"]
    for unit in ("mm", "m", "raw"):
        ds = stoker.LeRobotDataset(written.root, progress=False, depth_output_unit=unit,
                                   delta_timestamps=DELTA, output="numpy")
        for threads in (1, 2):
            loader = stoker.Loader(ds, batch_size=4, shuffle=False, threads=threads,
                                   output="numpy")
            rows = 0
            for batch in loader:
                for slot in range(len(batch["index"])):
                    item = ds[rows + slot]
                    np.testing.assert_array_equal(batch[DEPTH][slot], item[DEPTH])
                    np.testing.assert_array_equal(batch[f"{DEPTH}_is_pad"][slot],
                                                  item[f"{DEPTH}_is_pad"])
                rows += len(batch["index"])
            assert rows == len(ds)


def test_depth_statistics_come_in_the_output_unit(recorded, tmp_path):
    """As LeRobot 0.6.1's rescale_depth_stats: statistics recorded in metres (depth_unit "m")
    come in millimetres with the default output."""
    root = tmp_path / "stats"
    shutil.copytree(recorded["log"].root, root)
    stats = {DEPTH: {"mean": [[[1.5]]], "std": [[[0.25]]], "min": [[[0.3]]], "max": [[[2.0]]],
                     "count": [40]}}
    with open(root / "meta" / "stats.json", "w") as f:
        json.dump(stats, f)
    in_mm = stoker.LeRobotDataset(str(root), progress=False, output="numpy").meta.stats[DEPTH]
    in_m = stoker.LeRobotDataset(str(root), progress=False, depth_output_unit="m", output="numpy").meta.stats
    assert float(in_mm["mean"].ravel()[0]) == 1500.0 and float(in_mm["max"].ravel()[0]) == 2000
    assert int(in_mm["count"][0]) == 40
    assert float(in_m[DEPTH]["mean"].ravel()[0]) == 1.5


def edited_copy(source, target, edit):
    shutil.copytree(source, target)
    path = os.path.join(target, "meta", "info.json")
    with open(path) as f:
        info = json.load(f)
    edit(info)
    with open(path, "w") as f:
        json.dump(info, f)
    return str(target)


def depth_info(info):
    return info["features"][DEPTH]["info"]


@pytest.mark.parametrize("edit, refusal", [
    (lambda i: i["features"]["action"].update(dtype="float8_e4m3"), "dtype 'float8_e4m3'"),
    (lambda i: i["features"]["action"].update(encoding="zstd"), r"keys \['encoding'\]"),
    (lambda i: depth_info(i).update({"video.depth_gamma": 2.2}), "video.depth_gamma"),
    (lambda i: depth_info(i).update({"is_normal_map": True}), "is_normal_map"),
    (lambda i: depth_info(i).update({"video.pix_fmt": "gray16le"}), "gray16le"),
    (lambda i: depth_info(i).update({"video.depth_scale": 0.001}), "both LeRobot 0.6's"),
    (lambda i: depth_info(i).update({"video.use_log": "yes"}), "video.use_log"),
    (lambda i: depth_info(i).update({"video.depth_min": 5.0, "video.depth_max": 1.0}),
     "below video.depth_max"),
    (lambda i: depth_info(i).update({"video.shift": -1.0}), "depth_min \\+ video.shift > 0"),
    (lambda i: depth_info(i).update({"depth_unit": "cm"}), "depth_unit 'cm'"),
    (lambda i: i["features"]["action"].update(fps=15), "fps 15"),
    (lambda i: i.update(storage_format="zarr"), "storage_format 'zarr'"),
])
def test_what_could_change_values_and_is_not_understood_is_refused_by_name(recorded, tmp_path,
                                                                            edit, refusal):
    root = edited_copy(recorded["log"].root, tmp_path / "edited", edit)
    with pytest.raises(stoker.DatasetError, match=refusal):
        stoker.LeRobotDataset(root, progress=False, rebuild=True, output="numpy")


def test_depth_stored_as_images_is_refused_by_name(recorded, tmp_path):
    def edit(info):
        info["features"]["observation.images.depth_png"] = {
            "dtype": "image", "shape": [24, 32, 1], "names": None,
            "info": {"is_depth_map": True, "depth_unit": "mm"}}

    root = edited_copy(recorded["log"].root, tmp_path / "png", edit)
    with pytest.raises(stoker.DatasetError, match="depth_png.*stoker reads depth from video"):
        stoker.LeRobotDataset(root, progress=False, output="numpy")


def test_unknown_top_level_keys_are_named_in_a_warning(recorded, tmp_path, caplog):
    root = edited_copy(recorded["log"].root, tmp_path / "citation",
                       lambda i: i.update(citation="a paper"))
    with caplog.at_level(logging.WARNING, logger="stoker"):
        ds = stoker.LeRobotDataset(root, progress=False, output="numpy")
    assert "['citation']" in caplog.text
    assert len(ds) == sum(recorded["log"].lengths)


def test_language_columns_in_items_and_left_out_of_batches_unless_kept(recorded):
    written = recorded["log"]
    ds = stoker.LeRobotDataset(written.root, progress=False, output="numpy")
    assert ds.language_columns == ("language_persistent", "language_events")
    assert ds.meta.tools == lerobot_datasets.LANGUAGE_TOOLS
    starts = np.cumsum([0, *written.lengths])
    for row in range(len(ds)):
        e = int(np.searchsorted(starts, row, side="right") - 1)
        persistent, events = lerobot_datasets.language_rows(e, row - int(starts[e]))
        item = ds[row]
        for message, want in zip(item["language_persistent"], persistent):
            assert message == pytest.approx(want)
        # tool_calls are JSON: parsed, as LeRobot's items give them.
        for message, want in zip(item["language_events"], events):
            assert message["tool_calls"] == [json.loads(c) for c in want["tool_calls"]]
        assert len(item["language_events"]) == len(events)
    batch = next(iter(stoker.Loader(ds, batch_size=4, shuffle=False)))
    assert "language_persistent" not in batch and "language_events" not in batch
    kept = next(iter(stoker.Loader(ds, batch_size=4, shuffle=False, keep_language=True)))
    assert kept["language_events"] == [ds[row]["language_events"] for row in range(4)]
    mix = stoker.MultiDataset([ds, ds], weights=[1, 1])
    assert "language_events" not in next(iter(stoker.Loader(mix, batch_size=4)))
    assert "language_events" in next(iter(stoker.Loader(mix, batch_size=4, keep_language=True)))


def test_lerobot_06_arguments(recorded):
    root = recorded["log"].root
    uint8 = stoker.LeRobotDataset(root, progress=False, return_uint8=True, output="numpy")
    assert uint8[0][VIDEO].dtype == np.uint8 and uint8[0][DEPTH].dtype == np.float32
    assert stoker.LeRobotDataset(root, progress=False, return_uint8=False, output="numpy")[0][VIDEO].dtype == (
        np.float32)
    with pytest.raises(ValueError, match="return_uint8=True and image_dtype='float32'"):
        stoker.LeRobotDataset(root, progress=False, return_uint8=True, image_dtype="float32", output="numpy")
    # episode_filter: a predicate over the episode table's rows, intersected with episodes=.
    long = stoker.LeRobotDataset(root, progress=False, episode_filter=lambda ep: ep["length"] > 3, output="numpy")
    assert long.episodes == [1, 2] and len(long) == 9
    both = stoker.LeRobotDataset(root, progress=False, episodes=[0, 2],
                                 episode_filter=lambda ep: ep["length"] > 3, output="numpy")
    assert both.episodes == [2]
    np.testing.assert_array_equal(both[0][DEPTH], long[5][DEPTH])
    with pytest.raises(stoker.InvalidArgumentError, match="episode_filter chose no episode"):
        stoker.LeRobotDataset(root, progress=False, episode_filter=lambda ep: False, output="numpy")
    # Arguments about writing are refused, never accepted and ignored.
    for name in ("batch_encoding_size", "rgb_encoder", "depth_encoder", "encoder_threads",
                 "streaming_encoding", "encoder_queue_maxsize"):
        with pytest.raises(TypeError, match=f"'{name}'.*for writing a dataset"):
            stoker.LeRobotDataset(root, progress=False, **{name: 1}, output="numpy")
    stoker.LeRobotDataset(root, progress=False, token=None, video_backend="pyav", output="numpy")
    with pytest.raises(ValueError, match="depth_output_unit must be one of"):
        stoker.LeRobotDataset(root, progress=False, depth_output_unit="cm", output="numpy")
    with pytest.raises(stoker.InvalidArgumentError, match="quantized depth"):
        stoker.LeRobotDataset(root, progress=False, depth_output_unit="m", depth_scale=0.001, output="numpy")
    # depth_unit, depth_output_unit's earlier name, still works.
    np.testing.assert_array_equal(
        stoker.LeRobotDataset(root, progress=False, depth_unit="m", output="numpy")[2][DEPTH],
        stoker.LeRobotDataset(root, progress=False, depth_output_unit="m", output="numpy")[2][DEPTH])


def test_docs_list_every_key_attribute_and_dtype_the_code_knows():
    from stoker.datasets.lerobot import vocabulary

    docs = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "datasets.md")
    with open(docs, encoding="utf-8") as f:
        text = f.read()
    section = text[text.index("## What stoker reads of info.json"):text.index("## Several")]
    for name in (*vocabulary.TOP_LEVEL_KEYS, *vocabulary.READ_ATTRIBUTES,
                 *vocabulary.IGNORED_ATTRIBUTES, *vocabulary.FEATURE_DTYPES,
                 *vocabulary.FEATURE_KEYS):
        assert f"`{name}`" in section, name


def test_items_are_torch_tensors_as_lerobots_unless_numpy_is_asked(recorded):
    """As LeRobot's items: tensors (0-dim for scalars), so `item["action"].to(device)` works;
    output="numpy" (and numpy_item) give the same values as numpy arrays."""
    import torch

    root = recorded["log"].root
    tensors = stoker.LeRobotDataset(root, progress=False, delta_timestamps=DELTA)[4]
    arrays = stoker.LeRobotDataset(root, progress=False, delta_timestamps=DELTA, output="numpy")
    for key, value in arrays[4].items():
        if isinstance(value, (np.ndarray, np.generic)):
            assert isinstance(tensors[key], torch.Tensor), key
            np.testing.assert_array_equal(tensors[key].numpy(), value, err_msg=key)
        else:
            assert tensors[key] == value, key
    assert tensors["timestamp"].shape == () and tensors["index"].dtype == torch.int64
    assert tensors[DEPTH].dtype == torch.float32 and tensors[f"{DEPTH}_is_pad"].dtype == torch.bool
    assert tensors["action"].to("cpu").shape == (6,)
    np.testing.assert_array_equal(arrays.numpy_item(4)["action"], tensors["action"].numpy())
    with pytest.raises(ValueError, match="output must be"):
        stoker.LeRobotDataset(root, progress=False, output="jax")


def test_bytes_read_counts_local_videos(recorded):
    """stats()["bytes_read"] counts what the decoders read of local videos (issue 33, item 16:
    it was 0), as the decode's own counter does: some of the videos' bytes, for one batch."""
    written = recorded["log"]
    ds = stoker.LeRobotDataset(written.root, progress=False, delta_timestamps=DELTA,
                               output="numpy")
    loader = stoker.Loader(ds, batch_size=4, shuffle=False, threads=1, output="numpy")
    batch = next(iter(loader))
    stats = loader.stats()
    loader.close()
    videos = sum(os.path.getsize(p) for camera in (VIDEO, DEPTH)
                 for p in set(written.video_paths[camera]))
    assert 0 < stats["bytes_read"] < 4 * videos
    assert stats["bytes_read"] == stats["decode"]["bytes_read"]
    assert len(batch["index"]) == 4
