"""What the text and markdown reports share: which numbers matter and how they read.

Both renderers show the same facts in the same order; only the layout differs. So the
choice of rows (the numbers of the primary OOM event, where it happened, the
environment), the verdict sentence, size and percentage formatting and the knob helpers
live here, once. Everything returned is plain text: styling and escaping are the
renderers' business. Log-derived strings pass through :func:`clean` because a hostile
log must not be able to drive the user's terminal.
"""
from __future__ import annotations

import json
import os
import re
import signal
from typing import TYPE_CHECKING, Any, NamedTuple, Optional, Sequence

import yaml

from ..facts.derived import (
    HOST_KINDS,
    job_processes,
    outside_pytorch,
    sibling_processes,
    split_processes,
    unallocated_of,
)
from ..facts.models import Evidence, OomEvent
from ..facts.sizes import format_size
from ..kb.diagnosis import AGAINST, PRIOR, TIMED_OUT, Diagnosis, Knob, Remediation
from ..kb.frameworks import STACK_REFUSAL, STACKS
from ..read.patterns import lazy

if TYPE_CHECKING:  # renderers read a Report; the model offers them as methods
    from .model import Report

WIDTH = 100          # prose lines stay within this many columns
MAX_PIDS = 6         # other processes listed by PID before "… N more"
MAX_LABEL = 26       # a row's label column is at most this wide
# columns and lines when the output's size is not known (a pipe, a file) and COLUMNS and
# LINES are not set: the text report's evidence is cut to 120 columns
FALLBACK_SIZE = (120, 24)
# a row's value that is a size: right-aligned in a column of its own
SIZE_VALUE = re.compile(r"^-?\d[\d.,]* (?:bytes|KiB|MiB|GiB|TiB)$")

# Log text, file names, YAML keys and error messages are chosen by whoever wrote them:
# printed raw, an escape sequence can recolour or clear the screen, move the cursor over
# earlier lines, set the window title or hide text; a C1 byte does the same on terminals
# that read 8-bit controls. Whole sequences go (so no "[31m" is left behind), then any
# other C0/C1 control and DEL; newline (unless ``oneline``) and tab stay.
_SEQUENCE = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]"                                      # CSI: colours, cursor, erase
    r"|(?:\x1b[\]P^_X]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)"  # OSC, DCS, PM, APC, SOS
    r"|\x1b[ -/]*[0-~]")                                                    # other ESC sequences
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_CONTROL_LINE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")
# A name that is not valid UTF-8 comes in with lone surrogates (os.fsdecode): shown as
# U+FFFD, as a terminal shows the bytes, and never a UnicodeEncodeError.
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_SUSPECT = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


# rows of "The numbers" the one screen never cuts (report.sections): who else holds the
# device, and how sure the event is
OTHER_PROCESSES, CERTAINTY = "other processes", "certainty"
ALWAYS_SHOWN = (OTHER_PROCESSES, CERTAINTY)


class Row(NamedTuple):
    """One labelled figure: ``asked  3.52 GiB  (1.9% of the GPU)``."""

    label: str
    value: str
    note: Optional[str] = None


def printable(text: object) -> str:
    """``text`` safe to print on a terminal (names of files and archive members, the text of
    logs and YAML files are chosen by whoever wrote them): the project's one sanitiser, on
    one line, tabs kept. Display only: records keep the real names."""
    return clean(text, oneline=True, tabs=False)


def clean(text: Any, *, oneline: bool = False, tabs: bool = True) -> str:
    """Text from a log, a file name, a YAML key or an error made safe to print: escape
    sequences removed whole, other control characters dropped, lone surrogates shown as
    U+FFFD; tabs become four spaces (``tabs=False``: kept). ``oneline``: newlines are
    dropped too (a file name, a one-line message). The one sanitiser of the project:
    display only, records and JSON keep the real text."""
    text = text if isinstance(text, str) else str(text)
    if _SUSPECT.search(text) is None:   # the usual case: nothing to do
        return text
    if tabs:
        text = text.replace("\t", "    ")
    text = _SEQUENCE.sub("", text)
    text = (_CONTROL_LINE if oneline else _CONTROL).sub("", text)
    return _SURROGATE.sub("\ufffd", text)


def terminal_size() -> os.terminal_size:
    """Columns and lines of the terminal (COLUMNS/LINES win, as everywhere), else
    ``FALLBACK_SIZE``."""
    import shutil
    return shutil.get_terminal_size(fallback=FALLBACK_SIZE)


def pct(x: float) -> str:
    if 0 < x < 0.001:
        return "<0.1%"
    return f"{x:.0%}" if x >= 0.01 or x == 0 else f"{x:.1%}"


def times(part: int, whole: int) -> str:
    """How ``part`` compares with ``whole``: ``1.2x the request``, ``3% of the request``."""
    r = part / whole
    return f"{r:.1f}x" if r >= 1 else pct(r) + " of"


def candidate_note(d: Diagnosis) -> tuple[str, Optional[str]]:
    """What a runner-up diagnosis is shown with: its kind ("" for a real cause) and its
    first reason for (reasons against are left to the full report)."""
    kind = " (not a memory failure)" if not d.memory_failure else " (fallback)" if d.fallback else ""
    first = next((b for b in d.because if not b.startswith((AGAINST, PRIOR))), None)
    return kind, first


def confidence_word(conf: float) -> str:
    return "high" if conf >= 0.8 else "medium" if conf >= 0.5 else "low"


def number_list(values: Sequence[int]) -> str:
    """``[0, 1, 2, 3, 7]`` → ``0-3, 7`` (ranks, devices)."""
    vals = sorted(set(values))
    out: list[str] = []
    i = 0
    while i < len(vals):
        j = i
        while j + 1 < len(vals) and vals[j + 1] == vals[j] + 1:
            j += 1
        out.append(str(vals[i]) if j - i < 2 else f"{vals[i]}-{vals[j]}")
        if j - i == 1:
            out.append(str(vals[j]))
        i = j + 1
    return ", ".join(out)


def shown_diagnoses(report: Report, top: Optional[int]) -> list[Diagnosis]:
    return list(report.diagnoses[:top] if top else report.diagnoses)


# -- the verdict ------------------------------------------------------------------------

def verdict(report: Report, diagnoses: Sequence[Diagnosis]) -> tuple[str, Optional[str]]:
    """The one-line answer, and a short second sentence where one helps."""
    d = diagnoses[0] if diagnoses else None
    if d is not None:
        conf = f"{pct(d.confidence)} confidence"
        if confidence_word(d.confidence) == "low":
            conf += ", low"
        if d.fallback:
            return (f"Out of memory, cause not determined ({d.incident}, {conf})",
                    "An out-of-memory failure is certain, but the log does not say what filled "
                    "the memory; see what to capture next below.")
        if not d.memory_failure:
            return (f"Not an out-of-memory failure: {d.title} ({d.incident}, {conf})", None)
        if d.warning and report.phase_detail.stops_early:
            where = ("stops inside a traceback" if report.phase_detail.stops_early == "cut_traceback"
                     else "says a process died")
            return (f"No error line: the log {where}. Lead, if it ran out of memory: {d.title} ({d.incident}, {conf})",
                    "Nothing in the log shows the failure itself; the leads below are what would explain a "
                    "memory failure where it stops. The full log of the failing rank decides.")
        if d.warning:
            return (f"Warning, no failure: {d.title} ({d.incident}, {conf})", None)
        ev = primary_event(report)
        if ev is not None and ev.strength == "weak":
            return (f"Possibly out of memory: {d.title} ({d.incident}, {conf})",
                    "The only sign is a kill signal, which people, schedulers and health checks send "
                    "too; the kernel log (dmesg) or the scheduler's record of the job decides.")
        return (f"OOM: {d.title} ({d.incident}, {conf})", None)
    ev = primary_event(report)
    if ev is not None and not ev.survived and not ev.symptom:
        return (f"Out of memory ({kind_words(ev)}), but no known cause matched",
                "The OOM is certain; nothing in the log pointed to one cause.")
    if ev is None:
        detail = None
    elif ev.survived:
        detail = f"The out-of-memory error at L{ev.line} was caught: the run went on after it."
    else:   # every event is explained as a symptom of another failure
        detail = f"L{ev.line} is not counted as running out of memory: {ev.symptom}."
    primary = [f for f in report.failures if not f.secondary]
    if primary:
        f = primary[0]
        return (f"Not an out-of-memory failure: the job failed with {f.kind.replace('_', ' ')} "
                f"(L{f.line})", " ".join(x for x in (clean(f.message)[:300], detail) if x))
    if ev is not None and ev.survived:
        return ("No fatal out-of-memory failure: the one in the log was survived", detail)
    if ev is not None:
        return (f"Not an out-of-memory failure: the error at L{ev.line} says out of memory, but not for want of it",
                detail)
    return ("No out-of-memory failure found", looked_at(report))


def looked_at(report: Report) -> str:
    src = clean(report.source) if report.source else "the input"
    return (f"Read {report.lines_read:,} lines ({format_size(report.bytes_read)}) of {src}, "
            "looking for GPU/accelerator allocator errors (CUDA, ROCm, NPU, XPU, MPS, XLA, TF), "
            "host OOM kills (oom-killer, SIGKILL / exit -9 / 137, cgroup and Slurm kills), "
            "DataLoader worker kills, host allocation failures and known non-memory failures.")


# -- the numbers that matter ------------------------------------------------------------

_KIND_WORDS = {
    "cuda_caching_allocator": "caching allocator", "cuda_runtime_error": "CUDA runtime error",
    "cublas_alloc": "cuBLAS/cuDNN allocation", "nccl": "NCCL", "hip": "ROCm (HIP)",
    "npu": "Ascend NPU", "xpu": "Intel XPU", "mps": "Apple MPS", "xla": "XLA",
    "bitsandbytes": "bitsandbytes", "host_oom_killer": "host OOM kill",
    "cpu_allocator": "host allocation", "dataloader_killed": "DataLoader worker killed",
    "runtime_arena": "runtime arena (side not named)",
}


def kind_words(ev: OomEvent) -> str:
    words = _KIND_WORDS.get(ev.kind, ev.kind)
    if ev.kind == "cuda_caching_allocator":     # also the MLU / GCU forks of it
        words = f"{ev.backend or 'CUDA'} {words}"
    elif ev.kind == "xla" and ev.backend == "TF":
        words = "TensorFlow"
    return words


def primary_event(report: Report) -> Optional[OomEvent]:
    """The event the report is about: the first certain one, else the first (as facts.derived)."""
    if not report.oom_events:
        return None
    order = {"certain": 0, "likely": 1, "weak": 2}
    return min(report.oom_events, key=lambda e: (order.get(e.strength, 3), e.line))


def timeout_warning(report: Report) -> str | None:
    """One line for the one-screen report when knowledge-base searches ran out of time on
    this log (each is a note): what was not read is never silently "no match"."""
    timed_out = [n for n in report.notes if TIMED_OUT in n]
    if not timed_out:
        return None
    return "warning: " + timed_out[0] + (f" (and {len(timed_out) - 1} more)" if len(timed_out) > 1 else "")


def _share(part: Optional[int], whole: Optional[int], what: str) -> Optional[str]:
    if part is None or not whole:
        return None
    return f"{pct(part / whole)} of {what}"


def number_rows(report: Report) -> list[Row]:
    """The figures of the primary OOM event, in the order a reader checks them."""
    ev = primary_event(report)
    if ev is None:
        return []
    rows = _host_rows(report, ev) if ev.kind in HOST_KINDS else _device_rows(ev, report.ranks.worker_pids)
    if ev.strength != "certain":
        rows.append(Row(CERTAINTY, ev.strength,
                        "a kill signal alone is consistent with an OOM but does not prove one"
                        if ev.strength == "weak" else None))
    return rows


def _device_rows(ev: OomEvent, workers: list[int]) -> list[Row]:
    rows: list[Row] = []
    req, cap = ev.tried_to_allocate_bytes, ev.total_capacity_bytes
    if req is not None:
        rows.append(Row("asked", format_size(req), _share(req, cap, "the device")))
    if ev.free_bytes is not None:
        rows.append(Row("free", format_size(ev.free_bytes), _share(ev.free_bytes, cap, "the device")))
    if cap is not None:
        dev = f"{ev.backend or 'device'} {ev.device_index}" if ev.device_index is not None else None
        rows.append(Row("total capacity", format_size(cap), dev))
    if ev.allowed_bytes is not None:
        rows.append(Row("allowed", format_size(ev.allowed_bytes), "per-process memory fraction limit"))
    old = ev.allocated_by_pytorch_bytes is None and (ev.already_allocated_bytes is not None
                                                     or ev.reserved_total_bytes is not None)
    if old:
        # F1-F3 (torch <= 2.0) and NPU wording: reserved includes allocated
        if ev.reserved_total_bytes is not None:
            by = ("by the XLA allocator" if ev.kind == "xla" else "by the library's memory pool"
                  if ev.kind in ("device_runtime", "runtime_arena") or (ev.message_format or "").endswith("-pool")
                  else "by PyTorch")
            rows.append(Row("reserved in total", format_size(ev.reserved_total_bytes), by))
        if ev.already_allocated_bytes is not None:
            rows.append(Row("already allocated", format_size(ev.already_allocated_bytes), None))
        if ev.current_active_bytes is not None:
            rows.append(Row("current active", format_size(ev.current_active_bytes), None))
    elif ev.allocated_by_pytorch_bytes is not None:
        rows.append(Row("allocated by PyTorch", format_size(ev.allocated_by_pytorch_bytes),
                        _share(ev.allocated_by_pytorch_bytes, cap, "the device")))
    if ev.private_pool_bytes is not None:
        rows.append(Row("in private pools", format_size(ev.private_pool_bytes), "CUDA graphs / MemPool"))
    unalloc = unallocated_of(ev)
    if unalloc is not None:
        if ev.reserved_unallocated_bytes is not None:
            how = None
        elif ev.cached_unallocated_bytes is not None and ev.reserved_total_bytes is None:
            how = "'cached' in this message"
        else:
            how = "reserved - allocated"
        ratio = f"{times(unalloc, req)} the request" if req else None
        note = "; ".join(x for x in (how, ratio) if x) or None
        rows.append(Row("reserved but unallocated", format_size(unalloc), note))
    if ev.other_allocations_bytes is not None:
        rows.append(Row("other allocations", format_size(ev.other_allocations_bytes), None))
    me, others = split_processes(ev)
    self_bytes = me.bytes if me is not None else ev.process_in_use_bytes
    if self_bytes is not None:
        note = f"PID {me.pid}" if me is not None and me.pid is not None and not me.is_self else None
        outside = outside_pytorch(ev, self_bytes)
        if outside is not None and outside > 0:
            extra = f"{format_size(outside)} outside PyTorch's allocator"
            note = f"{note}; {extra}" if note else extra
        rows.append(Row("this process", format_size(self_bytes), note))
    if others:
        shown = ", ".join(f"PID {p.pid if p.pid is not None else '?'} {format_size(p.bytes)}"
                          for p in others[:MAX_PIDS])
        if len(others) > MAX_PIDS:
            shown += f", ... {len(others) - MAX_PIDS} more"
        total = sum(p.bytes for p in others)
        note = f"{format_size(total)} in all" if len(others) > 1 else None
        if sibling_processes(ev):
            note = ((note + "; ") if note else "") + "sized like other ranks' CUDA contexts"
        job, _rest = job_processes(others, workers)
        if job:
            said = ("this job's worker (the launcher names it)" if len(others) == 1 else
                    "all this job's workers (the launcher names them)" if len(job) == len(others) else
                    f"{len(job)} of them this job's workers (the launcher names them)")
            note = ((note + "; ") if note else "") + said
        rows.append(Row(OTHER_PROCESSES, shown, note))
    return rows


_VICTIM = lazy(r"(?i)killed process|victim|oom[-_ ]?kill|OOMKilled|pid \d+")
_HOST_LABEL = {"cpu_allocator": "asked (host)", "host_oom_killer": "victim RSS",
               "dataloader_killed": "worker RSS"}


def _host_rows(report: Report, ev: OomEvent) -> list[Row]:
    rows = [Row("what", kind_words(ev), None)]
    if ev.detail:
        victim = _VICTIM.search(ev.detail) is not None and ev.kind != "cpu_allocator"
        rows.append(Row("victim" if victim else "detail", clean(ev.detail), None))
    if ev.host_bytes is not None:
        rows.append(Row(_HOST_LABEL.get(ev.kind, "host memory"), format_size(ev.host_bytes), None))
    codes = [signal_words(c) for c in report.ranks.exit_codes]
    if codes:
        rows.append(Row("exit", ", ".join(dict.fromkeys(codes)), None))
    return rows


def signal_words(code: int) -> str:
    """``-9`` → ``-9 (SIGKILL)``; ``137`` → ``137 (128 + SIGKILL)``; ``-7`` → SIGBUS."""
    num = -code if code < 0 else code - 128 if 128 < code < 160 else None
    if num is None:
        return str(code)
    try:
        name = signal.Signals(num).name
    except ValueError:
        return str(code)
    return f"{code} ({name})" if code < 0 else f"{code} (128 + {name})"


# -- where ------------------------------------------------------------------------------

# what the lines that follow from the first failure are, by failure kind (parsers/ranks.py CASCADE_KINDS)
_CASCADE_WORDS = {"nccl_timeout": "NCCL timeouts", "nccl_error": "NCCL errors", "sigterm": "processes stopped with SIGTERM",
                  "python_exception": "exceptions"}


def where_rows(report: Report) -> list[Row]:
    rows: list[Row] = []
    ph = report.phase_detail
    phase = report.phase or ph.phase
    if phase:
        rows.append(Row("phase", phase.replace("_", " "), clean(ph.reason) if ph.reason else None))
    progress = []
    if ph.step is not None:
        progress.append(f"step {ph.step}" + (f" of {ph.total_steps}" if ph.total_steps else ""))
    if ph.epoch is not None:
        progress.append(f"epoch {ph.epoch:g}")
    if progress:
        rows.append(Row("progress", ", ".join(progress), None))
    ev = primary_event(report)
    ranks = report.ranks.failed_ranks or (ev.ranks if ev else [])
    if ranks:
        rows.append(Row("rank" if len(ranks) == 1 else "ranks", number_list(ranks), None))
    devices = report.ranks.failed_devices or ([ev.device_index] if ev and ev.device_index is not None else [])
    if devices:
        backend = ev.backend if ev and ev.backend and ev.backend != "host" else "GPU"
        rows.append(Row("device" if len(devices) == 1 else "devices",
                        f"{backend} {number_list(devices)}", None))
    if ev is not None and ev.count > 1:
        rows.append(Row("copies", f"the same message {ev.count} times",
                        f"ranks {number_list(ev.ranks)}" if len(ev.ranks) > 1 else None))
    rk = report.ranks
    if rk.first_failure or rk.first_failure_line:
        first = clean(rk.first_failure) if rk.first_failure else "first failure"
        at = f"L{rk.first_failure_line}" if rk.first_failure_line else None
        if at and str(rk.first_failure_line) in first:
            at = None
        rows.append(Row("first failure", first, at))
    secondary = [f for f in report.failures if f.secondary]
    # (the parsers give each secondary failure one line of cascade evidence; a report built by
    # other code may carry the evidence alone)
    n_cascade = max(len(rk.cascade), len(secondary))
    if n_cascade:
        lines = f"{n_cascade} later lines follow" if n_cascade > 1 else "1 later line follows"
        kinds = [_CASCADE_WORDS.get(k, k.replace("_", " ")) for k in dict.fromkeys(f.kind for f in secondary)]
        what = f" ({', '.join(kinds)})" if kinds else ""
        rows.append(Row("cascade", f"{lines} from it{what}", "not the cause"))
    more = [e for e in report.oom_events if e is not ev]
    if more:
        at = ", ".join(f"L{e.line}" for e in more[:5]) + (", ..." if len(more) > 5 else "")
        count = str(len(more) + report.oom_events_left_out)
        if report.oom_events_left_out:
            count += f" ({report.oom_events_left_out} left out of the report)"
        rows.append(Row("other OOM events", count, at))
    return rows


# -- environment ------------------------------------------------------------------------

_FRAMEWORK_NAMES = {
    "llamafactory": "LLaMA-Factory", "axolotl": "axolotl", "xtuner": "xtuner",
    "llama-recipes": "llama-recipes", "hf-trainer": "HF Trainer", "trl": "TRL",
    "accelerate": "accelerate", "deepspeed": "DeepSpeed", "fsdp": "FSDP", "megatron": "Megatron",
    "ms-swift": "ms-swift", "unsloth": "unsloth", "torchtune": "torchtune",
    "plain-pytorch": "plain PyTorch", "jax": "JAX", "tensorflow": "TensorFlow", "other": "other",
}


def env_rows(report: Report) -> list[Row]:
    e = report.environment
    rows: list[Row] = []
    if e.framework:
        name = _FRAMEWORK_NAMES.get(e.framework, e.framework)
        if e.framework_version:
            name += f" {e.framework_version}"
        rows.append(Row("framework", clean(name), f"stage {clean(e.stage)}" if e.stage else None))
    elif e.stage:
        rows.append(Row("stage", clean(e.stage), None))
    for label, value in (("torch", e.torch_version), ("deepspeed", e.deepspeed_version),
                         ("transformers", e.transformers_version), ("accelerate", e.accelerate_version),
                         ("peft", e.peft_version), ("trl", e.trl_version), ("CUDA", e.cuda_version)):
        if value:
            rows.append(Row(label, clean(value), None))
    if e.zero_stage is not None:
        off = {"none": "no offload", "optimizer": "optimizer offload", "param": "parameter offload",
               "both": "optimizer + parameter offload"}.get(e.offload or "", None)
        rows.append(Row("ZeRO", f"stage {e.zero_stage}", off))
    if e.fsdp:
        rows.append(Row("FSDP", "on", clean(e.fsdp_state_dict_type) if e.fsdp_state_dict_type else None))
    if e.gpu_name or e.gpu_capacity_bytes:
        gpu = clean(e.gpu_name) if e.gpu_name else "GPU"
        if e.gpu_count and e.gpu_count > 1:
            gpu = f"{e.gpu_count} x {gpu}"
        rows.append(Row("GPU", gpu, format_size(e.gpu_capacity_bytes) if e.gpu_capacity_bytes else None))
    elif e.accelerator:
        rows.append(Row("accelerator", clean(e.accelerator), None))
    if e.world_size:
        rows.append(Row("world size", str(e.world_size),
                        f"{e.num_nodes} nodes" if e.num_nodes and e.num_nodes > 1 else None))
    return rows


def run_rows(report: Report) -> list[Row]:
    """The echoed training configuration that memory depends on."""
    e = report.environment
    rows: list[Row] = []
    if e.model_name:
        rows.append(Row("model", clean(e.model_name), None))
    if e.finetuning_type:
        q = f"{e.quantization_bit}-bit" if e.quantization_bit else None
        rows.append(Row("finetuning", clean(e.finetuning_type), q))
    for label, value in (("sequence length", e.sequence_length), ("micro-batch", e.micro_batch_size),
                         ("grad. accumulation", e.gradient_accumulation_steps)):
        if value is not None:
            rows.append(Row(label, str(value), None))
    if e.gradient_checkpointing is not None:
        rows.append(Row("grad. checkpointing", "on" if e.gradient_checkpointing else "off", None))
    for label, value in (("precision", e.mixed_precision), ("attention", e.attn_implementation),
                         ("optimizer", e.optimizer), ("PYTORCH_CUDA_ALLOC_CONF", e.alloc_conf)):
        if value:
            rows.append(Row(label, clean(value), None))
    return rows


def row_phrase(row: Row) -> str:
    """``ZeRO stage 3 (optimizer offload)`` style, for one-line summaries."""
    if row.label in ("framework", "GPU", "stage", "accelerator"):
        head = row.value
    elif row.label in ("ZeRO",):
        head = f"ZeRO {row.value}"
    else:
        head = f"{row.label} {row.value}"
    return f"{head} ({row.note})" if row.note else head


# -- memory arithmetic (optional module) ------------------------------------------------

def memory_section(report: Report) -> list[Row]:
    """Rows of the memory-arithmetic section, when the report has one and the module that
    lays it out is installed; never raises (a report without it is still a report)."""
    if not report.memory:
        return []
    try:
        from ..memory import memory_rows  # type: ignore[attr-defined]
    except ImportError:
        return []
    try:
        raw = memory_rows(report)
    except Exception:  # noqa: BLE001 - an optional section must not break the report
        return []
    rows: list[Row] = []
    for item in raw or []:
        row = _as_row(item)
        if row is not None:
            rows.append(row)
    return rows


def _as_row(item: Any) -> Optional[Row]:
    if isinstance(item, Row):
        return item
    if isinstance(item, str):
        return Row(clean(item), "", None)
    if isinstance(item, dict):
        label = item.get("label") or item.get("name")
        if label is None:
            return None
        note = item.get("note")
        return Row(clean(label), clean(_value(item.get("value"))), clean(note) if note else None)
    if isinstance(item, (tuple, list)) and len(item) >= 2:
        note = item[2] if len(item) > 2 and item[2] else None
        return Row(clean(item[0]), clean(_value(item[1])), clean(note) if note else None)
    return None


def _value(v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return "" if v is None else str(v)
    if isinstance(v, int):
        return format_size(v)
    return str(v)


# -- fixes and knobs --------------------------------------------------------------------

KNOB_NAMES = {key: stack.config for key, stack in STACKS.items()}
_PY_ASSIGN = lazy(r"^[A-Za-z_][\w.]*\s*(?:=(?!=)|\()")
_FENCES = {key: stack.fence for key, stack in STACKS.items() if stack.fence}


def knob_name(knob: Knob) -> str:
    return KNOB_NAMES.get(knob.framework, knob.framework)


def fence_language(knob: Knob) -> str:
    """The code-fence language of a knob: shell for env, JSON for DeepSpeed, Python for
    code, YAML otherwise; a setting that is plainly JSON, command-line flags or Python
    keyword assignments says so."""
    text = knob.setting.strip()
    lang = _FENCES.get(knob.framework)
    if lang is None:
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        if text.startswith("{") and text.endswith("}"):
            lang = "json"
        elif lines and all(ln.startswith(("--", "export ")) for ln in lines):
            lang = "bash"
        elif lines and all(_PY_ASSIGN.match(ln) for ln in lines if not ln.startswith("#")):
            lang = "python"         # TrainingArguments(save_only_model=True) style
        else:
            lang = "yaml"
    return lang


def compact(knob: Knob) -> str:
    """A knob on one line, for "other stacks": JSON and YAML re-emitted in flow style
    (``{"a": {"b": 1}}``, ``{a: {b: 1}}``), shell and Python lines joined with ``; ``."""
    text = knob.setting.strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if len(lines) <= 1:
        return clean(text)
    lang = fence_language(knob)
    flat: Optional[str] = None
    try:
        if lang == "json":
            flat = json.dumps(json.loads(text), separators=(", ", ": "))
        elif lang == "yaml":
            obj = yaml.safe_load(text)
            if isinstance(obj, (dict, list)):
                flat = yaml.safe_dump(obj, default_flow_style=True, width=10**6, sort_keys=False).strip()
    except (ValueError, yaml.YAMLError):
        flat = None
    if flat is None:
        flat = " ".join(lines) if lang == "json" else "; ".join(lines)
    return clean(flat)


def split_fixes(d: Diagnosis) -> tuple[list[Remediation], list[Remediation]]:
    """(fixes that apply, by rank; fixes that do not, last)."""
    ok = sorted((r for r in d.remediations if r.applicable), key=lambda r: r.rank)
    not_ok = sorted((r for r in d.remediations if not r.applicable), key=lambda r: r.rank)
    return ok, not_ok


def no_fix_line(not_ok: list[Remediation]) -> str:
    """What the summary says where no known fix applies: the reason where the log's stack is
    what rules them out (JAX, TensorFlow, another framework's allocator), else only that none
    fits this log."""
    stack = [r for r in not_ok if (r.why_not or "").startswith(STACK_REFUSAL)]
    if not stack:
        return "No listed fix applies to this log (-v lists them, and why)."
    return f"None applies as written ({len(stack)} written for other stacks, -v lists them): {stack[0].why_not}."


def effect_line(rem: Remediation) -> Optional[str]:
    parts = []
    if rem.memory_effect:
        parts.append(f"saves: {clean(rem.memory_effect)}")
    if rem.cost:
        parts.append(f"costs: {clean(rem.cost)}")
    return " | ".join(parts) or None


def fit_line(rem: Remediation) -> Optional[str]:
    if rem.fit is None:
        return None
    f = rem.fit
    words = {"fits": "fits", "may-fit": "may fit", "will-not-fit": "will not fit", "unknown": "unknown"}[f.verdict]
    if f.verdict == "unknown" and not f.explanation and f.saving_bytes is None:
        return None
    text = f"fit: {words}"
    if f.saving_bytes is not None:
        text += f" (saves about {format_size(f.saving_bytes)})"
    if f.explanation:
        text += f": {clean(f.explanation)}"
    return text


def versions_note(rem: Remediation) -> Optional[str]:
    if not rem.min_versions:
        return None
    return "needs " + ", ".join(f"{k} >= {v}" for k, v in sorted(rem.min_versions.items()))


def evidence_ref(ev: Evidence, multi_source: bool) -> str:
    ref = f"L{ev.line}"
    if multi_source and ev.source:
        ref = f"{clean(ev.source)}:{ref}"
    return ref


def diagnosis_evidence(report: Report, d: Optional[Diagnosis]) -> list[Evidence]:
    """The lines behind the verdict: the diagnosis's own, else the OOM event's or the
    first failure's, so even an unmatched OOM points into the log."""
    if d is not None and d.evidence:
        return list(d.evidence)
    ev = primary_event(report)
    if ev is not None:
        return list(ev.evidence) or []
    for f in report.failures:
        if not f.secondary and f.evidence:
            return list(f.evidence)
    return []
