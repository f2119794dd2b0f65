"""LeRobot dataset kinds beyond RGB video: image features (PNG / JPEG bytes in the data files).

Items and batches are compared with Pillow's decode of the stored images (exact for PNG and
for JPEG at full size: both decode with libjpeg-turbo's default IDCT)."""

import io
import os
import shutil

import lerobot_datasets
import numpy as np
import pytest

import stoker
from stoker.datasets.lerobot.dataset import LeRobotDataset, WindowSpec

FPS = 30
IMAGE = "observation.images.wrist"
VIDEO = "observation.images.top"
SIZE = (40, 48)


def pillow(e, f, image_format="PNG"):
    """What Pillow decodes from the image stored at (episode, frame): uint8 [H, W, 3]."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(lerobot_datasets.image_pixels(e, f, SIZE)).save(buffer, format=image_format)
    return np.asarray(Image.open(io.BytesIO(buffer.getvalue())).convert("RGB"))


@pytest.fixture(scope="module")
def image_datasets(tmp_path_factory, lerobot_cache):
    """v2.1 with a video and a PNG camera; v3.0 with a PNG camera only (two data files); v3.0
    with a JPEG camera."""
    base = tmp_path_factory.mktemp("kinds")
    v21 = lerobot_datasets.write_v21(base / "v21", [4, 5], [VIDEO], fps=FPS, codec="h264",
                                     cache_dir=lerobot_cache)
    lerobot_datasets.add_image_camera(v21, IMAGE, SIZE)
    v30 = lerobot_datasets.write_v30(base / "v30", [3, 5, 4], [], fps=FPS, episodes_per_file=2,
                                     cache_dir=lerobot_cache)
    lerobot_datasets.add_image_camera(v30, IMAGE, SIZE)
    jpeg = lerobot_datasets.write_v30(base / "jpeg", [4], [], fps=FPS, cache_dir=lerobot_cache)
    lerobot_datasets.add_image_camera(jpeg, IMAGE, SIZE, image_format="JPEG")
    return {"v21": v21, "v30": v30, "jpeg": jpeg}


def dataset(root, spec=None, **kwargs):
    """The dataset with uint8 images (exact comparisons), unless told otherwise."""
    kwargs.setdefault("image_dtype", "uint8")
    return LeRobotDataset(str(root), spec, progress=False, **kwargs, output="numpy")


def episode_and_frame(written, row):
    starts = np.cumsum([0, *written.lengths])
    e = int(np.searchsorted(starts, row, side="right") - 1)
    return e, row - int(starts[e])


@pytest.mark.parametrize("name", ["v21", "v30"])
def test_image_items_equal_pillows_decode_of_the_stored_pngs(image_datasets, name):
    written = image_datasets[name]
    ds = dataset(written.root, WindowSpec(delta_indices={IMAGE: [-1, 0]}))
    assert IMAGE in ds.cameras and IMAGE in ds.index.image_cameras
    assert len(ds) == sum(written.lengths)
    for i in range(len(ds)):
        item = ds[i]
        e, f = episode_and_frame(written, i)
        assert item[IMAGE].shape == (2, 3, *SIZE) and item[IMAGE].dtype == np.uint8
        want = np.stack([pillow(e, max(f - 1, 0)), pillow(e, f)]).transpose(0, 3, 1, 2)
        np.testing.assert_array_equal(item[IMAGE], want, err_msg=f"sample {i}")
        assert item[f"{IMAGE}_is_pad"].tolist() == [f == 0, False]
        if VIDEO in written.cameras:
            assert item[VIDEO].shape == (3, 64, 64)


def test_jpeg_items_equal_pillows_decode(image_datasets):
    written = image_datasets["jpeg"]
    ds = dataset(written.root, WindowSpec(layout="THWC"))
    for i in range(len(ds)):
        np.testing.assert_array_equal(ds[i][IMAGE], pillow(0, i, "JPEG"), err_msg=f"sample {i}")


def test_float_items_are_the_uint8_ones_scaled(image_datasets):
    written = image_datasets["v30"]
    floats = dataset(written.root, image_dtype="float32")[5][IMAGE]
    assert floats.dtype == np.float32
    np.testing.assert_array_equal(floats, dataset(written.root)[5][IMAGE] / np.float32(255))


def test_resized_images_and_the_side_file(image_datasets):
    written = image_datasets["v30"]
    ds = dataset(written.root, WindowSpec(size=(20, 24)))
    assert ds[3][IMAGE].shape == (3, 20, 24)
    side = ds.index.native.image_file
    assert os.path.dirname(side) == os.path.dirname(ds.index.path)
    # Every image once, back to back: the file is the sum of the stored images.
    total = sum(len(ds.index.image_bytes(IMAGE, r)) for r in range(len(ds)))
    assert os.path.getsize(side) == total


@pytest.mark.parametrize("threads", [1, 2])
def test_loader_batches_equal_the_items(image_datasets, threads):
    torch = pytest.importorskip("torch")
    written = image_datasets["v21"]
    ds = dataset(written.root, WindowSpec(delta_indices={IMAGE: [-2, 0], "action": [0]}))
    seen = []
    for batch in stoker.Loader(ds, batch_size=3, shuffle=True, seed=5, threads=threads):
        rows = np.asarray(batch["index"])
        seen += rows.tolist()
        for j, row in enumerate(rows):
            item = ds[int(row)]
            for key in (IMAGE, f"{IMAGE}_is_pad", VIDEO):
                got = batch[key][j]
                got = got.numpy() if isinstance(got, torch.Tensor) else np.asarray(got)
                want = np.asarray(item[key])
                assert got.dtype == want.dtype, key
                np.testing.assert_array_equal(got, want, err_msg=f"{key} of sample {row}")
    assert sorted(seen) == list(range(len(ds)))


def test_random_crops_are_drawn_as_for_video_frames(image_datasets):
    """A random crop and flip keyed by (seed, epoch, sample, camera): the same for every time
    step of a sample, and the same for any thread count."""
    written = image_datasets["v30"]
    ds = dataset(written.root, WindowSpec(delta_indices={IMAGE: [0, 0]}))
    transforms = stoker.Transforms(random_resized_crop=(16, 16), hflip=0.5)

    def epoch(threads):
        loader = stoker.Loader(ds, batch_size=4, seed=3, threads=threads, transforms=transforms,
                               output="numpy")
        return np.concatenate([np.asarray(b[IMAGE]) for b in loader])

    one, two = epoch(1), epoch(2)
    np.testing.assert_array_equal(one, two)
    assert one.shape == (len(ds), 2, 3, 16, 16)
    np.testing.assert_array_equal(one[:, 0], one[:, 1])


def test_a_changed_data_file_or_a_lost_side_file_rebuilds_the_index(image_datasets, tmp_path):
    root = shutil.copytree(image_datasets["v30"].root, tmp_path / "copy")
    first = dataset(root)
    os.unlink(first.index.native.image_file)
    again = dataset(root)
    np.testing.assert_array_equal(again[2][IMAGE], first[2][IMAGE])
    # Rewriting the data files changes the images: the index follows.
    written = lerobot_datasets.WrittenDataset(str(root), "v3.0", [3, 5, 4], FPS, [], [], [])
    written.data_paths = sorted(str(p) for p in root.glob("data/**/*.parquet"))
    import pyarrow.parquet as pq

    for path in written.data_paths:
        pq.write_table(pq.read_table(path).drop_columns([IMAGE]), path)
    lerobot_datasets.add_image_camera(written, IMAGE, (8, 8))
    changed = dataset(root)
    assert changed[0][IMAGE].shape == (3, 8, 8)


def test_a_row_without_image_bytes_is_named(image_datasets, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = shutil.copytree(image_datasets["jpeg"].root, tmp_path / "copy")
    path = str(next(root.glob("data/**/*.parquet")))
    table = pq.read_table(path)
    images = table.column(IMAGE).to_pylist()
    images[2] = {"bytes": None, "path": "somewhere.png"}
    column = pa.array(images, table.schema.field(IMAGE).type)
    pq.write_table(table.set_column(table.schema.get_field_index(IMAGE), IMAGE, column), path)
    with pytest.raises(stoker.DatasetError, match=f"{IMAGE}.*row 2"):
        dataset(str(root))


def test_the_doctor_measures_image_cameras(image_datasets):
    """The doctor's default window reads image features too: a dataset of images is not
    measured as if it had no cameras."""
    from stoker.doctor.command import default_spec

    spec = default_spec(image_datasets["v30"].root)
    assert IMAGE in spec.delta_timestamps
    ds = dataset(image_datasets["v30"].root, spec)
    assert ds[4][IMAGE].shape == (3, 3, 224, 224)
