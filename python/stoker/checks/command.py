"""``stoker check DATASET [--deep] [--json] [--report DIR] [--tolerance-s S]``: what is wrong with
a dataset, found before it costs a training run (docs/check.md).

Prints the findings, errors first (``--json``: the report as JSON instead), and with ``--report
DIR`` writes ``DIR/report.html`` (findings grouped by check, a heat strip of where they are) and
``DIR/report.json``. Exit status: 0 when no finding is an error, 1 when one is (so that it can
gate a pipeline), 2 when the dataset could not be checked at all (no such path, bad arguments).
"""

from __future__ import annotations

import argparse
import sys

from stoker.io.storage import add_storage_arguments, storage_options_from_args


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "dataset",
        help="a LeRobot dataset (folder, s3://, https://), a shard folder or pattern "
        "(train-{000..099}.tar, *.tar)",
    )
    parser.add_argument(
        "--deep",
        action="store_true",
        help="also decode every video frame and image, on all cores (slower; finds damage)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--report", metavar="DIR", default=None, help="write DIR/report.html and DIR/report.json"
    )
    parser.add_argument(
        "--tolerance-s",
        type=float,
        default=None,
        help="how far a frame may sit from its row's timestamp (default 1e-4 s, LeRobot's)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    add_storage_arguments(parser)


def main(args: argparse.Namespace) -> int:
    from stoker._core import Error
    from stoker.checks import check

    try:
        if args.tolerance_s is not None and not args.tolerance_s >= 0:
            raise ValueError(f"--tolerance-s must be non-negative, got {args.tolerance_s}")
        options = storage_options_from_args(args)
        if options is not None:
            from stoker.io.storage import open_dataset_root

            open_dataset_root(args.dataset, options)  # registers the options for its URLs
        report = check(
            args.dataset,
            deep=args.deep,
            progress=not args.quiet and not args.json,
            tolerance_s=args.tolerance_s,
        )
    except KeyboardInterrupt:
        print("stoker check: interrupted", file=sys.stderr)
        return 130
    except (Error, ValueError, TypeError, OSError) as e:
        print(f"stoker check: error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    if args.json:
        print(report.to_json())
    else:
        print(report)
    if args.report:
        from stoker.checks.report import write_report

        try:
            path = write_report(report, args.report)
        except OSError as e:
            print(f"stoker check: error: cannot write the report: {e}", file=sys.stderr)
            return 2
        print(f"Report: {path}", file=sys.stderr if args.json else sys.stdout)
    return 0 if report.ok else 1
