"""Files as stoker writes them into datasets: atomically. And JSON files read with checks.

Every file is written under a temporary name in its folder, then flushed to disk and renamed to
its final name, and the folder flushed, by the C++ core's ``commit_file`` (the one definition of
a durable write, which the index and the transcoder use too): a file with its final name is
always complete whatever interrupts the writer (a crash, Ctrl-C, a full disk). A temporary left
behind ends in ``.partial``.

A command that writes a folder (``stoker etl``, ``stoker shard``) holds a :class:`FolderLock` on
it while it runs, so a second run into the same folder refuses at once instead of racing the
first over the same temporary files.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from typing import IO, Any, Callable

import pyarrow as pa
import pyarrow.parquet as pq

from stoker import _core
from stoker._core import DatasetError, InvalidArgumentError


def checked_path(path: str | os.PathLike, what: str) -> str:
    """``path`` as a ``str``, refused with :class:`stoker.InvalidArgumentError` naming ``what``
    when it is not a path or holds a NUL character (which the C library would cut it at)."""
    try:
        text = os.fspath(path)
    except TypeError:
        raise InvalidArgumentError(
            f"{what} must be a path (str or os.PathLike), got {type(path).__name__}"
        ) from None
    if isinstance(text, bytes):
        text = os.fsdecode(text)
    if "\0" in text:
        raise InvalidArgumentError(f"{what} {text!r} holds a NUL character")
    return text


def read_json(path: str, what: str = "meta file") -> dict[str, Any]:
    """The JSON object in file ``path``.

    Raises:
        stoker.DatasetError: naming ``what`` and the file, when it is missing, unreadable, not
            JSON, or holds something else than an object.
    """
    if not os.path.isfile(path):
        raise DatasetError(f"missing {what} {path}")
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except (OSError, ValueError) as e:
        raise DatasetError(f"cannot read {what} {path}: {e}") from None
    if not isinstance(value, dict):
        raise DatasetError(f"{what} {path} does not hold a JSON object")
    return value


def write_json(path: str, value: Any) -> None:
    """Writes ``value`` as indented JSON, atomically."""

    def write(temporary: str) -> None:
        with open(temporary, "w", encoding="utf-8") as f:
            json.dump(value, f, indent=4)
            f.write("\n")

    _atomic(path, write)


def write_parquet(table: pa.Table, path: str) -> None:
    """Writes ``table`` as a Parquet file, atomically."""
    _atomic(path, lambda temporary: pq.write_table(table, temporary))


def write_bytes(path: str, data: bytes) -> None:
    """Writes ``data`` as a file, atomically."""

    def write(temporary: str) -> None:
        with open(temporary, "wb") as f:
            f.write(data)

    _atomic(path, write)


def copy_file(source: str, path: str) -> None:
    """Copies file ``source`` to ``path``, atomically."""
    _atomic(path, lambda temporary: shutil.copyfile(source, temporary))


def remove_file(path: str) -> None:
    """Removes a file; one that is not there is not an error."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


class FolderLock:
    """An exclusive lock on the folder ``dst`` a command writes: the file ``<state>/lock`` held
    with ``flock`` while the ``with`` block runs. The kernel lets go of it when the process
    ends, however it ends, so a crashed run never leaves a stale lock.

    Raises (on entering):
        stoker.InvalidArgumentError: ``another <command> run is writing <dst>``, when another
            process holds it.
    """

    def __init__(self, state: str, dst: str, command: str):
        self._state, self._dst, self._command = state, dst, command
        self._file: IO[str] | None = None

    def __enter__(self) -> FolderLock:
        os.makedirs(self._state, exist_ok=True)
        handle = open(os.path.join(self._state, "lock"), "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            raise InvalidArgumentError(
                f"another {self._command} run is writing {self._dst}"
            ) from None
        self._file = handle
        return self

    def __exit__(self, *exc: object) -> None:
        if self._file is not None:
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None


def _atomic(path: str, write: Callable[[str], object]) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    temporary = f"{path}.{os.getpid()}.partial"
    try:
        write(temporary)
        _core.commit_file(temporary, path)
    except BaseException:
        remove_file(temporary)
        raise
