"""The formulas: bytes of model states, activations, logits, KV cache — each with its source.

Pure functions of integers; no log reading here. Sources (also in docs/memory.md):

* Model states per parameter — ZeRO paper (Rajbhandari et al. 2020, arXiv 1910.02054):
  mixed-precision Adam holds 2 (16-bit weights) + 2 (16-bit gradients) + 12 (fp32 master
  copy 4 + momentum 4 + variance 4) = 16 bytes per parameter; ZeRO stage 1 partitions the
  12, stage 2 also the gradients, stage 3 also the weights, each over the data-parallel
  world size. HF "model memory anatomy" gives Adam m + v as 8 B/param and bitsandbytes
  8-bit Adam as 2 B/param.
* Activations per transformer layer, 16-bit, no tensor parallelism — Korthikanti et al.
  2022 (arXiv 2205.05198): ``s·b·h·(34 + 5·a·s/h)`` bytes; a fused attention kernel
  removes the ``5·a·s/h`` term (the s×s score matrix); full recomputation keeps only the
  layer input, ``2·s·b·h`` bytes per layer, plus one layer's activations while it is
  recomputed.
* Logits ``b·s·V·bytes``; KV cache ``2·layers·kv_heads·head_dim·bytes`` per token.
* The caching allocator's rounding — PyTorch ``c10/cuda/CUDACachingAllocator.cpp``: sizes
  round up to 512 bytes; requests up to 1 MiB are served from 2 MiB blocks, up to 10 MiB
  from 20 MiB blocks, larger ones are rounded up to a multiple of 2 MiB
  (``kRoundLarge``); the OOM message prints that rounded ``alloc_size`` with
  ``format_size`` (two decimals of the largest binary unit).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

KiB, MiB, GiB = 2**10, 2**20, 2**30

# bytes per element of the dtypes the arithmetic names
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "16-bit": 2, "int8": 1}

# -- the caching allocator --------------------------------------------------------------

K_MIN_BLOCK = 512
K_SMALL_SIZE = 1 * MiB
K_SMALL_BUFFER = 2 * MiB
K_MIN_LARGE_ALLOC = 10 * MiB
K_LARGE_BUFFER = 20 * MiB
K_ROUND_LARGE = 2 * MiB


def allocator_size(nbytes: int) -> int:
    """What PyTorch's CUDA caching allocator asks for, and prints, for a tensor of nbytes."""
    size = max(K_MIN_BLOCK, -(-nbytes // K_MIN_BLOCK) * K_MIN_BLOCK)
    if size <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if size < K_MIN_LARGE_ALLOC:
        return K_LARGE_BUFFER
    return -(-size // K_ROUND_LARGE) * K_ROUND_LARGE


def print_unit(nbytes: int) -> int:
    """The unit PyTorch's ``format_size`` prints a size in (bytes, KiB, MiB or GiB)."""
    if nbytes <= 1024:
        return 1
    if nbytes <= MiB:
        return KiB
    if nbytes <= GiB:
        return MiB
    return GiB


def printed_equal(candidate: int, printed: int) -> bool:
    """True when ``candidate`` bytes would print as the size that was parsed to ``printed``.

    A printed size has two decimals, so the exact value lies within half a hundredth of
    its unit either side (3.91 GiB is anything from 3.905 to 3.915 GiB).
    """
    unit = max(print_unit(printed), print_unit(candidate)) if candidate > 0 else print_unit(printed)
    if unit == 1:
        return candidate == printed
    return abs(candidate - printed) <= unit // 200 + 1


# -- model states -------------------------------------------------------------------------

@dataclass(frozen=True)
class StateBytes:
    """Bytes per parameter of each model-state component, before any sharding."""

    weights: float
    grads: float
    optimizer: float

    @property
    def total(self) -> float:
        return self.weights + self.grads + self.optimizer


def state_bytes(precision: str = "mixed", optimizer: str = "adam") -> StateBytes:
    """Bytes per trained parameter.

    mixed precision + Adam: 2 + 2 + 12 (ZeRO accounting); pure fp32 + Adam: 4 + 4 + 8.
    8-bit Adam keeps m + v in 2 B/param (bitsandbytes), 4-bit in 1; the fp32 master copy
    (4 B/param) stays in mixed precision. SGD without momentum keeps only the master copy.
    """
    states = {"adam": 8, "adam8bit": 2, "adam4bit": 1, "adam_bf16": 4, "sgd": 0}[optimizer]
    if precision == "fp32":
        return StateBytes(4, 4, states)
    if precision == "pure16":
        # 16-bit weights updated in place (no fp32 master), e.g. AnyPrecisionAdamW in bf16
        return StateBytes(2, 2, states)
    return StateBytes(2, 2, 4 + states)


@dataclass(frozen=True)
class ModelStates:
    """Per-GPU bytes of weights, gradients and optimizer states (None: unknown)."""

    weights: Optional[int]
    grads: Optional[int]
    optimizer: Optional[int]

    @property
    def total(self) -> Optional[int]:
        parts = (self.weights, self.grads, self.optimizer)
        return None if any(p is None for p in parts) else sum(parts)  # type: ignore[arg-type]


def shard(nbytes: float, world: int, sharded: bool) -> int:
    return int(nbytes // world) if sharded and world > 1 else int(nbytes)


def full_states(params: int, *, per_param: StateBytes, zero_stage: int = 0, world_size: int = 1,
                offload_optimizer: bool = False, offload_params: bool = False) -> ModelStates:
    """Per-GPU model states of full fine-tuning under ZeRO stage 0-3 (FSDP full shard = 3).

    Stage 1 shards optimizer states, stage 2 also gradients, stage 3 also weights, each
    over ``world_size``. Offloading the optimizer (ZeRO-Offload) moves its states, the
    fp32 master copy and, from stage 2, the gradient partitions to the host; offloading
    parameters (stage 3) moves the weights. This matches DeepSpeed's own estimators
    (``estimate_zero2/3_model_states_mem_needs``: 2 B/param of 16-bit weights left on the
    GPU with optimizer offload, only the largest layer with parameter offload too).
    """
    w = 0 if offload_params else shard(params * per_param.weights, world_size, zero_stage >= 3)
    g = 0 if (offload_optimizer and zero_stage >= 2) else shard(params * per_param.grads, world_size, zero_stage >= 2)
    o = 0 if offload_optimizer else shard(params * per_param.optimizer, world_size, zero_stage >= 1)
    return ModelStates(w, g, o)


def adapter_states(base_params: int, adapter_params: Optional[int], *, base_bytes: float,
                   zero_stage: int = 0, world_size: int = 1) -> ModelStates:
    """LoRA / QLoRA: frozen base weights (2 B/param 16-bit, ~0.5 nf4, 1 int8) plus adapters
    trained in fp32 with Adam (4 weights + 4 gradients + 8 m,v = 16 B/param)."""
    base = shard(base_params * base_bytes, world_size, zero_stage >= 3)
    if adapter_params is None:
        return ModelStates(base, None, None)
    w = base + shard(adapter_params * 4, world_size, zero_stage >= 3)
    return ModelStates(w, shard(adapter_params * 4, world_size, zero_stage >= 2),
                       shard(adapter_params * 8, world_size, zero_stage >= 1))


# -- activations, logits, KV cache --------------------------------------------------------

def layer_activations(s: int, b: int, h: int, a: int, *, fused_attention: bool) -> int:
    """Korthikanti et al. 2022: s·b·h·(34 + 5·a·s/h) bytes for one 16-bit layer."""
    return s * b * h * 34 + (0 if fused_attention else 5 * a * s * s * b)


def attention_scores(s: int, b: int, a: int) -> int:
    """The ``5·a·s²·b`` part: the s×s attention scores, softmax and dropout of one layer."""
    return 5 * a * s * s * b


def layer_checkpoint(s: int, b: int, h: int) -> int:
    """Full recomputation keeps only each layer's 16-bit input: 2·s·b·h bytes."""
    return 2 * s * b * h


@dataclass(frozen=True)
class Activations:
    total: int
    checkpoints: int     # the kept layer inputs (0 without checkpointing)
    live_layer: int      # one layer's full activations (while it runs or is recomputed)


def activations(s: int, b: int, h: int, a: int, layers: int, *, checkpointing: bool,
                fused_attention: bool, scale: int = 1) -> Activations:
    """Activations of the decoder stack; ``scale`` 2 for fp32 activations.

    With checkpointing every layer's input is kept; the layer being recomputed holds its
    full activations, of which its own input is part (not counted twice).
    """
    one = layer_activations(s, b, h, a, fused_attention=fused_attention) * scale
    if not checkpointing:
        return Activations(total=one * layers, checkpoints=0, live_layer=one)
    kept = layer_checkpoint(s, b, h) * layers * scale
    return Activations(total=kept + one - layer_checkpoint(s, b, h) * scale, checkpoints=kept, live_layer=one)


def logits_bytes(b: int, s: int, vocab: int, dtype_bytes: int = 4) -> int:
    """b·s·V·bytes: one logits tensor (fp32 after the loss's upcast)."""
    return b * s * vocab * dtype_bytes


def kv_cache_per_token(layers: int, kv_heads: int, head_dim: int, dtype_bytes: int = 2) -> int:
    """2 (k and v) · layers · kv_heads · head_dim · bytes."""
    return 2 * layers * kv_heads * head_dim * dtype_bytes


def latent_kv_cache_per_token(layers: int, kv_lora_rank: int, rope_dim: int, dtype_bytes: int = 2) -> int:
    """Multi-head latent attention (DeepSeek-V2) caches one compressed vector per layer."""
    return layers * (kv_lora_rank + rope_dim) * dtype_bytes


def gathered_16bit_model(params: int) -> int:
    """A full 16-bit state dict gathered for a save (ZeRO-3 consolidation): 2 B/param."""
    return 2 * params
