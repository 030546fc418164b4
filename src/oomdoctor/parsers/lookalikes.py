"""Failures that are *not* memory exhaustion (log-formats.md §2.7, §2.4, §3.2).

Many of them look like one: "illegal memory access", an NCCL timeout on the healthy
ranks, an allocator warning that says it is not a failure, a Triton kernel out of
*shared* memory, a 1 EB request that is a size bug. Recording them as ``Failure`` lets
the classifier say "not an OOM" with evidence, and lets ``ranks`` tell a cascade from a
first failure. Any other final exception line of a traceback becomes a
``python_exception`` failure, so a log with no OOM still says what went wrong.
Nothing is marked secondary here; the ranks family decides that.
"""
from __future__ import annotations

import bisect
from typing import Optional

import regex as re

from ..facts.derived import split_processes
from ..facts.models import Failure
from ..read.patterns import lazy
from .base import EXCEPTION_CLASS, ParseContext
from .host import KILL_EXIT_CODES, MAYBE_OOM_FORMATS, SILENT_DEATH_FORMATS
from .traceback import frames_for

_MAX_EVIDENCE = 12

# a loss printed as NaN (read by the phase family too: the pass that computed it)
NAN_LOSS = lazy(r"['\"]?(?:train_|eval_)?loss['\"]?\s*[:=]\s*['\"]?(?:nan|NaN)\b|\bloss\s+(?:nan|NaN)\b"
                r"|\bLoss is (?:nan|NaN)\b|\bloss is nan\b|\b(?:nan|NaN) loss\b", re.I)

# (kind, literals of which one must be on the line, pattern). Order matters: the first
# rule that matches a line names it.
# a Windows crash status in decimal, signed (Python, an IDE) or not (subprocess): access violation,
# illegal instruction, fail-fast stack buffer overrun, stack overflow, heap corruption
_WINDOWS_CRASH_STATUS = (r"(?:-1073741819|-1073741795|-1073740791|-1073741571|-1073740940|3221225477|3221225501"
                         r"|3221226505|3221225725|3221226356)(?!\d|\.\d)")
_RULES: list[tuple[str, tuple[str, ...], re.Pattern]] = [
    ("absurd_allocation", ("1EB",), lazy(r"Tried to allocate more than 1EB memory")),
    ("device_mismatch", ("same device",), lazy(r"Expected all tensors to be on the same device")),
    ("illegal_memory_access", ("illegal memory access", "IllegalAddress", "ILLEGAL_ADDRESS", "Memory access fault"),
     lazy(r"an illegal memory access was encountered|cudaErrorIllegalAddress|CUDA_ERROR_ILLEGAL_ADDRESS"
                r"|hipErrorIllegalAddress|Memory access fault by GPU node")),
    ("misaligned_address", ("misaligned address", "MisalignedAddress", "MISALIGNED_ADDRESS"),
     lazy(r"misaligned address|cudaErrorMisalignedAddress|CUDA_ERROR_MISALIGNED_ADDRESS")),
    ("device_side_assert", ("device-side assert", "ErrorAssert", "ERROR_ASSERT", "Assertion `"),
     lazy(r"device-side assert triggered|cudaErrorAssert|CUDA_ERROR_ASSERT"
                r"|\.cuh?:\d{1,6}: [^\n]{0,200}?block: \[\d{1,6},\d{1,6},\d{1,6}\], thread: \[\d{1,6},\d{1,6},\d{1,6}\] Assertion `")),
    # a C or C++ assert() on the host (glibc: "prog: file.cpp:125: int f(...): Assertion `x' failed."):
    # the process aborts (SIGABRT) by itself; a launcher's kills after it are its consequence
    ("native_assertion", ("Assertion `",),
     lazy(r"(?:^|\s)\S{1,300}?\.\w{1,5}:\d{1,7}: [^\n]{0,600}?Assertion `[^\n]{1,400}?' failed\.")),
    ("unspecified_launch_failure", ("unspecified launch failure", "LaunchFailure", "LAUNCH_FAILED"),
     lazy(r"unspecified launch failure|cudaErrorLaunchFailure|CUDA_ERROR_LAUNCH_FAILED")),
    ("no_kernel_image", ("no kernel image", "NoKernelImage", "NO_BINARY_FOR_GPU", "invalid device function", "InvalidDeviceFunction"),
     lazy(r"no kernel image is available for execution on the device|cudaErrorNoKernelImageForDevice"
                r"|CUDA_ERROR_NO_BINARY_FOR_GPU|HIP error: invalid device function|hipErrorInvalidDeviceFunction")),
    ("ecc_error", ("ECC", "ECCUncorrectable"),
     lazy(r"uncorrectable ECC error encountered|cudaErrorECCUncorrectable|CUDA_ERROR_ECC_UNCORRECTABLE")),
    ("bfc_not_failure", ("not a failure", "freed_by_count"),
     lazy(r"The caller indicates that this is not a failure|ran out of memory trying to allocate [^\n]{0,40}with freed_by_count")),
    ("triton_out_of_resources", ("out of resource",),
     lazy(r"OutOfResources: out of resource: \w{1,40}|out of resource: shared memory, Required: \d{1,12}")),
    ("nccl_timeout", ("Watchdog", "timing out", "timed out", "Timeout"),
     lazy(r"Watchdog caught collective operation timeout|ran for \d{1,12} milliseconds before timing out"
                r"|Some NCCL operations have failed or timed out")),
    ("nccl_error", ("NCCL error in:", "NCCL Error ", "ncclSystemError", "ncclRemoteError", "ncclInternalError",
                    "ncclInvalidUsage", "ncclInvalidArgument", "ncclUnhandledCudaError", "NCCL communicator was aborted",
                    "unhandled system error", "remote process exited", "unhandled cuda error"),
     lazy(r"NCCL error in:|NCCL Error \d{1,3}:|ncclSystemError|ncclRemoteError|ncclInternalError|ncclInvalidUsage"
                r"|ncclInvalidArgument|ncclUnhandledCudaError|NCCL communicator was aborted|unhandled system error"
                r"|remote process exited or there was a network error|unhandled cuda error")),
    # torch.utils.checkpoint's CheckpointError: a recomputation saw other tensors than the
    # forward pass (its body lines name both, and survive when its first line is cut)
    ("checkpoint_recompute_mismatch", ("recomputed metadata", "different metadata than during"),
     lazy(r"Recomputed values for the following tensors have different metadata than during the forward pass"
          r"|^recomputed metadata: \{'shape'")),
    ("sigterm", ("SIGTERM", "-15"),
     lazy(r"Sending process \d{1,9} closing signal SIGTERM|Signal 15 \(SIGTERM\) received by PID"
                r"|exitcode\s*:\s*-15\b|\(exitcode: -15\)|received signal SIGTERM|Main process received SIGTERM")),
    # a worker that crashed (SIGABRT, SIGSEGV, ...): "Killed" and "Bus error" are the memory
    # families' (host RAM, shared memory)
    ("dataloader_worker_crashed", ("killed by signal", "exited unexpectedly with exit code", "encountered in worker"),
     lazy(r"DataLoader worker \(pids?:? [^)\n]{1,80}\) ?(?:is )?killed by signal: (?!Killed|Bus error)[A-Z][\w ]{1,40}"
          # the DataLoader's own signal handler in a worker (torch/csrc/DataLoader.cpp; its bus
          # error is shared memory's)
          r"|Unexpected (?:segmentation fault|floating-point exception) encountered in worker"
          # its own exit code: an exception in the worker (-9/137 and -7/135 are kills)
          r"|DataLoader worker \(pid(?:\(s\))? [\d, ]{1,200}\) exited unexpectedly with exit code "
          r"(?!" + "|".join(rf"{c}\b" for c in KILL_EXIT_CODES) + r")-?\d{1,4}")),
    ("segfault", ("Segmentation fault", "SIGSEGV", "-11", "core dumped"),
     lazy(r"Segmentation fault|Signal 11 \(SIGSEGV\)|<Signals\.SIGSEGV: 11>|exitcode\s*:\s*-11\b"
                # abseil's failure-signal handler (Ray, TensorFlow, JAX): "*** SIGSEGV received at time=..."
                r"|\*\*\* SIGSEGV received at\b"
                r"|\(exitcode: -11\)|return code = -11\b|(?<!Aborted |Bus error )\(core dumped\)")),
    # a Windows process ended by a crash, as its exit status says (an IDE's "Process finished with exit
    # code -1073741819 (0xC0000005)", subprocess's unsigned "3221225477") or Python's faulthandler
    # ("Windows fatal exception: access violation"): access violation, illegal instruction,
    # stack overflow, heap corruption, a fail-fast stack buffer overrun. Not the memory statuses
    # (0xC0000017 no memory, 0xC000012D commit limit)
    ("windows_crash", ("0xC0000", "0xc0000", "exit code -107374", "exit code 3221", "exit status -107374",
                       "exit status 3221", "exit code: -107374", "exit code: 3221", "exit status: -107374",
                       "exit status: 3221", "exitcode", "Windows fatal exception"),
     lazy(r"\b0x[Cc]0000(?:005|01[Dd]|409|0[Ff][Dd]|374)\b"
          # the status in decimal, signed or not, only as an exit status (a counter may hold those digits)
          r"|(?:exit code|exit status):? " + _WINDOWS_CRASH_STATUS + r"|exitcode\s{0,4}:?\s{0,4}" + _WINDOWS_CRASH_STATUS
          + r"|Windows fatal exception: (?:access violation|illegal instruction|stack overflow|code 0x[Cc]0000(?:005|01[Dd]|409|0[Ff][Dd]|374))")),
    # the interpreter aborting on its own report ("Fatal Python error: none_dealloc: deallocating
    # None", "... Aborted"): a crash of that process, not a silent death (a segfault's and a bus
    # error's reports are their own families'; "Cannot recover from MemoryErrors" is memory)
    ("python_fatal_error", ("Fatal Python error",),
     # (Python 3.9+ names the function first: "_PyErr_NormalizeException: Cannot recover from MemoryErrors")
     lazy(r"Fatal Python error: (?!(?:\w+: )?(?:Segmentation fault|Bus error|Cannot recover from MemoryError))\S[^\n]{0,200}")),
    ("flash_attn_unsupported", ("FlashAttention", "flash_attn", "flash-attn", "flash attn"),
     lazy(r"FlashAttention(?:-?2)? only supports Ampere GPUs or newer"
                r"|FlashAttention(?:-?2)? (?:is )?only supported on (?:Ampere|sm_?8)"
                r"|flash[-_ ]?attn[^\n]{0,80}?(?:requires|only supports)[^\n]{0,40}?(?:Ampere|sm_?8\d?|compute capability)", re.I)),
    ("tf32_unsupported", ("tf32",), lazy(r"tf32 requires Ampere", re.I)),
    ("bf16_unsupported", ("bf16", "Bfloat16", "bfloat16", "BF16"),
     lazy(r"Bfloat16 is only supported on GPUs with compute capability of at least 8\.0"
                r"|(?:doesn't|does not|do not) support bf16"
                r"|bf16 mixed precision requires PyTorch >= 1\.10 and a supported device"
                r"|--bf16[^\n]{0,160}?requires (?:an )?Ampere"
                r"|(?:bf16|bfloat16)[^\n]{0,60}?(?:is not|isn't|not) supported on (?:this|your|the current) (?:GPU|device|hardware)"
                r"|(?:GPU|device) does not support (?:bf16|bfloat16)", re.I)),
    ("nan_loss", ("nan", "NaN"), NAN_LOSS),
]

_GLUED_PROGRESS = lazy(r"\d%\||it/s|s/it|\]\s*$")

# Kinds whose line, when an OOM event already holds it, is that event's wording.
_OOM_EXPLAINED = {"nccl_error"}

# Copies of a look-alike (every rank, every retry, the C++ "what():" echo) are one failure
# with several evidence lines; only python_exception keeps one failure per distinct line.
_ONE_PER_LOG = {kind for kind, _lits, _pat in _RULES}

# The last line of a traceback: "ValueError: ...", "torch.distributed.DistBackendError: ...",
# and the bare "Exception: ..." that libraries raise (DeepSpeed's loss scaler).
_EXCEPTION_LINE = lazy(
    r"^(?P<exc>" + EXCEPTION_CLASS + r"|KeyboardInterrupt|SystemExit|StopIteration)"
    r"(?::\s?(?P<msg>[^\n]{0,2000}))?\s*$")
# Messages of the memory families: never a python_exception even when no event took them.
_MEMORY_WORDS = lazy(
    r"out of memory|OutOfMemory|MemoryError|RESOURCE_EXHAUSTED|Resource exhausted|ResourceExhausted|OOM when allocating"
    r"|killed by signal|exited unexpectedly|ALLOC_FAILED|DefaultCPUAllocator|not enough memory|Cannot allocate memory"
    r"|paging file is too small|Failed to clone\(\) tensor", re.I)
_EXCEPTION_WORDS = ("Error", "Exception", "Interrupt", "SystemExit", "StopIteration")
# exceptions that only say another process failed (its own error, if any, is elsewhere)
_WRAPPERS = lazy(r"ChildFailedError|CalledProcessError|Caught \w{1,60} in (?:DataLoader worker process|pin memory thread)"
                       r"|ActorDiedError|WorkerCrashedError|RayActorError|OwnerDiedError|ActorUnavailableError")


class _Failures:
    def __init__(self, ctx: ParseContext):
        self.ctx = ctx
        self.by_key: dict[tuple, Failure] = {}
        self.named: set[int] = set()   # logical line indexes already given a kind
        self.taken = ctx.explained_lines()   # original line numbers an OOM event explains
        # lines another family already named as a failure (shared memory, SIGBUS)
        self.failed: set[int] = {e.line for f in ctx.facts.failures for e in f.evidence}

    def add(self, kind: str, key: str, message: str, idx: int) -> None:
        ctx = self.ctx
        k = (kind,) if kind in _ONE_PER_LOG else (kind, key)
        f = self.by_key.get(k)
        no = ctx.lines[idx].no
        if f is None:
            f = Failure(kind=kind, message=message[:400], line=no)
            self.by_key[k] = f
            ctx.facts.failures.append(f)
        if len(f.evidence) < _MAX_EVIDENCE and all(e.line != no for e in f.evidence):
            f.evidence.append(ctx.evidence(idx))
        self.named.add(idx)


def _device_mismatch_message(ctx: ParseContext, i: int) -> str:
    """The whole device-mismatch sentence, re-joined when a terminal wrapped it."""
    text = ctx.lines[i].text.strip()
    if "!" not in text and "but found" in text and i + 1 < len(ctx.lines):
        nxt = ctx.lines[i + 1].text.strip()
        if nxt and len(nxt) < 200:
            text = f"{text} {nxt}"
    return text


def _rules(ctx: ParseContext, fs: _Failures) -> None:
    has_nccl_oom = any(ev.kind == "nccl" for ev in ctx.facts.oom_events)
    # the lines holding each rule's literals, found once per rule over the whole log
    holders = [set(ctx.lines_with(literals)) for _kind, literals, _pattern in _RULES]
    for i in sorted(set().union(*holders)):
        ln = ctx.lines[i]
        text = ln.text
        for (kind, _literals, pattern), holding in zip(_RULES, holders):
            if i not in holding:
                continue
            m = ctx.search(pattern, text)
            if not m:
                continue
            if (kind in _OOM_EXPLAINED and ln.no in fs.taken) or (
                    kind == "nccl_error" and has_nccl_oom and "unhandled cuda error" in text.lower()):
                fs.named.add(i)  # an OOM event's own wording, not another failure
                break
            if kind == "device_mismatch":
                message = _device_mismatch_message(ctx, i)
            elif m.start() > 0 and ctx.search(_GLUED_PROGRESS, text[:m.start()]):
                message = text[m.start():].strip()  # a progress bar glued in front
            else:
                message = text.strip()
            fs.add(kind, re.sub(r"\d+", "N", text[m.start():m.start() + 300]), message, i)
            break


def _python_exceptions(ctx: ParseContext, fs: _Failures) -> None:
    closing = _closing_lines(ctx)
    for i in sorted(set(ctx.lines_with(_EXCEPTION_WORDS)) | closing):
        ln = ctx.lines[i]
        text = ln.text
        if i in fs.named or ln.no in fs.taken or ln.no in fs.failed or (text[0].isspace() and i not in closing):
            continue
        text = text.lstrip() if i in closing else text   # (a paste indented as a whole)
        m = ctx.search(_EXCEPTION_LINE, text) or (ctx.search(_QUALIFIED_EXCEPTION, text) if i in closing else None)
        if not m or ctx.search(_MEMORY_WORDS, text) or ctx.search(_WRAPPERS, text):
            continue
        if text.rstrip().endswith(":") and not (m.groupdict().get("msg") or "").strip() and i + 1 < len(ctx.lines) \
                and ctx.lines[i + 1].text.lstrip().startswith("Traceback (most recent call last)"):
            # a logger's caption over the traceback it prints ("ERROR - Exception:", what
            # logging.exception("Exception:") writes): a traceback's exception line follows its
            # frames, and Python never ends one with a colon (an empty message prints the class alone)
            continue
        message = text.strip()
        fs.add("python_exception", message, message, i)


# A traceback's closing line names its exception whatever the class is called: a library's
# class printed with its module ("pyarrow.lib.ArrowInvalid: offset overflow ...",
# "torch._dynamo.exc.Unsupported: ...", "concurrent.futures.process.BrokenProcessPool: ...")
_QUALIFIED_EXCEPTION = lazy(r"^(?P<exc>(?:[A-Za-z_]\w{0,60}\.){1,8}[A-Z]\w{0,60}):\s?(?P<msg>[^\n]{0,2000})$")


def _indent(text: str) -> int:
    return len(text) - len(text.lstrip())


def _closing_lines(ctx: ParseContext) -> set[int]:
    """The line that closes each traceback: the first line after its last frame and that
    frame's code lines (source, carets), on the same rank, indented no deeper than the
    traceback's header (unindented, unless the whole paste was indented: a markdown code
    block of four spaces, a block copied from an indented context)."""
    out: set[int] = set()
    headers = ctx.tb_headers   # (the traceback family's, in line order)
    # the next frame of each frame's own rank (interleaved ranks' frames do not end a traceback)
    following: dict[int, int] = {}
    after: dict = {}
    for f in reversed(ctx.frame_index):
        rank = ctx.lines[f].rank
        following[f] = after.get(rank, len(ctx.lines))
        after[rank] = f
    for f in ctx.frame_index:
        rank = ctx.lines[f].rank
        # the header's indentation, where an indented header is the nearest above the frame and
        # the frame sits deeper than it
        k = bisect.bisect_left(headers, f) - 1
        head = ctx.lines[headers[k]].text if k >= 0 and f - headers[k] <= 400 else ""
        depth = _indent(head) if head[:1].isspace() and _indent(ctx.lines[f].text) > _indent(head) else 0
        for j in range(f + 1, min(f + 8, following[f], len(ctx.lines))):
            ln = ctx.lines[j]
            if ln.rank != rank or not ln.text.strip() or _indent(ln.text) > depth:
                continue
            # the first line at the header's depth before the next frame: this frame was its
            # traceback's last (in a chain, "During handling ..." and the next traceback follow the
            # exception)
            out.add(j)
            break
    return out


# failures after which the CUDA context is broken: later CUDA / cuBLAS errors are knock-ons
_CORRUPTING = {"illegal_memory_access", "misaligned_address", "device_side_assert", "unspecified_launch_failure",
               "ecc_error"}
_BAD_INDEX = lazy(r"^IndexError\b|index out of range|out of bounds", re.I)
# torch's own words for a bad embedding index, which users paste without the exception's name
# (the CPU rerun of a job whose CUDA run failed in cuBLAS): the message alone on its line, not
# words about it ("I saw index out of range in self before but fixed the vocab")
_TORCH_BAD_INDEX = ("index out of range in self",)
_TORCH_BAD_INDEX_LINE = lazy(r"^\s*(?:IndexError: )?index out of range in self\s*$")
# crashes of a process or of a DataLoader worker: a worker that exited unexpectedly beside one
# crashed too
_CRASHES = {"segfault", "windows_crash", "dataloader_worker_crashed"}
# ... within this many lines of it (a DataLoader's traceback between them)
_CRASH_REACH = 60
# message-less CUDA failures that a corrupted context raises as readily as a full device
_CONTEXT_ERRORS = {"cuda_runtime_error", "cublas_alloc"}
# a request this many times the device is a size bug, not pressure. Real computations ask for
# far more than a device holds (a dense p x p matrix of a model's parameters, 51,000 times the
# card; a sparse adjacency made dense, 940 times; an unbounded generation, 150 times): their
# fix is the code that asks, and the threads that report them conclude so. Sizes computed from
# a wrapped or garbage shape land millions of times over (2**56 bytes on a 24 GiB card)
ABSURD_OVER_CAPACITY = 100_000
# ... and a compiled extension's own op asking for this many times the device: it sizes its
# buffers in native code from counts it computes there (a Gaussian rasterizer's
# "_C.rasterize_gaussians(...)" from the points it binned), and a build for another GPU or a
# corrupted input makes those counts garbage, where a tensor made in Python has a shape the code
# chose. (Real requests of extensions, a TensorRT compile's 5 times the card, stay memory.)
EXTENSION_OVER_CAPACITY = 16
# the innermost code line calls a native extension module's function: "_C.fn(", "_ext.fn(",
# "_backend.fn(", "_C_flashattention.fwd(", a custom op ("torch.ops.ns.op("; not PyTorch's own
# operators, "torch.ops.aten.mm(", which compiled and traced code calls for any tensor)
_EXTENSION_CALL = lazy(r"(?<![\w.])(?:_C|_ext|_backend|_cuda|_C_\w{1,40})\.\w{1,80}\("
                       r"|\btorch\.ops\.(?!(?:aten|prims|_c10d_functional|c10d)\.)\w{1,40}\.\w{1,80}\(")
# Intel's GPU runtime (Level Zero) refuses one allocation of 4 GiB or more by default: an XPU
# request that large failing on a device with nothing allocated is that limit
XPU_SINGLE_ALLOCATION_LIMIT = 4 * 2**30
# ... and one this many times is memory, but not a setting's to fix: the report says so
FAR_OVER_CAPACITY = 64
# PyTorch's caching allocator frees its cache and retries before it reports the driver's free
# memory: free this many times the request (and 1 GiB or more) says the device had room. Other
# runtimes' "free" counts memory they cannot hand out in one piece (XLA's "reservable"); so
# does the WDDM driver of Windows and WSL, which pages device memory under a budget of its
# own (its messages carry NVML's "not available" per-process figures).
ROOM_OVER_REQUEST = 16
_ROOM_KINDS = {"cuda_caching_allocator", "hip"}


# failures a rank dies of by itself (the others are what survivors see: timeouts, aborted
# communicators, the launcher's SIGTERM; or not a failure at all)
# warnings whose own words say they are not a failure (XLA's BFC allocator retrying with less):
# the first failure only where nothing else failed (parsers/ranks.py)
NOT_FAILURES = frozenset({"bfc_not_failure"})
_OWN_DEATHS = {kind for kind, _lits, _pat in _RULES} - {"nccl_timeout", "nccl_error", "sigterm", "nan_loss"} - NOT_FAILURES


def _may_cause(ev, line: int) -> bool:
    """Can the corrupting failure at ``line`` be what made ``ev`` fail? A cuBLAS or cuDNN status
    (kind ``cublas_alloc``) fails after it whichever is printed first: an asynchronous fault is
    reported late. A CUDA call's own out-of-memory result (kind ``cuda_runtime_error``) cannot
    come after it: a corrupted context answers every later call with its sticky error, not with
    out of memory; one printed before it is an allocation that failed first (the op then ran on
    a buffer it never got)."""
    return ev.kind != "cuda_runtime_error" or line <= ev.line


# an import statement, the code line of the frame that imports a module; a class statement
_IMPORT_CODE = lazy(r"^\s*(?:from\s+[\w.]+\s+import\b|import\s+[\w.]+)")
_CLASS_CODE = lazy(r"^\s*class\s+(?P<name>\w+)\b")


def _importing(ctx: ParseContext, ev) -> Optional[int]:
    """The line of the import under which a host std::bad_alloc was thrown while definitions,
    not data, were being made: the innermost frame is an import itself (a native module's own
    initialisation) or a class body (its attributes' defaults), and every frame between it and
    the import statement is module code. None otherwise: module code that computes (loads a
    file, builds an index) can run out of memory like any other."""
    idx = ctx.index_of(ev.line)
    if idx is None or "bad_alloc" not in ctx.lines[idx].text:
        return None
    frames = [fr for fr in frames_for(ctx, ev.line) if not fr.file.startswith("<frozen importlib")]
    if not frames:
        return None
    inner = frames[-1]
    if inner.code and ctx.search(_IMPORT_CODE, inner.code):
        return inner.line
    caller = frames[-2] if len(frames) > 1 else None
    m = ctx.search(_CLASS_CODE, caller.code) if caller is not None and caller.code else None
    if m is None or inner.function != m.group("name"):
        return None
    for fr in reversed(frames[:-1]):
        if fr.code and ctx.search(_IMPORT_CODE, fr.code):
            return fr.line
        if fr.function != "<module>":
            return None
    return None


def _in_extension(ctx: ParseContext, ev) -> bool:
    """The innermost frame of the event's traceback calls a native extension's function."""
    frames = frames_for(ctx, ev.line)
    return bool(frames and frames[-1].code and ctx.search(_EXTENSION_CALL, frames[-1].code))


def _symptoms(ctx: ParseContext) -> None:
    """Mark the OOM events that are not memory pressure: a request no device could hold (a
    corrupted size), a message-less CUDA error in a log whose failure is a broken kernel
    or a bad index, a launcher's "a rank died without a Python exception" after a rank's own
    failure that is not memory. They stay in the report, explained, but end nothing."""
    corrupting = [(f.message, f.line) for f in ctx.facts.failures
                  if f.kind in _CORRUPTING or (f.kind == "python_exception" and ctx.search(_BAD_INDEX, f.message))]
    if not corrupting and any(ev.kind in _CONTEXT_ERRORS for ev in ctx.facts.oom_events):
        corrupting = [(ctx.lines[i].text.strip(), ctx.lines[i].no) for i in ctx.lines_with(_TORCH_BAD_INDEX)
                      if ctx.search(_TORCH_BAD_INDEX_LINE, ctx.lines[i].text)][:1]
    own = [f for f in ctx.facts.failures if f.kind in _OWN_DEATHS]
    for ev in ctx.facts.oom_events:
        req, cap = ev.tried_to_allocate_bytes, ev.total_capacity_bytes
        free = ev.free_bytes
        if req is not None and (req >= 2**60 or (cap and req > ABSURD_OVER_CAPACITY * cap)):
            ev.symptom = "the request is far larger than any device: a corrupted size, not memory pressure"
        elif req is not None and cap and req > EXTENSION_OVER_CAPACITY * cap and _in_extension(ctx, ev):
            ev.symptom = (f"a compiled extension's op asked for {req / cap:.0f} times the device in one piece: a buffer "
                          "size computed in native code from a corrupted count (an extension built for another GPU "
                          "or torch, a bad input), not memory pressure")
        elif (ev.kind in _ROOM_KINDS and req and free is not None and free >= max(ROOM_OVER_REQUEST * req, 2**30)
              and ev.allowed_bytes is None and ev.line not in ctx.nvml_unavailable
              # other processes on the device allocate and free between the refused request
              # and the free figure read after it: free memory then proves nothing
              and not split_processes(ev)[1]):
            ev.symptom = (f"the device had {free // 2**20} MiB free for a request of {req // 2**20} MiB: something "
                          "other than the device's memory refused it (a memory pool or allocator of another library, "
                          "a process limit, a driver fault), not memory pressure")
        elif (ev.backend == "XPU" and req and req >= XPU_SINGLE_ALLOCATION_LIMIT and cap and req < cap
              and ev.allocated_by_pytorch_bytes == 0 and not ev.reserved_unallocated_bytes):
            ev.symptom = (f"nothing was allocated and {req // 2**30} GiB of the {cap // 2**30} GiB device was asked for "
                          "in one piece: Intel's GPU runtime refuses a single allocation of 4 GiB or more unless its "
                          "relaxed allocation limits are on, whatever is free (the tensor must be made smaller)")
        elif ev.kind == "cpu_allocator" and (imp := _importing(ctx, ev)) is not None:
            ev.symptom = (f"std::bad_alloc while a module was being imported (line {imp}): a native library "
                          "that is broken or built for other versions throws it on a garbled size before anything "
                          "has used the host's memory; reinstall the packages the import names")
        elif ev.kind in _CONTEXT_ERRORS and (cause := [c for c in corrupting if _may_cause(ev, c[1])]):
            message, line = cause[0]
            ev.symptom = (f"a knock-on of {message[:120]!r} (line {line}): after a broken kernel or a bad index, "
                          "CUDA and cuBLAS calls fail whatever memory is free")
        elif ev.kind == "dataloader_killed" and ev.strength == "likely" and (
                f := next((f for f in ctx.facts.failures
                           if f.kind in _CRASHES and abs(f.line - ev.line) <= _CRASH_REACH), None)):
            # a worker that "exited unexpectedly" (no signal named) beside a crash of its process or
            # of a worker (its report above the main process's traceback, the process's exit
            # status below it): the crash, not a kill for memory
            ev.symptom = (f"the {f.kind.replace('_', ' ')} at line {f.line} ended the DataLoader's worker: a crash, "
                          "not a kill for memory")
        elif ev.strength == "weak" and ev.message_format in SILENT_DEATH_FORMATS and (
                f := next((f for f in own if f.line < ev.line), None)):
            ev.symptom = (f"the launcher stopped the ranks after the {f.kind.replace('_', ' ')} at line {f.line}, "
                          "a failure that is not memory")
        elif ev.strength == "weak" and ev.message_format in MAYBE_OOM_FORMATS and own:
            # (in any order: a worker's own output reaches the driver's log before or after the
            # death's report)
            f = own[0]
            ev.symptom = (f"the report of the death lists the OOM killer as one possible cause; the log shows another: "
                          f"the {f.kind.replace('_', ' ')} at line {f.line}")
        if ev.symptom:
            ctx.note(f"line {ev.line}: the out-of-memory message is not counted as memory pressure: {ev.symptom}")
        elif req and cap and req > FAR_OVER_CAPACITY * cap:
            ctx.note(f"line {ev.line}: the request is {req / cap:,.0f} times the device's memory: no batch size or "
                     "setting makes it fit; the code asks for a tensor that large (a dense matrix or an outer product, "
                     "a sparse tensor made dense, an unbounded length), or computes its size wrongly")


def parse(ctx: ParseContext) -> None:
    fs = _Failures(ctx)
    _rules(ctx, fs)
    _python_exceptions(ctx, fs)
    ctx.facts.failures.sort(key=lambda f: f.line)  # stable: log order, then discovery order
    _symptoms(ctx)

