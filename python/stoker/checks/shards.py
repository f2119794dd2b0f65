"""``stoker check`` of a :class:`stoker.ShardDataset`: what is wrong with its shards, found from
their native indexes (names, offsets, sizes, ``cls`` labels), the shuffled epoch's order, and,
with ``deep``, every member read and decoded.

    report = check_shards(stoker.ShardDataset("shards/", spec), deep=True)
    for finding in report.errors():
        print(finding)

The checks, by name (docs/check.md lists each with its severity and fix):

* ``spec`` (info): shards given without a spec (a folder, a pattern): the spec inferred from
  the fields most samples hold (:func:`inferred_spec`).
* ``shard_damage`` (error): a truncated shard, or one with a corrupt tar header.
* ``shard_index`` (warning: a sidecar ``<shard>.index`` refused, the shard scanned instead;
  error: a sidecar accepted by the quick check (size, first and last headers) that lists other
  members than the shard holds, or, ``deep``, a member whose tar header differs from the index).
* ``missing_field`` (error): samples lacking a field of the spec (every field is needed: the
  loader raises on them, or skips them).
* ``duplicate_key`` (error: a key twice in one shard, which splits its sample, or a sample with
  two members of one field; warning: a key in two shards, or a shard listed twice).
* ``undecodable_member`` (error): an empty member, a ``cls`` the loader does not read as an
  integer; images whose header does not probe (shallow: every image member's first KiB,
  locally; 32 per shard and field remotely) or that do not decode (``deep``: every image
  member, with the native decoder on the usable cores); ``deep`` also: clips that do not decode
  or are shorter than the spec's window, and json, texts, token and ``.npy`` arrays that the
  loader's own decoders refuse (the check calls them: it refuses what the loader refuses, in
  its words), or an Array field's arrays that disagree in dtype and shape. Deep decodes each
  image to 32 x 32 (a JPEG at 1/8 DCT scale: every entropy-coded coefficient is read, which is
  where corrupt or cut data shows; the inverse DCT is the reduced one) at the native decoder's
  rate.
* ``shard_sizes`` (warning): shards far from equal bytes: (largest - smallest) / mean above
  :data:`SIZE_SPREAD` (a last shard smaller than half the median, a writer's remainder, is left
  out).
* ``label_spread_shards`` (info): shards sorted by label: the median shard holds at most
  :data:`NARROW` times the labels a random shard of its size would.
* ``label_spread_batches`` (error / warning): the narrow-batch trap. The first
  :data:`FIRST_BATCHES` batches of :data:`BATCH_SIZE` of epoch 0 of a shuffled Loader with the
  default shuffle buffer (:data:`stoker.datasets.shards.DEFAULT_SHUFFLE_BUFFER`, seed 0, rank 0
  of 1), from the order alone: an error when each of them holds a single label while random
  batches would hold 1.5 or more; a warning when they are narrow: they hold on average fewer
  than :data:`NARROW` times the distinct labels random batches of their size would
  (``sum_c 1 - (1 - p_c) ** B``, ``p_c`` each label's share of the dataset), that expectation
  being 2 or more. The fix names the smallest doubling of the shuffle buffer that mixes them,
  when one within the epoch does.

Labels are the spec's :class:`stoker.Label` field (else the ``cls`` members), as the shard index
holds them: nothing is decoded for them. Each finding names the shard (its URL), the sample's
key and the spec's field where they apply; a check that finds a problem in many places gives
:data:`MAX_PER_GROUP` findings of each severity and one more that counts the rest.
"""

from __future__ import annotations

import os
import time
import warnings
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pyarrow as pa

from stoker import _core
from stoker._core import Error
from stoker.checks.findings import CheckReport, Finding
from stoker.datasets.shards import (
    CLIP_EXTENSIONS,
    DEFAULT_SHUFFLE_BUFFER,
    IMAGE_EXTENSIONS,
    INDEX_SUFFIX,
    Array,
    Clip,
    Image,
    Json,
    Label,
    ShardDataset,
    ShardSpec,
    Text,
    Tokens,
)
from stoker.io.storage import is_url
from stoker.progress import ProgressBar
from stoker.transforms import Transforms

__all__ = [
    "BATCH_SIZE",
    "CHECKS",
    "FIRST_BATCHES",
    "MAX_PER_GROUP",
    "NARROW",
    "SIZE_SPREAD",
    "check_shards",
    "inferred_spec",
]

CHECKS = (
    "shard_damage",
    "shard_index",
    "missing_field",
    "duplicate_key",
    "undecodable_member",
    "shard_sizes",
    "label_spread_shards",
    "label_spread_batches",
)
# The first batches of a shuffled epoch that label_spread_batches looks at: a common batch size
# (smaller when the dataset holds fewer than FIRST_BATCHES of them), and how many.
BATCH_SIZE = 256
FIRST_BATCHES = 8
SEED = 0  # stoker.Loader's default seed
# Narrow: fewer than NARROW times the distinct labels random draws of as many samples hold.
NARROW = 0.5
# A single-label first batch is an error only when random batches would hold this many labels.
SINGLE_LABEL_EXPECTED = 1.5
# One label dominating the first batches is an error: at least DOMINANT of their labelled
# samples, where it is at most DOMINANT_DATA_SHARE of the dataset's (training starts on one
# class, as when every first batch holds one label).
DOMINANT = 0.9
DOMINANT_DATA_SHARE = 0.5
# shard_sizes warns above this (largest - smallest) / mean.
SIZE_SPREAD = 0.5
# Findings listed per check and severity (docs/check.md: at most 50 of a kind, then one more
# that counts the rest).
MAX_PER_GROUP = 50
_OPEN_THREADS = 16  # shards (sidecars) opened at once, as ShardDataset opens them
# Shallow image probe: the bytes read of each member (the whole member when its header lies
# further), and how many members per shard and field of a remote shard.
PROBE_BYTES = 1024
REMOTE_PROBES = 32
# Deep reads: members read with one call, up to this many bytes (one larger member alone).
READ_CHUNK = 64 << 20
DECODE_SIZE = 32  # images are decoded (every coefficient) and resized to this square
CLIP_SIZE = 16
_TEXT_KINDS = (Text,)
_PARSED = (Json, Text, Array, Tokens)  # decoders whose members deep decodes with the loader's
_SKIP_FIX = "A Loader raises on such a sample (on_error='raise') or leaves it out ('skip')."


class _Findings:
    """The findings of one check run, at most MAX_PER_GROUP per (check, severity); the rest
    counted in one finding per group at the end."""

    def __init__(self) -> None:
        self.items: list[Finding] = []
        self._counts: Counter[tuple[str, str]] = Counter()

    def add(self, finding: Finding) -> None:
        group = (finding.check, finding.severity)
        self._counts[group] += 1
        if self._counts[group] <= MAX_PER_GROUP:
            self.items.append(finding)

    def close(self) -> list[Finding]:
        for (check, severity), count in self._counts.items():
            if count > MAX_PER_GROUP:
                self.items.append(
                    Finding(
                        severity,
                        check,
                        f"{count - MAX_PER_GROUP} more like the {MAX_PER_GROUP} above ({count} in "
                        "all): the report lists the first ones",
                        found=count,
                    )
                )
        return self.items


def check_shards(
    dataset: ShardDataset | str | os.PathLike | Sequence[str | os.PathLike],
    *,
    deep: bool = False,
    progress: bool = True,
) -> CheckReport:
    """Checks ``dataset`` (see the module's notes): the shallow checks read its indexes and
    the first KiB of each image member; ``deep`` reads every member through the index and
    decodes every image, clip, json and array of the spec's fields. ``progress`` draws a bar
    on stderr while members are read.

    ``dataset`` is a :class:`stoker.ShardDataset`, or what one opens (a folder ``stoker shard``
    wrote, a pattern, a list of shards): then the spec is inferred (:func:`inferred_spec`) and
    an info finding ``spec`` says which it is."""
    started = time.monotonic()
    inferred: Finding | None = None
    if not isinstance(dataset, ShardDataset):
        if not isinstance(dataset, (str, os.PathLike, list, tuple)):
            raise TypeError(
                "check_shards takes a stoker.ShardDataset, a folder, a pattern or a list of "
                f"shards, not {type(dataset).__name__}"
            )
        dataset, inferred = _open_inferred(dataset)
    ds = dataset
    urls = ds.urls
    name = urls[0] if len(urls) == 1 else f"{urls[0]} .. {urls[-1]}"  # the count: scanned
    report = CheckReport(dataset=name, kind="shards", deep=deep)
    out = _Findings()
    if inferred is not None:
        out.add(inferred)
    _damage(ds, out)
    _sidecars(ds, out)
    _missing_fields(ds, out)
    _duplicates(ds, out)
    _empty_and_labels(ds, out)
    scanned = {
        "shards": len(urls),
        "samples": len(ds),
        "members": int(sum(len(s) for s in ds.member_sizes)),
        "bytes": int(ds.shard_bytes.sum()),
    }
    if deep:
        scanned.update(_read_everything(ds, out, progress))
    else:
        scanned["images_probed"] = _probe_images(ds, out)
        report.not_decoded = "shard members"
    _sizes(ds, out)
    labels = _labels(ds)
    if labels is not None:
        _label_spread_shards(ds, labels, out)
        _label_spread_batches(ds, labels, out)
    report.checks = ["spec"] if inferred is not None else []
    report.checks += [c for c in CHECKS if labels is not None or not c.startswith("label_spread")]
    report.findings = out.close()
    report.scanned = scanned
    report.seconds = time.monotonic() - started
    return report


def inferred_spec(dataset: ShardDataset) -> ShardSpec:
    """The spec a check of shards given without one reads: each field that at least half of
    the samples hold and whose extension says how to decode it (``jpg``, ``jpeg``, ``png``,
    ``webp``: :class:`stoker.Image`; ``mp4``, ``webm``, ``mkv``: :class:`stoker.Clip`;
    ``cls``: :class:`stoker.Label`; ``txt``: :class:`stoker.Text`; ``json``:
    :class:`stoker.Json`), named after the field; when none does, the most common field as a
    :class:`stoker.Text` (structure checks only: its members are not parsed)."""
    every = np.arange(len(dataset), dtype=np.int64)
    held = {f: int((dataset.field_ranges(f)[0][every] >= 0).sum()) for f in dataset.fields}
    spec: dict[str, Any] = {}
    for field, count in sorted(held.items(), key=lambda item: -item[1]):
        if 2 * count < len(dataset):
            continue
        ext = field.rsplit(".", 1)[-1]
        if ext in IMAGE_EXTENSIONS:
            spec[field] = Image(field)
        elif ext in CLIP_EXTENSIONS:
            spec[field] = Clip(field)
        elif field == "cls":
            spec[field] = Label(field)
        elif field == "txt":
            spec[field] = Text(field)
        elif field == "json":
            spec[field] = Json(field)
    if not spec:
        common = max(held, key=lambda f: held[f])
        spec[common] = _Unparsed(common)
    return ShardSpec(spec)


class _Unparsed(Text):
    """A field read for the structure checks only (an inferred spec with no field stoker
    decodes): its members are not parsed."""


def _open_inferred(location: Any) -> tuple[ShardDataset, Finding]:
    """A ShardDataset of ``location`` with :func:`inferred_spec`, and the finding saying it.
    The first open (any spec: the index is the same) fills the cache the second reads; its
    warnings are left to the second, and to the check."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        probe = ShardDataset(location, {"txt": Text("txt")})
    spec = inferred_spec(probe)
    dataset = ShardDataset(location, spec)
    described = ", ".join(
        f"{name} ({type(d).__name__ if not isinstance(d, _Unparsed) else 'not parsed'})"
        for name, d in spec.items()
    )
    finding = Finding(
        "info",
        "spec",
        f"no spec given: the fields held by at least half of the samples are checked as "
        f"{described}; the samples' fields are {', '.join(dataset.fields)}",
        expected="a spec (stoker.check(stoker.ShardDataset(shards, spec)))",
        found=described,
        fix="Check a stoker.ShardDataset made with the spec training reads, to check exactly "
        "the fields it needs.",
    )
    return dataset, finding


# ---------------------------------------------------------------------------------------------
# The shards and their indexes


def _damage(ds: ShardDataset, out: _Findings) -> None:
    for url, damage in ds.damaged:
        out.add(
            Finding(
                "error",
                "shard_damage",
                f"the shard is damaged: {damage}; the members after the damage are lost",
                shard=url,
                expected="a whole tar: every member, then the end-of-archive marker",
                found=damage,
                fix="Restore or rewrite the shard (stoker shard). A Loader refuses it under "
                "on_error='raise' and reads the samples before the damage under 'skip'.",
            )
        )


def _has_sidecar(url: str) -> bool:
    if not is_url(url):
        return os.path.exists(url + INDEX_SUFFIX)
    try:
        _core.stat_source(url + INDEX_SUFFIX)
    except Error:
        return False
    return True


def _sidecars(ds: ShardDataset, out: _Findings) -> None:
    """Each sidecar opened anew, without the cache (which hides a sidecar once a scan or an
    earlier sidecar of the same shard version is cached), and compared with the index in use."""
    with ThreadPoolExecutor(_OPEN_THREADS) as pool:  # remote: one HEAD request each
        present = list(pool.map(_has_sidecar, ds.urls))
    which = [s for s, has in enumerate(present) if has]
    if not which:
        return
    try:
        fresh, notes = _core.open_shard_indexes([ds.urls[s] for s in which], "", _OPEN_THREADS)
    except Error as error:
        out.add(
            Finding(
                "error",
                "shard_index",
                f"the shards cannot be opened again: {error}",
                fix="Check that the shards are still there and readable.",
            )
        )
        return
    for s, index, note in zip(which, fresh, notes):
        url = ds.urls[s]
        if note:
            out.add(
                Finding(
                    "warning",
                    "shard_index",
                    f"the sidecar index does not match its shard and is ignored: {note}. The "
                    "shard's headers are scanned instead (once per cache)",
                    shard=url,
                    file=url + INDEX_SUFFIX,
                    expected="a sidecar of this shard's size and headers",
                    found=note,
                    fix=f"Delete {os.path.basename(url)}{INDEX_SUFFIX} (the shard is then "
                    "scanned and the scan cached) or rewrite the shards with stoker shard, "
                    "which writes matching sidecars.",
                )
            )
            continue
        used = ds.indexes[s]
        differs = _first_difference(index, used)
        if differs is not None:
            out.add(
                Finding(
                    "error",
                    "shard_index",
                    "the sidecar index passes the quick check (the shard's size, its first and "
                    f"last headers) but does not list the shard's members: {differs}. A process "
                    "that opens the shard without a cache uses it, and its reads fail ('changed "
                    "since its index was made') or miss members",
                    shard=url,
                    file=url + INDEX_SUFFIX,
                    expected=f"{len(used.names)} members as the shard's headers list them",
                    found=f"{len(index.names)} members",
                    fix=f"Delete {os.path.basename(url)}{INDEX_SUFFIX} or rewrite the shards with "
                    "stoker shard.",
                )
            )


def _first_difference(a: Any, b: Any) -> str | None:
    """Where two indexes of one shard differ, or None."""
    names_a, names_b = a.names, b.names
    if len(names_a) != len(names_b):
        return f"it lists {len(names_a)} members, the shard's headers {len(names_b)}"
    placed = np.flatnonzero((a.offsets != b.offsets) | (a.sizes != b.sizes))
    if names_a == names_b and placed.size == 0:
        return None
    named = [m for m, (x, y) in enumerate(zip(names_a, names_b)) if x != y][:1]
    candidates = named + [int(m) for m in placed[:1]]
    if not candidates:
        return None
    first = min(candidates)
    return (
        f"member {first} is {names_a[first]!r} ({int(a.sizes[first])} bytes at "
        f"{int(a.offsets[first])}) in it, {names_b[first]!r} ({int(b.sizes[first])} bytes at "
        f"{int(b.offsets[first])}) in the shard"
    )


def _sizes(ds: ShardDataset, out: _Findings) -> None:
    sizes = ds.shard_bytes.astype(np.float64)
    if len(sizes) < 2:
        return
    considered = np.arange(len(sizes))
    remainder = ""
    if len(sizes) >= 3 and sizes[-1] == sizes.min() and sizes[-1] < 0.5 * np.median(sizes[:-1]):
        considered = considered[:-1]
        remainder = " (the last shard, smaller: a writer's remainder, left out)"
    kept = sizes[considered]
    spread = float((kept.max() - kept.min()) / kept.mean()) if kept.mean() > 0 else 0.0
    if spread <= SIZE_SPREAD:
        return
    small, large = int(considered[np.argmin(kept)]), int(considered[np.argmax(kept)])
    mb = 1e6
    out.add(
        Finding(
            "warning",
            "shard_sizes",
            f"shard sizes spread over {spread:.0%} of their mean{remainder}: the smallest "
            f"{os.path.basename(ds.urls[small])} holds {sizes[small] / mb:.2f} MB, the largest "
            f"{os.path.basename(ds.urls[large])} {sizes[large] / mb:.2f} MB (mean "
            f"{kept.mean() / mb:.2f} MB, median {np.median(kept) / mb:.2f} MB). Ranks are dealt "
            "shards by bytes, so uneven shards give them uneven epochs",
            shard=ds.urls[large],
            expected=f"sizes within {SIZE_SPREAD:.0%} of their mean",
            found=f"spread {spread:.0%}",
            fix="Rewrite them with stoker shard SRC DST --shard-bytes 256MB: shards of equal "
            "bytes (within one sample).",
        )
    )


# ---------------------------------------------------------------------------------------------
# Samples and their members


def _shard_samples(ds: ShardDataset, s: int) -> np.ndarray:
    first = int(ds.shard_first[s])
    return np.arange(first, first + int(ds.shard_samples[s]), dtype=np.int64)


def _fields_text(decoder: Any) -> str:
    return " or ".join(decoder.fields)


def _missing_fields(ds: ShardDataset, out: _Findings) -> None:
    every = np.arange(len(ds), dtype=np.int64)
    for name, decoder in ds.spec.items():
        missing = ds.resolve_members(decoder, every) < 0
        if not missing.any():
            continue
        if missing.all():
            out.add(
                Finding(
                    "error",
                    "missing_field",
                    f"no sample has field {name!r} ({_fields_text(decoder)}); the samples' "
                    f"fields are {', '.join(ds.fields)}",
                    field=name,
                    expected=f"a member {_fields_text(decoder)} in every sample",
                    found=f"none in {len(ds)} samples",
                    fix="Give the spec the field the shards hold (e.g. stoker.Image('png')), or "
                    "take the field out of the spec.",
                )
            )
            continue
        per_shard = np.bincount(ds.sample_shard[missing], minlength=len(ds.urls))
        for s in np.flatnonzero(per_shard):
            samples = _shard_samples(ds, int(s))
            lacking = samples[missing[samples]]
            keys = [ds.keys[int(i)] for i in lacking[:3]]
            have = sorted({f for f in ds.fields if ds.field_ranges(f)[0][lacking[0]] >= 0})
            out.add(
                Finding(
                    "error",
                    "missing_field",
                    f"{len(lacking)} of the shard's {len(samples)} samples lack field {name!r} "
                    f"({_fields_text(decoder)}): keys {', '.join(map(repr, keys))}"
                    f"{', ...' if len(lacking) > 3 else ''}; the first has "
                    f"{', '.join(have) or 'no member'}",
                    shard=ds.urls[int(s)],
                    key=keys[0],
                    field=name,
                    expected=f"a member {_fields_text(decoder)} in every sample",
                    found=f"none in {len(lacking)} samples",
                    fix="Add the members, or rewrite the shard without these samples. " + _SKIP_FIX,
                )
            )


def _duplicates(ds: ShardDataset, out: _Findings) -> None:
    counts = Counter(ds.urls)
    for url, times in counts.items():
        if times > 1:
            out.add(
                Finding(
                    "warning",
                    "duplicate_key",
                    f"the shard is listed {times} times: each of its samples is read {times} "
                    "times an epoch",
                    shard=url,
                    expected="each shard once",
                    found=f"{times} times",
                    fix="List each shard once (a pattern, a list and a folder can overlap).",
                )
            )
    for sample, why in sorted(ds.bad_samples.items()):
        out.add(
            Finding(
                "error",
                "duplicate_key",
                f"a sample with two members of one field: {why}",
                shard=ds.shard_of(sample),
                key=ds.keys[sample],
                expected="one member per field",
                found="two",
                fix="Rewrite the shard with one member per field (x.jpg and x.JPG are one "
                "field). " + _SKIP_FIX,
            )
        )
    codes = pa.array(ds.keys, pa.string()).dictionary_encode().indices.to_numpy()
    repeated = np.flatnonzero(np.bincount(codes)[codes] > 1)
    if repeated.size == 0:
        return
    urls = np.array(ds.urls, dtype=object)
    shard = ds.sample_shard[repeated]
    order = np.lexsort((repeated, shard, codes[repeated]))
    ids, code, shard = repeated[order], codes[repeated][order], shard[order]
    same_key = code[1:] == code[:-1]
    within = same_key & (shard[1:] == shard[:-1])
    across = same_key & (shard[1:] != shard[:-1]) & (urls[shard[1:]] != urls[shard[:-1]])
    # A key twice in one shard: its members are not consecutive, so it is two samples.
    firsts = np.flatnonzero(within)
    per_shard: Counter[int] = Counter()
    first_of: dict[int, int] = {}  # shard -> its first repeated key's place in ids
    for k in firsts.tolist():
        per_shard[int(shard[k])] += 1
        first_of.setdefault(int(shard[k]), k)
    for s, count in sorted(per_shard.items()):
        k = first_of[s]
        key = ds.keys[int(ids[k])]
        base = int(ds.shard_first[s])
        out.add(
            Finding(
                "error",
                "duplicate_key",
                f"{count} key(s) appear twice or more in the shard, e.g. {key!r} (samples "
                f"{int(ids[k]) - base} and {int(ids[k + 1]) - base} of the shard): a sample's "
                "members are not consecutive, so it is read as several samples, each lacking the "
                "others' fields",
                shard=ds.urls[s],
                key=key,
                expected="each key once, its members consecutive",
                found=f"{count} repeated key(s)",
                fix="Rewrite the shard with each sample's members one after another (tar them "
                "sorted by name, or use stoker shard).",
            )
        )
    pairs: Counter[tuple[int, int]] = Counter()
    first_pair: dict[tuple[int, int], int] = {}
    for k in np.flatnonzero(across).tolist():
        pair = (int(shard[k]), int(shard[k + 1]))
        pairs[pair] += 1
        first_pair.setdefault(pair, k)
    for (a, b), count in sorted(pairs.items()):
        k = first_pair[(a, b)]
        key = ds.keys[int(ids[k])]
        out.add(
            Finding(
                "warning",
                "duplicate_key",
                f"{count} key(s) of the shard are also in {ds.urls[b]}, e.g. {key!r}: those "
                "samples are read twice an epoch",
                shard=ds.urls[a],
                key=key,
                expected="each key in one shard",
                found=f"{count} key(s) in both shards",
                fix="Remove the duplicates (a shard written twice, or writer runs that overlap).",
            )
        )


def _spec_members(ds: ShardDataset, s: int) -> list[tuple[str, Any, np.ndarray, np.ndarray]]:
    """Per spec field of shard ``s``: (name, decoder, its samples that have it, their member
    numbers in the shard's index)."""
    samples = _shard_samples(ds, s)
    result = []
    for name, decoder in ds.spec.items():
        members = ds.resolve_members(decoder, samples)
        has = members >= 0
        result.append((name, decoder, samples[has], members[has]))
    return result


def _member_finding(
    ds: ShardDataset, sample: int, name: str, message: str, expected: str, found: Any, fix: str
) -> Finding:
    return Finding(
        "error",
        "undecodable_member",
        message,
        shard=ds.shard_of(sample),
        key=ds.keys[sample],
        field=name,
        expected=expected,
        found=found,
        fix=fix,
    )


def _empty_and_labels(ds: ShardDataset, out: _Findings) -> None:
    """Empty members (a text may be empty), from the index; and cls members the loader does
    not read as integers (of those the index holds no label for, read and decoded)."""
    for s in range(len(ds.urls)):
        index = ds.indexes[s]
        sizes, names = index.sizes, index.names
        for name, decoder, samples, members in _spec_members(ds, s):
            if not isinstance(decoder, _TEXT_KINDS):
                for k in np.flatnonzero(sizes[members] == 0):
                    out.add(
                        _member_finding(
                            ds,
                            int(samples[k]),
                            name,
                            f"the member {names[int(members[k])]!r} is empty",
                            "a non-empty member",
                            "0 bytes",
                            "Rewrite the sample with its data, or leave it out. " + _SKIP_FIX,
                        )
                    )
            if isinstance(decoder, Label):
                _unread_labels(ds, s, name, samples, members, out)


def _unread_labels(ds: ShardDataset, s: int, name: str, samples, members, out: _Findings) -> None:
    """cls members the index holds no label for (it reads only plain decimal ones), decoded
    by the loader's own label decoder: those it refuses are findings, in its words."""
    index = ds.indexes[s]
    sizes, names = index.sizes, index.names
    bad = np.flatnonzero(
        (index.labels[members] == _core.ShardIndex.NO_LABEL) & (sizes[members] > 0)
    )
    if not bad.size:
        return
    chosen = members[bad]
    data = _core.read_ranges(ds.urls[s], index.offsets[chosen], sizes[chosen])
    starts = np.concatenate([[0], np.cumsum(sizes[chosen])])
    blobs = [data[starts[k] : starts[k + 1]].tobytes() for k in range(len(chosen))]
    for k, blob, (problem, _, _) in zip(bad, blobs, _core.decode_shard_members("label", blobs)):
        if not problem:
            continue  # the loader reads it ("1_000", " +7"): no finding
        text = repr(blob[:32]) + ("..." if len(blob) > 32 else "")
        out.add(
            _member_finding(
                ds,
                int(samples[k]),
                name,
                f"the label {names[int(members[k])]!r} is not an integer the loader reads: "
                f"{problem}",
                "an integer as text, e.g. b'3'",
                text,
                "Write the class number as text. " + _SKIP_FIX,
            )
        )


def _probe_images(ds: ShardDataset, out: _Findings) -> int:
    """Every image member's header probed (its first PROBE_BYTES; the whole member when the
    header lies further); remote shards: REMOTE_PROBES members per shard and field."""
    probed = 0
    for s, url in enumerate(ds.urls):
        index = ds.indexes[s]
        names = index.names
        for name, decoder, samples, members in _spec_members(ds, s):
            if not isinstance(decoder, Image):
                continue
            keep = index.sizes[members] > 0
            samples, members = samples[keep], members[keep]
            if is_url(url) and len(members) > REMOTE_PROBES:
                pick = np.unique(np.linspace(0, len(members) - 1, REMOTE_PROBES).astype(np.int64))
                samples, members = samples[pick], members[pick]
            if members.size == 0:
                continue
            offsets, sizes = index.offsets[members], index.sizes[members]
            take = np.minimum(sizes, PROBE_BYTES)
            data = _core.read_ranges(url, offsets, take)
            starts = np.concatenate([[0], np.cumsum(take)])
            for k in range(len(members)):
                probed += 1
                try:
                    _core.probe_image(data[starts[k] : starts[k + 1]].tobytes())
                    continue
                except Error as error:
                    failure = str(error)
                if take[k] < sizes[k]:
                    whole = _core.read_ranges(url, offsets[k : k + 1], sizes[k : k + 1])
                    try:
                        _core.probe_image(whole.tobytes())
                        continue
                    except Error as error:
                        failure = str(error)
                out.add(
                    _member_finding(
                        ds,
                        int(samples[k]),
                        name,
                        f"the image {names[int(members[k])]!r} is not a JPEG, PNG or "
                        f"WebP that stoker reads: {failure}",
                        "a JPEG, PNG or WebP header",
                        failure,
                        "Re-encode or remove the image (stoker check --deep decodes every "
                        "image). " + _SKIP_FIX,
                    )
                )
    return probed


# ---------------------------------------------------------------------------------------------
# Deep: every member read through the index, the spec's fields decoded


def _chunks(sizes: np.ndarray) -> list[np.ndarray]:
    """Member numbers 0..len(sizes) in runs of at most READ_CHUNK bytes (headers counted)."""
    ends = np.cumsum(sizes + 512)
    runs, first = [], 0
    while first < len(sizes):
        base = ends[first - 1] if first else 0
        last = int(np.searchsorted(ends, base + READ_CHUNK, side="right"))
        last = max(last, first + 1)
        runs.append(np.arange(first, last, dtype=np.int64))
        first = last
    return runs


def _read_everything(ds: ShardDataset, out: _Findings, progress: bool) -> dict[str, int]:
    total = int(sum(len(s) for s in ds.member_sizes))
    bar = ProgressBar("stoker check: members read and decoded") if progress else None
    counts: Counter[str] = Counter()
    arrays: dict[str, dict[tuple[str, tuple[int, ...]], list[tuple[int, str]]]] = {}
    cores = max(_core.usable_cores(), 1)
    image_options = Transforms(resize=(DECODE_SIZE, DECODE_SIZE), dtype="uint8").core_options(
        None, "TCHW"
    )
    done = 0
    with ThreadPoolExecutor(cores) as pool:
        for s, url in enumerate(ds.urls):
            index = ds.indexes[s]
            sizes, names = index.sizes, index.names
            field_of: dict[int, tuple[str, Any, int]] = {}  # member -> (field, decoder, sample)
            for name, decoder, samples, members in _spec_members(ds, s):
                for m, sample in zip(members.tolist(), samples.tolist()):
                    field_of.setdefault(m, (name, decoder, sample))
            for run in _chunks(sizes):
                try:
                    data, starts = index.read(run)
                except Error as error:
                    out.add(
                        Finding(
                            "error",
                            "shard_index",
                            f"reading the shard through its index fails: {error}",
                            shard=url,
                            expected="every member's tar header as the index lists it",
                            found=str(error),
                            fix="The shard changed since its index was made, or its sidecar "
                            f"lies: delete {os.path.basename(url)}{INDEX_SUFFIX} and the cache "
                            "(stoker rescans the shard), or restore the shard.",
                        )
                    )
                    break
                counts["members_read"] += len(run)
                by_kind: dict[str, list[tuple[int, bytes]]] = {}
                for j, m in enumerate(run.tolist()):
                    if m not in field_of or sizes[m] == 0:
                        continue
                    if isinstance(field_of[m][1], _Unparsed):
                        continue
                    decoder = field_of[m][1]
                    blob = data[starts[j] : starts[j] + sizes[m]].tobytes()
                    kind = "parsed" if isinstance(decoder, _PARSED) else type(decoder).__name__
                    by_kind.setdefault(kind, []).append((m, blob))
                images, clips = by_kind.get(Image.__name__, []), by_kind.get(Clip.__name__, [])
                _decode_images(ds, names, images, field_of, image_options, cores, out, counts)
                _decode_clips(ds, names, clips, field_of, pool, out, counts)
                _parse_members(ds, names, by_kind.get("parsed", []), field_of, arrays, out)
                done += len(run)
                if bar is not None:
                    bar(done, total)
    if bar is not None:
        bar(total, total)
        bar.close()
    _array_agreement(ds, arrays, out)
    return dict(counts)


def _decode_images(ds, names, blobs, field_of, options, cores, out, counts) -> None:
    if not blobs:
        return
    pixels = np.empty((len(blobs), 3, DECODE_SIZE, DECODE_SIZE), np.uint8)
    errors = _core.decode_images(
        [b for _, b in blobs],
        options,
        pixels,
        DECODE_SIZE,
        DECODE_SIZE,
        threads=cores,
        collect_errors=True,
    )
    counts["images_decoded"] += len(blobs)
    for (m, _), error in zip(blobs, errors):
        if error:
            name, _, sample = field_of[m]
            out.add(
                _member_finding(
                    ds,
                    sample,
                    name,
                    f"the image {names[m]!r} does not decode: {error}",
                    "an image that decodes whole",
                    error,
                    "Re-encode the image from its source, or leave the sample out. " + _SKIP_FIX,
                )
            )


def _decode_clip(name: str, blob: bytes, frames: Sequence[int]) -> str:
    """Empty when every frame of the clip decodes and it holds ``frames``; else what is wrong."""
    try:
        reader = _core.VideoReader.from_bytes(name, blob, 1)
        n = reader.num_frames
        if n <= max(frames):
            return f"the clip has {n} frames; the spec's window reads frame {max(frames)}"
        out = np.empty((n, 3, CLIP_SIZE, CLIP_SIZE), np.uint8)
        reader.get_frames(
            np.arange(n, dtype=np.int64),
            out,
            CLIP_SIZE,
            CLIP_SIZE,
            _core.Layout.NCHW,
            _core.Interpolation.bilinear,
        )
    except Error as error:
        return str(error)
    return ""


def _decode_clips(ds, names, blobs, field_of, pool, out, counts) -> None:
    if not blobs:
        return
    jobs = [pool.submit(_decode_clip, names[m], blob, field_of[m][1].frames) for m, blob in blobs]
    counts["clips_decoded"] += len(blobs)
    for (m, _), job in zip(blobs, jobs):
        error = job.result()
        if error:
            name, _, sample = field_of[m]
            out.add(
                _member_finding(
                    ds,
                    sample,
                    name,
                    f"the clip {names[m]!r} cannot be read as the spec asks: {error}",
                    "a clip that decodes, holding the spec's frames",
                    error,
                    "Re-encode the clip (stoker etl / ffmpeg), or give the spec frames it holds. "
                    + _SKIP_FIX,
                )
            )


def _decoder_name(decoder: Any) -> str:
    """The name the engine's member decoders know ``decoder``'s kind by."""
    kinds = ((Json, "json"), (Tokens, "tokens"), (Array, "array"), (Text, "text"), (Label, "label"))
    return next(name for kind, name in kinds if isinstance(decoder, kind))


def _expected(decoder: Any) -> str:
    if isinstance(decoder, Json):
        keys = ", ".join(f"{k!r} ({t})" for k, t in decoder.keys.items())
        return "a json object with " + keys
    if isinstance(decoder, Tokens):
        return "a 1-D integer .npy array"
    if isinstance(decoder, Array):
        return "a .npy array of numbers"
    return "UTF-8 text"


def _parse_members(ds, names, blobs, field_of, arrays, out) -> None:
    """Json, texts, token and .npy arrays decoded by the loader's own decoders (one call per
    field), so that the check refuses exactly the members the loader refuses, in its words."""
    by_field: dict[str, list[tuple[int, bytes]]] = {}
    for m, blob in blobs:
        by_field.setdefault(field_of[m][0], []).append((m, blob))
    for name, members in by_field.items():
        decoder = field_of[members[0][0]][1]
        keys = list(decoder.keys.items()) if isinstance(decoder, Json) else []
        decoded = _core.decode_shard_members(
            _decoder_name(decoder), [blob for _, blob in members], keys
        )
        for (m, _), (problem, dtype, shape) in zip(members, decoded):
            sample = field_of[m][2]
            if not problem:
                if isinstance(decoder, Array):
                    arrays.setdefault(name, {}).setdefault((dtype, tuple(shape)), []).append(
                        (sample, names[m])
                    )
                continue
            out.add(
                _member_finding(
                    ds,
                    sample,
                    name,
                    f"the member {names[m]!r} cannot be read as the spec's "
                    f"{type(decoder).__name__}: {problem}",
                    _expected(decoder),
                    problem,
                    "Rewrite the member, or leave the sample out. " + _SKIP_FIX,
                )
            )


def _array_agreement(ds, arrays, out) -> None:
    """An Array field's members must share one dtype and shape (the batch stacks them)."""
    for name, kinds in arrays.items():
        if len(kinds) < 2:
            continue
        common = max(kinds, key=lambda k: len(kinds[k]))
        for kind, members in kinds.items():
            if kind == common:
                continue
            for sample, member in members:
                out.add(
                    _member_finding(
                        ds,
                        sample,
                        name,
                        f"the array {member!r} is {kind[0]} {kind[1]}, the field's others "
                        f"{common[0]} {common[1]} ({len(kinds[common])} members): a batch "
                        "stacks them",
                        f"{common[0]} {common[1]}",
                        f"{kind[0]} {kind[1]}",
                        "Write every sample's array in one dtype and shape (or read it as "
                        "stoker.Tokens when its length varies). " + _SKIP_FIX,
                    )
                )


# ---------------------------------------------------------------------------------------------
# Labels: per shard, and in the first batches of a shuffled epoch


def _labels(ds: ShardDataset) -> np.ndarray | None:
    """Per sample its label as an index into the dataset's distinct labels, -1 where none;
    None when no sample has one (or fewer than two labels exist)."""
    decoder = next((d for d in ds.spec.values() if isinstance(d, Label)), None)
    decoder = decoder if decoder is not None else Label("cls")
    no_label = _core.ShardIndex.NO_LABEL
    values = np.full(len(ds), no_label, np.int64)
    for s in range(len(ds.urls)):
        samples = _shard_samples(ds, s)
        members = ds.resolve_members(decoder, samples)
        has = members >= 0
        values[samples[has]] = ds.indexes[s].labels[members[has]]
    known = values != no_label
    if not known.any():
        return None
    distinct, inverse = np.unique(values[known], return_inverse=True)
    if len(distinct) < 2:
        return None
    labels = np.full(len(ds), -1, np.int64)
    labels[known] = inverse
    return labels


def _expected_distinct(shares: np.ndarray, draws: np.ndarray | int) -> np.ndarray:
    """Distinct labels among ``draws`` random samples: sum over labels of 1 - (1 - p) ** n."""
    n = np.asarray(draws, np.float64)[..., None]
    return np.sum(1.0 - (1.0 - shares) ** n, axis=-1)


def _label_spread_shards(ds: ShardDataset, labels: np.ndarray, out: _Findings) -> None:
    known = labels >= 0
    classes = int(labels.max()) + 1
    shares = np.bincount(labels[known], minlength=classes) / known.sum()
    per_shard = np.bincount(ds.sample_shard[known], minlength=len(ds.urls))
    pairs = np.unique(ds.sample_shard[known] * classes + labels[known])
    distinct = np.bincount(pairs // classes, minlength=len(ds.urls))
    usable = np.flatnonzero(per_shard >= 2)
    if usable.size == 0:
        return
    expected = _expected_distinct(shares, per_shard[usable])
    ratio = distinct[usable] / expected
    if np.median(ratio) > NARROW:
        return
    worst = int(usable[np.argmin(ratio)])
    held = np.unique(labels[known & (ds.sample_shard == worst)])
    out.add(
        Finding(
            "info",
            "label_spread_shards",
            f"the shards are sorted by label: the median shard holds {np.median(ratio):.0%} of "
            f"the labels a random shard of its size would; {os.path.basename(ds.urls[worst])} "
            f"holds {len(held)} of the dataset's {classes} labels in {per_shard[worst]} samples "
            f"(random: {float(_expected_distinct(shares, per_shard[worst])):.1f}). Only the "
            "shuffle buffer mixes them (see label_spread_batches)",
            shard=ds.urls[worst],
            expected=f"{float(_expected_distinct(shares, per_shard[worst])):.1f} labels",
            found=f"{len(held)} labels",
            fix="Write shuffled shards: stoker shard SRC DST --shuffle-seed 0.",
        )
    )


def _batch_spread(order: np.ndarray, labels: np.ndarray, size: int, count: int):
    """(distinct labels per batch, labelled samples per batch) of the first ``count`` batches."""
    distinct, labelled = [], []
    for k in range(count):
        batch = labels[order[k * size : (k + 1) * size]]
        batch = batch[batch >= 0]
        distinct.append(len(np.unique(batch)))
        labelled.append(len(batch))
    return np.array(distinct), np.array(labelled)


def _label_spread_batches(ds: ShardDataset, labels: np.ndarray, out: _Findings) -> None:
    known = labels >= 0
    classes = int(labels.max()) + 1
    shares = np.bincount(labels[known], minlength=classes) / known.sum()
    sampler = _core.ShardStreamSampler(
        ds.shard_samples.astype(np.int64),
        ds.shard_bytes,
        seed=SEED,
        shuffle_buffer=DEFAULT_SHUFFLE_BUFFER,
    )
    order = np.asarray(sampler.epoch_order(0))
    size = min(BATCH_SIZE, len(order) // FIRST_BATCHES)
    if size < 2:
        return
    count = min(FIRST_BATCHES, len(order) // size)

    def dominant(order: np.ndarray) -> tuple[int, float]:
        """The most common label of the first batches, and its share of their labelled
        samples."""
        first = labels[order[: size * count]]
        first = first[first >= 0]
        if not first.size:
            return -1, 0.0
        counts = np.bincount(first, minlength=classes)
        return int(counts.argmax()), float(counts.max() / first.size)

    def judge(order: np.ndarray) -> tuple[str | None, float, float]:
        distinct, labelled = _batch_spread(order, labels, size, count)
        expected = float(np.mean(_expected_distinct(shares, labelled)))
        mean = float(distinct.mean())
        if expected >= SINGLE_LABEL_EXPECTED and (distinct <= 1).all():
            return "error", mean, expected
        label, share = dominant(order)
        if label >= 0 and share >= DOMINANT and shares[label] <= DOMINANT_DATA_SHARE:
            return "error", mean, expected
        if expected >= 2 and mean < NARROW * expected:
            return "warning", mean, expected
        return None, mean, expected

    severity, mean, expected = judge(order)
    if severity is None:
        return
    top, top_share = dominant(order)
    stream = np.asarray(sampler.epoch_stream(0))
    suggested = None
    buffer = DEFAULT_SHUFFLE_BUFFER
    while buffer < len(stream):
        buffer *= 2
        mixed = _core.shuffle_buffer_order(stream, buffer, SEED, 0, 0)
        if judge(np.asarray(mixed))[0] is None:
            suggested = buffer
            break
    seen = np.unique(labels[order[: size * count]])
    seen = seen[seen >= 0]
    head = (
        f"the first {count} batches of {size} of a shuffled epoch (stoker.Loader's default "
        f"shuffle buffer of {DEFAULT_SHUFFLE_BUFFER} samples, seed {SEED}) "
    )
    if severity == "error" and mean <= 1:
        what = (
            f"each hold a single label ({len(seen)} label(s) in all: "
            f"{', '.join(str(int(v)) for v in seen[:5])}) of the dataset's {classes}; random "
            f"batches would hold {expected:.1f}: training starts on one class at a time"
        )
    elif severity == "error":
        what = (
            f"are {top_share:.0%} label {top} (which is {shares[top]:.0%} of the dataset's "
            f"samples), {mean:.1f} distinct labels per batch where random batches would hold "
            f"{expected:.1f} (of the dataset's {classes}): training starts on one class at a time"
        )
    else:
        what = (
            f"hold {mean:.1f} distinct labels on average, where random batches of {size} would "
            f"hold {expected:.1f} (of the dataset's {classes}): the batches are narrow"
        )
    if suggested is not None:
        fix = (
            f"Give the Loader shuffle_buffer={suggested} (its first batches are then mixed), "
            "or write shuffled shards: stoker shard SRC DST --shuffle-seed 0."
        )
    else:
        fix = (
            "No shuffle buffer within the epoch mixes them: the shards hold too few labels "
            "each. Write shuffled shards: stoker shard SRC DST --shuffle-seed 0."
        )
    first = int(ds.sample_shard[order[0]])
    out.add(
        Finding(
            severity,
            "label_spread_batches",
            head + what,
            shard=ds.urls[first],
            expected=f"{expected:.1f} labels per batch",
            found=f"{mean:.1f} labels per batch",
            fix=fix,
        )
    )
