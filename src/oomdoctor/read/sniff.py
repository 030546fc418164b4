"""Is this a text log, and in which encoding?

* A byte-order mark says UTF-16 or UTF-32 (PowerShell's ``>`` writes UTF-16 LE): such a
  log is transcoded to UTF-8 as it is read (``Transcoder``), and so is UTF-16 without a
  mark, recognised by its NUL in every other byte.
* NUL runs are not judged: a node that crashed while a log was being written leaves
  blocks of NULs where the last pages should be, and the reader drops NULs anyway.
* What is left is text when most of it is printable (``looks_binary``): letters in any
  script, whitespace, and the control bytes terminals use (escape sequences, bells,
  backspaces). Executables, images, model files and compressed data are mostly not.
"""
from __future__ import annotations

import codecs
import re
from typing import BinaryIO, Optional

from .pull import PullReader

SAMPLE = 8192                  # bytes of text judged
MIN_PRINTABLE = 0.85           # share of printable characters in a text log's sample
NUL_SEARCH = 256 * 2**20       # bytes read past a NUL-only start before giving up
# BOMs, longest first (the UTF-32 LE mark starts with the UTF-16 LE one); these codecs
# read the byte order from the mark and drop it
_BOMS = ((b"\xff\xfe\x00\x00", "utf-32"), (b"\x00\x00\xfe\xff", "utf-32"),
         (b"\xff\xfe", "utf-16"), (b"\xfe\xff", "utf-16"), (b"\xef\xbb\xbf", "utf-8-sig"))
# C0 controls but the whitespace and terminal ones (BS, TAB, LF, VT, FF, CR, SO, SI, BEL,
# ESC), DEL, C1 controls and the replacement character (bytes that are not UTF-8)
_NOT_PRINTABLE = re.compile("[\x00-\x06\x10-\x1a\x1c-\x1f\x7f-\x9f\ufffd]")


def looks_binary(head: bytes) -> bool:
    """True for data that is not a text log (NUL-filled, executables, images, model files).

    NULs are dropped first; what is left must be mostly printable once read as UTF-8.
    Logs carry ANSI escapes, progress bars, stray bytes of other encodings; binaries are
    mostly control bytes and invalid UTF-8.
    """
    if not head:
        return False
    sample = head.replace(b"\x00", b"")[:SAMPLE] if b"\x00" in head else head[:SAMPLE]
    if not sample:
        return True                                  # nothing but NULs
    text = sample.decode("utf-8", errors="replace")
    if len(sample) == SAMPLE:                        # a character cut by the sample's end
        text = text.rstrip("\ufffd") or text
    bad = len(_NOT_PRINTABLE.findall(text))
    return bad > len(text) * (1 - MIN_PRINTABLE)


def text_encoding(head: bytes) -> Optional[str]:
    """The encoding to transcode from (UTF-16/32, or UTF-8 with a BOM), None for plain bytes."""
    for bom, enc in _BOMS:
        if head.startswith(bom):
            return enc
    sample = head[: SAMPLE - SAMPLE % 4]
    if len(sample) >= 64 and sample.count(0) > len(sample) * 0.3:
        even, odd = sample[0::2], sample[1::2]
        # ASCII in UTF-16 without a mark: a NUL in every other byte, hardly ever in the rest
        if odd.count(0) > len(odd) * 0.9 and even.count(0) < len(even) * 0.1:
            return "utf-16-le"
        if even.count(0) > len(even) * 0.9 and odd.count(0) < len(odd) * 0.1:
            return "utf-16-be"
    return None


class Transcoder(PullReader):
    """A UTF-16/32 (or BOM-marked UTF-8) byte stream read as UTF-8 bytes."""

    def __init__(self, raw: BinaryIO, encoding: str, prefix: bytes = b""):
        self._raw = raw
        self._prefix = prefix
        self._dec = codecs.getincrementaldecoder(encoding)(errors="replace")
        self._out = bytearray()
        self._eof = False
        self.encoding = encoding
        self.read_in = 0

    def _read(self, n: int) -> bytes:
        while len(self._out) < n and not self._eof:
            if self._prefix:
                chunk, self._prefix = self._prefix, b""
            else:
                chunk = self._raw.read(max(n, 65536))
            self.read_in += len(chunk)
            text = self._dec.decode(chunk, final=not chunk)
            if not chunk:
                self._eof = True
            self._out += text.encode("utf-8", errors="replace")
        out = bytes(self._out[:n])
        del self._out[:n]
        return out


def skip_nul_start(head: bytes, stream: BinaryIO, size: int = 65536) -> tuple[bytes, int]:
    """A start of NULs only (a log cut by a crash mid-write): read on to the first other
    byte, at most ``NUL_SEARCH`` bytes. Returns (the text from there, NUL bytes skipped)."""
    skipped = 0
    while head and not head.strip(b"\x00") and skipped < NUL_SEARCH:
        skipped += len(head)
        head = stream.read(size)
    if head and not head.strip(b"\x00"):
        return b"", skipped + len(head)
    stripped = head.lstrip(b"\x00")
    return stripped, skipped + len(head) - len(stripped)
