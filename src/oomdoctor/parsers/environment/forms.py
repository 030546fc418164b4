"""Line forms of echoed configuration: YAML, CLI flags, ``key=value`` reprs, dotted dumps.

Training jobs print their configuration in many shapes: LLaMA-Factory and axolotl YAML
(``cutoff_len: 4096``), launcher command lines (``--deepspeed ds_z3_config.json``, also as
Python lists ``'--nproc_per_node', '8'``), ``TrainingArguments(...)`` reprs
(``per_device_train_batch_size=1,``) and DeepSpeed's and Megatron's dotted dumps
(``  zero_optimization_stage ...... 3``). A key only counts where it looks like
configuration: traceback code lines are skipped (``world_size=8`` in code is not a
setting), values are validated per key.
"""
from __future__ import annotations

from typing import Callable, Optional

from ...read.patterns import lazy
from .collector import CONFIG, LAUNCH, RUNTIME, Collector, as_bool, clean_value
from .keys import FLAG_KEYS, KEYS, SHAPE_KEYS, apply, h_optimizer, h_zero_stage

# -- line forms -----------------------------------------------------------------------

_YAML = lazy(r"^\s{0,8}(?:-\s+)?`?(?P<k>[A-Za-z_][\w.-]{0,60})`?\s*:\s+(?P<v>\S[^\n]{0,400}?)\s*$")
_CLI = lazy(
    r"(?:^|[\s'\"\[,(])--(?P<k>[A-Za-z][\w.-]{0,60})"
    r"(?:=(?P<v1>\"[^\"]{0,400}\"|'[^']{0,400}'|[^\s'\",\]]{1,400})"
    r"|(?:['\"]?,\s*['\"]|\s+)(?P<v2>(?!-)[^\s'\",\]\\]{1,400})"
    r"|\s+(?P<v3>\"[^\"\n]{0,400}\"|'[^'\n]{0,400}'))?")
_REPR = lazy(r"(?<![\w.\-])(?P<k>[A-Za-z_][A-Za-z0-9_]{1,60})=(?P<v>\[[^\]]{0,400}\]|[^,\s)]{1,400})")
# DeepSpeed config dump / Megatron arguments / ds_report: "  name ........ value"; DeepSpeed
# prints names of 29+ characters without dots, only two spaces.
_DOTTED = lazy(r"^\s{0,4}(?P<k>[A-Za-z][\w .()/-]{0,50}?) \.{2,} (?P<v>\S[^\n]{0,2000})$")
_DOTLESS = lazy(r"^\s{1,4}(?P<k>[a-z][a-z0-9_]{28,60})\s{2,}(?P<v>\S[^\n]{0,2000})$")


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


WORD_TABLE = str.maketrans({c: " " for c in map(chr, range(128)) if not (c.isalnum() or c == "_")})
# the same table for UTF-8 bytes (bytes >= 128 kept): a 256-byte table translates in C
# without a dict lookup per character, about half the cost on a typical line
_WORD_BYTES = bytes(b if b >= 128 or chr(b).isalnum() or b == 95 else 32 for b in range(256))
KEY_WORDS = frozenset(KEYS)


def word_char(ch: str) -> bool:
    """A character words_of keeps inside a word ([a-z0-9_] and anything not ASCII)."""
    return ch >= "\x80" or _WORD_BYTES[ord(ch)] != 32


def words_of(low: str) -> set:
    """The ``[a-z0-9_]`` words of a lower-cased line (other characters than ASCII stay in
    their word), for cheap "does it mention X" tests."""
    return set(low.encode("utf-8", "surrogatepass").translate(_WORD_BYTES)
               .decode("utf-8", "surrogatepass").split())


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
        h_zero_stage(col, value, line, RUNTIME)
    elif k in ("bfloat16_enabled", "bf16") and as_bool(value):
        col.set("mixed_precision", "bf16", line, RUNTIME)
    elif k in ("fp16_enabled", "fp16") and as_bool(value):
        col.set("mixed_precision", "fp16", line, RUNTIME)
    elif k == "bfloat16_config" and "enabled=True" in value:
        col.set("mixed_precision", "bf16", line, RUNTIME)
    elif k == "optimizer_name":
        h_optimizer(col, value, line, RUNTIME)
    elif k == "zero_enabled" and as_bool(value) is False:
        col.set("zero_stage", 0, line, RUNTIME - 1)
    elif k in KEYS and " " not in k:
        apply(col, k, value, line, RUNTIME)
    return True


_ZC_STAGE = lazy(r"(?:^|\s)stage=(\d)\b")
_ZC_OFFLOAD = lazy(r"offload_(?P<which>param|optimizer)=(?:None\b|\w*\(device=(?:<\w+\.(?P<e>\w+)[^>]{0,40}>|'(?P<q>\w+)'))")
_ZC_PIN = lazy(r"offload_(?:param|optimizer)=\w*\([^)]{0,400}?pin_memory=(True|False)")
_ZC_GATHER = lazy(r"gather_16bit_weights_on_model_save=(True|False)")


def zero_config_repr(col: Collector, value: str, line: int) -> None:
    """DeepSpeed's pydantic ``zero_config`` repr: stage=3 ... offload_param=...(device='cpu')."""
    m = _ZC_STAGE.search(value)
    if m:
        h_zero_stage(col, m.group(1), line, RUNTIME)
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
