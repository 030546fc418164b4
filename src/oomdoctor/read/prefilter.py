"""The literals that make a region of a log worth parsing.

*Anchors* say a failure may be here (keep a window of context around it: the traceback
before, the wrapped message after); a log without any is clean to a scan, so they cover
every line a failure family of ``parsers/`` flags (tests/test_scan_diagnose_agree.py).
*Context* lines carry banners and configuration, *markers* say where the job was (keep
the line itself); *failure* literals tell the anchors that end a job from those that warn,
for what region mode drops last. Both ``diagnose`` on a large log and ``scan`` use these,
so the two always look at the same lines and agree.
"""
from __future__ import annotations

import bisect
import functools
import heapq
import os
import re
import threading
from typing import Iterable, NamedTuple, Optional

# The shell's "Killed" in the user's language: glibc's strsignal(SIGKILL) as its po/ files
# translate it (bash prints that string; checked in glibc's po/*.po, January 2026), for the
# languages of most of the world's ML users (zh_CN, zh_TW, ja, ko, de, fr, es, pt, ru, uk, it,
# tr, vi, pl, cs, nl, sv, id). Read by parsers/host.py as the English word is.
KILLED_LOCALISED = (
    "已杀死", "強制結束", "強制終了", "죽었음", "Getötet", "Processus arrêté", "Terminado (killed)", "Morto",
    "Убито", "Вбито", "Ucciso", "Süreç durduruldu", "Bị buộc kết thúc", "Unicestwiony", "Zabit (SIGKILL)",
    "Geëlimineerd", "Dödad", "Terbunuh",
)
# ... of which these are ordinary words ("dead", "killed" in a game's or an agent's log): read
# only alone on a line, as the shell prints them
KILLED_ORDINARY = ("Morto", "Убито", "Вбито", "Ucciso", "Dödad", "Terbunuh")

ANCHOR_LITERALS = (
    # "ut of memory" holds "out of memory" and "Out of memory", "ried to alloc" "Tried to
    # allocate", "Error" every "...Error" class name; "Kill" "Killed", "Killing", "OOMKilled"
    "ut of memory", "OUT OF MEMORY", "OutOfMemory", "Out Of Memory", "ried to alloc", "capacity of",
    "otal capacity", "RESOURCE_EXHAUSTED", "Resource exhausted", "ResourceExhausted", "OOM when allocating",
    "to cudaMalloc", "to hipMalloc",   # "Failed to cudaMalloc N bytes" (and "cuMem", below, for cuMemAlloc)
    "MEM_OBJECT_ALLOCATION",   # OpenCL's CL_MEM_OBJECT_ALLOCATION_FAILURE
    "ran out-of-memory",                                 # a platform's replica status
    "memory budget", "OOM Detected",                     # Dask's nanny; a trainer's batch retry
    # an error record reporting the abbreviation for one item it failed (parsers/memory_words.py)
    "OOM for", "OOM on", "OOM in", "OOM at", "OOM while", "OOM during",
    "System memory low",                                 # Ray 2.0's raylet killing a task
    "requested buffer", "bad allocation",               # ONNX Runtime's arena; MSVC's std::bad_alloc
    "sufficient GPU memory",                             # "Insufficient GPU memory error" (MLC LLM's check)
    "Workspace can't be allocated",                      # DeepSpeed's inference kernels
    "total mem size",                                    # MindSpore's allocator refusing a block
    "CUDA error", "HIP error", "CUBLAS_STATUS", "CUDNN_STATUS", "cuDNN error", "NCCL error", "NCCL WARN",
    "unhandled cuda error", "Kill", "killed by signal", "SIGKILL", "Signal 9", "Signal 7", "aught signal", "exitcode",
    "return code", "Exit Code", "oom-kill", "oom_kill", "oom kill", "OOM kill", "OOM-kill", "total_vm",
    # batch schedulers' memory-limit kills (Grid Engine, LSF, PBS)
    "enforced memory limit", "MEMLIMIT",
    # the interpreter's own abort report
    "Fatal Python error",
    # TensorFlow's and XLA's host allocators refusing page-locked memory (parsers/runtime.py)
    "allocate pinned host",
    # ComfyUI's report of a node's exception by the allocator's first words
    "Allocation on device",
    # the caching allocator's NVML assert in its out-of-memory path (parsers/torch_alloc.py)
    "NVML_SUCCESS == r ",
    # Caffe2's CUDA_ENFORCE and Caffe's CHECK with the runtime's out-of-memory code; MLX's buffer-size refusal
    "cudaSuccess. 2 vs 0", "cudaSuccess (2 vs. 0)", "[metal::malloc] Attempting",
    # "exit code" alone ends every Slurm epilogue ("exit code 0"): only signal-like codes
    # (-9, 137, 134, 135, 139, 253) say something died.
    "exit code -", "exit code 13", "exit code 25", "exit code: -", "exit code: 13",
    "exit status -", "exit status 13", "exit status: -", "exit status: 13", "rror code -", "failed with -",
    "CPUAllocator", "Fail to alloc memory of", "alignment, size):12", "Unable to allocate", "Traceback (most recent call last)", "DataLoader worker",
    "Bfloat16", "bf16/gpu", "Ampere", "compute capability", "illegal memory access", "device-side assert",
    "Error", "Exception", "Failed to clone", "memory monitor", "Segmentation fault", "Bus error",
    "core dumped", "Aborted",
    # what the failure families flag (parsers/*: their trigger literals and the literals
    # their patterns require; tests/test_scan_diagnose_agree.py holds the two together).
    # Lower-case ones start where a byte is rare or already starts another literal ("otal
    # capacity", "me device"): the prefix-tree pattern stops at every byte that starts one
    "OUT_OF_", "MemoryAllocation", "ALLOC_FAILED", "ALLOCATION_FAILED", "ALLOCATOR_FAILURE", "NOT_INITIALIZED", "unable to find an engine",
    "cuDNN algorithm", "memory_error", "in memory thread", "MEMORY_ALLOCATION", "INSUFFICIENT_RESOURCES",
    "Failed to CUDA", "CUresult", "cuMem", "Maximum pool size exceeded", "CNMEM_STATUS_OUT_OF_MEMORY", "failed with OOM", "recover from OOM", "due to CUDA OOM", "DEVICE memory", "device memory", "status=4 message=", "NRT_RESOURCE", "DEVMEM Allocation failed", "Allocator fail", "pod memory limits", "Allocation type: HLO", "XLA label: ", "XLA Label: ", "cclInvalid", "NCCL communicator", "unhandled system error",
    "remote process exited", "Exceeded job memory", "Exceeded step memory",
    "terminated by signal",   # GNU time's report of its command's end ("Command terminated by signal 9")
    # other frameworks' allocators: thrust's scratch buffer, Jittor's memory check, MindSpore's
    # pool, nnabla's retry, PaddlePaddle's page-locked host memory (parsers/runtime.py)
    "get_temporary_buffer failed", "memory is overflow", "isn't enough", "Failed to allocate again", "PinnedPlace",
    "allocating <= available", "Out of GPU memory trying", "B in GPU ",
    # ggml's Metal command buffer that failed (parsers/accelerators.py); the RAPIDS Accelerator for
    # Spark's retry framework giving up (parsers/runtime.py)
    "failed with status", "RetryOOM",
    # ggml's backend buffers, TensorRT-LLM's executor (parsers/runtime.py)
    "buffer of size", "insufficient GPU memory",
    "Memory on the node", "OOM happens", "hbm requirement", "vmem requirement", "bfc_allocator", "Sum Total of in-use", "MaxInUse:", "total_region_allocated_bytes_", "raise_if_low_memory",
    # an nvidia-smi process table (ranks sharing a GPU show in its rows; a paste may hold the rows
    # without the header, and each row ends in "MiB |") and tcmalloc's report of a large host
    # allocation: memory pressure without a failure (parsers/allocator_stats.py)
    "Processes:", "MiB |", "tcmalloc: large alloc", "ressure (OOM)", "MEM(GB)", "usage threshold", "Your session crashed", "Your notebook",
    "The node was low", "killed by YARN", "physical memory limits", "Auslagerungsdatei", "页面文件", "KernelRestarter", "appears to have died", "Kernel crashed", ":kernel ", "] kernel ", "worth of input", "Root Cause", "received by PID", "Main process received",
    # (" killed" holds "zsh: killed", "job killed", "being killed", "Task was killed", "Ray killed this")
    "death signal", "exited unexpectedly", "hipError_t(1002)", "hipError_t(2)", " killed", "ith signal SIG", "died with <Signals", "on-zero exit status",
    "exited with code", "exited with exit code", "died unexpectedly", "The actor died", "Worker exit type",
    "closed by remote host", "Torch: not enough",
    # inference engines finding no memory for their KV cache, accelerate's batch-size finder out of
    # sizes, PyTorch's MPS allocator refusing one buffer (parsers/runtime.py, accelerators.py);
    # ("vailable": vLLM's error says "available KV cache memory", its budget line "Available ...")
    "memory for the cache blocks", "stored in KV cache", "vailable KV cache memory", "on startup is less than desired",
    "mem-fraction-static", "No executable batch size", "Invalid buffer size: ",
    # a device map that put a quantized model's modules on the CPU or the disk, or any model's on
    # the disk
    "dispatched on the CPU", "offloaded to the disk", "whole model to the disk", "CPU or disk device",
    "to dispatch this model",
    # cuBLAS's ALLOC_FAILED status in words, as XLA prints it
    "resource allocation failed",
    # the Ascend runtime's and Gaudi's own reports of a failed device allocation
    "EL0004", "rtMalloc execute failed", "workspace Allocation of size", "Not enough space to allocate",
    # a Vulkan renderer's refused device memory (its result code is under "OUT_OF_")
    "vkAllocateMemory failed",
    # a CUDA call's status 2 printed as a number by a library's own check (parsers/runtime.py)
    "failed with error 2", "uda error 2",
    # Intel's XPU builds' limit on one allocation's size (parsers/torch_alloc.py)
    "can NOT allocate memory block",
    # TensorFlow unable to place a tensor's copy on the GPU
    "Dst tensor is not initialized", "Cannot allocate", "The paging file", "WinError 1455",
    # (not "shared memory" alone: DeepSpeed's environment report prints "shared memory (/dev/shm) size")
    # (and the end of PyTorch's hint, whose start a hard wrap may leave on the line above: "... out
    # of shared" / "memory. Please try to raise your shared memory limit.")
    "Unexpected bus", "nsufficient shared memory", "out of shared memory", "shared memory segment", "shared memory limit",
    "unable to write to file </torch_",
    # OpenMPI's rank ended by a signal; a worker pool losing a process without an exception
    "mpirun noticed", "THE EXIT STRING", "abruptly died during map", "terminated abruptly", "ExitCode",
    "allocate shared memory", "m_open", "map failed", "ailed to map", "ailed to mmap", "No space left on device", "SIGBUS", "SIGSEGV", "SIGTERM",
    # a Windows process's crash status and Python's faulthandler on Windows; the DataLoader's
    # signal handler in a crashed worker
    "0xC0000", "0xc0000", "exit status 3221", "exit code 3221", "exit status: 3221", "exit code: 3221", "Windows fatal exception", "encountered in worker",
    "me device", "IllegalAddress", "ILLEGAL_ADDRESS", "Memory access fault", "misaligned address",
    "MisalignedAddress", "MISALIGNED_ADDRESS", "ERROR_ASSERT", "Assertion `", "unspecified launch failure",
    "LaunchFailure", "LAUNCH_FAILED", "o kernel image", "NoKernelImage", "NO_BINARY_FOR_GPU",
    "invalid device function", "InvalidDeviceFunction", "ECC error", "ECCUncorrectable", "ECC_UNCORRECTABLE",
    "ot a failure", "reed_by_count", "out of resource", "Watchdog", "Some NCCL operations",
    "upport bf", "upport BF", "bf16 mixed precision requires", "upported on this", "upported on your",
    "upported on the current", "only supports Ampere", "only supported on", "only supports sm", "recomputed metadata", "different metadata than during",
    # an error that says memory could not be had, in words no other family knows (parsers/memory_words.py)
    "bad_alloc", "enough memory", "enough GPU memory", "nsufficient memory", "ailed to alloc", "nable to alloc", "annot alloc",
    "ould not alloc", "ouldn't alloc", "an't alloc", "emory exhausted", "emory allocation",
    "KeyboardInterrupt", "SystemExit", "StopIteration", "Failed to allocate request", "That was not possible",
    # a NaN loss, as trainers print it ("'loss': nan", "loss=nan", "Loss is nan")
    "oss': nan", "oss: nan", "oss=nan", "oss = nan", "oss nan", "oss is nan", "oss': NaN", "oss: NaN", "oss=NaN",
    "oss = NaN", "oss NaN", "oss is NaN", "NaN loss",
    # ... and in a JSON record of the epoch's stats (fairseq: "train_loss": "nan")
    'oss": "nan"', 'oss": "NaN"', 'oss":"nan"', 'oss":"NaN"', "oss': 'nan'", "oss': 'NaN'",
    # ... and a metrics table that aligns its values ("eval_loss               =        nan")
    "  nan", "  NaN",
    # memory pressure in a run that has not failed (yet): what diagnose warns about
    "cache flushes", "cudaMalloc retries", "GB cache",
    # the host's memory at 90 % or more, as DeepSpeed's see_memory_usage prints it
    "percent = 9", "percent = 100",
    # a traceback pasted without its first line, or cut before its error: its frames
    # (Python's, IPython's)
    "\", line ", "File ~", "File /", "Cell In", "Input In [", "│ /",   # rich's boxed frames
    "](https://localhost",   # Colab's, which link their file: "[/x/gat_conv.py](https://localhost:8080/#) in message("
    "❱ ",   # rich's mark of the line that ran, in its frames' boxes (a box whose frame line a paste cut)
    # the shell's "Killed" in the user's language
    *KILLED_LOCALISED,
)

# A log that ends at an interrupt's echo, "^C" on its last line (a notebook's command stopped
# from outside, parsers/host.py). Two characters are too short a literal for an anchor (the
# pure-Python pivots could not plan around it), and only the log's end matters: the scan's first
# pass and region mode look at its last bytes for it instead (``keep_tail``, ``ends_interrupted``).
# The test is looser than the parser's reading of the last line (which strips prefixes, escape
# codes and controls, and splits at carriage returns first): the first pass may call a log a
# candidate that the parser then clears, never the reverse.
TAIL_KEEP = 256      # bytes of the tail kept between blocks
_TAIL_REACH = 2048   # bytes of a block's end read (a terminal's closing escape codes fit many times over)
_INTERRUPT_TAIL = re.compile(rb"\^C[\"'`]{0,3}\Z")
_ANSI_BYTES = re.compile(rb"\x1b(?:\[[0-9;?]*[A-Za-z]|\][^\x07\x1b]*(?:\x07|\x1b\\)?)")
_ANSI_PENDING = re.compile(rb"\x1b(?:\[[0-9;?]{0,12})?\Z")   # (its rest in the next block)
# what may follow the last text of a log: blanks, controls, escape codes' leftovers, a
# non-breaking space's bytes
_BLANK = b" \t\r\n\x0b\x0c\x00\x07\xc2\xa0"


def keep_tail(tail: bytes, block: bytes) -> bytes:
    """The log's last bytes after one more block, escape codes taken out: the last text
    (``TAIL_KEEP`` bytes of it at most) and the blanks after it (as many at most). However many
    blank lines end a log, the text before them is what is kept; the blanks stay because text
    in a later block goes on after them, not after the text (a blank block between "^C" and a
    quote is a line break). Only the block's end is copied."""
    end = len(block)
    while end and block[end - 1] in _BLANK:
        end -= 1
    window = (tail if end < _TAIL_REACH else b"") + block[max(0, end - _TAIL_REACH):end]
    if b"\x1b" in window:   # (an escape code cut between two blocks is whole here)
        window = _ANSI_BYTES.sub(b"", window)
    window += block[max(end, len(block) - TAIL_KEEP):]
    # an escape code still open at the end (the next block holds its rest) is no text: kept
    # apart, so that the text before the blanks is what TAIL_KEEP keeps, not the blanks
    pending = _ANSI_PENDING.search(window)
    cut = pending.start() if pending else len(window)
    text = window[:cut].rstrip(_BLANK)
    return text[-TAIL_KEEP:] + window[len(text):cut][-(TAIL_KEEP - (len(window) - cut)):] + window[cut:]


def ends_interrupted(tail: bytes) -> bool:
    """Does a log whose ``keep_tail`` is this end with an interrupt's echo?"""
    return b"^C" in tail and _INTERRUPT_TAIL.search(tail.rstrip(_BLANK)) is not None


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
    # which ONNX Runtime provider ran (its arena's failure reads the same on either side)
    "ExecutionProvider", "cuda_allocator.cc", "CUDA failure ", "not in available provider names",
)


# Lines that end a job rather than warn (out of memory, a kill, a dead process): region
# mode drops their windows last when a log has more windows than it can keep.
FAILURE_LITERALS = (
    "OUT OF MEMORY", "OutOfMemory", "Out Of Memory", "ut of memory",   # "ut of memory": out of / Out of
    "Tried to allocate", "RESOURCE_EXHAUSTED", "Resource exhausted", "OOM", "oom-kill", "oom_kill",
    "Killed", "SIGKILL", "Signal 9", "terminated by signal", "enforced memory limit", "MEMLIMIT", "job killed", "Fatal Python error",
    "MemoryError", "Unable to allocate", "Cannot allocate memory", "cudaSuccess. 2 vs 0", "cudaSuccess (2 vs. 0)", "[metal::malloc] Attempting",
    "not enough memory", "OUT_OF_MEMORY", "ALLOC_FAILED", "ChildFailedError", "exitcode: -", "exitcode: 1",
    "return code = -", "exit code -", "exit code 13", "exit status -", "exit status 13", "DiedError",
    "WorkerCrashedError", "died unexpectedly", "Segmentation fault", "core dumped", "Bus error", "SIGBUS",
    "illegal memory access", "device-side assert", "Watchdog caught", "Killing subprocess",
)

# Where a job was (phase.MARKERS): kept as single lines by region mode, so a scan sees the
# same last marker before a failure as a full reading. Case-folded markers are given in
# the cases logs print.
MARKER_LITERALS = (
    "Saving", "saving", "SAVING", "save_pretrained(", "Failed to clone() tensor", "failed to clone() tensor",
    "Summoning checkpoint", "Here comes the checkpoint",
    "Loading checkpoint shards", "loading weights file", "Loading model weights", "model under default dtype",
    "Loading base model", "load_model_and_tokenizer", "uilding ", "reating ", "nitializing ", "nstantiating ", "Loading the model from", "Loading pretrained model from", "Quantizing", "Continuing training from checkpoint", "Loading model from ", "Loading weights ",
    "Resuming ", "resuming ", "resume_from_checkpoint", "Loading optimizer state", "load_checkpoint(", "'train_runtime':",
    "Attempting to resume from", "ZeRO state_dicts",
    # a load's own error report ("Catch exception when loading model: ..."), vLLM's worker method
    "loading model", "loading the model", "loading weights", "loading the weights", "method load_model",
    "method 'load_model",
    # llama.cpp's load that failed (its weights, its context), TensorRT-LLM's executor not created
    "model loading error", "llama_new_context_with_model: failed", "llama_init_from_model: failed",
    "load_model: failed to load model", "Executor creation failed",
    "Exception during initialization",   # ONNX Runtime's session, not created
    # a model whose device map the GPUs could not hold (transformers' checks in from_pretrained,
    # accelerate's dispatch_model)
    "dispatched on the CPU or the disk", "offloaded to the disk", "whole model to the disk", "CPU or disk device",
    "to dispatch this model",
    "Error occurred when executing",   # ComfyUI's dialog naming the node that raised (a loader's)
    "model to ", "models to ", "model onto ", "models onto ",   # "Failed to move model to device"
    "Training completed. Do not forget", "***** train metrics *****", "***** Running training *****",
    "Start training", "Starting training", "Training", "***** Running Evaluation *****",
    "Running evaluation", "Start evaluation", "Starting evaluation", "Evaluating", " evaluation", "***** Running Prediction *****",
    # a bar whose description names its pass ("Epoch 15 (validation) ...:  2%|"); an evaluation's error report
    "(val", "(eval", "(Val", "(Eval", "(VAL", "(EVAL", "while evaluating", "when evaluating", "while validating", "when validating",
    # progress bars named for their pass ("Val:  21%|", "Train:  51%|")
    "Val:", "Valid:", "Validation:", "Validating:", "Eval:", "Evaluation:", "Train:", "Training:",
    # mmcv's task bar, drawn by its test loops ("[>>>>    ] 6/15, 0.6 task/s")
    " task/s",
    # the YOLO trainers' validation bar ("Class  Images  Labels  P  R  mAP@.5 mAP@.5:.95:  75%")
    "mAP@", "mAP50",
    "predict_with_generate", "reference model", "Reference model", "ref_model", "initializing optimizer states",
    "initialize_optimizer_states", "ZeRO stage", "DeepSpeedZeRoOffload initialize", "Stage 3 initialize beginning", "Parameter Offload: Total",
    "creating fp16 partitions", "creating fp32 partitions", "Creating ZeRO Offload", "finished initializing model",
    "DeepSpeed Final Optimizer", "Running tokenizer on dataset", "Converting format of dataset", "Map:",
    "features from dataset file", "features from cached file", "features into cached file", "examples to features",
    "Map (num_proc=", "Tokenizing train", "Tokenizing dataset", "Generating train split",
    "Generating validation split", "Preprocess", "Packing dataset",
    # a dataset's map, unfinished (its bar counts examples)
    "examples/s", "s/examples",
    # tf.data filling a shuffle buffer, and full
    "Filling up shuffle buffer", "Shuffle buffer filled",
    # a trainer setting up its dataset, reading its images into memory
    "Setting up ", "Caching ",
    # ... or loading, caching or reading it under a progress bar ("preloading images (train):  65%|")
    "loading", "Loading", "caching", "Caching", "reading", "Reading",
    # a script reading its training data ("Loading prepared training docs from x.json")
    "data from", "dataset from", "datasets from", "docs from", "documents from", "corpus from", "samples from",
    "examples from",
    # a script naming the weight file it reads ("Processing pytorch_model-00001-of-00002.bin")
    ".bin", ".safetensors", ".pth",
    # epoch values ("'epoch': 1.0", "Epoch 2/5", "epoch 002", "Epoch(train)"): phase reads epoch
    # boundaries from them
    "poch",
)


def trie_pattern(literals: Iterable[str]) -> "re.Pattern[bytes]":
    """One regex for many literals, factored by common prefixes.

    Python's ``re`` tries every branch of a flat alternation at every position; a prefix
    tree rejects most positions on the first byte (about twice as fast here). At each
    position it prefers the longest literal, like the flat longest-first alternation.
    """
    trie: dict = {}
    for word in literals:
        node = trie
        for ch in word.encode():
            node = node.setdefault(ch, {})
        node[-1] = {}

    def build(node: dict) -> bytes:
        alts = [re.escape(bytes([ch])) + build(node[ch]) for ch in sorted(k for k in node if k != -1)]
        if not alts:
            return b""
        body = alts[0] if len(alts) == 1 else b"(?:" + b"|".join(alts) + b")"
        if -1 in node:  # a literal ends here: the longer ones are optional
            body = b"(?:" + body + b")?"
        return body

    return re.compile(build(trie))


@functools.cache
def anchor_pattern() -> "re.Pattern[bytes]":
    """The anchor literals as one plain pattern (built when first asked for, not at import)."""
    return trie_pattern(ANCHOR_LITERALS)


@functools.cache
def context_pattern() -> "re.Pattern[bytes]":
    return trie_pattern(CONTEXT_LITERALS)


# -- the pure-Python search: pivots -------------------------------------------------------
#
# The standard library has no multi-literal search: one ``re`` alternation of the
# literals runs at well under 0.1 GB/s. It does have fast single searches: ``bytes.find``
# of one byte is ``memchr`` (tens of GB/s), ``bytes.find`` of a long needle skips ahead
# by up to its length, ``re`` runs a literal prefix through a tight C loop, and
# ``bytes.translate`` drops bytes in one C pass. So the literals are covered by a few
# *pivots* (each literal contains one), each pivot is searched on its own, and a hit is
# confirmed by comparing, in place, the literals that pivot stands for. Pivots are:
#
# - a rare byte (uppercase letters mostly): ``memchr``, then one comparison per
#   occurrence of the byte;
# - a substring searched in the *letters* of the text: the block without digits,
#   spaces, punctuation and non-ASCII bytes (``bytes.translate``, a third of the bytes
#   of a training log), where every literal still appears, letters only
#   ("exit code: 137" becomes "exitcode"). A hit there is mapped back to a 16 KiB
#   stretch of the block, where the literals are looked for;
# - a substring searched in the bytes themselves, for a literal whose letters alone
#   are common ("return code": "returncode" is printed by many jobs that went well).
#
# Which pivots is a weighted set cover (``plan_pivots``), by how often their bytes
# occur in training logs: digits, spaces and most lowercase letters all the time,
# uppercase letters rarely. Whatever the costs, the search finds every literal: each
# one is assigned to a pivot it contains (a test checks it).

# Approximate share of each byte in training logs (progress bars, metrics, banners,
# warnings), from generated archives and real logs. Only the order of magnitude matters.
BYTE_SHARE = {
    ' ': 2e-1, '!': 7e-6, '"': 1e-3, '#': 3e-4, '$': 7e-6, '%': 5e-3, '&': 6e-7, "'": 2e-3,
    '(': 1e-3, ')': 1e-3, '*': 3e-4, '+': 3e-4, ',': 1e-2, '-': 1e-2, '.': 3e-2, '/': 2e-2,
    '0': 5e-2, '1': 5e-2, '2': 4e-2, '3': 3e-2, '4': 3e-2, '5': 3e-2, '6': 2e-2, '7': 2e-2,
    '8': 2e-2, '9': 2e-2, ':': 4e-2, ';': 1e-4, '<': 5e-3, '=': 8e-3, '>': 2e-4, '?': 2e-5,
    '@': 7e-6, 'A': 6e-4, 'B': 2e-3, 'C': 1e-3, 'D': 3e-4, 'E': 3e-3, 'F': 2e-3, 'G': 2e-3,
    'H': 2e-4, 'I': 2e-3, 'J': 9e-6, 'K': 4e-5, 'L': 8e-4, 'M': 7e-4, 'N': 3e-3, 'O': 3e-3,
    'P': 9e-4, 'Q': 3e-5, 'R': 8e-4, 'S': 8e-4, 'T': 8e-4, 'U': 4e-4, 'V': 1e-4, 'W': 9e-5,
    'X': 2e-5, 'Y': 9e-5, 'Z': 1e-5, '[': 2e-2, '\\': 1e-4, ']': 7e-3, '^': 2e-3, '_': 5e-3,
    '`': 6e-5, 'a': 2e-2, 'b': 3e-3, 'c': 1e-2, 'd': 8e-3, 'e': 3e-2, 'f': 3e-3, 'g': 6e-3,
    'h': 5e-3, 'i': 2e-2, 'j': 7e-5, 'k': 4e-3, 'l': 2e-2, 'm': 2e-2, 'n': 2e-2, 'o': 2e-2,
    'p': 2e-2, 'q': 3e-4, 'r': 2e-2, 's': 3e-2, 't': 2e-2, 'u': 5e-3, 'v': 1e-3, 'w': 9e-4,
    'x': 7e-4, 'y': 3e-3, 'z': 2e-3, '{': 3e-4, '|': 3e-2, '}': 3e-4, '~': 1e-5,
}
# What every training log prints many times (a pivot inside one of these hits all the
# time), letters only, as in the searched text.
COMMON_WORDS = (
    "memory", "Memory", "allocated", "reserved", "error", "warning", "Warning", "model", "device",
    "tensor", "torch", "cuda", "CUDA", "nccl", "NCCL", "rank", "node", "process", "training",
    "step", "epoch", "Epoch", "loss", "learning", "rate", "batch", "size", "float", "dtype",
    "exception", "signal", "status", "return", "returncode", "worker", "dataloader", "exitcode",
    "ExitCode", "kill", "time", "info", "INFO", "compute", "capability", "checkpoint", "config",
    "python", "version", "Version", "GPU", "gpu",
)
LETTERS = bytes(range(65, 91)) + bytes(range(97, 123))
NOT_LETTERS = bytes(b for b in range(256) if b not in LETTERS)

# Costs, in units of one pass of a literal-prefix ``re`` over the bytes (~0.4 s a GiB here).
MEMCHR_PASS = 0.15        # one memchr pass
HIT_COST = 1200.0         # confirming hits of a byte, per unit of hit share (Python work per hit)
LETTERS_PASS = 2.2        # dropping all but the letters (``bytes.translate``), once a block
LONG_FIND = (0.3, 10.0)   # bytes.find of an m-byte needle, m >= 6: a + b / m
COMMON_SHARE = 3e-4       # the share of hits of a pivot inside a common word ("oss" in every "loss")
LETTERS_SHARE = 0.33      # what is left of the bytes
VERIFY_COST = 2.5e5       # a hit in the letters: map back, look for the literals (per unit share)
FIRST_BYTE = 25.0         # a prefix search stops at each occurrence of the first byte
MAX_PIVOT = 10            # longest substring tried as a pivot (besides whole literals)
TRIE_COST = 40.0          # the plain prefix-tree ``re`` over the bytes
STRETCH = 16 * 1024       # a hit in the letters is looked for in this stretch of the block
PURE_PYTHON = ("re", "python", "trie")   # OOMDOCTOR_PREFILTER values without a native engine


def letters(s: bytes) -> bytes:
    return s.translate(None, NOT_LETTERS)


def _share(byte: int) -> float:
    return BYTE_SHARE.get(chr(byte), 1e-4)


def _hit_share(s: bytes, scale: float = 1.0) -> float:
    """Expected hits of ``s`` per byte of log text (``scale``: the share of the bytes searched)."""
    share = scale
    for b in s:
        share *= _share(b) / scale
    text = s.decode("ascii", "replace")
    if any(text in word for word in COMMON_WORDS):
        share = max(share, COMMON_SHARE)
    return share


def _scan_cost(s: bytes, scale: float = 1.0) -> float:
    """One search for ``s`` over all the bytes: a literal-prefix ``re``, which stops at
    each occurrence of the first byte, or ``bytes.find``, which skips ahead by up to the
    length of a long needle."""
    cost = 1.0 + FIRST_BYTE * _share(s[0]) / scale
    if len(s) >= 6:
        cost = min(cost, LONG_FIND[0] + LONG_FIND[1] / len(s))
    return cost * scale


def _pivot_cost(kind: str, s: bytes) -> float:
    if kind == "byte":
        return MEMCHR_PASS + _share(s[0]) * HIT_COST
    if kind == "text":
        return _scan_cost(s) + _hit_share(s) * HIT_COST
    return _scan_cost(s, LETTERS_SHARE) + _hit_share(s, LETTERS_SHARE) * VERIFY_COST


class Pivot(NamedTuple):
    kind: str                           # "byte" | "text" (a substring) | "letters" (of the letters)
    needle: bytes
    literals: tuple[bytes, ...]         # the literals it stands for
    cost: float


@functools.lru_cache(maxsize=8)
def plan_pivots(literals: tuple[str, ...]) -> tuple[Pivot, ...]:
    """Pivots such that every literal contains one, cheap to search for as a whole: a
    greedy weighted set cover, with and without searching the letters (which costs a
    pass of its own), whichever is cheaper."""
    lits = sorted({w.encode() for w in literals if w})
    cover: dict[tuple[str, bytes], set] = {}       # candidate -> the literals it covers
    for w in lits:
        for kind, text in (("byte", w), ("text", w), ("letters", letters(w))):
            sizes = (1,) if kind == "byte" else range(min(3, len(text)), MAX_PIVOT + 1)
            for i in range(len(text)):
                for j in {i + k for k in sizes if i + k <= len(text)}:
                    cover.setdefault((kind, text[i:j]), set()).add(w)
    for w in lits:                      # whole literals, however long (long needles are fast)
        for kind, text, held in (("text", w, lambda x: x), ("letters", letters(w), letters)):
            if len(text) > MAX_PIVOT and (kind, text) not in cover:
                cover[(kind, text)] = {x for x in lits if text in held(x)}
    cost = {key: _pivot_cost(*key) for key in cover}
    plans = [_cover(lits, {k: c for k, c in cover.items() if k[0] != "letters"}, cost)]
    # with the letters pass: a literal without letters ("已杀死") has no letters candidate and
    # is covered by a pivot in the bytes themselves
    plans.append(_cover(lits, cover, cost))
    return min(plans, key=plan_cost)


def _cover(lits: list[bytes], cover: dict, cost: dict) -> tuple[Pivot, ...]:
    """Greedy set cover: the candidate of least cost per literal not yet covered, again
    and again (lazily: that price only grows as literals get covered)."""
    left = set(lits)
    heap = [(cost[k] / len(c), k) for k, c in cover.items()]
    heapq.heapify(heap)
    chosen: list = []
    while left:
        price, k = heapq.heappop(heap)
        new = len(cover[k] & left)
        if not new:
            continue
        if cost[k] / new > price:               # stale: put it back at its price now
            heapq.heappush(heap, (cost[k] / new, k))
            continue
        chosen.append(k)
        left -= cover[k]
    for k in sorted(chosen, key=lambda c: (-cost[c], c)):   # drop what the others cover
        if set().union(*(cover[c] for c in chosen if c != k)) >= set(lits):
            chosen.remove(k)
    chosen.sort(key=lambda c: (cost[c], c))

    def fit(w: bytes, k) -> tuple:
        # a byte pivot compares the literal from the byte on: a long tail rejects most
        # occurrences of the byte with one comparison
        return (k[0] == "byte" and len(w) - w.index(k[1]) < 3, cost[k])

    owner = {w: min((k for k in chosen if w in cover[k]), key=lambda k: fit(w, k)) for w in lits}
    return tuple(Pivot(k[0], k[1], tuple(w for w in lits if owner[w] == k), cost[k])
                 for k in chosen if any(owner[w] == k for w in lits))


def plan_cost(plan: tuple[Pivot, ...]) -> float:
    return sum(p.cost for p in plan) + (LETTERS_PASS if any(p.kind == "letters" for p in plan) else 0.0)


class _InPlace:
    """A pivot searched in the bytes themselves, its literals compared in place."""

    def __init__(self, p: Pivot):
        self.needle = p.needle
        # each literal is compared from its first occurrence of the needle (the longest
        # tail): one startswith with all the tails rejects almost every hit at once
        self.full = tuple((w.index(p.needle), w) for w in p.literals)
        self.tails = tuple({w[j:] for j, w in self.full})
        self.pattern = None
        if len(p.needle) > 1 and _scan_cost(p.needle) < LONG_FIND[0] + LONG_FIND[1] / max(6, len(p.needle)):
            self.pattern = re.compile(re.escape(p.needle))   # re's prefix loop beats find here

    def run(self, data: bytes, lo: int, hi: int, hits: Optional[list]) -> bool:
        startswith, needle, tails = data.startswith, self.needle, self.tails
        hi = min(len(data), hi + len(needle) - 1)   # a needle that starts before hi
        if self.pattern is None:
            find = data.find
            i = find(needle, lo, hi)
        else:
            search = self.pattern.search
            m = search(data, lo, hi)
            i = -1 if m is None else m.start()
        while i >= 0:
            if startswith(tails, i):
                for j, w in self.full:
                    if i >= j and startswith(w, i - j):
                        if hits is None:
                            return True
                        hits.append(i - j)
            if self.pattern is None:
                i = find(needle, i + 1, hi)
            else:
                m = search(data, i + 1, hi)
                i = -1 if m is None else m.start()
        return False


class _Letters:
    """A pivot searched in the letters of a block."""

    def __init__(self, p: Pivot):
        self.needle = p.needle
        self.literals = p.literals
        self.longest = max(len(w) for w in p.literals)
        self._search = None
        if _scan_cost(p.needle, LETTERS_SHARE) < LETTERS_SHARE * (LONG_FIND[0] + LONG_FIND[1] / max(6, len(p.needle))):
            self._search = re.compile(re.escape(p.needle)).search   # re's prefix loop beats find here

    def find(self, text: bytes, pos: int) -> int:
        if self._search is None:
            return text.find(self.needle, pos)
        m = self._search(text, pos)
        return -1 if m is None else m.start()


class Matcher:
    """Finds where any of a set of literals occurs in a block of bytes.

    Engines, in order: Hyperscan (the optional ``oomdoctor[fast]`` extra, Linux x86-64;
    several GB/s), else Aho–Corasick (``ahocorasick-rs``, the same extra where Hyperscan
    has no wheel; a third to half Hyperscan's speed), else the pivots above (pure Python,
    ten times slower), else the prefix-tree ``re``: for literals found on many lines
    (``frequent``: every hit of a pivot or of an automaton costs Python work), or where
    the pivots would cost more. All four find the same lines.
    ``OOMDOCTOR_PREFILTER=ahocorasick`` skips Hyperscan, ``=python`` (or ``re``) forces the
    pure-Python search, ``=trie`` the plain ``re``. Literals never span a newline, so
    blocks cut at line boundaries can be searched independently.
    """

    WINDOW = 256 * 1024   # byte pivots search a block in windows that stay in the CPU cache

    def __init__(self, literals: Iterable[str], *, native: Optional[bool] = None, engine: Optional[str] = None,
                 frequent: bool = False):
        self.literals = tuple(literals)
        self.longest = max(len(w.encode()) for w in self.literals)
        self._re = trie_pattern(self.literals)
        self._hs = None
        choice = (engine or os.environ.get("OOMDOCTOR_PREFILTER", "")).lower()
        if native is not None:
            choice = "hyperscan" if native else ("python" if choice in ("", "auto", "hyperscan") else choice)
        self._ac: Optional[_AhoCorasick] = None
        if choice not in PURE_PYTHON and choice not in AHO_CORASICK:
            self._hs = _hyperscan_database(self.literals)
        if self._hs is None and choice not in PURE_PYTHON and not frequent:
            self._ac = _ac_automata(self.literals)
        self._bytes: tuple[_InPlace, ...] = ()
        self._letters: tuple[_Letters, ...] = ()
        if self._hs is not None:
            self.engine = "hyperscan"
        elif self._ac is not None:
            self.engine = "ahocorasick"
        else:
            # literals found on many lines (context): every hit of a pivot costs Python
            # work, and the plain pattern is faster
            plan = plan_pivots(self.literals) if choice != "trie" and not frequent else ()
            if plan and plan_cost(plan) < TRIE_COST:
                self._bytes = tuple(_InPlace(p) for p in plan if p.kind != "letters")
                self._letters = tuple(_Letters(p) for p in plan if p.kind == "letters")
                self.engine = "python"
            else:
                self.engine = "trie"
        self._local = threading.local()  # Hyperscan scratch space is per thread

    def _scratch(self):
        scratch = getattr(self._local, "scratch", None)
        if scratch is None:
            import hyperscan
            scratch = self._local.scratch = hyperscan.Scratch(self._hs)
        return scratch

    def ends(self, data) -> list[int]:
        """Offsets just past every hit, ascending (several per line are possible)."""
        if self._hs is not None:
            found: list[int] = []
            add = found.append
            self._hs.scan(data, match_event_handler=lambda _id, _start, end, _flags, _ctx: add(end),
                          scratch=self._scratch())
            found.sort()
            return found
        if self.engine == "trie":
            return [m.end() for m in self._re.finditer(data)]
        hits: list[int] = []
        if self._ac is not None:
            hits = self._ac.starts(data)
            data = bytes(data)
        else:
            data = bytes(data)
            self._find(data, hits)
        if not hits:
            return []
        # the lines that hold a literal, searched in full: the same ends as one finditer
        n = len(data)
        out: list[int] = []
        finditer = self._re.finditer
        for start in sorted({data.rfind(b"\n", 0, p) + 1 for p in hits}):
            stop = data.find(b"\n", start)
            out.extend(m.end() for m in finditer(data, start, n if stop < 0 else stop))
        return out

    def search(self, data) -> bool:
        """Is there any hit? Stops at the first one."""
        if self._hs is not None:
            import hyperscan
            try:
                self._hs.scan(data, match_event_handler=_stop, scratch=self._scratch())
            except hyperscan.ScanTerminated:
                return True
            return False
        if self.engine == "trie":
            return self._re.search(data) is not None
        if self._ac is not None:
            return self._ac.search(data)
        return self._find(bytes(data), None)

    def _find(self, data: bytes, hits: Optional[list]) -> bool:
        """Start offsets of the literals in ``data``, appended to ``hits``; or, without
        ``hits``, True at the first one."""
        n = len(data)
        for lo in range(0, n, self.WINDOW):
            hi = min(n, lo + self.WINDOW)
            for pivot in self._bytes:
                if pivot.run(data, lo, hi, hits) and hits is None:
                    return True
        if not self._letters:
            return False
        text = data.translate(None, NOT_LETTERS)
        marks = _Marks(data)
        for pivot in self._letters:
            looked: set[int] = set()
            find = pivot.find
            r = find(text, 0)
            while r >= 0:
                k = marks.stretch(r)          # the stretch of data that holds this letter
                if k not in looked:
                    looked.add(k)
                    lo = max(0, k * STRETCH - pivot.longest)
                    hi = min(n, (k + 1) * STRETCH + pivot.longest)
                    for w in pivot.literals:
                        i = data.find(w, lo, hi)
                        while i >= 0:
                            if hits is None:
                                return True
                            hits.append(i)
                            i = data.find(w, i + 1, hi)
                r = find(text, r + 1)
        return False

    def __getstate__(self):  # compiled databases do not pickle; rebuild in the worker
        return {"literals": self.literals, "engine": self.engine}

    def __setstate__(self, state):
        engine = state.get("engine")
        self.__init__(state["literals"], engine=None if engine == "hyperscan" else engine,
                      frequent=engine == "trie")


class _Marks:
    """Where the letters of ``data`` come from, by STRETCH: counted on the first hit in
    the letters only, and only as far as needed."""

    def __init__(self, data: bytes):
        self.data = data
        self.ends: list[int] = []       # letters up to the end of each stretch

    def stretch(self, r: int) -> int:
        """The stretch of ``data`` that holds its letter number ``r`` (from 0)."""
        ends, data = self.ends, self.data
        while not ends or (ends[-1] <= r and len(ends) * STRETCH < len(data)):
            i = len(ends) * STRETCH
            ends.append((ends[-1] if ends else 0) + len(data[i:i + STRETCH].translate(None, NOT_LETTERS)))
        return bisect.bisect_right(ends, r) if ends[-1] > r else len(ends) - 1


def _stop(*_args) -> bool:
    return True


# -- Aho–Corasick: ahocorasick-rs --------------------------------------------------------
#
# Where Hyperscan has no wheel (macOS arm64, Windows, aarch64 Linux), ``ahocorasick-rs``
# (the Rust ``aho-corasick`` crate; wheels for those platforms) is the next tier. Its
# fast path is a SIMD prefilter (Teddy) that takes at most 64 patterns and only the
# leftmost match kinds; past 64 it runs a plain automaton, about three times slower here
# (bench/README.md: one automaton of the 168 anchors, 1.9 s a GiB; three of 56, 0.6 to
# 0.8 s). So the literals are searched in groups of at most AC_GROUP, in sorted order
# (literals that share a prefix share Teddy's buckets: a little faster than spreading
# them), leftmost-first. Every reported match is a literal, and every line that holds a
# literal holds a reported match: matches that are not reported overlap a reported one,
# on the same line, since no literal holds a newline. So the lines are the other
# engines' lines.

AC_GROUP = 64              # literals per automaton: Teddy's limit
AC_WINDOW = Matcher.WINDOW   # search() looks at a block in windows that stay in the CPU cache
AHO_CORASICK = ("ahocorasick", "aho-corasick")   # OOMDOCTOR_PREFILTER values for this tier


class _AhoCorasick:
    def __init__(self, automata: tuple, longest: int):
        self.automata = automata
        self.overlap = longest - 1

    def starts(self, data) -> list[int]:
        """Where the reported matches start (several groups: not in order)."""
        return [m[1] for automaton in self.automata for m in automaton.find_matches_as_indexes(data)]

    def search(self, data) -> bool:
        view = memoryview(data)
        for lo in range(0, len(view), AC_WINDOW):
            window = view[lo:lo + AC_WINDOW + self.overlap]   # a literal across the window's end
            for automaton in self.automata:
                if automaton.find_matches_as_indexes(window):
                    return True
        return False


def _ac_automata(literals: tuple[str, ...]) -> Optional[_AhoCorasick]:
    try:
        import ahocorasick_rs
    except ImportError:  # optional: the oomdoctor[fast] extra
        return None
    lits = sorted({w.encode() for w in literals if w})
    if not lits:
        return None
    size = -(-len(lits) // -(-len(lits) // AC_GROUP))     # as even as the fewest groups allow
    kind = ahocorasick_rs.MATCHKIND_LEFTMOST_FIRST
    try:
        automata = tuple(ahocorasick_rs.BytesAhoCorasick(lits[i:i + size], matchkind=kind)
                         for i in range(0, len(lits), size))
    except Exception:  # noqa: BLE001 - an unusable native library: the next tier
        return None
    return _AhoCorasick(automata, max(len(w) for w in lits))


def _hyperscan_database(literals: tuple[str, ...]):
    try:
        import hyperscan
    except ImportError:  # optional: no wheel for this platform, or not installed
        return None
    try:
        db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
        exprs = [re.escape(w).encode() for w in literals]
        db.compile(expressions=exprs, ids=list(range(len(exprs))), elements=len(exprs),
                   flags=[0] * len(exprs))
        return db
    except Exception:  # noqa: BLE001 - an unusable native library falls back to re
        return None


_MATCHERS: dict[str, Matcher] = {}


def anchor_matcher() -> Matcher:
    """The shared matcher of the anchor literals (compiled once per process)."""
    m = _MATCHERS.get("anchor")
    if m is None:
        m = _MATCHERS["anchor"] = Matcher(ANCHOR_LITERALS)
    return m


def context_matcher() -> Matcher:
    m = _MATCHERS.get("context")
    if m is None:
        m = _MATCHERS["context"] = Matcher(CONTEXT_LITERALS, frequent=True)
    return m


def marker_matcher() -> Matcher:
    """Phase markers (``MARKER_LITERALS``). Their words ("Saving", "Running", "Loading")
    share letters with what every training log prints, so without Hyperscan the plain
    pattern beats the pivots; region mode only searches the blocks near anchors anyway."""
    m = _MATCHERS.get("markers")
    if m is None:
        m = _MATCHERS["markers"] = Matcher(MARKER_LITERALS, frequent=True)
    return m


def failure_matcher() -> Matcher:
    """Lines that end a job (``FAILURE_LITERALS``); asked once per distinct anchor line."""
    m = _MATCHERS.get("failure")
    if m is None:
        m = _MATCHERS["failure"] = Matcher(FAILURE_LITERALS, engine="trie")
    return m
