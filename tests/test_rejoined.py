"""Re-joining a hard-wrapped message must not borrow a neighbouring line's words."""
from __future__ import annotations

from oomdoctor.read.normalise import normalise
from oomdoctor.parsers import extract


def events(text: str):
    return extract(normalise(text)).oom_events


def test_a_real_bfc_failure_before_another_allocators_warning_is_kept():
    text = ("2024-04-03 10:11:40.412113: W external/xla/xla/tsl/framework/bfc_allocator.cc:291] Allocator (GPU_0_bfc) "
            "ran out of memory trying to allocate 4.00GiB (rounded to 4294967296)requested by op MatMul\n"
            "2024-04-03 10:11:40.412200: W external/xla/xla/tsl/framework/bfc_allocator.cc:291] Allocator (GPU_1_bfc) "
            "ran out of memory trying to allocate 2.12GiB with freed_by_count=0. The caller indicates that this is "
            "not a failure, but this may mean that there could be performance gains if more memory were available.\n")
    evs = events(text)
    assert [e.tried_to_allocate_bytes for e in evs] == [4 * 2**30]


def test_two_driver_failures_on_two_lines_are_two_events():
    text = ("2019-05-01 10:00:00.000000: E tensorflow/stream_executor/cuda/cuda_driver.cc:806] failed to allocate "
            "3.77G (4046333952 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY: out of memory\n"
            "2019-05-01 10:00:00.000000: E tensorflow/stream_executor/cuda/cuda_driver.cc:890] failed to alloc "
            "2304 bytes on host: CUDA_ERROR_OUT_OF_MEMORY: out of memory\n")
    evs = events(text)
    assert [(e.line, e.tried_to_allocate_bytes, e.count) for e in evs] == [(1, 4046333952, 1), (2, 2304, 1)]   # (the second: pinned host memory, its size read too)


def test_a_separator_line_after_a_complete_message_joins_nothing():
    text = ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 23.69 GiB total "
            "capacity; 21.14 GiB already allocated; 0 bytes free; 21.57 GiB reserved in total by PyTorch) If reserved "
            "memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.  See documentation "
            "for Memory Management and PYTORCH_CUDA_ALLOC_CONF\n"
            "==========================================\n"
            "GPU 0: Process 4242 has 9.00 GiB memory in use\n")
    (ev,) = events(text)
    assert ev.processes == [] and ev.message_format == "torch-1.10-2.0"
