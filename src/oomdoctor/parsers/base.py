"""What every parser family gets: the logical lines, the facts being built, helpers.

A parser family is a module with ``parse(ctx: ParseContext) -> None`` that reads
``ctx.lines`` and adds to ``ctx.facts``. Families run in the order given in
``parsers/__init__.py``; later ones may read what earlier ones found.
"""
from __future__ import annotations

import bisect
from typing import Optional

import regex as re

from ..read import literal_index
from ..facts.models import Evidence, Facts
from ..read.normalise import Line, join_lines
from ..read.patterns import lazy

# Every regex applied to log text must be bounded: user input can be hostile.
REGEX_TIMEOUT = 0.5  # seconds, per search over one window

# An exception class as a traceback's last line names it: dotted ("torch.cuda.OutOfMemoryError",
# "torch.distributed.DistBackendError") or the bare "Exception" libraries raise (DeepSpeed's
# loss scaler). Pattern text for the families' own patterns.
EXCEPTION_CLASS = r"(?:[A-Za-z_]\w{0,60}\.){0,8}(?:[A-Za-z_]\w{0,60}(?:Error|Exception)|Exception)"
# ... printed before the message on the same line ("RuntimeError: ...")
EXC_AT_START = lazy(r"^\s*(" + EXCEPTION_CLASS + r"):")


class ParseContext:
    def __init__(self, lines: list[Line], source: Optional[str] = None):
        self.lines = lines
        self.source = source
        self.facts = Facts()
        self._blob: Optional[tuple[str, list[int]]] = None
        self._folded: Optional[str] = None
        self._with: dict[tuple, list[int]] = {}
        self._indexed: Optional[dict] = None   # literal_index answers for this log
        # filled by the traceback family, read by phase/ranks (see traceback.frames_for)
        self.all_frames: list = []
        self.frame_index: list[int] = []
        self.tb_headers: list[int] = []
        # lines of allocator messages whose per-process figures NVML could not give (its
        # "not available" value, 2**64 bytes): the WDDM driver of Windows and WSL, whose free
        # figure is not what an allocation can get (filled by torch_alloc, read by lookalikes)
        self.nvml_unavailable: set[int] = set()
        # index of the first logical line carrying each original line number
        self._by_no: dict[int, int] = {}
        for i, ln in enumerate(lines):
            self._by_no.setdefault(ln.no, i)

    # -- whole-log search ---------------------------------------------------------
    def blob(self) -> tuple[str, list[int]]:
        """All logical lines joined by newlines, and each line's start offset: one regex
        pass over the blob costs far less than one call per line."""
        if self._blob is None:
            self._blob = join_lines(self.lines)
        return self._blob

    def lines_with(self, literals: tuple[str, ...], fold: bool = False) -> list[int]:
        """Indices of the lines that contain any of ``literals`` (ascending, each once).

        One ``str.find`` pass per literal over the blob runs at memory speed; a Python
        loop over every line, or a regex alternation, costs ten to a hundred times more.
        With Hyperscan, one pass answers every set asked for before (``literal_index``).
        With ``fold`` the literals must be lower case and match any case."""
        got = self.indexed_lines_with(literals, fold)
        return got if got is not None else self._lines_with_python((literals, fold))

    def indexed_lines_with(self, literals: tuple[str, ...], fold: bool = False) -> Optional[list[int]]:
        """``lines_with``'s answer when the native index gives it in its one pass; None when
        it would cost a Python pass (no index, or a set it has not compiled yet, which it
        registers for the next log). For gates that only save work: without the answer
        the caller does the work on every line, as it would without the gate."""
        key = (literals, fold)
        got = self._with.get(key)
        return got if got is not None else self._from_index(key)

    def _from_index(self, key) -> Optional[list[int]]:
        index = literal_index.shared()
        if index is None:
            return None
        if key not in index:
            index.register(key)   # compiled in for the next log
            return None
        if self._indexed is None:   # one native pass answers every known set
            self._indexed = index.lines(*self.blob()) or {}
        got = self._indexed.get(key)
        if got is not None:
            self._with[key] = got
        return got

    def _lines_with_python(self, key: tuple[tuple[str, ...], bool]) -> list[int]:
        literals, fold = key
        text, starts = self.blob()
        if fold:
            if self._folded is None:
                low = text.lower()
                # lower() may change the length of rare characters: then offsets would lie
                self._folded = low if len(low) == len(text) else ""
            if not self._folded and text:
                found = [i for i, ln in enumerate(self.lines) if any(w in ln.text.lower() for w in literals)]
                self._with[key] = found
                return found
            text = self._folded
        hits: set[int] = set()
        n = len(starts)
        for word in literals:
            pos = text.find(word)
            while pos >= 0:
                i = bisect.bisect_right(starts, pos) - 1
                hits.add(i)
                if i + 1 >= n:
                    break
                pos = text.find(word, starts[i + 1])
        found = sorted(hits)
        self._with[key] = found
        return found

    def grep(self, pattern: re.Pattern, literals: Optional[tuple[str, ...]] = None) -> list[int]:
        """Indices of the lines where ``pattern`` matches (each line once, in order).
        Compile patterns with (?m) if they use ^ or $ for line boundaries.

        ``literals`` (lower case, any case matches) is a gate: every match of ``pattern``
        holds one of them. Then only the lines holding one are searched, line by line."""
        if literals is not None:
            out = []
            for i in self.lines_with(literals, fold=True):
                if self.search(pattern, self.lines[i].text):
                    out.append(i)
            return out
        text, starts = self.blob()
        out = []
        try:
            for m in pattern.finditer(text, timeout=REGEX_TIMEOUT * 10):
                i = bisect.bisect_right(starts, m.start()) - 1
                if not out or out[-1] != i:
                    out.append(i)
        except TimeoutError:
            self.note("a pattern timed out over the whole log; some markers may be missing")
        return out

    # -- evidence ---------------------------------------------------------------
    def at(self, line: Line) -> dict:
        """The fields an event takes from the line it was read on: the rank that printed
        it, its number, its evidence."""
        return {"ranks": [line.rank] if line.rank is not None else [], "line": line.no, "evidence": [self.evidence(line)]}

    def explained_lines(self, skip_kinds: frozenset = frozenset()) -> set[int]:
        """The original line numbers that the OOM events read so far explain: each one's own
        line and its evidence (events of ``skip_kinds`` left out)."""
        lines: set[int] = set()
        for ev in self.facts.oom_events:
            if ev.kind not in skip_kinds:
                lines.add(ev.line)
                lines.update(e.line for e in ev.evidence)
        return lines

    def evidence(self, line: Line | int) -> Evidence:
        if isinstance(line, int):
            line = self.lines[line]
        raw = line.raw if line.raw else line.text
        first = self._by_no.get(line.no)
        if first is not None and self.lines[first] is not line and line.text:
            # a later piece of a physical line that held several (a message glued to the
            # progress bar before it): quote from that piece, which the 400 characters of the
            # whole line may not reach
            at = raw.find(line.text[:60])
            if at > 0:
                raw = "…" + raw[at:]
        return Evidence(line=line.no, text=raw[:400], source=self.source)

    def index_of(self, no: int) -> Optional[int]:
        return self._by_no.get(no)

    # -- windows ----------------------------------------------------------------
    def join(self, start: int, max_lines: int = 12, max_chars: int = 4000,
             stop: Optional[re.Pattern] = None, sep: str = "") -> tuple[str, list[int]]:
        """Text of lines[start:] joined for a message that may be hard-wrapped.

        Returns the joined text and, for each joined line, its offset in the text, so a
        match position can be mapped back to a line. Stops at an empty line, at ``stop``,
        or at the limits.
        """
        parts: list[str] = []
        offsets: list[int] = []
        total = 0
        for j in range(start, min(len(self.lines), start + max_lines)):
            text = self.lines[j].text
            if j > start and (not text.strip() or (stop is not None and stop.search(text))):
                break
            offsets.append(total)
            parts.append(text)
            total += len(text) + len(sep)
            if total >= max_chars:
                break
        return sep.join(parts), offsets

    def rejoined(self, i: int, pattern: re.Pattern, max_lines: int = 3):
        """``pattern`` searched on line ``i`` joined with the lines a hard wrap may have
        pushed the rest of its message onto: first as they are (a wrap mid-word), then with
        a space (a wrap at a word boundary that ate the space). For a message whose start
        is on line ``i`` and whose search on that line alone came up short: a match counts
        only if it starts on line ``i`` and goes on past its end (one wholly on the next
        line belongs to that line)."""
        parts = [self.lines[i].text]
        for j in range(i + 1, min(len(self.lines), i + 1 + max_lines)):
            text = self.lines[j].text
            if not text.strip():
                break
            parts.append(text)
        if len(parts) == 1:
            return None
        first = len(parts[0])
        for sep in ("", " "):
            m = self.search(pattern, sep.join(parts))
            if m and m.start() < first < m.end():
                return m
        return None

    def below(self, i: int, pattern: re.Pattern, lines: int = 2):
        """The first match of ``pattern`` in the few lines printed right under line ``i`` (the
        figures or the device a message prints on its next lines)."""
        for j in range(i + 1, min(len(self.lines), i + 1 + lines)):
            m = self.search(pattern, self.lines[j].text)
            if m:
                return m
        return None

    def search(self, pattern: re.Pattern, text: str, pos: int = 0):
        try:
            return pattern.search(text, pos, timeout=REGEX_TIMEOUT)
        except TimeoutError:
            self.note(f"a pattern timed out on line text of {len(text)} characters")
            return None

    def note(self, message: str) -> None:
        if message not in self.facts.notes and len(self.facts.notes) < 50:
            self.facts.notes.append(message)

    def mark(self, name: str, line: Line | int) -> None:
        no = line.no if isinstance(line, Line) else self.lines[line].no
        lst = self.facts.markers.setdefault(name, [])
        if len(lst) < 200 and (not lst or lst[-1] != no):
            lst.append(no)
