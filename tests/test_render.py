"""The text and markdown reports, checked for what a user looks for in them.

Reports are built by hand with realistic values (a ZeRO-3 save on 8 x A100, a DPO run
on V100s, an old-format fragmentation OOM, a host kill, a fallback, a non-memory
failure, an empty log), so these tests do not depend on the knowledge base.
"""
from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oomdoctor.facts import Environment, Evidence, Failure, OomEvent, PhaseInfo, ProcessUse, RankSummary
from oomdoctor.report.common import compact, fence_language, number_list, signal_words
from oomdoctor.report.markdown import render_markdown
from oomdoctor.report.text import render_text
from oomdoctor.report import Diagnosis, Fit, Knob, Remediation, Report
from oomdoctor.facts.sizes import parse_size

ANSI = re.compile(r"\x1b\[[0-9;]*m")
OOM_LINE = ("[rank7]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.52 GiB. GPU 7 has a "
            "total capacity of 79.33 GiB of which 1.88 GiB is free. Including non-PyTorch memory, this "
            "process has 77.43 GiB memory in use. Of the allocated memory 74.12 GiB is allocated by "
            "PyTorch, and 1.65 GiB is reserved by PyTorch but unallocated. If reserved but unallocated "
            "memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")


def gib(text: str) -> int:
    size = parse_size(text)
    assert size is not None
    return size


def zero3_save_report(**overrides) -> Report:
    """A ZeRO-3 offload save that OOMs on rank 7 (LLaMA-Factory, DeepSpeed 0.14.0)."""
    event = OomEvent(
        kind="cuda_caching_allocator", backend="CUDA", exception="torch.OutOfMemoryError",
        message_format="torch>=2.2", device_index=7, tried_to_allocate_bytes=gib("3.52 GiB"),
        total_capacity_bytes=gib("79.33 GiB"), free_bytes=gib("1.88 GiB"),
        process_in_use_bytes=gib("77.43 GiB"), allocated_by_pytorch_bytes=gib("74.12 GiB"),
        reserved_unallocated_bytes=gib("1.65 GiB"),
        processes=[ProcessUse(bytes=gib("77.43 GiB"), is_self=True)],
        ranks=[7], line=56, evidence=[Evidence(line=56, text=OOM_LINE)],
    )
    save_fix = Remediation(
        id="no-16bit-gather", rank=1, title="Do not gather the full 16-bit model when saving",
        knob=Knob(framework="llamafactory", setting="save_only_model: true"),
        other_knobs=[
            Knob(framework="deepspeed", setting='{\n  "zero_optimization": {\n'
                 '    "stage3_gather_16bit_weights_on_model_save": false\n  }\n}'),
            Knob(framework="hf", setting="save_only_model: true"),
        ],
        memory_effect="removes the 16-bit copy of the whole model gathered on rank 0",
        cost="the checkpoint must be consolidated offline with zero_to_fp32.py",
        caveats=["resuming needs the ZeRO shards, so keep save_only_model off if you resume"],
        min_versions={"transformers": "4.36.0"},
        fit=Fit(saving_bytes=gib("3.52 GiB"), verdict="fits", explanation="the failed request disappears"),
    )
    env_fix = Remediation(
        id="expandable-segments", rank=2, title="Let the allocator grow segments instead of splitting",
        knob=Knob(framework="env", setting="export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"),
        memory_effect="recovers part of 1.65 GiB reserved but unallocated", cost="none",
    )
    bf16_fix = Remediation(
        id="bf16", rank=3, title="Train in bf16", knob=Knob(framework="llamafactory", setting="bf16: true"),
        applicable=False, why_not="not on V100 (compute capability 7.0)",
    )
    top = Diagnosis(
        incident="ckpt-save-gather", title="Checkpoint save gathers the sharded model on one GPU",
        confidence=0.93, score=11.5,
        explanation="ZeRO-3 gathers every parameter in 16 bits to write one state dict.",
        because=["the failing frames go through _zero3_consolidated_16bit_state_dict",
                 "'Saving model checkpoint to' just before the OOM",
                 "stage3_gather_16bit_weights_on_model_save is true"],
        evidence=[Evidence(line=33, text="[INFO|trainer.py:3305] >> Saving model checkpoint to saves/checkpoint-100"),
                  Evidence(line=46, text="[rank7]:   File \"deepspeed/runtime/engine.py\", line 3425, "
                           "in _zero3_consolidated_16bit_state_dict"),
                  Evidence(line=56, text=OOM_LINE)],
        remediations=[bf16_fix, save_fix, env_fix],
        next_steps=["If it still fails, capture torch.cuda.memory._dump_snapshot() on rank 7 around the save."],
        references=["https://github.com/hiyouga/LLaMA-Factory/issues/4256"],
    )
    second = Diagnosis(incident="alloc-fragmentation", title="Allocator fragmentation", confidence=0.31,
                       score=1.5, explanation="x", because=["1.65 GiB is reserved but unallocated"])
    third = Diagnosis(incident="host-oom", title="Host memory exhausted", confidence=0.2, score=1.0,
                      explanation="x", because=["ZeRO offload to CPU"])
    fields = dict(
        tool_version="0.1.0", source="train.log", diagnoses=[top, second, third], oom_events=[event],
        environment=Environment(framework="llamafactory", stage="sft", torch_version="2.3.0",
                                deepspeed_version="0.14.0", transformers_version="4.41.2",
                                zero_stage=3, offload="both", gpu_name="NVIDIA A100-SXM4-80GB",
                                gpu_count=8, world_size=48, num_nodes=6, sequence_length=2048,
                                micro_batch_size=1, mixed_precision="bf16"),
        phase="checkpoint_save",
        phase_detail=PhaseInfo(phase="checkpoint_save", reason="frame _zero3_consolidated_16bit_state_dict",
                               line=46, step=100, total_steps=405, epoch=0.74),
        ranks=RankSummary(failed_ranks=[7], failed_devices=[7], first_failure_line=56,
                          first_failure="rank 7: torch.OutOfMemoryError",
                          cascade=[Evidence(line=58, text="Killing subprocess 8812")]),
        lines_read=59, bytes_read=5340, fingerprint="ab12cd34",
    )
    fields.update(overrides)
    return Report(**fields)


def old_format_report() -> Report:
    """torch 1.13: 'reserved in total by PyTorch' wording, a foreign process, no diagnosis."""
    event = OomEvent(kind="cuda_caching_allocator", backend="CUDA", device_index=0,
                     tried_to_allocate_bytes=gib("20.00 MiB"), total_capacity_bytes=gib("23.69 GiB"),
                     already_allocated_bytes=gib("21.14 GiB"), free_bytes=0,
                     reserved_total_bytes=gib("21.57 GiB"), line=812,
                     evidence=[Evidence(line=812, text="torch.cuda.OutOfMemoryError: CUDA out of memory. "
                                        "Tried to allocate 20.00 MiB (GPU 0; 23.69 GiB total capacity; ...")])
    return Report(tool_version="0.1.0", oom_events=[event], lines_read=900, bytes_read=80_000)


def host_kill_report() -> Report:
    event = OomEvent(kind="host_oom_killer", backend="host", strength="likely",
                     detail="Killed process 4242 (python) by the kernel OOM killer",
                     host_bytes=gib("488.20 GiB"), line=1204)
    return Report(tool_version="0.1.0", oom_events=[event],
                  ranks=RankSummary(exit_codes=[-9, -9]), lines_read=1300)


def fallback_report() -> Report:
    d = Diagnosis(incident="unknown-oom", title="Out of memory, cause unknown", confidence=0.3, score=2.0,
                  fallback=True, explanation="A bare OOM message.",
                  evidence=[Evidence(line=3, text="RuntimeError: CUDA out of memory.")],
                  next_steps=["Record a memory snapshot: torch.cuda.memory._record_memory_history()"])
    return Report(tool_version="0.1.0", diagnoses=[d], lines_read=3,
                  oom_events=[OomEvent(kind="cuda_runtime_error", line=3)])


def non_memory_report() -> Report:
    d = Diagnosis(incident="ds-device-mismatch", title="DeepSpeed 0.14.1 device mismatch under ZeRO-3 offload",
                  confidence=0.88, score=9.0, memory_failure=False, explanation="A regression.",
                  evidence=[Evidence(line=77, text="RuntimeError: Expected all tensors to be on the same device")],
                  remediations=[Remediation(id="ds-version", rank=1, title="Change the DeepSpeed version",
                                            knob=Knob(framework="shell", setting="pip install 'deepspeed>=0.14.3'"))])
    return Report(tool_version="0.1.0", diagnoses=[d], lines_read=120,
                  failures=[Failure(kind="device_mismatch", message="Expected all tensors", line=77)])


def text(report: Report, **kw) -> str:
    """The full report (``-v``): what most tests here look into."""
    kw.setdefault("width", 120)
    kw.setdefault("verbose", True)
    return render_text(report, **kw)


# -- the text report ------------------------------------------------------------------

def test_verdict_names_incident_id_and_confidence_first():
    first = text(zero3_save_report()).splitlines()[0]
    assert "Checkpoint save gathers the sharded model on one GPU" in first
    assert "ckpt-save-gather" in first and "93%" in first


def test_numbers_of_the_oom_are_formatted_like_pytorch():
    out = text(zero3_save_report())
    rows = {ln.split("  ")[1].strip(): ln for ln in out.splitlines() if ln.startswith("  ") and "  " in ln[2:]}
    assert "3.52 GiB" in rows["asked"]
    assert "1.88 GiB" in rows["free"]
    assert "79.33 GiB" in rows["total capacity"]
    assert "74.12 GiB" in rows["allocated by PyTorch"]
    assert "1.65 GiB" in rows["reserved but unallocated"]
    assert "77.43 GiB" in rows["this process"]


def test_old_format_shows_reserved_in_total_and_already_allocated():
    out = text(old_format_report())
    assert re.search(r"reserved in total\s+21\.57 GiB", out)
    assert re.search(r"already allocated\s+21\.14 GiB", out)
    # reserved - allocated, which is what a user compares with the request
    assert re.search(r"reserved but unallocated\s+440\.\d\d MiB", out)
    assert "0 bytes" in out                                   # free
    assert "no known cause" in out.splitlines()[0]


def test_other_processes_are_listed_with_their_pids():
    report = zero3_save_report()
    ev = report.oom_events[0]
    ev.processes = [ProcessUse(pid=1111, bytes=gib("75.80 GiB")),
                    ProcessUse(pid=2222, bytes=gib("17.00 GiB")),
                    ProcessUse(pid=3333, bytes=gib("400.00 MiB"))]
    ev.process_in_use_bytes = None
    out = text(report)
    line = next(ln for ln in out.splitlines() if "other processes" in ln)
    assert "PID 2222 17.00 GiB" in out and "PID 3333 400.00 MiB" in out
    # the entry matching allocated + unallocated is this process, not another one
    assert "1111" not in line
    assert re.search(r"this process\s+75\.80 GiB\s+PID 1111", out)


def test_host_kill_shows_victim_rss_and_signal():
    out = text(host_kill_report())
    assert "Killed process 4242" in out
    assert re.search(r"victim RSS\s+488\.20 GiB", out)
    assert "-9 (SIGKILL)" in out and out.count("SIGKILL") == 1


def test_where_shows_phase_step_rank_and_cascade():
    out = text(zero3_save_report())
    assert "checkpoint save" in out
    assert "step 100 of 405" in out and "epoch 0.74" in out
    assert re.search(r"rank\s+7", out) and re.search(r"device\s+CUDA 7", out)
    assert "not the cause" in out


def test_evidence_lines_carry_original_line_numbers_and_fit_the_terminal():
    out = text(zero3_save_report(), width=100)
    ev_lines = [ln for ln in out.splitlines() if re.match(r"\s+L\d+  ", ln)]
    assert [re.match(r"\s+L(\d+)", ln).group(1) for ln in ev_lines] == ["33", "46", "56"]
    oom = ev_lines[-1]
    assert "torch.OutOfMemoryError: CUDA out of memory. Tried to" in oom
    assert len(oom) <= 100 and oom.endswith("...")


def test_detected_framework_knob_comes_before_other_stacks():
    out = text(zero3_save_report())
    knob = out.index("    save_only_model: true")
    others = out.index("for other stacks:")
    assert knob < others
    assert "LLaMA-Factory YAML:" in out[:knob]
    # the DeepSpeed JSON is shown on one line, still valid JSON
    assert '{"zero_optimization": {"stage3_gather_16bit_weights_on_model_save": false}}' in out


def test_fixes_are_ranked_with_effect_cost_caveats_fit():
    out = text(zero3_save_report())
    one = out.index("1. Do not gather the full 16-bit model")
    two = out.index("2. Let the allocator grow segments")
    assert one < two
    block = out[one:two]
    assert "saves: removes the 16-bit copy" in block and "costs: the checkpoint" in block
    assert "caveat: resuming needs the ZeRO shards" in block
    assert "fit: fits (saves about 3.52 GiB)" in block
    assert "needs transformers >= 4.36.0" in block
    assert "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in out[two:]


def test_non_applicable_fixes_come_last_with_their_reason():
    out = text(zero3_save_report())
    reason = out.index("Train in bf16: not on V100 (compute capability 7.0)")
    assert reason > out.index("2. Let the allocator grow segments")
    assert "bf16: true" not in out            # its knob is not offered


def test_other_candidates_one_line_each_and_top_limits_them():
    out = text(zero3_save_report())
    assert re.search(r"- Allocator fragmentation \(alloc-fragmentation, 31%\): 1\.65 GiB", out)
    assert "- Host memory exhausted (host-oom, 20%)" in out
    limited = text(zero3_save_report(), top=2)
    assert "alloc-fragmentation" in limited and "host-oom" not in limited
    assert "1 more not shown (--top 2)" in limited
    only = text(zero3_save_report(), top=1)
    assert "alloc-fragmentation" not in only and "ckpt-save-gather" in only


def test_next_steps_environment_and_notes():
    report = zero3_save_report(notes=["the log was cut at 100 MiB; the middle was skipped"])
    out = text(report)
    assert "memory._dump_snapshot()" in out
    env = out[out.index("Environment"):]
    for part in ("LLaMA-Factory (stage sft)", "torch 2.3.0", "deepspeed 0.14.0", "transformers 4.41.2",
                 "ZeRO stage 3 (optimizer + parameter offload)", "8 x NVIDIA A100-SXM4-80GB",
                 "world size 48 (6 nodes)"):
        assert part in env
    assert "the middle was skipped" in out


def test_no_escapes_without_color_and_escapes_with_it():
    plain = text(zero3_save_report(), color=False)
    assert "\x1b" not in plain
    coloured = text(zero3_save_report(), color=True)
    assert "\x1b[31m" in coloured.splitlines()[0]          # the incident in red
    assert "\x1b[1m" in coloured and "\x1b[2m" in coloured
    assert ANSI.sub("", coloured) == plain


def test_prose_lines_stay_within_100_columns():
    report = zero3_save_report()
    report.diagnoses[0].because.append("word " * 60)
    report.diagnoses[0].remediations[1].caveats.append("long caveat " * 20)
    out = text(report, width=200)
    knobs = [compact(k) for r in report.diagnoses[0].remediations for k in r.other_knobs]
    long = [ln for ln in out.splitlines() if len(ln) > 100]
    assert long                                    # the OOM evidence line is kept wider
    for ln in long:
        assert re.match(r"\s+L\d+  ", ln) or any(ln.endswith(k) for k in knobs), ln


def test_empty_report_says_nothing_was_found_and_what_was_read():
    out = text(Report(tool_version="0.1.0", source="job.log", lines_read=4210, bytes_read=300_000))
    assert out.startswith("No out-of-memory failure found")
    assert "4,210 lines" in out and "job.log" in out and "host OOM kills" in out


def test_fallback_says_oom_is_certain_but_cause_is_not():
    out = text(fallback_report())
    first = out.splitlines()[0]
    assert "cause not determined" in first and "unknown-oom" in first
    assert "out-of-memory failure is certain" in out
    assert "What to capture next" in out and "_record_memory_history" in out


def test_non_memory_incident_says_it_is_not_an_oom():
    out = text(non_memory_report())
    assert out.startswith("Not an out-of-memory failure: DeepSpeed 0.14.1 device mismatch")
    assert "pip install 'deepspeed>=0.14.3'" in out


def test_failure_without_diagnosis_is_not_called_an_oom():
    report = Report(tool_version="0.1.0",
                    failures=[Failure(kind="nccl_timeout", message="Watchdog caught collective operation timeout",
                                      line=40)])
    out = text(report)
    assert out.startswith("Not an out-of-memory failure: the job failed with nccl timeout (L40)")


def test_log_text_cannot_drive_the_terminal():
    report = zero3_save_report()
    report.diagnoses[0].evidence = [Evidence(line=9, text="evil \x1b]0;pwned\x07 \x1b[2J text")]
    out = text(report, color=False)
    assert "\x1b" not in out and "\x07" not in out


def test_memory_section_is_optional(monkeypatch):
    import sys
    import types
    from oomdoctor.memory.models import MemoryReport
    report = zero3_save_report(memory=MemoryReport(request_bytes=3 * 2**30))
    mod = types.ModuleType("oomdoctor.memory")
    mod.memory_rows = lambda r: [("weights (16-bit, 1/48)", 9 * 2**30, "ZeRO-3 shard"),
                                 {"label": "activations", "value": "unknown"}]
    monkeypatch.setitem(sys.modules, "oomdoctor.memory", mod)  # the renderer imports memory_rows lazily
    out = text(report)
    assert re.search(r"weights \(16-bit, 1/48\)\s+9\.00 GiB\s+ZeRO-3 shard", out)
    assert re.search(r"activations\s+unknown", out)
    mod.memory_rows = lambda r: 1 / 0          # a broken section is left out, not fatal
    assert "Where the memory went" not in text(report)


# -- the markdown report --------------------------------------------------------------

def test_markdown_has_heading_table_and_fenced_blocks():
    md = render_markdown(zero3_save_report())
    lines = md.splitlines()
    assert lines[0].startswith("## ") and "Checkpoint save gathers" in lines[0] and "ckpt-save-gather" in lines[0]
    assert "| asked | 3.52 GiB |" in md.replace("  ", " ") or re.search(r"\| asked \| 3\.52 GiB \|", md)
    assert re.search(r"^\|[- :|]+\|$", md, re.M)                   # a table separator row
    assert "```text\nL33 " in md or re.search(r"```text\n\s*L33", md)
    assert "```yaml\nsave_only_model: true\n```" in md.replace("   ", "")
    assert "```bash" in md and "export PYTORCH_CUDA_ALLOC_CONF" in md
    assert md.count("```") % 2 == 0
    assert "<details>" in md and "</details>" in md


def test_markdown_fence_language_follows_the_framework():
    md = render_markdown(zero3_save_report())
    details = md[md.index("<details>"):]
    assert "```json" in details and '"stage3_gather_16bit_weights_on_model_save": false' in details
    applicable = md[md.index("1. "):md.index("<details>")]
    assert applicable.index("save_only_model") < applicable.index("expandable_segments")


def test_markdown_puts_non_applicable_fixes_in_a_collapsed_section():
    md = render_markdown(zero3_save_report())
    last = md.rindex("<details>")
    assert "Train in bf16" in md[last:] and "not on V100" in md[last:]
    assert "Train in bf16" not in md[:md.index("<details>")]


def test_markdown_environment_table_and_top():
    md = render_markdown(zero3_save_report(), top=1)
    assert re.search(r"\| deepspeed \| 0\.14\.0 \|", md)
    assert "alloc-fragmentation" not in md
    assert "alloc-fragmentation" in render_markdown(zero3_save_report())


def test_markdown_escapes_table_cells_and_fences_in_log_text():
    report = zero3_save_report()
    report.diagnoses[0].because = ["x | y <b>bold</b> in __init__"]
    report.diagnoses[0].evidence = [Evidence(line=5, text="look: ``` and <script>")]
    md = render_markdown(report)
    assert "- x \\| y &lt;b&gt;bold&lt;/b&gt; in \\_\\_init\\_\\_" in md
    # a fence longer than the backticks in the log keeps the line inside the block
    assert "````text\nL5  look: ``` and <script>\n````" in md
    host = render_markdown(Report(tool_version="0.1.0", oom_events=[
        OomEvent(kind="host_oom_killer", detail="Killed process 9 | python", line=3)]))
    row = next(ln for ln in host.splitlines() if ln.startswith("| victim"))
    assert len(re.findall(r"(?<!\\)\|", row)) == 3        # two cells, the pipe escaped


def test_markdown_empty_and_fallback():
    md = render_markdown(Report(tool_version="0.1.0", lines_read=10, bytes_read=400))
    assert "No out-of-memory failure found" in md and "|" not in md
    fb = render_markdown(fallback_report())
    assert "cause not determined" in fb and "certain" in fb


# -- helpers --------------------------------------------------------------------------

@pytest.mark.parametrize("values,expected", [([7], "7"), ([0, 1, 2, 3, 7], "0-3, 7"), ([1, 2], "1, 2"),
                                             ([5, 3, 4, 3], "3-5"), ([], "")])
def test_number_list(values, expected):
    assert number_list(values) == expected


@pytest.mark.parametrize("code,expected", [(-9, "-9 (SIGKILL)"), (-7, "-7 (SIGBUS)"),
                                           (137, "137 (128 + SIGKILL)"), (1, "1")])
def test_signal_words(code, expected):
    assert signal_words(code) == expected


@pytest.mark.parametrize("framework,setting,lang", [
    ("env", "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", "bash"),
    ("deepspeed", '{"zero_optimization": {"stage": 3}}', "json"),
    ("code", "model.gradient_checkpointing_enable()", "python"),
    ("axolotl", "gradient_checkpointing: true", "yaml"),
    ("hf", "--gradient_checkpointing", "bash"),
    ("hf", "torch_empty_cache_steps=N   # TrainingArguments", "python"),
    ("llamafactory", "save_only_model: true\nsave_steps: 500", "yaml"),
])
def test_fence_language(framework, setting, lang):
    assert fence_language(Knob(framework=framework, setting=setting)) == lang


def test_compact_keeps_yaml_meaning():
    import yaml
    k = Knob(framework="axolotl", setting="gradient_checkpointing: true\ngradient_checkpointing_kwargs:\n"
             "  use_reentrant: false\n")
    assert yaml.safe_load(compact(k)) == yaml.safe_load(k.setting)


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=300), st.integers(min_value=1, max_value=10**7))
def test_any_evidence_text_renders_without_error(raw, line):
    report = zero3_save_report()
    report.diagnoses[0].evidence = [Evidence(line=line, text=raw)]
    out = render_text(report, width=80, verbose=True)
    assert f"L{line}" in out
    md = render_markdown(report)
    assert f"L{line}" in md


def test_a_diagnosed_log_renders_in_every_format():
    """End to end through the pipeline: whatever it finds in the example log, the
    reports are produced and point at the OOM's numbers and line when it is found."""
    from pathlib import Path

    import oomdoctor

    log = Path(__file__).parent / "fixtures" / "logs" / "example-zero3-save.log"
    report = oomdoctor.diagnose(str(log))
    out = render_text(report, width=100)
    assert out.splitlines()[0].startswith(("OOM:", "Out of memory", "Not an out-of-memory",
                                           "No out-of-memory"))
    md = render_markdown(report)
    assert md.startswith("## ")
    if report.oom_events:
        assert "3.52 GiB" in out and "| asked | 3.52 GiB |" in md
        oom_line = next(n for n, ln in enumerate(log.read_text().splitlines(), 1) if "OutOfMemoryError" in ln)
        assert f"L{oom_line}" in out


def test_fixes_sharing_a_reason_list_it_once():
    report = zero3_save_report()
    generic = "its preconditions do not hold for this log"
    report.diagnoses[0].remediations += [
        Remediation(id=f"fsdp-{i}", rank=9 + i, title=f"FSDP fix {i}", applicable=False, why_not=generic)
        for i in range(3)]
    out = text(report)
    assert out.count(generic) == 1
    tail = out[out.index(generic):]
    assert all(f"FSDP fix {i}" in tail for i in range(3))


def test_one_screen_keeps_the_other_processes_and_names_the_jobs_workers():
    # more figures than the one screen shows: the processes holding the device stay on it
    report = zero3_save_report()
    ev = report.oom_events[0]
    ev.processes = [ProcessUse(pid=None, bytes=gib("40.00 GiB"), is_self=True),
                    ProcessUse(pid=925, bytes=gib("40.00 GiB")), ProcessUse(pid=1187, bytes=gib("2.00 GiB"))]
    ev.allowed_bytes, ev.private_pool_bytes = gib("70.00 GiB"), gib("1.00 GiB")
    report.ranks.worker_pids = [925, 926]
    out = text(report)
    numbers = out.split("The numbers", 1)[1].split("\n\n", 1)[0].splitlines()[1:]
    assert len(numbers) > 6
    assert any("other processes" in ln and "PID 925 40.00 GiB" in ln for ln in numbers)
    assert "1 of them this job's workers" in " ".join(ln.strip() for ln in numbers)
