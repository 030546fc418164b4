"""Decompression that keeps what it can: truncated, damaged and oversized compressed logs.

A job killed while its log was being compressed leaves a truncated file; a bad copy
leaves a damaged one; a hostile one inflates to terabytes. The standard library's
readers raise on the first two, and their buffered reads drop whatever was inflated in
the same call, which is the end of the log: where the failure is. So each codec is driven
here by hand, in bounded steps: everything inflated before the damage comes out, the
damage becomes a note (``Inflater.problems``), and the output stops at a cap
(``OOMDOCTOR_MAX_INFLATED``).

Members follow each other as ``gzip -dc`` reads them: concatenated gzip members, bzip2
and xz streams and zstd frames; NUL padding between or after them is skipped; anything
else after a complete member is trailing garbage, ignored with a note.

Gzip bodies are inflated as raw deflate with the header and trailer read here, so a
wrong CRC (the last 8 bytes) costs a note, not the last block of the log. Zstd frames
are fed 2 KiB at a time (its decompressor has no output bound, and 2 KiB of zstd can
hold 64 MiB of zeros) and their optional checksum is skipped for the same reason.
"""
from __future__ import annotations

import bz2
import collections
import lzma
import os
import re
import zlib
from typing import BinaryIO, Callable, Optional

from .pull import PullReader, first_line

DEFAULT_MAX_INFLATED = 4 * 2**30      # bytes inflated from one file before reading stops
ENV_MAX_INFLATED = "OOMDOCTOR_MAX_INFLATED"
INPUT_CHUNK = 64 * 1024               # compressed bytes read at once
STEP_OUT = 256 * 1024                 # bytes inflated per call: damage loses at most this much
STEP_OUT_CHECKED = 64 * 1024          # the same for bzip2 and xz, whose checks fail after the data
ZSTD_STEP_IN = 2048                   # zstd bytes fed per call (bounds its output, see above)
MAX_HEADER = 1 << 20                  # a gzip header (file name, comment, extra) longer than this is damage

MAGIC = {"gz": b"\x1f\x8b", "bz2": b"BZh", "xz": b"\xfd7zXZ\x00", "zst": b"\x28\xb5\x2f\xfd"}
NAMES = {"gz": "gzip", "bz2": "bzip2", "xz": "xz", "zst": "zstd"}

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*$", re.I)


class SettingError(ValueError):
    """An environment setting that cannot be read; the message is one line."""


def max_inflated() -> int:
    """The cap on bytes inflated from one file: ``OOMDOCTOR_MAX_INFLATED`` (``4G``,
    ``500M``, ``123456``) or the default."""
    text = os.environ.get(ENV_MAX_INFLATED, "").strip()
    if not text:
        return DEFAULT_MAX_INFLATED
    m = _SIZE.match(text)
    if not m:
        raise SettingError(f"{ENV_MAX_INFLATED}={text!r}: expected a size such as 4G, 500M or 1048576")
    scale = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}[m.group(2).lower()]
    value = int(float(m.group(1)) * scale)
    if value <= 0:
        raise SettingError(f"{ENV_MAX_INFLATED}={text!r}: must be more than 0 bytes")
    return value


def human(n: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} bytes"


def _errors() -> tuple[type, ...]:
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


CODEC_ERRORS = _errors()


class _Damaged(Exception):
    """Raised inside a member for damage the codec itself does not report."""


# -- one member of each codec -------------------------------------------------------------
#
# A member takes compressed bytes (``feed``) and gives inflated ones (``take``), never more
# than asked for in one call. ``eof`` says the member ended; ``unused`` then holds the
# bytes that followed it. ``finish`` is called when the input ends first (truncation).

def _zlib_module():
    try:  # ISA-L inflates about twice as fast as zlib (the optional 'fast' extra)
        from isal import isal_zlib
        return isal_zlib
    except ImportError:
        return zlib


MAX_STALLED_STEPS = 64


class _Gzip:
    """One gzip member: header and trailer read here, the body inflated as raw deflate."""

    def __init__(self) -> None:
        self._z = _zlib_module()
        self._state = "header"
        self._buf = b""                # header or trailer bytes gathered so far
        self._d = None
        self._crc = 0
        self._size = 0
        self.eof = False
        self.unused = b""
        self.warning: Optional[str] = None

    def needs_input(self) -> bool:
        if self._state == "body":
            return not self._buf
        return True

    def feed_take(self, data: bytes, limit: int) -> bytes:
        if self._state == "header":
            self._buf += data
            n = _gzip_header_length(self._buf)
            if n is None:
                return b""
            data, self._buf = self._buf[n:], b""
            self._state = "body"
            self._d = self._z.decompressobj(-15)
        if self._state == "body":
            d = self._d
            out = d.decompress(self._buf + data if self._buf else data, limit)
            if out:
                self._crc = self._z.crc32(out, self._crc)
                self._size += len(out)
            if not d.eof:
                self._buf = d.unconsumed_tail
                return out
            # at the end of the deflate stream, the rest (trailer and beyond) is unused_data
            data, self._buf, self._state = d.unused_data, b"", "trailer"
            return out + self.feed_take(data, 0) if data else out
        self._buf += data                        # trailer: CRC32 and size, 8 bytes
        if len(self._buf) >= 8:
            crc = int.from_bytes(self._buf[:4], "little")
            size = int.from_bytes(self._buf[4:8], "little")
            if crc != self._crc or size != self._size & 0xFFFFFFFF:
                self.warning = "its CRC check failed (the data may be damaged)"
            self.unused, self._buf, self.eof = self._buf[8:], b"", True
        return b""

    def finish(self) -> bytes:
        if self._state == "body" and self._d is not None:
            return self._d.flush()
        return b""


def _gzip_header_length(buf: bytes) -> Optional[int]:
    """Length of the gzip header at the start of ``buf``; None if more bytes are needed."""
    if len(buf) < 10:
        return None
    if buf[:2] != b"\x1f\x8b" or buf[2] != 8:
        raise _Damaged("not a gzip member header")
    flags = buf[3]
    pos = 10
    if flags & 4:                                # FEXTRA
        if len(buf) < pos + 2:
            return None
        pos += 2 + int.from_bytes(buf[pos:pos + 2], "little")
    for bit in (8, 16):                          # FNAME, FCOMMENT: zero-terminated
        if flags & bit:
            end = buf.find(b"\x00", pos)
            if end < 0:
                if len(buf) > MAX_HEADER:
                    raise _Damaged("gzip header too long")
                return None
            pos = end + 1
    if flags & 2:                                # FHCRC
        pos += 2
    return pos if len(buf) >= pos else None


class _Stdlib:
    """A bzip2 or xz stream: the standard decompressors bound their output themselves."""

    def __init__(self, make: Callable[[], object]) -> None:
        self._d = make()
        self.unused = b""
        self.eof = False
        self.warning: Optional[str] = None

    def needs_input(self) -> bool:
        return self._d.needs_input  # type: ignore[attr-defined]

    def feed_take(self, data: bytes, limit: int) -> bytes:
        # a failed block check raises after the block's data came out: small steps lose
        # less of it (what came out in earlier steps is kept)
        out = self._d.decompress(data, max_length=min(limit, STEP_OUT_CHECKED))  # type: ignore[attr-defined]
        if self._d.eof:  # type: ignore[attr-defined]
            self.eof, self.unused = True, self._d.unused_data  # type: ignore[attr-defined]
        return out

    def finish(self) -> bytes:
        return b""


class _Zstd:
    """One zstd frame, fed a little at a time (its decompressor has no output bound)."""

    def __init__(self) -> None:
        import zstandard
        self._d = zstandard.ZstdDecompressor().decompressobj()
        self._skip_checksum = False
        self._started = False
        self._buf = b""
        self._pos = 0                  # bytes of _buf fed so far (slicing it would copy it)
        self.unused = b""
        self.eof = False
        self.warning: Optional[str] = None

    def needs_input(self) -> bool:
        return self._pos >= len(self._buf)

    def feed_take(self, data: bytes, limit: int) -> bytes:
        if data:
            self._buf = self._buf[self._pos:] + data if self._pos < len(self._buf) else data
            self._pos = 0
        if not self._started:
            if len(self._buf) < 5:
                return b""
            self._started = True
            fhd = self._buf[4]
            if fhd & 0x04:
                # the checksum is verified at the end of the frame: a mismatch there would
                # drop the last piece inflated, the end of the log; the frame is read without it
                self._skip_checksum = True
                self._buf = self._buf[:4] + bytes([fhd & ~0x04]) + self._buf[5:]
        end = min(len(self._buf), self._pos + ZSTD_STEP_IN)
        out = self._d.decompress(memoryview(self._buf)[self._pos:end])
        self._pos = end
        if self._d.eof:
            rest = self._d.unused_data + self._buf[self._pos:]
            self._buf, self._pos = b"", 0
            if self._skip_checksum:
                if len(rest) < 4:
                    raise _Damaged("frame checksum missing")
                rest = rest[4:]
            self.eof, self.unused = True, rest
        return out

    def finish(self) -> bytes:
        return b""


def _member(kind: str):
    if kind == "gz":
        return _Gzip()
    if kind == "bz2":
        return _Stdlib(bz2.BZ2Decompressor)
    if kind == "xz":
        return _Stdlib(lambda: lzma.LZMADecompressor(format=lzma.FORMAT_XZ))
    return _Zstd()


def _skippable_zstd(buf: bytes) -> Optional[int]:
    """Length of a zstd skippable frame at the start of ``buf`` (None: not one, or cut)."""
    if len(buf) >= 8 and buf[0] & 0xF0 == 0x50 and buf[1:4] == b"\x2a\x4d\x18":
        return 8 + int.from_bytes(buf[4:8], "little")
    return None


# -- the stream -----------------------------------------------------------------------------

class Inflater(PullReader):
    """The inflated bytes of a compressed stream, as far as they can be recovered.

    ``read(n)`` returns at most ``n`` bytes, ``b""`` at the end. Whatever stopped the
    output early (truncation, damage, the size cap) and what was skipped (trailing
    garbage, a bad CRC) is in ``problems``; ``stopped`` is True when the end of the log
    was not reached.
    """

    def __init__(self, raw: BinaryIO, kind: str, *, limit: Optional[int] = None):
        self._raw = raw
        self.kind = kind
        self.codec = NAMES[kind]
        self._magic = MAGIC[kind]
        self.limit = max_inflated() if limit is None else limit
        self._pending = b""            # compressed bytes read but not fed yet
        self._raw_eof = False
        self._member = None
        self._members = 0
        # inflated, not handed out yet: joined once per read; the first is handed out from
        # _first_at on (a zstd step can inflate 64 MiB, which is not copied to hand out 1)
        self._out: collections.deque[bytes] = collections.deque()
        self._first_at = 0
        self._have = 0
        self._done = False
        self.read_in = 0               # compressed bytes read
        self.inflated = 0              # bytes handed out or waiting to be
        self.problems: list[str] = []
        self.stopped = False

    def _read(self, n: int) -> bytes:
        if self._have < n and self._first_at:
            # the rest of a large piece handed out in part: copied (less than n bytes), so
            # that the piece is freed before the next one is inflated
            self._out[0] = self._out[0][self._first_at:]
            self._first_at = 0
        stalled = 0
        while self._have < n and not self._done:
            mark = (self.read_in, self.inflated, len(self._pending), self._members, self._member)
            self._step(n - self._have)
            # a decompressor that neither takes input nor gives output on damaged data would
            # spin here for ever: after a few such steps the rest is treated as damaged
            stalled = stalled + 1 if mark == (self.read_in, self.inflated, len(self._pending), self._members,
                                              self._member) else 0
            if stalled > MAX_STALLED_STEPS:
                self._stop(f"{self.codec} data is damaged {self._position()} (the decoder makes no progress)")
        parts = []
        want = n
        while want and self._out:
            first = self._out[0]
            if self._first_at == 0 and len(first) <= want:
                parts.append(self._out.popleft())
                want -= len(first)
                continue
            end = min(len(first), self._first_at + want)
            parts.append(memoryview(first)[self._first_at:end])
            want -= end - self._first_at
            self._first_at = end
            if end == len(first):
                self._out.popleft()
                self._first_at = 0
        out = parts[0] if len(parts) == 1 and isinstance(parts[0], bytes) else b"".join(parts)
        self._have -= len(out)
        return out

    # -- internals ------------------------------------------------------------------------
    def _more(self) -> bool:
        chunk = self._raw.read(INPUT_CHUNK)
        if not chunk:
            self._raw_eof = True
            return False
        self.read_in += len(chunk)
        self._pending = self._pending + chunk if self._pending else chunk
        return True

    def _emit(self, data: bytes) -> None:
        if not data:
            return
        room = self.limit - self.inflated
        if len(data) >= room:
            data = data[:room]
            self._stop(f"inflated data passed the {human(self.limit)} limit ({ENV_MAX_INFLATED}); "
                       "the rest of the file was not read")
        self._out.append(data)
        self._have += len(data)
        self.inflated += len(data)

    def _stop(self, problem: Optional[str], stopped: bool = True) -> None:
        if problem and not self._done:
            self.problems.append(problem)
        self.stopped = self.stopped or stopped
        self._done = True

    def _position(self) -> str:
        return f"after {human(self.inflated)} of log text"

    def _start_member(self) -> bool:
        """Begin the next member; False when the input ends (or holds only garbage)."""
        while True:
            self._pending = self._pending.lstrip(b"\x00")     # padding between members
            while len(self._pending) < len(self._magic) + 3 and not self._raw_eof:
                self._more()
                self._pending = self._pending.lstrip(b"\x00")
            if not self._pending:
                self._stop(None, stopped=False)
                return False
            if self.kind == "zst":
                skip = _skippable_zstd(self._pending)
                if skip is not None:
                    while len(self._pending) < skip and self._more():
                        pass
                    if len(self._pending) < skip:
                        self._stop(f"{self.codec} data is truncated {self._position()}")
                        return False
                    self._pending = self._pending[skip:]
                    continue
            if not self._pending.startswith(self._magic):
                if self._members == 0:
                    self._stop(f"{self.codec} data is damaged at its start")
                else:
                    # what `gzip -dc` does: warn, keep what was inflated
                    self._stop(f"trailing garbage after the {self.codec} data was ignored", stopped=False)
                return False
            self._member = _member(self.kind)
            self._members += 1
            return True

    def _step(self, want: int) -> None:
        if self._member is None and not self._start_member():
            return
        member = self._member
        data = b""
        if member.needs_input():
            if not self._pending and not self._more():
                try:
                    self._emit(member.finish())
                except CODEC_ERRORS:
                    pass
                self._stop(f"{self.codec} data is truncated {self._position()}")
                return
            data, self._pending = self._pending, b""
        try:
            out = member.feed_take(data, min(want, STEP_OUT))
        except (_Damaged, *CODEC_ERRORS) as exc:
            self._stop(f"{self.codec} data is damaged {self._position()} ({first_line(exc)})")
            return
        self._emit(out)
        if member.eof and not self._done:
            if member.warning:
                self.problems.append(f"{self.codec} member {self._members}: {member.warning}")
            self._pending = member.unused + self._pending if self._pending else member.unused
            self._member = None

