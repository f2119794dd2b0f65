"""Cutting frames out of an MP4 without re-encoding: the packets of a run of frames that starts
on a keyframe, copied into a new MP4 of their own.

    track = read_track(path)                    # None: not a plain MP4 with one video track
    packets = track.copyable(first, count)      # None: the cut needs a re-encode
    data = write_clip(track, packets, read_ranges(path, ...))

What ``stoker shard`` uses for LeRobot clips (``shard_writer``); a cut that cannot be copied
goes through the native ``_core.transcode``. Frames are numbered in presentation order, as
:class:`stoker.VideoReader` numbers them. A run of frames is copyable when its packets are a
contiguous run in decode order that starts on a sync sample: then the new file decodes to the
same frames, with the same durations and composition offsets, presented from time 0.

Read: the ISO BMFF boxes of the first video track's sample table (stsd, stts, ctts, stss, stsz,
stsc, stco/co64; mdhd's timescale, tkhd's size). Fragmented MP4 (moof), and files with more
than one stsd entry, are not read (None). Written: ftyp, moov (mvhd, one trak with an edit
list when the first frame's composition time is not 0) and mdat, the stsd box copied as it was
(the codec's configuration: avcC, av1C, hvcC, ...).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Callable

import numpy as np

__all__ = ["Track", "read_track", "write_clip"]

_CONTAINERS = {b"moov", b"trak", b"mdia", b"minf", b"stbl", b"edts", b"dinf"}
_UNITY_MATRIX = struct.pack(">9I", 0x10000, 0, 0, 0, 0x10000, 0, 0, 0, 0x40000000)
_MOVIE_TIMESCALE = 1000

ReadRanges = Callable[[np.ndarray, np.ndarray], bytes]


@dataclass(frozen=True)
class Track:
    """A video track's sample table. Arrays are per sample, in decode order."""

    timescale: int
    width: int  # tkhd's, 16.16 fixed point as stored
    height: int
    stsd: bytes  # the whole box, header included
    offsets: np.ndarray  # int64: where each sample lies in the file
    sizes: np.ndarray  # int64
    dts: np.ndarray  # int64, in timescale units
    durations: np.ndarray  # int64
    composition: np.ndarray  # int64: cts - dts
    sync: np.ndarray  # bool
    presentation: np.ndarray  # int64: the sample of each frame, frames in presentation order

    @property
    def num_frames(self) -> int:
        return len(self.sizes)

    def copyable(self, first: int, count: int) -> np.ndarray | None:
        """The samples (decode order) of frames [first, first + count) when copying them makes
        a file that decodes to exactly those frames: a contiguous run starting on a sync
        sample; else None."""
        if count < 1 or first < 0 or first + count > self.num_frames:
            return None
        samples = np.sort(self.presentation[first : first + count])
        lo, hi = int(samples[0]), int(samples[-1])
        if hi - lo + 1 != count or not self.sync[lo]:
            return None
        return samples


def _boxes(data: bytes | memoryview, start: int, end: int):
    """(type, payload start, box end) of the boxes in data[start:end]."""
    while start + 8 <= end:
        size, kind = struct.unpack_from(">I4s", data, start)
        header = 8
        if size == 1:
            (size,) = struct.unpack_from(">Q", data, start + 8)
            header = 16
        elif size == 0:
            size = end - start
        if size < header or start + size > end:
            raise ValueError(f"a {kind!r} box of {size} bytes runs past its parent")
        yield kind, start + header, start + size
        start += size


def _find(data, start: int, end: int, path: list[bytes]) -> list[tuple[int, int]]:
    """(payload start, end) of every box at ``path`` below data[start:end]."""
    found = []
    for kind, payload, box_end in _boxes(data, start, end):
        if kind == path[0]:
            if len(path) == 1:
                found.append((payload, box_end))
            else:
                found.extend(_find(data, payload, box_end, path[1:]))
    return found


def _full_box_entries(data, at: int, fmt: str) -> tuple[int, np.ndarray]:
    """(version, entries) of a full box whose payload starts at ``at``: a 32-bit count, then
    that many entries of ``fmt`` (big-endian struct codes)."""
    version = data[at]
    (count,) = struct.unpack_from(">I", data, at + 4)
    width = struct.calcsize(">" + fmt)
    raw = bytes(data[at + 8 : at + 8 + count * width])
    if len(raw) != count * width:
        raise ValueError("a sample table box is shorter than its entry count says")
    dtype = np.dtype([(f"f{i}", ">" + c) for i, c in enumerate(fmt)])
    table = np.frombuffer(raw, dtype)
    columns = [table[f"f{i}"].astype(np.int64) for i in range(len(fmt))]
    return version, np.stack(columns, axis=-1)


def _top_level(size: int, read: ReadRanges) -> tuple[int, int] | None:
    """(start, size) of the moov box, found by hopping over the top-level box headers."""
    at = 0
    while at + 8 <= size:
        header = read(np.array([at], np.int64), np.array([min(16, size - at)], np.int64))
        box, kind = struct.unpack_from(">I4s", header, 0)
        if box == 1:
            (box,) = struct.unpack_from(">Q", header, 8)
        elif box == 0:
            box = size - at
        if box < 8:
            return None
        if kind == b"moov":
            return at, box
        if kind == b"moof":
            return None
        at += box
    return None


def read_track(size: int, read: ReadRanges) -> Track | None:
    """The first video track of an MP4 of ``size`` bytes, read through ``read(offsets, sizes)``
    (the bytes of those ranges, one after another); None when it is not a plain MP4 whose
    video track this module can copy from. Raises ValueError for a damaged box structure."""
    where = _top_level(size, read)
    if where is None:
        return None
    moov = read(np.array([where[0]], np.int64), np.array([where[1]], np.int64))
    if _find(moov, 8, len(moov), [b"mvex"]):
        return None  # fragmented: the samples are in moof boxes
    for trak, trak_end in _find(moov, 8, len(moov), [b"trak"]):
        handlers = _find(moov, trak, trak_end, [b"mdia", b"hdlr"])
        if not handlers or moov[handlers[0][0] + 8 : handlers[0][0] + 12] != b"vide":
            continue
        return _track(moov, trak, trak_end)
    return None


def _track(moov: bytes, trak: int, end: int) -> Track | None:
    def box(*path: bytes) -> tuple[int, int] | None:
        found = _find(moov, trak, end, list(path))
        return found[0] if found else None

    stbl = [b"mdia", b"minf", b"stbl"]
    tkhd, mdhd, stsd = box(b"tkhd"), box(b"mdia", b"mdhd"), box(*stbl, b"stsd")
    stts, stsz, stsc = box(*stbl, b"stts"), box(*stbl, b"stsz"), box(*stbl, b"stsc")
    stco, co64 = box(*stbl, b"stco"), box(*stbl, b"co64")
    if None in (tkhd, mdhd, stsd, stts, stsz, stsc) or (stco is None and co64 is None):
        return None
    assert tkhd and mdhd and stsd and stts and stsz and stsc  # for mypy
    if struct.unpack_from(">I", moov, stsd[0] + 4)[0] != 1:
        return None  # several sample descriptions: chunks may switch between them
    if moov[mdhd[0]] == 1:
        (timescale,) = struct.unpack_from(">I", moov, mdhd[0] + 20)
    else:
        (timescale,) = struct.unpack_from(">I", moov, mdhd[0] + 12)
    width, height = struct.unpack_from(">II", moov, tkhd[1] - 8)

    (sample_size,) = struct.unpack_from(">I", moov, stsz[0] + 4)
    (count,) = struct.unpack_from(">I", moov, stsz[0] + 8)
    if sample_size:
        sizes = np.full(count, sample_size, np.int64)
    else:
        raw = bytes(moov[stsz[0] + 12 : stsz[0] + 12 + 4 * count])
        sizes = np.frombuffer(raw, ">u4").astype(np.int64)
    if len(sizes) != count or count == 0:
        return None
    _, runs = _full_box_entries(moov, stts[0], "II")
    durations = np.repeat(runs[:, 1], runs[:, 0])
    composition = np.zeros(count, np.int64)
    ctts = box(*stbl, b"ctts")
    if ctts is not None:
        version, runs = _full_box_entries(moov, ctts[0], "Ii")
        if version == 0:  # unsigned offsets in version 0
            runs[:, 1] &= 0xFFFFFFFF
        composition = np.repeat(runs[:, 1], runs[:, 0])
    sync = np.ones(count, bool)
    stss = box(*stbl, b"stss")
    if stss is not None:
        _, numbers = _full_box_entries(moov, stss[0], "I")
        sync[:] = False
        sync[numbers[:, 0] - 1] = True
    if co64 is not None:
        _, chunks = _full_box_entries(moov, co64[0], "Q")
    else:
        assert stco is not None
        _, chunks = _full_box_entries(moov, stco[0], "I")
    _, entries = _full_box_entries(moov, stsc[0], "III")
    if len(durations) != count or len(composition) != count or not len(entries):
        return None
    # Samples per chunk: each stsc entry holds from its first chunk to the next entry's.
    chunk_count = len(chunks)
    per_chunk = np.zeros(chunk_count, np.int64)
    firsts = list(entries[:, 0] - 1) + [chunk_count]
    for k in range(len(entries)):
        per_chunk[firsts[k] : firsts[k + 1]] = entries[k, 1]
    if int(per_chunk.sum()) != count:
        return None
    chunk_of = np.repeat(np.arange(chunk_count), per_chunk)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    chunk_first = np.concatenate([[0], np.cumsum(per_chunk)[:-1]])
    offsets = chunks[chunk_of, 0] + starts - starts[chunk_first[chunk_of]]
    dts = np.concatenate([[0], np.cumsum(durations)[:-1]])
    presentation = np.argsort(dts + composition, kind="stable")
    return Track(
        timescale=int(timescale),
        width=int(width),
        height=int(height),
        stsd=bytes(moov[stsd[0] - 8 : stsd[1]]),
        offsets=offsets.astype(np.int64),
        sizes=sizes,
        dts=dts,
        durations=durations,
        composition=composition,
        sync=sync,
        presentation=presentation.astype(np.int64),
    )


def _box(kind: bytes, *parts: bytes) -> bytes:
    payload = b"".join(parts)
    return struct.pack(">I4s", 8 + len(payload), kind) + payload


def _full(kind: bytes, version: int, flags: int, *parts: bytes) -> bytes:
    return _box(kind, struct.pack(">I", (version << 24) | flags), *parts)


def _runs(values: np.ndarray) -> list[tuple[int, int]]:
    """(count, value) runs of ``values``."""
    runs: list[tuple[int, int]] = []
    for value in values.tolist():
        if runs and runs[-1][1] == value:
            runs[-1] = (runs[-1][0] + 1, value)
        else:
            runs.append((1, value))
    return runs


def write_clip(track: Track, samples: np.ndarray, data: bytes) -> bytes:
    """An MP4 holding ``samples`` of ``track`` (a contiguous run in decode order, from
    :meth:`Track.copyable`), whose bytes ``data`` are, one after another."""
    samples = np.asarray(samples, np.int64)
    sizes = track.sizes[samples]
    if int(sizes.sum()) != len(data):
        raise ValueError(f"{len(data)} bytes given for samples of {int(sizes.sum())}")
    durations = track.durations[samples]
    composition = track.composition[samples]
    duration = int(durations.sum())
    # The first frame shown: at the smallest composition time; the edit list starts there.
    start = int((track.dts[samples] - track.dts[samples[0]] + composition).min())
    movie_duration = -(-duration * _MOVIE_TIMESCALE // track.timescale)

    stbl = [track.stsd]
    runs = _runs(durations)
    stbl.append(
        _full(
            b"stts",
            0,
            0,
            struct.pack(">I", len(runs)),
            *(struct.pack(">II", n, v) for n, v in runs),
        )
    )
    if composition.any():
        version = 1 if (composition < 0).any() else 0
        runs = _runs(composition)
        stbl.append(
            _full(
                b"ctts",
                version,
                0,
                struct.pack(">I", len(runs)),
                *(struct.pack(">Ii" if version else ">II", n, v) for n, v in runs),
            )
        )
    sync = track.sync[samples]
    if not sync.all():
        numbers = np.flatnonzero(sync) + 1
        stbl.append(
            _full(b"stss", 0, 0, struct.pack(">I", len(numbers)), numbers.astype(">u4").tobytes())
        )
    stbl.append(
        _full(b"stsz", 0, 0, struct.pack(">II", 0, len(sizes)), sizes.astype(">u4").tobytes())
    )
    stbl.append(_full(b"stsc", 0, 0, struct.pack(">IIII", 1, 1, len(sizes), 1)))

    def moov(data_offset: int) -> bytes:
        if data_offset + len(data) < 1 << 32:
            chunk = _full(b"stco", 0, 0, struct.pack(">II", 1, data_offset))
        else:
            chunk = _full(b"co64", 0, 0, struct.pack(">IQ", 1, data_offset))
        edts = b""
        if start:
            edts = _box(
                b"edts",
                _full(b"elst", 0, 0, struct.pack(">IIiI", 1, movie_duration, start, 0x10000)),
            )
        trak = _box(
            b"trak",
            _full(
                b"tkhd",
                0,
                3,
                struct.pack(">IIIII", 0, 0, 1, 0, movie_duration),
                bytes(8),
                struct.pack(">hhhh", 0, 0, 0, 0),
                _UNITY_MATRIX,
                struct.pack(">II", track.width, track.height),
            ),
            edts,
            _box(
                b"mdia",
                _full(
                    b"mdhd",
                    0,
                    0,
                    struct.pack(">IIIIHH", 0, 0, track.timescale, duration, 0x55C4, 0),
                ),
                _full(
                    b"hdlr", 0, 0, struct.pack(">I4s12s", 0, b"vide", bytes(12)), b"VideoHandler\0"
                ),
                _box(
                    b"minf",
                    _full(b"vmhd", 0, 1, bytes(8)),
                    _box(b"dinf", _full(b"dref", 0, 0, struct.pack(">I", 1), _full(b"url ", 0, 1))),
                    _box(b"stbl", *stbl, chunk),
                ),
            ),
        )
        mvhd = _full(
            b"mvhd",
            0,
            0,
            struct.pack(">IIII", 0, 0, _MOVIE_TIMESCALE, movie_duration),
            struct.pack(">IH", 0x10000, 0x100),
            bytes(10),
            _UNITY_MATRIX,
            bytes(24),
            struct.pack(">I", 2),
        )
        return _box(b"moov", mvhd, trak)

    ftyp = _box(b"ftyp", b"isom", struct.pack(">I", 0x200), b"isomiso2mp41")
    mdat_header = 16 if len(ftyp) + len(moov(0)) + 16 + len(data) >= 1 << 32 else 8
    moov_box = moov(0)
    for _ in range(2):  # the data's offset decides stco or co64, which moves the data
        moov_box = moov(len(ftyp) + len(moov_box) + mdat_header)
    if mdat_header == 16:
        mdat = struct.pack(">I4sQ", 1, b"mdat", 16 + len(data))
    else:
        mdat = struct.pack(">I4s", 8 + len(data), b"mdat")
    return ftyp + moov_box + mdat + data
