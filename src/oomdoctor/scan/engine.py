"""Running the tasks: in this process, in a local process pool, or on a Dask cluster.

Every engine runs the same ``run_task`` and yields its records in task order, so the
output is the same whatever the engine and the number of workers.

One log costs, when it holds no failure anchor, one read and one prefilter pass
(``reader.has_anchor``). Only a log with an anchor is read a second time, in region mode
(head, windows around anchors, a short tail), and goes through the same pipeline as
``oomdoctor diagnose`` (``pipeline.diagnose_view``).

Each log has a time budget (``log_timeout``, seconds; 0: none; see ``budget``): a log
that runs out of it gets an error record, and the scan goes on with the next log, or the
next member of the same archive.
"""
from __future__ import annotations

import contextlib
import functools
import io
import os
import tarfile
from typing import Callable, Iterable, Iterator, Optional, Sequence

from ..read.pull import first_line
from ..read.reader import SCAN_REGIONS, InputError, has_anchor, read_view
from . import records
from .budget import (
    LogTimeout,
    alarm_scope,
    install_handler,
    time_budget,
    timeout_message,
)
from .sources import MEMBER_SEP, Task, open_task, wanted

SPOOL_LIMIT = 32 * 2**20   # a tar member up to this size is held in memory for the two passes


def _kb():
    from ..kb.knowledge import default_knowledge
    return default_knowledge()


def warm_up() -> None:
    """Load what every worker needs (knowledge base, prefilter) before forking."""
    from .. import pipeline  # noqa: F401
    from ..read import prefilter  # noqa: F401
    prefilter.anchor_matcher()
    _kb()


def _budget_worker() -> None:
    """A worker process of the pool, ready to time logs. What every log needs is loaded
    first (at once when forked from a warm parent), so that no log's budget pays for it
    and no timer cuts a load half-way."""
    warm_up()
    install_handler()


# -- one log -------------------------------------------------------------------------------

def scan_log(name: str, size: Optional[int], mtime: Optional[float],
             opener: Callable[[], io.RawIOBase], log_timeout: float = 0) -> dict:
    """The record of one log. ``opener`` returns a fresh raw stream (called twice for a
    log that holds an anchor). Never raises."""
    try:
        with time_budget(log_timeout):
            return _scan_log(name, size, mtime, opener)
    except LogTimeout:
        return records.error_record(name, size, mtime, timeout_message(log_timeout))


def _scan_log(name: str, size: Optional[int], mtime: Optional[float],
              opener: Callable[[], io.RawIOBase]) -> dict:
    try:
        with opener() as fh:
            found, nbytes = has_anchor(fh, name)
        if nbytes == 0:
            return records.error_record(name, size, mtime, "empty file")
        if not found:
            return records.clean_record(name, size, mtime, nbytes)
        with opener() as fh:
            view = read_view(fh, name, full_limit=0, regions=SCAN_REGIONS)
        if view.mode == "clean":
            return records.clean_record(name, size, mtime, view.bytes_read)
        from ..pipeline import diagnose_view
        report = diagnose_view(view, source=name, knowledge=_kb())
        return records.report_record(name, size, mtime, report)
    except InputError as exc:
        msg = str(exc)
        if msg.startswith(name + ": "):
            msg = msg[len(name) + 2:]
        return records.error_record(name, size, mtime, msg)
    except PermissionError:
        return records.error_record(name, size, mtime, "permission denied")
    except FileNotFoundError:
        return records.error_record(name, size, mtime, "no such file (removed during the scan?)")
    except IsADirectoryError:
        return records.error_record(name, size, mtime, "is a directory")
    except MemoryError:
        return records.error_record(name, size, mtime, "out of memory while reading this log")
    except Exception as exc:  # noqa: BLE001 - one bad log never stops a scan
        text = (str(exc) or "").splitlines()[0][:200] if str(exc) else ""
        return records.error_record(name, size, mtime, f"internal error: {type(exc).__name__}: {text}")


class _Closing:
    """Context manager over a stream that does not close what it wraps (tar members)."""

    def __init__(self, stream):
        self.stream = stream

    def __enter__(self):
        return self.stream

    def __exit__(self, *exc) -> None:
        return None


def _file_records(task: Task, log_timeout: float = 0) -> Iterator[dict]:
    yield scan_log(task.path, task.size, task.mtime, lambda: open_task(task), log_timeout)


# -- tar archives --------------------------------------------------------------------------

def _unsafe_member(name: str) -> bool:
    parts = name.replace("\\", "/").split("/")
    return name.startswith(("/", "\\")) or ".." in parts or (len(name) > 1 and name[1] == ":")


def _open_tar(task: Task):
    raw = open_task(task)
    low = task.path.lower()
    if low.endswith((".tar.zst", ".tzst")):
        try:
            import zstandard
        except ImportError:
            raw.close()
            raise InputError("zstd-compressed archives need the 'zstandard' package (pip install 'oomdoctor[zstd]')")
        stream = zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)
        return raw, tarfile.open(fileobj=stream, mode="r|")
    if low.endswith((".tar.gz", ".tgz")):
        from ..read.reader import open_decompressed
        stream = open_decompressed(raw, b"\x1f\x8b")   # ISA-L when installed
        return raw, tarfile.open(fileobj=stream, mode="r|")
    return raw, tarfile.open(fileobj=raw, mode="r|*")   # streaming: members in order, no seeks


def _tar_records(task: Task, log_timeout: float = 0) -> Iterator[dict]:
    """One record per member; members are read as streams, never written to disk."""
    try:
        raw, tf = _open_tar(task)
    except InputError as exc:
        yield records.error_record(task.path, task.size, task.mtime, str(exc))
        return
    except Exception as exc:  # noqa: BLE001
        yield records.error_record(task.path, task.size, task.mtime, f"cannot read archive ({first_line(exc)})")
        return
    seen = 0
    cut: Optional[str] = None   # a streamed member whose read the time budget cut short
    try:
        with raw, tf:
            while True:
                try:
                    member = tf.next()
                except Exception as exc:  # noqa: BLE001 - truncated or corrupt archive
                    if cut is not None:
                        # an interrupted read may leave the decompressor out of step
                        # with the archive: that, not the archive, is the likely cause
                        reason = f"archive not read past {cut!r}, whose read ran out of time ({first_line(exc)})"
                    else:
                        reason = f"archive is truncated or corrupt after {seen} members ({first_line(exc)})"
                    yield records.error_record(task.path, task.size, task.mtime, reason)
                    return
                if member is None:
                    break
                seen += 1
                name = f"{task.path}{MEMBER_SEP}{member.name}"
                mtime = float(member.mtime) if member.mtime is not None else None
                if member.isdir():
                    continue
                if not wanted(member.name, task.include, task.exclude):
                    continue
                if (name, member.size, mtime) in task.done:
                    continue
                if _unsafe_member(member.name):
                    yield records.error_record(name, member.size, mtime, "unsafe member path (absolute or '..'), not read")
                    continue
                if member.issym() or member.islnk():
                    yield records.error_record(name, member.size, mtime,
                                               f"link member (to {member.linkname!r}), not followed")
                    continue
                if not member.isfile():
                    yield records.error_record(name, member.size, mtime, "not a regular file")
                    continue
                rec = _member_record(tf, member, name, mtime, log_timeout)
                if member.size > SPOOL_LIMIT and rec.get("error") == timeout_message(log_timeout):
                    cut = member.name
                yield rec
    except Exception as exc:  # noqa: BLE001
        yield records.error_record(task.path, task.size, task.mtime, f"cannot read archive ({first_line(exc)})")


def _member_record(tf: tarfile.TarFile, member: tarfile.TarInfo, name: str, mtime,
                   log_timeout: float = 0) -> dict:
    try:
        fh = tf.extractfile(member)
        if fh is None:
            return records.error_record(name, member.size, mtime, "not a regular file")
        if member.size <= SPOOL_LIMIT:
            # held in memory: the two passes of scan_log read it twice at no cost. The
            # budget starts after this bounded read, so a timer never cuts the archive's
            # stream in the middle of a small member
            data = fh.read()
            if len(data) < member.size:
                return records.error_record(name, member.size, mtime, "member is truncated")
            return scan_log(name, member.size, mtime, lambda: _Closing(io.BytesIO(data)), log_timeout)
        # larger: one pass in region mode (a stream cannot be read twice)
        try:
            with time_budget(log_timeout):
                return _streamed_member_record(fh, member, name, mtime)
        except LogTimeout:
            return records.error_record(name, member.size, mtime, timeout_message(log_timeout))
    except InputError as exc:
        msg = str(exc)
        return records.error_record(name, member.size, mtime, msg[len(name) + 2:] if msg.startswith(name + ": ") else msg)
    except Exception as exc:  # noqa: BLE001
        return records.error_record(name, member.size, mtime, f"cannot read member ({first_line(exc)})")


def _streamed_member_record(fh, member: tarfile.TarInfo, name: str, mtime) -> dict:
    view = read_view(fh, name, full_limit=0, regions=SCAN_REGIONS)
    if view.bytes_read == 0:
        return records.error_record(name, member.size, mtime, "empty file")
    if view.mode == "clean":
        return records.clean_record(name, member.size, mtime, view.bytes_read)
    from ..pipeline import diagnose_view
    return records.report_record(name, member.size, mtime, diagnose_view(view, source=name, knowledge=_kb()))


def run_task(task: Task, log_timeout: float = 0) -> list[dict]:
    """All records of one task (a worker's unit of work); ``log_timeout``: the time budget
    of each log, in seconds (0: none). Never raises."""
    if task.kind == "error":
        return [records.error_record(task.path, task.size, task.mtime, task.error or "cannot read")]
    if task.kind == "tar":
        return list(_tar_records(task, log_timeout))
    return list(_file_records(task, log_timeout))


def run_batch(tasks: Sequence[Task], log_timeout: float = 0) -> list[list[dict]]:
    return [run_task(t, log_timeout) for t in tasks]


# -- engines -------------------------------------------------------------------------------

def default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def run_local(tasks: Iterable[Task], jobs: int = 1, log_timeout: float = 0) -> Iterator[list[dict]]:
    """Records of each task, in task order; ``jobs`` > 1 uses a process pool."""
    task_list = list(tasks)
    if jobs <= 1 or sum(1 for t in task_list if t.kind != "error") <= 1:
        if log_timeout and any(t.kind != "error" for t in task_list):
            warm_up()   # loaded before the first log's timer starts (see _budget_worker)
        with alarm_scope(log_timeout):
            for task in task_list:   # nothing to share out: no pool to start
                yield run_task(task, log_timeout)
        return
    import multiprocessing as mp
    methods = mp.get_all_start_methods()
    # fork shares the warmed-up knowledge base and prefilter with the workers
    ctx = mp.get_context("fork" if "fork" in methods else "spawn")
    if ctx.get_start_method() == "fork":
        warm_up()
    chunk = max(1, min(8, len(task_list) // (jobs * 16)))
    work = functools.partial(run_task, log_timeout=log_timeout)
    pool = None
    try:
        with _ctrl_c_held():
            pool = ctx.Pool(min(jobs, len(task_list)), initializer=_worker_start, initargs=(log_timeout,))
        yield from pool.imap(work, task_list, chunksize=chunk)
    finally:
        if pool is not None:
            pool.terminate()


@contextlib.contextmanager
def _ctrl_c_held() -> Iterator[None]:
    """SIGINT held back while the pool forks its workers. A Ctrl-C that lands between a
    fork and the pool's record of the child (``Pool()`` cleans up after an Exception, not
    after a KeyboardInterrupt) would leave a worker nobody ends, waiting for tasks for
    ever and holding the scan's stdout open; held, it is delivered once the pool is whole
    and can be ended. A worker starts with it held too (``_worker_start`` lets it through).
    The mask is this thread's: in a program with other threads the kernel may hand SIGINT to
    one of them, and Python raises it here all the same (the CLI runs no other thread)."""
    import signal
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _worker_start(log_timeout: float) -> None:
    """A pool worker's first act: the SIGINT its parent held while forking it is let through
    (the scan's own workers ignore it: scan/command.py), and its log budget is set up."""
    import signal
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    if log_timeout:
        _budget_worker()


def run_dask(tasks: Iterable[Task], jobs: Optional[int] = None, scheduler: Optional[str] = None,
             batch_bytes: int = 64 * 2**20, batch_tasks: int = 64, log_timeout: float = 0) -> Iterator[list[dict]]:
    """Records of each task, in task order, computed on a Dask cluster.

    ``scheduler`` is the address of a running scheduler (the workers must see the same
    paths: a shared file system or URLs); without it a LocalCluster of ``jobs`` worker
    processes is started for the scan and closed after it. Dask runs tasks in threads of
    its workers, where no SIGALRM can be set: ``log_timeout`` has no effect there.
    """
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError:
        raise InputError("--engine dask needs dask.distributed (pip install 'oomdoctor[dask]')") from None
    batches = _batches(list(tasks), batch_bytes, batch_tasks)
    cluster = None
    if scheduler:
        client = Client(scheduler)
    else:
        cluster = LocalCluster(n_workers=jobs or default_jobs(), threads_per_worker=1, processes=True,
                               dashboard_address=None)
        client = Client(cluster)
    try:
        futures = client.map(functools.partial(run_batch, log_timeout=log_timeout), batches, pure=False)
        for fut in futures:
            for recs in fut.result():
                yield recs
            fut.release()
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def _batches(tasks: list[Task], batch_bytes: int, batch_tasks: int) -> list[list[Task]]:
    """Group small tasks so that scheduling costs little next to the work."""
    out: list[list[Task]] = []
    cur: list[Task] = []
    size = 0
    for t in tasks:
        cur.append(t)
        size += t.size or 0
        if len(cur) >= batch_tasks or size >= batch_bytes:
            out.append(cur)
            cur, size = [], 0
    if cur:
        out.append(cur)
    return out
