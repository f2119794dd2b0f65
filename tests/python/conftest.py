"""Test videos for the Python tests, encoded here with the ffmpeg program (small and seeded)."""

import os
import subprocess

import pytest

X264 = ["-c:v", "libx264", "-preset", "veryfast", "-pix_fmt", "yuv420p"]

# name -> (extension, width, height, seconds, encoder arguments)
VIDEOS = {
    "h264": ("mp4", 160, 120, 4, X264 + ["-g", "30", "-bf", "3"]),
    "hevc": ("mp4", 160, 120, 2, ["-c:v", "libx265", "-preset", "veryfast", "-pix_fmt", "yuv420p",
                                  "-tag:v", "hvc1", "-x265-params",
                                  "log-level=error:keyint=30:bframes=3"]),
    "av1": ("mp4", 160, 120, 2, ["-c:v", "libsvtav1", "-preset", "12", "-g", "2", "-crf", "30",
                                 "-pix_fmt", "yuv420p"]),
    "vp9": ("webm", 160, 120, 2, ["-c:v", "libvpx-vp9", "-deadline", "realtime", "-cpu-used", "8",
                                  "-g", "30", "-pix_fmt", "yuv420p"]),
    "offset": ("mkv", 160, 120, 2, X264 + ["-g", "15", "-bf", "2", "-output_ts_offset", "2.5"]),
}


def encode(path, width, height, seconds, args):
    subprocess.run(["ffmpeg", "-nostdin", "-y", "-loglevel", "error", "-f", "lavfi", "-i",
                    f"testsrc2=size={width}x{height}:rate=30:duration={seconds}", *args, path],
                   check=True)


@pytest.fixture(scope="session")
def media_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("media")


@pytest.fixture(scope="session")
def video(media_dir):
    """video(name) -> path of that test video, encoded on first use."""

    def make(name):
        extension, width, height, seconds, args = VIDEOS[name]
        path = os.path.join(media_dir, f"{name}.{extension}")
        if not os.path.exists(path):
            encode(path, width, height, seconds, args)
        return path

    return make


# LeRobot datasets (see lerobot_datasets.py), written once per session; tests that alter one
# work on a copy from `lerobot_copy`.

CAMERAS = ("observation.images.top", "observation.images.wrist")


@pytest.fixture(scope="session")
def lerobot_cache(tmp_path_factory):
    """Folder of per-episode encodes shared by every LeRobot dataset of the session."""
    return str(tmp_path_factory.mktemp("lerobot-encodes"))


@pytest.fixture(scope="session")
def lerobot_v21(tmp_path_factory, lerobot_cache):
    """A v2.1 dataset: 3 episodes (5, 7, 6 frames) at 30 fps, two AV1 cameras."""
    import lerobot_datasets

    return lerobot_datasets.write_v21(tmp_path_factory.mktemp("lerobot") / "v21", [5, 7, 6],
                                      CAMERAS, fps=30, cache_dir=lerobot_cache)


@pytest.fixture(scope="session")
def lerobot_v30(tmp_path_factory, lerobot_cache):
    """A v3.0 dataset: 5 episodes (5, 7, 6, 4, 8 frames) at 30 fps, two AV1 cameras.

    Two episodes per data file and per top-camera video, three per wrist-camera video, and two
    files per chunk: three data files over two chunks, and offsets that differ by camera.
    """
    import lerobot_datasets

    return lerobot_datasets.write_v30(tmp_path_factory.mktemp("lerobot") / "v30",
                                      [5, 7, 6, 4, 8], CAMERAS, fps=30, episodes_per_file=2,
                                      video_episodes_per_file={CAMERAS[1]: 3}, chunks_size=2,
                                      cache_dir=lerobot_cache)


@pytest.fixture
def lerobot_copy(tmp_path):
    """lerobot_copy(written) -> root of a private copy of that dataset, free to alter."""
    import shutil

    def make(written):
        # The dataset as written: not the index folder an earlier test may have built in it.
        target = tmp_path / os.path.basename(written.root)
        shutil.copytree(written.root, target, ignore=shutil.ignore_patterns(".stoker"))
        return str(target)

    return make


@pytest.fixture(scope="session")
def lerobot_large(tmp_path_factory, lerobot_cache):
    """A v3.0 dataset whose videos are large enough (about 180 KB, several of FFmpeg's 32 KB
    read buffers) that readers sharing a file position would read each other's bytes: 4
    episodes of 40 frames at 30 fps, two cameras of 128x96 camera-like footage (a moving
    pattern with grain), two episodes per video file."""
    import lerobot_datasets

    return lerobot_datasets.write_v30(tmp_path_factory.mktemp("lerobot") / "large", [40] * 4,
                                      CAMERAS, fps=30, size=(96, 128), episodes_per_file=2,
                                      content="camera", cache_dir=lerobot_cache)


# Object storage (see s3_server.py): one moto server per session, signature checking on.

@pytest.fixture(scope="session")
def s3_server():
    """A running :class:`s3_server.S3Server` (moto); buckets are the tests' own."""
    import s3_server

    with s3_server.S3Server() as server:
        yield server


@pytest.fixture
def s3_environment(s3_server, monkeypatch, tmp_path):
    """The environment pointing at the server with the real keys, and a private cache."""
    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL_S3", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("STOKER_CACHE_DIR", str(tmp_path / "cache"))
    return s3_server


@pytest.fixture
def fault_proxy(s3_server, monkeypatch, tmp_path):
    """A :class:`s3_server.FaultProxy` (seed 7, no faults yet) in front of the server, the
    environment pointing at it, and a private cache."""
    from s3_server import FaultProxy

    with FaultProxy(s3_server.endpoint, seed=7) as proxy:
        for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL_S3", "AWS_SESSION_TOKEN"):
            monkeypatch.delenv(name, raising=False)
        for name, value in s3_server.env(proxy.endpoint).items():
            monkeypatch.setenv(name, value)
        monkeypatch.setenv("STOKER_CACHE_DIR", str(tmp_path / "cache"))
        yield proxy
