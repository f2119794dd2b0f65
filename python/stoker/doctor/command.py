"""``stoker doctor DATASET``: the doctor on the command line, with a synthetic step."""

from __future__ import annotations

import argparse
import json

from stoker.doctor.measure import diagnose, synthetic_step
from stoker.lerobot import LeRobotDataset, WindowSpec
from stoker.lerobot_meta import image_cameras, read_lerobot_metadata
from stoker.loader import Loader
from stoker.storage import S3Options, add_storage_arguments, storage_options_from_args


def _load_spec(path: str | None) -> WindowSpec | None:
    if path is None:
        return None
    with open(path) as f:
        text = f.read()
    if path.endswith((".yaml", ".yml")):
        try:
            import yaml
        except ImportError:
            raise SystemExit(
                "reading a YAML spec needs PyYAML (pip install pyyaml); or give the spec as JSON"
            ) from None
        value = yaml.safe_load(text)
    else:
        value = json.loads(text)
    if not isinstance(value, dict):
        raise SystemExit(f"{path}: a spec is a mapping (delta_timestamps, size, layout)")
    known = {"delta_timestamps", "delta_indices", "size", "layout", "tolerance_s"}
    unknown = set(value) - known
    if unknown:
        raise SystemExit(f"{path}: unknown spec keys {sorted(unknown)}; known: {sorted(known)}")
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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "dataset", help="a LeRobot dataset (v2.1 or v3.0): a folder, or an s3:// URL"
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
        "--steps", type=int, default=100, help="steps per measurement (default 100)"
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


def main(args: argparse.Namespace) -> int:
    storage_options = storage_options_from_args(args)
    spec = _load_spec(args.spec) or default_spec(args.dataset, storage_options)
    ds = LeRobotDataset(args.dataset, spec, storage_options=storage_options)
    if args.ray is not None:
        from stoker.doctor import ray_sweep

        return ray_sweep.main(args, ds)
    loader = Loader(ds, batch_size=args.batch_size, threads=args.threads, device=args.device)
    report = diagnose(
        loader, step=synthetic_step(args.step_ms), steps=args.steps, sweep=not args.no_sweep
    )
    print(report.summary())
    path = report.write_report(args.report)
    print(f"\nReport: {path}")
    return 0
