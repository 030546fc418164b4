"""The literals that make a region of a log worth parsing.

Two sets: *anchors* say a failure may be here (keep a window of context around it:
the traceback before, the wrapped message after), *context* lines carry banners and
configuration (keep the line itself). Both ``diagnose`` on a large log and ``scan`` use
these, so the two always look at the same lines and agree.
"""
from __future__ import annotations

import re

ANCHOR_LITERALS = (
    "out of memory", "Out of memory", "OUT OF MEMORY", "OutOfMemory", "Out Of Memory",
    "Tried to allocate", "RESOURCE_EXHAUSTED", "Resource exhausted", "OOM when allocating",
    "ran out of memory", "CUDA error", "HIP error", "CUBLAS_STATUS", "CUDNN_STATUS", "cuDNN error",
    "NCCL error", "NCCL WARN", "unhandled cuda error", "Killed", "killed by signal", "SIGKILL",
    "Signal 9", "Signal 7", "exitcode", "return code", "exit code", "Exit Code", "oom-kill", "oom_kill",
    "OOMKilled", "OOM Killed", "invoked oom-killer", "DefaultCPUAllocator", "MemoryError",
    "Unable to allocate", "Traceback (most recent call last)", "ChildFailedError",
    "DataLoader worker", "Expected all tensors to be on the same device", "Bfloat16",
    "bf16", "Ampere", "compute capability", "Watchdog caught", "illegal memory access",
    "device-side assert", "Error:", "Exception:", "Failed to clone", "memory monitor",
    "Segmentation fault", "Bus error", "core dumped", "Aborted",
)

CONTEXT_LITERALS = (
    "version", "Version", "DeepSpeed info", "zero_optimization", "ZeRO", "zero_stage", "stage",
    "offload", "trainable params", "Number of trainable parameters", "Running training",
    "Running Evaluation", "Running Prediction", "Saving model checkpoint", "Saving checkpoint",
    "Loading checkpoint", "checkpoint", "cutoff_len", "sequence_len", "max_seq_length",
    "max_length", "micro_batch_size", "per_device_train_batch_size", "batch size",
    "gradient_checkpointing", "gradient_accumulation", "world_size", "WORLD_SIZE",
    "num_processes", "dist_world_size", "nproc", "NVIDIA", "Tesla", "GeForce", "A100", "H100",
    "finetuning_type", "lora", "LoRA", "bf16", "fp16", "flash_attn", "attn_implementation",
    "optim", "Epoch", "epoch", "llamafactory", "axolotl", "xtuner", "llama_recipes",
    "llama_cookbook", "swift", "trl", "accelerate", "megatron", "PYTORCH_CUDA_ALLOC_CONF",
    "MA ", "CPU Virtual Memory", "memory", "Memory", "MiB", "GiB", "hidden_size",
    "num_hidden_layers", "vocab_size", "model_name_or_path",
)

_ANCHOR_RE = re.compile("|".join(re.escape(s) for s in sorted(ANCHOR_LITERALS, key=len, reverse=True)).encode())
_CONTEXT_RE = re.compile("|".join(re.escape(s) for s in sorted(CONTEXT_LITERALS, key=len, reverse=True)).encode())


def anchor_pattern() -> "re.Pattern[bytes]":
    return _ANCHOR_RE


def context_pattern() -> "re.Pattern[bytes]":
    return _CONTEXT_RE
