"""Ranks: which ranks and devices failed, the first failure, and the cascade.

When one rank dies of OOM the others die of its death: NCCL watchdog timeouts, SIGTERM
from torchrun, ChildFailedError, launcher kills. Those are marked ``secondary`` so that
nothing downstream blames the network for a memory failure, and the first failure (in
log order, the earliest line) is named.
"""
from __future__ import annotations

from ..facts.derived import HOST_KINDS
from ..facts.models import fatal_events
from .base import ParseContext
from .lookalikes import NOT_FAILURES

CASCADE_KINDS = {"nccl_timeout", "nccl_error", "sigterm", "python_exception"}
_NOT_ROOT = CASCADE_KINDS | NOT_FAILURES


def parse(ctx: ParseContext) -> None:
    facts = ctx.facts
    rs = facts.ranks
    events = fatal_events(facts.oom_events)   # a caught OOM failed nothing
    ranks: set[int] = set()
    devices: set[int] = set()
    for ev in events:
        ranks.update(ev.ranks)
        if ev.device_index is not None:
            devices.add(ev.device_index)
    rs.failed_ranks = sorted(ranks)
    rs.failed_devices = sorted(devices)

    certain = [e for e in events if e.strength != "weak"]
    firsts = [(e.line, f"{e.kind} (line {e.line})") for e in certain]
    primary_failures = [f for f in facts.failures if f.kind not in _NOT_ROOT]
    firsts += [(f.line, f"{f.kind} (line {f.line})") for f in primary_failures]
    if firsts:
        rs.first_failure_line, rs.first_failure = min(firsts)
    elif facts.failures:
        real = [f for f in facts.failures if f.kind not in NOT_FAILURES]
        f = min(real or facts.failures, key=lambda f: f.line)
        rs.first_failure_line, rs.first_failure = f.line, f"{f.kind} (line {f.line})"

    # With a memory failure (or another root failure) present, timeouts, SIGTERMs and
    # the generic exceptions they raise on the other ranks are consequences.
    device_oom = [e for e in events if e.kind not in HOST_KINDS]
    root_lines = [e.line for e in certain] + [f.line for f in primary_failures]
    for f in facts.failures:
        if f.kind in CASCADE_KINDS and root_lines:
            if f.kind == "python_exception" and not device_oom and not any(e.kind in HOST_KINDS for e in events):
                continue
            if f.kind == "python_exception" and "out of memory" in f.message.lower():
                f.secondary = True
                continue
            f.secondary = f.kind != "python_exception" or any(line <= f.line for line in root_lines)
            if f.secondary and len(rs.cascade) < 20:
                rs.cascade.extend(f.evidence[:1] or [])
