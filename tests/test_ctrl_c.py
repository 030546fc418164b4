"""Ctrl-C at any moment of the program, from its first import to the end of a scan with a
process pool: one line (``oomdoctor: interrupted``), exit 130, no traceback, and no
process of its own left behind (a worker left waiting for tasks would hold a pipe that
the scan's output went into open for ever). A real terminal sends SIGINT to its whole
foreground process group: so does this test."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

LOGS = Path(__file__).parent / "fixtures" / "logs"

pytestmark = pytest.mark.skipif(not hasattr(os, "killpg"), reason="process groups are POSIX")


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:      # a zombie's group on some systems: still there
        return True
    return True


@pytest.fixture(scope="module")
def many_logs(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("ctrlc")
    data = next(p for p in sorted(LOGS.glob("*.log"))).read_bytes()
    for i in range(600):         # more than a scan gets through before the last Ctrl-C below
        (d / f"job{i:03d}.log").write_bytes(data)
    return d


# from the program's imports (about 0.05-0.2 s after the start here) to a running pool; not
# earlier, where the interpreter's own start-up (site) is what a Ctrl-C cuts
@pytest.mark.parametrize("delay", [0.08, 0.12, 0.16, 0.2, 0.25, 0.3, 0.5, 1.0])
def test_ctrl_c_at_any_moment_of_a_scan_ends_it_cleanly(tmp_path, many_logs, delay):
    err = tmp_path / "stderr"
    with open(err, "wb") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "oomdoctor", "scan", "-j", "2", str(many_logs)],
                                stdout=subprocess.DEVNULL, stderr=fh, start_new_session=True)
        time.sleep(delay)
        os.killpg(proc.pid, signal.SIGINT)
        code = proc.wait(timeout=120)
    text = err.read_text(errors="replace")
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text
    # 130, or the process's own SIGINT (what a shell reads as 130 too): CPython 3.11 ends
    # ``python -m`` so once a KeyboardInterrupt has left code that an import ran with exec
    # (a dataclass's methods), even when it was caught and the program exited with 130
    if code in (130, -signal.SIGINT):
        assert text.strip().splitlines()[-1] == "oomdoctor: interrupted", text
    else:
        assert code in (0, 1), (code, text)     # the scan was over before the signal came
    deadline = time.monotonic() + 10
    while _group_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = _group_alive(proc.pid)
    if left:
        os.killpg(proc.pid, signal.SIGKILL)
    assert not left, "a process of the scan outlived it"


@pytest.mark.skipif(not hasattr(signal, "pthread_sigmask"), reason="signal masks are POSIX")
def test_a_ctrl_c_right_after_the_first_worker_is_forked_leaves_no_worker(monkeypatch):
    # the moment a timed Ctrl-C rarely hits: between a worker's fork and the pool's record of
    # it (Pool() cleans up after an Exception, not after a KeyboardInterrupt)
    import multiprocessing as mp
    from multiprocessing.context import ForkProcess

    from oomdoctor.scan.engine import run_local
    from oomdoctor.scan.sources import enumerate_tasks

    started = []
    real_start = ForkProcess.start

    def start(self):
        real_start(self)
        started.append(self)
        if len(started) == 1:
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(ForkProcess, "start", start)
    tasks = list(enumerate_tasks([str(p) for p in sorted(LOGS.glob("seed-*.log"))[:4]]))
    import threading
    state = (threading.enumerate(), signal.getsignal(signal.SIGINT), signal.pthread_sigmask(signal.SIG_BLOCK, []))
    try:
        list(run_local(tasks, jobs=2))
    except KeyboardInterrupt:
        pass
    else:
        pytest.fail(f"no KeyboardInterrupt; threads, handler, mask at the start: {state}")
    assert started and all(not p.is_alive() for p in started)
    assert not mp.active_children()


def test_an_interrupt_an_import_wrapped_is_still_an_interrupt():
    # Python 3.11 wraps a KeyboardInterrupt that comes while a class is made (pydantic's
    # descriptors' __set_name__) in a RuntimeError, the interrupt its cause
    from oomdoctor.__main__ import _cut_by_interrupt
    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as ki:
            raise RuntimeError("Error calling __set_name__ on 'PydanticDescriptorProxy'") from ki
    except RuntimeError as wrapped:
        assert _cut_by_interrupt(wrapped)
    assert _cut_by_interrupt(KeyboardInterrupt())
    assert not _cut_by_interrupt(RuntimeError("a real error"))
    assert not _cut_by_interrupt(SystemExit(2))
    assert not _cut_by_interrupt(ValueError("x"))
