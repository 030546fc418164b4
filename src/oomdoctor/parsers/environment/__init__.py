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

import math
from typing import Optional

from ...read.patterns import lazy
from ..base import ParseContext
from .blocks import BlockTracker
from .collector import (
    CONFIG,
    EXECUTED,
    LAUNCH,
    RUNTIME,
    WEAK,
    Collector,
    zero_stage_from_name,
)
from . import engine as engine_module
from . import hardware as hardware_module
from . import launcher as launcher_module
from .engine import RUNTIME_WORDS, deepspeed, runtime_misc
from .forms import (
    KEY_WORDS,
    finditer,
    may_hold_setting,
    offload_of,
    scan_cli,
    scan_dotted,
    scan_repr,
    scan_yaml,
    word_char,
    words_of,
)
from .framework import TRIGGERS, choose_framework, framework_evidence
from .hardware import ACCEL_WORDS, BACKEND_ACCEL, hardware
from .keys import KEYS
from .launcher import b64_configs, launcher_world, world
from .versions import COLON_WORDS, clean_version, ds_report_row, entry_point, pip_show, versions

# -- assembly -------------------------------------------------------------------------

_FRAME_LINE = lazy(r"^\s*File \"[^\"]{1,1000}\", line \d+")
_IPY_CODE = lazy(r"^\s*(?:-+>\s*)?\d{1,6}\s{1,}\S")


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
    tracker = BlockTracker(col)
    code = _code_lines(ctx.lines)
    gpu_ids: dict = {}
    banner: dict = {}
    nccl = [0, 0]
    score: dict = {}
    seen: set = set()
    # the lines that may hold a word of VOCABULARY: the others' words meet no set a
    # sub-parser tests, so they are not split (a tenth of a log's lines hold one)
    vocab = _gate(ctx, VOCABULARY)
    # ... and the lines each of three sub-parsers can use at all (their NEEDS): the others skip
    # the call and its tests (None, without a native index: every line)
    hw_lines, world_lines, misc_lines = (_gate(ctx, m.NEEDS) for m in (hardware_module, launcher_module, engine_module))
    for i, ln in enumerate(ctx.lines):
        text = ln.text if len(ln.text) <= 20000 else ln.text[:20000]
        if not text.strip():
            continue
        no = ln.no
        raw = ln.raw or text
        if i not in code and (tracker.stack or "{" in text):
            tracker.feed(text, no)  # JSON blocks need every line, repeated or not
        if "_config" in text and "eyJ" in text:
            for config in b64_configs(text):
                tracker.feed(config, no)
        if _progress_word(text) and _PROGRESS_NOISE.match(text):
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
        words = words_of(low) if vocab is None or i in vocab else _NO_WORDS
        # the prefixes the normaliser removed (logger names) count as framework evidence
        raw_words = words if len(raw_low) == len(low) else words | _prefix_words(raw_low, low)
        framework_evidence(raw_low, raw, no, score, raw_words)
        deepspeed(col, text, low, no, raw_low)
        if i in code:
            # code is not configuration, but the path-like evidence above still counts
            if "load_entry_point(" in text:
                entry_point(col, text, no)
            if ("run_" in low or "trainer" in low) and (misc_lines is None or i in misc_lines):
                runtime_misc(col, text, low, no, banner, words)
            continue
        versions(col, text, low, no, words)
        if text.startswith(("Name: ", "Version: ")):
            pip_show(col, text, no, banner)
        if hw_lines is None or i in hw_lines:
            hardware(col, text, low, no, gpu_ids, words)
        if world_lines is None or i in world_lines:
            world(col, text, low, no, nccl)
        if misc_lines is None or i in misc_lines:
            runtime_misc(col, text, low, no, banner, words)
        if scan_dotted(col, text, no, lambda k, v, _no=no: ds_report_row(col, k, v, _no)):
            continue
        if ln.host:
            _yaml_key_taken_as_host(col, raw, text, no)
        if may_hold_setting(text, words):
            scan_yaml(col, text, no)
            scan_repr(col, text, no)
            scan_cli(col, text, no)
        if "- " in text and text.strip().lower() in ("- full_shard", "- shard_grad_op", "- hybrid_shard"):
            col.set("fsdp", True, no, CONFIG)
        if ".py" in low and "zero" in low:
            _script_name_stage(col, text, no)
    _finish(ctx, col, gpu_ids, banner, nccl, score)


_PROGRESS_NOISE = lazy(
    r"\s*(?:\{'(?:loss|eval_loss|train_loss|grad_norm|learning_rate)'|[^|]{0,80}\d+%\|[^|]*\|\s*\d+/\d+ \["
    r"|rank=\d+ time \(ms\)|step=\d+, skipped=\d+|(?:Epoch|Iter)\(train\)\s*\[)")


def _progress_word(text: str) -> bool:
    """Every match of _PROGRESS_NOISE holds one of these: a chain of substring tests costs
    far less than the pattern, and a third of any() over a generator."""
    return "{'" in text or "%|" in text or "rank=" in text or "step=" in text or "(train)" in text


# Every word set a sub-parser tests a line's ``words`` against (framework triggers,
# accelerator words, runtime words, version words, configuration keys): a line holding
# none of them as a substring has no word that any test can meet.
VOCABULARY = tuple(sorted(KEY_WORDS | TRIGGERS | ACCEL_WORDS | RUNTIME_WORDS | COLON_WORDS))
_NO_WORDS: frozenset = frozenset()


def _gate(ctx: ParseContext, literals: tuple[str, ...]) -> Optional[set]:
    """The lines holding one of ``literals`` (any case) when the native index answers in its
    one pass; None (every line) when it does not."""
    got = ctx.indexed_lines_with(literals, fold=True)
    return set(got) if got is not None else None


def _prefix_words(raw_low: str, low: str) -> set:
    """The words of a line's raw form: the message's words and those of the prefix the
    normaliser removed, read from the prefix alone where the message ends the raw line
    and no word runs across the cut."""
    cut = len(raw_low) - len(low)
    if raw_low.endswith(low) and not (word_char(raw_low[cut - 1]) and word_char(low[0])):
        return words_of(raw_low[:cut])
    return words_of(raw_low)


_KEY_BEFORE = lazy(r"(?P<k>[A-Za-z_][\w.-]{0,60}):\s+$")


def _yaml_key_taken_as_host(col: Collector, raw: str, text: str, line: int) -> None:
    """``bf16: true`` looks like a pdsh ``host: `` prefix to the normaliser; recover the key."""
    at = raw.rfind(text.strip()) if text.strip() else -1
    if at <= 0:
        return
    before = raw[max(0, at - 80):at]
    if not before.rstrip().endswith(":"):
        return  # _KEY_BEFORE ends in ":" and whitespace
    m = _KEY_BEFORE.search(before)
    if m and m.group("k").lower().replace("-", "_") in KEYS:
        scan_yaml(col, f"{m.group('k')}: {text.strip()}", line)


_SCRIPT_ZERO = lazy(r"[\w./-]{0,200}?zero[_-]?[0-3][\w-]{0,40}\.py")


def _script_name_stage(col: Collector, text: str, line: int) -> None:
    """``train_ds_zero3.py``: a script named after its ZeRO stage is a (weak) hint."""
    for m in finditer(_SCRIPT_ZERO, text)[:2]:
        stage = zero_stage_from_name(m.group(0)[:-3], allow_stage_word=False)
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
        col.set("offload", offload_of(opt[0] if opt else None, par[0] if par else None), line, CONFIG)
    # launchers: torchrun --nproc_per_node x --nnodes, deepspeed --num_gpus x --num_nodes
    for per, nodes in (("nproc_per_node", "nnodes"), ("num_gpus", "num_nodes")):
        p, n = parts.get(per), parts.get(nodes)
        if p:
            col.set("world_size", p[0] * (n[0] if n else 1), p[1], LAUNCH)
            if n:
                col.set("num_nodes", n[0], n[1], LAUNCH)
    # the parallel groups' sizes as fairscale and older Megatron print them: the world is their product
    groups = [parts.get(k) for k in ("mp_size", "dp_size", "pp_size")]
    if all(groups):
        col.set("world_size", math.prod(g[0] for g in groups), max(g[1] for g in groups), RUNTIME - 1)
    # HF banner: total = per-device batch x accumulation x world size
    t, b, g = banner.get("t"), banner.get("dp") or banner.get("b"), banner.get("g")
    if t and b and g and t % (b * g) == 0:
        col.set("world_size", t // (b * g), banner["line"], RUNTIME - 4)
    if nccl[0]:
        col.set("world_size", nccl[0], nccl[1], WEAK)
    launcher_world(ctx, col)
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
        acc = BACKEND_ACCEL.get((ev.backend or "").upper())
        if acc:
            col.set("accelerator", acc, ev.line, EXECUTED if acc == "cuda" else RUNTIME + 1)
            break
    choose_framework(ctx, col, score)
