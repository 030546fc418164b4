"""Region mode: what is kept of a log too large to parse whole, in bounded memory.

Kept, whatever the log: the head (banners, configuration), the tail (where the job
ended), and the window around the latest anchor (the last failure and its traceback).
Between them, windows around every other anchor, and single lines holding a context or
phase-marker literal, as long as they fit in ``MAX_KEPT`` lines and ``MAX_KEPT_BYTES``.

When they do not fit, the least useful go first, and a note says how much went:

1. windows of an anchor line seen before (digits aside: the thousandth copy of a periodic
   warning says nothing the first did not), oldest first; past ``MAX_REPEATED`` lines of
   them these go whatever room is left, since they cost the parse time;
2. context lines from the middle of the log (the first ones are banners, the latest say
   where the job was);
3. windows of a new kind of anchor line, oldest first;
4. windows of a failure line (out of memory, a kill, a dead process) seen before, then new
   ones, oldest first.

Each window is ranked by the highest-ranked anchor whose window covers it, so the
traceback before an out-of-memory message stays as long as the message does, even where
an earlier, lesser window holds its first lines.

The caps hold a diagnosis of any single log under about 250 MB of peak memory (the
parsers' objects cost several times the text kept). Phase markers are looked for only in
the lines before anchors, where the phase of a failure is read.
"""
from __future__ import annotations

import collections
import re
from dataclasses import dataclass
from typing import Optional

from . import prefilter

HEAD_LINES = 3000
TAIL_LINES = 3000
BEFORE = 250                  # lines of context kept before an anchor (the traceback)
AFTER = 60                    # and after it (wrapped message, cascade)
MAX_KEPT = 100_000            # window and context lines kept, whatever the input size
MAX_KEPT_LINE = 8 * 1024      # bytes kept of one line in region mode
MAX_KEPT_BYTES = 16 * 2**20   # bytes of window and context lines kept
# windows of repeated anchor lines kept, however much room is left: past a few thousand
# copies of a periodic warning (and its traceback) more copies cost the parse time
# and say nothing new
MAX_REPEATED = 20_000
HEAD_BYTES = 4 * 2**20        # the head stops here even before HEAD_LINES
TAIL_BYTES = 4 * 2**20        # and the tail keeps its last lines up to this much
LINE_COST = 64                # bytes a kept line costs besides its text (objects, list slots)
EVICT_TO = 0.9                # once over a cap, drop down to this share of it
MAX_CONTEXT_LINES = 20_000    # context-literal lines kept (the first ones: banners, configuration)
EARLY_CONTEXT = 2_000         # of which these are never dropped
MAX_MARKER_LINES = 5_000      # phase-marker lines kept (the latest ones)
# phase markers are looked for this many lines before each anchor (parsers/phase.py reads
# the last marker within 400 lines of a failure as where the job was)
MARKER_REACH = 400
RING_BYTES = 16 * 2**20       # recent blocks held for windows before an anchor and the tail
SEGMENT_LINES = 512           # windows are kept (and dropped) in pieces of at most this many lines
MAX_SHAPES = 50_000           # distinct anchor lines remembered (past this, all count as seen)
NEAR_ANCHOR = 30              # lines either side of an anchor that _fewer_repeats never drops
MAX_ANCHOR_NOS = 5_000        # anchor line numbers remembered, first and latest each
PROGRESS_CR = 8               # a line with more carriage returns than this is a progress bar
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_EPOCH_INT = re.compile(rb"[Ee]poch\W{0,4}(\d{1,6})")

# ranks of what is kept, dropped lowest first (context lines from the middle rank between
# REPEATED and NEW); a window takes the highest rank of the anchors whose windows cover it
REPEATED, NEW, FAILURE_REPEATED, FAILURE_NEW = 0, 1, 2, 3
RANK_NAMES = {REPEATED: "repeated messages", NEW: "other messages", FAILURE_REPEATED: "repeated failures",
              FAILURE_NEW: "failures"}


@dataclass(frozen=True)
class Regions:
    """What region mode keeps of a large log."""

    head_lines: int = HEAD_LINES
    tail_lines: int = TAIL_LINES
    before: int = BEFORE
    after: int = AFTER
    context: bool = True        # keep context-literal lines anywhere (else only in head and windows)
    markers: bool = True        # keep phase-marker lines anywhere (where the job was when it failed)
    skip_clean: bool = False    # a log without any anchor: keep nothing (mode "clean")
    head_progress: bool = True  # keep progress-bar lines (many carriage returns) in the head
    head_all: Optional[int] = None  # past this line the head keeps only context-literal lines
    # keep at most this many head lines of one shape (digits aside): per-step progress
    # lines repeat one shape thousands of times and say nothing new after the first few
    head_repeats: Optional[int] = None


class Block:
    """Complete lines read together: the first line's number, the bytes, the line count."""

    __slots__ = ("first", "data", "count", "_lines", "marks")

    def __init__(self, first: int, data: bytes):
        self.first = first
        self.data = data
        self.count = data.count(b"\n")
        self._lines: Optional[list[bytes]] = None
        self.marks: Optional[list[int]] = None   # phase-marker lines, once searched

    @property
    def last(self) -> int:
        return self.first + self.count - 1

    def lines(self) -> list[bytes]:
        """The block split into lines, done once and only for blocks something is kept from."""
        if self._lines is None:
            self._lines = self.data.split(b"\n")[: self.count]
        return self._lines


class _Segment:
    """Consecutive kept lines of windows, all of one rank."""

    __slots__ = ("lo", "lines", "nbytes", "rank", "alive")

    def __init__(self, lo: int, rank: int):
        self.lo = lo
        self.lines: list[bytes] = []
        self.nbytes = 0
        self.rank = rank
        self.alive = True

    @property
    def hi(self) -> int:
        return self.lo + len(self.lines) - 1


def _cut(lines: list[bytes]) -> list[bytes]:
    if lines and max(map(len, lines)) > MAX_KEPT_LINE:
        return [x[:MAX_KEPT_LINE] for x in lines]
    return lines


class RegionBuilder:
    """Region mode: fed blocks of complete lines, keeps what ``Regions`` asks for."""

    def __init__(self, regions: Regions, anchors: "prefilter.Matcher",
                 context: Optional["prefilter.Matcher"] = None,
                 markers: Optional["prefilter.Matcher"] = None,
                 failures: Optional["prefilter.Matcher"] = None):
        self.regions = regions
        self.anchors = anchors
        self.context = context
        self.markers = markers
        self.failures = failures if failures is not None else prefilter.failure_matcher()
        self.bytes = 0
        self.lines = 0                     # complete lines fed so far
        self.anchor_lines = 0
        self.anchor_first: list[int] = []  # the first and the latest anchor lines (for _fewer_repeats)
        self.anchor_last: collections.deque[int] = collections.deque(maxlen=MAX_ANCHOR_NOS)
        self.head: list[bytes] = []        # raw blocks of lines 1..head_lines
        self.head_bytes = 0
        self.head_full = False
        self.ring: collections.deque[Block] = collections.deque()
        self.ring_bytes = 0
        self.after_until = 0               # lines up to this number follow an anchor
        self.covered = 0                   # windows hold every line up to this one (or dropped it)
        self._reach = max(regions.before, regions.tail_lines, MARKER_REACH if markers is not None else 0)
        self.marks_through = 0             # lines searched for phase markers up to this one
        # windows: segments in line order, and per rank in the order they took that rank
        self.segments: collections.deque[_Segment] = collections.deque()
        self.by_rank: list[collections.deque] = [collections.deque() for _ in RANK_NAMES]
        self.cur: Optional[_Segment] = None
        self.holds: dict[int, int] = {}    # rank -> last line of the windows of that rank still open
        self.walked = [0] * len(RANK_NAMES)      # latest anchor whose window was raised to each rank
        self.protect_from = 0              # lines of the latest anchor's window are never dropped
        self.shapes: dict[int, bool] = {}  # anchor lines seen (hash of their shape) -> failure line?
        # context lines (banners and configuration come early: the first MAX_CONTEXT_LINES),
        # and phase markers (the latest MAX_MARKER_LINES say where the job was)
        self.ctx: dict[int, bytes] = {}
        self.ctx_seen = 0
        self.marks: collections.OrderedDict[int, bytes] = collections.OrderedDict()
        self.kept_lines = 0                # window and context lines held now
        self.rank_lines = [0] * len(RANK_NAMES)  # window lines held now, by rank
        self.kept_bytes = 0
        self.dropped = [0] * len(RANK_NAMES)     # lines dropped, by rank
        self.dropped_ctx = 0

    # -- budget -----------------------------------------------------------------------
    def _over(self, share: float = 1.0) -> bool:
        return self.kept_lines > MAX_KEPT * share or self.kept_bytes > MAX_KEPT_BYTES * share

    def _make_room(self) -> None:
        """Drop the least useful kept lines until well under the caps (see the module doc)."""
        if self.rank_lines[REPEATED] > MAX_REPEATED:
            self._drop_oldest(REPEATED, lambda: self.rank_lines[REPEATED] > MAX_REPEATED * EVICT_TO)
        order = [REPEATED, "context", NEW, FAILURE_REPEATED, FAILURE_NEW]
        for what in order:
            if not self._over(EVICT_TO):
                return
            if what == "context":
                # the middle of the log goes first: the last context lines kept (per-step
                # progress, past the banners), then the oldest phase markers
                while len(self.ctx) > EARLY_CONTEXT and self._over(EVICT_TO):
                    _no, raw = self.ctx.popitem()
                    self._count(-1, -len(raw))
                    self.dropped_ctx += 1
                while self.marks and self._over(EVICT_TO):
                    _no, raw = self.marks.popitem(last=False)
                    self._count(-1, -len(raw))
                    self.dropped_ctx += 1
                continue
            self._drop_oldest(what, lambda: self._over(EVICT_TO))

    def _drop_oldest(self, rank: int, more) -> None:
        """Drop the oldest windows of ``rank`` while ``more()`` says so."""
        queue = self.by_rank[rank]
        while queue and more():
            seg, r = queue[0]
            if not seg.alive or seg.rank != r:
                queue.popleft()               # dropped already, or raised to a higher rank
                continue
            if seg.hi >= self.protect_from or seg is self.cur:
                break                         # the latest failure's window: never dropped
            queue.popleft()
            self._drop(seg)

    def _drop(self, seg: _Segment) -> None:
        seg.alive = False
        self.dropped[seg.rank] += len(seg.lines)
        self.rank_lines[seg.rank] -= len(seg.lines)
        self._count(-len(seg.lines), -seg.nbytes)
        seg.lines = []
        seg.nbytes = 0
        while self.segments and not self.segments[0].alive:
            self.segments.popleft()

    def _count(self, lines: int, nbytes: int) -> None:
        self.kept_lines += lines
        self.kept_bytes += nbytes + lines * LINE_COST

    # -- windows ----------------------------------------------------------------------
    def _rank_at(self, no: int, rank: int) -> tuple[int, int]:
        """The rank of line ``no`` in a window of ``rank``, raised by the windows of earlier
        anchors still open there; and the last line that rank holds for."""
        best, until = rank, 1 << 62
        for r, last in self.holds.items():
            if r > best and last >= no:
                best, until = r, last
        return best, until

    def _add(self, lo: int, lines: list[bytes], rank: int) -> None:
        """Keep lines lo.. (following the lines kept so far) in windows of ``rank``."""
        lines = _cut(lines)
        i, n = 0, len(lines)
        while i < n:
            r, until = self._rank_at(lo, rank)
            seg = self.cur
            if seg is None or not seg.alive or seg.rank != r or seg.hi + 1 != lo or len(seg.lines) >= SEGMENT_LINES:
                seg = self.cur = _Segment(lo, r)
                self.segments.append(seg)
                self.by_rank[r].append((seg, r))
            k = min(n - i, until - lo + 1, SEGMENT_LINES - len(seg.lines))
            part = lines[i:i + k]
            size = sum(map(len, part))
            seg.lines.extend(part)
            seg.nbytes += size
            self.rank_lines[r] += k
            self._count(k, size)
            lo += k
            i += k
        if self._over() or self.rank_lines[REPEATED] > MAX_REPEATED:
            self._make_room()

    def _raise(self, lo: int, rank: int, anchor: int) -> None:
        """Windows already kept over lines lo.. are part of this anchor's story: give them
        its rank. Walks back only to the last anchor of that rank (done before)."""
        if rank == REPEATED:
            return
        stop = self.walked[rank]
        for seg in reversed(self.segments):
            if seg.hi < lo or seg.hi < stop:
                break
            if seg.alive and seg.rank < rank:
                self.rank_lines[seg.rank] -= len(seg.lines)
                self.rank_lines[rank] += len(seg.lines)
                seg.rank = rank
                self.by_rank[rank].append((seg, rank))
        for r in range(rank + 1):
            self.walked[r] = max(self.walked[r], anchor)

    def _rank_of(self, raw: bytes) -> int:
        key = hash(raw[:200].translate(_DIGITS_AS_ZERO))
        failure = self.shapes.get(key)
        if failure is not None:
            return FAILURE_REPEATED if failure else REPEATED
        failure = self.failures.search(raw[:MAX_KEPT_LINE])
        if len(self.shapes) < MAX_SHAPES:
            self.shapes[key] = failure
            return FAILURE_NEW if failure else NEW
        return FAILURE_REPEATED if failure else REPEATED

    def _lines_from_ring(self, lo: int, hi: int) -> list[tuple[int, list[bytes]]]:
        out = []
        for blk in self.ring:
            if blk.last < lo or blk.first > hi:
                continue
            a, b = max(lo, blk.first), min(hi, blk.last)
            out.append((a, blk.lines()[a - blk.first: b - blk.first + 1]))
        return out

    # -- feeding ----------------------------------------------------------------------
    def feed(self, data: bytes) -> None:
        """Add a block of complete lines (ending with a newline)."""
        blk = Block(self.lines + 1, data)
        self.ring.append(blk)
        self.ring_bytes += len(data)
        r = self.regions
        if self.lines < r.head_lines and not self.head_full:
            self._head(blk)
        if self.holds:
            self.holds = {k: v for k, v in self.holds.items() if v >= blk.first}
        if self.after_until >= blk.first:   # the rest of a window opened in an earlier block
            hi = min(self.after_until, blk.last)
            if hi > self.covered:
                lo = max(blk.first, self.covered + 1)
                self._add(lo, blk.lines()[lo - blk.first: hi - blk.first + 1], REPEATED)
                self.covered = hi
        ends = self.anchors.ends(data)
        if ends:
            self._anchors(blk, ends)
        if self.context is not None and self.ctx_seen < MAX_CONTEXT_LINES:
            ends = self.context.ends(data)
            if ends:
                self._context(blk, ends)
        self.lines += blk.count
        # keep enough recent blocks for the next window's "before" lines and the tail
        while len(self.ring) > 1 and (self.lines - self.ring[0].last >= self._reach or self.ring_bytes > RING_BYTES):
            self.ring_bytes -= len(self.ring.popleft().data)

    def _head(self, blk: Block) -> None:
        need = self.regions.head_lines - self.lines
        data = blk.data
        if blk.count > need or len(data) > need * MAX_KEPT_LINE or self.head_bytes + len(data) > HEAD_BYTES:
            # very long lines are cut here already, so the head stays bounded in bytes
            lines = [x[:MAX_KEPT_LINE] for x in blk.lines()[:need]]
            room = HEAD_BYTES - self.head_bytes
            taken = 0
            for i, x in enumerate(lines):
                taken += len(x) + 1
                if taken > room:
                    lines = lines[:i]
                    self.head_full = True
                    break
            data = b"".join(x + b"\n" for x in lines)
        self.head.append(data)
        self.head_bytes += len(data)

    @staticmethod
    def _line_numbers(blk: Block, ends: list[int]) -> list[int]:
        """Distinct line numbers of hits ending at the given (ascending) offsets."""
        out: list[int] = []
        data = blk.data
        pos = 0
        idx = 0
        for e in ends:
            idx += data.count(b"\n", pos, e)
            pos = e
            no = blk.first + idx
            if not out or out[-1] != no:
                out.append(no)
        return out

    def _anchors(self, blk: Block, ends: list[int]) -> None:
        r = self.regions
        lines = blk.lines()
        # the new lines of consecutive windows of one rank are kept in one go: a log of
        # repeated tracebacks has an anchor every few lines
        pending: Optional[list[int]] = None      # [first line, last line, rank]
        before, after, first, last = r.before, r.after, blk.first, blk.last
        shapes, first_nos = self.shapes, self.anchor_first
        nos = self._line_numbers(blk, ends)
        self.anchor_lines += len(nos)
        for no in nos:
            if len(first_nos) < MAX_ANCHOR_NOS:
                first_nos.append(no)
            else:
                self.anchor_last.append(no)
            raw = lines[no - first]
            known = shapes.get(hash(raw[:200].translate(_DIGITS_AS_ZERO)))
            rank = REPEATED if known is False else self._rank_of(raw)
            lo = no - before if no > before else 1
            hi = no + after
            self.protect_from = lo
            if rank != REPEATED:
                if pending is not None:
                    self._add_range(blk, *pending)
                    pending = None
                self._raise(lo, rank, no)
            top = hi if hi < last else last
            if top > self.covered:
                start = lo if lo > self.covered else self.covered + 1
                if pending is not None and pending[2] == rank and start == pending[1] + 1:
                    pending[1] = top
                else:
                    if pending is not None:
                        self._add_range(blk, *pending)
                    pending = [start, top, rank]
                self.covered = top
            if rank != REPEATED and hi > self.holds.get(rank, 0):
                self.holds[rank] = hi
            if hi > self.after_until:
                self.after_until = hi
        if pending is not None:
            self._add_range(blk, *pending)
        if self.markers is not None and nos:
            lo = max(1, nos[0] - MARKER_REACH, self.marks_through + 1)
            if lo <= nos[-1]:
                self._markers(lo, nos[-1])
                self.marks_through = nos[-1]

    def _add_range(self, blk: Block, lo: int, hi: int, rank: int) -> None:
        if lo >= blk.first:                  # the usual case: all in the block at hand
            self._add(lo, blk.lines()[lo - blk.first: hi - blk.first + 1], rank)
            return
        for a, part in self._lines_from_ring(lo, hi):
            self._add(a, part, rank)

    def _context(self, blk: Block, ends: list[int]) -> None:
        lines = blk.lines()
        # Banners and configuration come early; past this many context lines the rest
        # are per-step progress ("epoch", "step", "MiB") that say nothing new.
        for no in self._line_numbers(blk, ends)[: MAX_CONTEXT_LINES - self.ctx_seen]:
            raw = lines[no - blk.first][:MAX_KEPT_LINE]
            self.ctx[no] = raw
            self.ctx_seen += 1
            self._count(1, len(raw))
        if self._over():
            self._make_room()

    def _markers(self, lo: int, hi: int) -> None:
        """Keep the phase-marker lines among lines lo..hi (still in the ring): only near
        anchors, so a log costs a marker search only where something failed."""
        for blk in self.ring:
            if blk.last < lo or blk.first > hi:
                continue
            if blk.marks is None:
                ends = self.markers.ends(blk.data)
                blk.marks = self._line_numbers(blk, ends) if ends else []
            for no in blk.marks:
                if lo <= no <= hi and no not in self.marks:
                    raw = blk.lines()[no - blk.first][:MAX_KEPT_LINE]
                    self.marks[no] = raw
                    self._count(1, len(raw))
                    if len(self.marks) > MAX_MARKER_LINES:    # the latest say where the job was
                        _no, old = self.marks.popitem(last=False)
                        self._count(-1, -len(old))
        if self._over():
            self._make_room()

    # -- result -----------------------------------------------------------------------
    def finish(self, carry: bytes) -> None:
        """The input ended; ``carry`` is an unterminated last line, if any."""
        if carry:
            self.feed(carry + b"\n")

    def result(self) -> tuple[list[tuple[int, bytes]], list[str], int]:
        """The kept lines (number, bytes) in order, notes on what was dropped, and the last
        line number."""
        r = self.regions
        last_no = self.lines
        pairs: dict[int, bytes] = {}
        head = b"".join(self.head).split(b"\n")
        context = prefilter.context_matcher() if r.head_all is not None else None
        for no, raw in enumerate(head[: r.head_lines], 1):
            if no > last_no or (not r.head_progress and raw.count(b"\r") > PROGRESS_CR):
                continue
            if context is None or no <= r.head_all or context.search(raw):
                pairs[no] = raw[:MAX_KEPT_LINE]
        for seg in self.segments:
            if seg.alive:
                pairs.update(zip(range(seg.lo, seg.lo + len(seg.lines)), seg.lines))
        pairs.update(self.ctx)
        pairs.update(self.marks)
        if r.tail_lines:
            budget = TAIL_BYTES
            tail: list[tuple[int, bytes]] = []
            for a, part in reversed(self._lines_from_ring(last_no - r.tail_lines + 1, last_no)):
                for i in range(len(part) - 1, -1, -1):
                    raw = part[i][:MAX_KEPT_LINE]
                    budget -= len(raw) + 1
                    if budget < 0:
                        break
                    tail.append((a + i, raw))
                if budget < 0:
                    break
            pairs.update(tail)
        numbers = sorted(pairs)
        if r.head_repeats is not None:
            numbers = self._fewer_repeats(numbers, pairs)
        return [(no, pairs[no]) for no in numbers], self.notes(), last_no

    def _fewer_repeats(self, numbers: list[int], pairs: dict[int, bytes]) -> list[int]:
        """Drop the lines of a shape (digits aside) seen ``head_repeats`` times already,
        except near an anchor and in the tail: there every line may be part of the
        failure's story, and the last line says where the job ended."""
        r = self.regions
        tail_from = numbers[-1] - r.tail_lines + 1 if numbers else 0
        near: set[int] = set()
        for no in self.anchor_first + list(self.anchor_last):
            near.update(range(no - NEAR_ANCHOR, no + NEAR_ANCHOR + 1))
        shapes: dict[bytes, int] = {}
        out = []
        for no in numbers:
            if no not in near and no < tail_from:
                line = pairs[no]
                shape = line[:200].translate(_DIGITS_AS_ZERO)
                if b"poch" in line:
                    # the first lines of each epoch stay: phase reads the epoch boundaries
                    m = _EPOCH_INT.search(line)
                    if m:
                        shape += b"|epoch " + m.group(1)
                seen = shapes[shape] = shapes.get(shape, 0) + 1
                if seen > r.head_repeats:
                    continue
            out.append(no)
        return out

    def notes(self) -> list[str]:
        notes = []
        if sum(self.dropped) or self.dropped_ctx:
            parts = [f"{n} lines of {RANK_NAMES[rank]}" for rank, n in enumerate(self.dropped) if n]
            if self.dropped_ctx:
                parts.append(f"{self.dropped_ctx} context and phase-marker lines from the middle of the log")
            notes.append(f"this log has more lines of interest than are kept ({MAX_KEPT} lines, "
                         f"{MAX_KEPT_BYTES // 2**20} MiB, of them {MAX_REPEATED} of repeated messages): dropped "
                         + ", ".join(parts) + "; the head, the tail and the latest failure's window are kept whole")
        if self.head_full:
            notes.append(f"the head of this log was cut at {HEAD_BYTES // 2**20} MiB (very long lines)")
        return notes
