"""JSON text columns turned into typed Arrow columns, for ``stoker etl``.

Ground truth such as per-frame annotations is often stored as one JSON string per row. Parsing
it per batch costs the trainer time at every step; typed columns are read as arrays instead.

Inference, over every row of a column:

* JSON objects flatten into one column per key, named ``<column>.<key>`` (nested objects:
  ``<column>.<key>.<subkey>``). Lists of objects flatten the same way, into parallel lists
  (``ann.boxes`` = ``[{"label": .., "xyxy": [..]}, ..]`` gives ``ann.boxes.label`` and
  ``ann.boxes.xyxy``). Every row must have the same keys at every level.
* Numbers become int64 when every row holds an integer there, else float64 (JSON numbers are
  doubles; float64 keeps them exactly). Booleans become bool, strings string.
* Lists of numbers (or booleans) whose shape is the same in every row become one
  ``fixed_size_list`` of all their values, flattened row-major: the LeRobot feature has shape
  ``[n]``, and stoker's index and Loader read it as a ``[T, n]`` array. The original shape is
  kept in :attr:`TypedColumn.columns` (``json_shape``).
* Lists of numbers whose first dimension varies (the rest fixed) become ``list<...>``: LeRobot
  shape ``[-1]`` (or ``[-1, ...inner]``, nested ``fixed_size_list`` inside).
* What LeRobot's loader cannot turn into tensors (lists of strings, lists whose inner lengths
  vary) stays JSON text, one string per row, in its own flattened column; it is listed with the
  reason in :attr:`TypedColumn.kept_as_json`.

Any row that does not match the others (another type, other keys, another nesting depth, a
null, text that is not JSON) raises :class:`TypedColumnError` naming the column, the row
and the path inside the value.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from stoker._core import DatasetError

__all__ = ["TypedColumn", "TypedColumnError", "convert_json_columns", "json_candidates"]


class TypedColumnError(DatasetError):
    """A JSON column whose rows do not share one structure."""


# Types of JSON values. A list's `length` is None when it differs between rows; its `element` is
# None while only empty lists were seen.
@dataclass(frozen=True)
class _Scalar:
    kind: str  # "bool", "int", "float", "str"


@dataclass(frozen=True)
class _List:
    element: object | None
    length: int | None


@dataclass(frozen=True)
class _Object:
    fields: tuple[tuple[str, object], ...]  # in the first row's key order


class _Mismatch(Exception):
    def __init__(self, path: str, why: str):
        super().__init__(why)
        self.path = path
        self.why = why


def _describe(t) -> str:
    if isinstance(t, _Scalar):
        return {"bool": "a boolean", "int": "an integer", "float": "a number", "str": "a string"}[
            t.kind
        ]
    if isinstance(t, _List):
        return "a list"
    if isinstance(t, _Object):
        return "an object with keys " + ", ".join(repr(k) for k, _ in t.fields)
    return "null"


def _type_of(value, path: str):
    if value is None:
        raise _Mismatch(path, "is null; typed columns need a value in every row")
    if isinstance(value, bool):
        return _Scalar("bool")
    if isinstance(value, int):
        return _Scalar("int")
    if isinstance(value, float):
        return _Scalar("float")
    if isinstance(value, str):
        return _Scalar("str")
    if isinstance(value, list):
        element = None
        for k, item in enumerate(value):
            t = _type_of(item, f"{path}[{k}]")
            element = t if element is None else _unify(element, t, f"{path}[{k}]")
        return _List(element, len(value))
    if isinstance(value, dict):
        return _Object(tuple((key, _type_of(item, f"{path}.{key}")) for key, item in value.items()))
    raise _Mismatch(path, f"holds a {type(value).__name__}, which JSON does not")


def _unify(a, b, path: str):
    """The type of values of both types `a` (earlier rows) and `b` (this row)."""
    if isinstance(a, _Scalar) and isinstance(b, _Scalar):
        if a.kind == b.kind:
            return a
        if {a.kind, b.kind} == {"int", "float"}:
            return _Scalar("float")
    elif isinstance(a, _List) and isinstance(b, _List):
        if a.element is None:
            element = b.element
        elif b.element is None:
            element = a.element
        else:
            element = _unify(a.element, b.element, path + "[]")
        return _List(element, a.length if a.length == b.length else None)
    elif isinstance(a, _Object) and isinstance(b, _Object):
        keys_a = [k for k, _ in a.fields]
        keys_b = dict(b.fields)
        if set(keys_a) != set(keys_b):
            missing = [k for k in keys_a if k not in keys_b]
            extra = [k for k in keys_b if k not in dict(a.fields)]
            parts = []
            if missing:
                parts.append("lacks " + ", ".join(repr(k) for k in missing))
            if extra:
                parts.append("has the extra keys " + ", ".join(repr(k) for k in extra))
            raise _Mismatch(
                path,
                " and ".join(parts)
                + " (earlier rows have "
                + ", ".join(repr(k) for k in keys_a)
                + ")",
            )
        return _Object(tuple((k, _unify(t, keys_b[k], f"{path}.{k}")) for k, t in a.fields))
    raise _Mismatch(path, f"is {_describe(b)}, but {_describe(a)} in earlier rows")


# ---------------------------------------------------------------------------------------------
# Leaves: what each flattened column holds.


@dataclass(frozen=True)
class _Leaf:
    name: str
    keys: tuple[str, ...]  # object keys from the column's root to this leaf
    type: object  # the leaf's type, lists of objects already pushed inside


def _leaves(t, name: str, keys: tuple[str, ...] = ()) -> list[_Leaf]:
    if isinstance(t, _Object):
        out = []
        for key, child in t.fields:
            out += _leaves(child, f"{name}.{key}", keys + (key,))
        return out
    if isinstance(t, _List) and _holds_object(t):
        # A list of objects becomes one list per key: push the list inside the object.
        return [
            _Leaf(leaf.name, leaf.keys, _List(leaf.type, t.length))
            for leaf in _leaves(t.element, name, keys)
        ]
    return [_Leaf(name, keys, t)]


def _holds_object(t) -> bool:
    while isinstance(t, _List):
        t = t.element
    return isinstance(t, _Object)


def _extract(value, keys: tuple[str, ...]):
    """The part of `value` a leaf with object path `keys` holds (lists mapped element-wise)."""
    if not keys:
        return value
    if isinstance(value, list):
        return [_extract(item, keys) for item in value]
    return _extract(value[keys[0]], keys[1:])


def _numeric_shape(t) -> tuple[tuple[int | None, ...], str] | None:
    """(dims, element kind) of a list nest of numbers or booleans, or None when it holds
    strings or is not a list."""
    dims = []
    while isinstance(t, _List):
        dims.append(t.length)
        t = t.element
    if not dims:
        return None
    if t is None:  # only empty lists seen
        return tuple(dims), "float"
    if isinstance(t, _Scalar) and t.kind in ("bool", "int", "float"):
        return tuple(dims), t.kind
    return None


_ARROW = {"bool": pa.bool_(), "int": pa.int64(), "float": pa.float64(), "str": pa.string()}
_NUMPY = {"bool": np.bool_, "int": np.int64, "float": np.float64}
_FEATURE_DTYPE = {"bool": "bool", "int": "int64", "float": "float64", "str": "string"}


@dataclass
class TypedColumn:
    """What one JSON column became."""

    source: str
    # Flattened column name -> (Arrow type as text, LeRobot feature shape, JSON shape or None).
    columns: dict[str, tuple[str, list[int], list[int | None] | None]] = field(default_factory=dict)
    # Flattened column name -> why it stays JSON text.
    kept_as_json: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "columns": {
                name: {"type": t, "shape": shape, "json_shape": json_shape}
                for name, (t, shape, json_shape) in self.columns.items()
            },
            "kept_as_json": dict(self.kept_as_json),
        }


def json_candidates(table: pa.Table) -> list[str]:
    """String columns whose first non-null value is a JSON object or array."""
    names = []
    for name in table.column_names:
        column = table.column(name)
        if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
            continue
        for chunk in column.chunks:
            valid = chunk.drop_null()
            if len(valid):
                text = valid[0].as_py().lstrip()
                if text[:1] in ("{", "["):
                    try:
                        json.loads(text)
                        names.append(name)
                    except ValueError:
                        pass
                break
    return names


def convert_json_columns(
    table: pa.Table, names: Sequence[str], *, row_label=None
) -> tuple[pa.Table, list[TypedColumn], dict[str, dict]]:
    """Replaces each JSON column in ``names`` by its typed, flattened columns, at its place.

    ``row_label(r)`` describes row r in errors (default: "row r"). Returns the new table, what
    each column became, and the LeRobot feature of every new column.

    Raises:
        TypedColumnError: a row that is not JSON or does not match the structure of the others.
    """
    label = row_label or (lambda r: f"row {r}")
    typed: list[TypedColumn] = []
    features: dict[str, dict] = {}
    for name in names:
        if name not in table.column_names:
            raise ValueError(f"no column {name!r} to convert; the columns are {table.column_names}")
        column = table.column(name)
        if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
            raise TypedColumnError(f"column {name!r} is {column.type}, not JSON text")
        values = _parse(name, column.to_pylist(), label)
        value_type = None
        for r, value in enumerate(values):
            try:
                t = _type_of(value, name)
                value_type = t if value_type is None else _unify(value_type, t, name)
            except _Mismatch as e:
                raise TypedColumnError(
                    f"column {name!r}: {label(r)} does not match the structure of the rows "
                    f"before it: {e.path} {e.why}"
                ) from None
        if value_type is None:
            continue  # no rows
        result = TypedColumn(name)
        arrays: list[tuple[str, pa.Array]] = []
        for leaf in _leaves(value_type, name):
            leaf_values = [_extract(v, leaf.keys) for v in values]
            array, feature, json_shape, why = _leaf_array(leaf, leaf_values)
            if why is not None:
                result.kept_as_json[leaf.name] = why
            else:
                result.columns[leaf.name] = (str(array.type), feature["shape"], json_shape)
            features[leaf.name] = feature
            arrays.append((leaf.name, array))
        clash = [n for n, _ in arrays if n in table.column_names and n != name]
        if clash:
            raise TypedColumnError(f"column {name!r} flattens into {clash}, which already exist")
        at = table.column_names.index(name)
        table = table.remove_column(at)
        for offset, (leaf_name, array) in enumerate(arrays):
            table = table.add_column(at + offset, leaf_name, array)
        typed.append(result)
    return table, typed, features


def _parse(name: str, texts: list[str | None], label) -> list[Any]:
    values = []
    for r, text in enumerate(texts):
        if text is None:
            raise TypedColumnError(
                f"column {name!r}: {label(r)} is null; typed columns need a value in every row"
            )
        try:
            values.append(json.loads(text))
        except ValueError as e:
            raise TypedColumnError(
                f"column {name!r}: {label(r)} is not JSON ({e}): {text[:80]!r}"
            ) from None
    return values


def _leaf_array(leaf: _Leaf, values: list[Any]):
    """(Arrow array, LeRobot feature, JSON shape, why kept as JSON or None) of one leaf."""
    t = leaf.type
    if isinstance(t, _Scalar):
        if t.kind == "float":
            array = pa.array(np.asarray(values, np.float64))
        else:
            array = pa.array(values, _ARROW[t.kind])
        return array, {"dtype": _FEATURE_DTYPE[t.kind], "shape": [1], "names": None}, None, None
    numeric = _numeric_shape(t)
    if numeric is None:
        why = "lists of strings cannot be LeRobot tensors"
    else:
        dims, kind = numeric
        fixed = [d for d in dims if d is not None and d > 0]
        if len(fixed) == len(dims):
            size = int(np.prod(fixed))
            flat: np.ndarray = np.asarray(values, dtype=_NUMPY[kind]).reshape(len(values) * size)
            array = pa.FixedSizeListArray.from_arrays(pa.array(flat, _ARROW[kind]), size)
            feature: dict[str, Any] = {
                "dtype": _FEATURE_DTYPE[kind],
                "shape": [size],
                "names": None,
            }
            return array, feature, fixed if len(fixed) > 1 else None, None
        if all(d is not None and d > 0 for d in dims[1:]):
            arrow_type = _ARROW[kind]
            for d in reversed(dims[1:]):
                arrow_type = pa.list_(arrow_type, d)
            arrow_type = pa.list_(arrow_type)
            converted = values if kind != "float" else _floats(values)
            array = pa.array(converted, arrow_type)
            feature = {"dtype": _FEATURE_DTYPE[kind], "shape": [-1, *dims[1:]], "names": None}
            return array, feature, None, None
        why = "inner list lengths vary between rows"
    array = pa.array([json.dumps(v, separators=(",", ":")) for v in values], pa.string())
    return array, {"dtype": "string", "shape": [1], "names": None}, None, why


def _floats(value):
    """Integers inside a nest of lists as floats (a float64 leaf where some rows hold ints)."""
    if isinstance(value, list):
        return [_floats(v) for v in value]
    return float(value)
