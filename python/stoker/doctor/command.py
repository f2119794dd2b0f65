"""``stoker doctor DATASET``: the doctor on the command line, with a synthetic step."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings

from stoker._core import Error
from stoker.datasets.lerobot.dataset import LeRobotDataset, WindowSpec
from stoker.datasets.lerobot.metadata import image_cameras, read_lerobot_metadata
from stoker.datasets.shards import FOLDER_INDEX, Image, ShardDataset
from stoker.doctor.measure import diagnose, synthetic_step
from stoker.doctor.report import plotting_missing
from stoker.io.storage import S3Options, add_storage_arguments, storage_options_from_args
from stoker.loader import Loader


def _load_spec(path: str | None) -> WindowSpec | None:
    if path is None:
        return None
    with open(path) as f:
        text = f.read()
    if path.endswith((".yaml", ".yml")):
        try:
            import yaml
        except ImportError:
            raise ValueError(
                "reading a YAML spec needs PyYAML (pip install 'stoker[doctor]'); or give the "
                "spec as JSON"
            ) from None
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise ValueError(f"{path}: not valid YAML: {' '.join(str(e).split())}") from None
    else:
        try:
            value = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: not valid JSON: {e}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{path}: a spec is a mapping (delta_timestamps, size, layout)")
    known = {"delta_timestamps", "delta_indices", "size", "layout", "tolerance_s"}
    unknown = set(value) - known
    if unknown:
        raise ValueError(f"{path}: unknown spec keys {sorted(unknown)}; known: {sorted(known)}")
    delta = {
        k: (tuple(v) if isinstance(v, list) and len(v) == 2 and isinstance(v[0], str) else v)
        for k, v in (value.get("delta_timestamps") or {}).items()
    }
    return WindowSpec(
        delta_timestamps=delta,
        delta_indices=value.get("delta_indices"),
        size=value.get("size"),
        layout=value.get("layout", "TCHW"),
        tolerance_s=value.get("tolerance_s", 1e-4),
    )


def default_spec(dataset_root: str, storage_options: S3Options | None = None) -> WindowSpec:
    """Every camera's last three frames at 224x224 (video and image features alike), and the
    next 16 actions when there are."""
    meta = read_lerobot_metadata(dataset_root, storage_options)
    fps = meta.fps
    cameras = [*meta.cameras, *image_cameras(meta)]
    delta = {camera: [-2 / fps, -1 / fps, 0.0] for camera in cameras}
    if "action" in meta.features:
        delta["action"] = [k / fps for k in range(16)]
    return WindowSpec(delta_timestamps=delta, size=(224, 224))


def is_shard_dataset(dataset: str) -> bool:
    """Whether ``dataset`` names tar shards (a .tar, a brace pattern or glob of them, or a
    folder ``stoker shard`` wrote) rather than a LeRobot dataset."""
    if dataset.endswith(".tar") or any(c in dataset for c in "{*?["):
        return True
    return os.path.isfile(os.path.join(dataset, FOLDER_INDEX))


def spec_summary(dataset: str, spec_file: str | None) -> str:
    """What the doctor reads of ``dataset``, as its report's configuration says it."""
    if is_shard_dataset(dataset):
        return "none: each shard sample's image at 224x224"
    return spec_file or "none: each camera's last 3 frames at 224x224, 16 actions"


def _open_dataset(args: argparse.Namespace, storage_options: S3Options | None):
    """The dataset the doctor measures: a LeRobot dataset with the window spec, or shards read
    as images at 224x224 (a spec file of ShardSpec fields is not taken yet: --spec is for
    LeRobot datasets)."""
    if is_shard_dataset(args.dataset):
        if args.spec:
            raise ValueError("--spec describes a LeRobot window; shards are read as images")
        return ShardDataset(
            args.dataset, {"image": Image(size=(224, 224))}, storage_options=storage_options
        )
    spec = _load_spec(args.spec) or default_spec(args.dataset, storage_options)
    return LeRobotDataset(args.dataset, spec, storage_options=storage_options)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "dataset",
        help="a LeRobot dataset (v2.1 or v3.0): a folder, or an s3:// URL; or tar shards: a "
        "folder stoker shard wrote, a .tar, a brace pattern or a glob (read as 224x224 images)",
    )
    parser.add_argument(
        "--spec",
        help="window spec, YAML or JSON: delta_timestamps, size, "
        "layout (default: each camera's last 3 frames at 224x224, 16 actions)",
    )
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument(
        "--step-ms",
        type=float,
        default=120.0,
        help="the synthetic training step's cost (default 120 ms)",
    )
    parser.add_argument(
        "--threads", type=int, default=None, help="loader threads (default: all cores)"
    )
    parser.add_argument(
        "--steps",
        type=_positive_int,
        default=None,
        help="at most this many steps per measurement (default: until each rate is known "
        "to +-5%%, within the time budget)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="rates to +-10%% in about half the time (30 s of measurements)",
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=None,
        metavar="SECONDS",
        help="the measurements' time, roughly (default 60, or 30 with --quick)",
    )
    parser.add_argument("--device", default=None, help="e.g. cuda (default: host memory)")
    parser.add_argument(
        "--report",
        default="stoker-doctor",
        help="folder for the HTML report (default ./stoker-doctor)",
    )
    parser.add_argument("--no-sweep", action="store_true", help="skip the thread sweep")
    parser.add_argument(
        "--ray",
        metavar="ADDRESS|local",
        default=None,
        help="decode in stoker read tasks on a Ray cluster and sweep the CPUs they get "
        "(--threads: CPUs per task); see docs/scale-out.md",
    )
    add_storage_arguments(parser)


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 4:
        raise argparse.ArgumentTypeError(f"must be at least 4, got {value}")
    return value


def _process_age() -> float:
    """Seconds since this process started (0 where /proc does not say)."""
    try:
        with open("/proc/self/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0
    return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))


def main(args: argparse.Namespace) -> int:
    """Runs the doctor; a problem with the arguments or the dataset is one line on stderr and
    exit code 2. Without ``--budget`` the whole command, opening the dataset and writing the
    report included, aims at 60 s (30 s with ``--quick``)."""
    started = time.perf_counter() - _process_age()
    try:
        if args.budget is not None and not args.budget > 0:
            raise ValueError(f"--budget must be positive, got {args.budget}")
        if args.threads is not None and args.threads < 1:
            raise ValueError(f"--threads must be at least 1, got {args.threads}")
        storage_options = storage_options_from_args(args)
        ds = _open_dataset(args, storage_options)
        if args.ray is not None:
            from stoker.doctor import ray_sweep

            return ray_sweep.main(args, ds)
        loader = Loader(ds, batch_size=args.batch_size, threads=args.threads, device=args.device)
    except (Error, ValueError, TypeError, OSError) as e:
        print(f"stoker doctor: error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    config = {
        "dataset": args.dataset,
        "spec_file": spec_summary(args.dataset, args.spec),
        "step_ms": args.step_ms,
    }
    budget = args.budget
    if budget is None:
        # Starting Python, opening the dataset, the last batch of each phase (it may run past
        # the phase's time) and writing the report come off it.
        total = 30.0 if args.quick else 60.0
        budget = max(total - (time.perf_counter() - started) - 6.0, total / 4)
    try:
        report = diagnose(
            loader,
            step=synthetic_step(args.step_ms),
            steps=args.steps,
            sweep=not args.no_sweep,
            quick=args.quick,
            budget_s=budget,
            config=config,
        )
    finally:
        loader.close()
    print(report.summary())
    with warnings.catch_warnings():  # said here, next to the report's path
        warnings.simplefilter("ignore")
        path = report.write_report(args.report)
    print(f"\nReport: {path}")
    missing = plotting_missing()
    if missing is not None:
        print(f"  ({missing})")
    return 0
