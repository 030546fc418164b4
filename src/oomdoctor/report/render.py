"""One report in one of the output formats, the text one drawn by rich for a terminal
(``terminal=True``: ``terminal.py``) or as plain text; whether a stream takes colour and
rich; whether a stream is a terminal (``isatty``, the one test of it) and one that can be
drawn on (``can_draw``); and the pager for output taller than the terminal.

Imports nothing heavy at the top: the CLI and ``oomdoctor run`` load it at start-up.
"""
from __future__ import annotations

import os
import sys
from typing import IO, Optional


def render(report, fmt: str, *, top: Optional[int] = None, color: Optional[bool] = None,
           verbose: bool = False, terminal: bool = False) -> str:
    """``report`` in ``fmt``. ``terminal``: the text format drawn by rich for a terminal
    (the CLI passes ``use_rich()``); otherwise, and for every other format, the plain output."""
    if fmt == "text" and terminal:
        from .terminal import render_terminal
        return render_terminal(report, top=top, color=bool(color), verbose=verbose)
    if fmt == "json":
        from .json import render_json
        return render_json(report, top=top)
    if fmt == "html":
        from .html import render_html
        return render_html(report, top=top)
    if fmt == "markdown":
        from .markdown import render_markdown
        return render_markdown(report, top=top)
    from .text import render_text
    return render_text(report, top=top, color=color, verbose=verbose)


def use_color(stream=None) -> bool:
    """Colour on ``stream`` (stdout): NO_COLOR set (not empty) says no, then FORCE_COLOR says
    yes, then TERM=dumb says no; otherwise only on a terminal."""
    return not os.environ.get("NO_COLOR") and use_rich(stream)


def use_rich(stream=None) -> bool:
    """Whether text for ``stream`` is drawn by rich (``terminal.py``): on a terminal that is
    not TERM=dumb, or wherever FORCE_COLOR asks for one. Anything else (a pipe, a file) gets
    the plain text, and rich is never imported."""
    stream = stream or sys.stdout
    if os.environ.get("FORCE_COLOR"):
        return True
    return can_draw(stream)


def can_draw(stream) -> bool:
    """Whether ``stream`` is a terminal that can be drawn on (colours, a pager, a progress
    bar): a terminal that is not TERM=dumb."""
    return os.environ.get("TERM") != "dumb" and isatty(stream)


def isatty(stream) -> bool:
    """Whether ``stream`` is a terminal: False for a stream without ``isatty`` or a closed one."""
    try:
        return bool(getattr(stream, "isatty", lambda: False)())
    except ValueError:          # a closed stream
        return False


# -- paging, as git does it ---------------------------------------------------------------------

def pager_command() -> str | None:
    """The pager to run, as git picks it: $OOMDOCTOR_PAGER, $PAGER, else less. None when that is
    empty or ``cat`` (no pager), or not installed (then the text is written as it is)."""
    cmd = os.environ.get("OOMDOCTOR_PAGER")
    if cmd is None:
        cmd = os.environ.get("PAGER")
    if cmd is None:
        cmd = "less"
    cmd = cmd.strip()
    if not cmd or cmd == "cat":
        return None
    import shlex
    import shutil
    try:
        argv = shlex.split(cmd)
    except ValueError:
        return None
    if not argv or shutil.which(argv[0]) is None:
        return None
    return cmd


def wants_pager(text: str, flag: bool | None, stream: IO[str] | None = None) -> bool:
    """``--pager``/``--no-pager`` decide; otherwise page, as git does, only output that is
    taller than the terminal it goes to, never into a pipe or a file."""
    if flag is not None:
        return flag
    if not can_draw(stream or sys.stdout):
        return False
    from .common import terminal_size
    lines = text.count("\n") + (0 if text.endswith("\n") else 1)
    return lines >= terminal_size().lines


def page(text: str, stream: IO[str] | None = None) -> None:
    """Show ``text`` through the pager (``less -FRX`` unless $LESS says otherwise), or write it
    as it is when there is no pager to run."""
    stream = stream or sys.stdout
    cmd = pager_command()
    if cmd is None:
        stream.write(text)
        stream.flush()
        return
    import subprocess
    env = dict(os.environ)
    env.setdefault("LESS", "FRX")       # quit if one screen, keep colours, do not clear the screen
    env.setdefault("LV", "-c")
    stream.flush()
    proc = subprocess.Popen(cmd, shell=True, stdin=subprocess.PIPE, env=env)
    assert proc.stdin is not None
    try:
        proc.stdin.write(text.encode(getattr(stream, "encoding", None) or "utf-8", "replace"))
    except BrokenPipeError:             # the pager quit before reading everything
        pass
    finally:
        try:                            # always: a pager left waiting for the end of its input never quits
            proc.stdin.close()
        except OSError:                 # BrokenPipeError flushing what was left
            pass
    while True:
        try:
            proc.wait()
            break
        except KeyboardInterrupt:       # Ctrl-C in less is for less
            continue

