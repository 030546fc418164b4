"""The job's output passed through byte for byte while the lines a diagnosis needs are kept.

To a terminal at once, anywhere else within PACE_MAX, in batches that spare the job a reader
waking for every write (``_Stream``). Output that goes to a regular file needs no pipe: the
job is handed the file and the wrapper reads what it appends (``_Tail``); with
OOMDOCTOR_RUN_SCRATCH=1, /dev/null is replaced by an unlinked scratch file read the same way.
What is read is fed to the bounded ``capture.Capture``.
"""
from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Optional, Sequence


try:
    import fcntl
    import termios
    _FIONREAD: Optional[int] = termios.FIONREAD
except ImportError:                              # not a POSIX system: no backlog figures
    fcntl = None  # type: ignore[assignment]
    _FIONREAD = None

if TYPE_CHECKING:
    from .process import RunResult

READ_SIZE = 2**20
PIPE_SIZE = 2**20            # ask the kernel for larger pipes: fewer wake-ups at high output rates
BACKLOG = 128 * 1024         # pending bytes in the job's pipes above which searching pauses
DRAIN_AFTER_EXIT = 3.0       # how long to wait for the pipes to close after the job's exit
PID_SAMPLE_EVERY = 2.0       # how often the job's processes are listed (for kernel kill lines)
_F_SETPIPE_SZ = 1031
_F_GETPIPE_SZ = 1032
# How the job's pipes are read. Measured with a print() loop under PYTHONUNBUFFERED (two
# write() calls a line), the CPU the job itself used, against writing to /dev/null: +75 %
# with a reader woken by every write (`| cat`), +44 % with one polling the pipe and reading
# every millisecond, +18 % with the pipe never polled and read about every 20 ms (what a
# pipe costs per write). So a pipe is left alone for a while after each read
# (_Stream.pause_after): a terminal's for COALESCE (what a person sees stays immediate);
# any other's — /dev/null, a file, a pipe into tee or a log collector — until it is about
# PACE_FILL full, at most PACE_MAX: one read per half MiB instead of one per write.
COALESCE = 0.001
PACE_MAX = 0.05              # the latest a non-terminal's output is forwarded after it is written
PACE_FILL = 0.5              # the share of the pipe a paced read waits for
PACE_LATE = 0.75             # a read that found the pipe this full came late: read again at once
# The search for flagged lines may use at most this share of one core on average (bursts of
# a second are free): a job printing without pause keeps its CPU; real jobs print far less
# than the search can take in at this share (MB/s in pure Python, GB/s with Hyperscan).
SCAN_SHARE = 0.2


class Sink:
    """Where one of the job's streams goes: our own fd, written without any buffering.

    ``paced``: nobody sees this output as it comes (not a terminal), so the job's pipe may
    be read in large batches. ``null``: it is /dev/null, so nothing needs writing at all.
    """

    def __init__(self, stream) -> None:
        self.stream = stream
        self.closed = False
        self.paced = self.null = False
        try:
            stream.flush()
            self.fd: Optional[int] = stream.fileno()
        except (AttributeError, OSError, ValueError):
            self.fd = None                        # e.g. a test runner's in-memory stream
        if self.fd is not None:
            try:
                self.paced = not os.isatty(self.fd)
                # writing to /dev/null does nothing, but the call still costs; only an fd
                # open for writing, so that one open read-only still fails as it would
                self.null = _is_devnull(os.fstat(self.fd)) and _writable(self.fd)
            except OSError:
                pass

    def write(self, data: bytes) -> None:
        if self.closed or self.null:
            return
        try:
            if self.fd is None:
                buf = getattr(self.stream, "buffer", None)
                if buf is not None:
                    buf.write(data)
                else:
                    self.stream.write(data.decode("utf-8", errors="replace"))
                self.stream.flush()
                return
            view = memoryview(data)
            while view:
                try:
                    n = os.write(self.fd, view)
                except BlockingIOError:          # an inherited non-blocking fd
                    import select
                    select.select([], [self.fd], [], 1.0)
                    continue
                view = view[n:]
        except (OSError, ValueError):           # EPIPE, a closed stream: nobody reads any more
            self.closed = True


def _pending(fd: int) -> int:
    """Bytes waiting in a pipe (0 when the platform cannot say)."""
    if _FIONREAD is None:
        return 0
    try:
        return int.from_bytes(fcntl.ioctl(fd, _FIONREAD, b"\0\0\0\0"), sys.byteorder, signed=True)
    except (OSError, ValueError):
        return 0



class _Stream:
    """One of the job's pipes: where its bytes go, and when it is read next.

    A paced pipe (its output goes anywhere but a terminal) is never polled: once a pipe
    has been polled, Linux wakes its readers' wait queue on every write to it, which costs
    a job printing line by line nearly as much as the rest of the pipe does. It is read
    without blocking when its pause is over (``resume_at``), and at once when the job ends
    (a pidfd tells when). A terminal's pipe is polled, so that its output goes through as
    soon as it comes.
    """

    def __init__(self, pipe, name: str, sink: Sink, now: float) -> None:
        self.pipe = pipe
        self.fd = pipe.fileno()
        self.name = name
        self.sink = sink
        self.capacity = _pipe_capacity(self.fd)
        self.paced = sink.paced and fcntl is not None
        # pending bytes above which searching the output pauses: the job is about to wait
        # for the wrapper (a paced pipe holds up to PACE_FILL of its size on purpose)
        self.backlog = int(self.capacity * PACE_LATE) if self.paced else BACKLOG
        self.last_read = now
        self.pause = 0.0
        self.resume_at: Optional[float] = now if self.paced else None
        if self.paced:
            try:
                fcntl.fcntl(self.fd, fcntl.F_SETFL, fcntl.fcntl(self.fd, fcntl.F_GETFL) | os.O_NONBLOCK)
            except OSError:
                self.paced, self.backlog, self.resume_at = False, BACKLOG, None

    def pause_after(self, n: int, now: float) -> float:
        """How long to leave the pipe alone after a read of ``n`` bytes (0: it was empty).

        A terminal's pipe: COALESCE, as long as the reads are small. Any other: the time the
        job takes to fill PACE_FILL of the pipe at the rate it has just been writing, at most
        PACE_MAX, and none when the read found the pipe nearly full, so that the job never
        waits for the wrapper because of the pause (a job that starts writing fast after a
        quiet spell may wait once, for at most PACE_MAX). An empty pipe doubles the pause,
        so that a job that stops for a moment in a fast stretch is not left waiting long.
        """
        if not self.paced:
            return COALESCE if n < BACKLOG else 0.0
        if not n:
            self.pause = min(PACE_MAX, max(COALESCE, 2 * self.pause))
            return self.pause
        elapsed = max(now - self.last_read, 1e-6)
        self.last_read = now
        if n >= self.capacity * PACE_LATE:
            self.pause = 0.0
        else:
            self.pause = min(PACE_MAX, self.capacity * PACE_FILL * elapsed / n)
        return self.pause


def _pipe_capacity(fd: int) -> int:
    """Ask the kernel for a PIPE_SIZE pipe (fewer wake-ups at high output rates); its size."""
    if fcntl is None:
        return 65536
    try:
        fcntl.fcntl(fd, _F_SETPIPE_SZ, PIPE_SIZE)
    except OSError:                       # above /proc/sys/fs/pipe-max-size, or the user's quota
        pass
    try:
        return fcntl.fcntl(fd, _F_GETPIPE_SZ)
    except OSError:
        return 65536


def _kill_after_grace(proc: subprocess.Popen, deadline: Optional[float], now: float, result: RunResult) -> None:
    """SIGKILL the job's process group once the grace period after a forwarded signal is over."""
    if deadline is None or now < deadline or result.killed_after_grace:
        return
    result.killed_after_grace = True
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _resume(streams: dict, now: float) -> None:
    """Read the paced pipes now (the job has ended: nothing more is worth waiting for)."""
    for stream in streams.values():
        if stream.paced:
            stream.resume_at = now


def _exit_notifier(pid: int) -> Optional[int]:
    """A descriptor that polls readable once the job has exited (Linux ≥ 5.3), else None."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def pump(proc: subprocess.Popen, cap, out: Sink, err: Sink, result: RunResult,
          deadline: list, tails: Sequence[_Tail] = ()) -> None:
    from . import cgroup

    # poll() rather than a selector: a terminal's pipe that is pausing stays registered with
    # no events, so the job's end closing (POLLHUP) still ends the pause at once
    poller = select.poll()
    readable = select.POLLIN
    streams: dict[int, _Stream] = {}
    tails = list(tails)
    now = time.monotonic()
    for pipe, name, sink in ((proc.stdout, "stdout", out), (proc.stderr, "stderr", err)):
        if pipe is None:                  # the job writes to a file itself, or both streams share one pipe
            continue
        stream = _Stream(pipe, name, sink, now)
        streams[stream.fd] = stream
        if not stream.paced:
            poller.register(stream.fd, readable)
    exit_fd = _exit_notifier(proc.pid) if any(s.paced for s in streams.values()) else None
    if exit_fd is not None:
        poller.register(exit_fd, readable)

    def close(fd: int) -> None:
        stream = streams.pop(fd)
        if not stream.paced:
            poller.unregister(fd)
        stream.pipe.close()

    def may_scan() -> bool:
        return all(_pending(fd) < stream.backlog for fd, stream in streams.items())

    exited_at: Optional[float] = None
    next_sample = time.monotonic() + 0.2
    next_poll = 0.0
    # one reusable buffer for the tails: os.read(fd, 1 MiB) would map and unmap a fresh MiB on every call
    buf = bytearray(READ_SIZE)
    view = memoryview(buf)
    tail_busy = False
    ended = False
    try:
        while streams or tails:
            timeout = 0.25 if not tails else (0.0 if tail_busy else TAIL_IDLE)
            now = time.monotonic()
            for stream in streams.values():
                if stream.resume_at is None:
                    continue
                if stream.resume_at > now:
                    timeout = min(timeout, stream.resume_at - now)
                elif not stream.paced:
                    stream.resume_at = None
                    poller.modify(stream.fd, readable)
                else:
                    timeout = 0.0
            events = poller.poll(timeout * 1000)
            tail_busy = False
            for tail in tails:
                n = _read_tail(tail, cap, buf, view)
                tail_busy = tail_busy or n == READ_SIZE
            now = time.monotonic()
            ready = []
            for fd, revents in events:
                if fd == exit_fd:
                    # the job has ended: read what is left in the paced pipes now, and let
                    # the checks below see the exit
                    poller.unregister(exit_fd)
                    os.close(exit_fd)
                    exit_fd = None
                    next_poll = 0.0
                    ended = True
                    _resume(streams, now)
                elif fd in streams:
                    ready.append((streams[fd], revents))
            ready.extend((s, 0) for s in streams.values() if s.paced and s.resume_at <= now)
            for stream, revents in ready:
                # exactly what the pipe holds, read straight into the bytes the capture keeps
                want = min(_pending(stream.fd), READ_SIZE) or 65536
                try:
                    data = os.read(stream.fd, want)
                    n = len(data)
                except (BlockingIOError, InterruptedError):
                    n = -1                  # a paced pipe with nothing in it
                except OSError:
                    n = 0
                if n > 0:
                    stream.sink.write(data)
                    cap.feed(data, stream.name, may_scan)
                if not n or stream.sink.closed:
                    # EOF; or our own output is gone: close the job's end too, so the job
                    # sees a broken pipe exactly as it would have without the wrapper
                    close(stream.fd)
                    continue
                pause = stream.pause_after(max(n, 0), now)
                if revents & (select.POLLHUP | select.POLLERR) or (ended and n > 0):
                    pause = 0.0             # the job's end is closed, or it has ended: read the rest at once
                if stream.paced:
                    stream.resume_at = now + pause
                elif pause > 0:
                    stream.resume_at = now + pause
                    poller.modify(stream.fd, 0)     # POLLHUP and POLLERR only
            if (ready or tail_busy) and now < next_poll and deadline[0] is None:
                continue                    # busy streaming: the checks below can wait a moment
            next_poll = now + 0.1
            _kill_after_grace(proc, deadline[0], now, result)
            if now >= next_sample and exited_at is None:
                result.pids |= cgroup.session_pids(proc.pid)
                next_sample = now + PID_SAMPLE_EVERY
            if exited_at is None and proc.poll() is not None:
                exited_at = now
                if not ended:
                    ended = True
                    _resume(streams, now)
            if exited_at is not None and tails:
                for tail in tails:
                    # everything the job wrote before it ended; what its leftover processes
                    # write afterwards only for a while, as with pipes
                    written = tail.size()
                    while _read_tail(tail, cap, buf, view):
                        if tail.pos >= written and time.monotonic() - exited_at > DRAIN_AFTER_EXIT:
                            result.drained = False
                            break
                tails = []
            if exited_at is not None and streams and now - exited_at > DRAIN_AFTER_EXIT:
                # processes the job left behind still hold its pipes; stop waiting for them
                result.drained = False
                for fd in list(streams):
                    close(fd)
    finally:
        if exit_fd is not None:
            os.close(exit_fd)
    while proc.poll() is None:
        now = time.monotonic()
        _kill_after_grace(proc, deadline[0], now, result)
        try:
            proc.wait(timeout=0.25)
        except subprocess.TimeoutExpired:
            pass


# -- output that needs no pipe: a regular file, or /dev/null -------------------------------------

TAIL_IDLE = 0.005            # how long the tail of a file waits once it has caught up
TAIL_BACKLOG = 8 * 2**20     # unread bytes in a tailed file above which searching pauses
PUNCH_EVERY = 4 * 2**20      # free what has been read of the scratch file once this much is read
_FALLOC_FL_KEEP_SIZE = 0x01
_FALLOC_FL_PUNCH_HOLE = 0x02


def _is_devnull(st: os.stat_result) -> bool:
    import stat
    try:
        null = os.stat(os.devnull)
    except OSError:
        return False
    return stat.S_ISCHR(st.st_mode) and stat.S_ISCHR(null.st_mode) and st.st_rdev == null.st_rdev


def _writable(fd: int) -> bool:
    try:
        return fcntl is not None and fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE in (os.O_WRONLY, os.O_RDWR)
    except (OSError, ValueError):
        return False


def _writable_regular_file(fd: int) -> Optional[os.stat_result]:
    import stat
    try:
        st = os.fstat(fd)
        mode = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE
    except (OSError, ValueError):
        return None
    return st if stat.S_ISREG(st.st_mode) and mode in (os.O_WRONLY, os.O_RDWR) else None


class _Tail:
    """Capture from a file the job writes to directly, by reading what it appends.

    The job's descriptor is either our own stdout/stderr (a regular file: the job's bytes
    land exactly where they would without the wrapper, O_APPEND and interleaving
    included) or an unlinked scratch file standing in for /dev/null, whose read part is
    freed as it is read so that it takes no disk however much the job prints.
    """

    def __init__(self, read_fd: int, start: int, name: str, scratch: bool) -> None:
        self.fd = read_fd
        self.pos = start
        self.name = name
        self.scratch = scratch
        self.freed = 0                    # scratch bytes before this offset were given back

    @classmethod
    def of_file(cls, fd: int, name: str) -> Optional["_Tail"]:
        """Tail our own output file from where it is now (None: not possible here)."""
        try:
            if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_APPEND:
                start = os.fstat(fd).st_size
            else:
                start = os.lseek(fd, 0, os.SEEK_CUR)
            read_fd = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except (OSError, ValueError):
            return None
        return cls(read_fd, start, name, scratch=False)

    @classmethod
    def scratch_file(cls, name: str) -> Optional[tuple["_Tail", int]]:
        """An unlinked file in $TMPDIR for the job to write to (O_APPEND), and its tail."""
        import tempfile
        try:
            fh = tempfile.TemporaryFile(buffering=0)      # O_TMPFILE, or mkstemp + unlink
            fd = os.dup(fh.fileno())
            fh.close()
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_APPEND)
        except (OSError, ValueError):
            return None
        return cls(fd, 0, name, scratch=True), fd

    def size(self) -> int:
        try:
            return os.fstat(self.fd).st_size
        except OSError:
            return self.pos

    def backlog(self) -> int:
        return self.size() - self.pos

    def read(self, buf: bytearray) -> int:
        """Read what was appended since the last call into ``buf``; bytes read."""
        try:
            n = os.preadv(self.fd, [buf], self.pos)
        except (OSError, ValueError):
            return 0
        if n == 0 and not self.scratch and self.size() < self.pos:
            self.pos = self.size()            # someone truncated the log: follow it
        self.pos += n
        return n

    def free_read_part(self, force: bool = False) -> None:
        """Give back the scratch file's blocks that have been read.

        Punching a hole cannot lose a byte the job is appending at that moment (the file's
        size does not change); where the file system cannot punch holes, the file is
        truncated instead once everything has been read, which can miss the bytes the
        job appends between the size check and the truncation.
        """
        if not self.scratch or (self.pos - self.freed < PUNCH_EVERY and not force):
            return
        end = self.pos - self.pos % 4096
        if end > self.freed and _punch_hole(self.fd, self.freed, end - self.freed):
            self.freed = end
            return
        if self.size() == self.pos:
            try:
                os.ftruncate(self.fd, 0)
                self.pos = self.freed = 0
            except OSError:
                pass

    def close(self) -> None:
        try:
            os.close(self.fd)
        except OSError:
            pass


_FALLOCATE: list = []


def _punch_hole(fd: int, offset: int, length: int) -> bool:
    """fallocate(PUNCH_HOLE | KEEP_SIZE) through libc; False where it is not available."""
    if not _FALLOCATE:
        try:
            import ctypes
            libc = ctypes.CDLL(None, use_errno=True)
            fn = libc.fallocate64 if hasattr(libc, "fallocate64") else libc.fallocate
            fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
            fn.restype = ctypes.c_int
            _FALLOCATE.append(fn)
        except (OSError, AttributeError):
            _FALLOCATE.append(None)
    fn = _FALLOCATE[0]
    if fn is None:
        return False
    return fn(fd, _FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_KEEP_SIZE, offset, length) == 0


def route_output(out: Sink, err: Sink) -> tuple[list, list]:
    """Decide, per stream, between a pipe and handing the job a file descriptor directly.

    Returns the Popen stdout/stderr arguments and the tails to read.
    A regular file opened for writing is given to the job as it is and tailed; with
    OOMDOCTOR_RUN_SCRATCH, /dev/null is replaced by a scratch file that is tailed;
    anything else (terminals, pipes, sockets, /dev/null, streams without a descriptor)
    gets a pipe, read and passed through. Two streams that go to the same place share one
    file or one pipe, so that what the job writes to each keeps its order exactly.
    """
    targets: list = [subprocess.PIPE, subprocess.PIPE]
    tails: list = []
    if fcntl is None or not hasattr(os, "preadv") or os.environ.get("OOMDOCTOR_RUN_PIPES"):
        return _share_pipe(targets, out, err), tails
    seen: dict = {}                            # (dev, inode) or "null" -> index already routed
    for i, (sink, name) in enumerate(((out, "stdout"), (err, "stderr"))):
        if sink.fd is None:
            continue
        try:
            st = os.fstat(sink.fd)
        except OSError:
            continue
        if _is_devnull(st):
            # measured: a job writing into a scratch file on disk ran slower than into a
            # pipe, so /dev/null keeps the pipe unless the scratch file is asked for
            if not os.environ.get("OOMDOCTOR_RUN_SCRATCH"):
                continue
            key: object = "null"
        elif _writable_regular_file(sink.fd) is not None:
            key = (st.st_dev, st.st_ino)
        else:
            continue
        if key in seen:                        # 2>&1: one file, one tail, order exactly as written
            targets[i] = targets[seen[key]]
            continue
        if key == "null":
            made = _Tail.scratch_file(name)
            if made is None:
                continue
            tail, fd = made
            targets[i] = fd
        else:
            tail = _Tail.of_file(sink.fd, name)
            if tail is None:
                continue
            targets[i] = sink.fd
        seen[key] = i
        tails.append(tail)
    return _share_pipe(targets, out, err), tails


def _share_pipe(targets: list, out: Sink, err: Sink) -> list:
    """One pipe for both streams when they go to the same place (``2>&1 | tee``, a terminal).

    Two pipes read in turn would pass the job's stdout and stderr on in batches, not in
    the order it wrote them; through one pipe the order is the job's own.
    """
    if targets != [subprocess.PIPE, subprocess.PIPE] or out.fd is None or err.fd is None:
        return targets
    try:
        a, b = os.fstat(out.fd), os.fstat(err.fd)
    except OSError:
        return targets
    if (a.st_dev, a.st_ino, a.st_rdev) == (b.st_dev, b.st_ino, b.st_rdev):
        return [subprocess.PIPE, subprocess.STDOUT]
    return targets


def _read_tail(tail: _Tail, cap, buf: bytearray, view: memoryview) -> int:
    """Read one block of what the job appended to a tailed file and capture it."""
    n = tail.read(buf)
    if n:
        cap.feed(view[:n].tobytes(), tail.name, lambda: tail.backlog() < TAIL_BACKLOG)
        tail.free_read_part()
    return n
