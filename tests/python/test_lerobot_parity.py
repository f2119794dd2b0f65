"""Parity with LeRobot's own LeRobotDataset, when the lerobot package is installed
(`make test-lerobot` installs it into a separate virtual environment, as it brings PyTorch).

Same dataset, same delta_timestamps: the same keys, shapes, rows, pad masks and frames. Both
return images as float32 in [0, 1], channels first; their values must agree to within the
rounding of the two colour conversions (FFmpeg's swscale in both, at the same size).

And ``stoker check`` on a dataset LeRobot's own recorder wrote: no error, shallow or deep.
"""

import importlib.metadata
import os

import lerobot_datasets
import numpy as np
import pytest

import stoker

lerobot_dataset = pytest.importorskip("lerobot.datasets.lerobot_dataset")

FPS = 30
TOP = "observation.images.top"
DELTAS = {TOP: [-2 / FPS, 0.0], "observation.state": [-1 / FPS, 0.0],
          "action": [0.0, 1 / FPS, 2 / FPS]}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    # LeRobot's own packing scheme: offsets summed from the probed container durations.
    root = tmp_path_factory.mktemp("parity") / "v30"
    return lerobot_datasets.write_v30(root, [5, 7, 6, 9], [TOP], fps=FPS, episodes_per_file=2,
                                      offsets="probed")


def test_items_match_lerobot(dataset, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    theirs = lerobot_dataset.LeRobotDataset("local/parity", root=dataset.root,
                                            delta_timestamps=DELTAS, video_backend="pyav")
    ours = stoker.LeRobotDataset(dataset.root, stoker.WindowSpec(delta_timestamps=DELTAS),
                                 progress=False, output="numpy")
    assert len(ours) == len(theirs)
    for i in range(len(ours)):
        mine, reference = ours[i], theirs[i]
        assert set(mine) == set(reference), i
        for key, expected in reference.items():
            if key == "task":
                assert mine[key] == expected
                continue
            expected = expected.numpy()
            got = mine[key]
            assert np.shape(got) == expected.shape, (i, key)
            if key == TOP:
                assert got.dtype == expected.dtype == np.float32
                assert 0 <= got.min() and got.max() <= 1
                difference = np.abs(got - expected)
                assert difference.mean() < 1 / 255, (i, key, difference.mean())
                assert difference.max() <= 3 / 255, (i, key, difference.max())
                np.testing.assert_array_equal(lerobot_datasets.read_marks(got, layout="NCHW"),
                                              lerobot_datasets.read_marks(expected, layout="NCHW"))
            else:
                np.testing.assert_array_equal(got, expected.astype(got.dtype), err_msg=f"{i} {key}")


def test_lerobots_call_and_an_episode_subset_match_lerobot(dataset, monkeypatch):
    """The same call on both (LeRobot's arguments, some episodes): the same items, with
    ``index`` and ``episode_index`` as LeRobot gives them for a subset (the dataset's). Without
    windows: some LeRobot versions cut the windows of a subset's samples from the wrong rows
    (they take the position in the subset for the dataset row), which stoker does not copy."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    arguments = dict(root=dataset.root, episodes=[1, 3])
    theirs = lerobot_dataset.LeRobotDataset("local/parity", video_backend="pyav", **arguments)
    ours = stoker.LeRobotDataset("local/parity", progress=False, **arguments, output="numpy")
    assert len(ours) == len(theirs)
    for i in range(len(ours)):
        mine, reference = ours[i], theirs[i]
        assert set(mine) == set(reference), i
        for key in ("index", "episode_index", "frame_index", "action", "observation.state"):
            np.testing.assert_array_equal(mine[key], reference[key].numpy(), err_msg=f"{i} {key}")
        assert np.abs(mine[TOP] - reference[TOP].numpy()).mean() < 1 / 255
    assert ours.meta.fps == theirs.meta.fps
    assert ours.meta.camera_keys == theirs.meta.camera_keys
    assert ours.meta.total_frames == theirs.meta.total_frames


def test_loader_batches_match_lerobot_through_a_dataloader(dataset, monkeypatch):
    """stoker.Loader as a drop-in: its batches hold what torch's DataLoader collates from
    LeRobot's items for the same samples (keys, dtypes, shapes, pad masks, rows, task text)."""
    import torch

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    theirs = lerobot_dataset.LeRobotDataset("local/parity", root=dataset.root,
                                            delta_timestamps=DELTAS, video_backend="pyav")
    ours = stoker.LeRobotDataset(dataset.root, stoker.WindowSpec(delta_timestamps=DELTAS),
                                 progress=False, output="numpy")
    loader = stoker.Loader(ours, batch_size=4, shuffle=True, seed=3, threads=2)
    for batch in loader:
        rows = batch["index"].tolist()
        reference = torch.utils.data.default_collate([theirs[i] for i in rows])
        assert set(batch) == set(reference)
        for key, expected in reference.items():
            got = batch[key]
            if key == "task":
                assert got == expected
                continue
            assert tuple(got.shape) == tuple(expected.shape), key
            if key == TOP:
                assert got.dtype == expected.dtype == torch.float32
                assert (got - expected).abs().mean() < 1 / 255
            else:
                torch.testing.assert_close(got, expected.to(got.dtype), rtol=0, atol=0)


# The windows LeRobot's own policies ask for (their configs' delta_timestamps, at chunk sizes
# this short dataset holds), through LeRobot's call on both sides.
POLICY_DELTAS = {
    # ACT (and VQ-BeT's observation): one frame of each camera, one state row, an action chunk.
    "act": {TOP: [0.0], "observation.state": [0.0], "action": [i / FPS for i in range(4)]},
    # Diffusion Policy: n_obs_steps = 2 of images and state, a horizon of actions from -1.
    "diffusion": {TOP: [-1 / FPS, 0.0], "observation.state": [-1 / FPS, 0.0],
                  "action": [i / FPS for i in range(-1, 7)]},
    # pi0 / SmolVLA: the current observation (no window) and an action chunk.
    "pi0": {"action": [i / FPS for i in range(8)]},
}


@pytest.mark.parametrize("policy", POLICY_DELTAS)
def test_lerobots_call_matches_lerobot_for_the_windows_its_policies_ask_for(dataset, monkeypatch,
                                                                           policy):
    """Items and Loader batches against LeRobot's items and DataLoader collation: the same keys
    and shapes (a one-frame camera window squeezed to [3, H, W], state kept [1, dim]), rows,
    pad masks and frames."""
    import torch

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    deltas = POLICY_DELTAS[policy]
    theirs = lerobot_dataset.LeRobotDataset("local/parity", root=dataset.root,
                                            delta_timestamps=deltas, video_backend="pyav")
    ours = stoker.LeRobotDataset("local/parity", root=dataset.root, delta_timestamps=deltas,
                                 progress=False, output="numpy")
    assert len(ours) == len(theirs)
    for i in (0, 4, len(ours) - 1):
        mine, reference = ours[i], theirs[i]
        assert set(mine) == set(reference), i
        for key, expected in reference.items():
            if key == "task":
                assert mine[key] == expected
                continue
            expected = expected.numpy()
            assert np.shape(mine[key]) == expected.shape, (policy, i, key)
            if key == TOP:
                assert np.abs(mine[key] - expected).mean() < 1 / 255, (policy, i)
            else:
                np.testing.assert_array_equal(mine[key], expected.astype(np.asarray(mine[key]).dtype),
                                              err_msg=f"{policy} {i} {key}")
    batch = next(iter(stoker.Loader(ours, batch_size=4, shuffle=True, seed=1, threads=2)))
    reference = torch.utils.data.default_collate([theirs[i] for i in batch["index"].tolist()])
    assert set(batch) == set(reference)
    for key, expected in reference.items():
        if key != "task":
            assert tuple(batch[key].shape) == tuple(expected.shape), (policy, key)


# ---------------------------------------------------------------------------------------------
# A dataset materialized by `stoker etl` is still a LeRobot dataset.


@pytest.fixture(scope="module")
def materialized(dataset, tmp_path_factory):
    """`dataset` with a JSON annotation column, and its `stoker etl` output at 64x64 H.264."""
    import shutil

    from stoker.writers import etl

    folder = tmp_path_factory.mktemp("etl")
    src = str(folder / "src")
    shutil.copytree(dataset.root, src)
    copied = lerobot_datasets.WrittenDataset(
        src, dataset.version, dataset.lengths, dataset.fps, dataset.cameras, dataset.tasks,
        dataset.episode_task,
        data_paths=[p.replace(dataset.root, src) for p in dataset.data_paths])
    lerobot_datasets.add_json_column(copied)
    dst = str(folder / "dst")
    etl.materialize(src, dst, size=(64, 64), gop=4, progress=False)
    return src, dst


def test_lerobot_reads_the_materialized_dataset(materialized, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    src, dst = materialized
    deltas = dict(DELTAS, **{"annotation.box": [-1 / FPS, 0.0]})
    theirs = lerobot_dataset.LeRobotDataset("local/etl", root=dst, delta_timestamps=deltas,
                                            video_backend="pyav")
    source = lerobot_dataset.LeRobotDataset("local/etl-src", root=src,
                                            delta_timestamps=DELTAS, video_backend="pyav")
    ours = stoker.LeRobotDataset(dst, stoker.WindowSpec(delta_timestamps=deltas),
                                 progress=False, output="numpy")
    assert len(ours) == len(theirs) == len(source)
    for i in range(len(ours)):
        mine, reference, original = ours[i], theirs[i], source[i]
        # LeRobot also returns the typed columns stoker does not index (strings, variable-length
        # lists, booleans); every key stoker returns, it returns alike.
        assert set(mine) <= set(reference), i
        for key, expected in reference.items():
            if key.startswith("annotation.") and key not in mine:
                continue
            if key == "task":
                assert mine[key] == expected == original[key]
                continue
            expected = expected.numpy()
            got = mine[key]
            assert np.shape(got) == expected.shape, (i, key)
            if key == TOP:
                difference = np.abs(got - expected).mean()
                assert difference < 2 / 255, (i, key, difference)
                # The same frames as LeRobot reads from the source.
                np.testing.assert_array_equal(
                    lerobot_datasets.read_marks(got, layout="NCHW"),
                    lerobot_datasets.read_marks(
                        (original[key].numpy() * 255).round().astype(np.uint8), layout="NCHW"))
            else:
                np.testing.assert_array_equal(got, expected.astype(got.dtype), err_msg=f"{i} {key}")
                if key in original:
                    np.testing.assert_array_equal(expected, original[key].numpy(),
                                                  err_msg=f"{i} {key}")
        value = lerobot_datasets.annotation(int(reference["episode_index"]),
                                            int(reference["frame_index"]))
        assert reference["annotation.label"] == value["label"]
        assert reference["annotation.track"].tolist() == value["track"]
        assert reference["annotation.objects.xy"].tolist() == [o["xy"] for o in value["objects"]]


# ---------------------------------------------------------------------------------------------
# stoker check on a dataset LeRobot's own recorder wrote.


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """Four episodes recorded with LeRobot's LeRobotDataset.create / add_frame / save_episode:
    two AV1 cameras LeRobot encoded and packed, an image feature, six joints (one barely
    moving about 90 degrees), a gripper, actions; LeRobot's statistics."""
    root = tmp_path_factory.mktemp("recorded") / "recorded"
    return lerobot_datasets.record_with_lerobot(root, [24, 40, 9, 31])


def _float32_std(values):
    """The std LeRobot's recorder computes for one episode: sqrt(E[x²] - E[x]²) in float32."""
    values = values.astype(np.float32)
    mean, mean_of_squares = values.mean(axis=0), (values**2).mean(axis=0)
    return np.sqrt(np.maximum(0, mean_of_squares - mean**2))


def test_a_dataset_lerobots_recorder_wrote_has_no_error_shallow_or_deep(recorded):
    """LeRobot's output, checked as it is: no error, shallow or deep. Its image statistics come
    from sampled frames and its quantiles are approximate (never compared); its means and stds
    are float32 sums, whose rounding is not a disagreement with the data; its offsets are the
    running sums of its episode durations, which match its packed files (no drift)."""
    import pyarrow.parquet as pq

    shallow = stoker.check(recorded.root, progress=False)
    deep = stoker.check(recorded.root, deep=True, progress=False)
    absent = {"drift", "camera_offsets", "extra_frames", "duplicate_frames", "missing_frames",
              "fps", "features", "stats", "counts", "decode", "frame_format", "images"}
    for report in (shallow, deep):
        shown = f"\n{report}"  # every finding, on failure
        assert report.ok and not report.errors(), shown
        assert report.kind == "lerobot" and report.scanned["episodes"] == 4, shown
        # Nothing about the frames, the cameras' offsets or the statistics' presence.
        assert not {f.check for f in report.findings} & absent, shown
    assert deep.deep and deep.scanned["decoded_frames"] == deep.scanned["frames"] > 0, f"{deep}"
    # The still joint's std is where LeRobot's float32 sums round most (its per-episode stds
    # are far off the rows' own): the check takes that for rounding, and says so only if the
    # dataset's std came out so small that normalizing by it blows the joint up (a warning
    # that names it and the factor).
    joint = lerobot_datasets.STILL_JOINT
    state = np.stack(pq.read_table(os.path.join(recorded.root, "data"))
                     .column("observation.state").to_numpy(zero_copy_only=False))
    episodes = np.split(state, np.cumsum(recorded.lengths)[:-1])
    true_std = [x[:, joint].astype(np.float64).std() for x in episodes]
    assert any(abs(_float32_std(x)[joint] - t) > 0.1 * t for x, t in zip(episodes, true_std)), \
        "the still joint no longer shows LeRobot's rounding"
    for report in (shallow, deep):
        shown = f"\n{report}"
        for finding in (f for f in report.findings if f.check == "stats_consistency"):
            assert "multiplies" in finding.message, shown  # not "disagrees with the data"
            assert (finding.field, finding.episode) == ("observation.state", None), shown
            assert f"std[{joint}]" in finding.message, shown
            assert finding.found * 100 < finding.expected, shown


# ---------------------------------------------------------------------------------------------
# LeRobot 0.6: depth, language columns and its new arguments, on a dataset its recorder wrote.

DEPTH = "observation.images.depth"
WRIST = "observation.images.wrist"


def _lerobot_06():
    version = tuple(int(p) for p in importlib.metadata.version("lerobot").split(".")[:2])
    if version < (0, 6):
        pytest.skip(f"LeRobot {version} has no quantized depth or language columns")


@pytest.fixture(scope="module")
def recorded_06(tmp_path_factory):
    """Five episodes recorded by LeRobot 0.6's recorder: two AV1 cameras, a depth camera it
    quantized and encoded (HEVC gray12le), state, action, tasks; then its language columns."""
    _lerobot_06()
    root = tmp_path_factory.mktemp("recorded06") / "recorded"
    return lerobot_datasets.record_with_lerobot(root, [12, 20, 9, 15, 11], image_camera=None,
                                                depth_camera=DEPTH, language=True)


POLICY_DELTAS_06 = {
    "act": {TOP: [0.0], DEPTH: [0.0], "observation.state": [0.0],
            "action": [i / FPS for i in range(4)]},
    "diffusion": {TOP: [-1 / FPS, 0.0], DEPTH: [-1 / FPS, 0.0], WRIST: [-1 / FPS, 0.0],
                  "observation.state": [-1 / FPS, 0.0], "action": [i / FPS for i in range(-1, 7)]},
    "pi0": {"action": [i / FPS for i in range(8)]},
}


def _same_item(mine, reference, where):
    assert set(mine) == set(reference), where
    for key, expected in reference.items():
        got = mine[key]
        if key == "task" or key.startswith("language_"):
            assert got == expected, (where, key)
            continue
        expected = expected.numpy()
        assert np.shape(got) == expected.shape, (where, key)
        if key == DEPTH:
            assert got.dtype == expected.dtype == np.float32, (where, key)
            if np.all(expected == np.round(expected)):  # millimetres: LeRobot's, bit for bit
                np.testing.assert_array_equal(got, expected, err_msg=f"{where} {key}")
            else:  # metres: within an ulp of its float32 exp
                np.testing.assert_allclose(got, expected, rtol=1e-6, atol=0)
        elif key in (TOP, WRIST):
            assert np.abs(got - expected).mean() < 1 / 255, (where, key)
        else:
            np.testing.assert_array_equal(got, expected.astype(np.asarray(got).dtype),
                                          err_msg=f"{where} {key}")


@pytest.mark.parametrize("unit", ["mm", "m"])
@pytest.mark.parametrize("policy", POLICY_DELTAS_06)
def test_lerobot_06_items_and_batches_match_for_its_policies_windows(recorded_06, monkeypatch,
                                                                     policy, unit):
    """Depth (millimetres bit for bit, metres within an ulp), language columns, RGB and rows as
    LeRobot 0.6's items; Loader batches as lerobot_collate_fn collates them (language left
    out), and with keep_language=True the language columns as the items hold them."""
    import torch
    from lerobot.utils.collate import lerobot_collate_fn

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    arguments = dict(root=recorded_06.root, delta_timestamps=POLICY_DELTAS_06[policy],
                     depth_output_unit=unit)
    theirs = lerobot_dataset.LeRobotDataset("local/recorded", video_backend="pyav", **arguments)
    ours = stoker.LeRobotDataset("local/recorded", progress=False, **arguments, output="numpy")
    assert len(ours) == len(theirs)
    for i in (0, 5, 12, 33, len(ours) - 1):
        _same_item(ours[i], theirs[i], (policy, unit, i))
    # Items of the default output are LeRobot's types: tensors of its dtypes and shapes.
    tensors = stoker.LeRobotDataset("local/recorded", progress=False, **arguments)[7]
    for key, expected in theirs[7].items():
        assert type(tensors[key]) is type(expected), key
        if isinstance(expected, torch.Tensor):
            assert (tensors[key].dtype, tensors[key].shape) == (expected.dtype, expected.shape)
    for stat in ("mean", "min", "max"):
        np.testing.assert_allclose(ours.meta.stats[DEPTH][stat], theirs.meta.stats[DEPTH][stat],
                                   rtol=1e-6)
    batch = next(iter(stoker.Loader(ours, batch_size=6, shuffle=True, seed=2, threads=2)))
    reference = lerobot_collate_fn([theirs[i] for i in batch["index"].tolist()])
    assert set(batch) == set(reference)
    for key, expected in reference.items():
        if key == "task":
            assert batch[key] == expected
        elif key in (TOP, WRIST):
            assert (batch[key] - expected).abs().mean() < 1 / 255, key
        elif key == DEPTH and unit == "m":
            torch.testing.assert_close(batch[key], expected, rtol=1e-6, atol=0)
        else:
            torch.testing.assert_close(batch[key], expected.to(batch[key].dtype), rtol=0, atol=0)
    kept = next(iter(stoker.Loader(ours, batch_size=6, shuffle=True, seed=2, threads=2,
                                   keep_language=True)))
    for name in ("language_persistent", "language_events"):
        assert kept[name] == [theirs[i][name] for i in kept["index"].tolist()]


def test_lerobot_06_arguments_match(recorded_06, monkeypatch):
    """return_uint8 and episode_filter as LeRobot 0.6.1 applies them."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    arguments = dict(root=recorded_06.root, return_uint8=True,
                     episode_filter=lambda ep: ep["length"] >= 12)
    theirs = lerobot_dataset.LeRobotDataset("local/recorded", video_backend="pyav", **arguments)
    ours = stoker.LeRobotDataset("local/recorded", progress=False, **arguments, output="numpy")
    assert ours.episodes == sorted(theirs.episodes) == [0, 1, 3]
    assert len(ours) == len(theirs)
    for i in (0, 13, len(ours) - 1):
        mine, reference = ours[i], theirs[i]
        assert mine[TOP].dtype == np.uint8 == reference[TOP].numpy().dtype
        assert np.abs(mine[TOP].astype(int) - reference[TOP].numpy()).max() <= 3
        np.testing.assert_array_equal(mine[DEPTH], reference[DEPTH].numpy())
        assert mine["episode_index"] == reference["episode_index"].item()
