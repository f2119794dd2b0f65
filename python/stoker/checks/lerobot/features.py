"""info.json's features against the data files' columns: present, of the stated dtype
and shape, and no column info.json does not list."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from stoker.checks.lerobot.metadata import Meta
from stoker.checks.lerobot.rows import Rows
from stoker.checks.lerobot.run import Run
from stoker.datasets.lerobot.format import Feature

_ARROW_KINDS = {
    "bool": ("bool",),
    "string": ("string", "large_string"),
}


def _element_type(kind: pa.DataType) -> tuple[pa.DataType, int | None]:
    """(the element type, the fixed list size or None) of a column type, lists unwrapped."""
    size: int | None = 1
    while (
        pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)
    ):
        size = kind.list_size if pa.types.is_fixed_size_list(kind) else None
        kind = kind.value_type
    return kind, size


def _dtype_match(feature: Feature, kind: pa.DataType) -> str:
    """ "same", "width" (the same kind of number in another width: read with a cast) or
    "kind" (another kind: integers for floats, text for numbers) for a feature's dtype
    against its column's type."""
    element, _ = _element_type(kind)
    if feature.dtype == "image":
        image = (
            pa.types.is_struct(kind) or pa.types.is_binary(kind) or pa.types.is_large_binary(kind)
        )
        return "same" if image else "kind"
    if feature.dtype in _ARROW_KINDS:
        return "same" if str(element) in _ARROW_KINDS[feature.dtype] else "kind"
    try:
        wanted = np.dtype(feature.dtype)
    except TypeError:
        return "same"  # a dtype numpy does not know: nothing to compare
    try:
        found = np.dtype(element.to_pandas_dtype())
    except (NotImplementedError, TypeError):
        return "kind"  # an Arrow type numpy has no dtype for (a struct, a list): another kind
    if found == wanted:
        return "same"
    return "width" if found.kind == wanted.kind else "kind"


def check_features(run: Run, meta: Meta, rows: Rows) -> None:
    schemas = [(p, s) for p, s in rows.schemas.items() if s is not None]
    if not schemas:
        return
    reference_path, reference = schemas[0]
    for path, schema in schemas[1:]:
        if schema.equals(reference):
            continue
        differences = [f"column {n!r} missing" for n in reference.names if n not in schema.names]
        differences += [f"extra column {n!r}" for n in schema.names if n not in reference.names]
        differences += [
            f"column {n!r} is {schema.field(n).type}, not {reference.field(n).type}"
            for n in reference.names
            if n in schema.names and not schema.field(n).type.equals(reference.field(n).type)
        ]
        run.add(
            "error",
            "features",
            f"data file {meta.relative(path)} differs in schema from "
            f"{meta.relative(reference_path)}: "
            + ("; ".join(differences) or "columns in another order"),
            "rewrite the file with the dataset's schema",
            file=path,
            expected=str(reference),
            found=str(schema),
        )
    features = meta.info.features
    for name, feature in features.items():
        if feature.dtype == "video":
            continue
        if name not in reference.names:
            run.add(
                "error",
                "features",
                f"feature {name!r} of info.json is not a column of the data files",
                f"add the column, or remove feature {name!r} from meta/info.json",
                field=name,
                expected=f"{feature.dtype} {list(feature.shape)}",
                found="no column",
                file=reference_path,
            )
            continue
        kind = reference.field(name).type
        match = _dtype_match(feature, kind)
        if match != "same":
            run.add(
                "error" if match == "kind" else "warning",
                "features",
                f"feature {name!r} is {feature.dtype} in info.json, its column holds {kind}"
                + (": read with a cast to the feature's dtype" if match == "width" else ""),
                f"give feature {name!r} the column's dtype in meta/info.json, or rewrite the "
                "column",
                field=name,
                expected=feature.dtype,
                found=str(_element_type(kind)[0]),
                file=reference_path,
            )
            if match == "kind":
                continue
        _, size = _element_type(kind)
        dim = int(np.prod(feature.shape)) if feature.shape else 1
        if feature.dtype in ("image", "string") or len(feature.shape) > 1:
            continue
        if size is not None and size != dim:
            run.add(
                "error",
                "features",
                f"feature {name!r} has shape {list(feature.shape)} in info.json, its column "
                f"holds {size} value{'s' if size != 1 else ''} a row",
                f"set feature {name!r}'s shape to [{size}] in meta/info.json, or rewrite the "
                "column",
                field=name,
                expected=list(feature.shape),
                found=[size],
                file=reference_path,
            )
        elif size is None and name in rows.features and rows.valid.any():
            if np.isnan(rows.features[name][rows.valid]).all():
                run.add(
                    "error",
                    "features",
                    f"feature {name!r} has shape {list(feature.shape)} in info.json, but its "
                    "rows hold lists of other lengths",
                    f"set feature {name!r}'s shape to its lists' length, or rewrite the column",
                    field=name,
                    expected=list(feature.shape),
                    file=reference_path,
                )
    extra = [n for n in reference.names if n not in features and not n.startswith("__")]
    for name in extra:
        run.add(
            "warning",
            "features",
            f"column {name!r} of the data files is not a feature of info.json: LeRobot's "
            "loader, which casts the files to info.json's features, refuses it",
            f"add feature {name!r} to meta/info.json, or drop the column",
            field=name,
            file=reference_path,
        )
