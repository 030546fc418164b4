"""Parser families: each reads the normalised lines and adds facts.

Order matters: frames first (others attach them), then the failure families, then the
context families (statistics, environment), then phase and ranks, which read the
failures found before them.
"""
from __future__ import annotations

from typing import Optional

from ..facts.derived import primary_event
from ..facts.models import MAX_EVENTS, Facts, sample_events
from ..read.normalise import Line
from . import (accelerators, allocator_stats, environment, host, lookalikes, memory_words,
               phase, ranks, runtime, torch_alloc, traceback)
from .base import ParseContext

FAMILIES = (
    traceback,        # frames of every traceback
    torch_alloc,      # PyTorch caching-allocator OOMs (CUDA, HIP, NPU, XPU, MLU, GCU)
    accelerators,     # MPS, XLA/JAX, TensorFlow
    runtime,          # CUDA error: out of memory, cuBLAS/cuDNN, NCCL, bitsandbytes, FSDP clone
    host,             # kernel oom-killer, SIGKILL/-9, Slurm, Kubernetes, CPU allocator, DataLoader
    memory_words,     # any other error that says memory could not be allocated, host or device
    lookalikes,       # not-OOM failures: illegal access, asserts, device mismatch, timeouts ...
    allocator_stats,  # memory_summary, see_memory_usage, nvidia-smi, trainer memory lines
    environment,      # versions, GPU, ZeRO/offload, framework, stage, hyper-parameters
    phase,            # where the job was when it failed
    ranks,            # fold ranks, first failure vs cascade
)


# what a file's configuration needs (frames tell JAX from torch_xla): enough to compare jobs
ENVIRONMENT_ONLY = (traceback, environment)


def extract(lines: list[Line], source: Optional[str] = None, families=FAMILIES) -> Facts:
    ctx = ParseContext(lines, source)
    for family in families:
        family.parse(ctx)
        cap_events(ctx.facts)
    if ctx.facts.oom_events_left_out:
        total = len(ctx.facts.oom_events) + ctx.facts.oom_events_left_out
        ctx.note(f"{total} OOM events in the log: {ctx.facts.oom_events_left_out} left out of the report, which keeps "
                 f"the first, the last and one per distinct rank, device and request size ({MAX_EVENTS} at most)")
    return ctx.facts


def cap_events(facts: Facts) -> None:
    """Keep a bounded sample of the OOM events (the families after this one, the classifier
    and the report then work on at most ``MAX_EVENTS``); count the rest."""
    events = facts.oom_events
    if len(events) <= MAX_EVENTS:
        return
    kept = sample_events(events, keep=primary_event(facts))
    facts.oom_events_left_out += len(events) - len(kept)
    facts.oom_events[:] = kept
