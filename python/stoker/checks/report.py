"""The report of ``stoker check --report DIR``: ``report.html`` and ``report.json``.

The HTML page has the summary, a heat strip per camera (LeRobot: one cell per episode), per
dataset part (mixes) or one of the shards that have findings, coloured by the worst finding
there, and the findings grouped by check, each with where, what was expected and found, and the
fix. Everything is inline (SVG drawn here, no script, no plotting library): the page opens
anywhere, and is small enough to attach to an issue.
"""

from __future__ import annotations

import html
import json
import os
from collections.abc import Sequence
from typing import Any

from stoker.checks.findings import SEVERITIES, CheckReport, Finding

__all__ = ["heat_strips", "render_html", "write_report"]

_COLOURS = {"error": "#d62728", "warning": "#ff9f1c", "info": "#4c78a8", None: "#e4e4e4"}
_WIDTH = 960  # pixels of a strip's cells
_CELL_HEIGHT = 14


def write_report(report: CheckReport, folder: str | os.PathLike) -> str:
    """Writes ``report.html`` and ``report.json`` into ``folder`` (created if needed); returns
    the HTML file's path."""
    from stoker.io.files import write_json

    folder = os.fspath(folder)
    os.makedirs(folder, exist_ok=True)
    write_json(os.path.join(folder, "report.json"), json.loads(report.to_json()))
    path = os.path.join(folder, "report.html")
    partial = f"{path}.part-{os.getpid()}"
    with open(partial, "w", encoding="utf-8") as out:
        out.write(render_html(report))
    os.replace(partial, path)
    return path


def _worst(findings: Sequence[Finding]) -> str | None:
    for severity in SEVERITIES:
        if any(f.severity == severity for f in findings):
            return severity
    return None


def heat_strips(report: CheckReport) -> list[tuple[str, list[str], list[list[Finding]]]]:
    """The strips of the report: (title, label of each cell, findings of each cell). LeRobot:
    a strip per camera (and one for findings of no camera), a cell per episode; mixes: one
    strip, a cell per dataset; shards: one strip, a cell per shard that has findings."""
    findings = report.findings
    if report.kind == "mix":
        parts = sorted({f.dataset for f in findings if f.dataset is not None})
        count = max([*parts, report.scanned.get("datasets", 0) - 1, -1]) + 1
        cells: list[list[Finding]] = [[] for _ in range(count)]
        for f in findings:
            if f.dataset is not None:
                cells[f.dataset].append(f)
        return [("datasets", [f"dataset {k}" for k in range(count)], cells)] if count else []
    if report.kind == "shards":
        shards = sorted({f.shard for f in findings if f.shard is not None})
        cells = [[f for f in findings if f.shard == s] for s in shards]
        total = report.scanned.get("shards")
        title = f"shards with findings ({len(shards)} of {total})" if total else "shards"
        return [(title, [str(s) for s in shards], cells)] if shards else []
    episodes = [f.episode for f in findings if f.episode is not None]
    count = max([report.scanned.get("episodes", 0), *(e + 1 for e in episodes)] or [0])
    if not count:
        return []
    cameras = list(dict.fromkeys(f.camera for f in findings if f.episode is not None))
    strips = []
    for camera in sorted(cameras, key=lambda c: (c is None, c or "")):
        cells = [[] for _ in range(count)]
        for f in findings:
            if f.episode is not None and f.camera == camera:
                cells[f.episode].append(f)
        title = f"camera {camera}" if camera is not None else "episode (any camera)"
        strips.append((title, [f"episode {e}" for e in range(count)], cells))
    return strips


def _strip_svg(labels: list[str], cells: list[list[Finding]]) -> str:
    """One strip: cells left to right, several episodes to a cell when they do not fit."""
    n = len(cells)
    per_cell = max(1, -(-n // _WIDTH))  # units a cell covers
    columns = -(-n // per_cell)
    width = max(2.0, min(16.0, _WIDTH / columns))
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{columns * width:.0f}" '
        f'height="{_CELL_HEIGHT}" role="img">'
    ]
    for k in range(columns):
        group = [f for cell in cells[k * per_cell : (k + 1) * per_cell] for f in cell]
        worst = _worst(group)
        first, last = labels[k * per_cell], labels[min(n, (k + 1) * per_cell) - 1]
        name = first if first == last else f"{first} - {last}"
        title = f"{name}: " + (
            ", ".join(f"{sum(f.severity == s for f in group)} {s}" for s in SEVERITIES)
            if group
            else "no findings"
        )
        parts.append(
            f'<rect x="{k * width:.2f}" y="0" width="{max(width - (width > 3), 1):.2f}" '
            f'height="{_CELL_HEIGHT}" fill="{_COLOURS[worst]}">'
            f"<title>{html.escape(title)}</title></rect>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _value(value: Any) -> str:
    if value is None:
        return ""
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return html.escape(text if len(text) <= 300 else text[:300] + "...")


def render_html(report: CheckReport) -> str:
    """The report as one self-contained HTML page."""
    counts = {s: sum(f.severity == s for f in report.findings) for s in SEVERITIES}
    scanned = ", ".join(f"{v:,} {k.replace('_', ' ')}" for k, v in report.scanned.items())
    verdict = html.escape(report.verdict)
    head = (
        f"<h1>stoker check: {html.escape(report.dataset)}</h1>"
        f"<p class='verdict {'ok' if report.ok else 'failed'}'>{verdict}</p>"
        f"<p>{report.kind}{', deep' if report.deep else ''}; "
        + ", ".join(f"{counts[s]} {s}{'s' if counts[s] != 1 else ''}" for s in SEVERITIES)
        + f" in {report.seconds:.1f} s{' over ' + html.escape(scanned) if scanned else ''}.</p>"
    )
    strips = heat_strips(report)
    strip_html = ""
    if strips:
        legend = " ".join(
            f"<span class='key' style='background:{_COLOURS[s]}'></span>{s}"
            for s in (*SEVERITIES, None)
            if s is not None
        )
        strip_html = (
            "<h2>Where</h2><p class='legend'>"
            + legend
            + " <span class='key' style='background:#e4e4e4'></span>no findings</p>"
            + "".join(
                f"<div class='strip'><div class='title'>{html.escape(title)}</div>"
                f"{_strip_svg(labels, cells)}</div>"
                for title, labels, cells in strips
            )
        )
    order = {s: i for i, s in enumerate(SEVERITIES)}
    groups: dict[str, list[Finding]] = {}
    for f in sorted(report.findings, key=lambda f: order[f.severity]):
        groups.setdefault(f.check, []).append(f)
    sections = []
    for check, findings in sorted(groups.items(), key=lambda kv: order[kv[1][0].severity]):
        rows = "".join(
            f"<tr class='{f.severity}'><td>{f.severity}</td><td>{html.escape(f.where())}</td>"
            f"<td>{html.escape(f.message)}</td><td>{_value(f.expected)}</td>"
            f"<td>{_value(f.found)}</td><td>{html.escape(f.fix)}</td></tr>"
            for f in findings
        )
        sections.append(
            f"<h3 id='{html.escape(check)}'>{html.escape(check)} ({len(findings)})</h3>"
            "<table><tr><th>severity</th><th>where</th><th>what</th><th>expected</th>"
            f"<th>found</th><th>fix</th></tr>{rows}</table>"
        )
    body = "<h2>Findings by check</h2>" + "".join(sections) if sections else "<p>No findings.</p>"
    ran = html.escape(", ".join(report.checks))
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>stoker check: {html.escape(report.dataset)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; color: #222; }}
.verdict {{ font-size: 1.3em; font-weight: bold; }}
.verdict.ok {{ color: #2a7d2a; }} .verdict.failed {{ color: {_COLOURS["error"]}; }}
.strip {{ margin: 0.3em 0; }} .strip .title {{ font-size: 0.85em; color: #555; }}
.key {{ display: inline-block; width: 0.9em; height: 0.9em; margin: 0 0.2em 0 0.8em; }}
table {{ border-collapse: collapse; width: 100%; font-size: 0.9em; margin-bottom: 1.5em; }}
td, th {{ border: 1px solid #ddd; padding: 0.3em 0.5em; text-align: left; vertical-align: top; }}
tr.error td:first-child {{ color: {_COLOURS["error"]}; font-weight: bold; }}
tr.warning td:first-child {{ color: #c77700; }}
</style></head><body>
{head}
{strip_html}
{body}
<p class="ran">Checks run: {ran}. See docs/check.md for what each means.</p>
</body></html>
"""
