"""Versions and banners: collect_env, ds_report, pip/conda lists, wheel names, start-up lines."""
from __future__ import annotations

from typing import Optional

import regex as re
from packaging.version import InvalidVersion, Version

from ...read.patterns import lazy
from .collector import CONFIG, LAUNCH, RUNTIME, WEAK, Collector
from .forms import finditer

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
_ENV_ROW = lazy(
    r"^[\s\-*]{0,6}`?(?P<pkg>[A-Za-z][\w-]{0,30}(?: [A-Za-z][\w-]{0,20}){0,2})`?\s+[Vv]ersion"
    r"(?P<paren>\s*\([^)]{0,20}\))?\s*:\s*" + _V + r"(?:\s*\((?P<what>[^)]{1,20})\))?")
# "torch==2.1.0": a pin, a pip freeze row, a console script's distribution (_ENTRY_POINT)
_PINNED = (r"(?P<pkg>torch|pytorch|deepspeed|transformers|accelerate|peft|trl|llamafactory|axolotl|xtuner|ms-swift|unsloth"
           r"|torchtune|llama-recipes|llama-cookbook|megatron-core)==" + _V)
_PIN = lazy(r"(?<![\w.-])" + _PINNED)
_CONDA = lazy(r"^\[conda\]\s+(?P<pkg>torch|pytorch|deepspeed|transformers|accelerate|peft|trl)\s+" + _V + r"\s")
_WHEEL = lazy(r"(?<![\w.-])(?P<pkg>torch|deepspeed|transformers|accelerate|peft|trl|llamafactory|axolotl|xtuner|ms_swift|unsloth|torchtune)-" + _V + r"(?=-cp|-py|\.tar|\s|$|,)")
_REQ = lazy(r"Requirement already satisfied: (?P<pkg>torch|deepspeed|transformers|accelerate|peft|trl)\b[^(\n]{0,300}\(" + _V + r"\)")
# "PyTorch: 2.1.2+cu121" (mmengine env), "Pytorch: 2.4.0+cu121." / "Transformers = 4.44.2." (unsloth),
# "torch: 2.1.2" (user prints); a full x.y.z is required, "torch: 1.5 GB" is not a version
_COLON = lazy(r"(?:^|\s)(?P<pkg>PyTorch|Pytorch|Python|Transformers|torch)\s*[:=]\s+(?=\d{1,4}\.\d{1,4}\.\d)" + _V)
# ... and without the colon where the version carries its build's tag, which no size or count
# does ("torch 2.7.0.dev20250310+cu124 cuda 12.4", a user's print of torch.__version__; a
# banner's "YOLOR 2023-5-30 torch 2.1.0+cu121 CUDA:0"), but not the build an extension was
# compiled against, which a mismatch report names before the one running ("xFormers was built
# for: / PyTorch 1.13.1+cu117 with CUDA 1107 (you have 2.0.0+cu118)")
_TAGGED = lazy(r"(?:^|\s)(?<!for: )(?P<pkg>PyTorch|Pytorch|torch)\s+(?=\d{1,4}\.\d{1,4}\.\d[\w.]{0,30}\+(?:cu\d|cpu|rocm|xpu))"
               + _V + r"(?![^\n]{0,80}\byou have\b)")
COLON_WORDS = frozenset({"pytorch", "python", "transformers", "torch"})
# `pip list` / `conda list` rows: "torch     2.1.2" or "pytorch   2.1.2   py3.10_cuda12.1_0   pytorch"
_PIP_LIST = lazy(r"^(?P<pkg>torch|pytorch|deepspeed|transformers|accelerate|peft|trl|llamafactory|axolotl|xtuner"
                       r"|ms-swift|unsloth|torchtune|llama-recipes|llama-cookbook|megatron-core)\s{2,}" + _V
                       + r"(?:\s{2,}\S{1,80}){0,3}\s*$")
_PIP_SHOW = lazy(r"^Name: (?P<pkg>[\w.-]{1,40})\s*$")
_DS_INFO = lazy(r"DeepSpeed info: version=" + _V)
_AVAILABLE = lazy(r"PyTorch version " + _V + r" available")  # HF datasets at import time
# user prints and some frameworks' start-up lines: "torch.__version__ = 2.1.0", "swift.__version__: 3.1.0"
_DUNDER = lazy(r"\b(?P<pkg>torch|deepspeed|transformers|accelerate|peft|trl|swift|xtuner|axolotl|llamafactory)"
                     r"\.__version__['\"]?\s*[:=]\s*['\"]?" + _V)
_LF_BANNER = lazy(r"LLaMA[- ]?Factory,? version " + _V, re.I)
# torch's ONNX exporter heads its diagnostics with torch's own version ("============= Diagnostic
# Run torch.onnx.export version 2.0.1+cu117 =============", torch/onnx/_internal/exporter context)
_ONNX_DIAGNOSTIC = lazy(r"Diagnostic Run torch\.onnx\.export version " + _V)
_PYPATH = lazy(r"python(?P<ver>3\.\d{1,2})/(?:site|dist)-packages/")
# an old PyTorch binary's source tree names its version in the C++ paths its errors print
# ("conda-bld/pytorch_1501972792122/work/pytorch-0.1.12/torch/lib/THC/...")
_SOURCE_TREE = lazy(r"/work/pytorch-(?P<ver>\d{1,2}\.\d{1,3}\.\d{1,3})/(?:torch|aten)/")
_CUDA_BUILD = lazy(r"^(?P<what>CUDA|ROCM|HIP) used to build PyTorch: " + _V)
_CUDA_MISC = lazy(r"CUDA Version: (?P<smi>\d+\.\d+)|Cuda compilation tools, release (?P<nvcc>\d+\.\d+)|CUDA Toolkit = (?P<tk>\d+\.\d+)")


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


# setuptools' console-script wrapper names the installed distribution it starts:
# "sys.exit(load_entry_point('torch==2.1.0a0+fe05266', 'console_scripts', 'torchrun')())"
_ENTRY_POINT = lazy(r"load_entry_point\(['\"]" + _PINNED + r"['\"]")


def entry_point(col: Collector, text: str, line: int) -> None:
    """The version in a console script's code line (a traceback's frame of ``torchrun``,
    ``deepspeed``, ``accelerate``): what is installed, not a setting."""
    m = _ENTRY_POINT.search(text)
    if m:
        _version(col, m.group("pkg"), m.group("ver"), line, RUNTIME - 2)


def versions(col: Collector, text: str, low: str, line: int, words: set) -> None:
    if "version" in low:
        m = _ENV_ROW.match(text)
        if m:
            pkg = m.group("pkg").lower()
            if pkg in ("cuda runtime", "cuda"):
                # (not "CUDA Version : 12.4" of nvidia-smi -q, in title case: the newest CUDA the
                # driver supports, not the toolkit in use)
                if "CUDA Version" not in m.group(0):
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
        m = _ONNX_DIAGNOSTIC.search(text) if "Diagnostic Run" in text else None
        if m:
            _version(col, "torch", m.group("ver"), line, RUNTIME)
    if "__version__" in text:
        m = _DUNDER.search(text)
        if m:
            _version(col, m.group("pkg"), m.group("ver"), line, RUNTIME - 1)
    if "==" in text:
        for m in finditer(_PIN, text):
            _version(col, m.group("pkg"), m.group("ver"), line, RUNTIME - 2 if text.startswith("[pip") else CONFIG)
    if text.startswith("[conda]"):
        m = _CONDA.match(text)
        if m:
            _version(col, m.group("pkg"), m.group("ver"), line, RUNTIME - 3)
    if "-" in text and ("whl" in low or "installed" in low or "collected" in low or "downloading" in low):
        for m in finditer(_WHEEL, text):
            _version(col, m.group("pkg"), m.group("ver"), line, LAUNCH)
    elif "python-" in low and "torch-" in low:
        # start-up banners that name the running versions as "Python-3.10.12 torch-2.2.1+cu121"
        # (Ultralytics, YOLOv5 and their forks)
        for m in finditer(_WHEEL, text):
            _version(col, m.group("pkg"), m.group("ver"), line, RUNTIME - 2)
    if "requirement already" in low:
        m = _REQ.search(text)
        if m:
            _version(col, m.group("pkg"), m.group("ver"), line, CONFIG)
    if COLON_WORDS.intersection(words):
        for m in finditer(_COLON, text):
            _version(col, m.group("pkg"), m.group("ver"), line, CONFIG - 2)
        if "+" in text:
            for m in finditer(_TAGGED, text):
                _version(col, m.group("pkg"), m.group("ver"), line, CONFIG - 2)
    if text[:1].isalpha() and "  " in text:
        m = _PIP_LIST.match(text)
        if m:
            _version(col, m.group("pkg"), m.group("ver"), line, CONFIG)
    if "packages/" in text:
        m = _PYPATH.search(text)
        if m:
            col.set("python_version", m.group("ver"), line, WEAK)
    if ".egg/" in text:
        # a package installed as an egg runs from a directory named like its wheel
        # (".../site-packages/torch-1.2.0-py3.6-linux-x86_64.egg/torch/nn/modules/module.py")
        for m in finditer(_WHEEL, text):
            _version(col, m.group("pkg"), m.group("ver"), line, RUNTIME - 2)
    if "/work/pytorch-" in text:
        m = _SOURCE_TREE.search(text)
        if m:
            _version(col, "torch", m.group("ver"), line, RUNTIME - 2)
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


def ds_report_row(col: Collector, key: str, value: str, line: int) -> bool:
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


def pip_show(col: Collector, text: str, line: int, state: dict) -> None:
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
