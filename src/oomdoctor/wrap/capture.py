"""A bounded record of a running job's output: the lines a diagnosis needs, nothing more.

``oomdoctor run`` passes every byte of the job's output through and feeds it here. A job
may print for days, so nothing here grows with the output: it keeps the head (banners,
configuration), a tail window (the final failure), and the lines the prefilter flags —
context lines (versions, settings, progress markers) and, around each failure anchor, a
window of lines before it (the traceback) and after it (the wrapped message). Kept lines
carry their ORIGINAL line numbers, so evidence in the report points at the real log.

Flagged lines are kept in two stores: the first ones of the run (``early``; the
configuration echoed after the head, the first failure) and a ring of the latest ones
(``late``); each store is bounded by lines and by bytes, and every kept line is cut at
``MAX_LINE`` bytes. Once the early store is full, context lines that repeat the same
literal within a slice (a metrics dict every step) are sampled; anchor lines never are.

Searching for flagged lines is the only costly step: with Hyperscan installed it runs at
memory speed, with Python's ``re`` at tens of MB/s. The pass-through must never wait for
it, so the caller says, slice by slice, whether searching may go on (``may_scan``):
``oomdoctor run`` pauses it while the job's pipes are backing up. Stretches that were not
searched are counted and named in the report's notes; the head and the tail are kept
whatever happens.
"""
from __future__ import annotations

import collections
import os
import re
import time
from typing import Callable, Optional

from ..read import prefilter
from ..read.reader import AFTER, BEFORE, HEAD_LINES, MAX_KEPT_LINE, TAIL_LINES, LogView, _decode

MAX_LINE = MAX_KEPT_LINE          # bytes kept of one line
HEAD_BYTES = 4 * 2**20
TAIL_BYTES = 8 * 2**20
EARLY_LINES, EARLY_BYTES = 5_000, 4 * 2**20
LATE_LINES, LATE_BYTES = 5_000, 4 * 2**20
SLICE = 64 * 1024                 # scan granularity: how long one uninterruptible scan step is
FEED_MAX = 2**20                  # larger chunks are fed in pieces (keeps every block small)
PARTIAL_LIMIT = 2 * MAX_LINE      # bytes of an unfinished line held while waiting for its end


_CANDIDATES: Optional["re.Pattern[bytes]"] = None


def _literals() -> tuple[list[str], set[str]]:
    """Every anchor and context literal, and those that contain an anchor (an anchor line)."""
    literals = sorted(set(prefilter.ANCHOR_LITERALS) | set(prefilter.CONTEXT_LITERALS))
    anchored = {lit for lit in literals if any(a in lit for a in prefilter.ANCHOR_LITERALS)}
    return literals, anchored


def candidate_pattern() -> "re.Pattern[bytes]":
    """Matches any anchor or context literal."""
    global _CANDIDATES
    if _CANDIDATES is None:
        _CANDIDATES = prefilter.trie_pattern(_literals()[0])
    return _CANDIDATES


# A finder lists the literal hits in body[start:end] as sorted (position, is_anchor, key)
# tuples; with ``sample`` it may report only the first hit of each context literal.
Hit = "tuple[int, bool, object]"
Finder = Callable[[bytes, int, int, bool], "list[Hit]"]


def _regex_finder() -> Finder:
    search = candidate_pattern().search
    anchored = {lit.encode() for lit in _literals()[1]}

    def finder(body: bytes, start: int, end: int, sample: bool) -> list:
        hits: list = []
        seen: set = set()
        pos = start
        while True:
            m = search(body, pos, end)
            if m is None:
                return hits
            key = m.group()
            if key in anchored:
                hits.append((m.start(), True, key))
            elif not sample or key not in seen:
                seen.add(key)
                hits.append((m.start(), False, key))
            pos = m.start() + 1            # overlapping hits too: an anchor may start inside a context word
    return finder


def _hyperscan_finder() -> Optional[Finder]:
    """The same literals through Hyperscan (``pip install oomdoctor[fast]``): GB/s instead of MB/s.

    ``OOMDOCTOR_PREFILTER=re`` forces the pure-Python search, as for ``scan``.
    """
    if os.environ.get("OOMDOCTOR_PREFILTER", "").lower() in ("re", "python"):
        return None
    try:
        import hyperscan
    except ImportError:
        return None
    literals, anchored = _literals()
    is_anchor = [lit in anchored for lit in literals]
    lengths = [len(lit.encode()) for lit in literals]
    exprs = [re.escape(lit).encode() for lit in literals]
    ids = list(range(len(literals)))
    try:
        full = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
        full.compile(expressions=exprs, ids=ids, elements=len(ids), flags=[0] * len(ids))
        # context literals reported once per scan: enough to sample repetitive lines
        sampled = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
        sampled.compile(expressions=exprs, ids=ids, elements=len(ids),
                        flags=[0 if a else hyperscan.HS_FLAG_SINGLEMATCH for a in is_anchor])
    except Exception:  # noqa: BLE001 - a broken native build: fall back to re
        return None

    def finder(body: bytes, start: int, end: int, sample: bool) -> list:
        hits: list = []

        def on_match(ident: int, _from: int, to: int, _flags: int, _ctx: object) -> None:
            hits.append((start + to - lengths[ident], is_anchor[ident], ident))
        (sampled if sample else full).scan(body[start:end], match_event_handler=on_match)
        hits.sort()
        return hits
    return finder


_FINDER: Optional[Finder] = None


def literal_finder() -> Finder:
    """Finds where anchor/context literals start: Hyperscan when installed, else ``re``."""
    global _FINDER
    if _FINDER is None:
        _FINDER = _hyperscan_finder() or _regex_finder()
    return _FINDER


class Capture:
    """Feed it the job's output chunk by chunk (``feed``), then ``finish`` and ``view``.

    ``scan_share`` (optional) caps the CPU spent searching: on average at most this share
    of the wall time, with bursts of up to ``scan_burst`` seconds (a token bucket), so a
    job that prints without pause never has to share its core with the search.
    """

    def __init__(self, scan_share: Optional[float] = None, scan_burst: float = 1.0) -> None:
        self._share = scan_share
        self._burst = scan_burst
        self._tokens = scan_burst
        self._last_refill = time.perf_counter()
        self.lines = 0                  # complete lines seen (the next line is lines + 1)
        self.bytes = 0
        self.unscanned_lines = 0
        self.unscanned_bytes = 0
        self.long_lines = 0             # lines longer than MAX_LINE (cut when kept)
        self._partial: dict[str, bytearray] = {}
        self._partial_dropped: dict[str, bool] = {}
        self._head: list[tuple[int, bytes]] = []
        self._head_bytes = 0
        self._head_full = False
        self._head_last = 0             # number of the last head line
        # tail ring: blocks of complete lines, (number of the block's first line - 1, bytes)
        self._blocks: collections.deque[tuple[int, bytes]] = collections.deque()
        self._blocks_bytes = 0
        self._early: dict[int, bytes] = {}
        self._early_bytes = 0
        self._early_full = False
        self._late: "collections.OrderedDict[int, bytes]" = collections.OrderedDict()
        self._late_bytes = 0
        self._after_until = 0           # lines up to this number follow an anchor: keep them
        self._window_through = 0        # anchor windows already cover lines up to this one
        self._finder = literal_finder()
        self.anchors = 0

    # -- input ----------------------------------------------------------------------
    def feed(self, data: bytes, stream: str = "stdout", may_scan: Optional[Callable[[], bool]] = None) -> None:
        """Add a chunk of one stream; lines are numbered in the order they complete."""
        if len(data) > FEED_MAX:
            for i in range(0, len(data), FEED_MAX):
                self.feed(data[i:i + FEED_MAX], stream, may_scan)
            return
        if not data:
            return
        self.bytes += len(data)
        cut = data.rfind(b"\n")
        if cut < 0:
            self._hold(stream, data)
            return
        partial = self._partial.get(stream)
        start = 0
        if partial:
            start = data.find(b"\n") + 1
            if self._partial_dropped.get(stream):
                self.long_lines += 1
                self._partial_dropped[stream] = False
            body = bytes(partial) + data[:start]
            partial.clear()
            self._add_block(body, may_scan)
        if start <= cut:
            self._add_block(data[start:cut + 1] if (start or cut + 1 < len(data)) else data, may_scan)
        if cut + 1 < len(data):
            self._hold(stream, data[cut + 1:])

    def _hold(self, stream: str, data: bytes) -> None:
        partial = self._partial.setdefault(stream, bytearray())
        room = PARTIAL_LIMIT - len(partial)
        if room >= len(data):
            partial += data
        else:
            # an enormous line (a progress bar redrawn with \r for hours): keep its start
            if room > 0:
                partial += data[:room]
            self._partial_dropped[stream] = True

    def finish(self) -> None:
        """End of output: an unfinished last line of each stream becomes a line."""
        for stream, partial in self._partial.items():
            if partial:
                if self._partial_dropped.get(stream):
                    self.long_lines += 1
                self._add_block(bytes(partial) + b"\n", None)
                partial.clear()

    # -- blocks of complete lines --------------------------------------------------------
    def _add_block(self, body: bytes, may_scan: Optional[Callable[[], bool]]) -> None:
        base = self.lines
        count = body.count(b"\n")
        self.lines += count
        if not self._head_full:
            self._take_head(body, base, count)
        if self._after_until > base:
            self._keep_range_forward(body, 0, base + 1, min(self._after_until, base + count))
        self._push_block(base, body)
        try:
            self._scan_block(body, base, base + count, may_scan)
        finally:
            self._trim_blocks()                   # only now: an anchor may look back past this block

    def _scan_block(self, body: bytes, base: int, last: int, may_scan: Optional[Callable[[], bool]]) -> None:
        pos, line = 0, base
        while pos < len(body):
            if not self._allowance() or (may_scan is not None and not may_scan()):
                self.unscanned_bytes += len(body) - pos
                self.unscanned_lines += last - line
                return
            end = len(body) if len(body) - pos <= SLICE else body.rfind(b"\n", pos, pos + SLICE) + 1
            if end <= pos:                        # one line longer than a slice
                end = body.find(b"\n", pos + SLICE) + 1 or len(body)
            started = time.perf_counter()
            self._scan(body, pos, end, line)
            if self._share is not None:
                self._tokens -= time.perf_counter() - started
            if end < len(body):                   # (the last slice's count is not needed)
                line += body.count(b"\n", pos, end)
            pos = end

    def _allowance(self) -> bool:
        """Whether the search may spend more CPU now (always, without ``scan_share``)."""
        if self._share is None:
            return True
        now = time.perf_counter()
        self._tokens = min(self._burst, self._tokens + (now - self._last_refill) * self._share)
        self._last_refill = now
        return self._tokens > 0

    def _take_head(self, body: bytes, base: int, count: int) -> None:
        need = HEAD_LINES - base
        parts = body.split(b"\n", need) if need < count else body.split(b"\n")
        for i, raw in enumerate(parts[:min(need, count)]):
            self._head.append((base + 1 + i, raw[:MAX_LINE]))
            self._head_last = base + 1 + i
            self._head_bytes += min(len(raw), MAX_LINE)
            if self._head_bytes >= HEAD_BYTES:
                break
        if base + count >= HEAD_LINES or self._head_bytes >= HEAD_BYTES:
            self._head_full = True

    def _push_block(self, base: int, body: bytes) -> None:
        self._blocks.append((base, body))        # bodies are at most FEED_MAX + PARTIAL_LIMIT bytes
        self._blocks_bytes += len(body)

    def _trim_blocks(self) -> None:
        keep_lines = max(TAIL_LINES, BEFORE)
        while len(self._blocks) > 1:
            first = self._blocks[0][1]
            enough_without_first = self.lines - self._blocks[1][0] >= keep_lines
            if not (enough_without_first or self._blocks_bytes > TAIL_BYTES):
                break
            self._blocks.popleft()
            self._blocks_bytes -= len(first)

    # -- scanning ---------------------------------------------------------------------
    def _scan(self, body: bytes, start: int, end: int, base: int) -> None:
        """Keep the flagged lines of body[start:end] (whole lines); ``base``: lines before start.

        Until the early store is full every context line is kept. After that a log that
        repeats the same kind of line (a metrics dict every step) would cost a store per
        line only to be evicted from the ring, so context lines are sampled: per slice,
        one line per literal, plus any line with a literal not seen yet in the slice.
        Anchor lines are always kept, with their windows.
        """
        sample = self._early_full
        hits = self._finder(body, start, end, sample)
        seen: set = set()
        cur_pos, cur_line = start, base
        i, n = 0, len(hits)
        while i < n:
            pos = hits[i][0]
            le = body.find(b"\n", pos)
            anchor = False
            fresh = False
            while i < n and hits[i][0] < le:      # every hit on this line
                _, a, key = hits[i]
                anchor = anchor or a
                if key not in seen:
                    seen.add(key)
                    fresh = True
                i += 1
            if not anchor and not fresh and self._early_full:
                continue
            cur_line += body.count(b"\n", cur_pos, pos)
            cur_pos = pos
            no = cur_line + 1
            ls = body.rfind(b"\n", 0, pos) + 1
            if anchor:
                self.anchors += 1
                self._keep_window(body, ls, le, no)
            else:
                self._store(no, body[ls:le])

    def _keep_window(self, body: bytes, ls: int, le: int, no: int) -> None:
        """Keep an anchor line, BEFORE lines before it and AFTER lines after it."""
        lo = max(no - BEFORE, self._window_through + 1, 1)
        if lo < no:
            self._keep_range_back(body, ls, no - 1, lo)
        self._store(no, body[ls:le])
        block_last = self.lines                       # the block being scanned is the newest
        hi = min(no + AFTER, block_last)
        if hi > no:
            self._keep_range_forward(body, le + 1, no + 1, hi)
        self._after_until = max(self._after_until, no + AFTER)
        self._window_through = max(self._window_through, hi, no)

    def _keep_range_back(self, body: bytes, ls: int, top: int, lo: int) -> None:
        """Keep lines lo..top, which end just before offset ``ls`` of ``body`` (or earlier blocks)."""
        lines: list[tuple[int, bytes]] = []
        no = top
        pos = ls - 1                                   # offset of the newline ending line ``top``
        buf = body
        blocks = list(self._blocks)[:-1]              # earlier blocks, newest last
        while no >= lo:
            if pos < 0:                                # line ``no`` ends an earlier block
                if not blocks:
                    break
                buf = blocks.pop()[1]
                pos = len(buf) - 1
                continue
            start = buf.rfind(b"\n", 0, pos) + 1
            lines.append((no, buf[start:pos]))
            no -= 1
            pos = start - 1
        for n, raw in reversed(lines):
            self._store(n, raw)

    def _keep_range_forward(self, body: bytes, pos: int, first: int, last: int) -> None:
        """Keep lines first..last, starting at offset ``pos`` of ``body``."""
        no = first
        while no <= last and pos < len(body):
            end = body.find(b"\n", pos)
            if end < 0:
                end = len(body)
            self._store(no, body[pos:end])
            no += 1
            pos = end + 1

    def _store(self, no: int, raw: bytes) -> None:
        if no <= self._head_last or no in self._early or no in self._late:
            return
        if len(raw) > MAX_LINE:
            raw = raw[:MAX_LINE]
        if not self._early_full:
            if len(self._early) < EARLY_LINES and self._early_bytes + len(raw) <= EARLY_BYTES:
                self._early[no] = raw
                self._early_bytes += len(raw)
                self._early_full = len(self._early) >= EARLY_LINES
                return
            self._early_full = True
        late = self._late
        late[no] = raw
        self._late_bytes += len(raw)
        while len(late) > LATE_LINES or self._late_bytes > LATE_BYTES:
            self._late_bytes -= len(late.popitem(last=False)[1])

    # -- output -----------------------------------------------------------------------
    def memory_bytes(self) -> int:
        """Bytes held (an upper bound of what this record costs, for tests and notes)."""
        return (self._head_bytes + self._blocks_bytes + self._early_bytes + self._late_bytes
                + sum(len(p) for p in self._partial.values()))

    def tail_pairs(self) -> list[tuple[int, bytes]]:
        out: list[tuple[int, bytes]] = []
        for base, body in self._blocks:
            parts = body.split(b"\n")
            if parts and parts[-1] == b"":
                parts.pop()
            out.extend((base + 1 + i, raw[:MAX_LINE]) for i, raw in enumerate(parts))
        return out[-TAIL_LINES:]

    def view(self) -> LogView:
        """The kept lines, in order, with their original numbers, as the pipeline reads them."""
        kept: dict[int, bytes] = dict(self._head)
        kept.update(self._early)
        kept.update(self._late)
        kept.update(self.tail_pairs())
        pairs = [(no, _decode(raw)) for no, raw in sorted(kept.items())]
        everything = len(pairs) == self.lines
        view = LogView(pairs=pairs, lines_read=self.lines, bytes_read=self.bytes,
                       mode="full" if everything else "regions")
        if self.unscanned_lines:
            view.notes.append(
                f"the job printed faster than its output could be searched: {self.unscanned_lines} lines "
                f"({self.unscanned_bytes // 2**20} MiB) were passed through without being searched "
                "(the head and the last lines are always kept; installing oomdoctor[fast] searches faster)")
        return view
