"""Configuration echoed into a log: YAML, CLI flags, ``key=value`` reprs, dotted dumps, JSON.

Training jobs print their configuration in many shapes: LLaMA-Factory and axolotl YAML
(``cutoff_len: 4096``), launcher command lines (``--deepspeed ds_z3_config.json``, also as
Python lists ``'--nproc_per_node', '8'``), ``TrainingArguments(...)`` reprs
(``per_device_train_batch_size=1,``), DeepSpeed's and Megatron's dotted dumps
(``  zero_optimization_stage ...... 3``) and JSON (DeepSpeed's ``json = {`` that continues
over following lines without a log prefix, HF ``Model config LlamaConfig {``).
This module turns all of them into (key, value) pairs and maps the keys it knows onto
``Environment`` fields through :class:`Collector`, which keeps the most authoritative value.

A key only counts where it looks like configuration: traceback code lines are skipped
(``world_size=8`` in code is not a setting), ``stage`` is a ZeRO stage only inside a
``zero_optimization`` object, values are validated per key.
"""
from __future__ import annotations

from typing import Callable, Optional

import regex as re

from ..facts import Environment

# How much a source is trusted; a later value replaces an earlier one only when its
# priority is strictly higher, so among equals the first one printed wins.
RUNTIME = 40      # the running library describes what it does (DeepSpeed config dump, collect_env)
EXECUTED = 35     # code that ran says it (frames in deepspeed/runtime/zero/stage3.py)
CONFIG = 30       # the user's configuration echoed (YAML, CLI, JSON, reprs)
LAUNCH = 20       # launcher arguments, wheel names: intent rather than observation
NAME_HINT = 15    # a config file's name (ds_z3_offload_config.json)
WEAK = 5          # inferred from unrelated text (site-packages path, NCCL ring)


# counts and sizes that are meaningless at zero ("num_local_procs=0" in a cut line)
_POSITIVE = {"world_size", "num_nodes", "gpu_count", "micro_batch_size", "gradient_accumulation_steps",
             "sequence_length", "hidden_size", "num_layers", "num_attention_heads", "num_kv_heads",
             "intermediate_size", "vocab_size", "gpu_capacity_bytes", "trainable_params", "total_params"}


class Collector:
    """Sets ``Environment`` fields with their source line, keeping the best-ranked value."""

    def __init__(self, env: Environment):
        self.env = env
        self.prio: dict[str, int] = {}
        # facts assembled from several keys at the end (see environment.finish)
        self.parts: dict[str, tuple[object, int, int]] = {}

    def set(self, field: str, value, line: int, prio: int) -> bool:
        if value is None or value == "" or (field in _POSITIVE and not (isinstance(value, int) and value >= 1)):
            return False
        old = self.prio.get(field)
        if old is not None and prio <= old:
            return False
        setattr(self.env, field, value)
        self.env.sources[field] = line
        self.prio[field] = prio
        return True

    def part(self, name: str, value, line: int, prio: int) -> None:
        """Remember one ingredient of a derived fact (first of the best priority wins)."""
        old = self.parts.get(name)
        if value is None or (old is not None and prio <= old[2]):
            return
        self.parts[name] = (value, line, prio)

    def get_part(self, name: str):
        got = self.parts.get(name)
        return got[0] if got else None


# -- value parsers ----------------------------------------------------------------

_TRUE = {"true", "yes", "on", "1", "y"}
_FALSE = {"false", "no", "off", "0", "n", "none", "null"}


def as_bool(v: str) -> Optional[bool]:
    s = v.strip().strip("'\"").lower()
    if s in _TRUE:
        return True
    if s in _FALSE:
        return False
    return None


def as_int(v: str) -> Optional[int]:
    s = v.strip().strip("'\"").replace(",", "").replace("_", "")
    if s.isdigit() and len(s) < 19:
        return int(s)
    return None


_IDENT = re.compile(r"^[A-Za-z][\w.:-]{0,80}$")
_PATHLIKE = re.compile(r"^[\w~./@:+-]{1,300}$")


def clean_value(v: str) -> str:
    """Strip a YAML comment, trailing commas and quotes from an echoed value."""
    v = v.strip()
    if " #" in v:
        v = v.split(" #", 1)[0].strip()
    v = v.rstrip(",").strip()
    if len(v) >= 2 and v[0] == v[-1] and v[0] in "'\"":
        v = v[1:-1]
    return v


def zero_stage_from_name(name: str, allow_stage_word: bool) -> Optional[int]:
    """ZeRO stage from a config or script file name: ds_z3_config.json, zero2_offload."""
    base = name.replace("\\", "/").rsplit("/", 1)[-1].lower()
    m = _ZNAME.search(base)
    if m:
        return int(m.group(1))
    if allow_stage_word:
        m = _STAGE_NAME.search(base)
        if m:
            return int(m.group(1))
    return None


_ZNAME = re.compile(r"(?:^|[^a-z0-9])(?:ds_?)?z(?:ero)?[_-]?(?:stage[_-]?)?([0-3])(?![0-9])")
_ZNAME_GLUED = re.compile(r"zero[_-]?([0-3])(?![0-9])")
_STAGE_NAME = re.compile(r"(?:^|[^a-z0-9])stage[_-]?([0-3])(?![0-9])")


def ds_config_name(col: Collector, value: str, line: int) -> None:
    """A DeepSpeed config given by name: ds_z3_offload_config.json, deepspeed_zero3_offload.

    LLaMA-Factory's ds_z3_offload_config.json and xtuner's deepspeed_zero3_offload offload
    both optimizer and parameters; a stage-2 file can only offload the optimizer.
    """
    v = clean_value(value)
    if not v or not _PATHLIKE.match(v) or v.lower() in _TRUE | _FALSE:
        return
    col.part("deepspeed_used", True, line, NAME_HINT)
    base = v.replace("\\", "/").rsplit("/", 1)[-1].lower()
    stage = zero_stage_from_name(base, allow_stage_word=True)
    if stage is None:
        m = _ZNAME_GLUED.search(base)
        stage = int(m.group(1)) if m else None
    if stage is not None:
        col.set("zero_stage", stage, line, NAME_HINT)
    if "offload" in base:
        has_opt, has_par = "opt" in base, "param" in base
        if has_opt and not has_par:
            off = "optimizer"
        elif has_par and not has_opt:
            off = "param"
        elif stage == 3:
            off = "both"
        elif stage in (1, 2):
            off = "optimizer"
        else:
            off = None
        col.set("offload", off, line, NAME_HINT)
    elif stage is not None:
        col.set("offload", "none", line, NAME_HINT - 1)


# -- key handlers -------------------------------------------------------------------

TRAINING_STAGES = {"pt", "sft", "rm", "ppo", "dpo", "kto", "orpo", "simpo", "grpo", "ipo", "cpo"}
_ATTN = {"flash_attention_2": "fa2", "flash_attention_3": "fa3", "fa2": "fa2", "fa3": "fa3",
         "sdpa": "sdpa", "eager": "eager", "disabled": "disabled", "off": "disabled",
         "auto": "auto", "xformers": "xformers", "flex_attention": "flex"}
_SHARD_WORDS = re.compile(r"full_shard|shard_grad_op|hybrid_shard|no_shard|FULL_SHARD|SHARD_GRAD_OP|HYBRID_SHARD")
_STATE_DICT = re.compile(r"(FULL|SHARDED|LOCAL)_STATE_DICT", re.I)

Handler = Callable[[Collector, str, int, int], None]


def _h_int(field: str, lo: int = 0, hi: int = 10**13, offset: int = 0) -> Handler:
    def h(col: Collector, v: str, line: int, prio: int) -> None:
        n = as_int(v)
        if n is not None and lo <= n <= hi:
            col.set(field, n, line, prio + offset)
    return h


def _h_bool(field: str, invert: bool = False) -> Handler:
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
        if _PATHLIKE.match(v) and v.lower() not in _TRUE | _FALSE and any(c.isalpha() for c in v):
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


def _h_mixed_precision(col: Collector, v: str, line: int, prio: int) -> None:
    s = clean_value(v).lower()
    mp = {"bf16": "bf16", "fp16": "fp16", "no": "fp32", "fp32": "fp32", "fp8": "fp8",
          "bf16-mixed": "bf16", "16-mixed": "fp16", "32": "fp32", "bf16-true": "bf16",
          "32-true": "fp32", "bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}.get(s)
    col.set("mixed_precision", mp, line, prio)


def _h_attn(col: Collector, v: str, line: int, prio: int) -> None:
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


def _h_optimizer(col: Collector, v: str, line: int, prio: int) -> None:
    s = clean_value(v)
    if "." in s and s.split(".")[0] == "OptimizerNames":  # TrainingArguments repr
        s = s.split(".", 1)[1].lower()
    if _IDENT.match(s) and s.lower() not in ("none", "null", "auto"):
        col.set("optimizer", s, line, prio)


def _h_gc_granularity(col: Collector, v: str, line: int, prio: int) -> None:
    if clean_value(v).lower() in ("full", "selective"):
        col.set("gradient_checkpointing", True, line, prio)


def _h_fsdp(col: Collector, v: str, line: int, prio: int) -> None:
    s = clean_value(v)
    if _SHARD_WORDS.search(s):
        col.set("fsdp", True, line, prio)
    elif s in ("[]", "''", '""') or as_bool(s) is False:
        col.set("fsdp", False, line, LAUNCH - 5)
    elif as_bool(s) is True:
        col.set("fsdp", True, line, prio)


def _h_fsdp_key(col: Collector, v: str, line: int, prio: int) -> None:
    if clean_value(v):
        col.set("fsdp", True, line, prio - 2)


def _h_state_dict(col: Collector, v: str, line: int, prio: int) -> None:
    m = _STATE_DICT.search(v)
    if m:
        col.set("fsdp_state_dict_type", f"{m.group(1).upper()}_STATE_DICT", line, prio)


def _h_distributed_type(col: Collector, v: str, line: int, prio: int) -> None:
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


def _h_alloc_conf(col: Collector, v: str, line: int, prio: int) -> None:
    s = clean_value(v)
    if ALLOC_CONF_VALUE.match(s):
        col.set("alloc_conf", s, line, prio)


ALLOC_CONF_VALUE = re.compile(r"^[a-z_]+:[\w.]+(?:,[a-z_]+:[\w.]+){0,8}$")


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


def _h_zero_stage(col: Collector, v: str, line: int, prio: int) -> None:
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
    "gradient_checkpointing": _h_bool("gradient_checkpointing"),
    "disable_gradient_checkpointing": _h_bool("gradient_checkpointing", invert=True),
    "use_activation_checkpointing": _h_bool("gradient_checkpointing"),
    "fsdp_activation_checkpointing": _h_bool("gradient_checkpointing"),
    "activation_checkpointing": _h_bool("gradient_checkpointing"),
    "enable_activation_checkpointing": _h_bool("gradient_checkpointing"),
    "recompute_granularity": _h_gc_granularity, "recompute_activations": _h_bool("gradient_checkpointing"),
    "bf16": _h_precision_flag("bf16"), "fp16": _h_precision_flag("fp16"),
    "pure_bf16": _h_precision_flag("bf16"), "mixed_precision": _h_mixed_precision,
    "precision": _h_mixed_precision,
    "flash_attn": _h_attn, "attn_implementation": _h_attn, "_attn_implementation": _h_attn,
    "flash_attention": _h_attn_flag("fa2"), "use_flash_attn": _h_attn_flag("fa2"),
    "use_flash_attention": _h_attn_flag("fa2"), "use_flash_attention_2": _h_attn_flag("fa2"),
    "sdp_attention": _h_attn_flag("sdpa"), "xformers_attention": _h_attn_flag("xformers"),
    "optim": _h_optimizer, "optimizer": _h_optimizer,
    "save_only_model": _h_bool("save_only_model"),
    "enable_liger_kernel": _h_bool("liger_kernel"), "use_liger_kernel": _h_bool("liger_kernel"),
    "liger_kernel": _h_bool("liger_kernel"),
    "dataloader_num_workers": _h_int("dataloader_num_workers", 0, 4096),
    "stage": _h_stage, "rl": _h_stage, "rlhf_type": _h_stage, "pref_loss": _h_pref_loss,
    "deepspeed": _h_ds, "deepspeed_config_file": _h_ds, "deepspeed_config": _h_ds, "ds_config": _h_ds,
    "zero_stage": _h_zero_stage,
    "offload_optimizer_device": _h_offload_part("offload_optimizer"),
    "offload_param_device": _h_offload_part("offload_param"),
    "zero3_save_16bit_model": _h_bool("gather_16bit_weights_on_save"),
    "stage3_gather_16bit_weights_on_model_save": _h_bool("gather_16bit_weights_on_save"),
    "fsdp": _h_fsdp, "enable_fsdp": _h_bool("fsdp"), "distributed_type": _h_distributed_type,
    "fsdp_sharding_strategy": _h_fsdp_key, "fsdp_offload_params": _h_fsdp_key,
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
    "sdp_attention", "xformers_attention"}}
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


# -- line forms -----------------------------------------------------------------------

_YAML = re.compile(r"^\s{0,8}(?:-\s+)?`?(?P<k>[A-Za-z_][\w.-]{0,60})`?\s*:\s+(?P<v>\S[^\n]{0,400}?)\s*$")
_CLI = re.compile(
    r"(?:^|[\s'\"\[,(])--(?P<k>[A-Za-z][\w.-]{0,60})"
    r"(?:=(?P<v1>\"[^\"]{0,400}\"|'[^']{0,400}'|[^\s'\",\]]{1,400})"
    r"|(?:['\"]?,\s*['\"]|\s+)(?P<v2>(?!-)[^\s'\",\]\\]{1,400})"
    r"|\s+(?P<v3>\"[^\"\n]{0,400}\"|'[^'\n]{0,400}'))?")
_REPR = re.compile(r"(?<![\w.\-])(?P<k>[A-Za-z_][A-Za-z0-9_]{1,60})=(?P<v>\[[^\]]{0,400}\]|[^,\s)]{1,400})")
# DeepSpeed config dump / Megatron arguments / ds_report: "  name ........ value"; DeepSpeed
# prints names of 29+ characters without dots, only two spaces.
_DOTTED = re.compile(r"^\s{0,4}(?P<k>[A-Za-z][\w .()/-]{0,50}?) \.{2,} (?P<v>\S[^\n]{0,2000})$")
_DOTLESS = re.compile(r"^\s{1,4}(?P<k>[a-z][a-z0-9_]{28,60})\s{2,}(?P<v>\S[^\n]{0,2000})$")


def scan_yaml(col: Collector, text: str, line: int) -> None:
    m = _YAML.match(text)
    if not m:
        return
    key = m.group("k").lower().replace("-", "_")
    if key in SHAPE_KEYS or key not in KEYS:
        return
    value = clean_value(m.group("v"))
    # "Process rank: 0, device: cuda:0" style lines are messages, not YAML
    if ", " in value and ": " in value:
        return
    apply(col, key, value, line, CONFIG)


_WORD_TABLE = str.maketrans({c: " " for c in map(chr, range(128)) if not (c.isalnum() or c == "_")})
KEY_WORDS = frozenset(KEYS)


def words_of(low: str) -> set:
    """The ``[a-z0-9_]`` words of a lower-cased line, for cheap "does it mention X" tests."""
    return set(low.translate(_WORD_TABLE).split())


def may_hold_setting(text: str, words: set) -> bool:
    """Could a YAML / repr / CLI scan find a known key here? (CLI flags may be hyphenated.)"""
    return not KEY_WORDS.isdisjoint(words) or "--" in text


def scan_cli(col: Collector, text: str, line: int) -> None:
    if "--" not in text:
        return
    for m in finditer(_CLI, text):
        # llama-recipes nests dataclass fields: --fsdp_config.pure_bf16, --fsdp_config.checkpoint_type
        key = m.group("k").lower().replace("-", "_").rsplit(".", 1)[-1]
        if key not in KEYS:
            continue
        v = m.group("v1") or m.group("v2") or m.group("v3")
        if key in FLAG_KEYS and (v is None or as_bool(v) is None):
            if key != "quantization" or v is None:
                v = "true"
        if v is None:
            if key == "deepspeed":
                col.part("deepspeed_used", True, line, LAUNCH)
            continue
        apply(col, key, v, line, CONFIG)


def scan_repr(col: Collector, text: str, line: int) -> None:
    if "=" not in text:
        return
    found = [(m.group("k"), m.group("v")) for m in finditer(_REPR, text)]
    # one "key=value," per line (HF TrainingArguments repr) or several on one line
    if not found or (len(found) < 2 and not text.rstrip().endswith(",")):
        return
    for k, v in found:
        key = k.lower()
        if key in SHAPE_KEYS or key not in KEYS:
            continue
        apply(col, key, v, line, CONFIG)


_DUMP_KEYS = {"zero_config", "zero_optimization_stage", "bfloat16_enabled", "fp16_enabled", "bfloat16_config",
              "optimizer_name", "zero_enabled"}


def scan_dotted(col: Collector, text: str, line: int, on_row: Callable[[str, str], bool]) -> bool:
    """A dump row ("  name ...... value"); True when the row was one this parser knows."""
    # _DOTTED needs " .." and _DOTLESS an indented line: most lines are neither
    m = (_DOTTED.match(text) if " .." in text else None) or \
        (_DOTLESS.match(text) if text[:1].isspace() else None)
    if not m:
        return False
    key, value = m.group("k").strip(), m.group("v").strip()
    k = key.lower()
    if on_row(key, value):
        return True
    if k not in _DUMP_KEYS and (k not in KEYS or " " in k):
        return False
    if k == "zero_config":
        zero_config_repr(col, value, line)
    elif k == "zero_optimization_stage":
        _h_zero_stage(col, value, line, RUNTIME)
    elif k in ("bfloat16_enabled", "bf16") and as_bool(value):
        col.set("mixed_precision", "bf16", line, RUNTIME)
    elif k in ("fp16_enabled", "fp16") and as_bool(value):
        col.set("mixed_precision", "fp16", line, RUNTIME)
    elif k == "bfloat16_config" and "enabled=True" in value:
        col.set("mixed_precision", "bf16", line, RUNTIME)
    elif k == "optimizer_name":
        _h_optimizer(col, value, line, RUNTIME)
    elif k == "zero_enabled" and as_bool(value) is False:
        col.set("zero_stage", 0, line, RUNTIME - 1)
    elif k in KEYS and " " not in k:
        apply(col, k, value, line, RUNTIME)
    return True


_ZC_STAGE = re.compile(r"(?:^|\s)stage=(\d)\b")
_ZC_OFFLOAD = re.compile(r"offload_(?P<which>param|optimizer)=(?:None\b|\w*\(device=(?:<\w+\.(?P<e>\w+)[^>]{0,40}>|'(?P<q>\w+)'))")
_ZC_PIN = re.compile(r"offload_(?:param|optimizer)=\w*\([^)]{0,400}?pin_memory=(True|False)")
_ZC_GATHER = re.compile(r"gather_16bit_weights_on_model_save=(True|False)")


def zero_config_repr(col: Collector, value: str, line: int) -> None:
    """DeepSpeed's pydantic ``zero_config`` repr: stage=3 ... offload_param=...(device='cpu')."""
    m = _ZC_STAGE.search(value)
    if m:
        _h_zero_stage(col, m.group(1), line, RUNTIME)
    devices = {}
    for m in _ZC_OFFLOAD.finditer(value):
        devices[m.group("which")] = (m.group("e") or m.group("q") or "none").lower()
    if devices:
        col.set("offload", offload_of(devices.get("optimizer"), devices.get("param")), line, RUNTIME)
    m = _ZC_PIN.search(value)
    if m:
        col.set("pin_memory", m.group(1) == "True", line, RUNTIME)
    m = _ZC_GATHER.search(value)
    if m:
        col.set("gather_16bit_weights_on_save", m.group(1) == "True", line, RUNTIME)


def offload_of(optimizer: Optional[str], param: Optional[str]) -> str:
    opt = optimizer in ("cpu", "nvme")
    par = param in ("cpu", "nvme")
    return "both" if opt and par else "optimizer" if opt else "param" if par else "none"


def finditer(pattern, text: str):
    try:
        return list(pattern.finditer(text, timeout=0.5))
    except TimeoutError:
        return []


# -- JSON / dict blocks -----------------------------------------------------------

_TOKEN = re.compile(
    r"\s*(?:(?P<s>\"(?:[^\"\\\n]|\\.){0,500}\"|'(?:[^'\\\n]|\\.){0,500}')|(?P<p>[{}\[\]:,])|(?P<a>[^\s{}\[\]:,\"']{1,300}))")
_JSONISH = re.compile(r"^\s*(?:[\"'}\]{\[]|-?\d|true|false|null|True|False|None)")
_ACCELERATE_DS_KEYS = {"zero_stage", "offload_optimizer_device", "offload_param_device",
                       "gradient_accumulation_steps", "zero3_save_16bit_model", "deepspeed_config_file"}
_SHAPE_PARENTS = {"", "text_config", "llm_config", "language_config", "text_model", "thinker_config"}


_INTERESTING = re.compile(r"zero_optimization|deepspeed_config|hidden_size|num_hidden_layers|vocab_size|"
                          r"\"optimizer\"|'optimizer'|bf16|fp16|train_micro_batch|gradient_accumulation")


class BlockTracker:
    """Follows nested ``{``/``[`` over JSON and Python-dict lines, with the key path.

    A block starts on a line that opens more than it closes (``json = {``,
    ``"zero_optimization": {``, ``Model config LlamaConfig {``) and is followed while
    lines look like JSON; a few unrelated lines in between (another rank's output) are
    skipped, more than ``MAX_GAP`` in a row end the block.
    """

    MAX_GAP = 6
    MAX_LINES = 3000
    MAX_TOKENS_PER_LINE = 1000    # a one-line DeepSpeed config has a few hundred
    TOKEN_BUDGET = 300_000        # per log: hostile input cannot make this quadratic

    def __init__(self, col: Collector):
        self.col = col
        self.stack: list[str] = []
        self.gap = 0
        self.length = 0
        self.zero: dict[str, object] = {}
        self.zero_line = 0
        self.budget = self.TOKEN_BUDGET

    def feed(self, text: str, line: int) -> None:
        if len(text) > 20000:
            text = text[:20000]
        if self.stack:
            if not _JSONISH.match(text):
                self.gap += 1
                if self.gap > self.MAX_GAP:
                    self._reset()
                return
            self.gap = 0
            self.length += 1
            if self.length > self.MAX_LINES:
                self._reset()
                return
            self._tokens(text, line)
        elif "{" in text:
            stripped = text.rstrip()
            opens = stripped.endswith(("{", "["))
            if not opens and not _INTERESTING.search(text):
                return  # a one-line dict without keys of interest ({'loss': ...})
            self._tokens(text, line)
            if self.stack and not opens and not stripped.endswith(","):
                self._reset()  # an unbalanced brace inside a message, not a block
            self.length = 0

    def _reset(self) -> None:
        self.stack = []
        self.gap = 0
        self.zero = {}

    def _tokens(self, text: str, line: int) -> None:
        if self.budget <= 0:
            return
        toks = []
        try:
            for m in _TOKEN.finditer(text, timeout=0.5):
                if m.lastgroup:
                    toks.append((m.lastgroup, m.group(m.lastgroup)))
                    if len(toks) >= self.MAX_TOKENS_PER_LINE:
                        break
        except TimeoutError:
            return
        self.budget -= len(toks)
        i, n = 0, len(toks)
        while i < n:
            kind, val = toks[i]
            if kind in ("s", "a") and i + 1 < n and toks[i + 1] == ("p", ":"):
                key = _unquote(val) if kind == "s" else val
                i += 2
                if i < n and toks[i] in (("p", "{"), ("p", "[")):
                    self._open(key, line)
                    i += 1
                elif i < n and toks[i][0] in ("s", "a"):
                    self._value(key, _unquote(toks[i][1]) if toks[i][0] == "s" else toks[i][1], line)
                    i += 1
                continue
            if kind == "p" and val in "{[":
                self._open("", line)
            elif kind == "p" and val in "}]":
                self._close(line)
            i += 1

    def _open(self, key: str, line: int) -> None:
        if len(self.stack) < 64:
            self.stack.append(key)
            if key == "zero_optimization":
                self.zero, self.zero_line = {}, line

    def _close(self, line: int) -> None:
        if not self.stack:
            return
        key = self.stack.pop()
        if key == "zero_optimization":
            self._finish_zero()

    def _finish_zero(self) -> None:
        z, line = self.zero, self.zero_line
        if "offload_optimizer" in z or "offload_param" in z or "stage" in z:
            self.col.set("offload", offload_of(z.get("offload_optimizer"), z.get("offload_param")),
                         z.get("offload_line", line), CONFIG)
        self.zero = {}

    def _value(self, key: str, value: str, line: int) -> None:
        parent = self.stack[-1] if self.stack else ""
        col = self.col
        if parent == "zero_optimization" or "zero_optimization" in self.stack[-2:-1]:
            self._zero_value(parent, key, value, line)
            return
        if parent in ("bf16", "bfloat16", "fp16") and key == "enabled" and as_bool(value):
            col.part("bf16" if parent != "fp16" else "fp16", True, line, CONFIG + 1)
        elif parent == "deepspeed_config" and key.lower() in _ACCELERATE_DS_KEYS:
            apply(col, key, value, line, CONFIG)  # accelerate's deepspeed_config dict
        elif parent == "optimizer" and key == "type":
            _h_optimizer(col, value, line, CONFIG)
        elif parent in _SHAPE_PARENTS:
            k = key.lower()
            if k in SHAPE_KEYS:
                apply(col, k, value, line, CONFIG)
            elif k in ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps"):
                apply(col, k, value, line, CONFIG)
            elif k in ("_attn_implementation", "attn_implementation"):
                _h_attn(col, value, line, CONFIG - 2)
            elif k == "transformers_version":
                col.part("transformers_version_json", value, line, CONFIG)

    def _zero_value(self, parent: str, key: str, value: str, line: int) -> None:
        col = self.col
        if parent == "zero_optimization":
            if key == "stage":
                n = as_int(value)
                if n is not None and 0 <= n <= 3:
                    col.set("zero_stage", n, line, CONFIG + 2)
                    self.zero["stage"] = n
            elif key in ("stage3_gather_16bit_weights_on_model_save", "stage3_gather_fp16_weights_on_model_save"):
                _h_bool("gather_16bit_weights_on_save")(col, value, line, CONFIG)
            elif key == "cpu_offload" and as_bool(value):  # DeepSpeed <= 0.5 stage 1/2
                self.zero["offload_optimizer"] = "cpu"
                self.zero["offload_line"] = line
            elif key == "cpu_offload_params" and as_bool(value):
                self.zero["offload_param"] = "cpu"
        elif parent in ("offload_optimizer", "offload_param"):
            if key == "device":
                self.zero[parent] = value.lower()
                if value.lower() in ("cpu", "nvme"):
                    self.zero["offload_line"] = line
            elif key == "pin_memory":
                _h_bool("pin_memory")(col, value, line, CONFIG)


def _unquote(s: str) -> str:
    return s[1:-1] if len(s) >= 2 and s[0] in "'\"" else s
