"""Host (CPU RAM) memory failures (log-formats.md §3).

A host OOM rarely prints "out of memory" in the dying process: the kernel or a cgroup
sends SIGKILL and the evidence is spread over the kernel log, the scheduler (Slurm,
Kubernetes, Ray) and the launcher (torchrun's exit code -9, DeepSpeed's "Killing
subprocess"). All lines that describe one kill are folded into one event. A bare SIGKILL
is weaker than a kernel/scheduler line, and launcher kills that follow a Python
exception are a cascade of that exception, not a host OOM.

Also here: PyTorch's CPU allocator, ``MemoryError``, numpy's ``_ArrayMemoryError``, and
DataLoader workers killed by signal. Shared-memory exhaustion (``Bus error``, SIGBUS,
``/dev/shm`` full) is *not* RAM and is recorded as a failure instead.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Optional

import regex as re

from ..facts.derived import HOST_KINDS
from ..facts.models import Failure, OomEvent
from ..facts.sizes import parse_size, to_bytes
from ..read.patterns import lazy
from ..read.prefilter import KILLED_LOCALISED, KILLED_ORDINARY
from . import memory_words
from .base import EXCEPTION_CLASS, ParseContext
from .runtime import nccl_shm_match, nccl_shm_strength, shm_reason_is_room

_STRENGTH_ORDER = {"certain": 0, "likely": 1, "weak": 2}
# A SIGKILL with nothing saying why (a scheduler's kill -9 looks the same) is only
# consistent with a host OOM; kernel, Slurm, Kubernetes or Ray lines make it certain.
_SIGKILL_ONLY = "weak"
_EPISODE_GAP = 1000   # lines: kill evidence further apart than this is another kill
_MAX_EVIDENCE = 20

# -- kernel oom-killer (§3.1) -------------------------------------------------------------
_K_TRIGGER = lazy(r"(?P<comm>\S{1,64}) invoked oom-killer:")
# the summary cut before its victim (",task=...,pid=..." lost to a paste's width): the kernel
# prints the line only when its OOM killer runs
_K_SUMMARY_CUT = lazy(r"oom-kill:constraint=(?P<constraint>CONSTRAINT_[A-Z_]{3,30})\b")
_K_SUMMARY = lazy(r"oom-kill:constraint=(?P<constraint>\w{1,40})[^\n]{0,600}?,task=(?P<comm>[^,]{1,64}),pid=(?P<pid>\d{1,9})")
_K_KILL = lazy(
    # (the spaces a paste through another input method or a retyping tool loses:
    # "Out of memory:Killed process 217423(python)total-vm:112518872kB,")
    r"(?:(?P<reason>Out of memory|Memory cgroup out of memory): ?)?Kill(?:ed)? process (?P<pid>\d{1,9}) ?\((?P<comm>[^)]{0,64})\)"
    r"(?P<rest>(?:,? score \d{1,9} or sacrifice child)|(?: ?total-vm:(?P<vm>[\d,]{1,24})kB, {0,3}anon-rss:(?P<rss>[\d,]{1,24})kB))?")
_K_REAPER = lazy(r"oom_reaper: reaped process (?P<pid>\d{1,9}) \((?P<comm>[^)]{0,64})\)")
# the header of the task table the OOM killer dumps before it picks its victim (mm/oom_kill.c's
# dump_tasks: "[  pid  ]   uid  tgid total_vm      rss pgtables_bytes swapents oom_score_adj name";
# older kernels "... rss nr_ptes nr_pmds swapents oom_score_adj name"): no other code prints it
_K_TASKS = lazy(r"\[\s{0,4}pid\s{0,4}\]\s{1,8}uid\s{1,8}tgid\s{1,8}total_vm\s{1,8}rss\b[^\n]{0,80}?\boom_score_adj name\b")
_SYSTEMD_OOMD = lazy(r"systemd-oomd(?:\[\d{1,9}\])?: Killed [^\n]{0,300}? due to memory")

# -- schedulers (§3.3, §3.4) and Ray ---------------------------------------------------------
_SLURM_EVENT = lazy(r"Detected (?P<n>\d{1,6}) oom[-_ ]kill events?(?:\(s\))? in (?P<step>StepId=[\w.+]{1,60}|step [\w.+]{1,60})", re.I)
_SLURM_SRUN = lazy(r"srun: error: (?P<node>[\w.-]{1,100}): tasks? (?P<task>[\d,-]{1,60}): Out Of Memory")
# srun's man page reserves exit code 253 for out-of-memory errors
_SLURM_253 = lazy(r"srun: error: (?P<node>[\w.-]{1,100}): tasks? (?P<task>[\d,-]{1,60}): Exited with exit code 253\b")
_SLURM_SCRIPT = lazy(r"slurm_script: line \d{1,7}:\s*(?P<pid>\d{1,9}) Killed")
_SLURM_LIMIT = lazy(r"exceeded (?:job |step )?memory limit \(\d{1,20} > \d{1,20}\),? being killed"
                          r"|slurmstepd: error: Exceeded (?:job|step) memory limit", re.I)
# srun's report of a task the step's memory limit ended ("srun: error: node1: task 0: Out Of
# Memory", pasted without its node and task: "srun: error: Out Of Memory")
_SRUN_OOM = lazy(r"^\s*srun: error: (?:\S{1,100}: tasks? [\d,\-\[\]]{1,40}: )?Out Of Memory\s*$")
# a training platform's status of a replica (Cloud ML Engine, Vertex AI: "The replica master 0
# ran out-of-memory and exited with a non-zero status of 247.")
_REPLICA_OOM = lazy(r"\breplica [\w-]{1,40} \d{1,6} ran out-of-memory\b")
_SLURM_STATE = lazy(r"(?<![\w])OUT_OF_MEMORY(?![\w])")
# other batch schedulers' reports of a job killed at its memory limit: Grid Engine's
# ("failed cgroups enforced memory limit because: ... cgroup/OOM: Killed because of memory
# limit"), LSF's TERM_MEMLIMIT, PBS's "job killed: mem N exceeded limit M"
_SCHEDULER_LIMIT = lazy(r"cgroup/OOM: Killed because of memory limit|^\s*failed cgroups enforced memory limit because:"
                        r"|TERM_MEMLIMIT: job killed after reaching LSF memory usage limit"
                        # Torque prints bytes, PBS Pro "mem job total N kb"
                        r"|PBS: job killed: p?v?mem (?:job total )?\d{1,20}\s?(?:[kmgt]?b)? exceeded limit \d{1,20}\s?(?:[kmgt]?b)?"
                        # Hadoop YARN (Spark on YARN, Databricks' predecessors): the node manager killing a container
                        r"|Container killed by YARN for exceeding (?:physical )?memory limits"
                        r"|is running beyond physical memory limits")
# Dask's nanny restarting a worker that passed its memory limit ("distributed.nanny - WARNING -
# Worker exceeded 95% memory budget. Restarting", later "Worker tcp://...:40101 (pid=4242)
# exceeded 95% memory budget. Restarting..."); its pause at a lower threshold is no kill
_DASK_NANNY = lazy(r"exceeded \d{1,3}% memory budget\.\s{1,4}Restarting")
# (and runc's own report of a container killed as it started, which the kubelet passes on:
# "runc create failed: unable to start container process: container init was OOM-killed
# (memory limit too low?)")
_K8S = lazy(r"\bOOMKilled\b|\"?reason\"?\s*[:=]\s*\"?OOM Killed|\bOOMKilling\b"
            r"|\b(?:runc create failed|unable to start container process)\b[^\n]{0,120}?\bcontainer init was OOM-killed\b")
_RAY = lazy(r"Task was killed due to the node running low on memory|Memory on the node \([^)\n]{0,300}\) where the"
                  r"|which exceeds the memory usage threshold of \d|Ray killed this worker \(ID:"
                  r"|ray\.exceptions\.OutOfMemoryError"
                  # Ray 2.0-2.1's raylet (node_manager.cc): "System memory low at node with IP
                  # 10.0.0.1. Used memory (6.13GB) / total capacity (6.78GB) (0.904609) exceeds
                  # threshold 0.9, killing latest task with name ..."
                  r"|System memory low at node with IP [^\n]{0,200}?exceeds threshold \d(?:\.\d{1,6})?, killing"
                  # Ray 0.x-1.x's memory monitor (ray/memory_monitor.py) raised on the driver instead
                  r"|^\s*(?:[\w.]+\.)?RayOutOfMemoryError: More than \d{1,3}% of the memory on node"
                  # ... or, its message cut, as the exception a task raised (the memory monitor is
                  # the only code that raises it): "ray.exceptions.RayTaskError(RayOutOfMemoryError):
                  # ray::IMPALA.train() (pid=19168, ip=10.0.0.1)"
                  r"|^\s*(?:[\w.]+\.)?RayTaskError\((?:[\w.]+\.)?RayOutOfMemoryError\):"
                  r"|[1-9]\d{0,6} Workers? \(tasks / actors\) killed due to memory pressure \(OOM\)"
                  # the tail of the memory monitor's kill message, when its head was cut off
                  r"|how to address the out of memory issue: https://docs\.ray\.io")
# Hosted notebooks and Kubernetes evictions say it in words.
_NOTEBOOK = lazy(r"Your session crashed after using all available RAM"
                       r"|Your notebook tried to allocate more memory than is available"
                       r"|The node was low on resource: memory")
# A notebook's kernel that died without an exception, in the server's or the editor's words
# (Jupyter's "KernelRestarter: restarting kernel (1/5)", the notebook page's "The kernel appears
# to have died. It will restart automatically.", VS Code's "The Kernel crashed while executing
# code in the current cell"): most often the OOM killer, but a crash in native code reads the same
# (JupyterLab names the notebook: "The kernel for Untitled.ipynb appears to have died. It will
# restart automatically.")
_KERNEL_DIED = lazy(r"KernelRestarter: restarting kernel \(\d{1,3}/\d{1,3}\)|The kernel appears to have died"
                    r"|The kernel for \S[^\n]{0,300}? appears to have died|The Kernel crashed while executing code")
# ... and the notebook server's log of its restarter bringing a dead kernel back (notebook's and
# jupyter_server's on_kernel_restarted: "kernel %s restarted", after the logger's fields, "[W
# 10:02:11.371 NotebookApp] " or "WARNING:root:"; a restart the user asked for is not logged so).
# Read on the line as printed: the normaliser takes "WARNING:root:" off
_KERNEL_RESTARTED = lazy(r"(?::|\] )kernel [0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12} restarted\s*$")
# the memory monitor's report of its top memory users ("PID\tMEM(GB)\tCOMMAND"), printed
# only with the kill it explains: pasted alone, it still says the node ran out
_RAY_TABLE = lazy(r"^\s*PID\s+MEM\(GB\)\s+COMMAND\s*$")
# a platform's own report that the OOM killer ended a job, task, container or pod ("The job has
# been killed by \"OOM Killer\", please check your job's memory usage.", Alibaba PAI): a
# statement about the unit the platform runs. Not a guess or an explanation ("may have been", "I
# think", "usually means"), nor Ray's list of a dead worker's "common causes include: (1) the
# process was killed by the OOM killer due to high memory usage, (2) ..."
_PLATFORM_OOM_KILLER = lazy(
    r"(?<!\b(?i:whether|if|may|might|could|possibly|perhaps|maybe|likely|probably|usually|often|means|when|unless"
    r"|think|thought|guess|suspect|assume|seems?|causes?|include|such as|e\.g\.|i\.e\.)[^\n]{0,60})"
    r"\b(?i:jobs?|tasks?|containers?|pods?|instances?|trials?)\b"
    r"(?:(?!\b(?i:may|might|could|would|possibly|probably|likely|perhaps)\b)[^.\n]){0,40}?"
    r"\b(?:has been|have been|was|were|got) "
    r"(?:killed|terminated) by (?:the |an )?[\"'“]?"
    r"(?:OOM[- ]killer|oom[- _]killer|(?:OOM|oom|Oom)[- _]?Killer)\b(?! due to high memory usage)")
# a traceback in Ray 0.x-1.x's memory monitor's check, which raises RayOutOfMemoryError and
# nothing else: a paste cut before the error's line
_RAY_MONITOR_FRAME = lazy(r"memory_monitor\.py\"?, line \d{1,6}, in raise_if_low_memory\b")
_RAY_MAYBE = lazy(r"killed by SIGKILL by OOM killer due to high memory usage"
                  # a worker that died with no exit code (a signal), on Kubernetes
                  r"|The worker may have exceeded K8s pod memory limits")

# -- launchers and shells (§3.2) -------------------------------------------------------------
# how far after a launcher's kills a child's error can still be the one they follow from
_FLUSHED_AFTER = 30
# the rank and pid are often cut off by a paste; the exit code alone says what happened
_TORCHRUN_FAILED = lazy(r"failed \(exitcode: (?P<code>-?\d{1,4})\)(?: local_rank: (?P<lr>\d{1,5}) \(pid: (?P<pid>\d{1,9})\))?")
_CFE_TITLE = lazy(r"^\s*\S[^\n]{0,300} FAILED\s*$")
_CFE_SECTION = lazy(r"^\s*(?P<sec>Root Cause|Failures:|Other Failures:)")
# (a paste that lost the table's columns glues its rows: "rank2 (local rank: 2)exitcode: -9 (pid:
# 36071)error file: <N/A>", "traceback : signal 9 (SIGKILL) received by PID 36071")
_CFE_RANK = lazy(r"^\s*rank\s*:?\s*(?P<rank>\d{1,6}) \(local[_ ]rank:\s*(?P<lr>\d{1,5})\)")
_CFE_EXIT = lazy(r"(?:^\s*|(?<=\)))exitcode\s*:\s*(?P<code>-?\d{1,4}) \(pid:\s*(?P<pid>\d{1,9})\)")
_SIGNAL_PID = lazy(r"[Ss]ignal (?P<sig>\d{1,2}) \((?P<name>SIG\w{1,8})\) received by PID (?P<pid>\d{1,9})")
# an entry's "time      : 2026-09-07_13:02:58", two or three lines above its exit code
_CFE_TIME = lazy(r"^\s*time\s*:\s*(?P<t>\d{4}-\d\d-\d\d_\d\d:\d\d:\d\d)\s*$")
_DS_KILLING = lazy(r"Killing subprocess (?P<pid>\d{1,9})")
_DS_RC = lazy(r"exits with return code = (?P<code>-?\d{1,4})")
_DS_SIGNALLED = lazy(r"Main process received (?P<sig>SIG\w{1,8}), exit")
_TORCHRUN_SIGTERM = lazy(r"Sending process \d{1,9} closing signal SIGTERM")
# OpenMPI's report of a rank ended by a signal ("mpirun noticed that process rank 0 with PID 0
# on node node1 exited on signal 9 (Killed).")
_MPI_SIGNAL = lazy(r"mpirun noticed that process rank \d{1,7} with PID (?:\d{1,9}|\w{1,20}) on node \S{1,200} exited on signal (?P<sig>\d{1,2})\b")
# ... and MPICH's (Hydra's) banner for a rank ended by a signal: "APPLICATION TERMINATED WITH THE
# EXIT STRING: Killed (signal 9)" (its "Bus error (signal 7)" is shared memory, as every signal 7)
_MPICH_SIGNAL = lazy(r"APPLICATION TERMINATED WITH THE EXIT STRING: [\w ]{1,40}\(signal (?P<sig>\d{1,2})\)")
# GNU time's report of the command it ran ("Command terminated by signal 9"; its -v report follows
# with the command's peak memory)
_TIME_SIGNAL = lazy(r"^\s*Command terminated by signal (?P<sig>\d{1,2})\s*$")
# a pool of worker processes losing one without an exception: datasets' map ("One of the
# subprocesses has abruptly died during map operation"), concurrent.futures' BrokenProcessPool
# ("A process in the process pool was terminated abruptly"): most often the kernel's OOM killer
# (read as raised: at the line's start or after its exception's name, not in printed source)
_POOL_DIED = lazy(r"(?:^|Error:\s{0,3}|BrokenProcessPool:\s{0,3})(?:One of the subprocesses has abruptly died during map "
                  r"operation|A process in the process pool was terminated abruptly)")
# joblib's process pool (loky) naming how its workers ended: "TerminatedWorkerError: A worker
# process managed by the executor was unexpectedly terminated. ... The exit codes of the workers
# are {SIGKILL(-9)}"
_LOKY_KILLED = lazy(r"exit codes of the workers are \{[^}\n]{0,200}?SIGKILL\(-9\)")
# gunicorn's master reaping a worker that something else killed with SIGKILL ("Worker (pid:8) was
# sent SIGKILL! Perhaps out of memory?"); it kills a worker itself only after its own "WORKER
# TIMEOUT (pid:N)", which is then no memory's kill
_GUNICORN_KILLED = lazy(r"Worker \(pid:(?P<pid>\d{1,9})\) was sent SIGKILL!")
# (newer torchrun prints the signal's number: "Received 15 death signal, shutting down workers")
_DEATH_SIGNAL = lazy(r"Received (?:Signals\.)?(?:SIG\w{1,8}|\d{1,2}) death signal")
# ... and older torchrun raises it from its own signal handler, after the SIGTERMs it sent:
# "torch.distributed.elastic.multiprocessing.api.SignalException: Process 602146 got signal: 1"
_AGENT_SIGNAL = lazy(r"SignalException: Process \d{1,9} got signal: ?\d{1,2}\b")
# (bash's "script.sh: line 155: 1126 Killed  python ..."; a paste may space the colon: "line 155 : 1126")
_SHELL_JOB = lazy(r"(?:^|:\s)line \d{1,7} ?:\s*(?P<pid>\d{1,9}) Killed\b|^\s*\[\d{1,4}\][+-]?\s+Killed\s"
                        # bash's report without its script's line ("71885 Killed     python -m x"): the
                        # pid, the status padded to a column, the command
                        r"|^\s*(?P<bpid>\d{1,9}) Killed {2,}\S"
                        r"|^zsh: killed\s"
                        # zsh's report of a background job ("[1]  + 26478 killed     python train.py"),
                        # its status padded to a column; on a line of its own or glued to the progress
                        # bar the job was drawing or to a status line it printed without its newline
                        # ("MVM coalescing... [1]    51630 killed     ./vgg16.test"); the command may be
                        # cut off where the line was pasted
                        r"|(?:^\s*|(?<=[\]|%])|(?<=\.\.\. ))\[\d{1,4}\]\s{0,6}[+-]?\s{1,6}(?P<zpid>\d{3,9}) killed"
                        r"(?: {2} *\S|\s*$)")
# The shell's "Killed" alone on a line, or after a progress bar; in the user's locale it is
# glibc's strsignal(SIGKILL) in that language (read/prefilter.py KILLED_LOCALISED).
_KILLED = "(?:Killed|" + "|".join(re.escape(w) for w in KILLED_LOCALISED if w not in KILLED_ORDINARY) + ")"
_ORDINARY = "|".join(re.escape(w) for w in KILLED_ORDINARY)
# (a full stop after it is the pasting user's: "...1.39s/it]Killed.")
_BARE_KILLED = lazy(rf"^\s*(?:Killed: 9|{_KILLED}\.?|{_ORDINARY})\s*$|(?<=[\]|%])\s*{_KILLED}\.?\s*$"
                    # ... or glued to the end of a status line the job printed without its newline
                    # (a spinner: "NerfAcc: Setting up CUDA (This may take a few minutes the first
                    # time)Killed"; "Loading data...Killed", "Loading data... Killed"): after the
                    # line's closing bracket or stop, where the cursor was (not an enum's repr:
                    # "TrialStatus.Killed")
                    rf"|(?:(?<=[)…!])|(?<=\.\.\.)|(?<=[^\w.]\.))\s?{_KILLED}\s*$"
                    # the shell's "Killed" written over a progress line the job kept redrawing with a
                    # carriage return: the rest of that line shows after it ("Killedg in train batch: 127687 / 263115")
                    r"|^Killed(?=[a-z])[^\n]{0,200}?(?:\d\s?/\s?\d|\d%)"
                    # ... or glued to the last figure of a progress line whose bar or rate shows it
                    # is one (Keras: "13117/51576 [======>....] - ETA: 10:02:38 - loss: 3.7015Killed";
                    # Keras 3: "52/625 ━━━━ 2:21 226ms/step - loss: 2.3026Killed")
                    rf"|^(?=[^\n]{{0,2000}}?(?:\[[=>.]{{3,}}\]|━{{3,}}|\bETA\b|\d\s?(?:it/s|s/it|m?s/step)\b))"
                    rf"[^\n]{{0,2000}}?(?<=\d){_KILLED}\s*$")
# A compiler's driver reporting its compiling process killed (SIGKILL) while an extension was
# built (a setup.py or JIT build running several jobs at once, each compiler taking GiBs):
# gcc's "c++: internal compiler error: Killed (program cc1plus)", "g++: fatal error: Killed
# signal terminated program cc1plus", the linker's "collect2: fatal error: ld terminated with
# signal 9 [Killed]", nvcc's "nvcc error   : 'cicc' died due to signal 9 (Kill signal)"
_COMPILER_KILLED = lazy(r"internal compiler error: Killed \(program (?P<p1>[\w+.-]{1,40})\)"
                        r"|fatal error: Killed signal terminated program (?P<p2>[\w+.-]{1,40})"
                        r"|fatal error: (?P<p3>[\w+.-]{1,40}) terminated with signal 9 \[Killed\]"
                        r"|'(?P<p4>[\w+.-]{1,40})' died due to signal 9 \(Kill signal\)")
# torch.multiprocessing.spawn: "ProcessExitedException: process 1 terminated with signal SIGKILL"
_SPAWN_SIGNAL = lazy(r"process (?P<rank>\d{1,6}) terminated with signal (?P<name>SIG\w{1,8})")
# a Go program's report of a child it ran (os/exec's ExitError): "llama-server process has
# terminated: signal: killed", "exit status: signal: killed"
_GO_SIGNAL = lazy(r"(?:^|[\s:])signal: killed\b")
_GO_TIMEOUT = lazy(r"timeout|timed out|deadline|context canceled", re.I)
_DIED_WITH = lazy(r"died with <Signals\.(?P<name>SIG\w{1,8}): (?P<sig>\d{1,2})>")
_EXIT_STATUS = lazy(r"(?:returned non-zero exit status|exit(?:ed)?(?: unexpectedly)? with (?:exit )?(?:code|status)|exit (?:code|status)|Exit Code"
                          # SageMaker's "ExecuteUserScriptError: ExitCode 137"
                          r"|ExitCode(?=\s+\d)"
                          # "ERROR: error code -9" (launchers that report the child's status as an error code):
                          # a negative one is the signal that ended it
                          r"|error code(?= -\d)"
                          # a tool reporting its child's status bare, at the end of its line ("neuronx-cc
                          # failed with -9"; not an errno or a count: "ioctl failed with -9 (EBADF)")
                          r"|failed with(?= -\d{1,3}\s*$)"
                          # torchrun's word for it, as a person quotes it ("exitcode -9") or a table row
                          # that lost its "(pid: N)"
                          r"|\bexitcode)"
                          r"\s*[:=]?\s*(?P<code>-?\d{1,4})\b", re.I)

# -- CPU allocator, Python, numpy (§3.5) -------------------------------------------------------
# (torch 1.0-1.1 on Windows printed its format string: "you tried to allocate %dGB. Buy new
# RAM!208096001", the figure glued after it in a unit the message does not say)
# (the space after "memory:" is missing in some pastes: "can't allocate memory:you tried")
# (a paste may start after the allocator's name: "not enough memory: you tried to allocate 20971520
# bytes", its words and a size in bytes are its alone)
_CPU_ALLOC = lazy(r"DefaultCPUAllocator: (?:can't allocate memory|not enough memory):\s?you tried to allocate "
                  r"(?:(?P<n>\d{1,20}) bytes|%dGB\. Buy new RAM!)"
                  r"|\b(?:can't allocate memory|not enough memory): ?you tried to allocate (?P<n2>\d{1,20}) bytes\b")
# ... cut where the line ends, before its size ("DefaultCPUAllocator: can't allocate memory")
_CPU_ALLOC_CUT = lazy(r"DefaultCPUAllocator: (?:can't allocate memory|not enough memory)\s*$")
# PaddlePaddle's CPU allocator (memory/detail/system_allocator.cc): "ResourceExhaustedError: Fail
# to alloc memory of 564023296 size, error code is 12." (posix_memalign's ENOMEM; on Windows, malloc
# and no code); Paddle 1.x's enforce of the same call: "Expected posix_memalign(&p, alignment,
# size) == 0, but received posix_memalign(&p, alignment, size):12 != 0:0." (its GPU's memory fails
# with other words: "Out of memory error on GPU")
_PADDLE_CPU = lazy(r"\bFail to alloc memory of (?P<n>\d{1,20}) size(?:, error code is 12)?\."
                   r"|\bposix_memalign\(&p, alignment, size\):12 != 0:0\b")
# ... whose next line says the size ("Alloc 524288000 error! at [.../system_allocator.cc:51]")
_PADDLE_CPU_SIZE = lazy(r"^\s*Alloc (?P<n>\d{1,20}) error!")
_CPU_LEGACY = lazy(r"\[enforce fail at CPUAllocator\.cpp:\d{1,5}\] posix_memalign\(&data, gAlignment, nbytes\) == 0\. 12 vs 0")
# (torch7's THRealloc says "reallocate")
_TH_RAM = lazy(r"Torch: not enough memory: you tried to (?:re)?allocate (?P<num>\d{1,12}(?:\.\d{1,6})?)GB\. Buy new RAM!")
# (Apache Arrow's is pyarrow.lib.ArrowMemoryError: "malloc of size 64 failed", a datasets map)
# (torch 1.x translated a C++ std::bad_alloc as "MemoryError -- std::bad_alloc")
_PY_MEMORY = lazy(r"^\s*(?P<exc>(?:[A-Za-z_]\w{0,40}\.){0,6}_?(?:Array|Arrow)?MemoryError)\b(?:(?::|\s+--)\s*(?P<msg>[^\n]{0,400}))?\s*$")
# IPython's traceback header names the exception before its frames ("MemoryError
# Traceback (most recent call last)"): the class, where the pasted log ends before its message
_IPY_MEMORY_HEADER = lazy(r"^\s*(?P<exc>(?:[A-Za-z_]\w{0,40}\.){0,6}_?(?:Array|Arrow)?MemoryError)\s{2,}"
                          r"Traceback \(most recent call last\)(?P<msg>)")
# ... and the CUDA error a device library's std::bad_alloc wraps, where it is not an allocation
# failure (a sticky fault of an earlier kernel)
_WRAPPED_CUDA_FAULT = lazy(r"CUDA error\b[^\n]{0,300}?(?:cudaErrorIllegalAddress|illegal memory access|cudaErrorLaunchFailure"
                           r"|unspecified launch failure|cudaErrorMisalignedAddress|misaligned address|device-side assert)")
_ARROW_SIZE = lazy(r"^(?:malloc|realloc) of size (?P<n>\d{1,20}) failed")
# Rust's allocation-failure hook, printed by any Rust extension (polars, tokenizers, a Rust
# data loader) before the process aborts: "memory allocation of 2097152 bytes failed"
_RUST_ALLOC = lazy(r"\bmemory allocation of (?P<n>\d{1,20}) bytes failed\b")
# how far below a bare "MemoryError" (no message) the error report it introduces may name the
# memory that ran out (PaddlePaddle raises MemoryError, then prints its C++ traceback and an
# error summary: "ResourceExhaustedError: Out of memory error on GPU 0 ...")
_REPORT_REACH = 30
# how far from IPython's header its exception's own line may be (the frames of a traceback)
_IPY_REACH = 400
# numpy prints three significant digits, so "512. MiB" (a trailing dot) is normal.
_NUMPY_REQUEST = r"Unable to allocate (?P<size>\d[\d,]{0,20}(?:\.\d{0,6})?\s*(?:[KMGTPE]i?B|bytes?|B))"
_NUMPY_SIZE = lazy(_NUMPY_REQUEST)
# ... its whole message, which no other library prints
_NUMPY_MESSAGE = lazy(_NUMPY_REQUEST + r" for an array with shape \(")
# ... and its refusal of an array whose bytes pass what the process can address (a 32-bit build,
# or a shape whose product overflows): "ValueError: array is too big.", from numpy 1.x "array is too
# big; `arr.size * arr.dtype.itemsize` is larger than the maximum possible size." - a request no host
# memory can serve, raised where the array is made
_NUMPY_TOO_BIG = lazy(r"Error:\s{0,3}array is too big(?:\.|;|$)")
# pybind11's own check when Python could not make an object it hands over (torch.save's zip writer
# turning a storage into bytes, an exporter handing a serialised model to Python), raised as the
# error's message: the host's memory, most often
_PYBIND11_ALLOC = lazy(r"\w+(?:Error|Exception):\s{0,3}Could not allocate (?P<what>bytes|string|bytearray|tuple|list|dict) object!?")
# Dask's scheduler refusing a task whose inputs exceed its worker's memory limit, which it
# raises to the client as MemoryError (distributed/scheduler.py: "Task 'x' has 30.61 GiB worth of
# input dependencies, but worker tcp://10.0.0.1:40101 has memory_limit set to 14.90 GiB.")
_DASK_REFUSED = lazy(r"worth of input dependencies, but worker \S{1,200} has memory_limit set to")
_DASK_SIZES = lazy(r"has (?P<need>\d[\d.]{0,12} [kKMGTPE]?i?B) worth of input[^\n]{0,260}? memory_limit set to "
                   r"(?P<limit>\d[\d.]{0,12} [kKMGTPE]?i?B)")
# ENOMEM, as Python prints it and as C++ code formats strerror: "[Errno 12] Cannot allocate
# memory", "unable to mmap 16060617592 bytes from file <x.pth>: Cannot allocate memory (12)"
_ERRNO12 = lazy(r"\[Errno 12\] Cannot allocate memory|Cannot allocate memory \(12\)")
_ENOMEM_SIZE = lazy(r"(?:mmap|allocate|alloc) (?P<n>\d{1,20}) bytes")
# the Java virtual machine (a Spark or JVM data pipeline, DL4J's JavaCPP buffers): "java.lang.OutOfMemoryError:
# Java heap space", "... GC overhead limit exceeded", "... Cannot allocate new DoublePointer(10000000)"
# (not its limits that are no shortage of memory: "unable to create new native thread", "Requested
# array size exceeds VM limit")
_JVM_OOM = lazy(r"\bjava\.lang\.OutOfMemoryError\b(?!:\s*(?:unable to create|Requested array size))(?::\s*(?P<msg>[^\n]{0,300}))?")
# Windows' commit limit; the code is the same in every language the message is printed in
# ("[WinError 1455] 页面文件太小，无法完成操作")
# (and in the user's language: German, Chinese)
_WIN_PAGING = lazy(r"The paging file is too small for this operation to complete|\[WinError 1455\]"
                   r"|Die Auslagerungsdatei ist zu klein|页面文件太小")
_PAGING_WORDS = ("paging file", "WinError 1455", "Auslagerungsdatei", "页面文件")   # (one is in each of its forms)

# -- DataLoader and shared memory (§3.6) --------------------------------------------------------
# (not a fallback that does without shared memory: "..., not using shared memory", "falls back to ...")
_NO_FALLBACK = r"(?![^\n]{0,80}?(?:not using|instead|fall(?:s|ing)? ?back))"
# (PaddlePaddle's: "DataLoader process (pid 1104) exited is killed by signal: Killed.")
# (and as users retype it: "RuntimeError:DataLoader worker(pid xxxxx) is killed by signal:killed.",
# "Dataloader worker (pid 6479) is killed by signal:killed", "... is killed by signaled: Killed",
# an issue title that lost a space: "DataLoader worker (pid 3377964)is killed by signal: Killed")
_DL_SIGNAL = lazy(r"(?i:dataloader) (?:worker|process) ?\(pid (?P<pid>\d{1,9}|[xX*#?]{1,12})\) ?(?:exited )?is killed by signal(?:ed)?: ?"
                  # (the message quoted in a sentence ends at its closing quote)
                  r"(?P<sig>[A-Za-z][A-Za-z ]{0,30}?)(?:\.|\s*$|[\"'`](?=[\s.,]|$))")
_DL_EXITED = lazy(r"(?i:dataloader) worker \(pid(?:\(s\))? (?P<pids>\d[\d, ]{0,200}?)\) exited unexpectedly(?: with exit code (?P<code>-?\d{1,4}))?")
# (the reason shm_open gives: "Call to shm_open failed : Permission denied")
_SHM_OPEN_REASON = lazy(r"shm_open\b[^\n]{0,80}?failed\s*:\s*(?P<why>[^\n]{1,80})")
_SHM = lazy(r"Unexpected bus error encountered in worker|insufficient shared memory \(shm\)|out of shared memory"
                  r"|killed by signal: Bus error|Error while creating shared memory segment|unable to allocate shared memory"
                  r"|shm_open\b[^\n]{0,80}(?:failed|No space)|Cannot allocate shared memory"
                  # mapping a segment another process wrote ("Memory map failed when rebuild shared memory",
                  # "Failed to map shared memory segment"), not a fallback that does without it ("mmap
                  # failed for /dev/shm, not using shared memory")
                  r"|(?:[Mm]emory map|mmap) failed\b" + _NO_FALLBACK + r"[^\n]{0,40}?shared memory"
                  r"|[Ff]ailed to (?:map|mmap|allocate) (?:the |a )?shared memory" + _NO_FALLBACK +
                  # PyTorch writing a tensor into its shared-memory segment for another process
                  # (a DataLoader worker's batch): "unable to write to file </torch_74396_2983595444>",
                  # later releases add a counter ("</torch_74396_2983595444_0>")
                  r"|unable to write to file </torch_\d{1,9}_\d{1,12}(?:_\d{1,12})?>")
# ... and PyTorch's hint in the DataLoader's bus-error message, for a wrap inside "workers are
# out of shared memory" (the earliest match in the joined lines is the hint's)
_SHM_OR_HINT = lazy(r"workers are out of shared memory|" + _SHM.pattern)
_SHM_DISK = lazy(r"No space left on device")
_SHM_PATH = lazy(r"/dev/shm|</?torch_\d|\bshm\b", re.I)
_SIGBUS = lazy(r"exitcode\s*:\s*-7\b|exitcode: -7\)|return code = -7\b|Signal 7 \(SIGBUS\)|<Signals\.SIGBUS: 7>"
               # a launcher's report of a child's status as Python gives it, minus the signal
               # (composer's "Rank 2 crashed with exit code -7.", "exited with exit code -7")
               r"|\bexit (?:code|status):? -7\b"
               # a debugger's report: gdb's "Thread 787 "name" received signal SIGBUS, Bus error."
               r"|received signal SIGBUS\b"
               # a native backtrace handler's report (UCX, NCCL's process): "Caught signal 7 (Bus error: ...)";
               # Abseil's failure-signal handler (Ray's raylet and workers, TensorFlow, JAX): "*** SIGBUS
               # received at time=1749878572 on cpu 166 ***"
               r"|[Cc]aught signal 7 \(Bus error|\*\*\* SIGBUS received at time="
               # the shell's report of its job ended by SIGBUS ("Bus error (core dumped)", "line 3:
               # 4411 Bus error  python train.py")
               r"|^\s*Bus error(?: \(core dumped\))?\s*$|:\s*line \d{1,7}:\s*\d{1,9} Bus error\b")

# exit codes of a process killed by SIGKILL or SIGBUS (negative from Python, 128 + N from a shell)
SIGKILL_EXIT_CODES = (-9, 137)
KILL_EXIT_CODES = SIGKILL_EXIT_CODES + (-7, 135)
_CAUGHT_SIGNAL = lazy(r"[Cc]aught signal (?:[1-8]|1[0-9]) \(")

# Lines that say a Python-level failure happened (a launcher kill after them is a cascade).
_TRACEBACK = lazy(r"Traceback \(most recent call last\)")
_EXC_LINE = lazy(r"^\s*(?P<exc>" + EXCEPTION_CLASS + r")(?::|\s*$)")
# ... and c10's report of a C++ exception, its native stack under it ("Exception raised from
# c10_cuda_check_implementation at ../c10/cuda/CUDAException.cpp:44 (most recent call first):"),
# which a rank prints as it dies of a CUDA error outside Python's reach (a watchdog's thread)
_C10_REPORT = lazy(r"^\s*Exception raised from \S[^\n]{0,300}\(most recent call first\):")
_WRAPPER_EXC = ("ChildFailedError", "CalledProcessError", "RayActorError", "ActorDiedError",
                "WorkerCrashedError", "RaySystemError")
_QUICK = ("oom", "OOM", "Kill", "kill", "exitcode", "return code", "Memory", "memory", "SIG", "Signal",
          "exit", "Exit", "Error", "Exception raised from", "DataLoader", "Root Cause", "Failures:", "FAILED", "Out Of Memory",
          "OUT_OF_MEMORY", "shm", "No space", "RAM", "rank", "Buy new", "posix_memalign",
          "rror code -", "failed with -", "Fail to alloc memory of", "MEM(GB)", "aught signal", "MEMLIMIT", "exceeded limit", "death signal",
          "unable to write to file </torch_", "mpirun noticed", "terminated by signal", "abruptly", "Bus error", "exit codes of the workers", "was sent SIGKILL",
          "KernelRestarter", "appears to have died", " restarted", "input dependencies", "memory budget", "Kernel crashed", "YARN", "physical memory limits",
          "for an array with shape") \
    + _PAGING_WORDS + KILLED_LOCALISED


@dataclass
class _Kill:
    """One line saying a process was killed (or why); the kills of one episode make one event."""
    idx: int
    strength: str
    source: str
    detail: str
    pid: Optional[int] = None
    rss: Optional[int] = None
    ranks: list[int] = field(default_factory=list)


@dataclass
class _Block:
    """One ChildFailedError summary: entries (section, code, pid, rank, line index)."""
    entries: list[tuple[str, int, int, Optional[int], int]] = field(default_factory=list)
    pending_rank: Optional[int] = None
    section: str = "root"


class _Scan:
    """What one pass over the lines collected; launcher lines are judged after the pass,
    once it is known whether a Python exception came before them."""

    def __init__(self, ctx: ParseContext):
        self.ctx = ctx
        self.kills: list[_Kill] = []
        self.blocks: list[_Block] = [_Block()]
        self.ds_kills: list[int] = []          # "Killing subprocess" lines
        self.ds_codes: list[tuple[int, int]] = []  # (idx, return code)
        self.ds_signalled: list[int] = []
        self.sigterms: list[int] = []             # torchrun stopping the surviving ranks
        self.launcher_codes: list[tuple[int, int]] = []  # (idx, code) of torchrun's first failure
        self.death_signals: list[int] = []
        self.agent_signals: list[int] = []   # torchrun's SignalException: it was signalled itself
        # (idx, strength, detail, exception, backend): "host" for RAM, "shm" for /dev/shm (SIGBUS)
        self.dl: list[tuple[int, str, str, Optional[str], str]] = []
        self.dl_crashed: set[str] = set()   # DataLoader worker pids that exited with their own code
        self.dl_pids: dict[int, set[str]] = {}   # line index of an "exited unexpectedly" -> its pids
        self.dl_killed: dict[int, int] = {}     # pid of a worker killed by SIGKILL -> its line index
        self.worker_kills: list[_Kill] = []     # the kernel's kills of those workers
        self.shm: list[int] = []
        self.sigbus: list[int] = []
        self.exit_sigkill: list[int] = []   # an exit code that means SIGKILL (137, -9)
        self.cpu: dict[tuple, OomEvent] = {}
        self.first_failure: Optional[int] = None  # index of the first Python-level failure
        self.earlier_ooms: list[int] = []   # indexes of the OOM events the families before this one read
        for ev in ctx.facts.oom_events:
            j = ctx.index_of(ev.line)
            if j is not None:
                self.failure_at(j)
                self.earlier_ooms.append(j)

    def oom_flushed_after(self, group: list[int]) -> bool:
        """An OOM printed just after a launcher's kills or stops: the children's stderr can
        reach the log after the launcher's own lines, and it is the death they follow from."""
        return any(group[0] <= j <= group[-1] + _FLUSHED_AFTER for j in self.earlier_ooms)

    def failure_at(self, idx: int) -> None:
        if self.first_failure is None or idx < self.first_failure:
            self.first_failure = idx

    def exit_code(self, code: int) -> None:
        codes = self.ctx.facts.ranks.exit_codes
        if code not in codes:
            codes.append(code)

    def kill(self, idx: int, strength: str, source: str, detail: str, **kw) -> None:
        self.kills.append(_Kill(idx=idx, strength=strength, source=source, detail=detail, **kw))

    def weak_kill(self, idx: int, source: str, detail: str) -> None:
        """A death that says nothing of memory: a weak kill, unless a Python-level failure
        came before it (then it is that failure's end, not the host's memory)."""
        if self.first_failure is None or self.first_failure >= idx:
            self.kill(idx, "weak", source, detail)


def _kb(text: Optional[str]) -> Optional[int]:
    if not text:
        return None
    digits = text.replace(",", "")
    return int(digits) * 1024 if digits.isdigit() else None


def _scan_line(s: _Scan, i: int) -> None:
    ctx = s.ctx
    text = ctx.lines[i].text
    if "Traceback" in text and ctx.search(_TRACEBACK, text):
        s.failure_at(i)
    exc = ctx.search(_EXC_LINE, text) if ("Error" in text or "Exception" in text) else None
    if exc and not exc.group("exc").endswith(_WRAPPER_EXC):
        s.failure_at(i)
    elif exc is None and "Exception raised from" in text and ctx.search(_C10_REPORT, text):
        s.failure_at(i)
    if _kernel(s, i, text) or _scheduler(s, i, text) or _memory_errors(s, i, text, exc):
        return
    _dataloader(s, i, text)
    _launcher(s, i, text)


def _kernel(s: _Scan, i: int, text: str) -> bool:
    ctx = s.ctx
    if "oom" not in text and "Kill" not in text and "systemd-oomd" not in text:
        return False
    m = ctx.search(_K_KILL, text) if "Kill" in text else None
    if m and m.group("reason") and not m.group("rest"):
        m = ctx.rejoined(i, _K_KILL) or m   # the figures wrapped onto the next line
    if m and (m.group("reason") or m.group("rest")):
        cgroup = (m.group("reason") or "").startswith("Memory cgroup")
        detail = f"kernel oom-killer killed {m.group('comm')} ({m.group('pid')})" + (" at the cgroup limit" if cgroup else "")
        s.kill(i, "certain", "kernel", detail, pid=int(m.group("pid")), rss=_kb(m.group("rss")))
        return True
    for pattern, what in ((_K_SUMMARY, "summary"), (_K_TRIGGER, "trigger"), (_K_REAPER, "reaper")):
        m = ctx.search(pattern, text)
        if m is None and what == "summary" and "oom-kill:constraint=" in text:
            m = ctx.rejoined(i, pattern, max_lines=2)   # a long line, often wrapped
        if m:
            pid = int(m.group("pid")) if "pid" in m.groupdict() and m.group("pid") else None
            if what == "trigger":
                detail = f"kernel oom-killer invoked by {m.group('comm')}"
            else:
                detail = f"kernel oom-killer killed {m.group('comm')} ({pid})"
            s.kill(i, "certain", "kernel", detail, pid=pid)
            return True
    if "total_vm" in text and ctx.search(_K_TASKS, text):
        # (the line naming the victim may be cut or out of the paste: the killer ran, whom it
        # chose is not said)
        s.kill(i, "certain", "kernel", "kernel oom-killer ran (its task table is in the log; the line naming "
               "the process it killed is not)")
        return True
    m = ctx.search(_K_SUMMARY_CUT, text) if "oom-kill:constraint=" in text else None
    if m:
        cgroup = m.group("constraint") == "CONSTRAINT_MEMCG"
        s.kill(i, "certain", "kernel", "kernel oom-killer killed a process (the line is cut before its name)"
               + (" at the cgroup limit" if cgroup else ""))
        return True
    if "systemd-oomd" in text and ctx.search(_SYSTEMD_OOMD, text):
        s.kill(i, "certain", "kernel", "systemd-oomd killed a unit under memory pressure")
        return True
    return False


def _scheduler(s: _Scan, i: int, text: str) -> bool:
    ctx = s.ctx
    m = ctx.search(_SLURM_EVENT, text) if ("oom" in text.lower()) else None
    if m:
        s.kill(i, "certain", "slurm", f"Slurm: {m.group('n')} oom-kill event(s) in {m.group('step').rstrip('.')}")
        return True
    if "Out Of Memory" in text:
        m = ctx.search(_SLURM_SRUN, text)
        if m:
            s.kill(i, "certain", "slurm", f"Slurm: task {m.group('task')} on {m.group('node')} ran out of memory")
            return True
    if "exit code 253" in text:
        m = ctx.search(_SLURM_253, text)
        if m:
            s.kill(i, "likely", "slurm", f"Slurm: task {m.group('task')} on {m.group('node')} exited with code 253, "
                   "which srun reserves for out-of-memory errors")
            return True
    if "slurm_script" in text:
        m = ctx.search(_SLURM_SCRIPT, text)
        if m:
            s.kill(i, "certain", "slurm", f"Slurm batch script: process {m.group('pid')} Killed", pid=int(m.group("pid")))
            return True
    if "memory limit" in text and ctx.search(_SLURM_LIMIT, text):
        s.kill(i, "certain", "slurm", "Slurm: job exceeded its memory limit and was killed")
        return True
    if ("memory limit" in text or "exceeded limit" in text or "MEMLIMIT" in text) and ctx.search(_SCHEDULER_LIMIT, text):
        s.kill(i, "certain", "scheduler", "the batch scheduler killed the job at its memory limit: " + text.strip()[:120])
        return True
    if "Out Of Memory" in text and ctx.search(_SRUN_OOM, text):
        s.kill(i, "certain", "slurm", "srun: a task ended at the step's memory limit (Out Of Memory)")
        return True
    if "out-of-memory" in text and ctx.search(_REPLICA_OOM, text):
        s.kill(i, "certain", "platform", "the training platform reports a replica ran out of memory: " + text.strip()[:120])
        return True
    if "OUT_OF_MEMORY" in text and ctx.search(_SLURM_STATE, text):
        s.kill(i, "certain", "slurm", "Slurm job state OUT_OF_MEMORY")
        return True
    if "memory budget" in text and ctx.search(_DASK_NANNY, text):
        s.kill(i, "certain", "dask", "Dask's nanny restarted a worker that exceeded its memory limit")
        return True
    if "OOM" in text and ctx.search(_K8S, text):
        s.kill(i, "certain", "kubernetes", "Kubernetes: container OOMKilled")
        return True
    if ("emory" in text or "OutOfMemoryError" in text) and ctx.search(_RAY, text):
        s.kill(i, "certain", "ray", "Ray's memory monitor raised RayOutOfMemoryError: the node ran low on memory"
               if "RayOutOfMemoryError" in text else "Ray memory monitor killed a worker: the node ran low on memory")
        return True
    if "killed due to memory pressure" in text and i and ctx.rejoined(i - 1, _RAY, max_lines=1):
        # the raylet's report hard-wrapped at a fixed width ("... 2 Workers (tasks /" then
        # " actors) killed due to memory pressure (OOM), ..."): read whole, on its first line
        s.kill(i - 1, "certain", "ray", "Ray memory monitor killed a worker: the node ran low on memory")
        return True
    if "MEM(GB)" in text and ctx.search(_RAY_TABLE, text):
        s.kill(i, "likely", "ray", "Ray's memory monitor listed its top memory users: the report it prints with a kill")
        return True
    if ("RAM" in text or "memory" in text) and ctx.search(_NOTEBOOK, text):
        s.kill(i, "certain", "kubernetes" if "node was low" in text else "notebook",
               "the host or container ran out of memory: " + text.strip()[:120])
        return True
    if "ernel" in text and (ctx.search(_KERNEL_DIED, text)
                            or ("restarted" in text and ctx.search(_KERNEL_RESTARTED, ctx.lines[i].raw or text))):
        s.weak_kill(i, "notebook-kernel", "the notebook's kernel died without an error and was restarted; the OOM "
                                          "killer is one possible cause")
        return True
    if "raise_if_low_memory" in text and ctx.search(_RAY_MONITOR_FRAME, text):
        s.kill(i, "likely", "ray", "the traceback is in Ray's memory monitor, which raises only when the node runs "
                                   "low on memory (the error's line was not pasted)")
        return True
    if "by " in text and "killer" in text.lower() and ctx.search(_PLATFORM_OOM_KILLER, text):
        s.kill(i, "certain", "scheduler", "the platform reports the job was killed by the OOM killer: " + text.strip()[:120])
        return True
    if ("OOM killer" in text or "pod memory" in text) and ctx.search(_RAY_MAYBE, text):
        s.weak_kill(i, "ray", "Ray reports a worker died without an error; the OOM killer is one possible cause")
        return True
    return False


def _numpy_bytes(m) -> Optional[int]:
    """The bytes of numpy's request (a match of _NUMPY_REQUEST's ``size``)."""
    return parse_size(m.group("size"))


def _python_memory_error(n: Optional[int], msg: str, fmt: str) -> tuple:
    """(fold key, size, format, detail) of Python's or numpy's MemoryError."""
    what = "numpy could not allocate an array" if fmt == "numpy" else "Python MemoryError"
    return (("py", n, re.sub(r"\d+", "N", msg)[:120]), n, fmt, what + (f": {msg[:160]}" if msg else ""))


def _memory_errors(s: _Scan, i: int, text: str, exc) -> bool:
    """CPU allocator / MemoryError / numpy: certain host-memory events with their size."""
    ctx = s.ctx
    found = None
    m = None
    if "DefaultCPUAllocator" in text:
        m = ctx.search(_CPU_ALLOC, text) or ctx.rejoined(i, _CPU_ALLOC) or ctx.search(_CPU_ALLOC_CUT, text)
    elif "you tried to allocate" in text and not (i and "DefaultCPUAllocator" in ctx.lines[i - 1].text):
        # (not the rest of the line above, hard-wrapped: that line's message holds it)
        m = ctx.search(_CPU_ALLOC, text)
    if m:
        num = m.groupdict().get("n") or m.groupdict().get("n2")
        n = int(num) if num else None
        found = (("alloc", n), n, "DefaultCPUAllocator", "PyTorch CPU allocator could not allocate host memory")
    elif "posix_memalign" in text and ctx.search(_CPU_LEGACY, text):
        found = (("legacy",), None, "CPUAllocator-legacy", "PyTorch CPU allocator (posix_memalign) failed")
    elif ("Fail to alloc memory of" in text or "posix_memalign" in text) and (m := ctx.search(_PADDLE_CPU, text)):
        size = m if m.group("n") else ctx.below(i, _PADDLE_CPU_SIZE, lines=1)
        n = int(size.group("n")) if size else None
        found = (("paddle-cpu", n), n, "paddle-cpu-allocator", "PaddlePaddle's CPU allocator could not allocate host memory"
                 + (f": {n} bytes" if n else ""))
    elif "Buy new RAM" in text:
        m = ctx.search(_TH_RAM, text)
        if m:
            n = to_bytes(m.group("num"), "GB")
            found = (("th", n), n, "TH-legacy", "legacy TH allocator: not enough host memory")
    elif "java.lang.OutOfMemoryError" in text and (m := ctx.search(_JVM_OOM, text)):
        msg = (m.group("msg") or "").strip()
        found = (("jvm", re.sub(r"\d+", "N", msg)[:80]), None, "jvm",
                 "the Java virtual machine ran out of memory" + (f": {msg[:160]}" if msg else ""))
    elif "input dependencies" in text and ctx.search(_DASK_REFUSED, text):
        # (one key for the scheduler's log line and the client's MemoryError that repeats it)
        m = ctx.search(_DASK_SIZES, text)
        n = parse_size(m.group("need")) if m else None
        found = (("dask-refused",), n, "dask-memory-limit",
                 "Dask refused a task whose inputs exceed its worker's memory limit"
                 + (f": {m.group('need')} of inputs, limit {m.group('limit')}" if m else ""))
    elif "MemoryError" in text:
        m = ctx.search(_PY_MEMORY, text)
        if m is None and (h := ctx.search(_IPY_MEMORY_HEADER, text)) is not None and not any(
                ctx.search(_PY_MEMORY, ctx.lines[j].text) for j in ctx.lines_with(("MemoryError",))
                if j != i and abs(j - i) < _IPY_REACH):
            # (its message line, where the paste has it, is the event instead: below its frames,
            # or above them where the poster put the error first and the traceback after it)
            m = h
        msg = (m.group("msg") or "").strip() if m else ""
        if m and _device_memory_error(s, i, msg):
            return False
        if m and "CUDA error" in msg and ctx.search(_WRAPPED_CUDA_FAULT, msg):
            # RMM and thrust throw std::bad_alloc for whatever CUDA error their allocation call
            # returned ("MemoryError: std::bad_alloc: CUDA error at: ...cuda_memory_resource.hpp:60:
            # cudaErrorIllegalAddress an illegal memory access was encountered"): a fault an earlier
            # kernel left, which the look-alikes name; no memory of either side ran out
            return False
        if m:
            size = ctx.search(_NUMPY_SIZE, msg) if msg else None
            n = None
            if size:
                n = _numpy_bytes(size)
            elif "Arrow" in m.group("exc") and (arrow := ctx.search(_ARROW_SIZE, msg)):
                n = int(arrow.group("n"))
            found = _python_memory_error(n, msg, "numpy" if ("Array" in m.group("exc") or size) else "python")
    elif "for an array with shape" in text and (m := ctx.search(_NUMPY_MESSAGE, text)):
        # numpy's message without its class (caught and printed with str(e), or pasted alone):
        # "Unable to allocate 52.4 GiB for an array with shape (2604215, 30, 180) and data type float32"
        found = _python_memory_error(_numpy_bytes(m), text[m.start():].strip(), "numpy")
    elif "array is too big" in text and (m := ctx.search(_NUMPY_TOO_BIG, text)):
        found = (("numpy-too-big",), None, "numpy-too-big",
                 "numpy refused an array larger than the process can address: " + text.strip()[:160])
    elif "memory allocation of" in text and (m := ctx.search(_RUST_ALLOC, text)):
        # (two threads' messages interleaved on one line garble the figure: no size then)
        n = int(m.group("n")) if text.count("memory allocation of") == 1 else None
        found = (("rust",), n, "rust-alloc-error", "a Rust library could not allocate host memory and aborted"
                 + (f": {n} bytes" if n else ""))
    elif "Cannot allocate memory" in text and ctx.search(_ERRNO12, text):
        m = ctx.search(_ENOMEM_SIZE, text)
        n = int(m.group("n")) if m else None
        found = (("errno12", n), n, "errno-12", "a system call could not allocate host memory (ENOMEM)"
                 + (f": {n} bytes" if n else ""))
    elif any(w in text for w in _PAGING_WORDS) and ctx.search(_WIN_PAGING, text):
        found = (("paging",), None, "windows-paging-file", "Windows paging file too small: the host commit limit was reached")
    elif "Could not allocate " in text and (m := ctx.search(_PYBIND11_ALLOC, text)):
        found = (("pybind11", m.group("what")), None, "pybind11-object",
                 f"a Python {m.group('what')} object could not be allocated (pybind11): host memory ran short")
    if found is None:
        return False
    key, n, fmt, detail = found
    ln = ctx.lines[i]
    ev = s.cpu.get(key)
    if ev is None:
        # every size these messages state is the request that failed ("you tried to
        # allocate N bytes", "Unable to allocate N GiB for an array")
        ev = OomEvent(kind="cpu_allocator", backend="host", line=ln.no, host_bytes=n, tried_to_allocate_bytes=n,
                      message_format=fmt, exception=exc.group("exc") if exc else None, detail=detail)
        s.cpu[key] = ev
        ctx.facts.oom_events.append(ev)
    else:
        ev.count += 1
    if ln.rank is not None and ln.rank not in ev.ranks:
        ev.ranks.append(ln.rank)
    if len(ev.evidence) < _MAX_EVIDENCE:
        ev.evidence.append(ctx.evidence(i))
    s.failure_at(i)
    return True


def _device_memory_error(s: _Scan, i: int, msg: str) -> bool:
    """A MemoryError that is the device's: a device family already read its line (Theano's
    "MemoryError: Error allocating N bytes of device memory", "MemoryError: std::bad_alloc:
    cudaErrorMemoryAllocation"), or it has no message and the error report right below it
    (no new traceback between) holds a device's out-of-memory message: then that event's."""
    ctx = s.ctx
    ln = ctx.lines[i]
    if ln.no in ctx.explained_lines(skip_kinds=HOST_KINDS):
        return True
    if msg:
        # words that say the device's memory failed: the family that reads such words
        # (memory_words, after this one) reads it as the device's
        found = memory_words.failed_side(ctx, msg)
        return found is not None and found[0] == "device"
    # the report's lines: up to a new traceback (another failure), at most _REPORT_REACH
    end = min(len(ctx.lines), i + 1 + _REPORT_REACH)
    end = next((j for j in range(i + 1, end)
                if ctx.lines[j].text.lstrip().startswith("Traceback (most recent call last)")), end)
    last = ctx.lines[end - 1].no if end > i + 1 else ln.no
    for ev in ctx.facts.oom_events:
        if ev.kind not in HOST_KINDS and ln.no < ev.line <= last:
            if len(ev.evidence) < _MAX_EVIDENCE and all(e.line != ln.no for e in ev.evidence):
                bisect.insort(ev.evidence, ctx.evidence(i), key=lambda e: e.line)   # (it is above the message)
            if ln.rank is not None and ln.rank not in ev.ranks:
                ev.ranks.append(ln.rank)
            return True
    return False


def _dataloader(s: _Scan, i: int, text: str) -> None:
    ctx = s.ctx
    if "oader worker" in text or "oader process" in text:   # (DataLoader, or retyped in any case)
        e = ctx.search(_EXC_LINE, text)
        exc = e.group("exc") if e else None
        m = ctx.search(_DL_SIGNAL, text)
        if m:
            sig = m.group("sig").strip().lower()
            pid = m.group("pid")
            if sig == "killed":
                if pid.isdigit():   # (a pid the user masked matches no kernel report)
                    s.dl_killed.setdefault(int(pid), i)
                s.dl.append((i, "certain", f"DataLoader worker (pid {pid}) killed by SIGKILL", exc, "host"))
            elif sig == "bus error":
                # SIGBUS on a page of /dev/shm that cannot be backed: shared memory, never RAM
                s.dl.append((i, "certain", f"DataLoader worker (pid {m.group('pid')}) killed by SIGBUS: shared memory "
                             "(/dev/shm) exhausted", exc, "shm"))
                s.shm.append(i)
            return
        m = ctx.search(_DL_EXITED, text)
        if m:
            pids = re.sub(r"\s+", "", m.group("pids"))
            code = m.group("code")
            if code is not None and int(code) not in KILL_EXIT_CODES:
                # a worker that exited with its own code (1: an exception in the worker) or
                # another signal was not killed for memory: lookalikes names the crash
                s.dl_crashed.update(pids.split(","))
                return
            s.dl_pids[i] = set(pids.split(","))
            s.dl.append((i, "likely", f"DataLoader worker(s) (pid {pids}) exited unexpectedly"
                         + (f" with exit code {code}" if code else ""), exc, "host"))
            return
    if i and "memory" in text and ("shared" in (prev := ctx.lines[i - 1].text) or "workers are" in prev) \
            and (wrapped := ctx.rejoined(i - 1, _SHM_OR_HINT, max_lines=1)) is not None:
        # the message hard-wrapped where a console or a quote broke it ("... are out of shared" /
        # "memory. Please try ...", "... workers are" / "out of shared memory. ..."): read it whole,
        # on its first line (rejoined finds only a match that starts there)
        i, text = i - 1, wrapped.string
    if ctx.search(_SHM, text) or ("No space left" in text and ctx.search(_SHM_DISK, text) and ctx.search(_SHM_PATH, text)):
        if ("shared memory segment" in text and nccl_shm_strength(ctx, i, nccl_shm_match(ctx, i, text)) is None) \
                or ("shm_open" in text and (r := ctx.search(_SHM_OPEN_REASON, text))
                    and not shm_reason_is_room(r.group("why"))):
            # the segment could not be had for a reason that is not room (NCCL's "Call to
            # shm_open failed : Permission denied", on the line or above its segment message;
            # another errno): not shared memory exhausted
            return
        s.shm.append(i)
        if "bus error" in text.lower() and "worker" in text:
            s.dl.append((i, "certain", "a DataLoader worker hit a bus error: shared memory (/dev/shm) exhausted", None, "shm"))
        elif "workers are out of shared memory" in text:
            # PyTorch's hint "It is possible that dataloader's workers are out of shared memory" is
            # printed only under a worker's "killed by signal: Bus error", which a paste cut away:
            # PyTorch's own words, so the worker's death is as certain as its line would make it
            s.dl.append((i, "certain", "a DataLoader worker died of a bus error (PyTorch's hint that its workers are "
                                       "out of shared memory; the worker's own line was not pasted)", None, "shm"))
        elif "unable to write to file </torch_" in text:
            # (a process handing a tensor to another: most often a data worker's batch)
            s.dl.append((i, "certain", "a process could not write a tensor into shared memory (/dev/shm) to hand "
                                       "it to another (a data worker's batch, most often)", None, "shm"))


def _launcher(s: _Scan, i: int, text: str) -> None:
    ctx = s.ctx
    if "-7" in text or "SIGBUS" in text or "signal 7" in text or "Bus error" in text:
        if ctx.search(_SIGBUS, text):
            s.sigbus.append(i)
    if "aught signal" in text and ctx.search(_CAUGHT_SIGNAL, text):
        # a native crash that a backtrace handler reported: a launcher's kills after it are
        # its cascade, not a silent death
        s.failure_at(i)
    m = ctx.search(_TORCHRUN_FAILED, text) if "exitcode" in text else None
    if m:
        code = int(m.group("code"))
        s.exit_code(code)
        s.launcher_codes.append((i, code))
        if code == -9:
            who = f"local_rank {m.group('lr')} (pid {m.group('pid')})" if m.group("lr") else "a worker"
            s.kill(i, _SIGKILL_ONLY, "torchrun", f"{who} received SIGKILL (exit -9)",
                   pid=int(m.group("pid")) if m.group("pid") else None,
                   ranks=[int(m.group("lr"))] if m.group("lr") else [])
        return
    block = s.blocks[-1]
    if "FAILED" in text and ctx.search(_CFE_TITLE, text):
        s.blocks.append(_Block())
        return
    sec = ctx.search(_CFE_SECTION, text) if ("Root Cause" in text or "Failures:" in text) else None
    if sec:
        block.section = "root" if sec.group("sec") == "Root Cause" else "other"
        return
    m = ctx.search(_CFE_RANK, text) if "local_rank" in text or "local rank" in text else None
    if m:
        block.pending_rank = int(m.group("rank"))
        if "exitcode" not in text[m.end():]:
            return
    m = ctx.search(_CFE_EXIT, text) if "exitcode" in text else None
    if m:
        code = int(m.group("code"))
        s.exit_code(code)
        s.launcher_codes.append((i, code))
        block.entries.append((block.section, code, int(m.group("pid")), block.pending_rank, i))
        block.pending_rank = None
        return
    m = ctx.search(_SIGNAL_PID, text) if "received by PID" in text else None
    if m:
        code = -int(m.group("sig"))
        s.exit_code(code)
        # the same entry's exitcode line came first (the 1.9 layout prints msg after it too)
        same = any(e[2] == int(m.group("pid")) for e in block.entries)
        block.entries.append((block.section, code, int(m.group("pid")), None if same else block.pending_rank, i))
        return
    if "closing signal SIGTERM" in text and ctx.search(_TORCHRUN_SIGTERM, text):
        s.sigterms.append(i)
        return
    m = ctx.search(_MPI_SIGNAL, text) if "mpirun noticed" in text else None
    if m:
        _ended_by_signal(s, i, int(m.group("sig")), "mpirun: a rank exited on signal 9 (SIGKILL)")
        return
    m = ctx.search(_MPICH_SIGNAL, text) if "EXIT STRING" in text else None
    if m:
        _ended_by_signal(s, i, int(m.group("sig")), "MPICH: a rank was ended by signal 9 (SIGKILL)")
        return
    m = ctx.search(_TIME_SIGNAL, text) if "terminated by signal" in text else None
    if m:
        _ended_by_signal(s, i, int(m.group("sig")), "GNU time: the command was terminated by signal 9 (SIGKILL)")
        return
    if "abruptly" in text and ctx.search(_POOL_DIED, text):
        s.kill(i, _SIGKILL_ONLY, "pool", "a worker process of a pool (a dataset's map, a process pool) died "
                                         "without an exception")
        return
    if "exit codes of the workers" in text and ctx.search(_LOKY_KILLED, text):
        s.kill(i, _SIGKILL_ONLY, "pool", "a worker process of joblib's pool was killed (SIGKILL)")
        return
    m = ctx.search(_GUNICORN_KILLED, text) if "was sent SIGKILL" in text else None
    if m:
        # (one literal set for every worker: a set per pid would be compiled into the native index)
        timed_out = f"WORKER TIMEOUT (pid:{m.group('pid')})"
        if not any(timed_out in ctx.lines[j].text for j in ctx.lines_with(("WORKER TIMEOUT (pid:",))):
            s.kill(i, _SIGKILL_ONLY, "pool", "gunicorn reports a worker was sent SIGKILL by something else",
                   pid=int(m.group("pid")))
        return
    if "death signal" in text and ctx.search(_DEATH_SIGNAL, text):
        s.death_signals.append(i)
        return
    if "got signal" in text and ctx.search(_AGENT_SIGNAL, text):
        s.agent_signals.append(i)
        return
    if "Killing subprocess" in text and ctx.search(_DS_KILLING, text):
        s.ds_kills.append(i)
        return
    m = ctx.search(_DS_RC, text) if "return code" in text else None
    if m:
        code = int(m.group("code"))
        s.exit_code(code)
        s.ds_codes.append((i, code))
        return
    if "Main process received" in text and ctx.search(_DS_SIGNALLED, text):
        s.ds_signalled.append(i)
        return
    m = ctx.search(_SPAWN_SIGNAL, text) if "terminated with signal" in text else None
    if m:
        sig = {"SIGKILL": 9, "SIGBUS": 7}.get(m.group("name"))
        if sig:
            _ended_by_signal(s, i, sig, f"process {m.group('rank')} terminated with SIGKILL", ranks=[int(m.group("rank"))])
        return
    m = ctx.search(_DIED_WITH, text) if "died with" in text else None
    if m:
        _ended_by_signal(s, i, int(m.group("sig")), "the launched process died with SIGKILL")
        return
    # (not a timeout's or a cancelled context's kill: exec.CommandContext sends SIGKILL too)
    if "signal: killed" in text and ctx.search(_GO_SIGNAL, text) and not ctx.search(_GO_TIMEOUT, text):
        _ended_by_signal(s, i, 9, "a supervising program reports its child ended by SIGKILL (signal: killed)")
        return
    m = ctx.search(_COMPILER_KILLED, text) if "Kill" in text and ("compiler" in text or "program" in text
                                                                   or "signal 9" in text) else None
    if m:
        program = next(g for g in m.groups() if g)
        s.kill(i, _SIGKILL_ONLY, "compiler", f"the compiler's {program} was killed (SIGKILL) while building")
        return
    if "Killed" in text or " killed" in text:
        m = ctx.search(_SHELL_JOB, text)
        if m:
            pid = m.group("pid") or m.group("zpid") or m.group("bpid")
            s.kill(i, _SIGKILL_ONLY, "shell", "the shell reports the job was Killed (SIGKILL)", pid=int(pid) if pid else None)
            return
    if ("Killed" in text or any(w in text for w in KILLED_LOCALISED)) and ctx.search(_BARE_KILLED, text):
        s.kill(i, _SIGKILL_ONLY, "shell", "the shell reports the job was Killed (SIGKILL)")
        return
    if "DataLoader" not in text and ("xit" in text or "status" in text or "rror code -" in text or "failed with -" in text):
        m = ctx.search(_EXIT_STATUS, text)
        if m:
            code = int(m.group("code"))
            s.exit_code(code)
            if code in SIGKILL_EXIT_CODES:   # 128 + SIGKILL as a shell reports it, -9 as Python's subprocess does
                s.exit_sigkill.append(i)


def _ended_by_signal(s: _Scan, i: int, sig: int, killed: str, **kw) -> None:
    """A launcher reporting a process ended by signal ``sig``: SIGKILL is a (weak) kill (``kw``
    for it), SIGBUS shared memory; any other signal is only its exit code."""
    s.exit_code(-sig)
    if sig == 9:
        s.kill(i, _SIGKILL_ONLY, "launcher", killed, **kw)
    elif sig == 7:
        s.sigbus.append(i)


def _groups(idxs: list[int], gap: int) -> list[list[int]]:
    out: list[list[int]] = []
    for idx in idxs:
        if out and idx - out[-1][-1] <= gap:
            out[-1].append(idx)
        else:
            out.append([idx])
    return out


def _entry_time(s: _Scan, idx: int) -> Optional[str]:
    """The time a ChildFailedError entry gives: its lines run ``[N]:``, time, host, rank,
    exitcode, error_file, traceback (``idx`` is its exitcode or its signal line)."""
    for j in range(idx - 1, max(-1, idx - 7), -1):
        text = s.ctx.lines[j].text
        if "time" in text:
            m = _CFE_TIME.match(text)
            return m.group("t") if m else None
        if text.lstrip().startswith("[") and text.rstrip().endswith("]:"):
            return None  # the entry's header: it gave no time
    return None


def _resolve_launchers(s: _Scan) -> None:
    """Turn launcher summaries into kills, leaving out the cascades of an exception."""
    for block in s.blocks:
        roots = [e for e in block.entries if e[0] == "root"]
        root_code = roots[0][1] if roots else None
        # ranks that raised (a positive exit code that is no signal's) and when: torchrun sends
        # the others SIGTERM and, 30 s later, SIGKILL, so a -9 timed after one is its stop
        # (the entries' times are read only where a -9 is listed)
        raised = [t for _sec, code, _pid, _rank, idx in block.entries
                  if code > 0 and code not in (128 + 9, 128 + 15, 128 + 7) and (t := _entry_time(s, idx))] \
            if any(e[1] == -9 for e in block.entries) else []
        for sec, code, pid, rank, idx in block.entries:
            if code != -9:
                continue
            if sec == "other" and root_code not in (None, -9):
                continue  # a survivor killed after the first failure
            if raised and (t := _entry_time(s, idx)) and min(raised) < t:
                continue  # stopped by torchrun after another rank's exception
            s.kill(idx, _SIGKILL_ONLY, "torchrun", f"rank {rank if rank is not None else '?'} (pid {pid}) received SIGKILL (exit -9)",
                   pid=pid, ranks=[rank] if rank is not None else [])
    # DeepSpeed launcher: "Killing subprocess N" (one per child) then, when a child failed,
    # "exits with return code = X" with the first failed child's code.
    for g in _groups(s.ds_kills, 50):
        codes = [(j, c) for j, c in s.ds_codes if g[0] - 5 <= j <= g[-1] + 50]
        signalled = [j for j in s.ds_signalled if g[0] - 5 <= j <= g[-1] + 50]
        if codes:
            j, code = codes[0]
            if code == -9:
                s.kill(j, _SIGKILL_ONLY, "deepspeed", "DeepSpeed launcher: a rank exited with return code -9 (SIGKILL)")
                for k in g:
                    s.kill(k, _SIGKILL_ONLY, "deepspeed", "DeepSpeed launcher killed its subprocesses")
            continue
        if signalled:
            continue  # the launcher itself was stopped (Ctrl-C, scancel)
        if s.oom_flushed_after(g):
            continue
        if s.first_failure is None or s.first_failure > g[0]:
            for k in g:
                s.kill(k, "weak", "deepspeed",
                       "DeepSpeed launcher killed its subprocesses after one died without a Python exception")
    # A -9 return code printed on its own (no "Killing subprocess" around it)
    for j, code in s.ds_codes:
        if code == -9 and not any(k.idx == j for k in s.kills):
            s.kill(j, _SIGKILL_ONLY, "deepspeed", "DeepSpeed launcher: a rank exited with return code -9 (SIGKILL)")
    # torchrun: survivors are sent SIGTERM *before* the "failed (exitcode: X)" line. With
    # no such line (a cut log) and no exception before, a rank died silently.
    tracebacks = s.ctx.lines_with(("Traceback (most recent",)) if s.agent_signals else []
    for g in _groups(s.sigterms, 50):
        # a worker's exit the launcher reports after them, or reported before them (another
        # node's "Root Cause ... exitcode: -6"): these survivors were stopped because of it
        reported = any(j <= g[-1] + 100 for j, _code in s.launcher_codes)
        # ... or torchrun was itself signalled (a hang-up, Ctrl-C, a scheduler's stop) and passed
        # it on: its SignalException ends the traceback that starts right after the SIGTERMs
        stopped = [j for j in s.death_signals if g[0] - 20 <= j <= g[-1]] + \
                  [j for j in s.agent_signals if g[0] - 20 <= j <= g[-1] + 60
                   and any(g[-1] < t <= g[-1] + 3 and t < j for t in tracebacks)]
        if reported or stopped or s.oom_flushed_after(g) or (s.first_failure is not None and s.first_failure < g[0]):
            continue
        s.kill(g[0], "weak", "torchrun-survivors",
               "torchrun stopped the surviving ranks after one died without a Python exception")
    for j in s.exit_sigkill:
        # (an exception on the exit line itself only reports that exit: SageMaker's
        # "ExecuteUserScriptError: ExitCode 137")
        s.weak_kill(j, "exit-137", "an exit code that means SIGKILL (137, or -9)")


_SOURCE_FORMAT = {"kernel": "kernel-oom-killer", "slurm": "slurm-oom", "scheduler": "scheduler-memory-limit",
                  "kubernetes": "kubernetes-oomkilled",
                  "ray": "ray-memory-monitor", "dask": "dask-nanny-memory", "torchrun": "torchrun-sigkill",
                  "torchrun-survivors": "torchrun-survivors-stopped", "deepspeed": "deepspeed-launcher",
                  "launcher": "launcher-sigkill", "shell": "shell-killed", "compiler": "compiler-killed", "exit-137": "exit-137",
                  "notebook": "notebook-out-of-ram", "notebook-kernel": "notebook-kernel-died", "pool": "worker-pool-died",
                  "interrupt": "interrupt-echo"}
# the formats of a launcher's kills that only say a rank died without a Python exception
SILENT_DEATH_FORMATS = (_SOURCE_FORMAT["torchrun-survivors"], _SOURCE_FORMAT["deepspeed"])
# a death whose report lists the OOM killer among its possible causes (Ray's worker that died
# "by an unexpected system error": "(1) ... OOM killer ... (3) ... crashed unexpectedly due to
# SIGSEGV"), weak: where the log shows another of them, that one is why
MAYBE_OOM_FORMATS = (_SOURCE_FORMAT["ray"],)
_SOURCE_RANK = {"kernel": 0, "slurm": 1, "scheduler": 1, "kubernetes": 2, "notebook": 2, "ray": 3, "dask": 3, "torchrun": 4, "deepspeed": 5,
                "launcher": 6, "shell": 7, "compiler": 7, "notebook-kernel": 7, "torchrun-survivors": 8, "exit-137": 9,
                "interrupt": 10}


def _episodes(kills: list[_Kill]) -> list[list[_Kill]]:
    out: list[list[_Kill]] = []
    for k in sorted(kills, key=lambda k: k.idx):
        if out and k.idx - out[-1][-1].idx <= _EPISODE_GAP:
            out[-1].append(k)
        else:
            out.append([k])
    return out


def _host_events(s: _Scan) -> None:
    ctx = s.ctx
    # the kernel killing a DataLoader worker that the main process reports killed (the same
    # pid, in the same episode): one event, the worker's (its kill line and the victim's RSS
    # join it in _dataloader_events)
    rest: list[_Kill] = []
    for k in s.kills:
        worker = k.source == "kernel" and k.pid in s.dl_killed and abs(k.idx - s.dl_killed[k.pid]) <= _EPISODE_GAP
        (s.worker_kills if worker else rest).append(k)
    for ep in _episodes(rest):
        best = min(ep, key=lambda k: (_STRENGTH_ORDER[k.strength], _SOURCE_RANK.get(k.source, 9)))
        # one phrase per source, the kernel's victim first: "kernel oom-killer killed python
        # (41235); local_rank 3 (pid 41235) received SIGKILL (exit -9)"
        victims = [k for k in ep if k.source == "kernel" and k.pid is not None and "killed" in k.detail]
        details: list[str] = []
        said: set[tuple] = set()  # (source, pid): the kernel's lines and a rank's lines say it once
        for k in ([victims[0]] if victims else []) + [best] + ep:
            key = ("kernel",) if k.source == "kernel" else (k.source, k.pid) if k.pid is not None else (k.detail,)
            if key not in said and k.detail not in details and len(details) < 4:
                said.add(key)
                details.append(k.detail)
        ranks: list[int] = []
        for k in ep:
            for r in k.ranks:
                if r not in ranks:
                    ranks.append(r)
        rss = next((k.rss for k in ep if k.rss is not None), None)
        ev = OomEvent(kind="host_oom_killer", strength=best.strength, backend="host",
                      message_format=_SOURCE_FORMAT.get(best.source), detail="; ".join(details),
                      host_bytes=rss, ranks=ranks, line=ctx.lines[ep[0].idx].no, count=1)
        seen: set[int] = set()
        for k in ep:
            no = ctx.lines[k.idx].no
            if no not in seen and len(ev.evidence) < _MAX_EVIDENCE:
                seen.add(no)
                ev.evidence.append(ctx.evidence(k.idx))
        ctx.facts.oom_events.append(ev)


def _dataloader_events(s: _Scan) -> None:
    ctx = s.ctx
    if s.dl_crashed:
        # "worker (pid(s) 7715) exited unexpectedly" without a code, and the same pid's
        # exit code elsewhere: one crash, not a kill
        s.dl = [x for x in s.dl if not (s.dl_pids.get(x[0], set()) & s.dl_crashed)]
    if not s.dl:
        return
    shm_seen = bool(s.shm)
    groups: list[list[tuple[int, str, str, Optional[str]]]] = []
    for item in s.dl:
        if groups and item[0] - groups[-1][-1][0] <= _EPISODE_GAP:
            groups[-1].append(item)
        else:
            groups.append([item])
    for g in groups:
        strong = [x for x in g if x[1] == "certain"]
        if not strong and shm_seen:
            continue  # "exited unexpectedly" after a bus error: shared memory, recorded as such
        first = strong[0] if strong else g[0]
        exc = first[3] or next((x[3] for x in g if x[3]), None)
        backend = "shm" if any(x[4] == "shm" for x in g) else "host"
        ev = OomEvent(kind="dataloader_killed", strength="certain" if strong else "likely", backend=backend,
                      exception=exc, detail=first[2], line=ctx.lines[g[0][0]].no, count=len(g))
        idxs = {x[0] for x in g}
        kernel = [k for k in s.worker_kills if s.dl_killed[k.pid] in idxs]
        for idx, _strength, _detail, _exc, _backend in g:
            ln = ctx.lines[idx]
            if ln.rank is not None and ln.rank not in ev.ranks:
                ev.ranks.append(ln.rank)
            if len(ev.evidence) < _MAX_EVIDENCE:
                ev.evidence.append(ctx.evidence(idx))
        for k in kernel[:_MAX_EVIDENCE - len(ev.evidence)]:
            ev.evidence.append(ctx.evidence(k.idx))
        ev.host_bytes = next((k.rss for k in kernel if k.rss is not None), None)
        if kernel:
            ev.detail += f"; {kernel[0].detail}"
        ctx.facts.oom_events.append(ev)


def _shm_failures(s: _Scan) -> None:
    ctx = s.ctx
    for kind, idxs, label in (("shm_exhausted", s.shm, "shared memory (/dev/shm) exhausted"),
                              ("sigbus_shm", s.sigbus, "SIGBUS (exit -7): usually /dev/shm exhausted")):
        if not idxs:
            continue
        first = ctx.lines[idxs[0]]
        f = Failure(kind=kind, message=f"{label}: {first.text.strip()[:300]}", line=first.no)
        for idx in idxs[:_MAX_EVIDENCE]:
            f.evidence.append(ctx.evidence(idx))
        ctx.facts.failures.append(f)


# An interrupt's echo alone on the log's last line ("^C", in the quotes or backticks of a
# paste), in a notebook runtime's output (Colab's /content/ paths, its tcmalloc reports): the
# runtime stops a command that exhausted the machine's RAM this way, and the output ends at
# the echo. Not where Python answered an interrupt (KeyboardInterrupt) or a launcher passed
# one on (SIGINT): a person stopped the job; nor in a terminal's log, where the same echo
# ends a hang that someone stopped.
_INTERRUPT_ECHO = lazy(r"^\s*[\"'`]{0,3}\^C[\"'`]{0,3}\s*$")
_NOTEBOOK_RUNTIME = ("/content/", "google.colab", "tcmalloc: large alloc")
# ... running a model (a command that downloads, unzips or serves, stopped by a person, is
# none), and not one that told the person how to stop it ("Press CTRL+C to quit")
_MODEL_WORK = ("model", "Model", "train", "Train", "epoch", "Epoch", "weights", "checkpoint", "torch", "tensorflow")
_STOP_HINT = ("CTRL+C", "Ctrl+C", "CTRL-C", "Ctrl-C", "ctrl+c", "ctrl-c")


def _stopped_at_interrupt(s: _Scan) -> None:
    ctx = s.ctx
    last = len(ctx.lines) - 1
    while last >= 0 and not ctx.lines[last].text.strip():
        last -= 1
    if (last >= 0 and "^C" in ctx.lines[last].text and ctx.search(_INTERRUPT_ECHO, ctx.lines[last].text)
            and ctx.lines_with(_NOTEBOOK_RUNTIME) and ctx.lines_with(_MODEL_WORK)
            and not ctx.lines_with(("KeyboardInterrupt", "SIGINT") + _STOP_HINT)):
        s.weak_kill(last, "interrupt", "a notebook's command stopped at an interrupt's echo (^C) with no "
                                       "KeyboardInterrupt: the runtime stopped it, as it does one that exhausts its RAM")


def parse(ctx: ParseContext) -> None:
    s = _Scan(ctx)
    for i in ctx.lines_with(_QUICK):
        _scan_line(s, i)
    _stopped_at_interrupt(s)
    _resolve_launchers(s)
    _host_events(s)
    _dataloader_events(s)
    _shm_failures(s)
