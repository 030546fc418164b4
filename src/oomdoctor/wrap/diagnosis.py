"""The report of a failed run: its captured output plus what only the wrapper saw.

The exit signal, the memory cgroup's counters and the kernel's kill lines (``cgroup``) become
labelled lines after the job's output and, where they prove it, a host OOM event.
"""
from __future__ import annotations

import re
import shlex
import signal
from typing import Optional

from .process import RunResult, signal_name

def wrapper_lines(result: RunResult) -> list[str]:
    """The wrapper's own evidence, as labelled lines appended after the job's output."""
    lines = [f"oomdoctor-run: command: {shlex.join(result.argv)[:2000]}"]
    if result.env_changes:
        lines.append("oomdoctor-run: environment changed for this attempt: "
                     + " ".join(f"{k}={v}" for k, v in result.env_changes.items()))
    for name in dict.fromkeys(result.forwarded):
        lines.append(f"oomdoctor-run: received {name} and forwarded it to the job's process group")
    if result.killed_after_grace:
        lines.append("oomdoctor-run: the job was still running after the grace period; oomdoctor run ended it")
    elif result.signal is not None:
        lines.append(f"oomdoctor-run: child exited with signal {result.signal} ({signal_name(result.signal)})")
    else:
        lines.append(f"oomdoctor-run: child exited with status {result.returncode}")
    from . import cgroup
    lines.extend(cgroup.evidence_lines(result.cgroup_before, result.cgroup_after))
    lines.extend(result.kernel_lines)
    return lines


_ANON_RSS = re.compile(r"anon-rss:\s*([\d,]+)\s*kB")
_STRENGTH = {"weak": 0, "likely": 1, "certain": 2}


def add_wrapper_event(facts, numbered: list[tuple[int, str]], result: RunResult) -> None:
    """Turn the exit signal, cgroup counters and kernel kill lines into a host OOM event.

    A bare SIGKILL is only weakly an OOM kill (schedulers and people send it too); the
    cgroup's oom_kill counter rising during the job, or a kernel kill line naming one of
    the job's processes, makes it certain. An event the parsers already found is
    strengthened rather than duplicated.
    """
    from . import cgroup
    from ..facts.models import Evidence, OomEvent

    kills = cgroup.oom_kills_during(result.cgroup_before, result.cgroup_after)
    sigkill = not result.killed_after_grace and (result.signal == signal.SIGKILL or result.returncode == 137)
    if not (sigkill or kills or result.kernel_kills):
        return
    # a bare SIGKILL is weak evidence: people, schedulers and health checks send it too
    strength = "certain" if (kills or result.kernel_kills) else "weak"
    wanted = ("child exited with signal", "child exited with status", "oom_kill", "failcnt",
              "Killed process", "Kill process")
    evidence = [Evidence(line=no, text=text[:400]) for no, text in numbered
                if any(w in text for w in wanted) and not text.endswith("status 0")]
    reasons = []
    if sigkill:
        reasons.append(f"the job was ended by SIGKILL (exit status {result.exit_status})")
    if kills:
        reasons.append(f"its memory cgroup counted {kills} OOM kill{'s' if kills > 1 else ''} while it ran")
    if result.kernel_kills:
        reasons.append("the kernel log shows one of its processes killed for memory")
    detail = "; ".join(reasons)
    host_bytes = None
    for kill in result.kernel_kills:
        m = _ANON_RSS.search(kill.line)
        if m:
            host_bytes = int(m.group(1).replace(",", "")) * 1024
    existing = [e for e in facts.oom_events if e.kind == "host_oom_killer"]
    if existing:
        ev = max(existing, key=lambda e: _STRENGTH.get(e.strength, 0))
        if _STRENGTH[strength] > _STRENGTH.get(ev.strength, 0):
            ev.strength = strength
        seen = {e.line for e in ev.evidence}
        ev.evidence.extend(e for e in evidence if e.line not in seen)
        ev.detail = f"{ev.detail}; {detail}" if ev.detail else detail
        if ev.host_bytes is None:
            ev.host_bytes = host_bytes
        return
    line = evidence[0].line if evidence else (numbered[-1][0] if numbered else 1)
    facts.oom_events.append(OomEvent(kind="host_oom_killer", strength=strength, backend="host",
                                     detail=detail, host_bytes=host_bytes, line=line, evidence=evidence))


def diagnose_result(result: RunResult, *, knowledge=None, framework: Optional[str] = None):
    """The report for one failed run: its captured output plus the wrapper's evidence."""
    from ..pipeline import facts_from_view, report_from_facts

    view = result.capture.view()
    extra = wrapper_lines(result)
    numbered = [(view.lines_read + i, text) for i, text in enumerate(extra, 1)]
    view.pairs.extend(numbered)
    source = "oomdoctor run: " + shlex.join(result.argv)[:200]
    facts, lines = facts_from_view(view, source)
    add_wrapper_event(facts, numbered, result)
    if not result.drained:
        facts.notes.append("processes started by the job still held its output open after it ended; "
                           "their later output was not passed through")
    return report_from_facts(facts, lines, source=source, knowledge=knowledge, framework=framework)
