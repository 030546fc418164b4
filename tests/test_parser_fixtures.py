"""Every parser fixture (host-, runtime-, accel-, lookalike-*.log) against its expected facts."""
from __future__ import annotations

import pytest

import oomdoctor
from fixture_facts import LOGS, _load, assert_facts
from oomdoctor.read.normalise import normalise
from oomdoctor.parsers import extract

FAMILIES = ("host", "runtime", "accel", "lookalike")
FIXTURES = sorted(p for fam in FAMILIES for p in LOGS.glob(f"{fam}-*.log"))


def test_every_fixture_has_expectations():
    for fam in FAMILIES:
        assert list(LOGS.glob(f"{fam}-*.log")), fam
    assert all(p.with_suffix(".yaml").exists() for p in FIXTURES)


@pytest.mark.parametrize("log", FIXTURES, ids=lambda p: p.stem)
def test_fixture_facts_from_extract(log):
    text, expected = _load(log)
    assert_facts(extract(normalise(text)), expected)


@pytest.mark.parametrize("log", FIXTURES, ids=lambda p: p.stem)
def test_fixture_facts_from_diagnose(log):
    text, expected = _load(log)
    expected = dict(expected)
    codes = expected.pop("exit_codes", None)
    report = oomdoctor.diagnose(text, text=True)
    assert_facts(report, expected)
    if codes is not None:
        assert all(c in report.ranks.exit_codes for c in codes)
