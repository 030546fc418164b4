"""Facts pulled out of output printed by real PyTorch runs.

Each ``fixtures/logs/real-<torch version>-<what>.log`` is what a real torch build printed
(host names and home directories replaced, every other byte kept, PIDs included). Its
sibling ``.expected.yaml`` holds what a careful reader takes from the printed text:

    oom_event_count: 1            # events after folding copies (ranks, launcher summaries)
    oom_events:
      - line: 14                  # 1-based line of the first copy of the message
        also_accept_lines: [61]   # optional: other lines that report the same failure
        kind: cpu_allocator
        host_bytes: 1125899906842624
        processes: [{pid: 4242, bytes: 64424509440, is_self: false}]
    failure_kinds: [device_mismatch]   # optional: non-memory failures that must be found
    diagnosis: {top: activation-memory, phase: forward}   # optional: what the whole report
                                  # says first (top: null - no memory diagnosis at all)

Byte values are the printed sizes converted exactly and rounded to the nearest byte, e.g.
``"3.39 GiB"`` is ``int((Decimal("3.39") * 2**30).to_integral_value())``, never a value
re-rounded by the parser.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import oomdoctor

LOGS = Path(__file__).parent / "fixtures" / "logs"
SUFFIX = ".expected.yaml"
CASES = sorted(LOGS.glob("real-*" + SUFFIX))

# Keys of an expected event that say how to find the event rather than what it holds.
_LOCATORS = ("line", "also_accept_lines")


def _log_of(expected: Path) -> Path:
    return expected.with_name(expected.name[: -len(SUFFIX)] + ".log")


def _process_key(p) -> tuple:
    if isinstance(p, dict):
        return (p.get("pid"), p["bytes"], bool(p.get("is_self", False)))
    return (p.pid, p.bytes, p.is_self)


def _event_problems(event, want: dict) -> list[str]:
    problems = []
    for key, expected in want.items():
        if key in _LOCATORS:
            continue
        got = getattr(event, key, None)
        if key == "processes":
            got = sorted((_process_key(p) for p in got), key=repr)
            expected = sorted((_process_key(p) for p in expected), key=repr)
        elif key == "ranks":
            got = sorted(got)
            expected = sorted(expected)
        if got != expected:
            problems.append(f"line {want['line']}: {key} is {got!r}, expected {expected!r}")
    return problems


def test_every_real_capture_has_its_expectations():
    logs = {p.name[: -len(".log")] for p in LOGS.glob("real-*.log")}
    specs = {p.name[: -len(SUFFIX)] for p in CASES}
    assert logs, "no real captures found"
    assert logs == specs


@pytest.mark.parametrize("expected_path", CASES, ids=lambda p: p.name[: -len(SUFFIX)])
def test_real_capture_facts(expected_path: Path):
    spec = yaml.safe_load(expected_path.read_text(encoding="utf-8"))
    report = oomdoctor.diagnose(str(_log_of(expected_path)))
    events = report.oom_events
    seen = [(e.line, e.kind) for e in events]

    problems = []
    if len(events) != spec["oom_event_count"]:
        problems.append(f"{len(events)} OOM events {seen}, expected {spec['oom_event_count']}")
    for want in spec.get("oom_events") or []:
        lines = {want["line"], *want.get("also_accept_lines", [])}
        found = [e for e in events if e.line in lines]
        if not found:
            problems.append(f"no OOM event at line(s) {sorted(lines)}; events at {seen}")
            continue
        problems.extend(_event_problems(found[0], want))
    failure_kinds = [f.kind for f in report.failures]
    for kind in spec.get("failure_kinds") or []:
        if kind not in failure_kinds:
            problems.append(f"no {kind} failure; failures are {failure_kinds}")
    want = spec.get("diagnosis") or {}
    if "top" in want:
        top = report.diagnoses[0].incident if report.diagnoses else None
        if top != want["top"]:
            problems.append(f"first diagnosis is {top}, expected {want['top']}: "
                            f"{[d.incident for d in report.diagnoses][:3]}")
    if "phase" in want and report.phase != want["phase"]:
        problems.append(f"phase is {report.phase}, expected {want['phase']}")
    assert not problems, "\n".join(problems)
