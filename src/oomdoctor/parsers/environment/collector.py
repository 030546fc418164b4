"""Where a configuration value came from, and which one wins: ``Collector`` and value parsers.

Values compete by priority (``RUNTIME`` ... ``WEAK``): the first value printed wins unless a
later one is more authoritative — what the running library says about itself (DeepSpeed's
config dump, collect_env, "Creating ... ZeRO stage 3 optimizer") beats the user's echoed
configuration, which beats a config file's name, which beats hints such as a
``python3.10/site-packages`` path.
"""
from __future__ import annotations

from typing import Optional

from ...facts.models import Environment
from ...read.patterns import lazy

# How much a source is trusted; a later value replaces an earlier one only when its
# priority is strictly higher, so among equals the first one printed wins.
RUNTIME = 40      # the running library describes what it does (DeepSpeed config dump, collect_env)
EXECUTED = 35     # code that ran says it (frames in deepspeed/runtime/zero/stage3.py)
CONFIG = 30       # the user's configuration echoed (YAML, CLI, JSON, reprs)
LAUNCH = 20       # launcher arguments, wheel names: intent rather than observation
NAME_HINT = 15    # a config file's name (ds_z3_offload_config.json)
WEAK = 5          # inferred from unrelated text (site-packages path, NCCL ring)


# counts and sizes that are meaningless at zero ("num_local_procs=0" in a cut line)
_POSITIVE = {"world_size", "num_nodes", "gpu_count", "micro_batch_size", "gradient_accumulation_steps",
             "sequence_length", "hidden_size", "num_layers", "num_attention_heads", "num_kv_heads",
             "intermediate_size", "vocab_size", "gpu_capacity_bytes", "trainable_params", "total_params"}


class Collector:
    """Sets ``Environment`` fields with their source line, keeping the best-ranked value."""

    def __init__(self, env: Environment):
        self.env = env
        self.prio: dict[str, int] = {}
        # facts assembled from several keys at the end (see environment.finish)
        self.parts: dict[str, tuple[object, int, int]] = {}

    def set(self, field: str, value, line: int, prio: int) -> bool:
        if value is None or value == "" or (field in _POSITIVE and not (isinstance(value, int) and value >= 1)):
            return False
        old = self.prio.get(field)
        if old is not None and prio <= old:
            return False
        setattr(self.env, field, value)
        self.env.sources[field] = line
        self.prio[field] = prio
        return True

    def part(self, name: str, value, line: int, prio: int) -> None:
        """Remember one ingredient of a derived fact (first of the best priority wins)."""
        old = self.parts.get(name)
        if value is None or (old is not None and prio <= old[2]):
            return
        self.parts[name] = (value, line, prio)

    def get_part(self, name: str):
        got = self.parts.get(name)
        return got[0] if got else None


# -- value parsers ----------------------------------------------------------------

TRUE = {"true", "yes", "on", "1", "y"}
FALSE = {"false", "no", "off", "0", "n", "none", "null"}


def as_bool(v: str) -> Optional[bool]:
    s = v.strip().strip("'\"").lower()
    if s in TRUE:
        return True
    if s in FALSE:
        return False
    return None


def as_int(v: str) -> Optional[int]:
    s = v.strip().strip("'\"").replace(",", "").replace("_", "")
    if s.isdigit() and len(s) < 19:
        return int(s)
    return None


IDENT = lazy(r"^[A-Za-z][\w.:-]{0,80}$")
PATHLIKE = lazy(r"^[\w~./@:+-]{1,300}$")


def clean_value(v: str) -> str:
    """Strip a YAML comment, trailing commas and quotes from an echoed value."""
    v = v.strip()
    if " #" in v:
        v = v.split(" #", 1)[0].strip()
    v = v.rstrip(",").strip()
    if len(v) >= 2 and v[0] == v[-1] and v[0] in "'\"":
        v = v[1:-1]
    return v


def zero_stage_from_name(name: str, allow_stage_word: bool) -> Optional[int]:
    """ZeRO stage from a config or script file name: ds_z3_config.json, zero2_offload."""
    base = name.replace("\\", "/").rsplit("/", 1)[-1].lower()
    m = _ZNAME.search(base)
    if m:
        return int(m.group(1))
    if allow_stage_word:
        m = _STAGE_NAME.search(base)
        if m:
            return int(m.group(1))
    return None


_ZNAME = lazy(r"(?:^|[^a-z0-9])(?:ds_?)?z(?:ero)?[_-]?(?:stage[_-]?)?([0-3])(?![0-9])")
_ZNAME_GLUED = lazy(r"zero[_-]?([0-3])(?![0-9])")
_STAGE_NAME = lazy(r"(?:^|[^a-z0-9])stage[_-]?([0-3])(?![0-9])")


def ds_config_name(col: Collector, value: str, line: int) -> None:
    """A DeepSpeed config given by name: ds_z3_offload_config.json, deepspeed_zero3_offload.

    LLaMA-Factory's ds_z3_offload_config.json and xtuner's deepspeed_zero3_offload offload
    both optimizer and parameters; a stage-2 file can only offload the optimizer.
    """
    v = clean_value(value)
    if not v or not PATHLIKE.match(v) or v.lower() in TRUE | FALSE:
        return
    col.part("deepspeed_used", True, line, NAME_HINT)
    base = v.replace("\\", "/").rsplit("/", 1)[-1].lower()
    stage = zero_stage_from_name(base, allow_stage_word=True)
    if stage is None:
        m = _ZNAME_GLUED.search(base)
        stage = int(m.group(1)) if m else None
    if stage is not None:
        col.set("zero_stage", stage, line, NAME_HINT)
    if "offload" in base:
        has_opt, has_par = "opt" in base, "param" in base
        if has_opt and not has_par:
            off = "optimizer"
        elif has_par and not has_opt:
            off = "param"
        elif stage == 3:
            off = "both"
        elif stage in (1, 2):
            off = "optimizer"
        else:
            off = None
        col.set("offload", off, line, NAME_HINT)
    elif stage is not None:
        col.set("offload", "none", line, NAME_HINT - 1)
