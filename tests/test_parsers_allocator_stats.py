"""Allocator statistics: one MemorySample per reading, sizes as exact bytes."""
from __future__ import annotations

from pathlib import Path

import pytest

from oomdoctor.read.normalise import normalise
from oomdoctor.parsers import extract

FIXTURES = Path(__file__).parent / "fixtures" / "logs"
GiB = 2**30
MiB = 2**20


def samples_of(text: str, source: str | None = None):
    got = extract(normalise(text)).memory_samples
    return [s for s in got if source is None or s.source == source]


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def gib(x: str) -> int:
    """DeepSpeed and axolotl print bytes / 2**30 with a few decimals."""
    from decimal import Decimal
    return int((Decimal(x) * GiB).to_integral_value())


# -- torch.cuda.memory_summary ----------------------------------------------------------

def test_memory_summary_torch2_table():
    (s,) = samples_of(fixture("stats-memory-summary-2x.log"), "memory_summary")
    assert (s.line, s.device_index, s.num_ooms, s.alloc_retries) == (4, 3, 1, 7)
    # the "Requested memory" row (torch >= 2.0) must not be read as allocated
    assert (s.allocated_bytes, s.max_allocated_bytes) == (73113 * MiB, 80793 * MiB)
    assert (s.reserved_bytes, s.max_reserved_bytes) == (78028 * MiB, 80896 * MiB)


def test_memory_summary_torch1_table():
    (s,) = samples_of(fixture("stats-memory-summary-1x.log"), "memory_summary")
    assert (s.line, s.device_index, s.num_ooms, s.alloc_retries) == (3, 0, 0, 2)
    assert (s.allocated_bytes, s.max_allocated_bytes) == (10547 * MiB, 11366 * MiB)
    assert (s.reserved_bytes, s.max_reserved_bytes) == (11161 * MiB, 11776 * MiB)


def test_memory_summary_units_follow_each_value():
    table = (
        "|                  PyTorch CUDA memory summary, device ID 1                 |\n"
        "|            CUDA OOMs: 0            |        cudaMalloc retries: 0         |\n"
        "| Allocated memory      | 524288 KiB |   3072 MiB |     40 GiB |     39 GiB |\n"
        "| GPU reserved memory   |      0 B   |   1024 MiB |     41 GiB |     41 GiB |\n")
    (s,) = samples_of(table, "memory_summary")
    assert (s.allocated_bytes, s.max_allocated_bytes) == (524288 * 1024, 3072 * MiB)
    assert (s.reserved_bytes, s.max_reserved_bytes) == (0, 1024 * MiB)


# -- DeepSpeed see_memory_usage ---------------------------------------------------------

def test_see_memory_usage_with_logger_prefix_up_to_0_18_2():
    first, second = samples_of(fixture("stats-see-memory-usage-prefixed.log"), "see_memory_usage")
    # the label is the see_memory_usage line, not the comm.py line printed in between
    assert (first.line, first.label) == (4, "Stage 3 initialize beginning")
    assert (first.allocated_bytes, first.max_allocated_bytes) == (gib("12.97"), gib("14.2"))
    assert (first.reserved_bytes, first.max_reserved_bytes) == (gib("14.97"), 15 * GiB)
    assert (first.host_used_bytes, first.host_percent) == (gib("61.08"), 12.1)
    assert (second.line, second.label, second.allocated_bytes) == (7, "After initializing ZeRO optimizer", gib("25.5"))


def test_see_memory_usage_bare_print_from_0_18_3():
    first, second = samples_of(fixture("stats-see-memory-usage-bare.log"), "see_memory_usage")
    assert (first.line, first.label) == (3, "Before initializing optimizer states")
    assert (first.allocated_bytes, first.reserved_bytes, first.max_reserved_bytes) == (gib("3.12"), gib("3.2"), 3 * GiB)
    assert (first.host_used_bytes, first.host_percent) == (gib("45.5"), 9.0)
    assert (second.line, second.label, second.max_allocated_bytes) == (6, "After initializing optimizer states", gib("12.48"))


def test_host_line_alone_still_counts():
    (s,) = samples_of("CPU Virtual Memory:  used = 480.2 GB, percent = 95.3%\n", "see_memory_usage")
    assert (s.host_used_bytes, s.host_percent, s.allocated_bytes) == (gib("480.2"), 95.3, None)


# -- nvidia-smi and list_gpu_processes ------------------------------------------------------

def test_nvidia_smi_old_layout():
    got = samples_of(fixture("stats-nvidia-smi-old.log"), "nvidia_smi")
    gpus = [(s.line, s.device_index, s.used_bytes, s.total_bytes) for s in got if s.pid is None]
    procs = [(s.line, s.device_index, s.pid, s.used_bytes, s.label) for s in got if s.pid is not None]
    assert gpus == [(10, 0, 31012 * MiB, 32480 * MiB), (13, 1, 18876 * MiB, 32480 * MiB)]
    assert procs == [(20, 0, 21544, 31001 * MiB, "/opt/conda/bin/python"),
                     (21, 1, 21545, 12865 * MiB, "/opt/conda/bin/python"),
                     (22, 1, 20117, 6001 * MiB, "python")]


def test_nvidia_smi_mig_layout():
    got = samples_of(fixture("stats-nvidia-smi-mig.log"), "nvidia_smi")
    rows = [(s.line, s.device_index, s.pid, s.used_bytes, s.total_bytes) for s in got]
    # the GPU, its two MIG slices (BAR1 rows are not memory), then the processes (GI/CI columns)
    assert rows == [(10, 0, None, 9894 * MiB, 40960 * MiB),
                    (21, 0, None, 4937 * MiB, 20096 * MiB),
                    (24, 0, None, 4957 * MiB, 20096 * MiB),
                    (33, 0, 48211, 4912 * MiB, None),
                    (34, 0, 48212, 4932 * MiB, None)]
    assert got[3].label == "python train.py --local_rank 0"


def test_nvidia_smi_feeds_the_environment():
    env = extract(normalise(fixture("stats-nvidia-smi-old.log"))).environment
    assert (env.gpu_capacity_bytes, env.sources["gpu_capacity_bytes"]) == (32480 * MiB, 10)
    assert (env.gpu_name, env.gpu_count, env.cuda_version) == ("Tesla V100-SXM2", 2, "10.1")


def test_list_gpu_processes():
    got = samples_of(fixture("stats-trainer-lines.log"), "list_gpu_processes")
    assert [(s.line, s.device_index, s.pid, s.used_bytes) for s in got] == [
        (10, 0, 31337, int(20123.25 * MiB)), (11, 0, 31338, 903 * MiB)]


# -- trainer lines -------------------------------------------------------------------------

def test_mmengine_memory_is_max_allocated_mib():
    got = samples_of(fixture("stats-trainer-lines.log"), "mmengine")
    assert [(s.line, s.label, s.max_allocated_bytes) for s in got] == [
        (1, "Iter(train) [ 10/3000]", 20345 * MiB),
        (2, "Iter(train) [ 20/3000]", 21870 * MiB),
        (3, "Epoch(train) [1][ 30/1000]", 23001 * MiB)]


def test_axolotl_memory_lines_of_three_generations():
    oldest, with_extras, training, named_device = samples_of(fixture("stats-trainer-lines.log"), "axolotl")
    # oldest helper: NVML's whole-GPU figure, printed with a space before GB
    assert (oldest.line, oldest.label, oldest.used_bytes, oldest.allocated_bytes) == (4, "after model load", gib("7.331"), None)
    # allocated, + cache (reserved - allocated), + misc (NVML used - reserved)
    assert (with_extras.allocated_bytes, with_extras.reserved_bytes) == (gib("4.102"), gib("4.102") + gib("0.254"))
    assert with_extras.used_bytes == with_extras.reserved_bytes + gib("0.881")
    assert (training.line, training.label, training.reserved_bytes) == (6, "while training", gib("9.875") + gib("12.340"))
    assert (named_device.device_index, named_device.label, named_device.reserved_bytes) == (1, "after adapters", gib("4.210"))


def test_deepspeed_cache_flush_warning():
    (s,) = samples_of(fixture("stats-trainer-lines.log"), "deepspeed_flush")
    assert (s.line, s.alloc_retries) == (8, 4)


def test_user_prints_group_into_readings():
    first, stats, recipes = samples_of(fixture("stats-user-prints.log"), "user_print")
    assert first.line == 1
    assert (first.allocated_bytes, first.max_allocated_bytes) == (int(12.34 * GiB), int(15.02 * GiB))
    assert (first.reserved_bytes, first.max_reserved_bytes) == (16 * GiB, 17179869184)
    assert (stats.line, stats.max_allocated_bytes, stats.alloc_retries, stats.num_ooms) == (5, 16123456789, 3, 0)
    assert (recipes.line, recipes.max_allocated_bytes, recipes.max_reserved_bytes) == (7, 31 * GiB, 39 * GiB)
    assert (recipes.alloc_retries, recipes.host_used_bytes) == (5, 153 * GiB)


@pytest.mark.parametrize("text", [
    # the OOM message's own figures are not a reading
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. Of the allocated memory 71.40 GiB "
    "is allocated by PyTorch, and 4.80 GiB is reserved by PyTorch but unallocated.\n",
    "If reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.\n",
    "memory_allocated: 12.5\n",                      # no unit and too small to be bytes
    "| GPU  Name        Persistence-M| Bus-Id        Disp.A | Volatile Uncorr. ECC |\n",
    "|                  |               2MiB / 32767MiB  |           |                       |\n",
])
def test_not_readings(text):
    assert samples_of(text) == []


def test_prefixes_do_not_hide_readings():
    text = ("[rank0]: MA 1.5 GB         Max_MA 2.0 GB         CA 2.5 GB         Max_CA 3 GB \n"
            "node2: [default0]:CPU Virtual Memory:  used = 10.0 GB, percent = 5.0%\n")
    (s,) = samples_of(text, "see_memory_usage")
    assert (s.allocated_bytes, s.max_reserved_bytes, s.host_percent) == (gib("1.5"), 3 * GiB, 5.0)


@pytest.mark.parametrize("line,field,value", [
    ("[train] step 200   loss 2.9137  mem_alloc 13.42 GB  mem_reserved 15.10 GB", "allocated_bytes", "13.42"),
    ("[train] step 200   loss 2.9137  mem_alloc 13.42 GB  mem_reserved 15.10 GB", "reserved_bytes", "15.10"),
    ("step 5745 loss=1.2555 mem_alloc=43.9GiB mem_reserved=49.1GiB", "allocated_bytes", "43.9"),
    ("it 300 | max_mem_allocated: 61.02 GiB", "max_allocated_bytes", "61.02"),
])
def test_training_loops_shorthand_memory_prints(line, field, value):
    s = samples_of(line + "\n", "user_print")
    assert len(s) == 1
    got = getattr(s[0], field)
    assert got is not None and abs(got - gib(value)) <= 2**24, (got, gib(value))


def test_shorthand_needs_a_unit_and_a_whole_key():
    assert samples_of("mem_alloc 13 steps=4 item_mem_alloc 3.0 GB\n", "user_print") == []
