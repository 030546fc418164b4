"""What the text report says and in what order, as data: one list of blocks that two small
back ends lay out, ``text.py`` as plain text (into a pipe, a file, ``--color``) and
``terminal.py`` with rich (on a terminal).

Order: the verdict in one line; the numbers of the OOM; where it happened; why; the log
lines that show it; the fixes, in the detected framework's syntax first; what to capture
when the log cannot decide; the environment. The one-screen report (the default) keeps
the verdict, the first numbers, where, the strongest evidence and the first fix.

Styles are names, not escapes: ``head`` (bold), ``alarm`` (bold red: an OOM's verdict),
``dim`` and ``knob``; each back end says how it shows them. Text in blocks is as the
report has it: the back ends clean it (``common.clean``) before printing it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional, Union

from ..kb.diagnosis import AGAINST, PRIOR
from .common import (
    ALWAYS_SHOWN,
    Row,
    candidate_note,
    compact,
    diagnosis_evidence,
    effect_line,
    env_rows,
    fit_line,
    knob_name,
    memory_section,
    no_fix_line,
    number_rows,
    pct,
    primary_event,
    row_phrase,
    run_rows,
    shown_diagnoses,
    split_fixes,
    timeout_warning,
    verdict,
    versions_note,
    where_rows,
)

if TYPE_CHECKING:
    from ..facts.models import Evidence
    from ..kb.diagnosis import Diagnosis, Remediation
    from .model import Report

MAX_REFERENCES = 3      # a terminal shows the first few; markdown and JSON carry all
SUMMARY_NUMBERS = 6     # rows of "The numbers" on the one screen, besides ALWAYS_SHOWN
SUMMARY_EVIDENCE = 3    # evidence lines on the one screen
HEAD, ALARM, DIM, KNOB = "head", "alarm", "dim", "knob"


@dataclass
class Para:
    """Prose, wrapped to the width. ``first`` (a bullet or number) starts the first line;
    later lines are indented by ``hang`` past ``indent`` where given, else by ``first``."""
    text: str
    indent: int = 2
    style: str = ""
    first: str = ""
    hang: int = 0


@dataclass
class Heading:
    text: str


@dataclass
class Blank:
    """A blank line (never two in a row, none at the end)."""


@dataclass
class Rows:
    """Labelled figures under a title."""
    title: str
    rows: list[Row]


@dataclass
class EvidenceLines:
    """Log lines, each with its reference, cut to the width."""
    evidence: list[Evidence]


@dataclass
class KnobBlock:
    """A knob's setting, verbatim (relative indentation kept), never wrapped or cut."""
    setting: str
    indent: int


@dataclass
class Verbatim:
    """One line printed as it is (a URL): never wrapped."""
    text: str
    style: str = ""


@dataclass
class OtherKnobs:
    """A fix's knobs for other stacks: name, then the knob in one line, never cut."""
    indent: int
    knobs: list[tuple[str, str]] = field(default_factory=list)      # (name, compact knob)

    @property
    def name_width(self) -> int:
        """The width of the name column: the longest name, at most 22."""
        return min(22, max(len(name) for name, _k in self.knobs))


@dataclass
class Phrases:
    """Short phrases joined by `` | `` on as few lines as fit, never broken inside one."""
    phrases: list[str]
    style: str = ""


Block = Union[Para, Heading, Blank, Rows, EvidenceLines, KnobBlock, Verbatim, OtherKnobs, Phrases]


def sections(report: Report, *, top: Optional[int] = None, verbose: bool = False) -> list[Block]:
    """The text report as blocks: the one screen, or everything with ``verbose``."""
    out: list[Block] = []
    diagnoses = shown_diagnoses(report, top)
    d = diagnoses[0] if diagnoses else None
    head, detail = verdict(report, diagnoses)
    is_oom = (d is not None and d.memory_failure and not d.warning) or (d is None and bool(report.oom_events))
    out.append(Para(head, 0, ALARM if is_oom else HEAD, hang=2))
    if detail:
        out.append(Para(detail, 2))
    if not verbose:
        _summary(out, report, diagnoses)
        return out
    for title, rows in (("The numbers", number_rows(report)), ("Where the memory went", memory_section(report)),
                        ("Where", where_rows(report))):
        if rows:
            out.append(Rows(title, rows))
    if d is not None:
        _why(out, d)
    evidence = diagnosis_evidence(report, d)
    if evidence:
        out.append(EvidenceLines(evidence))
    if d is not None:
        _fixes(out, d)
        _others(out, report, diagnoses)
        if d.next_steps:
            out.append(Heading("What to capture next" if d.fallback else "Next steps"))
            out.extend(Para(step, 2, first="- ") for step in d.next_steps)
        if d.references:
            out.append(Heading("References"))
            out.extend(Verbatim("  " + ref, DIM) for ref in d.references[:MAX_REFERENCES])
            if len(d.references) > MAX_REFERENCES:
                out.append(Verbatim(f"  ... {len(d.references) - MAX_REFERENCES} more in --format markdown", DIM))
    _environment(out, report)
    if report.notes:
        out.append(Heading("Notes"))
        out.extend(Para(note, 2, DIM, first="- ") for note in report.notes)
    if report.found_anything:
        out.append(Blank())
        tail = f"read {report.lines_read:,} lines"
        if report.source:
            tail += f" of {report.source}"
        if report.fingerprint:
            tail += f"; fingerprint {report.fingerprint}"
        out.append(Para(tail, 0, DIM, hang=2))
    return out


def strongest_evidence(report: Report, d: Optional[Diagnosis]) -> list:
    """The failure's own line first, then the diagnosis's lines nearest to it."""
    evidence = diagnosis_evidence(report, d)
    ev = primary_event(report)
    failure = ev.evidence[0] if ev is not None and ev.evidence else None
    if failure is None:
        return evidence[:SUMMARY_EVIDENCE]
    rest = sorted((e for e in evidence if e.line != failure.line), key=lambda e: abs(e.line - failure.line))
    return sorted([failure] + rest[:SUMMARY_EVIDENCE - 1], key=lambda e: e.line)


def _summary(out: list[Block], report: Report, diagnoses: list[Diagnosis]) -> None:
    """The one screen (about 30 lines at 100 columns): numbers, where, the strongest
    evidence, the first fix, the runner-ups."""
    d = diagnoses[0] if diagnoses else None
    nums = number_rows(report)   # (ALWAYS_SHOWN rows come last: the cut spares them)
    nums = [r for r in nums if r.label not in ALWAYS_SHOWN][:SUMMARY_NUMBERS] + [r for r in nums if r.label in ALWAYS_SHOWN]
    if nums:
        out.append(Rows("The numbers", nums))
    where = where_rows(report)
    if where:
        out.append(Rows("Where", where))
    evidence = strongest_evidence(report, d)
    if evidence:
        out.append(EvidenceLines(evidence))
    ok: list[Remediation] = []
    if d is not None:
        ok, not_ok = split_fixes(d)
        if not ok and not_ok:
            out.append(Heading("First fix"))
            out.append(Para(no_fix_line(not_ok), 2))
        if ok:
            rem = ok[0]
            out.append(Heading("First fix"))
            out.append(Para(rem.title, 2, HEAD))
            if rem.knob is not None:
                out.append(Para(knob_name(rem.knob) + ":", 2, DIM))
                out.append(KnobBlock(rem.knob.setting, 6))
            effect = effect_line(rem)
            if effect:
                out.append(Para(effect, 2))
    warning = timeout_warning(report)
    if warning:   # a knowledge-base search that ran out of time is not "no match"
        out.append(Blank())
        out.append(Para(warning, 0, HEAD, hang=2))
    rest = [f"{o.incident} ({pct(o.confidence)})" for o in diagnoses[1:4]]
    more = "; ".join(x for x in (
        ("also possible: " + ", ".join(rest)) if rest else "",
        f"{len(ok) - 1} more fixes" if len(ok) > 1 else "") if x)
    out.append(Blank())
    out.append(Para((more + " - " if more else "") + "oomdoctor diagnose -v for the full report (why, every fix, "
                    "environment, notes)", 0, DIM, hang=2))


def _why(out: list[Block], d: Diagnosis) -> None:
    if not (d.explanation or d.because):
        return
    out.append(Heading("Why"))
    if d.explanation:
        out.append(Para(d.explanation, 2))
    for reason in d.because:
        out.append(Para(reason, 2, DIM if reason.startswith((AGAINST, PRIOR)) else "", first="- "))


def _fixes(out: list[Block], d: Diagnosis) -> None:
    ok, not_ok = split_fixes(d)
    if ok:
        out.append(Heading("Fixes, best first"))
        for n, rem in enumerate(ok, 1):
            _fix(out, n, rem)
    if not_ok:
        out.append(Heading("Not for this log"))
        # fixes sharing one reason (typically "its preconditions do not hold") are
        # listed under it once, so the reason is read once
        groups: dict[str, list[str]] = {}
        for rem in not_ok:
            groups.setdefault(rem.why_not or "does not apply to this log", []).append(rem.title)
        for why, titles in groups.items():
            if len(titles) == 1:
                out.append(Para(f"{titles[0]}: {why}", 2, DIM, first="- "))
                continue
            out.append(Para(f"{why}:", 2, DIM, first="- "))
            out.extend(Para(title, 4, DIM, first="- ") for title in titles)


def _fix(out: list[Block], n: int, rem: Remediation) -> None:
    out.append(Blank())
    num = f"{n}. "
    out.append(Para(rem.title, 2, HEAD, first=num))
    ind = 2 + len(num)
    need = versions_note(rem)
    if need:
        out.append(Para(need, ind, DIM))
    if rem.knob is not None:
        label = knob_name(rem.knob) + ":"
        if rem.knob.note:
            label = f"{knob_name(rem.knob)} ({rem.knob.note}):"
        out.append(Para(label, ind, DIM))
        out.append(KnobBlock(rem.knob.setting, ind + 4))
    effect = effect_line(rem)
    if effect:
        out.append(Para(effect, ind))
    out.extend(Para(caveat, ind, DIM, first="caveat: ") for caveat in rem.caveats)
    fit = fit_line(rem)
    if fit:
        out.append(Para(fit, ind))
    if rem.other_knobs:
        out.append(Para("for other stacks:", ind, DIM))
        # knobs keep their full length: cutting one would make it wrong
        out.append(OtherKnobs(ind + 2, [(knob_name(k), compact(k)) for k in rem.other_knobs]))


def _others(out: list[Block], report: Report, diagnoses: list[Diagnosis]) -> None:
    rest = diagnoses[1:]
    hidden = len(report.diagnoses) - len(diagnoses)
    if not rest and not hidden:
        return
    out.append(Heading("Other candidates"))
    for o in rest:
        kind, first = candidate_note(o)
        text = f"{o.title} ({o.incident}, {pct(o.confidence)}){kind}"
        if first:
            text += f": {first}"
        out.append(Para(text, 2, first="- "))
    if hidden:
        out.append(Para(f"{hidden} more not shown (--top {len(diagnoses)})", 2, DIM))


def _environment(out: list[Block], report: Report) -> None:
    env, run = env_rows(report), run_rows(report)
    if not env and not run:
        return
    out.append(Heading("Environment"))
    for rows, style in ((env, ""), (run, DIM)):
        phrases = [row_phrase(r) for r in rows]
        if phrases:
            out.append(Phrases(phrases, style))
