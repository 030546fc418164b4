"""``oomdoctor run`` killed with SIGKILL leaves no orphan: the job's whole process group goes.

The job here writes its pid and its worker's pid to files and then prints nothing (a job
that printed would die of SIGPIPE once the wrapper's end of its pipe closed, which is not
what is tested)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not hasattr(os, "killpg"), reason="process groups are POSIX")

RUN = [sys.executable, "-m", "oomdoctor", "run"]

# the job: starts a worker in its process group (as torchrun does), both sleep silently
JOB = r"""
import os, subprocess, sys, time
ignore = sys.argv[2] == "ignore"
if ignore:
    import signal
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
worker = subprocess.Popen([sys.executable, "-c",
    "import signal, sys, time\n"
    "if sys.argv[1] == 'ignore': signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "time.sleep(600)", sys.argv[2]])
with open(sys.argv[1] + ".tmp", "w") as fh:
    fh.write(f"{os.getpid()} {worker.pid}")
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for a parent to reap it is gone for this purpose)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _wait_for(predicate, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def _start(tmp_path: Path, mode: str, *options: str) -> tuple[subprocess.Popen, list[int]]:
    pids = tmp_path / "pids"
    wrapper = subprocess.Popen([*RUN, *options, "--", sys.executable, "-c", JOB, str(pids), mode],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert _wait_for(pids.exists, 60), "the job never started"
    return wrapper, [int(p) for p in pids.read_text().split()]


def _cleanup(pids: list[int]) -> None:
    for pid in pids:
        if _alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def test_sigkill_of_the_wrapper_ends_the_job_and_its_workers(tmp_path):
    wrapper, pids = _start(tmp_path, "default")
    try:
        assert all(_alive(p) for p in pids)
        wrapper.send_signal(signal.SIGKILL)
        wrapper.wait(timeout=30)
        assert _wait_for(lambda: not any(_alive(p) for p in pids), 30), \
            f"still running after the wrapper was killed: {[p for p in pids if _alive(p)]}"
    finally:
        _cleanup(pids)


def test_a_job_ignoring_sigterm_is_killed_after_the_grace_period(tmp_path):
    wrapper, pids = _start(tmp_path, "ignore", "--grace", "1")
    try:
        wrapper.send_signal(signal.SIGKILL)
        wrapper.wait(timeout=30)
        assert _wait_for(lambda: not any(_alive(p) for p in pids), 30)
    finally:
        _cleanup(pids)


def test_a_job_that_ends_leaves_its_group_alone(tmp_path):
    """The watchdog is told the job ended: what the job left behind is not its business."""
    script = ("import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], "
              "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); "
              f"open({str(tmp_path / 'left')!r}, 'w').write(str(p.pid))")
    res = subprocess.run([*RUN, "--", sys.executable, "-c", script], capture_output=True, timeout=60, check=False)
    left = int((tmp_path / "left").read_text())
    try:
        assert res.returncode == 0
        time.sleep(0.5)      # time for a watchdog that wrongly fired to act
        assert _alive(left)
    finally:
        _cleanup([left])


# -- no file descriptor left (EMFILE) before the job starts ----------------------------------------

def test_no_pipe_for_the_watchdog_is_no_watchdog(monkeypatch):
    from oomdoctor.wrap import watchdog

    def emfile():
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(watchdog.os, "pipe", emfile)
    assert watchdog.start_watchdog(1.0) is None


def test_a_failing_start_restores_signal_handlers_and_closes_tails(monkeypatch):
    """Whatever fails before the job starts (EMFILE starting the watchdog), the wrapper's signal
    handlers are put back and the output tails closed."""
    from oomdoctor.wrap import process

    class Tail:
        closed = False

        def close(self):
            self.closed = True

    tail = Tail()

    def emfile(_grace):
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(process, "route_output", lambda out, err: ([subprocess.PIPE, subprocess.PIPE], [tail]))
    monkeypatch.setattr(process, "start_watchdog", emfile)
    before = {n: signal.getsignal(getattr(signal, n)) for n in process.FORWARDED if hasattr(signal, n)}
    with pytest.raises(OSError):
        process.run_once([sys.executable, "-c", "pass"])
    assert {n: signal.getsignal(getattr(signal, n)) for n in before} == before
    assert tail.closed
