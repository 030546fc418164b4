"""The named facts knowledge-base conditions test (``fact: oom.kind``, ``memory.request_is`` ...).

One flat table per log, built from the parsed facts, the values derived from them
(``facts.derived``) and the memory arithmetic's fingerprint of the failed request
(``memory.fingerprint_facts``); ``oomdoctor kb facts LOG`` prints it.
"""
from __future__ import annotations

from typing import Any, Optional

from ..facts.derived import (
    DEVICE_KINDS,
    HOST_KINDS,
    allocated_of,
    capability_of,
    job_processes,
    outside_pytorch,
    primary_event,
    ratio,
    sibling_processes,
    smi_siblings,
    split_processes,
    unallocated_of,
)
from ..facts.models import Facts
from ..memory import fingerprint_facts

CUDA_CONTEXT = 512 * 2**20   # what a CUDA context and its kernels take, outside PyTorch's figures
HOST_REQUEST_PRESSURE = 4 * 2**30   # one host allocation this large is pressure in itself
# a request this many times the device (two orders of magnitude) says nothing of what filled it: a
# size computed wrongly or a dense computation no setting makes fit, not an activation of a run
# that fitted before (the corpus labels them "cause not determined"; between the 64 times that the
# report's note names and the 100,000 times that parsers/lookalikes.py reads as a corrupted size)
ABSURD_OVER_DEVICE = 100
_STRENGTH = {"certain": 0, "likely": 1, "weak": 2}


# a DataLoader worker's own loop (its frames), and the marker the allocator family sets where
# the main process re-raises a worker's error
_WORKER_FRAME = ("torch/utils/data/_utils/worker.py", "_worker_loop")


def in_dataloader_worker(facts: Facts) -> bool:
    """Did the failure happen inside a DataLoader worker process (its traceback runs through
    the worker's loop, or the main process re-raised it as a worker's)? The other processes
    its message lists are then, most likely, this job's own: the main process and the other
    workers."""
    return bool(facts.markers.get("dataloader_worker_reraised")) or any(
        fr.function == _WORKER_FRAME[1] and fr.file.replace("\\", "/").endswith(_WORKER_FRAME[0])
        for fr in facts.frames)


def fact_table(facts: Facts) -> dict[str, Any]:
    t: dict[str, Any] = {}
    ev = primary_event(facts)
    kinds = [e.kind for e in facts.oom_events]
    t["oom.count"] = len(facts.oom_events) + facts.oom_events_left_out
    t["oom.kinds"] = sorted(set(kinds))
    # the libraries and message forms behind the events ("bitsandbytes", "thc-cuda-runtime-error")
    t["oom.message_formats"] = sorted({e.message_format for e in facts.oom_events if e.message_format})
    t["oom.any"] = bool(facts.oom_events)
    t["oom.hypothetical"] = False   # True only where the classifier reads a log that stops early as if it had failed
    t["oom.pressure"] = False       # True only where it reads a run with memory pressure and no failure as if it had
    # the kinds of the events on a device (NCCL's shared-memory segment is host memory in
    # /dev/shm, though NCCL is a device library)
    t["oom.device_kinds"] = sorted({e.kind for e in facts.oom_events if e.kind in DEVICE_KINDS and e.backend != "shm"})
    t["oom.device"] = bool(t["oom.device_kinds"])
    t["oom.host"] = any(k in HOST_KINDS for k in kinds)
    t["oom.shared_memory"] = any(e.backend == "shm" for e in facts.oom_events)
    t["oom.certain"] = any(e.strength == "certain" for e in facts.oom_events)
    # the host side judged on its own events: a certain GPU OOM does not corroborate a bare
    # SIGKILL of another rank, nor make the host's kill the primary event's kind
    host = sorted((e for e in facts.oom_events if e.kind in HOST_KINDS),
                  key=lambda e: (_STRENGTH.get(e.strength, 3), e.line))
    t["oom.host_strength"] = host[0].strength if host else None
    t["oom.host_kind"] = host[0].kind if host else None
    # the largest single allocation the host refused (numpy's array, the CPU allocator's
    # request): one this large is the thing to shrink; a few MiB refused says the host was
    # full of something else
    t["oom.host_request_max"] = max((e.host_bytes or e.tried_to_allocate_bytes or 0 for e in host), default=0) or None
    t["oom.host_request_large"] = (t["oom.host_request_max"] or 0) >= HOST_REQUEST_PRESSURE
    if ev is not None:
        t["oom.kind"] = ev.kind
        t["oom.strength"] = ev.strength
        t["oom.backend"] = ev.backend
        t["oom.exception"] = ev.exception
        t["oom.message_format"] = ev.message_format
        t["oom.device_index"] = ev.device_index
        t["oom.detail"] = ev.detail
        t["oom.tried_to_allocate"] = ev.tried_to_allocate_bytes
        t["oom.total_capacity"] = ev.total_capacity_bytes
        t["oom.free"] = ev.free_bytes
        t["oom.process_in_use"] = ev.process_in_use_bytes
        t["oom.allocated"] = allocated_of(ev)
        t["oom.reserved_unallocated"] = ev.reserved_unallocated_bytes
        t["oom.reserved_total"] = ev.reserved_total_bytes
        t["oom.host_bytes"] = ev.host_bytes
        shape = ev.tensor_shape or []
        t["oom.tensor_dims"] = len(shape) if shape else None
        # a convolution's kernel as TensorFlow lays it out, [height, width, in, out] with a small
        # square window: four dimensions, but a weight
        t["oom.conv_kernel_shape"] = len(shape) == 4 and shape[0] == shape[1] <= 7 and min(shape[2:]) > shape[0]
        req = ev.tried_to_allocate_bytes
        cap = ev.total_capacity_bytes
        unalloc = unallocated_of(ev)
        t["oom.unallocated"] = unalloc
        t["oom.reserved_unallocated_over_request"] = ratio(unalloc, req)
        t["oom.reserved_unallocated_share"] = ratio(unalloc, cap)
        t["oom.request_share"] = ratio(req, cap)
        t["oom.free_share"] = ratio(ev.free_bytes, cap)
        t["oom.free_over_request"] = ratio(ev.free_bytes, req)
        # free + reserved-but-unallocated against the request: >= 1 means the memory existed
        # (the allocator releases wholly free segments before it raises), only fragmented
        t["oom.reclaimable_over_request"] = (ratio(ev.free_bytes + unalloc, req)
                                             if ev.free_bytes is not None and unalloc is not None else None)
        alloc = t["oom.allocated"]
        t["oom.allocated_share"] = ratio(alloc, cap)
        # memory of this process outside PyTorch's allocator (NCCL, context, cuBLAS, ...)
        self_use = ev.process_in_use_bytes
        if self_use is not None and alloc is not None and self_use < alloc + (unalloc or 0):
            # NVML in a container often cannot see the process ("this process has 0 bytes"):
            # a figure below what PyTorch itself holds is not believed
            self_use = None
        non_pt = outside_pytorch(ev, self_use)
        if non_pt is not None:
            t["oom.non_pytorch"] = max(0, non_pt)
            t["oom.non_pytorch_share"] = ratio(max(0, non_pt), cap)
        t["oom.process_count"] = len(ev.processes)
        t["oom.sibling_processes"] = sibling_processes(ev)
        # other processes: the entries that are not this process (in containers this process
        # appears as "Process N has": split_processes says which entry it is)
        _me, foreign = split_processes(ev)
        # a process the launcher names as one of this job's workers is a sibling rank, not foreign
        listed_others = bool(foreign)
        job, foreign = job_processes(foreign, facts.ranks.worker_pids)
        t["oom.in_dataloader_worker"] = in_dataloader_worker(facts)
        if t["oom.in_dataloader_worker"]:
            # a worker on the GPU shares it with its main process and the other workers: as
            # many of the listed processes as the job has (num_workers + 1, when the log says;
            # the largest first: the main process holds the model), the rest are foreign
            workers = facts.environment.dataloader_num_workers
            n = workers + 1 if workers else len(foreign)
            ranked = sorted(foreign, key=lambda p: -p.bytes)
            job, foreign = job + ranked[:n], ranked[n:]
        t["oom.job_processes"] = len(job)
        t["oom.other_process_bytes"] = sum(p.bytes for p in foreign)
        t["oom.other_process_count"] = len(foreign)
        t["oom.other_process_share"] = ratio(sum(p.bytes for p in foreign), cap)
        # GPU memory in use that this process's own figures do not account for: capacity
        # minus free minus this process (its NVML entry, else what PyTorch reserved). For
        # messages without a process list (torch <= 2.0, ROCm) it is the only trace of
        # another process holding the device; it includes this process's CUDA context.
        own = self_use if self_use is not None else (
            ev.reserved_total_bytes if ev.reserved_total_bytes is not None
            else ((alloc + unalloc) if (alloc is not None and unalloc is not None) else None))
        if cap and ev.free_bytes is not None and own is not None and not listed_others:
            # the CUDA context (a few hundred MiB) is in no PyTorch figure: not another process
            context = CUDA_CONTEXT if self_use is None else 0
            t["oom.unaccounted"] = max(0, cap - ev.free_bytes - own - context)
            t["oom.unaccounted_share"] = ratio(t["oom.unaccounted"], cap)
            # ... shared among the other workers the launcher stopped on this host (not the
            # failed one: that may be this process): about a CUDA context each is what ranks
            # that never set their device leave on GPU 0
            if facts.ranks.stopped_pids and ev.device_index in (0, None):
                t["oom.unaccounted_per_worker"] = t["oom.unaccounted"] // len(facts.ranks.stopped_pids)
        # a request past the device by three orders of magnitude (or past 1 EiB)
        t["oom.absurd_request"] = bool(req and (req >= 2**60 or (cap and req >= ABSURD_OVER_DEVICE * cap)))
    t["oom.devices"] = sorted({e.device_index for e in facts.oom_events if e.device_index is not None})
    t["oom.device_count"] = len(t["oom.devices"])
    t["oom.ranks"] = sorted({r for e in facts.oom_events for r in e.ranks})

    env = facts.environment
    for name, value in env.model_dump(exclude={"sources"}).items():
        t[f"env.{name}"] = value
    cap = env.compute_capability or capability_of(env.gpu_name)
    t["env.compute_capability"] = cap
    if cap is not None:
        try:
            t["env.bf16_capable"] = float(cap) >= 8.0
        except ValueError:
            pass
    t["env.multi_gpu"] = bool((env.world_size or 0) > 1 or (env.gpu_count or 0) > 1
                              or len(t["oom.devices"]) > 1 or len(t["oom.ranks"]) > 1)

    ph = facts.phase
    t["phase"] = ph.phase
    t["phase.step"] = ph.step
    t["phase.epoch"] = ph.epoch
    t["phase.reason"] = ph.reason
    t["phase.stops_early"] = ph.stops_early

    prim = [f for f in facts.failures if not f.secondary]
    t["failure.kinds"] = sorted({f.kind for f in facts.failures})
    t["failure.primary_kinds"] = sorted({f.kind for f in prim})
    t["failure.any"] = bool(prim)
    t["ranks.failed_count"] = len(facts.ranks.failed_ranks)
    t["ranks.exit_codes"] = facts.ranks.exit_codes
    t["ranks.cascade"] = bool(facts.ranks.cascade)

    samples = facts.memory_samples
    allocs = [s.allocated_bytes for s in samples if s.allocated_bytes is not None]
    t["stats.count"] = len(samples)
    t["stats.allocated_growing"] = _growing(allocs)
    reserved = [s.reserved_bytes for s in samples if s.reserved_bytes is not None]
    t["stats.reserved_growing"] = _growing(reserved)
    hp = [s.host_percent for s in samples if s.host_percent is not None]
    t["stats.host_percent_max"] = max(hp) if hp else None
    t["stats.alloc_retries"] = max((s.alloc_retries or 0 for s in samples), default=None) if samples else None
    # what the caching allocator holds but does not use, at its worst reading
    unused = [(s.reserved_bytes - s.allocated_bytes, s.allocated_bytes) for s in samples
              if s.reserved_bytes is not None and s.allocated_bytes and s.reserved_bytes > s.allocated_bytes]
    t["stats.cache_unused"] = max((u for u, _a in unused), default=None)
    t["stats.cache_unused_over_allocated"] = max((u / a for u, a in unused), default=None)
    # memory pressure in a run that has not failed (yet): the allocator flushing its cache
    # to satisfy requests, a cache several times what is in use, allocations rising step
    # after step
    # other ranks' contexts beside a GPU's own process in an nvidia-smi table: without an
    # OOM message that lists processes, the table's are the siblings
    t["stats.smi_siblings"] = smi_siblings(samples)
    if not t.get("oom.sibling_processes"):
        t["oom.sibling_processes"] = t["stats.smi_siblings"]
    t["stats.pressure"] = bool(
        (t["stats.alloc_retries"] or 0) >= 1
        or ((t["stats.cache_unused_over_allocated"] or 0) >= 2 and (t["stats.cache_unused"] or 0) >= 2 * 2**30)
        or t["stats.allocated_growing"] or t["stats.smi_siblings"] >= 2)
    hr = [s.host_request_bytes for s in samples if s.host_request_bytes is not None]
    t["stats.host_request_max"] = max(hr) if hr else None
    # the host's memory nearly full (DeepSpeed's see_memory_usage prints its share), or one
    # host allocation of several GiB at once (tcmalloc's report): a dataset or a model's
    # weights materialised in one block, what exhausts a notebook's or a container's RAM
    t["stats.host_percent_high"] = (t["stats.host_percent_max"] or 0) >= 90
    t["stats.host_request_large"] = (t["stats.host_request_max"] or 0) >= HOST_REQUEST_PRESSURE
    t["stats.host_pressure"] = t["stats.host_percent_high"] or t["stats.host_request_large"]
    for name, lines in facts.markers.items():
        t[f"marker.{name}"] = len(lines)
    t.update(fingerprint_facts(facts))
    return t


def _growing(values: list[int], min_points: int = 4) -> Optional[bool]:
    """True when a series rises clearly and mostly monotonically (a leak), None when too short."""
    if len(values) < min_points:
        return None
    rises = sum(1 for a, b in zip(values, values[1:]) if b > a)
    return rises >= (len(values) - 1) * 0.75 and values[-1] > values[0] * 1.2
