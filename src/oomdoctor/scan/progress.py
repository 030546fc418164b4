"""A one-line progress bar on a terminal: files, bytes, rate, time left. Silent when piped."""
from __future__ import annotations

import sys
import time
from typing import IO, Optional

from ..facts.sizes import format_size


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
        text = self.line(now)
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
