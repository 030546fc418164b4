"""The knowledge base follows the checked facts of the remediation reference's "Corrections".

Every log in this file is synthetic: a few lines written for the test (version lines in the
forms real logs print them, one traceback, one allocator message), not a capture of a real
job. Each test shows a fix offered or withheld for the versions, hardware and configuration
the log shows, with version guards tested on both sides of their boundary.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import regex as re
import yaml

from oomdoctor.kb.knowledge import default_knowledge
from oomdoctor.pipeline import diagnose_source

KB = Path(__file__).resolve().parents[1] / "knowledge"
LOGS = Path(__file__).parent / "fixtures" / "logs"

GPU_OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.32 GiB. GPU 0 has a total capacity "
    "of 79.15 GiB of which 1.21 GiB is free. Including non-PyTorch memory, this process has 77.93 GiB memory "
    "in use. Of the allocated memory 75.02 GiB is allocated by PyTorch, and 1.87 GiB is reserved by PyTorch "
    "but unallocated. If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
    "Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)
# the same event, but with most of the reserved memory unallocated (fragmentation)
FRAGMENTED_OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 has a total capacity "
    "of 79.15 GiB of which 1.10 GiB is free. Including non-PyTorch memory, this process has 78.04 GiB memory "
    "in use. Of the allocated memory 61.20 GiB is allocated by PyTorch, and 16.30 GiB is reserved by PyTorch "
    "but unallocated. If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
    "Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)

FORWARD_FRAMES = """\
Traceback (most recent call last):
  File "/usr/local/lib/python3.11/site-packages/transformers/trainer.py", line 3318, in training_step
    loss = self.compute_loss(model, inputs)
  File "/usr/local/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1773, in _wrapped_call_impl
    return self._call_impl(*args, **kwargs)
  File "/usr/local/lib/python3.11/site-packages/transformers/models/llama/modeling_llama.py", line 262, in forward
    hidden_states = self.mlp(hidden_states)
"""


def diagnose(text: str):
    return diagnose_source(text.encode(), knowledge=default_knowledge())


def remediation(text: str, incident: str, fix: str):
    report = diagnose(text)
    diagnosis = next((d for d in report.diagnoses if d.incident == incident), None)
    assert diagnosis is not None, [d.incident for d in report.diagnoses]
    found = next((r for r in diagnosis.remediations if r.id == fix), None)
    assert found is not None, [r.id for r in diagnosis.remediations]
    return found


def offered(text: str, incident: str, fix: str) -> bool:
    return remediation(text, incident, fix).applicable


def spec(incident: str, fix: str) -> dict:
    data = yaml.safe_load((KB / f"{incident}.yaml").read_text())
    return next(r for r in data["remediations"] if r["id"] == fix)


# --- PEFT + ZeRO-3 save: adapters-only gathering at save_model from transformers 5.0 + DeepSpeed 0.13.2

def zero3_peft_save(transformers: str, deepspeed: str) -> str:
    """Synthetic: a Trainer save of a LoRA model under ZeRO-3 that fails in the 16-bit gather."""
    return f"""\
- `transformers` version: {transformers}
- DeepSpeed version: {deepspeed}
- PyTorch version (GPU?): 2.4.0+cu121 (True)
- PEFT version: 0.13.2
[2024-05-12 03:10:42,118] [INFO] [config.py:1000:print]   zero_optimization_stage ...... 3
trainable params: 16,384,000 || all params: 8,046,645,248 || trainable%: 0.2036
{{'loss': 0.9181, 'grad_norm': 1.372, 'learning_rate': 1.9e-05, 'epoch': 0.48}}
[INFO|trainer.py:3410] 2024-05-12 07:13:32,440 >> Saving model checkpoint to output/checkpoint-500
Traceback (most recent call last):
  File "/usr/local/lib/python3.10/dist-packages/transformers/trainer.py", line 2885, in _save_checkpoint
    self.save_model(output_dir, _internal_call=True)
  File "/usr/local/lib/python3.10/dist-packages/transformers/trainer.py", line 3420, in save_model
    state_dict = self.accelerator.get_state_dict(self.deepspeed)
  File "/usr/local/lib/python3.10/dist-packages/deepspeed/runtime/engine.py", line 3425, in _zero3_consolidated_16bit_state_dict
    get_layer_state_dict(self.module, prefix="")
{GPU_OOM}
"""


@pytest.mark.parametrize("transformers,deepspeed,expected", [
    ("4.39.0", "0.14.0", True),    # the old claim ("4.39 gathers only adapters") was wrong for the 16-bit save
    ("4.57.0", "0.14.0", True),
    ("5.0.0", "0.13.1", True),     # DeepSpeed below 0.13.2 cannot exclude frozen parameters there
    ("5.0.0", "0.13.2", False),
    ("5.0.0", "0.14.0", False),
])
def test_peft_zero3_save_gathers_adapters_only_from_transformers_5(transformers, deepspeed, expected):
    rem = remediation(zero3_peft_save(transformers, deepspeed), "ckpt-save-gather", "peft-adapters-only")
    assert rem.applicable is expected, rem.why_not
    if not expected:
        assert transformers in rem.why_not and deepspeed in rem.why_not


def test_peft_zero3_save_knob_names_the_release_that_fixes_it():
    rem = remediation(zero3_peft_save("4.57.0", "0.14.0"), "ckpt-save-gather", "peft-adapters-only")
    assert "5.0" in rem.knob.setting and "0.13.2" in rem.knob.setting
    assert "4.39" not in rem.knob.setting


# --- save_only_model: optimizer state only; rejected with load_best_model_at_end under DeepSpeed/FSDP

def test_save_only_model_is_offered_under_zero3_without_load_best():
    rem = remediation(zero3_peft_save("4.57.0", "0.14.0"), "ckpt-save-gather", "save-only-model")
    assert rem.applicable, rem.why_not
    assert "NOT remove the 16-bit gather" in rem.memory_effect


@pytest.mark.parametrize("setting", ["load_best_model_at_end=True,", "load_best_model_at_end: true",
                                     "'load_best_model_at_end': True,"])
def test_save_only_model_is_withheld_with_load_best_model_at_end_under_deepspeed(setting):
    text = zero3_peft_save("4.57.0", "0.14.0").replace(
        "trainable params:", f"{setting}\ntrainable params:")
    rem = remediation(text, "ckpt-save-gather", "save-only-model")
    assert not rem.applicable and "load_best_model_at_end" in rem.why_not


def test_save_only_model_is_withheld_when_the_gather_flag_is_off():
    # the Trainer then writes the full ZeRO checkpoint (optimizer included) whatever save_only_model says
    text = zero3_peft_save("4.57.0", "0.14.0").replace(
        "trainable params:",
        '[INFO] [config.py:986:print_user_config]   json = {"zero_optimization": {"stage": 3, '
        '"stage3_gather_16bit_weights_on_model_save": false}}\ntrainable params:')
    rem = remediation(text, "ckpt-save-gather", "save-only-model")
    assert not rem.applicable and "optimizer included" in rem.why_not


# --- LLaMA-Factory overwrites PYTORCH_CUDA_ALLOC_CONF from 0.9.3 for multi-device launches

def lf_fragmentation(version: str) -> str:
    """Synthetic: a LLaMA-Factory multi-GPU run with a fragmented cache."""
    return f"""\
llamafactory=={version}
torch==2.4.0
[INFO|2025-03-02 11:02:13] llamafactory.hparams.parser:355 >> Process rank: 0, world size: 8, device: cuda:0, distributed training: True, compute dtype: torch.bfloat16
{FORWARD_FRAMES}{FRAGMENTED_OOM}
"""


@pytest.mark.parametrize("version,expected", [("0.9.2", True), ("0.9.3", False), ("0.9.5", False)])
def test_llamafactory_sets_expandable_segments_itself_from_0_9_3(version, expected):
    rem = remediation(lf_fragmentation(version), "alloc-fragmentation", "expandable-segments")
    assert rem.applicable is expected, rem.why_not
    if not expected:
        assert version in rem.why_not and "OPTIM_TORCH" in rem.why_not


@pytest.mark.parametrize("version,expected", [("0.9.2", True), ("0.9.3", False)])
def test_max_split_size_is_overwritten_by_the_llamafactory_launcher(version, expected):
    assert offered(lf_fragmentation(version), "alloc-fragmentation", "max-split-size") is expected


# --- PYTORCH_CUDA_ALLOC_CONF stays the name; ROCm needs torch 2.11; cudaMallocAsync where there is no alternative

def fragmentation(torch_version: str, extra: str = "") -> str:
    """Synthetic: a plain training script with a fragmented cache."""
    return f"torch=={torch_version}\n{extra}{FORWARD_FRAMES}{FRAGMENTED_OOM}\n"


def test_allocator_advice_uses_the_name_every_version_reads():
    for incident, fix in (("alloc-fragmentation", "expandable-segments"), ("unknown-oom", "expandable-segments-generic")):
        knobs = spec(incident, fix)["knobs"]
        assert "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in knobs["env"]
        assert not any(re.search(r"(?<!CUDA_)\bPYTORCH_ALLOC_CONF=", v) for v in knobs.values())


@pytest.mark.parametrize("torch_version,expected", [("2.10.0", False), ("2.11.0", True)])
def test_expandable_segments_on_rocm_need_torch_2_11(torch_version, expected):
    text = fragmentation(f"{torch_version}+rocm7.0")
    rem = remediation(text, "alloc-fragmentation", "expandable-segments")
    assert rem.applicable is expected, rem.why_not
    if not expected:
        assert "ROCm" in rem.why_not and torch_version in rem.why_not


@pytest.mark.parametrize("torch_version,expected", [("2.0.1", True), ("2.1.0", False)])
def test_cuda_malloc_async_only_where_expandable_segments_do_not_exist(torch_version, expected):
    text = fragmentation(f"{torch_version}+cu118")
    assert offered(text, "alloc-fragmentation", "cuda-malloc-async") is expected
    assert offered(text, "alloc-fragmentation", "expandable-segments") is (not expected)


# --- TRL turns gradient checkpointing on by default: 0.22 in SFT/DPO/GRPO/KTO/Reward/RLOO, 0.29 everywhere

TRL_DPO = (LOGS / "fix-trl024-dpo-forward.log").read_text()


@pytest.mark.parametrize("version,expected", [("0.21.0", True), ("0.22.0", False), ("0.28.0", False)])
def test_trl_dpo_checkpointing_default_from_0_22(version, expected):
    text = TRL_DPO.replace("TRL version: 0.24.0", f"TRL version: {version}")
    rem = remediation(text, "activation-memory", "gradient-checkpointing")
    assert rem.applicable is expected, rem.why_not
    if not expected:
        assert f"TRL {version}" in rem.why_not and "default" in rem.why_not


def trl_sft(version: str) -> str:
    """Synthetic: TRL SFTTrainer failing in the forward pass."""
    return TRL_DPO.replace("TRL version: 0.24.0", f"TRL version: {version}").replace(
        "trl/trainer/dpo_trainer.py", "trl/trainer/sft_trainer.py").replace(
        "train_dpo.py", "train_sft.py").replace(
        "loss, metrics = self.get_batch_loss_metrics(model, inputs, train_eval=\"train\")",
        "outputs = model(**inputs)")


@pytest.mark.parametrize("version,expected", [("0.21.0", True), ("0.22.0", False)])
def test_trl_sft_checkpointing_default_from_0_22(version, expected):
    rem = remediation(trl_sft(version), "activation-memory", "gradient-checkpointing")
    assert rem.applicable is expected, rem.why_not


# --- TRL keys removed in 0.29

@pytest.mark.parametrize("version,expected", [("0.28.0", True), ("0.29.0", False)])
def test_reference_free_dpo_only_up_to_trl_0_28(version, expected):
    text = TRL_DPO.replace("TRL version: 0.24.0", f"TRL version: {version}")
    rem = remediation(text, "preference-ref-model", "reference-free-dpo")
    assert rem.applicable is expected, rem.why_not
    if not expected:
        assert "0.29" in rem.why_not


@pytest.mark.parametrize("version,expected", [("0.28.0", True), ("0.29.0", False)])
def test_ref_adapter_name_only_up_to_trl_0_28(version, expected):
    text = TRL_DPO.replace("TRL version: 0.24.0", f"TRL version: {version}\n- PEFT version: 0.17.0")
    assert offered(text, "preference-ref-model", "ref-adapter-name") is expected


@pytest.mark.parametrize("version,expected", [("0.10.0", True), ("0.11.0", False), ("0.28.0", False), ("0.29.0", True)])
def test_precompute_ref_log_probs_refused_under_zero3_from_0_11_to_0_28(version, expected):
    text = TRL_DPO.replace("TRL version: 0.24.0", f"TRL version: {version}").replace(
        "[INFO|trainer.py:2519]",
        "[2025-10-12 09:13:40,001] [INFO] [config.py:1000:print]   zero_optimization_stage ...... 3\n[INFO|trainer.py:2519]")
    rem = remediation(text, "preference-ref-model", "precompute-ref-log-probs")
    assert rem.applicable is expected, rem.why_not


def test_no_trl_knob_names_a_removed_key_without_its_last_version():
    for path in KB.glob("*.yaml"):
        for rem in yaml.safe_load(path.read_text())["remediations"]:
            setting = rem["knobs"].get("trl", "")
            for key in ("ref_model_init_kwargs", "reference_free", "max_prompt_length", "ref_adapter_name"):
                if key in setting:
                    assert "0.28" in setting or "0.29" in setting, (path.name, rem["id"], key)


# --- transformers keys: dataloader_prefetch_factor (4.38), dataloader_multiprocessing_context (5.15)

def dataloader_killed(transformers: str) -> str:
    """Synthetic: a DataLoader worker killed by the OOM killer in a Trainer run."""
    return f"""\
- `transformers` version: {transformers}
- PyTorch version (GPU?): 2.4.0+cu121 (True)
[INFO|trainer.py:2078] 2024-05-12 03:11:20,012 >> ***** Running training *****
 12%|█▏        | 120/1000 [02:11<16:02,  1.09s/it]
Traceback (most recent call last):
  File "/usr/local/lib/python3.10/dist-packages/torch/utils/data/dataloader.py", line 1133, in _try_get_data
    data = self._data_queue.get(timeout=timeout)
RuntimeError: DataLoader worker (pid 4312) is killed by signal: Killed.
"""


@pytest.mark.parametrize("version,expected", [("4.37.0", False), ("4.38.0", True)])
def test_dataloader_prefetch_factor_from_transformers_4_38(version, expected):
    rem = remediation(dataloader_killed(version), "dataloader-host-oom", "smaller-prefetch")
    assert rem.applicable is expected, rem.why_not
    if not expected:
        assert "4.38.0" in rem.why_not and version in rem.why_not


def epoch_end_host_kill(transformers: str) -> str:
    """Synthetic: ZeRO-3 offload run killed by the host OOM killer at an epoch boundary."""
    return f"""\
- `transformers` version: {transformers}
- DeepSpeed version: 0.15.0
[2024-12-01 08:00:12,511] [INFO] [config.py:1003:print]   zero_optimization_stage ...... 3
[2024-12-01 08:00:12,513] [INFO] [config.py:989:print_user_config]   json = {{"zero_optimization": {{"stage": 3, "offload_param": {{"device": "cpu"}}, "offload_optimizer": {{"device": "cpu"}}}}}}
dataloader_num_workers: 8
{{'loss': 0.7021, 'grad_norm': 0.4410, 'learning_rate': 1.2e-05, 'epoch': 1.0}}
100%|██████████| 561/561 [16:57:02<00:00, 108.78s/it]
Epoch 2/3
[2024-12-01 16:58:40,003] [INFO] [launch.py:319:sigkill_handler] Killing subprocess 77120
[2024-12-01 16:58:44,771] [ERROR] [launch.py:325:sigkill_handler] ['/usr/bin/python3', '-u', 'train.py', '--local_rank=0'] exits with return code = -9
[Sun Dec  1 16:58:39 2024] Out of memory: Killed process 77119 (python3) total-vm:712344112kB, anon-rss:498112344kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:981232kB oom_score_adj:0
"""


@pytest.mark.parametrize("version,expected", [("4.57.0", False), ("5.14.0", False), ("5.15.0", True)])
def test_dataloader_multiprocessing_context_from_transformers_5_15(version, expected):
    report = diagnose(epoch_end_host_kill(version))
    diagnosis = next(d for d in report.diagnoses if any(r.id == "spawn-workers" for r in d.remediations))
    rem = next(r for r in diagnosis.remediations if r.id == "spawn-workers")
    assert rem.applicable is expected, rem.why_not
    if not expected:
        assert "5.15.0" in rem.why_not


# --- HF fsdp_config["state_dict_type"] / ["cpu_offload"] are read only from transformers 5.10

def test_fsdp_state_dict_and_offload_knobs_work_before_transformers_5_10():
    sharded = spec("ckpt-save-gather", "fsdp-sharded-state-dict")["knobs"]
    assert "FSDP_STATE_DICT_TYPE=SHARDED_STATE_DICT" in sharded["hf"] and "5.10" in sharded["hf"]
    assert "5.10" in sharded["fsdp"]
    offload = spec("optimizer-state", "offload-optimizer")["knobs"]["fsdp"]
    assert 'fsdp="full_shard offload"' in offload.replace('\\"', '"') and "5.10" in offload
    resume = spec("ckpt-load", "sharded-resume")["knobs"]["fsdp"]
    assert "5.10" in resume
    caveats = " ".join(spec("ckpt-save-gather", "fsdp-sharded-state-dict")["caveats"])
    assert "118520" in caveats   # sharded optimizer state with cpu_offload in host RAM


# --- llama-cookbook: checkpoint_type is already SHARDED and never read for PEFT saves

def test_llama_recipes_peft_save_first_fix_is_save_peft_checkpoint():
    report = diagnose((LOGS / "seed-llama-recipes-70b-fsdp-peft-save.log").read_text())
    top = report.diagnoses[0]
    first = next(r for r in top.remediations if r.applicable)
    assert first.id == "peft-fsdp-save-cpu-offload"
    assert first.knob.framework == "llama-cookbook" and "0.0.4" in first.knob.setting
    code = next(k for k in first.other_knobs if k.framework == "code")
    assert "full_state_dict=True" in code.setting and "cpu_offload=True" in code.setting
    sharded = next(r for r in top.remediations if r.id == "fsdp-sharded-state-dict")
    assert not sharded.applicable and "default" in sharded.why_not
    for rem in top.remediations:
        if rem.applicable:
            for knob in [rem.knob, *rem.other_knobs]:
                if knob.framework == "llama-cookbook":
                    assert not re.search(r"checkpoint_type\s*=\s*StateDictType\.SHARDED", knob.setting), rem.id


@pytest.mark.parametrize("torch_version,expected", [("2.1.2", False), ("2.2.0", True)])
def test_peft_fsdp_save_needs_the_torch_of_llama_recipes_0_0_4(torch_version, expected):
    # get_model_state_dict / StateDictOptions: llama-recipes 0.0.4 requires torch >= 2.2
    text = f"torch=={torch_version}\n" + (LOGS / "seed-llama-recipes-70b-fsdp-peft-save.log").read_text()
    rem = remediation(text, "ckpt-save-gather", "peft-fsdp-save-cpu-offload")
    assert rem.applicable is expected, rem.why_not
    # the FullStateDictConfig(offload_to_cpu=True) route works on older torch
    assert offered(text, "ckpt-save-gather", "fsdp-full-state-dict-cpu-offload")


def test_use_fast_kernels_is_sdpa_not_flash_attention():
    assert "llama-cookbook" not in spec("activation-memory", "flash-attention-2")["knobs"]
    assert "use_fast_kernels" in spec("activation-memory", "sdpa-attention")["knobs"]["llama-cookbook"]


# --- xtuner: clip_grad=None does not disable clipping under DeepSpeed

def test_xtuner_gradient_clipping_is_disabled_with_max_norm_0():
    report = diagnose((LOGS / "seed-xtuner-yi34b-ds0141.log").read_text())
    rem = next(r for r in report.diagnoses[0].remediations if r.id == "no-gradient-clipping")
    assert rem.applicable and rem.knob.framework == "xtuner"
    assert "clip_grad=dict(max_norm=0)" in rem.knob.setting


# --- LLaMA-Factory compute_accuracy keeps logits and is rejected with predict_with_generate

def test_no_knob_turns_compute_accuracy_on():
    for path in KB.glob("*.yaml"):
        for rem in yaml.safe_load(path.read_text())["remediations"]:
            for setting in rem["knobs"].values():
                assert not re.search(r"compute_accuracy:\s*true", setting), (path.name, rem["id"])


def lf_eval(extra: str) -> str:
    """Synthetic: LLaMA-Factory SFT evaluation that fails while the Trainer keeps predictions."""
    return f"""\
llamafactory==0.9.3
[INFO|2025-03-02 11:02:13] llamafactory.hparams.parser:355 >> Process rank: 0, world size: 1, device: cuda:0, distributed training: False, compute dtype: torch.bfloat16
{extra}[INFO|trainer.py:4226] 2025-03-02 12:10:01,100 >> ***** Running Evaluation *****
[INFO|trainer.py:4228] 2025-03-02 12:10:01,100 >>   Num examples = 2000
Traceback (most recent call last):
  File "/usr/local/lib/python3.11/site-packages/transformers/trainer.py", line 4252, in evaluation_loop
    all_preds.add(logits)
  File "/usr/local/lib/python3.11/site-packages/transformers/trainer_pt_utils.py", line 321, in add
    self.tensors = nested_concat(self.tensors, tensors, padding_index=self.padding_index)
{GPU_OOM}
"""


def test_llamafactory_eval_fix_keeps_compute_accuracy_off():
    rem = remediation(lf_eval(""), "eval-generation", "reduce-logits-before-caching")
    assert rem.applicable and rem.knob.framework == "llamafactory"
    assert "compute_accuracy: false" in rem.knob.setting


def test_llamafactory_eval_fix_is_withheld_with_predict_with_generate():
    rem = remediation(lf_eval("predict_with_generate: true\n"), "eval-generation", "reduce-logits-before-caching")
    assert not rem.applicable


# --- "load in bf16/16-bit" only where the log shows an fp32 load

def model_load(head: str) -> str:
    """Synthetic: a from_pretrained that fails while the shards are loaded."""
    return f"""\
{head}
Loading checkpoint shards:  50%|█████     | 2/4 [00:09<00:09,  4.81s/it]
Traceback (most recent call last):
  File "/workspace/train.py", line 40, in <module>
    model = AutoModelForCausalLM.from_pretrained(name)
  File "/usr/local/lib/python3.11/site-packages/transformers/modeling_utils.py", line 4971, in from_pretrained
    ) = cls._load_pretrained_model(
  File "/usr/local/lib/python3.11/site-packages/transformers/modeling_utils.py", line 5420, in _load_pretrained_model
    new_error_msgs, offload_index = load_shard_file(args)
{GPU_OOM}
"""


@pytest.mark.parametrize("head,expected", [
    ("- `transformers` version: 4.57.0", True),              # no dtype: 4.x loads fp32
    ("- `transformers` version: 4.57.0\nInstantiating LlamaForCausalLM model under default dtype torch.bfloat16.", False),
    ("- `transformers` version: 5.1.0", False),              # 5.x loads the checkpoint's dtype
    ("- `transformers` version: 5.1.0\nInstantiating LlamaForCausalLM model under default dtype torch.float32.", True),
    ("llamafactory==0.9.2\n[INFO|2025-03-02 11:02:13] llamafactory.hparams.parser:355 >> Process rank: 0, world size: 1, "
     "device: cuda:0, distributed training: False, compute dtype: torch.bfloat16", False),
    ("xtuner==0.2.0\nxtuner train internlm2_chat_7b_qlora.py --deepspeed deepspeed_zero2\n- `transformers` version: 4.48.0", False),
], ids=["hf4-default", "hf4-shown-bf16", "hf5-default", "hf5-shown-fp32", "llamafactory", "xtuner"])
def test_load_in_bf16_only_where_the_log_shows_an_fp32_load(head, expected):
    rem = remediation(model_load(head), "model-load", "load-in-bf16")
    assert rem.applicable is expected, rem.why_not


# --- "use ZeRO-3 to partition at load" is not for a run that is on ZeRO-3

def multi_gpu_load(zero3: bool) -> str:
    """Synthetic: a multi-GPU custom script that loads the whole model on each rank."""
    stage = "[2025-01-02 10:00:00,001] [INFO] [config.py:1000:print]   zero_optimization_stage ...... 3\n" if zero3 else ""
    return model_load(f"torch==2.4.0\nWORLD_SIZE=8\nworld size: 8\n{stage}").replace("GPU 0 has", "GPU 3 has")


def test_zero3_at_load_is_withheld_when_the_run_is_on_zero3():
    text = multi_gpu_load(zero3=True)
    rem = remediation(text, "model-load", "zero3-partition-at-load")
    assert not rem.applicable and "already on ZeRO-3" in rem.why_not
    assert offered(text, "model-load", "zero3-init-before-load")


def test_zero3_at_load_is_offered_without_zero3():
    text = multi_gpu_load(zero3=False)
    assert offered(text, "model-load", "zero3-partition-at-load")
    assert not offered(text, "model-load", "zero3-init-before-load")


# --- torch.OutOfMemoryError exists from torch 2.5 only

def test_code_knobs_catch_the_oom_class_every_supported_torch_has():
    for path in KB.glob("*.yaml"):
        for rem in yaml.safe_load(path.read_text())["remediations"]:
            code = rem["knobs"].get("code", "")
            if re.search(r"except\s+torch\.OutOfMemoryError", code):
                assert float(rem.get("min_versions", {}).get("torch", "0")[:3]) >= 2.5, (path.name, rem["id"])


# --- TORCH_NCCL_AVOID_RECORD_STREAMS is the default from about torch 2.8

@pytest.mark.parametrize("torch_version,expected", [("2.7.1", True), ("2.8.0", False)])
def test_avoid_record_streams_is_a_no_op_from_torch_2_8(torch_version, expected):
    text = fragmentation(f"{torch_version}+cu128", "WORLD_SIZE=8\nworld size: 8\n")
    rem = remediation(text, "alloc-fragmentation", "avoid-record-streams")
    assert rem.applicable is expected, rem.why_not


# --- zero_to_fp32.py options and DeepSpeed leak fixes

def test_zero_to_fp32_options_name_their_first_release():
    caveats = " ".join(spec("ckpt-save-gather", "no-16bit-gather-on-save")["caveats"])
    assert "0.15.3" in caveats and "0.16.0" in caveats
    assert "0.15.3" in spec("ckpt-save-gather", "safetensors-shards")["knobs"]["deepspeed"]


def zero3_growing(deepspeed: str) -> str:
    """Synthetic: allocations growing step after step under ZeRO-3 until the OOM."""
    rows = "\n".join(f"[INFO] [utils.py:800:see_memory_usage] step {s}: MA {40 + 2 * s:.2f} GB         Max_MA {41 + 2 * s:.2f} GB         CA {42 + 2 * s:.2f} GB         Max_CA {42 + 2 * s} GB"
                     for s in range(1, 8))
    return f"""\
[2023-06-01 10:00:00,000] [INFO] [logging.py:96:log_dist] [Rank 0] DeepSpeed info: version={deepspeed}, git-hash=unknown, git-branch=unknown
[2023-06-01 10:00:00,500] [INFO] [config.py:1000:print]   zero_optimization_stage ...... 3
{rows}
{FORWARD_FRAMES}{GPU_OOM}
"""


@pytest.mark.parametrize("deepspeed,expected", [("0.9.5", True), ("0.10.0", False)])
def test_upgrade_past_the_zero3_leak_fix_of_0_10_0(deepspeed, expected):
    rem = remediation(zero3_growing(deepspeed), "gradual-leak", "upgrade-framework-leaks")
    assert rem.applicable is expected, rem.why_not
    assert "3030" not in rem.knob.setting    # never merged


@pytest.mark.parametrize("deepspeed,expected", [("0.8.3", False), ("0.9.0", True)])
def test_empty_partition_cache_from_deepspeed_0_9_0(deepspeed, expected):
    rem = remediation(zero3_growing(deepspeed), "gradual-leak", "empty-partition-cache")
    assert rem.applicable is expected, rem.why_not


# --- DeepSpeed device-mismatch regression: 0.14.1 and 0.14.2, fixed 0.14.3

@pytest.mark.parametrize("version,expected", [("0.14.1", True), ("0.14.2", True), ("0.14.3", False)])
def test_device_mismatch_workarounds_only_on_affected_releases(version, expected):
    text = (LOGS / "seed-xtuner-yi34b-ds0141.log").read_text().replace("0.14.1", version)
    for fix in ("change-deepspeed-version", "offload-params-not-optimizer", "no-gradient-clipping"):
        report = diagnose(text)
        diagnosis = next((d for d in report.diagnoses if d.incident == "ds-device-mismatch"), None)
        if diagnosis is None:       # an unaffected release may not be diagnosed at all
            assert not expected
            continue
        rem = next(r for r in diagnosis.remediations if r.id == fix)
        assert rem.applicable is expected, (fix, rem.why_not)


# --- axolotl: torch_empty_cache_steps / gc_collect_steps need 0.17; its checkpointing default is reentrant

@pytest.mark.parametrize("version,expected", [("0.16.1", False), ("0.17.0", True)])
def test_axolotl_cache_flush_keys_need_0_17(version, expected):
    text = fragmentation("2.6.0+cu124", f"axolotl=={version}\n[axolotl.cli.train] transformers version: 4.57.0\n")
    report = diagnose(text)
    assert report.environment.framework == "axolotl"
    rem = remediation(text, "alloc-fragmentation", "empty-cache-steps")
    assert rem.applicable is expected, rem.why_not


def test_axolotl_checkpointing_knob_does_not_force_non_reentrant():
    knob = spec("activation-memory", "gradient-checkpointing")["knobs"]["axolotl"]
    assert not re.search(r"use_reentrant:\s*false\s*$", knob.split("#")[0])


# --- the fixes the tables lacked

def zero3_forward(extra: str = "", zero3: bool = True) -> str:
    """Synthetic: a Trainer forward-pass OOM, on ZeRO-3 or not."""
    stage = "[2025-01-02 10:00:00,001] [INFO] [config.py:1000:print]   zero_optimization_stage ...... 3\n" if zero3 else ""
    return f"- `transformers` version: 4.57.0\n- DeepSpeed version: 0.16.0\n{stage}{extra}{FORWARD_FRAMES}{GPU_OOM}\n"


def test_zero3_working_set_knobs_for_forward_ooms_on_zero3():
    rem = remediation(zero3_forward(), "activation-memory", "zero3-working-set")
    assert rem.applicable
    settings = " ".join([rem.knob.setting] + [k.setting for k in rem.other_knobs])
    for key in ("stage3_max_live_parameters", "stage3_max_reuse_distance", "stage3_prefetch_bucket_size",
                "stage3_param_persistence_threshold"):
        assert key in settings
    assert not remediation(zero3_forward(zero3=False), "activation-memory", "zero3-working-set").applicable


def grpo(trl: str, extra: str = "") -> str:
    """Synthetic: TRL GRPO under ZeRO-3 failing while it generates."""
    return f"""\
- TRL version: {trl}
- `transformers` version: 4.57.0
[2025-01-02 10:00:00,001] [INFO] [config.py:1000:print]   zero_optimization_stage ...... 3
{extra}Traceback (most recent call last):
  File "/usr/local/lib/python3.11/site-packages/trl/trainer/grpo_trainer.py", line 1011, in _generate_and_score_completions
    prompt_completion_ids = unwrapped_model.generate(prompt_ids, attention_mask=prompt_mask, generation_config=self.generation_config)
  File "/usr/local/lib/python3.11/site-packages/transformers/generation/utils.py", line 2465, in generate
    result = self._sample(
{GPU_OOM}
"""


@pytest.mark.parametrize("version,expected", [("0.14.0", False), ("0.15.0", True)])
def test_grpo_ds3_gather_for_generation_from_trl_0_15(version, expected):
    report = diagnose(grpo(version))
    found = [r for d in report.diagnoses for r in d.remediations
             if r.id in ("grpo-no-ds3-gather", "no-ds3-gather-for-generation")]
    assert found, [d.incident for d in report.diagnoses]
    assert all(r.applicable is expected for r in found), [r.why_not for r in found]


@pytest.mark.parametrize("version,expected", [("0.17.0", False), ("0.18.0", True)])
def test_grpo_vllm_server_mode_from_trl_0_18(version, expected):
    text = grpo(version, "vllm_mode: colocate\n")
    report = diagnose(text)
    found = [r for d in report.diagnoses for r in d.remediations if r.id == "grpo-vllm-server"]
    assert found, "the log was not diagnosed as a preference/GRPO incident"
    assert all(r.applicable is expected for r in found), [r.why_not for r in found]


@pytest.mark.parametrize("version,expected", [("0.17.0", False), ("0.18.0", True)])
def test_trl_sft_activation_offloading_from_0_18(version, expected):
    rem = remediation(trl_sft(version), "activation-memory", "offload-activations")
    assert rem.applicable is expected, rem.why_not
    assert "activation_offloading=True" in rem.knob.setting


def lf_optimizer(extra: str) -> str:
    """Synthetic: LLaMA-Factory full fine-tuning failing in the optimizer step."""
    return f"""\
llamafactory==0.9.3
[INFO|2025-03-02 11:02:13] llamafactory.hparams.parser:355 >> Process rank: 0, world size: 8, device: cuda:0, distributed training: True, compute dtype: torch.bfloat16
finetuning_type: full
NVIDIA H100 80GB HBM3
{extra}Traceback (most recent call last):
  File "/usr/local/lib/python3.11/site-packages/torch/optim/adamw.py", line 184, in step
    self._init_group(
  File "/usr/local/lib/python3.11/site-packages/torch/optim/adamw.py", line 128, in _init_group
    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
{GPU_OOM}
"""


def test_llamafactory_pure_bf16_for_full_fine_tuning_but_not_on_zero3():
    assert offered(lf_optimizer(""), "optimizer-state", "pure-bf16")
    zero3 = "[2025-01-02 10:00:00,001] [INFO] [config.py:1000:print]   zero_optimization_stage ...... 3\n"
    rem = remediation(lf_optimizer(zero3), "optimizer-state", "pure-bf16")
    assert not rem.applicable and "ZeRO-3" in rem.why_not


def test_megatron_and_torchtune_logs_get_their_own_knobs():
    for framework, head in (("megatron", "torchrun pretrain_gpt.py --micro-batch-size 4\n[INFO] megatron.core.transformer: building GPT model\n"),
                            ("torchtune", "tune run full_finetune_distributed --config llama3_1/8B_full\n")):
        text = head + FORWARD_FRAMES.replace("/transformers/trainer.py", f"/{framework}/training.py") + GPU_OOM + "\n"
        rem = remediation(text, "activation-memory", "gradient-checkpointing")
        assert diagnose(text).environment.framework == framework
        assert rem.knob.framework == framework, rem.knob


# --- plain PyTorch scripts get PyTorch code, never another framework's YAML

PLAIN = """\
torch==2.4.0
Traceback (most recent call last):
  File "/home/me/train.py", line 88, in <module>
    loss = model(x).loss
  File "/usr/local/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1773, in _wrapped_call_impl
    return self._call_impl(*args, **kwargs)
  File "/home/me/model.py", line 40, in forward
    att = (q @ k.transpose(-2, -1)).softmax(-1)
"""

PLAIN_FIRST = {"code", "env", "shell", "slurm", "kubernetes", "fsdp", "deepspeed"}


@pytest.mark.parametrize("oom", [GPU_OOM, FRAGMENTED_OOM], ids=["activations", "fragmentation"])
def test_plain_pytorch_fixes_show_code_first(oom):
    report = diagnose(PLAIN + oom + "\n")
    assert report.environment.framework == "plain-pytorch"
    for diagnosis in report.diagnoses:
        for rem in diagnosis.remediations:
            if rem.applicable:
                assert rem.knob.framework in PLAIN_FIRST, (diagnosis.incident, rem.id, rem.knob.framework)


FRAMEWORK_ONLY = {"packing", "sequence-parallel", "sequence-parallel-megatron", "pure-bf16", "anyprecision-adamw",
                  "reference-free-dpo", "ref-adapter-name", "grpo-settings", "grpo-vllm-server", "grpo-no-ds3-gather",
                  "no-ds3-gather-for-generation", "vllm-fp16", "upgrade-framework-leaks", "upgrade-transformers-logits",
                  "fused-preference-loss", "jax-memory-fraction"}   # trainer options with no plain-loop equivalent, or restricted to one framework


def test_every_remediation_for_a_training_loop_has_a_plain_pytorch_knob():
    for path in KB.glob("*.yaml"):
        for rem in yaml.safe_load(path.read_text())["remediations"]:
            if rem["id"] in FRAMEWORK_ONLY:
                continue
            keys = set(rem["knobs"])
            assert keys & PLAIN_FIRST, (path.name, rem["id"], sorted(keys))
