"""Generators of allocator OOM messages in every version's wording (for property tests).

``format_size`` mirrors c10's ``format_size`` (log-formats.md §1.2): integers up to
1024 bytes, then two decimals in KiB / MiB / GiB with ``<=`` thresholds.
"""
from __future__ import annotations

from decimal import Decimal

KIB, MIB, GIB = 2**10, 2**20, 2**30


def format_size(n: int) -> str:
    if n <= 1024:
        return f"{n} bytes"
    if n <= 1048576:
        return f"{n / KIB:.2f} KiB"
    if n <= 1073741824:
        return f"{n / MIB:.2f} MiB"
    return f"{n / GIB:.2f} GiB"


def printed_bytes(n: int) -> int:
    """What a careful reader gets back from the printed size of n."""
    text = format_size(n)
    num, unit = text.split()
    factor = {"bytes": 1, "KiB": KIB, "MiB": MIB, "GiB": GIB}[unit]
    return int((Decimal(num) * factor).to_integral_value())


HINT_F3 = ("If reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.  "
           "See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF")
HINT_F4 = ("If reserved but unallocated memory is large try setting max_split_size_mb to avoid fragmentation.  "
           "See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF")
HINT_F5 = ("If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
           "to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")
HINT_F7 = HINT_F5.replace("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")
HINT_F8 = HINT_F5.replace("https://pytorch.org/docs/stable/notes/cuda.html#environment-variables",
                          "https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf")

FORMATS = ("F1", "F2", "F2a", "F3", "F4", "F5", "F6", "F7", "F8", "HIP", "NPU", "NPU210", "XPU")


def message(fmt: str, *, dev: int, req: int, total: int, free: int, alloc: int, unalloc: int,
            this: int = 0, others: tuple = (), priv: int = 0, allowed: int = 0) -> tuple[str, dict]:
    """(message text, expected fields in bytes as printed) for one format."""
    fs = format_size
    exp: dict = {"tried_to_allocate_bytes": printed_bytes(req), "total_capacity_bytes": printed_bytes(total),
                 "free_bytes": printed_bytes(free), "device_index": dev}
    if fmt in ("F1", "F2", "F2a", "F3", "NPU", "NPU210"):
        reserved = alloc + unalloc
        exp["already_allocated_bytes"] = printed_bytes(alloc)
        head = {"F1": "RuntimeError: CUDA", "F2": "RuntimeError: CUDA", "F2a": "RuntimeError: CUDA",
                "F3": "torch.cuda.OutOfMemoryError: CUDA", "NPU": "RuntimeError: NPU", "NPU210": "torch.OutOfMemoryError: NPU"}[fmt]
        unit = "NPU" if fmt.startswith("NPU") else "GPU"
        active = f"{fs(alloc)} current active; " if fmt.startswith("NPU") else ""
        allowed_s = f"{fs(allowed)} allowed; " if allowed and fmt in ("F2a", "F3", "NPU", "NPU210") else ""
        if allowed_s:
            exp["allowed_bytes"] = printed_bytes(allowed)
        if fmt == "F1":
            tail = f"{fs(unalloc)} cached)"
            exp["cached_unallocated_bytes"] = printed_bytes(unalloc)
        else:
            tail = f"{fs(reserved)} reserved in total by PyTorch)"
            exp["reserved_total_bytes"] = printed_bytes(reserved)
        hint = {"F3": " " + HINT_F3, "NPU": " If reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.",
                "NPU210": ".If reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation."}.get(fmt, "")
        text = (f"{head} out of memory. Tried to allocate {fs(req)} ({unit} {dev}; {fs(total)} total capacity; "
                f"{fs(alloc)} already allocated; {active}{fs(free)} free; {allowed_s}{tail}{hint}")
        return text, exp
    backend = {"HIP": "HIP", "XPU": "XPU"}.get(fmt, "CUDA")
    exc = {"F4": "torch.cuda.OutOfMemoryError", "F5": "torch.cuda.OutOfMemoryError"}.get(fmt, "torch.OutOfMemoryError")
    cap = "capacty" if fmt == "F4" else "capacity"
    procs = ""
    if backend == "CUDA":
        if this:
            procs += f"Including non-PyTorch memory, this process has {fs(this)} memory in use. "
        for pid, used in others:
            procs += f"Process {pid} has {fs(used)} memory in use. "
    allowed_s = f"{fs(allowed)} allowed; " if allowed else ""
    if allowed:
        exp["allowed_bytes"] = printed_bytes(allowed)
    pool = ""
    if priv and fmt in ("F6", "F7", "F8", "HIP"):
        pool = f"with {fs(priv)} allocated in private pools (e.g., {'HIP' if fmt == 'HIP' else 'CUDA'} Graphs), "
        exp["private_pool_bytes"] = printed_bytes(priv)
    hint = {"F4": HINT_F4, "F5": HINT_F5, "F6": HINT_F5, "F7": HINT_F7, "F8": HINT_F8,
            "HIP": HINT_F5.replace("PYTORCH_CUDA", "PYTORCH_HIP"),
            "XPU": "Please use `empty_cache` to release all unoccupied cached memory."}[fmt]
    text = (f"{exc}: {backend} out of memory. Tried to allocate {fs(req)}. GPU {dev} has a total {cap} of {fs(total)} "
            f"of which {fs(free)} is free. {procs}{allowed_s}Of the allocated memory {fs(alloc + priv)} is allocated by "
            f"PyTorch, {pool}and {fs(unalloc)} is reserved by PyTorch but unallocated. {hint}")
    exp["allocated_by_pytorch_bytes"] = printed_bytes(alloc + priv)
    exp["reserved_unallocated_bytes"] = printed_bytes(unalloc)
    if this and backend == "CUDA":
        exp["process_in_use_bytes"] = printed_bytes(this)
    return text, exp
