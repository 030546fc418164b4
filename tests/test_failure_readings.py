"""Failure messages read through the whole pipeline: libraries' own words for memory that ran
out (numpy's size refusal, NCCL's shared-memory segment, XLA's managed memory, dlib's CUDA
check), save announcements, and a native exception before a launcher's kills."""
from __future__ import annotations

import pytest

import oomdoctor


def report(text: str) -> dict:
    return oomdoctor.diagnose(text).model_dump(mode="json")


def top(r: dict) -> str | None:
    return r["diagnoses"][0]["incident"] if r["diagnoses"] else None


@pytest.mark.parametrize("line", [
    "ValueError: array is too big.",
    "ValueError: array is too big; `arr.size * arr.dtype.itemsize` is larger than the maximum possible size.",
])
def test_numpys_refusal_of_an_array_past_the_address_space_is_a_host_allocation(line):
    text = ('  File "replay_memory.py", line 12, in __init__\n'
            "    self.screens = np.empty((self.size, 84, 84), dtype=np.uint8)\n" + line + "\n")
    r = report(text)
    (ev,) = r["oom_events"]
    assert (ev["kind"], ev["message_format"]) == ("cpu_allocator", "numpy-too-big")
    assert top(r) == "host-oom"


@pytest.mark.parametrize("line", [
    "the array is too big to print, showing a summary",
    "print('array is too big')",
])
def test_the_words_outside_an_error_are_no_allocation(line):
    assert report(line + "\n")["oom_events"] == []


_SEGMENT = "Error while creating shared memory segment /dev/shm/nccl-Ewjreo (size 33030528)"


@pytest.mark.parametrize("text,strength", [
    # the reason on the line: no room in /dev/shm
    (f"node1:3663:4044 [0] misc/shmutils.cc:129 NCCL WARN {_SEGMENT}, error: No space left on device (28)\n",
     "certain"),
    # the echo under "Last error:" without a reason: likely
    ("ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.\n"
     f"Last error:\n{_SEGMENT}\n", "likely"),
    # the failed call's reason on the line above
    ("node1:1:2 [0] include/shm.h:27 NCCL WARN Call to posix_fallocate failed : No space left on device\n"
     f"node1:1:2 [0] include/shm.h:48 NCCL WARN {_SEGMENT}\n", "certain"),
])
def test_nccls_shared_memory_segment_that_did_not_fit_is_shared_memory(text, strength):
    r = report(text)
    (ev,) = r["oom_events"]
    assert (ev["kind"], ev["backend"], ev["strength"]) == ("nccl", "shm", strength)
    assert ev["tried_to_allocate_bytes"] == 33030528
    assert top(r) == "shm-exhausted"
    # NCCL's device buffers are not why: the segment is host memory
    assert "non-pytorch-memory" not in [d["incident"] for d in r["diagnoses"]]


@pytest.mark.parametrize("text", [
    # another reason: not memory
    "node1:27106:27302 [0] include/shm.h:27 NCCL WARN Call to shm_open failed : Permission denied\n"
    "node1:27106:27302 [0] NCCL INFO include/shm.h:41 -> 2\n"
    f"node1:27106:27302 [0] include/shm.h:48 NCCL WARN {_SEGMENT}\n",
    f"node1:1:2 [0] misc/shmutils.cc:129 NCCL WARN {_SEGMENT}, error: Permission denied (13)\n",
])
def test_a_segment_refused_for_another_reason_is_no_memory_event(text):
    r = report(text)
    assert r["oom_events"] == []
    # ... nor a shared-memory failure of the host's: no incident at all
    assert "shm_exhausted" not in [f["kind"] for f in r["failures"]]
    assert r["diagnoses"] == []


def test_shm_open_refused_for_want_of_room_is_still_shared_memory():
    r = report("node1:1:2 [0] include/shm.h:27 NCCL WARN Call to shm_open failed : No space left on device\n")
    assert "shm_exhausted" in [f["kind"] for f in r["failures"]]


def test_xlas_managed_memory_refusal_states_its_size_and_its_retry_is_the_same_attempt():
    text = ("2021-10-15 15:01:29.566577: E external/org_tensorflow/tensorflow/stream_executor/cuda/cuda_driver.cc:764] "
            "failed to alloc 34357903360 bytes unified memory; result: CUDA_ERROR_OUT_OF_MEMORY: out of memory\n"
            "2021-10-15 15:01:29.567270: E external/org_tensorflow/tensorflow/stream_executor/cuda/cuda_driver.cc:764] "
            "failed to alloc 30922113024 bytes unified memory; result: CUDA_ERROR_OUT_OF_MEMORY: out of memory\n")
    (ev,) = report(text)["oom_events"]
    assert (ev["tried_to_allocate_bytes"], ev["count"]) == (34357903360, 2)
    assert "unified" in ev["detail"]


def test_a_library_check_naming_the_cuda_call_far_before_its_reason():
    text = ("Error while calling cudaMalloc(&backward_data_workspace, backward_data_workspace_size_in_bytes) in file "
            "/home/user/Applications/dlib/dlib/dnn/cudnn_dlibapi.cpp:888. code: 2, reason: out of memory\n")
    (ev,) = report(text)["oom_events"]
    assert (ev["kind"], ev["message_format"]) == ("cuda_runtime_error", "cuda-call")
    # ... while another call's failure on such a line is not memory
    other = text.replace("code: 2, reason: out of memory", "code: 11, reason: invalid argument")
    assert report(other)["oom_events"] == []


@pytest.mark.parametrize("announce", [
    "Summoning checkpoint.",
    "Epoch 0: 0%| | 1/1010 [00:02<47:26, 2.82s/it, loss=0.0249, v_num=0, train/losHere comes the checkpoint...",
])
def test_latent_diffusions_save_announcement_before_a_kill_is_a_save(announce):
    r = report("Epoch 0: 100%|█| 209/209 [06:12<00:00,  1.78s/it, loss=0.0685]\n" + announce + "\nKilled\n")
    assert r["phase"] == "checkpoint_save"
    assert top(r) == "host-oom"


def test_a_native_exception_before_the_launchers_sigterms_is_not_a_silent_death():
    sigterms = "".join(
        f"[2025-02-24 20:48:57,82{k}] torch.distributed.elastic.multiprocessing.api: [WARNING] Sending process "
        f"826{k} closing signal SIGTERM\n" for k in range(4))
    native = ("Exception raised from c10_cuda_check_implementation at ../c10/cuda/CUDAException.cpp:44 "
              "(most recent call first):\n"
              "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x57 (0x7f430d478d87 in "
              "/usr/lib/python3.10/dist-packages/torch/lib/libc10.so)\n\n")
    assert report(native + sigterms)["oom_events"] == []
    # ... while the SIGTERMs alone still say a rank died without one (a weak lead)
    (ev,) = report(sigterms)["oom_events"]
    assert ev["strength"] == "weak"


def test_ggmls_buffer_report_and_its_backends_cut_line_are_one_failure():
    text = ("alloc_tensor_range: failed to allocate CUDA1 buffer of size 21335654400\n"
            "cudaMalloc failed: out of memory\n")
    (ev,) = report(text)["oom_events"]
    assert (ev["message_format"], ev["device_index"], ev["tried_to_allocate_bytes"]) == ("ggml-buffer", 1, 21335654400)
    assert [e["line"] for e in ev["evidence"]] == [1, 2]
    # ... while a call's failure further down is a failure of its own
    far = text.replace("\ncudaMalloc", "\nstep 1\nstep 2\nstep 3\ncudaMalloc")
    assert len(report(far)["oom_events"]) == 2


def test_the_name_scope_of_an_eager_op_names_the_phase():
    line = ("OOM when allocating tensor with shape[25088,4096] and type float on "
            "/job:localhost/replica:0/task:0/device:CPU:0 by allocator cpu [Op:Add] name: {}\n")
    assert report(line.format("fc1_233/random_uniform/"))["phase"] == "model_load"
    assert report(line.format("gradient_tape/model/dense/MatMul/"))["phase"] == "backward"
    # (a scope that names no phase says nothing: an op runs in either pass)
    assert report(line.format("model/dense/MatMul/"))["phase"] is None


def test_nccls_segment_message_hard_wrapped_in_a_quoted_paste():
    text = ("> E0605 09:26:44.248647    1054 pjrt_stream_executor_client.cc:2839] Execution of replica 0\n"
            "> failed: INTERNAL: NCCL operation ncclGroupEnd() failed: unhandled system error (run with \n"
            "> NCCL_DEBUG=INFO for details). Last NCCL warning(error) log entry (may be unrelated)  'Error \n"
            "> while creating shared memory segment /dev/shm/nccl-TfciGV (size 31850880), error: No space\n"
            "> left on device (28)'.\n")
    r = report(text)
    (ev,) = r["oom_events"]
    assert (ev["kind"], ev["backend"], ev["strength"], ev["tried_to_allocate_bytes"]) == ("nccl", "shm", "certain", 31850880)
    assert top(r) == "shm-exhausted"


@pytest.mark.parametrize("line,phase", [
    # a weight file in a folder named for checkpoints: the model's weights
    ("Loading model from checkpoints/instruct-pix2pix-00-22000.ckpt", "model_load"),
    # a training run's checkpoint folder: a resume
    ("Loading model from output/checkpoint-500.", "checkpoint_load"),
])
def test_a_weight_file_is_the_model_whatever_its_folder_is_called(line, phase):
    assert report(line + "\nDiffusionWrapper has 859.53 M params.\nKilled\n")["phase"] == phase


_RAY_DIED = ("(raylet) A worker died or was killed while executing a task by an unexpected system error. To troubleshoot "
             "the problem, check the logs for the dead worker. Worker exit type: SYSTEM_ERROR Worker exit detail: Worker "
             "unexpectedly exits with a connection error code 2. End of file. There are some potential root causes. (1) "
             "The process is killed by SIGKILL by OOM killer due to high memory usage. (2) ray stop --force is called. "
             "(3) The worker is crashed unexpectedly due to SIGSEGV or other unexpected errors.\n")


@pytest.mark.parametrize("crash", [
    # abseil's failure-signal handler, as Ray's and TensorFlow's workers print it (before the report)
    "(SPURuntime pid=1625248) *** SIGSEGV received at time=1695013707 on cpu 99 ***\n" + _RAY_DIED,
    # a worker's own CUDA fault, streamed to the driver after the report
    _RAY_DIED + "(WorkerDict pid=93663) WARNING 02-21 04:32:47 model_runner_base.py:143] Failed to pickle inputs of "
                "failed execution: CUDA error: an illegal memory access was encountered\n",
])
def test_a_death_whose_report_lists_the_oom_killer_among_causes_is_the_crash_the_log_shows(crash):
    r = report(crash)
    assert r["diagnoses"] == []
    assert r["failures"] and r["failures"][0]["kind"] in ("segfault", "illegal_memory_access")
    # ... while the report alone stays a weak lead of the host's memory
    (ev,) = report(_RAY_DIED)["oom_events"]
    assert (ev["kind"], ev["strength"], ev["symptom"]) == ("host_oom_killer", "weak", None)


def test_tensorrts_builder_out_of_memory_then_a_crash_ended_the_build():
    oom = "[07/25/2022-14:14:51] [TRT] [E] 2: [virtualMemoryBuffer.cpp::resizePhysical::161] Error Code 2: OutOfMemory (no further information)\n"
    (ev,) = report(oom * 3 + "Segmentation fault (core dumped)\n")["oom_events"]
    assert ev["message_format"] == "tensorrt"
    # ... while a tactic skipped for want of memory, the build going on, is no failure
    assert report(oom + "[07/25/2022-14:14:52] [TRT] [W] Skipping tactic 3 due to insufficient memory on requested "
                        "size of 4294967296 detected for tactic 0x0000000000000004.\n")["oom_events"] == []


def test_paddles_legacy_allocator_refusal_is_a_sized_device_event():
    text = ("W0429 20:27:11.855510 29126 legacy_allocator.cc:161] Cannot allocate 36.000000MB in GPU 0, available 342.625000MB\n"
            "W0429 20:27:11.855520 29126 legacy_allocator.cc:164] total 8502771712\n"
            "W0429 20:27:11.855527 29126 legacy_allocator.cc:165] GpuMinChunkSize 256.000000B\n")
    (ev,) = report(text)["oom_events"]
    assert (ev["kind"], ev["message_format"], ev["device_index"]) == ("cuda_runtime_error", "paddle-allocator", 0)
    assert (ev["tried_to_allocate_bytes"], ev["free_bytes"], ev["total_capacity_bytes"]) == (36 * 2**20, 359268352, 8502771712)
    # ... while its start-up warning that it could not reserve its share, then goes on, is none
    assert report("W0429 20:27:11.855363 29126 system_allocator.cc:122] Cannot malloc 7087.16 MB GPU memory. Please "
                  "shrink FLAGS_fraction_of_gpu_memory_to_use environment variable to a lower value.\n")["oom_events"] == []


_METAL_FAILED = "ggml_metal_graph_compute: command buffer 8 failed with status 5\nGGML_ASSERT: ggml-metal.m:1177: false\n"


def test_a_metal_command_buffer_failing_after_ggml_passed_the_working_set_is_memory():
    over = ("ggml_metal_add_buffer: allocated 'scr1            ' buffer, size =   256.00 MB, (23984.91 / 21845.34), "
            "warning: current allocated size is greater than the recommended max working set size\n")
    (ev,) = report(over + _METAL_FAILED)["oom_events"]
    assert (ev["kind"], ev["backend"], ev["strength"]) == ("mps", "Metal", "likely")
    assert "23984.91" in ev["detail"]
    # ... while the same failure without the warning says nothing of memory (status 5 is any error)
    assert report(_METAL_FAILED)["oom_events"] == []


def test_a_request_a_hundred_times_the_device_is_no_activation():
    line = ("RuntimeError: CUDA out of memory. Tried to allocate {} GiB (GPU 0; 10.92 GiB total capacity; 154.77 MiB "
            "already allocated; 9.95 GiB free; 39.23 MiB cached)\n")
    assert top(report(line.format("1339.86"))) == "unknown-oom"
    # ... while one of about the device, with no phase, is most often one
    assert top(report(line.format("12.00"))) == "activation-memory"


def test_a_device_librarys_bad_alloc_that_wraps_a_cuda_fault_is_the_fault():
    fault = ("MemoryError: std::bad_alloc: CUDA error at: /opt/conda/include/rmm/mr/device/cuda_memory_resource.hpp:60: "
             "cudaErrorIllegalAddress an illegal memory access was encountered\n")
    r = report(fault)
    assert r["oom_events"] == [] and r["diagnoses"] == []
    assert r["failures"][0]["kind"] == "illegal_memory_access"
    # ... while the same wrapper around the allocation's own failure is memory
    oom = ("MemoryError: std::bad_alloc: out_of_memory: CUDA error at: /opt/conda/include/rmm/mr/device/"
           "cuda_memory_resource.hpp:70: cudaErrorMemoryAllocation out of memory\n")
    assert report(oom)["oom_events"]


@pytest.mark.parametrize("line,kind", [
    ("Caused by: com.nvidia.spark.rapids.jni.GpuSplitAndRetryOOM: GPU OutOfMemory: could not split inputs and retry",
     "cuda_runtime_error"),
    ("(TID 37289) (10.0.0.1 executor 2): com.nvidia.spark.rapids.jni.SplitAndRetryOOM: Attempted to handle a split, "
     "but was not initialized with a splitPolicy.", "cuda_runtime_error"),
    ("com.nvidia.spark.rapids.jni.CpuRetryOOM: CPU OutOfMemory", "cpu_allocator"),
])
def test_spark_rapids_retry_framework_giving_up_is_memory_of_its_side(line, kind):
    (ev,) = report(line + "\n")["oom_events"]
    assert (ev["kind"], ev["message_format"]) == (kind, "spark-rapids-retry-oom")
    # ... while its class named in a stack frame or a setting is not a failure
    assert report("at com.nvidia.spark.rapids.RmmRapidsRetryIterator$.withRetryNoSplit(RmmRapidsRetryIterator.scala:185)\n"
                  )["oom_events"] == []
