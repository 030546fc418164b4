"""Facts: what the parsers found in a log (typed models), sizes, and facts derived from them.

* ``models``  — the pydantic models every stage passes on (``Facts``, ``OomEvent`` ...);
* ``sizes``   — byte sizes in and out of text ("3.39 GiB" ⇄ 3640655216);
* ``derived`` — values computed from the facts (the primary event, allocated/unallocated,
  sibling processes, GPU capability), shared by the classifier, memory code and renderers.

Sizes are integers of bytes everywhere; only renderers format them.
"""
from __future__ import annotations

from .models import (Environment, Evidence, Facts, Failure, Frame, MemorySample, Model, OomEvent,
                     PhaseInfo, ProcessUse, RankSummary, fatal_events)

__all__ = ["Environment", "Evidence", "Facts", "Failure", "Frame", "MemorySample", "Model", "OomEvent",
           "PhaseInfo", "ProcessUse", "RankSummary", "fatal_events"]
