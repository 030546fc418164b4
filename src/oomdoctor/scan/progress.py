"""What a scan shows on a terminal: a one-line progress bar (files, bytes, rate, time
left; silent when piped), and ``printable``, which every text from a log, a file name or
a results file goes through before it is printed there.
"""
from __future__ import annotations

import re
import sys
import time
from typing import IO, Optional

from ..facts.sizes import format_size


# Names of files and archive members, and the text of logs, are chosen by whoever wrote
# them: printed raw, an escape sequence can recolour or clear the screen, move the cursor
# over earlier lines, set the window title or hide text; a C1 byte does the same on
# terminals that read 8-bit controls. Whole sequences go (so no "[31m" is left behind),
# then any other C0/C1 control, DEL included; a tab stays.
_CONTROL = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]"                                      # CSI: colours, cursor, erase
    r"|(?:\x1b[\]P^_X]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)"  # OSC, DCS, PM, APC, SOS strings
    r"|\x1b[ -/]*[0-~]"                                                     # other ESC sequences
    r"|[\x00-\x08\x0a-\x1f\x7f-\x9f]")                                      # any other control
# A name that is not valid UTF-8 comes in with lone surrogates (os.fsdecode): shown as
# U+FFFD, as a terminal would show the bytes, and never a UnicodeEncodeError.
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_SUSPECT = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\ud800-\udfff]")


def printable(text: object) -> str:
    """``text`` safe to print on a terminal: no escape sequences, no control characters
    but tab, no lone surrogates. Meant for display only: records keep the real names."""
    text = text if isinstance(text, str) else str(text)
    if _SUSPECT.search(text) is None:   # the usual case: nothing to do
        return text
    return _SURROGATE.sub("\ufffd", _CONTROL.sub("", text))


class Progress:
    """Counts bytes on disk (what the enumeration knew) as tasks finish."""

    def __init__(self, total_files: int, total_bytes: int, stream: Optional[IO[str]] = None,
                 enabled: Optional[bool] = None, interval: float = 0.2):
        self.stream = stream if stream is not None else sys.stderr
        if enabled is None:
            enabled = bool(getattr(self.stream, "isatty", lambda: False)())
        self.enabled = enabled
        self.total_files = total_files
        self.total_bytes = max(total_bytes, 1)
        self.files = 0
        self.bytes = 0
        self.start = time.monotonic()
        self.interval = interval
        self._last = 0.0
        self._width = 0

    def advance(self, files: int, nbytes: int) -> None:
        self.files += files
        self.bytes += nbytes
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._last >= self.interval or self.files >= self.total_files:
            self._last = now
            self._draw(now)

    def line(self, now: Optional[float] = None) -> str:
        now = time.monotonic() if now is None else now
        elapsed = max(now - self.start, 1e-6)
        rate = self.bytes / elapsed
        frac = min(1.0, self.bytes / self.total_bytes)
        left = (self.total_bytes - self.bytes) / rate if rate > 0 and self.bytes else None
        bar_w = 20
        filled = int(frac * bar_w)
        bar = "#" * filled + "-" * (bar_w - filled)
        eta = "?" if left is None else _clock(left)
        return (f"[{bar}] {self.files}/{self.total_files} files  {format_size(self.bytes)}/"
                f"{format_size(self.total_bytes)}  {format_size(int(rate))}/s  ETA {eta}")

    def _draw(self, now: float) -> None:
        text = printable(self.line(now))
        pad = max(0, self._width - len(text))
        self._width = len(text)
        self.stream.write("\r" + text + " " * pad)
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()


def _clock(seconds: float) -> str:
    seconds = int(max(0, seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"
