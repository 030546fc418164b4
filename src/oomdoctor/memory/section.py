"""Putting it together: the report's memory section, its table rows, and derived facts.

``memory_section(facts, diagnoses)`` is called by the pipeline after classification: it
builds the budget (estimate vs allocator), fingerprints the request, and fills each
remediation's ``fit`` (re-ranking them). ``fingerprint_facts(facts)`` is called by
``kb.table.fact_table`` so knowledge-base conditions can use the fingerprint.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from ..facts.derived import HOST_KINDS, allocated_of, outside_pytorch, primary_event, unallocated_of
from ..facts.models import Facts, OomEvent
from ..facts.sizes import format_size
from .fingerprint import describe, match_request
from .fit import Gap, apply_fits
from .models import MemoryLine, MemoryReport, RequestMatch
from .setup import TrainingSetup, activation_estimate, logits_estimate, model_states, read_setup

if TYPE_CHECKING:
    from ..kb.diagnosis import Diagnosis
    from ..report.model import Report

_FIGURES = ("params", "hidden_size", "num_layers", "num_attention_heads", "num_kv_heads",
            "intermediate_size", "vocab_size")


# -- allocator figures --------------------------------------------------------------------

def _self_use(ev: OomEvent) -> Optional[int]:
    own = next((p.bytes for p in ev.processes if p.is_self), None)
    return own if own is not None else ev.process_in_use_bytes


def gap_of(ev: Optional[OomEvent], facts: Facts, request_kind: Optional[str] = None,
           claimed: bool = False, capacity: Optional[int] = None) -> Gap:
    gap = Gap(phase=facts.phase.phase, request_kind=request_kind, request_claimed=claimed)
    if ev is None:
        return gap
    gap.host = ev.kind in HOST_KINDS
    gap.request = ev.tried_to_allocate_bytes
    gap.unallocated = unallocated_of(ev)
    cap = ev.total_capacity_bytes or capacity
    own = _self_use(ev)
    if cap is not None and ev.free_bytes is not None and own is not None:
        gap.others = max(0, cap - ev.free_bytes - own)
    if gap.request is not None and ev.free_bytes is not None and not gap.host:
        gap.missing = max(0, gap.request - ev.free_bytes)
        gap.headroom = max(gap.missing, (cap or 0) // 20)
    return gap


def _allocator_lines(ev: OomEvent, gap: Gap, capacity: Optional[int]) -> list[MemoryLine]:
    lines = [MemoryLine(item="capacity", bytes=ev.total_capacity_bytes or capacity, basis="total capacity of the GPU")]
    lines.append(MemoryLine(item="free", bytes=ev.free_bytes, basis="free on the device when the request failed"))
    alloc, unalloc, own = allocated_of(ev), gap.unallocated, _self_use(ev)
    lines.append(MemoryLine(item="this process", bytes=own, basis="PyTorch and non-PyTorch memory of the failing process"))
    lines.append(MemoryLine(item="allocated by PyTorch", bytes=alloc, basis="live tensors"))
    lines.append(MemoryLine(item="fragmentation", bytes=unalloc, basis="reserved by PyTorch but unallocated"))
    if (outside := outside_pytorch(ev, own)) is not None:
        non_pt = max(0, outside)
        lines.append(MemoryLine(item="non-PyTorch (this process)", bytes=non_pt,
                                basis="process in use − allocated − unallocated: CUDA context, NCCL, cuBLAS workspaces"))
    else:
        lines.append(MemoryLine(item="non-PyTorch (this process)", basis="unknown: the message does not give this process's total"))
    lines.append(MemoryLine(item="other processes", bytes=gap.others, basis="capacity − free − this process"
                            if gap.others is not None else "unknown: the message does not give it"))
    lines.append(MemoryLine(item="request", bytes=ev.tried_to_allocate_bytes, basis="the allocation that failed"))
    lines.append(MemoryLine(item="missing", bytes=gap.missing, basis="request − free: the least that was missing"
                            if gap.missing is not None else "unknown: needs the request and the free memory"))
    return [ln for ln in lines if ln.bytes is not None or ln.item in ("missing", "non-PyTorch (this process)")]


# -- configuration estimate ---------------------------------------------------------------

def _states_basis(st: TrainingSetup) -> str:
    parts = []
    if st.peft:
        parts.append(f"{st.peft}: frozen base {st.base_bytes:g} B/param, adapters 16 B/param")
    elif st.precision == "fp32":
        parts.append("fp32: 4 + 4 + 8 B/param")
    else:
        parts.append("mixed precision: 2 + 2 + 12 B/param (ZeRO paper accounting)")
    if st.sharding:
        parts.append(f"{st.sharding} over {st.world or '?'} GPUs")
    elif st.zero_stage == 0 and (st.world or 0) > 1:
        parts.append(f"no sharding: each of the {st.world} GPUs holds all states")
    if st.offload_optimizer or st.offload_params:
        parts.append("offload: " + ", ".join(n for n, on in (("optimizer", st.offload_optimizer),
                                                             ("parameters", st.offload_params)) if on))
    return "; ".join(parts)


def _estimate_lines(st: TrainingSetup) -> list[MemoryLine]:
    lines: list[MemoryLine] = []
    states = model_states(st)
    basis = _states_basis(st)
    if states is not None:
        lines.append(MemoryLine(item="weights", bytes=states.weights, basis=basis))
        lines.append(MemoryLine(item="gradients", bytes=states.grads, basis=basis))
        lines.append(MemoryLine(item="optimizer states", bytes=states.optimizer, basis=basis))
    else:
        lines.append(MemoryLine(item="model states", basis="unknown: needs the parameter count, sharding and world size"))
    act = activation_estimate(st, checkpointing=True if st.checkpointing is None else None)
    if act is not None:
        fused = st.fused_attention is not False
        per_layer = "34·s·b·h per layer (fused attention)" if fused else "s·b·h·(34 + 5·a·s/h) per layer"
        how = "checkpointing on: 2·s·b·h per layer + one layer of " + per_layer if (st.checkpointing is not False) \
            else per_layer + " × layers"
        if st.checkpointing is None:
            off = activation_estimate(st, checkpointing=False)
            how += f"; the log does not say whether checkpointing is on: {_size(off.total if off else None)} without it"
        if st.fused_attention is None:
            how += "; attention implementation not in the log: fused (SDPA, transformers' default) assumed"
        lines.append(MemoryLine(item="activations", bytes=act.total, basis=f"{how} (Korthikanti et al. 2022)"))
    else:
        lines.append(MemoryLine(item="activations", basis="unknown: needs hidden size, heads, layers, micro-batch and sequence length"))
    logits = logits_estimate(st, 4)
    if logits is not None:
        lines.append(MemoryLine(item="logits (fp32)", bytes=logits,
                                basis=f"b·s·V·4 = {st.batch} × {st.seq_len} × {st.dim('vocab_size')} × 4; "
                                      "the loss holds a few such tensors at once"))
    if st.paired and not st.peft and st.params is not None:
        n = st.shards if (st.zero_stage or 0) >= 3 else 1
        lines.append(MemoryLine(item="reference model", bytes=st.params * 2 // n,
                                basis="a 16-bit copy of the policy (full fine-tuning, no adapters)"))
    return lines


def _remainder(st: TrainingSetup, ev: Optional[OomEvent]) -> list[MemoryLine]:
    if ev is None:
        return []
    alloc = allocated_of(ev)
    states = model_states(st)
    if alloc is None or states is None or states.total is None:
        return []
    rest = alloc - states.total
    if rest >= 0:
        return [MemoryLine(item="allocated beyond the model states", bytes=rest,
                           basis="activations, logits and temporaries of the step when it failed")]
    return [MemoryLine(item="model states not yet allocated", bytes=-rest,
                       basis="the estimate exceeds what was allocated: the failure came before every state existed "
                             "(loading, first step), or an assumption does not hold")]


# -- entry points ---------------------------------------------------------------------------

def _fingerprint(facts: Facts, st: TrainingSetup, ev: Optional[OomEvent]):
    request = ev.tried_to_allocate_bytes if (ev is not None and ev.kind not in HOST_KINDS) else None
    matches = match_request(st, facts, request) if request else []
    return request, matches, describe(matches, request or 0)


def build(facts: Facts, diagnoses: Optional[list["Diagnosis"]] = None) -> Optional[MemoryReport]:
    ev = primary_event(facts)
    st = read_setup(facts, ev)
    request, matches, (is_, could, evidence, text) = _fingerprint(facts, st, ev)
    capacity = st.capacity
    gap = gap_of(ev, facts, request_kind=is_ or could, claimed=is_ is not None, capacity=capacity)
    estimate = _estimate_lines(st)
    has_estimate = any(ln.bytes is not None for ln in estimate)
    has_allocator = ev is not None and (ev.tried_to_allocate_bytes is not None or ev.free_bytes is not None)
    if not has_estimate and not has_allocator:
        return None  # the log lacks the inputs: absent, not guessed
    report = MemoryReport(
        request_bytes=request, free_bytes=ev.free_bytes if ev else None, capacity_bytes=capacity,
        missing_bytes=gap.missing, request_is=is_, request_could_be=could, request_evidence=evidence,
        request_explained=text,
        request_matches=[RequestMatch(kind=m.kind, tensor=m.tensor, bytes=m.nbytes, evidence=m.evidence, note=m.note)
                         for m in matches],
        model=st.shape.table_entry.name if st.shape.table_entry else None,
        model_source=st.shape.table_entry.source if st.shape.table_entry else None,
        figures={n: st.shape.get(n) for n in _FIGURES if st.shape.get(n) is not None},
        figure_origins={n: st.shape.says(n) for n in _FIGURES if st.shape.get(n) is not None},
        estimate=estimate,
        allocator=_allocator_lines(ev, gap, capacity) if (ev is not None and has_allocator) else [],
        remainder=_remainder(st, ev),
        assumptions=list(dict.fromkeys(st.assumptions)),
        unknown=list(dict.fromkeys(st.unknown)),
    )
    if diagnoses:
        report.combination = apply_fits(diagnoses, st, gap)
    return report


def memory_section(facts: Facts, diagnoses: Optional[list["Diagnosis"]] = None) -> Optional[MemoryReport]:
    """The report's memory section (None when the log lacks the inputs). Never raises."""
    try:
        return build(facts, diagnoses)
    except Exception as exc:  # bad input must never break a diagnosis
        facts.notes.append(f"memory arithmetic skipped: {type(exc).__name__}: {exc}"[:300])
        return None


def fingerprint_facts(facts: Facts) -> dict[str, Any]:
    """Derived facts for knowledge-base conditions (``memory.*``). Never raises."""
    try:
        ev = primary_event(facts)
        st = read_setup(facts, ev)
        request, matches, (is_, could, evidence, text) = _fingerprint(facts, st, ev)
        gap = gap_of(ev, facts, capacity=st.capacity)
        states = model_states(st)
        alloc = allocated_of(ev) if ev is not None else None
        cap = st.capacity
        total = states.total if states is not None else None
        act = activation_estimate(st)
        return {
            "memory.request_is": is_,
            "memory.request_could_be": could,
            "memory.request_evidence": evidence,
            "memory.request_explained": text,
            "memory.request_over_allocated": (request / alloc) if (request and alloc) else None,
            "memory.missing": gap.missing,
            "memory.model": st.shape.table_entry.name if st.shape.table_entry else None,
            "memory.params": st.params,
            "memory.model_states": total,
            "memory.model_states_share": (total / cap) if (total is not None and cap) else None,
            "memory.activations": act.total if act is not None else None,
            "memory.logits_fp32": logits_estimate(st, 4),
        }
    except Exception:
        return {}


def _size(n: Optional[int]) -> str:
    return format_size(n) if n is not None else "unknown"


# -- rows for the text and markdown renderers ----------------------------------------------

def _line(lines: list[MemoryLine], item: str) -> Optional[MemoryLine]:
    return next((ln for ln in lines if ln.item == item), None)


def memory_rows(report: "Report") -> list[tuple[str, Any, Optional[str]]]:
    """(label, value, note) rows of a small table for the text and markdown reports.

    ``value`` is an ``int`` of bytes where it is a size (renderers format it) and text
    otherwise. The allocator's own figures are not repeated (the reports show them next
    to this table); this table says what they mean. [] when the section is absent.
    """
    mem: Optional[MemoryReport] = getattr(report, "memory", None)
    if mem is None:
        return []
    rows: list[tuple[str, Any, Optional[str]]] = []
    if mem.request_bytes is not None:
        if mem.request_explained:
            match = mem.request_explained.split(" = ", 1)[-1]
            rows.append(("request", mem.request_bytes, ("= " if mem.request_is else "could be ") + match))
        else:
            rows.append(("request", mem.request_bytes, "no tensor of this configuration has that size, "
                                                       "or the log lacks the shape"))
    if mem.missing_bytes is not None:
        rows.append(("missing", mem.missing_bytes, "at least: request − free"))
    w, g, o = (_line(mem.estimate, n) for n in ("weights", "gradients", "optimizer states"))
    if w and g and o and None not in (w.bytes, g.bytes, o.bytes):
        total = (w.bytes or 0) + (g.bytes or 0) + (o.bytes or 0)
        parts = f"weights {_size(w.bytes)}, gradients {_size(g.bytes)}, optimizer {_size(o.bytes)}"
        note = f"none resident on the GPU between steps; {w.basis}" if total == 0 else f"{parts}; {w.basis}"
        rows.append(("model states", total, note))
    for item in ("activations", "logits (fp32)", "reference model"):
        ln = _line(mem.estimate, item)
        if ln is not None and ln.bytes is not None:
            rows.append((item, ln.bytes, ln.basis))
    for ln in mem.remainder:
        rows.append((ln.item, ln.bytes, ln.basis))
    top = report.diagnoses[0] if report.diagnoses else None
    if top is not None:
        fix = next((r for r in top.remediations if r.applicable and r.fit is not None), None)
        if fix is not None and fix.fit is not None:
            rows.append(("top fix", f"{fix.id}: {fix.fit.verdict}", fix.fit.explanation))
    if mem.combination:
        rows.append(("together", mem.combination, None))
    if mem.unknown:
        rows.append(("not in the log", ", ".join(mem.unknown), None))
    if mem.assumptions:
        rows.append(("assumed", "; ".join(mem.assumptions), None))
    return rows
