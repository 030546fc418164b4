"""The text report as plain text: what an engineer whose job just died reads, top to bottom.

What it says and in what order is ``sections.py``'s (shared with rich's rendering,
``terminal.py``); this lays those blocks out as lines. Prose stays within 100 columns;
evidence lines and knobs are never re-wrapped (a knob must stay copy-pasteable), evidence
is cut to the terminal width instead. Colour is plain ANSI, only when the caller asks (the
CLI decides from the TTY and NO_COLOR).
"""
from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING, Optional, Sequence

from .common import (
    MAX_LABEL,
    SIZE_VALUE,
    WIDTH,
    Row,
    clean,
    evidence_ref,
    terminal_size,
)
from .sections import (
    Blank,
    Block,
    EvidenceLines,
    Heading,
    KnobBlock,
    OtherKnobs,
    Para,
    Phrases,
    Rows,
    Verbatim,
    sections,
)

if TYPE_CHECKING:  # renderers read a Report; the model offers them as methods
    from .model import Report

_BOLD, _RED, _DIM, _RESET = "\x1b[1m", "\x1b[31m", "\x1b[2m", "\x1b[0m"
_STYLES: dict[str, tuple[str, ...]] = {"head": (_BOLD,), "alarm": (_BOLD, _RED), "dim": (_DIM,), "knob": (), "": ()}


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
        vw = max((len(r.value) for r in rows if SIZE_VALUE.match(r.value)), default=0)
        for r in rows:
            label = clean(r.label)
            head = " " * indent + label.ljust(w) + "  "
            if len(head) > col:         # over-long label: value on the next line
                self.lines.append(head.rstrip())
                head = " " * col
            value, note = clean(r.value), clean(r.note) if r.note else ""
            if SIZE_VALUE.match(value):
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


def render_text(report: Report, *, top: Optional[int] = None, color: Optional[bool] = False,
                width: Optional[int] = None, verbose: bool = False) -> str:
    """One screen by default: the verdict, the numbers, where, the strongest evidence, the
    first fix for the detected framework and the runner-ups; ``verbose`` gives everything."""
    out = _Out(bool(color), max(60, width or terminal_size().columns))
    for block in sections(report, top=top, verbose=verbose):
        _draw(out, block)
    return out.text()


def _draw(out: _Out, b: Block) -> None:
    if isinstance(b, Para):
        out.para(b.text, b.indent, b.hang, *_STYLES[b.style], first=b.first)
    elif isinstance(b, Heading):
        out.heading(b.text)
    elif isinstance(b, Blank):
        out.blank()
    elif isinstance(b, Rows):
        out.heading(b.title)
        out.rows(b.rows)
    elif isinstance(b, EvidenceLines):
        _evidence_lines(out, b.evidence)
    elif isinstance(b, KnobBlock):
        out.block(b.setting, b.indent)
    elif isinstance(b, Verbatim):
        out.line(b.text, *_STYLES[b.style])
    elif isinstance(b, OtherKnobs):
        w = b.name_width
        for name, knob in b.knobs:
            out.lines.append(" " * b.indent + out.style(clean(name).ljust(w), _DIM) + "  " + knob)
    elif isinstance(b, Phrases):
        for line in _joined([clean(p) for p in b.phrases], out.prose - 2):
            out.line("  " + line, *_STYLES[b.style])
    else:  # pragma: no cover - a block this back end does not know
        raise TypeError(f"unknown block {type(b).__name__}")


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


def _joined(phrases: list[str], width: int, sep: str = " | ") -> list[str]:
    """Phrases joined on as few lines as fit, never broken inside a phrase."""
    lines: list[str] = []
    for p in phrases:
        if lines and len(lines[-1]) + len(sep) + len(p) <= width:
            lines[-1] += sep + p
        else:
            lines.append(p)
    return lines
