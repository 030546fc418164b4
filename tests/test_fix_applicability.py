"""Whether a fix is offered depends on what the log shows: framework, versions, hardware.

Each case is a log a user could paste; the assertion is what they would check in the fix
list: the fix is offered (``applicable``) or withheld with a reason that names the cause.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from oomdoctor.kb.knowledge import default_knowledge
from oomdoctor.pipeline import diagnose_source

LOGS = Path(__file__).parent / "fixtures" / "logs"
KB = Path(__file__).resolve().parents[1] / "knowledge"


def remediation(text: str, incident: str, fix: str):
    report = diagnose_source(text.encode(), knowledge=default_knowledge())
    diagnosis = next((d for d in report.diagnoses if d.incident == incident), None)
    assert diagnosis is not None, [d.incident for d in report.diagnoses]
    found = next((r for r in diagnosis.remediations if r.id == fix), None)
    assert found is not None, [r.id for r in diagnosis.remediations]
    return found


TRL_DPO = (LOGS / "fix-trl024-dpo-forward.log").read_text()


def test_trl_dpo_from_0_24_does_not_get_checkpointing_it_already_has():
    rem = remediation(TRL_DPO, "activation-memory", "gradient-checkpointing")
    assert not rem.applicable
    assert "TRL 0.24.0" in rem.why_not and "default" in rem.why_not


@pytest.mark.parametrize("change", [
    ("TRL version: 0.24.0", "TRL version: 0.19.1"),           # the default came with 0.24
    ("Instantaneous batch size per device = 8",
     "Instantaneous batch size per device = 8\ngradient_checkpointing: false"),  # shown off
], ids=["trl-0.19", "shown-off"])
def test_trl_dpo_checkpointing_offered_when_the_default_does_not_apply(change):
    old, new = change
    assert old in TRL_DPO
    rem = remediation(TRL_DPO.replace(old, new), "activation-memory", "gradient-checkpointing")
    assert rem.applicable, rem.why_not


def test_without_a_traceback_the_dpo_trainer_line_is_enough():
    # no frames: the framework reads as the HF Trainer, the stage comes from "DPOTrainer";
    # the generic fallback's checkpointing fix follows the same rule
    head = TRL_DPO.split("Traceback")[0].replace("- TRL version: 0.24.0\n",
                                                 "- TRL version: 0.24.0\nbuilding DPOTrainer with the reference model\n")
    message = TRL_DPO.splitlines()[-1].replace("2.63 GiB is reserved", "20.00 MiB is reserved")
    text = head + message + "\n"
    for incident, fix in (("activation-memory", "gradient-checkpointing"),
                          ("unknown-oom", "gradient-checkpointing-generic")):
        rem = remediation(text, incident, fix)
        assert not rem.applicable and "TRL 0.24.0" in rem.why_not, (incident, rem.why_not)


AXOLOTL_T5 = (LOGS / "fix-axolotl-transformers5-model-load.log").read_text()


def test_axolotl_on_transformers_5_still_gets_the_16bit_load():
    # transformers 5 loads in the checkpoint's dtype by default, but axolotl passes its own
    # dtype and falls back to float32 without bf16/fp16
    rem = remediation(AXOLOTL_T5, "model-load", "load-in-bf16")
    assert rem.applicable, rem.why_not
    assert rem.knob.framework == "axolotl" and "bf16: true" in rem.knob.setting


def test_plain_transformers_5_does_not_get_the_16bit_load():
    text = AXOLOTL_T5.replace("axolotl", "myproj").replace("[axolotl.cli.train] transformers version",
                                                         "[train] transformers version")
    rem = remediation(text, "model-load", "load-in-bf16")
    assert not rem.applicable and "5.1.0" in rem.why_not


# A knob that turns bf16 on, or points at a config file that does (axolotl's zero3_bf16*.json
# hard-code "bf16": {"enabled": true}); "bf16: false" and "bf16/fp16 auto" are not advice.
BF16_ON = r"(?i)\bbf16\b\"?\s*[:=]\s*(?:true|\"?auto)|torch\.bfloat16|pure_bf16\s*(?:[:=]\s*|\s+)true" \
          r"|mixed_precision\s*[:=]\s*\"?bf16|--bf16\b(?!\s+false)|_bf16\w*\.json|\"bf16\":\s*\{\s*\"enabled\":\s*true"


def _guarded(spec: dict) -> bool:
    conditions = yaml.safe_dump(spec.get("not_when", [])) + yaml.safe_dump(spec.get("requires", []))
    return "env.bf16_capable" in conditions


@pytest.mark.parametrize("path", sorted(KB.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_fix_that_turns_bf16_on_is_withheld_on_gpus_without_bf16(path):
    import regex as re
    incident = yaml.safe_load(path.read_text())
    for spec in incident.get("remediations", []):
        if spec["id"] == "use-fp16":
            continue  # the fix *away* from bf16 (it names bf16 only to turn it off)
        advice = [f for f, setting in (spec.get("knobs") or {}).items() if re.search(BF16_ON, str(setting))]
        assert not advice or _guarded(spec), \
            f"{path.name}: {spec['id']} turns bf16 on for {advice} without a not_when on env.bf16_capable"


_JAX_OOM = (
    "Traceback (most recent call last):\n"
    '  File "/work/train.py", line 31, in <module>\n'
    "    params, opt_state, loss = train_step(params, opt_state, x, y)\n"
    "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 68719476736 bytes.\n"
    '  1. Size: 64.00G\n     Operator: op_name="jit(train_step)/jit(main)/jvp(MLP)/Dense_1/dot_general"\n')


def test_a_jax_job_gets_jax_settings_and_no_pytorch_ones():
    import oomdoctor
    report = oomdoctor.diagnose(_JAX_OOM).model_dump(mode="json")
    assert report["environment"]["framework"] == "jax"
    top = report["diagnoses"][0]
    first = top["remediations"][0]
    assert first["applicable"] and first["knob"]["framework"] == "jax"
    # a fix written only for the PyTorch stacks is not offered to it, and says why
    others = [f for f in top["remediations"] if "jax" not in {k["framework"] for k in [f["knob"], *f["other_knobs"]] if k}]
    assert others and not any(f["applicable"] for f in others)
    assert any("no setting of it for jax" in f["why_not"] for f in others)


def test_jaxs_pool_fraction_is_offered_to_jax_jobs_only():
    import oomdoctor
    jax = oomdoctor.diagnose("jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying "
                             "to allocate 1048576 bytes.\n").model_dump(mode="json")
    assert jax["environment"]["framework"] == "jax"
    fixes = {r["id"]: r for d in jax["diagnoses"] for r in d["remediations"]}
    assert fixes["jax-memory-fraction"]["applicable"]
    torch = oomdoctor.diagnose("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a "
                               "total capacity of 79.18 GiB of which 512.00 MiB is free.\n").model_dump(mode="json")
    fixes = {r["id"]: r for d in torch["diagnoses"] for r in d["remediations"]}
    assert not fixes.get("jax-memory-fraction", {"applicable": False})["applicable"]


def test_spark_executors_killed_by_yarn_get_sparks_overhead_first():
    import oomdoctor
    yarn = oomdoctor.diagnose("ERROR YarnClusterScheduler:73 - Lost executor 8 on node1: Container killed by YARN for "
                              "exceeding memory limits.  39.0 GB of 39 GB physical memory used.\n").model_dump(mode="json")
    assert yarn["diagnoses"][0]["remediations"][0]["id"] == "spark-executor-overhead"
    killed = oomdoctor.diagnose("Killed\n").model_dump(mode="json")
    fixes = {r["id"]: r for d in killed["diagnoses"] for r in d["remediations"]}
    assert not fixes.get("spark-executor-overhead", {"applicable": False})["applicable"]


_TF_OOM = ("2019-10-24 21:55:25.500952: W tensorflow/core/framework/op_kernel.cc:1318] OP_REQUIRES failed at "
           "cwise_ops_common.cc:70 : Resource exhausted: OOM when allocating tensor with shape[8,509,3072] and type float "
           "on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc\n")


def test_a_tensorflow_job_gets_tensorflows_settings_and_no_pytorch_ones():
    import oomdoctor
    report = oomdoctor.diagnose(_TF_OOM).model_dump(mode="json")
    assert report["environment"]["framework"] == "tensorflow"
    fixes = [r for d in report["diagnoses"] for r in d["remediations"]]
    offered = [r for r in fixes if r["applicable"]]
    assert offered and all(r["knob"]["framework"] == "tensorflow" for r in offered)
    assert any("no setting of it for tensorflow" in (r["why_not"] or "") for r in fixes)


def test_tensorflows_banners_beside_pytorch_do_not_make_a_tensorflow_job():
    import oomdoctor
    log = ("2024-05-01 10:00:00.000000: I tensorflow/core/util/port.cc:113] oneDNN custom operations are on.\n"
           "2024-05-01 10:00:01.000000: I tensorflow/stream_executor/platform/default/dso_loader.cc:53] Successfully "
           "opened dynamic library libcudart.so.11.0\n"
           "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
           "79.18 GiB of which 1.00 GiB is free.\n")
    assert oomdoctor.diagnose(log).model_dump(mode="json")["environment"]["framework"] != "tensorflow"


PADDLE_OOM = ("Out of memory error on GPU 0. Cannot allocate 3.125000GB memory on GPU 0, available memory is "
              "only 117.750000MB.\n")
CATBOOST_OOM = ("catboost/cuda/cuda_lib/memory_pool/stack_like_memory_pool.h:314: Error: Out of memory. "
                "Requested 1070.546387; Free 2010.952393\n")


def _text(log: str) -> str:
    from oomdoctor.report.text import render_text
    return render_text(diagnose_source(log.encode(), knowledge=default_knowledge()))


def test_another_frameworks_allocator_gets_no_pytorch_code():
    """A log that names no framework and fails in another framework's allocator (PaddlePaddle's
    here): PyTorch's code and settings are withheld, with the reason, the summary says none
    applies instead of showing one, and the capture steps say whose tools they name."""
    rem = remediation(PADDLE_OOM, "unknown-oom", "capture-snapshot")
    assert not rem.applicable and "PaddlePaddle" in rem.why_not
    text = _text(PADDLE_OOM)
    assert "None applies as written" in text and "torch.cuda" not in text.split("First fix")[1]
    report = diagnose_source(PADDLE_OOM.encode(), knowledge=default_knowledge())
    assert "PaddlePaddle's allocator" in report.diagnoses[0].next_steps[0]


def test_a_pytorch_variable_set_from_a_slurm_line_is_still_pytorchs():
    # CatBoost's pool: the expandable-segments fix has Slurm and Kubernetes knobs, which export
    # PYTORCH_CUDA_ALLOC_CONF: withheld like its environment knob
    report = diagnose_source(CATBOOST_OOM.encode(), knowledge=default_knowledge())
    offered = [r for d in report.diagnoses for r in d.remediations if r.applicable]
    assert offered == [], [(r.id, r.knob) for r in offered]
    assert "PYTORCH_CUDA_ALLOC_CONF" not in _text(CATBOOST_OOM).split("First fix")[1]


@pytest.mark.parametrize("beside", [
    # PyTorch's frames, PyTorch's version, torch-tensorrt's frames: the job is PyTorch's
    'Traceback (most recent call last):\n  File "/env/site-packages/torch/nn/modules/module.py", '
    'line 1501, in _call_impl\n    return forward_call(*args, **kwargs)\n',
    "PyTorch version: 2.3.1+cu121\n",
    '  File "/usr/local/lib/python3.10/dist-packages/torch_tensorrt/dynamo/_compiler.py", line 230, in compile\n',
], ids=["frames", "version", "torch-tensorrt"])
def test_the_same_allocator_in_a_pytorch_job_keeps_its_fixes(beside):
    rem = remediation(beside + PADDLE_OOM, "unknown-oom", "capture-snapshot")
    assert rem.applicable, rem.why_not


def test_fixes_ruled_out_by_the_log_not_its_stack_say_so_plainly():
    from oomdoctor.report.common import no_fix_line
    from oomdoctor.kb.diagnosis import Remediation
    refused = Remediation(id="x", rank=1, title="Give Spark's executors more memory overhead", applicable=False,
                          why_not="its preconditions do not hold for this log")
    assert no_fix_line([refused]) == "No listed fix applies to this log (-v lists them, and why)."


def test_the_html_report_says_why_no_fix_is_shown():
    from oomdoctor.report.html import render_html
    html = render_html(diagnose_source(PADDLE_OOM.encode(), knowledge=default_knowledge()))
    assert "None applies as written" in html and "PaddlePaddle" in html
