"""PyTorch caching-allocator OOM messages, every format from torch 1.0 to 2.15.

One message, several shapes (log-formats.md §1.3-1.6):
  F1  1.0-1.3   "... (GPU 0; T total capacity; A already allocated; F free; C cached)"
  F2  1.4-2.0   "... ; R reserved in total by PyTorch)" [+ "L allowed;" 1.8+, hint 1.10+]
  F4  2.1       "GPU 0 has a total capacty of T of which F is free. ..." (sic)
  F5+ 2.2-2.15  typo fixed, expandable_segments hint, private pools (2.4+)
  NPU / XPU / MLU / GCU / HIP forks of the same code.

Real logs break these messages: hard wraps mid-number or mid-word ("4" / "0.30 GiB",
"GPU  has a to" / "tal capacity"), the exception class on the previous line, two ranks'
messages glued or interleaved on one line. So we join a window of lines without a
separator, cut it at each "out of memory. Tried to allocate" anchor, and match every
sentence independently with whitespace-tolerant patterns: a sentence that is missing
(another version, or a truncated copy) leaves its field empty instead of failing the
whole message. Identical copies (two ranks, a logger echo) fold into one event.
"""
from __future__ import annotations

import bisect
from functools import cached_property
from typing import Optional

import regex as re

from ..facts.models import Evidence, OomEvent, ProcessUse
from ..facts.sizes import to_bytes
from ..read.patterns import lazy
from .base import ParseContext

_S = r"(\d[\d,]*(?:\.\d+)?)\s*(bytes|[KMGTPE]i?B)"  # a size, unit maybe glued (wraps)

ANCHOR = lazy(r"(?:(?P<backend>CUDA|HIP|XPU|NPU|MLU|GCU|MUSA)\s*)?[Oo]ut\s*of\s*memory\.\s*Tried\s*to\s*allocate(?!\s*more\s*than\s*1EB)\s*")
# a cheap per-line test before the real anchor search
# a line holding none of these starts no event (one str.find each over the whole log)
_QUICK = ("ut of memory", "ried to alloc", "capacity of", "total capacity", "OutOfMemoryError", "allocation failed with OOM",
          "Allocation on device", "NVML_SUCCESS == r ")
# The exception class with its message lost: IPython's "OutOfMemoryError   Traceback (most
# recent call last)" header of a truncated paste, or "torch.OutOfMemoryError:" alone at the
# end of a log. torch.OutOfMemoryError is raised only by the caching allocator.
# A message cut where the log (or a paste) ends: "CUDA out of memory. Tried to all". The
# allocator's wording is certain; the figures are lost.
_CUT = lazy(r"(?:(?P<backend>CUDA|HIP|XPU|NPU|MLU|GCU|MUSA)\s*)?[Oo]ut\s*of\s*memory\.\s*(?P<tail>[A-Za-z ]{0,17})$")


def _cut_message(text: str):
    """The allocator's message cut inside "Tried to allocate" (or right before it)."""
    m = _CUT.search(text)
    if m and "tried to allocate".startswith(" ".join(m.group("tail").lower().split())):
        return m
    return None


_CLASS_ONLY = lazy(r"^\s*(?P<exc>(?:torch\.)?(?:cuda\.)?OutOfMemoryError)(?:\s{3,}Traceback \(most recent call last\)|:?\s*$"
                  # ... or with the first words of the asynchronous allocator's message only
                  # (cudaMallocAsync: "Allocation on device 0 would exceed allowed memory")
                  r"|:\s*Allocation on device\b(?! \d{1,3} would exceed))")
# ComfyUI's report of the exception a node raised, by its message alone: the allocator's first
# words ("!!! Exception during processing !!! Allocation on device"; releases of 2024 print no
# space before the second "!!!"), the figures lost
# ... or as the whole of a line: ComfyUI's error dialog ("Error occurred when executing
# DepthAnything_V2:", a blank line, the exception's message, the traceback) copied from the UI;
# or as the end of one, after a colon: a node that caught the exception and printed its message
# ("Error in image_to_3d: Allocation on device")
_PROCESSING = lazy(r"!!! Exception during processing ?!!! Allocation on device\b(?! \d{1,3} would exceed)"
                   r"|(?:^|:)\s*Allocation on device\s*$")
# The caching allocator failing inside its out-of-memory path: it asks NVML for the device's
# processes to word its message, and where NVML may not answer (a MIG slice, Jetson, some
# containers) an internal assert replaces the message ("NVML_SUCCESS == r INTERNAL ASSERT FAILED
# at \"../c10/cuda/CUDACachingAllocator.cpp\":830, please report a bug to PyTorch."). Its other
# NVML asserts (nvmlInit_v2_, a device handle by PCI bus id) name their call: they are set-up
# failures, not this one. The same query serves expandable segments: likely, not certain
_NVML_FORMAT = "nvml-assert (message not in the log)"
_NVML_ASSERT = lazy(r"NVML_SUCCESS == r INTERNAL ASSERT FAILED at \"?[^\"\n]{0,300}?CUDACachingAllocator\.cpp")
# ComfyUI's report of a node's exception, printed before the traceback that ends in it
_PROCESSING_ECHO = lazy(r"!!! Exception during processing ?!!!")
# The class named by something that reports the exception without its message: an error
# report's field ("Exception Type: torch.OutOfMemoryError", ComfyUI's), Ray relaying a task's
# exception ("ray.exceptions.RayTaskError(OutOfMemoryError): ray::Policy.get_logprobs()"),
# PyTorch re-raising a replica's or a DataLoader worker's exception under its own class
# ("torch.cuda.OutOfMemoryError: Caught OutOfMemoryError in replica 0 on device 0.", with the
# original message in an "Original Traceback" that a paste may have cut)
_CLASS_NAMED = lazy(r"\bException Type:\s*(?P<exc>(?:torch\.)?(?:cuda\.)?OutOfMemoryError)\s*$"
                    r"|\bRayTaskError\((?P<ray>OutOfMemoryError)\)"
                    r"|^\s*(?P<caught>(?:torch\.)?(?:cuda\.)?OutOfMemoryError):\s*Caught OutOfMemoryError in "
                    r"(?:replica \d{1,4} on device (?P<dev>\d{1,4})|DataLoader worker process \d{1,4})")
# ... with its request but not its first words, as a user shortened it by hand
# ("torch.OutOfMemoryError: Tried to allocate 12.60 GiB. GPU had 12.44 GiB free of 79.19")
_CLASS_TRIED = lazy(r"^\s*(?P<exc>(?:torch\.)?(?:cuda\.)?OutOfMemoryError):\s*(?=Tried\s*to\s*allocate\s*" + _S + r")")
# ... or without its first words at all, a paste that starts at the request: "Tried to allocate
# 20.00 MiB (GPU 0; 1.96 GiB total capacity; ...)", "Tried to allocate 2.00 GiB. GPU 0 has a total
# capacity of ...": the figures that follow are the allocator's alone. So are they after first
# words of another kind: a vendor's own ("Current platform can NOT allocate memory block with
# size larger than 4GB! Tried to allocate ... (GPU 0; ... total capacity; ...)", Intel's XPU
# builds) or words a paste garbled ("CuDh out of menory. Tried to allocate ...", a screenshot
# read by OCR)
_HEADLESS = lazy(r"^(?P<lead>[^\n]{0,300}?)(?P<head>Tried to allocate)(?=\s*" + _S + r"\s*(?:\(\s*(?P<dev>GPU|NPU|XPU)\s*\d+\s*;\s*" + _S
                 + r"\s*total\s*capacity|\.\s*(?P<dev2>GPU|Device|NPU|XPU|MLU|GCU)\s*\d*\s*has\s*a\s*total\s*capac))")

# Intel's XPU builds refuse one allocation above a size, whatever is free
_BLOCK_LIMIT = lazy(r"can NOT allocate memory block with size larger than (?P<cap>\d{1,4}\s?[GM]i?B)")

_F = {
    "req": lazy(r"Tried\s*to\s*allocate\s*" + _S),
    "total_new": lazy(r"(?:GPU|Device|MLU|GCU|NPU|XPU)\s*(?P<dev>\d*)\s*has\s*a\s*total\s*capac(?:i)?ty\s*of\s*" + _S),
    "free_new": lazy(r"of\s*which\s*" + _S + r"\s*is\s*free"),
    # ("memory" is dropped as often as any word when a user retypes the message)
    "self": lazy(r"Including\s*non-PyTorch\s*memory,\s*this\s*process\s*has\s*" + _S + r"\s*(?:memory\s*)?in\s*use"),
    "proc": lazy(r"Process\s*(?P<pid>\d+)\s*has\s*" + _S + r"\s*(?:memory\s*)?in\s*use"),
    "allowed": lazy(_S + r"\s*allowed\s*;"),
    # (its first words may be cut: "... 73.15 GiB is allocated by PyTorch ...")
    "alloc_new": lazy(r"(?:Of\s*the\s*allocated\s*memory\s*)?" + _S + r"\s*is\s*allocated\s*by\s*PyTorch"),
    "priv": lazy(r"with\s*" + _S + r"\s*allocated\s*in\s*private\s*pools"),
    "unalloc": lazy(r"and\s*" + _S + r"\s*is\s*reserved\s*by\s*PyTorch\s*but\s*unallocated"),
    "total_old": lazy(r"\(?\s*(?:GPU|NPU|XPU)\s*(?P<dev>\d+)\s*;\s*" + _S + r"\s*total\s*capacity"),
    "already": lazy(_S + r"\s*already\s*allocated"),
    "active": lazy(_S + r"\s*current\s*active"),
    "free_old": lazy(_S + r"\s*free\s*[;)]"),
    "reserved": lazy(_S + r"\s*reserved\s*in\s*total\s*by\s*PyTorch"),
    "cached": lazy(_S + r"\s*cached\s*\)"),
    "hint": lazy(r"If\s*reserved\s*(?:but\s*unallocated\s*)?memory\s*is.{0,200}?(?:fragmentation\.|PYTORCH_\w*ALLOC_CONF(?:=expandable_segments:True)?)", re.S),
}
_EXC = ("torch.cuda.OutOfMemoryError", "torch.OutOfMemoryError", "torch.AcceleratorError",
        "torch.distributed.DistBackendError", "OutOfMemoryError", "RuntimeError")
# lines that cannot continue a wrapped message
_STOP = lazy(r"^\s*(?:File \"|Traceback \(|During handling|The above exception|\[?\d{4}-\d{2}-\d{2}|\s{2,}\S)")
# the end of a message: its last words (the 2.0-era hint ends with the variable's name;
# later hints go on "=expandable_segments:True to avoid fragmentation.  See documentation
# ... (URL)", so there the variable's name is not the end)
_END = lazy(r"PYTORCH_\w*ALLOC_CONF\s*$|notes/cuda\.html[#\w-]*\)|empty_cache`|fragmentation\.\s*$|cached\s*\)"
                  r"|by\s*PyTorch\s*\)\s*\.?\s*$")
# a line that still belongs to a message whose last line looked like an end
_GOES_ON = lazy(r"^\s*(?:=\s*expandable|See\s*documentation|\(https?://|If\s*reserved)")
# an indented line that opens one of the message's own sentences: the message wrapped into an
# indented column (a logger that lays its records out as a table, rich's among them: "       Process
# 1932079 has 21.12 GiB memory in use. Of the allocated memory ..."), not code; the lines under it
# indented as far are that column's too
_SENTENCE = lazy(r"^(?P<indent>\s+)(?:Process\s*\d+\s*has|Including\s*non-PyTorch|Of\s*the\s*allocated"
                 r"|GPU\s*\d+\s*has\s*a\s*total|If\s*reserved)")

# sizes no GPU has: NVML reports garbage in some containers / WSL (16 EiB "in use")
_ABSURD = 2**50


def _bytes(m: Optional[re.Match], num: int = 1, unit: int = 2) -> Optional[int]:
    if not m:
        return None
    return to_bytes(m.group(num), m.group(unit))


def _exception_before(prefix: str) -> Optional[str]:
    """The exception class printed before the message; tolerant of interleaving."""
    tail = prefix[-160:]
    for name in _EXC[:4]:
        if name in tail:
            return name
    if "OutOfMemoryError" in tail and "torch." in tail:
        # interleaved copies: "torch.cudatorch.cuda..OutOfMemoryErrorOutOfMemoryError"
        return "torch.cuda.OutOfMemoryError" if "cuda" in tail else "torch.OutOfMemoryError"
    for name in _EXC[4:]:
        if name in tail:
            return name
    return None


def _format(text: str, backend: Optional[str]) -> str:
    if backend == "NPU":
        if "current active" in text.replace("\n", ""):
            return "torch_npu-2.10+" if re.search(r"PyTorch\)\.\s*If", text) else "torch_npu-2.1-2.9"
        return "torch_npu-old"
    if backend == "XPU":
        return "xpu"
    flat = "".join(text.split())   # joined hard wraps may have lost or kept any space
    if "cached)" in flat:
        return "torch-1.0-1.3"
    if "reservedintotal" in flat or "alreadyallocated" in flat:
        return "torch-1.10-2.0" if "max_split_size_mb" in flat else "torch-1.4-2.0"
    if "capacty" in flat and "capacity" not in flat:
        return "torch-2.1"
    if "PYTORCH_ALLOC_CONF" in flat:
        return "torch-2.10"
    if "docs.pytorch.org" in flat:
        return "torch-2.11+"
    if "privatepools" in flat:
        return "torch-2.4-2.9"
    if "expandable_segments" in flat:
        return "torch-2.2-2.9"
    return "torch-2.1+"


# The hints PyTorch prints ({var}: PYTORCH_CUDA_ALLOC_CONF, PYTORCH_ALLOC_CONF, the HIP name).
_HINTS = ("If reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.",
          "If reserved but unallocated memory is large try setting max_split_size_mb to avoid fragmentation.",
          "If reserved but unallocated memory is large try setting {var}=expandable_segments:True",
          "If reserved but unallocated memory is large try setting {var}")
_HINT_VAR = lazy(r"PYTORCH_\w*ALLOC_CONF")


def _hint_text(found: str) -> str:
    """The hint as PyTorch wrote it. A message joined across a word wrap lost the spaces at
    its breaks ("try settingPYTORCH_..."), and a wrap that put ">>" first on a line had it
    taken for quoting, so compare without spaces and ">"."""
    flat = "".join(found.split()).replace(">", "")
    var = _HINT_VAR.search(flat)
    for hint in _HINTS:
        hint = hint.format(var=var.group(0) if var else "")
        if flat == "".join(hint.split()).replace(">", ""):
            return hint
    return " ".join(found.split())


def _in_column(column: Optional[str], line: str) -> bool:
    """Is ``line`` a row of the column ``column`` (its indent): indented exactly as far?"""
    return (column is not None and len(line) > len(column) and line.startswith(column)
            and not line[len(column)].isspace())


def _message_window(ctx: ParseContext, i: int) -> str:
    """The anchor line plus the lines a hard wrap may have pushed the rest onto."""
    text = ctx.lines[i].text
    parts = [text]
    ended = bool(_END.search(text))
    # the indent of a column the message wrapped into (see _SENTENCE): where the message itself
    # starts indented (a table's column, rich's message column under its time and level), the
    # lines indented exactly as far, their first character not a space, are its next rows
    lead = len(text) - len(text.lstrip(" "))
    # ... or where it started on its row before normalisation took a time and level off the
    # row (rich's "[03/17/23 20:03:12] ERROR    torch.OutOfMemoryError: ... Tried to"): the
    # rows under it indented as far are the message's
    raw, head = ctx.lines[i].raw, text[lead:lead + 24]
    if raw is not text and head and (at := raw.find(head)) > lead:
        lead = at
    column = " " * lead if lead >= 2 else None
    for j in range(i + 1, min(len(ctx.lines), i + 10)):
        nxt = ctx.lines[j].text
        if ended and not _GOES_ON.search(nxt):
            break
        in_column = _in_column(column, nxt)
        if len(parts) == 1 and not in_column:
            m = _SENTENCE.search(nxt)
            column = m.group("indent") if m else None
            in_column = _in_column(column, nxt)
        # in the column, indentation is the layout's, but a frame or a new record still stops it
        stop = _STOP.search(nxt.lstrip() if in_column else nxt) and not _GOES_ON.search(nxt)
        if not nxt.strip() or stop or ANCHOR.search(nxt):
            break
        parts.append(nxt.strip("\r"))
        # the end may itself be wrapped ("...cuda.html#environment-variables" / ")")
        ended = bool(_END.search(parts[-2][-200:] + nxt))
        if sum(len(p) for p in parts) > 6000:
            break
    return "".join(parts)


# A terminal's wrap padding kept inside one line: a message copied from a terminal that wrapped
# it at its width, each row padded with spaces to that width and the rows then joined ("...
# Includi<48 spaces>ng non-PyTorch memory"). No allocator message holds such a run; taken out,
# the words cut mid-word are whole again (the fields' patterns allow a space lost at a break).
_WRAP_PAD = lazy(r"(?<=\S) {16,}(?=\S)")


def parse_message(body: str, backend: Optional[str]) -> dict:
    """Fields of one allocator message (``body`` starts at "Tried to allocate")."""
    if "                " in body:
        body = _WRAP_PAD.sub("", body)
    f: dict = {}
    get = lambda key: _F[key].search(body, timeout=0.5)  # noqa: E731
    f["tried_to_allocate_bytes"] = _bytes(get("req"))
    m = get("total_new")
    if m:
        f["device_index"] = int(m.group("dev")) if m.group("dev") else None
        f["total_capacity_bytes"] = _bytes(m, 2, 3)
        f["free_bytes"] = _bytes(get("free_new"))
        f["allocated_by_pytorch_bytes"] = _bytes(get("alloc_new"))
        f["private_pool_bytes"] = _bytes(get("priv"))
        f["reserved_unallocated_bytes"] = _bytes(get("unalloc"))
    else:
        m = get("total_old")
        if m:
            f["device_index"] = int(m.group("dev"))
            f["total_capacity_bytes"] = _bytes(m, 2, 3)
        f["already_allocated_bytes"] = _bytes(get("already"))
        f["current_active_bytes"] = _bytes(get("active"))
        f["free_bytes"] = _bytes(get("free_old"))
        f["reserved_total_bytes"] = _bytes(get("reserved"))
        f["cached_unallocated_bytes"] = _bytes(get("cached"))
        # torch <= 1.3 printed "cached" as what the cache held beyond the allocated
        # memory: the quantity later messages call reserved but unallocated.
        f["reserved_unallocated_bytes"] = f["cached_unallocated_bytes"]
    f["allowed_bytes"] = _bytes(get("allowed"))
    procs: list[ProcessUse] = []
    m = get("self")
    if m:
        procs.append(ProcessUse(pid=None, bytes=_bytes(m) or 0, is_self=True))
    listed: set[int] = set()
    for pm in _F["proc"].finditer(body, timeout=0.5):
        pid = int(pm.group("pid"))
        if pid not in listed:   # a process NVML lists twice is one process
            listed.add(pid)
            procs.append(ProcessUse(pid=pid, bytes=_bytes(pm, 2, 3) or 0))
    f["processes"] = [p for p in procs if p.bytes < _ABSURD]
    f["dropped_processes"] = len(procs) - len(f["processes"])
    h = get("hint")
    f["hint"] = _hint_text(h.group(0)) if h else None
    return f


def _process_in_use(f: dict) -> Optional[int]:
    """This process's memory: stated ("this process has"), or in a container the
    ``Process N has`` entry that must hold PyTorch's memory, or that matches it plus a
    context's worth."""
    own = next((p.bytes for p in f["processes"] if p.is_self), None)
    pytorch = (f.get("allocated_by_pytorch_bytes") or 0) + (f.get("reserved_unallocated_bytes") or 0)
    if own is not None:
        return own
    if not pytorch or not f["processes"]:
        return None
    # a process holding so much that PyTorch's memory could not sit beside it on the device
    # holds PyTorch's memory: it is this process, whatever else it holds
    total = f.get("total_capacity_bytes")
    if total:
        holding = [p.bytes for p in f["processes"] if p.bytes >= pytorch and p.bytes + pytorch > total]
        if len(holding) == 1:
            return holding[0]
    candidates = [p.bytes for p in f["processes"] if pytorch <= p.bytes <= pytorch + 4 * 2**30]
    return min(candidates, key=lambda b: b - pytorch) if candidates else None


_KIND = {"HIP": "hip", "NPU": "npu", "XPU": "xpu"}


def allocator_kind(backend: Optional[str]) -> str:
    """The event kind of the caching allocator's message on a backend (its fork's wording:
    "HIP out of memory", "NPU out of memory"; CUDA's, or none named, is PyTorch's own)."""
    return _KIND.get(backend or "", "cuda_caching_allocator")
_MAX_EVIDENCE = 8   # evidence lines kept per event

# The cudaMallocAsync backend's message (PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync):
# "Allocation on device 0 would exceed allowed memory. (out of memory)", then a table,
# "Currently allocated     : 16.66 GiB", "Requested : ...", "Device limit : ...",
# "Free (according to CUDA): ...", "PyTorch limit (set by user-supplied memory fraction)" / ": ..."
_ASYNC_QUICK = "would exceed allowed memory"
_ASYNC = lazy(r"Allocation on device (?P<dev>\d{1,3}) would exceed allowed memory\. \(out of memory\)")
_ASYNC_ROWS = {"Currently allocated": "allocated_by_pytorch_bytes", "Requested": "tried_to_allocate_bytes",
               "Device limit": "total_capacity_bytes", "Free (according to CUDA)": "free_bytes",
               "PyTorch limit": "allowed_bytes"}
_ASYNC_ROW = lazy(r"^\s*(?:(?P<name>" + "|".join(map(re.escape, _ASYNC_ROWS)) + r")[^:]{0,60})?\s*:\s*" + _S + r"\s*$")


# The warning the caching allocator logs when a request fails (torch >= 2.7): "[W906
# 15:02:06.204334026 CUDACachingAllocator.cpp:3934] memory allocation failed with OOM on
# device 0 while trying to allocate 1000341504 bytes (free: 916848640, total: 25243287552)."
# The message it raises follows unless a retry succeeds: alone the warning is likely, and a
# run that goes on after it survived it (parsers/phase.py).
RETRIED_FORMAT = "caching-allocator-warning"
_WARNED_QUICK = "allocation failed with OOM"
_WARNED = lazy(r"memory allocation failed with OOM on device (?P<dev>\d{1,3}) while trying to allocate (?P<req>\d{1,20}) bytes"
               r"(?: \(free: (?P<free>\d{1,20}), total: (?P<total>\d{1,20})\))?")


def _warned_event(ctx: ParseContext, i: int) -> Optional[OomEvent]:
    ln = ctx.lines[i]
    m = _WARNED.search(ln.text)
    if m is None:
        return None
    num = lambda g: int(m.group(g)) if m.group(g) else None  # noqa: E731
    return OomEvent(kind="cuda_caching_allocator", backend="CUDA", message_format=RETRIED_FORMAT,
                    device_index=int(m.group("dev")), tried_to_allocate_bytes=int(m.group("req")),
                    free_bytes=num("free"), total_capacity_bytes=num("total"), strength="likely", **ctx.at(ln))


def _async_event(ctx: ParseContext, i: int) -> Optional[OomEvent]:
    """The cudaMallocAsync backend's OOM and the figures of its table (the lines below it)."""
    ln = ctx.lines[i]
    m = _ASYNC.search(ln.text)
    if m is None:
        return None
    f: dict = {}
    pending = None   # "PyTorch limit (set by ...)" prints its figure on the line below its name
    rest = ln.text[m.end():]
    if "\\n" in rest:
        # the message kept in an escaped string (a Rust Debug string, a Python repr): its table
        # on the same line, the rows between literal "\n"s
        rows = rest.split("\\n")[1:8]
    else:
        rows = [ctx.lines[j].text for j in range(i + 1, min(len(ctx.lines), i + 8))]
    for text in rows:
        row = _ASYNC_ROW.match(text)
        if row is None:
            if text.lstrip().startswith("PyTorch limit"):
                pending = "PyTorch limit"
                continue
            break
        name, pending = row.group("name") or pending, None
        if name:
            f[_ASYNC_ROWS[name]] = to_bytes(row.group(2), row.group(3))
    total, allowed = f.get("total_capacity_bytes"), f.pop("allowed_bytes", None)
    return OomEvent(kind="cuda_caching_allocator", backend="CUDA", message_format="cuda-malloc-async",
                    exception=_exception_before(ln.text[:m.start()]), device_index=int(m.group("dev")),
                    allowed_bytes=allowed if allowed and total and allowed < total else None,
                    **ctx.at(ln), **f)


_COMPARE = ("tried_to_allocate_bytes", "total_capacity_bytes", "free_bytes", "allocated_by_pytorch_bytes",
            "reserved_unallocated_bytes", "already_allocated_bytes", "reserved_total_bytes")


def _same(a: OomEvent, b: OomEvent) -> bool:
    if a.kind != b.kind or a.device_index != b.device_index:
        return False
    for name in _COMPARE:
        x, y = getattr(a, name), getattr(b, name)
        if x is not None and y is not None and x != y:
            return False
    return a.tried_to_allocate_bytes == b.tried_to_allocate_bytes


def _merge(into: OomEvent, new: OomEvent, ev: Evidence) -> None:
    into.count += 1
    for name, value in new:
        if name in ("count", "line", "evidence", "ranks"):
            continue
        if getattr(into, name) in (None, []) and value not in (None, []):
            setattr(into, name, value)
    for r in new.ranks:
        if r not in into.ranks:
            into.ranks.append(r)
    if len(into.evidence) < _MAX_EVIDENCE:
        into.evidence.append(ev)


# an out-of-memory message of some backend, as a library raises it
_OOM_MESSAGE = lazy(r"(?:CUDA|HIP|XPU|NPU|MLU|GCU|MUSA|MPS backend|[Ee]rror:)\s*out of memory|would exceed allowed memory")


class _Nearby:
    """Where a log's out-of-memory messages are, found once a log (on the first line that needs
    them) and asked by bisection: an exception named without its message (a notebook's header,
    an error report's field, Ray relaying it, ComfyUI's report) is no event of its own when its
    message is printed near it."""

    SPAN = 400   # lines either side in which a relayed exception's message counts as its own
    ECHO = 200   # lines below ComfyUI's report in which the traceback it reports ends

    def __init__(self, ctx: ParseContext):
        self.ctx = ctx

    @cached_property
    def anchors(self) -> list[int]:
        """The allocator's own message ("out of memory. Tried to allocate")."""
        return [j for j in self.ctx.lines_with(("memory",)) if ANCHOR.search(self.ctx.lines[j].text)]

    @cached_property
    def class_only(self) -> list[int]:
        """The exception's class alone (or with its first words), and notebooks' headers."""
        return [j for j in self.ctx.lines_with(("OutOfMemoryError",)) if _CLASS_ONLY.match(self.ctx.lines[j].text)]

    @cached_property
    def headers(self) -> list[int]:
        """Notebooks' "OutOfMemoryError   Traceback (most recent call last)" headers."""
        return [j for j in self.class_only if "Traceback" in self.ctx.lines[j].text]

    @cached_property
    def ends(self) -> list[int]:
        """The lines that end a traceback in the allocator's exception: its message, its first
        words, or the class alone."""
        return sorted(set(self.anchors) | set(self.class_only) | set(self.ctx.lines_with((_ASYNC_QUICK,))))

    @cached_property
    def messages(self) -> list[int]:
        """Any backend's wording (MPS's, the asynchronous allocator's, a cut message); not prose
        such as "you ran out of memory on your GPU"."""
        return [j for j in self.ctx.lines_with(("ut of memory", "would exceed allowed memory"))
                if self.ctx.search(_OOM_MESSAGE, self.ctx.lines[j].text)]

    @cached_property
    def ray_monitor(self) -> list[int]:
        """Ray's memory monitor, which raises an OutOfMemoryError of its own (host memory)."""
        return self.ctx.lines_with(("running low on memory", "Memory on the node"))

    @staticmethod
    def between(lines: list[int], lo: int, hi: int) -> bool:
        """Is one of these (sorted) lines in [lo, hi)?"""
        k = bisect.bisect_left(lines, lo)
        return k < len(lines) and lines[k] < hi

    @staticmethod
    def before(lines: list[int], i: int) -> Optional[int]:
        """The last of these (sorted) lines before line ``i``."""
        k = bisect.bisect_left(lines, i)
        return lines[k - 1] if k else None

    def relayed(self, i: int, lines: list[int]) -> bool:
        return self.between(lines, i - self.SPAN, i + self.SPAN + 1)

    def echoed_below(self, i: int) -> bool:
        """Does a traceback just below line ``i`` end in the allocator's exception?"""
        return self.between(self.ends, i + 1, i + self.ECHO)

    def header_has_message(self, i: int) -> bool:
        """Is a notebook header's own message in the log: further down, before the next cell's
        header (its traceback ends in it); or above it, with no other cell's header between (a
        user who pasted the message first and the notebook's traceback after it), unless the
        nearest header above that message owns it (its traceback ends in it, and no message of
        its own came first)?"""
        lo, hi = i - self.SPAN + 1, i + self.SPAN
        k = bisect.bisect_right(self.anchors, i)
        if k < len(self.anchors) and self.anchors[k] < hi:
            nxt = bisect.bisect_right(self.headers, i)
            if nxt == len(self.headers) or self.anchors[k] < self.headers[nxt]:
                return True
        above = self.before(self.anchors, i)
        if above is None or above < lo:
            return False
        header = self.before(self.headers, i)
        if header is not None and header > above:
            return False
        owner = self.before(self.headers, above)
        return owner is None or owner < lo or self.between(self.anchors, owner + 1, above)


# How many earlier events of one (kind, device, request) bucket a new event is compared
# with once the bucket is large: bounds the work per event, so de-duplication is linear.
_TWIN_SCAN = 64


class _Twins:
    """Identical copies of one message (two ranks, a logger echo) fold into one event.

    Events are bucketed by what ``_same`` requires to be equal (kind, device, request), so a
    new event is compared with its bucket only, and with at most ``_TWIN_SCAN`` of them
    when the bucket is large (an exact copy is still found through ``exact``). Twenty
    thousand distinct messages (automatic batch-size retries) cost linear time, not the
    quadratic scan of every earlier event."""

    def __init__(self) -> None:
        self.buckets: dict[tuple, list[OomEvent]] = {}
        self.exact: dict[tuple, OomEvent] = {}

    @staticmethod
    def _key(ev: OomEvent) -> tuple:
        return ev.kind, ev.device_index, ev.tried_to_allocate_bytes

    @staticmethod
    def _full(ev: OomEvent) -> tuple:
        return (ev.kind, ev.device_index, ev.tried_to_allocate_bytes) + tuple(getattr(ev, n) for n in _COMPARE)

    def keep(self, events: list[OomEvent], ev: OomEvent, evidence: Evidence) -> None:
        """``ev`` joins ``events``, unless it is a copy of one there: then that one counts it."""
        twin = self.find(ev)
        if twin is not None:
            _merge(twin, ev, evidence)
        else:
            events.append(ev)
            self.add(ev)

    def find(self, ev: OomEvent) -> OomEvent | None:
        bucket = self.buckets.get(self._key(ev))
        if not bucket:
            return None
        if len(bucket) <= _TWIN_SCAN:
            return next((e for e in bucket if _same(e, ev)), None)
        twin = self.exact.get(self._full(ev))
        if twin is not None:
            return twin
        return next((e for e in bucket[-_TWIN_SCAN:] if _same(e, ev)), None)

    def add(self, ev: OomEvent) -> None:
        self.buckets.setdefault(self._key(ev), []).append(ev)
        self.exact.setdefault(self._full(ev), ev)


class _Raised:
    """The messages raised, by device and request: the first (in log order) of a device
    whose request is within 1 % of a given one (a message rounds its figure), found by
    bisection, not by a scan of every message for every warning."""

    def __init__(self, events: list[OomEvent]) -> None:
        self.by_device: dict[Optional[int], list[tuple[int, int, OomEvent]]] = {}
        for order, e in enumerate(events):
            if e.tried_to_allocate_bytes:
                self.by_device.setdefault(e.device_index, []).append((e.tried_to_allocate_bytes, order, e))
        for rows in self.by_device.values():
            rows.sort(key=lambda r: r[:2])
        self.keys = {d: [r[0] for r in rows] for d, rows in self.by_device.items()}

    def find(self, device: Optional[int], req: int) -> Optional[OomEvent]:
        rows = self.by_device.get(device)
        if not rows:
            return None
        keys = self.keys[device]
        near = rows[bisect.bisect_left(keys, req - req // 100):bisect.bisect_right(keys, req + req // 100)]
        return min(near, key=lambda r: r[1])[2] if near else None

    def find_any(self, req: int) -> Optional[OomEvent]:
        """The same, on whichever device (a message that names none)."""
        return next((e for device in self.by_device if (e := self.find(device, req)) is not None), None)


def _allocator_event(ctx: ParseContext, ln, f: dict, backend: Optional[str], exc: Optional[str],
                     fmt: str) -> OomEvent:
    """The event of one allocator message's fields (``parse_message``), with notes on the
    figures NVML got wrong."""
    stated = next((p.bytes for p in f["processes"] if p.is_self), None)
    if stated is not None and stated < (f.get("allocated_by_pytorch_bytes") or 0):
        ctx.note(f"line {ln.no}: 'this process has {stated} bytes in use' is less than PyTorch itself holds "
                 "(NVML cannot see the process, as in many containers): not used in the arithmetic")
    if f["dropped_processes"]:
        ctx.nvml_unavailable.add(ln.no)
        ctx.note(f"line {ln.no}: ignored {f['dropped_processes']} impossible 'memory in use' figure(s) from NVML")
    return OomEvent(
        kind=allocator_kind(backend), backend=backend, exception=exc, message_format=fmt,
        device_index=f.get("device_index"), tried_to_allocate_bytes=f["tried_to_allocate_bytes"],
        total_capacity_bytes=f.get("total_capacity_bytes"), free_bytes=f.get("free_bytes"),
        process_in_use_bytes=_process_in_use(f), allocated_by_pytorch_bytes=f.get("allocated_by_pytorch_bytes"),
        reserved_unallocated_bytes=f.get("reserved_unallocated_bytes"), reserved_total_bytes=f.get("reserved_total_bytes"),
        already_allocated_bytes=f.get("already_allocated_bytes"), cached_unallocated_bytes=f.get("cached_unallocated_bytes"),
        current_active_bytes=f.get("current_active_bytes"), private_pool_bytes=f.get("private_pool_bytes"),
        allowed_bytes=f.get("allowed_bytes"), processes=f["processes"], hint=f["hint"], **ctx.at(ln))


_FIGURES = ("total_capacity_bytes", "free_bytes", "already_allocated_bytes", "reserved_total_bytes",
            "allocated_by_pytorch_bytes", "reserved_unallocated_bytes")


def _unreadable_but_real(tail: str, f: dict) -> bool:
    """A message whose request cannot be read is still the allocator's when nothing follows
    "Tried to allocate" (the log or the line cut there), when a number begins what follows (its
    figure garbled), or when the message's other figures can be read."""
    rest = tail.strip()
    return not rest or rest[0].isdigit() or any(f.get(k) is not None for k in _FIGURES)


def _wrapped_anchor(ctx: ParseContext, i: int) -> bool:
    """Does line ``i`` finish an anchor begun on the line above it (a blank line between
    allowed): "CUDA out of memory." / "Tried to allocate ..." is one message, read from there."""
    j = i - 1
    while j >= 0 and i - j <= 3 and not ctx.lines[j].text.strip():
        j -= 1
    return j >= 0 and bool(ANCHOR.search(ctx.lines[j].text + ctx.lines[i].text))


def parse(ctx: ParseContext) -> None:
    events: list[OomEvent] = []
    twins = _Twins()
    warned: list[OomEvent] = []
    shortened: list[OomEvent] = []   # "OutOfMemoryError: Tried to allocate N" with the rest cut by hand
    nearby = _Nearby(ctx)   # its lists are found when first asked for
    nvml_seen: dict[str, OomEvent] = {}   # the allocator's NVML asserts, by their words
    for i in ctx.lines_with(_QUICK):
        ln = ctx.lines[i]
        if "DataLoader worker" in ln.text and (m := _CLASS_NAMED.search(ln.text)) and m.group("caught"):
            # the main process re-raising a worker's error: whichever event it relays happened
            # in a worker (kb/table.py reads this marker)
            ctx.mark("dataloader_worker_reraised", ln)
        if "!!! Exception during processing" in ln.text and ctx.search(_PROCESSING_ECHO, ln.text) \
                and nearby.echoed_below(i):
            continue   # ComfyUI's report of the exception the traceback below ends in: that one is the event
        # the forms of other allocator backends and of the warning logged before the message
        if _ASYNC_QUICK in ln.text and (ev := _async_event(ctx, i)) is not None:
            events.append(ev)
            continue
        if _WARNED_QUICK in ln.text and (ev := _warned_event(ctx, i)) is not None:
            warned.append(ev)
            continue
        if not ANCHOR.search(ln.text) and i + 1 < len(ctx.lines) and ANCHOR.search(ln.text + ctx.lines[i + 1].text):
            pass  # the anchor itself is hard-wrapped ("Tried t" / "o allocate"): the window rejoins it
        elif not ANCHOR.search(ln.text):
            cut = _cut_message(ln.text) if i + 1 == len(ctx.lines) or not ctx.lines[i + 1].text.strip() else None
            if cut:
                backend = cut.group("backend")
                events.append(OomEvent(kind=allocator_kind(backend), backend=backend,
                                       exception=_exception_before(ln.text[:cut.start()]),
                                       message_format="cut (figures not in the log)",
                                       **ctx.at(ln)))
                continue
            # (the assert that names NVML's own out-of-resources code is the runtime family's)
            m = ctx.search(_NVML_ASSERT, ln.text) if "NVML_SUCCESS == r " in ln.text \
                and "INSUFFICIENT_RESOURCES" not in ln.text else None
            said = ln.text[m.start():].strip() if m else ""
            if m and (same := nvml_seen.get(said)):
                same.count += 1   # the same assert again (another rank's copy, a logger's echo)
                continue
            if m:
                ev = OomEvent(kind="cuda_caching_allocator", strength="likely", backend="CUDA",
                              exception=_exception_before(ln.text[:m.start()]), message_format=_NVML_FORMAT,
                              detail="the caching allocator's NVML query failed while it reported an "
                                     "out-of-memory error (a MIG slice, Jetson or a container where NVML does "
                                     "not answer): the figures are lost",
                              **ctx.at(ln))
                nvml_seen[said] = ev
                events.append(ev)
                continue
            # (after the exception's class, "torch.OutOfMemoryError: Allocation on device", it is
            # the class-only form below, which names the exception)
            m = ctx.search(_PROCESSING, ln.text) if "Allocation on device" in ln.text \
                and "OutOfMemoryError" not in ln.text else None
            if m and any(e.kind == "cuda_caching_allocator" and ln.no - 4 <= e.line < ln.no for e in events):
                continue  # the message under its exception's class ("Exception Type: ...", then "... Message:")
            if m:
                events.append(OomEvent(kind="cuda_caching_allocator", message_format="class only (message not in the log)",
                                       detail="the allocator's exception reported by its first words only "
                                              "(ComfyUI, or a caller that printed it)",
                                       **ctx.at(ln)))
                continue
            m = _HEADLESS.match(ln.text) if "ried to allocate" in ln.text else None
            if m and not _wrapped_anchor(ctx, i):
                body = _message_window(ctx, i)[m.start("head"):]
                word = m.group("dev") or m.group("dev2")
                backend = word if word in _KIND else None
                lead = m.group("lead").strip(" \t`'\"")
                limit = ctx.search(_BLOCK_LIMIT, lead) if "larger than" in lead else None
                if limit:
                    backend = "XPU"   # Intel's builds say "GPU 0" in the figures that follow
                ev = _allocator_event(ctx, ln, parse_message(body, backend), backend,
                                      _exception_before(lead) if lead else None,
                                      "headless (its first words not in the log)" if not lead
                                      else "other first words (the allocator's figures after them)")
                if limit:
                    ev.detail = (f"the platform refuses any single allocation larger than {limit.group('cap')}, "
                                 "however much memory is free: the tensor asked for must be made smaller")
                twins.keep(events, ev, ctx.evidence(ln))
                continue
            m = _CLASS_TRIED.match(ln.text)
            if m:
                f = parse_message(ln.text[m.end():], None)
                shortened.append(OomEvent(kind="cuda_caching_allocator", exception=m.group("exc"),
                                          message_format="class and request only (the message shortened)",
                                          tried_to_allocate_bytes=f["tried_to_allocate_bytes"], **ctx.at(ln)))
                continue
            m = _CLASS_ONLY.match(ln.text)
            if m and not nearby.between(nearby.anchors, i + 1, i + 4) \
                    and not ("Traceback" in ln.text and nearby.header_has_message(i)):
                events.append(OomEvent(kind="cuda_caching_allocator", exception=m.group("exc"),
                                       message_format="class only (message not in the log)",
                                       **ctx.at(ln)))
                continue
            m = _CLASS_NAMED.search(ln.text)
            if m:
                # a relayed exception's own message is usually printed with it, before or after:
                # then that is the event; Ray's memory monitor raises an OutOfMemoryError of its
                # own (host memory) that a caller relays under the same name, and says so
                ray = m.group("ray") is not None
                if not nearby.relayed(i, nearby.messages) and not (ray and nearby.relayed(i, nearby.ray_monitor)):
                    # (PyTorch's is far more common in a training job's workers: read as that, as likely)
                    dev = m.group("dev")
                    events.append(OomEvent(kind="cuda_caching_allocator",
                                           exception=m.group("exc") or m.group("ray") or m.group("caught"),
                                           strength="likely" if ray else "certain",
                                           message_format="class only (message not in the log)",
                                           device_index=int(dev) if dev else None,
                                           detail=("Ray relays an OutOfMemoryError (PyTorch's, or its own memory "
                                                   "monitor's)" if ray else None),
                                           **ctx.at(ln)))
            continue
        window = _message_window(ctx, i)
        anchors = list(ANCHOR.finditer(window))
        for k, m in enumerate(anchors):
            end = anchors[k + 1].start() if k + 1 < len(anchors) else len(window)
            body = window[m.start():end]
            backend = m.group("backend")
            f = parse_message(body, backend)
            prefix = window[:m.start()]
            exc = _exception_before(prefix)
            if exc is None and not prefix.strip() and i > 0:
                exc = _exception_before(ctx.lines[i - 1].text)  # "torch.OutOfMemoryError:" on its own line
            # the allocator's own words are certain whatever became of the figures after them
            # (a log cut at "Tried to allocate", a paste that garbled "512.00" to "512.—"): the
            # failure is kept with the figures that can be read. A quoted template of the message
            # ("Tried to allocate ...", "Tried to allocate X", "<N> MiB") is not one
            if f["tried_to_allocate_bytes"] is None and not _unreadable_but_real(body[m.end() - m.start():], f):
                continue
            fmt = _format(body, backend) if f["tried_to_allocate_bytes"] is not None \
                else "request unreadable (the figures cut or garbled)"
            twins.keep(events, _allocator_event(ctx, ln, f, backend or ("CUDA" if "CUDA" in prefix[-40:] else None),
                                                exc, fmt), ctx.evidence(ln))
    raised = _Raised(events) if warned else None
    for ev in warned:
        # the warning the allocator logs as it fails joins the message raised for the same request
        same = raised.find(ev.device_index, ev.tried_to_allocate_bytes)
        if same is not None:
            if len(same.evidence) < _MAX_EVIDENCE:
                same.evidence.append(ev.evidence[0])
        else:
            twins.keep(events, ev, ev.evidence[0])
    if shortened:
        # a shortened copy of a message the log also holds whole is that message
        whole = _Raised(events)
        events.extend(ev for ev in shortened if whole.find_any(ev.tried_to_allocate_bytes) is None)
    ctx.facts.oom_events.extend(events)
