"""Hardware: GPU names and memory, accelerator kind, visible devices (nvidia-smi, banners)."""
from __future__ import annotations

import regex as re

from ...facts.sizes import to_bytes
from ...read.patterns import lazy
from .collector import CONFIG, EXECUTED, NAME_HINT, RUNTIME, WEAK, Collector

# -- hardware -------------------------------------------------------------------------

_GPU_WORD = lazy(r"NVIDIA|Tesla|GeForce|Quadro|TITAN|RTX|GTX|\b[AHBLVTPK]\d{1,4}\b|A100|H100|H200|H800|A800|AMD|Radeon|Instinct|MI\d{3}|Ascend|Gaudi", re.I)
_GPU_LIST = lazy(r"^\s{0,8}GPU (?P<idx>\d{1,3}(?:,\d{1,3}){0,63}): (?P<name>[^\n(]{3,80}?)\s*(?:\(UUID[^)]*\))?\s*$")
_SMI_ROW = lazy(r"^\|\s+(?P<idx>\d{1,3})\s+(?P<name>\S[^|]{1,60}?)\s+(?:On|Off)\s+\|\s+[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d")
_GPU_TYPE = lazy(r"^[\s\-*]{0,6}(?:GPU type|GPU models and configuration): (?P<name>[^\n]{3,80}?)\s*$")
_DEVPROPS = lazy(r"name='(?P<name>[^']{3,80})', major=(?P<maj>\d{1,2}), minor=(?P<min>\d{1,2}), total_memory=(?P<mem>\d{1,9})MB")
_CAPABILITY = lazy(
    r"(?:Your (?P<n1>[^\n]{3,60}?) GPU has compute capability"
    r"|(?P<n2>(?:NVIDIA|Tesla|GeForce|Quadro|TITAN) [^\n]{2,60}?) with CUDA capability sm_(?P<sm>\d{2,3})"
    r"|your device is of CUDA capability|Found GPU\d{1,3} (?P<n3>[^\n]{3,60}?) which is of cuda capability)\s*(?P<cc>\d{1,2}\.\d)?")
_UNSLOTH = lazy(r"GPU: (?P<name>[^\n]{3,60}?)\. Max memory: (?P<mem>\d{1,4}(?:\.\d{1,4})?) ?GB|CUDA = (?P<cc>\d{1,2}\.\d)\. CUDA Toolkit")
_LF_GPU = lazy(r"^[\s\-*]{0,6}GPU (?:number: (?P<n>\d{1,4})|memory: (?P<mem>\d{1,5}(?:\.\d{1,4})?) ?GB)")
_NAME_GB = lazy(r"(?<![\d.])(\d{1,3})\s?GB\b", re.I)
_ACCEL_SET = lazy(r"Setting ds_accelerator to (?P<acc>\w+)|PyTorch accelerator: (?P<acc2>\w+)|PyTorch (?P<acc3>NPU|XPU|MLU) available: True")
_VISIBLE = lazy(r"(?P<ds>Setting )?CUDA_VISIBLE_DEVICES=(?P<ids>\d{1,3}(?:,\d{1,3}){0,255})\b")
# (needle, accelerator, priority); needles without punctuation must be whole words
_ACCEL_HINTS = (
    ("torch_npu", "npu", EXECUTED), ("ascend", "npu", CONFIG), ("npu:", "npu", CONFIG),
    ("torch_xla", "xla", EXECUTED), ("xla:", "xla", CONFIG), ("intel_extension_for_pytorch", "xpu", EXECUTED),
    ("/rocm", "rocm", CONFIG), ("amdsmi", "rocm", CONFIG), ("hip error", "rocm", RUNTIME),
    ("mps backend", "mps", RUNTIME), ("device='mps'", "mps", CONFIG), ("cuda:", "cuda", WEAK),
)
ACCEL_WORDS = frozenset(n for n, _a, _p in _ACCEL_HINTS if n.isidentifier())
_ACCEL_SUBSTRINGS = tuple(n for n, _a, _p in _ACCEL_HINTS if not n.isidentifier())
BACKEND_ACCEL = {"CUDA": "cuda", "HIP": "rocm", "NPU": "npu", "XPU": "xpu", "MPS": "mps", "XLA": "xla",
                  "MLU": "mlu", "GCU": "gcu", "MUSA": "musa", "HPU": "hpu"}


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


# every line hardware() can use holds one of these (lower case): its tests below, in order
NEEDS = ("gpu", "|", "name='", "capability", "max memory:", "cuda toolkit", "accelerator", "available: true",
         "cuda_visible_devices=") + tuple(sorted(ACCEL_WORDS)) + _ACCEL_SUBSTRINGS


def hardware(col: Collector, text: str, low: str, line: int, gpu_ids: dict, words: set) -> None:
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
            col.set("gpu_capacity_bytes", to_bytes(m.group("mem"), "GiB"), line, RUNTIME - 5)
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
            col.set("gpu_capacity_bytes", to_bytes(m.group("mem"), "GiB"), line, RUNTIME - 5)
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
    if ACCEL_WORDS.isdisjoint(words) and not any(n in low for n in _ACCEL_SUBSTRINGS):
        return
    for needle, acc, prio in _ACCEL_HINTS:
        if needle in words if needle.isidentifier() else needle in low:
            col.set("accelerator", acc, line, prio)
