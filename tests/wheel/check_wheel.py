#!/usr/bin/env python3
"""`make test-wheel`: the repaired wheel, installed into a fresh virtual environment, decodes a
video, with the FFmpeg libraries the wheel carries.

    python tests/wheel/check_wheel.py dist/stoker-*.whl

The environment is made by ``python3 -m venv`` without system site-packages; pip installs the
wheel and its dependencies (numpy, pyarrow: wheels from the index or pip's cache, nothing is
compiled: ``--only-binary=:all:``). A test video is encoded by the ffmpeg command line, then a
script run by that environment's Python (from another folder, so this checkout's stoker cannot
be imported) decodes it with stoker.VideoReader, checks the frames, and checks that the libavcodec
the process mapped is the one inside the installed wheel (``stoker.libs``), not the system's.
Exit status 0 on success; a failure says which step failed.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHECK = r"""
import sys
import numpy as np
import stoker
from stoker.io.video import VideoReader

reader = VideoReader(sys.argv[1])
assert (reader.width, reader.height) == (64, 48), (reader.width, reader.height)
frames = np.asarray(reader.get_frames([0, 5, 9]))
assert frames.shape[0] == 3 and frames.dtype == np.uint8, (frames.shape, frames.dtype)
assert frames.std() > 1, "the frames are blank"
with open("/proc/self/maps") as f:
    mapped = sorted({line.split()[-1] for line in f if "libavcodec" in line})
site = stoker.__file__.rsplit("/stoker/", 1)[0]
assert mapped and all(path.startswith(site) for path in mapped), mapped
print(f"stoker {stoker.__version__} from {stoker.__file__}: decoded {frames.shape} with {mapped[0]}")
"""


def step(what: str, command: list[str], **kwargs) -> subprocess.CompletedProcess:
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, **kwargs)
    if done.returncode != 0:
        sys.exit(f"check_wheel: {what} failed (exit {done.returncode}):\n{done.stdout}{done.stderr}")
    print(f"check_wheel: {what}: {time.monotonic() - started:.1f} s", flush=True)
    return done


def main() -> int:
    wheels = [Path(p) for p in sys.argv[1:]]
    if len(wheels) != 1 or not wheels[0].is_file():
        sys.exit(f"check_wheel: give exactly one wheel, got {sys.argv[1:]}")
    wheel = wheels[0].resolve()
    if "manylinux" not in wheel.name:
        sys.exit(f"check_wheel: {wheel.name} is not a repaired (manylinux) wheel")
    with tempfile.TemporaryDirectory(prefix="stoker-wheel-") as tmp:
        work = Path(tmp)
        venv = work / "venv"
        step("python3 -m venv", ["python3", "-m", "venv", str(venv)])
        python = str(venv / "bin" / "python")
        step("pip install the wheel", [python, "-m", "pip", "install", "-q", "--only-binary=:all:",
                                       str(wheel)])
        video = work / "clip.mp4"
        step("ffmpeg encodes a test video", [
            "ffmpeg", "-v", "error", "-f", "lavfi", "-i", "testsrc2=size=64x48:rate=10",
            "-frames:v", "10", "-c:v", "libx264", "-pix_fmt", "yuv420p", "-g", "5", str(video)])
        script = work / "check.py"
        script.write_text(CHECK)
        done = step("decode with the installed wheel", [python, str(script), str(video)],
                    cwd=work)
        print(done.stdout.strip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
