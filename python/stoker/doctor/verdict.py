"""The doctor's verdict: from the measurements in a :class:`~stoker.doctor.report.Diagnosis`,
which roofline bounds training, what dominates, and what to change (docs/doctor.md's decision
table)."""

from __future__ import annotations

import math

from stoker.doctor.report import Diagnosis, SweepPoint

# A step's wait for data is "small" below this share of the wall time.
SMALL_WAIT_SHARE = 0.05
# A thread count "helps" when it adds this much rate; the plateau is the first count within
# PLATEAU of the best rate.
STILL_SCALES = 1.15
PLATEAU = 0.9


def _plateau(sweep: list[SweepPoint]) -> SweepPoint | None:
    """The fewest threads within PLATEAU of the best rate."""
    if not sweep:
        return None
    best = max(p.batches_per_s for p in sweep)
    return min((p for p in sweep if p.batches_per_s >= PLATEAU * best), key=lambda p: p.threads)


def conclude(d: Diagnosis) -> None:
    """Fills bound, verdict, headline and advice from the measurements (docs/doctor.md)."""
    plateau = _plateau(d.sweep)
    d.plateau_threads = plateau.threads if plateau else None
    b = d.batch_size
    compute, supply = d.compute_batches_per_s, d.input_batches_per_s
    small_wait = d.data_wait_share < SMALL_WAIT_SHARE
    stages = d.stage_seconds
    groups = {
        "decode": stages.get("seek", 0) + stages.get("decode", 0) + stages.get("convert", 0),
        "transform": stages.get("transform", 0),
        "collate": stages.get("collate", 0),
        "index": stages.get("index", 0) + stages.get("sampling", 0),
        "h2d": stages.get("h2d", 0),
    }
    dominant = max(groups, key=lambda group: groups[group])
    d.dominant_stage = {
        "decode": max(("seek", "decode", "convert"), key=lambda s: stages.get(s, 0)),
        "index": "index",
    }.get(dominant, dominant)
    share = groups[dominant] / (sum(groups.values()) or 1)

    if compute < supply and small_wait:
        d.bound, d.verdict = "compute", "compute-bound"
        d.headline = (
            f"The step runs at {compute:.2f} batches/s and the loader can supply "
            f"{supply:.2f}; the trainer waited for data {d.data_wait_share:.1%} of "
            f"the time."
        )
        d.advice = [
            "Stop tuning the loader: it is not the bottleneck.",
            "Look at the model's side: a larger batch size if memory allows, mixed "
            "precision, a faster kernel or compiled model.",
        ]
        if supply > 2 * compute:
            threads_needed = max(1, math.ceil(d.threads * compute / supply * 1.25))
            d.advice.append(
                f"The loader has headroom: about {threads_needed} thread(s) would "
                f"still keep up, freeing cores for other work."
            )
        return

    d.bound = "input"
    d.headline = (
        f"The trainer waited for data {d.data_wait_share:.1%} of the time: the loader "
        f"supplies {supply:.2f} batches/s ({supply * b:.0f} samples/s); the step "
        f"alone runs at {compute:.2f}."
    )
    current = next((p for p in d.sweep if p.threads == d.threads), None)
    threads_note = "more threads no longer help"
    if plateau is not None:
        last, before_last = d.sweep[-1], d.sweep[-2] if len(d.sweep) > 1 else None
        still_scales = (
            before_last is not None
            and last.batches_per_s >= STILL_SCALES * before_last.batches_per_s
        )
        enough = [p for p in d.sweep if p.batches_per_s >= compute]
        target = min(enough, key=lambda p: p.threads) if enough else plateau
        below_target = d.threads < target.threads and (
            current is None or target.batches_per_s >= STILL_SCALES * current.batches_per_s
        )
        if below_target:
            d.verdict = "add-threads"
            d.advice = [
                f"Raise threads from {d.threads} to {target.threads}: the sweep gives "
                f"{target.batches_per_s:.2f} batches/s there "
                f"({'enough for' if target.batches_per_s >= compute else 'still below'} "
                f"the step's {compute:.2f})."
            ]
            if still_scales and target.threads == d.cores and target.batches_per_s < compute:
                d.advice.append(
                    f"The sweep still scales at {d.cores} cores: more cores (or "
                    f"less work per sample, see below) would help further."
                )
            _decode_advice(d, groups, share)
            return
        if still_scales and d.threads >= d.cores:
            threads_note = (
                f"the loader already runs on all {d.cores} cores (the sweep still "
                f"scales: more cores would help too)"
            )
    if dominant == "decode":
        d.verdict = "decode-bound"
        d.advice = [
            f"Per-sample cost bounds the supply, and decoding is {share:.0%} of it "
            f"(dominant part: {d.dominant_stage}); {threads_note}."
        ]
        _decode_advice(d, groups, share, force=True)
    else:
        d.verdict = "stage-bound"
        d.advice = [
            f"Per-sample cost bounds the supply, and {d.dominant_stage} is {share:.0%} "
            f"of it: the bottleneck has moved off decoding; {threads_note}."
        ]
        if dominant == "transform":
            d.advice.append(
                "Output uint8 and normalize on the GPU, or use a cheaper dtype "
                "(float16/bfloat16 halve the bytes written)."
            )
        elif dominant == "collate":
            d.advice.append("Fewer or smaller per-sample columns, or a smaller batch.")
        elif dominant == "h2d":
            d.advice.append(
                "Use device='cuda' (pinned memory, overlapped copies) and uint8 "
                "images, normalized on the GPU."
            )
        else:
            d.advice.append("Planning and sampling dominate: check the window spec.")


def _decode_advice(d: Diagnosis, groups: dict[str, float], share: float, force=False) -> None:
    """What re-encoding at training size or a shorter GOP, or fewer frames, would gain."""
    work = d.decode_work
    if not work or not work.get("output_pixels"):
        return
    if not force and share < 0.5:
        return
    pixels = work["source_pixels"] / work["output_pixels"]
    decode = groups["decode"]
    other = sum(groups.values()) - decode
    if pixels > 1.3:
        # Decode cost scales about with the pixels decoded; stoker etl's encodes are also tuned
        # for fast decoding, which bench/etl_bench.py measures as a further gain.
        after = other + decode / pixels
        new_rate = d.threads / after if after > 0 else math.inf
        size = work["output_size"]
        d.advice.append(
            f"Frames are decoded at {work['source_size']} and used at {size} "
            f"({pixels:.1f}x the pixels). Re-encoding once with `stoker etl SRC DST --size "
            f"{size}` should cut decode cost at least {pixels:.1f}x, to an input rate near "
            f"{min(new_rate, 1e9):.1f} batches/s."
        )
    if work["decoded_per_kept"] > 2:
        d.advice.append(
            f"Each kept frame costs {work['decoded_per_kept']:.1f} decoded ones (the "
            f"GOP structure): a shorter GOP (`stoker etl --gop`) or a window whose "
            f"frames sit in fewer GOPs would decode fewer."
        )
