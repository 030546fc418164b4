"""``oomdoctor scan PATH...`` and ``oomdoctor summarize RESULTS``.

Exit codes of both: 0 no failure found, 1 failures found, 3 some logs could not be read
(3 wins over 1: the scan is incomplete; the records say which logs failed), 2 usage error.
"""
from __future__ import annotations

import json
import sys
import time
from typing import Optional

import click

from .records import FORMATS

EXIT_HELP = "Exit code: 0 no failure found, 1 failures found, 3 some logs could not be read, 2 usage error."

# Seconds a log may take. A log is read once in bulk and parsed in bounded regions, so
# time grows with its size only: a log that takes minutes is tens of gigabytes on a slow
# file system, or one that a parser chokes on. Ten minutes lets the first through.
DEFAULT_LOG_TIMEOUT = 600.0
MAX_LOG_TIMEOUT = 1e6        # past this the timer's clock overflows on some platforms


def _finite(ctx, param, value: float) -> float:
    if value != value:   # NaN passes every range check
        raise click.BadParameter("not a number")
    return value


def _fail(message: str) -> None:
    """A one-line error and exit code 2; the message may hold a path, made printable."""
    from .progress import printable
    click.echo(f"oomdoctor: {printable(message)}", err=True)
    sys.exit(2)


@click.command(epilog=EXIT_HELP)
@click.argument("paths", nargs=-1, required=True)
@click.option("--out", "-o", type=click.Path(dir_okay=False), default=None,
              help="write the records to FILE (default: stdout)")
@click.option("--format", "-f", "fmt", type=click.Choice(FORMATS), default="jsonl", show_default=True,
              help="jsonl: one JSON record per log, the fields of 'diagnose --format json' plus path; csv: one row per log")
@click.option("--resume", is_flag=True, help="append to --out, skipping logs already in it (same path, size and mtime)")
@click.option("--include", multiple=True, metavar="GLOB", help="scan only files whose name or relative path matches (repeatable)")
@click.option("--exclude", multiple=True, metavar="GLOB", help="skip files whose name or relative path matches (repeatable)")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=None, help="worker processes (default: the cores)")
@click.option("--engine", type=click.Choice(("local", "dask")), default="local", show_default=True,
              help="dask: distribute the logs over a Dask cluster (pip install 'oomdoctor[dask]')")
@click.option("--scheduler", default=None, metavar="ADDRESS",
              help="Dask scheduler address (default: start a LocalCluster of --jobs workers)")
@click.option("--progress/--no-progress", default=None, help="progress bar on stderr (default: on a terminal)")
@click.option("--summary/--no-summary", default=True, show_default=True, help="print a summary on stderr at the end")
@click.option("--top", type=click.IntRange(min=1), default=10, show_default=True, help="fingerprints in the summary")
@click.option("--log-timeout", type=click.FloatRange(min=0, max=MAX_LOG_TIMEOUT), callback=_finite,
              default=DEFAULT_LOG_TIMEOUT, show_default=True, metavar="SECONDS",
              help="a log that takes longer gets an error record and the scan goes on (0: no limit; "
                   "not applied under --engine dask)")
def scan(paths: tuple[str, ...], out: Optional[str], fmt: str, resume: bool, include: tuple[str, ...],
         exclude: tuple[str, ...], jobs: Optional[int], engine: str, scheduler: Optional[str],
         progress: Optional[bool], summary: bool, top: int, log_timeout: float) -> None:
    """Triage many logs: files, directories (recursive), globs, .gz/.zst/.bz2/.xz, tar
    archives (members read as streams) and fsspec URLs (s3://, gs://, file://, ...)."""
    from . import records
    from .engine import default_jobs, run_dask, run_local
    from .progress import Progress
    from .results import OutputError, ResultsFile, superseded_by
    from .sources import enumerate_tasks
    from .summary import Summary, summarize as summarize_records

    if resume and not out:
        raise click.UsageError("--resume needs --out FILE (the results of the earlier run)")
    if scheduler and engine != "dask":
        raise click.UsageError("--scheduler goes with --engine dask")
    jobs = jobs or default_jobs()
    started = time.monotonic()
    results_file: Optional[ResultsFile] = None
    try:
        # locked before it is read or emptied, held until the last record is written
        results_file = ResultsFile(out, fmt, resume) if out else None
        done = results_file.done_keys() if resume and results_file else set()
        tasks = list(enumerate_tasks(paths, include, exclude, done=done))
        if resume and results_file:
            results_file.prepare_resume(superseded_by(tasks))
    except OutputError as exc:
        if results_file is not None:
            results_file.close()
        _fail(str(exc))
    bar = Progress(len(tasks), sum(t.size or 0 for t in tasks), enabled=progress)

    appending = bool(results_file and not results_file.empty)
    # CSV has no escapes: a name that is not UTF-8 goes out as its own bytes, not as an error
    stream = results_file.stream() if results_file else click.get_text_stream("stdout", errors="surrogateescape")
    writer = records.RecordWriter(stream, fmt, header=not appending)
    stats = Summary()
    try:
        results = (run_dask(tasks, jobs=jobs, scheduler=scheduler, log_timeout=log_timeout) if engine == "dask"
                   else run_local(tasks, jobs=jobs, log_timeout=log_timeout))
        for task, recs in zip(tasks, results):
            for rec in recs:
                writer.write(rec)
                stats.add(rec)
            bar.advance(1, task.size or 0)
    finally:
        bar.close()
        if results_file:
            stream.close()
            results_file.close()
    stats.seconds = time.monotonic() - started
    if appending and out:
        # the summary of a resumed scan covers the whole results file
        seconds = stats.seconds
        stats = summarize_records(records.read_records(out))
        stats.seconds = seconds
    if summary:
        click.echo(stats.render(top=top), err=True, nl=False)
    sys.exit(stats.exit_code)


@click.command(epilog=EXIT_HELP)
@click.argument("results", type=click.Path(exists=True, dir_okay=False))
@click.option("--format", "-f", "fmt", type=click.Choice(("text", "json")), default="text", show_default=True)
@click.option("--top", type=click.IntRange(min=1), default=10, show_default=True, help="fingerprints to list")
def summarize(results: str, fmt: str, top: int) -> None:
    """Summarise a results file of 'oomdoctor scan' (JSONL or CSV): incidents, frameworks,
    versions, top fingerprints and the logs behind each."""
    from .records import read_records
    from .summary import summarize as summarize_records

    stats = summarize_records(read_records(results))
    if fmt == "json":
        click.echo(json.dumps(stats.to_dict(top=top), indent=2))
    else:
        click.echo(stats.render(top=top), nl=False)
    sys.exit(stats.exit_code)
