"""What a scan shows on a terminal: a one-line progress bar (files, bytes, rate, time
left; drawn by rich on stderr, silent when piped), and ``printable``, which every text from a log, a file name or
a results file goes through before it is printed there.
"""
from __future__ import annotations

import os
import sys
import time
from typing import IO, Optional

from ..facts.sizes import format_size
from ..report.common import printable
from ..report.render import can_draw


class Progress:
    """Counts bytes on disk (what the enumeration knew) as tasks finish, and shows them as a
    rich progress bar on a terminal: one line, as wide as the terminal, redrawn as logs finish
    (at most every ``interval`` seconds), gone when the scan ends or is interrupted (``close``
    runs in a ``finally``).

    The bar goes to ``stream`` (stderr) only: stdout, where the records go, is never touched
    or redirected. Off when the stream is not a terminal (or TERM=dumb), unless ``enabled``
    forces it; rich is imported only when the bar is drawn."""

    def __init__(self, total_files: int, total_bytes: int, stream: Optional[IO[str]] = None,
                 enabled: Optional[bool] = None, interval: float = 0.2):
        self.stream = stream if stream is not None else sys.stderr
        if enabled is None:
            enabled = can_draw(self.stream)
        self.enabled = enabled
        self.total_files = total_files
        self.total_bytes = max(total_bytes, 1)
        self.files = 0
        self.bytes = 0
        self.name = ""
        self.start = time.monotonic()
        self.interval = interval
        self._last = 0.0
        self._bar = None
        self._task = None
        if enabled:
            self._open()

    def _open(self) -> None:
        from rich.progress import BarColumn, TextColumn
        from rich.progress import Progress as Bar
        from rich.table import Column

        from ..report.render import use_color
        from ..report.terminal import make_console
        # two columns short of the terminal: on Ctrl-C the terminal echoes "^C" after the bar;
        # on a full-width line that would wrap, and the bar could no longer be erased
        console = make_console(self.stream, color=use_color(self.stream), terminal=True, margin=2)
        fixed = {"markup": False}
        self._bar = Bar(
            TextColumn("{task.fields[files]}", table_column=Column(no_wrap=True), **fixed),
            BarColumn(bar_width=None, table_column=Column(ratio=2)),
            TextColumn("{task.fields[sizes]}", table_column=Column(no_wrap=True), **fixed),
            TextColumn("{task.fields[rate]}", table_column=Column(no_wrap=True), **fixed),
            TextColumn("{task.fields[eta]}", table_column=Column(no_wrap=True), **fixed),
            TextColumn("{task.description}", table_column=Column(no_wrap=True, overflow="ellipsis", ratio=1,
                                                                 min_width=0), **fixed),
            # no refresh thread: the workers are forked while the bar is up, and a fork must
            # not copy a thread's held lock (of rich or of stderr); the bar redraws as logs finish
            console=console, transient=True, expand=True, auto_refresh=False,
            redirect_stdout=False, redirect_stderr=False)
        self._task = self._bar.add_task("", total=self.total_bytes, **self._fields())
        self._bar.start()
        self._bar.refresh()

    def _fields(self, now: float | None = None) -> dict:
        now = time.monotonic() if now is None else now
        elapsed = max(now - self.start, 1e-6)
        rate = self.bytes / elapsed
        left = (self.total_bytes - self.bytes) / rate if rate > 0 and self.bytes else None
        return {"files": f"{self.files}/{self.total_files} files",
                "sizes": f"{format_size(self.bytes)}/{format_size(self.total_bytes)}",
                "rate": f"{format_size(int(rate))}/s",
                "eta": f"ETA {'?' if left is None else _clock(left)}"}

    def advance(self, files: int, nbytes: int, name: str | None = None) -> None:
        """``files`` more done, ``nbytes`` more read; ``name`` is the log just finished, shown
        made printable (it comes from whoever named the file)."""
        self.files += files
        self.bytes += nbytes
        if name is not None:
            self.name = printable(os.path.basename(name.rstrip("/")) or name)
        if self._bar is None:
            return
        now = time.monotonic()
        if now - self._last >= self.interval or self.files >= self.total_files:
            self._last = now
            self._bar.update(self._task, completed=min(self.bytes, self.total_bytes), description=self.name,
                             refresh=True, **self._fields(now))

    def close(self) -> None:
        """Stop drawing and clear the bar (transient); safe to call twice."""
        bar, self._bar = self._bar, None
        if bar is not None:
            bar.stop()


def _clock(seconds: float) -> str:
    seconds = int(max(0, seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"
