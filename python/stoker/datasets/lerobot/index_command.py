"""``stoker index DATASET``: build a LeRobot dataset's episode index ahead of a job, where its
ranks find it, so that they map it and none scans the videos again.

A local dataset's index goes into ``<dataset>/.stoker/`` (or, read-only, the cache folder);
a remote one's into the cache folder (``--cache-dir``, else ``$STOKER_CACHE_DIR``, else
``~/.cache/stoker``), keyed by the objects' versions. ``--cameras`` builds the index of those
cameras only (as a job opening the dataset with ``cameras=[...]`` maps it), ``--on-error skip``
records the episodes a video cannot serve instead of refusing the index. Give a job's ranks
the same cache folder (one on a file system their nodes share) and they find the index built.
Ranks that open a dataset whose index is not built yet take turns on a lock: one builds, the
others wait and map it.
"""

from __future__ import annotations

import argparse
import os
import time

from stoker.datasets.lerobot.index import (
    counted,
    default_cache_dir,
    indexed_cameras,
    listed,
    load_index,
)
from stoker.datasets.lerobot.metadata import read_lerobot_metadata
from stoker.io.storage import add_storage_arguments, is_url, storage_options_from_args


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dataset", help="a LeRobot dataset: a folder, s3://bucket/prefix, https://")
    parser.add_argument(
        "--cache-dir",
        default=None,
        help="where the index of a remote or read-only dataset goes "
        "(default: $STOKER_CACHE_DIR, else ~/.cache/stoker)",
    )
    parser.add_argument(
        "--cameras",
        nargs="+",
        default=None,
        metavar="KEY",
        help="index only these cameras, as a job opening the dataset with cameras=[...] reads "
        "it (default: every camera)",
    )
    parser.add_argument(
        "--on-error",
        choices=("raise", "skip"),
        default="raise",
        help="an episode some camera's video cannot serve: refuse the index (raise, default), "
        "or record it in the index and say which (skip), for datasets opened with "
        "on_error='skip'",
    )
    parser.add_argument("--rebuild", action="store_true", help="build even if one is current")
    parser.add_argument("--threads", type=int, default=None, help="default: one per core")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    add_storage_arguments(parser)


def main(args: argparse.Namespace) -> int:
    from stoker.cli import report_errors

    return report_errors("index", lambda: _index(args))


def _index(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    options = storage_options_from_args(args)
    cameras = args.cameras
    if cameras is not None:
        # Every camera named is the full index, which a dataset opened without cameras= maps.
        meta = read_lerobot_metadata(args.dataset, options)
        if indexed_cameras(meta, cameras) == indexed_cameras(meta, None):
            cameras = None
    index = load_index(
        args.dataset,
        rebuild=args.rebuild,
        threads=args.threads,
        progress=not args.quiet,
        cache_dir=args.cache_dir,
        storage_options=options,
        cameras=cameras,
        on_error=args.on_error,
    )
    seconds = time.perf_counter() - started
    what = "built" if index.report is not None else "already current, found"
    print(
        f"stoker index: {args.dataset}: {index.num_episodes} episodes, {index.num_rows} rows, "
        f"{len(index.video_files)} video files: {what} in {seconds:.2f} s"
    )
    print(f"  index: {index.path} ({os.path.getsize(index.path) / 1e6:.1f} MB)")
    if index.broken_episodes:
        episodes = sorted({b.episode for b in index.broken_episodes})
        print(
            f"  {counted(len(episodes), 'episode')} its videos cannot serve, recorded in the "
            f"index (a dataset opened with on_error='skip' leaves them out):"
            f"{listed(index.broken_episodes)}"
        )
    if is_url(args.dataset) or not index.path.startswith(os.path.abspath(args.dataset)):
        folder = os.path.abspath(args.cache_dir) if args.cache_dir else default_cache_dir()
        print(
            f"  ranks find it with STOKER_CACHE_DIR={folder} "
            "(a folder their nodes share, or this one copied to each node)"
        )
    else:
        print("  ranks find it beside the dataset")
