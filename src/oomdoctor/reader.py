"""Read a log (path, stdin, bytes, text) into the lines worth parsing, in bounded memory.

Small logs (the pasted-log case) are read whole. Large ones are streamed in chunks: a
multi-literal prefilter (``prefilter.py``) finds failure anchors and context lines, and
only windows around anchors, context lines, the head (banners) and the tail (the final
failure) are kept, so a multi-GB log needs a bounded amount of memory. The same
function serves ``scan``, so both commands see the same lines.
"""
from __future__ import annotations

import bz2
import collections
import gzip
import io
import lzma
import os
import sys
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


class InputError(Exception):
    """An input that cannot be read; the message is one line for the user."""


@dataclass
class LogView:
    pairs: list[tuple[int, str]]          # (original line number, physical line)
    lines_read: int = 0
    bytes_read: int = 0
    mode: str = "full"
    notes: list[str] = field(default_factory=list)


Source = Union[str, bytes, os.PathLike, BinaryIO]

_MAGIC = ((b"\x1f\x8b", "gz"), (b"BZh", "bz2"), (b"\xfd7zXZ\x00", "xz"), (b"\x28\xb5\x2f\xfd", "zst"))


def looks_binary(head: bytes) -> bool:
    """True for data that is not a text log (NUL-filled, executables, images)."""
    if not head:
        return False
    sample = head[:8192]
    if sample.count(0) > len(sample) * 0.3:
        return True
    text_bytes = sum(1 for b in sample if b >= 0x20 or b in (9, 10, 13, 27, 0))
    return text_bytes < len(sample) * 0.85


def open_decompressed(fh: BinaryIO, head: bytes) -> BinaryIO:
    for magic, kind in _MAGIC:
        if head.startswith(magic):
            if kind == "gz":
                return gzip.GzipFile(fileobj=fh)  # type: ignore[return-value]
            if kind == "bz2":
                return bz2.BZ2File(fh)  # type: ignore[return-value]
            if kind == "xz":
                return lzma.LZMAFile(fh)  # type: ignore[return-value]
            try:
                import zstandard
            except ImportError as exc:
                raise InputError("zstd-compressed input needs the 'zstandard' package (pip install 'oomdoctor[zstd]')") from exc
            return zstandard.ZstdDecompressor().stream_reader(fh)  # type: ignore[return-value]
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


def read_view(stream: BinaryIO, name: Optional[str] = None, *, full_limit: int = FULL_LIMIT) -> LogView:
    """Read a binary stream (possibly compressed) into a LogView."""
    try:
        head = _peek(stream)
        stream = _Prefixed(head, stream)
        salvage: Optional[_Salvaging] = None
        for magic, _ in _MAGIC:
            if head.startswith(magic):
                salvage = _Salvaging(open_decompressed(stream, head))
                head = salvage.read(65536)
                stream = _Prefixed(head, salvage)
                break
        if looks_binary(head):
            raise InputError(f"{name or 'input'}: looks like binary data, not a text log")
        first = stream.read(full_limit + 1)
        view = _full_view(first) if len(first) <= full_limit else _region_view(first, stream)
        if salvage is not None and salvage.error:
            if not view.bytes_read:
                raise InputError(f"{name or 'input'}: cannot decompress ({salvage.error})")
            view.notes.append(f"the compressed input is damaged after {view.bytes_read} bytes ({salvage.error}); "
                              "the report covers what came before")
        return view
    except (EOFError, OSError, lzma.LZMAError, ValueError) as exc:
        if isinstance(exc, InputError):
            raise
        raise InputError(f"{name or 'input'}: cannot read ({_one_line(exc)})") from None


def _one_line(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text.splitlines()[0][:200] if text else type(exc).__name__


def _peek(stream: BinaryIO) -> bytes:
    return stream.read(65536)


class _Salvaging(io.RawIOBase):
    """A decompressing stream that ends cleanly at a truncated or corrupt tail, noting
    why, so that what was read before the damage is still diagnosed."""

    def __init__(self, inner: BinaryIO):
        self._inner = inner
        self.error: Optional[str] = None

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:  # type: ignore[override]
        if self.error:
            return b""
        try:
            return self._inner.read(n) or b""
        except (EOFError, OSError, lzma.LZMAError, ValueError) as exc:
            self.error = _one_line(exc)
            return b""
        except Exception as exc:  # zstandard.ZstdError and friends
            self.error = _one_line(exc)
            return b""


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


def _iter_chunks(first: bytes, stream: BinaryIO) -> Iterator[bytes]:
    yield first
    while True:
        chunk = stream.read(CHUNK)
        if not chunk:
            return
        yield chunk


def _region_view(first: bytes, stream: BinaryIO) -> LogView:
    anchors = prefilter.anchor_pattern()
    context = prefilter.context_pattern()
    kept: dict[int, str] = {}
    recent: collections.deque[tuple[int, bytes]] = collections.deque(maxlen=BEFORE)
    tail: collections.deque[tuple[int, bytes]] = collections.deque(maxlen=TAIL_LINES)
    after_until = 0
    no = 0
    total = 0
    carry = b""
    dropped = False

    def keep(n: int, raw: bytes) -> None:
        nonlocal dropped
        if n in kept:
            return
        if len(kept) >= MAX_KEPT:
            dropped = True
            return
        kept[n] = _decode(raw[:MAX_KEPT_LINE])

    for chunk in _iter_chunks(first, stream):
        total += len(chunk)
        data = carry + chunk
        cut = data.rfind(b"\n")
        if cut < 0:
            # one enormous line: keep its start only, count it once it ends
            carry = data[: MAX_KEPT_LINE * 2]
            continue
        body, carry = data[: cut + 1], data[cut + 1:]
        # Where in this body do anchors and context hits fall? One pass each, in bulk.
        hit_anchor = {m.start() for m in anchors.finditer(body)}
        hit_context = {m.start() for m in context.finditer(body)} if len(kept) < MAX_KEPT else set()
        pos = 0
        anchor_iter = sorted(hit_anchor)
        context_iter = sorted(hit_context)
        ai = ci = 0
        while pos < len(body):
            end = body.find(b"\n", pos)
            line = body[pos:end]
            no += 1
            is_anchor = False
            while ai < len(anchor_iter) and anchor_iter[ai] < end:
                is_anchor = is_anchor or anchor_iter[ai] >= pos
                ai += 1
            is_context = False
            while ci < len(context_iter) and context_iter[ci] < end:
                is_context = is_context or context_iter[ci] >= pos
                ci += 1
            if no <= HEAD_LINES or is_context or no <= after_until:
                keep(no, line)
            if is_anchor:
                for n, raw in recent:
                    keep(n, raw)
                keep(no, line)
                after_until = no + AFTER
            recent.append((no, line))
            tail.append((no, line))
            pos = end + 1
    if carry:
        no += 1
        keep(no, carry)
        tail.append((no, carry))
    for n, raw in tail:
        keep(n, raw)
    view = LogView(pairs=sorted(kept.items()), lines_read=no, bytes_read=total, mode="regions")
    if dropped:
        view.notes.append(f"only {MAX_KEPT} lines of interest were kept from this log")
    return view
