"""The literals that make a region of a log worth parsing.

Two sets: *anchors* say a failure may be here (keep a window of context around it:
the traceback before, the wrapped message after), *context* lines carry banners and
configuration (keep the line itself). Both ``diagnose`` on a large log and ``scan`` use
these, so the two always look at the same lines and agree.
"""
from __future__ import annotations

import os
import re
import threading
from typing import Iterable, Optional

ANCHOR_LITERALS = (
    "out of memory", "Out of memory", "OUT OF MEMORY", "OutOfMemory", "Out Of Memory",
    "Tried to allocate", "RESOURCE_EXHAUSTED", "Resource exhausted", "OOM when allocating",
    "ran out of memory", "CUDA error", "HIP error", "CUBLAS_STATUS", "CUDNN_STATUS", "cuDNN error",
    "NCCL error", "NCCL WARN", "unhandled cuda error", "Killed", "killed by signal", "SIGKILL",
    "Signal 9", "Signal 7", "exitcode", "return code", "Exit Code", "oom-kill", "oom_kill",
    # "exit code" alone ends every Slurm epilogue ("exit code 0"): only signal-like codes
    # (-9, 137, 134, 135, 139, 253) say something died.
    "exit code -", "exit code 13", "exit code 25", "exit code: -", "exit code: 13",
    "OOMKilled", "OOM Killed", "invoked oom-killer", "DefaultCPUAllocator", "MemoryError",
    "Unable to allocate", "Traceback (most recent call last)", "ChildFailedError",
    "DataLoader worker", "Expected all tensors to be on the same device", "Bfloat16",
    "bf16/gpu", "Ampere", "compute capability", "Watchdog caught", "illegal memory access",
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


_ANCHOR_RE = trie_pattern(ANCHOR_LITERALS)
_CONTEXT_RE = trie_pattern(CONTEXT_LITERALS)


def anchor_pattern() -> "re.Pattern[bytes]":
    return _ANCHOR_RE


def context_pattern() -> "re.Pattern[bytes]":
    return _CONTEXT_RE


class Matcher:
    """Finds where any of a set of literals occurs in a block of bytes.

    Hyperscan (the optional ``oomdoctor[fast]`` extra) scans at several GB/s; without it
    the prefix-tree ``re`` above does the same job at about 0.1 GB/s. Set
    ``OOMDOCTOR_PREFILTER=re`` to force the fallback. Literals never span a newline, so
    blocks cut at line boundaries can be scanned independently.
    """

    def __init__(self, literals: Iterable[str], *, native: Optional[bool] = None):
        self.literals = tuple(literals)
        self.longest = max(len(w.encode()) for w in self.literals)
        self._re = trie_pattern(self.literals)
        self._hs = None
        if native is None:
            native = os.environ.get("OOMDOCTOR_PREFILTER", "").lower() not in ("re", "python")
        if native:
            self._hs = _hyperscan_database(self.literals)
        self._local = threading.local()  # Hyperscan scratch space is per thread
        self.engine = "hyperscan" if self._hs is not None else "re"

    def _scratch(self):
        scratch = getattr(self._local, "scratch", None)
        if scratch is None:
            import hyperscan
            scratch = self._local.scratch = hyperscan.Scratch(self._hs)
        return scratch

    def ends(self, data) -> list[int]:
        """Offsets just past every hit, ascending (several per line are possible)."""
        if self._hs is None:
            return [m.end() for m in self._re.finditer(data)]
        found: list[int] = []
        add = found.append
        self._hs.scan(data, match_event_handler=lambda _id, _start, end, _flags, _ctx: add(end),
                      scratch=self._scratch())
        found.sort()
        return found

    def search(self, data) -> bool:
        """Is there any hit? Stops at the first one."""
        if self._hs is None:
            return self._re.search(data) is not None
        import hyperscan
        try:
            self._hs.scan(data, match_event_handler=_stop, scratch=self._scratch())
        except hyperscan.ScanTerminated:
            return True
        return False

    def __getstate__(self):  # compiled databases do not pickle; rebuild in the worker
        return {"literals": self.literals, "native": self._hs is not None}

    def __setstate__(self, state):
        self.__init__(state["literals"], native=state["native"])


def _stop(*_args) -> bool:
    return True


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
        m = _MATCHERS["context"] = Matcher(CONTEXT_LITERALS)
    return m
