"""``stoker etl SRC DST``: a LeRobot dataset materialized at training resolution.

    stoker etl path/to/src path/to/dst --size 224x224 [--codec h264|av1] [--gop N] [--crf N]
        [--cameras KEY ...] [--workers N] [--on-error raise|skip]
    stoker etl s3://bucket/prefix/src path/to/dst --size 224x224 [--endpoint-url URL]
        [--profile NAME] [--region NAME]

    report = stoker.writers.etl.materialize("src", "dst", size=(224, 224))

DST is a LeRobot v3.0 dataset (whatever SRC's version, v2.1 or v3.0), so every tool that reads
LeRobot reads it. What changes:

* Videos are re-encoded (libx264 or libsvtav1) at the training size, with a keyframe every
  ``gop`` frames, no B-frames, tuned for fast decoding. Each episode of each camera gets its own
  file, ``videos/<camera>/chunk-XXX/file-XXX.mp4`` (file number = the episode's position in
  SRC), with ``from_timestamp`` 0. Frame timing is kept exactly: the same frames, and each
  frame's pts is its pts in SRC minus the episode's first (checked to 1 microsecond, per file as
  it is written and for the whole dataset at the end).
* Rows are copied into ``data/chunk-XXX/file-XXX.parquet``. String columns holding JSON (e.g.
  per-frame annotations) become typed columns (see :mod:`stoker.writers.typed_columns`).
* Episodes that cannot be decoded stop the run (``on_error="raise"``) or are left out
  (``"skip"``) and listed in the report; the remaining episodes are renumbered 0, 1, ... so DST
  is a valid dataset.
* The stoker index of DST is built as part of the run.

How it runs: one unit of work per (episode, camera), on a thread pool (the C++ work releases
the GIL). Every file is written under a temporary name and renamed when complete, so a file
with its final name is always complete. An interrupted run, started again with the same
arguments, keeps every finished unit that passes its check (the size and SHA-256 journaled
when it was written) and does the rest; the videos are a function of SRC and the options
alone, so the result equals an uninterrupted run's. ``meta/info.json`` is written last:
until it exists, DST is not a dataset. ``DST/meta/stoker_etl_report.json`` holds the report.

This module owns the run: the journal that makes it resumable, the scheduling of the units,
the rows' conversion and the final verification. What it reads and writes on disk is
:mod:`stoker.datasets.lerobot.format`'s: SRC through the checked metadata, DST with its v3.0 writer.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Union

import numpy as np
import pyarrow as pa

from stoker import _core
from stoker._core import DatasetError, DecodeError, Error
from stoker.arguments import check_frame_size
from stoker.datasets.lerobot import format as lerobot_format
from stoker.datasets.lerobot.index import load_index, load_remote_index
from stoker.datasets.lerobot.metadata import (
    LeRobotMetadata,
    depth_cameras,
    read_data_table,
    read_lerobot_metadata,
    source_fingerprint,
)
from stoker.io.files import (
    FolderLock,
    checked_path,
    copy_file,
    read_json,
    remove_file,
    write_bytes,
    write_json,
)
from stoker.io.storage import (
    S3Options,
    add_storage_arguments,
    open_dataset_root,
    storage_options_from_args,
)
from stoker.io.video import VideoReader
from stoker.progress import ProgressBar
from stoker.writers.encoding import CODECS, encoder_options, transcode_options
from stoker.writers.typed_columns import convert_json_columns, json_candidates

__all__ = ["EtlReport", "materialize", "add_arguments", "main"]

# The encoder's defaults are C++'s (stoker/video_encoder.h).
DEFAULT_GOP = _core.EncoderOptions().gop
TIME_TOLERANCE_S = 1e-6  # how far an output frame's time may be from its source frame's

REPORT_PATH = "meta/stoker_etl_report.json"
STATE_DIR = ".stoker_etl"  # the run's journal and lock, inside DST
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
    options: dict[str, Any]
    episodes_done: list[int] = field(default_factory=list)
    episodes_skipped: dict[int, str] = field(default_factory=dict)
    episode_map: list[int] = field(default_factory=list)
    units_total: int = 0
    units_transcoded: int = 0  # by this run
    units_resumed: int = 0  # found complete from an earlier run
    units_redone: int = 0  # found damaged (failed their check on resume) and encoded again
    frames: int = 0  # rows (= frames per camera) in DST
    seconds: float = 0.0
    transcode_seconds: float = 0.0  # summed over the units of this run
    bytes_in: int = 0
    bytes_out: int = 0
    data_bytes_out: int = 0
    typed_columns: list[dict[str, Any]] = field(default_factory=list)
    max_time_error_s: float = 0.0
    verified: bool = False

    def to_dict(self) -> dict[str, Any]:
        value = asdict(self)
        value["episodes_skipped"] = {str(k): v for k, v in self.episodes_skipped.items()}
        return value

    def summary(self) -> str:
        text = (
            f"{len(self.episodes_done)} episodes, {self.frames} frames per camera, "
            f"{self.units_transcoded} videos encoded ({self.units_resumed} resumed"
            + (f", {self.units_redone} damaged ones redone" if self.units_redone else "")
            + ") in "
            f"{self.seconds:.1f} s; videos {self.bytes_in / 1e6:.1f} MB -> "
            f"{self.bytes_out / 1e6:.1f} MB; timestamps verified to "
            f"{self.max_time_error_s * 1e6:.3f} us"
        )
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


def materialize(
    src,
    dst,
    *,
    size,
    codec: str = "h264",
    gop: int = DEFAULT_GOP,
    crf: int | None = None,
    preset: str | None = None,
    fast_decode: bool = True,
    cameras: Sequence[str] | None = None,
    workers: int | None = None,
    on_error: str = "raise",
    json_columns: str | Sequence[str] = "auto",
    interpolation: str = "bilinear",
    progress: Progress = True,
    storage_options: dict[str, Any] | S3Options | None = None,
    ray: bool | str = False,
) -> EtlReport:
    """Writes the LeRobot dataset in ``src`` to ``dst`` as a LeRobot v3.0 dataset at training
    size, with typed columns, and builds its stoker index. See the module documentation.

    Args:
        src: the source dataset folder (LeRobot v2.1 or v3.0), or its URL (``s3://``,
            ``https://``; DST stays local).
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
        storage_options: for a URL SRC, see :mod:`stoker.io.storage`.
        ray: run the units as Ray tasks (:mod:`stoker.writers.etl_tasks`): ``True`` or
            ``"auto"`` joins the cluster ``RAY_ADDRESS`` names (else starts a local one),
            ``"local"`` starts a local one, another string is a cluster address; the run's process
            stays the driver (journal, rows, verification). DST must be seen by every node at the
            same path. ``workers`` then defaults to the cluster's CPUs. Needs ``ray[data]``.

    Raises:
        ValueError: bad arguments, or ``dst`` holds a run of another source, or of other video
            options (size, codec, gop, crf, preset, fast_decode, interpolation).
        FileExistsError: ``dst`` exists, is not empty, and is not a stoker etl output.
        stoker.DecodeError: an episode could not be decoded (``on_error="raise"``), naming the
            episode, camera and file.
        stoker.DatasetError: a bad source dataset, a JSON column whose rows differ in structure
            (:class:`stoker.writers.typed_columns.TypedColumnError`), or a failed final
            verification.
    """
    started = time.monotonic()
    height, width = _parse_size(size)
    encoder = encoder_options(codec, gop, crf, preset, fast_decode)
    encoder.check(height, width)
    if on_error not in ("raise", "skip"):
        raise ValueError(f'on_error must be "raise" or "skip", got {on_error!r}')
    if interpolation not in ("bilinear", "area"):
        raise ValueError(f'interpolation must be "bilinear" or "area", got {interpolation!r}')
    if not (progress is True or progress is False or callable(progress)):
        raise TypeError(f"progress must be a bool or a callable, got {progress!r}")
    verbose = progress is True
    if workers is not None and (not isinstance(workers, int) or workers < 1):
        raise ValueError(f"workers must be a positive integer, got {workers!r}")
    source = open_dataset_root(checked_path(src, "source dataset folder"), storage_options)
    src = source.location
    dst = os.path.abspath(checked_path(dst, "destination folder"))
    if not source.remote and (
        dst == src or dst.startswith(os.path.join(src, "")) or src.startswith(os.path.join(dst, ""))
    ):
        raise ValueError(
            f"the destination {dst} must be outside the source {src} and not contain it"
        )
    # SVT-AV1 prints its configuration for every encoder it opens unless told otherwise.
    os.environ.setdefault("SVT_LOG", "1")

    meta = read_lerobot_metadata(source)
    if cameras is None:
        cameras = list(meta.cameras)
    else:
        cameras = list(dict.fromkeys(cameras))
        unknown = [c for c in cameras if c not in meta.cameras]
        if unknown:
            raise ValueError(f"unknown cameras {unknown}; {src} has {list(meta.cameras)}")
    # The encoders write 8-bit colour: a depth map's 10- to 16-bit samples would come out
    # quantized and mixed across channels, silently. Refused until depth is re-encoded as such.
    depth = [c for c in cameras if c in depth_cameras(meta)]
    if depth:
        raise ValueError(
            f"{src}: {depth} {'is a depth camera' if len(depth) == 1 else 'are depth cameras'} "
            "(video.is_depth_map): stoker etl re-encodes 8-bit colour video and would lose "
            "their high-bit-depth samples; leave them out with --cameras (the source files "
            "stay readable as they are)"
        )
    if source.remote:
        index = load_remote_index(source, meta, progress=verbose)
    else:
        index = load_index(src, progress=verbose)
    options = {
        "size": [height, width],
        "codec": codec,
        "gop": encoder.gop,
        "crf": encoder.with_codec_defaults().crf,
        "preset": encoder.preset,
        "fast_decode": encoder.fast_decode,
        "cameras": cameras,
        "interpolation": interpolation,
        "on_error": on_error,
        "json_columns": json_columns if isinstance(json_columns, str) else list(json_columns),
    }
    report = EtlReport(source=src, destination=dst, options=options)

    with _RunState(dst, src, options, source_fingerprint(meta)) as state:
        units = _plan_units(meta, index, cameras, dst)
        report.units_total = len(units)
        ray_tasks = None
        if ray:
            from stoker.integrations.ray import cluster
            from stoker.writers import etl_tasks

            cluster.connect(ray)
            ray_tasks = etl_tasks.TranscodeTasks(
                options,
                source_root=src if source.remote else None,
                storage_options=source.options if source.remote else None,
            )
            workers = workers or cluster.cluster_cpus()
        failures = _run_units(
            units,
            index,
            state,
            options,
            workers or _core.usable_cores(),
            on_error,
            progress,
            report,
            ray_tasks,
        )

        failed = {unit.position for unit in failures}
        empty = {e for e in range(meta.num_episodes) if meta.length[e] == 0}
        for e in sorted(empty):
            report.episodes_skipped[int(meta.episode_index[e])] = "the episode has no frames"
        for unit, reason in failures.items():
            report.episodes_skipped.setdefault(unit.episode, reason)
        kept = [e for e in range(meta.num_episodes) if e not in failed and e not in empty]
        if not kept:
            raise DatasetError(
                f"no episode of {src} could be materialized: "
                + "; ".join(f"episode {e}: {r}" for e, r in sorted(report.episodes_skipped.items()))
            )
        report.episode_map = [int(meta.episode_index[e]) for e in kept]
        report.episodes_done = list(report.episode_map)
        kept_set = set(kept)
        kept_units = [u for u in units if u.position in kept_set]
        report.bytes_in = sum(u.bytes_in for u in kept_units)
        report.bytes_out = sum(os.path.getsize(u.target) for u in kept_units)
        _remove_unreferenced_videos(dst, {u.target for u in kept_units})

        try:
            _write_dataset(meta, kept, kept_units, cameras, state, dst, options, report)
            dst_index = load_index(dst, rebuild=True, progress=verbose)
            report.max_time_error_s = _verify(meta, index, dst_index, kept, cameras)
        except BaseException:
            # Whatever failed (the index build, the verification, an interruption), DST must
            # not look like a finished dataset.
            remove_file(os.path.join(dst, lerobot_format.INFO_PATH))
            raise
        report.verified = True
        report.seconds = time.monotonic() - started
        write_json(os.path.join(dst, REPORT_PATH), report.to_dict())
    if verbose:
        print(f"stoker etl: {dst}: {report.summary()}", file=sys.stderr)
    return report


# ---------------------------------------------------------------------------------------------
# Arguments


def _parse_size(size) -> tuple[int, int]:
    height, width = check_frame_size("size", size)
    if height % 2 or width % 2:
        raise ValueError(
            f"the output size must be positive and even (4:2:0 video), got "
            f"{width}x{height} (width x height)"
        )
    return height, width


# ---------------------------------------------------------------------------------------------
# The run's state in DST: what made its videos, a lock, the journal of finished units


class _RunState:
    """``DST/.stoker_etl/``: ``run.json`` (the source, its fingerprint and the options that shape
    the videos, to refuse continuing with other ones), ``units.jsonl`` (one line per finished
    unit: its duration, frames, time, size and SHA-256, by which a rerun checks it), and
    ``lock`` (held while a run writes DST)."""

    def __init__(self, dst: str, src: str, options: dict, fingerprint: str):
        self.dst = dst
        # Only what shapes the videos must match for a run to continue: cameras, JSON columns
        # and the error policy only change the rows and metadata, which every run rewrites.
        video_options = {
            k: options[k]
            for k in ("size", "codec", "gop", "crf", "preset", "fast_decode", "interpolation")
        }
        self._record = {
            "version": _RUN_VERSION,
            "source": src,
            "video_options": video_options,
            "source_fingerprint": fingerprint,
        }
        self._folder = os.path.join(dst, STATE_DIR)
        self._journal = os.path.join(self._folder, "units.jsonl")
        self._journal_lock = threading.Lock()
        self._lock = FolderLock(self._folder, dst, "stoker etl")
        self.finished: dict[str, dict] = {}

    def __enter__(self) -> _RunState:
        run_path = os.path.join(self._folder, "run.json")
        if os.path.exists(run_path):
            previous = read_json(run_path, "stoker etl run file")
            keys = ("version", "source", "video_options", "source_fingerprint")
            differences = [key for key in keys if previous.get(key) != self._record[key]]
            if differences:
                detail = {
                    "version": "it was written by another version of stoker etl",
                    "source": f"it read {previous.get('source')}",
                    "video_options": f"its videos were made with {previous.get('video_options')}",
                    "source_fingerprint": "the source's files changed since",
                }
                raise ValueError(
                    f"{self.dst} holds a stoker etl run that differs from this one ("
                    + "; ".join(detail[d] for d in differences)
                    + "): use another destination "
                    "or remove it"
                )
        elif os.path.isdir(self.dst) and os.listdir(self.dst):
            raise FileExistsError(
                f"{self.dst} exists and is not empty, and no stoker etl run "
                "wrote it: choose a new destination"
            )
        self._lock.__enter__()
        if not os.path.exists(run_path):
            write_json(run_path, self._record)
        # Until this run has finished, DST does not look like a finished dataset.
        remove_file(os.path.join(self.dst, lerobot_format.INFO_PATH))
        remove_file(os.path.join(self.dst, REPORT_PATH))
        for partial in glob.glob(os.path.join(self.dst, "**", "*.partial"), recursive=True):
            remove_file(partial)
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
        """Journals a finished unit, with the size and SHA-256 of its file as it is now."""
        entry = {
            "target": os.path.relpath(target, self.dst),
            "duration": result["duration"],
            "frames": result["frames"],
            "seconds": result["seconds"],
            "bytes": os.path.getsize(target),
            "sha256": _file_sha256(target),
        }
        with self._journal_lock:
            with open(self._journal, "a", encoding="utf-8") as f:
                f.write(json.dumps(entry) + "\n")
            self.finished[entry["target"]] = entry

    def check(self, unit: _Unit) -> str | None:
        """Why the finished-named file of ``unit`` cannot be kept, or None when it can: its size
        and SHA-256 must be the journal's. A file the journal lacks (a run stopped between the
        rename and the journal line, or a journal of an older run) must read back with the
        unit's frame count; it is then journaled."""
        entry = self.finished.get(os.path.relpath(unit.target, self.dst))
        if entry is not None and "sha256" in entry and "bytes" in entry:
            size = os.path.getsize(unit.target)
            if size != entry["bytes"]:
                return f"it has {size} bytes, {entry['bytes']} were written"
            if _file_sha256(unit.target) != entry["sha256"]:
                return "its SHA-256 is not the one written"
            return None
        try:
            reader = VideoReader(unit.target)
            frames, duration = reader.num_frames, reader.duration
        except Error as e:
            return f"it cannot be read: {e}"
        if frames != unit.frames:
            return f"it has {frames} frames, the episode {unit.frames}"
        self.record(unit.target, {"duration": duration, "frames": frames, "seconds": 0.0})
        return None

    def duration(self, target: str) -> float:
        """The duration of a finished unit's file: from the journal, else from its frame table
        (a run stopped between the rename and the journal line)."""
        entry = self.finished.get(os.path.relpath(target, self.dst))
        if entry is not None:
            return float(entry["duration"])
        return VideoReader(target).duration

    def __exit__(self, *exc) -> None:
        self._lock.__exit__(*exc)


def _file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):  # hashlib releases the GIL for each chunk
            digest.update(chunk)
    return digest.hexdigest()


# ---------------------------------------------------------------------------------------------
# Videos


def _plan_units(meta: LeRobotMetadata, index, cameras: Sequence[str], dst: str) -> list[_Unit]:
    file_frames: dict[int, int] = {}
    file_bytes: dict[int, int] = {}
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
                file_bytes[v] = meta.source.size(source)
            share = int(meta.length[e]) / max(file_frames[v], 1)
            target = lerobot_format.file_path(
                dst, lerobot_format.VIDEO_PATH, e, meta.chunks_size, video_key=camera
            )
            units.append(
                _Unit(
                    position=e,
                    episode=int(meta.episode_index[e]),
                    camera=camera,
                    source=source,
                    video=v,
                    first_frame=int(first_frames[camera][e]),
                    frames=int(meta.length[e]),
                    target=target,
                    bytes_in=int(round(file_bytes[v] * share)),
                )
            )
    return units


def _run_units(
    units: list[_Unit],
    index,
    state: _RunState,
    options: dict,
    workers: int,
    on_error: str,
    progress: Progress,
    report: EtlReport,
    ray_tasks: Any = None,
) -> dict[_Unit, str]:
    """Encodes every unit whose file is not there yet, or fails its check (_RunState.check:
    such a file is removed first). Returns the failed units with their reasons
    (``on_error="skip"``); with ``"raise"``, the first failure stops the run: no new unit
    starts, the running ones finish, and the error is raised."""
    present = [u for u in units if os.path.exists(u.target)]
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(present)))) as checks:
        damaged = [u for u, why in zip(present, checks.map(state.check, present)) if why]
    for unit in damaged:
        remove_file(unit.target)
    report.units_redone = len(damaged)
    todo = [u for u in units if not os.path.exists(u.target)]
    report.units_resumed = len(units) - len(todo)
    transcode = transcode_options(options)
    tables: dict[int, bytes] = {}

    def table_of(unit: _Unit) -> bytes:
        table = tables.get(unit.video)
        if table is None:
            table = tables[unit.video] = index.frame_table(unit.video)
        return table

    def run(unit: _Unit) -> dict:
        os.makedirs(os.path.dirname(unit.target), exist_ok=True)
        return _core.transcode(
            unit.source, table_of(unit), unit.first_frame, unit.frames, unit.target, transcode
        )

    pool: ThreadPoolExecutor | None = None
    if ray_tasks is None:
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="stoker-etl")
        submit: Callable[[_Unit], Future] = lambda unit: pool.submit(run, unit)  # noqa: E731
    else:
        submit = lambda unit: ray_tasks.submit(  # noqa: E731
            unit.source, table_of(unit), unit.first_frame, unit.frames, unit.target
        )

    callback: Callable[[int, int], None] | None = None
    if progress is True and todo:
        label = "encoding videos"
        if report.units_resumed:
            label += f" ({report.units_resumed} of {len(units)} done before)"
        callback = ProgressBar(label)
    elif callable(progress):
        callback = progress
    failures: dict[_Unit, str] = {}
    error: BaseException | None = None
    done = 0
    queue = iter(todo)
    pending: dict[Future, _Unit] = {}

    def fill() -> None:
        """Keeps ``workers`` units going; none starts after a failure (raise policy)."""
        while error is None and len(pending) < workers:
            unit = next(queue, None)
            if unit is None:
                return
            pending[submit(unit)] = unit

    try:
        fill()
        while pending:
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in finished:
                unit = pending.pop(future)
                try:
                    result = future.result()
                except Error as e:
                    reason = (
                        f"episode {unit.episode} (camera {unit.camera!r}, frames "
                        f"{unit.first_frame}-{unit.first_frame + unit.frames - 1} of "
                        f"{unit.source}): {e}"
                    )
                    if on_error == "raise":
                        if error is None:
                            error = DecodeError(f"stoker etl: cannot materialize {reason}")
                        continue
                    failures[unit] = reason
                else:
                    state.record(unit.target, result)
                    report.units_transcoded += 1
                    report.transcode_seconds += result["seconds"]
                done += 1
                if callback is not None:
                    callback(done, len(todo))
            fill()
    finally:
        # Interrupted (Ctrl-C, or the progress callback raised), or failed: nothing new starts;
        # the running units finish, their files complete, and a rerun continues from there.
        wait(pending)
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        if isinstance(callback, ProgressBar):
            callback.close()
    if error is not None:
        raise error
    return failures


def _remove_unreferenced_videos(dst: str, keep: set) -> None:
    """Removes videos of DST that no kept unit wrote (e.g. other cameras of skipped episodes,
    cameras left out of this run)."""
    for path in glob.glob(os.path.join(dst, "videos", "**", "*.mp4"), recursive=True):
        if path not in keep:
            remove_file(path)


# ---------------------------------------------------------------------------------------------
# Rows and metadata


def _write_dataset(
    meta: LeRobotMetadata,
    kept: list[int],
    units: list[_Unit],
    cameras: Sequence[str],
    state: _RunState,
    dst: str,
    options: dict,
    report: EtlReport,
) -> None:
    """Writes DST's rows and metadata around the videos already there (see
    :mod:`stoker.datasets.lerobot.format`): the kept episodes renumbered 0, 1, ..., JSON columns
    typed, per-episode statistics kept, and ``meta/info.json`` last."""
    rows, json_names, typed_features = _kept_rows(meta, kept, options, report)
    lengths = meta.length[kept]
    chunks_size = meta.chunks_size
    data_mb = int(meta.info.get("data_files_size_in_mb", lerobot_format.DATA_FILES_SIZE_IN_MB))
    data_file = lerobot_format.data_files_by_size(
        lengths, max(rows.nbytes / max(rows.num_rows, 1), 1.0), data_mb
    )
    written = lerobot_format.write_data(dst, rows, lengths, data_file, chunks_size)
    report.data_bytes_out = sum(os.path.getsize(path) for path in written)
    report.frames = rows.num_rows

    # One video file per kept episode and camera, numbered by the episode's position in SRC.
    unit_of = {(u.position, u.camera): u for u in units}
    videos = {
        camera: lerobot_format.EpisodeVideos(
            file=np.asarray(kept, np.int64),
            from_timestamp=np.zeros(len(kept)),
            to_timestamp=np.array([state.duration(unit_of[(e, camera)].target) for e in kept]),
        )
        for camera in cameras
    }
    source_episodes = lerobot_format.read_episode_table(meta.source, meta.codebase_version).sort_by(
        "episode_index"
    )
    kept_rows = pa.array(kept)
    columns = lerobot_format.episode_columns(
        lengths,
        lerobot_format.task_lists(source_episodes).take(kept_rows),
        data_file,
        videos,
        chunks_size,
    )
    features = _kept_features(meta, cameras)
    for name in lerobot_format.stats_columns(source_episodes, features):
        columns[name] = source_episodes[name].take(kept_rows)
    lerobot_format.write_episodes(dst, columns, chunks_size)

    if meta.codebase_version == "v3.0":  # SRC's own table, as it is
        _copy_member(meta, lerobot_format.TASKS_PATH, dst)
    else:
        lerobot_format.write_tasks(dst, meta.tasks)
    stats = _kept_stats(meta, kept, source_episodes, features)
    if stats is not None:
        lerobot_format.write_stats(dst, stats)
    if meta.source.exists(lerobot_format.SUBTASKS_PATH):
        _copy_member(meta, lerobot_format.SUBTASKS_PATH, dst)

    info = lerobot_format.v30_info(
        meta.info,
        features=_output_features(meta, cameras, json_names, typed_features, options),
        num_episodes=len(kept),
        num_frames=rows.num_rows,
        num_tasks=len(lerobot_format.defined_tasks(meta.tasks)[0]),
        chunks_size=chunks_size,
        has_videos=bool(cameras),
        data_files_size_in_mb=data_mb,
        video_files_size_in_mb=int(
            meta.info.get("video_files_size_in_mb", lerobot_format.VIDEO_FILES_SIZE_IN_MB)
        ),
    )
    lerobot_format.write_info(dst, info)


def _kept_rows(
    meta: LeRobotMetadata, kept: list[int], options: dict, report: EtlReport
) -> tuple[pa.Table, list[str], dict[str, Any]]:
    """The rows of the kept episodes in dataset order, JSON columns typed, episodes and rows
    renumbered; with the names of the JSON columns and the features of their typed columns."""
    table = pa.concat_tables([read_data_table(meta, str(path)) for path in meta.data_files])
    table = table.replace_schema_metadata(None)  # HF's feature description would be stale
    rows = np.concatenate(
        [np.arange(meta.dataset_from_index[e], meta.dataset_to_index[e]) for e in kept]
    ).astype(np.int64)
    table = table.take(pa.array(rows))
    names = _json_column_names(table, options["json_columns"])
    source_index = table.column("index").to_numpy()
    source_episode = table.column("episode_index").to_numpy()
    source_frame = (
        table.column("frame_index").to_numpy() if "frame_index" in table.column_names else None
    )

    def row_label(r: int) -> str:
        where = f"episode {source_episode[r]}"
        if source_frame is not None:
            where += f", frame {source_frame[r]}"
        return f"row {source_index[r]} ({where})"

    table, typed, typed_features = convert_json_columns(table, names, row_label=row_label)
    report.typed_columns = [t.to_dict() for t in typed]
    new_episode = np.repeat(np.arange(len(kept), dtype=np.int64), meta.length[kept])
    table = _replace_column(table, "episode_index", pa.array(new_episode))
    table = _replace_column(table, "index", pa.array(np.arange(len(rows), dtype=np.int64)))
    return table, names, typed_features


def _output_features(
    meta: LeRobotMetadata,
    cameras: Sequence[str],
    json_names: list[str],
    typed_features: dict[str, Any],
    options: dict,
) -> dict[str, Any]:
    """info.json's features of DST: the kept cameras at the new size and codec, each JSON
    column replaced by its typed columns, the others as in SRC."""
    height, width = options["size"]
    features = {}
    for name, feature in meta.info["features"].items():
        if feature.get("dtype") == "video":
            if name in cameras:
                features[name] = lerobot_format.video_feature(
                    feature, height, width, options["codec"]
                )
        elif name in json_names:  # a JSON column: its typed columns, in its place
            features.update(
                {n: f for n, f in typed_features.items() if n == name or n.startswith(name + ".")}
            )
        else:
            features[name] = feature
    for typed_name, feature in typed_features.items():  # JSON columns info.json did not list
        features.setdefault(typed_name, feature)
    return features


def _json_column_names(table: pa.Table, json_columns) -> list[str]:
    if json_columns == "auto":
        return json_candidates(table)
    if json_columns == "none" or json_columns is None:
        return []
    if isinstance(json_columns, str):
        json_columns = [json_columns]
    missing = [c for c in json_columns if c not in table.column_names]
    if missing:
        raise ValueError(
            f"json_columns {missing} are not columns of the data; the columns are "
            f"{table.column_names}"
        )
    return list(json_columns)


def _replace_column(table: pa.Table, name: str, values: pa.Array) -> pa.Table:
    at = table.column_names.index(name)
    return table.set_column(at, pa.field(name, values.type), values)


def _kept_features(meta: LeRobotMetadata, cameras: Sequence[str]) -> set:
    return {name for name in meta.features if name not in meta.cameras or name in cameras}


def _copy_member(meta: LeRobotMetadata, member: str, dst: str) -> None:
    """Copies file ``member`` of SRC to the same place in DST, atomically."""
    if not meta.source.remote:
        copy_file(meta.source.url(member), os.path.join(dst, member))
        return
    data = meta.source.read_bytes(member, "meta file")
    write_bytes(os.path.join(dst, member), data)


def _kept_stats(
    meta: LeRobotMetadata, kept: list[int], source_episodes: pa.Table, features: set
) -> dict | None:
    """meta/stats.json of DST: the kept episodes' statistics aggregated (from SRC's per-episode
    ones); SRC's own stats.json when it lacks those of some kept episode; None when it has
    neither."""
    per_episode = lerobot_format.read_episode_stats(meta.source, source_episodes)
    episodes = [int(meta.episode_index[e]) for e in kept]
    if per_episode is None or not all(e in per_episode for e in episodes):
        return lerobot_format.read_stats(meta.source)
    return lerobot_format.aggregate_stats([per_episode[e] for e in episodes], features)


# ---------------------------------------------------------------------------------------------
# Verification


def _verify(
    meta: LeRobotMetadata, src_index, dst_index, kept: list[int], cameras: Sequence[str]
) -> float:
    """Checks, per kept episode and camera, that DST's frames are SRC's: the same count, and
    each frame's time from the episode's start equal within TIME_TOLERANCE_S (from the frame
    tables of both indexes: nothing is decoded). Returns the largest difference; raises
    DatasetError naming every episode that differs."""
    if dst_index.num_episodes != len(kept):
        raise DatasetError(
            f"verification failed: DST has {dst_index.num_episodes} episodes, expected {len(kept)}"
        )
    worst = 0.0
    problems = []
    tables: dict[tuple[int, int], np.ndarray] = {}

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
            expected = pts(src_index, int(src_videos[e]))[src_first[e] : src_first[e] + n]
            dst_all = pts(dst_index, int(dst_videos[k]))
            got = dst_all[dst_first[k] : dst_first[k] + n]
            where = (
                f"episode {meta.episode_index[e]} (DST episode {k}), camera {camera!r}, "
                f"{dst_index.video_files[int(dst_videos[k])]}"
            )
            if len(dst_all) != n or len(got) != n:
                problems.append(f"{where}: {len(dst_all)} frames, expected {n}")
                continue
            error = float(np.max(np.abs((got - got[0]) - (expected - expected[0]))))
            worst = max(worst, error)
            if error > TIME_TOLERANCE_S:
                problems.append(f"{where}: frame times differ by up to {error * 1e6:.3f} us")
    if problems:
        raise DatasetError(
            "verification failed: "
            + "; ".join(problems[:20])
            + (f"; and {len(problems) - 20} more" if len(problems) > 20 else "")
        )
    return worst


# ---------------------------------------------------------------------------------------------
# Command line


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "src", help="the LeRobot dataset to read (v2.1 or v3.0): a folder or an s3:// URL"
    )
    parser.add_argument(
        "dst",
        help="the folder to write: a new one, or the same folder again "
        "to continue an interrupted run",
    )
    parser.add_argument(
        "--size",
        required=True,
        metavar="WxH",
        help="output frame size, width x height, e.g. 224x224 (even numbers)",
    )
    parser.add_argument(
        "--codec",
        choices=CODECS,
        default="h264",
        help="h264 (libx264, the default) or av1 (libsvtav1)",
    )
    parser.add_argument(
        "--gop",
        type=int,
        default=DEFAULT_GOP,
        help=f"frames from one keyframe to the next (default {DEFAULT_GOP})",
    )
    parser.add_argument(
        "--crf",
        type=int,
        default=None,
        help="constant rate factor (default: 23 for h264, 30 for av1)",
    )
    parser.add_argument(
        "--preset", default=None, help="encoder preset (default: medium for h264, 8 for av1)"
    )
    parser.add_argument(
        "--no-fast-decode",
        action="store_true",
        help="encode without the encoders' fast-decode tuning (smaller files, slower decoding)",
    )
    parser.add_argument(
        "--cameras",
        nargs="+",
        default=None,
        metavar="KEY",
        help="video keys to keep (default: all)",
    )
    parser.add_argument(
        "--workers", type=int, default=None, help="videos encoded at once (default: one per CPU)"
    )
    parser.add_argument(
        "--on-error",
        choices=("raise", "skip"),
        default="raise",
        help="an episode that cannot be decoded stops the run (raise, the "
        "default) or is left out and reported (skip)",
    )
    parser.add_argument(
        "--json-columns",
        default="auto",
        metavar="auto|none|COL,COL",
        help="string columns to turn into typed columns (default: auto, every "
        "column of JSON objects or arrays)",
    )
    parser.add_argument(
        "--interpolation",
        choices=("bilinear", "area"),
        default="bilinear",
        help="resampling to the output size (default bilinear)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.add_argument(
        "--ray",
        nargs="?",
        const="auto",
        default=None,
        metavar="ADDRESS",
        help="encode on a Ray cluster: its address, 'local' for a new local one, or nothing "
        "for RAY_ADDRESS's (else a new local one); DST must be visible to every node",
    )
    add_storage_arguments(parser)


def main(args: argparse.Namespace) -> int:
    from stoker.cli import report_errors

    json_columns = args.json_columns
    if json_columns not in ("auto", "none"):
        json_columns = [c for c in json_columns.split(",") if c]
    return report_errors(
        "etl",
        lambda: materialize(
            args.src,
            args.dst,
            size=args.size,
            codec=args.codec,
            gop=args.gop,
            crf=args.crf,
            preset=args.preset,
            fast_decode=not args.no_fast_decode,
            cameras=args.cameras,
            workers=args.workers,
            on_error=args.on_error,
            json_columns=json_columns,
            interpolation=args.interpolation,
            progress=not args.no_progress,
            storage_options=storage_options_from_args(args),
            ray=args.ray or False,
        ),
    )
