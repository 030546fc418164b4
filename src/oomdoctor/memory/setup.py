"""What the log says about the training setup, in the terms the formulas need.

Every figure is taken from the log's facts (or the model table, through the model name);
whatever the log does not say stays ``None`` and is listed in ``unknown``. The few
defaults the arithmetic does apply (Adam when no optimizer is named, 16-bit activations
when no precision is named) are listed in ``assumptions`` so a report can name them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from ..facts.models import Environment, Facts, OomEvent
from .shapes import ResolvedShape, resolve_shape
from . import formulas as F

# DPO-style trainers run chosen and rejected sequences as one concatenated batch
# (TRL/LF concatenated_forward; LF's pairwise reward-model trainer does the same).
PAIRED_STAGES = {"dpo", "orpo", "simpo", "ipo", "cpo", "rm"}
FUSED_ATTENTION = ("flash", "fa2", "fa3", "sdpa", "sdp", "xformers", "mem_efficient", "flex")
UNFUSED_ATTENTION = ("eager", "disabled", "off", "none", "math")
# Gradient checkpointing when the log does not say (reference: activation-memory section).
CHECKPOINTING_DEFAULT = {
    "llamafactory": (True, "LLaMA-Factory checkpoints every layer by default (disable_gradient_checkpointing: false)"),
    "xtuner": (True, "xtuner checkpoints by default (use_activation_checkpointing=True)"),
    "axolotl": (False, "axolotl's default is gradient_checkpointing: false"),
    "hf-trainer": (False, "transformers' default is gradient_checkpointing=False"),
}
# FSDP's sharding strategies (as the environment parser names them) as the ZeRO stage they match
FSDP_STAGE = {"FULL_SHARD": 3, "HYBRID_SHARD": 3, "HYBRID_SHARD_ZERO2": 2, "SHARD_GRAD_OP": 2, "NO_SHARD": 0}


@dataclass
class TrainingSetup:
    shape: ResolvedShape
    params: Optional[int] = None
    trainable: Optional[int] = None
    peft: Optional[str] = None              # "lora" | "qlora" | None (full or unknown)
    base_bytes: float = 2.0                 # frozen base weights per param under PEFT
    precision: str = "mixed"                # "mixed" | "fp32" | "pure16"
    optimizer: str = "adam"
    zero_stage: Optional[int] = None        # 0-3; FSDP mapped onto it
    sharding: Optional[str] = None          # "ZeRO-3", "FSDP full shard", ...
    world: Optional[int] = None
    offload_optimizer: bool = False
    offload_params: bool = False
    micro_batch: Optional[int] = None
    seq_len: Optional[int] = None
    paired: bool = False
    checkpointing: Optional[bool] = None
    checkpointing_default: bool = False     # taken from the framework's default, not the log
    fused_attention: Optional[bool] = None
    fused_loss: bool = False
    capacity: Optional[int] = None
    assumptions: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)

    # -- convenience --------------------------------------------------------------------
    def dim(self, name: str) -> Optional[int]:
        return self.shape.get(name)

    @property
    def batch(self) -> Optional[int]:
        """Sequences per forward: the micro-batch, doubled for chosen + rejected pairs."""
        if self.micro_batch is None:
            return None
        return self.micro_batch * (2 if self.paired else 1)

    @property
    def act_scale(self) -> int:
        return 2 if self.precision == "fp32" else 1

    @property
    def shards(self) -> int:
        return self.world if self.world and self.world > 1 else 1


def _optimizer(name: Optional[str], setup: TrainingSetup) -> str:
    if not name:
        setup.assumptions.append("optimizer not named in the log: Adam/AdamW assumed (8 B/param of m + v)")
        return "adam"
    n = name.lower()
    if "8bit" in n or "8_bit" in n or "int8" in n:
        return "adam8bit"
    if "4bit" in n:
        return "adam4bit"
    if "anyprecision" in n:
        return "adam_bf16"
    if "sgd" in n and "momentum" not in n:
        return "sgd"
    if "adam" not in n:
        setup.assumptions.append(f"optimizer {name!r} counted as Adam (8 B/param of m + v); factored or low-rank optimizers keep less")
    return "adam"


def _attention(impl: Optional[str]) -> Optional[bool]:
    if not impl:
        return None
    low = impl.lower()
    if any(k in low for k in FUSED_ATTENTION):
        return True
    if any(k in low for k in UNFUSED_ATTENTION):
        return False
    return None


def _positive(value: Optional[int]) -> Optional[int]:
    """A count from the log, or None when it is missing or not a usable count."""
    return value if isinstance(value, int) and value > 0 else None


def read_setup(facts: Facts, event: Optional[OomEvent] = None) -> TrainingSetup:
    env: Environment = facts.environment
    shape = resolve_shape(env)
    st = TrainingSetup(shape=shape)
    if shape.table_entry is not None:
        st.assumptions.append(f"figures the log does not print come from {shape.table_entry.name}'s "
                              "config.json (the model name maps to it; see model_source)")
    st.params = shape.get("params")
    st.trainable = _positive(env.trainable_params)
    ft = (env.finetuning_type or "").lower()
    qbits = env.quantization_bit
    if st.params is None and st.trainable and ft not in ("lora", "qlora", "freeze") and qbits not in (4, 8):
        # "Number of trainable parameters = N" with no adapters in sight: full fine-tuning
        st.params = st.trainable
        st.assumptions.append("parameter count taken from the trainable count (no adapters or frozen layers in the log)")
    if st.params is None:
        st.unknown.append("parameter count")
    if ft in ("lora", "qlora") or qbits in (4, 8):
        st.peft = "qlora" if (ft == "qlora" or qbits in (4, 8)) else "lora"
    elif not ft and st.trainable and st.params and st.trainable < 0.1 * st.params:
        st.peft = "lora"
        st.assumptions.append("trainable parameters are under 10% of the total: counted as adapter (PEFT) training")
    if st.peft:
        st.base_bytes = {4: 0.5, 8: 1.0}.get(qbits or 0, 2.0)
        if st.trainable is None:
            st.unknown.append("adapter (trainable) parameter count")
    elif ft == "freeze" and st.trainable:
        st.peft = "lora"  # frozen layers behave like a frozen base with trainable extras
    mp = (env.mixed_precision or "").lower()
    if mp in ("fp32", "no", "none"):
        st.precision = "fp32"
    elif not mp:
        st.assumptions.append("precision not in the log: 16-bit mixed precision assumed")
    st.optimizer = _optimizer(env.optimizer, st)

    st.world = _positive(env.world_size)
    if env.fsdp:
        strategy = env.fsdp_sharding_strategy or ""
        stage = FSDP_STAGE.get(strategy)
        if stage is None:
            stage, strategy = 3, "FULL_SHARD"
            st.assumptions.append("FSDP sharding strategy not in the log: FULL_SHARD assumed (like ZeRO-3)")
        st.zero_stage = stage
        st.sharding = f"FSDP ({strategy})"
        # FSDP shards fp32 flat parameters: the same 16 B/param as ZeRO's accounting
    elif env.zero_stage in (0, 1, 2, 3):
        st.zero_stage = env.zero_stage
        st.sharding = f"ZeRO-{env.zero_stage}" if env.zero_stage else None
    else:
        # DDP (or one GPU): every GPU holds all states, whatever the world size
        st.zero_stage = 0
        if (st.world or 0) != 1:
            st.assumptions.append("no ZeRO or FSDP setting in the log: every GPU holds all model states")
    if st.zero_stage and st.world is None:
        st.unknown.append("world size (number of GPUs sharing the states)")
    st.offload_optimizer = env.offload in ("optimizer", "both")
    st.offload_params = env.offload in ("param", "both")

    st.micro_batch = _positive(env.micro_batch_size)
    st.seq_len = _positive(env.sequence_length)
    if st.micro_batch is None:
        st.unknown.append("micro-batch size")
    if st.seq_len is None:
        st.unknown.append("sequence length")
    else:
        st.assumptions.append(f"every sequence padded to the maximum length {st.seq_len} (shorter batches need less)")
    st.paired = (env.stage or "").lower() in PAIRED_STAGES
    if st.paired:
        st.assumptions.append(f"stage {env.stage}: chosen and rejected run as one batch of 2 × micro-batch")
    st.checkpointing = env.gradient_checkpointing
    if st.checkpointing is None and env.framework in CHECKPOINTING_DEFAULT:
        st.checkpointing, why = CHECKPOINTING_DEFAULT[env.framework]
        st.checkpointing_default = True
        st.assumptions.append(f"gradient checkpointing not in the log: {why}")
    st.fused_attention = _attention(env.attn_implementation)
    st.fused_loss = bool(env.liger_kernel) and not st.paired
    st.capacity = (event.total_capacity_bytes if event is not None else None) or env.gpu_capacity_bytes
    return st


# -- estimates from a setup ---------------------------------------------------------------

def model_states(st: TrainingSetup, **override) -> Optional[F.ModelStates]:
    """Per-GPU model states of a setup; keyword overrides describe a changed setup."""
    params = st.params
    if params is None:
        return None
    stage = override.get("zero_stage", st.zero_stage)
    world = override.get("world", st.world)
    if stage is None or (stage > 0 and not world):
        return None
    world = world or 1
    peft = override.get("peft", st.peft)
    offload_opt = override.get("offload_optimizer", st.offload_optimizer)
    offload_par = override.get("offload_params", st.offload_params)
    if peft:
        base_bytes = override.get("base_bytes", st.base_bytes if st.peft else 2.0)
        adapters = st.trainable if st.peft else override.get("adapters")
        states = F.adapter_states(params - (adapters or 0), adapters, base_bytes=base_bytes,
                                  zero_stage=stage, world_size=world)
        if offload_opt and states.optimizer is not None:
            states = F.ModelStates(states.weights, states.grads, 0)
        return states
    per = F.state_bytes(st.precision, override.get("optimizer", st.optimizer))
    return F.full_states(params, per_param=per, zero_stage=stage, world_size=world,
                         offload_optimizer=offload_opt, offload_params=offload_par)


def activation_estimate(st: TrainingSetup, *, checkpointing: Optional[bool] = None,
                        fused: Optional[bool] = None, batch: Optional[int] = None,
                        seq: Optional[int] = None) -> Optional[F.Activations]:
    h, a, layers = st.dim("hidden_size"), st.dim("num_attention_heads"), st.dim("num_layers")
    b = batch if batch is not None else st.batch
    s = seq if seq is not None else st.seq_len
    if not all((h, a, layers, b, s)):
        return None
    ckpt = st.checkpointing if checkpointing is None else checkpointing
    fa = st.fused_attention if fused is None else fused
    if fa is None:
        fa = True  # transformers' default (SDPA) since 4.36; named in the section's basis
    return F.activations(s, b, h, a, layers, checkpointing=bool(ckpt), fused_attention=bool(fa),  # type: ignore[arg-type]
                         scale=st.act_scale)


def logits_estimate(st: TrainingSetup, dtype_bytes: int = 4, *, batch: Optional[int] = None,
                    seq: Optional[int] = None) -> Optional[int]:
    b = batch if batch is not None else st.batch
    s = seq if seq is not None else st.seq_len
    v = st.dim("vocab_size")
    if not (b and s and v):
        return None
    return F.logits_bytes(b, s, v, dtype_bytes)
