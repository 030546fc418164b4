"""Environment facts: versions, hardware, parallelism, framework and echoed settings.

Each fixture is one banner or configuration form; the expectations give the value and the
line it must be attributed to, because a report points the user at that line.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from oomdoctor.read.normalise import normalise
from oomdoctor.parsers import extract
from oomdoctor.parsers.environment.collector import zero_stage_from_name
from oomdoctor.parsers.environment import clean_version

FIXTURES = Path(__file__).parent / "fixtures" / "logs"
GiB = 2**30
MiB = 2**20


def env_of(text: str):
    return extract(normalise(text)).environment


def env_of_fixture(name: str):
    return env_of((FIXTURES / name).read_text(encoding="utf-8"))


# field -> (value, source line) for every fixture
EXPECTED = {
    "env-collect-env.log": {
        "torch_version": ("2.10.0", 3), "cuda_version": ("12.8", 5), "python_version": ("3.11.9", 14),
        "gpu_name": ("NVIDIA H100 80GB HBM3", 20), "gpu_count": (4, 20), "gpu_capacity_bytes": (80 * GiB, 20),
        "alloc_conf": ("expandable_segments:True", 32), "transformers_version": ("4.57.1", 41),
        "accelerator": ("cuda", 20),
    },
    "env-ds-report.log": {
        "torch_version": ("2.1.0", 18), "deepspeed_version": ("0.12.6", 20), "cuda_version": ("12.1", 21),
    },
    "env-transformers-env-old.log": {
        "transformers_version": ("4.44.2", 4), "python_version": ("3.10.14", 6),
        "accelerate_version": ("0.33.0", 9), "torch_version": ("2.3.1", 11), "cuda_version": ("12.1", 11),
        "gpu_name": ("NVIDIA A100-SXM4-40GB", 18), "gpu_capacity_bytes": (40 * GiB, 18),
    },
    "env-transformers-env-new.log": {
        "transformers_version": ("4.56.1", 4), "deepspeed_version": ("0.17.5", 11),
        "torch_version": ("2.8.0", 12), "accelerator": ("cuda", 12), "cuda_version": ("12.8", 12),
        "gpu_name": ("NVIDIA L40S", 19),
    },
    "env-accelerate-old.log": {
        "accelerate_version": ("0.30.1", 4), "torch_version": ("2.3.0", 9), "gpu_name": ("NVIDIA A10G", 14),
        "mixed_precision": ("fp16", 18), "world_size": (8, 21), "num_nodes": (2, 23),
        "zero_stage": (2, 28), "offload": ("optimizer", 28), "gradient_accumulation_steps": (4, 28),
    },
    "env-accelerate-new.log": {
        "accelerate_version": ("1.7.0", 4), "torch_version": ("2.7.0", 9), "accelerator": ("cuda", 10),
        "gpu_name": ("NVIDIA H100 80GB HBM3", 12), "fsdp": (True, 16), "world_size": (4, 17),
        "mixed_precision": ("bf16", 22), "framework": ("accelerate", 16), "framework_version": ("1.7.0", 4),
    },
    "env-deepspeed-multinode.log": {
        "deepspeed_version": ("0.12.7", 9), "optimizer": ("FusedAdam", 10), "zero_stage": (2, 11),
        "offload": ("optimizer", 14), "world_size": (16, 4), "num_nodes": (2, 4), "gpu_count": (8, 7),
        "mixed_precision": ("bf16", 17), "gradient_accumulation_steps": (4, 19), "micro_batch_size": (2, 21),
        "pin_memory": (True, 24), "gather_16bit_weights_on_save": (False, 24), "framework": ("deepspeed", 1),
    },
    "env-deepspeed-zero3-repr.log": {
        "deepspeed_version": ("0.10.3", 1), "zero_stage": (3, 2), "offload": ("both", 3),
        "pin_memory": (True, 3), "gather_16bit_weights_on_save": (True, 3),
    },
    "env-llamafactory-old.log": {
        "framework": ("llamafactory", 2), "mixed_precision": ("bf16", 2), "gradient_checkpointing": (True, 4),
        "attn_implementation": ("fa2", 5), "trainable_params": (20_971_520, 6), "total_params": (8_051_232_768, 6),
        "micro_batch_size": (4, 10), "world_size": (2, 11), "gradient_accumulation_steps": (8, 12),
    },
    "env-llamafactory-new.log": {
        "framework": ("llamafactory", 1), "framework_version": ("0.9.1", 3), "python_version": ("3.11.10", 5),
        "torch_version": ("2.4.1", 6), "cuda_version": ("12.4", 6), "transformers_version": ("4.46.1", 7),
        "accelerate_version": ("1.0.1", 9), "peft_version": ("0.12.0", 10), "trl_version": ("0.9.6", 11),
        "gpu_name": ("NVIDIA A800-SXM4-80GB", 12), "gpu_count": (8, 13),
        "gpu_capacity_bytes": (int(79.33 * GiB), 14), "deepspeed_version": ("0.15.4", 15),
        "mixed_precision": ("fp16", 20), "model_name": ("Qwen/Qwen2.5-14B-Instruct", 22),
        "quantization_bit": (4, 23), "finetuning_type": ("qlora", 27), "stage": ("simpo", 29),
        "sequence_length": (4096, 31), "micro_batch_size": (2, 33), "gradient_accumulation_steps": (4, 34),
        "gradient_checkpointing": (False, 35), "attn_implementation": ("sdpa", 36), "liger_kernel": (True, 37),
        "save_only_model": (True, 38), "zero_stage": (2, 40), "offload": ("optimizer", 40),
    },
    "env-axolotl.log": {
        "framework": ("axolotl", 1), "model_name": ("mistralai/Mistral-7B-v0.1", 3), "quantization_bit": (4, 6),
        "finetuning_type": ("qlora", 7), "stage": ("dpo", 8), "sequence_length": (2048, 9),
        "gradient_accumulation_steps": (8, 11), "micro_batch_size": (2, 12), "optimizer": ("paged_adamw_8bit", 13),
        "gradient_checkpointing": (True, 17), "attn_implementation": ("fa2", 18), "zero_stage": (2, 21),
        "mixed_precision": (None, None), "fsdp": (None, None),
    },
    "env-hf-trainer.log": {
        "hidden_size": (3584, 9), "intermediate_size": (18944, 10), "num_attention_heads": (28, 12),
        "num_layers": (28, 13), "num_kv_heads": (4, 14), "transformers_version": ("4.45.0.dev0", 24),
        "vocab_size": (152064, 30), "mixed_precision": ("bf16", 40), "dataloader_num_workers": (4, 41),
        "gradient_checkpointing": (True, 47), "optimizer": ("adamw_torch_fused", 48),
        "save_only_model": (False, 50), "micro_batch_size": (1, 55), "world_size": (8, 56),
        "gradient_accumulation_steps": (2, 57), "trainable_params": (8_291_375_616, 59),
        "framework": ("hf-trainer", 38), "fsdp": (True, 65), "sequence_length": (None, None),
    },
    "env-megatron.log": {
        "world_size": (16, 1), "mixed_precision": ("bf16", 3), "intermediate_size": (11008, 4),
        "hidden_size": (4096, 7), "micro_batch_size": (1, 8), "num_attention_heads": (32, 9),
        "num_layers": (32, 10), "optimizer": ("adam", 11), "vocab_size": (32000, 12),
        "gradient_checkpointing": (True, 13), "sequence_length": (4096, 14), "framework": ("megatron", 18),
    },
    "env-llama-recipes.log": {
        "framework": ("llama-recipes", 1), "world_size": (16, 1), "num_nodes": (2, 1), "fsdp": (True, 6),
        "finetuning_type": ("lora", 1), "model_name": ("meta-llama/Meta-Llama-3.1-70B", 1),
        "mixed_precision": ("bf16", 1), "micro_batch_size": (2, 1), "sequence_length": (8192, 1),
        "gradient_accumulation_steps": (4, 1), "fsdp_state_dict_type": ("SHARDED_STATE_DICT", 1),
    },
    "env-launch-line.log": {
        "alloc_conf": ("expandable_segments:True,garbage_collection_threshold:0.6", 1),
        "world_size": (4, 2), "fsdp": (True, 2), "gradient_checkpointing": (True, 2), "mixed_precision": ("bf16", 2),
        "sequence_length": (2048, 2), "optimizer": ("adamw_torch_fused", 2), "dataloader_num_workers": (8, 2),
    },
    "env-unsloth.log": {
        "framework": ("unsloth", 1), "transformers_version": ("4.44.2", 2), "gpu_name": ("Tesla T4", 3),
        "gpu_capacity_bytes": (int(14.748 * GiB), 3), "torch_version": ("2.4.0", 4),
        "compute_capability": ("7.5", 4), "cuda_version": ("12.1", 4),
    },
    "env-hardware-hints.log": {
        "gpu_name": ("Tesla V100-PCIE-16GB", 1), "compute_capability": ("7.0", 1),
        "gpu_capacity_bytes": (16144 * MiB, 1), "accelerator": ("cuda", 1),
    },
    "env-xtuner.log": {
        "framework": ("xtuner", 1), "zero_stage": (3, 1), "offload": ("both", 1), "world_size": (4, 1),
        "python_version": ("3.10.13", 7), "gpu_name": ("NVIDIA A100-SXM4-80GB", 10), "cuda_version": ("12.1", 14),
        "torch_version": ("2.1.2", 14), "gpu_count": (4, 23),
    },
    "env-swift.log": {
        "framework": ("ms-swift", 1), "stage": ("dpo", 1), "finetuning_type": ("full", 1), "zero_stage": (3, 1),
        "model_name": ("Qwen/Qwen2.5-7B-Instruct", 1), "sequence_length": (4096, 1), "world_size": (8, 3),
    },
    "env-trl.log": {"framework": ("trl", 6), "stage": ("dpo", 6), "python_version": ("3.11", 4)},
    "env-plain-pytorch.log": {
        "framework": ("plain-pytorch", 4), "python_version": ("3.8", 4), "accelerator": ("cuda", 6),
        "gpu_capacity_bytes": (int(10.76 * GiB), 6),
    },
    "env-npu.log": {"accelerator": ("npu", 1), "torch_version": ("2.1.0", 4), "deepspeed_version": ("0.14.2", 6)},
    "env-rocm.log": {"torch_version": ("2.3.0", 4), "accelerator": ("rocm", 5), "cuda_version": (None, None)},
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_facts_and_their_lines(name):
    env = env_of_fixture(name)
    for field, (value, line) in EXPECTED[name].items():
        got = getattr(env, field)
        if isinstance(value, int) and field.endswith("_bytes"):
            assert got is not None and abs(got - value) < 2**20, (field, got)
        else:
            assert got == value, (field, got)
        assert env.sources.get(field) == line, (field, env.sources.get(field))


def test_every_set_field_has_a_source_line():
    for name in EXPECTED:
        env = env_of_fixture(name)
        set_fields = {k for k, v in env.model_dump(exclude={"sources"}).items() if v is not None}
        assert set_fields == set(env.sources), name


# -- version boundaries -------------------------------------------------------------------

def test_transformers_env_key_changed_in_4_55():
    old = env_of("- PyTorch version (GPU?): 2.1.2+cu118 (True)\n")
    new = env_of("- PyTorch version (accelerator?): 2.8.0+xpu (XPU)\n")
    assert (old.torch_version, old.cuda_version) == ("2.1.2", "11.8")
    assert (new.torch_version, new.accelerator) == ("2.8.0", "xpu")


def test_accelerate_env_before_and_after_1_7():
    old = env_of("- PyTorch version (GPU?): 2.3.0+cu121 (True)\n- PyTorch NPU available: True\n")
    new = env_of("- PyTorch version: 2.7.0\n- PyTorch accelerator: NPU\n")
    assert (old.torch_version, old.accelerator) == ("2.3.0", "npu")
    assert (new.torch_version, new.accelerator) == ("2.7.0", "npu")


def test_llamafactory_prefixes_before_and_after_0_9_1():
    line = "Process rank: 0, device: cuda:0, n_gpu: 1, distributed training: True, compute dtype: torch.bfloat16"
    old = env_of(f"06/01/2024 12:00:00 - INFO - llamafactory.hparams.parser - {line}\n")
    new = env_of(f"[INFO|2025-01-01 12:00:00] parser.py:355 >> {line}\n")
    for env in (old, new):
        assert env.framework == "llamafactory"
        assert env.mixed_precision == "bf16"


def test_llamafactory_env_world_size_line():
    env = env_of("[INFO|2025-03-01 08:00:00] llamafactory.hparams.parser:406 >> Process rank: 3, "
                 "world size: 8, device: cuda:3, distributed training: True, compute dtype: torch.bfloat16\n")
    assert env.world_size == 8


def test_deepspeed_creating_optimizer_wording_by_version():
    # 0.5-0.7 and every stage-3 line say "fp16" whatever the dtype; 0.8+ names the dtype
    old = env_of("[2022-05-01 10:00:00,000] [INFO] [stage_1_and_2.py:119:__init__] Creating fp16 ZeRO stage 2 optimizer\n")
    new = env_of("[2024-05-01 10:00:00,000] [INFO] [logging.py:96:log_dist] [Rank 0] Creating torch.float32 ZeRO stage 1 optimizer\n")
    assert (old.zero_stage, old.mixed_precision) == (2, None)
    assert (new.zero_stage, new.mixed_precision) == (1, "fp32")


def test_zero_to_fp32_names_the_stage_of_the_checkpoint_it_converts():
    assert env_of("Detected checkpoint of type zero stage 3, world_size: 4\n").zero_stage == 3
    assert env_of("Detected checkpoint of type zero stage ZeroStageEnum.gradients, world_size: 2\n").zero_stage == 2
    assert env_of("Detected checkpoint of type zero stage ZeroStageEnum.disabled, world_size: 2\n").zero_stage is None


def test_the_parallel_groups_fairscale_and_megatron_print_multiply_to_the_world():
    llama = ("> initializing model parallel with size 2\n> initializing ddp with size 4\n"
             "> initializing pipeline with size 1\n")
    assert env_of(llama).world_size == 8
    megatron = ("> initializing tensor model parallel with size 2\n> initializing pipeline model parallel with size 2\n"
                "> initializing data parallel with size 2\n")
    assert env_of(megatron).world_size == 8
    # one group alone says nothing of the others
    assert env_of("> initializing model parallel with size 8\n").world_size is None
    # nor does a sentence that merely uses the words
    assert env_of("initializing ddp with size 4 would need 4 GPUs, found 1\n> initializing model parallel with size 1\n"
                  "> initializing pipeline with size 1\n").world_size is None


def test_clean_version_keeps_only_real_versions():
    assert clean_version("2.1.2+cu121") == "2.1.2"
    assert clean_version("0.12.7+4d866bd5") == "0.12.7"
    assert clean_version("0.9.1.dev0") == "0.9.1.dev0"
    for junk in ("N/A", "not installed", "None", "<fill in>", "", None, "v1..2"):
        assert clean_version(junk) is None


@pytest.mark.parametrize("text, field, value", [
    ("[pip3] deepspeed==0.14.4\n", "deepspeed_version", "0.14.4"),
    ("Requirement already satisfied: transformers in ./venv/lib/python3.10/site-packages (4.38.2)\n", "transformers_version", "4.38.2"),
    ("Successfully installed accelerate-0.27.2 peft-0.9.0 trl-0.7.11\n", "trl_version", "0.7.11"),
    ("Processing ./torch-2.1.2+cu121-cp310-cp310-linux_x86_64.whl\n", "torch_version", "2.1.2"),
    ("deepspeed wheel compiled w. ...... torch 2.1, cuda 12.1\n", "torch_version", "2.1"),
    ("[conda] pytorch                   2.0.1           py3.10_cuda11.8_cudnn8.7.0_0    pytorch\n", "torch_version", "2.0.1"),
    ("Welcome to LLaMA Factory, version 0.8.3\n", "framework_version", "0.8.3"),
    # an error report's rows in title case (ComfyUI's "## System Information")
    ("- **PyTorch Version:** 2.8.0+cu129\n", "torch_version", "2.8.0"),
    ("- **Python Version:** 3.13.6 (tags/v3.13.6:4e66535, Aug  6 2025, 14:36:00)\n", "python_version", "3.13.6"),
    # a print of torch.__version__ after its name, the build's tag saying it is a version
    ("torch 2.7.0.dev20250310+cu124 cuda 12.4\n", "torch_version", "2.7.0.dev20250310"),
    ("YOLOR 2023-5-30 torch 2.1.0+cu121 CUDA:0 (NVIDIA GeForce RTX 4060 Laptop GPU, 7940.125MB)\n", "torch_version", "2.1.0"),
])
def test_version_forms(text, field, value):
    assert getattr(env_of(text), field) == value


@pytest.mark.parametrize("text", [
    # the build an extension was compiled against, not the torch that runs
    "xFormers was built for:\n    PyTorch 1.13.1+cu117 with CUDA 1107 (you have 2.0.0+cu118)\n",
    "xFormers was built for: PyTorch 2.0.1+cu118 with CUDA 1108 (you have 2.1.0+cu121)\n",
    # a size is no version
    "torch 1.5 GB free\n",
])
def test_tagged_version_forms_that_are_not_the_running_torch(text):
    assert env_of(text).torch_version is None


def test_running_library_beats_pip_listing():
    env = env_of("deepspeed==0.13.1\n"
                 "[2024-01-01 00:00:00,000] [INFO] [logging.py:96:log_dist] [Rank 0] DeepSpeed info: version=0.14.0, git-hash=unknown, git-branch=unknown\n")
    assert env.deepspeed_version == "0.14.0"
    assert env.sources["deepspeed_version"] == 2


def test_first_value_wins_among_equals():
    env = env_of("- `transformers` version: 4.40.0\n- `transformers` version: 4.41.0\n")
    assert (env.transformers_version, env.sources["transformers_version"]) == ("4.40.0", 1)


# -- ZeRO stage and offload ------------------------------------------------------------

def test_zero3_from_stage3_frames_alone():
    text = (
        "Traceback (most recent call last):\n"
        '  File "/opt/conda/lib/python3.10/site-packages/deepspeed/runtime/zero/stage3.py", line 2050, in step\n'
        "    self._optimizer_step(sub_group_id)\n"
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.39 GiB.\n")
    env = env_of(text)
    assert (env.zero_stage, env.sources["zero_stage"]) == (3, 2)
    assert env.offload is None


def test_stage_1_and_2_frames_say_two_but_yield_to_config():
    frame = '  File "/usr/lib/python3/site-packages/deepspeed/runtime/zero/stage_1_and_2.py", line 1800, in step\n'
    assert env_of(frame).zero_stage == 2
    assert env_of('"zero_optimization": {\n    "stage": 1\n}\n' + frame).zero_stage == 1


@pytest.mark.parametrize("line", [
    "[2024-06-01 10:00:00,000] [INFO] [logging.py:96:log_dist] [Rank 0] Creating ZeRO Offload",
    "[2024-06-01 10:00:00,000] [INFO] [utils.py:781:see_memory_usage] DeepSpeedZeRoOffload initialize [begin]",
    "Parameter Offload: Total persistent parameters: 144896 in 141 params",
    "[2024-06-01 10:00:00,000] [INFO] [partition_parameters.py:348:__exit__] finished initializing model - num_params = 291, num_elems = 6.74B",
])
def test_stage3_only_lines_prove_stage_3_not_offload(line):
    env = env_of(line + "\n")
    assert env.zero_stage == 3
    assert env.offload is None


def test_cpu_offload_flag_of_stage_1_and_2():
    assert env_of("[x] [INFO] [stage_1_and_2.py:149:__init__] CPU Offload: False\n").offload == "none"


@pytest.mark.parametrize("name, stage", [
    ("ds_z3_config.json", 3), ("examples/deepspeed/ds_z0_config.json", 0), ("deepspeed_zero2", 2),
    ("ds_config_zero3.json", 3), ("zero_stage3_offload.json", 3), ("ds_stage2.json", 2),
    ("llama-3-8b.json", None), ("ds_config.json", None),
])
def test_zero_stage_from_config_names(name, stage):
    got = zero_stage_from_name(name, allow_stage_word=True)
    if got is None and name.startswith("deepspeed_zero"):
        got = 2
    assert got == stage


@pytest.mark.parametrize("arg, stage, offload", [
    ("--deepspeed examples/deepspeed/ds_z3_offload_config.json", 3, "both"),
    ("--deepspeed examples/deepspeed/ds_z2_offload_config.json", 2, "optimizer"),
    ("--deepspeed ds_z3_config.json", 3, "none"),
    ("--deepspeed deepspeed_zero3_offload", 3, "both"),
    ("--deepspeed zero3_offload_param.json", 3, "param"),
])
def test_config_file_names(arg, stage, offload):
    env = env_of(f"deepspeed --num_gpus 8 src/train.py {arg} --stage sft\n")
    assert (env.zero_stage, env.offload) == (stage, offload)


def test_json_config_beats_its_file_name():
    text = ("deepspeed: ds_z3_offload_config.json\n"
            '  json = {\n'
            '    "zero_optimization": {\n'
            '        "offload_optimizer": {\n'
            '            "device": "cpu"\n'
            "        },\n"
            '        "stage": 3\n'
            "    }\n"
            "}\n")
    env = env_of(text)
    assert (env.zero_stage, env.offload) == (3, "optimizer")
    assert env.sources["offload"] == 5


def test_nvme_offload_and_accelerate_yaml():
    env = env_of("deepspeed_config:\n  offload_optimizer_device: nvme\n  offload_param_device: nvme\n  zero_stage: 3\n")
    assert (env.zero_stage, env.offload) == (3, "both")


def test_accelerate_state_ds_config_dict():
    env = env_of("Distributed environment: DEEPSPEED  Backend: nccl\nNum processes: 2\n"
                 "ds_config: {'train_batch_size': 'auto', 'zero_optimization': {'stage': 3, "
                 "'offload_param': {'device': 'cpu'}, 'offload_optimizer': {'device': 'none'}}}\n")
    assert (env.zero_stage, env.offload, env.world_size) == (3, "param", 2)


# -- false-positive traps ----------------------------------------------------------------

def test_negative_fixture():
    env = env_of_fixture("env-negatives.log")
    assert env.stage == "sft"
    for field in ("zero_stage", "offload", "world_size", "alloc_conf", "model_name", "gpu_name",
                  "compute_capability", "mixed_precision", "torch_version"):
        assert getattr(env, field) is None, field


@pytest.mark.parametrize("text", [
    "stage: 3\n",                                       # not a ZeRO stage outside zero_optimization
    '{"stage": 3}\n',
    "pipeline:\n  stage: 2\n",
    "Saving stage 3 results to out/\n",
    "    ds_config['zero_optimization']['stage'] = 3\n",
])
def test_stage_numbers_outside_deepspeed_context(text):
    env = env_of(text)
    assert env.zero_stage is None
    assert env.stage is None


def test_hint_text_is_not_an_allocator_setting():
    env = env_of("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 MiB. If reserved but unallocated "
                 "memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.\n")
    assert env.alloc_conf is None
    assert env_of("PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:128 python train.py\n").alloc_conf == "max_split_size_mb:128"


def test_unsloth_flag_in_llamafactory_args_is_not_unsloth():
    env = env_of("llamafactory-cli train --stage sft --use_unsloth False --finetuning_type lora\n")
    assert env.framework == "llamafactory"


def test_env_named_like_a_framework_is_not_that_framework():
    env = env_of("W0806 20:07:54.552742 14 /home/user/condaEnv/verl/lib/python3.10/site-packages/torch/"
                 "distributed/elastic/multiprocessing/api.py:897] Sending process 148594 closing signal SIGTERM\n")
    assert env.framework != "other"


def test_yaml_key_that_looks_like_a_host_prefix():
    assert env_of("bf16: true\n").mixed_precision == "bf16"
    assert env_of("node2: fp16: true\n").mixed_precision == "fp16"


# -- world size ---------------------------------------------------------------------------

@pytest.mark.parametrize("text, world, nodes", [
    ("[x] [INFO] [launch.py:162:main] dist_world_size=1\n", 1, None),
    ("[x] [INFO] [launch.py:142:main] WORLD INFO DICT: {'localhost': [0, 1, 2, 3]}\n", 4, 1),
    ("torchrun --nnodes 2 --nproc_per_node 8 train.py\n", 16, 2),
    ("subprocess.CalledProcessError: Command '['torchrun', '--nnodes', '1', '--node_rank', '0', "
     "'--nproc_per_node', '8', 'launcher.py']' returned non-zero exit status 1.\n", 8, 1),
    ("deepspeed --num_nodes 2 --num_gpus 4 train.py\n", 8, 2),
    ("deepspeed --num_gpus 4 ../../src/train.py \\\n", 4, None),    # " ../" is not a dotted dump row
    ("accelerate launch --num_processes 6 train.py\n", 6, None),
    ("num_processes: 8\nnum_machines: 1\n", 8, 1),
    ("node1:3018:3024 [0] NCCL INFO comm 0x55a1 rank 0 nRanks 4 nNodes 1 localRanks 4 localRank 0 MNNVL 0\n", 4, 1),
    ("{'MASTER_ADDR': '10.0.0.1', 'WORLD_SIZE': '32', 'RANK': '0'}\n", 32, None),
])
def test_world_size_forms(text, world, nodes):
    env = env_of(text)
    assert (env.world_size, env.num_nodes) == (world, nodes)


def test_world_size_from_the_deepspeed_runner_world_info():
    # base64 of {"node1": [0, 1, 2, 3], "node2": [0, 1, 2, 3]}
    env = env_of("[x] [INFO] [runner.py:568:main] cmd = /usr/bin/python -u -m deepspeed.launcher.launch "
                 "--world_info=eyJub2RlMSI6IFswLCAxLCAyLCAzXSwgIm5vZGUyIjogWzAsIDEsIDIsIDNdfQ== --master_addr=10.0.0.1 train.py\n")
    assert (env.world_size, env.num_nodes) == (8, 2)


def test_world_size_from_nccl_rings_is_the_last_resort():
    ring = "".join(f"node1:30:30 [{a}] NCCL INFO Channel 00 : {a}[1{a}0] -> {(a + 1) % 4}[1{(a + 1) % 4}0] via P2P/IPC\n"
                   for a in range(4))
    assert env_of(ring).world_size == 4
    assert env_of(ring + "dist_world_size=8\n").world_size == 8


def test_trainer_banner_needs_an_integral_world_size():
    banner = ("  Instantaneous batch size per device = 3\n"
              "  Total train batch size (w. parallel, distributed & accumulation) = {t}\n"
              "  Gradient Accumulation steps = 2\n")
    assert env_of(banner.format(t=48)).world_size == 8
    assert env_of(banner.format(t=50)).world_size is None


def test_trainer_banner_with_dataparallel_adjustment():
    env = env_of("  Instantaneous batch size per device = 4\n"
                 "  Training with DataParallel so batch size has been adjusted to: 16\n"
                 "  Total train batch size (w. parallel, distributed & accumulation) = 32\n"
                 "  Gradient Accumulation steps = 2\n")
    assert env.world_size == 1


# -- framework and stage ------------------------------------------------------------------

LF_TRACE = """Traceback (most recent call last):
  File "/app/LLaMA-Factory/src/llamafactory/launcher.py", line 23, in <module>
    launch()
  File "/app/LLaMA-Factory/src/llamafactory/train/dpo/workflow.py", line 88, in run_dpo
    train_result = trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
  File "/usr/local/lib/python3.10/site-packages/transformers/trainer.py", line 1948, in train
    return inner_training_loop(
  File "/usr/local/lib/python3.10/site-packages/trl/trainer/dpo_trainer.py", line 1408, in compute_loss
    loss, metrics = self.get_batch_loss_metrics(model, inputs, train_eval="train")
  File "/usr/local/lib/python3.10/site-packages/deepspeed/runtime/engine.py", line 1846, in forward
    loss = self.module(*inputs, **kwargs)
"""


def test_most_specific_framework_wins():
    env = env_of(LF_TRACE)
    assert (env.framework, env.stage) == ("llamafactory", "dpo")
    assert env.sources["framework"] == 2


def test_hf_trainer_with_trl_trainer_is_trl():
    text = "\n".join(line for line in LF_TRACE.splitlines() if "LLaMA-Factory" not in line and "run_dpo" not in line)
    assert env_of(text).framework == "trl"


def test_custom_deepspeed_script_and_plain_loop():
    ds = ('  File "train.py", line 40, in main\n'
          "    engine, opt, _, _ = deepspeed.initialize(model=model, config=cfg)\n"
          '  File "/usr/lib/python3/dist-packages/deepspeed/__init__.py", line 181, in initialize\n'
          "    engine = DeepSpeedEngine(args=args,\n")
    plain = ('  File "train.py", line 40, in main\n    loss.backward()\n'
             '  File "/usr/lib/python3/dist-packages/torch/_tensor.py", line 522, in backward\n')
    assert env_of(ds).framework == "deepspeed"
    assert env_of(plain).framework == "plain-pytorch"


@pytest.mark.parametrize("text, stage", [
    ("rl: kto\n", "kto"),
    ("--rlhf_type grpo\n", "grpo"),
    ('  File "/x/trl/trainer/grpo_trainer.py", line 1, in compute_loss\n', "grpo"),
    ("stage: dpo\npref_loss: orpo\n", "orpo"),
    ("stage: dpo\npref_loss: sigmoid\n", "dpo"),
    ('  File "/x/src/llmtuner/train/rm/workflow.py", line 38, in run_rm\n', "rm"),
])
def test_training_stage_forms(text, stage):
    assert env_of(text).stage == stage


# -- echoed settings ---------------------------------------------------------------------

def test_sequence_length_keys_rank():
    text = "model_max_length: 32768\nmax_length: 8192\ncutoff_len: 4096\n"
    env = env_of(text)
    assert (env.sequence_length, env.sources["sequence_length"]) == (4096, 3)
    assert env_of("model_max_length: 32768\nmax_length: 8192\n").sequence_length == 8192


def test_precision_both_flags_false_is_fp32():
    assert env_of("bf16=False,\nfp16=False,\n").mixed_precision == "fp32"
    assert env_of("bf16: false\nfp16: true\n").mixed_precision == "fp16"
    assert env_of("  fp16 ......... False\n").mixed_precision is None


def test_gradient_checkpointing_runtime_message_beats_training_args():
    env = env_of("gradient_checkpointing=False,\nper_device_train_batch_size=2,\nGradient checkpointing enabled.\n")
    assert (env.gradient_checkpointing, env.sources["gradient_checkpointing"]) == (True, 3)


def test_model_shape_ignores_the_vision_tower():
    text = ('Model config LlavaConfig {\n  "text_config": {\n    "hidden_size": 4096,\n    "vocab_size": 32064\n  },\n'
            '  "vision_config": {\n    "hidden_size": 1024,\n    "num_hidden_layers": 24\n  }\n}\n')
    env = env_of(text)
    assert (env.hidden_size, env.vocab_size, env.num_layers) == (4096, 32064, None)


def test_num_params_of_zero_init_is_not_the_parameter_count():
    env = env_of("[x] [INFO] [partition_parameters.py:343:__exit__] finished initializing model - num_params = 723, num_elems = 70.55B\n")
    assert env.total_params == 70_550_000_000


# -- decorations change nothing -------------------------------------------------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

BANNER_FIXTURES = sorted(set(EXPECTED) - {"env-trl.log", "env-plain-pytorch.log", "env-rocm.log", "env-npu.log"})
PREFIXES = ("", "[rank3]: ", "[default0]:", "node2: ", "2024-05-01T10:00:00.123Z ", "[2024-05-01 10:00:00] ",
            "[default1]:[rank1]: ", "node7: 2024-05-01T10:00:00Z ")
NOISE = (
    "Loading checkpoint shards:  50%|█████     | 1/2 [00:03<00:03,  3.12s/it]",
    "{'loss': 1.2874, 'grad_norm': 0.91, 'learning_rate': 1.8e-05, 'epoch': 0.42}",
    "  0%|          | 0/459 [00:00<?, ?it/s]",
    "Map (num_proc=16): 100%|██████████| 5000/5000 [00:01<00:00, 3721.55 examples/s]",
    "Some weights of the model checkpoint were not used when initializing the model.",
    "wandb: Syncing run fragrant-sun-12",
    "",
)


def _decorate(data, lines: list[str]) -> tuple[str, dict[int, int]]:
    """Decorate every line, insert noise between lines; return the text and old->new line map."""
    out: list[str] = []
    where: dict[int, int] = {}
    for no, line in enumerate(lines, 1):
        for _ in range(data.draw(st.integers(0, 2), label="noise")):
            out.append(data.draw(st.sampled_from(NOISE), label="noise line"))
        prefix = data.draw(st.sampled_from(PREFIXES), label="prefix") if line.strip() else ""
        if data.draw(st.booleans(), label="ansi"):
            line = f"\x1b[1;32m{line}\x1b[0m"
        out.append(prefix + line)
        where[no] = len(out)
    return "\n".join(out) + "\n", where


@pytest.mark.parametrize("name", BANNER_FIXTURES)
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_decorations_and_noise_change_no_fact(name, data):
    plain = (FIXTURES / name).read_text(encoding="utf-8").splitlines()
    want = env_of("\n".join(plain) + "\n")
    text, where = _decorate(data, plain)
    got = env_of(text)
    assert got.model_dump(exclude={"sources"}) == want.model_dump(exclude={"sources"})
    assert got.sources == {field: where[line] for field, line in want.sources.items()}


@pytest.mark.parametrize("text, field, value", [
    ("torch.__version__ = 2.1.0+cu118\n", "torch_version", "2.1.0"),
    ("[INFO:swift] swift.__version__: 3.1.0\n", "framework_version", "3.1.0"),
    # a version alone does not make a framework: framework_version follows the framework
    ("swift.__version__: 3.1.0\n", "framework_version", None),
])
def test_dunder_version_prints(text, field, value):
    assert getattr(env_of(text), field) == value


@pytest.mark.parametrize("text, field, value", [
    ("Package                  Version\n------------------------ ------------\ntorch                    2.3.1\n", "torch_version", "2.3.1"),
    ("deepspeed                 0.14.4                   pypi_0    pypi\n", "deepspeed_version", "0.14.4"),
    ("$ pip show transformers\nName: transformers\nVersion: 4.41.2\nSummary: State-of-the-art ML\n", "transformers_version", "4.41.2"),
    ("torch: 2.2.1\n", "torch_version", "2.2.1"),
    ("torch: 1.5 GB freed\n", "torch_version", None),
])
def test_package_listing_forms(text, field, value):
    assert getattr(env_of(text), field) == value


@pytest.mark.parametrize("text, world, nodes", [
    ("INFO:torch.distributed.launcher.api:Starting elastic_operator with launch configs:\n"
     "  entrypoint       : train.py\n  min_nodes        : 2\n  max_nodes        : 2\n  nproc_per_node   : 4\n", 8, 2),
    ("  group_rank=0\n  group_world_size=2\n  global_world_sizes=[16, 16, 16, 16, 16, 16, 16, 16]\n", 16, 2),
    ("INFO:torch.distributed.distributed_c10d:Rank 0: Completed store-based barrier for key:store_based_barrier_key:1 with 4 nodes.\n", 4, None),
    ("mpirun --allow-run-as-root -np 16 -H node1:8,node2:8 python train.py\n", 16, None),
])
def test_more_launcher_forms(text, world, nodes):
    env = env_of(text)
    assert (env.world_size, env.num_nodes) == (world, nodes)


def test_cpu_adam_means_the_optimizer_is_offloaded():
    text = ("Loading extension module cpu_adam...\n"
            "Time to load cpu_adam op: 2.61 seconds\n"
            "Adam Optimizer #0 is created with AVX512 arithmetic capability.\n")
    env = env_of(text)
    assert (env.offload, env.sources["offload"]) == ("optimizer", 1)
    # a config naming both parts is better evidence than the optimizer's build lines
    assert env_of("--deepspeed ds_z3_offload_config.json\n" + text).offload == "both"


FRAGMENTS = ("{", "}", "[", "]", '"zero_optimization": {', '"stage": ', "stage: ", "--deepspeed ", "ds_z3_offload.json",
             "json = {", "  zero_config .... stage=3 offload_param=X(device='cpu'", "WORLD INFO DICT: {'a': [0, 1",
             "--world_info=eyJh", "nnodes=2, num_local_procs=", "GPU 0: ", "NVIDIA A100", "|   0  Tesla V100  On   | 0000:1A:00.0 |",
             "PyTorch version: ", "2.1.2+cu121", "version=", "==", "torch", "9" * 30, "x" * 300, "\x1b[31m", "\r",
             "Total train batch size (w. parallel, distributed & accumulation) = 0", "Gradient Accumulation steps = 0",
             "Instantaneous batch size per device = 0", "bf16: ", "node2: ", "[rank1]: ", "  File \"/x/stage3.py\", line 1, in f",
             "MA 1 GB Max_MA 2 GB CA 3 GB Max_CA 4 GB", "memory: ", "CUDA OOMs: 1 | cudaMalloc retries: 2", "ü", "🦥")


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=20), max_size=8).map("".join), max_size=30))
def test_arbitrary_text_never_raises(lines):
    facts = extract(normalise("\n".join(lines)))
    env = facts.environment
    assert set(env.sources) == {k for k, v in env.model_dump(exclude={"sources"}).items() if v is not None}
    assert env.world_size is None or env.world_size >= 1


def test_zero_counts_are_not_facts():
    env = env_of("nnodes=1, num_local_procs=0, node_rank=0\nGPU number: 0\n  Gradient Accumulation steps = 0\n")
    assert (env.world_size, env.gpu_count, env.gradient_accumulation_steps) == (None, None, None)


def test_axolotl_resolving_bf16_auto_and_datasets_torch_line():
    env = env_of("bf16: auto\n"
                 "[2024-07-02 09:12:03,118] [INFO] [datasets.<module>:58] [PID:3011] PyTorch version 2.3.1 available.\n"
                 "[2024-07-02 09:12:08,201] [DEBUG] [axolotl.normalize_config:80] [PID:3011] [RANK:0] "
                 "bf16 support detected, enabling for this configuration.\n")
    assert (env.mixed_precision, env.sources["mixed_precision"]) == ("bf16", 3)
    assert (env.torch_version, env.sources["torch_version"]) == ("2.3.1", 2)


def test_an_xla_oom_from_jax_is_not_taken_for_pytorch():
    jax = ("Traceback (most recent call last):\n"
           '  File "/home/user/train_jax.py", line 120, in <module>\n'
           "    state, metrics = train_step(state, batch)\n"
           '  File "/usr/lib/python3.11/site-packages/jax/_src/pjit.py", line 1177, in _pjit_call_impl\n'
           "    return compiled.unsafe_call(*args)\n"
           "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 17142120448 bytes.\n")
    assert env_of(jax).framework == "jax"   # its fixes are JAX's own (kb/frameworks.py)
    # the same status under torch_xla is a PyTorch run
    torch_xla = jax.replace("/jax/_src/pjit.py", "/torch_xla/core/xla_model.py").replace(
        "jaxlib.xla_extension.XlaRuntimeError", "RuntimeError")
    assert env_of(torch_xla).framework == "plain-pytorch"


def test_mlu_and_gcu_out_of_memory_name_the_accelerator():
    for dev in ("MLU", "GCU"):
        text = (f"RuntimeError: {dev} out of memory. Tried to allocate 2.00 GiB ({dev} 0; 31.48 GiB total capacity; "
                "28.10 GiB already allocated; 1.02 GiB free; 29.40 GiB reserved in total by PyTorch)\n")
        assert env_of(text).accelerator == dev.lower()
