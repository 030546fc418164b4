"""The frameworks fixes are written for: the stacks a knob can be written for (one table,
read by the knowledge loader, the incident docs and the report), the aliases users type,
and which knobs each framework reads first. Imported by the CLI at start-up: nothing heavy
here."""
from __future__ import annotations

import difflib
from typing import NamedTuple, Optional


class Stack(NamedTuple):
    name: str                    # the stack's own name, in the incident docs
    config: str                  # what the report calls the place its knob goes
    fence: Optional[str] = None  # the language of the code fence its knob is shown in


# The keys a remediation's knobs may use, in the order the docs list them. Adding a stack
# is adding a row; a knowledge file that uses a key not here fails to load, with the list.
STACKS: dict[str, Stack] = {
    "llamafactory": Stack("LLaMA-Factory", "LLaMA-Factory YAML"),
    "axolotl": Stack("axolotl", "axolotl YAML"),
    "xtuner": Stack("xtuner", "xtuner config", "python"),
    "hf": Stack("transformers", "TrainingArguments"),
    "trl": Stack("TRL", "TRL config"),
    "deepspeed": Stack("DeepSpeed JSON", "DeepSpeed JSON", "json"),
    "accelerate": Stack("accelerate", "accelerate config"),
    "fsdp": Stack("FSDP (transformers fsdp_config)", "FSDP"),
    "llama-cookbook": Stack("llama-cookbook", "llama-cookbook"),
    "megatron": Stack("Megatron", "Megatron", "bash"),
    "ms-swift": Stack("ms-swift", "ms-swift"),
    "unsloth": Stack("Unsloth", "unsloth"),
    "torchtune": Stack("torchtune", "torchtune"),
    "env": Stack("environment", "environment", "bash"),
    "code": Stack("code", "Python", "python"),
    "shell": Stack("shell", "shell", "bash"),
    "slurm": Stack("Slurm", "Slurm", "bash"),
    "kubernetes": Stack("Kubernetes", "Kubernetes"),
    "jax": Stack("JAX / Flax", "JAX / Flax", "python"),
    "tensorflow": Stack("TensorFlow / Keras", "TensorFlow / Keras", "python"),
}
FRAMEWORK_KEYS = tuple(STACKS)

# Which knob to show first, by detected framework; the rest follow in this order.
PREFERENCE = {
    "llamafactory": ("llamafactory", "deepspeed", "hf", "env", "code", "shell", "slurm"),
    "axolotl": ("axolotl", "deepspeed", "hf", "env", "code", "shell", "slurm"),
    "xtuner": ("xtuner", "deepspeed", "env", "code", "shell", "slurm"),
    "hf-trainer": ("hf", "deepspeed", "accelerate", "fsdp", "env", "code", "shell", "slurm"),
    "trl": ("trl", "hf", "deepspeed", "accelerate", "fsdp", "env", "code", "shell", "slurm"),
    "accelerate": ("accelerate", "fsdp", "deepspeed", "hf", "env", "code", "shell", "slurm"),
    "fsdp": ("fsdp", "accelerate", "hf", "env", "code", "shell", "slurm"),
    "deepspeed": ("deepspeed", "env", "code", "hf", "shell", "slurm"),
    "llama-recipes": ("llama-cookbook", "fsdp", "env", "code", "shell", "slurm"),
    "megatron": ("megatron", "env", "code", "shell", "slurm"),
    "ms-swift": ("ms-swift", "hf", "deepspeed", "env", "code", "shell", "slurm"),
    "unsloth": ("unsloth", "hf", "trl", "env", "code", "shell"),
    "torchtune": ("torchtune", "env", "code", "shell"),
    "plain-pytorch": ("code", "env", "fsdp", "deepspeed", "shell", "slurm"),
    # JAX and Flax: their own knobs first; PyTorch's code and settings do not apply
    "jax": ("jax", "shell", "slurm", "kubernetes"),
    "tensorflow": ("tensorflow", "shell", "slurm", "kubernetes"),
}
# Frameworks whose users cannot apply the other stacks' settings (PyTorch's code, its
# allocator's environment, DeepSpeed's JSON): a fix with no knob of theirs does not apply.
OWN_KNOBS_ONLY = frozenset({"jax", "tensorflow"})
# Failures reported by another framework's or runtime's allocator (its message format, as the
# parsers name it): where the log names no framework and no PyTorch version, its users cannot
# apply PyTorch's code or settings, nor those of the libraries built on PyTorch (their shell,
# Slurm and Kubernetes lines set PyTorch's variables too). CUDA's own error strings are anyone's:
# not here.
OTHER_RUNTIME_FORMATS = {
    "paddle-allocator": "PaddlePaddle", "mindspore-memory-pool": "MindSpore", "jittor-memory-check": "Jittor",
    "nnabla-caching-allocator": "nnabla", "cupy-memory-pool": "CuPy", "catboost-memory-pool": "CatBoost",
    "onnxruntime-arena": "ONNX Runtime", "tensorrt": "TensorRT", "tt-metal-allocator": "tt-metal",
    "opencl-allocation": "an OpenCL runtime",
    "rmm-memory-pool": "RAPIDS (RMM)",
}
# how the reason of a fix withheld for the stack begins (the report tells those from the others)
STACK_REFUSAL = "no setting of it for "
DEFAULT_PREFERENCE = ("env", "hf", "deepspeed", "accelerate", "fsdp", "code", "shell", "slurm", "kubernetes")

# Names a user may pass to --framework, mapped to the detector's names.
FRAMEWORK_ALIASES = {
    "lf": "llamafactory", "llama-factory": "llamafactory", "llamafactory": "llamafactory",
    "ax": "axolotl", "axolotl": "axolotl", "xtuner": "xtuner", "xt": "xtuner",
    "hf": "hf-trainer", "transformers": "hf-trainer", "hf-trainer": "hf-trainer",
    "trl": "trl", "accelerate": "accelerate", "fsdp": "fsdp", "deepspeed": "deepspeed", "ds": "deepspeed",
    "llama-recipes": "llama-recipes", "llama-cookbook": "llama-recipes", "lc": "llama-recipes",
    "megatron": "megatron", "ms-swift": "ms-swift", "swift": "ms-swift", "unsloth": "unsloth",
    "torchtune": "torchtune", "pytorch": "plain-pytorch", "plain-pytorch": "plain-pytorch",
    "jax": "jax", "flax": "jax", "tensorflow": "tensorflow", "tf": "tensorflow", "keras": "tensorflow",
}


def _key(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch.isalnum())


_BY_KEY = {_key(alias): fw for alias, fw in FRAMEWORK_ALIASES.items()}
_BY_KEY.update({_key(fw): fw for fw in PREFERENCE})


def canonical_framework(name: str) -> Optional[str]:
    """'LLaMA_Factory' -> 'llamafactory'; None when the name is no framework we know."""
    return _BY_KEY.get(_key(name))


def suggest_framework(name: str) -> Optional[str]:
    """The closest known name, for a did-you-mean."""
    close = difflib.get_close_matches(_key(name), list(_BY_KEY), n=1, cutoff=0.6)
    return _BY_KEY[close[0]] if close else None


FRAMEWORKS = tuple(sorted(PREFERENCE))
