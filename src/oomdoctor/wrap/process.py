"""The job as a process: started in its own process group, signals forwarded, exit status.

SIGINT/SIGTERM (and SIGHUP, SIGUSR1/2) are forwarded to the job's whole process group and,
after GRACE seconds, the group is killed; the wrapper exits with the job's status (128+N for
signal N). The output is passed through by ``pump`` while the job runs. If the wrapper itself
dies (even by SIGKILL) a watchdog ends the job's group (``watchdog``): nothing is orphaned.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Optional

from .pump import SCAN_SHARE, Sink, pump, route_output
from .watchdog import start_watchdog

GRACE = 20.0                 # seconds from a forwarded SIGINT/SIGTERM to SIGKILL of the group
TERMINATING = ("SIGINT", "SIGTERM", "SIGHUP")
FORWARDED = TERMINATING + ("SIGUSR1", "SIGUSR2")


def exit_status(returncode: int) -> int:
    """What a shell reports: the exit code, or 128+N for a job ended by signal N."""
    return 128 - returncode if returncode < 0 else returncode


def signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


@dataclass
class RunResult:
    """What one run of the command left behind."""

    argv: list[str]
    returncode: int
    duration: float
    capture: object                          # capture.Capture
    env_changes: dict[str, str] = field(default_factory=dict)
    forwarded: list[str] = field(default_factory=list)
    killed_after_grace: bool = False
    output_closed: bool = False              # our stdout/stderr went away (e.g. piped into head)
    drained: bool = True                     # the pipes closed after the job ended
    pids: set[int] = field(default_factory=set)
    start_monotonic: float = 0.0
    cgroup_before: object = None
    cgroup_after: object = None
    kernel_lines: list[str] = field(default_factory=list)
    kernel_kills: list = field(default_factory=list)

    @property
    def exit_status(self) -> int:
        return exit_status(self.returncode)

    @property
    def signal(self) -> Optional[int]:
        return -self.returncode if self.returncode < 0 else None

    @property
    def failed(self) -> bool:
        return self.returncode != 0



def run_once(argv: list[str], *, env: Optional[dict[str, str]] = None, grace: float = GRACE,
             stdout=None, stderr=None) -> RunResult:
    """Run the command once: pass its output through, capture, forward signals, wait."""
    from . import cgroup
    from .capture import Capture

    out = Sink(stdout or sys.stdout)
    err = Sink(stderr or sys.stderr)
    cap = Capture(scan_share=SCAN_SHARE)
    before = cgroup.read_state()
    result = RunResult(argv=list(argv), returncode=0, duration=0.0, capture=cap, cgroup_before=before)
    deadline: list[Optional[float]] = [None]
    group: list[Optional[int]] = [None]           # the job's process group, once it exists
    early: list[int] = []                         # signals that came before the job started

    def forward(signum, _frame) -> None:
        name = signal_name(signum)
        result.forwarded.append(name)
        if group[0] is None:
            early.append(signum)
        else:
            try:
                os.killpg(group[0], signum)
            except (ProcessLookupError, PermissionError):
                pass
        if name in TERMINATING and grace > 0 and deadline[0] is None:
            deadline[0] = time.monotonic() + grace

    previous = {}
    for name in FORWARDED:
        num = getattr(signal, name, None)
        if num is None:
            continue
        try:
            previous[num] = signal.signal(num, forward)
        except (ValueError, OSError):            # not the main thread: no forwarding possible
            break
    start = time.monotonic()
    result.start_monotonic = start_kernel = cgroup.monotonic_now()
    tails: list = []
    dog = None
    try:        # from here on, whatever fails (EMFILE included) restores the handlers
        targets, tails = route_output(out, err)
        # ends the job's process group if this process dies before the job (SIGKILL included)
        dog = start_watchdog(grace if grace > 0 else GRACE)
        proc = subprocess.Popen(argv, stdout=targets[0], stderr=targets[1], env=env,
                                start_new_session=True, bufsize=0)
    except BaseException:
        if dog is not None:
            dog.release()
        _restore(previous)
        for tail in tails:
            tail.close()
        raise
    group[0] = proc.pid
    if dog is not None:
        dog.arm(proc.pid)
    result.pids.add(proc.pid)
    for signum in early:
        try:
            os.killpg(proc.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        pump(proc, cap, out, err, result, deadline, tails)
    except BaseException:
        if dog is not None:
            dog.close()          # the wrapper fails while the job may run on: its group is ended
        raise
    finally:
        _restore(previous)
        for tail in tails:
            tail.close()
    result.returncode = proc.returncode if proc.returncode is not None else proc.wait()
    if dog is not None:
        dog.release()
    result.duration = time.monotonic() - start
    result.output_closed = out.closed or err.closed
    cap.finish()
    if result.failed:
        result.cgroup_after = cgroup.read_state()
        log = cgroup.read_kernel_log()
        if log:
            path = getattr(before, "path", None)
            result.kernel_lines, result.kernel_kills = cgroup.kernel_oom_lines(
                log, since=start_kernel, pids=result.pids, cgroup_path=path)
    return result


def _restore(handlers: dict) -> None:
    for num, handler in handlers.items():
        try:
            signal.signal(num, handler)
        except (ValueError, OSError):
            pass
