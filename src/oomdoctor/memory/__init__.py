"""Memory arithmetic: where the memory went, and whether each fix will fit.

Memory estimators (accelerate estimate-memory, DeepSpeed's estimate_zero*_model_states)
plan before a run and leave activations out; memory snapshots need a re-run. A failed
run's log already has the allocator's own figures (request, free, allocated, reserved
but unallocated, other processes) and the configuration its banners echo. This package
puts them together:

* ``formulas``    — bytes of model states, activations, logits, KV cache, with sources;
* ``setup``       — the training setup as the log states it (assumptions named);
* ``fingerprint`` — which tensor of the configuration the failed request was;
* ``fit``         — predicted saving of each fix and a verdict against the gap;
* ``section``     — the report's ``memory`` section, its table rows, derived facts.

The formulas and the estimate names a knowledge-base remediation can give in
``saving:`` are documented in docs/memory.md.
"""
from __future__ import annotations

from .fit import ESTIMATES, GROUPS
from .models import MemoryLine, MemoryReport, RequestMatch
from .section import fingerprint_facts, memory_rows, memory_section

SAVING_ESTIMATES = frozenset(ESTIMATES)

__all__ = ["ESTIMATES", "GROUPS", "SAVING_ESTIMATES", "MemoryLine", "MemoryReport", "RequestMatch",
           "fingerprint_facts", "memory_rows", "memory_section"]
