"""Host-memory failures: kernel oom-killer, Slurm, Kubernetes, Ray, launcher SIGKILLs,
the CPU allocator, MemoryError, DataLoader workers, shared memory (parsers/host.py).

Each ``host-*.log`` fixture has a sibling ``.yaml`` with the expected facts, checked
through ``extract(normalise(text))`` and through the whole pipeline.
"""
from __future__ import annotations


import pytest

from oomdoctor.facts import Evidence, OomEvent
from oomdoctor.read.normalise import normalise
from oomdoctor.parsers import host
from oomdoctor.parsers.base import ParseContext


def _host_only(text: str, existing: list[OomEvent] = ()) -> ParseContext:
    ctx = ParseContext(normalise(text))
    ctx.facts.oom_events.extend(existing)
    host.parse(ctx)
    return ctx


def _host_events(ctx: ParseContext) -> list[OomEvent]:
    return [e for e in ctx.facts.oom_events if e.kind == "host_oom_killer"]


@pytest.mark.parametrize("line", [
    "[ 518.050606] Out of memory: Killed process 15784 (python3) total-vm:11964kB, anon-rss:4288kB, file-rss:3028kB, shmem-rss:0kB",
    "[ 518.050606] Out of memory: Killed process 15784 (python3) total-vm:11964kB, anon-rss:4288kB, file-rss:3028kB, shmem-rss:0kB oom_score_adj:0",
    "Memory cgroup out of memory: Kill process 15784 (python3) score 998 or sacrifice child",
    "[ 1.1] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/kubepods/pod1,task_memcg=/kubepods/pod1/c1,task=python3,pid=15784,uid=0",
    "[ 1.1] oom_reaper: reaped process 15784 (python3), now anon-rss:0kB, file-rss:0kB, shmem-rss:0kB",
    "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=191.batch cgroup. Some of your processes may have been killed by the cgroup out-of-memory handler.",
    "slurmstepd: error: Detected 3 OOM-KILL EVENT(S) in StepId=7.0+0. Some of your processes may have been killed.",
    "slurmstepd: error: Job 4411 exceeded memory limit (33554432 > 32768000), being killed",
    "JobID=4411 State=OUT_OF_MEMORY Reason=None",
    "slurmstepd: error: Exceeded step memory limit at some point.",
    "Your session crashed after using all available RAM. If you are interested in access to high-RAM runtimes, you may want to check out Colab Pro.",
    "Message: The node was low on resource: memory. Threshold quantity: 100Mi, available: 91Mi. Container trainer was using 61Gi, which exceeds its request of 32Gi.",
    "  Warning  OOMKilling  2m  kernel-monitor  Memory cgroup out of memory: Killed process 1 (python)",
    '{"state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}',
    'docker inspect: "reason": "OOM Killed"',
    "(raylet) [2024-02-01 10:00:00] 2 Workers (tasks / actors) killed due to memory pressure (OOM), 0 Workers crashed due to other reasons at node (ID: ab, IP: 10.0.0.2) over the last time period.",
])
def test_corroborated_kills_are_certain(line):
    (ev,) = _host_events(_host_only(line))
    assert (ev.strength, ev.line) == ("certain", 1)


def test_ray_zero_workers_killed_is_no_event():
    line = ("(raylet) 0 Workers (tasks / actors) killed due to memory pressure (OOM), 3 Workers crashed due to "
            "other reasons at node (ID: ab, IP: 10.0.0.2) over the last time period.")
    assert _host_events(_host_only(line)) == []


@pytest.mark.parametrize("line", [
    "failed (exitcode: -9) local_rank: 0 (pid: 12) of binary: /usr/bin/python",
    "subprocess.CalledProcessError: Command '['python', 'train.py']' died with <Signals.SIGKILL: 9>.",
    "./run.sh: line 12:  4411 Killed                  python train.py",
    "[1]+  Killed                  python train.py --bs 64",
    "zsh: killed     python3 finetune.py",
    "71885 Killed                  PYTHONPATH=$PYTHONPATH:. python -m kauldron.main --cfg=pod_config.py",
    "[1]  + 26478 killed     python train.py",
    "Loading checkpoint shards:   0%|          | 0/3 [00:00<?, ?it/s][1]    26478 killed     python test.py",
    "Killed: 9",
    "Map:  45%|████▌     | 45000/100000 [00:12<00:15, 3600.00 examples/s]Killed",
    "torch.multiprocessing.spawn.ProcessExitedException: process 1 terminated with signal SIGKILL",
    "Error: Process completed with exit code 137.",
    "mpirun noticed that process rank 0 with PID 0 on node node1 exited on signal 9 (Killed).",
    # MPICH's (Hydra's) banner; torchrun's word as a person quotes it, or a table row without its pid
    "APPLICATION TERMINATED WITH THE EXIT STRING: Killed (signal 9)",
    "exitcode -9",
    "  exitcode  : -9",
    "RuntimeError: One of the subprocesses has abruptly died during map operation.To debug the error, disable "
    "multiprocessing.",
    "concurrent.futures.process.BrokenProcessPool: A process in the process pool was terminated abruptly while the "
    "future was running or pending.",
    'ExecuteUserScriptError: ExitCode 137 ErrorMessage "" Command "/opt/conda/bin/python3.10 train.py"',
    "[2025-06-23 10:58:53 +0000] [1] [ERROR] Worker (pid:8) was sent SIGKILL! Perhaps out of memory?",
    # another worker's timeout says nothing of this one
    "[2025-06-23 10:58:20 +0000] [1] [CRITICAL] WORKER TIMEOUT (pid:9)\n"
    "[2025-06-23 10:58:53 +0000] [1] [ERROR] Worker (pid:8) was sent SIGKILL! Perhaps out of memory?",
])
def test_bare_sigkill_is_weak(line):
    (ev,) = _host_events(_host_only(line))
    assert ev.strength == "weak"


@pytest.mark.parametrize("header", [
    "[Fri Sep 16 10:37:38 2022] [  pid  ]   uid  tgid total_vm      rss pgtables_bytes swapents oom_score_adj name",
    "[ 1234.567890] [ pid ]   uid  tgid total_vm      rss nr_ptes nr_pmds swapents oom_score_adj name",   # older kernels
])
def test_the_oom_killers_task_table_says_it_ran_when_its_victims_line_is_missing(header):
    text = ("[Fri Sep 16 10:37:38 2022] Tasks state (memory values in pages):\n" + header + "\n"
            "[Fri Sep 16 10:37:38 2022] [  19712]     0 19712 21929189  4178964 42479616   524132             0 python\n")
    (ev,) = _host_events(_host_only(text))
    assert (ev.strength, ev.line) == ("certain", 2)


@pytest.mark.parametrize("text", [
    "  PID USER      PR  NI    VIRT    RES    SHR S  %CPU  %MEM     TIME+ COMMAND\n",   # top's table
    "echo -1000 > /proc/self/oom_score_adj\n",                                          # a setting
])
def test_other_process_tables_and_the_score_setting_are_no_kill(text):
    assert _host_events(_host_only(text)) == []


def test_kernel_line_makes_a_launcher_sigkill_certain():
    text = ("failed (exitcode: -9) local_rank: 0 (pid: 12) of binary: /usr/bin/python\n"
            "[99.1] Out of memory: Killed process 12 (python) total-vm:2048kB, anon-rss:1024kB, file-rss:0kB, shmem-rss:0kB\n")
    (ev,) = _host_events(_host_only(text))
    assert (ev.strength, ev.line, ev.host_bytes, ev.ranks) == ("certain", 1, 1024 * 1024, [0])


def test_kill_far_from_another_kill_is_a_second_event():
    filler = "\n".join(f"step {i} loss 1.0" for i in range(1200))
    text = f"Killed\n{filler}\nKilled\n"
    assert [e.line for e in _host_events(_host_only(text))] == [1, 1202]


def test_killing_subprocess_after_a_device_oom_is_a_cascade():
    text = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
            "[2024-01-01 00:00:00,000] [INFO] [launch.py:315:sigkill_handler] Killing subprocess 11\n")
    device_oom = OomEvent(kind="cuda_caching_allocator", line=1, evidence=[Evidence(line=1, text="...")])
    ctx = _host_only(text, [device_oom])
    assert _host_events(ctx) == []


def test_exit_codes_are_unique_and_in_order():
    text = ("failed (exitcode: 1) local_rank: 1 (pid: 2) of binary: x\n"
            "  exitcode  : -9 (pid: 3)\n"
            "  exitcode  : 1 (pid: 2)\n"
            "['python'] exits with return code = 1\n")
    assert _host_only(text).facts.ranks.exit_codes == [1, -9]


@pytest.mark.parametrize("line, kind", [
    ("RuntimeError: DataLoader worker (pid 1817) is killed by signal: Killed. ", "dataloader_killed"),
    ("RuntimeError: DataLoader worker (pid(s) 1817, 1818) exited unexpectedly", "dataloader_killed"),
    ("OSError: [Errno 12] Cannot allocate memory", "cpu_allocator"),
    ("OSError: [WinError 1455] The paging file is too small for this operation to complete", "cpu_allocator"),
    # Rust's allocation-failure hook (polars, tokenizers), printed before the process aborts
    ("memory allocation of 2097152 bytes failed", "cpu_allocator"),
    ("numpy._core._exceptions._ArrayMemoryError: Unable to allocate 1.49 TiB for an array with shape (400000, 512000) and data type float64",
     "cpu_allocator"),
    # ... its message without the class (caught and printed, or pasted alone)
    ("Unable to allocate 52.4 GiB for an array with shape (2604215, 30, 180) and data type float32", "cpu_allocator"),
])
def test_host_memory_messages(line, kind):
    (ev,) = _host_only(line).facts.oom_events
    assert ev.kind == kind


def test_rusts_allocation_failure_states_its_request():
    (ev,) = _host_only("memory allocation of 2097152 bytes failed\nAborted (core dumped)\n").facts.oom_events
    assert (ev.message_format, ev.tried_to_allocate_bytes) == ("rust-alloc-error", 2097152)
    # two threads' messages interleaved on one line: one event, no garbled size
    (ev,) = _host_only("memory allocation of memory allocation of 20971522097152 bytes failed\n bytes failed\n"
                       "memory allocation of 2097152 bytes failed\n").facts.oom_events
    assert ev.count == 2 and ev.tried_to_allocate_bytes is None


def test_a_numpy_message_without_its_class_is_sized_and_other_unable_to_allocate_lines_are_not_it():
    (ev,) = _host_only("Unable to allocate 52.4 GiB for an array with shape (2604215, 30, 180) and data type float32"
                       ).facts.oom_events
    assert abs(ev.host_bytes - 52.4 * 2**30) < 2 and ev.message_format == "numpy"
    assert not _host_only("Unable to allocate 52.4 GiB: no more swap\n").facts.oom_events


def test_numpy_size_is_binary():
    (ev,) = _host_only("numpy.core._exceptions._ArrayMemoryError: Unable to allocate 512. MiB for an array with "
                       "shape (67108864,) and data type float64").facts.oom_events
    assert ev.host_bytes == 512 * 2**20


@pytest.mark.parametrize("text,n", [("512. MiB", 512 * 2**20), ("1,024 bytes", 1024), ("20.00 MiB", 20 * 2**20),
                                    ("1.52GiB", round(1.52 * 2**30))])
def test_one_size_reader_reads_numpys_trailing_dot_and_the_usual_forms(text, n):
    from oomdoctor.facts.sizes import parse_size
    assert parse_size(text) == n


@pytest.mark.parametrize("text", [
    "RuntimeError: DataLoader worker (pid 77) is killed by signal: Bus error. It is possible that dataloader's workers "
    "are out of shared memory. Please try to raise your shared memory limit.",
    "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).\n"
    "RuntimeError: DataLoader worker (pid 77) exited unexpectedly with exit code 1. Details are lost due to multiprocessing.",
    "failed (exitcode: -7) local_rank: 0 (pid: 5) of binary: /usr/bin/python",
    "subprocess.CalledProcessError: Command '['python', 'train.py']' died with <Signals.SIGBUS: 7>.",
    "mpirun noticed that process rank 0 with PID 0 on node node1 exited on signal 7 (Bus error).",
    "Bus error (core dumped)",
    "APPLICATION TERMINATED WITH THE EXIT STRING: Bus error (signal 7)",
    "./run.sh: line 12:  4411 Bus error               (core dumped) python train.py",
    # PyTorch writing a worker's tensor into its shared-memory segment
    "    fd, size = storage._share_fd_()\nRuntimeError: unable to write to file </torch_74396_2983595444>",
    "RuntimeError: unable to write to file </torch_18692_1954506624>: No space left on device (28)",
    "RuntimeError: unable to write to file </torch_74396_2983595444_0>",
    # a launcher's report of a rank's status as Python gives it (composer)
    "ERROR:composer.cli.launcher:Rank 2 crashed with exit code -7.",
])
def test_shared_memory_is_not_a_host_oom(text):
    """A bus error is /dev/shm running out, never the host's RAM: a worker's death is an
    event of the shared-memory backend, and the failure line is kept as such."""
    ctx = _host_only(text)
    assert all(e.kind == "dataloader_killed" and e.backend == "shm" for e in ctx.facts.oom_events)
    assert {f.kind for f in ctx.facts.failures} <= {"shm_exhausted", "sigbus_shm"} and ctx.facts.failures


@pytest.mark.parametrize("text", [
    "Training finished. Killed 3 stale checkpoints.",
    "kill -9 is never used by this script",
    "Out of memory: nothing to see here",
    # a sentence about allocations, not Rust's hook
    "memory allocation of tensors failed to fit the plan, retrying with 2 bytes per weight",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB",
    "INFO: process exited with code 0",
    # zsh's report of another signal, and "killed" in prose after a job number
    "[1]    26478 segmentation fault  python train.py",
    "[2] 3 workers were killed by the scheduler",
    # a count of things killed, not a process's report
    "3 Killed processes were restarted",
    # a rank ended by another signal; "abruptly" in other words
    "mpirun noticed that process rank 1 with PID 0 on node node1 exited on signal 11 (Segmentation fault).",
    "APPLICATION TERMINATED WITH THE EXIT STRING: Segmentation fault (signal 11)",
    # a word that holds "exitcode", and an exit code of no signal
    "p.get_exitcode -9 returned",
    "exitcode: 1",
    "the loss dropped abruptly after the warm-up",
    # an exit that is not SIGKILL's
    'ExecuteUserScriptError: ExitCode 1 ErrorMessage "" Command "/opt/conda/bin/python3.10 train.py"',
    # the message in the source a rich traceback prints around a frame
    '    714                 "One of the subprocesses has abruptly died during map operation."',
    # a file of another name that could not be written is no shared memory
    "OSError: unable to write to file <checkpoint-500/model.safetensors>",
    "slurmstepd: StepId=4.0 hit memory limit at least once during execution. This may or may not result in some failure.",
    # gunicorn killing a worker it timed out itself
    "[2025-06-23 10:58:20 +0000] [1] [CRITICAL] WORKER TIMEOUT (pid:8)\n"
    "[2025-06-23 10:58:53 +0000] [1] [ERROR] Worker (pid:8) was sent SIGKILL! Perhaps out of memory?",
])
def test_things_that_are_not_host_kills(text):
    assert _host_events(_host_only(text)) == []


@pytest.mark.parametrize("text, bus", [
    ("Bus error (core dumped)", True),
    ("a Bus error (core dumped) here means the shared memory is too small", False),
])
def test_the_shells_bus_error_is_read_only_as_its_own_line(text, bus):
    assert ("sigbus_shm" in {f.kind for f in _host_only(text).facts.failures}) == bus


@pytest.mark.parametrize("text", ["", "Killed\n" * 5000, "Out of memory: Killed process " + "9" * 70000,
                                  "  exitcode  : -9 (pid: " * 3000, "DataLoader worker (pid(s) " + "1, " * 20000])
def test_hostile_input_never_raises(text):
    _host_only(text)


@pytest.mark.parametrize("line", [
    "srun: error: gpu-node-4: task 0: Exited with exit code 2",
    "srun: error: gpu-node-4: task 0: Exited with exit code 2530",
    "srun: error: gpu-node-4: task 0: Exited with exit code 1",
])
def test_srun_exit_codes_other_than_253_are_no_host_oom(line):
    assert _host_only(line + "\n").facts.oom_events == []


@pytest.mark.parametrize("text", [
    "Killed.",
    "Loading checkpoint shards:  97%|  | 29/30 [00:35<00:01,  1.39s/it]Killed.",
])
def test_the_shells_killed_with_the_users_full_stop(text):
    (ev,) = _host_events(_host_only(text))
    assert ev.kind == "host_oom_killer"


@pytest.mark.parametrize("line, program", [
    ("c++: internal compiler error: Killed (program cc1plus)", "cc1plus"),
    ("g++: fatal error: Killed signal terminated program cc1plus", "cc1plus"),
    ("collect2: fatal error: ld terminated with signal 9 [Killed]", "ld"),
    ("nvcc error   : 'cicc' died due to signal 9 (Kill signal)", "cicc"),
])
def test_a_compiler_killed_while_building_is_a_weak_host_kill(line, program):
    (ev,) = _host_events(_host_only(line + "\n"))
    assert (ev.kind, ev.strength, ev.message_format) == ("host_oom_killer", "weak", "compiler-killed")
    assert program in ev.detail


def test_a_compiler_that_fails_otherwise_is_no_kill():
    assert not _host_events(_host_only("c++: fatal error: no input files\ncompilation terminated.\n"))
    assert not _host_events(_host_only("nvcc error   : 'cicc' died due to signal 11 (Invalid memory reference)\n"))


def test_a_dataloader_kill_that_lost_its_space_is_read():
    ctx = _host_only("RuntimeError: DataLoader worker (pid 3377964)is killed by signal: Killed\n")
    assert [e.kind for e in ctx.facts.oom_events] == ["dataloader_killed"]


def test_killed_in_a_sentence_with_a_full_stop_is_not_the_shells():
    assert not _host_events(_host_only("Process was Killed.\n"))
    assert not _host_events(_host_only("ERROR:composer.cli.launcher:Rank 2 crashed with exit code -71.\n"))


@pytest.mark.parametrize("text, worker", [
    # PyTorch's hint hard-wrapped where a quote broke it: read whole, on its first line
    ("error. It is possible that dataloader's workers are out of shared\n"
     "memory. Please try to raise your shared memory limit.\n", True),
    # ... wrapped after "workers are"
    ("error. It is possible that dataloader's workers are\n"
     "out of shared memory. Please try to raise your shared memory limit.\n", True),
    # ... the hint on one line, its worker's bus error cut away
    ("It is possible that dataloader's workers are out of shared memory. Please try to raise your shared memory limit.\n", True),
    # two lines that only end and start with the words
    ("the tensors are shared\nmemory stays low\n", False),
])
def test_a_wrapped_shared_memory_hint_is_read_whole(text, worker):
    ctx = _host_only(text)
    events = [e for e in ctx.facts.oom_events if e.kind == "dataloader_killed"]
    assert bool(events) is worker
    if worker:
        assert events[0].line == 1


@pytest.mark.parametrize("text, killed", [
    # runc's report of a container killed as it started, passed on by the kubelet
    ('Warning  Failed  113s   kubelet  Error: container create failed: time="2022-09-14T11:35:13Z" level=error '
     'msg="runc create failed: unable to start container process: container init was OOM-killed (memory limit too low?)"',
     True),
    # prose about it is no report of it
    ("If the container was OOM-killed, raise the memory limit in values.yaml and redeploy.", False),
    ("Check whether the container init was OOM-killed: kubectl describe pod trainer-0", False),
])
def test_a_container_oom_killed_as_it_starts_is_a_kill(text, killed):
    ctx = _host_only(text + "\n")
    assert bool(_host_events(ctx)) is killed


def test_the_raylets_report_wrapped_at_a_fixed_width_is_a_kill():
    text = ("(raylet) [DATE] (raylet) node_manager.cc:3007: 2 Workers (tasks /\n"
            " actors) killed due to memory pressure (OOM), 0 Workers crashed due to other reasons at node (ID: ab\n")
    (ev,) = _host_events(_host_only(text))
    assert ev.line == 1


@pytest.mark.parametrize("text, killed", [
    ("The kernel for Untitled.ipynb appears to have died. It will restart automatically.", True),
    ("The kernel appears to have died. It will restart automatically.", True),
    ("if the kernel for a notebook appears to have died, restart it", False),
])
def test_jupyterlabs_kernel_death_names_the_notebook(text, killed):
    assert bool(_host_events(_host_only(text + "\n"))) is killed
