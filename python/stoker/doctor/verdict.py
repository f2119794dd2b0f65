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
# The machine counts as saturated (the loader's threads competed for CPUs) when this share of
# its cores was busy; a sweep point is then projected for a quiet machine.
SATURATED = 0.9
# Stage times may exceed the threads' time by this factor (timer granularity, the batches
# being built when the clock stopped) before they count as not adding up; below the lower
# bound the threads spent most of their time in no stage.
STAGES_OVER, STAGES_UNDER = 1.2, 0.5
# With the loader building batches ahead while the step runs, the together rate is about the
# lower of the compute-only and input-only rates; below this share of it (beyond the rates'
# intervals) the two did not overlap, and the report says why.
TOGETHER_FAR_BELOW = 0.75
# The step "uses CPUs" (it competes with the loader's threads) above this many, on average.
STEP_CPUS = 0.3
# The loader has headroom when it alone supplies this many times the step's rate: a wait over
# SMALL_WAIT_SHARE is then the hand-off's latency (on a contended machine), not a short supply,
# when the achieved rate is the step's within the rates' intervals.
HEADROOM = 2.0


def _projected(d: Diagnosis) -> list[SweepPoint]:
    """The sweep as a quiet machine would give it, when other processes took CPUs from it:
    a point whose threads got fewer CPUs than they could use, on a saturated machine, is
    scaled by threads / CPUs it got (its work per batch does not change with contention).
    Empty when no point was held back."""
    projected, held_back = [], False
    for p in d.sweep:
        usable = min(p.threads, d.cores)
        saturated = p.cpus + p.other_cpus >= SATURATED * d.cores
        if saturated and p.other_cpus >= 0.3 and 0 < p.cpus < 0.85 * usable:
            held_back = True
            projected.append(
                SweepPoint(
                    p.threads, p.batches_per_s * usable / p.cpus, p.precision, float(usable), 0.0
                )
            )
        else:
            projected.append(p)
    return projected if held_back else []


def _margin(d: Diagnosis, *names: str) -> float:
    """How far two rates may differ before it is more than measurement noise."""
    total = 0.0
    for name in names:
        precision = d.precision.get(name, math.inf)
        total += precision if math.isfinite(precision) else 2 * d.tolerance
    return max(total, d.tolerance)


def _cause(d: Diagnosis, disturbed: str, other: str) -> str:
    """Why the ``disturbed`` phase measured low: contention when other processes took more
    CPUs then than during ``other``, else warm-up."""
    cpus = d.phase_cpus
    then = cpus.get(disturbed, {}).get("others")
    later = cpus.get(other, {}).get("others")
    if then is not None and later is not None and then > later + 0.3:
        return (
            f"contention: other processes kept {then:.1f} CPUs busy during the {disturbed} "
            f"run and {later:.1f} during the {other} run"
        )
    if then is not None and then > 0.5:
        return (
            f"contention: other processes kept {then:.1f} of {d.cores} CPUs busy during the "
            f"{disturbed} run"
        )
    return (
        f"warm-up: the {disturbed} run came first, and its batches paid for opening files "
        f"and filling caches that the {other} run found ready"
    )


def _finite_or(value: float, default: float) -> float:
    return value if math.isfinite(value) else default


def falls(sweep: list[SweepPoint], tolerance: float) -> list[tuple[SweepPoint, SweepPoint]]:
    """The consecutive sweep points (fewer threads, more threads) where the rate falls beyond
    the two points' intervals: the same work cannot take longer on more threads unless they
    compete for CPUs (or for something else they share)."""
    found = []
    for fewer, more in zip(sweep, sweep[1:]):
        margin = max(
            tolerance,
            _finite_or(fewer.precision, 2 * tolerance) + _finite_or(more.precision, 2 * tolerance),
        )
        if more.batches_per_s * (1 + margin) < fewer.batches_per_s:
            found.append((fewer, more))
    return found


def _fall_cause(d: Diagnosis, fewer: SweepPoint, more: SweepPoint) -> str:
    """Why the sweep measured less at more threads: whom the threads competed with."""
    usable = min(more.threads, d.cores)
    if more.other_cpus >= 0.3 or more.other_cpus > fewer.other_cpus + 0.3:
        return (
            f"contention with other processes: they kept {more.other_cpus:.1f} of "
            f"{d.cores} CPUs busy during the {more.threads}-thread point "
            f"({fewer.other_cpus:.1f} during the {fewer.threads}-thread one), and its "
            f"{more.threads} threads got {more.cpus:.1f} CPUs"
        )
    if more.cpus < 0.85 * usable:
        return (
            f"contention between the loader's own threads: its {more.threads} threads kept "
            f"only {more.cpus:.1f} CPUs busy (they waited for a lock or for storage)"
        )
    return (
        f"contention for what the threads share (memory bandwidth, caches, a CPU's "
        f"sibling hyper-thread): its {more.threads} threads kept {more.cpus:.1f} CPUs busy "
        f"and built fewer batches"
    )


def _together_cause(d: Diagnosis) -> str:
    """Why the together run was far below the lower of the compute-only and input-only rates:
    contention between compute and input on shared cores, or with other processes."""
    cpus = d.phase_cpus
    step = cpus.get("compute", {}).get("mine")
    loader = cpus.get("input", {}).get("mine")
    others = cpus.get("together", {}).get("others")
    others_before = cpus.get("input", {}).get("others")
    if step is not None and loader is not None and step >= STEP_CPUS:
        if step + loader > SATURATED * d.cores:
            return (
                f"contention between compute and input on shared cores: the step alone kept "
                f"{step:.1f} CPUs busy and the loader alone {loader:.1f}, {step + loader:.1f} "
                f"together on {d.cores} cores; run at once they share the cores, and each "
                f"goes slower than alone. Training gets the together rate: fewer loader "
                f"threads leave the step its cores, more cores (or the step on a GPU) "
                f"remove the contention"
            )
    if others is not None and (
        others > 0.5 or (others_before is not None and others > others_before + 0.3)
    ):
        return (
            f"contention with other processes: they kept {others:.1f} of {d.cores} CPUs "
            f"busy during the together run"
            + (f" ({others_before:.1f} during input only)" if others_before is not None else "")
        )
    mine = cpus.get("together", {}).get("mine")
    if mine is not None and others is not None and mine + others >= SATURATED * d.cores:
        return (
            f"contention on shared cores: all {d.cores} were busy during the together run "
            f"({mine:.1f} CPUs this process, step and loader, {others:.1f} others)"
        )
    return (
        "no CPU contention was seen: the loader's batches were not ready when asked "
        f"(data_wait p50 {d.percentile_ms(d.data_wait, 50):.0f} ms) though its threads had "
        "CPUs; the step may hold a lock the loader needs (the GIL, in Python that does not "
        "release it), or storage slowed down"
    )


def check_consistency(d: Diagnosis) -> None:
    """Fills ``problems``: rates and times that contradict each other, each with its likely
    cause. Together cannot beat either rate alone, data_wait plus steps is the wall time, and
    the stages' thread-time fits in the threads' time."""
    together = d.achieved_batches_per_s
    if together > d.input_batches_per_s * (1 + _margin(d, "input", "together")):
        d.problems.append(
            f"the together run reached {together:.2f} batches/s, above the input-only "
            f"run's {d.input_batches_per_s:.2f}: the loader cannot supply faster while a "
            f"step runs than with none. Likely cause: {_cause(d, 'input', 'together')}. "
            f"The verdict takes the higher rate as the loader's; run the doctor again on a "
            f"quiet machine to confirm."
        )
    lower = min(("compute", "input"), key=d.rate_of)
    expected = d.rate_of(lower)
    if (
        not d.estimated
        and math.isfinite(expected)
        and together * (1 + _margin(d, lower, "together")) < TOGETHER_FAR_BELOW * expected
    ):
        d.problems.append(
            f"the together run reached {together:.2f} batches/s, {together / expected:.0%} "
            f"of the {d.row_label(lower).split(' (')[0]} run's {expected:.2f}: with the loader "
            f"building batches while the step runs, together should come near the lower of "
            f"the two rates. Likely cause: {_together_cause(d)}."
        )
    if together > d.compute_batches_per_s * (1 + _margin(d, "compute", "together")):
        d.problems.append(
            f"the together run reached {together:.2f} batches/s, above the compute-only "
            f"run's {d.compute_batches_per_s:.2f}: a step on one held batch should be the "
            f"fastest. Likely cause: {_cause(d, 'compute', 'together')}."
        )
    if len(d.step_seconds) and d.wall_seconds > 0:
        accounted = float(d.data_wait.sum() + d.step_seconds.sum())
        if abs(accounted - d.wall_seconds) > 0.05 * d.wall_seconds:
            d.problems.append(
                f"data_wait and step times add up to {accounted:.2f} s, but the together run "
                f"took {d.wall_seconds:.2f} s: time went to neither (the process was "
                f"descheduled: contention)."
            )
    work = sum(v for k, v in d.stage_seconds.items() if k != "h2d")
    if work > 0 and d.threads and math.isfinite(d.input_batches_per_s):
        available = d.threads / d.input_batches_per_s  # thread-seconds per batch
        covered = work / available
        if covered > STAGES_OVER:
            d.problems.append(
                f"the stages add up to {work * 1000:.0f} thread-ms per batch, more than "
                f"the {d.threads} threads had ({available * 1000:.0f} ms per batch at the "
                f"input-only rate): the input-only rate is too high for its stage times "
                f"(warm-up: batches built before the clock started)."
            )
        elif covered < STAGES_UNDER:
            d.problems.append(
                f"the stages add up to {work * 1000:.0f} thread-ms per batch, {covered:.0%} "
                f"of the {d.threads} threads' time ({available * 1000:.0f} ms per batch): "
                f"the threads spent the rest in no stage (waiting for storage, for a lock, "
                f"or for a CPU: contention)."
            )


def _check_sweep(d: Diagnosis) -> None:
    """A sweep that falls with more threads is contention: a measurement problem, with whom
    the threads competed; the verdict draws no plateau from it."""
    for fewer, more in falls(d.sweep, d.tolerance):
        again = " (both measured again)" if fewer.measured > 1 and more.measured > 1 else ""
        if d.projected_sweep and not d.sweep_falls:
            then = " Projected for a quiet machine it does not fall: the verdict reads that."
        else:
            then = (
                " No plateau is concluded from it: run the doctor again on a quiet machine "
                "to know whether more threads help."
            )
        d.problems.append(
            f"the thread sweep falls from {fewer.batches_per_s:.2f} batches/s at "
            f"{fewer.threads} thread(s) to {more.batches_per_s:.2f} at {more.threads}{again}: "
            f"more threads cannot make the same work slower unless they compete. Likely "
            f"cause: {_fall_cause(d, fewer, more)}.{then}"
        )


def _interval(rate: float, precision: float) -> tuple[float, float]:
    return max(rate * (1 - precision), 0.0), rate * (1 + precision)


def _check_precision(d: Diagnosis, supply: str) -> None:
    """Each measured rate whose 95% interval is wider than the goal: say so, and whether the
    verdict still holds at the interval's edges (the compute-only rate against the loader's)."""
    rates = {"compute": "compute-only", "input": "input-only", "together": "together"}
    for row, name in rates.items():
        if not d.missed_goal(row):
            continue
        precision = d.precision[row]
        known = (
            f"is known only to +-{precision:.0%} (the goal is +-{d.tolerance:.0%})"
            if math.isfinite(precision)
            else "is not known (too few batches for an interval)"
        )
        text = (
            f"the {name} rate, {d.rate_of(row):.2f} batches/s, {known}: its phase ran out of "
            f"time (batch times vary a lot: a loaded machine, or a slow warm-up)."
        )
        if row == "together":
            text += (
                " The data_wait share comes from this run: the verdict's 'waited for data' "
                "is as uncertain."
            )
        elif row in ("compute", supply):
            other = supply if row == "compute" else "compute"
            low, high = _interval(d.rate_of(row), _finite_or(precision, 1.0))
            o_low, o_high = _interval(
                d.rate_of(other), _finite_or(d.precision.get(other, 0.0), 1.0)
            )
            if high < o_low or o_high < low:
                text += (
                    f" The verdict holds: from {low:.2f} to {high:.2f} it stays "
                    f"{'below' if high < o_low else 'above'} the {rates[other]} rate "
                    f"({o_low:.2f} to {o_high:.2f})."
                )
            else:
                text += (
                    f" The verdict is not settled: from {low:.2f} to {high:.2f} it overlaps "
                    f"the {rates[other]} rate ({o_low:.2f} to {o_high:.2f}), so either could "
                    f"be the lower; run again with a longer --budget, or on a quiet machine."
                )
        else:
            text += " The verdict does not rest on it."
        d.problems.append(text)


def _plateau(sweep: list[SweepPoint]) -> SweepPoint | None:
    """The fewest threads within PLATEAU of the best rate."""
    if not sweep:
        return None
    best = max(p.batches_per_s for p in sweep)
    return min((p for p in sweep if p.batches_per_s >= PLATEAU * best), key=lambda p: p.threads)


def conclude(d: Diagnosis) -> None:
    """Fills problems, bound, verdict, headline and advice from the measurements
    (docs/doctor.md). A sweep held back by other processes is judged as projected for a quiet
    machine; a sweep that falls is contention, and gives no plateau. The loader's rate is the
    input-only one, unless the together run beat it beyond their intervals (a measurement
    problem): then the together rate stands for it, and the headline says which it is."""
    d.problems = []
    check_consistency(d)
    d.projected_sweep = _projected(d)
    sweep = d.projected_sweep or d.sweep
    d.sweep_falls = bool(falls(sweep, d.tolerance))
    _check_sweep(d)
    plateau = None if d.sweep_falls else _plateau(sweep)
    d.plateau_threads = plateau.threads if plateau else None
    beaten = d.achieved_batches_per_s > d.input_batches_per_s * (
        1 + _margin(d, "input", "together")
    )
    d.supply_row = "together" if beaten else "input"
    d.supply_batches_per_s = d.rate_of(d.supply_row)
    _decide(d, sweep, plateau)
    _check_precision(d, d.supply_row)


def _supply_text(d: Diagnosis) -> str:
    """What the loader supplies, as the headline says it after "the loader": the table's
    figures, naming their row."""
    b = d.batch_size
    rate = d.supply_batches_per_s
    if d.supply_row == "together":
        return (
            f"supplied {rate:.2f} batches/s ({rate * b:.1f} samples/s, the together row) "
            f"while the step ran, above its input-only {d.input_batches_per_s:.2f} (see "
            f"MEASUREMENT PROBLEM)"
        )
    return f"alone supplies {rate:.2f} batches/s ({rate * b:.1f} samples/s, the input-only row)"


def _decide(d: Diagnosis, sweep: list[SweepPoint], plateau: SweepPoint | None) -> None:
    """The bound, verdict, headline and advice (docs/doctor.md's decision table)."""
    compute = d.compute_batches_per_s
    supply = d.supply_batches_per_s
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

    together = d.achieved_batches_per_s
    at_step_rate = supply >= HEADROOM * compute and together >= compute * (
        1 - _margin(d, "compute", "together")
    )
    if compute < supply and (small_wait or at_step_rate):
        d.bound, d.verdict = "compute", "compute-bound"
        waits = ""
        if not small_wait:
            busy = " on a busy machine" if d.contention else ""
            waits = (
                " (not a short supply: the loader alone gives over twice the step's rate "
                "and training ran at the step's, within the rates' intervals; the waits are "
                f"the hand-off of ready batches{busy})"
            )
        d.headline = (
            f"The step runs at {compute:.2f} batches/s (the compute-only row) and the loader "
            f"{_supply_text(d)}; the trainer waited for data "
            f"{d.data_wait_share:.1%} of the time{waits}."
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
        f"{_supply_text(d)}; the step alone runs at {compute:.2f} (the "
        f"compute-only row)."
    )
    current = next((p for p in sweep if p.threads == d.threads), None)
    threads_note = "more threads no longer help"
    if d.sweep_falls:
        threads_note = (
            "the thread sweep fell with more threads (contention), so it cannot say whether "
            "more threads would help"
        )
    if plateau is not None:
        last, before_last = sweep[-1], sweep[-2] if len(sweep) > 1 else None
        still_scales = (
            before_last is not None
            and last.batches_per_s >= STILL_SCALES * before_last.batches_per_s
        )
        enough = [p for p in sweep if p.batches_per_s >= compute]
        target = min(enough, key=lambda p: p.threads) if enough else plateau
        below_target = d.threads < target.threads and (
            current is None or target.batches_per_s >= STILL_SCALES * current.batches_per_s
        )
        if below_target:
            d.verdict = "add-threads"
            which = (
                "the sweep, projected for a quiet machine (other processes took CPUs from "
                "it), gives"
                if d.projected_sweep
                else "the sweep gives"
            )
            d.advice = [
                f"Raise threads from {d.threads} to {target.threads}: {which} "
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
    """What re-encoding at training size or a shorter GOP, or fewer frames, would gain. A
    dataset ``stoker etl`` wrote is not sent through it again with the options it had."""
    work = d.decode_work
    if not work or not work.get("output_pixels"):
        return
    if not force and share < 0.5:
        return
    pixels = work["source_pixels"] / work["output_pixels"]
    decode = groups["decode"]
    other = sum(groups.values()) - decode
    etl = d.materialized
    size = work["output_size"]
    if pixels > 1.3:
        # Decode cost scales about with the pixels decoded; stoker etl's encodes are also tuned
        # for fast decoding, which bench/etl_bench.py measures as a further gain.
        after = other + decode / pixels
        new_rate = d.threads / after if after > 0 else math.inf
        source = "the original dataset" if etl is not None else "SRC"
        d.advice.append(
            f"Frames are decoded at {work['source_size']} and used at {size} "
            f"({pixels:.1f}x the pixels). Re-encoding once with `stoker etl {source} DST "
            f"--size {size}` should cut decode cost at least {pixels:.1f}x, to an input rate "
            f"near {min(new_rate, 1e9):.1f} batches/s."
        )
    elif etl is not None:
        d.advice.append(
            f"The dataset is already at its training size ({size}), written by stoker etl "
            f"with a keyframe every {etl.get('gop')} frames: re-encoding it at the same "
            f"settings would not help."
        )
    if work["decoded_per_kept"] > 2:
        gop = etl.get("gop") if etl is not None else None
        if isinstance(gop, int) and gop > 1:
            shorter = max(1, gop // 2)
            d.advice.append(
                f"Each kept frame costs {work['decoded_per_kept']:.1f} decoded ones with "
                f"this dataset's keyframe every {gop} frames: `stoker etl SRC DST --size "
                f"{size} --gop {shorter}` would decode fewer (larger files), or a window "
                f"whose frames sit in fewer GOPs."
            )
        elif etl is None:
            d.advice.append(
                f"Each kept frame costs {work['decoded_per_kept']:.1f} decoded ones (the "
                f"GOP structure): stoker etl's encodes have a keyframe every "
                f"{_default_gop()} frames by default (`--gop` sets it), or a window whose "
                f"frames sit in fewer GOPs would decode fewer."
            )


def _default_gop() -> int:
    from stoker import _core

    return int(_core.EncoderOptions().gop)
