"""Read a log (path, stdin, bytes, text) into the lines worth parsing, in bounded memory.

Small logs (the pasted-log case) are read whole. Large ones are streamed in blocks: a
multi-literal prefilter (``prefilter.py``) finds failure anchors and context lines, and
region mode (``regions.py``) keeps the head (banners), the tail (the final failure),
windows around anchors and context lines, so a multi-GB log needs a bounded amount of
memory. The same function serves ``scan``, so both commands see the same lines.

What reaches the reader is often damaged: compressed logs cut short by a killed job or a
bad copy (``inflate.py`` keeps what can be inflated and says what was lost), logs in
UTF-16, logs whose last pages are NULs after a crash (``sniff.py``). What was read is
always diagnosed; ``LogView.notes`` says what could not be.

Speed matters here (``scan`` reads whole archives): the prefilter runs over whole blocks
(Hyperscan, or searches of single pivots in C), newlines are counted with ``bytes.count``,
and a block is split into lines only where something is kept from it. ``has_anchor`` is
the cheaper first pass of a scan: it only says whether a log holds any anchor at all.
"""
from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import sys
from dataclasses import dataclass, field
from typing import BinaryIO, Iterator, Optional, Union

from . import prefilter
from .inflate import CODEC_ERRORS, MAGIC, Inflater, SettingError, human, max_inflated
from .pull import first_line
from .regions import (  # noqa: F401
    AFTER,
    BEFORE,
    HEAD_LINES,
    MAX_CONTEXT_LINES,
    MAX_KEPT,
    MAX_KEPT_BYTES,
    MAX_KEPT_LINE,
    NEAR_ANCHOR,
    PROGRESS_CR,
    RING_BYTES,
    TAIL_LINES,
    Block,
    RegionBuilder,
    Regions,
)
from .remote import UrlError, is_url, local_path, open_url
from .sniff import Transcoder, looks_binary, skip_nul_start, text_encoding  # noqa: F401

FULL_LIMIT = 8 * 2**20        # read whole below this many (decompressed) bytes
CHUNK = 4 * 2**20
BLOCK = 2**20                 # read size of the region pass
PASS_BLOCK = 128 * 1024       # read size of the anchor-only pass (stays in the CPU cache)
PYTHON_PASS_SCALE = 32        # the pure-Python search reads 32 times more at once (4 MiB):
                              # it makes several passes over a block, each with a fixed cost
PEEK = 65536                  # bytes read to tell compression, encoding and text apart
NUL_NOTE = 4096               # NUL bytes dropped from a log before a note says so


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


DIAGNOSE_REGIONS = Regions()
# A scan parses only the logs that hold an anchor, and of those the banners at the head,
# the windows around anchors, the phase markers and a short tail. The bulk of each log
# costs one prefilter pass. Progress bars (hundreds of carriage-return updates on one
# line) are never banners and are the costliest lines to parse, so the head of a scanned
# log goes without them.
SCAN_REGIONS = Regions(head_lines=1000, tail_lines=50, before=100, context=False, skip_clean=True,
                       head_progress=False, head_repeats=16)

Source = Union[str, bytes, os.PathLike, BinaryIO]

READ_ERRORS = CODEC_ERRORS


def compression_of(head: bytes) -> Optional[str]:
    for kind, magic in MAGIC.items():
        if head.startswith(magic):
            return kind
    return None


def open_decompressed(fh: BinaryIO, head: bytes) -> BinaryIO:
    """A strict decompressing stream (errors raise): for tar archives, where a member cut
    by damage must not pass for a whole one. Logs go through ``Inflater`` instead."""
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
        zstandard = _zstandard()
        return zstandard.ZstdDecompressor().stream_reader(fh, read_across_frames=True)  # type: ignore[return-value]
    return fh


def _zstandard():
    try:
        import zstandard
    except ImportError as exc:
        raise InputError("zstd-compressed input needs the 'zstandard' package (pip install 'oomdoctor[zstd]')") from exc
    return zstandard


def open_source(src: Source) -> tuple[BinaryIO, Optional[str]]:
    """Open a path ('-' is stdin), an fsspec URL (``read.remote``), bytes, text or a binary
    stream; return (stream, name)."""
    if isinstance(src, (bytes, bytearray)):
        return io.BytesIO(bytes(src)), None
    if isinstance(src, (str, os.PathLike)):
        name = os.fspath(src)
        if name == "-":
            return sys.stdin.buffer, "<stdin>"
        # a file:// URL is read, and named, as the path it names
        target, remote = resolve_path(name)
        return _open_resolved(target, remote, "is a directory (use 'oomdoctor scan' for directories)"), target
    return src, getattr(src, "name", None)


def resolve_path(path: str) -> tuple[str, bool]:
    """Where ``path`` points: (the local path, False) for a path or a ``file://`` URL (no
    fsspec needed), (the URL, True) for any other fsspec URL."""
    if is_url(path):
        local = local_path(path)
        if local is None:
            return path, True
        return local, False
    return path, False


def open_path(path: str, if_directory: str) -> BinaryIO:
    """A path or an fsspec URL (``resolve_path``) opened for reading, or ``InputError`` with
    a one-line reason that names it (``if_directory`` when a local path is a directory)."""
    return _open_resolved(*resolve_path(path), if_directory)


def _open_resolved(target: str, remote: bool, if_directory: str) -> BinaryIO:
    if remote:
        try:
            return open_url(target)
        except UrlError as exc:
            raise InputError(f"{target}: {exc}") from None
    return open_file(target, if_directory)


def open_file(path: str, if_directory: str) -> BinaryIO:
    """A local file opened for reading, or ``InputError`` with a one-line reason
    (``if_directory`` when the path is a directory)."""
    if os.path.isdir(path):
        raise InputError(f"{path}: {if_directory}")
    try:
        return open(path, "rb")
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except PermissionError:
        raise InputError(f"{path}: permission denied") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot open ({exc.strerror or exc})") from None


class _Text:
    """A log opened for reading: decompressed, transcoded, its NUL-only start skipped."""

    def __init__(self, stream: BinaryIO, name: Optional[str]):
        self.name = name or "input"
        self.inflater: Optional[Inflater] = None
        head = stream.read(PEEK)
        kind = compression_of(head)
        if kind:
            if kind == "zst":
                _zstandard()
            try:
                limit = max_inflated()
            except SettingError as exc:
                raise InputError(str(exc)) from None
            stream = self.inflater = Inflater(_Prefixed(head, stream), kind, limit=limit)
            head = stream.read(PEEK)
        encoding = text_encoding(head)
        if encoding:
            stream = Transcoder(stream, encoding, prefix=head)
            head = stream.read(PEEK)
        self.nuls = 0
        if head and not head.strip(b"\x00"):
            head, self.nuls = skip_nul_start(head, stream)
            if not head:
                raise InputError(f"{self.name}: looks like binary data, not a text log (only NUL bytes)")
        if looks_binary(head):
            raise InputError(f"{self.name}: looks like binary data, not a text log")
        self.stream = stream
        self.head = head

    @property
    def stopped(self) -> bool:
        """Did decompression stop before the end of the log (truncated, damaged, capped)?"""
        return self.inflater is not None and self.inflater.stopped

    def notes(self, nuls: int = 0) -> list[str]:
        out = []
        if self.inflater is not None:
            out += [f"{self.name}: {p}" for p in self.inflater.problems]
        nuls += self.nuls
        if nuls >= NUL_NOTE:
            out.append(f"{self.name}: {human(nuls)} of NUL bytes were dropped (a crash while the log was written?)")
        return out


def read_view(stream: BinaryIO, name: Optional[str] = None, *, full_limit: int = FULL_LIMIT,
              regions: Regions = DIAGNOSE_REGIONS) -> LogView:
    """Read a binary stream (possibly compressed) into a LogView."""
    try:
        text = _Text(stream, name)
        stream, head = text.stream, text.head
        if len(head) > full_limit:
            view, nuls = _region_view(head, stream, regions)
        else:
            first = head + _read_up_to(stream, full_limit + 1 - len(head))
            if len(first) <= full_limit:
                view, nuls = _full_view(first), first.count(0)
            else:
                view, nuls = _region_view(first, stream, regions)
        view.bytes_read += text.nuls
        view.notes.extend(text.notes(nuls))
        return view
    except InputError:
        raise
    except READ_ERRORS as exc:
        raise InputError(f"{name or 'input'}: cannot read ({first_line(exc)})") from None


def has_anchor(stream: BinaryIO, name: Optional[str] = None) -> tuple[bool, int]:
    """First pass of a scan: does the (decompressed) log hold any anchor literal?

    Returns (found, bytes read); stops reading at the first block with a hit. Costs one
    read and one prefilter pass over the bytes, in blocks small enough to stay in cache.
    A compressed log that stops early (truncated, damaged) without an anchor in what
    could be read is an ``InputError``: a scan must not call it clean.
    """
    matcher = prefilter.anchor_matcher()
    overlap = matcher.longest - 1
    size = PASS_BLOCK if matcher.engine == "hyperscan" else PASS_BLOCK * PYTHON_PASS_SCALE
    try:
        text = _Text(stream, name)
        stream, block = text.stream, text.head
        total = text.nuls
        prev = last = b""
        while block:
            total += len(block)
            if b"\x00" in block:      # NULs are dropped from what is parsed: so here
                block = block.replace(b"\x00", b"")
            last = prefilter.keep_tail(last, block)
            if matcher.search(block):
                return True, total
            # a literal may straddle two blocks: look at the seam
            if prev and matcher.search(prev + block[:overlap]):
                return True, total
            prev = (prev + block)[-overlap:] if len(block) < overlap else block[-overlap:]
            block = stream.read(size)
        if prefilter.ends_interrupted(last):
            return True, total
        if text.stopped:
            problem = "; ".join(text.inflater.problems) if text.inflater else "it stops early"
            raise InputError(f"{text.name}: cannot read to the end ({problem}), "
                             f"and the {human(total)} read hold no failure")
        return False, total
    except InputError:
        raise
    except READ_ERRORS as exc:
        raise InputError(f"{name or 'input'}: cannot read ({first_line(exc)})") from None


def _read_up_to(stream: BinaryIO, n: int) -> bytes:
    """``n`` bytes, or fewer at the end (a raw stream may return less per read)."""
    parts = []
    while n > 0:
        part = stream.read(n)
        if not part:
            break
        parts.append(part)
        n -= len(part)
    return b"".join(parts)


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


def _region_view(first: bytes, stream: BinaryIO, regions: Regions = DIAGNOSE_REGIONS) -> tuple[LogView, int]:
    """Region mode over the rest of the stream; returns the view and the NULs dropped."""
    builder = RegionBuilder(regions, prefilter.anchor_matcher(),
                            prefilter.context_matcher() if regions.context else None,
                            prefilter.marker_matcher() if regions.markers else None)
    carry = last = b""
    long_line = False
    nuls = 0
    for chunk in _iter_blocks(first, stream):
        builder.bytes += len(chunk)
        if b"\x00" in chunk:
            # a crash mid-write leaves pages of NULs: dropped here (not a line's worth of
            # text), as the full reading drops them
            n = len(chunk)
            chunk = chunk.replace(b"\x00", b"")
            nuls += n - len(chunk)
        last = prefilter.keep_tail(last, chunk)
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
    builder.finish(carry)
    if (regions.skip_clean and builder.anchor_lines == 0
            and not prefilter.ends_interrupted(last)):
        return LogView(pairs=[], lines_read=builder.lines, bytes_read=builder.bytes, mode="clean",
                       anchor_lines=0), nuls
    kept, notes, last_no = builder.result()
    view = LogView(pairs=[(no, _decode(raw)) for no, raw in kept], lines_read=last_no,
                   bytes_read=builder.bytes, mode="regions", anchor_lines=builder.anchor_lines, notes=notes)
    if long_line:
        view.notes.append(f"lines longer than {2 * MAX_KEPT_LINE} bytes were cut (anchors past the cut are not seen)")
    return view, nuls
