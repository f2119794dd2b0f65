"""``stoker check`` of a :class:`stoker.MultiDataset`: each of its datasets checked as itself
(its findings tagged with ``dataset``, its place in the mix), then what only the mix can get
wrong, from the datasets' schemas as the mix's native loader takes them (nothing decoded).

    report = check_mix(mix, deep=False, progress=True, check_part=stoker.check)

The mix's checks, by name (docs/check.md lists each with its severity and fix):

* ``mix_padded_key`` (info; warning when another dataset holds a key of nearly the same name):
  a key that only some datasets have. The others give zeros (None for texts and lists) with
  ``<key>_is_pad`` True, so a model sees the key missing there, not a mistake; a near-twin
  name (equal once case is dropped and the separators ``._-`` taken as one:
  ``observation.images.Top`` and ``observation.images.top``) is most likely one key spelled
  two ways, each padded where the other is.
* ``mix_key_clash`` (error): a key the datasets give in different dtypes or shapes (or as
  arrays in one and Python objects in another). The mix stacks each key into one batch array
  and casts nothing, so a Loader over it refuses it.
* ``mix_schema`` (error): a dataset whose schema cannot be taken (its spec cannot make a
  batch), or a mix the loader refuses for another reason.
* ``mix_weights`` (warning): a dataset of weight 0, which no draw takes.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Callable
from typing import Any, Optional

from stoker._core import Error
from stoker.checks.findings import CheckReport, Finding
from stoker.datasets.mix import MultiDataset

__all__ = ["CHECKS", "check_mix"]

CHECKS = ("mix_padded_key", "mix_key_clash", "mix_schema", "mix_weights")
_PAD = "_is_pad"
# Keys the mix itself adds to every item.
_MIX_KEYS = ("dataset_index",)

# (dtype, shape), None in a shape where the Loader's transforms give it; None: Python objects
Kind = Optional[tuple[str, tuple[Optional[int], ...]]]


def check_mix(
    mix: MultiDataset,
    *,
    deep: bool = False,
    progress: bool = True,
    check_part: Callable[[Any], CheckReport],
) -> CheckReport:
    """Checks each dataset of ``mix`` with ``check_part`` (its findings get ``dataset=i``),
    then the mix's keys and weights; see the module's notes. ``deep`` and ``progress`` are
    the parts' (``check_part`` carries them); the mix's own checks decode nothing."""
    if not isinstance(mix, MultiDataset):
        raise TypeError(f"check_mix takes a stoker.MultiDataset, got {type(mix).__name__}")
    started = time.monotonic()
    parts = [check_part(ds) for ds in mix.datasets]
    report = CheckReport(
        dataset=" + ".join(p.dataset for p in parts)
        if len(parts) < 4
        else (f"{len(parts)} datasets: {parts[0].dataset} + ..."),
        kind="mix",
        deep=deep,
    )
    for i, part in enumerate(parts):
        report.findings.extend(dataclasses.replace(f, dataset=i) for f in part.findings)
        report.checks.extend(c for c in part.checks if c not in report.checks)
        for what, count in part.scanned.items():
            report.scanned[what] = report.scanned.get(what, 0) + count
    report.scanned["datasets"] = len(parts)
    report.not_decoded = " and ".join(dict.fromkeys(p.not_decoded for p in parts if p.not_decoded))
    report.findings.extend(_weights(mix))
    schemas: list[dict[str, Kind] | None] = []
    for i, ds in enumerate(mix.datasets):
        try:
            schema = dict(MultiDataset([ds]).schema)
            schemas.append(schema)
            unsized = [k for k, kind in schema.items() if kind and None in kind[1]]
            if unsized:
                report.findings.append(
                    Finding(
                        "error",
                        "mix_schema",
                        f"image field {unsized[0]!r} has no output size: a Loader over the mix "
                        "refuses it unless its transforms give one",
                        key=unsized[0],
                        dataset=i,
                        fix="Give stoker.Image a size (stoker.Image(size=(224, 224))), or the "
                        "Loader transforms=stoker.Transforms(resize=...).",
                    )
                )
        except Error as error:
            schemas.append(None)
            report.findings.append(
                Finding(
                    "error",
                    "mix_schema",
                    f"the dataset's keys cannot be taken: {error}",
                    dataset=i,
                    fix="Fix what the message names (for a stoker.ShardDataset's images: give "
                    "stoker.Image a size); the mix cannot be loaded until then.",
                )
            )
    known = {i: s for i, s in enumerate(schemas) if s is not None}
    padded = _padded(known, len(schemas))
    clashes = _clashes(known)
    report.findings.extend(padded + clashes)
    if len(known) == len(schemas) and not clashes:
        try:
            _ = mix.schema
        except Error as error:
            report.findings.append(
                Finding(
                    "error",
                    "mix_schema",
                    f"a Loader refuses the mix: {error}",
                    fix="Give the datasets keys of one dtype and shape.",
                )
            )
    report.checks.extend(CHECKS)
    report.seconds = time.monotonic() - started
    return report


def _weights(mix: MultiDataset) -> list[Finding]:
    return [
        Finding(
            "warning",
            "mix_weights",
            "the dataset has weight 0: no draw of a Loader over the mix takes it",
            dataset=i,
            expected="a positive weight",
            found=0.0,
            fix="Give it a weight, or leave it out of the mix.",
        )
        for i, weight in enumerate(mix.weights.tolist())
        if weight == 0
    ]


def _listed(datasets: list[int]) -> str:
    return ("dataset " if len(datasets) == 1 else "datasets ") + ", ".join(map(str, datasets))


def _kind_text(kind: Kind) -> str:
    return "Python objects (texts, lists)" if kind is None else f"{kind[0]} {kind[1]}"


def _normal(key: str) -> str:
    """A key with case and separators dropped: ``Observation_Images.top`` is
    ``observation.images.top``."""
    return re.sub(r"[._\-\s]+", ".", key.lower())


def _padded(schemas: dict[int, dict[str, Kind]], total: int) -> list[Finding]:
    holders: dict[str, list[int]] = {}
    for i, schema in schemas.items():
        for key in schema:
            if key not in _MIX_KEYS:
                holders.setdefault(key, []).append(i)
    everyone = sorted(schemas)
    findings = []
    reported: set[frozenset[str]] = set()
    for key, having in holders.items():
        if len(having) == len(everyone):
            continue
        # A pad mask is reported with its key, when that key is padded in the same datasets.
        base = key[: -len(_PAD)] if key.endswith(_PAD) else None
        if base is not None and holders.get(base) == having:
            continue
        lacking = [i for i in everyone if i not in having]
        twins = [
            (other, holders[other])
            for other in holders
            if other != key
            and _normal(other) == _normal(key)
            and set(holders[other]) & set(lacking)
        ]
        where = f"{_listed(having)} only; {_listed(lacking)}"
        one = len(lacking) == 1
        if twins:
            other, its = twins[0]
            pair = frozenset((key, other))
            if pair in reported:
                continue
            reported.add(pair)
            findings.append(
                Finding(
                    "warning",
                    "mix_padded_key",
                    f"keys {key!r} ({_listed(having)}) and {other!r} ({_listed(its)}) look like "
                    "one key spelled two ways: the mix keeps both, each zeros and masked "
                    f"({key}{_PAD}, {other}{_PAD}) where the other is",
                    key=key,
                    dataset=its[0] if len(its) == 1 else None,
                    expected=f"one name in every dataset: {key!r}",
                    found=f"{other!r} in {_listed(its)}",
                    fix="Give the key one name in every dataset (a ShardSpec's output name; a "
                    "LeRobot dataset's feature name).",
                )
            )
            continue
        findings.append(
            Finding(
                "info",
                "mix_padded_key",
                f"key {key!r} is in {where} {'gives' if one else 'give'} zeros (None for texts and "
                f"lists) there, "
                f"masked by {key}{_PAD}",
                key=key,
                dataset=lacking[0] if len(lacking) == 1 else None,
                expected=f"in every dataset, or masked: {_listed(everyone)}",
                found=_listed(having),
                fix=f"Nothing, if the model reads {key}{_PAD}; else give every dataset the key "
                "or leave it out of the specs.",
            )
        )
    return findings


def _clashes(schemas: dict[int, dict[str, Kind]]) -> list[Finding]:
    kinds: dict[str, dict[int, Kind]] = {}
    for i, schema in schemas.items():
        for key, kind in schema.items():
            if key not in _MIX_KEYS:
                kinds.setdefault(key, {})[i] = kind
    findings = []
    for key, per in kinds.items():
        distinct = list(dict.fromkeys(per.values()))
        if len(distinct) < 2:
            continue
        first_i, first = next(iter(per.items()))
        groups = "; ".join(
            f"{_listed([i for i, k in per.items() if k == kind])}: {_kind_text(kind)}"
            for kind in distinct
        )
        other_i = next(i for i, k in per.items() if k != first)
        other = per[other_i]
        if first is None or other is None:
            fix = (
                "The key holds arrays in one dataset and texts or lists in another: rename it in "
                "one of them."
            )
        elif first[0] != other[0] and first[1] == other[1]:
            fix = (
                "Give the datasets one dtype for it (stoker.Transforms(dtype=...) for images; "
                "the same column type for the others)."
            )
        else:
            fix = (
                "Give the datasets one shape for it: for images one size (stoker.Image(size=...), "
                "stoker.WindowSpec(size=...) or stoker.Transforms(resize=...)), for windows one "
                "delta_timestamps."
            )
        findings.append(
            Finding(
                "error",
                "mix_key_clash",
                f"key {key!r} differs between the datasets ({groups}): a batch cannot hold both, "
                "and a Loader over the mix refuses it",
                key=key,
                dataset=other_i,
                expected=f"{_kind_text(first)} (dataset {first_i})",
                found=f"{_kind_text(other)} (dataset {other_i})",
                fix=fix,
            )
        )
    return findings
