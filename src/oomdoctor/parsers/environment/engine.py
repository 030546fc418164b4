"""What the running libraries say they do: DeepSpeed engine lines, the HF Trainer banner,
allocator settings, the training stage (SFT, DPO ...)."""
from __future__ import annotations

from ...read.patterns import lazy
from .collector import CONFIG, EXECUTED, NAME_HINT, RUNTIME, WEAK, Collector, as_int
from .forms import finditer
from .keys import h_distributed_type, h_mixed_precision

# -- DeepSpeed engine, Trainer banner, other runtime lines -----------------------------

_DS_CREATING = lazy(r"Creating (?:(?P<dt>torch\.\w+|fp16|bf16|fp32) )?ZeRO stage (?P<st>\d) optimizer")
# DeepSpeed's zero_to_fp32.py (copied beside every checkpoint) naming the checkpoint it converts:
# "Detected checkpoint of type zero stage 3, world_size: 4"
# (its stage is an enum, printed by name where an interpreter formats it so)
_DS_CHECKPOINT_TYPE = lazy(r"Detected checkpoint of type zero stage (?:(?P<st>\d)\b|ZeroStageEnum\.(?P<name>\w+))")
_ZERO_STAGE_NAMES = {"optimizer_states": 1, "gradients": 2, "weights": 3}
# Only ZeRO-3 runs these (DeepSpeedZeRoOffload is stage 3's parameter manager whether or not
# anything is offloaded; "Creating ZeRO Offload" is stage 3 with no optimizer, e.g. a
# DPO reference model), so they prove stage 3 but say nothing about offload.
_ZERO3_MARKS = ("deepspeedzerooffload initialize", "creating zero offload",
                "parameter offload: total persistent parameters", "stage 3 initialize beginning",
                "zero stage 3 param partitioning", "finished initializing model", "prefetch bucket size",
                "deepspeedzerooptimizer_stage3", "/deepspeed/runtime/zero/stage3.py",
                "/deepspeed/runtime/zero/partition_parameters.py", "/deepspeed/runtime/zero/parameter_offload.py",
                "_zero3_consolidated_16bit_state_dict")
_RUNTIME_MISC = lazy(
    r"CPU Offload: (?P<cpuoff>True|False)|DeepSpeed Basic Optimizer = (?P<opt>\w+)"
    r"|DeepSpeed Final Optimizer = DeepSpeedZeroOptimizer(?P<z12>\b)(?!_)"
    r"|compute dtype: torch\.(?P<cdt>bfloat16|float16|float32)|Mixed precision type: (?P<mpt>\w+)"
    r"|Use FP16 precision: (?P<ufp>True|False)|16-bits training: (?P<b16>True|False)"
    r"|Distributed environment: (?:DistributedType\.)?(?P<dist>[A-Z_]+)"
    r"|(?P<gc>Gradient checkpointing enabled|`use_cache=True` is incompatible with gradient checkpointing)"
    r"|Using (?P<attn>FlashAttention-2|torch SDPA) for faster training"
    r"|(?P<axbf16>bf16 support detected, enabling for this configuration)"
    r"|trainable params: (?P<tp>[\d,]{1,20}) \|\| all params: (?P<ap>[\d,]{1,20})"
    r"|Number of trainable parameters = (?P<ntp>[\d,]{1,20})"
    r"|finished initializing model(?: - num_params = \d+, num_elems =| with) (?P<elems>\d{1,6}\.\d{1,3})B"
    r"|Instantaneous batch size per device = (?P<ibs>[\d,]{1,10})|Gradient Accumulation steps = (?P<gas>\d{1,7})"
    r"|Total train batch size \(w\. parallel, distributed & accumulation\) = (?P<tbs>[\d,]{1,12})"
    r"|batch size has been adjusted to: (?P<dp>\d{1,7})")
_DTYPE = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
_STATE_DICT_LINE = lazy(r"(?:FSDP|fsdp|state_dict_type|StateDictType)[^\n]{0,200}?\b(FULL|SHARDED|LOCAL)_STATE_DICT")
_ALLOC_CONF = lazy(r"(?:PYTORCH_(?:CUDA_|HIP_)?ALLOC_CONF['\"]?\s*(?:=|:|\]\s*=|,)\s*['\"]?|Caching allocator config: )(?P<v>[a-z_]+:[\w.]+(?:,[a-z_]+:[\w.]+){0,8})")
_LF_WORKFLOW = lazy(r"/(?:llamafactory|llmtuner)/train/(?P<st>pt|sft|rm|ppo|dpo|kto)/|\brun_(?P<st2>pt|sft|rm|ppo|dpo|kto)\(")
_TRL_CLASS = lazy(r"(?<![\w])(?P<c>DPO|GRPO|KTO|PPO|PPOv2|ORPO|Reward|SFT|OnlineDPO|RLOO|XPO|NashMD)Trainer\b"
                  r"|/trl/trainer/(?P<f>dpo|grpo|kto|ppo|orpo|reward|sft|online_dpo|rloo)_trainer\.py")
# (online DPO and RLOO generate their own samples, as PPO and GRPO do: stages of their own)
_TRL_STAGE = {"dpo": "dpo", "grpo": "grpo", "kto": "kto", "ppo": "ppo", "ppov2": "ppo", "orpo": "orpo",
              "reward": "rm", "sft": "sft", "onlinedpo": "online_dpo", "online_dpo": "online_dpo", "rloo": "rloo",
              # (XPO and Nash-MD are online DPO's subclasses: they generate too)
              "xpo": "online_dpo", "nashmd": "online_dpo"}


# DeepSpeedCPUAdam only runs on optimizer states kept in host memory (ZeRO-Offload);
# transformers and accelerate pick it when offload_optimizer.device is cpu
_CPU_ADAM = ("loading extension module cpu_adam", "time to load cpu_adam op", "/deepspeed/ops/adam/cpu_adam.py")
_CPU_ADAM_BANNER = lazy(r"Adam Optimizer #\d+ is created with \w+ arithmetic capability")


def deepspeed(col: Collector, text: str, low: str, line: int, raw_low: str) -> None:
    if "cpu_adam" in low or "arithmetic capability" in low:
        if any(n in low for n in _CPU_ADAM) or _CPU_ADAM_BANNER.search(text):
            col.set("offload", "optimizer", line, NAME_HINT - 1)
    # DeepSpeed's logger names the file it logs from: "[stage3.py:1991:step]"
    if "[stage3.py:" in raw_low or "[parameter_offload.py:" in raw_low or "[partition_parameters.py:" in raw_low:
        col.set("zero_stage", 3, line, EXECUTED)
    elif "[stage_1_and_2.py:" in raw_low:
        col.set("zero_stage", 2, line, NAME_HINT - 3)
    if "zero" in low or "deepspeed" in low or "stage" in low or "offload" in low or "finished initializing" in low:
        m = _DS_CREATING.search(text)
        if m:
            col.set("zero_stage", int(m.group("st")), line, RUNTIME)
            dt = m.group("dt") or ""
            if dt.startswith("torch."):  # stage 3 and DeepSpeed < 0.8 always say "fp16"
                col.set("mixed_precision", _DTYPE.get(dt[6:]), line, RUNTIME - 2)
        elif "checkpoint of type zero stage" in low and (m := _DS_CHECKPOINT_TYPE.search(text)):
            stage = int(m.group("st")) if m.group("st") else _ZERO_STAGE_NAMES.get(m.group("name"))
            if stage is not None:
                col.set("zero_stage", stage, line, RUNTIME)
        if any(mark in low for mark in _ZERO3_MARKS):
            col.set("zero_stage", 3, line, EXECUTED)
        elif "/deepspeed/runtime/zero/stage_1_and_2.py" in low:
            col.set("zero_stage", 2, line, NAME_HINT - 3)  # stage 1 or 2; 2 is far more common
        elif "/deepspeed/runtime/zero/stage2.py" in low:  # DeepSpeed <= 0.3 file names
            col.set("zero_stage", 2, line, EXECUTED)
        elif "/deepspeed/runtime/zero/stage1.py" in low:
            col.set("zero_stage", 1, line, EXECUTED)


# a line can only match _RUNTIME_MISC if it holds one of these words
RUNTIME_WORDS = frozenset({"offload", "optimizer", "dtype", "precision", "fp16", "bf16", "training", "environment",
                            "checkpointing", "faster", "trainable", "initializing", "instantaneous",
                            "accumulation", "adjusted"})


# every line runtime_misc() can use holds one of these (lower case): its tests below
NEEDS = tuple(sorted(RUNTIME_WORDS)) + ("state_dict", "alloc_conf", "allocator config", "/torch/distributed/fsdp/",
                                        "fullyshardeddataparallel", "train", "run_")


def runtime_misc(col: Collector, text: str, low: str, line: int, banner: dict, words: set) -> None:
    matches = finditer(_RUNTIME_MISC, text)[:4] if RUNTIME_WORDS.intersection(words) else ()
    for m in matches:
        g = {k: v for k, v in m.groupdict().items() if v is not None}
        if "cpuoff" in g:  # stage 1/2 can only offload the optimizer
            col.set("offload", "optimizer" if g["cpuoff"] == "True" else "none", line, RUNTIME)
        elif "opt" in g:
            col.set("optimizer", g["opt"], line, RUNTIME)
        elif "z12" in g:
            col.set("zero_stage", 2, line, NAME_HINT - 2)
        elif "cdt" in g:
            col.set("mixed_precision", _DTYPE[g["cdt"]], line, RUNTIME)
        elif "mpt" in g:
            h_mixed_precision(col, g["mpt"], line, RUNTIME)
        elif "ufp" in g:
            col.set("mixed_precision", "fp16" if g["ufp"] == "True" else None, line, RUNTIME)
        elif "b16" in g:  # prints training_args.fp16 only; bf16 runs also say False
            col.set("mixed_precision", "fp16" if g["b16"] == "True" else "fp32", line, WEAK + 5)
        elif "dist" in g:
            h_distributed_type(col, g["dist"], line, RUNTIME)
        elif "gc" in g:
            col.set("gradient_checkpointing", True, line, RUNTIME)
        elif "axbf16" in g:  # axolotl resolving "bf16: auto"
            col.set("mixed_precision", "bf16", line, RUNTIME)
        elif "attn" in g:  # LLaMA-Factory says which kernel it picked
            col.set("attn_implementation", "fa2" if g["attn"].startswith("Flash") else "sdpa", line, RUNTIME)
        elif "tp" in g:
            col.set("trainable_params", as_int(g["tp"]), line, RUNTIME)
            col.set("total_params", as_int(g["ap"]), line, RUNTIME)
        elif "ntp" in g:
            col.set("trainable_params", as_int(g["ntp"]), line, RUNTIME - 1)
        elif "elems" in g:
            # zero.Init's num_params counts tensors; num_elems (in billions) is the size
            col.set("total_params", int(float(g["elems"]) * 1e9), line, NAME_HINT)
        elif "ibs" in g:
            col.set("micro_batch_size", as_int(g["ibs"]), line, RUNTIME)
            banner["b"] = as_int(g["ibs"])
        elif "gas" in g:
            col.set("gradient_accumulation_steps", int(g["gas"]), line, RUNTIME)
            banner["g"] = int(g["gas"])
        elif "tbs" in g:
            banner["t"], banner["line"] = as_int(g["tbs"]), line
        elif "dp" in g:
            banner["dp"] = int(g["dp"])
    if "state_dict" in low:
        m = _STATE_DICT_LINE.search(text)
        if m:
            col.set("fsdp_state_dict_type", f"{m.group(1)}_STATE_DICT", line, CONFIG - 2)
    if "alloc_conf" in low or "allocator config" in low:
        if "try setting" not in low and "out of memory" not in low and "to avoid fragmentation" not in low:
            m = _ALLOC_CONF.search(text)
            if m:
                col.set("alloc_conf", m.group("v"), line, CONFIG)
    if "/torch/distributed/fsdp/" in low or "fullyshardeddataparallel" in low:
        col.set("fsdp", True, line, EXECUTED if "/fsdp/" in low else CONFIG)
    if "train" in low or "run_" in low:
        m = _LF_WORKFLOW.search(text)
        if m:
            col.set("stage", m.group("st") or m.group("st2"), line, EXECUTED)
        m = _TRL_CLASS.search(text)
        if m:
            col.set("stage", _TRL_STAGE.get((m.group("c") or m.group("f")).lower()), line,
                    EXECUTED - 5 if m.group("f") else CONFIG - 5)
