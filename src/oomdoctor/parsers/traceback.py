"""Traceback frames: plain Python, IPython/Jupyter, rank-prefixed and interleaved.

Every frame line is parsed once into ``ctx.all_frames`` (with the code line under it and
the rank that printed it). Which frames belong to *the* failure is decided later by
``frames_for()``, once the failure families have said where the failure is: the frames
printed by the same rank between the last "Traceback" header and the failure line.
Interleaved ranks print the same frames in a different order; keeping the rank and the
order of first appearance is enough to tell the innermost frames.
"""
from __future__ import annotations

from typing import Optional

from ..facts.models import Frame
from ..read.patterns import lazy
from .base import ParseContext

_PY = lazy(r"^\s*File \"(?P<file>[^\"]+)\", line (?P<lineno>\d+), in (?P<func>\S.*?)\s*$")
# ... its quotes made typographic by a rich-text editor or a renderer ('File “/x/chat.py”, line 56,
# in chat_tab'), often with the code line joined on ("..., in chat_tab cfg, model = load(")
_PY_TYPOGRAPHIC = lazy(r"^\s*File [“”\"](?P<file>[^“”\"]+)[“”\"], line (?P<lineno>\d+), in (?P<func>[\w.<>]+)"
                       r"(?:\s+(?P<code>\S.*?))?\s*$")
# IPython 8: "File ~/x/torch/nn/modules/module.py:1501, in Module._call_impl(self, ...)"
_IPY = lazy(r"^\s*File (?P<file>[^\s,]+?):(?P<lineno>\d+),? in (?P<func>[\w.<>]+)")
# IPython 7: "/path/to/file.py in func(args)", and the notebook's own cell ("<ipython-input-7-cb15820>
# in <module>()"; from IPython 7.x without the arguments: "<ipython-input-5-b55beed0db1e> in <module>")
# (one name for the group in both forms: the regex module numbers them as one)
_IPY7 = lazy(r"^\s*(?:(?P<file>[/~][^\s]+\.py) in (?P<func>[\w.<>]+)\("
             r"|(?P<file><ipython-input-\d{1,6}-[0-9a-f]{1,40}>) in (?P<func>[\w.<>]{1,200})(?:\(|\s*$))")
# a frame whose 'File "..."' part (and the head of its path) was cut off when the log was
# pasted: "line 3479, in cross_entropy", 'efficient_cross_entropy.py", line 108, in forward'
_BARE = lazy(r"^\s*(?:(?P<file>[^\s\"]{1,1000}\.py)\",\s)?line (?P<lineno>\d+), in (?P<func>[\w.<>]+)\s*$")
# rich's boxed tracebacks: "│ /path/to/trainer.py:1539 in train   │" (a frame per box line)
_RICH = lazy(r"^\s*[│┃|]\s+(?P<file>[^\s│┃|]+?\.py):(?P<lineno>\d+) in (?P<func>[\w.<>]+)\s*(?:[│┃|]\s*)?$")
# ... whose function rich wrapped onto the next box line when the path filled the box
# (its left edge, and the path's head, lost where a paste begins mid-line: "harness/lm_eval/utils.py:388 in   │")
_RICH_CUT = lazy(r"^\s*(?:[│┃|]\s+)?(?P<file>[^\s│┃|]+?\.py):(?P<lineno>\d+) in\s*[│┃|]\s*$")
# ... and its source context: "│   278 │   trainer.train(...)   │", "│ ❱ 280 │   model.save_pretrained(output_dir)   │"
# (the code runs to the box's right edge: rich_code() strips the padding and the edge in Python,
# where a lazy group before optional padding would backtrack over every space of a long line)
RICH_CODE = lazy(r"^\s*[│┃|]\s*(?:❱\s*)?\d{1,6}\s*[│┃|]\s?(?P<code>.*)$")
# ... or the line number itself, its rest on the next box line with the function
# ("│ /site-packages/transformers/trainer.py:283 │" then "│ 0 in save_model │")
_RICH_CUT_NO = lazy(r"^\s*[│┃|]\s+(?P<file>[^\s│┃|]+?\.py):(?P<lineno>\d+)\s*[│┃|]\s*$")
_RICH_NO_REST = lazy(r"^\s*[│┃|]\s+(?P<rest>\d{0,6}) in (?P<func>[\w.<>]+)\s*[│┃|]\s*$")
_RICH_FUNC = lazy(r"^\s*[│┃|]\s+(?P<func>[\w.<>]+)\s*[│┃|]\s*$")
# Colab: "[/usr/.../operations.py](https://localhost:8080/#) in _convert_to_fp32(tensor)"
_COLAB = lazy(r"^\s*\[(?P<file>[^\]\s]+)\]\([^)\s]*\) in (?P<func>[\w.<>][\w.<> :]*?)\(")
# IPython marks the line that was running: "--> 781         return tensor.float()"
ARROW = lazy(r"^\s*-+>\s*\d+\s+(?P<code>\S.*)$")
_CELL = lazy(r"^\s*(?:Cell In\s*\[\d*\]|Input In \[\d*\]), line (?P<lineno>\d+)")
_HEADER = lazy(r"Traceback \(most recent call last\)|^-{20,}\s*$|^\w*(?:Error|Exception)\s+Traceback \(most recent call last\)")
# Python 3.11+'s marker line under a frame's code ("    ^^^^^^^^^^^^")
CARET = lazy(r"^\s*[\^~\s]+$")
# torch's NCCL flight recorder prints the Python stack of a failed collective innermost
# first: "#2 sync_all_async_calls from /x/megatron/core/dist_checkpointing/async_utils.py:149"
# faulthandler's dump of a fatal error ("Fatal Python error: Aborted", "Current thread ...
# (most recent call first):"), innermost first: '  File "x.py", line 166 in train'
_FAULT = lazy(r"^\s*File \"(?P<file>[^\"]+)\", line (?P<lineno>\d+) in (?P<func>[\w.<>]{1,200})\s*$")
_RECORDER = lazy(r"^\s*#(?P<n>\d{1,3}) (?P<func>[\w.<>]{1,200}) from (?P<file>\S+?\.py):(?P<lineno>\d+)\s*$")
# VS Code's debugger (debugpy) reports an exception as "Exception has occurred: OutOfMemoryError",
# its message, then the frames innermost first in the usual 'File "x.py", line N, in f' form
_DEBUGGER = "Exception has occurred:"


def rich_code(m) -> str:
    """The code of a RICH_CODE match, without the padding and the box's right edge."""
    code = m.group("code").strip()
    return code[:-1].rstrip() if code.endswith(("│", "┃", "|")) else code


def parse(ctx: ParseContext) -> None:
    frames: list[Frame] = []
    headers: list[int] = []
    lines = ctx.lines
    stack: list[tuple[int, Frame]] = []   # a flight-recorder or faulthandler stack (innermost first)
    debugger: Optional[int] = None        # where the frames of a debugger's report (innermost first) begin
    joined_to = -1   # the last line a hard-wrapped frame was rejoined from: not a frame of its own
    for i, ln in enumerate(lines):
        text = ln.text
        if i <= joined_to:
            continue
        if debugger is not None and len(frames) > debugger and not _in_frame_block(lines, i):
            # the report's frames end at the first line that is neither a frame nor its code
            _outermost_first(ctx, frames, debugger)
            debugger = None
        if "occurred:" in text and text.lstrip(" \t`>").startswith(_DEBUGGER):
            _flush(ctx, frames, stack)
            _outermost_first(ctx, frames, debugger)
            debugger = len(frames)
        m = _stack_line(text)
        if m is None:
            if stack:
                _flush(ctx, frames, stack)
        else:
            if not stack or m.groupdict().get("n") == "0":   # a new stack
                _flush(ctx, frames, stack)
                headers.append(i)
            stack.append((i, Frame(file=m.group("file"), lineno=int(m.group("lineno")),
                                   function=m.group("func"), line=ln.no)))
            continue
        if "File" not in text and "Traceback" not in text and "Cell In" not in text and ".py in " not in text \
                and "<ipython-input-" not in text \
                and ".py:" not in text and "](" not in text and not (i < 3 and "line " in text):
            continue
        if _HEADER.search(text):
            headers.append(i)
            continue
        m = _PY.match(text)
        joined_code = None
        if m is None and ("“" in text or "”" in text) and (m := _PY_TYPOGRAPHIC.match(text)):
            joined_code = m.group("code")
        # IPython >= 8 ("File path:12, in f(x)") prints context lines: the arrow marks the code
        ipython8 = m is None and bool(m := _IPY.match(text))
        rich = m is None and bool(m := _RICH.match(text))
        if m is None and ".py:" in text and i + 1 < len(lines) and (wrapped := _rich_wrapped(text, lines[i + 1].text)):
            file, lineno, func = wrapped
            frames.append(Frame(file=file, lineno=lineno, function=func[:200], code=None, line=ln.no))
            ctx.frame_index.append(i)
            continue
        last = i   # the frame's last line (its code, if printed, is on the next)
        if m is None and i + 1 < len(lines) and ('File "' in text or text.strip() == "File"):
            # a frame hard-wrapped by the terminal (mid-word), the issue tracker (at a space it
            # dropped) or a logger wrapping its column at a word ("File" alone, the quoted path
            # on the next row): rejoin it
            # (in a column every row is indented: there the indent is the layout's, not the text's)
            for sep, strip in (("", False), (" ", False), ("", True)):
                joined = text
                for j in range(i + 1, min(len(lines), i + 3)):
                    piece = lines[j].text.lstrip() if strip else lines[j].text
                    joined += (" " if joined.strip() == "File" else sep) + piece
                    m = _PY.match(joined)
                    if m:
                        last = joined_to = j
                        break
                if m:
                    break
        func = file = None
        lineno: Optional[int] = None
        ipython = ipython8
        if m:
            file, func = m.group("file"), m.group("func")
            lineno = int(m.group("lineno"))
        else:
            m = _IPY7.match(text) or _COLAB.match(text)
            bare = _BARE.match(text) if not m and i < 3 else None
            if m:
                file, func = m.group("file"), m.group("func")
                ipython = True
            elif bare:
                file, func, lineno = bare.group("file") or "<unknown>", bare.group("func"), int(bare.group("lineno"))
            else:
                m = _CELL.match(text)
                if not m:
                    continue
                file, func, lineno = "<cell>", "<cell>", int(m.group("lineno"))
                ipython = True   # its context lines follow; the arrow marks the one that ran
        code = joined_code[:300] if joined_code else None
        if ipython:
            # IPython prints context lines; the arrow marks the one that ran
            for j in range(i + 1, min(len(lines), i + 10)):
                a = ARROW.match(lines[j].text)
                if a:
                    code = a.group("code").strip()[:300]
                    break
                nxt = lines[j].text   # the next frame or traceback: this frame printed no source
                if (_PY.match(nxt) or _IPY.match(nxt) or _CELL.match(nxt) or _COLAB.match(nxt) or _IPY7.match(nxt)
                        or _HEADER.search(nxt)):
                    break
        if rich:
            # rich prints source context in the box; "❱" marks the line that ran
            for j in range(i + 1, min(len(lines), i + 16)):
                t = lines[j].text
                if "❱" in t:
                    c = RICH_CODE.match(t)
                    code = rich_code(c)[:300] if c else None
                    break
                if _RICH.match(t):
                    break
        if code is None and not ipython and last + 1 < len(lines):   # IPython's next lines are context
            nxt = lines[last + 1].text
            if nxt.strip() and not _PY.match(nxt) and not CARET.match(nxt) and nxt[:1].isspace():
                code = nxt.strip()[:300]
        frames.append(Frame(file=file, lineno=lineno, function=func.strip()[:200], code=code, line=ln.no))
        # remember which logical line index this frame came from (for rank lookup)
        ctx.frame_index.append(i)
    _flush(ctx, frames, stack)
    _outermost_first(ctx, frames, debugger)
    ctx.all_frames = frames
    ctx.tb_headers = headers


def _rich_wrapped(text: str, nxt: str) -> Optional[tuple[str, int, str]]:
    """A rich frame that rich wrapped onto the next box line when the path filled the box:
    (file, line number, function), the function alone or with the line number's last digits
    on the next line."""
    cut = _RICH_CUT.match(text) if " in" in text else None
    if cut and (rest := _RICH_FUNC.match(nxt)):
        return cut.group("file"), int(cut.group("lineno")), rest.group("func")
    cut = _RICH_CUT_NO.match(text)
    if cut and (rest := _RICH_NO_REST.match(nxt)):
        return cut.group("file"), int(cut.group("lineno") + rest.group("rest")), rest.group("func")
    return None


def _in_frame_block(lines, i: int) -> bool:
    """Line ``i`` is a 'File "..."' frame, or the code line or caret line under one."""
    text = lines[i].text
    if _PY.match(text):
        return True
    return i > 0 and bool(text[:1].isspace() and text.strip()) and (
        bool(_PY.match(lines[i - 1].text)) or (i > 1 and bool(_PY.match(lines[i - 2].text)) and bool(CARET.match(text))))


def _outermost_first(ctx: ParseContext, frames: list[Frame], start: Optional[int]) -> None:
    """The frames of a debugger's report from ``start`` on, turned outermost first."""
    if start is not None and len(frames) - start > 1:
        frames[start:] = frames[start:][::-1]
        ctx.frame_index[start:] = ctx.frame_index[start:][::-1]


def _stack_line(text: str):
    """A frame of a stack printed innermost first (faulthandler, NCCL's flight recorder)."""
    if '", line ' in text and ", in " not in text:
        return _FAULT.match(text)
    if " from " in text and text.lstrip().startswith("#"):
        return _RECORDER.match(text)
    return None


def _flush(ctx: ParseContext, frames: list[Frame], stack: list[tuple[int, Frame]]) -> None:
    """A flight-recorder or faulthandler stack, outermost first like a Python traceback."""
    for i, fr in reversed(stack):
        frames.append(fr)
        ctx.frame_index.append(i)
    stack.clear()


def frames_for(ctx: ParseContext, failure_line: int, rank: Optional[int] = None, limit: int = 400) -> list[Frame]:
    """Frames of the traceback that ends at ``failure_line`` (outermost first)."""
    idx = ctx.index_of(failure_line)
    if idx is None:
        return []
    start = max(0, idx - limit)
    # the last traceback header before the failure bounds it, unless frames of the same
    # failure are interleaved with another header (several ranks): then widen to the
    # earliest header in a contiguous block of tracebacks
    if idx in ctx.tb_headers:
        # IPython prints the header first and the message last: the frames follow it
        nxt = [h for h in ctx.tb_headers if h > idx]
        start, idx = idx, (nxt[0] - 1 if nxt else min(len(ctx.lines) - 1, idx + limit))
    hdrs = [h for h in ctx.tb_headers if start <= h <= idx]
    if not hdrs and not any(start <= li <= idx for li in ctx.frame_index):
        # the error was posted above its traceback: take the traceback that follows
        nxt = [li for li in ctx.frame_index if idx < li <= idx + limit]
        if nxt:
            start, idx = idx, _traceback_end(ctx, nxt[0])
    if hdrs:
        start = hdrs[0] if rank is None and len(hdrs) > 1 and _contiguous(ctx, hdrs, idx) else hdrs[-1]
    out: list[Frame] = []
    seen: set[tuple[str, str, Optional[int]]] = set()
    for fr, li in zip(ctx.all_frames, ctx.frame_index):
        if li < start or li > idx:
            continue
        if rank is not None and ctx.lines[li].rank is not None and ctx.lines[li].rank != rank:
            continue
        key = (fr.file, fr.function, fr.lineno)
        if key in seen:
            continue
        seen.add(key)
        out.append(fr)
    return out


def _contiguous(ctx: ParseContext, hdrs: list[int], idx: int) -> bool:
    """True when the headers are close together (interleaved ranks), not separate errors."""
    return hdrs[-1] - hdrs[0] < 200 and idx - hdrs[0] < 400


_EXC_LINE = lazy(r"^\s*(?:[A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit)\b:?|Exception(?::|\s*$))")


def _traceback_end(ctx: ParseContext, first_frame: int) -> int:
    """Index of the line that ends the traceback starting at ``first_frame`` (its exception)."""
    for j in range(first_frame, min(len(ctx.lines), first_frame + 600)):
        text = ctx.lines[j].text
        if j > first_frame and (_EXC_LINE.match(text) or _HEADER.search(text)):
            return j
    return min(len(ctx.lines) - 1, first_frame + 600)
