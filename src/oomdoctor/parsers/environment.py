"""Versions, hardware, parallelism, framework and hyper-parameters echoed by a log.

Fills ``ctx.facts.environment`` and records, for every field it sets, the line it came
from (``environment.sources``). Values compete by priority (``config_echo.RUNTIME`` ...
``WEAK``): the first value printed wins unless a later one is more authoritative — what
the running library says about itself (DeepSpeed's config dump, collect_env, "Creating
... ZeRO stage 3 optimizer") beats the user's echoed configuration, which beats a config
file's name, which beats hints such as a ``python3.10/site-packages`` path.

Key/value configuration forms (YAML, CLI, reprs, dotted dumps, JSON) live in
``config_echo``; this module adds the fixed banners (collect_env, ds_report, transformers
/ accelerate / LLaMA-Factory env reports, nvidia-smi, DeepSpeed engine lines, the HF
Trainer banner, launcher lines) and decides the framework.
"""
from __future__ import annotations

import ast
import base64
import binascii
import json
from typing import Optional

import regex as re
from packaging.version import InvalidVersion, Version

from . import config_echo as ce
from .base import ParseContext
from .config_echo import CONFIG, EXECUTED, LAUNCH, NAME_HINT, RUNTIME, WEAK, Collector

# -- versions -------------------------------------------------------------------------

_V = r"(?P<ver>\d{1,4}(?:\.\d{1,8}){0,3}(?:[.-]?(?:a|b|rc|dev|post)\d{0,10}){0,3}(?:\+[\w.]{1,40})?)"
_PKG_FIELD = {
    "torch": "torch_version", "pytorch": "torch_version", "deepspeed": "deepspeed_version",
    "transformers": "transformers_version", "accelerate": "accelerate_version",
    "peft": "peft_version", "trl": "trl_version", "python": "python_version",
}
# package name -> framework whose version it is (framework_version is picked at the end)
_PKG_FRAMEWORK = {
    "llamafactory": "llamafactory", "llmtuner": "llamafactory", "axolotl": "axolotl",
    "xtuner": "xtuner", "ms-swift": "ms-swift", "ms_swift": "ms-swift", "swift": "ms-swift",
    "llama-recipes": "llama-recipes", "llama_recipes": "llama-recipes",
    "llama-cookbook": "llama-recipes", "llama_cookbook": "llama-recipes",
    "unsloth": "unsloth", "torchtune": "torchtune", "megatron-core": "megatron",
    "trl": "trl", "transformers": "hf-trainer", "accelerate": "accelerate",
    "deepspeed": "deepspeed", "torch": "plain-pytorch", "pytorch": "plain-pytorch",
}
_ENV_ROW = re.compile(
    r"^[\s\-*]{0,6}`?(?P<pkg>[A-Za-z][\w-]{0,30}(?: [A-Za-z][\w-]{0,20}){0,2})`?\s+version"
    r"(?P<paren>\s*\([^)]{0,20}\))?\s*:\s*" + _V + r"(?:\s*\((?P<what>[^)]{1,20})\))?")
_PIN = re.compile(r"(?<![\w.-])(?P<pkg>torch|pytorch|deepspeed|transformers|accelerate|peft|trl|llamafactory|axolotl|xtuner|ms-swift|unsloth|torchtune|llama-recipes|llama-cookbook|megatron-core)==" + _V)
_CONDA = re.compile(r"^\[conda\]\s+(?P<pkg>torch|pytorch|deepspeed|transformers|accelerate|peft|trl)\s+" + _V + r"\s")
_WHEEL = re.compile(r"(?<![\w.-])(?P<pkg>torch|deepspeed|transformers|accelerate|peft|trl|llamafactory|axolotl|xtuner|ms_swift|unsloth|torchtune)-" + _V + r"(?=-cp|-py|\.tar|\s|$|,)")
_REQ = re.compile(r"Requirement already satisfied: (?P<pkg>torch|deepspeed|transformers|accelerate|peft|trl)\b[^(\n]{0,300}\(" + _V + r"\)")
# "PyTorch: 2.1.2+cu121" (mmengine env), "Pytorch: 2.4.0+cu121." / "Transformers = 4.44.2." (unsloth),
# "torch: 2.1.2" (user prints); a full x.y.z is required, "torch: 1.5 GB" is not a version
_COLON = re.compile(r"(?:^|\s)(?P<pkg>PyTorch|Pytorch|Python|Transformers|torch)\s*[:=]\s+(?=\d{1,4}\.\d{1,4}\.\d)" + _V)
_COLON_WORDS = frozenset({"pytorch", "python", "transformers", "torch"})
# `pip list` / `conda list` rows: "torch     2.1.2" or "pytorch   2.1.2   py3.10_cuda12.1_0   pytorch"
_PIP_LIST = re.compile(r"^(?P<pkg>torch|pytorch|deepspeed|transformers|accelerate|peft|trl|llamafactory|axolotl|xtuner"
                       r"|ms-swift|unsloth|torchtune|llama-recipes|llama-cookbook|megatron-core)\s{2,}" + _V
                       + r"(?:\s{2,}\S{1,80}){0,3}\s*$")
_PIP_SHOW = re.compile(r"^Name: (?P<pkg>[\w.-]{1,40})\s*$")
_DS_INFO = re.compile(r"DeepSpeed info: version=" + _V)
_AVAILABLE = re.compile(r"PyTorch version " + _V + r" available")  # HF datasets at import time
# user prints and some frameworks' start-up lines: "torch.__version__ = 2.1.0", "swift.__version__: 3.1.0"
_DUNDER = re.compile(r"\b(?P<pkg>torch|deepspeed|transformers|accelerate|peft|trl|swift|xtuner|axolotl|llamafactory)"
                     r"\.__version__['\"]?\s*[:=]\s*['\"]?" + _V)
_LF_BANNER = re.compile(r"LLaMA[- ]?Factory,? version " + _V, re.I)
_PYPATH = re.compile(r"python(?P<ver>3\.\d{1,2})/(?:site|dist)-packages/")
_CUDA_BUILD = re.compile(r"^(?P<what>CUDA|ROCM|HIP) used to build PyTorch: " + _V)
_CUDA_MISC = re.compile(r"CUDA Version: (?P<smi>\d+\.\d+)|Cuda compilation tools, release (?P<nvcc>\d+\.\d+)|CUDA Toolkit = (?P<tk>\d+\.\d+)")


def clean_version(v: Optional[str]) -> Optional[str]:
    """The public part of a PEP 440 version (``2.1.2+cu121`` -> ``2.1.2``), else None."""
    if not v:
        return None
    v = v.strip().rstrip(".,;)")
    public = v.split("+", 1)[0].rstrip(".-")
    if not public or not public[0].isdigit():
        return None
    try:
        Version(public)
    except InvalidVersion:
        return None
    return public


def _local_hints(col: Collector, raw: str, line: int, prio: int) -> None:
    """``2.1.2+cu121`` says CUDA 12.1; ``+rocm6.0`` says ROCm."""
    local = raw.split("+", 1)[1].lower().rstrip(".,;)") if "+" in raw else ""
    m = re.match(r"cu(\d{2,3})$", local)
    if m:
        d = m.group(1)
        col.set("cuda_version", f"{d[:-1]}.{d[-1]}", line, prio - 5)
    elif local.startswith("rocm"):
        col.set("accelerator", "rocm", line, RUNTIME)


def _version(col: Collector, pkg: str, raw: str, line: int, prio: int) -> None:
    pkg = pkg.lower().strip("`")
    ver = clean_version(raw)
    if ver is None:
        return
    field = _PKG_FIELD.get(pkg)
    if field:
        if col.set(field, ver, line, prio) and field == "torch_version":
            _local_hints(col, raw, line, prio)
    fw = _PKG_FRAMEWORK.get(pkg)
    if fw:
        col.part("fwver:" + fw, ver, line, prio)


def _versions(col: Collector, text: str, low: str, line: int, words: set) -> None:
    if "version" in low:
        m = _ENV_ROW.match(text)
        if m:
            pkg = m.group("pkg").lower()
            if pkg in ("cuda runtime", "cuda"):
                col.set("cuda_version", clean_version(m.group("ver")), line, LAUNCH)
            else:
                _version(col, pkg, m.group("ver"), line, RUNTIME)
                what = (m.group("what") or "").lower()
                if pkg == "pytorch" and what in ("cuda", "npu", "xpu", "mps"):
                    col.set("accelerator", what, line, RUNTIME)
        m = _DS_INFO.search(text)
        if m:
            _version(col, "deepspeed", m.group("ver"), line, RUNTIME)
        m = _AVAILABLE.search(text)
        if m:
            _version(col, "torch", m.group("ver"), line, RUNTIME - 2)
        m = _LF_BANNER.search(text)
        if m:
            _version(col, "llamafactory", m.group("ver"), line, RUNTIME)
    if "__version__" in text:
        m = _DUNDER.search(text)
        if m:
            _version(col, m.group("pkg"), m.group("ver"), line, RUNTIME - 1)
    if "==" in text:
        for m in ce.finditer(_PIN, text):
            _version(col, m.group("pkg"), m.group("ver"), line, RUNTIME - 2 if text.startswith("[pip") else CONFIG)
    if text.startswith("[conda]"):
        m = _CONDA.match(text)
        if m:
            _version(col, m.group("pkg"), m.group("ver"), line, RUNTIME - 3)
    if "-" in text and ("whl" in low or "installed" in low or "collected" in low or "downloading" in low):
        for m in ce.finditer(_WHEEL, text):
            _version(col, m.group("pkg"), m.group("ver"), line, LAUNCH)
    if "requirement already" in low:
        m = _REQ.search(text)
        if m:
            _version(col, m.group("pkg"), m.group("ver"), line, CONFIG)
    if _COLON_WORDS.intersection(words):
        for m in ce.finditer(_COLON, text):
            _version(col, m.group("pkg"), m.group("ver"), line, CONFIG - 2)
    if text[:1].isalpha() and "  " in text:
        m = _PIP_LIST.match(text)
        if m:
            _version(col, m.group("pkg"), m.group("ver"), line, CONFIG)
    if "packages/" in text:
        m = _PYPATH.search(text)
        if m:
            col.set("python_version", m.group("ver"), line, WEAK)
    if "cuda" in low:
        m = _CUDA_BUILD.match(text)
        if m and clean_version(m.group("ver")):
            if m.group("what") == "CUDA":
                col.set("cuda_version", clean_version(m.group("ver")), line, RUNTIME)
            else:
                col.set("accelerator", "rocm", line, RUNTIME)
        m = _CUDA_MISC.search(text)
        if m:
            if m.group("smi"):
                col.set("cuda_version", m.group("smi"), line, WEAK + 5)
            else:
                col.set("cuda_version", m.group("nvcc") or m.group("tk"), line, LAUNCH)


def _ds_report_row(col: Collector, key: str, value: str, line: int) -> bool:
    """ds_report rows share the dotted layout of DeepSpeed's config dump; True if one."""
    k = key.lower()
    if k not in _DS_REPORT_KEYS and not k.startswith("deepspeed wheel compiled"):
        return False
    if k == "torch version":
        _version(col, "torch", value.split()[0], line, RUNTIME)
    elif k == "deepspeed info":
        _version(col, "deepspeed", value.split(",")[0], line, RUNTIME)
    elif k == "torch cuda version":
        col.set("cuda_version", clean_version(value.split()[0]), line, RUNTIME)
    elif k == "torch hip version" and clean_version(value.split()[0]):
        col.set("accelerator", "rocm", line, RUNTIME)
    elif k == "nvcc version":
        col.set("cuda_version", clean_version(value.split()[0]), line, LAUNCH)
    elif k in ("torch_npu version", "torch_npu install path"):
        col.set("accelerator", "npu", line, RUNTIME)
    elif k.startswith("deepspeed wheel compiled"):
        # what the wheel was built against, not what runs: only a fallback
        m = re.search(r"torch (\d+\.\d+)", value)
        if m:
            col.set("torch_version", m.group(1), line, WEAK + 5)
    return True


def _pip_show(col: Collector, text: str, line: int, state: dict) -> None:
    """``pip show torch``: "Name: torch" then "Version: 2.1.2" on the next line."""
    if text.startswith("Name: "):
        m = _PIP_SHOW.match(text)
        state["pip_name"] = (m.group("pkg").lower(), line) if m else None
    elif text.startswith("Version: ") and state.get("pip_name"):
        pkg, at = state.pop("pip_name")
        if line - at <= 2:
            _version(col, pkg, text[9:].strip(), line, CONFIG)


_DS_REPORT_KEYS = {"torch version", "deepspeed info", "torch cuda version", "torch hip version", "nvcc version",
                   "torch_npu version", "torch_npu install path", "torch install path", "deepspeed install path",
                   "ascend_cann version", "shared memory (/dev/shm) size"}


# -- hardware -------------------------------------------------------------------------

_GPU_WORD = re.compile(r"NVIDIA|Tesla|GeForce|Quadro|TITAN|RTX|GTX|\b[AHBLVTPK]\d{1,4}\b|A100|H100|H200|H800|A800|AMD|Radeon|Instinct|MI\d{3}|Ascend|Gaudi", re.I)
_GPU_LIST = re.compile(r"^\s{0,8}GPU (?P<idx>\d{1,3}(?:,\d{1,3}){0,63}): (?P<name>[^\n(]{3,80}?)\s*(?:\(UUID[^)]*\))?\s*$")
_SMI_ROW = re.compile(r"^\|\s+(?P<idx>\d{1,3})\s+(?P<name>\S[^|]{1,60}?)\s+(?:On|Off)\s+\|\s+[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d")
_GPU_TYPE = re.compile(r"^[\s\-*]{0,6}(?:GPU type|GPU models and configuration): (?P<name>[^\n]{3,80}?)\s*$")
_DEVPROPS = re.compile(r"name='(?P<name>[^']{3,80})', major=(?P<maj>\d{1,2}), minor=(?P<min>\d{1,2}), total_memory=(?P<mem>\d{1,9})MB")
_CAPABILITY = re.compile(
    r"(?:Your (?P<n1>[^\n]{3,60}?) GPU has compute capability"
    r"|(?P<n2>(?:NVIDIA|Tesla|GeForce|Quadro|TITAN) [^\n]{2,60}?) with CUDA capability sm_(?P<sm>\d{2,3})"
    r"|your device is of CUDA capability|Found GPU\d{1,3} (?P<n3>[^\n]{3,60}?) which is of cuda capability)\s*(?P<cc>\d{1,2}\.\d)?")
_UNSLOTH = re.compile(r"GPU: (?P<name>[^\n]{3,60}?)\. Max memory: (?P<mem>\d{1,4}(?:\.\d{1,4})?) ?GB|CUDA = (?P<cc>\d{1,2}\.\d)\. CUDA Toolkit")
_LF_GPU = re.compile(r"^[\s\-*]{0,6}GPU (?:number: (?P<n>\d{1,4})|memory: (?P<mem>\d{1,5}(?:\.\d{1,4})?) ?GB)")
_NAME_GB = re.compile(r"(?<![\d.])(\d{1,3})\s?GB\b", re.I)
_ACCEL_SET = re.compile(r"Setting ds_accelerator to (?P<acc>\w+)|PyTorch accelerator: (?P<acc2>\w+)|PyTorch (?P<acc3>NPU|XPU|MLU) available: True")
_VISIBLE = re.compile(r"(?P<ds>Setting )?CUDA_VISIBLE_DEVICES=(?P<ids>\d{1,3}(?:,\d{1,3}){0,255})\b")
# (needle, accelerator, priority); needles without punctuation must be whole words
_ACCEL_HINTS = (
    ("torch_npu", "npu", EXECUTED), ("ascend", "npu", CONFIG), ("npu:", "npu", CONFIG),
    ("torch_xla", "xla", EXECUTED), ("xla:", "xla", CONFIG), ("intel_extension_for_pytorch", "xpu", EXECUTED),
    ("/rocm", "rocm", CONFIG), ("amdsmi", "rocm", CONFIG), ("hip error", "rocm", RUNTIME),
    ("mps backend", "mps", RUNTIME), ("device='mps'", "mps", CONFIG), ("cuda:", "cuda", WEAK),
)
_ACCEL_WORDS = frozenset(n for n, _a, _p in _ACCEL_HINTS if n.isidentifier())
_ACCEL_SUBSTRINGS = tuple(n for n, _a, _p in _ACCEL_HINTS if not n.isidentifier())
_BACKEND_ACCEL = {"CUDA": "cuda", "HIP": "rocm", "NPU": "npu", "XPU": "xpu", "MPS": "mps", "XLA": "xla",
                  "MLU": "mlu", "GCU": "gcu", "MUSA": "musa"}


def _gpu_name(col: Collector, name: str, line: int, prio: int) -> None:
    name = name.strip().rstrip(".")
    if not _GPU_WORD.search(name) or len(name) > 80:
        return
    if col.set("gpu_name", name, line, prio):
        m = _NAME_GB.search(name)
        if m:  # "A100-SXM4-80GB": the marketing size is the GiB figure nvidia-smi shows
            col.set("gpu_capacity_bytes", int(m.group(1)) * 2**30, line, NAME_HINT)
        if re.search(r"NVIDIA|Tesla|GeForce|Quadro|RTX|GTX", name, re.I):
            col.set("accelerator", "cuda", line, NAME_HINT)


def _hardware(col: Collector, text: str, low: str, line: int, gpu_ids: dict, words: set) -> None:
    if "gpu" in low:
        m = _GPU_LIST.match(text)
        if m:
            _gpu_name(col, m.group("name"), line, RUNTIME)
            if _GPU_WORD.search(m.group("name")):
                gpu_ids.setdefault("list", [set(), line])[0].update(m.group("idx").split(","))
        m = _GPU_TYPE.match(text)
        if m:
            _gpu_name(col, re.sub(r"^GPU \d+: ", "", m.group("name")), line, RUNTIME)
        m = _LF_GPU.match(text)
        if m and m.group("n"):
            col.set("gpu_count", int(m.group("n")), line, RUNTIME)
        elif m:
            col.set("gpu_capacity_bytes", int(float(m.group("mem")) * 2**30), line, RUNTIME - 5)
    if text.startswith("|"):
        m = _SMI_ROW.match(text)
        if m:
            truncated = m.group("name").endswith("...")
            _gpu_name(col, m.group("name").rstrip("."), line, RUNTIME - (10 if truncated else 3))
            gpu_ids.setdefault("smi", [set(), line])[0].add(m.group("idx"))
    if "name='" in text:
        m = _DEVPROPS.search(text)
        if m:
            _gpu_name(col, m.group("name"), line, RUNTIME)
            col.set("compute_capability", f"{m.group('maj')}.{m.group('min')}", line, RUNTIME)
            col.set("gpu_capacity_bytes", int(m.group("mem")) * 2**20, line, RUNTIME)
    if "capability" in low:
        m = _CAPABILITY.search(text)
        if m:
            name = m.group("n1") or m.group("n2") or m.group("n3")
            if name:
                _gpu_name(col, name.replace("NVIDIA GPU ", "").strip(), line, CONFIG)
            cc = m.group("cc") or (f"{m.group('sm')[:-1]}.{m.group('sm')[-1]}" if m.group("sm") else None)
            col.set("compute_capability", cc, line, RUNTIME)
    if "max memory:" in low or "cuda toolkit" in low:
        m = _UNSLOTH.search(text)
        if m and m.group("name"):
            _gpu_name(col, m.group("name"), line, RUNTIME)
            col.set("gpu_capacity_bytes", int(float(m.group("mem")) * 2**30), line, RUNTIME - 5)
        elif m:
            col.set("compute_capability", m.group("cc"), line, RUNTIME)
    if "accelerator" in low or "available: true" in low:
        m = _ACCEL_SET.search(text)
        if m:
            acc = (m.group("acc") or m.group("acc2") or m.group("acc3") or "").lower()
            if acc in ("cuda", "npu", "xpu", "mps", "cpu", "xla"):
                # DeepSpeed says "cuda" on ROCm builds too, so ROCm evidence may override it
                col.set("accelerator", acc, line, CONFIG if acc == "cuda" else RUNTIME)
    if "cuda_visible_devices=" in low:
        m = _VISIBLE.search(text)
        if m:
            col.set("gpu_count", len(m.group("ids").split(",")), line, RUNTIME - 5 if m.group("ds") else NAME_HINT)
    if _ACCEL_WORDS.isdisjoint(words) and not any(n in low for n in _ACCEL_SUBSTRINGS):
        return
    for needle, acc, prio in _ACCEL_HINTS:
        if needle in words if needle.isidentifier() else needle in low:
            col.set("accelerator", acc, line, prio)


# -- world size -----------------------------------------------------------------------

_WORLD = re.compile(
    r"dist_world_size=(?P<dist>\d{1,7})|WORLD INFO DICT: (?P<dict>\{[^\n]{0,20000}\})"
    r"|nnodes=(?P<nn>\d{1,5}), num_local_procs=(?P<nl>\d{1,5})|--world_info=(?P<b64>[A-Za-z0-9+/=]{8,20000})"
    r"|(?:^|, |using )world[ _]size: (?P<ws>\d{1,7})|^Num processes: (?P<np>\d{1,7})"
    r"|global_world_sizes=\[(?P<gws>\d{1,7})|\bn[Rr]anks (?P<nr>\d{1,7})(?: nNodes (?P<nnodes>\d{1,5}))?"
    r"|\bWORLD_SIZE['\"]?\s*(?:=|:\s*|,\s*)['\"]?(?P<env>\d{1,7})\b"
    # xtuner and ms-swift launch through these environment variables
    r"|\bNPROC_PER_NODE=(?P<npn>\d{1,5})\b|\bNNODES=(?P<nnodes_env>\d{1,5})\b"
    # torchrun's worker group (group_world_size counts nodes) and the store-based barrier
    r"|\bgroup_world_size=(?P<gws_nodes>\d{1,5})\b|Completed store-based barrier for key:\S{1,80} with (?P<barrier>\d{1,7}) nodes"
    r"|\bmpirun\b[^\n]{0,200}?\s-n(?:p)? (?P<mpi>\d{1,6})\b")
_NCCL_CHANNEL = re.compile(r"NCCL INFO Channel \d+(?:/\d+)? : (?P<a>\d{1,6})\[[0-9a-fA-Fx]+\] -> (?P<b>\d{1,6})\[")


def _hosts(col: Collector, mapping: dict, line: int, prio: int) -> None:
    if isinstance(mapping, dict) and mapping and all(isinstance(v, list) for v in mapping.values()):
        col.set("world_size", sum(len(v) for v in mapping.values()), line, prio)
        col.set("num_nodes", len(mapping), line, prio)


def _world(col: Collector, text: str, low: str, line: int, nccl: list) -> None:
    if "nccl info channel" in low:
        m = _NCCL_CHANNEL.search(text)
        if m:  # every rank sits on the ring, so the highest one seen is world size - 1
            top = max(int(m.group("a")), int(m.group("b")))
            if top + 1 > nccl[0]:
                nccl[0], nccl[1] = top + 1, line
        return
    if not ("world" in low or "nnodes" in low or "ranks" in low or "num processes" in low or "nproc_per_node" in low
            or "barrier" in low or "mpirun" in low):
        return
    for m in ce.finditer(_WORLD, text)[:3]:
        g = m.groupdict()
        if g["dist"]:
            col.set("world_size", int(g["dist"]), line, RUNTIME)
        elif g["dict"]:
            try:
                _hosts(col, ast.literal_eval(g["dict"]), line, RUNTIME)
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                pass
        elif g["nn"]:
            col.set("world_size", int(g["nn"]) * int(g["nl"]), line, RUNTIME)
            col.set("num_nodes", int(g["nn"]), line, RUNTIME)
        elif g["b64"]:
            try:
                _hosts(col, json.loads(base64.b64decode(g["b64"], validate=False)[:20000]), line, RUNTIME - 1)
            except (binascii.Error, ValueError, UnicodeDecodeError):
                pass
        elif g["ws"] or g["np"] or g["gws"]:
            col.set("world_size", int(g["ws"] or g["np"] or g["gws"]), line, RUNTIME)
        elif g["nr"]:
            col.set("world_size", int(g["nr"]), line, RUNTIME - 2)
            if g["nnodes"]:
                col.set("num_nodes", int(g["nnodes"]), line, RUNTIME - 2)
        elif g["env"]:
            col.set("world_size", int(g["env"]), line, CONFIG)
        elif g["npn"]:
            col.part("nproc_per_node", int(g["npn"]), line, LAUNCH)
        elif g["nnodes_env"]:
            col.part("nnodes", int(g["nnodes_env"]), line, LAUNCH)
        elif g["gws_nodes"]:
            col.set("num_nodes", int(g["gws_nodes"]), line, RUNTIME - 2)
        elif g["barrier"]:
            col.set("world_size", int(g["barrier"]), line, RUNTIME - 2)
        elif g["mpi"]:
            col.set("world_size", int(g["mpi"]), line, LAUNCH)


# -- DeepSpeed engine, Trainer banner, other runtime lines -----------------------------

_DS_CREATING = re.compile(r"Creating (?:(?P<dt>torch\.\w+|fp16|bf16|fp32) )?ZeRO stage (?P<st>\d) optimizer")
# Only ZeRO-3 runs these (DeepSpeedZeRoOffload is stage 3's parameter manager whether or not
# anything is offloaded; "Creating ZeRO Offload" is stage 3 with no optimizer, e.g. a
# DPO reference model), so they prove stage 3 but say nothing about offload.
_ZERO3_MARKS = ("deepspeedzerooffload initialize", "creating zero offload",
                "parameter offload: total persistent parameters", "stage 3 initialize beginning",
                "zero stage 3 param partitioning", "finished initializing model", "prefetch bucket size",
                "deepspeedzerooptimizer_stage3", "/deepspeed/runtime/zero/stage3.py",
                "/deepspeed/runtime/zero/partition_parameters.py", "/deepspeed/runtime/zero/parameter_offload.py",
                "_zero3_consolidated_16bit_state_dict")
_RUNTIME_MISC = re.compile(
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
_STATE_DICT_LINE = re.compile(r"(?:FSDP|fsdp|state_dict_type|StateDictType)[^\n]{0,200}?\b(FULL|SHARDED|LOCAL)_STATE_DICT")
_ALLOC_CONF = re.compile(r"(?:PYTORCH_(?:CUDA_|HIP_)?ALLOC_CONF['\"]?\s*(?:=|:|\]\s*=|,)\s*['\"]?|Caching allocator config: )(?P<v>[a-z_]+:[\w.]+(?:,[a-z_]+:[\w.]+){0,8})")
_LF_WORKFLOW = re.compile(r"/(?:llamafactory|llmtuner)/train/(?P<st>pt|sft|rm|ppo|dpo|kto)/|\brun_(?P<st2>pt|sft|rm|ppo|dpo|kto)\(")
_TRL_CLASS = re.compile(r"(?<![\w])(?P<c>DPO|GRPO|KTO|PPO|PPOv2|ORPO|Reward|SFT|OnlineDPO)Trainer\b|/trl/trainer/(?P<f>dpo|grpo|kto|ppo|orpo|reward|sft)_trainer\.py")
_TRL_STAGE = {"dpo": "dpo", "grpo": "grpo", "kto": "kto", "ppo": "ppo", "ppov2": "ppo", "orpo": "orpo",
              "reward": "rm", "sft": "sft", "onlinedpo": "dpo"}


# DeepSpeedCPUAdam only runs on optimizer states kept in host memory (ZeRO-Offload);
# transformers and accelerate pick it when offload_optimizer.device is cpu
_CPU_ADAM = ("loading extension module cpu_adam", "time to load cpu_adam op", "/deepspeed/ops/adam/cpu_adam.py")
_CPU_ADAM_BANNER = re.compile(r"Adam Optimizer #\d+ is created with \w+ arithmetic capability")


def _deepspeed(col: Collector, text: str, low: str, line: int, raw_low: str) -> None:
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
        if any(mark in low for mark in _ZERO3_MARKS):
            col.set("zero_stage", 3, line, EXECUTED)
        elif "/deepspeed/runtime/zero/stage_1_and_2.py" in low:
            col.set("zero_stage", 2, line, NAME_HINT - 3)  # stage 1 or 2; 2 is far more common
        elif "/deepspeed/runtime/zero/stage2.py" in low:  # DeepSpeed <= 0.3 file names
            col.set("zero_stage", 2, line, EXECUTED)
        elif "/deepspeed/runtime/zero/stage1.py" in low:
            col.set("zero_stage", 1, line, EXECUTED)


# a line can only match _RUNTIME_MISC if it holds one of these words
_RUNTIME_WORDS = frozenset({"offload", "optimizer", "dtype", "precision", "fp16", "bf16", "training", "environment",
                            "checkpointing", "faster", "trainable", "initializing", "instantaneous",
                            "accumulation", "adjusted"})


def _runtime_misc(col: Collector, text: str, low: str, line: int, banner: dict, words: set) -> None:
    matches = ce.finditer(_RUNTIME_MISC, text)[:4] if _RUNTIME_WORDS.intersection(words) else ()
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
            ce._h_mixed_precision(col, g["mpt"], line, RUNTIME)
        elif "ufp" in g:
            col.set("mixed_precision", "fp16" if g["ufp"] == "True" else None, line, RUNTIME)
        elif "b16" in g:  # prints training_args.fp16 only; bf16 runs also say False
            col.set("mixed_precision", "fp16" if g["b16"] == "True" else "fp32", line, WEAK + 5)
        elif "dist" in g:
            ce._h_distributed_type(col, g["dist"], line, RUNTIME)
        elif "gc" in g:
            col.set("gradient_checkpointing", True, line, RUNTIME)
        elif "axbf16" in g:  # axolotl resolving "bf16: auto"
            col.set("mixed_precision", "bf16", line, RUNTIME)
        elif "attn" in g:  # LLaMA-Factory says which kernel it picked
            col.set("attn_implementation", "fa2" if g["attn"].startswith("Flash") else "sdpa", line, RUNTIME)
        elif "tp" in g:
            col.set("trainable_params", ce.as_int(g["tp"]), line, RUNTIME)
            col.set("total_params", ce.as_int(g["ap"]), line, RUNTIME)
        elif "ntp" in g:
            col.set("trainable_params", ce.as_int(g["ntp"]), line, RUNTIME - 1)
        elif "elems" in g:
            # zero.Init's num_params counts tensors; num_elems (in billions) is the size
            col.set("total_params", int(float(g["elems"]) * 1e9), line, NAME_HINT)
        elif "ibs" in g:
            col.set("micro_batch_size", ce.as_int(g["ibs"]), line, RUNTIME)
            banner["b"] = ce.as_int(g["ibs"])
        elif "gas" in g:
            col.set("gradient_accumulation_steps", int(g["gas"]), line, RUNTIME)
            banner["g"] = int(g["gas"])
        elif "tbs" in g:
            banner["t"], banner["line"] = ce.as_int(g["tbs"]), line
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
)
_FW_REGEX = (
    # LLaMA-Factory's own log formats: >= 0.9.1 "[INFO|2025-01-01 12:00:00] x:12 >> " and
    # <= 0.9.0 "06/01/2024 12:00:00 - INFO - llamafactory.model.loader - "
    ("llamafactory", re.compile(r"\[[A-Z]+\|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] [\w./-]+:\d+ >> "), 2),
    ("megatron", re.compile(r"[/\\][^/\\\s\"']{0,40}megatron[^/\\\s\"']{0,40}[/\\]", re.I), 2),
    ("trl", re.compile(r"(?<![\w])(?:DPO|GRPO|KTO|PPO|PPOv2|ORPO|CPO|Reward|SFT|OnlineDPO|RLOO)Trainer\b"), 1),
)
# Outermost first: a LLaMA-Factory run also shows TRL, transformers and DeepSpeed frames,
# an HF Trainer run shows accelerate and DeepSpeed, so the first framework with enough
# evidence in this order is the one the user drives.
FRAMEWORK_ORDER = ("llamafactory", "axolotl", "ms-swift", "xtuner", "llama-recipes", "torchtune",
                   "unsloth", "megatron", "other", "trl", "hf-trainer", "accelerate", "deepspeed",
                   "fsdp", "plain-pytorch")


def _trigger(needle: str) -> str:
    """The longest whole word of a needle: a line holding the needle holds this word."""
    words = [w.strip("_") for w in needle.translate(ce._WORD_TABLE).split()]
    return max(words, key=len) if words else ""


# needles grouped by trigger word, so a line is only searched for the needles whose word
# it contains (a set intersection instead of a hundred substring searches)
_BY_TRIGGER: dict[str, list] = {}
for _fw, _needle, _weight in _FW_NEEDLES:
    _BY_TRIGGER.setdefault(_trigger(_needle), []).append((_needle, _fw, _weight))
_ALWAYS = _BY_TRIGGER.pop("", [])
_TRIGGERS = frozenset(_BY_TRIGGER)
_SATURATED = 40  # evidence beyond this changes no decision


def _framework_evidence(raw_low: str, raw: str, line: int, score: dict, words: set) -> None:
    hits = [_BY_TRIGGER[w] for w in _TRIGGERS.intersection(words)]
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


def _choose_framework(ctx: ParseContext, col: Collector, score: dict) -> None:
    # XLA statuses come from torch_xla and from JAX alike: JAX's frames or exception say which
    jax = any("/jax/" in (fr.file or "") or "/flax/" in (fr.file or "") for fr in ctx.all_frames) or any(
        (e.exception or "").startswith(("jaxlib.", "jax.")) for e in ctx.facts.oom_events)
    events = [e for e in ctx.facts.oom_events
              if e.kind not in ("tensorflow", "host_oom_killer", "cpu_allocator", "dataloader_killed")
              and not (e.kind == "xla" and jax)]
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


# -- assembly -------------------------------------------------------------------------

_FRAME_LINE = re.compile(r"^\s*File \"[^\"]{1,1000}\", line \d+")
_IPY_CODE = re.compile(r"^\s*(?:-+>\s*)?\d{1,6}\s{1,}\S")


def _code_lines(lines) -> set:
    """Indices of traceback code lines (the line under ``File "...", line N``)."""
    out = set()
    after_frame = False
    for i, ln in enumerate(lines):
        t = ln.text
        if after_frame and t[:1].isspace():
            out.add(i)
        elif i and (i - 1 in out or "Traceback" in lines[i - 1].text or ".py in " in lines[i - 1].text) \
                and _IPY_CODE.match(t):
            out.add(i)
        after_frame = 'File "' in t and bool(_FRAME_LINE.match(t))
    return out


def parse(ctx: ParseContext) -> None:
    col = Collector(ctx.facts.environment)
    tracker = ce.BlockTracker(col)
    code = _code_lines(ctx.lines)
    gpu_ids: dict = {}
    banner: dict = {}
    nccl = [0, 0]
    score: dict = {}
    seen: set = set()
    for i, ln in enumerate(ctx.lines):
        text = ln.text if len(ln.text) <= 20000 else ln.text[:20000]
        if not text.strip():
            continue
        no = ln.no
        raw = ln.raw or text
        if i not in code and (tracker.stack or "{" in text):
            tracker.feed(text, no)  # JSON blocks need every line, repeated or not
        if any(w in text for w in _PROGRESS_WORDS) and _PROGRESS_NOISE.match(text):
            continue  # per-step progress (bars, loss dicts, timers): most of a long log, no settings
        # A line seen before (another rank's copy, a repeated warning) can change nothing:
        # the first copy already set whatever it could, and equals never replace it.
        key = raw if ln.host else text
        if key in seen:
            continue
        if len(seen) < 200_000:
            seen.add(key)
        low = text.lower()
        raw_low = raw.lower() if raw is not text else low
        words = ce.words_of(low)
        # the prefixes the normaliser removed (logger names) count as framework evidence
        raw_words = words if len(raw_low) == len(low) else words | ce.words_of(raw_low)
        _framework_evidence(raw_low, raw, no, score, raw_words)
        _deepspeed(col, text, low, no, raw_low)
        if i in code:
            # code is not configuration, but the path-like evidence above still counts
            if "run_" in low or "trainer" in low:
                _runtime_misc(col, text, low, no, banner, words)
            continue
        _versions(col, text, low, no, words)
        if text.startswith(("Name: ", "Version: ")):
            _pip_show(col, text, no, banner)
        _hardware(col, text, low, no, gpu_ids, words)
        _world(col, text, low, no, nccl)
        _runtime_misc(col, text, low, no, banner, words)
        if ce.scan_dotted(col, text, no, lambda k, v, _no=no: _ds_report_row(col, k, v, _no)):
            continue
        if ln.host:
            _yaml_key_taken_as_host(col, raw, text, no)
        if ce.may_hold_setting(text, words):
            ce.scan_yaml(col, text, no)
            ce.scan_repr(col, text, no)
            ce.scan_cli(col, text, no)
        if "- " in text and text.strip().lower() in ("- full_shard", "- shard_grad_op", "- hybrid_shard"):
            col.set("fsdp", True, no, CONFIG)
        if ".py" in low and "zero" in low:
            _script_name_stage(col, text, no)
    _finish(ctx, col, gpu_ids, banner, nccl, score)


_PROGRESS_NOISE = re.compile(
    r"\s*(?:\{'(?:loss|eval_loss|train_loss|grad_norm|learning_rate)'|[^|]{0,80}\d+%\|[^|]*\|\s*\d+/\d+ \["
    r"|rank=\d+ time \(ms\)|step=\d+, skipped=\d+|(?:Epoch|Iter)\(train\)\s*\[)")
# every match of _PROGRESS_NOISE holds one of these (a substring test costs far less)
_PROGRESS_WORDS = ("{'", "%|", "rank=", "step=", "(train)")


_KEY_BEFORE = re.compile(r"(?P<k>[A-Za-z_][\w.-]{0,60}):\s+$")


def _yaml_key_taken_as_host(col: Collector, raw: str, text: str, line: int) -> None:
    """``bf16: true`` looks like a pdsh ``host: `` prefix to the normaliser; recover the key."""
    at = raw.rfind(text.strip()) if text.strip() else -1
    if at <= 0:
        return
    before = raw[max(0, at - 80):at]
    if not before.rstrip().endswith(":"):
        return  # _KEY_BEFORE ends in ":" and whitespace
    m = _KEY_BEFORE.search(before)
    if m and m.group("k").lower().replace("-", "_") in ce.KEYS:
        ce.scan_yaml(col, f"{m.group('k')}: {text.strip()}", line)


_SCRIPT_ZERO = re.compile(r"[\w./-]{0,200}?zero[_-]?[0-3][\w-]{0,40}\.py")


def _script_name_stage(col: Collector, text: str, line: int) -> None:
    """``train_ds_zero3.py``: a script named after its ZeRO stage is a (weak) hint."""
    for m in ce.finditer(_SCRIPT_ZERO, text)[:2]:
        stage = ce.zero_stage_from_name(m.group(0)[:-3], allow_stage_word=False)
        if stage is not None:
            col.set("zero_stage", stage, line, WEAK + 5)


def _finish(ctx: ParseContext, col: Collector, gpu_ids: dict, banner: dict, nccl: list, score: dict) -> None:
    env, parts = col.env, col.parts
    # precision from bf16 / fp16 flags: either true decides; both explicitly false is fp32
    for kind in ("bf16", "fp16"):
        got = parts.get(kind)
        if got and got[0] is True:
            col.set("mixed_precision", kind, got[1], got[2])
            break
    else:
        b, f = parts.get("bf16"), parts.get("fp16")
        if b and f and b[0] is False and f[0] is False:
            col.set("mixed_precision", "fp32", max(b[1], f[1]), min(b[2], f[2]) - 10)
    # LLaMA-Factory QLoRA is LoRA on a quantized model
    if env.finetuning_type == "lora" and env.quantization_bit in (2, 3, 4, 8):
        env.finetuning_type = "qlora"
    # LLaMA-Factory runs ORPO and SimPO as stage dpo with another pref_loss (no reference model)
    pref = parts.get("pref_loss")
    if env.stage == "dpo" and pref and pref[0] in ("orpo", "simpo"):
        env.stage, env.sources["stage"] = pref[0], pref[1]
    # accelerate's deepspeed_config gives the two offload devices as separate keys
    opt, par = parts.get("offload_optimizer"), parts.get("offload_param")
    if opt or par:
        line = max(p[1] for p in (opt, par) if p)
        col.set("offload", ce.offload_of(opt[0] if opt else None, par[0] if par else None), line, CONFIG)
    # launchers: torchrun --nproc_per_node x --nnodes, deepspeed --num_gpus x --num_nodes
    for per, nodes in (("nproc_per_node", "nnodes"), ("num_gpus", "num_nodes")):
        p, n = parts.get(per), parts.get(nodes)
        if p:
            col.set("world_size", p[0] * (n[0] if n else 1), p[1], LAUNCH)
            if n:
                col.set("num_nodes", n[0], n[1], LAUNCH)
    # HF banner: total = per-device batch x accumulation x world size
    t, b, g = banner.get("t"), banner.get("dp") or banner.get("b"), banner.get("g")
    if t and b and g and t % (b * g) == 0:
        col.set("world_size", t // (b * g), banner["line"], RUNTIME - 4)
    if nccl[0]:
        col.set("world_size", nccl[0], nccl[1], WEAK)
    for key in ("list", "smi"):
        if key in gpu_ids:
            col.set("gpu_count", len(gpu_ids[key][0]), gpu_ids[key][1], RUNTIME - (0 if key == "list" else 1))
    tv = parts.get("transformers_version_json")
    if tv:
        col.set("transformers_version", clean_version(tv[0]), tv[1], CONFIG - 5)
    # capacity: nvidia-smi's total, else the allocator's "total capacity"
    for s in ctx.facts.memory_samples:
        if s.source == "nvidia_smi" and s.total_bytes and s.pid is None:
            col.set("gpu_capacity_bytes", s.total_bytes, s.line, RUNTIME)
            break
    for ev in ctx.facts.oom_events:
        if ev.total_capacity_bytes:
            col.set("gpu_capacity_bytes", ev.total_capacity_bytes, ev.line, LAUNCH)
            break
    for ev in ctx.facts.oom_events:
        acc = _BACKEND_ACCEL.get((ev.backend or "").upper())
        if acc:
            col.set("accelerator", acc, ev.line, EXECUTED if acc == "cuda" else RUNTIME + 1)
            break
    _choose_framework(ctx, col, score)
