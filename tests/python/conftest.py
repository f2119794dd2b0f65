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
