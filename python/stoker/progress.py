"""The progress bar of stoker's long runs (indexing videos, ``stoker etl``, ``stoker shard``): one
line with the count, the rate and the time left, redrawn in place on a terminal; elsewhere (a
log file, a job's captured stderr) a line every 5 s, logged at INFO by the ``stoker.progress``
logger, so a library run is quiet unless the application shows INFO logs (the ``stoker``
command does). Called from the thread that runs the work."""

from __future__ import annotations

import logging
import math
import sys
import time

logger = logging.getLogger(__name__)


class ProgressBar:
    """A one-line progress bar on stderr: count, rate, ETA. Redrawn at most 10 times a second."""

    def __init__(self, label: str, stream=None):
        self._label = label
        self._stream = stream if stream is not None else sys.stderr
        self._started = time.monotonic()
        self._last_draw = 0.0
        self._drawn = False
        self._finished = False  # the last line (done == total) is drawn once
        self._tty = getattr(self._stream, "isatty", lambda: False)()
        self._logged = stream is None  # stderr that is not a terminal: lines go to the log

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if done < total and now - self._last_draw < (0.1 if self._tty else 5.0):
            return
        if done >= total:
            if self._finished:
                return
            self._finished = True
        self._last_draw = now
        elapsed = max(now - self._started, 1e-9)
        rate = done / elapsed
        eta = (total - done) / rate if rate > 0 else math.inf
        width = 24
        filled = int(width * done / total) if total else width
        line = (
            f"{self._label} [{'#' * filled}{'.' * (width - filled)}] {done}/{total} "
            f"{rate:.1f}/s ETA {_clock(eta)}"
        )
        if not self._tty and self._logged:
            logger.info("%s", line)
            return
        self._stream.write(("\r" if self._tty else "") + line + ("" if self._tty else "\n"))
        self._stream.flush()
        self._drawn = True

    def close(self) -> None:
        if self._drawn and self._tty:
            self._stream.write("\n")
            self._stream.flush()


def _clock(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
