"""Every fact and marker that a knowledge-base condition names is one the parsers produce.

A condition over a name that nothing produces never holds and fails nothing: its signal is
silently dead, its remediation's ``requires`` silently false. The names the parsers produce
are collected from the logs the tests keep (the synthetic fixtures, the device captures and
the knowledge base's own examples), so a name counts once some log gives it a value (a flag
the table holds for every log, False where it does not apply, counts as given).
"""
from __future__ import annotations

import functools
import io
from pathlib import Path

import pytest
from pydantic import BaseModel

from oomdoctor.kb.knowledge import Condition, default_knowledge
from oomdoctor.kb.table import fact_table
from oomdoctor.pipeline import facts_from_view
from oomdoctor.read.reader import read_view

FIXTURES = Path(__file__).parent / "fixtures"


def _conditions(node, where: str):
    """(condition, where) for every condition under a loaded incident, nested ones too."""
    if isinstance(node, Condition):
        yield node, where
        for child in (node.all or []) + (node.any or []) + ([node.not_] if node.not_ else []):
            yield from _conditions(child, where)
    elif isinstance(node, BaseModel):
        for name in type(node).model_fields:
            yield from _conditions(getattr(node, name), f"{where}.{name}")
    elif isinstance(node, (list, tuple)):
        for i, item in enumerate(node):
            yield from _conditions(item, f"{where}[{i}]")
    elif isinstance(node, dict):
        for key, item in node.items():
            yield from _conditions(item, f"{where}.{key}")


def _texts():
    for folder in ("logs", "device"):
        for path in sorted((FIXTURES / folder).glob("*.log")):
            yield path.read_bytes()
    for inc in default_knowledge().incidents.values():
        for ex in inc.examples:
            yield ex.log.encode()


@functools.lru_cache(maxsize=1)
def _produced() -> tuple[frozenset, frozenset]:
    facts_seen: set[str] = set()
    markers_seen: set[str] = set()
    for data in _texts():
        facts, _lines = facts_from_view(read_view(io.BytesIO(data), None))
        facts_seen.update(name for name, value in fact_table(facts).items() if value is not None and value != [])
        markers_seen.update(facts.markers)
    return frozenset(facts_seen), frozenset(markers_seen)


NAMED = sorted({(kind, name, f"{inc.id}{where}")
                for inc in default_knowledge().incidents.values()
                for cond, where in _conditions(inc, "")
                for kind, name in (("fact", cond.fact), ("marker", cond.marker)) if name},
               key=lambda t: (t[1], t[2]))
# one case per name (the first place that names it)
BY_NAME = {}
for kind, name, where in NAMED:
    BY_NAME.setdefault((kind, name), where)


@pytest.mark.parametrize("kind,name", sorted(BY_NAME), ids=[f"{k}:{n}" for k, n in sorted(BY_NAME)])
def test_named_fact_or_marker_is_produced(kind, name):
    facts_seen, markers_seen = _produced()
    seen = facts_seen if kind == "fact" else markers_seen
    assert name in seen, (f"{kind} {name!r} (named in {BY_NAME[(kind, name)]}) is produced by no fixture log: "
                          "a misspelt or retired name, or a fact with no test log")


# the facts whose values the parsers take from a fixed vocabulary, and that vocabulary
@functools.cache
def _vocabularies() -> dict[str, set[str]]:
    from typing import get_args

    from oomdoctor.facts.models import Environment, OomKind, Phase
    from oomdoctor.parsers.environment.keys import _STRATEGY_NUMBERS, TRAINING_STAGES

    offload = get_args(get_args(Environment.model_fields["offload"].annotation)[0])
    return {
        "oom.kind": set(get_args(OomKind)), "oom.kinds": set(get_args(OomKind)),
        "phase": set(get_args(Phase)),
        "env.stage": set(TRAINING_STAGES),
        "env.offload": set(offload),
        "env.fsdp_sharding_strategy": set(_STRATEGY_NUMBERS.values()),
    }


VALUES = sorted({(cond.fact, value, f"{inc.id}{where}")
                 for inc in default_knowledge().incidents.values()
                 for cond, where in _conditions(inc, "") if cond.fact in _vocabularies()
                 for value in [cond.eq, cond.ne, *(cond.in_ or []), *(cond.not_in or [])] if isinstance(value, str)})


@pytest.mark.parametrize("fact,value,where", VALUES, ids=[f"{f}={v}@{w}" for f, v, w in VALUES])
def test_named_value_is_one_the_parsers_give(fact, value, where):
    assert value in _vocabularies()[fact], f"{where}: {fact} is never {value!r} (values: {sorted(_vocabularies()[fact])})"
