"""The text report drawn for a terminal with rich, and a pager for long output.

The same content as ``text.py``, from the same blocks (``sections.py``: the one-screen
report, or the full one with ``verbose``), laid out for the terminal it is shown on: the
figures in boxed tables, prose wrapped to the terminal's width (at most 100 columns),
colours only when the caller asks. Knobs are printed
as they are, never wrapped or cut by rich (the terminal folds a long one on screen and a
copy rejoins it), so that a copied knob is the knob.

rich costs tens of milliseconds to import: nothing here imports it at module level, and the
CLI calls in only when it writes to a terminal (or FORCE_COLOR asks for one). Output into a
pipe or a file is ``text.py``'s plain text, unchanged.
"""
from __future__ import annotations

import io
import re
from typing import IO, TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from .model import Report

MIN_WIDTH = 30          # below this, lay out as if the terminal were this wide
HEAD, DIM, KNOB = "bold", "dim", "green"


def make_console(file: IO[str] | None = None, *, color: bool, width: int | None = None,
                 terminal: bool | None = None, margin: int = 0) -> Any:
    """A rich Console that never reads markup, emoji codes or highlights numbers in text that
    came from a log, and colours only when ``color`` (NO_COLOR etc. were decided by the caller).
    ``margin``: columns left free at the right of the terminal, whatever its width now."""
    from rich.console import Console, ConsoleDimensions

    cls = Console
    if margin:
        class _Short(Console):
            @property
            def size(self) -> ConsoleDimensions:
                full = Console.size.fget(self)
                return ConsoleDimensions(max(10, full.width - margin), full.height)

            @size.setter
            def size(self, new: tuple[int, int]) -> None:
                Console.size.fset(self, new)
        cls = _Short
    return cls(file=file, width=width, force_terminal=terminal, no_color=not color,
               color_system="auto" if color else None, markup=False, emoji=False, highlight=False,
               soft_wrap=False, legacy_windows=False, tab_size=4)


# -- building blocks ------------------------------------------------------------------------------

class _Doc:
    """Renderables in order, a blank line between sections."""

    def __init__(self) -> None:
        self.items: list[tuple[Any, bool]] = []     # (renderable, printed as is: knobs and URLs)

    def add(self, renderable: Any, raw: bool = False) -> None:
        self.items.append((renderable, raw))

    def blank(self) -> None:
        if self.items and self.items[-1][0] is not None:
            self.items.append((None, False))

    def panel(self, renderable: Any) -> None:
        """A boxed table: its border sets it apart, no blank line between two of them."""
        from rich.panel import Panel
        if not (self.items and isinstance(self.items[-1][0], Panel)):
            self.blank()
        self.add(renderable)

    def heading(self, text: str) -> None:
        from rich.text import Text
        self.blank()
        self.add(Text(text, style=HEAD))

    def para(self, text: str, indent: int = 2, style: str = "", first: str = "") -> None:
        """Wrapped prose; ``first`` (a bullet or number) hangs in front of it."""
        from rich.padding import Padding
        from rich.table import Table
        from rich.text import Text
        body = Text(clean(text), style=style)
        if first:
            grid = Table.grid()
            grid.add_column(no_wrap=True)
            grid.add_column()
            grid.add_row(Text(first), body)
            body = grid
        self.add(Padding(body, (0, 0, 0, indent), expand=False) if indent else body)

    def verbatim(self, line: str, style: str = "") -> None:
        """One line printed as is: rich neither wraps nor cuts it."""
        from rich.text import Text
        self.add(Text(clean(line).rstrip(), style=style), raw=True)

    def knob(self, setting: str, indent: int) -> None:
        import textwrap
        text = textwrap.dedent(setting.strip("\n")).rstrip()
        for raw in text.splitlines():
            self.verbatim(" " * indent + raw, KNOB)

    def print(self, console: Any) -> None:
        prose = min(WIDTH, console.width)
        items = self.items
        while items and items[-1][0] is None:
            items = items[:-1]
        for item, raw in items:
            if item is None:
                console.print()
            elif raw:
                console.print(item, soft_wrap=True, crop=False)
            else:
                console.print(item, width=prose)


def _rows_table(title: str, rows: list[Row]) -> Any:
    """Label, value, dim note in a box. Sizes are right-aligned in a column of their own so
    that they line up; other values run on into their note, wrapped together."""
    from rich import box
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    sized = any(SIZE_VALUE.match(clean(r.value)) for r in rows)
    grid = Table.grid(padding=(0, 2))
    grid.add_column(min_width=min(16, max(len(clean(r.label)) for r in rows)), max_width=MAX_LABEL)
    if sized:
        grid.add_column(no_wrap=True, justify="right")
    grid.add_column()
    for r in rows:
        label, value, note = Text(clean(r.label)), Text(clean(r.value), style="bold"), Text(clean(r.note or ""), style=DIM)
        if sized and SIZE_VALUE.match(clean(r.value)):
            grid.add_row(label, value, note)
        elif sized:             # a figure that is not a size: beside the sizes, with its note
            grid.add_row(label, "", Text.assemble(value, "  " if r.note else "", note))
        else:
            grid.add_row(label, Text.assemble(value, "  " if r.note else "", note))
    return Panel(grid, title=Text(title, style=HEAD), title_align="left", box=box.ROUNDED,
                 expand=True, padding=(0, 1))


def _evidence_table(evidence: list) -> Any:
    """Each line with its reference, cut to the width (the log line is in the log)."""
    from rich import box
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text
    multi = len({e.source for e in evidence if e.source}) > 1
    refs = [clean(evidence_ref(e, multi)) for e in evidence]
    grid = Table.grid(padding=(0, 2), expand=True)
    grid.add_column(style=DIM, justify="right", no_wrap=True, min_width=max(len(r) for r in refs))
    grid.add_column(no_wrap=True, overflow="ellipsis", ratio=1)
    for ref, e in zip(refs, evidence):
        grid.add_row(Text(ref), Text(clean(e.text).rstrip(), overflow="ellipsis", no_wrap=True))
    return Panel(grid, title=Text("Evidence", style=HEAD), title_align="left", box=box.ROUNDED,
                 expand=True, padding=(0, 1))


# -- the report -----------------------------------------------------------------------------------

_STYLES = {"head": HEAD, "alarm": "bold red", "dim": DIM, "knob": KNOB, "": ""}


def render_terminal(report: Report, *, top: int | None = None, color: bool = False,
                    width: int | None = None, verbose: bool = False) -> str:
    """The report as a terminal shows it: ANSI styles when ``color``, laid out for ``width``
    columns (default: the terminal's)."""
    width = max(MIN_WIDTH, width or terminal_size().columns)
    buf = io.StringIO()
    console = make_console(buf, color=color, width=width, terminal=color)
    build(report, top=top, verbose=verbose).print(console)
    return _trimmed(buf.getvalue())


def build(report: Report, *, top: int | None = None, verbose: bool = False) -> _Doc:
    """``sections.py``'s blocks as rich renderables."""
    doc = _Doc()
    for b in sections(report, top=top, verbose=verbose):
        if isinstance(b, Para):
            doc.para(b.text, b.indent, _STYLES[b.style], first=b.first)
        elif isinstance(b, Heading):
            doc.heading(b.text)
        elif isinstance(b, Blank):
            doc.blank()
        elif isinstance(b, Rows):
            doc.panel(_rows_table(b.title, b.rows))
        elif isinstance(b, EvidenceLines):
            doc.panel(_evidence_table(b.evidence))
        elif isinstance(b, KnobBlock):
            doc.knob(b.setting, b.indent)
        elif isinstance(b, Verbatim):
            doc.verbatim(b.text, _STYLES[b.style])          # a URL is never wrapped
        elif isinstance(b, OtherKnobs):
            w = b.name_width
            for name, knob in b.knobs:
                doc.verbatim(" " * b.indent + clean(name).ljust(w) + "  " + knob)
        elif isinstance(b, Phrases):
            doc.para(" | ".join(clean(p) for p in b.phrases), 2, _STYLES[b.style])
        else:  # pragma: no cover - a block this back end does not know
            raise TypeError(f"unknown block {type(b).__name__}")
    return doc


def markdown_for_terminal(markdown: str, *, color: bool, width: int | None = None) -> str:
    """Markdown (a knowledge-base incident) rendered for a terminal by rich."""
    from rich.markdown import Markdown
    width = max(MIN_WIDTH, min(WIDTH, width or terminal_size().columns))
    buf = io.StringIO()
    console = make_console(buf, color=color, width=width, terminal=color)
    console.print(Markdown(clean(markdown), code_theme="ansi_dark", hyperlinks=False))
    return _trimmed(buf.getvalue())


_TRAILING = re.compile(r"[ ]+(?=(?:\x1b\[[0-9;]*m)*$)", re.MULTILINE)


def _trimmed(text: str) -> str:
    """No padding at the ends of lines (rich pads wrapped text to its block's width): a copied
    paragraph carries no trailing blanks."""
    return _TRAILING.sub("", text)
