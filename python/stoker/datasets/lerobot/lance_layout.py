"""LeRobot datasets stored as Lance (``"storage_format": "lance"`` in ``meta/info.json``).

The layout is the one ``lerobot-lance-convert`` (PyPI ``lerobot-lancedb`` 0.3.1) writes from a
v3.0 dataset, and LeRobot's ``LanceDBDataset`` reads:

* ``meta/``: the v3.0 meta files, copied (info.json stamped with the storage format);
* ``frames.lance``: one row per frame, in ``index`` order, the data files' columns with dots in
  their names turned into underscores (``observation.state`` -> ``observation_state``) and
  vector features as fixed-size lists;
* ``videos.lance``: one row per MP4 of the v3.0 copy (``video_key``, ``chunk_index``,
  ``file_index``, ``file_size``, ...), its bytes verbatim in the Lance blob v2 column
  ``video_bytes``;
* ``meta.lance``: the meta files again, for readers that cannot list ``meta/`` (unused here).

Tables, schemas and blob descriptions are read with Lance's own library (``pylance``, ``import
lance``). Video bytes are not copied: a blob v2 value lies, uncompressed, at a byte range of one
file of the table, which its description says (kind, position, size, blob id):

* inline (kind 0): in the fragment's data file that holds the blob column, at ``position``;
* packed (kind 1): in a sidecar ``.blob`` file of that data file, named by its blob id, at
  ``position``;
* dedicated (kind 2): a sidecar ``.blob`` file of its own, from 0.

The sidecar's name comes from Lance (its blob writers' ``path`` for that data file and blob
id, on an in-memory store), not from a rule of ours. Each video is then named as a byte slice
of that file (``<file>#bytes=<offset>+<length>``, ``stoker/byte_slice.h``), which the engine
reads as any MP4: frame tables, windows, GOP sharing, the range cache and If-Match checks. When
the index is built, the first and last bytes of every slice, read by the engine, are compared
with what Lance reads of the blob: a layout that named other bytes is refused, never decoded.

Anything else is refused by name (:class:`stoker.DatasetError`): a frames column that maps to
no feature, image features, external blobs (kind 3, bytes outside the dataset), blob v1 columns,
unknown blob kinds, videos missing from the table, tables on other storage bases.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from stoker import _core
from stoker._core import DatasetError
from stoker.io.storage import Root

__all__ = [
    "FRAMES_TABLE",
    "VIDEOS_TABLE",
    "frames_columns",
    "read_frames",
    "table_opens",
    "stored_frames_files",
    "video_slices",
    "whole_file",
]

FRAMES_TABLE = "frames.lance"
VIDEOS_TABLE = "videos.lance"
BLOB_COLUMN = "video_bytes"
_DESCRIPTION_FIELDS = ("kind", "position", "size", "blob_id", "blob_uri")
_INLINE, _PACKED, _DEDICATED, _EXTERNAL = 0, 1, 2, 3
_PROBE_BYTES = 4096  # compared at each end of every blob when the index is built
_CONVERTER = "lerobot-lance-convert (PyPI lerobot-lancedb)"


def _lance() -> Any:
    try:
        import lance
    except ImportError:
        raise DatasetError(
            "this LeRobot dataset is stored as Lance (storage_format 'lance' in meta/info.json): "
            "reading it needs Lance's library, `pip install pylance`"
        ) from None
    return lance


def _storage_options(source: Root) -> dict[str, str] | None:
    """Lance's (object_store's) spelling of the root's S3 options: the same credentials,
    region and endpoint the engine and pyarrow use."""
    if not source.remote:
        return None
    if not source.location.startswith("s3://"):
        raise DatasetError(
            f"{source.location}: a Lance dataset is read from a local folder or s3://, not "
            "over plain HTTP(S)"
        )
    options = source.options.resolved()
    out = {"aws_region": options.region or "us-east-1"}
    if options.anonymous:
        out["aws_skip_signature"] = "true"
    else:
        for key, value in (
            ("aws_access_key_id", options.access_key_id),
            ("aws_secret_access_key", options.secret_access_key),
            ("aws_session_token", options.session_token),
        ):
            if value:
                out[key] = value
    if options.endpoint_url:
        out["aws_endpoint"] = options.endpoint_url
        out["aws_virtual_hosted_style_request"] = "false"
        if options.endpoint_url.startswith("http://"):
            out["allow_http"] = "true"
    return out


_opened: dict[tuple[str, str], Any] = {}
_opened_lock = threading.Lock()


def _table(source: Root, name: str) -> Any:
    """The Lance dataset ``name`` of the root (its latest version), opened once per process."""
    uri = source.url(name)
    key = (uri, repr(sorted((_storage_options(source) or {}).items())))
    with _opened_lock:
        table = _opened.get(key)
    if table is not None:
        return table
    lance = _lance()
    try:
        table = lance.dataset(uri, storage_options=_storage_options(source))
    except (OSError, ValueError, RuntimeError) as e:
        raise DatasetError(f"cannot open the Lance table {uri}: {e}") from None
    for fragment in table.get_fragments():
        for data_file in fragment.metadata.files:
            if data_file.base_id is not None:
                raise DatasetError(
                    f"{uri}: fragment {fragment.fragment_id} keeps its data on another storage "
                    f"base ({data_file.base_id}); stoker reads Lance tables whose files are "
                    f"under the table's own folder, as {_CONVERTER} writes them"
                )
    with _opened_lock:
        return _opened.setdefault(key, table)


def table_opens(source: Root, url: str) -> bool:
    """Whether the Lance table at ``url`` (a member of ``source``) opens."""
    name = url[len(source.location) + 1 :] if url.startswith(source.location + "/") else url
    try:
        _table(source, name)
    except DatasetError:
        return False
    return True


def frames_columns(source: Root, features: Mapping[str, Any], defaults: Sequence[str]) -> dict:
    """Feature (or default column) name -> its column in ``frames.lance``. Refuses a column
    that maps to no feature, and two features that map to one column."""
    table = _table(source, FRAMES_TABLE)
    where = source.url(FRAMES_TABLE)
    by_column: dict[str, str] = {}
    for name in [*defaults, *features]:
        column = name.replace(".", "_")
        if by_column.setdefault(column, name) != name:
            raise DatasetError(
                f"{where}: features {by_column[column]!r} and {name!r} both map to column "
                f"{column!r} (dots become underscores): stoker cannot tell which one it holds"
            )
    unknown = [column for column in table.schema.names if column not in by_column]
    if unknown:
        raise DatasetError(
            f"{where} has columns {unknown} that map to no feature of meta/info.json (a "
            f"feature 'a.b' is column 'a_b'): written by another tool than {_CONVERTER}, or "
            "info.json lost features; convert the v3.0 dataset again"
        )
    images = [
        name for name, feature in features.items() if getattr(feature, "dtype", "") == "image"
    ]
    if images:
        raise DatasetError(
            f"{where}: image features {images} in a Lance dataset are not read (LeRobot's "
            "LanceDBDataset refuses them too); re-encode them as video"
        )
    present = set(table.schema.names)
    return {name: column for column, name in by_column.items() if column in present}


def _feature_table(source: Root, table: pa.Table, columns: Mapping[str, str]) -> pa.Table:
    names = {column: name for name, column in columns.items()}
    return table.rename_columns([names[column] for column in table.column_names])


def read_frames(
    source: Root,
    features: Mapping[str, Any],
    defaults: Sequence[str],
    names: Sequence[str] | None = None,
) -> pa.Table:
    """The columns ``names`` (feature names; None: all) of ``frames.lance``, as a table named by
    feature, rows in table order. A name the table lacks is refused by name."""
    columns = frames_columns(source, features, defaults)
    wanted = list(columns) if names is None else list(names)
    missing = [name for name in wanted if name not in columns]
    if missing:
        raise DatasetError(
            f"data file {source.url(FRAMES_TABLE)} lacks the columns {missing} "
            f"(as {[name.replace('.', '_') for name in missing]})"
        )
    try:
        table = _table(source, FRAMES_TABLE).to_table(columns=[columns[n] for n in wanted])
    except (OSError, ValueError, RuntimeError) as e:
        raise DatasetError(f"cannot read {source.url(FRAMES_TABLE)}: {e}") from None
    return _feature_table(source, table, columns)


def frames_schema(source: Root, features: Mapping[str, Any], defaults: Sequence[str]) -> pa.Schema:
    """The schema of ``frames.lance``, named by feature."""
    columns = frames_columns(source, features, defaults)
    names = {column: name for name, column in columns.items()}
    schema = _table(source, FRAMES_TABLE).schema
    return pa.schema([field.with_name(names[field.name]) for field in schema])


def stored_frames_files(source: Root) -> list[str]:
    """The files of ``frames.lance``'s current version that hold its rows (data files and
    deletion files): what a change of the rows changes."""
    table = _table(source, FRAMES_TABLE)
    files = []
    for fragment in table.get_fragments():
        meta = fragment.metadata
        files += [source.url(f"{FRAMES_TABLE}/data/{f.path}") for f in meta.files]
        if meta.deletion_file is not None:
            files.append(
                source.url(f"{FRAMES_TABLE}/{meta.deletion_file.path(fragment.fragment_id)}")
            )
    return files


def whole_file(name: str) -> str:
    """The file or object that holds ``name``: itself, or a byte slice's whole."""
    slice_ = _core.parse_byte_slice(name)
    return name if slice_ is None else slice_[0]


@functools.lru_cache(maxsize=1)
def _names_store() -> Any:
    from lance.file import LanceFileSession

    return LanceFileSession("memory://stoker-blob-names")


def _sidecar(data_file: str, blob_id: int, kind: int) -> str:
    """Where Lance puts the ``.blob`` sidecar of blob ``blob_id`` of data file ``data_file``
    (relative to the table's folder), as its own blob writers name it."""
    store = _names_store()
    if kind == _PACKED:
        path = store.open_packed_blob_writer(f"data/{data_file}", blob_id).path
    else:
        path = store.open_dedicated_blob_writer(f"data/{data_file}", blob_id).path
    prefix = "stoker-blob-names/"
    if not path.startswith(prefix):
        raise DatasetError(f"Lance named a blob sidecar {path!r} outside its store")
    return path[len(prefix) :]


def video_slices(source: Root, wanted: Sequence[tuple[str, int, int]]) -> dict[tuple, str]:
    """(camera, chunk_index, file_index) -> the byte slice of its MP4 in ``videos.lance``, for
    every key of ``wanted``. Refuses keys the table lacks, blob kinds stoker cannot read as a
    byte range, and slices whose bytes are not the blob's (as Lance reads it)."""
    table = _table(source, VIDEOS_TABLE)
    where = source.url(VIDEOS_TABLE)
    schema = table.schema
    if BLOB_COLUMN not in schema.names:
        raise DatasetError(f"{where} has no {BLOB_COLUMN!r} column: not written by {_CONVERTER}")
    field = schema.field(BLOB_COLUMN)
    extension = (table.lance_schema.field(BLOB_COLUMN).metadata or {}).get("ARROW:extension:name")
    if extension != "lance.blob.v2":
        raise DatasetError(
            f"{where}: column {BLOB_COLUMN!r} is {field.type}, not a Lance blob v2 column "
            f"(written by {_CONVERTER} 0.3); convert the dataset again with it"
        )
    rows = table.to_table(
        columns=["video_key", "chunk_index", "file_index", "file_size", BLOB_COLUMN],
        with_row_address=True,
    )
    descriptions = rows.column(BLOB_COLUMN).combine_chunks()
    fields = tuple(descriptions.type.field(i).name for i in range(descriptions.type.num_fields))
    if fields != _DESCRIPTION_FIELDS:
        raise DatasetError(
            f"{where}: Lance describes the blobs of {BLOB_COLUMN!r} with fields {list(fields)}, "
            f"not {list(_DESCRIPTION_FIELDS)} (pylance 14's blob v2): a Lance version stoker "
            "does not know; install pylance 14"
        )
    blob_field_id = table.lance_schema.field(BLOB_COLUMN).id()
    data_files = {}
    for fragment in table.get_fragments():
        holding = [f.path for f in fragment.metadata.files if blob_field_id in f.fields]
        if len(holding) == 1:
            data_files[fragment.fragment_id] = holding[0]
    keys = list(
        zip(
            rows.column("video_key").to_pylist(),
            rows.column("chunk_index").to_pylist(),
            rows.column("file_index").to_pylist(),
        )
    )
    row_of = {key: r for r, key in enumerate(keys)}
    absent = [key for key in wanted if key not in row_of]
    if absent:
        raise DatasetError(
            f"{where} lacks the videos of {len(absent)} (camera, chunk, file) the episode table "
            f"names, e.g. {sorted(absent)[:3]}: converted from other metadata, or incomplete"
        )
    kinds = descriptions.field("kind").to_numpy(zero_copy_only=False)
    positions = descriptions.field("position").to_numpy(zero_copy_only=False)
    sizes = descriptions.field("size").to_numpy(zero_copy_only=False)
    blob_ids = descriptions.field("blob_id").to_numpy(zero_copy_only=False)
    file_sizes = rows.column("file_size").to_numpy()
    addresses = rows.column("_rowaddr").to_numpy()
    out = {}
    for key in wanted:
        r = row_of[key]
        video = f"video {key[0]!r} chunk {key[1]} file {key[2]} in {where}"
        kind, size = int(kinds[r]), int(sizes[r])
        if kind == _EXTERNAL:
            raise DatasetError(
                f"{video}: its bytes are an external blob (outside the dataset), which stoker "
                f"does not read; {_CONVERTER} stores them in the table"
            )
        if kind not in (_INLINE, _PACKED, _DEDICATED) or descriptions[r].as_py() is None:
            raise DatasetError(
                f"{video}: blob kind {kind} is not one stoker reads as a byte range (inline, "
                "packed, dedicated)"
            )
        if size <= 0 or size != int(file_sizes[r]):
            raise DatasetError(
                f"{video}: its blob has {size} bytes, its file_size says {int(file_sizes[r])}"
            )
        fragment = int(addresses[r]) >> 32
        if fragment not in data_files:
            raise DatasetError(f"{video}: no single data file of fragment {fragment} holds it")
        data_file = data_files[fragment]
        if kind == _INLINE:
            whole, offset = source.url(f"{VIDEOS_TABLE}/data/{data_file}"), int(positions[r])
        else:
            sidecar = _sidecar(data_file, int(blob_ids[r]), kind)
            whole = source.url(f"{VIDEOS_TABLE}/{sidecar}")
            offset = int(positions[r]) if kind == _PACKED else 0
        out[key] = _core.byte_slice_name(whole, offset, size)
    _check_slices(table, where, [(int(addresses[row_of[k]]), out[k]) for k in wanted])
    return out


def _slice_length(name: str) -> int:
    parsed = _core.parse_byte_slice(name)
    assert parsed is not None, name
    return parsed[2]


def _check_slices(table: Any, where: str, slices: list[tuple[int, str]]) -> None:
    """Compares the first and last bytes of every slice, read by the engine, with what Lance
    reads of the blob at that row address."""
    requests, names = [], []
    for address, name in slices:
        size = _slice_length(name)
        n = min(_PROBE_BYTES, size)
        requests += [(address, 0, n), (address, size - n, n)]
        names.append(name)
    if not requests:
        return
    try:
        by_lance = table.read_blob_ranges(
            BLOB_COLUMN, requests, selector="addresses", preserve_order=True
        )
    except (OSError, ValueError, RuntimeError) as e:
        raise DatasetError(f"{where}: Lance cannot read the video blobs: {e}") from None
    for k, name in enumerate(names):
        size = _slice_length(name)
        n = min(_PROBE_BYTES, size)
        try:
            ours = _core.read_ranges(
                name, np.array([0, size - n], np.int64), np.array([n, n], np.int64)
            ).tobytes()
        except _core.Error as e:
            raise DatasetError(f"{where}: cannot read the video bytes at {name}: {e}") from None
        theirs = (by_lance[2 * k][2] or b"") + (by_lance[2 * k + 1][2] or b"")
        if ours != theirs:
            raise DatasetError(
                f"{where}: the bytes at {name} are not those Lance reads for the blob: a Lance "
                "layout stoker does not know (a newer pylance?); it refuses rather than decode "
                "other bytes"
            )
