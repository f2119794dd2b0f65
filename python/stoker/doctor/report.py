"""What the doctor found, and how it is shown: :class:`Diagnosis` with its summary text, its
JSON, and an HTML report with plots (matplotlib, when installed)."""

from __future__ import annotations

import html
import json
import math
import os
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: The stages of building a batch, in the order reports show them.
STAGES = ("sampling", "index", "seek", "decode", "convert", "transform", "collate", "h2d")

#: The rows of the rates table: (key, label). The headline names a rate by its row's label.
RATE_ROWS = (
    ("compute", "compute only (step on a held batch)"),
    ("input", "input only (loader, {threads} threads)"),
    ("together", "together (achieved)"),
)

#: Other processes keeping more CPUs than this busy, on average over the run or in one phase,
#: make the run contended: its rates are lower than on a quiet machine.
CONTENDED_CPUS = 0.2

NO_MATPLOTLIB = (
    "matplotlib is not installed: the report has no plots (pip install 'stoker[doctor]' adds them)"
)


def plotting_missing() -> str | None:
    """Why the report would have no plots (matplotlib cannot be imported), or None."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return NO_MATPLOTLIB
    return None


@dataclass
class SweepPoint:
    """The input-only rate at one thread count; ``precision`` is the relative half-width of its
    95% interval, ``cpus`` the CPUs the process kept busy meanwhile (below ``threads`` when
    other processes took the rest)."""

    threads: int
    batches_per_s: float
    precision: float = math.inf
    cpus: float = 0.0
    other_cpus: float = 0.0  # CPUs other processes kept busy meanwhile
    measured: int = 1  # how many times it was measured (a sweep that fell is measured again)


@dataclass
class Diagnosis:
    """What :func:`diagnose` (or :class:`profile`) measured, and the verdict.

    Rates are in batches per second. ``stage_seconds`` are thread-seconds per batch.
    ``bound`` is ``"compute"`` or ``"input"``; ``verdict`` is one of ``"compute-bound"``,
    ``"add-threads"``, ``"decode-bound"``, ``"stage-bound"`` (another stage dominates once
    decode is not the problem: the bottleneck has moved).
    """

    batch_size: int
    threads: int
    cores: int
    compute_batches_per_s: float
    input_batches_per_s: float
    step_seconds: np.ndarray
    data_wait: np.ndarray
    wall_seconds: float
    stage_seconds: dict[str, float]
    sweep: list[SweepPoint]
    decode_work: dict[str, float]
    balance: dict[str, float] | None = None
    bound: str = ""
    verdict: str = ""
    headline: str = ""
    advice: list[str] = field(default_factory=list)
    dominant_stage: str = ""
    plateau_threads: int | None = None  # where more threads stop helping (the sweep's)
    other_cpus: float | None = None  # CPUs other processes used meanwhile (diagnose only)
    estimated: list[str] = field(default_factory=list)  # which numbers are estimates
    #: Relative half-width of each rate's 95% interval ("compute", "input", "together").
    precision: dict[str, float] = field(default_factory=dict)
    tolerance: float = 0.05  # the precision the measurements aimed for
    #: Per phase, the CPUs other processes and this one kept busy ({"others": .., "mine": ..}).
    phase_cpus: dict[str, dict[str, float]] = field(default_factory=dict)
    #: ``stoker etl``'s options when it wrote the dataset (its report), else None.
    materialized: dict[str, Any] | None = None
    #: The run's configuration: dataset, spec, batch size, threads, stoker version, date.
    config: dict[str, Any] = field(default_factory=dict)
    #: Measurement problems: numbers that contradict each other, and why (shown first).
    problems: list[str] = field(default_factory=list)
    #: Where the sweep's rates were projected for a quiet machine (contention), the rates.
    projected_sweep: list[SweepPoint] = field(default_factory=list)
    #: The loader's rate the headline and the verdict use, and the row of the rates table it
    #: is ("input", or "together" when that run beat the input-only one beyond their
    #: intervals: a measurement problem).
    supply_batches_per_s: float = math.nan
    supply_row: str = "input"
    #: Whether the sweep (as the verdict reads it) falls with more threads: contention, and
    #: no plateau is concluded from it.
    sweep_falls: bool = False

    # ---- Derived numbers ----------------------------------------------------------------

    @property
    def data_wait_share(self) -> float:
        return float(self.data_wait.sum() / self.wall_seconds) if self.wall_seconds else 0.0

    @property
    def overlap(self) -> float:
        """The share of the input pipeline's work that was hidden behind the steps."""
        if not self.input_batches_per_s or not len(self.data_wait):
            return 0.0
        alone = len(self.data_wait) / self.input_batches_per_s
        return float(min(1.0, max(0.0, 1 - self.data_wait.sum() / alone)))

    @property
    def achieved_batches_per_s(self) -> float:
        return len(self.step_seconds) / self.wall_seconds if self.wall_seconds else 0.0

    @property
    def verdict_text(self) -> str:
        """The bound and the verdict, once each: "compute-bound", "input-bound (decode-bound)"."""
        bound = f"{self.bound}-bound"
        return bound if self.verdict in ("", bound) else f"{bound} ({self.verdict})"

    def percentile_ms(self, values: np.ndarray, q: float) -> float:
        return float(np.percentile(values, q) * 1000) if len(values) else 0.0

    # ---- Output -------------------------------------------------------------------------

    def rate_of(self, row: str) -> float:
        """The rate of one row of the rates table ("compute", "input", "together")."""
        return {
            "compute": self.compute_batches_per_s,
            "input": self.input_batches_per_s,
            "together": self.achieved_batches_per_s,
        }[row]

    def row_label(self, row: str) -> str:
        """The label of one row of the rates table, as the summary prints it."""
        return dict(RATE_ROWS)[row].format(threads=self.threads)

    def missed_goal(self, row: str) -> bool:
        """Whether a measured rate's 95% interval is wider than the goal (``tolerance``)."""
        return row in self.precision and not self.precision[row] <= self.tolerance

    @property
    def contention(self) -> str:
        """A sentence saying that other processes kept CPUs busy during the run, and how many
        in each phase; empty on a quiet run."""
        phases = {
            phase: cpus["others"]
            for phase, cpus in self.phase_cpus.items()
            if cpus.get("others") is not None
        }
        busiest = max(phases.values(), default=0.0)
        overall = self.other_cpus or 0.0
        if max(overall, busiest) <= CONTENDED_CPUS:
            return ""
        # The figure quoted is the largest one the phases give (a short phase's reading can be
        # high while the run's average is low), never more CPUs than the machine has.
        cap = float(self.cores)
        each = ", ".join(f"{phase} {min(cpus, cap):.1f}" for phase, cpus in phases.items())
        return (
            f"contended run: other processes kept up to {min(max(overall, busiest), cap):.1f} "
            f"of {self.cores} CPUs busy during the measurement{f' ({each})' if each else ''}; "
            f"rates and the sweep are lower than on a quiet machine"
        )

    def _known(self, name: str) -> str:
        precision = self.precision.get(name, math.inf)
        if not math.isfinite(precision):
            return "+-?" if name in self.precision else ""
        return f"+-{precision:.0%}" + ("!" if self.missed_goal(name) else "")

    def summary(self) -> str:
        b = self.batch_size
        lines = []
        if self.problems:
            lines.append(
                "MEASUREMENT PROBLEM: these numbers contradict each other or are not known "
                "well enough; read them with care:"
            )
            lines.extend(f"  - {problem}" for problem in self.problems)
            lines.append("")
        if self.contention:
            lines += [f"warning: {self.contention}.", ""]
        lines += [f"stoker doctor: {self.bound}-bound. {self.headline}", ""]
        lines.append(f"{'rate':40s} {'batches/s':>10s} {'samples/s':>10s} {'95% CI':>7s}")
        for key, _ in RATE_ROWS:
            rate = self.rate_of(key)
            lines.append(
                f"{self.row_label(key):40s} {rate:10.2f} {rate * b:10.1f} {self._known(key):>7s}"
            )
        if any(self.missed_goal(key) for key, _ in RATE_ROWS):
            lines.append(
                f"  ! wider than the +-{self.tolerance:.0%} goal: the phase ran out of time "
                f"(see MEASUREMENT PROBLEM)"
            )
        lines.append("")
        lines.append(
            f"data_wait per step: p50 {self.percentile_ms(self.data_wait, 50):.2f} ms, "
            f"p95 {self.percentile_ms(self.data_wait, 95):.2f} ms, "
            f"max {self.percentile_ms(self.data_wait, 100):.2f} ms; "
            f"{self.data_wait_share:.1%} of wall time"
        )
        lines.append(
            f"step: p50 {self.percentile_ms(self.step_seconds, 50):.2f} ms; "
            f"input work hidden behind steps: {self.overlap:.0%}; "
            f"wall {self.wall_seconds:.2f} s over {len(self.step_seconds)} steps"
        )
        lines.append("")
        total = sum(self.stage_seconds.values()) or 1.0
        lines.append(f"{'stage (thread-ms per batch)':28s} {'ms':>9s} {'share':>7s}")
        for stage in STAGES:
            seconds = self.stage_seconds.get(stage, 0.0)
            lines.append(f"{stage:28s} {seconds * 1000:9.2f} {seconds / total:7.1%}")
        lines.append("")
        if self.sweep:
            sweep = ", ".join(f"{p.threads}: {p.batches_per_s:.2f}" for p in self.sweep)
            if self.sweep_falls:
                conclusion = (
                    "it falls with more threads (contention, see MEASUREMENT PROBLEM): "
                    "no plateau is concluded from it"
                )
            else:
                conclusion = f"more threads stop helping at {self.plateau_threads}"
            lines.append(f"thread sweep (threads: batches/s): {sweep}; {conclusion}")
        if self.projected_sweep:
            sweep = ", ".join(f"{p.threads}: {p.batches_per_s:.2f}" for p in self.projected_sweep)
            lines.append(f"  projected for a quiet machine (rate x threads / CPUs it got): {sweep}")
        if self.balance:
            lines.append(
                f"ranks: step imbalance (max / mean rank cost) "
                f"{self.balance['before']:.2f} as dealt; "
                f"{self.balance['after']:.2f} balanced (Loader(..., balance=True))"
            )
        if self.materialized is not None:
            size = self.materialized.get("size") or ["?", "?"]
            lines.append(
                f"dataset written by stoker etl: {size[1]}x{size[0]}, "
                f"{self.materialized.get('codec')}, gop {self.materialized.get('gop')}"
            )
        if self.estimated:
            lines.append("estimated, not measured: " + ", ".join(self.estimated))
        lines.append("")
        lines.append("What to do:")
        lines.extend(f"  - {line}" for line in self.advice)
        if self.config:
            lines.append("")
            lines.append("Configuration:")
            for key, value in self.config.items():
                text = json.dumps(value) if isinstance(value, (dict, list)) else str(value)
                lines.append(f"  {key}: {text}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        def finite(value: float) -> float | None:
            return value if math.isfinite(value) else None

        return {
            "bound": self.bound,
            "verdict": self.verdict,
            "headline": self.headline,
            "problems": self.problems,
            "advice": self.advice,
            "dominant_stage": self.dominant_stage,
            "config": self.config,
            "batch_size": self.batch_size,
            "threads": self.threads,
            "cores": self.cores,
            "compute_batches_per_s": finite(self.compute_batches_per_s),
            "input_batches_per_s": finite(self.input_batches_per_s),
            "achieved_batches_per_s": self.achieved_batches_per_s,
            "supply": {"batches_per_s": finite(self.supply_batches_per_s), "row": self.supply_row},
            "contention": self.contention,
            "precision": {k: finite(v) for k, v in self.precision.items()},
            "tolerance": self.tolerance,
            "data_wait_ms": {
                "p50": self.percentile_ms(self.data_wait, 50),
                "p95": self.percentile_ms(self.data_wait, 95),
                "max": self.percentile_ms(self.data_wait, 100),
                "total": float(self.data_wait.sum() * 1000),
            },
            "data_wait_ms_per_step": [float(v) * 1000 for v in self.data_wait],
            "step_ms_per_step": [float(v) * 1000 for v in self.step_seconds],
            "step_ms_p50": self.percentile_ms(self.step_seconds, 50),
            "step_ms_total": float(self.step_seconds.sum() * 1000),
            "wall_seconds": self.wall_seconds,
            "overlap": self.overlap,
            "stage_ms_per_batch": {k: v * 1000 for k, v in self.stage_seconds.items()},
            "sweep": [_point(p) for p in self.sweep],
            "projected_sweep": [_point(p) for p in self.projected_sweep],
            "plateau_threads": self.plateau_threads,
            "sweep_falls": self.sweep_falls,
            "other_cpus": self.other_cpus,
            "phase_cpus": self.phase_cpus,
            "materialized": self.materialized,
            "decode_work": self.decode_work,
            "balance": self.balance,
            "estimated": self.estimated,
        }

    def write_report(self, folder: str | os.PathLike) -> str:
        """Writes ``index.html``, ``report.json`` and the plots (``rates.png``, ``stages.png``,
        ``sweep.png``, ``data_wait.png``) into ``folder``; returns the HTML file's path.
        Without matplotlib there are no plots, and a warning says so."""
        folder = os.fspath(folder)
        os.makedirs(folder, exist_ok=True)
        missing = plotting_missing()
        if missing is not None:
            warnings.warn(f"stoker doctor: {missing}", stacklevel=2)
        plots = [] if missing is not None else _plot(self, folder)
        with open(os.path.join(folder, "report.json"), "w") as f:
            json.dump(self.to_dict(), f, indent=2)
        images = "".join(
            f'<figure><img src="{name}" alt="{html.escape(title)}">'
            f"<figcaption>{html.escape(title)}</figcaption></figure>"
            for name, title in plots
        )
        if not plots:
            images = f"<p>({html.escape(NO_MATPLOTLIB)})</p>"
        problems = ""
        if self.problems:
            problems = (
                '<div class="problem"><b>Measurement problem</b>: these numbers contradict '
                "each other; read them with care.<ul>"
                + "".join(f"<li>{html.escape(p)}</li>" for p in self.problems)
                + "</ul></div>"
            )
        title = f"stoker doctor: {self.verdict_text}"
        heading = f"stoker doctor: <span>{html.escape(self.verdict_text)}</span>"
        return write_page(
            folder,
            title,
            heading,
            self.headline,
            self.advice,
            images,
            self.summary(),
            before=problems,
        )


def write_page(
    folder: str,
    title: str,
    heading: str,
    headline: str,
    advice: list[str],
    figures: str,
    summary: str,
    before: str = "",
) -> str:
    """Writes a doctor report's ``index.html`` into ``folder``: the heading (HTML), ``before``
    (HTML), the headline and advice (text), the figures (HTML) and the measurements (text);
    returns its path. Shared by ``stoker doctor`` and ``stoker doctor --ray``."""
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;max-width:960px;margin:2em auto}}
pre{{background:#f4f4f4;padding:1em;white-space:pre-wrap;overflow-wrap:anywhere}}
img{{max-width:100%}} h1 span{{font-weight:normal}}
.problem{{background:#fff3cd;border:1px solid #e0b000;padding:0.5em 1em}}</style></head><body>
<h1>{heading}</h1>
{before}
<p><b>{html.escape(headline)}</b></p>
<ul>{"".join(f"<li>{html.escape(a)}</li>" for a in advice)}</ul>
{figures}
<h2>Measurements</h2><pre>{html.escape(summary)}</pre>
</body></html>"""
    path = os.path.join(folder, "index.html")
    with open(path, "w") as f:
        f.write(page)
    return path


def _point(p: SweepPoint) -> dict[str, Any]:
    return {
        "threads": p.threads,
        "batches_per_s": p.batches_per_s,
        "precision": p.precision if math.isfinite(p.precision) else None,
        "cpus": p.cpus,
        "other_cpus": p.other_cpus,
        "measured": p.measured,
    }


def _plot(d: Diagnosis, folder: str) -> list[tuple[str, str]]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    plots: list[tuple[str, str]] = []

    def save(fig, name: str, caption: str) -> None:
        # bbox_inches="tight" grows the image to its labels: no text is cut off.
        fig.savefig(os.path.join(folder, name), dpi=110, bbox_inches="tight")
        plt.close(fig)
        plots.append((name, caption))

    fig, ax = plt.subplots(figsize=(7, 3.2), layout="constrained")
    names = ["compute only", "input only", "together"]
    rates = [d.compute_batches_per_s, d.input_batches_per_s, d.achieved_batches_per_s]
    rates = [r if math.isfinite(r) else 0.0 for r in rates]
    errors = [
        r * d.precision.get(k, 0.0) if math.isfinite(d.precision.get(k, math.inf)) else 0.0
        for r, k in zip(rates, ("compute", "input", "together"))
    ]
    bars = ax.barh(names, rates, xerr=errors, color=["tab:red", "tab:blue", "tab:green"])
    ax.bar_label(bars, labels=[f"{r:.2f}" for r in rates], padding=4)
    ax.invert_yaxis()
    ax.set_xlim(right=max(rates + [1e-9]) * 1.25)
    ax.set_xlabel("batches / s (bars: 95% interval)")
    ax.set_title("The three rates: together is at most the lower of the other two")
    save(fig, "rates.png", "Compute-only, input-only and together rates")

    fig, ax = plt.subplots(figsize=(7, 3.2), layout="constrained")
    values = [d.stage_seconds.get(s, 0.0) * 1000 for s in STAGES]
    colours = ["tab:red" if s == d.dominant_stage else "tab:blue" for s in STAGES]
    ax.barh(STAGES, values, color=colours)
    ax.invert_yaxis()
    ax.set_xlabel("thread-milliseconds per batch")
    ax.set_title("Time per stage")
    save(fig, "stages.png", "Time per stage (thread-ms per batch); the dominant one in red")

    if d.sweep:
        fig, ax = plt.subplots(figsize=(7, 3.6), layout="constrained")
        threads = [p.threads for p in d.sweep]
        ax.plot(threads, [p.batches_per_s for p in d.sweep], "o-", label="input only (loader)")
        if d.projected_sweep:
            ax.plot(
                [p.threads for p in d.projected_sweep],
                [p.batches_per_s for p in d.projected_sweep],
                "o:",
                color="tab:gray",
                label="projected for a quiet machine",
            )
        ax.axhline(
            d.compute_batches_per_s, color="tab:red", linestyle="--", label="compute only (step)"
        )
        ax.set_xlabel("loader threads")
        ax.set_ylabel("batches / s")
        ax.set_xticks(threads)
        ax.set_ylim(bottom=0)
        ax.legend()
        ax.set_title("Thread sweep")
        save(fig, "sweep.png", "Input-only rate by thread count, and the compute rate")

    fig, ax = plt.subplots(figsize=(7, 3.2), layout="constrained")
    steps = np.arange(1, len(d.data_wait) + 1)
    ax.plot(steps, d.data_wait * 1000, ".-", color="tab:blue", label="data_wait")
    if len(d.step_seconds) == len(d.data_wait):
        ax.plot(steps, d.step_seconds * 1000, ".-", color="tab:gray", label="step")
    ax.set_xlabel("step")
    ax.set_ylabel("milliseconds")
    ax.set_ylim(bottom=0)
    ax.legend()
    ax.set_title("How long the trainer waited for each batch")
    save(fig, "data_wait.png", "data_wait and step time per step (the together run)")
    return plots
