"""Out-of-memory output captured from a real PyTorch on a real GPU, read back by the CLI.

Each ``fixtures/device/<name>.log`` is what ``fixtures/device/scripts/<name>.py`` printed
(stdout and stderr together) on an NVIDIA H100 80GB HBM3 or an H200 with torch 2.11.0+cu130; see
``fixtures/device/README.md``. The expected numbers are parsed here from the log's own
text with a regex of this file's (independent of the project's parsers) and compared
with ``oomdoctor diagnose --format json``: a printed ``"55.66 GiB"`` must come back as
the integer nearest to 55.66 * 2**30, 59764469924 bytes, exactly.
"""
from __future__ import annotations

import functools
import json
import re
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest

DEVICE = Path(__file__).parent / "fixtures" / "device"
LOGS = sorted(DEVICE.glob("*.log"))
NAMES = [p.stem for p in LOGS]

_UNITS = {"bytes": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
_SIZE = r"(\d+(?:\.\d+)? (?:bytes|KiB|MiB|GiB|TiB))"
_CUDA_OOM = re.compile(
    r"(?:(?P<exc>[\w.]+Error): )?CUDA out of memory\. Tried to allocate " + _SIZE
    + r"\. GPU (?P<gpu>\d+) has a total capacity of " + _SIZE + " of which " + _SIZE + r" is free\. "
    r"(?P<procs>.*?)(?:" + _SIZE + r" allowed; )?Of the allocated memory " + _SIZE
    + r" is allocated by PyTorch, and " + _SIZE + r" is reserved by PyTorch but unallocated\.")
_SELF = re.compile(r"Including non-PyTorch memory, this process has " + _SIZE + " memory in use")
_OTHER = re.compile(r"Process (\d+) has " + _SIZE + " memory in use")


def _bytes(printed: str) -> int:
    number, unit = printed.split()
    return int((Decimal(number) * _UNITS[unit]).to_integral_value())   # the nearest integer


def _log_lines(name: str) -> list[str]:
    # lines as the CLI numbers them: a progress bar's \r (read_text would make it a line end) is none
    return (DEVICE / f"{name}.log").read_bytes().decode("utf-8").split("\n")


def _printed_ooms(name: str) -> list[dict]:
    """Every CUDA caching-allocator message in the log, as printed, with its 1-based line."""
    found = []
    for no, text in enumerate(_log_lines(name), 1):
        m = _CUDA_OOM.search(text)
        if not m:
            continue
        g = m.groups()
        # groups: exc, request, gpu, capacity, free, procs, allowed, allocated, unallocated
        procs = [{"pid": None, "bytes": _bytes(s), "is_self": True} for s in _SELF.findall(g[5])]
        procs += [{"pid": int(pid), "bytes": _bytes(s), "is_self": False} for pid, s in _OTHER.findall(g[5])]
        found.append({
            "line": no,
            "exception": m.group("exc"),
            "device_index": int(m.group("gpu")),
            "tried_to_allocate_bytes": _bytes(g[1]),
            "total_capacity_bytes": _bytes(g[3]),
            "free_bytes": _bytes(g[4]),
            "process_in_use_bytes": procs[0]["bytes"] if procs and procs[0]["is_self"] else None,
            "allowed_bytes": _bytes(g[6]) if g[6] else None,
            "allocated_by_pytorch_bytes": _bytes(g[7]),
            "reserved_unallocated_bytes": _bytes(g[8]),
            "processes": procs,
        })
    return found


def _fatal(name: str) -> dict:
    """The message that ended the script: the last one, printed after its exception class."""
    printed = _printed_ooms(name)
    assert printed and printed[-1]["exception"], f"{name}: no uncaught CUDA OOM message"
    return printed[-1]


@functools.cache
def _report(name: str) -> dict:
    proc = subprocess.run([sys.executable, "-m", "oomdoctor", "diagnose", "--format", "json",
                           str(DEVICE / f"{name}.log")], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout)


def _process_key(p: dict) -> tuple:
    return (p["pid"], p["bytes"], p["is_self"])


CUDA_OOM_LOGS = [n for n in NAMES if _printed_ooms(n)]

# the phase the log shows: None where the OOM is at module level with no training phase
PHASES = {
    "forward_activation": "forward",          # Block.forward -> Attention.forward -> torch.softmax
    "backward": "backward",                    # loss.backward() -> _engine_run_backward
    "optimizer_adamw": "optimizer_step",       # opt.step() -> adam.py _init_group
    "model_load_cuda": "model_load",           # model.cuda() -> module.py _apply
    "model_load_ctx": "model_load",            # nn.Linear.__init__ under `with torch.device("cuda")`
    "fragmentation": None,                     # a bare torch.empty at module level
    "fragmentation_expandable": None,
    "two_processes": None,
    "pinned_memory": None,
    "batch_finder": "forward",                 # the fatal OOM: Sequential.forward -> GELU.forward
    "async_backend": None,                     # module level, under the cudaMallocAsync backend
    "cublas_full": None,                       # `a @ a` at module level
    "nccl_full": None,                         # dist.all_reduce at module level
    "two_ranks": None,                         # torch.empty at module level, rank 1
    "device_assert": "forward",                # not an OOM; its index_select kernel asserted (an embedding's lookup)
    "compiled_forward": "forward",             # a torch.compile'd module's call -> the inductor's generated code
    "generate_kv": "eval",                     # generate() under no_grad
    "hf_trainer": "forward",                   # Trainer.training_step -> compute_loss -> model(**inputs)
    "lightning_fit": "forward",                # Lightning's training_step -> the module's forward
    "hf_evaluate": "eval",                     # Trainer.evaluate -> evaluation_loop -> the model's forward
    "dataloader_shm": "data_loading",          # a DataLoader worker collating into shared memory
    "jax_train_step": "forward",               # no frame names a pass: XLA's operator "jit(train_step)/jvp(MLP)/Dense_1"
    "jax_torch_share": None,                   # torch.empty at module level
    "cupy_pool": None,                         # cupy.zeros at module level
    "checkpoint_load": "checkpoint_load",      # "resuming from ..." then torch.load -> serialization.py
    "triton_shared_memory": None,              # not an OOM
    "cudnn_full": "forward",                   # Conv2d.forward -> F.conv2d
    "checkpoint_backward": "backward",         # loss.backward() -> _engine_run_backward
    "leak_history": "backward",                # the step's loss.backward() fails
    "ddp_buckets": "model_load",               # DistributedDataParallel.__init__ -> dist.Reducer
    "host_worker_oom": "data_loading",         # the main process learns of a worker's death in the DataLoader
    "host_rank_oom": None,                     # a rank killed at module level; no traceback of its own
    "vocab_logits": "forward",                 # compute_loss -> the logits' fp32 upcast for F.cross_entropy
    "stale_process": None,                     # torch.empty at module level, after nvidia-smi
    "hf_generate": "eval",                     # generate() -> _sample -> _prefill -> the model's forward
    "dataloader_cuda_worker": "data_loading",  # a worker's Dataset.__getitem__, re-raised by the main process
    "jax_generate": "eval",                    # XLA's operators name the program: "jit(generate)/dot_general"
}

# the top incident, where the log leaves no doubt
INCIDENTS = {
    "forward_activation": {"activation-memory"},
    "optimizer_adamw": {"optimizer-state"},
    "model_load_cuda": {"model-load"},
    "model_load_ctx": {"model-load"},
    "fragmentation": {"alloc-fragmentation"},
    "fragmentation_expandable": {"alloc-fragmentation"},
    "two_processes": {"ranks-share-gpu", "stale-gpu-process"},
    "pinned_memory": {"pinned-memory"},
    # the fatal request (16.00 GiB) is about what is reserved but unallocated (15.97 GiB) plus the
    # headroom under the memory fraction: a larger batch's activation, or a fragmented cache
    "batch_finder": {"activation-memory", "alloc-fragmentation"},
    # torchrun's rank 1 fails; the other process on GPU 0 is rank 0 (the agent stops it by pid)
    "two_ranks": {"ranks-share-gpu"},
    "nccl_full": {"non-pytorch-memory"},
    # cuBLAS could not create its handle on a device PyTorch had filled: where the memory went
    # is PyTorch's own tensors, so the log does not settle between the two
    "cublas_full": {"unknown-oom", "non-pytorch-memory"},
    "compiled_forward": {"activation-memory"},
    "generate_kv": {"eval-generation"},
    "hf_trainer": {"activation-memory"},
    "lightning_fit": {"activation-memory"},
    # the failing request is the logits' fp32 upcast (256 x 4096 x 32000 x 4 bytes) in the evaluation loop
    "hf_evaluate": {"eval-generation", "large-vocab-logits"},
    "dataloader_shm": {"shm-exhausted"},
    # the failing buffer is the first layer's output, f32[262144,65536], in the differentiated forward
    "jax_train_step": {"activation-memory"},
    # JAX's pool holds 59.92 GiB of this process; PyTorch holds nothing
    "jax_torch_share": {"non-pytorch-memory"},
    "checkpoint_load": {"ckpt-load"},
    # 3.47 GiB reserved but unallocated and 2.45 GiB under the fraction: the 4 GiB request could have
    # fit unfragmented; it is the backward's recomputed activations either way
    "checkpoint_backward": {"activation-memory", "alloc-fragmentation"},
    # memory_allocated rose 1.25 GiB a step for 15 steps before a 32 MiB request failed
    "leak_history": {"gradual-leak"},
    # the model (30 GiB) fits; its gradient buckets, as large again, do not: the model's placement
    "ddp_buckets": {"model-load"},
    # the kernel's OOM killer ended a DataLoader worker (the log says only "killed by signal: Killed")
    "host_worker_oom": {"dataloader-host-oom"},
    # a rank ended by SIGKILL and nothing else: the log cannot prove memory, the kill is the lead
    "host_rank_oom": {"host-oom"},
    # the failing request is the logits' fp32 upcast: 8 x 8192 x 256000 x 4 bytes (62.50 GiB)
    "vocab_logits": {"large-vocab-logits"},
    # a leftover process (the nvidia-smi table's only row) holds 55.93 GiB; this one holds 778 MiB
    "stale_process": {"stale-gpu-process"},
    # transformers' generate(): the prefill of 256 prompts of 4096 tokens, in the model's MLP
    "hf_generate": {"eval-generation"},
    # a DataLoader worker on the GPU: the other processes its message lists are the main
    # process (48 GiB) and the other worker (24 GiB), this job's own
    "dataloader_cuda_worker": {"ranks-share-gpu"},
    # a jitted generate(): its vocabulary projection (64 GiB) cannot be allocated
    "jax_generate": {"eval-generation"},
}

def test_every_scenario_is_here():
    assert sorted(NAMES) == sorted(PHASES), "a log without an expected phase, or an expected phase without its log"
    for name in NAMES:
        assert (DEVICE / "scripts" / f"{name.replace('_expandable', '')}.py").is_file()


@pytest.mark.parametrize("name", CUDA_OOM_LOGS)
def test_fatal_message_numbers(name):
    """The uncaught message's numbers, exactly as printed, on the event at its line."""
    want = _fatal(name)
    events = [e for e in _report(name)["oom_events"] if e["line"] == want["line"]]
    assert len(events) == 1, f"no single OOM event at line {want['line']}"
    got = events[0]
    assert got["kind"] == "cuda_caching_allocator"
    assert not got["survived"]
    for key, value in want.items():
        if key == "processes":
            assert sorted(map(_process_key, got[key]), key=repr) == sorted(map(_process_key, value), key=repr)
        else:
            assert got[key] == value, key


@pytest.mark.parametrize("name", CUDA_OOM_LOGS)
def test_report_is_about_the_fatal_message(name):
    """The report's memory figures are those of the OOM that ended the run."""
    want = _fatal(name)
    memory = _report(name)["memory"]
    assert memory["request_bytes"] == want["tried_to_allocate_bytes"]
    assert memory["free_bytes"] == want["free_bytes"]
    assert memory["capacity_bytes"] == want["total_capacity_bytes"]
    allocator = {a["item"]: a["bytes"] for a in memory["allocator"]}
    assert allocator["allocated by PyTorch"] == want["allocated_by_pytorch_bytes"]
    assert allocator["fragmentation"] == want["reserved_unallocated_bytes"]
    assert allocator["this process"] == want["process_in_use_bytes"]
    others = sum(p["bytes"] for p in want["processes"] if not p["is_self"])
    if others:
        # capacity - free - this process: never less than what the listed processes hold (within
        # the 2-decimal rounding of three printed figures), and at most a few tens of MiB more,
        # the device memory no process is charged with (stale_process: 20 MiB on an H100)
        rounding = 3 * Decimal("0.005") * 2**30
        assert -rounding <= allocator["other processes"] - others <= rounding + 64 * 2**20


@pytest.mark.parametrize("name", ["batch_finder"])
def test_caught_oom_is_survived(name):
    caught, fatal = _printed_ooms(name)
    assert caught["exception"] is None and fatal["exception"]
    events = {e["line"]: e for e in _report(name)["oom_events"]}
    assert events[caught["line"]]["tried_to_allocate_bytes"] == caught["tried_to_allocate_bytes"]
    assert events[caught["line"]]["survived"] is True
    assert events[fatal["line"]]["survived"] is False


@pytest.mark.parametrize("name", NAMES)
def test_phase(name):
    assert _report(name)["phase"] == PHASES[name]


@pytest.mark.parametrize("name", sorted(INCIDENTS))
def test_top_incident(name):
    diagnoses = _report(name)["diagnoses"]
    assert diagnoses and diagnoses[0]["memory_failure"]
    assert diagnoses[0]["incident"] in INCIDENTS[name]


def test_backward_is_a_memory_failure():
    """The backward OOM (weight gradients of 22 x 1 GiB layers) has no incident the log settles;
    it must still be read as a memory failure in the backward pass."""
    report = _report("backward")
    assert report["diagnoses"][0]["memory_failure"]
    assert report["phase_detail"]["phase"] == "backward"


def test_pinned_memory_event():
    text = (DEVICE / "pinned_memory.log").read_text(encoding="utf-8")
    m = re.search(r"^([\w.]+Error): CUDA error: out of memory$", text, re.MULTILINE)
    assert m and "pin_memory=True" in text
    events = _report("pinned_memory")["oom_events"]
    assert [(e["kind"], e["exception"]) for e in events] == [("cuda_runtime_error", m.group(1))]
    assert events[0]["line"] == text.splitlines().index(m.group(0)) + 1


def test_expandable_segments_seen():
    text = (DEVICE / "fragmentation_expandable.log").read_text(encoding="utf-8")
    conf = re.search(r"^PYTORCH_CUDA_ALLOC_CONF=(\S+)$", text, re.MULTILINE).group(1)
    report = _report("fragmentation_expandable")
    assert report["environment"]["alloc_conf"] == conf == "expandable_segments:True"
    fixes = {r["id"]: r for r in report["diagnoses"][0]["remediations"]}
    assert fixes["expandable-segments"]["applicable"] is False   # it was already on
    assert _report("fragmentation")["environment"]["alloc_conf"] is None


def test_two_processes_listed():
    fatal = _fatal("two_processes")
    others = [p for p in fatal["processes"] if not p["is_self"]]
    assert len(others) == 1
    event = next(e for e in _report("two_processes")["oom_events"] if e["line"] == fatal["line"])
    assert {p["pid"] for p in event["processes"] if not p["is_self"]} == {others[0]["pid"]}


def _line_of(name: str, pattern: str) -> tuple[int, re.Match]:
    """The first line of the log that the pattern matches (1-based), and the match."""
    for no, text in enumerate(_log_lines(name), 1):
        m = re.search(pattern, text)
        if m:
            return no, m
    raise AssertionError(f"{name}: nothing matches {pattern!r}")


def test_async_backend_table():
    """cudaMallocAsync's message is a table, not the caching allocator's sentence."""
    text = (DEVICE / "async_backend.log").read_text(encoding="utf-8")
    assert "allocator backend: cudaMallocAsync" in text
    row = {k.strip(): v for k, v in re.findall(r"^([A-Za-z ()]+?)\s*: (\d+(?:\.\d+)? [KMGT]iB)$", text, re.MULTILINE)}
    line, _m = _line_of("async_backend", r"OutOfMemoryError: Allocation on device 0 would exceed allowed memory")
    event = _report("async_backend")["oom_events"][0]
    assert (event["line"], event["message_format"], event["device_index"]) == (line, "cuda-malloc-async", 0)
    assert event["tried_to_allocate_bytes"] == _bytes(row["Requested"])
    assert event["allocated_by_pytorch_bytes"] == _bytes(row["Currently allocated"])
    assert event["total_capacity_bytes"] == _bytes(row["Device limit"])
    assert event["free_bytes"] == _bytes(row["Free (according to CUDA)"])


@pytest.mark.parametrize("name, kind, pattern", [
    ("cublas_full", "cublas_alloc", r"CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate\(handle\)`"),
    ("nccl_full", "nccl", r"NCCL WARN Cuda failure 2 'out of memory'"),
])
def test_library_allocation_failure(name, kind, pattern):
    """A library's own allocation failing on a full device is an OOM event of that library,
    at its first line, and a memory failure."""
    line, _m = _line_of(name, pattern)
    events = _report(name)["oom_events"]
    assert [(e["kind"], e["line"]) for e in events][:1] == [(kind, line)]
    assert _report(name)["diagnoses"][0]["memory_failure"]


def test_device_assert_with_memory_summary_is_not_oom():
    """A log that prints the allocator's memory summary and then fails on a device-side
    assert has no OOM event and no memory diagnosis; its first failure is the assert."""
    report = _report("device_assert")
    assert "PyTorch CUDA memory summary" in (DEVICE / "device_assert.log").read_text(encoding="utf-8")
    assert report["oom_events"] == []
    assert not any(d["memory_failure"] for d in report["diagnoses"])
    line, _m = _line_of("device_assert", r"Assertion `srcIndex < srcSelectDimSize` failed")
    assert report["ranks"]["first_failure_line"] == line


def test_two_ranks_other_process_is_the_sibling_rank():
    """The process the OOM message lists beside rank 1 is the one torchrun's agent stops:
    rank 0 of the same job, so the ranks share the GPU; no stale process."""
    fatal = _fatal("two_ranks")
    others = [p["pid"] for p in fatal["processes"] if not p["is_self"]]
    _line, stopped = _line_of("two_ranks", r"Sending process (\d+) closing signal SIGTERM")
    assert others == [int(stopped.group(1))]
    report = _report("two_ranks")
    assert report["environment"]["world_size"] == 2
    assert int(stopped.group(1)) in report["ranks"]["worker_pids"]
    assert "stale-gpu-process" not in [d["incident"] for d in report["diagnoses"]][:1]


def test_a_rank_the_oom_killer_ended_under_torchrun():
    """torchrun's report of a rank ended by SIGKILL (the kernel's OOM killer in a cgroup): the
    root cause is that rank, the rank the agent stopped afterwards is not, and a kill alone is
    read as a weak sign of host memory (the kernel's log would prove it)."""
    _line, root = _line_of("host_rank_oom", r"failed \(exitcode: -9\) local_rank: (\d+) \(pid: (\d+)\)")
    _line, stopped = _line_of("host_rank_oom", r"Sending process (\d+) closing signal SIGTERM")
    report = _report("host_rank_oom")
    (ev,) = [e for e in report["oom_events"] if e["kind"] == "host_oom_killer"]
    assert ev["strength"] == "weak"
    assert report["ranks"]["failed_ranks"] == [int(root.group(1))]
    assert report["ranks"]["stopped_pids"] == [int(stopped.group(1))]
    assert int(root.group(2)) not in report["ranks"]["stopped_pids"]
