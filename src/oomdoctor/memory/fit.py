"""Will each fix fit? Predicted savings by estimate name, and a verdict against the gap.

A knowledge-base remediation names its estimate with ``saving: <name>``; the names and
what each computes are listed in ``ESTIMATES`` (and in docs/memory.md). The gap is what
the failed allocation lacked: ``request − free``. It is a lower bound — what the step
would have allocated after the failed tensor is not in the log — so a fix must cover it
with room to spare (``headroom``: as much again, or 5% of the GPU, whichever is larger)
to be called "fits"; covering only the gap is "may-fit"; less is "will-not-fit".
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional

from ..facts.sizes import format_size
from . import formulas as F
from .setup import TrainingSetup, activation_estimate, logits_estimate, model_states

if TYPE_CHECKING:
    from ..kb.diagnosis import Diagnosis

ADAPTER_SHARE = 0.02     # LoRA adapters: "typically < 1-2% of params" (reference, optimizer-state)


@dataclass
class Gap:
    """What the failed allocation lacked, and the allocator figures around it."""

    missing: Optional[int] = None
    headroom: Optional[int] = None
    host: bool = False
    phase: Optional[str] = None
    request: Optional[int] = None
    request_kind: Optional[str] = None
    request_claimed: bool = False
    unallocated: Optional[int] = None
    others: Optional[int] = None


@dataclass
class Saving:
    nbytes: Optional[int]
    basis: str
    where: str = "gpu"        # "gpu" or "host"
    capped: bool = False      # uncertain input: at best "may-fit"


Estimate = Callable[[TrainingSetup, Gap], Saving]
_NEEDS_ACT = "needs hidden size, heads, layers, micro-batch and sequence length"


def _fmt(n: Optional[int]) -> str:
    return format_size(n) if n is not None else "unknown"


def _states_delta(st: TrainingSetup, what: str, **target) -> Saving:
    now, new = model_states(st), model_states(st, **target)
    if now is None or new is None or now.total is None or new.total is None:
        why = "needs the parameter count, sharding and world size"
        if st.peft and st.trainable is None:
            why = "needs the number of trainable (adapter) parameters"
        return Saving(None, why)
    return Saving(max(0, now.total - new.total), f"{what}: model states {_fmt(now.total)} → {_fmt(new.total)} per GPU")


# -- activations ------------------------------------------------------------------------

def gradient_checkpointing(st: TrainingSetup, gap: Gap) -> Saving:
    if st.checkpointing:
        if st.checkpointing_default:
            return Saving(0, "it is on by default in this framework and the log does not turn it off")
        return Saving(0, "gradient checkpointing is already on in this log")
    off, on = activation_estimate(st, checkpointing=False), activation_estimate(st, checkpointing=True)
    if off is None or on is None:
        return Saving(None, f"activations unknown ({_NEEDS_ACT})")
    basis = (f"activations {_fmt(off.total)} → {_fmt(on.total)} (2·s·b·h per layer kept plus one layer "
             f"recomputed; Korthikanti et al. 2022)")
    if st.checkpointing is None:
        basis += "; the log does not say whether it is already on"
    elif st.checkpointing_default:
        basis += "; off is this framework's default, the log does not show the setting"
    return Saving(off.total - on.total, basis, capped=st.checkpointing is None or st.checkpointing_default)


def fused_attention(st: TrainingSetup, gap: Gap) -> Saving:
    if st.fused_attention:
        return Saving(0, "a fused attention kernel is already in use")
    s, b, a, layers = st.seq_len, st.batch, st.dim("num_attention_heads"), st.dim("num_layers")
    if not all((s, b, a, layers)):
        return Saving(None, f"attention scores unknown ({_NEEDS_ACT})")
    one = F.attention_scores(s, b, a) * st.act_scale  # type: ignore[arg-type]
    n = 1 if st.checkpointing else layers
    basis = f"the 5·a·s²·b attention-score term of {n} layer(s) ({'checkpointing on' if st.checkpointing else 'all layers kept'})"
    if st.fused_attention is None:
        basis += "; the log does not name the attention implementation"
    return Saving(one * n, basis, capped=st.fused_attention is None or st.checkpointing is None)  # type: ignore[operator]


def _halve(st: TrainingSetup, gap: Gap, what: str) -> Saving:
    act = activation_estimate(st)
    if what == "micro-batch":
        if st.micro_batch == 1:
            return Saving(0, "the micro-batch is already 1 (use gradient accumulation for the global batch)")
        half = activation_estimate(st, batch=(st.batch or 0) // 2 or None) if st.batch else None
        logits = logits_estimate(st)
        logits_half = logits // 2 if logits else None
    else:
        half = activation_estimate(st, seq=(st.seq_len or 0) // 2 or None) if st.seq_len else None
        logits = logits_estimate(st)
        logits_half = logits // 2 if logits else None
    if act is not None and half is not None and logits is not None and logits_half is not None:
        saving = act.total - half.total + logits - logits_half
        return Saving(saving, f"activations and fp32 logits with half the {what}: "
                              f"{_fmt(act.total + logits)} → {_fmt(half.total + logits_half)}")
    if gap.request and gap.request_kind == "logits":
        return Saving(gap.request // 2, f"the failed {_fmt(gap.request)} {gap.request_kind} tensor halves",
                      capped=not gap.request_claimed)
    return Saving(None, f"activations unknown ({_NEEDS_ACT})")


def halve_micro_batch(st: TrainingSetup, gap: Gap) -> Saving:
    return _halve(st, gap, "micro-batch")


def halve_sequence(st: TrainingSetup, gap: Gap) -> Saving:
    return _halve(st, gap, "sequence length")


def activation_offload(st: TrainingSetup, gap: Gap) -> Saving:
    on = activation_estimate(st, checkpointing=True)
    if on is None:
        return Saving(None, f"checkpointed activations unknown ({_NEEDS_ACT})")
    return Saving(on.checkpoints, "the kept layer inputs (2·s·b·h per layer) move to host RAM",
                  capped=not st.checkpointing)


# -- logits -----------------------------------------------------------------------------

def fused_cross_entropy(st: TrainingSetup, gap: Gap) -> Saving:
    if st.fused_loss:
        return Saving(0, "a fused linear + cross-entropy kernel is already on")
    est = logits_estimate(st, 4)
    saving = est * 2 if est else None
    basis = "b·s·V·8: the fp32 logits and their gradient are never materialised (a lower bound)"
    if gap.request and gap.request_kind == "logits" and (saving is None or gap.request > saving):
        saving, basis = gap.request, f"at least the failed {_fmt(gap.request)} logits allocation"
    if saving is None:
        return Saving(None, "logits unknown (needs micro-batch, sequence length and vocabulary)")
    return Saving(saving, basis, capped=not gap.request_claimed and est is None)


def logits_16bit(st: TrainingSetup, gap: Gap) -> Saving:
    est = logits_estimate(st, 4)
    if est is None:
        return Saving(None, "logits unknown (needs micro-batch, sequence length and vocabulary)")
    return Saving(est // 2, "fp32 → 16-bit logits: b·s·V·2")


def eval_accumulation(st: TrainingSetup, gap: Gap) -> Saving:
    """Evaluation outputs accumulated on the GPU (argmax first, or move them off every N steps)."""
    est = logits_estimate(st, 4)
    if gap.request and gap.request_kind == "logits":
        return Saving(max(gap.request, est or 0), "the accumulated full-vocabulary logits leave the GPU "
                                                  "(at least the failed logits allocation)")
    if est is None:
        return Saving(None, "eval logits unknown (needs batch, sequence length and vocabulary)")
    return Saving(est, "one step's fp32 logits (b·s·V·4) per accumulated eval step, the eval batch taken "
                       "as the training micro-batch", capped=True)


# -- model states -----------------------------------------------------------------------

def _zero(target: int) -> Estimate:
    def estimate(st: TrainingSetup, gap: Gap) -> Saving:
        if st.zero_stage is not None and st.zero_stage >= target:
            return Saving(0, f"the states are already sharded ({st.sharding or f'ZeRO-{st.zero_stage}'})")
        if st.world == 1:
            return Saving(0, "one GPU: there is nothing to shard across")
        if not st.world:
            return Saving(None, "needs the world size (GPUs sharing the states)")
        return _states_delta(st, f"ZeRO-{target} over {st.world} GPUs", zero_stage=target)
    estimate.__name__ = f"zero_stage_{target}"
    return estimate


def offload_optimizer(st: TrainingSetup, gap: Gap) -> Saving:
    if st.offload_optimizer:
        return Saving(0, "the optimizer states are already offloaded")
    return _states_delta(st, "optimizer states to host RAM", offload_optimizer=True)


def offload_params(st: TrainingSetup, gap: Gap) -> Saving:
    if st.offload_params:
        return Saving(0, "the parameters are already offloaded")
    return _states_delta(st, "ZeRO-3 parameters to host RAM", zero_stage=3, offload_params=True)


def lora(st: TrainingSetup, gap: Gap) -> Saving:
    if st.peft:
        return Saving(0, f"the log already trains adapters ({st.peft})")
    adapters = int((st.params or 0) * ADAPTER_SHARE) or None
    return _states_delta(st, f"frozen 16-bit base + adapters (≤{ADAPTER_SHARE:.0%} of params)", peft="lora", adapters=adapters)


def qlora(st: TrainingSetup, gap: Gap) -> Saving:
    if st.peft == "qlora":
        return Saving(0, "the base model is already quantized")
    if st.peft == "lora":
        return _states_delta(st, "4-bit base weights (0.5 B/param)", peft="lora", base_bytes=0.5)
    adapters = int((st.params or 0) * ADAPTER_SHARE) or None
    return _states_delta(st, f"4-bit frozen base + adapters (≤{ADAPTER_SHARE:.0%} of params)",
                         peft="lora", base_bytes=0.5, adapters=adapters)


def optim_8bit(st: TrainingSetup, gap: Gap) -> Saving:
    if st.optimizer in ("adam8bit", "adam4bit"):
        return Saving(0, "the optimizer is already 8-bit or 4-bit")
    if st.peft:
        if st.trainable is None:
            return Saving(None, "needs the number of trainable parameters")
        return Saving(st.trainable * 6 // (st.shards if (st.zero_stage or 0) >= 1 else 1),
                      "adapter Adam m + v 8 → 2 B/param")
    return _states_delta(st, "Adam m + v 8 → 2 B/param (bitsandbytes)", optimizer="adam8bit")


def bf16_weights(st: TrainingSetup, gap: Gap) -> Saving:
    if st.params is None:
        return Saving(None, "needs the parameter count")
    n = st.shards if (st.zero_stage or 0) >= 3 else 1
    basis = "weights 4 → 2 B/param" + (f" ÷ {n} GPUs" if n > 1 else "")
    if st.precision != "fp32":
        basis += "; the log does not show the weights were loaded in fp32"
    return Saving(st.params * 2 // n, basis, capped=st.precision != "fp32")


def no_ref_model(st: TrainingSetup, gap: Gap) -> Saving:
    if st.peft:
        return Saving(0, "with adapters the reference is the policy with adapters disabled: no copy to remove")
    if st.params is None:
        return Saving(None, "needs the parameter count")
    n = st.shards if (st.zero_stage or 0) >= 3 else 1
    return Saving(st.params * 2 // n, "the 16-bit reference copy (2 B/param" + (f" ÷ {n} GPUs)" if n > 1 else ")"))


# -- allocator and other processes --------------------------------------------------------

def expandable_segments(st: TrainingSetup, gap: Gap) -> Saving:
    if gap.unallocated is None:
        return Saving(None, "the message does not give reserved-but-unallocated memory")
    return Saving(gap.unallocated, "recovers most of the reserved-but-unallocated memory (not all of it)", capped=True)


def free_other_processes(st: TrainingSetup, gap: Gap) -> Saving:
    if gap.others is None:
        return Saving(None, "the message does not say what other processes hold")
    return Saving(gap.others, "memory held on this GPU outside this process")


# -- checkpoint save ----------------------------------------------------------------------

def save_only_model(st: TrainingSetup, gap: Gap) -> Saving:
    if st.params is None:
        return Saving(None, "needs the parameter count", where="host")
    return Saving(st.params * 12, "≈12 B/param of fp32 master copy + Adam m + v not written (summed over ranks)", where="host")


def no_gather_on_save(st: TrainingSetup, gap: Gap) -> Saving:
    if not gap.host and gap.phase == "checkpoint_save" and gap.request:
        return Saving(gap.request, f"the failed {_fmt(gap.request)} gather and every later one go away")
    if st.params is None:
        return Saving(None, "needs the parameter count", where="host" if gap.host else "gpu")
    return Saving(F.gathered_16bit_model(st.params), "the full 16-bit model (2 B/param) gathered on rank 0", where="host")


def gather_to_cpu(st: TrainingSetup, gap: Gap) -> Saving:
    """FSDP FULL_STATE_DICT with offload_to_cpu and rank0_only: the full model goes to
    rank 0's host RAM, one module at a time, instead of to every GPU. It saves GPU memory
    and costs host RAM, so it never counts as a host saving."""
    if gap.phase == "checkpoint_save" and gap.request:
        return Saving(gap.request, f"the failed {_fmt(gap.request)} gather goes to host RAM instead")
    if st.params is None:
        return Saving(None, "needs the parameter count")
    per = 2 if st.precision == "pure16" else 4
    return Saving(st.params * per, f"the full model gathered on the GPU ({per} B/param in the FSDP parameter dtype)",
                  capped=True)


ESTIMATES: dict[str, Estimate] = {
    "gradient_checkpointing": gradient_checkpointing,
    "fused_attention": fused_attention,
    "halve_micro_batch": halve_micro_batch,
    "halve_sequence": halve_sequence,
    "activation_offload": activation_offload,
    "fused_cross_entropy": fused_cross_entropy,
    "logits_16bit": logits_16bit,
    "eval_accumulation": eval_accumulation,
    "eval_logits_argmax": eval_accumulation,
    "zero_stage_1": _zero(1),
    "zero_stage_2": _zero(2),
    "zero_stage_3": _zero(3),
    "fsdp_full_shard": _zero(3),
    "offload_optimizer": offload_optimizer,
    "offload_params": offload_params,
    "lora": lora,
    "qlora": qlora,
    "optim_8bit": optim_8bit,
    "bf16_weights": bf16_weights,
    "no_ref_model": no_ref_model,
    "expandable_segments": expandable_segments,
    "free_other_processes": free_other_processes,
    "save_only_model": save_only_model,
    "no_gather_on_save": no_gather_on_save,
    "sharded_state_dict": no_gather_on_save,
    "gather_to_cpu": gather_to_cpu,
}

# Fixes in one group overlap (both shrink the same memory); a combination takes one per group.
GROUPS = {
    "activations": ("gradient_checkpointing", "fused_attention", "halve_micro_batch", "halve_sequence", "activation_offload"),
    "logits": ("fused_cross_entropy", "logits_16bit", "eval_accumulation", "eval_logits_argmax"),
    "states": ("zero_stage_1", "zero_stage_2", "zero_stage_3", "fsdp_full_shard", "offload_optimizer",
               "offload_params", "lora", "qlora", "optim_8bit", "bf16_weights"),
    "reference": ("no_ref_model",),
    "allocator": ("expandable_segments",),
    "others": ("free_other_processes",),
    "save": ("save_only_model", "no_gather_on_save", "sharded_state_dict", "gather_to_cpu"),
}
GROUP_OF = {name: group for group, names in GROUPS.items() for name in names}


def estimate(name: Optional[str], st: TrainingSetup, gap: Gap) -> Saving:
    fn = ESTIMATES.get(name or "")
    if fn is None:
        return Saving(None, f"no estimate named {name!r} (see docs/memory.md)" if name else "no estimate for this fix")
    return fn(st, gap)


def judge(s: Saving, gap: Gap) -> tuple[str, Optional[int], str]:
    """(verdict, saving where the failure was, explanation)."""
    if s.nbytes is None:
        return "unknown", None, s.basis
    text = f"saves ≈{_fmt(s.nbytes)} ({s.basis})"
    if gap.host and s.where == "gpu":
        return "unknown", s.nbytes, text + "; it saves GPU memory, and this failure is host memory"
    if not gap.host and s.where == "host":
        return "will-not-fit", 0, f"saves ≈{_fmt(s.nbytes)} of host RAM ({s.basis}), not GPU memory"
    if gap.missing is None or gap.missing <= 0:
        why = ("the device reported enough free memory for the request" if gap.missing is not None
               else "the log does not say how much was missing")
        return "unknown", s.nbytes, f"{text}; {why}"
    need = gap.missing + (gap.headroom or 0)
    if s.nbytes < gap.missing:
        return "will-not-fit", s.nbytes, f"{text}, less than the ≥{_fmt(gap.missing)} that was missing"
    capped = s.capped or gap.phase == "model_load"
    if s.nbytes >= need and not capped:
        return "fits", s.nbytes, f"{text} against ≥{_fmt(gap.missing)} missing"
    if s.nbytes >= need and gap.phase == "model_load":
        return "may-fit", s.nbytes, f"{text} against ≥{_fmt(gap.missing)} missing; during loading more weights were still to come"
    if s.nbytes >= need:
        return "may-fit", s.nbytes, f"{text} against ≥{_fmt(gap.missing)} missing; the estimate rests on an assumption"
    return "may-fit", s.nbytes, f"{text}: covers the ≥{_fmt(gap.missing)} missing but leaves little room for the rest of the step"


_ORDER = {"fits": 0, "may-fit": 1, "unknown": 1, "will-not-fit": 2}


def apply_fits(diagnoses: list["Diagnosis"], st: TrainingSetup, gap: Gap) -> Optional[str]:
    """Fill every remediation's ``fit``, re-rank them, and return the combination advice."""
    from .models import Fit

    combination: Optional[str] = None
    for i, diag in enumerate(diagnoses):
        kb_order = {id(r): n for n, r in enumerate(diag.remediations)}
        savings: dict[int, Saving] = {}
        for rem in diag.remediations:
            name = getattr(rem, "saving", None)
            if not name:
                continue
            s = estimate(name, st, gap)
            verdict, nbytes, text = judge(s, gap)
            rem.fit = Fit(saving_bytes=nbytes, verdict=verdict, explanation=text)  # type: ignore[arg-type]
            savings[id(rem)] = s

        def key(r) -> tuple[int, int]:
            if not r.applicable:
                return (3, kb_order[id(r)])
            v = r.fit.verdict if r.fit else "unknown"
            return (_ORDER[v], kb_order[id(r)])

        if gap.missing:
            ordered = sorted(diag.remediations, key=key)
            for new, r in enumerate(ordered):
                old = kb_order[id(r)]
                if r.fit and new < old and r.fit.verdict == "fits":
                    r.fit.explanation = f"{r.fit.explanation}; ranked up: it closes the gap"
                elif r.fit and new > old and r.fit.verdict == "will-not-fit":
                    r.fit.explanation = f"{r.fit.explanation}; ranked down: it cannot close the gap alone"
            diag.remediations = ordered
            for n, r in enumerate(ordered, 1):
                r.rank = n
        if i == 0:
            combination = _combination(diag, savings, gap)
    return combination


def _combination(diag: "Diagnosis", savings: dict[int, Saving], gap: Gap) -> Optional[str]:
    if not gap.missing or gap.missing <= 0 or gap.host:
        return None
    usable = [r for r in diag.remediations if r.applicable and r.fit and r.fit.saving_bytes]
    if not usable or any(r.fit.verdict == "fits" for r in usable):  # type: ignore[union-attr]
        return None
    best: dict[str, object] = {}
    for r in sorted(usable, key=lambda r: -(r.fit.saving_bytes or 0)):  # type: ignore[union-attr]
        group = GROUP_OF.get(getattr(r, "saving", None) or "", r.id)
        best.setdefault(group, r)
    picked, total = [], 0
    need = gap.missing + (gap.headroom or 0)
    for r in sorted(best.values(), key=lambda r: -(r.fit.saving_bytes or 0)):  # type: ignore[attr-defined]
        picked.append(r)
        total += r.fit.saving_bytes or 0  # type: ignore[attr-defined]
        if total >= need:
            break
    if len(picked) < 2:
        return None
    names = " + ".join(r.id for r in picked)  # type: ignore[attr-defined]
    if total >= need:
        return f"no single fix covers the gap; {names} together save ≈{_fmt(total)} against ≥{_fmt(gap.missing)} missing"
    if total >= gap.missing:
        return f"no single fix covers the gap; {names} together save ≈{_fmt(total)}, just over the ≥{_fmt(gap.missing)} missing"
    return (f"even {names} together save only ≈{_fmt(total)} of the ≥{_fmt(gap.missing)} missing: "
            "a larger change (more GPUs, a smaller model or shorter sequences) is needed")
