"""Scan a fleet's logs: files, directories, globs, compressed files, tar archives, URLs.

    >>> import oomdoctor
    >>> for rec in oomdoctor.scan(["/var/log/jobs"], jobs=4):
    ...     if rec.get("diagnoses"):
    ...         print(rec["path"], rec["diagnoses"][0]["incident"])

Each record is a dict: the log's ``path``, ``size`` and ``mtime``, then the same fields as
``oomdoctor diagnose --format json``; or ``{"path", "size", "mtime", "error"}`` for a log
that could not be read. Records come in input order (arguments as given, directories in
name order, archive members in archive order), whatever the number of workers.
"""
from __future__ import annotations

import sys
import types
from typing import Iterable, Iterator, Optional, Sequence, Union

__all__ = ["scan", "summarize"]


def scan(paths: Union[str, Iterable[str]], *, include: Sequence[str] = (), exclude: Sequence[str] = (),
         jobs: int = 1, engine: str = "local", scheduler: Optional[str] = None,
         skip: Optional[set] = None, log_timeout: float = 0) -> Iterator[dict]:
    """Yield one record per log found under ``paths``.

    ``jobs``: worker processes (local engine) or LocalCluster workers (dask engine).
    ``engine``: ``"local"`` or ``"dask"`` (``scheduler``: address of a running Dask
    scheduler; a LocalCluster is started without one). ``skip``: (path, size, mtime)
    keys of logs to leave out, e.g. those already in a results file (``--resume``).
    ``log_timeout``: seconds a log may take before it gets an error record instead (0: no
    limit). It sets a SIGALRM timer (see ``engine``), so it applies only when called from
    the main thread of a process on POSIX that runs no ITIMER_REAL timer of its own; off
    by default, as a library does not take a signal over unasked.
    """
    from .engine import run_dask, run_local
    from .sources import enumerate_tasks

    if not 0 <= log_timeout <= 1e6:   # also NaN; past 1e6 s the timer's clock may overflow
        raise ValueError(f"log_timeout must be seconds from 0 to 1e6, not {log_timeout!r}")
    if isinstance(paths, str):
        paths = [paths]
    tasks = list(enumerate_tasks(paths, include, exclude, done=skip))
    if engine == "dask":
        results = run_dask(tasks, jobs=jobs, scheduler=scheduler, log_timeout=log_timeout)
    elif engine == "local":
        results = run_local(tasks, jobs=jobs, log_timeout=log_timeout)
    else:
        raise ValueError(f"unknown engine {engine!r} (local or dask)")
    for recs in results:
        yield from recs


def summarize(records: Iterable[dict]):
    """A :class:`oomdoctor.scan.summary.Summary` of records (``.render()`` for text)."""
    from .summary import summarize as _summarize
    return _summarize(records)


class _CallableModule(types.ModuleType):
    """``oomdoctor.scan`` is both this package and the function: calling it scans."""

    def __call__(self, paths, **kwargs):
        return scan(paths, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
