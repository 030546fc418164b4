"""The time budget of one log: a SIGALRM timer around the log's work.

The timer is armed in the process that does the work: the scan itself with one job, each
worker of the pool with several. When it rings, ``LogTimeout`` is raised in the middle of
whatever that log was doing (a read, the anchor search, a regular expression: ``re``
checks for signals while it backtracks); the log gets an error record and the same
process goes on with the next log, or the next member of the same archive.

Why a timer inside the process rather than a timeout per task in the pool: that one
would have to kill the worker (a new one must start and load the knowledge base again),
would lose every record of an archive for one slow member, and could not work with one
job at all.

Where signals cannot be used, logs run without a budget: no SIGALRM (Windows); a thread
other than the main one (Dask runs tasks in its workers' threads); a caller that runs an
ITIMER_REAL timer of its own. Code in C that does not check for signals delays the
exception until it returns: a read blocked in the kernel (a hung NFS server) is cut only
when the kernel gives it back.
"""
from __future__ import annotations

import contextlib
import signal
import threading
from typing import Iterator


class LogTimeout(BaseException):
    """A log's time budget ran out. A BaseException, like KeyboardInterrupt, so that no
    ``except Exception`` in the readers or parsers can swallow it and carry on."""


_armed = False   # True only while a log's timer runs: a signal that comes late is ignored


def _on_alarm(signum, frame) -> None:
    if _armed:
        raise LogTimeout()


def _can_alarm() -> bool:
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


def install_handler() -> None:
    """Our handler, for good: in a worker process of the pool, which is ours."""
    if _can_alarm():
        signal.signal(signal.SIGALRM, _on_alarm)


@contextlib.contextmanager
def alarm_scope(seconds: float) -> Iterator[None]:
    """Our handler for a scan run in this process, the caller's back after it. It stays
    for the whole scan rather than being swapped per log: a signal already on its way
    when the handler is swapped back would meet the default action, which ends the process."""
    if not seconds or not _can_alarm() or signal.getsignal(signal.SIGALRM) is _on_alarm \
            or signal.getitimer(signal.ITIMER_REAL) != (0.0, 0.0):
        yield   # no budget, a scan inside a scan, or the caller's own timer runs: leave it be
        return
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    try:
        yield
    finally:
        signal.signal(signal.SIGALRM, previous if previous is not None else signal.SIG_DFL)


@contextlib.contextmanager
def time_budget(seconds: float) -> Iterator[None]:
    """Raise LogTimeout in the block once it has run ``seconds`` (0: no limit); without
    our handler in place the block runs without a limit. Catch LogTimeout outside the
    ``with``: it may come from the disarming itself, just as the time runs out."""
    global _armed
    if not seconds or not _can_alarm() or signal.getsignal(signal.SIGALRM) is not _on_alarm:
        yield
        return
    _armed = True
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        _armed = False


def timeout_message(seconds: float) -> str:
    return f"took longer than {seconds:g} s"
