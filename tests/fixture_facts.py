"""The expected-facts harness shared by the parser fixture tests.

Each ``<family>-*.log`` fixture in tests/fixtures/logs has a sibling ``.yaml`` listing the
events (kind, line, and any field of OomEvent), failures and exit codes a parser must
find; ``test_parser_fixtures.py`` checks every one of them through ``extract()`` and
through the whole pipeline.
"""
from __future__ import annotations

from pathlib import Path

import yaml

LOGS = Path(__file__).parent / "fixtures" / "logs"


def assert_facts(found, expected: dict) -> None:
    """Compare events, failures and exit codes with a fixture's expectations."""
    want_events = expected.get("events", [])
    assert [(e.kind, e.line) for e in found.oom_events] == [(w["kind"], w["line"]) for w in want_events]
    for ev, want in zip(found.oom_events, want_events):
        _assert_fields(ev, want)
    want_failures = expected.get("failures", [])
    assert [(f.kind, f.line) for f in found.failures] == [(w["kind"], w["line"]) for w in want_failures]
    for f, want in zip(found.failures, want_failures):
        _assert_fields(f, want)
    if "exit_codes" in expected:
        assert found.ranks.exit_codes == expected["exit_codes"]


def _assert_fields(obj, want: dict) -> None:
    for key, value in want.items():
        if key == "evidence_lines":
            assert [e.line for e in obj.evidence] == value, key
        elif key.endswith("_contains"):
            assert value in (getattr(obj, key[: -len("_contains")]) or ""), key
        else:
            assert getattr(obj, key) == value, key


def _load(log: Path) -> tuple[str, dict]:
    return log.read_text(encoding="utf-8"), yaml.safe_load(log.with_suffix(".yaml").read_text(encoding="utf-8"))
