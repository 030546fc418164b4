"""One report in one of the output formats, and whether a stream takes colour.

Imports nothing heavy at the top: the CLI and ``oomdoctor run`` load it at start-up.
"""
from __future__ import annotations

import os
import sys
from typing import Optional


def render(report, fmt: str, *, top: Optional[int] = None, color: Optional[bool] = None,
           verbose: bool = False) -> str:
    if fmt == "json":
        from .json import render_json
        return render_json(report, top=top)
    if fmt == "html":
        from .html import render_html
        return render_html(report, top=top)
    if fmt == "markdown":
        from .markdown import render_markdown
        return render_markdown(report, top=top)
    from .text import render_text
    return render_text(report, top=top, color=color, verbose=verbose)


def use_color(stream=None) -> bool:
    stream = stream or sys.stdout
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    return bool(getattr(stream, "isatty", lambda: False)())
