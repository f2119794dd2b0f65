"""Damaged videos never crash or hang stoker: seeded mutants (bytes flipped, files cut short,
chunks repeated or removed) of small H.264, AV1 and VP9 clips are opened and decoded in child
processes (mutant_worker.py), each giving frames or a stoker.Error.

STOKER_MUTANTS sets how many mutants in all (default 1200, split between the codecs), e.g.
``STOKER_MUTANTS=3000 pytest tests/python/test_mutants.py`` for a longer run. A failure names
the codec, seed and kind of the mutant, and leaves its bytes in the test's temporary folder.
"""

import os
import subprocess
import sys
import time
from collections import Counter

import pytest
from conftest import X264, encode
from mutant_worker import mutate

MUTANTS = int(os.environ.get("STOKER_MUTANTS", "1200"))
PER_JOB = 50  # mutants per child process
PARALLEL = 2  # child processes at once
JOB_TIMEOUT_S = 120  # a job of 50 takes about a second

# codec -> (extension, encoder arguments): 64x64, 30 frames, a keyframe every 8.
CLIPS = {
    "h264": ("mp4", X264 + ["-g", "8", "-bf", "2"]),
    "av1": ("mp4", ["-c:v", "libsvtav1", "-preset", "12", "-g", "8", "-crf", "40",
                    "-pix_fmt", "yuv420p"]),
    "vp9": ("webm", ["-c:v", "libvpx-vp9", "-deadline", "realtime", "-cpu-used", "8",
                     "-g", "8", "-pix_fmt", "yuv420p"]),
}


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mutant-clips")
    paths = {}
    for codec, (extension, arguments) in CLIPS.items():
        paths[codec] = str(folder / f"{codec}.{extension}")
        encode(paths[codec], 64, 64, 1, arguments)
    return paths


def run_jobs(jobs, folder):
    """Runs (codec, clip, first seed, count) jobs, PARALLEL at a time; returns
    {(codec, first): (exit status or "timeout", stdout lines)}."""
    worker = os.path.join(os.path.dirname(__file__), "mutant_worker.py")
    environment = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    pending, running, finished = list(jobs), {}, {}
    while pending or running:
        while pending and len(running) < PARALLEL:
            codec, clip, first, count = pending.pop(0)
            process = subprocess.Popen(
                [sys.executable, worker, clip, str(first), str(count), str(folder)],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environment)
            running[(codec, first)] = (process, time.monotonic())
        for key, (process, started) in list(running.items()):
            if process.poll() is None and time.monotonic() - started < JOB_TIMEOUT_S:
                continue
            status = process.poll()
            if status is None:
                process.kill()
                status = "timeout"
            output, _ = process.communicate()
            finished[key] = (status, output.splitlines())
            del running[key]
        time.sleep(0.01)
    return finished


def test_mutated_videos_decode_or_raise_a_stoker_error(clips, tmp_path):
    per_codec = max(1, MUTANTS // len(clips))
    jobs = [(codec, clip, first, min(PER_JOB, per_codec - first))
            for codec, clip in clips.items() for first in range(0, per_codec, PER_JOB)]
    started = time.monotonic()
    results = run_jobs(jobs, tmp_path)
    seconds = time.monotonic() - started

    outcomes, failures = Counter(), []
    for codec, clip, first, count in jobs:
        status, lines = results[(codec, first)]
        answered, current = set(), None
        for line in lines:
            word, _, rest = line.partition(" ")
            if word == "start":
                current = int(rest.split()[0])
            elif word in ("ok", "error"):
                answered.add(int(rest.split()[0]))
                outcomes[(codec, word)] += 1
            elif word == "other":
                failures.append(f"{codec} mutant {line}: not a stoker.Error")
        if status != 0 or len(answered) != count:
            culprit = current if current is not None and current not in answered else None
            how = "hung" if status == "timeout" else f"ended with status {status}"
            failures.append(f"{codec}: the child {how} on mutant {culprit}; output: "
                            f"{lines[-5:]}")
            if culprit is not None:
                kind, mutant = mutate(open(clip, "rb").read(), culprit)
                kept = tmp_path / f"{codec}-mutant-{culprit}-{kind}{os.path.splitext(clip)[1]}"
                kept.write_bytes(mutant)
                failures[-1] += f"; its bytes: {kept}"
    summary = ", ".join(f"{codec} {word} {n}" for (codec, word), n in sorted(outcomes.items()))
    print(f"{sum(outcomes.values())} mutants in {seconds:.1f} s: {summary}")
    assert not failures, "\n".join(failures)
    assert sum(outcomes.values()) == per_codec * len(clips)
    # Both outcomes occur, for every codec: the mutants reach the decoder, not only the parser.
    for codec in clips:
        assert outcomes[(codec, "ok")] and outcomes[(codec, "error")], summary
