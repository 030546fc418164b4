"""Which framework the user drives (LLaMA-Factory, axolotl, HF Trainer, plain PyTorch ...)."""
from __future__ import annotations

import regex as re

from ...facts.derived import DEVICE_KINDS
from ...read.patterns import lazy
from ..base import ParseContext
from .collector import CONFIG, Collector
from .forms import WORD_TABLE

# -- framework ------------------------------------------------------------------------

# (framework, needle in the lower-cased raw line, weight). A framework counts with a total
# weight >= 2: one path, logger name or launcher command, or two weaker hints.
_FW_NEEDLES = (
    ("llamafactory", "/llamafactory/", 2), ("llamafactory", "/llmtuner/", 2), ("llamafactory", "llama-factory", 2),
    ("llamafactory", "llamafactory-cli", 2), ("llamafactory", "src/train_bash.py", 2),
    ("llamafactory", "llamafactory.", 2), ("llamafactory", "llmtuner.", 2),
    ("llamafactory", "welcome to llama factory", 2), ("llamafactory", "examples/deepspeed/ds_z", 2),
    # LLaMA-Factory's own argument names and example values: one alone is not enough
    ("llamafactory", "finetuning_type", 1), ("llamafactory", "cutoff_len", 1), ("llamafactory", "lora_target", 1),
    ("llamafactory", "pref_beta", 1), ("llamafactory", "freeze_vision_tower", 1), ("llamafactory", "--template", 1),
    ("llamafactory", "180000000", 1), ("llamafactory", "src/train.py", 1),
    ("axolotl", "/axolotl/", 2), ("axolotl", "axolotl.", 2), ("axolotl", "axolotl train", 2),
    ("xtuner", "/xtuner/", 2), ("xtuner", "xtuner train", 2), ("xtuner", "[xtuner]", 2),
    ("llama-recipes", "llama_recipes", 2), ("llama-recipes", "llama-recipes", 2),
    ("llama-recipes", "llama_cookbook", 2), ("llama-recipes", "llama-cookbook", 2),
    ("llama-recipes", "recipes/finetuning", 2), ("llama-recipes", "recipes/quickstart/finetuning", 2),
    ("llama-recipes", "llama_finetuning.py", 2), ("llama-recipes", "--enable_fsdp", 1),
    ("llama-recipes", "--peft_method", 1), ("llama-recipes", "--batch_size_training", 1),
    ("ms-swift", "/swift/", 2), ("ms-swift", "ms-swift", 2), ("ms-swift", "swift sft", 2),
    ("ms-swift", "swift rlhf", 2), ("ms-swift", "[info:swift]", 2),
    ("unsloth", "/unsloth/", 2), ("unsloth", "unsloth_zoo", 2), ("unsloth", "==((====))==", 2),
    ("unsloth", "unsloth: ", 1),
    ("torchtune", "/torchtune/", 2), ("torchtune", "tune run ", 2),
    ("megatron", "megatron.core", 2), ("megatron", "megatron-lm", 2), ("megatron", "pretrain_gpt", 1),
    # JAX and its libraries: their frames, jaxlib's exceptions, JAX's note on filtered frames
    # ("jaxlib." as a module: a PyTorch issue's environment report says "JaxLib version: not installed")
    ("jax", "/jax/", 2), ("jax", "/flax/", 2), ("jax", "/optax/", 2), ("jax", "jaxlib.", 2),
    ("jax", "jax.errors.", 2), ("jax", "jax_traceback_filtering", 2),
    # jaxlib's own logging, from the XLA it bundles: TensorFlow's tree as an external repository
    # (jaxlib 0.1-0.4.x: "external/org_tensorflow/tensorflow/...", its BFC allocator included) or
    # XLA's own (later releases: "external/xla/xla/..."); torch_xla's bundled XLA carries PyTorch's
    # frames beside it, TensorFlow Serving's build its own paths (choose_framework)
    ("jax", "external/org_tensorflow/", 2), ("jax", "external/xla/xla/", 2),
    ("tensorflow", "tensorflow_serving/", 2),
    # TensorFlow running the step: its allocator and executor logging, its session and eager
    # frames, its error classes (not the banners it prints when merely imported beside PyTorch:
    # "tensorflow/core/util/port.cc ... oneDNN", stream_executor's library loading)
    ("tensorflow", "tensorflow/core/common_runtime/", 2), ("tensorflow", "tensorflow/core/framework/op_kernel", 2),
    ("tensorflow", "tensorflow.python.framework.errors_impl", 2), ("tensorflow", "/tensorflow/python/client/", 2),
    ("tensorflow", "/tensorflow/python/eager/", 2), ("tensorflow", "/tensorflow/python/keras/", 2),
    # TensorFlow 2.15 and later log their XLA and TSL code (the BFC allocator among it) from
    # these external repositories
    ("tensorflow", "external/local_xla/", 2), ("tensorflow", "external/local_tsl/", 2),
    # frameworks outside the list (a conda env merely named "verl" is not verl)
    ("other", "/openrlhf/", 2), ("other", "packages/verl/", 2), ("other", "/verl/trainer/", 2),
    ("other", "/verl/workers/", 2), ("other", "/litgpt/", 2), ("other", "/lit_gpt/", 2),
    ("other", "/pytorch_lightning/", 2), ("other", "/lightning/", 2), ("other", "/colossalai/", 2),
    ("other", "/nemo/", 2), ("other", "autotrain.", 2), ("other", "/fairseq/", 2),
    ("trl", "/trl/", 2), ("trl", "trl.trainer", 2),
    ("hf-trainer", "/transformers/trainer.py", 2), ("hf-trainer", "/transformers/trainer_seq2seq.py", 2),
    ("hf-trainer", "***** running training *****", 2), ("hf-trainer", "trainingarguments(", 2),
    ("hf-trainer", "[info|trainer.py:", 2), ("hf-trainer", "/transformers/training_args.py", 2),
    ("accelerate", "/accelerate/accelerator.py", 2), ("accelerate", "accelerate launch", 2),
    ("accelerate", "distributed environment:", 2),
    ("deepspeed", "/deepspeed/", 2), ("deepspeed", "deepspeed info: version", 2),
    ("deepspeed", "deepspeed.launcher", 2), ("deepspeed", "world info dict", 2),
    ("deepspeed", "torchbackend in deepspeed", 2), ("deepspeed", "deepspeed --", 2),
    ("deepspeed", "deepspeed  --", 2), ("deepspeed", "ds_accelerator", 1), ("deepspeed", ":see_memory_usage]", 2),
    ("fsdp", "/torch/distributed/fsdp/", 2), ("fsdp", "fullyshardeddataparallel", 2),
    ("plain-pytorch", "packages/torch/", 2), ("plain-pytorch", "/torch/", 1), ("plain-pytorch", "outofmemoryerror", 1),
    ("plain-pytorch", "/torch_xla/", 2),
    # TensorRT and ONNX Runtime driven from PyTorch (torch-tensorrt, ORTModule): PyTorch's job
    ("plain-pytorch", "/torch_tensorrt/", 2), ("plain-pytorch", "/ortmodule/", 2),
)
_FW_REGEX = (
    # LLaMA-Factory's own log formats: >= 0.9.1 "[INFO|2025-01-01 12:00:00] x:12 >> " and
    # <= 0.9.0 "06/01/2024 12:00:00 - INFO - llamafactory.model.loader - "
    ("llamafactory", lazy(r"\[[A-Z]+\|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] [\w./-]+:\d+ >> "), 2),
    ("megatron", lazy(r"[/\\][^/\\\s\"']{0,40}megatron[^/\\\s\"']{0,40}[/\\]", re.I), 2),
    ("trl", lazy(r"(?<![\w])(?:DPO|GRPO|KTO|PPO|PPOv2|ORPO|CPO|Reward|SFT|OnlineDPO|RLOO)Trainer\b"), 1),
)
# Outermost first: a LLaMA-Factory run also shows TRL, transformers and DeepSpeed frames,
# an HF Trainer run shows accelerate and DeepSpeed, so the first framework with enough
# evidence in this order is the one the user drives.
FRAMEWORK_ORDER = ("llamafactory", "axolotl", "ms-swift", "xtuner", "llama-recipes", "torchtune",
                   "unsloth", "megatron", "jax", "tensorflow", "other", "trl", "hf-trainer", "accelerate", "deepspeed",
                   "fsdp", "plain-pytorch")


def _trigger(needle: str) -> str:
    """The longest whole word of a needle: a line holding the needle holds this word."""
    words = [w.strip("_") for w in needle.translate(WORD_TABLE).split()]
    return max(words, key=len) if words else ""


# needles grouped by trigger word, so a line is only searched for the needles whose word
# it contains (a set intersection instead of a hundred substring searches)
_BY_TRIGGER: dict[str, list] = {}
for _fw, _needle, _weight in _FW_NEEDLES:
    _BY_TRIGGER.setdefault(_trigger(_needle), []).append((_needle, _fw, _weight))
_ALWAYS = _BY_TRIGGER.pop("", [])
TRIGGERS = frozenset(_BY_TRIGGER)
_SATURATED = 40  # evidence beyond this changes no decision


def framework_evidence(raw_low: str, raw: str, line: int, score: dict, words: set) -> None:
    hits = [_BY_TRIGGER[w] for w in TRIGGERS.intersection(words)]
    for group in hits + [_ALWAYS]:
        for needle, fw, weight in group:
            if needle in raw_low:
                got = score.get(fw)
                if got is None or got[0] < _SATURATED:
                    _score(score, fw, weight, line)
    if "trainer" in raw_low or "megatron" in raw_low or ">> " in raw:
        for fw, rx, weight in _FW_REGEX:
            got = score.get(fw)
            if (got is None or got[0] < _SATURATED) and rx.search(raw):
                _score(score, fw, weight, line)


def _score(score: dict, fw: str, weight: int, line: int) -> None:
    got = score.get(fw)
    score[fw] = (got[0] + weight, got[1]) if got else (weight, line)


# device failures in words that are not PyTorch's (another framework's allocator, a C++ library's
# CUDA check, TensorFlow's host allocator, a CUDA error string printed alone): they say a GPU ran
# out, not which framework ran the step
_NOT_PYTORCH_FORMATS = frozenset({
    "cuda-error-string", "cuda-call", "cuda-driver-host-alloc", "ggml-pinned-host-alloc", "cuda-pinned-invalid-argument", "library-allocator", "tensorrt",
    "jittor-memory-check", "paddle-allocator", "onnxruntime-arena", "nnabla-caching-allocator",
    "mindspore-memory-pool", "cupy-memory-pool", "catboost-memory-pool", "tt-metal-allocator", "opencl-allocation",
    "rmm-memory-pool",
})


def choose_framework(ctx: ParseContext, col: Collector, score: dict) -> None:
    # XLA statuses come from torch_xla and from JAX alike: the frames say which (PyTorch's
    # below; JAX's, or jaxlib's exception, score JAX); alone they name neither, and the
    # fixes are then written for the runtime the error names (kb/classify.py)
    events = [e for e in ctx.facts.oom_events if e.kind in DEVICE_KINDS and e.backend != "TF" and e.kind != "xla"
              and e.message_format not in _NOT_PYTORCH_FORMATS]
    if "tensorflow" in score and score["tensorflow"][0] >= 2 and ctx.lines_with(("tensorflow_serving/",)):
        score.pop("jax", None)   # TensorFlow Serving bundles TensorFlow the way jaxlib does
    if events or any("/torch/" in (fr.file or "") or "/torch_xla/" in (fr.file or "") for fr in ctx.all_frames):
        # a device failure in PyTorch's words (not TensorFlow's, XLA's or another library's), or
        # PyTorch's frames: JAX or TensorFlow installed beside PyTorch is not what ran the step
        score.pop("jax", None)
        score.pop("tensorflow", None)
    if events:
        _score(score, "plain-pytorch", 2, events[0].line)
    if col.get_part("deepspeed_used") or col.env.zero_stage is not None:
        _score(score, "deepspeed", 1, col.env.sources.get("zero_stage", 0))
    for fw in FRAMEWORK_ORDER:
        got = score.get(fw)
        if got and got[0] >= 2:
            col.set("framework", fw, got[1], CONFIG)
            ver = col.parts.get("fwver:" + fw)
            if ver:
                col.set("framework_version", ver[0], ver[1], ver[2])
            return
