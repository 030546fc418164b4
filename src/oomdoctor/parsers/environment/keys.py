"""Framework arguments: the configuration keys oomdoctor knows, each with a validating handler.

``KEYS`` maps a key as LLaMA-Factory, axolotl, xtuner, HF ``TrainingArguments``, TRL,
accelerate, DeepSpeed or Megatron print it onto an ``Environment`` field; ``apply`` sets it.
"""
from __future__ import annotations

from typing import Callable

import regex as re

from ...read.patterns import lazy
from .collector import (
    CONFIG,
    FALSE,
    IDENT,
    LAUNCH,
    PATHLIKE,
    RUNTIME,
    TRUE,
    Collector,
    as_bool,
    as_int,
    clean_value,
    ds_config_name,
)

# -- key handlers -------------------------------------------------------------------

# the training stages the environment family names (env.stage): a config's stage / rl / rlhf_type,
# LLaMA-Factory's workflow, a TRL trainer's class or file
TRAINING_STAGES = {"pt", "sft", "rm", "ppo", "dpo", "kto", "orpo", "simpo", "grpo", "ipo", "cpo", "rloo", "online_dpo"}
_ATTN = {"flash_attention_2": "fa2", "flash_attention_3": "fa3", "fa2": "fa2", "fa3": "fa3",
         "sdpa": "sdpa", "eager": "eager", "disabled": "disabled", "off": "disabled",
         "auto": "auto", "xformers": "xformers", "flex_attention": "flex"}
_SHARD_WORDS = lazy(r"full_shard|shard_grad_op|hybrid_shard|no_shard|FULL_SHARD|SHARD_GRAD_OP|HYBRID_SHARD")
# FSDP's sharding strategy by name ("SHARD_GRAD_OP", "ShardingStrategy._HYBRID_SHARD_ZERO2", the
# option words of transformers' fsdp="shard_grad_op auto_wrap") or by the number accelerate's
# config writes (torch's ShardingStrategy enum: 1 FULL_SHARD ... 5 _HYBRID_SHARD_ZERO2)
_STRATEGY = lazy(r"(?i)(?<![a-z])_?(full_shard|shard_grad_op|hybrid_shard_zero2|hybrid_shard|no_shard)(?![a-z\d])")
_STRATEGY_NUMBERS = {"1": "FULL_SHARD", "2": "SHARD_GRAD_OP", "3": "NO_SHARD", "4": "HYBRID_SHARD",
                     "5": "HYBRID_SHARD_ZERO2"}
_STATE_DICT = lazy(r"(FULL|SHARDED|LOCAL)_STATE_DICT", re.I)

Handler = Callable[[Collector, str, int, int], None]


def _h_int(field: str, lo: int = 0, hi: int = 10**13, offset: int = 0) -> Handler:
    def h(col: Collector, v: str, line: int, prio: int) -> None:
        n = as_int(v)
        if n is not None and lo <= n <= hi:
            col.set(field, n, line, prio + offset)
    return h


def h_bool(field: str, invert: bool = False) -> Handler:
    def h(col: Collector, v: str, line: int, prio: int) -> None:
        b = as_bool(v)
        if b is not None:
            col.set(field, (not b) if invert else b, line, prio)
    return h


def _h_model(offset: int = 0, need_slash: bool = False) -> Handler:
    def h(col: Collector, v: str, line: int, prio: int) -> None:
        v = clean_value(v)
        if need_slash and "/" not in v:
            return  # "model: loaded" is a message; "model: org/name" is a setting
        if PATHLIKE.match(v) and v.lower() not in TRUE | FALSE and any(c.isalpha() for c in v):
            col.set("model_name", v, line, prio + offset)
    return h


def _h_finetuning(col: Collector, v: str, line: int, prio: int) -> None:
    s = clean_value(v).lower()
    if s in ("full", "lora", "freeze", "qlora", "oft", "dora", "lora+", "longlora", "adalora"):
        col.set("finetuning_type", "lora" if s in ("dora", "lora+", "longlora", "adalora") else s, line, prio)


def _h_use_peft(col: Collector, v: str, line: int, prio: int) -> None:
    if as_bool(v):
        col.set("finetuning_type", "lora", line, prio - 2)


def _h_peft_method(col: Collector, v: str, line: int, prio: int) -> None:
    if clean_value(v).lower() in ("lora", "qlora"):
        col.set("finetuning_type", clean_value(v).lower(), line, prio - 1)


def _h_quant(col: Collector, v: str, line: int, prio: int) -> None:
    s = clean_value(v).lower().replace("bit", "").replace("int", "")
    n = as_int(s)
    if n in (2, 3, 4, 8):
        col.set("quantization_bit", n, line, prio)
    elif as_bool(v) is True:  # llama-recipes <= 0.0.3: bare --quantization means 8-bit
        col.set("quantization_bit", 8, line, prio - 2)


def _h_load_in(bits: int) -> Handler:
    def h(col: Collector, v: str, line: int, prio: int) -> None:
        if as_bool(v):
            col.set("quantization_bit", bits, line, prio)
    return h


def _h_stage(col: Collector, v: str, line: int, prio: int) -> None:
    s = clean_value(v).lower()
    if s in TRAINING_STAGES:
        col.set("stage", s, line, prio)


def _h_pref_loss(col: Collector, v: str, line: int, prio: int) -> None:
    s = clean_value(v).lower()
    if s in ("orpo", "simpo", "sigmoid", "hinge", "ipo", "kto_pair"):
        col.part("pref_loss", s, line, prio)


def _h_precision_flag(kind: str) -> Handler:
    def h(col: Collector, v: str, line: int, prio: int) -> None:
        b = as_bool(v)
        if b is not None:
            col.part(kind, b, line, prio)
    return h


def h_mixed_precision(col: Collector, v: str, line: int, prio: int) -> None:
    s = clean_value(v).lower()
    mp = {"bf16": "bf16", "fp16": "fp16", "no": "fp32", "fp32": "fp32", "fp8": "fp8",
          "bf16-mixed": "bf16", "16-mixed": "fp16", "32": "fp32", "bf16-true": "bf16",
          "32-true": "fp32", "bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}.get(s)
    col.set("mixed_precision", mp, line, prio)


def h_attn(col: Collector, v: str, line: int, prio: int) -> None:
    s = clean_value(v).lower()
    if s in _ATTN:
        col.set("attn_implementation", _ATTN[s], line, prio)
    elif as_bool(s) is not None:  # LLaMA-Factory <= 0.7 had a boolean flash_attn
        col.set("attn_implementation", "fa2" if as_bool(s) else "disabled", line, prio - 1)


def _h_attn_flag(name: str) -> Handler:
    def h(col: Collector, v: str, line: int, prio: int) -> None:
        if as_bool(v):
            col.set("attn_implementation", name, line, prio)
    return h


def h_optimizer(col: Collector, v: str, line: int, prio: int) -> None:
    s = clean_value(v)
    if "." in s and s.split(".")[0] == "OptimizerNames":  # TrainingArguments repr
        s = s.split(".", 1)[1].lower()
    if IDENT.match(s) and s.lower() not in ("none", "null", "auto"):
        col.set("optimizer", s, line, prio)


def _h_gc_granularity(col: Collector, v: str, line: int, prio: int) -> None:
    if clean_value(v).lower() in ("full", "selective"):
        col.set("gradient_checkpointing", True, line, prio)


def _sharding_strategy(value: str, numbers: bool = True) -> str | None:
    m = _STRATEGY.search(value)
    return m.group(1).upper() if m else (_STRATEGY_NUMBERS.get(value.strip()) if numbers else None)


def _h_fsdp(col: Collector, v: str, line: int, prio: int) -> None:
    s = clean_value(v)
    if _SHARD_WORDS.search(s):
        col.set("fsdp", True, line, prio)
        strategy = _sharding_strategy(s)
        if strategy:
            col.set("fsdp_sharding_strategy", strategy, line, prio)
    elif s in ("[]", "''", '""') or as_bool(s) is False:
        col.set("fsdp", False, line, LAUNCH - 5)
    elif as_bool(s) is True:
        col.set("fsdp", True, line, prio)


def _h_fsdp_key(col: Collector, v: str, line: int, prio: int) -> None:
    if clean_value(v):
        col.set("fsdp", True, line, prio - 2)


def _h_strategy(fsdp_key: bool) -> Handler:
    """An FSDP sharding strategy's key. ``fsdp_sharding_strategy`` is FSDP's whatever its value
    (accelerate writes the strategy's number); a bare ``sharding_strategy`` only when its value
    names an FSDP strategy (other frameworks have keys of that name)."""
    def h(col: Collector, v: str, line: int, prio: int) -> None:
        s = clean_value(v)
        strategy = _sharding_strategy(s, numbers=fsdp_key)
        if strategy or (fsdp_key and s):
            col.set("fsdp", True, line, prio - 2)
        if strategy:
            col.set("fsdp_sharding_strategy", strategy, line, prio)
    return h


def _h_reshard_after_forward(col: Collector, v: str, line: int, prio: int) -> None:
    """FSDP2's fsdp_reshard_after_forward: false keeps the unsharded parameters from the
    forward to the backward, as FSDP1's SHARD_GRAD_OP does; true frees them (FULL_SHARD)."""
    b = as_bool(v)
    if b is not None:
        col.set("fsdp", True, line, prio - 2)
        col.set("fsdp_sharding_strategy", "FULL_SHARD" if b else "SHARD_GRAD_OP", line, prio - 1)


def _h_state_dict(col: Collector, v: str, line: int, prio: int) -> None:
    m = _STATE_DICT.search(v)
    if m:
        col.set("fsdp_state_dict_type", f"{m.group(1).upper()}_STATE_DICT", line, prio)


def h_distributed_type(col: Collector, v: str, line: int, prio: int) -> None:
    s = clean_value(v).upper().replace("DISTRIBUTEDTYPE.", "")
    if s == "FSDP":
        col.set("fsdp", True, line, prio)
    elif s == "DEEPSPEED":
        col.part("deepspeed_used", True, line, prio)


def _h_offload_part(which: str) -> Handler:
    def h(col: Collector, v: str, line: int, prio: int) -> None:
        s = clean_value(v).lower()
        if s in ("cpu", "nvme", "none"):
            col.part(which, s, line, prio)
    return h


def _h_adam_offload(col: Collector, v: str, line: int, prio: int) -> None:
    """OpenRLHF's ``--adam_offload``: DeepSpeed's optimizer states in host memory."""
    flag = as_bool(v)
    if flag is not None:
        col.part("offload_optimizer", "cpu" if flag else "none", line, prio)


def _h_alloc_conf(col: Collector, v: str, line: int, prio: int) -> None:
    s = clean_value(v)
    if ALLOC_CONF_VALUE.match(s):
        col.set("alloc_conf", s, line, prio)


ALLOC_CONF_VALUE = lazy(r"^[a-z_]+:[\w.]+(?:,[a-z_]+:[\w.]+){0,8}$")


def _h_world(field: str, offset: int = 0) -> Handler:
    def h(col: Collector, v: str, line: int, prio: int) -> None:
        n = as_int(v)
        if n is not None and 1 <= n <= 1_000_000:
            col.set(field, n, line, prio + offset)
    return h


def _h_launcher(name: str) -> Handler:
    def h(col: Collector, v: str, line: int, prio: int) -> None:
        n = as_int(v)
        if n is not None and 1 <= n <= 100_000:
            col.part(name, n, line, prio)
    return h


def _h_ds(col: Collector, v: str, line: int, prio: int) -> None:
    ds_config_name(col, v, line)


def h_zero_stage(col: Collector, v: str, line: int, prio: int) -> None:
    n = as_int(v)
    if n is not None and 0 <= n <= 3:
        col.set("zero_stage", n, line, prio)


# Canonical key (lower case, '-' -> '_') -> handler. Sequence-length keys carry offsets:
# the training framework's own truncation length (cutoff_len, sequence_len,
# max_seq_length, seq_length) beats max_length (also a generation setting), which beats
# model_max_length / context_length (often the model's full context, not what is used).
KEYS: dict[str, Handler] = {
    "model_name_or_path": _h_model(), "base_model": _h_model(), "model_name": _h_model(-1),
    "pretrained_model_name_or_path": _h_model(), "model_id": _h_model(-2, True), "model": _h_model(-3, True),
    "finetuning_type": _h_finetuning, "adapter": _h_finetuning, "train_type": _h_finetuning,
    "sft_type": _h_finetuning, "use_peft": _h_use_peft, "peft_method": _h_peft_method,
    "quantization_bit": _h_quant, "quant_bits": _h_quant, "quantization": _h_quant,
    "load_in_4bit": _h_load_in(4), "load_in_8bit": _h_load_in(8),
    "cutoff_len": _h_int("sequence_length", 1, 10**8), "sequence_len": _h_int("sequence_length", 1, 10**8),
    "max_seq_length": _h_int("sequence_length", 1, 10**8), "seq_length": _h_int("sequence_length", 1, 10**8),
    "max_seq_len": _h_int("sequence_length", 1, 10**8),
    "max_length": _h_int("sequence_length", 1, 10**8, -2),
    "model_max_length": _h_int("sequence_length", 1, 10**8, -4),
    "context_length": _h_int("sequence_length", 1, 10**8, -4),
    "per_device_train_batch_size": _h_int("micro_batch_size", 1, 10**6),
    "micro_batch_size": _h_int("micro_batch_size", 1, 10**6),
    "batch_size_training": _h_int("micro_batch_size", 1, 10**6),
    "train_micro_batch_size_per_gpu": _h_int("micro_batch_size", 1, 10**6),
    "gradient_accumulation_steps": _h_int("gradient_accumulation_steps", 1, 10**6),
    "gradient_checkpointing": h_bool("gradient_checkpointing"),
    "disable_gradient_checkpointing": h_bool("gradient_checkpointing", invert=True),
    "use_activation_checkpointing": h_bool("gradient_checkpointing"),
    "fsdp_activation_checkpointing": h_bool("gradient_checkpointing"),
    "activation_checkpointing": h_bool("gradient_checkpointing"),
    "enable_activation_checkpointing": h_bool("gradient_checkpointing"),
    "recompute_granularity": _h_gc_granularity, "recompute_activations": h_bool("gradient_checkpointing"),
    "bf16": _h_precision_flag("bf16"), "fp16": _h_precision_flag("fp16"),
    "pure_bf16": _h_precision_flag("bf16"), "mixed_precision": h_mixed_precision,
    "precision": h_mixed_precision,
    "flash_attn": h_attn, "attn_implementation": h_attn, "_attn_implementation": h_attn,
    "flash_attention": _h_attn_flag("fa2"), "use_flash_attn": _h_attn_flag("fa2"),
    "use_flash_attention": _h_attn_flag("fa2"), "use_flash_attention_2": _h_attn_flag("fa2"),
    "sdp_attention": _h_attn_flag("sdpa"), "xformers_attention": _h_attn_flag("xformers"),
    "optim": h_optimizer, "optimizer": h_optimizer,
    "save_only_model": h_bool("save_only_model"),
    "enable_liger_kernel": h_bool("liger_kernel"), "use_liger_kernel": h_bool("liger_kernel"),
    "liger_kernel": h_bool("liger_kernel"),
    "dataloader_num_workers": _h_int("dataloader_num_workers", 0, 4096),
    "stage": _h_stage, "rl": _h_stage, "rlhf_type": _h_stage, "pref_loss": _h_pref_loss,
    "deepspeed": _h_ds, "deepspeed_config_file": _h_ds, "deepspeed_config": _h_ds, "ds_config": _h_ds,
    "zero_stage": h_zero_stage,
    "offload_optimizer_device": _h_offload_part("offload_optimizer"),
    "offload_param_device": _h_offload_part("offload_param"),
    "adam_offload": _h_adam_offload,
    "zero3_save_16bit_model": h_bool("gather_16bit_weights_on_save"),
    "stage3_gather_16bit_weights_on_model_save": h_bool("gather_16bit_weights_on_save"),
    "fsdp": _h_fsdp, "enable_fsdp": h_bool("fsdp"), "distributed_type": h_distributed_type,
    "fsdp_sharding_strategy": _h_strategy(True), "sharding_strategy": _h_strategy(False),
    "fsdp_reshard_after_forward": _h_reshard_after_forward, "fsdp_offload_params": _h_fsdp_key,
    "fsdp_auto_wrap_policy": _h_fsdp_key,
    "fsdp_state_dict_type": _h_state_dict, "state_dict_type": _h_state_dict, "checkpoint_type": _h_state_dict,
    "world_size": _h_world("world_size"), "dist_world_size": _h_world("world_size", RUNTIME - CONFIG),
    "num_processes": _h_world("world_size", LAUNCH - CONFIG),
    "num_machines": _h_world("num_nodes", LAUNCH - CONFIG),
    "nproc_per_node": _h_launcher("nproc_per_node"), "nnodes": _h_launcher("nnodes"),
    "num_gpus": _h_launcher("num_gpus"), "num_nodes": _h_launcher("num_nodes"),
    "max_nodes": _h_launcher("nnodes"),  # torchrun's "Starting elastic_operator with launch configs"
    "hidden_size": _h_int("hidden_size", 1, 10**7), "n_embd": _h_int("hidden_size", 1, 10**7),
    "num_hidden_layers": _h_int("num_layers", 1, 10**5), "num_layers": _h_int("num_layers", 1, 10**5),
    "n_layer": _h_int("num_layers", 1, 10**5),
    "num_attention_heads": _h_int("num_attention_heads", 1, 10**5), "n_head": _h_int("num_attention_heads", 1, 10**5),
    "num_key_value_heads": _h_int("num_kv_heads", 1, 10**5),
    "intermediate_size": _h_int("intermediate_size", 1, 10**8), "ffn_hidden_size": _h_int("intermediate_size", 1, 10**8),
    "vocab_size": _h_int("vocab_size", 1, 10**8), "padded_vocab_size": _h_int("vocab_size", 1, 10**8, -1),
    "pytorch_cuda_alloc_conf": _h_alloc_conf, "pytorch_hip_alloc_conf": _h_alloc_conf,
    "pytorch_alloc_conf": _h_alloc_conf,
}
# Boolean keys may appear as bare CLI flags (``--bf16``, ``--enable_fsdp``).
FLAG_KEYS = {k for k, h in KEYS.items() if k in {
    "bf16", "fp16", "pure_bf16", "gradient_checkpointing", "disable_gradient_checkpointing",
    "save_only_model", "enable_liger_kernel", "use_liger_kernel", "enable_fsdp", "use_peft",
    "load_in_4bit", "load_in_8bit", "quantization", "flash_attention", "use_flash_attn",
    "use_activation_checkpointing", "fsdp_activation_checkpointing", "recompute_activations",
    "sdp_attention", "xformers_attention", "adam_offload"}}
# Keys that only make sense in a model-config echo (JSON, Megatron args), never in YAML
# or a ``key=value`` repr of something else.
SHAPE_KEYS = {"hidden_size", "n_embd", "num_hidden_layers", "num_layers", "n_layer",
              "num_attention_heads", "n_head", "num_key_value_heads", "intermediate_size",
              "ffn_hidden_size", "vocab_size", "padded_vocab_size"}


def apply(col: Collector, key: str, value: str, line: int, prio: int) -> None:
    key = key.lower().replace("-", "_")
    h = KEYS.get(key)
    if h is not None:
        h(col, value, line, prio)
