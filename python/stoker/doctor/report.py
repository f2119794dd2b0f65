"""What the doctor found, and how it is shown: :class:`Diagnosis` with its summary text, its
JSON, and an HTML report with plots (matplotlib, when installed)."""

from __future__ import annotations

import html
import json
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: The stages of building a batch, in the order reports show them.
STAGES = ("sampling", "index", "seek", "decode", "convert", "transform", "collate", "h2d")


@dataclass
class SweepPoint:
    threads: int
    batches_per_s: float


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

    def percentile_ms(self, values: np.ndarray, q: float) -> float:
        return float(np.percentile(values, q) * 1000) if len(values) else 0.0

    # ---- Output -------------------------------------------------------------------------

    def summary(self) -> str:
        b = self.batch_size
        lines = [f"stoker doctor: {self.bound}-bound. {self.headline}", ""]
        rows = [
            ("compute only (step on a held batch)", self.compute_batches_per_s),
            (f"input only (loader, {self.threads} threads)", self.input_batches_per_s),
            ("together (achieved)", self.achieved_batches_per_s),
        ]
        lines.append(f"{'rate':40s} {'batches/s':>10s} {'samples/s':>10s}")
        for name, rate in rows:
            lines.append(f"{name:40s} {rate:10.2f} {rate * b:10.1f}")
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
            lines.append(
                f"thread sweep (threads: batches/s): {sweep}; more threads stop "
                f"helping at {self.plateau_threads}"
            )
        if self.balance:
            lines.append(
                f"ranks: step imbalance (max / mean rank cost) "
                f"{self.balance['before']:.2f} as dealt; "
                f"{self.balance['after']:.2f} balanced (Loader(..., balance=True))"
            )
        if self.estimated:
            lines.append("estimated, not measured: " + ", ".join(self.estimated))
        if self.other_cpus is not None and self.other_cpus > 0.2:
            lines.append(
                f"warning: other processes kept {self.other_cpus:.1f} CPUs busy during "
                f"the measurement; rates and the sweep are lower than on a quiet "
                f"machine"
            )
        lines.append("")
        lines.append("What to do:")
        lines.extend(f"  - {line}" for line in self.advice)
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "bound": self.bound,
            "verdict": self.verdict,
            "headline": self.headline,
            "advice": self.advice,
            "dominant_stage": self.dominant_stage,
            "batch_size": self.batch_size,
            "threads": self.threads,
            "cores": self.cores,
            "compute_batches_per_s": self.compute_batches_per_s,
            "input_batches_per_s": self.input_batches_per_s,
            "achieved_batches_per_s": self.achieved_batches_per_s,
            "data_wait_ms": {
                "p50": self.percentile_ms(self.data_wait, 50),
                "p95": self.percentile_ms(self.data_wait, 95),
                "max": self.percentile_ms(self.data_wait, 100),
                "total": float(self.data_wait.sum() * 1000),
            },
            "step_ms_p50": self.percentile_ms(self.step_seconds, 50),
            "step_ms_total": float(self.step_seconds.sum() * 1000),
            "wall_seconds": self.wall_seconds,
            "overlap": self.overlap,
            "stage_ms_per_batch": {k: v * 1000 for k, v in self.stage_seconds.items()},
            "sweep": [{"threads": p.threads, "batches_per_s": p.batches_per_s} for p in self.sweep],
            "plateau_threads": self.plateau_threads,
            "other_cpus": self.other_cpus,
            "decode_work": self.decode_work,
            "balance": self.balance,
            "estimated": self.estimated,
        }

    def write_report(self, folder: str | os.PathLike) -> str:
        """Writes ``index.html``, ``report.json`` and the plots (``stages.png``,
        ``sweep.png``, ``data_wait.png``) into ``folder``; returns the HTML file's path."""
        folder = os.fspath(folder)
        os.makedirs(folder, exist_ok=True)
        plots = _plot(self, folder)
        with open(os.path.join(folder, "report.json"), "w") as f:
            json.dump(self.to_dict(), f, indent=2)
        images = "".join(
            f'<figure><img src="{name}" alt="{html.escape(title)}">'
            f"<figcaption>{html.escape(title)}</figcaption></figure>"
            for name, title in plots
        )
        if not plots:
            images = "<p>(matplotlib is not installed: no plots)</p>"
        page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>stoker doctor</title>
<style>body{{font-family:sans-serif;max-width:960px;margin:2em auto}}
pre{{background:#f4f4f4;padding:1em;overflow-x:auto}} img{{max-width:100%}}
h1 span{{font-weight:normal}}</style></head><body>
<h1>stoker doctor: <span>{html.escape(self.bound)}-bound ({html.escape(self.verdict)})</span></h1>
<p><b>{html.escape(self.headline)}</b></p>
<ul>{"".join(f"<li>{html.escape(a)}</li>" for a in self.advice)}</ul>
{images}
<h2>Measurements</h2><pre>{html.escape(self.summary())}</pre>
</body></html>"""
        path = os.path.join(folder, "index.html")
        with open(path, "w") as f:
            f.write(page)
        return path


def _plot(d: Diagnosis, folder: str) -> list[tuple[str, str]]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    plots: list[tuple[str, str]] = []

    def save(fig, name: str, caption: str) -> None:
        fig.tight_layout()
        fig.savefig(os.path.join(folder, name), dpi=110)
        plt.close(fig)
        plots.append((name, caption))

    fig, ax = plt.subplots(figsize=(7, 3.2))
    values = [d.stage_seconds.get(s, 0.0) * 1000 for s in STAGES]
    colours = ["tab:red" if s == d.dominant_stage else "tab:blue" for s in STAGES]
    ax.barh(STAGES, values, color=colours)
    ax.invert_yaxis()
    ax.set_xlabel("thread-milliseconds per batch")
    ax.set_title("Time per stage")
    save(fig, "stages.png", "Time per stage (thread-ms per batch); the dominant one in red")

    fig, ax = plt.subplots(figsize=(7, 3.6))
    threads = [p.threads for p in d.sweep]
    ax.plot(threads, [p.batches_per_s for p in d.sweep], "o-", label="input only (loader)")
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

    fig, ax = plt.subplots(figsize=(7, 3.2))
    ax.hist(d.data_wait * 1000, bins=40, color="tab:blue")
    ax.set_xlabel("data_wait per step (ms)")
    ax.set_ylabel("steps")
    ax.set_title("How long the trainer waited for each batch")
    save(fig, "data_wait.png", "Histogram of data_wait over steps")
    return plots
