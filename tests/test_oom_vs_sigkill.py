"""A certain CUDA OOM outranks a later bare SIGKILL of another rank.

The logs are synthetic (written here from the shapes torchrun and the DeepSpeed launcher
print, not copied from a user's log): rank 0 raises the allocator's full message, then the
launcher reports a worker ended by signal 9. The kill is the launcher tearing the job down
(or something unknown); without a kernel or cgroup OOM-killer line it is no evidence that
the host ran out of memory, and it must not borrow the CUDA OOM's certainty.
"""
from __future__ import annotations

from oomdoctor import diagnose

RANK0_OOM = """\
[rank0]: Traceback (most recent call last):
[rank0]:   File "/workspace/train.py", line 118, in <module>
[rank0]:     loss.backward()
[rank0]:   File "/usr/local/lib/python3.11/site-packages/torch/_tensor.py", line 581, in backward
[rank0]:     torch.autograd.backward(
[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB \
of which 1.07 GiB is free. Including non-PyTorch memory, this process has 78.07 GiB memory in use. Of the allocated memory \
75.20 GiB is allocated by PyTorch, and 1.35 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory \
is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory \
Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)
"""

TORCHRUN_SIGKILL = """\
W1125 10:00:00.512000 1234 torch/distributed/elastic/multiprocessing/api.py:897] Sending process 5679 closing signal SIGTERM
E1125 10:00:01.020000 1234 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -9) local_rank: 1 \
(pid: 5679) of binary: /usr/bin/python3
Traceback (most recent call last):
  File "/usr/local/bin/torchrun", line 8, in <module>
    sys.exit(main())
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2025-11-25_10:00:01
  host      : node1
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 5679)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 5679
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2025-11-25_10:00:00
  host      : node1
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 5678)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================
"""

DEEPSPEED_SIGKILL = """\
[2025-11-25 10:00:01,234] [INFO] [launch.py:319:sigkill_handler] Killing subprocess 5678
[2025-11-25 10:00:01,234] [INFO] [launch.py:319:sigkill_handler] Killing subprocess 5679
[2025-11-25 10:00:01,235] [ERROR] [launch.py:325:sigkill_handler] ['/usr/bin/python3', '-u', 'train.py', \
'--local_rank=1'] exits with return code = -9
"""

KERNEL_KILL = ("[Tue Nov 25 10:00:01 2025] Out of memory: Killed process 5679 (python3) total-vm:412345678kB, "
               "anon-rss:398765432kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:800000kB oom_score_adj:0\n")


def _ranked(log: str) -> list[str]:
    return [d.incident for d in diagnose(log.encode()).diagnoses]


def _cuda_first(log: str) -> None:
    report = diagnose(log.encode())
    ranked = [d.incident for d in report.diagnoses]
    assert ranked, "nothing diagnosed"
    top = report.diagnoses[0]
    assert top.incident != "host-oom" and top.memory_failure and not top.warning, ranked
    assert report.oom_events[0].kind == "cuda_caching_allocator"
    if "host-oom" in ranked:
        assert ranked.index("host-oom") > 0
        host = report.diagnoses[ranked.index("host-oom")]
        assert host.confidence < top.confidence
        assert not any("corroborated" in b for b in host.because)


def test_cuda_oom_then_torchrun_sigkill_is_the_cuda_oom():
    _cuda_first(RANK0_OOM + TORCHRUN_SIGKILL)


def test_cuda_oom_then_deepspeed_return_code_minus_9_is_the_cuda_oom():
    _cuda_first(RANK0_OOM + DEEPSPEED_SIGKILL)


def test_a_kernel_oom_kill_keeps_host_memory_in_the_running():
    ranked = _ranked(RANK0_OOM + TORCHRUN_SIGKILL + KERNEL_KILL)
    assert "host-oom" in ranked[:3], ranked
    report = diagnose((RANK0_OOM + TORCHRUN_SIGKILL + KERNEL_KILL).encode())
    host = next(d for d in report.diagnoses if d.incident == "host-oom")
    assert any("corroborated" in b for b in host.because)
    assert any("(host_oom_killer)" in b for b in host.because)   # the host's own event, not the GPU's


def test_a_bare_sigkill_alone_is_still_a_possible_host_oom():
    ranked = _ranked(TORCHRUN_SIGKILL)
    assert "host-oom" in ranked, ranked
