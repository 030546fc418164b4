"""The six seed scenarios: each fixture must end with the right incident AND the right fix on top.

A user reads the first diagnosis and its first applicable fix; both have to be right, in the
syntax of the framework the log shows, and nothing the log's hardware cannot do may be
offered (bf16 on a V100).
"""
from __future__ import annotations

from pathlib import Path

import pytest
import regex as re

from oomdoctor.kb.knowledge import default_knowledge
from oomdoctor.pipeline import diagnose_source

LOGS = Path(__file__).parent / "fixtures" / "logs"

# Advice that turns bf16 on (a setting of bf16: false / pure_bf16 False is not advice to use it).
BF16_ADVICE = re.compile(
    r"(?i)(?:\bbf16\b\"?\s*[:=]\s*(?:true|\"?auto)|\"bf16\":\s*\{\s*\"enabled\":\s*(?:true|\"auto\")"
    r"|torch\.bfloat16|pure_bf16\s*(?:[:=]\s*|\s+)true|mixed_precision\s*[:=]\s*\"?bf16|--bf16\b(?!\s+false))")


def diagnose(name: str):
    return diagnose_source(str(LOGS / name), knowledge=default_knowledge())


def first_fix(diagnosis):
    applicable = [r for r in diagnosis.remediations if r.applicable]
    assert applicable, f"{diagnosis.incident} has no applicable fix"
    return applicable[0]


# (fixture, incident on top, acceptable ids of the first applicable fix, framework of its first knob)
SCENARIOS = [
    ("seed-zero3-offload-236b-save.log", "ckpt-save-gather", {"no-16bit-gather-on-save"}, "llamafactory"),
    ("seed-dpo-v100-fragmentation.log", "alloc-fragmentation", {"expandable-segments"}, None),
    ("seed-axolotl-zero3-4k-no-gc.log", "activation-memory", {"gradient-checkpointing"}, "axolotl"),
    ("seed-xtuner-yi34b-ds0141.log", "ds-device-mismatch", {"change-deepspeed-version"}, "xtuner"),
    ("seed-epoch-end-host-zero3-offload.log", "zero3-epoch-end-leak", {"persistent-workers", "no-dataloader-workers"}, None),
    ("seed-llama-recipes-70b-fsdp-peft-save.log", "ckpt-save-gather",
     {"peft-fsdp-save-cpu-offload"}, "llama-cookbook"),
]


@pytest.mark.parametrize("fixture,incident,fixes,framework", SCENARIOS, ids=[s[0][5:-4] for s in SCENARIOS])
def test_seed_scenario_top_incident_and_fix(fixture, incident, fixes, framework):
    report = diagnose(fixture)
    ranked = [f"{d.incident} ({d.score:g})" for d in report.diagnoses]
    assert report.diagnoses and report.diagnoses[0].incident == incident, ranked
    fix = first_fix(report.diagnoses[0])
    assert fix.id in fixes, [r.id for r in report.diagnoses[0].remediations if r.applicable]
    if framework is not None:
        assert fix.knob is not None and fix.knob.framework == framework, fix.knob


def test_zero3_save_on_48_gpus_explains_the_gather_and_the_two_flags():
    top = diagnose("seed-zero3-offload-236b-save.log").diagnoses[0]
    fix = first_fix(top)
    assert "stage3_gather_16bit_weights_on_model_save" in fix.knob.setting and "false" in fix.knob.setting
    save_only = next(r for r in top.remediations if r.id == "save-only-model")
    # the two flags do different things, and the fix list says so
    assert "does NOT remove the 16-bit gather" in save_only.memory_effect
    texts = [e.text for e in top.evidence]
    assert any("Saving model checkpoint" in t for t in texts), texts
    assert any(re.search(r"get_state_dict|_zero3_consolidated_16bit_state_dict", t) for t in texts), texts


def test_dpo_on_v100_never_advises_bf16():
    report = diagnose("seed-dpo-v100-fragmentation.log")
    assert report.environment.gpu_name and "V100" in report.environment.gpu_name
    for diagnosis in report.diagnoses:
        for rem in diagnosis.remediations:
            if not rem.applicable:
                continue
            for knob in [rem.knob, *rem.other_knobs]:
                if knob is not None:
                    assert not BF16_ADVICE.search(knob.setting), (diagnosis.incident, rem.id, knob.setting)


def test_dpo_fragmentation_fix_is_the_environment_variable_and_safe_to_auto_apply():
    fix = first_fix(diagnose("seed-dpo-v100-fragmentation.log").diagnoses[0])
    assert fix.auto_env == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    assert "expandable_segments:True" in fix.knob.setting


def test_xtuner_on_deepspeed_0141_is_not_called_a_memory_failure():
    report = diagnose("seed-xtuner-yi34b-ds0141.log")
    top = report.diagnoses[0]
    assert top.memory_failure is False
    assert not any(d.memory_failure for d in report.diagnoses)
    assert "0.14.3" in first_fix(top).knob.setting


def test_epoch_end_host_growth_is_not_blamed_on_a_save():
    ranked = [d.incident for d in diagnose("seed-epoch-end-host-zero3-offload.log").diagnoses]
    assert "ckpt-save-gather" not in ranked[:1]
    assert "host-oom" in ranked  # the generic host explanation stays visible, below


def test_bf16_advice_pattern_catches_what_it_must():
    for advice in ("bf16: true", "bf16=True", '"bf16": {"enabled": true}', "torch_dtype=torch.bfloat16",
                   "--fsdp_config.pure_bf16 True", "mixed_precision: bf16"):
        assert BF16_ADVICE.search(advice), advice
    for fine in ("bf16: false\nfp16: true", "bf16=False, fp16=True", '"bf16": {"enabled": false}',
                 "--fsdp_config.pure_bf16 False --use_fp16 True"):
        assert not BF16_ADVICE.search(fine), fine


@pytest.mark.parametrize("name", [
    "seed-zero3-offload-236b-save", "seed-dpo-v100-fragmentation",
    "seed-axolotl-zero3-4k-no-gc", "seed-llama-recipes-70b-fsdp-peft-save",
])
def test_gpu_seed_scenarios_show_a_budget_and_a_fit_for_the_top_fix(name):
    """The GPU-memory seeds: the memory section holds the allocator's figures and an
    estimate, and the top fix carries a saving and a verdict. (The epoch-end seed is host
    memory and the DeepSpeed seed is not a memory failure: no GPU budget applies there.)"""
    import oomdoctor
    report = oomdoctor.diagnose(str(Path(__file__).parent / "fixtures" / "logs" / f"{name}.log"))
    assert report.memory is not None
    assert report.memory.allocator and report.memory.estimate
    top_fix = report.diagnoses[0].remediations[0]
    assert top_fix.fit is not None and top_fix.fit.verdict in ("fits", "may-fit", "will-not-fit")
    assert top_fix.fit.saving_bytes and top_fix.fit.saving_bytes > 0


@pytest.mark.parametrize("fixture", [s[0] for s in SCENARIOS], ids=[s[0][5:-4] for s in SCENARIOS])
def test_the_default_report_fits_one_screen(fixture):
    """Verdict, numbers, where, evidence and the first fix in 40 lines at 100 columns; -v for the rest."""
    from oomdoctor.report.text import render_text

    report = diagnose(fixture)
    out = render_text(report, width=100, color=False)
    lines = out.splitlines()
    assert len(lines) <= 40, out
    assert all(len(ln) <= 100 or ln.startswith(" " * 6) for ln in lines), out   # knob blocks are never cut
    assert "First fix" in out and "-v for the full report" in out
    fix = first_fix(report.diagnoses[0])
    assert fix.title in out
    full = render_text(report, width=100, color=False, verbose=True)
    assert len(full.splitlines()) > len(lines)
