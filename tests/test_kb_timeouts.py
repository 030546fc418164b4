"""A knowledge-base search that runs out of time is reported, never read as "no match".

The team incident is written here, in a temporary directory: its signal's pattern is slow
(polynomial backtracking, which the load-time check for catastrophic patterns does not
refuse) on a line the log holds."""
from __future__ import annotations

import json

import pytest

from oomdoctor import diagnose
from oomdoctor.kb import classify as classify_mod
from oomdoctor.kb.knowledge import load_knowledge
from oomdoctor.kb.regex_safety import backtracking_risk

SLOW = r"slowmark \d*\d*\d*\d*\d*y"

INCIDENT = f"""\
id: team-slow-signal
title: A team incident with a slow signal
summary: test incident
explanation: test incident
requires:
  - {{fact: oom.any, eq: true}}
signals:
  - id: is-oom
    weight: 1
    when: {{fact: oom.any, eq: true}}
    says: an OOM
  - id: slow-one
    weight: 5
    when: {{text: '{SLOW}'}}
    says: the slow pattern matched
remediations:
  - id: nothing
    title: nothing
    knobs: {{code: nothing}}
"""

LOG = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
       "79.15 GiB of which 1.00 GiB is free.\n"
       "slowmark " + "1" * 4000 + " x\n")


@pytest.fixture
def team_kb(tmp_path, monkeypatch):
    (tmp_path / "team-slow-signal.yaml").write_text(INCIDENT, encoding="utf-8")
    kb = load_knowledge([tmp_path], include_shipped=False, strict=True)   # the check lets it load
    assert kb.get("team-slow-signal") is not None
    monkeypatch.setattr(classify_mod, "REGEX_TIMEOUT", 0.01)              # the search times out soon
    return tmp_path


def test_the_slow_pattern_is_not_refused_at_load():
    assert backtracking_risk(SLOW) is None


def test_a_timed_out_signal_is_a_note_in_text_and_json(team_kb):
    report = diagnose(LOG.encode(), kb_dirs=[team_kb])
    expected = "signal slow-one of incident team-slow-signal timed out on this log; its evidence was not read"
    assert expected in report.notes
    assert expected in json.loads(report.model_dump_json())["notes"]
    assert "timed out on this log" in report.to_text()               # the one-screen report says it too
    assert expected in " ".join(report.to_text(verbose=True, width=400).split())


def test_each_incident_using_a_timed_out_pattern_is_named(tmp_path, monkeypatch):
    # a second incident with the same pattern: the cached result still counts as not read
    (tmp_path / "team-slow-signal.yaml").write_text(INCIDENT, encoding="utf-8")
    (tmp_path / "team-slow-two.yaml").write_text(INCIDENT.replace("team-slow-signal", "team-slow-two"),
                                                 encoding="utf-8")
    monkeypatch.setattr(classify_mod, "REGEX_TIMEOUT", 0.01)
    report = diagnose(LOG.encode(), kb_dirs=[tmp_path])
    noted = [n for n in report.notes if "timed out" in n]
    assert any("team-slow-signal" in n for n in noted) and any("team-slow-two" in n for n in noted)


def test_no_note_when_nothing_times_out(team_kb):
    report = diagnose(LOG.replace("slowmark", "fastmark").encode(), kb_dirs=[team_kb])
    assert not [n for n in report.notes if "timed out" in n]


def test_the_terminal_report_says_it_too(team_kb):
    pytest.importorskip("rich")
    from oomdoctor.report.terminal import render_terminal

    report = diagnose(LOG.encode(), kb_dirs=[team_kb])
    assert "timed out on this log" in " ".join(render_terminal(report, width=300).split())
