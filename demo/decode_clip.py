"""make demo: encode a short camera-like clip, read it with stoker.VideoReader, and print what
the reader measured. (The full loader-and-diagnosis demo replaces this once the Loader lands.)"""

import os
import subprocess
import sys
import time

import numpy as np

import stoker

OUT_DIR = os.environ.get("STOKER_DEMO_DIR", "demo-out")
CLIPS = {
    "H.264 GOP 30 + B-frames": ("clip_h264.mp4", ["-c:v", "libx264", "-preset", "veryfast",
                                                  "-g", "30", "-bf", "3", "-b:v", "1500k"]),
    "AV1 g=2 (LeRobot default)": ("clip_av1.mp4", ["-c:v", "libsvtav1", "-preset", "10",
                                                   "-g", "2", "-crf", "30"]),
}


def encode(path, args):
    if os.path.exists(path):
        return
    print(f"  encoding {path} ...", flush=True)
    tmp = path + ".part.mp4"
    done = subprocess.run(["ffmpeg", "-nostdin", "-y", "-loglevel", "error", "-f", "lavfi", "-i",
                           "testsrc2=size=640x480:rate=30:duration=10", *args, "-pix_fmt",
                           "yuv420p", tmp], capture_output=True, text=True)
    if done.returncode != 0:  # the encoders' chatter is shown only when something went wrong
        sys.exit(f"ffmpeg failed to encode {path}:\n{done.stderr}")
    os.replace(tmp, path)


def best_ms(fn, repeats):
    """Median wall time of fn() in milliseconds."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return float(np.median(times))


def measure(path):
    start = time.perf_counter()
    reader = stoker.VideoReader(path)
    scan_ms = (time.perf_counter() - start) * 1e3
    table = reader.frame_table
    rng = np.random.default_rng(0)

    def warm_open_one_frame():
        # A keyframe: the open and call overhead plus one frame of decoding.
        stoker.VideoReader(path, frame_table=table).get_frames([30 * int(rng.integers(0, 10))])

    def window():
        start = int(rng.integers(0, reader.num_frames - 33))
        reader.get_frames(np.linspace(start, start + 32, 9).round().astype(np.int64),
                          size=(224, 224))

    all_frames = np.arange(reader.num_frames)
    # One output array reused, so the rate is the decoder's, not the first touch of 276 MB.
    out = np.empty((reader.num_frames, reader.height, reader.width, 3), np.uint8)
    seq_ms = best_ms(lambda: reader.get_frames(all_frames, out=out), 3)
    return {
        "frames": reader.num_frames,
        "scan + open (ms)": scan_ms,
        "warm open + 1 keyframe (ms)": best_ms(warm_open_one_frame, 30),
        "9 of 33 frames -> 224x224 (ms)": best_ms(window, 30),
        "sequential decode (frames/s)": reader.num_frames / seq_ms * 1e3,
        "reader": reader,
    }


def main():
    os.makedirs(OUT_DIR, exist_ok=True)
    print(f"stoker {stoker.__version__}: frame-exact video reading\n")
    print("Generating 10 s, 640x480, 30 fps test clips:")
    results = {}
    for label, (name, args) in CLIPS.items():
        path = os.path.join(OUT_DIR, name)
        encode(path, args)
        results[label] = measure(path)

    rows = [k for k in next(iter(results.values())) if k != "reader"]
    width = max(len(r) for r in rows) + 2
    print("\n" + "".ljust(width) + "".join(label.rjust(28) for label in results))
    for row in rows:
        cells = "".join(f"{results[label][row]:>28.2f}" if isinstance(results[label][row], float)
                        else f"{results[label][row]:>28}" for label in results)
        print(row.ljust(width) + cells)
    reader = results[next(iter(results))]["reader"]
    print(f"\nOne thread, one process. Frames are byte-identical to a full sequential decode; "
          f"the window decodes only what its GOPs force.\nExample: {reader!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
