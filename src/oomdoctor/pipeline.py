"""The one pipeline every door ends in: bytes in → Report out.

    view   = read_view(source)              # bounded: whole log, or regions of a big one
    lines  = normalise(view)                # decorations stripped, line numbers kept
    facts  = extract(lines)                 # every parser family
    ranked = classify(facts, knowledge)     # generic engine over the YAML incidents
    report = Report(facts, ranked)          # renderers read the report, nothing else
"""
from __future__ import annotations

from typing import Optional, Sequence

from . import __version__
from .facts.models import Facts
from .read.normalise import Line, normalise_pairs
from .parsers import extract
from .read.reader import LogView, Source, open_source, read_view
from .report.model import Report


def facts_from_view(view: LogView, source: Optional[str] = None) -> tuple[Facts, list[Line]]:
    lines = normalise_pairs(view.pairs)
    facts = extract(lines, source)
    facts.lines_read = view.lines_read
    facts.bytes_read = view.bytes_read
    facts.notes.extend(view.notes)
    return facts, lines


def report_from_facts(facts: Facts, lines: list[Line], *, source: Optional[str] = None,
                      knowledge=None, framework: Optional[str] = None) -> Report:
    from .kb.classify import classify
    from .kb.knowledge import default_knowledge

    kb = knowledge if knowledge is not None else default_knowledge()
    report = Report.from_facts(facts, tool_version=__version__, source=source)
    report.diagnoses = classify(facts, kb, lines=lines, framework=framework)
    report.notes.extend(f"knowledge file skipped: {p}" for p in kb.problems)
    from .memory import memory_section
    report.memory = memory_section(facts, report.diagnoses)
    from .report.fingerprint import fingerprint
    report.fingerprint = fingerprint(report)
    return report


def diagnose_view(view: LogView, *, source: Optional[str] = None, knowledge=None,
                  framework: Optional[str] = None) -> Report:
    facts, lines = facts_from_view(view, source)
    return report_from_facts(facts, lines, source=source, knowledge=knowledge, framework=framework)


def diagnose_source(src: Source, *, knowledge=None, framework: Optional[str] = None) -> Report:
    """Diagnose one log: a path ('-' for stdin), bytes, or a binary stream."""
    stream, name = open_source(src)
    try:
        view = read_view(stream, name)
    finally:
        if name not in (None, "<stdin>"):
            stream.close()
    return diagnose_view(view, source=name, knowledge=knowledge, framework=framework)


def diagnose_many(sources: Sequence[Source], *, knowledge=None, framework: Optional[str] = None) -> Report:
    """Several pasted fragments of one job (e.g. each rank's file) → one report."""
    if len(sources) == 1:
        return diagnose_source(sources[0], knowledge=knowledge, framework=framework)
    pairs: list[tuple[int, str]] = []
    names = []
    lines_read = bytes_read = 0
    notes: list[str] = []
    offset = 0
    for src in sources:
        stream, name = open_source(src)
        try:
            view = read_view(stream, name)
        finally:
            if name not in (None, "<stdin>"):
                stream.close()
        names.append(name or "<input>")
        # Line numbers continue across files so evidence stays unambiguous; the text
        # report names the file of each evidence line through Evidence.source.
        pairs.extend((offset + no, text) for no, text in view.pairs)
        offset += view.lines_read + 1
        pairs.append((offset, ""))
        lines_read += view.lines_read
        bytes_read += view.bytes_read
        notes.extend(view.notes)
    merged = LogView(pairs=pairs, lines_read=lines_read, bytes_read=bytes_read, notes=notes)
    return diagnose_view(merged, source=", ".join(names), knowledge=knowledge, framework=framework)
