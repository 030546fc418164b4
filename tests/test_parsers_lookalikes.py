"""Failures that are not memory exhaustion (parsers/lookalikes.py).

Each ``lookalike-*.log`` fixture has a sibling ``.yaml`` with the expected failures; none
of them may produce an OOM event, through ``extract`` or through the whole pipeline.
"""
from __future__ import annotations


import pytest

from oomdoctor.facts import Evidence, OomEvent
from oomdoctor.read.normalise import normalise
from oomdoctor.parsers import lookalikes
from oomdoctor.parsers.base import ParseContext


def _lookalikes_only(text: str, existing: list[OomEvent] = ()) -> ParseContext:
    ctx = ParseContext(normalise(text))
    ctx.facts.oom_events.extend(existing)
    lookalikes.parse(ctx)
    return ctx


def _kinds(text: str) -> list[str]:
    return [f.kind for f in _lookalikes_only(text).facts.failures]


@pytest.mark.parametrize("line, kind", [
    ("Memory access fault by GPU node-2 (Agent handle: 0x55d0) on address 0x7f00. Reason: Page not present or supervisor privilege.",
     "illegal_memory_access"),
    ("RuntimeError: CUDA error: misaligned address", "misaligned_address"),
    ("RuntimeError: HIP error: invalid device function", "no_kernel_image"),
    ("[E ProcessGroupNCCL.cpp:475] [Rank 2] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=BROADCAST, "
     "Timeout(ms)=600000) ran for 600103 milliseconds before timing out.", "nccl_timeout"),
    ("RuntimeError: NCCL communicator was aborted on rank 3.", "nccl_error"),
    ("node1:2211:2290 [3] NCCL WARN Call to CUDA function failed: unhandled cuda error", "nccl_error"),
    ("torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1691, internal error - please report "
     "this issue to the NCCL developers", "nccl_error"),
    ("torch.distributed.elastic.multiprocessing.api: [WARNING] Sending process 51 closing signal SIGTERM", "sigterm"),
    ("  traceback : Signal 15 (SIGTERM) received by PID 4411", "sigterm"),
    ("bash: line 1: 1234 Segmentation fault      (core dumped) python train.py", "segfault"),
    ("RuntimeError: FlashAttention only supports Ampere GPUs or newer.", "flash_attn_unsupported"),
    ("ValueError: --tf32 requires Ampere or a newer GPU arch, cuda>=11 and torch>=1.7", "tf32_unsupported"),
    ("2024-04-03 10:11:40.412113: W tensorflow/core/common_runtime/bfc_allocator.cc:290] Allocator (GPU_0_bfc) ran out of "
     "memory trying to allocate 1.17GiB with freed_by_count=0. The caller indicates that this is not a failure", "bfc_not_failure"),
    ("iter 12 step 3: loss nan, iter time: 812.00ms", "nan_loss"),
    ("Epoch 2:  40%|████ | 40/100 [00:10<00:15, loss=nan]", "nan_loss"),
])
def test_look_alike_variants(line, kind):
    assert _kinds(line) == [kind]


def test_absurd_request_is_a_failure_not_an_event():
    ctx = _lookalikes_only("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate more than 1EB memory.")
    assert [f.kind for f in ctx.facts.failures] == ["absurd_allocation"] and ctx.facts.oom_events == []


def test_nccl_error_explained_by_an_nccl_oom_event_is_not_repeated():
    text = "torch.distributed.DistBackendError: NCCL error in: x.cpp:1, unhandled cuda error, NCCL version 2.18.1"
    nccl_oom = OomEvent(kind="nccl", line=5, evidence=[Evidence(line=5, text="...")])
    assert [f.kind for f in _lookalikes_only(text, [nccl_oom]).facts.failures] == []
    assert _kinds(text) == ["nccl_error"]


@pytest.mark.parametrize("line", [
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 79.15 GiB",
    "RuntimeError: CUDA error: out of memory",
    "MemoryError",
    "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with shape[1]",
    "RuntimeError: DataLoader worker (pid 17) is killed by signal: Killed. ",
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
    "RuntimeError: Caught ValueError in DataLoader worker process 0.",
])
def test_memory_messages_and_wrappers_are_not_python_exceptions(line):
    assert _kinds(f"Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n{line}\n") == []


def test_indented_code_and_warnings_are_not_exceptions():
    text = ("Traceback (most recent call last):\n  File \"x.py\", line 3, in f\n    raise ValueError(msg)\n"
            "UserWarning: this is only a warning\nERROR: something went wrong\n")
    assert _kinds(text) == []


def test_nothing_is_marked_secondary_here():
    text = ("Watchdog caught collective operation timeout: WorkNCCL(SeqNum=3) ran for 1800000 milliseconds before timing out.\n"
            "Sending process 5 closing signal SIGTERM\nValueError: bad\n")
    assert not any(f.secondary for f in _lookalikes_only(text).facts.failures)


@pytest.mark.parametrize("text", ["", "Expected all tensors to be on the same device" * 2000,
                                  "'loss': " * 20000, "ValueError" + ": x" * 30000, "Assertion `" * 10000])
def test_hostile_input_never_raises(text):
    _lookalikes_only(text)


@pytest.mark.parametrize("line", [
    "Process finished with exit code -1073741819 (0xC0000005)",                  # an IDE's report
    "Process finished with exit code -1073741795 (0xC000001D)",                  # illegal instruction
    "subprocess.CalledProcessError: Command '['python', 'train.py']' returned non-zero exit status 3221225477.",
    "Windows fatal exception: access violation",                                 # Python's faulthandler
    "Exception code: 0xc0000005",
    "[default0]:  exitcode  : 3221225477 (pid: 4242)",                             # torchrun's summary
])
def test_a_windows_process_crash_is_a_crash(line):
    assert "windows_crash" in _kinds(line)


@pytest.mark.parametrize("line", [
    "Process finished with exit code -1073741801 (0xC0000017)",   # STATUS_NO_MEMORY: memory, not a crash
    "Process finished with exit code 0",
    "loaded 32212254 samples from 0xC00000 offsets",              # other numbers holding those digits
    "consumed tokens: 3221225477 | elapsed time per iteration (ms): 9691.1",
])
def test_what_is_no_windows_crash(line):
    assert "windows_crash" not in _kinds(line)


def test_a_dataloader_worker_that_exited_beside_a_crash_crashed():
    import oomdoctor
    exited = ('Traceback (most recent call last):\n  File "train.py", line 3, in <module>\n'
              "RuntimeError: DataLoader worker (pid(s) 12488) exited unexpectedly\n")
    for crash in ("ERROR: Unexpected segmentation fault encountered in worker.\n",
                  "ERROR: Unexpected floating-point exception encountered in worker.\n",
                  "Process finished with exit code -1073741819 (0xC0000005)\n"):
        d = oomdoctor.diagnose(crash + exited).model_dump(mode="json")
        assert d["diagnoses"] == [] and d["oom_events"][0]["symptom"], crash
    # a crash far from it (thousands of steps earlier) is another failure's
    far = "Segmentation fault (core dumped)\n" + "".join(f"step {i} loss 0.5\n" for i in range(200))
    d = oomdoctor.diagnose(far + exited).model_dump(mode="json")
    assert d["diagnoses"][0]["incident"] == "dataloader-host-oom"
    # alone, or beside a bus error (shared memory), it is still read as memory
    d = oomdoctor.diagnose(exited).model_dump(mode="json")
    assert d["diagnoses"][0]["incident"] == "dataloader-host-oom"
    d = oomdoctor.diagnose("ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient "
                           "shared memory (shm).\n" + exited).model_dump(mode="json")
    assert d["diagnoses"][0]["incident"] == "shm-exhausted"


def test_a_loggers_caption_over_a_traceback_is_not_its_exception():
    # logging.exception("Exception:") writes its record, then the traceback
    text = ("2022-06-21 20:40:24,602 - speechbrain.core - ERROR - Exception:\n"
            "Traceback (most recent call last):\n"
            '  File "train.py", line 208, in <module>\n'
            "    raise ValueError(\n"
            "ValueError: Loss is not finite and patience is exhausted.\n")
    failures = _lookalikes_only(text).facts.failures
    assert [(f.kind, f.line) for f in failures] == [("python_exception", 5)]


def test_an_exception_without_a_message_before_the_next_traceback_is_one():
    # (Python prints an exception with an empty message as its class alone, no colon)
    text = ("Traceback (most recent call last):\n"
            '  File "train.py", line 3, in <module>\n'
            "    assert ok\n"
            "AssertionError\n"
            "Traceback (most recent call last):\n"
            '  File "train.py", line 3, in <module>\n'
            "    assert ok\n"
            "AssertionError\n")
    assert [f.line for f in _lookalikes_only(text).facts.failures] == [4]


def _rasterizer_oom(request: str) -> str:
    return ('Traceback (most recent call last):\n'
            '  File "/src/diff_gaussian_rasterization/__init__.py", line 94, in forward\n'
            "    num_rendered, color, radii, geomBuffer, binningBuffer, imgBuffer = _C.rasterize_gaussians(*args)\n"
            f"RuntimeError: CUDA out of memory. Tried to allocate {request}. GPU 0 has a total capacity of 24.00 GiB "
            "of which 16.66 GiB is free. Of the allocated memory 5.43 GiB is allocated by PyTorch, and 58.25 MiB "
            "is reserved by PyTorch but unallocated.\n")


def test_an_extensions_op_asking_for_many_devices_is_a_garbled_size():
    import oomdoctor
    d = oomdoctor.diagnose(_rasterizer_oom("712.03 GiB")).model_dump(mode="json")
    assert d["diagnoses"] == [] and "compiled extension" in d["oom_events"][0]["symptom"]


def test_an_extensions_op_asking_for_a_few_devices_or_python_code_asking_many_is_memory():
    import oomdoctor
    # five times the card inside the extension: real demand (a TensorRT compile's)
    d = oomdoctor.diagnose(_rasterizer_oom("120.00 GiB")).model_dump(mode="json")
    assert d["oom_events"][0]["symptom"] is None and d["diagnoses"]
    # thirty times the card from a tensor the Python code made
    d = oomdoctor.diagnose(_rasterizer_oom("712.03 GiB").replace(
        "num_rendered, color, radii, geomBuffer, binningBuffer, imgBuffer = _C.rasterize_gaussians(*args)",
        "sim = feats @ feats.t()")).model_dump(mode="json")
    assert d["oom_events"][0]["symptom"] is None and d["diagnoses"]
    # nor PyTorch's own operator called by name from compiled or traced code
    d = oomdoctor.diagnose(_rasterizer_oom("712.03 GiB").replace(
        "num_rendered, color, radii, geomBuffer, binningBuffer, imgBuffer = _C.rasterize_gaussians(*args)",
        "buf0 = torch.ops.aten.mm.default(arg0_1, arg1_1)")).model_dump(mode="json")
    assert d["oom_events"][0]["symptom"] is None and d["diagnoses"]
