"""Values computed from the parsed facts that need code: the primary OOM event, what the
allocator holds unallocated, "the other processes are sibling ranks", "the GPU cannot do
bf16". Computed once here and used by the knowledge base's fact table (``kb.table``), the
memory arithmetic and the renderers.
"""
from __future__ import annotations

from typing import Optional

from .models import Facts, OomEvent, ProcessUse

DEVICE_KINDS = {"cuda_caching_allocator", "cuda_runtime_error", "cublas_alloc", "nccl", "hip",
                "npu", "xpu", "mps", "xla", "bitsandbytes", "device_runtime"}
ALLOCATOR_KINDS = {"cuda_caching_allocator", "hip", "npu", "xpu", "mps"}
HOST_KINDS = {"host_oom_killer", "cpu_allocator", "dataloader_killed"}

# compute capability by GPU name fragment (public NVIDIA specs); first match wins
_CAPABILITY = (
    ("H200", "9.0"), ("H100", "9.0"), ("H800", "9.0"), ("GH200", "9.0"), ("B200", "10.0"), ("B100", "10.0"),
    ("A100", "8.0"), ("A800", "8.0"), ("A30", "8.0"), ("A10", "8.6"), ("A40", "8.6"), ("A6000", "8.6"),
    ("A5000", "8.6"), ("A4000", "8.6"), ("RTX 30", "8.6"), ("RTX 40", "8.9"), ("RTX 50", "12.0"),
    ("L40", "8.9"), ("L4", "8.9"), ("RTX 6000 Ada", "8.9"), ("V100", "7.0"), ("T4", "7.5"),
    ("RTX 20", "7.5"), ("TITAN RTX", "7.5"), ("Quadro RTX", "7.5"), ("P100", "6.0"), ("P40", "6.1"),
    ("GTX 10", "6.1"), ("K80", "3.7"), ("TITAN V", "7.0"),
)


def capability_of(gpu_name: Optional[str]) -> Optional[str]:
    if not gpu_name:
        return None
    name = gpu_name.upper()
    for frag, cap in _CAPABILITY:
        if frag.upper() in name:
            return cap
    return None


def primary_event(facts: Facts) -> Optional[OomEvent]:
    """The event a diagnosis is about: the most certain, then the most complete message
    (a copy cut off mid-sentence says less than its sibling's), then the earliest."""
    if not facts.oom_events:
        return None
    order = {"certain": 0, "likely": 1, "weak": 2}

    def filled(e: OomEvent) -> int:
        return sum(1 for name in _SIZES if getattr(e, name) is not None)
    return min(facts.oom_events, key=lambda e: (e.survived or bool(e.symptom), order.get(e.strength, 3), -filled(e), e.line))


_SIZES = ("tried_to_allocate_bytes", "total_capacity_bytes", "free_bytes", "process_in_use_bytes",
          "allocated_by_pytorch_bytes", "reserved_unallocated_bytes", "reserved_total_bytes",
          "already_allocated_bytes", "host_bytes")


def allocated_of(ev: OomEvent) -> Optional[int]:
    """What PyTorch had allocated: the new formats say it, the old ones "already allocated"."""
    return ev.allocated_by_pytorch_bytes if ev.allocated_by_pytorch_bytes is not None else ev.already_allocated_bytes


def unallocated_of(ev: OomEvent) -> Optional[int]:
    """Reserved but unallocated: new format directly, old (F2/F3) reserved - allocated;
    F1 "cached" already means reserved - allocated."""
    if ev.reserved_unallocated_bytes is not None:
        return ev.reserved_unallocated_bytes
    if ev.reserved_total_bytes is not None and ev.already_allocated_bytes is not None:
        return max(0, ev.reserved_total_bytes - ev.already_allocated_bytes)
    return ev.cached_unallocated_bytes


def outside_pytorch(ev: OomEvent, own: Optional[int]) -> Optional[int]:
    """This process's device memory outside PyTorch's allocator (CUDA context, NCCL, cuBLAS
    workspaces): its use (``own``) less what PyTorch allocated, holds unallocated and keeps in
    private pools. Negative when the figures do not add up; None without both figures."""
    alloc = allocated_of(ev)
    if own is None or alloc is None:
        return None
    return own - alloc - (unallocated_of(ev) or 0) - (ev.private_pool_bytes or 0)


def ratio(a: Optional[int], b: Optional[int]) -> Optional[float]:
    if a is None or not b:
        return None
    return a / b


def sibling_processes(ev: OomEvent) -> int:
    """How many listed processes look like other ranks' CUDA contexts on this GPU.

    Several small, equal-sized entries (a CUDA context is ~300-1000 MiB) or zero-sized
    entries next to one big one are what ranks sharing one GPU look like; so are whole
    copies the size of this process's own use, from processes started together
    (neighbouring PIDs: a launcher's ranks, not leftovers of earlier runs).
    """
    me, others = split_processes(ev)   # (in a container this process is one of the "Process N has")
    if len(others) < 2:
        return 0
    contexts = _equal_small(others)
    if contexts and _started_together(contexts, slack=256, unknown=True):
        return len(contexts)
    mine = me.bytes if me is not None else ev.process_in_use_bytes
    if mine:
        copies = [p for p in others if abs(p.bytes - mine) <= 0.15 * mine]
        if len(copies) >= 2 and _started_together(copies, slack=4, unknown=False):
            return len(copies)
    return 0


def split_processes(ev: OomEvent) -> tuple[Optional[ProcessUse], list[ProcessUse]]:
    """(this process, the others) of the processes an OOM message lists. In containers this
    process is listed as ``Process N has ...``; the entry closest to allocated +
    unallocated (at least nine tenths of it) is then taken to be it."""
    me = next((p for p in ev.processes if p.is_self), None)
    others = [p for p in ev.processes if not p.is_self]
    mine = (allocated_of(ev) or 0) + (unallocated_of(ev) or 0)
    if me is None and others and mine:
        best = min(others, key=lambda p: abs(p.bytes - mine))
        if best.bytes >= mine * 0.9:
            me = best
            others = [p for p in others if p is not best]
    elif me is None and len(others) == 1 and allocated_of(ev) is None and unallocated_of(ev) is None:
        # no figure of this process (a message cut before them): NVML lists every process on
        # the device, this one too (it holds at least its CUDA context), so a list of one with
        # no "this process" sentence is this process under its host PID
        me, others = others[0], []
    return me, others


def job_processes(others: list[ProcessUse], worker_pids: list[int]) -> tuple[list[ProcessUse], list[ProcessUse]]:
    """(the job's, the rest) of the other processes an OOM message lists: those a launcher
    names as this job's workers (``ranks.worker_pids``) are sibling ranks, not foreign."""
    workers = set(worker_pids)
    return [p for p in others if p.pid in workers], [p for p in others if p.pid not in workers]


# a CUDA context (and what a rank that never set its device leaves on GPU 0) is at most this
CONTEXT_MAX = 1536 * 2**20


def _equal_small(procs: list[ProcessUse]) -> list[ProcessUse]:
    """The context-sized ones (at most CONTEXT_MAX) when they are two or more and about equal
    (within 32 MiB or a tenth: one job's ranks load the same libraries); else none."""
    small = [p for p in procs if p.bytes <= CONTEXT_MAX]
    sizes = [p.bytes for p in small]
    if len(small) >= 2 and max(sizes) - min(sizes) <= max(32 * 2**20, max(sizes) // 10):
        return small
    return []


def _started_together(procs: list[ProcessUse], slack: int, unknown: bool) -> bool:
    """Do these processes' PIDs neighbour each other (a launcher's ranks are started
    together, a few threads apart at most), within ``slack`` a process? Processes started
    at different times (leftovers, a desktop's programs) lie far apart. ``unknown``: the
    answer when a PID is not known."""
    pids = sorted(p.pid for p in procs if p.pid is not None)
    if len(pids) < len(procs):
        return unknown
    return len(pids) < 2 or pids[-1] - pids[0] <= slack * len(pids) + 8


def smi_siblings(samples: list) -> int:
    """Other ranks' contexts in an nvidia-smi process table: on one GPU, besides its largest
    process, two or more small equal-sized entries of the same program (the table of a
    job whose ranks all touched GPU 0). The most on any GPU."""
    by_gpu: dict[int, dict[int, tuple[int, str]]] = {}
    for s in samples:
        if s.source == "nvidia_smi" and s.pid is not None and s.used_bytes is not None and s.device_index is not None:
            by_gpu.setdefault(s.device_index, {})[s.pid] = (s.used_bytes, s.label or "")
    best = 0
    for procs in by_gpu.values():
        if len(procs) < 3:
            continue
        rows = sorted(((b, name, pid) for pid, (b, name) in procs.items()), reverse=True)
        _size, program, _pid = rows[0]
        same = [ProcessUse(pid=pid, bytes=b) for b, name, pid in rows[1:] if name == program]
        best = max(best, len(_equal_small(same)))
    return best


# The phase each progress marker begins (parsers/phase.py), in the order a tie is read;
# "running_training" begins no phase of its own. A later stage marker ends the stage an
# earlier one began ("Saving checkpoint", then "Evaluating ...": the save is over).
MARKER_PHASE = {"saving_checkpoint": "checkpoint_save", "training_completed": "checkpoint_save",
                "epoch_boundary": "epoch_end", "running_evaluation": "eval", "running_prediction": "eval",
                "loading_checkpoint_shards": "model_load", "resuming": "checkpoint_load", "engine_init": "model_load",
                "optimizer_init": "model_load", "preprocessing": "data_loading", "running_training": None,
                "evaluation_finished": None}
# the markers that begin (or, for a finished evaluation bar, end) a stage of the run: a later
# one supersedes an earlier one's stage
STAGE_MARKERS = tuple(name for name in MARKER_PHASE if name != "epoch_boundary")


def superseded(markers: dict[str, list[int]], name: str, line: int, until: int) -> bool:
    """Does another stage begin after ``line`` (a marker of ``name``) and before ``until``?"""
    return any(line < n <= until for other in STAGE_MARKERS if other != name for n in markers.get(other, ()))
