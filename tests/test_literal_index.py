"""The native literal indexes (Hyperscan, Aho-Corasick) answer ``lines_with`` exactly as the
Python path does."""
from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oomdoctor.read import literal_index
from oomdoctor.read.normalise import Line, join_lines, normalise
from oomdoctor.parsers import FAMILIES
from oomdoctor.parsers.base import ParseContext
from real_corpus import REAL

BACKENDS = {name: cls for name, module, cls in (("hyperscan", "hyperscan", literal_index.LiteralIndex),
                                                ("ahocorasick", "ahocorasick_rs", literal_index.AhoCorasickIndex))
            if importlib.util.find_spec(module)}
if not BACKENDS:
    pytest.skip("no native literal index installed (oomdoctor[fast])", allow_module_level=True)

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

    original_indexed = ParseContext.indexed_lines_with
    ParseContext.lines_with = record
    ParseContext.indexed_lines_with = record   # gates: the same sets, answered when indexed
    try:
        for path in sorted(LOGS.glob("*.log")):
            ctx = ParseContext(normalise(path.read_text(encoding="utf-8", errors="replace")), str(path))
            for family in FAMILIES:
                family.parse(ctx)
    finally:
        ParseContext.lines_with = original
        ParseContext.indexed_lines_with = original_indexed
    return asked


KEYS = _keys_asked()


def _index(backend: str = next(iter(BACKENDS))) -> literal_index.LiteralIndex:
    index = BACKENDS[backend]()
    for key in KEYS:
        index.register(key)
    return index


def _python(lines: list[Line], key) -> list[int]:
    return ParseContext(lines)._lines_with_python(key)


def test_the_families_ask_for_many_sets():
    assert len(KEYS) > 20


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("path", sorted(LOGS.glob("*.log")), ids=lambda p: p.stem)
def test_same_lines_as_python_on_every_fixture(path, backend):
    lines = normalise(path.read_text(encoding="utf-8", errors="replace"))
    got = _index(backend).lines(*join_lines(lines))
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
    for backend in BACKENDS:
        got = _index(backend).lines(*join_lines(lines))
        if got is None:
            continue
        if backend == "ahocorasick":   # it folds as Python does: every set is answered
            assert len(got) == len(KEYS) or any(len(t.lower()) != len(t) for t in texts)
        for key in KEYS:
            if key in got:
                assert got[key] == _python(lines, key), (backend, key, texts)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_a_context_uses_the_index_once_every_set_is_known(monkeypatch, backend):
    index = _index(backend)
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


@pytest.mark.skipif("ahocorasick" not in BACKENDS, reason="ahocorasick-rs is not installed")
def test_the_index_of_each_tier(monkeypatch):
    """Hyperscan's when installed, else Aho-Corasick's (=ahocorasick: as without Hyperscan), none
    for the pure-Python search."""
    for value, expected in (("", next(iter(BACKENDS))), ("ahocorasick", "ahocorasick"), ("python", None),
                            ("trie", None)):
        monkeypatch.setenv("OOMDOCTOR_PREFILTER", value)
        monkeypatch.setattr(literal_index, "_CHECKED", False)
        monkeypatch.setattr(literal_index, "_SHARED", None)
        got = literal_index.shared()
        assert (got if got is None else type(got)) == (expected and BACKENDS[expected]), value
    monkeypatch.setattr(literal_index, "_CHECKED", False)


def test_an_empty_literal_is_left_to_the_python_path():
    if "ahocorasick" not in BACKENDS:
        pytest.skip("ahocorasick-rs is not installed")
    index = literal_index.AhoCorasickIndex()
    index.register((("", "x"), False))
    index.register((("b",), False))
    got = index.lines("a\nb\nx", [0, 2, 4])
    assert got == {(("b",), False): [1]}



@functools.cache
def _every_log() -> list[tuple[str, list[Line]]]:
    """(name, normalised lines) of every fixture and real log, read once for the tests below."""
    return [(path.name, normalise(path.read_text(encoding="utf-8", errors="replace")))
            for path in sorted(LOGS.glob("*.log")) + sorted(REAL.glob("*.log"))]


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_the_word_gate_changes_no_configuration(monkeypatch, backend):
    """The environment family splits into words only the lines the index says may hold a
    word of its vocabulary: on every fixture and real log, the configuration it reads is
    the one it reads splitting every line."""
    from oomdoctor.parsers import ENVIRONMENT_ONLY, environment, extract

    index = _index(backend)
    index.register((environment.VOCABULARY, True))
    monkeypatch.setattr(literal_index, "shared", lambda: index)
    gated = 0
    asked = ParseContext.indexed_lines_with

    def counted(self, literals, fold=False):
        nonlocal gated
        got = asked(self, literals, fold)
        gated += literals == environment.VOCABULARY and got is not None
        return got

    for name, lines in _every_log():
        with monkeypatch.context() as m:
            m.setattr(ParseContext, "indexed_lines_with", counted)
            with_gate = extract(lines, families=ENVIRONMENT_ONLY).environment
        with monkeypatch.context() as m:
            m.setattr(ParseContext, "indexed_lines_with", lambda self, literals, fold=False: None)
            without = extract(lines, families=ENVIRONMENT_ONLY).environment
        assert with_gate == without, name
    assert gated > 400, "the gate was taken"


def _sub_parser_calls():
    """(name, NEEDS, call(line text) -> what it recorded) for the gated environment sub-parsers."""
    from importlib import import_module

    from oomdoctor.parsers.environment.forms import words_of
    # the modules (the package's names hardware and world are the functions)
    hardware, launcher, engine = (import_module(f"oomdoctor.parsers.environment.{m}")
                                  for m in ("hardware", "launcher", "engine"))

    return [
        ("hardware", hardware.NEEDS, lambda t: _recorded(hardware.hardware, t, lambda: ({},), words_of(t.lower()))),
        ("world", launcher.NEEDS, lambda t: _recorded(launcher.world, t, lambda: ([0, 0],), None)),
        ("runtime_misc", engine.NEEDS, lambda t: _recorded(engine.runtime_misc, t, lambda: ({},), words_of(t.lower()))),
    ]


def _recorded(fn, text, state, words):
    from oomdoctor.facts.models import Environment
    from oomdoctor.parsers.environment.collector import Collector
    col = Collector(Environment())
    extra = state()
    args = (col, text, text.lower(), 1, *extra) + ((words,) if words is not None else ())
    fn(*args)
    return col.prio, col.parts, extra


@pytest.mark.parametrize("name, needs, call", [pytest.param(*c, id=c[0]) for c in _sub_parser_calls()])
def test_a_gated_sub_parser_records_nothing_from_a_line_without_its_literals(name, needs, call):
    """The environment family calls hardware(), world() and runtime_misc() only on the lines the
    index says hold one of their NEEDS: on every other line of every fixture and real log they
    must record nothing, and on some lines that hold one they do record."""
    _empty, _parts, fresh = call("")
    recorded = 0
    for log, lines in _every_log():
        for ln in lines:
            prio, parts, state = call(ln.text)
            if not any(n in ln.text.lower() for n in needs):
                assert not prio and not parts and state == fresh, (name, log, ln.text[:120])
            else:
                recorded += bool(prio or parts or state != fresh)
    assert recorded > 20
