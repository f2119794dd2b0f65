"""What ``stoker check`` finds: a :class:`Finding` per problem, gathered in a
:class:`CheckReport`.

Each check is a plain function that takes a dataset (and options) and returns findings; the
families live beside this file (``lerobot/``: episodes, cameras and metadata; ``shards.py``:
shard members, sizes and the shuffled epoch's label spread; ``mix.py``: keys and dtypes across
a mix). :func:`stoker.check` runs the families that apply to a dataset and returns one report.

A finding says where, exactly: the episode and camera (LeRobot), the shard and key (shards),
the dataset of a mix, the frame or row where it matters. Locations that do not apply are None.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

SEVERITIES = ("error", "warning", "info")  # error: training will read wrong data or fail

# Where a finding is, as Finding.where() says it, outermost first.
_PLACES = (
    ("dataset", "dataset {}"),
    ("episode", "episode {}"),
    ("camera", "camera {!r}"),
    ("frame", "frame {}"),
    ("row", "row {}"),
    ("shard", "shard {}"),
    ("key", "key {!r}"),
    ("field", "field {!r}"),
)


@dataclass(frozen=True)
class Finding:
    """One problem: its ``severity`` (see :data:`SEVERITIES`), the ``check`` that found it (a
    name listed in docs/check.md), where (any of ``episode``, ``camera``, ``frame``, ``row``,
    ``shard``, ``key``, ``field``, ``dataset``, ``file``), what was ``expected`` and ``found``,
    and what to do (``fix``)."""

    severity: str
    check: str
    message: str
    fix: str = ""
    expected: Any = None
    found: Any = None
    episode: int | None = None
    camera: str | None = None
    frame: int | None = None
    row: int | None = None
    shard: str | None = None
    key: str | None = None
    field: str | None = None
    dataset: int | None = None
    file: str | None = None

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, got {self.severity!r}")

    def where(self) -> str:
        """The location as text: ``episode 3, camera 'top', frame 17``."""
        parts = [
            template.format(getattr(self, name))
            for name, template in _PLACES
            if getattr(self, name) is not None
        ]
        if self.file is not None and self.shard is None:
            parts.append(self.file)
        return ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None and v != ""}

    def __str__(self) -> str:
        where = self.where()
        text = f"{self.severity}: [{self.check}] {where + ': ' if where else ''}{self.message}"
        return text + (f" Fix: {self.fix}" if self.fix else "")


@dataclass
class CheckReport:
    """Every finding of one check of ``dataset`` (its path or URL), with the ``checks`` that ran
    (names), whether it was ``deep`` (decoded everything), its ``seconds``, and how much it
    looked at (``scanned``: e.g. ``{"episodes": 1000, "frames": 250000}``)."""

    dataset: str
    kind: str  # "lerobot", "shards" or "mix"
    deep: bool = False
    checks: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    scanned: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    # What a check that was not deep read without decoding it ("videos", "shard members"):
    # its verdict says so, and that --deep decodes them.
    not_decoded: str = ""

    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "warning"]

    @property
    def ok(self) -> bool:
        """True when no finding is an error: the exit status of ``stoker check`` is 0."""
        return not self.errors()

    @property
    def verdict(self) -> str:
        """``OK: no errors`` or ``FAILED: n errors``, saying what was not decoded, if any."""
        text = "OK: no errors" if self.ok else f"FAILED: {_counted(len(self.errors()), 'error')}"
        if self.not_decoded and not self.deep:
            text += (
                f" (the {self.not_decoded} were not decoded: `stoker check --deep`, or "
                "stoker.check(..., deep=True), decodes every one)"
            )
        return text

    def by_check(self, name: str) -> list[Finding]:
        return [f for f in self.findings if f.check == name]

    def to_dict(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset,
            "kind": self.kind,
            "deep": self.deep,
            "ok": self.ok,
            "not_decoded": self.not_decoded,
            "checks": list(self.checks),
            "scanned": dict(self.scanned),
            "seconds": self.seconds,
            "counts": {s: sum(f.severity == s for f in self.findings) for s in SEVERITIES},
            "findings": [f.to_dict() for f in self.findings],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, default=str)

    def __str__(self) -> str:
        counts = ", ".join(
            _counted(sum(f.severity == s for f in self.findings), s) for s in SEVERITIES
        )
        scanned = ", ".join(
            f"{v:,} {k.replace('_', ' ').removesuffix('s') if v == 1 else k.replace('_', ' ')}"
            for k, v in self.scanned.items()
        )
        head = (
            f"stoker check {self.dataset} ({self.kind}{', deep' if self.deep else ''}): "
            f"{counts} in {self.seconds:.1f} s" + (f" over {scanned}" if scanned else "")
        )
        order = {s: i for i, s in enumerate(SEVERITIES)}
        lines = [head] + [f"  {f}" for f in sorted(self.findings, key=lambda f: order[f.severity])]
        lines.append(f"  {self.verdict}")
        return "\n".join(lines)


def _counted(count: int, noun: str) -> str:
    """``1 error``, ``2 errors``; ``info`` has no plural."""
    return f"{count} {noun}" if count == 1 or noun == "info" else f"{count} {noun}s"
