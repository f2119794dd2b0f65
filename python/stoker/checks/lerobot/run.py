"""One LeRobot check's run: its options and findings (at most 50 listed per check, then
one more that counts the rest), the names of the checks, and the pools work is spread on."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any

from stoker import _core
from stoker.checks.findings import CheckReport, Finding
from stoker.progress import ProgressBar

#: LeRobot's default ``tolerance_s``: how far a frame may sit from its row's time.
DEFAULT_TOLERANCE_S = 1e-4

#: Every LeRobot check, in the order they run (docs/check.md describes each).
CHECKS = (
    "info",
    "files",
    "unreferenced_files",
    "episodes",
    "counts",
    "tasks",
    "rows",
    "timestamps",
    "features",
    "values",
    "videos",
    "fps",
    "missing_frames",
    "duplicate_frames",
    "extra_frames",
    "overlapping_episodes",
    "camera_offsets",
    "drift",
    "stats",
    "stats_consistency",
    "index",
)
DEEP_CHECKS = ("decode", "frame_format", "packets", "images")

# Findings of one kind listed one by one before the rest are summed up in one more.
_MAX_FINDINGS_PER_CHECK = 50


class Run:
    """One check: the dataset's root, the options, and the findings so far."""

    def __init__(self, report: CheckReport, tolerance_s: float, progress: bool, deep: bool):
        self.report = report
        self.tolerance_s = tolerance_s
        self.progress = progress
        self.deep = deep
        self._counts: dict[str, int] = {}

    def add(self, severity: str, check: str, message: str, fix: str = "", **where: Any) -> None:
        """Adds a finding; past _MAX_FINDINGS_PER_CHECK of one check, only counts them."""
        count = self._counts.get(check, 0) + 1
        self._counts[check] = count
        if count <= _MAX_FINDINGS_PER_CHECK:
            self.report.findings.append(Finding(severity, check, message, fix, **where))

    def close(self) -> None:
        for check, count in self._counts.items():
            if count > _MAX_FINDINGS_PER_CHECK:
                worst = min(
                    (f.severity for f in self.report.findings if f.check == check),
                    key=("error", "warning", "info").index,
                )
                self.report.findings.append(
                    Finding(
                        worst,
                        check,
                        f"{count - _MAX_FINDINGS_PER_CHECK} more findings of this check are "
                        f"not listed ({count} in all)",
                        "fix the ones listed and check again",
                    )
                )

    def has_errors(self, checks: Iterable[str] | None = None) -> bool:
        wanted = None if checks is None else set(checks)
        return any(
            f.severity == "error" and (wanted is None or f.check in wanted)
            for f in self.report.findings
        )


def listing(values: Iterable[Any], limit: int = 10) -> str:
    items = [str(v) for v in values]
    text = ", ".join(items[:limit])
    return text + (f" and {len(items) - limit} more" if len(items) > limit else "")


def parallel(function: Callable[[Any], Any], items: Sequence[Any], remote: bool) -> list[Any]:
    """function(item) for every item, on a pool: one thread per usable core locally, 32
    requests in flight for a remote dataset (they wait on latency, not on the cores)."""
    if len(items) < 2:
        return [function(item) for item in items]
    threads = 32 if remote else _core.usable_cores()
    with ThreadPoolExecutor(max_workers=min(len(items), threads)) as pool:
        return list(pool.map(function, items))


def pooled(
    function: Callable[[Any], Any],
    items: Sequence[Any],
    threads: int,
    label: str | None,
    weights: Sequence[int] | None = None,
) -> list[Any]:
    """function(item) for every item on a pool of ``threads`` threads, in order; with a
    ``label``, a progress bar (count, rate, ETA) drawn by this thread as items finish, each
    counting its weight (default 1)."""
    if not items:
        return []
    weights = [1] * len(items) if weights is None else list(weights)
    total = sum(weights)
    bar = ProgressBar(label) if label else None
    results: list[Any] = [None] * len(items)
    try:
        with ThreadPoolExecutor(max_workers=max(1, min(threads, len(items)))) as pool:
            futures = {pool.submit(function, item): k for k, item in enumerate(items)}
            done = 0
            for future in as_completed(futures):
                k = futures[future]
                results[k] = future.result()
                done += weights[k]
                if bar is not None:
                    bar(done, total)
    finally:
        if bar is not None:
            bar.close()
    return results
