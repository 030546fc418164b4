"""The terminal report: what an engineer whose job just died reads, top to bottom.

Order: the verdict in one line; the numbers of the OOM; where it happened; why; the log
lines that show it; the fixes, in the detected framework's syntax first; what to capture
when the log cannot decide; the environment. Prose stays within 100 columns; evidence
lines and knobs are never re-wrapped (a knob must stay copy-pasteable), evidence is cut
to the terminal width instead. Colour is plain ANSI, only when the caller asks (the CLI
decides from the TTY and NO_COLOR).
"""
from __future__ import annotations

import re
import shutil
import textwrap
from typing import TYPE_CHECKING, Optional, Sequence

from ..kb.diagnosis import Diagnosis, Remediation
from .common import (WIDTH, Row, candidate_note, clean, compact, diagnosis_evidence, effect_line, primary_event, env_rows,
                     evidence_ref, fit_line, knob_name, memory_section, number_rows, pct,
                     run_rows, row_phrase, shown_diagnoses, split_fixes, verdict,
                     versions_note, where_rows)

if TYPE_CHECKING:  # renderers read a Report; the model offers them as methods
    from .model import Report

_BOLD, _RED, _DIM, _RESET = "\x1b[1m", "\x1b[31m", "\x1b[2m", "\x1b[0m"
MAX_LABEL = 26
MAX_REFERENCES = 3  # a terminal shows the first few; markdown and JSON carry all
_SIZE = re.compile(r"^-?\d[\d.,]* (?:bytes|KiB|MiB|GiB|TiB)$")


class _Out:
    """Collects lines; every piece of text is cleaned of control characters first and
    styled after wrapping, so escapes never count towards the width."""

    def __init__(self, color: bool, width: int):
        self.color = color
        self.width = width                  # evidence is cut to this
        self.prose = max(40, min(WIDTH, width))
        self.lines: list[str] = []

    def style(self, text: str, *codes: str) -> str:
        if not self.color or not codes or not text:
            return text
        return "".join(codes) + text + _RESET

    def line(self, text: str = "", *codes: str) -> None:
        self.lines.append(self.style(clean(text), *codes))

    def blank(self) -> None:
        if self.lines and self.lines[-1] != "":
            self.lines.append("")

    def heading(self, text: str) -> None:
        self.blank()
        self.line(text, _BOLD)

    def para(self, text: str, indent: int = 2, hang: int = 0, *codes: str, first: str = "") -> None:
        """Wrapped prose; ``first`` (a bullet or number) starts the first line."""
        lead = " " * indent + first
        rest = " " * (indent + (hang if hang else len(first)))
        wrapped = textwrap.wrap(clean(text), width=self.prose, initial_indent=lead,
                                subsequent_indent=rest, break_long_words=False,
                                break_on_hyphens=False) or [lead.rstrip()]
        for i, w in enumerate(wrapped):
            self.lines.append(self._style_after(w, len(lead) if i == 0 else len(rest), codes))

    def _style_after(self, text: str, keep: int, codes: Sequence[str]) -> str:
        # style the words, not the indentation (keeps copy/paste of a block clean)
        return text[:keep] + self.style(text[keep:], *codes)

    def rows(self, rows: list[Row], indent: int = 2) -> None:
        """Label, value, dim note; sizes right-aligned in one column so that they line
        up and can be compared at a glance."""
        if not rows:
            return
        w = min(MAX_LABEL, max(len(r.label) for r in rows))
        col = indent + w + 2
        vw = max((len(r.value) for r in rows if _SIZE.match(r.value)), default=0)
        for r in rows:
            label = clean(r.label)
            head = " " * indent + label.ljust(w) + "  "
            if len(head) > col:         # over-long label: value on the next line
                self.lines.append(head.rstrip())
                head = " " * col
            value, note = clean(r.value), clean(r.note) if r.note else ""
            if _SIZE.match(value):
                value = value.rjust(vw)
            body = textwrap.wrap(value, width=max(20, self.prose - col), break_long_words=False,
                                 break_on_hyphens=False, drop_whitespace=False) or [""]
            body = [b.rstrip() if i else b for i, b in enumerate(body)]
            out = [head + body[0]] + [" " * col + b.strip() for b in body[1:]]
            if note:
                if len(out[-1]) + 2 + len(note) <= self.prose:
                    out[-1] = out[-1] + "  " + self.style(note, _DIM)
                else:
                    for n in textwrap.wrap(note, width=max(20, self.prose - col - 2),
                                           break_long_words=False):
                        out.append(" " * (col + 2) + self.style(n, _DIM))
            self.lines.extend(line.rstrip() if not self.color else line for line in out)

    def block(self, setting: str, indent: int) -> None:
        """A knob, verbatim (relative indentation kept), never wrapped."""
        text = textwrap.dedent(setting.strip("\n")).rstrip()
        for raw in text.splitlines():
            self.lines.append((" " * indent + clean(raw)).rstrip())

    def text(self) -> str:
        while self.lines and self.lines[-1] == "":
            self.lines.pop()
        return "\n".join(self.lines) + "\n"


def _terminal_width() -> int:
    return shutil.get_terminal_size(fallback=(120, 24)).columns


def render_text(report: Report, *, top: Optional[int] = None, color: Optional[bool] = False,
                width: Optional[int] = None, verbose: bool = False) -> str:
    """One screen by default: the verdict, the numbers, where, the strongest evidence, the
    first fix for the detected framework and the runner-ups; ``verbose`` gives everything."""
    out = _Out(bool(color), max(60, width or _terminal_width()))
    diagnoses = shown_diagnoses(report, top)
    d = diagnoses[0] if diagnoses else None

    head, detail = verdict(report, diagnoses)
    is_oom = (d is not None and d.memory_failure and not d.warning) or (d is None and bool(report.oom_events))
    out.para(head, 0, 2, *((_BOLD, _RED) if is_oom else (_BOLD,)))
    if detail:
        out.para(detail, 2)
    if not verbose:
        _summary(out, report, diagnoses)
        return out.text()

    nums = number_rows(report)
    if nums:
        out.heading("The numbers")
        out.rows(nums)
    mem = memory_section(report)
    if mem:
        out.heading("Where the memory went")
        out.rows(mem)
    where = where_rows(report)
    if where:
        out.heading("Where")
        out.rows(where)
    if d is not None:
        _why(out, d)
    _evidence(out, report, d)
    if d is not None:
        _fixes(out, d)
        _others(out, report, diagnoses)
        if d.next_steps:
            out.heading("What to capture next" if d.fallback else "Next steps")
            for step in d.next_steps:
                out.para(step, 2, first="- ")
        if d.references:
            out.heading("References")
            for ref in d.references[:MAX_REFERENCES]:
                out.line("  " + ref, _DIM)
            if len(d.references) > MAX_REFERENCES:
                out.line(f"  ... {len(d.references) - MAX_REFERENCES} more in --format markdown", _DIM)
    _environment(out, report)
    if report.notes:
        out.heading("Notes")
        for note in report.notes:
            out.para(note, 2, 0, _DIM, first="- ")
    if report.found_anything:
        out.blank()
        tail = f"read {report.lines_read:,} lines"
        if report.source:
            tail += f" of {report.source}"
        if report.fingerprint:
            tail += f"; fingerprint {report.fingerprint}"
        out.para(tail, 0, 2, _DIM)
    return out.text()


SUMMARY_NUMBERS = 6
SUMMARY_EVIDENCE = 3


def _summary(out: _Out, report: Report, diagnoses: list[Diagnosis]) -> None:
    """The one-screen report (about 30 lines at 100 columns)."""
    d = diagnoses[0] if diagnoses else None
    nums = number_rows(report)[:SUMMARY_NUMBERS]
    if nums:
        out.heading("The numbers")
        out.rows(nums)
    where = where_rows(report)
    if where:
        out.heading("Where")
        out.rows(where)
    _evidence_lines(out, _strongest_evidence(report, d))
    ok: list[Remediation] = []
    if d is not None:
        ok, _not_ok = split_fixes(d)
        if ok:
            rem = ok[0]
            out.heading("First fix")
            out.para(rem.title, 2, 0, _BOLD)
            if rem.knob is not None:
                out.para(knob_name(rem.knob) + ":", 2, 0, _DIM)
                out.block(rem.knob.setting, 6)
            effect = effect_line(rem)
            if effect:
                out.para(effect, 2)
    rest = [f"{o.incident} ({pct(o.confidence)})" for o in diagnoses[1:4]]
    more = "; ".join(x for x in (
        ("also possible: " + ", ".join(rest)) if rest else "",
        f"{len(ok) - 1} more fixes" if len(ok) > 1 else "") if x)
    out.blank()
    out.para((more + " - " if more else "") + "oomdoctor diagnose -v for the full report (why, every fix, "
             "environment, notes)", 0, 2, _DIM)


def _strongest_evidence(report: Report, d: Optional[Diagnosis]) -> list:
    """The failure's own line first, then the diagnosis's lines nearest to it."""
    evidence = diagnosis_evidence(report, d)
    ev = primary_event(report)
    failure = ev.evidence[0] if ev is not None and ev.evidence else None
    if failure is None:
        return evidence[:SUMMARY_EVIDENCE]
    rest = sorted((e for e in evidence if e.line != failure.line), key=lambda e: abs(e.line - failure.line))
    return sorted([failure] + rest[:SUMMARY_EVIDENCE - 1], key=lambda e: e.line)


def _why(out: _Out, d: Diagnosis) -> None:
    if not (d.explanation or d.because):
        return
    out.heading("Why")
    if d.explanation:
        out.para(d.explanation, 2)
    for reason in d.because:
        against = reason.startswith("against:")
        out.para(reason, 2, 0, *((_DIM,) if against else ()), first="- ")


def _evidence(out: _Out, report: Report, d: Optional[Diagnosis]) -> None:
    _evidence_lines(out, diagnosis_evidence(report, d))


def _evidence_lines(out: _Out, evidence: list) -> None:
    """Each evidence line with its reference, cut to the width (the log line is in the log)."""
    if not evidence:
        return
    out.heading("Evidence")
    multi = len({e.source for e in evidence if e.source}) > 1
    refs = [evidence_ref(e, multi) for e in evidence]
    w = max(len(r) for r in refs)
    for ref, ev in zip(refs, evidence):
        lead = f"  {ref.rjust(w)}  "
        text = clean(ev.text).rstrip()
        room = out.width - len(lead)
        if len(text) > room:
            text = text[: max(10, room - 3)].rstrip() + "..."
        out.lines.append(out.style(lead, _DIM) + text)


def _fixes(out: _Out, d: Diagnosis) -> None:
    ok, not_ok = split_fixes(d)
    if ok:
        out.heading("Fixes, best first")
        for n, rem in enumerate(ok, 1):
            _fix(out, n, rem)
    if not_ok:
        out.heading("Not for this log")
        # fixes sharing one reason (typically "its preconditions do not hold") are
        # listed under it once, so the reason is read once
        groups: dict[str, list[str]] = {}
        for rem in not_ok:
            groups.setdefault(rem.why_not or "does not apply to this log", []).append(rem.title)
        for why, titles in groups.items():
            if len(titles) == 1:
                out.para(f"{titles[0]}: {why}", 2, 0, _DIM, first="- ")
                continue
            out.para(f"{why}:", 2, 0, _DIM, first="- ")
            for title in titles:
                out.para(title, 4, 0, _DIM, first="- ")


def _fix(out: _Out, n: int, rem: Remediation) -> None:
    out.blank()
    num = f"{n}. "
    out.para(rem.title, 2, 0, _BOLD, first=num)
    ind = 2 + len(num)
    need = versions_note(rem)
    if need:
        out.para(need, ind, 0, _DIM)
    if rem.knob is not None:
        label = knob_name(rem.knob) + ":"
        if rem.knob.note:
            label = f"{knob_name(rem.knob)} ({rem.knob.note}):"
        out.para(label, ind, 0, _DIM)
        out.block(rem.knob.setting, ind + 4)
    effect = effect_line(rem)
    if effect:
        out.para(effect, ind)
    for caveat in rem.caveats:
        out.para(caveat, ind, 0, _DIM, first="caveat: ")
    fit = fit_line(rem)
    if fit:
        out.para(fit, ind)
    if rem.other_knobs:
        out.para("for other stacks:", ind, 0, _DIM)
        names = [knob_name(k) for k in rem.other_knobs]
        w = min(22, max(len(x) for x in names))
        for name, k in zip(names, rem.other_knobs):
            # knobs keep their full length: cutting one would make it wrong
            out.lines.append(" " * (ind + 2) + out.style(clean(name).ljust(w), _DIM) + "  " + compact(k))


def _others(out: _Out, report: Report, diagnoses: list[Diagnosis]) -> None:
    rest = diagnoses[1:]
    hidden = len(report.diagnoses) - len(diagnoses)
    if not rest and not hidden:
        return
    out.heading("Other candidates")
    for o in rest:
        kind, first = candidate_note(o)
        text = f"{o.title} ({o.incident}, {pct(o.confidence)}){kind}"
        if first:
            text += f": {first}"
        out.para(text, 2, 0, first="- ")
    if hidden:
        out.para(f"{hidden} more not shown (--top {len(diagnoses)})", 2, 0, _DIM)


def _environment(out: _Out, report: Report) -> None:
    env, run = env_rows(report), run_rows(report)
    if not env and not run:
        return
    out.heading("Environment")
    for rows, codes in ((env, ()), (run, (_DIM,))):
        for line in _joined([clean(row_phrase(r)) for r in rows], out.prose - 2):
            out.line("  " + line, *codes)


def _joined(phrases: list[str], width: int, sep: str = " | ") -> list[str]:
    """Phrases joined on as few lines as fit, never broken inside a phrase."""
    lines: list[str] = []
    for p in phrases:
        if lines and len(lines[-1]) + len(sep) + len(p) <= width:
            lines[-1] += sep + p
        else:
            lines.append(p)
    return lines
