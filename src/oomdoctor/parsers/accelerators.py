"""Out-of-memory messages of the non-CUDA stacks: Apple MPS, XLA (JAX, torch_xla, TPU) and
TensorFlow (log-formats.md §1.7, §2.5, §2.6).

The PyTorch caching-allocator message is not read here (``torch_alloc``). What these
stacks share: sizes printed in their own notation (MPS ``GB`` that means GiB before torch
2.8; XLA's ``1.52GiB`` / ``6.48G`` glued to the number), messages that terminals wrap,
and the same message printed again by every device and by "recent error logs". Each
distinct message becomes one event; its copies add ranks, a count and evidence.
"""
from __future__ import annotations

from typing import Callable, NamedTuple, Optional

import regex as re

from ..facts.models import OomEvent
from ..facts.sizes import format_size, to_bytes
from ..read.normalise import Line
from ..read.patterns import lazy
from .base import EXC_AT_START as _EXC_AT_START, EXCEPTION_CLASS, ParseContext

# A size as these stacks print it: "9.48 GiB", "375.40 MB", "256 bytes", "1.52GiB", "6.48G", "0B".
_NUM = r"\d[\d,]{0,20}(?:\.\d{1,6})?"
_UNIT = r"(?:[KMGTPE]i?B|[Bb]ytes?|B|[KMGTPE])(?![A-Za-z])"
_SIZE = rf"{_NUM}\s*{_UNIT}"
_SIZE_PARTS = lazy(rf"(?P<num>{_NUM})\s*(?P<unit>{_UNIT})")

# Exception class printed before the message on the same line ("RuntimeError: ...").
_EXC_AT_END = lazy(r"(" + EXCEPTION_CLASS + r"):\s*$")

# -- MPS -------------------------------------------------------------------------------
_MPS_START = lazy(r"MPS\s*backend\s*out\s*of\s*memory", re.I)
# Whitespace is optional everywhere: the message is joined across hard wraps without a
# separator, so a wrap that ate a space must still match.
_MPS = lazy(
    r"MPS\s*backend\s*out\s*of\s*memory\s*\(\s*MPS\s*allocated:\s*(?P<alloc>" + _SIZE + r")\s*,"
    r"\s*other\s*allocations:\s*(?P<other>" + _SIZE + r")\s*"
    r"(?:,\s*max\s*allowed:\s*(?P<max>" + _SIZE + r")\s*)?\)\s*\.?\s*"
    r"(?:Tried\s*to\s*allocate\s*(?P<req>" + _SIZE + r")\s*on\s*(?P<pool>shared|private)\s*pool)?",
    re.I,
)
_MPS_HINT = lazy(r"Use\s*PYTORCH_MPS_HIGH_WATERMARK_RATIO\s*=\s*0\.0[^.]{0,200}\.?(?:\s*\(may\s*cause\s*system\s*failure\)\.?)?")

# -- XLA / JAX / torch_xla ------------------------------------------------------------------
# older XLA prints bytes; from about jax 0.7 the TF allocator adapter prints a size with its
# unit, the allocator and the device ("... allocate 29.71GiB with allocator GPU_0_bfc on device 0.")
_XLA_OOM_BYTES = lazy(
    r"Out of memory while trying to allocate (?:(?P<n>\d[\d,]{0,20}) bytes|(?P<size>\d{1,9}(?:\.\d{1,4})? ?(?:[KMGTPE]i?)?B))"
    r"(?: with allocator \S{1,40} on device (?P<dev>\d{1,4}))?")
_XLA_REQUEST = lazy(
    r"Failed to allocate request for (?P<size>" + _SIZE + r")\s*\((?P<n>\d{1,20})\s*B\) on device ordinal (?P<dev>\d{1,4})")
# TPU runtime (torch_xla / XRT / PJRT): "Attempting to reserve 6.48G at the bottom of
# memory. That was not possible. There are 6.78G free, 0B reserved, and 3.33G reservable."
_XLA_ATTEMPT = lazy(
    r"Attempting to (?P<verb>reserve|allocate) (?P<req>" + _SIZE + r")(?: at the bottom of memory)?\.?"
    r"\s*That was not possible\.?\s*There (?:are|is) (?P<free>" + _SIZE + r") free"
    r"(?:,\s*(?P<reserved>" + _SIZE + r") reserved,\s*and (?P<reservable>" + _SIZE + r") reservable)?")
# Compile-time: "Ran out of memory in memory space hbm. Used 20.61G of 15.48G hbm.
# Exceeded hbm capacity by 5.13G."
_XLA_USED = lazy(
    r"Used (?P<used>" + _SIZE + r") of (?P<cap>" + _SIZE + r") (?P<space>hbm|vmem|smem|memory)"
    r"(?:\.\s*Exceeded \w{1,10} capacity by (?P<over>" + _SIZE + r"))?", re.I)
# XLA's (and TensorFlow's) asynchronous CUDA allocator, TF_GPU_ALLOCATOR=cuda_malloc_async:
# "gpu_async_0 cuMemAllocAsync failed to allocate 46137344 bytes: RESOURCE_EXHAUSTED: ...",
# then the driver's figures (" Reported by CUDA: Free memory/Total memory: 1441792/25231032320")
# and the allocator's own ("Stats: Limit: ...", "InUse: 6036292612"): what the card held
# beyond this allocator is someone else's
_XLA_ASYNC = lazy(r"gpu_async_(?P<dev>\d{1,3}) cuMemAllocAsync failed to allocate (?P<n>\d{1,20}) bytes:"
                  # (its result must be the driver's out of memory: an illegal address fails the same call)
                  r"[^\n]{0,60}?(?:RESOURCE_EXHAUSTED|OUT_OF_MEMORY|out of memory)")
_XLA_ASYNC_FREE = lazy(r"Free memory/Total memory: (?P<free>\d{1,20})/(?P<total>\d{1,20})")
_XLA_ASYNC_IN_USE = lazy(r"^\s*InUse:\s+(?P<n>\d{1,20})\s*$")
# The memory report XLA appends to a compile-time out-of-memory error ("Program hbm
# requirement 31.66G:", then "Largest program allocations in hbm:"): pasted without the
# error line above it, it still says the program did not fit.
_XLA_REPORT = lazy(r"^\s*Program (?P<space>hbm|vmem) requirement (?P<req>" + _SIZE + r"):")
# one row of that report's entries, for the program's buffers
_XLA_REPORT_ROW = lazy(r"^\s*(?:Allocation type: HLO (?:temp|param|output|constant)\b|XLA [Ll]abel: \S)")
# (TensorFlow raises the status as its exception class: "ResourceExhaustedError: failed to allocate memory")
_XLA_STATUS = lazy(r"RESOURCE_EXHAUSTED|Resource exhausted|(?<!errors\.)(?<!except )(?P<tf>ResourceExhausted)(?=Error\b)", re.I)
_XLA_MEMORYISH = lazy(r"memory|allocat", re.I)
# messages under that status that other readers own: TensorFlow's OOM (its shape and device, read
# above) and PaddlePaddle's CPU allocator (the host's memory: parsers/host.py)
_STATUS_READ_ELSEWHERE = ("OOM when allocating", "Fail to alloc memory of")
# ... and one that is no failure: XLA's autotuner reporting a candidate convolution whose
# workspace did not fit, which it drops before going on ("Failed to determine best cudnn
# convolution algorithm: Resource exhausted: Allocating N bytes exceeds the memory limit ...
# Convolution performance may be suboptimal")
_STATUS_NO_FAILURE = ("best cudnn convolution algorithm",)
# BFC allocator. The fatal line has "(rounded to N)requested by op"; the non-fatal warning
# says "with freed_by_count=N. The caller indicates that this is not a failure". TensorFlow 1.x
# named no allocator: "Ran out of memory trying to allocate 720.00MiB.  See logs for memory state."
# Intel's extension for TensorFlow (ITEX) names none either: "E itex/core/devices/bfc_allocator.cc:101]
# Allocator ran out of memory trying to allocate 10529419660 Bytes (rounded to 10529419776 Bytes)"
_BFC = lazy(
    r"(?:Allocator (?:\((?P<alloc>[\w:]{1,40})\) )?r|\bR)an out of memory trying to allocate (?P<size>" + _SIZE + r")"
    r"(?:\s*\(rounded to (?P<n>\d{1,20})(?: [Bb]ytes)?\))?(?:\s*requested by op\s*(?P<op>\S{0,200}))?")
_BFC_NOT_FAILURE = lazy(r"freed_by_count|not a failure", re.I)
# a "not a failure" warning counts when the log stops in a traceback whose header is at most
# _HEADER_REACH lines under it, and the log ends within _CUT_REACH lines of it
_HEADER_REACH, _CUT_REACH = 4, 40
_BUFFER_ASSIGNMENT = lazy(r"BufferAssignment OOM Debugging|BufferAssignment stats:")
_BUFFER_TOTAL = lazy(r"^\s*total allocation:\s*(?P<size>" + _SIZE + r")")
_TF_HINT = lazy(r"Hint: If you want to see a list of allocated tensors when OOM happens.{0,200}")
_DEVICE_IN_NAME = lazy(r"(?:GPU|TPU|XLA_GPU|device)[_:](?P<d>\d{1,4})", re.I)

# -- TensorFlow ---------------------------------------------------------------------------
# (TensorFlow 0.x printed no shape: "Compute status: Resource exhausted: OOM when allocating
# tensor with shape" ends its line)
_TF_OOM_NO_SHAPE = lazy(r"Resource exhausted: OOM when allocating tensor with shape\s*$")
# (TensorFlow 2's kernels that make a constant say "tensor of shape [] and type float")
_TF_OOM = lazy(
    r"OOM when allocating tensor (?:with|of) shape\s*(?P<shape>\[[\d,\s]{0,200}\])"
    r"(?:\s*and type (?P<dtype>\w{1,20}))?(?:\s*on (?P<device>[\w/:.-]{1,200}))?(?:\s*by allocator (?P<alloc>\w{1,40}))?")
_TF_DTYPE_BYTES = {
    "float": 4, "float32": 4, "half": 2, "float16": 2, "bfloat16": 2, "double": 8, "float64": 8,
    "int8": 1, "uint8": 1, "bool": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4,
    "int64": 8, "uint64": 8, "complex64": 8, "complex128": 16, "qint8": 1, "quint8": 1, "qint32": 4,
}

_MAX_EVIDENCE = 12
_FOLD_WINDOW = 300  # lines: a BFC failure and the status it turns into belong together


def size_of(text: Optional[str]) -> Optional[int]:
    """Bytes of one size in the notation of these stacks (binary factors throughout)."""
    if not text:
        return None
    m = _SIZE_PARTS.search(text)
    if not m:
        return None
    return to_bytes(m.group("num"), m.group("unit"))


def exception_before(ctx: ParseContext, text: str, pos: int) -> Optional[str]:
    """The exception class printed right before position ``pos`` on the same line."""
    m = ctx.search(_EXC_AT_END, text[max(0, pos - 300):pos])
    return m.group(1) if m else None


class _Events:
    """Events of this family keyed by their message; copies fold into the first."""

    def __init__(self, ctx: ParseContext):
        self.ctx = ctx
        self.by_key: dict[tuple, OomEvent] = {}

    def add(self, key: tuple, idx: int, make, extra_idx: tuple[int, ...] = (),
            exception: Optional[str] = None) -> OomEvent:
        ctx = self.ctx
        line = ctx.lines[idx]
        ev = self.by_key.get(key)
        if ev is None:
            ev = make()
            ev.line = line.no
            self.by_key[key] = ev
            ctx.facts.oom_events.append(ev)
        else:
            ev.count += 1
        if ev.exception is None and exception:
            ev.exception = exception  # a log line first, the raised exception later
        if line.rank is not None and line.rank not in ev.ranks:
            ev.ranks.append(line.rank)
        for j in (idx, *extra_idx):
            self.cover(ev, j)
        return ev

    def cover(self, ev: OomEvent, idx: int) -> None:
        no = self.ctx.lines[idx].no
        if len(ev.evidence) < _MAX_EVIDENCE and all(e.line != no for e in ev.evidence):
            ev.evidence.append(self.ctx.evidence(idx))


def _lines_of(offsets: list[int], start: int, end: int) -> list[int]:
    """Indexes (relative to the join start) of the joined lines that [start, end) spans."""
    out = []
    for k, off in enumerate(offsets):
        nxt = offsets[k + 1] if k + 1 < len(offsets) else 1 << 62
        if off < end and nxt > start:
            out.append(k)
    return out


def _mps_start(ctx: ParseContext, i: int) -> Optional[int]:
    """Where on line ``i`` an MPS OOM message starts, even when a wrap splits its first words."""
    text = ctx.lines[i].text
    if "MPS" in text:
        m = ctx.search(_MPS_START, text)
        if m:
            return m.start()
    tail = text[-30:]
    if "M" not in tail or i + 1 >= len(ctx.lines):
        return None
    joined = tail + ctx.lines[i + 1].text[:40]
    m = ctx.search(_MPS_START, joined)
    if m and m.start() < len(tail):
        return len(text) - len(tail) + m.start()
    return None


def _parse_mps(ctx: ParseContext, events: _Events) -> None:
    i = 0
    n = len(ctx.lines)
    while i < n:
        text = ctx.lines[i].text
        start = _mps_start(ctx, i)
        if start is None:
            i += 1
            continue
        joined, offsets = ctx.join(i, max_lines=6, max_chars=3000)
        m = ctx.search(_MPS, joined)
        if not m or m.start() >= len(text):
            # the words without the figures: still an MPS OOM, sizes unknown
            key = ("mps", "bare")
            events.add(key, i, lambda: OomEvent(kind="mps", backend="MPS", line=0,
                                                exception=exception_before(ctx, text, start)))
            i += 1
            continue
        hint = ctx.search(_MPS_HINT, joined, m.end())
        if hint and hint.start() - m.end() >= 40:
            hint = None
        span = _lines_of(offsets, m.start(), hint.end() if hint else m.end())
        units = " ".join(g for g in m.group("alloc", "other", "max", "req") if g)
        if re.search(r"\d\s*[KMGT]iB", units):
            fmt = "mps-torch>=2.8"
        elif re.search(r"\d\s*[KMGT]B", units):
            fmt = "mps-torch<=2.7"
        else:
            fmt = None
        pool = m.group("pool")
        details = []
        if pool:
            details.append(f"{pool.lower()} pool")
        if m.group("max") is None:
            details.append("no max allowed: high-watermark limit disabled")

        def make(m=m, text=text, hint=hint, fmt=fmt, details=details, pos=start):
            return OomEvent(
                kind="mps", backend="MPS", line=0, message_format=fmt,
                exception=exception_before(ctx, text, pos),
                allocated_by_pytorch_bytes=size_of(m.group("alloc")),
                other_allocations_bytes=size_of(m.group("other")),
                total_capacity_bytes=size_of(m.group("max")),
                tried_to_allocate_bytes=size_of(m.group("req")),
                hint=hint.group(0).strip() if hint else None,
                detail="; ".join(details) or None,
            )

        key = ("mps",) + tuple(re.sub(r"\s+", "", g or "") for g in m.group("alloc", "other", "max", "req", "pool"))
        events.add(key, i, make, tuple(i + k for k in span[1:]))
        i += max(1, len(span))


def _attach_hint(ctx: ParseContext, ev: OomEvent, idx: int) -> None:
    if ev.hint is not None:
        return
    for j in range(idx, min(len(ctx.lines), idx + 6)):
        h = ctx.search(_TF_HINT, ctx.lines[j].text)
        if h:
            ev.hint = h.group(0).strip()
            return


# every branch below and in _xla_event tests one of these first ("allocat" covers
# TensorFlow "allocating" and the BFC "allocate" messages)
_XLA_TF_LITERALS = ("allocat", "BufferAssignment", "not possible", "Used ", "ESOURCE", "esource", "OOM when",
                    " requirement ", "Dst tensor is not initialized")
# TensorFlow failing to copy a tensor to the GPU because it could not allocate the copy there
# ("InternalError: Failed copying input tensor from /job:localhost/.../device:CPU:0 to
# /job:localhost/.../device:GPU:0 in order to run _EagerConst: Dst tensor is not initialized."):
# the GPU's memory is full (read as raised: after its exception's name, TensorFlow 1's "InternalError
# (see above for traceback): ...", or as one of TensorFlow 2's "N root error(s) found." items,
# "  (0) Internal: ...", "  (0) INTERNAL: ..." from 2.8)
_TF_DST = lazy(r"(?:^|Error:\s{0,3}|Error \(see above for traceback\):\s{0,3}|^\s{0,8}\(\d{1,3}\) (?:Internal|INTERNAL):\s{0,3})(?:Failed copying input tensor from \S{1,200} to \S{0,200}?device:GPU:(?P<d>\d{1,3})"
               r" in order to run \S{1,100}: )?Dst tensor is not initialized")


def _parse_xla_and_tf(ctx: ParseContext, events: _Events) -> None:
    bfc_hits: list[tuple[int, re.Match, bool]] = []
    buffer_dumps: list[int] = []
    for i in ctx.lines_with(_XLA_TF_LITERALS):
        text = ctx.lines[i].text
        if "OOM when" in text:
            m = ctx.search(_TF_OOM, text) or ctx.rejoined(i, _TF_OOM) or ctx.search(_TF_OOM_NO_SHAPE, text)
            if m:
                _tf_event(ctx, events, i, m)
                continue
        if "an out of memory trying to allocate" in text:
            m = ctx.search(_BFC, text)
            if m and not (ctx.search(_BFC_NOT_FAILURE, text) or ctx.rejoined(i, _BFC_NOT_FAILURE, max_lines=2)):
                bfc_hits.append((i, m, False))
            elif m and _stops_in_a_traceback_after(ctx, i):
                # the warning says the allocator will retry, but the log's next lines are a
                # traceback that stops before its error: the retry is what failed, most likely
                bfc_hits.append((i, m, True))
            continue
        if "Dst tensor is not initialized" in text:
            m = ctx.search(_TF_DST, text)
            if m:
                dev = int(m.group("d")) if m.group("d") else None
                events.add(("tensorflow", "dst", dev), i, lambda: OomEvent(
                    kind="xla", backend="TF", line=0, strength="likely", message_format="tf-dst-not-initialized",
                    device_index=dev, exception=_xla_exception(ctx, text, m.start()),
                    detail="TensorFlow could not allocate a tensor's copy on the GPU (Dst tensor is not initialized)"))
            continue
        if "BufferAssignment" in text and ctx.search(_BUFFER_ASSIGNMENT, text):
            if not buffer_dumps or i - buffer_dumps[-1] > 2:  # "OOM Debugging" + "stats:" = one dump
                buffer_dumps.append(i)
            continue
        _xla_event(ctx, events, i, text)
    for i, m, warned in bfc_hits:
        _bfc_event(ctx, events, i, m, warned)
    for i in buffer_dumps:
        _buffer_assignment(ctx, events, i)
    _bfc_limits(ctx)
    if not _tf_events(ctx):
        # the parts of such an error that are printed only with it, when its line is missing
        if not _hint_alone(ctx, events):
            _report_rows_alone(ctx, events)


_DISK_FULL = lazy(r"No space left on device|Disk quota exceeded")


def _disk_full_above(ctx: ParseContext, i: int) -> bool:
    """Does the error the hint at line ``i`` ends say the disk is full? Its lines run up to the
    hint without a blank line (the node line and its wrapped continuations in between)."""
    for j in range(i, max(-1, i - 10), -1):
        text = ctx.lines[j].text
        if not text.strip():
            return False
        if ctx.search(_DISK_FULL, text):
            return True
    return False


def _hint_alone(ctx: ParseContext, events: _Events) -> bool:
    """TensorFlow's and XLA's hint ("... when OOM happens, add report_tensor_allocations_upon_oom")
    ends their resource-exhausted error and nothing else: the tail of an out-of-memory
    message whose head was not pasted."""
    for i in ctx.lines_with(("OOM happens",)):
        text = ctx.lines[i].text
        h = ctx.search(_TF_HINT, text)
        # TensorFlow raises a full disk as ResourceExhaustedError too, with the same hint
        # ("...data-00000-of-00001.tempstate...; No space left on device"): that is no memory
        if h and _disk_full_above(ctx, i):
            continue
        if h:
            xla = "xla" in text.lower() or any("XLA label" in ln.text for ln in ctx.lines[max(0, i - 40):i])
            events.add(("hint",), i, lambda xla=xla, hint=h.group(0).strip(): OomEvent(
                kind="xla", backend="XLA" if xla else None, line=0, strength="likely",
                message_format="oom-hint", hint=hint,
                detail="the end of a resource-exhausted error (its allocation hint); the error line was not pasted"))
            return True
    return False


# The BFC allocator (TensorFlow's, and XLA's under JAX) dumps its chunks only when an
# allocation has failed (its "not a failure" warning prints none): "bfc_allocator.cc:665] Chunk
# at 0000000C0439DD00 of size 983040", "InUse at 7f2b8e000000 of size 1280 next 1", TF 2's
# "Free  at ...", "Sum Total of in-use chunks: 10.25GiB"
_BFC_DUMP_ROW = lazy(r"\b(?:Chunk|InUse|Free)\s+at (?:0x)?[0-9a-fA-F]{6,} of size \d+|\bSum Total of in-use chunks: ")
# ... and the summary it prints with them (its DumpMemoryLog): "total_region_allocated_bytes_:
# 55115776 memory_limit_: 55115776 available bytes: 0 curr_region_allocation_bytes_: 110231552"
_BFC_DUMP_SUMMARY = lazy(r"\btotal_region_allocated_bytes_: \d{1,20} memory_limit_: \d{1,20}")
# the statistics the BFC allocator prints after its dump when an allocation fails ("Stats:", then
# "Limit:  536870912", "InUse:  536786944", "MaxInUse:  536800512", ... "LargestFreeBlock:  0"),
# read from its MaxInUse row with the Limit and InUse rows above it
_BFC_STATS_ROW = lazy(r"^\s*MaxInUse:\s+\d{1,20}\s*$")
_BFC_STATS_LIMIT = lazy(r"^\s*Limit:\s+(?P<n>\d{1,20})\s*$")
_BFC_STATS_IN_USE = lazy(r"^\s*InUse:\s+(?P<n>\d{1,20})\s*$")


class _Report(NamedTuple):
    """A report a runtime prints only under an out-of-memory error: a paste of one whose
    header and error line were cut off still says an allocation failed."""
    literals: tuple[str, ...]                   # what finds its lines
    row: object                                 # the pattern of one of its rows
    accept: Optional[Callable[[Line], bool]]    # what else the line must show
    backend: Callable[[Line], Optional[str]]    # whose report it is, by the line
    message_format: str
    what: str


_REPORTS_ALONE = (
    # XLA's report of a program's largest allocations ("Allocation type: HLO temp", "XLA label: fusion...")
    _Report(("Allocation type: HLO", "XLA label: ", "XLA Label: "), _XLA_REPORT_ROW, None, lambda ln: "XLA",
            "xla-memory-report", "rows of XLA's report of the largest allocations, printed with an out-of-memory error"),
    # the BFC allocator's chunk dump: its rows named by the allocator's source file in the
    # logger's prefix (gone from the text once the prefix is stripped, still in the raw line),
    # or its own total line; TensorFlow's when the path says so
    _Report(("Chunk at", "InUse at", "Free at", "Free  at", "Sum Total of in-use chunks"), _BFC_DUMP_ROW,
            lambda ln: "bfc_allocator" in ln.raw or "Sum Total" in ln.text,
            lambda ln: "TF" if "tensorflow" in ln.raw else None,
            "bfc-memory-dump", "rows of the BFC allocator's memory dump, printed when an allocation fails"),
    _Report(("total_region_allocated_bytes_",), _BFC_DUMP_SUMMARY, None,
            lambda ln: "TF" if "tensorflow" in ln.raw else None,
            "bfc-memory-dump", "the summary of the BFC allocator's memory dump, printed when an allocation fails"),
)


def _report_rows_alone(ctx: ParseContext, events: _Events) -> bool:
    """The rows of a report printed only under an out-of-memory error, its error line not pasted."""
    for rep in _REPORTS_ALONE:
        for i in ctx.lines_with(rep.literals):
            ln = ctx.lines[i]
            if (rep.accept is None or rep.accept(ln)) and ctx.search(rep.row, ln.text):
                events.add((rep.message_format,), i, lambda rep=rep, backend=rep.backend(ln): OomEvent(
                    kind="xla", backend=backend, line=0, message_format=rep.message_format, strength="likely",
                    detail=rep.what + "; the error line was not pasted"))
                return True
    return _bfc_stats_alone(ctx, events)


def _bfc_stats_alone(ctx: ParseContext, events: _Events) -> bool:
    """The BFC allocator's statistics rows (Limit, InUse, MaxInUse), printed only when an
    allocation failed, without the error line: what was in use against the limit."""
    for i in ctx.lines_with(("MaxInUse:",)):
        if not ctx.search(_BFC_STATS_ROW, ctx.lines[i].text):
            continue
        above = [ctx.lines[j].text for j in range(max(0, i - 3), i)]
        limit = next((int(m.group("n")) for t in above if (m := ctx.search(_BFC_STATS_LIMIT, t))), None)
        in_use = next((int(m.group("n")) for t in above if (m := ctx.search(_BFC_STATS_IN_USE, t))), None)
        if limit is None or in_use is None:
            continue
        # (the logger's prefix, with the allocator's source path, is on the "Stats:" line above)
        tf = any("tensorflow" in ctx.lines[j].raw for j in range(max(0, i - 4), i + 1))
        events.add(("bfc-stats",), i, lambda: OomEvent(
            kind="xla", backend="TF" if tf else None, line=0,
            message_format="bfc-allocator-stats", strength="likely",
            detail=f"the BFC allocator's statistics, printed when an allocation fails: {format_size(in_use)} in use "
                   f"of its {format_size(limit)} limit; the error line was not pasted"))
        return True
    return False


# the table the TPU runtime prints under that message: "HBM capacity 8.00G:", then its rows
_HBM_CAPACITY = lazy(r"^\s*HBM capacity (?P<cap>" + _SIZE + r"):")


def _xla_event(ctx: ParseContext, events: _Events, i: int, text: str) -> None:
    m = ctx.search(_XLA_ASYNC, text) if "cuMemAllocAsync failed" in text else None
    if m:
        n, dev = int(m.group("n")), int(m.group("dev"))
        free = ctx.below(i, _XLA_ASYNC_FREE)
        in_use = ctx.below(i, _XLA_ASYNC_IN_USE, lines=4)
        events.add(("xla", "async", n), i, lambda: OomEvent(
            kind="xla", backend="XLA", line=0, message_format="xla-cuda-malloc-async", tried_to_allocate_bytes=n,
            device_index=dev, free_bytes=int(free.group("free")) if free else None,
            total_capacity_bytes=int(free.group("total")) if free else None,
            reserved_total_bytes=int(in_use.group("n")) if in_use else None), exception=_xla_exception(ctx, text, m.start()))
        return
    if "allocate" in text or "Out of memory while" in text:
        m = ctx.search(_XLA_OOM_BYTES, text)
        if m is None and "Out of memory while" in text:
            m = ctx.rejoined(i, _XLA_OOM_BYTES)   # hard-wrapped inside the message
        if m:
            n = int(m.group("n").replace(",", "")) if m.group("n") else size_of(m.group("size"))
            dev = int(m.group("dev")) if m.group("dev") else None
            fmt = "xla-out-of-memory-bytes" if m.group("n") else "xla-out-of-memory-size"
            exc = _xla_exception(ctx, text, m.start())
            ev = events.add(("xla", "bytes", n), i, lambda: OomEvent(
                kind="xla", backend="XLA", line=0, message_format=fmt,
                tried_to_allocate_bytes=n, device_index=dev), exception=exc)
            _attach_hint(ctx, ev, i)
            return
        m = ctx.search(_XLA_REQUEST, text)
        if m is None and "Failed to allocate request" in text:
            m = ctx.rejoined(i, _XLA_REQUEST)
        if m:
            n = int(m.group("n"))
            dev = int(m.group("dev"))
            # (one request refused on several devices, each its own line: one event per device)
            events.add(("xla", "request", n, dev), i, lambda: OomEvent(
                kind="xla", backend="XLA", line=0, message_format="xla-failed-to-allocate-request",
                tried_to_allocate_bytes=n, device_index=dev), exception=_xla_exception(ctx, text, m.start()))
            return
    if "not possible" in text:
        m = ctx.search(_XLA_ATTEMPT, text)
        if m:
            detail = None
            if m.group("reservable"):
                detail = f"only {m.group('reservable')} reservable of {m.group('free')} free"
            cap = ctx.below(i, _HBM_CAPACITY)   # the table under it: "HBM capacity 8.00G:"
            ev = events.add(("xla", "attempt", m.group("req"), m.group("free")), i, lambda: OomEvent(
                kind="xla", backend="XLA", line=0, message_format=f"tpu-attempting-to-{m.group('verb')}",
                tried_to_allocate_bytes=size_of(m.group("req")), free_bytes=size_of(m.group("free")),
                total_capacity_bytes=size_of(cap.group("cap")) if cap else None, detail=detail), exception=_xla_exception(ctx, text, m.start()))
            _attach_hint(ctx, ev, i)
            return
    if "Used " in text:
        m = ctx.search(_XLA_USED, text)
        if m and (ctx.search(_XLA_STATUS, text) or "Ran out of memory" in text or m.group("over")):
            detail = f"program needs {m.group('used')} of {m.group('cap')} {m.group('space')}"
            if m.group("over"):
                detail += f", over by {m.group('over')}"
            events.add(("xla", "used", m.group("used"), m.group("cap")), i, lambda: OomEvent(
                kind="xla", backend="XLA", line=0, message_format="xla-compile-memory-space",
                tried_to_allocate_bytes=size_of(m.group("used")), total_capacity_bytes=size_of(m.group("cap")),
                detail=detail), exception=_xla_exception(ctx, text, m.start()))
            return
    if " requirement " in text:
        m = ctx.search(_XLA_REPORT, text)
        # after its error line the report adds nothing: it is read only where it stands alone
        if m and not any(e.kind == "xla" and e.line < ctx.lines[i].no for e in ctx.facts.oom_events):
            events.add(("xla", "report", m.group("req")), i, lambda: OomEvent(
                kind="xla", backend="XLA", line=0, message_format="xla-memory-report", strength="likely",
                tried_to_allocate_bytes=size_of(m.group("req")),
                detail=f"the compiled program needs {m.group('req')} of {m.group('space')}"))
            return
    # A RESOURCE_EXHAUSTED status about memory that none of the forms above describes.
    st = ctx.search(_XLA_STATUS, text) if ("ESOURCE" in text or "esource" in text) else None
    if st and ctx.search(_XLA_MEMORYISH, text[st.end():]) \
            and not any(w in text for w in _STATUS_READ_ELSEWHERE + _STATUS_NO_FAILURE):
        msg = text[st.start():st.start() + 200].strip()
        key = ("xla", "status", re.sub(r"\d+", "N", msg))
        events.add(key, i, lambda: OomEvent(kind="xla", backend="TF" if st.group("tf") else "XLA", line=0, detail=msg),
                   exception=_xla_exception(ctx, text, st.start()))


def _xla_exception(ctx: ParseContext, text: str, pos: int) -> Optional[str]:
    """The exception class at the start of the line (statuses follow it after a colon)."""
    m = ctx.search(_EXC_AT_START, text[:pos])
    return m.group(1) if m else None


def _tf_event(ctx: ParseContext, events: _Events, i: int, m: re.Match) -> None:
    text = ctx.lines[i].text
    groups = m.groupdict()
    shape = re.sub(r"\s+", "", groups.get("shape") or "")
    dtype = groups.get("dtype")
    node = None if groups.get("device") else ctx.below(i, _NODE_DEVICE)
    device = groups.get("device") or (node.group("device") if node else "")
    dims = [d for d in shape.strip("[]").split(",") if d]
    req = None
    if dtype and dtype.lower() in _TF_DTYPE_BYTES and dims and all(d.isdigit() for d in dims):
        req = _TF_DTYPE_BYTES[dtype.lower()]
        for d in dims:
            req *= int(d)
    dev = _DEVICE_IN_NAME.search(device.rsplit("/", 1)[-1]) if device else None
    exc = _xla_exception(ctx, text, m.start()) or _graph_execution_error(ctx, i)
    alloc = groups.get("alloc")
    key = ("tensorflow", shape, dtype, re.sub(r"\d+", "N", device), alloc)
    host = _on_host(device, alloc)
    ev = events.add(key, i, lambda: OomEvent(
        kind="cpu_allocator" if host else "xla", backend="TF", line=0,
        message_format="tf-oom-when-allocating" if dtype else "tf-oom-when-allocating-shape-only",
        tried_to_allocate_bytes=req, host_bytes=req if host else None,
        tensor_shape=[int(d) for d in dims] if dims and all(d.isdigit() for d in dims) else None,
        device_index=int(dev.group("d")) if dev and not host else None,
        detail=f"tensor {shape or '(no shape printed)'} {dtype or ''} by allocator {alloc or '?'}".replace("  ", " ")),
        exception=exc)
    _attach_hint(ctx, ev, i)


# the failing op's node, printed under the error: "[[Node: sub_2518 = Sub[T=DT_FLOAT,
# _device="/job:localhost/replica:0/task:0/gpu:0"](...)]]" (TensorFlow 1.x and before)
_NODE_DEVICE = lazy(r"\[\[\{?\{?[Nn]ode[: ][^\n]{0,300}?_device=\"(?P<device>[\w/:.-]{1,200})\"")


def _on_host(device: Optional[str], alloc: Optional[str]) -> bool:
    """TensorFlow's CPU device and its CPU allocators ("cpu", "mklcpu") hand out host memory:
    their OOM is the host's, whatever the job runs on otherwise."""
    return ":CPU:" in (device or "").upper() or (alloc or "").lower().startswith(("cpu", "mklcpu"))


def _tf_events(ctx: ParseContext) -> list:
    """The TensorFlow and XLA events found so far (host ones included)."""
    return [e for e in ctx.facts.oom_events if e.kind == "xla" or e.backend == "TF"]


def _graph_execution_error(ctx: ParseContext, i: int) -> Optional[str]:
    """Keras raises "ResourceExhaustedError: Graph execution error:" and prints the OOM below it."""
    for j in range(i - 1, max(-1, i - 4), -1):
        t = ctx.lines[j].text
        if "Graph execution error" in t:
            m = ctx.search(_EXC_AT_START, t)
            return m.group(1) if m else None
    return None


# the BFC allocator's statistics, printed with its memory dump right before the error ("Stats:",
# "Limit:        15922230068", "InUse:        15585278208", ...): Limit is the memory the
# allocator may hand out on that device, its capacity
_BFC_LIMIT = lazy(r"^\s*Limit:\s+(?P<n>\d{1,20})\s*$")
_BFC_STATS_REACH = 30


def _bfc_limits(ctx: ParseContext) -> None:
    """The capacity of each TensorFlow or XLA device OOM that gives none: the BFC allocator's
    ``Limit`` printed just above its error (the nearest, within its statistics' reach)."""
    limits = {i: int(m.group("n")) for i in ctx.lines_with(("Limit:",))
              if (m := ctx.search(_BFC_LIMIT, ctx.lines[i].text))}
    if not limits:
        return
    for ev in _tf_events(ctx):
        idx = ctx.index_of(ev.line)
        if ev.kind != "xla" or ev.total_capacity_bytes is not None or idx is None:
            continue
        above = [i for i in limits if idx - _BFC_STATS_REACH <= i < idx]
        if above:
            ev.total_capacity_bytes = limits[max(above)]


def _stops_in_a_traceback_after(ctx: ParseContext, i: int) -> bool:
    """The log ends inside a traceback that starts within a few lines under line ``i``: its
    header is there, its error line is not (the paste or the file was cut)."""
    end = len(ctx.lines)
    if end - i - 1 > _CUT_REACH:
        return False
    header = next((j for j in range(i + 1, min(end, i + 1 + _HEADER_REACH))
                   if ctx.lines[j].text.lstrip().startswith("Traceback (most recent call last)")), None)
    if header is None or any(ctx.search(_EXC_AT_START, ctx.lines[j].text) for j in range(header + 1, end)):
        return False
    # the log's last line is still the traceback's (its header, a frame or a frame's code, all
    # indented), not an error that names no message ("KeyboardInterrupt", a bare "AssertionError")
    last = next(j for j in range(end - 1, header - 1, -1) if ctx.lines[j].text.strip())
    text = ctx.lines[last].text
    return last == header or text[:1].isspace() or text.lstrip().startswith('File "')


def _bfc_event(ctx: ParseContext, events: _Events, i: int, m: re.Match, warned: bool = False) -> None:
    """A fatal BFC line joins the OOM status that follows it; alone it is an event itself.
    ``warned``: the line said it was not a failure, and the log stops in a traceback under it."""
    no = ctx.lines[i].no
    rounded = int(m.group("n")) if m.group("n") else size_of(m.group("size"))
    alloc = m.group("alloc")
    dev = _DEVICE_IN_NAME.search(alloc or "")   # the allocator's name says which device ("GPU_0_bfc")
    later = [e for e in _tf_events(ctx) if no <= e.line <= no + _FOLD_WINDOW]
    if later:
        ev = min(later, key=lambda e: e.line)
        events.cover(ev, i)
        if ev.tried_to_allocate_bytes is None:
            ev.tried_to_allocate_bytes = rounded
        if ev.device_index is None and dev and ev.kind != "cpu_allocator":
            ev.device_index = int(dev.group("d"))
        return
    raw = ctx.lines[i].raw
    # (the allocator's unnamed form is TensorFlow 1.x's alone)
    tf = alloc is None or "tensorflow/core" in raw or any(e.backend == "TF" for e in ctx.facts.oom_events)
    host = tf and _on_host(None, alloc)
    op = (m.group("op") or "").strip()
    events.add(("bfc", alloc, rounded), i, lambda: OomEvent(
        kind="cpu_allocator" if host else "xla", backend="TF" if tf else "XLA", line=0,
        message_format="bfc-allocator-ran-out", tried_to_allocate_bytes=rounded, host_bytes=rounded if host else None,
        device_index=int(dev.group("d")) if dev and not host else None, strength="likely" if warned else "certain",
        detail="BFC allocator " + (f"{alloc} " if alloc else "") + "ran out" + (f", requested by op {op}" if op else "")
        + (" (it said it would retry; the log stops in a traceback right under it)" if warned else "")))


def _buffer_assignment(ctx: ParseContext, events: _Events, i: int) -> None:
    """The buffer-assignment dump printed after an XLA OOM: its total goes into the detail."""
    total = None
    for j in range(i, min(len(ctx.lines), i + 12)):
        t = ctx.search(_BUFFER_TOTAL, ctx.lines[j].text)
        if t:
            total = t.group("size")
            break
    no = ctx.lines[i].no
    before = [e for e in ctx.facts.oom_events if e.kind == "xla" and no - 40 <= e.line <= no + 5]
    if before:
        ev = max(before, key=lambda e: e.line)
    else:
        ev = events.add(("xla", "buffer-assignment", total), i, lambda: OomEvent(
            kind="xla", backend="XLA", line=0, message_format="xla-buffer-assignment"))
    events.cover(ev, i)
    if total and (ev.detail is None or "BufferAssignment" not in ev.detail):
        note = f"BufferAssignment total allocation {total}"
        ev.detail = f"{ev.detail}; {note}" if ev.detail else note


# Apple's Metal driver failing a command buffer for want of GPU memory, whichever framework
# submitted it (MLX, PyTorch's MPS backend): "[METAL] Command buffer execution failed:
# Insufficient Memory (00000008:kIOGPUCommandBufferCallbackErrorOutOfMemory)". The status
# name says it alone.
_METAL_OOM = "kIOGPUCommandBufferCallbackErrorOutOfMemory"


# MLX's allocator refusing a buffer on Apple silicon ("libc++abi: terminating due to uncaught
# exception of type std::runtime_error: [malloc_or_wait] Unable to allocate 12 bytes.", "[malloc]
# Unable to allocate N bytes." from mlx/allocator.cpp):
# the unified memory the GPU draws on is full
_MLX_MALLOC = lazy(r"\[(?:malloc|malloc_or_wait|metal::malloc)\] Unable to allocate (?P<n>\d{1,20}) bytes")
# ... and one request larger than a single Metal buffer may be ("[metal::malloc] Attempting to
# allocate 17179869184 bytes which is greater than the maximum allowed buffer size of
# 14302248960 bytes.")
_MLX_BUFFER = lazy(r"(?:^|Error:\s*|error:\s*)\[metal::malloc\] Attempting to allocate (?P<n>\d{1,20}) bytes which is greater than the maximum "
                   r"allowed buffer size of (?P<max>\d{1,20}) bytes")


# ggml's Metal backend: a command buffer that failed ("ggml_metal_graph_compute: command buffer 8
# failed with status 5", the generic MTLCommandBufferStatusError) after ggml warned that what it
# had allocated passed the device's recommended working set ("... size = 256.00 MB, (23984.91 /
# 21845.34), warning: current allocated size is greater than the recommended max working set
# size"): the GPU's share of unified memory ran out. Without the warning the status says nothing.
_GGML_METAL_FAILED = lazy(r"command buffer \d{1,4} failed with status \d{1,3}")
_GGML_METAL_OVER = lazy(r"\((?P<alloc>\d{1,9}(?:\.\d{1,4})?) / (?P<ws>\d{1,9}(?:\.\d{1,4})?)\),? ?warning: current "
                        r"allocated size is greater than the recommended max working set size")
_GGML_METAL_REACH = 40   # lines above the failure in which the warning is looked for


# PyTorch's MPS allocator refusing one buffer larger than Metal allows ("RuntimeError: Invalid
# buffer size: 18.00 GB", MPSAllocator's TORCH_CHECK, its size in its own binary units)
_MPS_BUFFER = lazy(r"(?:^|Error:\s*)Invalid buffer size: (?P<size>\d{1,9}(?:\.\d{1,4})? (?:KB|MB|GB|TB))\s*$")


def _parse_metal(ctx: ParseContext, events: _Events) -> None:
    for i in ctx.lines_with((_METAL_OOM,)):
        events.add(("metal",), i, lambda: OomEvent(kind="mps", backend="Metal", line=0,
                                                   message_format="metal-command-buffer"))
    for i in ctx.lines_with(("failed with status",)):
        if "command buffer" not in ctx.lines[i].text or not ctx.search(_GGML_METAL_FAILED, ctx.lines[i].text):
            continue
        over = next((m for j in range(i - 1, max(-1, i - 1 - _GGML_METAL_REACH), -1)
                     if "working set" in ctx.lines[j].text and (m := ctx.search(_GGML_METAL_OVER, ctx.lines[j].text))),
                    None)
        if over is not None:
            events.add(("metal",), i, lambda: OomEvent(
                kind="mps", backend="Metal", line=0, strength="likely", message_format="ggml-metal-over-working-set",
                detail=f"a Metal command buffer failed after ggml had allocated {over.group('alloc')} MB, over the "
                       f"recommended working set of {over.group('ws')} MB"))
    for i in ctx.lines_with(("] Unable to allocate",)):
        m = ctx.search(_MLX_MALLOC, ctx.lines[i].text)
        if m:
            n = int(m.group("n"))
            events.add(("mlx", n), i, lambda: OomEvent(kind="mps", backend="MLX", line=0, message_format="mlx-malloc",
                                                       tried_to_allocate_bytes=n))
    for i in ctx.lines_with(("Invalid buffer size: ",)):
        m = ctx.search(_MPS_BUFFER, ctx.lines[i].text)
        if m:
            size = size_of(m.group("size"))
            events.add(("mps-buffer", size), i, lambda: OomEvent(
                kind="mps", backend="MPS", line=0, message_format="mps-buffer-size", tried_to_allocate_bytes=size,
                detail=f"one buffer of {m.group('size')}, over the largest buffer Metal allows"))
    for i in ctx.lines_with(("[metal::malloc] Attempting",)):
        m = ctx.search(_MLX_BUFFER, ctx.lines[i].text)
        if m:
            n, cap = int(m.group("n")), int(m.group("max"))
            events.add(("mlx-buffer", n), i, lambda: OomEvent(
                kind="mps", backend="MLX", line=0, message_format="mlx-buffer-size", tried_to_allocate_bytes=n,
                detail=f"one buffer of {n} bytes, over Metal's largest buffer of {cap} bytes"))


def parse(ctx: ParseContext) -> None:
    events = _Events(ctx)
    _parse_mps(ctx, events)
    _parse_metal(ctx, events)
    _parse_xla_and_tf(ctx, events)
