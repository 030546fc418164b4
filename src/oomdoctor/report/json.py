"""JSON output: the Report model as JSON (its schema: ``oomdoctor schema``)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:  # renderers read a Report; the model offers them as methods
    from .model import Report



def render_json(report: Report, *, top: Optional[int] = None) -> str:
    if top is not None and len(report.diagnoses) > top:
        report = report.model_copy(update={"diagnoses": report.diagnoses[:top]})
    return report.model_dump_json(indent=2) + "\n"
