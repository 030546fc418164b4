"""Terminal text report (placeholder until the full renderer lands)."""
from __future__ import annotations

from typing import Optional

from ..report import Report


def render_markdown(report: Report, *, top: Optional[int] = None, **_) -> str:
    lines = []
    for d in report.diagnoses[: top or None]:
        lines.append(f"{d.incident}  {d.title}  ({d.confidence:.0%})")
    for e in report.oom_events:
        lines.append(f"  line {e.line}: {e.kind}")
    return "\n".join(lines) + "\n"
