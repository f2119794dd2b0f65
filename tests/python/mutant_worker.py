"""Opens and decodes seeded mutants of one video clip, one after the other, for
test_mutants.py, which runs this file in a child process and watches it.

    python mutant_worker.py CLIP FIRST_SEED COUNT FOLDER

Mutant ``seed`` is :func:`mutate` of the clip's bytes. For each, one line is printed before
(``start SEED KIND``) and one after: ``ok SEED FRAMES`` (it decoded), ``error SEED TYPE``
(a stoker.Error) or ``other SEED TYPE: MESSAGE`` (any other exception: a defect). A signal or a
hang shows as a ``start`` without its answer. Every other group of four seeds (one of each
kind) is read from a file in FOLDER, the others from bytes in memory.
"""

import os
import sys

import numpy as np

KINDS = ("flip", "truncate", "duplicate", "delete")


def mutate(data: bytes, seed: int) -> tuple[str, bytes]:
    """(kind, mutant): ``data`` with random bytes flipped, cut short, a chunk repeated or a
    chunk removed, chosen and placed by ``seed``."""
    rng = np.random.default_rng(seed)
    kind = KINDS[seed % len(KINDS)]
    size = len(data)
    if kind == "flip":
        mutant = bytearray(data)
        count = int(rng.integers(1, 17))
        at = rng.integers(0, size, count)
        mutant_array = np.frombuffer(mutant, np.uint8).copy()
        mutant_array[at] ^= rng.integers(1, 256, count).astype(np.uint8)
        return kind, mutant_array.tobytes()
    if kind == "truncate":
        return kind, data[: int(rng.integers(0, size))]
    start = int(rng.integers(0, size))
    length = int(rng.integers(1, min(4096, size - start) + 1))
    if kind == "duplicate":
        at = int(rng.integers(0, size + 1))
        return kind, data[:at] + data[start : start + length] + data[at:]
    return kind, data[:start] + data[start + length :]


def decode(stoker, source, seed: int) -> int:
    """Opens ``source`` and decodes every frame in order, then a few in random order, resized;
    returns the number of frames."""
    if isinstance(source, bytes):
        reader = stoker.VideoReader(source, name=f"mutant-{seed}")
    else:
        reader = stoker.VideoReader(source)
    n = reader.num_frames
    reader.get_frames(np.arange(n))
    if n:
        picks = np.random.default_rng(seed).integers(0, n, min(n, 6))
        reader.get_frames(picks, size=(24, 32), layout="NCHW")
        reader.get_frames_at(reader.pts[picks[:2]])
    return n


def main() -> None:
    clip, first, count, folder = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    import stoker

    with open(clip, "rb") as f:
        data = f.read()
    path = os.path.join(folder, f"mutant-{os.getpid()}{os.path.splitext(clip)[1]}")
    for seed in range(first, first + count):
        kind, mutant = mutate(data, seed)
        print(f"start {seed} {kind}", flush=True)
        source: object = mutant
        if seed // len(KINDS) % 2:
            with open(path, "wb") as f:
                f.write(mutant)
            source = path
        try:
            frames = decode(stoker, source, seed)
            print(f"ok {seed} {frames}", flush=True)
        except stoker.Error as error:
            print(f"error {seed} {type(error).__name__}", flush=True)
        except Exception as error:  # noqa: BLE001 - any other exception is what the test reports
            message = str(error).replace("\n", " ")[:300]
            print(f"other {seed} {type(error).__name__}: {message}", flush=True)


if __name__ == "__main__":
    main()
