"""stoker etl's units of work, (episode, camera) transcodes, run as Ray tasks.

:func:`stoker.writers.etl.materialize` keeps the run (journal, resumption, rows, verification) on
the driver and hands each unit to :meth:`TranscodeTasks.submit`, which returns a
``concurrent.futures.Future`` as a thread pool's ``submit`` does. The task transcodes with the
same native call and options as a local run, so the files are the same bytes; DST must be a
folder every node sees at the same path (a local cluster, or shared storage). The cluster is
joined by :func:`stoker.integrations.ray.cluster.connect`.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

from stoker import _core
from stoker.io.storage import S3Options, open_dataset_root
from stoker.writers.encoding import transcode_options

try:
    import ray
except ImportError as error:  # pragma: no cover - depends on the environment
    raise ImportError(
        "stoker etl --ray needs Ray: pip install 'ray[data]' (stoker itself does not need it)"
    ) from error


def _transcode(
    source_root: str | None,
    storage_options: S3Options | None,
    source: str,
    frame_table: bytes,
    first_frame: int,
    frames: int,
    target: str,
    options: dict[str, Any],
) -> dict[str, Any]:
    """One unit, in a Ray worker. A stoker error comes back as ``{"error": (kind, message)}``:
    the driver raises it as the same :class:`stoker.Error` subclass with the same words."""
    import os

    if source_root is not None:
        open_dataset_root(source_root, storage_options)  # registers the options in this worker
    os.makedirs(os.path.dirname(target), exist_ok=True)
    try:
        return _core.transcode(
            source, frame_table, first_frame, frames, target, transcode_options(options)
        )
    except _core.Error as error:
        return {"error": (type(error).__name__, str(error))}


_remote_transcode = ray.remote(num_cpus=1, max_retries=0)(_transcode)


class TranscodeTasks:
    """Submits units to the Ray cluster this process is connected to (see
    :func:`stoker.integrations.ray.cluster.connect`).

    Args:
        options: the run's options (materialize's ``options`` dict).
        source_root, storage_options: a remote source's URL and options, registered in each
            worker; ``None`` for a local source.
    """

    def __init__(
        self,
        options: dict[str, Any],
        source_root: str | None = None,
        storage_options: S3Options | None = None,
    ):
        self._options = options
        self._source_root = source_root
        self._storage_options = storage_options

    def submit(
        self, source: str, frame_table: bytes, first_frame: int, frames: int, target: str
    ) -> Future:
        reference = _remote_transcode.remote(
            self._source_root,
            self._storage_options,
            source,
            frame_table,
            first_frame,
            frames,
            target,
            self._options,
        )
        result: Future = Future()

        def done(answer: Future) -> None:
            try:
                value = answer.result()
            except BaseException as error:  # noqa: BLE001 - handed to the waiting driver
                result.set_exception(error)
                return
            if "error" in value:
                kind, message = value["error"]
                result.set_exception(getattr(_core, kind, _core.Error)(message))
            else:
                result.set_result(value)

        reference.future().add_done_callback(done)
        return result
