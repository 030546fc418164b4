"""Allocator statistics printed before a failure: one ``MemorySample`` per reading.

Readings come from ``torch.cuda.memory_summary()`` tables, DeepSpeed's
``see_memory_usage`` (``MA … GB Max_MA … GB CA … GB Max_CA … GB`` plus the host line),
nvidia-smi tables (per GPU and per process), ``torch.cuda.list_gpu_processes()``,
mmengine/xtuner progress lines (``memory: 12345``, MiB), axolotl's
``GPU memory usage after model load: 7.494GB (+0.114GB cache, +1.341GB misc)``,
DeepSpeed's ``N pytorch allocator cache flushes since last step`` warning and clearly
labelled user prints (``max_memory_allocated: 12.3 GB``, llama-recipes' epoch summary).

A series of samples lets the classifier see growth (a leak), fragmentation (reserved far
above allocated, allocator retries) and other processes on the GPU. Sizes are exact
integers of bytes: each tool's unit and rounding rule is inverted (DeepSpeed's ``GB`` is
``bytes / 2**30``, memory_summary floors to the printed unit, mmengine prints MiB).
"""
from __future__ import annotations

from typing import Optional

import regex as re

from ..facts.derived import DEVICE_KINDS
from ..facts.models import MemorySample, OomEvent
from ..facts.sizes import to_bytes
from ..read.patterns import lazy
from .base import ParseContext

MAX_SAMPLES = 5000

# -- torch.cuda.memory_summary() ----------------------------------------------------

_SUMMARY_HEAD = lazy(r"^\|\s+PyTorch (?P<dev>\w+) memory summary, device ID (?P<id>\d+)\s+\|")
_SUMMARY_OOMS = lazy(r"^\|\s+\w+ OOMs: (?P<ooms>\d+)\s+\|\s+\w+ retries: (?P<retries>\d+)\s+\|")
_SUMMARY_ROW = lazy(
    r"^\|\s(?P<name>[A-Za-z][A-Za-z -]{2,30}?)\s*\|\s*(?P<cur>\d+) (?P<u1>B  |[KMGTP]iB) \|"
    r"\s*(?P<peak>\d+) (?P<u2>B  |[KMGTP]iB) \|")
_SUMMARY_END = lazy(r"^\|\s+(?:Oversize GPU segments|Non-releasable allocs)\s+\|")
_ROW_FIELDS = {
    "allocated memory": ("allocated_bytes", "max_allocated_bytes"),
    "gpu reserved memory": ("reserved_bytes", "max_reserved_bytes"),
    "npu reserved memory": ("reserved_bytes", "max_reserved_bytes"),
    "xpu reserved memory": ("reserved_bytes", "max_reserved_bytes"),
    "device reserved memory": ("reserved_bytes", "max_reserved_bytes"),
}


def _cell(num: str, unit: str) -> Optional[int]:
    # the table floors each value to its unit, so the printed figure is a lower bound
    return to_bytes(num, unit.strip())


def _memory_summary(ctx: ParseContext, i: int, m) -> int:
    """Read one table starting at its title row; return the index to continue from."""
    s = MemorySample(source="memory_summary", line=ctx.lines[i].no, device_index=int(m.group("id")),
                     label=f"PyTorch {m.group('dev')} memory summary")
    j = i + 1
    end = min(len(ctx.lines), i + 60)
    while j < end:
        text = ctx.lines[j].text
        if _SUMMARY_HEAD.match(text):
            break
        mo = _SUMMARY_OOMS.match(text)
        if mo:
            s.num_ooms, s.alloc_retries = int(mo.group("ooms")), int(mo.group("retries"))
        mr = _SUMMARY_ROW.match(text)
        if mr:
            fields = _ROW_FIELDS.get(mr.group("name").strip().lower())
            if fields:
                setattr(s, fields[0], _cell(mr.group("cur"), mr.group("u1")))
                setattr(s, fields[1], _cell(mr.group("peak"), mr.group("u2")))
        j += 1
        if _SUMMARY_END.match(text):
            break
    _add(ctx, s)
    return j


# -- DeepSpeed see_memory_usage -----------------------------------------------------

_DS_MA = lazy(
    r"\bMA (?P<ma>\d+(?:\.\d+)?) ?GB\s+Max_MA (?P<max_ma>\d+(?:\.\d+)?) ?GB\s+"
    r"CA (?P<ca>\d+(?:\.\d+)?) ?GB\s+Max_CA (?P<max_ca>\d+(?:\.\d+)?) ?GB")
_DS_CPU = lazy(r"CPU Virtual Memory:\s+used = (?P<gb>\d+(?:\.\d+)?) GB, percent = (?P<pct>\d+(?:\.\d+)?)%")


def _gb(x: str) -> Optional[int]:
    return to_bytes(x, "GiB")  # DeepSpeed divides by 2**30 and calls it GB


def _see_memory_usage(ctx: ParseContext, i: int, m) -> None:
    s = MemorySample(source="see_memory_usage", line=ctx.lines[i].no,
                     allocated_bytes=_gb(m.group("ma")), max_allocated_bytes=_gb(m.group("max_ma")),
                     reserved_bytes=_gb(m.group("ca")), max_reserved_bytes=_gb(m.group("max_ca")),
                     label=_ds_label(ctx, i))
    # the host line follows (another rank's output may come in between)
    for j in range(i + 1, min(len(ctx.lines), i + 4)):
        text = ctx.lines[j].text
        if _DS_MA.search(text):
            break
        mc = _DS_CPU.search(text)
        if mc:
            s.host_used_bytes, s.host_percent = _gb(mc.group("gb")), float(mc.group("pct"))
            break
    _add(ctx, s)


def _ds_label(ctx: ParseContext, i: int) -> Optional[str]:
    """The caller's message printed just before the MA line.

    Up to DeepSpeed 0.18.2 all three lines carry ``[utils.py:N:see_memory_usage]``, so the
    label is the nearest such line; from 0.18.3 they are bare prints and the label is the
    line right above.
    """
    prefixed = "see_memory_usage]" in (ctx.lines[i].raw or "")
    for j in range(i - 1, max(-1, i - 4), -1):
        ln = ctx.lines[j]
        text = ln.text.strip()
        if not text or _DS_CPU.search(text) or _DS_MA.search(text):
            if _DS_CPU.search(text) or _DS_MA.search(text):
                return None
            continue
        if prefixed and "see_memory_usage]" not in (ln.raw or ""):
            continue
        return text[:200]
    return None


def _ds_cpu_only(ctx: ParseContext, i: int, m) -> None:
    """A host line without an MA line before it (the MA line was cut from the log)."""
    for j in range(i - 1, max(-1, i - 4), -1):
        if _DS_MA.search(ctx.lines[j].text):
            return
    _add(ctx, MemorySample(source="see_memory_usage", line=ctx.lines[i].no,
                           host_used_bytes=_gb(m.group("gb")), host_percent=float(m.group("pct"))))


# -- nvidia-smi and list_gpu_processes -------------------------------------------------

_SMI_GPU = lazy(r"^\|\s+(?P<idx>\d{1,3})\s+\S[^|]{0,60}?\s(?:On|Off)\s+\|\s+[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d")
_SMI_MEM = lazy(r"\|\s*(?P<used>\d{1,7})MiB\s*/\s*(?P<total>\d{1,7})MiB\s*\|")
_SMI_MIG = lazy(r"^\|\s+(?P<gpu>\d{1,3})\s+(?P<gi>\d{1,3})\s+(?P<ci>\d{1,3})\s+(?P<mig>\d{1,3})\s+\|\s+(?P<used>\d{1,7})MiB\s*/\s*(?P<total>\d{1,7})MiB")
# process rows, old layout and the MIG-capable one with GI/CI columns
_SMI_PROC = lazy(
    r"^\|\s+(?P<gpu>\d{1,3})\s+(?:(?:\d{1,3}|N/A)\s+(?:\d{1,3}|N/A)\s+)?(?P<pid>\d{1,10})\s+"
    r"(?P<type>C\+G|M\+C|C|G|M)\s+(?P<name>\S[^|]{0,200}?)\s+(?P<mib>\d{1,7}|N/A)MiB\s*\|")
_GPU_HEADER = lazy(r"^GPU:(?P<idx>\d{1,3})\s*$")
_LIST_PROC = lazy(r"^process\s+(?P<pid>\d{1,10}) uses\s+(?P<mb>\d+(?:\.\d+)?) MB GPU memory")


def _nvidia_smi(ctx: ParseContext, i: int, text: str, state: dict) -> bool:
    m = _SMI_GPU.match(text)
    if m:
        state["gpu"], state["gpu_at"] = int(m.group("idx")), i
        return True
    m = _SMI_MIG.match(text)
    if m:
        _add(ctx, MemorySample(source="nvidia_smi", line=ctx.lines[i].no, device_index=int(m.group("gpu")),
                               label=f"MIG GI {m.group('gi')} CI {m.group('ci')}",
                               used_bytes=int(m.group("used")) * 2**20, total_bytes=int(m.group("total")) * 2**20))
        return True
    m = _SMI_PROC.match(text)
    if m:
        mib = m.group("mib")
        _add(ctx, MemorySample(source="nvidia_smi", line=ctx.lines[i].no, device_index=int(m.group("gpu")),
                               pid=int(m.group("pid")), label=m.group("name").strip()[:120],
                               used_bytes=int(mib) * 2**20 if mib != "N/A" else None))
        return True
    gpu = state.get("gpu")
    if gpu is not None and i - state["gpu_at"] <= 4:
        m = _SMI_MEM.search(text)
        # the stats row of a GPU block; MIG BAR1 rows ("|     |  5MiB / 65535MiB |") start empty
        if m and not re.match(r"^\|\s+\|", text):
            _add(ctx, MemorySample(source="nvidia_smi", line=ctx.lines[i].no, device_index=gpu,
                                   used_bytes=int(m.group("used")) * 2**20,
                                   total_bytes=int(m.group("total")) * 2**20))
            state["gpu"] = None
            return True
    return False


# -- trainer and user prints ------------------------------------------------------------

_MMENGINE = lazy(r"(?P<label>(?:Epoch|Iter)\((?:train|val|test)\)\s*(?:\[[\s\d/]{1,40}\]){1,2}).{0,400}?\bmemory: (?P<mib>\d{1,9})\b")
# axolotl: "GPU memory usage after model load: 7.494GB (+0.114GB cache, +1.341GB misc)"; newer
# versions name the device ("cuda:0 memory usage ..."); the oldest printed NVML's total
# with a space ("7.494 GB") and no breakdown.
_AXOLOTL = lazy(
    r"(?:GPU|(?P<dev>cuda|npu|xpu|mps)(?::(?P<idx>\d{1,3}))?) memory usage (?P<label>[^:\n]{1,80}): "
    r"(?P<usage>\d+(?:\.\d+)?)(?P<space> ?)GB(?: \((?P<extras>[^)\n]{0,80})\))?")
_AX_EXTRA = lazy(r"\+(?P<v>\d+(?:\.\d+)?)GB (?P<k>cache|misc)")
# (DeepSpeed prints it only when there was a flush: a line pasted without its count had one or more)
_FLUSH = lazy(r"(?:(?P<n>\d{1,9}) )?pytorch allocator cache flushes since last step")
_NUM = r"(?P<num>\d+(?:\.\d+)?)\s*(?P<unit>[KMGT]i?B|bytes)?"
_USER = lazy(
    r"(?P<key>(?:torch\.cuda\.)?(?:max_memory_allocated|memory_allocated|max_memory_reserved|memory_reserved|"
    r"max_memory_cached|memory_cached)(?:\(\))?|max(?:imum)? memory allocated|max(?:imum)? memory reserved|"
    r"peak memory allocated|peak memory reserved|memory allocated|memory reserved|"
    r"(?:allocated|reserved)_bytes\.all\.(?:current|peak)|num_alloc_retries|num_ooms)['\"]?"
    # "memory_allocated: 1.84 GiB", or with a space alone after an identifier where a unit follows
    # ("memory_allocated 1.84 GiB"; not prose: "memory reserved 3 GB by other processes")
    r"(?:\s*[:=]\s*|(?<=_\w{0,30}(?:\(\))?)\s+(?=\d+(?:\.\d+)?\s*[KMGT]i?B\b))" + _NUM, re.I)
# training loops' own shorthand ("mem_alloc 13.42 GB", "max_mem_alloc=43.9GiB"): a unit is required
_USER_SHORT = lazy(
    r"(?<![\w.])(?P<key>max_mem_alloc(?:ated)?|peak_mem_alloc(?:ated)?|mem_alloc(?:ated)?|max_mem_reserved|"
    r"peak_mem_reserved|mem_reserved|mem_res)['\"]?\s*[:=]?\s*(?P<num>\d+(?:\.\d+)?)\s*(?P<unit>[KMGT]i?B)\b")
_SHORT_FIELD = {"max_mem_alloc": "max_allocated_bytes", "max_mem_allocated": "max_allocated_bytes",
                "peak_mem_alloc": "max_allocated_bytes", "peak_mem_allocated": "max_allocated_bytes",
                "mem_alloc": "allocated_bytes", "mem_allocated": "allocated_bytes",
                "max_mem_reserved": "max_reserved_bytes", "peak_mem_reserved": "max_reserved_bytes",
                "mem_reserved": "reserved_bytes", "mem_res": "reserved_bytes"}
# a training loop's own print with the bare words ("step 12 loss 0.31 allocated 55.48 GiB",
# "Allocated: 3.8GB Reserved: 3.9GB"): a unit is required, and an allocator's own message
# ("9.48 GiB already allocated", MPS's "MPS allocated: ..., other allocations: ...") is not a reading
_USER_BARE = lazy(
    r"(?<![\w.-])(?<!MPS )(?P<peak>(?:max(?:imum)?|peak|highest)[ _])?(?P<key>allocated|reserved)['\"]?(?:\s*[:=]\s*|\s+)"
    # (prose goes on: "memory reserved 3 GB by other processes", "Allocated 4.00 GB host memory
    # for the KV cache", "12 GB/s" are no readings of the GPU's allocator)
    r"(?P<num>\d+(?:\.\d+)?)\s*(?P<unit>[KMGT]i?B)\b(?!/s)(?!\s+(?:by|for|from|of|on|to|in|host|pinned|CPU|cpu|swap)\b)",
    re.I)
_BARE_FIELD = {("allocated", False): "allocated_bytes", ("reserved", False): "reserved_bytes",
               ("allocated", True): "max_allocated_bytes", ("reserved", True): "max_reserved_bytes"}
_NOT_A_READING = lazy(r"other allocations|out of memory|tried to allocate", re.I)
_RECIPES = lazy(
    r"(?P<key>Max CUDA memory allocated was|Max CUDA memory reserved was|CUDA Malloc retries :"
    r"|CPU Total Peak Memory consumed during the train \(max\):) (?P<num>\d+)(?: GB)?")
_USER_FIELD = {
    "max_memory_allocated": "max_allocated_bytes", "memory_allocated": "allocated_bytes",
    "max_memory_reserved": "max_reserved_bytes", "memory_reserved": "reserved_bytes",
    "max_memory_cached": "max_reserved_bytes", "memory_cached": "reserved_bytes",
    "max memory allocated": "max_allocated_bytes", "maximum memory allocated": "max_allocated_bytes",
    "peak memory allocated": "max_allocated_bytes", "memory allocated": "allocated_bytes",
    "max memory reserved": "max_reserved_bytes", "maximum memory reserved": "max_reserved_bytes",
    "peak memory reserved": "max_reserved_bytes", "memory reserved": "reserved_bytes",
    "allocated_bytes.all.current": "allocated_bytes", "allocated_bytes.all.peak": "max_allocated_bytes",
    "reserved_bytes.all.current": "reserved_bytes", "reserved_bytes.all.peak": "max_reserved_bytes",
    "num_alloc_retries": "alloc_retries", "num_ooms": "num_ooms",
    "max cuda memory allocated was": "max_allocated_bytes", "max cuda memory reserved was": "max_reserved_bytes",
    "cuda malloc retries :": "alloc_retries",
    "cpu total peak memory consumed during the train (max):": "host_used_bytes",
}
_COUNT_FIELDS = {"alloc_retries", "num_ooms"}


def _user_value(field: str, num: str, unit: Optional[str]) -> Optional[int]:
    if field in _COUNT_FIELDS:
        return int(float(num))
    if unit:
        return to_bytes(num, "bytes" if unit.lower() == "bytes" else unit)
    # torch returns raw bytes; a bare large integer is a byte count, a bare "12.3" is not
    return int(num) if num.isdigit() and int(num) >= 2**20 else None


def _user_prints(ctx: ParseContext, i: int, text: str, state: dict) -> bool:
    found = []
    for m in _finditer(_USER, text):
        key = m.group("key").lower().replace("torch.cuda.", "").replace("()", "")
        field = _USER_FIELD.get(key)
        if field:
            found.append((field, _user_value(field, m.group("num"), m.group("unit"))))
    if not found and "mem_" in text:
        for m in _finditer(_USER_SHORT, text):
            field = _SHORT_FIELD[m.group("key").lower()]
            found.append((field, _user_value(field, m.group("num"), m.group("unit"))))
    if not found and not _NOT_A_READING.search(text):
        for m in _finditer(_USER_BARE, text):
            field = _BARE_FIELD[(m.group("key").lower(), m.group("peak") is not None)]
            if all(f != field for f, _ in found):   # a line's first reading of each figure
                found.append((field, _user_value(field, m.group("num"), m.group("unit"))))
    m = _RECIPES.search(text) if not found and ("CUDA" in text or "Peak Memory" in text) else None
    if m:  # llama-recipes' MemoryTrace prints whole GiB (int(bytes / 2**30))
        field = _USER_FIELD[m.group("key").lower()]
        found.append((field, int(m.group("num")) if field in _COUNT_FIELDS else int(m.group("num")) * 2**30))
    found = [(f, v) for f, v in found if v is not None]
    if not found:
        return False
    # consecutive print lines (one value per line) make one reading
    s = state.get("user")
    if s is None or i - state.get("user_at", -9) > 2 or any(getattr(s, f) is not None for f, _ in found):
        s = MemorySample(source="user_print", line=ctx.lines[i].no,
                         label="llama-recipes memory summary" if m else None)
        state["user"] = s
        _add(ctx, s)
    for f, v in found:
        setattr(s, f, v)
    state["user_at"] = i
    return True


def _finditer(pattern, text: str):
    try:
        return list(pattern.finditer(text, timeout=0.5))
    except TimeoutError:
        return []


def _add(ctx: ParseContext, s: MemorySample) -> None:
    if len(ctx.facts.memory_samples) < MAX_SAMPLES:
        ctx.facts.memory_samples.append(s)
    else:
        ctx.note(f"more than {MAX_SAMPLES} memory readings; the rest were not kept")


# tcmalloc (Colab's and many images' malloc) reports every single allocation above its
# threshold (1 GiB unless set): "tcmalloc: large alloc 44581601280 bytes == 0x7f6e... @ ..."
_TCMALLOC = lazy(r"tcmalloc: large alloc (?P<n>\d{1,20}) bytes")


def parse(ctx: ParseContext) -> None:
    state: dict = {}
    i, n = 0, len(ctx.lines)
    while i < n:
        ln = ctx.lines[i]
        text = ln.text
        if len(text) > 8000:
            text = text[:8000]
        if text.startswith("|"):
            m = _SUMMARY_HEAD.match(text)
            if m:
                i = _memory_summary(ctx, i, m)
                continue
            m = _SUMMARY_OOMS.match(text)
            if m:   # the table pasted without its title row
                _add(ctx, MemorySample(source="memory_summary", line=ln.no, num_ooms=int(m.group("ooms")),
                                       alloc_retries=int(m.group("retries"))))
                i += 1
                continue
            if _nvidia_smi(ctx, i, text, state):
                i += 1
                continue
        if "GB" in text:
            m = _DS_MA.search(text)
            if m:
                _see_memory_usage(ctx, i, m)
            elif "CPU Virtual Memory" in text:
                m = _DS_CPU.search(text)
                if m:
                    _ds_cpu_only(ctx, i, m)
            elif "memory usage" in text:
                m = _AXOLOTL.search(text)
                if m:
                    _axolotl(ctx, i, m)
        if "memory: " in text and "(" in text:
            m = _MMENGINE.search(text)
            if m:
                _add(ctx, MemorySample(source="mmengine", line=ln.no, label=" ".join(m.group("label").split()),
                                       max_allocated_bytes=int(m.group("mib")) * 2**20))
        if "tcmalloc: large alloc" in text:
            m = _TCMALLOC.search(text)
            if m:
                _add(ctx, MemorySample(source="tcmalloc", line=ln.no, host_request_bytes=int(m.group("n"))))
        if "cache flushes" in text:
            m = _FLUSH.search(text)
            if m:
                _add(ctx, MemorySample(source="deepspeed_flush", line=ln.no,
                                       alloc_retries=int(m.group("n")) if m.group("n") else 1))
        if text.startswith("GPU:"):
            m = _GPU_HEADER.match(text)
            if m:
                state["list_gpu"] = int(m.group("idx"))
        elif text.startswith("process"):
            m = _LIST_PROC.match(text)
            if m:
                _add(ctx, MemorySample(source="list_gpu_processes", line=ln.no, device_index=state.get("list_gpu"),
                                       pid=int(m.group("pid")), used_bytes=to_bytes(m.group("mb"), "MiB")))
        low = text.lower()
        if ("memory" in low or "num_" in low or "_bytes.all." in low or "retries" in low or "mem_" in low
                or "allocated" in low or "reserved" in low):
            _user_prints(ctx, i, text, state)
        i += 1
    _counted_ooms(ctx)


def _summary_backend(label: Optional[str]) -> str:
    """The device a summary names ("PyTorch CUDA memory summary"); CUDA's word when its title is cut."""
    words = (label or "").split()
    return words[1] if len(words) > 2 and words[0] == "PyTorch" else "CUDA"


def _counted_ooms(ctx: ParseContext) -> None:
    """PyTorch's memory summary counts the out-of-memory failures its allocator raised in
    this process ("CUDA OOMs: 1"): where the log holds none of their messages, that count
    is the trace of one (caught, or printed elsewhere)."""
    if any(e.kind in DEVICE_KINDS for e in ctx.facts.oom_events):
        return
    counted = [s for s in ctx.facts.memory_samples if s.source == "memory_summary" and s.num_ooms]
    if counted:
        s = max(counted, key=lambda s: s.num_ooms)   # the summaries count from the process's start
        idx = ctx.index_of(s.line)
        # a failure of another kind after the summary: the OOMs it counts were caught, and the
        # run went on to fail for that other reason
        caught = any(f.line > s.line for f in ctx.facts.failures)
        ctx.facts.oom_events.append(OomEvent(
            kind="cuda_caching_allocator", strength="likely", backend=_summary_backend(s.label),
            message_format="memory-summary-count", survived=caught, device_index=s.device_index, count=s.num_ooms,
            detail=f"PyTorch's memory summary counts {s.num_ooms} out-of-memory failure(s) of its allocator; "
                   "the message is not in the log", **ctx.at(ctx.lines[idx])))


def _axolotl(ctx: ParseContext, i: int, m) -> None:
    usage = to_bytes(m.group("usage"), "GiB")  # axolotl divides by 1024**3
    s = MemorySample(source="axolotl", line=ctx.lines[i].no, label=m.group("label").strip(),
                     device_index=int(m.group("idx")) if m.group("idx") else None)
    if m.group("space") and not m.group("extras"):
        s.used_bytes = usage  # the oldest helper printed NVML's figure for the whole GPU
    else:
        extras = {e.group("k"): to_bytes(e.group("v"), "GiB") for e in _AX_EXTRA.finditer(m.group("extras") or "")}
        s.allocated_bytes = usage
        s.reserved_bytes = usage + extras.get("cache", 0)
        if "misc" in extras:
            s.used_bytes = s.reserved_bytes + extras["misc"]
    _add(ctx, s)
