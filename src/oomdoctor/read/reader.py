"""Read a log (path, stdin, bytes, text) into the lines worth parsing, in bounded memory.

Small logs (the pasted-log case) are read whole. Large ones are streamed in blocks: a
multi-literal prefilter (``prefilter.py``) finds failure anchors and context lines, and
only windows around anchors, context lines, the head (banners) and the tail (the final
failure) are kept, so a multi-GB log needs a bounded amount of memory. The same
function serves ``scan``, so both commands see the same lines.

Speed matters here (``scan`` reads whole archives): the prefilter runs over whole blocks
(Hyperscan, or searches of single pivots in C), newlines are counted with ``bytes.count``,
and a block is split into lines only where something is kept from it. ``has_anchor`` is
the cheaper first pass of a scan: it only says whether a log holds any anchor at all.
"""
from __future__ import annotations

import bz2
import collections
import gzip
import io
import lzma
import os
import sys
import zlib
from dataclasses import dataclass, field
from typing import BinaryIO, Iterator, Optional, Union

from . import prefilter

FULL_LIMIT = 8 * 2**20        # read whole below this many (decompressed) bytes
CHUNK = 4 * 2**20
HEAD_LINES = 3000
TAIL_LINES = 3000
BEFORE = 250                  # lines of context kept before an anchor (the traceback)
AFTER = 60                    # and after it (wrapped message, cascade)
MAX_KEPT = 250_000            # lines kept in region mode, whatever the input size
MAX_KEPT_LINE = 8 * 1024      # characters kept of one line in region mode
MAX_KEPT_BYTES = 32 * 2**20   # bytes kept in region mode, whatever the input size
MAX_CONTEXT_LINES = 20_000    # context-literal lines kept (anchor windows, head and tail come on top)
RING_BYTES = 16 * 2**20       # recent blocks held for windows before an anchor and the tail
BLOCK = 2**20                 # read size of the region pass
PASS_BLOCK = 128 * 1024       # read size of the anchor-only pass (stays in the CPU cache)
PYTHON_PASS_SCALE = 32        # the pure-Python search reads 32 times more at once (4 MiB):
                              # it makes several passes over a block, each with a fixed cost


class InputError(Exception):
    """An input that cannot be read; the message is one line for the user."""


@dataclass
class LogView:
    pairs: list[tuple[int, str]]          # (original line number, physical line)
    lines_read: int = 0
    bytes_read: int = 0
    mode: str = "full"                    # full | regions | clean (no anchor: nothing kept)
    notes: list[str] = field(default_factory=list)
    anchor_lines: Optional[int] = None    # lines holding an anchor literal (region mode only)


@dataclass(frozen=True)
class Regions:
    """What region mode keeps of a large log."""

    head_lines: int = HEAD_LINES
    tail_lines: int = TAIL_LINES
    before: int = BEFORE
    after: int = AFTER
    context: bool = True        # keep context-literal lines anywhere (else only in head and windows)
    skip_clean: bool = False    # a log without any anchor: keep nothing (mode "clean")
    head_progress: bool = True  # keep progress-bar lines (many carriage returns) in the head
    head_all: Optional[int] = None  # past this line the head keeps only context-literal lines
    # keep at most this many head lines of one shape (digits aside): per-step progress
    # lines repeat one shape thousands of times and say nothing new after the first few
    head_repeats: Optional[int] = None


DIAGNOSE_REGIONS = Regions()
# A scan parses only the logs that hold an anchor, and of those the banners at the head,
# the windows around anchors and a short tail. The bulk of each log costs one prefilter pass.
# Progress bars (hundreds of carriage-return updates on one line) are never banners and
# are the costliest lines to parse, so the head of a scanned log goes without them.
SCAN_REGIONS = Regions(head_lines=1000, tail_lines=50, before=100, context=False, skip_clean=True,
                       head_progress=False, head_repeats=16)
NEAR_ANCHOR = 30               # lines either side of an anchor that _fewer_repeats never drops
MAX_ANCHOR_NOS = 10_000
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
PROGRESS_CR = 8                # a line with more carriage returns than this is a progress bar


Source = Union[str, bytes, os.PathLike, BinaryIO]

_MAGIC = ((b"\x1f\x8b", "gz"), (b"BZh", "bz2"), (b"\xfd7zXZ\x00", "xz"), (b"\x28\xb5\x2f\xfd", "zst"))
# bytes that are not control characters for looks_binary
_NOT_CONTROL = bytes(range(0x20, 256)) + bytes((9, 10, 13, 27, 8, 12, 0))


def _decompress_errors() -> tuple[type, ...]:
    errors: list[type] = [EOFError, OSError, lzma.LZMAError, ValueError, zlib.error]
    try:
        from isal import isal_zlib
        errors.append(isal_zlib.error)
    except ImportError:
        pass
    try:
        import zstandard
        errors.append(zstandard.ZstdError)
    except ImportError:
        pass
    return tuple(errors)


READ_ERRORS = _decompress_errors()


def looks_binary(head: bytes) -> bool:
    """True for data that is not a text log (NUL-filled, executables, images, model files).

    Logs may carry stray NULs, ANSI escapes and some invalid UTF-8; binaries carry many
    NULs, many control bytes and mostly invalid UTF-8.
    """
    if not head:
        return False
    sample = head[:8192]
    n = len(sample)
    if sample.count(0) > n * 0.3:
        return True
    control = len(sample.translate(None, _NOT_CONTROL))   # in C: a scan calls this per file
    if control > n * 0.05:
        return True
    invalid = sample.decode("utf-8", errors="replace").count("\ufffd")
    return invalid > n * 0.2


def compression_of(head: bytes) -> Optional[str]:
    for magic, kind in _MAGIC:
        if head.startswith(magic):
            return kind
    return None


def open_decompressed(fh: BinaryIO, head: bytes) -> BinaryIO:
    kind = compression_of(head)
    if kind == "gz":
        try:  # ISA-L inflates about twice as fast as zlib (optional extra); its reader is in C
            from isal import igzip
            return igzip.IGzipFile(fileobj=fh)  # type: ignore[return-value]
        except ImportError:
            return gzip.GzipFile(fileobj=fh)  # type: ignore[return-value]
    if kind == "bz2":
        return bz2.BZ2File(fh)  # type: ignore[return-value]
    if kind == "xz":
        return lzma.LZMAFile(fh)  # type: ignore[return-value]
    if kind == "zst":
        try:
            import zstandard
        except ImportError as exc:
            raise InputError("zstd-compressed input needs the 'zstandard' package (pip install 'oomdoctor[zstd]')") from exc
        return zstandard.ZstdDecompressor().stream_reader(fh, read_across_frames=True)  # type: ignore[return-value]
    return fh


def open_source(src: Source) -> tuple[BinaryIO, Optional[str]]:
    """Open a path ('-' is stdin), bytes, text or a binary stream; return (stream, name)."""
    if isinstance(src, bytes):
        return io.BytesIO(src), None
    if isinstance(src, (str, os.PathLike)):
        name = os.fspath(src)
        if name == "-":
            return sys.stdin.buffer, "<stdin>"
        if os.path.isdir(name):
            raise InputError(f"{name}: is a directory (use 'oomdoctor scan' for directories)")
        try:
            return open(name, "rb"), name
        except FileNotFoundError:
            raise InputError(f"{name}: no such file") from None
        except PermissionError:
            raise InputError(f"{name}: permission denied") from None
        except OSError as exc:
            raise InputError(f"{name}: cannot open ({exc.strerror or exc})") from None
    return src, getattr(src, "name", None)


def _text_stream(stream: BinaryIO, name: Optional[str]) -> tuple[BinaryIO, bytes]:
    """Decompress if needed and check the start is text; return (rest of stream, start)."""
    head = _peek(stream)
    if compression_of(head):
        stream = open_decompressed(_Prefixed(head, stream), head)
        head = stream.read(65536)
    if looks_binary(head):
        raise InputError(f"{name or 'input'}: looks like binary data, not a text log")
    return stream, head


def read_view(stream: BinaryIO, name: Optional[str] = None, *, full_limit: int = FULL_LIMIT,
              regions: Regions = DIAGNOSE_REGIONS) -> LogView:
    """Read a binary stream (possibly compressed) into a LogView."""
    try:
        stream, head = _text_stream(stream, name)
        if len(head) > full_limit:
            return _region_view(head, stream, regions)
        first = head + stream.read(full_limit + 1 - len(head))
        if len(first) <= full_limit:
            return _full_view(first)
        return _region_view(first, stream, regions)
    except InputError:
        raise
    except READ_ERRORS as exc:
        raise InputError(f"{name or 'input'}: cannot read ({_one_line(exc)})") from None


def has_anchor(stream: BinaryIO, name: Optional[str] = None) -> tuple[bool, int]:
    """First pass of a scan: does the (decompressed) log hold any anchor literal?

    Returns (found, bytes read); stops reading at the first block with a hit. Costs one
    read and one prefilter pass over the bytes, in blocks small enough to stay in cache.
    """
    matcher = prefilter.anchor_matcher()
    overlap = matcher.longest - 1
    size = PASS_BLOCK if matcher.engine == "hyperscan" else PASS_BLOCK * PYTHON_PASS_SCALE
    try:
        stream, block = _text_stream(stream, name)
        total = 0
        prev = b""
        while block:
            total += len(block)
            if matcher.search(block):
                return True, total
            # a literal may straddle two blocks: look at the seam
            if prev and matcher.search(prev + block[:overlap]):
                return True, total
            prev = (prev + block)[-overlap:] if len(block) < overlap else block[-overlap:]
            block = stream.read(size)
        return False, total
    except InputError:
        raise
    except READ_ERRORS as exc:
        raise InputError(f"{name or 'input'}: cannot read ({_one_line(exc)})") from None


def _one_line(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text.splitlines()[0][:200] if text else type(exc).__name__


def _peek(stream: BinaryIO) -> bytes:
    return stream.read(65536)


class _Prefixed(io.RawIOBase):
    """A stream with some already-read bytes put back in front."""

    def __init__(self, prefix: bytes, rest: BinaryIO):
        self._prefix = prefix
        self._rest = rest

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:  # type: ignore[override]
        if n is None or n < 0:
            data = self._prefix + self._rest.read()
            self._prefix = b""
            return data
        if self._prefix:
            data, self._prefix = self._prefix[:n], self._prefix[n:]
            if len(data) < n:
                data += self._rest.read(n - len(data)) or b""
            return data
        return self._rest.read(n) or b""

    def readinto(self, b) -> int:  # type: ignore[override]
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)


def _decode(b: bytes) -> str:
    text = b.decode("utf-8", errors="replace")
    return text.replace("\x00", "") if "\x00" in text else text


def _full_view(data: bytes) -> LogView:
    text = _decode(data)
    physical = text.split("\n")
    if physical and physical[-1] == "":
        physical.pop()
    return LogView(pairs=list(enumerate(physical, 1)), lines_read=len(physical), bytes_read=len(data), mode="full")


def _iter_blocks(first: bytes, stream: BinaryIO) -> Iterator[bytes]:
    yield first
    while True:
        chunk = stream.read(BLOCK)
        if not chunk:
            return
        yield chunk


def _region_view(first: bytes, stream: BinaryIO, regions: Regions = DIAGNOSE_REGIONS) -> LogView:
    builder = RegionBuilder(regions, prefilter.anchor_matcher(),
                            prefilter.context_matcher() if regions.context else None)
    carry = b""
    long_line = False
    for chunk in _iter_blocks(first, stream):
        builder.bytes += len(chunk)
        data = carry + chunk if carry else chunk
        cut = data.rfind(b"\n")
        if cut < 0:
            # one enormous line: keep its start only, count it once it ends
            if len(data) > 2 * MAX_KEPT_LINE:
                data, long_line = data[: 2 * MAX_KEPT_LINE], True
            carry = data
            continue
        carry = data[cut + 1:]
        if len(carry) > 2 * MAX_KEPT_LINE:
            carry, long_line = carry[: 2 * MAX_KEPT_LINE], True
        builder.feed(data[: cut + 1] if cut + 1 < len(data) else data)
    view = builder.finish(carry)
    if long_line:
        view.notes.append(f"lines longer than {2 * MAX_KEPT_LINE} bytes were cut (anchors past the cut are not seen)")
    return view



class _Block:
    """Complete lines read together: the first line's number, the bytes, the line count."""

    __slots__ = ("first", "data", "count", "_lines")

    def __init__(self, first: int, data: bytes):
        self.first = first
        self.data = data
        self.count = data.count(b"\n")
        self._lines: Optional[list[bytes]] = None

    @property
    def last(self) -> int:
        return self.first + self.count - 1

    def lines(self) -> list[bytes]:
        """The block split into lines, done once and only for blocks something is kept from."""
        if self._lines is None:
            self._lines = self.data.split(b"\n")[: self.count]
        return self._lines


class RegionBuilder:
    """Region mode: fed blocks of complete lines, keeps what ``Regions`` asks for."""

    def __init__(self, regions: Regions, anchors: "prefilter.Matcher",
                 context: Optional["prefilter.Matcher"] = None):
        self.regions = regions
        self.anchors = anchors
        self.context = context
        self.bytes = 0
        self.lines = 0                     # complete lines fed so far
        self.anchor_lines = 0
        self.anchor_nos: list[int] = []    # the first anchor lines (for _fewer_repeats)
        self.head: list[bytes] = []        # raw blocks of lines 1..head_lines
        self.kept: dict[int, bytes] = {}
        self.kept_bytes = 0
        self.dropped = False
        self.ring: collections.deque[_Block] = collections.deque()
        self.ring_bytes = 0
        self.after_until = 0               # lines up to this number follow an anchor
        self.window_through = 0            # windows already cover every line up to this one
        self.context_kept = 0
        self._reach = max(regions.before, regions.tail_lines)

    # -- keeping ----------------------------------------------------------------------
    def _keep(self, no: int, raw: bytes) -> None:
        if no in self.kept:
            return
        if len(self.kept) >= MAX_KEPT or self.kept_bytes >= MAX_KEPT_BYTES:
            self.dropped = True
            return
        raw = raw[:MAX_KEPT_LINE]
        self.kept[no] = raw
        self.kept_bytes += len(raw) + 64

    def _keep_range(self, lo: int, hi: int) -> None:
        """Keep lines lo..hi that the ring still holds."""
        for blk in self.ring:
            if blk.last < lo or blk.first > hi:
                continue
            lines = blk.lines()
            for no in range(max(lo, blk.first), min(hi, blk.last) + 1):
                self._keep(no, lines[no - blk.first])

    # -- feeding ----------------------------------------------------------------------
    def feed(self, data: bytes) -> None:
        """Add a block of complete lines (ending with a newline)."""
        blk = _Block(self.lines + 1, data)
        self.ring.append(blk)
        self.ring_bytes += len(data)
        r = self.regions
        if self.lines < r.head_lines:
            need = r.head_lines - self.lines
            lines = None if blk.count <= need and len(data) <= need * MAX_KEPT_LINE else blk.lines()[:need]
            # very long lines are cut here already, so the head stays bounded in bytes
            self.head.append(data if lines is None else b"\n".join(x[:MAX_KEPT_LINE] for x in lines) + b"\n")
        if self.after_until >= blk.first:   # the rest of a window opened in an earlier block
            self._keep_range(blk.first, self.after_until)
        ends = self.anchors.ends(data)
        if ends:
            self._anchors(blk, ends)
        if self.context is not None and self.context_kept < MAX_CONTEXT_LINES:
            ends = self.context.ends(data)
            if ends:
                lines = blk.lines()
                # Banners and configuration come early; past this many context lines the
                # rest are per-step progress ("epoch", "step", "MiB") that say nothing new.
                for no in self._line_numbers(blk, ends)[: MAX_CONTEXT_LINES - self.context_kept]:
                    self._keep(no, lines[no - blk.first])
                    self.context_kept += 1
        self.lines += blk.count
        # keep enough recent blocks for the next window's "before" lines and the tail
        while len(self.ring) > 1 and (self.lines - self.ring[0].last >= self._reach or self.ring_bytes > RING_BYTES):
            self.ring_bytes -= len(self.ring.popleft().data)

    @staticmethod
    def _line_numbers(blk: _Block, ends: list[int]) -> list[int]:
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

    def _anchors(self, blk: _Block, ends: list[int]) -> None:
        r = self.regions
        for no in self._line_numbers(blk, ends):
            self.anchor_lines += 1
            if len(self.anchor_nos) < MAX_ANCHOR_NOS:
                self.anchor_nos.append(no)
            lo = max(1, no - r.before, self.window_through + 1)
            hi = no + r.after
            if lo <= hi:
                self._keep_range(lo, hi)
            self.window_through = max(self.window_through, min(hi, blk.last))
            self.after_until = max(self.after_until, hi)

    def _fewer_repeats(self, numbers: list[int], pairs: dict[int, bytes]) -> list[int]:
        """Drop the lines of a shape (digits aside) seen ``head_repeats`` times already,
        except near an anchor and in the tail: there every line may be part of the
        failure's story, and the last line says where the job ended."""
        r = self.regions
        tail_from = numbers[-1] - r.tail_lines + 1 if numbers else 0
        near: set[int] = set()
        for no in self.anchor_nos:
            near.update(range(no - NEAR_ANCHOR, no + NEAR_ANCHOR + 1))
        shapes: dict[bytes, int] = {}
        out = []
        for no in numbers:
            if no not in near and no < tail_from:
                shape = pairs[no][:200].translate(_DIGITS_AS_ZERO)
                seen = shapes[shape] = shapes.get(shape, 0) + 1
                if seen > r.head_repeats:
                    continue
            out.append(no)
        return out

    # -- result -----------------------------------------------------------------------
    def finish(self, carry: bytes) -> LogView:
        """The view; ``carry`` is an unterminated last line, if any."""
        r = self.regions
        last_no = self.lines + (1 if carry else 0)
        if r.skip_clean and self.anchor_lines == 0 and not (carry and self.anchors.search(carry)):
            return LogView(pairs=[], lines_read=last_no, bytes_read=self.bytes, mode="clean", anchor_lines=0)
        if carry:
            if self.anchors.search(carry):
                self.anchor_lines += 1
                self.anchor_nos.append(last_no)
                self._keep_range(max(1, last_no - r.before), self.lines)
            if last_no <= r.head_lines:
                self.head.append(carry)
            self._keep(last_no, carry)
        pairs: dict[int, bytes] = {}
        head = b"".join(self.head).split(b"\n")
        context = prefilter.context_matcher() if r.head_all is not None else None
        for no, raw in enumerate(head[: r.head_lines], 1):
            if no > last_no or (not r.head_progress and raw.count(b"\r") > PROGRESS_CR):
                continue
            if context is None or no <= r.head_all or context.search(raw):
                pairs[no] = raw[:MAX_KEPT_LINE]
        if r.tail_lines:   # the unterminated last line, if any, is the tail's last line
            self._keep_range(last_no - r.tail_lines + 1, self.lines)
        pairs.update(self.kept)
        numbers = sorted(pairs)
        if r.head_repeats is not None:
            numbers = self._fewer_repeats(numbers, pairs)
        view = LogView(pairs=[(no, _decode(pairs[no])) for no in numbers], lines_read=last_no,
                       bytes_read=self.bytes, mode="regions", anchor_lines=self.anchor_lines)
        if self.dropped:
            view.notes.append(f"only {len(self.kept)} lines of interest were kept from this log")
        return view
