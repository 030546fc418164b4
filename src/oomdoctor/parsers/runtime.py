"""runtime parser family (in progress)."""
from __future__ import annotations

from .base import ParseContext


def parse(ctx: ParseContext) -> None:
    return None
