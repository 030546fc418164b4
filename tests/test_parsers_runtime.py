"""Non-allocator GPU OOMs: CUDA/HIP runtime errors, cuBLAS/cuDNN, NCCL, bitsandbytes,
FSDP clone(), the pin-memory thread, Ascend and XPU (parsers/runtime.py).

Each ``runtime-*.log`` fixture has a sibling ``.yaml`` with the expected facts, checked
through ``extract(normalise(text))`` and through the whole pipeline.
"""
from __future__ import annotations


import pytest

from oomdoctor.facts import Evidence, OomEvent
from oomdoctor.read.normalise import normalise
from oomdoctor.parsers import runtime
from oomdoctor.parsers.base import ParseContext


def _runtime_only(text: str, existing: list[OomEvent] = ()) -> ParseContext:
    ctx = ParseContext(normalise(text))
    ctx.facts.oom_events.extend(existing)
    runtime.parse(ctx)
    return ctx


@pytest.mark.parametrize("suffix, fmt", [
    ([], None),
    (["CUDA kernel errors might be asynchronously reported at some other API call,so the stacktrace below might be incorrect.",
      "For debugging consider passing CUDA_LAUNCH_BLOCKING=1."], "torch1.9-1.13"),
    (["CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.",
      "For debugging consider passing CUDA_LAUNCH_BLOCKING=1.",
      "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions."], "torch2.0-2.3"),
    (["CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.",
      "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
      "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions."], "torch2.4-2.8"),
])
def test_cuda_error_suffix_dates_the_torch_release(suffix, fmt):
    ctx = _runtime_only("\n".join(["RuntimeError: CUDA error: out of memory", *suffix]))
    (ev,) = ctx.facts.oom_events
    assert (ev.kind, ev.message_format, ev.exception) == ("cuda_runtime_error", fmt, "RuntimeError")


def test_c10_abort_without_python_exception():
    ctx = _runtime_only("terminate called after throwing an instance of 'c10::Error'\n"
                        "  what():  CUDA error: out of memory\n")
    (ev,) = ctx.facts.oom_events
    assert ev.kind == "cuda_runtime_error" and ev.line == 2 and ev.exception is None


@pytest.mark.parametrize("line, kind, strength", [
    ("RuntimeError: HIP error: hipErrorOutOfMemory", "hip", "certain"),
    ("RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasLtMatmul( ltHandle, computeDesc.descriptor())`",
     "cublas_alloc", "certain"),
    ("RuntimeError: cusolver error: CUSOLVER_STATUS_ALLOC_FAILED, when calling `cusolverDnCreate(handle)`", "cublas_alloc", "certain"),
    ("RuntimeError: Unable to find a valid cuDNN algorithm to run convolution", "cublas_alloc", "weak"),
    ("RuntimeError: cuDNN error: CUDNN_STATUS_ALLOC_FAILED", "cublas_alloc", "certain"),
    ("node2:411:411 [3] transport/net.cc:890 NCCL WARN Cuda failure 2 'out of memory'", "nccl", "certain"),
    ("node1:7:9 [1] NCCL WARN Call to cuMemCreate failed: out of memory", "nccl", "certain"),
    ("RuntimeError: NPU out of memory. device id: 5", "npu", "certain"),
    ("RuntimeError: NPU out of memory. Allocation was preemptively rejected because it would exceed "
     "per_process_memory_fraction limit. Requested size: 1073741824", "npu", "certain"),
    ("RuntimeError: level_zero backend failed with error: 40 (UR_RESULT_ERROR_OUT_OF_DEVICE_MEMORY)", "xpu", "certain"),
    ("RuntimeError: PI_ERROR_OUT_OF_RESOURCES", "xpu", "likely"),
    ("jax.errors.JaxRuntimeError: INTERNAL: CUDA_ERROR_OUT_OF_MEMORY: out of memory", "cuda_runtime_error", "certain"),
    # a program's own CUDA check naming its source first (COLMAP's CudaSafeCall)
    ("CUDA error at /home/code/colmap/src/mvs/gpu_mat.h:167 - out of memory", "cuda_runtime_error", "certain"),
])
def test_message_variants(line, kind, strength):
    (ev,) = _runtime_only(line).facts.oom_events
    assert (ev.kind, ev.strength) == (kind, strength)


def test_nccl_device_from_the_debug_prefix():
    (ev,) = _runtime_only("node2:411:411 [3] transport/net.cc:890 NCCL WARN Cuda failure 2 'out of memory'").facts.oom_events
    assert ev.device_index == 3


def test_nccl_unhandled_cuda_error_alone_is_not_an_oom():
    ctx = _runtime_only("RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:825, unhandled cuda error, NCCL version 2.7.8\n")
    assert ctx.facts.oom_events == []


def test_fsdp_clone_detail_goes_onto_the_allocator_event_of_the_same_line():
    text = ("Saving model checkpoint to out/checkpoint-100\n"
            "RuntimeError: Failed to clone() tensor with name layers.0.weight on rank 0. This may mean ... "
            "Error: CUDA out of memory. Tried to allocate 1.00 GiB\n")
    allocator_event = OomEvent(kind="cuda_caching_allocator", line=2, tried_to_allocate_bytes=2**30,
                               evidence=[Evidence(line=2, text="...")])
    ctx = _runtime_only(text, [allocator_event])
    assert len(ctx.facts.oom_events) == 1
    assert "FSDP state-dict cloning" in ctx.facts.oom_events[0].detail


def test_pin_memory_thread_marks_the_wrapped_allocator_event():
    text = ("RuntimeError: Caught OutOfMemoryError in pin memory thread for device 2.\n"
            "Original Traceback (most recent call last):\n"
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB\n")
    allocator_event = OomEvent(kind="cuda_caching_allocator", line=3, evidence=[Evidence(line=3, text="...")])
    ctx = _runtime_only(text, [allocator_event])
    (ev,) = ctx.facts.oom_events
    assert ev.detail == "pin memory thread" and ev.device_index == 2


def test_lines_already_explained_by_the_allocator_are_left_alone():
    text = "torch.OutOfMemoryError: NPU out of memory. device id: 0 Tried to allocate 2.00 MiB\n"
    allocator_event = OomEvent(kind="npu", line=1, evidence=[Evidence(line=1, text="...")])
    assert len(_runtime_only(text, [allocator_event]).facts.oom_events) == 1


@pytest.mark.parametrize("text", [
    "RuntimeError: CUDA error: an illegal memory access was encountered",
    "RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasSgemm( handle, opa, opb, m, n, k, &alpha, a, lda, b, ldb, &beta, c, ldc)`",
    "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous input.",
    "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1269, unhandled system error, NCCL version 2.14.3",
    "node1:1:1 [0] NCCL WARN NET/IB : No device found.",
    "CUDA error at /home/user/colmap/src/mvs/gpu_mat.h:348 - an illegal memory access was encountered",
])
def test_look_alikes_are_not_runtime_ooms(text):
    assert _runtime_only(text).facts.oom_events == []


@pytest.mark.parametrize("text", ["", "CUDA error: out of memory" * 3000, "Failed to clone() tensor with name " + "x" * 70000,
                                  "NCCL WARN Cuda failure 'out of memory'\n" * 2000])
def test_hostile_input_never_raises(text):
    _runtime_only(text)


@pytest.mark.parametrize("line", [
    "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous input.",
    'RuntimeError: NVML_SUCCESS == r INTERNAL ASSERT FAILED at "../c10/cuda/CUDACachingAllocator.cpp":838, '
    "please report a bug to PyTorch. NVML_ERROR_GPU_IS_LOST",
])
def test_other_cudnn_and_nvml_statuses_are_not_out_of_memory(line):
    ctx = ParseContext(normalise(line + "\n"))
    runtime.parse(ctx)
    assert ctx.facts.oom_events == []


@pytest.mark.parametrize("frame, fmt", [
    # bitsandbytes' own code (its package folder): its allocation
    ('  File "/env/site-packages/bitsandbytes/functional.py", line 179, in get_paged', "bitsandbytes"),
    # transformers' module that places a quantized model's weights as it loads: not bitsandbytes'
    ('  File "/env/site-packages/transformers/utils/bitsandbytes.py", line 109, in set_module_quantized_tensor_to_device',
     None),
])
def test_a_cuda_error_is_bitsandbytes_only_under_its_package(frame, fmt):
    text = "Traceback (most recent call last):\n" + frame + "\n    new_value = value.to(device)\nRuntimeError: CUDA error: out of memory\n"
    (ev,) = _runtime_only(text).facts.oom_events
    assert (ev.kind, ev.message_format) == ("cuda_runtime_error", fmt)


@pytest.mark.parametrize("code, pinned", [
    ("    buffer = torch.empty(size, dtype=torch.uint8, pin_memory=True)", True),
    ("    buffer.cpu_data = buffer.data.cpu().pin_memory()", True),
    # the same error from anything else is not a refused pinned buffer
    ("    out = fused_rope(q, k, cos, sin)", False),
    ("    buffer = torch.empty(size, dtype=torch.uint8, pin_memory=False)", False),
    # a loader or an argument parser told to pin is no pinned tensor being made
    ("    loader = DataLoader(ds, batch_size=8, pin_memory=True)", False),
    ("Namespace(batch_size=8, pin_memory=True, lr=0.1)", False),
])
def test_invalid_argument_under_pinning_code_is_a_refused_pinned_buffer(code, pinned):
    text = ('  File "/x/memory_management.py", line 1285, in __init__\n' + code + "\n"
            "RuntimeError: CUDA error: invalid argument\n")
    events = _runtime_only(text).facts.oom_events
    assert [(e.message_format, e.strength) for e in events] == ([("cuda-pinned-invalid-argument", "likely")] if pinned else [])


@pytest.mark.parametrize("why, refused", [
    ("out of memory", True),
    ("invalid argument", True),
    # the driver, not memory: the run goes on with pageable buffers
    ("CUDA driver version is insufficient for CUDA runtime version", False),
    ("system has unsupported display driver / cuda driver combination", False),
    ("no CUDA-capable device is detected", False),
])
def test_a_refused_ggml_pinned_buffer_is_memory_only_for_a_memory_reason(why, refused):
    text = f"ggml_cuda_host_malloc: failed to allocate 448.00 MiB of pinned memory: {why}\n"
    assert bool(_runtime_only(text).facts.oom_events) is refused


def test_only_the_code_line_right_above_the_error_counts_for_pinning():
    text = ('  File "train.py", line 30, in main\n    staging = torch.empty(n, pin_memory=True)\n'
            '  File "train.py", line 31, in main\n    model = model.cuda()\n'
            "RuntimeError: CUDA error: invalid argument\n")
    assert not _runtime_only(text).facts.oom_events
