"""``stoker etl SRC DST``: a LeRobot dataset materialized at training resolution.

    stoker etl path/to/src path/to/dst --size 224x224 [--codec h264|av1] [--gop N] [--crf N]
        [--cameras KEY ...] [--workers N] [--on-error raise|skip]

    report = stoker.etl.materialize("src", "dst", size=(224, 224))

DST is a LeRobot v3.0 dataset (whatever SRC's version, v2.1 or v3.0), so every tool that reads
LeRobot reads it. What changes:

* Videos are re-encoded (libx264 or libsvtav1) at the training size, with a keyframe every
  ``gop`` frames, no B-frames, tuned for fast decoding. Each episode of each camera gets its own
  file, ``videos/<camera>/chunk-XXX/file-XXX.mp4`` (file number = the episode's position in
  SRC), with ``from_timestamp`` 0. Frame timing is kept exactly: the same frames, and each
  frame's pts is its pts in SRC minus the episode's first (checked to 1 microsecond, per file as
  it is written and for the whole dataset at the end).
* Rows are copied into ``data/chunk-XXX/file-XXX.parquet``. String columns holding JSON (e.g.
  per-frame annotations) become typed columns (see :mod:`stoker.typed_columns`).
* Episodes that cannot be decoded stop the run (``on_error="raise"``) or are left out
  (``"skip"``) and listed in the report; the remaining episodes are renumbered 0, 1, ... so DST
  is a valid dataset.
* The stoker index of DST is built as part of the run.

How it runs: one unit of work per (episode, camera), on a thread pool (the C++ work releases
the GIL). Every file is written under a temporary name and renamed when complete, so a file
with its final name is always complete. An interrupted run, started again with the same
arguments, keeps every finished unit and does the rest. ``meta/info.json`` is written last:
until it exists, DST is not a dataset. ``DST/meta/stoker_etl_report.json`` holds the report.
"""

from __future__ import annotations

import argparse
import fcntl
import glob
import hashlib
import json
import os
import shutil
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import pyarrow as pa
import pyarrow.json as pa_json
import pyarrow.parquet as pq

from stoker import _core
from stoker._core import DatasetError, DecodeError, Error
from stoker.dataset_index import _ProgressBar, load_index
from stoker.lerobot_meta import LeRobotMetadata, read_lerobot_metadata
from stoker.typed_columns import convert_json_columns, json_candidates
from stoker.video import VideoReader

__all__ = ["EtlReport", "materialize", "add_arguments", "main"]

CODECS = ("h264", "av1")
DEFAULT_GOP = 10
DEFAULT_CRF = {"h264": 23, "av1": 30}
TIME_TOLERANCE_S = 1e-6  # how far an output frame's time may be from its source frame's

DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
EPISODES_PATH = "meta/episodes/chunk-000/file-000.parquet"
REPORT_PATH = "meta/stoker_etl_report.json"
STATE_DIR = ".stoker_etl"  # the run's journal and lock, inside DST
DATA_FILE_MB = 100  # LeRobot's default data_files_size_in_mb
_RUN_VERSION = 1

Progress = Union[bool, Callable[[int, int], None]]


@dataclass
class EtlReport:
    """What a run did. Also written to ``DST/meta/stoker_etl_report.json``.

    Episodes are named by their ``episode_index`` in SRC; ``episode_map[k]`` is the SRC episode
    that became episode k of DST. ``bytes_in`` counts the SRC video bytes of the episodes read
    (a packed file's bytes shared by its episodes in proportion to their frames).
    """

    source: str
    destination: str
    options: Dict[str, Any]
    episodes_done: List[int] = field(default_factory=list)
    episodes_skipped: Dict[int, str] = field(default_factory=dict)
    episode_map: List[int] = field(default_factory=list)
    units_total: int = 0
    units_transcoded: int = 0  # by this run
    units_resumed: int = 0  # found complete from an earlier run
    frames: int = 0  # rows (= frames per camera) in DST
    seconds: float = 0.0
    transcode_seconds: float = 0.0  # summed over the units of this run
    bytes_in: int = 0
    bytes_out: int = 0
    data_bytes_out: int = 0
    typed_columns: List[Dict[str, Any]] = field(default_factory=list)
    max_time_error_s: float = 0.0
    verified: bool = False

    def to_dict(self) -> Dict[str, Any]:
        value = asdict(self)
        value["episodes_skipped"] = {str(k): v for k, v in self.episodes_skipped.items()}
        return value

    def summary(self) -> str:
        text = (f"{len(self.episodes_done)} episodes, {self.frames} frames per camera, "
                f"{self.units_transcoded} videos encoded ({self.units_resumed} resumed) in "
                f"{self.seconds:.1f} s; videos {self.bytes_in / 1e6:.1f} MB -> "
                f"{self.bytes_out / 1e6:.1f} MB; timestamps verified to "
                f"{self.max_time_error_s * 1e6:.3f} us")
        if self.episodes_skipped:
            text += f"; skipped episodes {sorted(self.episodes_skipped)}"
        return text


@dataclass(frozen=True)
class _Unit:
    position: int  # the episode's position in SRC (dataset order)
    episode: int  # its episode_index in SRC
    camera: str
    source: str  # SRC video file
    video: int  # its index in the SRC index's video_files
    first_frame: int
    frames: int
    target: str  # absolute path in DST
    bytes_in: int


def materialize(src, dst, *, size, codec: str = "h264", gop: int = DEFAULT_GOP,
                crf: Optional[int] = None, preset: Optional[str] = None,
                fast_decode: bool = True, cameras: Optional[Sequence[str]] = None,
                workers: Optional[int] = None, on_error: str = "raise",
                json_columns: Union[str, Sequence[str]] = "auto",
                interpolation: str = "bilinear", progress: Progress = True) -> EtlReport:
    """Writes the LeRobot dataset in ``src`` to ``dst`` as a LeRobot v3.0 dataset at training
    size, with typed columns, and builds its stoker index. See the module documentation.

    Args:
        src: the source dataset folder (LeRobot v2.1 or v3.0).
        dst: the output folder: new, empty, or an unfinished (or finished) run of the same
            command, which is then continued.
        size: ``(height, width)`` of the output frames (even numbers; at least 64 for AV1), or
            a ``"WIDTHxHEIGHT"`` string as on the command line.
        codec: ``"h264"`` (libx264) or ``"av1"`` (libsvtav1).
        gop: frames from one keyframe to the next.
        crf: the encoder's constant rate factor. Default: 23 for H.264, 30 for AV1.
        preset: the encoder's preset. Default: ``"medium"`` (x264), ``"8"`` (SVT-AV1).
        fast_decode: encode for cheap decoding (x264 ``tune=fastdecode``, SVT-AV1
            ``fast-decode=1``): about half the decode time for a few percent more bytes.
        cameras: the video keys to keep (default: all); the others are left out of DST.
        workers: units encoded at once. Default: one per CPU this process may use.
        on_error: ``"raise"``: an episode that cannot be decoded stops the run with an error
            naming it; ``"skip"``: it is left out of DST and listed in the report.
        json_columns: ``"auto"`` converts every string column whose first value is a JSON
            object or array; a list names the columns to convert; ``"none"`` keeps all as text.
        interpolation: ``"bilinear"`` or ``"area"`` resampling to the output size.
        progress: True shows progress bars with ETA on stderr and a summary at the end; False
            is silent; a callable is called with (units done, units to do) after each unit of
            this run (an exception it raises stops the run as Ctrl-C would).

    Raises:
        ValueError: bad arguments, or ``dst`` holds a run of another source, or of other video
            options (size, codec, gop, crf, preset, fast_decode, interpolation).
        FileExistsError: ``dst`` exists, is not empty, and is not a stoker etl output.
        stoker.DecodeError: an episode could not be decoded (``on_error="raise"``), naming the
            episode, camera and file.
        stoker.DatasetError: a bad source dataset, a JSON column whose rows differ in structure
            (:class:`stoker.typed_columns.TypedColumnError`), or a failed final verification.
    """
    started = time.monotonic()
    height, width = _parse_size(size)
    if codec not in CODECS:
        raise ValueError(f"codec must be one of {CODECS}, got {codec!r}")
    if not isinstance(gop, int) or gop < 1:
        raise ValueError(f"gop must be a positive integer, got {gop!r}")
    max_crf = 51 if codec == "h264" else 63
    crf = DEFAULT_CRF[codec] if crf is None else crf
    if not isinstance(crf, int) or not 0 <= crf <= max_crf:
        raise ValueError(f"crf must be an integer in [0, {max_crf}] for {codec}, got {crf!r}")
    if codec == "av1" and min(height, width) < 64:
        raise ValueError(f"AV1 (SVT-AV1) needs frames of at least 64x64, got {width}x{height}")
    if on_error not in ("raise", "skip"):
        raise ValueError(f'on_error must be "raise" or "skip", got {on_error!r}')
    if interpolation not in ("bilinear", "area"):
        raise ValueError(f'interpolation must be "bilinear" or "area", got {interpolation!r}')
    if not (progress is True or progress is False or callable(progress)):
        raise TypeError(f"progress must be a bool or a callable, got {progress!r}")
    verbose = progress is True
    if workers is None:
        workers = _cpu_count()
    elif not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a positive integer, got {workers!r}")
    src = os.path.abspath(os.fspath(src))
    dst = os.path.abspath(os.fspath(dst))
    if dst == src or dst.startswith(os.path.join(src, "")) or \
            src.startswith(os.path.join(dst, "")):
        raise ValueError(f"the destination {dst} must be outside the source {src} and not "
                         "contain it")
    # SVT-AV1 prints its configuration for every encoder it opens unless told otherwise.
    os.environ.setdefault("SVT_LOG", "1")

    meta = read_lerobot_metadata(src)
    if cameras is None:
        cameras = list(meta.cameras)
    else:
        cameras = list(dict.fromkeys(cameras))
        unknown = [c for c in cameras if c not in meta.cameras]
        if unknown:
            raise ValueError(f"unknown cameras {unknown}; {src} has {list(meta.cameras)}")
    index = load_index(src, progress=verbose)
    options = {"size": [height, width], "codec": codec, "gop": gop, "crf": crf,
               "preset": preset or "", "fast_decode": bool(fast_decode), "cameras": cameras,
               "interpolation": interpolation, "on_error": on_error,
               "json_columns": json_columns if isinstance(json_columns, str)
               else list(json_columns)}
    report = EtlReport(source=src, destination=dst, options=options)

    with _RunState(dst, src, options, _source_fingerprint(meta)) as state:
        units = _plan_units(meta, index, cameras, dst)
        report.units_total = len(units)
        failures = _run_units(units, index, state, options, workers, on_error, progress, report)

        failed = {unit.position for unit in failures}
        empty = {e for e in range(meta.num_episodes) if meta.length[e] == 0}
        for e in sorted(empty):
            report.episodes_skipped[int(meta.episode_index[e])] = "the episode has no frames"
        for unit, reason in failures.items():
            report.episodes_skipped.setdefault(unit.episode, reason)
        kept = [e for e in range(meta.num_episodes) if e not in failed and e not in empty]
        if not kept:
            raise DatasetError(f"no episode of {src} could be materialized: " +
                               "; ".join(f"episode {e}: {r}" for e, r in
                                         sorted(report.episodes_skipped.items())))
        report.episode_map = [int(meta.episode_index[e]) for e in kept]
        report.episodes_done = list(report.episode_map)
        kept_set = set(kept)
        kept_units = [u for u in units if u.position in kept_set]
        report.bytes_in = sum(u.bytes_in for u in kept_units)
        report.bytes_out = sum(os.path.getsize(u.target) for u in kept_units)
        _remove_unreferenced_videos(dst, {u.target for u in kept_units})

        _write_dataset(meta, kept, kept_units, cameras, state, dst, options, report)
        dst_index = load_index(dst, rebuild=True, progress=verbose)
        try:
            report.max_time_error_s = _verify(meta, index, dst_index, kept, cameras)
        except DatasetError:
            _remove(os.path.join(dst, "meta", "info.json"))
            raise
        report.verified = True
        report.seconds = time.monotonic() - started
        _write_json(os.path.join(dst, REPORT_PATH), report.to_dict())
    if verbose:
        print(f"stoker etl: {dst}: {report.summary()}", file=sys.stderr)
    return report


# ---------------------------------------------------------------------------------------------
# Arguments


def _parse_size(size) -> Tuple[int, int]:
    if isinstance(size, str):
        try:
            width, height = (int(p) for p in size.lower().split("x"))
        except ValueError:
            raise ValueError(f"size must be WIDTHxHEIGHT, e.g. 224x224, got {size!r}") from None
    else:
        try:
            height, width = (int(v) for v in size)
        except (TypeError, ValueError):
            raise ValueError(f"size must be (height, width), got {size!r}") from None
    if height <= 0 or width <= 0 or height % 2 or width % 2:
        raise ValueError(f"the output size must be positive and even (4:2:0 video), got "
                         f"{width}x{height} (width x height)")
    return height, width


def _cpu_count() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


# ---------------------------------------------------------------------------------------------
# The run's state in DST: what made its videos, a lock, the journal of finished units


class _RunState:
    """``DST/.stoker_etl/``: ``run.json`` (the source, its fingerprint and the options that shape
    the videos, to refuse continuing with other ones), ``units.jsonl`` (one line per finished
    unit: its duration, frames and time), and ``lock`` (held while a run writes DST)."""

    def __init__(self, dst: str, src: str, options: dict, fingerprint: str):
        self.dst = dst
        # Only what shapes the videos must match for a run to continue: cameras, JSON columns
        # and the error policy only change the rows and metadata, which every run rewrites.
        video_options = {k: options[k] for k in ("size", "codec", "gop", "crf", "preset",
                                                 "fast_decode", "interpolation")}
        self._record = {"version": _RUN_VERSION, "source": src, "video_options": video_options,
                        "source_fingerprint": fingerprint}
        self._folder = os.path.join(dst, STATE_DIR)
        self._journal = os.path.join(self._folder, "units.jsonl")
        self._journal_lock = threading.Lock()
        self._lock_file = None
        self.finished: Dict[str, dict] = {}

    def __enter__(self) -> "_RunState":
        run_path = os.path.join(self._folder, "run.json")
        if os.path.exists(run_path):
            previous = _load_json(run_path)
            keys = ("version", "source", "video_options", "source_fingerprint")
            differences = [key for key in keys if previous.get(key) != self._record[key]]
            if differences:
                detail = {"version": "it was written by another version of stoker etl",
                          "source": f"it read {previous.get('source')}",
                          "video_options": f"its videos were made with "
                                           f"{previous.get('video_options')}",
                          "source_fingerprint": "the source's files changed since"}
                raise ValueError(
                    f"{self.dst} holds a stoker etl run that differs from this one ("
                    + "; ".join(detail[d] for d in differences) + "): use another destination "
                    "or remove it")
        elif os.path.isdir(self.dst) and os.listdir(self.dst):
            raise FileExistsError(f"{self.dst} exists and is not empty, and no stoker etl run "
                                  "wrote it: choose a new destination")
        os.makedirs(self._folder, exist_ok=True)
        self._lock_file = open(os.path.join(self._folder, "lock"), "a+")
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self._lock_file.close()
            self._lock_file = None
            raise ValueError(f"another stoker etl run is writing {self.dst}") from None
        if not os.path.exists(run_path):
            _write_json(run_path, self._record)
        # Until this run has finished, DST does not look like a finished dataset.
        _remove(os.path.join(self.dst, "meta", "info.json"))
        _remove(os.path.join(self.dst, REPORT_PATH))
        for partial in glob.glob(os.path.join(self.dst, "**", "*.partial"), recursive=True):
            _remove(partial)
        if os.path.exists(self._journal):
            with open(self._journal, encoding="utf-8") as f:
                for line in f:
                    try:
                        entry = json.loads(line)
                        self.finished[entry["target"]] = entry
                    except (ValueError, KeyError):
                        continue  # a line cut short by an interruption
        return self

    def record(self, target: str, result: dict) -> None:
        entry = {"target": os.path.relpath(target, self.dst), "duration": result["duration"],
                 "frames": result["frames"], "seconds": result["seconds"]}
        with self._journal_lock:
            with open(self._journal, "a", encoding="utf-8") as f:
                f.write(json.dumps(entry) + "\n")
            self.finished[entry["target"]] = entry

    def duration(self, target: str) -> float:
        """The duration of a finished unit's file: from the journal, else from its frame table
        (a run stopped between the rename and the journal line)."""
        entry = self.finished.get(os.path.relpath(target, self.dst))
        if entry is not None:
            return float(entry["duration"])
        return VideoReader(target).duration

    def __exit__(self, *exc) -> None:
        if self._lock_file is not None:
            fcntl.flock(self._lock_file, fcntl.LOCK_UN)
            self._lock_file.close()


def _source_fingerprint(meta: LeRobotMetadata) -> str:
    """Hash of the size and modification time of the source's info.json, data and videos."""
    files = [os.path.join(meta.root, "meta", "info.json"), *meta.data_files]
    for videos in meta.videos.values():
        files += list(videos.files)
    digest = hashlib.sha256()
    for path in files:
        stat = os.stat(path)
        digest.update(f"{os.path.relpath(path, meta.root)}\0{stat.st_size}\0"
                      f"{stat.st_mtime_ns}\n".encode("utf-8", "surrogateescape"))
    return digest.hexdigest()


# ---------------------------------------------------------------------------------------------
# Videos


def _plan_units(meta: LeRobotMetadata, index, cameras: Sequence[str], dst: str) -> List[_Unit]:
    chunks_size = _chunks_size(meta)
    file_frames: Dict[int, int] = {}
    videos = {camera: index.videos_of(camera) for camera in cameras}
    first_frames = {camera: index.first_frames(camera) for camera in cameras}
    units = []
    for e in range(meta.num_episodes):
        if meta.length[e] == 0:
            continue
        for camera in cameras:
            v = int(videos[camera][e])
            source = index.video_files[v]
            if v not in file_frames:
                file_frames[v] = VideoReader(source, frame_table=index.frame_table(v)).num_frames
            share = int(meta.length[e]) / max(file_frames[v], 1)
            target = os.path.join(dst, VIDEO_PATH.format(video_key=camera,
                                                         chunk_index=e // chunks_size,
                                                         file_index=e % chunks_size))
            units.append(_Unit(position=e, episode=int(meta.episode_index[e]), camera=camera,
                               source=source, video=v,
                               first_frame=int(first_frames[camera][e]),
                               frames=int(meta.length[e]), target=target,
                               bytes_in=int(round(os.path.getsize(source) * share))))
    return units


def _run_units(units: List[_Unit], index, state: _RunState, options: dict, workers: int,
               on_error: str, progress: Progress, report: EtlReport) -> Dict[_Unit, str]:
    """Encodes every unit whose file is not there yet. Returns the failed units with their
    reasons (``on_error="skip"``); with ``"raise"``, the first failure stops the run: no new
    unit starts, the running ones finish, and the error is raised."""
    todo = [u for u in units if not os.path.exists(u.target)]
    report.units_resumed = len(units) - len(todo)
    height, width = options["size"]
    tables: Dict[int, bytes] = {}

    def run(unit: _Unit) -> dict:
        table = tables.get(unit.video)
        if table is None:
            table = tables[unit.video] = index.frame_table(unit.video)
        os.makedirs(os.path.dirname(unit.target), exist_ok=True)
        return _core.transcode(unit.source, table, unit.first_frame, unit.frames, unit.target,
                               height, width, options["codec"], options["gop"], options["crf"],
                               options["preset"], options["fast_decode"],
                               options["interpolation"] == "area", 1, 32)

    callback = None
    if progress is True and todo:
        label = "encoding videos"
        if report.units_resumed:
            label += f" ({report.units_resumed} of {len(units)} done before)"
        callback = _ProgressBar(label)
    elif callable(progress):
        callback = progress
    failures: Dict[_Unit, str] = {}
    error: Optional[BaseException] = None
    done = 0
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="stoker-etl")
    pending = {pool.submit(run, unit): unit for unit in todo}
    try:
        while pending:
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in finished:
                unit = pending.pop(future)
                try:
                    result = future.result()
                except Error as e:
                    reason = (f"episode {unit.episode} (camera {unit.camera!r}, frames "
                              f"{unit.first_frame}-{unit.first_frame + unit.frames - 1} of "
                              f"{unit.source}): {e}")
                    if on_error == "raise":
                        if error is None:
                            error = DecodeError(f"stoker etl: cannot materialize {reason}")
                            for other in pending:  # start nothing new
                                other.cancel()
                        continue
                    failures[unit] = reason
                else:
                    state.record(unit.target, result)
                    report.units_transcoded += 1
                    report.transcode_seconds += result["seconds"]
                done += 1
                if callback is not None:
                    callback(done, len(todo))
            pending = {f: u for f, u in pending.items() if not f.cancelled()}
    except BaseException:
        # Interrupted (Ctrl-C, or the progress callback raised): start nothing new; the running
        # units finish, their files complete, and a rerun continues from there.
        for future in pending:
            future.cancel()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        if isinstance(callback, _ProgressBar):
            callback.close()
    if error is not None:
        raise error
    return failures


def _remove_unreferenced_videos(dst: str, keep: set) -> None:
    """Removes videos of DST that no kept unit wrote (e.g. other cameras of skipped episodes,
    cameras left out of this run)."""
    for path in glob.glob(os.path.join(dst, "videos", "**", "*.mp4"), recursive=True):
        if path not in keep:
            _remove(path)


# ---------------------------------------------------------------------------------------------
# Rows and metadata


def _write_dataset(meta: LeRobotMetadata, kept: List[int], units: List[_Unit],
                   cameras: Sequence[str], state: _RunState, dst: str, options: dict,
                   report: EtlReport) -> None:
    chunks_size = _chunks_size(meta)
    info = _load_json(os.path.join(meta.root, "meta", "info.json"))

    # Rows of the kept episodes, in dataset order, JSON columns typed, then renumbered.
    table = pa.concat_tables([pq.read_table(path) for path in meta.data_files])
    table = table.replace_schema_metadata(None)  # HF's feature description would be stale
    rows = np.concatenate([np.arange(meta.dataset_from_index[e], meta.dataset_to_index[e])
                           for e in kept]).astype(np.int64)
    table = table.take(pa.array(rows))
    names = _json_column_names(table, options["json_columns"])
    source_index = table.column("index").to_numpy()
    source_episode = table.column("episode_index").to_numpy()
    source_frame = (table.column("frame_index").to_numpy()
                    if "frame_index" in table.column_names else None)

    def row_label(r: int) -> str:
        where = f"episode {source_episode[r]}"
        if source_frame is not None:
            where += f", frame {source_frame[r]}"
        return f"row {source_index[r]} ({where})"

    table, typed, typed_features = convert_json_columns(table, names, row_label=row_label)
    report.typed_columns = [t.to_dict() for t in typed]
    lengths = np.asarray([meta.length[e] for e in kept], np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    new_episode = np.repeat(np.arange(len(kept), dtype=np.int64), lengths)
    table = _replace_column(table, "episode_index", pa.array(new_episode))
    table = _replace_column(table, "index", pa.array(np.arange(len(rows), dtype=np.int64)))
    report.frames = len(rows)

    # Data files: whole episodes, about data_files_size_in_mb each.
    data_mb = int(info.get("data_files_size_in_mb", DATA_FILE_MB))
    row_bytes = max(table.nbytes / max(table.num_rows, 1), 1.0)
    groups: List[List[int]] = [[]]
    for k in range(len(kept)):
        if groups[-1] and (starts[k + 1] - starts[groups[-1][0]]) * row_bytes > data_mb * 1e6:
            groups.append([])
        groups[-1].append(k)
    data_file_of_episode = np.zeros(len(kept), np.int64)
    written_data = set()
    for n, group in enumerate(groups):
        path = os.path.join(dst, DATA_PATH.format(chunk_index=n // chunks_size,
                                                  file_index=n % chunks_size))
        first, last = group[0], group[-1]
        _write_parquet(table.slice(starts[first], starts[last + 1] - starts[first]), path)
        written_data.add(path)
        report.data_bytes_out += os.path.getsize(path)
        data_file_of_episode[group] = n
    for path in glob.glob(os.path.join(dst, "data", "**", "*.parquet"), recursive=True):
        if path not in written_data:
            _remove(path)

    # meta/episodes
    source_episodes = _source_episode_table(meta)
    unit_of = {(u.position, u.camera): u for u in units}
    kept_rows = pa.array(kept)
    columns: Dict[str, Any] = {
        "episode_index": pa.array(np.arange(len(kept), dtype=np.int64)),
        "tasks": source_episodes["tasks"].take(kept_rows),
        "length": pa.array(lengths),
        "data/chunk_index": pa.array(data_file_of_episode // chunks_size),
        "data/file_index": pa.array(data_file_of_episode % chunks_size),
        "dataset_from_index": pa.array(starts[:-1]),
        "dataset_to_index": pa.array(starts[1:]),
    }
    positions = np.asarray(kept, np.int64)
    for camera in cameras:
        durations = [state.duration(unit_of[(e, camera)].target) for e in kept]
        columns[f"videos/{camera}/chunk_index"] = pa.array(positions // chunks_size)
        columns[f"videos/{camera}/file_index"] = pa.array(positions % chunks_size)
        columns[f"videos/{camera}/from_timestamp"] = pa.array(np.zeros(len(kept)))
        columns[f"videos/{camera}/to_timestamp"] = pa.array(np.asarray(durations, np.float64))
    for name in source_episodes.column_names:  # per-episode statistics of a v3.0 source
        if name.startswith("stats/") and _stats_feature(name) in _kept_features(meta, cameras):
            columns[name] = source_episodes[name].take(kept_rows)
    columns["meta/episodes/chunk_index"] = pa.array(np.zeros(len(kept), np.int64))
    columns["meta/episodes/file_index"] = pa.array(np.zeros(len(kept), np.int64))
    episodes_path = os.path.join(dst, EPISODES_PATH)
    for path in glob.glob(os.path.join(dst, "meta", "episodes", "**", "*.parquet"),
                          recursive=True):
        if path != episodes_path:
            _remove(path)
    _write_parquet(pa.table(columns), episodes_path)

    # meta/tasks.parquet, statistics, subtasks
    _write_tasks(meta, os.path.join(dst, "meta", "tasks.parquet"))
    stats = _aggregated_stats(meta, kept, source_episodes, cameras)
    if stats is not None:
        _write_json(os.path.join(dst, "meta", "stats.json"), stats)
    subtasks = os.path.join(meta.root, "meta", "subtasks.parquet")
    if os.path.exists(subtasks):
        _copy(subtasks, os.path.join(dst, "meta", "subtasks.parquet"))

    # meta/info.json, last: its presence says the dataset is complete.
    features = {}
    for name, feature in info["features"].items():
        if feature.get("dtype") == "video":
            if name in cameras:
                features[name] = _video_feature(feature, options)
        elif name in names:  # a JSON column: its typed columns, in its place
            features.update({n: f for n, f in typed_features.items()
                             if n == name or n.startswith(name + ".")})
        else:
            features[name] = feature
    for typed_name, feature in typed_features.items():  # JSON columns info.json did not list
        features.setdefault(typed_name, feature)
    info.update({
        "codebase_version": "v3.0",
        "total_episodes": len(kept),
        "total_frames": int(starts[-1]),
        "total_tasks": int(len(_task_rows(meta)[0])),
        "chunks_size": chunks_size,
        "data_files_size_in_mb": data_mb,
        "video_files_size_in_mb": int(info.get("video_files_size_in_mb", 500)),
        "splits": {"train": f"0:{len(kept)}"},
        "data_path": DATA_PATH,
        "video_path": VIDEO_PATH if cameras else None,
        "features": features,
    })
    for key in ("total_chunks", "total_videos"):  # v2.1 only
        info.pop(key, None)
    _write_json(os.path.join(dst, "meta", "info.json"), info)


def _json_column_names(table: pa.Table, json_columns) -> List[str]:
    if json_columns == "auto":
        return json_candidates(table)
    if json_columns == "none" or json_columns is None:
        return []
    if isinstance(json_columns, str):
        json_columns = [json_columns]
    missing = [c for c in json_columns if c not in table.column_names]
    if missing:
        raise ValueError(f"json_columns {missing} are not columns of the data; the columns are "
                         f"{table.column_names}")
    return list(json_columns)


def _replace_column(table: pa.Table, name: str, values: pa.Array) -> pa.Table:
    at = table.column_names.index(name)
    return table.set_column(at, pa.field(name, values.type), values)


def _video_feature(feature: dict, options: dict) -> dict:
    height, width = options["size"]
    feature = json.loads(json.dumps(feature))
    feature["shape"] = [height, width, 3]
    feature.setdefault("names", ["height", "width", "channels"])
    info = feature.get("info") or {}
    info.update({"video.height": height, "video.width": width, "video.codec": options["codec"],
                 "video.pix_fmt": "yuv420p", "video.channels": 3})
    info.setdefault("video.is_depth_map", False)
    info.setdefault("has_audio", False)
    feature["info"] = info
    return feature


def _chunks_size(meta: LeRobotMetadata) -> int:
    info = _load_json(os.path.join(meta.root, "meta", "info.json"))
    return int(info.get("chunks_size", 1000))


def _source_episode_table(meta: LeRobotMetadata) -> pa.Table:
    """SRC's per-episode table in dataset order: ``tasks`` (list of strings) and, for v3.0,
    every other column (statistics among them)."""
    if meta.codebase_version == "v3.0":
        paths = sorted(glob.glob(os.path.join(meta.root, "meta", "episodes", "chunk-*",
                                              "file-*.parquet")))
        table = pa.concat_tables([pq.read_table(p) for p in paths],
                                 promote_options="permissive")
    else:
        table = pa_json.read_json(os.path.join(meta.root, "meta", "episodes.jsonl"))
    table = table.sort_by("episode_index").replace_schema_metadata(None)
    if "tasks" not in table.column_names:
        table = table.append_column("tasks", pa.nulls(table.num_rows, pa.list_(pa.string())))
    tasks = table.column("tasks")
    if pa.types.is_string(tasks.type) or pa.types.is_large_string(tasks.type):
        tasks = pa.array([[t] if t is not None else [] for t in tasks.to_pylist()],
                         pa.list_(pa.string()))
    else:
        tasks = tasks.cast(pa.list_(pa.string()))
    return table.set_column(table.column_names.index("tasks"), "tasks", tasks)


def _task_rows(meta: LeRobotMetadata) -> Tuple[np.ndarray, np.ndarray]:
    """(task_index, text) of every defined task."""
    indices = np.array([t for t, text in enumerate(meta.tasks) if text != ""], np.int64)
    return indices, (meta.tasks[indices] if indices.size else np.array([], str))


def _write_tasks(meta: LeRobotMetadata, path: str) -> None:
    source = os.path.join(meta.root, "meta", "tasks.parquet")
    if meta.codebase_version == "v3.0" and os.path.exists(source):
        _copy(source, path)
        return
    indices, texts = _task_rows(meta)
    # As pandas writes LeRobot's table: the task texts are the index.
    table = pa.table({"task_index": pa.array(indices, pa.int64()),
                      "__index_level_0__": pa.array([str(t) for t in texts], pa.string())})
    pandas_meta = {
        "index_columns": ["__index_level_0__"],
        "column_indexes": [{"name": None, "field_name": None, "pandas_type": "unicode",
                            "numpy_type": "object", "metadata": {"encoding": "UTF-8"}}],
        "columns": [
            {"name": "task_index", "field_name": "task_index", "pandas_type": "int64",
             "numpy_type": "int64", "metadata": None},
            {"name": None, "field_name": "__index_level_0__", "pandas_type": "unicode",
             "numpy_type": "object", "metadata": None}],
        "creator": {"library": "pyarrow", "version": pa.__version__},
        "pandas_version": "2.2.3",
    }
    _write_parquet(table.replace_schema_metadata({b"pandas": json.dumps(pandas_meta).encode()}),
                   path)


def _stats_feature(column: str) -> str:
    """The feature of a per-episode statistics column, ``stats/<feature>/<statistic>``."""
    return column[len("stats/"):].rsplit("/", 1)[0]


def _kept_features(meta: LeRobotMetadata, cameras: Sequence[str]) -> set:
    return {name for name in meta.features if name not in meta.cameras or name in cameras}


def _aggregated_stats(meta: LeRobotMetadata, kept: List[int], source_episodes: pa.Table,
                      cameras: Sequence[str]) -> Optional[dict]:
    """meta/stats.json for the kept episodes, aggregated as LeRobot does (count-weighted mean,
    pooled variance, min of minima, max of maxima) from SRC's per-episode statistics (v3.0's
    ``stats/*`` columns, v2.1's episodes_stats.jsonl); SRC's own stats.json when it has no
    per-episode ones; None when it has neither."""
    per_episode: List[Dict[str, Dict[str, np.ndarray]]] = []
    stats_columns = [n for n in source_episodes.column_names if n.startswith("stats/")]
    if stats_columns:
        for e in kept:
            entry: Dict[str, Dict[str, np.ndarray]] = {}
            for name in stats_columns:
                feature, stat = name[len("stats/"):].rsplit("/", 1)
                value = source_episodes[name][e].as_py()
                if value is not None:
                    entry.setdefault(feature, {})[stat] = np.asarray(value, np.float64)
            per_episode.append(entry)
    else:
        path = os.path.join(meta.root, "meta", "episodes_stats.jsonl")
        if os.path.exists(path):
            by_episode = {}
            with open(path, encoding="utf-8") as f:
                for line in f:
                    if line.strip():
                        record = json.loads(line)
                        by_episode[record["episode_index"]] = record["stats"]
            if all(int(meta.episode_index[e]) in by_episode for e in kept):
                per_episode = [{feature: {k: np.asarray(v, np.float64) for k, v in s.items()}
                                for feature, s in by_episode[int(meta.episode_index[e])].items()}
                               for e in kept]
    if not per_episode:
        source = os.path.join(meta.root, "meta", "stats.json")
        return _load_json(source) if os.path.exists(source) else None
    wanted = _kept_features(meta, cameras)
    result = {}
    for feature in per_episode[0]:
        if feature not in wanted:
            continue
        items = [s[feature] for s in per_episode if feature in s]
        if not all(k in s for s in items for k in ("mean", "std", "count", "min", "max")):
            continue
        means = np.stack([s["mean"] for s in items])
        counts = np.stack([s["count"] for s in items]).astype(np.float64)
        total = counts.sum(axis=0)
        weights = counts.reshape(counts.shape + (1,) * (means.ndim - counts.ndim))
        mean = (means * weights).sum(axis=0) / total
        variance = ((np.stack([s["std"] for s in items]) ** 2 + (means - mean) ** 2)
                    * weights).sum(axis=0) / total
        result[feature] = {"min": np.min(np.stack([s["min"] for s in items]), axis=0).tolist(),
                           "max": np.max(np.stack([s["max"] for s in items]), axis=0).tolist(),
                           "mean": mean.tolist(), "std": np.sqrt(variance).tolist(),
                           "count": total.astype(np.int64).tolist()}
    return result


# ---------------------------------------------------------------------------------------------
# Verification


def _verify(meta: LeRobotMetadata, src_index, dst_index, kept: List[int],
            cameras: Sequence[str]) -> float:
    """Checks, per kept episode and camera, that DST's frames are SRC's: the same count, and
    each frame's time from the episode's start equal within TIME_TOLERANCE_S (from the frame
    tables of both indexes: nothing is decoded). Returns the largest difference; raises
    DatasetError naming every episode that differs."""
    if dst_index.num_episodes != len(kept):
        raise DatasetError(f"verification failed: DST has {dst_index.num_episodes} episodes, "
                           f"expected {len(kept)}")
    worst = 0.0
    problems = []
    tables: Dict[Tuple[int, int], np.ndarray] = {}

    def pts(index, v: int) -> np.ndarray:
        key = (id(index), v)
        if key not in tables:
            tables[key] = VideoReader(index.video_files[v], frame_table=index.frame_table(v)).pts
        return tables[key]

    for camera in cameras:
        src_videos, src_first = src_index.videos_of(camera), src_index.first_frames(camera)
        dst_videos, dst_first = dst_index.videos_of(camera), dst_index.first_frames(camera)
        for k, e in enumerate(kept):
            n = int(meta.length[e])
            expected = pts(src_index, int(src_videos[e]))[src_first[e]:src_first[e] + n]
            dst_all = pts(dst_index, int(dst_videos[k]))
            got = dst_all[dst_first[k]:dst_first[k] + n]
            where = (f"episode {meta.episode_index[e]} (DST episode {k}), camera {camera!r}, "
                     f"{dst_index.video_files[int(dst_videos[k])]}")
            if len(dst_all) != n or len(got) != n:
                problems.append(f"{where}: {len(dst_all)} frames, expected {n}")
                continue
            error = float(np.max(np.abs((got - got[0]) - (expected - expected[0]))))
            worst = max(worst, error)
            if error > TIME_TOLERANCE_S:
                problems.append(f"{where}: frame times differ by up to {error * 1e6:.3f} us")
    if problems:
        raise DatasetError("verification failed: " + "; ".join(problems[:20]) +
                           (f"; and {len(problems) - 20} more" if len(problems) > 20 else ""))
    return worst


# ---------------------------------------------------------------------------------------------
# Files: each written under a temporary name, flushed, then renamed.


def _load_json(path: str) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _write_json(path: str, value) -> None:
    def write(temporary):
        with open(temporary, "w", encoding="utf-8") as f:
            json.dump(value, f, indent=4)
            f.write("\n")

    _atomic(path, write)


def _write_parquet(table: pa.Table, path: str) -> None:
    _atomic(path, lambda temporary: pq.write_table(table, temporary))


def _copy(source: str, path: str) -> None:
    _atomic(path, lambda temporary: shutil.copyfile(source, temporary))


def _atomic(path: str, write) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    temporary = f"{path}.{os.getpid()}.partial"
    try:
        write(temporary)
        with open(temporary, "rb") as f:
            os.fsync(f.fileno())
        os.replace(temporary, path)
    except BaseException:
        _remove(temporary)
        raise


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


# ---------------------------------------------------------------------------------------------
# Command line


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("src", help="the LeRobot dataset to read (v2.1 or v3.0)")
    parser.add_argument("dst", help="the folder to write: a new one, or the same folder again "
                                    "to continue an interrupted run")
    parser.add_argument("--size", required=True, metavar="WxH",
                        help="output frame size, width x height, e.g. 224x224 (even numbers)")
    parser.add_argument("--codec", choices=CODECS, default="h264",
                        help="h264 (libx264, the default) or av1 (libsvtav1)")
    parser.add_argument("--gop", type=int, default=DEFAULT_GOP,
                        help=f"frames from one keyframe to the next (default {DEFAULT_GOP})")
    parser.add_argument("--crf", type=int, default=None,
                        help="constant rate factor (default: 23 for h264, 30 for av1)")
    parser.add_argument("--preset", default=None,
                        help="encoder preset (default: medium for h264, 8 for av1)")
    parser.add_argument("--no-fast-decode", action="store_true",
                        help="encode without the encoders' fast-decode tuning (smaller files, "
                             "slower decoding)")
    parser.add_argument("--cameras", nargs="+", default=None, metavar="KEY",
                        help="video keys to keep (default: all)")
    parser.add_argument("--workers", type=int, default=None,
                        help="videos encoded at once (default: one per CPU)")
    parser.add_argument("--on-error", choices=("raise", "skip"), default="raise",
                        help="an episode that cannot be decoded stops the run (raise, the "
                             "default) or is left out and reported (skip)")
    parser.add_argument("--json-columns", default="auto", metavar="auto|none|COL,COL",
                        help="string columns to turn into typed columns (default: auto, every "
                             "column of JSON objects or arrays)")
    parser.add_argument("--interpolation", choices=("bilinear", "area"), default="bilinear",
                        help="resampling to the output size (default bilinear)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")


def main(args: argparse.Namespace) -> int:
    json_columns = args.json_columns
    if json_columns not in ("auto", "none"):
        json_columns = [c for c in json_columns.split(",") if c]
    try:
        materialize(args.src, args.dst, size=args.size, codec=args.codec, gop=args.gop,
                    crf=args.crf, preset=args.preset, fast_decode=not args.no_fast_decode,
                    cameras=args.cameras, workers=args.workers, on_error=args.on_error,
                    json_columns=json_columns, interpolation=args.interpolation,
                    progress=not args.no_progress)
    except KeyboardInterrupt:
        print("stoker etl: interrupted; run the same command again to continue", file=sys.stderr)
        return 130
    except (Error, ValueError, OSError) as e:
        print(f"stoker etl: error: {e}", file=sys.stderr)
        return 1
    return 0
