"""JSON output: the Report model as JSON (its schema: ``oomdoctor schema``)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from .common import _SURROGATE

if TYPE_CHECKING:  # renderers read a Report; the model offers them as methods
    from .model import Report


def render_json(report: Report, *, top: Optional[int] = None) -> str:
    if top is not None and len(report.diagnoses) > top:
        report = report.model_copy(update={"diagnoses": report.diagnoses[:top]})
    from pydantic_core import PydanticSerializationError
    try:
        return report.model_dump_json(indent=2) + "\n"
    except PydanticSerializationError:
        # a file name that is not UTF-8 (os.fsdecode's lone surrogates, in ``source`` and the
        # evidence's sources): written with U+FFFD for each such byte
        import pydantic_core
        data = _replaced(report.model_dump(mode="json"))
        return pydantic_core.to_json(data, indent=2).decode("utf-8") + "\n"


def _replaced(value: Any) -> Any:
    """``value`` with every lone surrogate in its strings (keys too) made U+FFFD."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {_replaced(k): _replaced(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_replaced(v) for v in value]
    return value
