"""make demo: a small multi-camera LeRobot v3.0 dataset, the stoker Loader on it, and the
doctor's verdict on whether data or compute would bound training with a 120 ms step (the
doctor's default run: about a minute, each rate to +-5% or its share of the time).

Everything is written under demo-out/ (STOKER_DEMO_DIR); a second run reuses the dataset.
"""

import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))  # the dataset writer

import lerobot_datasets  # noqa: E402
import stoker  # noqa: E402
from stoker.progress import ProgressBar  # noqa: E402

OUT_DIR = os.path.abspath(os.environ.get("STOKER_DEMO_DIR", "demo-out"))
CAMERAS = ("observation.images.front", "observation.images.wrist", "observation.images.side")
EPISODES = [150] * 6  # 6 episodes of 5 s at 30 fps
SIZE = (480, 640)     # (height, width), as recorded; training reads 224x224


def make_dataset(root):
    if os.path.exists(os.path.join(root, "meta", "info.json")):
        print(f"Dataset: {root} (already made)")
        return
    print(f"Dataset: writing a LeRobot v3.0 dataset to {root}: {len(EPISODES)} episodes, "
          f"{len(CAMERAS)} cameras at {SIZE[1]}x{SIZE[0]}, AV1 g=2 (LeRobot's settings)")
    started = time.monotonic()
    bar = ProgressBar("  encoding episodes")
    partial = root + ".partial"
    lerobot_datasets.write_v30(partial, EPISODES, CAMERAS, fps=30, codec="av1", size=SIZE,
                               episodes_per_file=3, cache_dir=os.path.join(OUT_DIR, "encodes"),
                               progress=bar, content="camera")
    bar.close()
    os.replace(partial, root)
    print(f"  done in {time.monotonic() - started:.0f} s")


def main():
    os.makedirs(OUT_DIR, exist_ok=True)
    root = os.path.join(OUT_DIR, "lerobot_v30")
    make_dataset(root)
    spec_path = os.path.join(OUT_DIR, "spec.json")
    fps = 30
    with open(spec_path, "w") as f:  # past, current and future segments of 3 frames each
        f.write('{"delta_timestamps": {'
                f'"front_past": ["{CAMERAS[0]}", [{-20 / fps}, {-18 / fps}, {-16 / fps}]],'
                f'"{CAMERAS[0]}": [{-2 / fps}, {-1 / fps}, 0.0],'
                f'"front_future": ["{CAMERAS[0]}", [{16 / fps}, {18 / fps}, {20 / fps}]],'
                f'"{CAMERAS[1]}": [{-1 / fps}, 0.0], "{CAMERAS[2]}": [0.0],'
                f'"observation.state": [{-1 / fps}, 0.0],'
                f'"action": [{", ".join(str(k / fps) for k in range(16))}]'
                '}, "size": [224, 224]}')
    print(f"Window: {spec_path}")
    # The command `make build` installs in .venv (what `source .venv/bin/activate` puts first).
    stoker = os.path.join(os.path.dirname(sys.executable), "stoker")
    arguments = ["doctor", root, "--spec", spec_path, "--batch-size", "8", "--step-ms", "120",
                 "--report", os.path.join(OUT_DIR, "doctor")]
    print("Running:", " ".join(["stoker"] + arguments), flush=True)
    print("  (the same command works in your shell after `source .venv/bin/activate`)",
          flush=True)
    return subprocess.call([stoker] + arguments)


if __name__ == "__main__":
    sys.exit(main())
