"""The literal gate in front of knowledge-base patterns never hides a real match."""
from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pydantic import BaseModel

from oomdoctor.kb.knowledge import Condition, default_knowledge
from oomdoctor.read.literals import Gate, required_literals


def _kb_patterns() -> list[str]:
    """Every text and frame pattern of the shipped knowledge base, wherever it sits."""
    out: set[str] = set()

    def walk(node) -> None:
        if isinstance(node, Condition):
            out.update(p for p in (node.text, node.frame) if p)
        if isinstance(node, BaseModel):
            for name in type(node).model_fields:
                walk(getattr(node, name))
        elif isinstance(node, (list, tuple)):
            for item in node:
                walk(item)
        elif isinstance(node, dict):
            for item in node.values():
                walk(item)

    for inc in default_knowledge():
        walk(inc)
    return sorted(out)


KB_PATTERNS = _kb_patterns()


def test_the_shipped_kb_has_gated_patterns():
    gated = [p for p in KB_PATTERNS if required_literals(p) is not None]
    assert len(KB_PATTERNS) >= 10
    assert len(gated) >= len(KB_PATTERNS) // 2


@pytest.mark.parametrize("pattern", [p for p in KB_PATTERNS if required_literals(p) is not None])
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_every_string_a_kb_pattern_matches_passes_its_gate(pattern, data):
    flags = re.I if required_literals(pattern).fold else 0
    body = pattern[4:] if pattern.startswith("(?i)") else pattern
    text = data.draw(st.from_regex(re.compile(body, flags)))
    assert required_literals(pattern).may_match(text)


_ATOMS = st.sampled_from(["abc", "memory", "Tried", r"\d+", r"\s*", "[xy]", ".", r"\(", "x?", "(?:ab|cd)",
                          "(foo|barbaz)", "(?:qqq)+", "(?:zzz)*", "(?:optional)?", "(?:lazy)??", "^", "$", r"\b", "(?=ab)", "(?!no)"])


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(parts=st.lists(st.lists(_ATOMS, min_size=1, max_size=5), min_size=1, max_size=3),
       fold=st.booleans(), data=st.data())
def test_generated_patterns_never_gate_out_their_own_matches(parts, fold, data):
    pattern = ("(?i)" if fold else "") + "|".join("".join(p) for p in parts)
    try:
        compiled = re.compile(pattern)
    except re.error:
        return
    gate = required_literals(pattern)
    if gate is None:
        return
    try:
        text = data.draw(st.from_regex(compiled))
    except Exception:  # a pattern no string can match (e.g. "$abc")
        return
    assert compiled.search(text)
    assert gate.may_match(text), (pattern, text, gate)


@pytest.mark.parametrize("pattern, literals", [
    ("Malloc pin memory failed|cudaHostAlloc", {"Malloc pin memory failed", "cudaHostAlloc"}),
    (r"found at least two devices, (cuda:\d+ and cpu|cpu and cuda:\d+)", {"found at least two devices, "}),
    (r"(lm_head\(|logits\.float\(|cross_entropy\()", {"lm_head(", "logits.float(", "cross_entropy("}),
])
def test_literals_read_from_the_pattern(pattern, literals):
    gate = required_literals(pattern)
    assert gate is not None and set(gate.literals) == literals and not gate.fold


@pytest.mark.parametrize("pattern", [
    "ab|cd",                 # too short to be worth a search
    r"\d+ GiB",              # nothing required of length >= 3... " GiB" is: see below
    "x(?i:abc)",             # scoped case change
    r"[[:alpha:]]+error",    # regex-module syntax the standard parser reads differently
    r"\p{L}+ memory",
    "(",                     # broken
])
def test_no_gate_where_none_is_provable(pattern):
    gate = required_literals(pattern)
    if pattern == r"\d+ GiB":
        assert gate == Gate((" GiB",), False)
    else:
        assert gate is None


def test_folded_gate_leaves_non_ascii_text_to_the_regex():
    gate = required_literals("(?i)vllm|sglang")
    assert gate.fold
    assert gate.may_match("Started VLLM engine")
    assert not gate.may_match("plain training log")
    assert gate.may_match("ſglang")  # non-ASCII: the regex decides
