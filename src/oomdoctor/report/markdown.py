"""The markdown report: for pasting into a GitHub issue or a team chat.

Same content and order as the text report. Figures go in tables, log lines in a fenced
block with their original line numbers, fixes in a numbered list with one fenced block
per knob (bash for environment/shell, json for DeepSpeed, python for code, yaml for the
YAML-configured frameworks), and what most readers will not need (the same fixes for
other stacks, fixes that do not apply) in collapsed ``<details>`` sections. Log text is
escaped so that it cannot break the table, the fences or the page.
"""
from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING, Optional

import regex as re

from ..kb.diagnosis import Diagnosis, Knob, Remediation
from ..read.patterns import lazy
from .common import (
    Row,
    candidate_note,
    clean,
    diagnosis_evidence,
    env_rows,
    evidence_ref,
    fence_language,
    fit_line,
    knob_name,
    memory_section,
    number_rows,
    pct,
    run_rows,
    shown_diagnoses,
    split_fixes,
    verdict,
    versions_note,
    where_rows,
)

if TYPE_CHECKING:  # renderers read a Report; the model offers them as methods
    from .model import Report

_INLINE = lazy(r"[\\`*\[\]|]|(?<![\p{L}\p{N}])_|_(?![\p{L}\p{N}])")


def md(text: object) -> str:
    """Prose from a log or the knowledge base, made inert: no emphasis, links or HTML."""
    s = " ".join(clean(text).split())
    s = _INLINE.sub(lambda m: "\\" + m.group(0), s)
    return s.replace("<", "&lt;").replace(">", "&gt;")


def fenced(body: str, lang: str = "", indent: str = "") -> list[str]:
    """A fenced block whose fence is longer than any backtick run inside it."""
    runs = [len(r) for r in re.findall(r"`+", body)]
    fence = "`" * max(3, max(runs, default=0) + 1)
    lines = [indent + fence + lang]
    lines += [(indent + ln).rstrip() for ln in body.splitlines()]
    lines.append(indent + fence)
    return lines


def _table(rows: list[Row], head: tuple[str, str, str], *, right: bool = False) -> list[str]:
    """A 2- or 3-column table (the note column only when a row has a note); figures
    right-aligned where they are sizes to compare."""
    notes = any(r.note for r in rows)
    value_col = "---:" if right else "---"
    out = []
    if notes:
        out += [f"| {head[0]} | {head[1]} | {head[2]} |", f"| --- | {value_col} | --- |"]
        out += [f"| {md(r.label)} | {md(r.value)} | {md(r.note or '')} |" for r in rows]
    else:
        out += [f"| {head[0]} | {head[1]} |", f"| --- | {value_col} |"]
        out += [f"| {md(r.label)} | {md(r.value)} |" for r in rows]
    return out


def render_markdown(report: Report, *, top: Optional[int] = None, **_) -> str:
    diagnoses = shown_diagnoses(report, top)
    d = diagnoses[0] if diagnoses else None
    out: list[str] = []

    head, detail = verdict(report, diagnoses)
    out += [f"## {md(head)}", ""]
    if detail:
        out += [md(detail), ""]

    nums = number_rows(report)
    if nums:
        out += ["### The numbers", ""] + _table(nums, ("figure", "value", "note"), right=True) + [""]
    mem = memory_section(report)
    if mem:
        out += ["### Where the memory went", ""] + _table(mem, ("part", "size", "note"), right=True) + [""]
    where = where_rows(report)
    if where:
        out += ["### Where", ""]
        out += [f"- **{md(r.label)}:** {md(r.value)}" + (f" — {md(r.note)}" if r.note else "") for r in where]
        out.append("")
    if d is not None and (d.explanation or d.because):
        out += ["### Why", ""]
        if d.explanation:
            out += [md(d.explanation), ""]
        out += [f"- {md(b)}" for b in d.because]
        out.append("")
    evidence = diagnosis_evidence(report, d)
    if evidence:
        multi = len({e.source for e in evidence if e.source}) > 1
        refs = [evidence_ref(e, multi) for e in evidence]
        w = max(len(r) for r in refs)
        body = "\n".join(f"{r.rjust(w)}  {clean(e.text).rstrip()}" for r, e in zip(refs, evidence))
        out += ["### Evidence", ""] + fenced(body, "text") + [""]
    if d is not None:
        out += _fixes(d)
        out += _others(report, diagnoses)
        if d.next_steps:
            out += ["### What to capture next" if d.fallback else "### Next steps", ""]
            out += [f"- {md(s)}" for s in d.next_steps] + [""]
        if d.references:
            out += ["### References", ""] + [f"- <{clean(r)}>" if r.startswith("http") else f"- {md(r)}"
                                             for r in d.references] + [""]
    env = env_rows(report) + run_rows(report)
    if env:
        out += ["### Environment", ""] + _table(env, ("component", "value", "note")) + [""]
    if report.notes:
        out += ["### Notes", ""] + [f"- {md(n)}" for n in report.notes] + [""]
    foot = f"oomdoctor {md(report.tool_version)}, {report.lines_read:,} lines read"
    if report.fingerprint:
        foot += f", fingerprint `{clean(report.fingerprint)}`"
    out.append(f"<sub>{foot}</sub>")
    return "\n".join(out) + "\n"


def _knob_block(knob: Knob, indent: str) -> list[str]:
    label = knob_name(knob) + (f" ({md(knob.note)})" if knob.note else "")
    body = textwrap.dedent(clean(knob.setting).strip("\n")).rstrip()
    return [f"{indent}{label}:", ""] + fenced(body, fence_language(knob), indent) + [""]


def _fix_item(n: int, rem: Remediation) -> list[str]:
    ind = " " * len(f"{n}. ")
    title = f"{n}. **{md(rem.title)}**"
    need = versions_note(rem)
    if need:
        title += f" ({md(need)})"
    out = [title, ""]
    if rem.knob is not None:
        out += _knob_block(rem.knob, ind)
    effect = "; ".join(f"*{label}:* {md(text)}" for label, text in (("saves", rem.memory_effect),
                                                                      ("costs", rem.cost)) if text)
    for line in (effect, md(fit_line(rem)) if fit_line(rem) else ""):
        if line:
            out += [ind + line, ""]
    if rem.caveats:
        out += [f"{ind}- caveat: {md(c)}" for c in rem.caveats] + [""]
    return out


def _fixes(d: Diagnosis) -> list[str]:
    ok, not_ok = split_fixes(d)
    out: list[str] = []
    if ok:
        out += ["### Fixes, best first", ""]
        for n, rem in enumerate(ok, 1):
            out += _fix_item(n, rem)
        with_others = [(n, r) for n, r in enumerate(ok, 1) if r.other_knobs]
        if with_others:
            out += ["<details><summary>The same fixes for other stacks</summary>", ""]
            for n, rem in with_others:
                out += [f"**{n}. {md(rem.title)}**", ""]
                for k in rem.other_knobs:
                    out += _knob_block(k, "")
            out += ["</details>", ""]
    if not_ok:
        out += ["<details><summary>Fixes that do not apply to this log</summary>", ""]
        out += [f"- **{md(r.title)}**: {md(r.why_not or 'does not apply to this log')}" for r in not_ok]
        out += ["", "</details>", ""]
    return out


def _others(report: Report, diagnoses: list[Diagnosis]) -> list[str]:
    rest = diagnoses[1:]
    hidden = len(report.diagnoses) - len(diagnoses)
    if not rest and not hidden:
        return []
    out = ["### Other candidates", ""]
    for o in rest:
        kind, first = candidate_note(o)
        line = f"- {md(o.title)} (`{clean(o.incident)}`, {pct(o.confidence)}){kind}"
        if first:
            line += f": {md(first)}"
        out.append(line)
    if hidden:
        out.append(f"- {hidden} more not shown (`--top {len(diagnoses)}`)")
    return out + [""]
