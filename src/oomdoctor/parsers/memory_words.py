"""An error that says in plain words that memory could not be had, in a form no other
family knows.

Libraries and runtimes word their allocation failures in many ways ("std::bad_alloc",
"Failed to allocate 2147483648 bytes", "insufficient memory", Windows' "Not enough memory
resources are available"), and new ones appear with every release. The specific families
read the forms they know with their figures; this one runs after them and reads what is
left: a line that reports an error (an exception, ``what():``, an ``ERROR`` record) and
says memory could not be allocated, on a side the line names (the host or a device) that
no other family has read. A line that names neither side is left alone: guessing the side
would guess the fix.

Its events are ``likely``, never ``certain``: the wording is clear, the context is not.
A trainer's notice that it recovers from an OOM whose error the log lacks is read here too.
"""
from __future__ import annotations

import bisect

import regex as re

from ..facts.derived import HOST_KINDS
from ..facts.models import OomEvent
from ..facts.sizes import parse_size
from ..read.patterns import lazy
from .base import ParseContext
from .torch_alloc import allocator_kind

# lines that hold one of these can match _FAILED (ParseContext.lines_with)
_GATE = ("alloc", "Alloc", "ALLOC", "memory", "Memory", "MEMORY")

# a bracketed level field of an error record, in the prefix before the message
_LEVEL = r"\[(?:E|ERROR|[Ee]rror|F|FATAL|[Ff]atal|CRITICAL|[Cc]ritical)\]"
_LEVEL_FIELD = lazy(_LEVEL)
# ... or a bare level word at the end of that prefix ("ERROR: Out of GPU memory ...", Julia's and
# many command-line tools' error report; Python logging's "ERROR:root:"; a timestamp before it)
_LEVEL_WORD = lazy(r"\b(?:ERROR|FATAL|CRITICAL)\b(?::[\w.]{0,80})*[\s:|\]-]*$")
# a line that reports an error, not a warning or a setting
_ERROR_LINE = lazy(
    r"^\s*(?P<exc>(?:[\w.]+\.)?[A-Za-z]\w*(?:Error|Exception|Failure)|[A-Za-z_]\w*(?:\.\w+)*\.error)"
    r"(?:\[[^\]\n]{0,40}\])?:\s"   # Python exceptions (and modules' own lower-case "cv2.error")
    r"|^\s*terminate called after throwing|^\s*what\(\):|^\s*(?:ERROR|FATAL)\b[:\s]|^\s*(?:Error|Fatal error):"
    # LLVM's fatal-error handler, in any program that embeds it (a JIT compiler: OpenCL, Triton, numba)
    r"|^\s*LLVM ERROR:\s"
    # a GPU library's own error record: "MIOpen Error: ...", "rocBLAS error: ..."
    r"|^\s*(?:MIOpen|rocBLAS|hipBLAS(?:Lt)?|rocFFT|cuDNN|CUDNN|cuBLAS(?:Lt)?|CUBLAS|cuFFT|CUDA|HIP|oneDNN|Vulkan)"
    r" (?:Error|ERROR|error):\s"
    # a C++ program printing its uncaught exception's what() alone: "std::bad_alloc"
    r"|^\s*std::bad_alloc\s*$"
    # ONNX Runtime's error record ("2025-08-14 10:47:21.48 [E:onnxruntime:, sequential_executor.cc:572
    # ...] Non-zero status code returned while running MatMulNBits node ... Status Message: ...")
    r"|\[[EF]:onnxruntime:"
    # a logger's record whose level is a bracketed field: TensorRT's Python logger ("[06/24/2022-16:29:37]
    # [TRT] [E] 1: Unexpected exception std::bad_alloc"), MindIE's and others' "[ERROR]", spdlog's "[error]"
    r"|^[^\n]{0,120}?" + _LEVEL + r"\s"
    # a logger's record (level column, then the message) whose message is an error:
    # "... DEBUG    Error in thread (_training_0): You do not have enough GPU memory ..."
    r"|^[^\n]{0,160}?\b(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s*[-|:]?\s*(?:Error|Exception)\b[^:\n]{0,60}:\s"
    # ... or whose level column itself is an error's, set off from the message (padded, or by a
    # separator): "... execute_script            ERROR    You do not have enough GPU memory ..."
    r"|^[^\n]{0,200}?\s(?:ERROR|CRITICAL|FATAL)(?:\s{2,}|\s{0,2}[-|:]\s{1,4})(?=\S)")
_FAILED = lazy(
    # (MSVC's std::bad_alloc says "bad allocation" as its what(), at the end of a message)
    r"std::bad_alloc|\bbad allocation\s*$"
    r"|\b(?:failed|unable|cannot|can't|could not|couldn't)\s+(?:to\s+)?(?:allocate|alloc|reserve|malloc)\b"
    r"[^\n]{0,80}?(?:\bmemory\b|\d\s*(?:bytes|[KMGTP]i?B)\b)"
    r"|(?:\b(?:insufficient|not (?:have )?enough|ran out of|out of)|n't have enough)\s+(?:\w+\s+){0,2}?memory\b"
    r"|\bmemory (?:exhausted|allocation failed|allocation error)"
    # MIOpen's "Memory not available to allocate buffer: 655360000"
    r"|\bmemory not available to allocate\b"
    # an allocation that names its side and fails ("CUDA allocation failed", "host allocation failure")
    r"|\b(?:CUDA|GPU|device|host|HBM)\s+allocation (?:failed|failure)\b", re.I)
# advice, a condition or a fallback, not a failure: "if you run out of GPU memory, ...",
# "... failed to allocate pinned memory, using pageable memory instead"
_NOT_A_FAILURE = lazy(r"\b(?:if|when|whenever|unless)\b[^\n]{0,60}?(?:\b(?:run|runs|ran|out of|not (?:have )?enough|insufficient)\b|n't have enough\b)"
                      r"|falling back|fall back|\binstead\b|retrying|skipping|continuing|reducing|recoverable"
                      r"|\bset\s+--?\w", re.I)
# memory failures that are not about capacity, or that other families name ("CUDA out of
# memory" without the allocator's "Tried to allocate" is this family's: another library's
# wording, or the allocator's message garbled past reading)
_NOT_CAPACITY = lazy(r"illegal memory access|shared memory|\bshm\b|memory access fault|misaligned|pin memory thread|ECC error"
                     r"|out of memory\. Tried to allocate|DefaultCPUAllocator|Unable to allocate \S+ for an array",
                     re.I)
# (LLVM's fatal error is the compiling process's own heap; OpenCV names its host allocator's
# failure "OutOfMemoryError" in core/src/alloc.cpp, its device modules are cv::cuda's)
_HOST = lazy(r"std::bad_alloc|\bbad allocation\s*$|\bhost\b|\bRAM\b|system memory|\bCPU\b|\bcpu\b|WinError 8|memory resources are available"
             # (a host allocator named with its library's prefix: Intel MKL's "mkl_malloc: failed to
             # allocate memory", jemalloc's "je_malloc", TBB's "scalable_malloc")
             r"|\b(?:mkl_|je_|scalable_)?malloc\b|\bmmap\b|\bswap\b|virtual memory|paging file|^\s*LLVM ERROR:"
             r"|core[/\\]src[/\\]alloc\.cpp:\d+: error: \(-4:Insufficient memory\)")
# (AMD's GPU libraries name no side but are one: MIOpen, rocBLAS)
_DEVICE = lazy(r"(?P<w>GPU|VRAM|HBM|\bhbm\b|CUDA|\bcuda\b|NPU|XPU|TPU|XLA|Xla|ROCm|HIP|Neuron|accelerator|\bdevice\b"
               r"|MIOpen|rocBLAS|hipBLAS)")
# each device word: the backend it names, and the event's kind when the word names a runtime
# with a kind of its own (a device word that other runtimes share, HBM or TPU, or a library of
# one, MIOpen, leaves the generic device_runtime)
_DEVICE_WORDS = {
    "gpu": ("CUDA", "cuda_runtime_error"), "cuda": ("CUDA", "cuda_runtime_error"), "npu": ("NPU", "npu"),
    "xpu": ("XPU", "xpu"), "xla": ("XLA", "xla"), "tpu": ("XLA", None), "hbm": ("XLA", None),
    "rocm": ("HIP", "hip"), "hip": ("HIP", "hip"), "neuron": ("Neuron", None), "miopen": ("HIP", None),
    "rocblas": ("HIP", None), "hipblas": ("HIP", None),
}


def parse(ctx: ParseContext) -> None:
    # lines another family read (a kill's line holds no allocation failure: a launcher's
    # warning glued to the same physical line as one is another message)
    taken = ctx.explained_lines(skip_kinds=frozenset({"host_oom_killer"}))
    # a side another family already read is its: the words there echo that failure
    # (an arena on a side the log does not name is neither)
    read = {"host" if e.kind in HOST_KINDS else "device" for e in ctx.facts.oom_events if e.kind != "runtime_arena"}
    seen: dict[tuple, OomEvent] = {}
    for i in ctx.lines_with(_GATE):
        ln = ctx.lines[i]
        text = ln.text
        # (the words first: few lines that say "memory" say it could not be had, and the
        # error-line forms cost more to try)
        found = failed_side(ctx, text)
        if found is None:
            continue
        err = ctx.search(_ERROR_LINE, text) if ln.no not in taken else None
        if err is None and ln.no not in taken and ln.raw and len(ln.raw) > len(text):
            # an error record whose level the normaliser took off with its prefix, bracketed
            # ("2024-01-01 10:00:00 [ERROR] Could not allocate ...", spdlog's "[error]") or bare
            prefix = ln.raw[:len(ln.raw) - len(text.lstrip())]
            err = ctx.search(_LEVEL_FIELD, prefix) or ctx.search(_LEVEL_WORD, prefix)
        if err is None and ln.no not in taken:
            err = _continued_error(ctx, i)
        if err is None:
            continue
        side, m, device = found
        if side in read:
            continue
        n = parse_size(text[m.start():m.start() + 300])   # the size it failed to allocate, if said
        key = (side, n)
        ev = seen.get(key)
        if ev is not None:
            ev.count += 1
            continue
        message = text.strip()[:160]
        exc = err.groupdict().get("exc")   # (a record's level names no exception)
        if side == "host":
            ev = OomEvent(kind="cpu_allocator", backend="host", strength="likely", host_bytes=n,
                          tried_to_allocate_bytes=n, message_format="generic-host-allocation", exception=exc,
                          detail=f"an allocation of host memory failed: {message}", **ctx.at(ln))
        else:
            backend, kind = _DEVICE_WORDS.get(device.group("w").lower(), (None, None))
            ev = OomEvent(kind=kind or "device_runtime", backend=backend, strength="likely",
                          tried_to_allocate_bytes=n, message_format="generic-device-allocation", exception=exc,
                          detail=f"an allocation of device memory failed: {message}", **ctx.at(ln))
        seen[key] = ev
        ctx.facts.oom_events.append(ev)
    _recovery_notices(ctx)


def failed_side(ctx: ParseContext, text: str):
    """Which memory the words of ``text`` say could not be had: ("host" or "device", the
    failure's match, the device word's match), or None when they say no such thing, or name
    neither side or both (the side would be a guess)."""
    m = ctx.search(_FAILED, text)
    if m is None or ctx.search(_NOT_CAPACITY, text) or ctx.search(_NOT_A_FAILURE, text):
        return None
    host, device = ctx.search(_HOST, text), ctx.search(_DEVICE, text)
    if bool(host) == bool(device):
        return None
    return ("host" if host else "device"), m, device


def _continued_error(ctx: ParseContext, i: int):
    """The error line a message continues, when line ``i`` is part of its message: up to two
    lines above, each ending with a colon (a blank line or a frame ends none). An exception's
    message goes on below it so: "RuntimeError: Critical error in pipeline:", "Error when
    executing Mixed operator ImageDecoder encountered:", "CUDA allocation failed"."""
    for j in range(i - 1, max(-1, i - 3), -1):
        above = ctx.lines[j].text
        if not above.rstrip().endswith(":"):
            return None
        err = ctx.search(_ERROR_LINE, above)
        if err is not None:
            return err
    return None


# A trainer that catches an OOM and retries says so (fairseq: "attempting to recover from
# OOM in forward/backward pass", after the error and a memory summary per device; or that it
# skips the batch: "ran out of memory, skipping batch", fairseq's and the trainers that took its
# words); a paste may hold the notice without the error it caught.
# detectron2's retry_if_cuda_oom moves an op's inputs to the CPU and runs it again ("Attempting to
# copy inputs of <function paste_masks_in_image at 0x7f...> to CPU due to CUDA OOM", the function's
# repr often over several lines)
_RECOVERING = lazy(r"\battempting to recover from OOM\b|\b[Rr]an out of memory, skipping (?:this )?batch\b"
                   r"|\bto CPU due to CUDA OOM\b")
_RECOVERING_WORDS = ("recover from OOM", "ut of memory, skipping", "due to CUDA OOM")   # (one is in each)
# ... or that it failed one item and goes on, in the allocator's own first words, as a report of
# what happened: "Failed (CUDA out of memory) on sequence hipAB-900 of length 918." (ESMFold's),
# "CUDA out of memory, skipping batch 12", "Skipping batch 12: CUDA out of memory when computing
# loss", "caught CUDA out of memory in step 11, retrying once". Not help text, a setting or a
# count ("--skip_oom  Skip batches that hit CUDA out of memory", "0 batches skipped due to CUDA
# out of memory"): those name the words without reporting one
_CAUGHT = lazy(r"\b[Ff]ailed\s*\((?P<b>CUDA|HIP|XPU|NPU) out of memory\)"
               r"|(?:^|[:\]|]\s|\d\s)\s*(?P<b2>CUDA|HIP|XPU|NPU) out of memory\s*[,.;:]?\s*(?:[-\u2013]\s*)?(?i:skipping|retrying|recovering)\b"
               r"|\b(?i:skipping|skipped)\s+(?:this\s+|the\s+)?(?i:batch|step|sample|example|sequence|item|iteration)\b[^\n:]{0,40}:\s*"
               r"(?P<b3>CUDA|HIP|XPU|NPU) out of memory\b"
               r"|\b[Cc]aught\s+(?:an?\s+)?(?:[\w.]*Error:?\s+)?(?P<b4>CUDA|HIP|XPU|NPU) out of memory\b(?!\s*[:=]\s*\d)")
# ... or an error record whose message opens with the abbreviation and the item it failed:
# "ERROR:openfold3...runner:OOM for query_id(s) BM50-P19. See logs/... for details", "[ERROR] OOM on
# rank 3 at step 120"; the abbreviation names no memory, so no backend (not "OOM when allocating",
# TensorFlow's own message, nor "OOM killer"). The record's level is in the line or in the prefix
# the normaliser took off
_OOM_ITEM = r"OOM (?:for|on|in|at|while|during) (?=\S)"
_OOM_ITEM_START = lazy(r"^\s*" + _OOM_ITEM)
_OOM_ITEM_RECORD = lazy(r"\b(?:ERROR|CRITICAL|FATAL)\b[^\n]{0,120}?[:\]|-]\s?\s*" + _OOM_ITEM)
_ADVICE = lazy(r"\b(?i:if|unless|avoid|prevent|to fix)\b")
# how far below a caught notice the error it caught may be printed (the notice first, then the
# traceback and the allocator's message)
_NOTICE_BELOW = 60


# how far above its notice the error it caught may be (a memory summary per device between)
_NOTICE_REACH = 1000


def _recovery_notices(ctx: ParseContext) -> None:
    """A recovery notice that no error since the previous notice (and within reach)
    explains: the OOM it caught. Copies of one message fold into one event, so every line
    an event holds as evidence counts."""
    explained = ctx.explained_lines()
    read = sorted(explained)
    previous = 0
    for i in ctx.lines_with(_RECOVERING_WORDS + (" out of memory", "OOM ")):
        ln = ctx.lines[i]
        text = ln.text
        caught = None
        if not (any(w in text for w in _RECOVERING_WORDS) and ctx.search(_RECOVERING, text)):
            # (the allocator's whole message is the allocator family's, whatever surrounds it)
            if ln.no in explained or "ried to allocate" in text:
                continue
            caught = ctx.search(_CAUGHT, text) or _oom_item_record(ctx, ln)
            if caught is None or ctx.search(_ADVICE, text):
                continue
            # the error it caught printed right under it (the notice first, then the traceback)
            k = bisect.bisect_right(read, ln.no)
            if k < len(read) and read[k] <= ln.no + _NOTICE_BELOW:
                previous = ln.no
                continue
        lo = max(previous, ln.no - _NOTICE_REACH)
        k = bisect.bisect_right(read, lo)
        if k == len(read) or read[k] > ln.no:
            if caught is not None:
                backend = next((caught.group(g) for g in ("b", "b2", "b3", "b4") if caught.groupdict().get(g)), None)
                ctx.facts.oom_events.append(OomEvent(
                    kind=allocator_kind(backend) if backend else "device_runtime", backend=backend, strength="likely",
                    message_format=("caught notice (the allocator's first words, no figures)" if backend
                                    else "error record (OOM for an item, no figures)"),
                    detail=f"the job caught an out-of-memory error and went on: {ln.text.strip()[:160]}",
                    **ctx.at(ln)))
            else:
                ctx.facts.oom_events.append(OomEvent(
                    kind="device_runtime", strength="likely", message_format="recovery notice (message not in the log)",
                    detail=f"a trainer caught an OOM and retried: {ln.text.strip()[:160]}", **ctx.at(ln)))
        previous = ln.no


def _oom_item_record(ctx: ParseContext, ln):
    """An error record that opens its message with "OOM for <item>" (see _OOM_ITEM)."""
    text = ln.text
    if "OOM " not in text:
        return None
    m = ctx.search(_OOM_ITEM_RECORD, text)
    if m is None and ln.raw and len(ln.raw) > len(text):
        m = ctx.search(_OOM_ITEM_START, text)
        prefix = ln.raw[:len(ln.raw) - len(text.lstrip())]
        if m is not None and not (ctx.search(_LEVEL_FIELD, prefix) or ctx.search(_LEVEL_WORD, prefix)):
            m = None
    return m
