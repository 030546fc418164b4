"""The job does not outlive the wrapper: a watchdog ends its process group if ``oomdoctor run`` dies.

The job runs in its own session (so that the wrapper can signal its whole process group),
which also means nothing ends it when the wrapper is killed with SIGKILL: it would run on,
orphaned, holding its GPUs. So, before the job starts, the wrapper starts a tiny watchdog
(``python -I -S -c``, in a session of its own) whose standard input is the read end of a
pipe only the wrapper can write to. The wrapper writes the job's process group id into it,
and ``done`` once the job has ended. When the pipe closes without ``done`` (the wrapper
died, however: SIGKILL, a crash, an uncaught exception) the watchdog sends SIGTERM to the
job's whole process group, the job and every process it started in its group (torchrun's
and DeepSpeed's workers), and SIGKILL once ``grace`` seconds have passed.

Why a pipe and not ``prctl(PR_SET_PDEATHSIG)``: the parent-death signal reaches only the
direct child (a launcher killed by it cannot pass anything on to its workers), is Linux
only, fires when the *thread* that started the child ends, and is set in a ``preexec_fn``,
which is not safe in a process with threads. The pipe needs none of that and works on any
POSIX system. The one gap: the wrapper killed in the instant between starting the job and
writing its group id (about a millisecond); the job then runs on as before.
"""
from __future__ import annotations

import os
import subprocess
import sys

# The watchdog's whole program: no imports of oomdoctor (``-I -S``: starts in ~15 ms, and
# the job's environment, PYTHONPATH included, cannot change what it runs).
_PROGRAM = r"""
import os, signal, sys, time
grace = float(sys.argv[1])
for name in ("SIGINT", "SIGHUP", "SIGTERM", "SIGPIPE"):
    signal.signal(getattr(signal, name), signal.SIG_IGN)
data = b""
while True:
    try:
        chunk = os.read(0, 256)
    except InterruptedError:
        continue
    except OSError:
        chunk = b""
    if not chunk:
        break
    data += chunk
    if b"done" in data:
        sys.exit(0)
head = data.split(b"\n", 1)[0].strip()
if not head.isdigit():
    sys.exit(0)
group = int(head)
try:
    os.killpg(group, signal.SIGTERM)
except OSError:
    sys.exit(0)
end = time.monotonic() + grace
while time.monotonic() < end:
    time.sleep(0.1)
    try:
        os.killpg(group, 0)
    except OSError:
        sys.exit(0)
try:
    os.killpg(group, signal.SIGKILL)
except OSError:
    pass
"""


class Watchdog:
    """Ends the job's process group if this process dies before the job does."""

    def __init__(self, proc: subprocess.Popen, fd: int) -> None:
        self.proc = proc
        self._fd: int | None = fd

    def _write(self, data: bytes) -> None:
        if self._fd is None:
            return
        try:
            os.write(self._fd, data)
        except OSError:
            pass

    def arm(self, group: int) -> None:
        """The job is running as process group ``group``."""
        self._write(f"{group}\n".encode())

    def release(self) -> None:
        """The job has ended: the watchdog exits without touching anything."""
        self._write(b"done\n")
        self.close()

    def close(self) -> None:
        """Stop watching. Without ``release`` first, the watchdog ends the job's group."""
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = None
        if self.proc.poll() is None:
            try:
                self.proc.wait(timeout=0.05)
            except subprocess.TimeoutExpired:
                pass


def start_watchdog(grace: float) -> Watchdog | None:
    """A watchdog for a job about to start, or None where there can be none (no process
    groups, no Python executable to run it with, no process left to start)."""
    if not hasattr(os, "killpg") or not sys.executable:
        return None
    try:
        read_end, write_end = os.pipe()  # not inherited by the job: Python's pipes are non-inheritable
    except OSError:                      # EMFILE, ENFILE: no watchdog, as where none can start
        return None
    try:
        proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", _PROGRAM, repr(max(float(grace), 0.0))],
                                stdin=read_end, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True, close_fds=True)
    except OSError:
        os.close(write_end)
        return None
    finally:
        os.close(read_end)
    return Watchdog(proc, write_end)
