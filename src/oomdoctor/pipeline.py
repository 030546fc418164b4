"""The one pipeline every door ends in: bytes in → Report out.

    view   = read_view(source)              # bounded: whole log, or regions of a big one
    lines  = normalise(view)                # decorations stripped, line numbers kept
    facts  = extract(lines)                 # every parser family
    ranked = classify(facts, knowledge)     # generic engine over the YAML incidents
    report = Report(facts, ranked)          # renderers read the report, nothing else
"""
from __future__ import annotations

import dataclasses

from typing import Optional, Sequence

from . import __version__
from .facts.models import Environment, Facts
from .read.normalise import Line, normalise_pairs
from .parsers import ENVIRONMENT_ONLY, extract
from .read.reader import LogView, Source, open_source, read_view
from .report.model import Report


def facts_from_view(view: LogView, source: Optional[str] = None,
                    lines: Optional[list[Line]] = None) -> tuple[Facts, list[Line]]:
    """``lines``: the view's lines when already normalised (each line is normalised alone)."""
    if lines is None:
        lines = normalise_pairs(view.pairs)
    facts = extract(lines, source)
    facts.lines_read = view.lines_read
    facts.bytes_read = view.bytes_read
    facts.notes.extend(view.notes)
    return facts, lines


def report_from_facts(facts: Facts, lines: list[Line], *, source: Optional[str] = None,
                      knowledge=None, framework: Optional[str] = None) -> Report:
    from .kb.classify import classify
    from .kb.knowledge import default_knowledge

    kb = knowledge if knowledge is not None else default_knowledge()
    report = Report.from_facts(facts, tool_version=__version__, source=source)
    report.diagnoses = classify(facts, kb, lines=lines, framework=framework, notes=report.notes)
    report.notes.extend(f"knowledge file skipped: {p}" for p in kb.problems)
    from .memory import memory_section
    report.memory = memory_section(facts, report.diagnoses)
    from .report.fingerprint import fingerprint
    report.fingerprint = fingerprint(report)
    return report


def diagnose_view(view: LogView, *, source: Optional[str] = None, knowledge=None,
                  framework: Optional[str] = None, lines: Optional[list[Line]] = None) -> Report:
    facts, lines = facts_from_view(view, source, lines)
    return report_from_facts(facts, lines, source=source, knowledge=knowledge, framework=framework)


def diagnose_source(src: Source, *, knowledge=None, framework: Optional[str] = None) -> Report:
    """Diagnose one log: a path ('-' for stdin), bytes, or a binary stream."""
    stream, name = open_source(src)
    try:
        view = read_view(stream, name)
    finally:
        if name not in (None, "<stdin>"):
            stream.close()
    return diagnose_view(view, source=name, knowledge=knowledge, framework=framework)


def diagnose_many(sources: Sequence[Source], *, knowledge=None, framework: Optional[str] = None) -> Report:
    """Several pasted fragments of one job (e.g. each rank's file) → one report."""
    if len(sources) == 1:
        return diagnose_source(sources[0], knowledge=knowledge, framework=framework)
    pairs: list[tuple[int, str]] = []
    merged_lines: list[Line] = []
    names = []
    lines_read = bytes_read = 0
    notes: list[str] = []
    envs: list[Environment] = []
    offset = 0
    for src in sources:
        stream, name = open_source(src)
        try:
            view = read_view(stream, name)
        finally:
            if name not in (None, "<stdin>"):
                stream.close()
        names.append(name or "<input>")
        lines = normalise_pairs(view.pairs)
        # the job's configuration only: the failure families run once, on the merged lines
        envs.append(extract(lines, name, ENVIRONMENT_ONLY).environment)
        # Line numbers continue across files so evidence stays unambiguous; the text
        # report names the file of each evidence line through Evidence.source.
        pairs.extend((offset + no, text) for no, text in view.pairs)
        merged_lines.extend(dataclasses.replace(ln, no=offset + ln.no) for ln in lines)
        offset += view.lines_read + 1
        pairs.append((offset, ""))
        merged_lines.append(Line(no=offset, raw="", text=""))
        lines_read += view.lines_read
        bytes_read += view.bytes_read
        notes.extend(view.notes)
    unrelated = unrelated_note(names, envs)
    if unrelated:
        notes.insert(0, unrelated)
    merged = LogView(pairs=pairs, lines_read=lines_read, bytes_read=bytes_read, notes=notes)
    return diagnose_view(merged, source=", ".join(names), knowledge=knowledge, framework=framework,
                         lines=merged_lines)


# -- several files: one job, or several? -----------------------------------------------------

UNRELATED_NOTE = "these files look like different jobs"

# What two files of one job (each rank's log, a launcher's and a worker's) cannot disagree
# on. Each file is compared only on what both of them print, so a file that says little
# never makes a difference; and what one rank may print and another not (the frameworks a
# banner names, hardware, the phase) is left out: the warning is for jobs that surely differ.
_SAME_JOB = (("model_name", "model"), ("torch_version", "torch"), ("transformers_version", "transformers"),
             ("deepspeed_version", "DeepSpeed"), ("python_version", "Python"), ("world_size", "world size"),
             ("num_nodes", "nodes"), ("zero_stage", "ZeRO stage"), ("finetuning_type", "fine-tuning"),
             ("gpu_name", "GPU"))
# Trainers that a whole job runs under: two of them in two files are two jobs. The layers
# below them (DeepSpeed, accelerate, FSDP, the HF Trainer, plain PyTorch) are not compared:
# one rank's file may show the trainer's banner and another only the layer's.
_TRAINERS = {"llamafactory", "axolotl", "xtuner", "llama-recipes", "trl", "megatron", "ms-swift", "unsloth",
             "torchtune"}


def _same(field: str, a, b) -> bool:
    if field == "model_name":   # a hub id and the local copy it was downloaded to are one model
        return str(a).rstrip("/").rsplit("/", 1)[-1].lower() == str(b).rstrip("/").rsplit("/", 1)[-1].lower()
    if field.endswith("_version"):   # 2.1 and 2.1.2, 2.1.2 and 2.1.2+cu121 agree
        x, y = str(a).split("+")[0], str(b).split("+")[0]
        return x == y or x.startswith(y + ".") or y.startswith(x + ".")
    if isinstance(a, str) and isinstance(b, str):
        return a.strip().lower() == b.strip().lower()
    return a == b


def job_differences(a: Environment, b: Environment) -> list[str]:
    """What two files' environments disagree on, as ``what: x vs y`` (empty: maybe one job)."""
    out = []
    if a.framework in _TRAINERS and b.framework in _TRAINERS and a.framework != b.framework:
        out.append(f"framework: {a.framework} vs {b.framework}")
    for field, label in _SAME_JOB:
        x, y = getattr(a, field), getattr(b, field)
        if x is not None and y is not None and not _same(field, x, y):
            out.append(f"{label}: {x} vs {y}")
    return out


def unrelated_note(names: Sequence[str], envs: Sequence[Environment]) -> Optional[str]:
    """A note when two of the files are surely not of one job, else None."""
    for i in range(len(envs)):
        for j in range(i + 1, len(envs)):
            diff = job_differences(envs[i], envs[j])
            if diff:
                return (f"{UNRELATED_NOTE} ({names[i]} and {names[j]} differ in " + "; ".join(diff[:3])
                        + "): this one report mixes their evidence; diagnose --per-file gives one report "
                        "for each file")
    return None
