"""The Hyperscan literal index answers ``lines_with`` exactly as the Python path does."""
from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oomdoctor.read import literal_index
from oomdoctor.read.normalise import Line, join_lines, normalise
from oomdoctor.parsers import FAMILIES
from oomdoctor.parsers.base import ParseContext

pytest.importorskip("hyperscan")

LOGS = Path(__file__).parent / "fixtures" / "logs"


def _keys_asked() -> list:
    """Every (literals, fold) set the families ask about on the fixtures."""
    asked: list = []
    seen: set = set()
    original = ParseContext.lines_with

    def record(self, literals, fold=False):
        if (literals, fold) not in seen:
            seen.add((literals, fold))
            asked.append((literals, fold))
        return self._lines_with_python((literals, fold))

    ParseContext.lines_with = record
    try:
        for path in sorted(LOGS.glob("*.log")):
            ctx = ParseContext(normalise(path.read_text(encoding="utf-8", errors="replace")), str(path))
            for family in FAMILIES:
                family.parse(ctx)
    finally:
        ParseContext.lines_with = original
    return asked


KEYS = _keys_asked()


def _index() -> literal_index.LiteralIndex:
    index = literal_index.LiteralIndex()
    for key in KEYS:
        index.register(key)
    return index


def _python(lines: list[Line], key) -> list[int]:
    return ParseContext(lines)._lines_with_python(key)


def test_the_families_ask_for_many_sets():
    assert len(KEYS) > 20


@pytest.mark.parametrize("path", sorted(LOGS.glob("*.log")), ids=lambda p: p.stem)
def test_same_lines_as_python_on_every_fixture(path):
    lines = normalise(path.read_text(encoding="utf-8", errors="replace"))
    got = _index().lines(*join_lines(lines))
    assert got is not None
    for key in KEYS:
        if key in got:
            assert got[key] == _python(lines, key), key


# text made of the literals themselves, in any case, with non-ASCII letters whose
# lower-casing is not ASCII's (Kelvin sign, dotted I, sharp s) and multi-byte characters
_FOLDED = sorted({lit for lits, fold in KEYS if fold for lit in lits})
_PIECES = sorted({lit for lits, _fold in KEYS for lit in lits})[:200] + _FOLDED + [
    # a folded literal whose "k" is the Kelvin sign: Python's lower() finds it, ASCII folding not
    *[lit.replace("k", "\u212a") for lit in _FOLDED if "k" in lit],
    "\u212aill", "\u0130", "ß", "█", "é", "KILL", "Out Of Memory", "  ", " ", "\t", "x"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.sampled_from(_PIECES).map(lambda s: s.upper() if len(s) % 3 == 0 else s),
                         max_size=8).map("".join), max_size=12))
def test_same_lines_as_python_on_any_text(texts):
    lines = [Line(no=i + 1, raw=t, text=t) for i, t in enumerate(texts)]
    got = _index().lines(*join_lines(lines))
    if got is None:
        return
    for key in KEYS:
        if key in got:
            assert got[key] == _python(lines, key), (key, texts)


def test_a_context_uses_the_index_once_every_set_is_known(monkeypatch):
    index = _index()
    monkeypatch.setattr(literal_index, "shared", lambda: index)
    lines = normalise((LOGS / "seed-dpo-v100-fragmentation.log").read_text(encoding="utf-8"))
    ctx = ParseContext(lines)
    for family in FAMILIES:
        family.parse(ctx)
    assert ctx._indexed, "the families' sets were answered by the index"
    plain = ParseContext(lines)
    monkeypatch.setattr(literal_index, "shared", lambda: None)
    for family in FAMILIES:
        family.parse(plain)
    assert ctx.facts == plain.facts
