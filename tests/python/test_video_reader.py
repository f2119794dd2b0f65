"""stoker.VideoReader through its public Python API, on videos encoded by the tests."""

import threading

import av
import numpy as np
import pytest

import stoker


def pyav_frames(path):
    """Every frame of a full sequential decode with PyAV, as RGB arrays."""
    with av.open(path) as container:
        return [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]


@pytest.fixture(scope="module")
def h264(video):
    return video("h264")


def test_attributes(h264):
    reader = stoker.VideoReader(h264)
    assert reader.codec == "h264"
    assert (reader.width, reader.height) == (160, 120)
    assert reader.num_frames == len(reader) == 120
    assert reader.fps == pytest.approx(30.0)
    assert reader.duration == pytest.approx(4.0)
    assert reader.pts.dtype == np.float64 and reader.pts.shape == (120,)
    np.testing.assert_allclose(reader.pts, np.arange(120) / 30.0, atol=1e-9)
    assert reader.is_key.dtype == np.bool_
    assert np.flatnonzero(reader.is_key).tolist() == [0, 30, 60, 90]
    with pytest.raises(ValueError):
        reader.pts[0] = 1.0  # read-only views of the frame table
    assert "h264" in repr(reader)


@pytest.mark.parametrize("name", ["h264", "hevc", "av1", "vp9", "offset"])
def test_frames_are_the_frames_pyav_decodes(video, name):
    """Each index returns that frame of a sequential decode (conversions differ slightly, so the
    frame must be close to PyAV's frame i and clearly farther from its neighbours)."""
    path = video(name)
    reader = stoker.VideoReader(path)
    reference = pyav_frames(path)
    assert reader.num_frames == len(reference)
    rng = np.random.default_rng(0)
    indices = rng.integers(0, reader.num_frames, size=12)
    frames = reader.get_frames(indices)
    for index, frame in zip(indices, frames):
        errors = {j: np.abs(frame.astype(int) - reference[j].astype(int)).mean()
                  for j in range(max(0, index - 1), min(len(reference), index + 2))}
        assert errors[index] < 3, (name, index, errors)
        assert min(errors, key=errors.get) == index, (name, index, errors)


def test_order_repeats_and_single_calls_agree(h264):
    reader = stoker.VideoReader(h264)
    indices = [77, 3, 77, 50, 3, 119, 0]
    batch = reader.get_frames(indices)
    assert batch.shape == (7, 120, 160, 3) and batch.dtype == np.uint8
    for k, index in enumerate(indices):
        np.testing.assert_array_equal(batch[k], reader.get_frames([index])[0])
    assert not np.array_equal(batch[0], batch[1])


def test_resize_layout_and_out(h264):
    reader = stoker.VideoReader(h264)
    nhwc = reader.get_frames([10, 20], size=(64, 96))
    assert nhwc.shape == (2, 64, 96, 3)
    nchw = reader.get_frames([10, 20], size=(64, 96), layout="NCHW")
    assert nchw.shape == (2, 3, 64, 96)
    assert np.abs(nchw.transpose(0, 2, 3, 1).astype(int) - nhwc.astype(int)).max() <= 3
    area = reader.get_frames([10, 20], size=(64, 96), interpolation="area")
    assert area.shape == nhwc.shape

    out = np.zeros((2, 3, 64, 96), dtype=np.uint8)
    result = reader.get_frames([10, 20], size=(64, 96), layout="NCHW", out=out)
    assert result is out
    np.testing.assert_array_equal(out, nchw)


def test_get_frames_at(video):
    reader = stoker.VideoReader(video("offset"))
    assert reader.pts[0] == pytest.approx(2.5, abs=1e-3)
    times = reader.pts[[5, 40, 5]]
    np.testing.assert_array_equal(reader.get_frames_at(times, tolerance=1e-4),
                                  reader.get_frames([5, 40, 5]))
    # Nearest pts: a time a third of a frame late still shows that frame.
    late = reader.pts[7] + 0.01
    assert reader.frame_at(late) == 7
    np.testing.assert_array_equal(reader.get_frames_at([late])[0], reader.get_frames([7])[0])


def test_saved_frame_table_reopens_identically(h264):
    reader = stoker.VideoReader(h264)
    table = reader.frame_table
    assert isinstance(table, bytes)
    reopened = stoker.VideoReader(h264, frame_table=table)
    np.testing.assert_array_equal(reopened.pts, reader.pts)
    np.testing.assert_array_equal(reopened.get_frames([99, 1]), reader.get_frames([99, 1]))


def test_threads_option_gives_the_same_frames(h264):
    one = stoker.VideoReader(h264)
    two = stoker.VideoReader(h264, threads=2)
    np.testing.assert_array_equal(one.get_frames([5, 64, 33]), two.get_frames([5, 64, 33]))


def test_concurrent_python_threads(h264):
    reader = stoker.VideoReader(h264)
    expected = {i: reader.get_frames([i])[0] for i in range(0, 120, 7)}
    failures = []

    def work(seed):
        rng = np.random.default_rng(seed)
        for _ in range(10):
            picks = rng.choice(list(expected), size=3)
            frames = reader.get_frames(picks)
            failures.extend(int(i) for i, f in zip(picks, frames)
                            if not np.array_equal(f, expected[i]))

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


# Bad input: a clear stoker error naming the file (and frame), never a crash or a hang.

def test_missing_file(tmp_path):
    path = str(tmp_path / "missing.mp4")
    with pytest.raises(stoker.DecodeError, match="missing.mp4.*No such file"):
        stoker.VideoReader(path)


def test_not_a_video(tmp_path):
    path = tmp_path / "notes.mp4"
    path.write_text("not a video")
    with pytest.raises(stoker.DecodeError, match="notes.mp4"):
        stoker.VideoReader(str(path))


def test_truncated_file(h264, tmp_path):
    data = open(h264, "rb").read()
    path = tmp_path / "truncated.mp4"
    path.write_bytes(data[: len(data) // 2])  # the MP4 index is at the end: now missing
    with pytest.raises(stoker.Error, match="truncated.mp4"):
        reader = stoker.VideoReader(str(path))
        reader.get_frames([reader.num_frames - 1])


def test_out_of_range_and_empty(h264):
    # Asking for what is not there is an argument error: a stoker.Error that is a ValueError.
    reader = stoker.VideoReader(h264)
    with pytest.raises(stoker.InvalidArgumentError, match=r"frame index 120 is out of range"):
        reader.get_frames([0, 120])
    with pytest.raises(ValueError, match=r"frame index -1"):
        reader.get_frames([-1])
    with pytest.raises(stoker.Error, match="empty index list"):
        reader.get_frames([])


def test_timestamp_outside_tolerance(h264):
    reader = stoker.VideoReader(h264)
    with pytest.raises(stoker.InvalidArgumentError, match=r"no frame within 0.0001 s"):
        reader.get_frames_at([0.05], tolerance=1e-4)
    with pytest.raises(stoker.InvalidArgumentError, match="outside the video"):
        reader.get_frames_at([60.0])


def test_bytes_in_memory_read_like_the_file(h264):
    data = open(h264, "rb").read()
    from_file = stoker.VideoReader(h264)
    in_memory = stoker.VideoReader(memoryview(data), name="clip-000.mp4")
    assert in_memory.path == "clip-000.mp4"
    assert in_memory.num_frames == from_file.num_frames
    assert np.array_equal(in_memory.pts, from_file.pts)
    picks = [from_file.num_frames - 1, 0, 37, 38, 5]
    assert np.array_equal(in_memory.get_frames(picks), from_file.get_frames(picks))
    assert np.array_equal(in_memory.get_frames(picks, size=(60, 80), layout="NCHW"),
                          from_file.get_frames(picks, size=(60, 80), layout="NCHW"))
    # A saved table skips the scan for bytes too.
    again = stoker.VideoReader(data, frame_table=in_memory.frame_table, name="clip-000.mp4")
    assert np.array_equal(again.get_frames([12]), from_file.get_frames([12]))


def test_bad_bytes_name_the_video(h264):
    data = open(h264, "rb").read()
    with pytest.raises(stoker.DecodeError, match="clip-7.mp4"):
        reader = stoker.VideoReader(data[: len(data) // 2], name="clip-7.mp4")
        reader.get_frames([reader.num_frames - 1])
    with pytest.raises(stoker.DecodeError, match="<memory>"):
        stoker.VideoReader(b"not a video at all")
    with pytest.raises(ValueError, match="name="):
        stoker.VideoReader(h264, name="x")


def test_argument_errors(h264):
    reader = stoker.VideoReader(h264)
    with pytest.raises(ValueError, match="layout"):
        reader.get_frames([0], layout="HWC")
    with pytest.raises(ValueError, match="size"):
        reader.get_frames([0], size=(0, 10))
    with pytest.raises(ValueError, match="shape"):
        reader.get_frames([0], out=np.zeros((1, 10, 10, 3), np.uint8))
    with pytest.raises(TypeError, match="uint8"):
        reader.get_frames([0], out=np.zeros((1, 120, 160, 3), np.float32))
    with pytest.raises(TypeError, match="integers"):
        reader.get_frames([0.5])
    with pytest.raises(ValueError, match="threads"):
        stoker.VideoReader(h264, threads=0)
    with pytest.raises(stoker.DecodeError, match="frame table is malformed"):
        stoker.VideoReader(h264, frame_table=b"garbage")
