"""stoker.MultiDataset: datasets of any kind with different features read as one by the native
loader, the keys one lacks padded and masked, each slot a weighted draw, dataset_index; and the
Loader over it."""

import io
import tarfile

import lerobot_datasets
import numpy as np
import pytest
from PIL import Image as PILImage

import stoker

torch = pytest.importorskip("torch")
FPS = 30
TOP, WRIST = "observation.images.top", "observation.images.wrist"


@pytest.fixture(scope="module")
def one_camera(tmp_path_factory, lerobot_cache):
    """A v3.0 dataset with the top camera only: 2 episodes (5, 7 frames)."""
    return lerobot_datasets.write_v30(tmp_path_factory.mktemp("multi") / "top_only", [5, 7],
                                      [TOP], fps=FPS, cache_dir=lerobot_cache)


def datasets(lerobot_v21, one_camera):
    deltas = {TOP: [-1 / FPS, 0.0], "action": [0.0, 1 / FPS]}
    both = stoker.LeRobotDataset(lerobot_v21.root, delta_timestamps=deltas, progress=False, output="numpy")
    top_only = stoker.LeRobotDataset(one_camera.root, delta_timestamps=deltas, progress=False, output="numpy")
    return both, top_only


def write_shard(path, n, bad_image=None):
    """A shard of n samples: a 40x30 JPEG (garbage bytes for sample `bad_image`), a caption
    and a label each."""
    with tarfile.open(path, "w") as tar:
        for k in range(n):
            rng = np.random.default_rng(k)
            out = io.BytesIO()
            PILImage.fromarray(rng.integers(0, 255, (30, 40, 3), np.uint8)).save(out, "JPEG")
            jpg = b"not a jpeg at all" if k == bad_image else out.getvalue()
            for field, data in (("jpg", jpg), ("txt", f"caption {k}".encode()),
                                ("cls", str(k % 3).encode())):
                info = tarfile.TarInfo(f"s{k:03d}.{field}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return str(path)


def shard_dataset(path):
    spec = {"image": stoker.Image(size=(32, 32)), "caption": stoker.Text(),
            "label": stoker.Label()}
    return stoker.ShardDataset(str(path), spec)


@pytest.fixture
def shard_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("STOKER_CACHE_DIR", str(tmp_path / "cache"))


def test_items_hold_every_key_with_masks_and_their_dataset(lerobot_v21, one_camera):
    both, top_only = datasets(lerobot_v21, one_camera)
    mix = stoker.MultiDataset([both, top_only])
    assert len(mix) == len(both) + len(top_only)
    first, last = mix[0], mix[len(both)]
    assert set(first) == set(last) == set(mix.schema) | {"dataset_index"}
    assert first["dataset_index"] == 0 and last["dataset_index"] == 1
    # The wrist camera (no window there) is zeros in the dataset that lacks it, and masked.
    assert first[f"{WRIST}_is_pad"] == np.False_ and last[f"{WRIST}_is_pad"] == np.True_
    assert last[WRIST].shape == first[WRIST].shape and not last[WRIST].any()
    np.testing.assert_array_equal(last[TOP], top_only[0][TOP])
    np.testing.assert_array_equal(first[TOP], both[0][TOP])
    assert last["task"] == top_only[0]["task"]


def test_disagreeing_keys_are_refused_by_name(lerobot_v21, one_camera):
    both = stoker.LeRobotDataset(lerobot_v21.root, progress=False, output="numpy")
    small = stoker.LeRobotDataset(one_camera.root, stoker.WindowSpec(size=(32, 32)),
                                  progress=False, output="numpy")
    mix = stoker.MultiDataset([both, small])
    message = r"dataset 0 \(LeRobotDataset .*\) and dataset 1 \(LeRobotDataset .*\) disagree on key 'observation.images.top'"
    with pytest.raises(stoker.DatasetError, match=message):
        mix.schema
    with pytest.raises(stoker.DatasetError, match=message):
        stoker.Loader(mix, batch_size=2)
    with pytest.raises(stoker.InvalidArgumentError, match="one per dataset"):
        stoker.MultiDataset([both], weights=[1, 2])


def test_each_draw_takes_a_dataset_by_weight_within_three_sigma(lerobot_v21, one_camera):
    both, top_only = datasets(lerobot_v21, one_camera)
    mix = stoker.MultiDataset([both, top_only], weights=[1, 3])
    n = 10_000
    ids = mix.sampler(num_samples=n, seed=1).indices()
    assert ids.min() >= 0 and ids.max() < len(mix)
    drawn = int(np.sum(ids >= len(both)))
    sigma = np.sqrt(n * 0.75 * 0.25)
    assert abs(drawn - 0.75 * n) < 3 * sigma
    # Independent per draw: runs of one dataset are as long as chance makes them, not blocks.
    second = (ids >= len(both)).astype(int)
    switches = int(np.sum(second[1:] != second[:-1]))
    expected = 2 * 0.75 * 0.25 * (n - 1)
    assert abs(switches - expected) < 4 * np.sqrt(expected)


def test_loader_slots_are_their_datasets_items_and_resume_exactly(lerobot_v21, one_camera):
    both, top_only = datasets(lerobot_v21, one_camera)
    mix = stoker.MultiDataset([both, top_only], weights=[1, 1])
    loader = stoker.Loader(mix, batch_size=6, seed=2, threads=2)
    assert isinstance(loader, stoker.Loader)
    assert len(loader) == -(-len(mix) // 6)
    epoch = list(loader)
    order = loader.epoch_order(0)
    drawn = np.concatenate([b["dataset_index"].numpy() for b in epoch])
    np.testing.assert_array_equal(drawn, (order >= len(both)).astype(np.int64))
    assert 0 < drawn.sum() < len(drawn)  # both datasets drawn
    for batch in epoch:
        n = len(batch["task"])
        which = batch["dataset_index"].tolist()
        assert tuple(batch[WRIST].shape) == (n, 3, 64, 64)
        assert batch[f"{WRIST}_is_pad"].tolist() == [k == 1 for k in which]
        for j in range(n):  # each slot is its dataset's item
            ds = (both, top_only)[which[j]]
            item = ds[int(batch["index"][j])]
            np.testing.assert_array_equal(batch[TOP][j].numpy(), item[TOP])
            np.testing.assert_array_equal(batch["action"][j].numpy(), item["action"])
            assert batch["task"][j] == item["task"]
            if which[j] == 1:
                assert not batch[WRIST][j].any()
    loader.set_epoch(0)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    del it
    again = stoker.Loader(mix, batch_size=6, seed=2, threads=1)
    again.load_state_dict(state)
    rest = list(again)
    assert len(rest) == len(epoch) - 1
    for a, b in zip(rest, epoch[1:]):
        assert a["index"].tolist() == b["index"].tolist()
        assert a["dataset_index"].tolist() == b["dataset_index"].tolist()
        np.testing.assert_array_equal(a[TOP].numpy(), b[TOP].numpy())
    with pytest.raises(TypeError, match="do not apply"):
        stoker.Loader(mix, batch_size=4, sampler=stoker.RandomSampler(len(mix)))
    with pytest.raises(ValueError, match="shuffle=False does not apply"):
        stoker.Loader(mix, batch_size=4, shuffle=False)


def test_a_lerobot_dataset_mixes_with_shards(lerobot_v21, tmp_path, shard_cache):
    robot = stoker.LeRobotDataset(lerobot_v21.root, delta_timestamps={TOP: [0.0]},
                                  image_dtype="uint8", progress=False, output="numpy")
    shards = shard_dataset(write_shard(tmp_path / "a.tar", 10))
    mix = stoker.MultiDataset([robot, shards], weights=[1, 1])
    schema = mix.schema
    assert schema["image"] == ("uint8", (3, 32, 32)) and schema["image_is_pad"] == ("bool", ())
    assert schema["caption"] is None and schema["task_is_pad"] == ("bool", ())
    with stoker.Loader(mix, batch_size=8, seed=3, threads=2) as loader:
        batches = list(loader)
        stats = loader.stats()
    assert stats["samples"] == sum(len(b["task"]) for b in batches)
    seen = set()
    for batch in batches:
        assert set(batch) == set(schema) | {"dataset_index"}
        for j, k in enumerate(batch["dataset_index"].tolist()):
            seen.add(k)
            if k == 1:
                item = shards[int(batch["__index__"][j])]
                np.testing.assert_array_equal(batch["image"][j].numpy(), item["image"])
                assert batch["caption"][j] == item["caption"]
                assert int(batch["label"][j]) == int(item["label"])
                assert batch["task"][j] is None and bool(batch["task_is_pad"][j])
                assert not batch[TOP][j].any() and bool(batch[f"{TOP}_is_pad"][j].all())
            else:
                item = robot[int(batch["index"][j])]
                np.testing.assert_array_equal(batch[TOP][j].numpy(), item[TOP])
                assert batch["caption"][j] is None and bool(batch["caption_is_pad"][j])
                assert batch["task"][j] == item["task"] and not bool(batch["task_is_pad"][j])
                assert not batch["image"][j].any()
    assert seen == {0, 1}


def test_a_mixs_schema_is_taken_without_decoding(lerobot_v21, tmp_path, shard_cache):
    robot = stoker.LeRobotDataset(lerobot_v21.root, image_dtype="uint8", progress=False, output="numpy")
    every_image_bad = write_shard(tmp_path / "bad.tar", 4, bad_image=0)
    shards = shard_dataset(every_image_bad)
    # The shard's first image cannot be decoded: a schema taken from item 0 would fail.
    mix = stoker.MultiDataset([shards, robot])
    assert mix.schema["image"] == ("uint8", (3, 32, 32))
    with pytest.raises(stoker.Error, match="s000"):
        shards[0]


def test_skip_replaces_a_bad_sample_from_its_own_dataset(lerobot_v21, tmp_path, shard_cache):
    robot = stoker.LeRobotDataset(lerobot_v21.root, delta_timestamps={TOP: [0.0]},
                                  image_dtype="uint8", progress=False, output="numpy")
    shards = shard_dataset(write_shard(tmp_path / "bad.tar", 6, bad_image=2))
    mix = stoker.MultiDataset([robot, shards], weights=[1, 4])
    with stoker.Loader(mix, batch_size=len(mix), seed=0, threads=2) as loader:
        with pytest.raises(stoker.Error, match=r"dataset 1 \(ShardDataset .*s002"):
            list(loader)
    with stoker.Loader(mix, batch_size=len(mix), seed=0, threads=2, on_error="skip") as loader:
        (batch,) = list(loader)
        stats = loader.stats()
    assert stats["skipped"] >= 1 and "dataset 1" in stats["skips"][0]["reason"]
    # The batch keeps its shape; the replacement is another sample of the shards.
    assert len(batch["task"]) == len(mix)
    for j, k in enumerate(batch["dataset_index"].tolist()):
        if k == 1:
            assert int(batch["__index__"][j]) != 2


def test_a_mixs_schema_gives_an_image_without_a_size_as_none(lerobot_v21, tmp_path, shard_cache):
    """Issue 33: `mix.schema` raised "image field 'image' has no output size" for a shard
    image without a size, though the docs say it gives every key without transforms."""
    robot = stoker.LeRobotDataset(lerobot_v21.root, delta_timestamps={TOP: [0.0]},
                                  image_dtype="uint8", progress=False, output="numpy")
    shards = stoker.ShardDataset(write_shard(tmp_path / "a.tar", 4),
                                 {"image": stoker.Image(), "label": stoker.Label()})
    mix = stoker.MultiDataset([robot, shards])
    schema = mix.schema
    assert schema["image"] == ("uint8", (3, None, None))  # the Loader's transforms size it
    assert schema["label"] == ("int64", ()) and schema[TOP] == ("uint8", (3, 64, 64))
    with pytest.raises(stoker.InvalidArgumentError, match="'image'.*give its stoker.Image a size"):
        mix[0]  # a robot sample padded with an image of no size
    # A Loader over the mix still needs the size, and says where to give it.
    with pytest.raises(stoker.InvalidArgumentError, match="image field 'image' has no output size"):
        stoker.Loader(mix, batch_size=2)
    transforms = stoker.Transforms(resize=(32, 32))
    with stoker.Loader(mix, batch_size=4, transforms=transforms, seed=0, threads=1) as loader:
        batch = next(iter(loader))
    assert tuple(batch["image"].shape) == (4, 3, 32, 32)
    report = stoker.check(mix)
    assert [f.check for f in report.findings if f.severity == "error"] == ["mix_schema"]


def test_a_mix_gives_its_images_in_one_dtype_or_names_the_argument(lerobot_v21, tmp_path,
                                                                    shard_cache):
    """Issue 33: in a mix, LeRobot cameras came as float32 in [0, 1] and shard images as uint8
    0-255. A mix has one rule: the Loader's transforms (or the datasets' arguments) set it."""
    robot = stoker.LeRobotDataset(lerobot_v21.root, delta_timestamps={TOP: [0.0]},
                                  progress=False, output="numpy")
    shards = shard_dataset(write_shard(tmp_path / "a.tar", 6))
    mix = stoker.MultiDataset([robot, shards])
    message = (r"images in different dtypes \(dataset 0 .* float32 in \[0, 1\]; dataset 1 .* "
               r"uint8 0-255\): give the Loader transforms=stoker.Transforms\(dtype='uint8'\)")
    with pytest.raises(stoker.DatasetError, match=message):
        stoker.Loader(mix, batch_size=4)
    with pytest.raises(stoker.DatasetError, match=message):
        mix.schema
    for dtype in ("uint8", "float32"):
        loader = stoker.Loader(mix, batch_size=4, seed=0, threads=1,
                               transforms=stoker.Transforms(resize=(32, 32), dtype=dtype))
        batch = next(iter(loader))
        assert str(batch["image"].dtype) == str(batch[TOP].dtype) == f"torch.{dtype}"
        loader.close()
    # The same rule from the dataset's argument.
    robot = stoker.LeRobotDataset(lerobot_v21.root, delta_timestamps={TOP: [0.0]},
                                  image_dtype="uint8", progress=False, output="numpy")
    assert stoker.MultiDataset([robot, shards]).schema[TOP][0] == "uint8"
