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
    from ..report.common import printable
    click.echo(f"oomdoctor: {printable(message)}", err=True)
    sys.exit(2)


@click.command(epilog=EXIT_HELP)
@click.argument("paths", nargs=-1, required=True)
@click.option("--out", "-o", type=click.Path(dir_okay=False), default=None,
              help="write the records to FILE or an fsspec URL (default: stdout; on a terminal, without --format, "
                   "a summary in tables instead of the records)")
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
@click.option("--summary/--no-summary", default=True, show_default=True,
              help="print a summary on stderr at the end (with the records; on a terminal the tables are the output)")
@click.option("--top", type=click.IntRange(min=1), default=10, show_default=True,
              help="fingerprints (and incidents, in the tables) in the summary")
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
    from ..report.render import isatty
    from .progress import Progress
    from .results import OutputError, ResultsFile, UrlResultsFile, superseded_by
    from .results import results_file as open_out
    from .sources import enumerate_tasks
    from .summary import Summary
    from .summary import summarize as summarize_records

    if resume and not out:
        raise click.UsageError("--resume needs --out FILE (the results of the earlier run)")
    if scheduler and engine != "dask":
        raise click.UsageError("--scheduler goes with --engine dask")
    jobs = jobs or default_jobs()
    started = time.monotonic()
    # a person at a terminal reads a summary; records are for files and pipes (and for an
    # explicit --format)
    stdout = click.get_text_stream("stdout", errors="surrogateescape")
    ctx = click.get_current_context()
    human = (not out and isatty(sys.stdout)
             and ctx.get_parameter_source("fmt") in (None, click.core.ParameterSource.DEFAULT))
    results_file: Optional[ResultsFile | UrlResultsFile] = None
    try:
        # locked before it is read or emptied, held until the last record is written
        results_file = open_out(out, fmt, resume) if out else None
        done = results_file.done_keys() if resume and results_file else set()
        tasks = list(enumerate_tasks(paths, include, exclude, done=done))
        if resume and results_file:
            results_file.prepare_resume(superseded_by(tasks))
        appending = bool(results_file and not results_file.empty)
        # CSV has no escapes: a name that is not UTF-8 goes out as its own bytes, not as an error
        stream = results_file.stream() if results_file else stdout   # a URL's upload starts here
    except BaseException as exc:
        # a URL is left as it was (an interrupted enumeration included); a file is unlocked
        if results_file is not None:
            results_file.close(commit=False)
        if isinstance(exc, OutputError):
            _fail(str(exc))
        raise
    bar = Progress(len(tasks), sum(t.size or 0 for t in tasks), enabled=progress)
    stats = Summary()
    finished = False
    try:
        writer = None if human else records.RecordWriter(stream, fmt, header=not appending)
        if engine == "local":
            _ctrl_c_to_the_parent_only()
        results = (run_dask(tasks, jobs=jobs, scheduler=scheduler, log_timeout=log_timeout) if engine == "dask"
                   else run_local(tasks, jobs=jobs, log_timeout=log_timeout))
        for task, recs in zip(tasks, results):
            for rec in recs:
                if writer is not None:
                    writer.write(rec)
                stats.add(rec)
            bar.advance(1, task.size or 0, name=task.path)
        finished = True
    finally:
        _scan_ended()
        bar.close()
        if results_file:
            # a URL is committed only when the scan is whole: an interrupted one leaves it as
            # it was; a file keeps the records written (--resume goes on from them)
            results_file.close(commit=finished)
    stats.seconds = time.monotonic() - started
    if appending and out:
        # the summary of a resumed scan covers the whole results file
        seconds = stats.seconds
        stats = summarize_records(records.read_records(out))
        stats.seconds = seconds
    if human:
        from ..report.render import use_color, use_rich
        if use_rich(sys.stdout):
            stats.print_tables(stdout, top=top, color=use_color(sys.stdout))
        else:               # TERM=dumb: the plain summary
            click.echo(stats.render(top=top), nl=False)
    elif summary:
        click.echo(stats.render(top=top), err=True, nl=False)
    sys.exit(stats.exit_code)


def _warn(message: str) -> None:
    from ..report.common import printable
    click.echo(f"oomdoctor: warning: {printable(message)}", err=True)


_in_scan = False           # forks while it is set are a local scan's workers
_fork_hook_registered = False


def _ignore_ctrl_c_in_a_worker() -> None:
    if _in_scan:
        import signal
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def _ctrl_c_to_the_parent_only() -> None:
    """Ctrl-C reaches every process of the terminal's foreground group: each forked worker
    would print its traceback over the progress bar, which then cannot be cleared. Workers
    ignore it instead; the scan stops, clears its bar and ends the pool (SIGTERM).

    The fork hook is registered once per process (it cannot be removed) and acts only on
    the forks of a scan that is running (until ``_scan_ended``)."""
    global _in_scan, _fork_hook_registered
    import os
    if not hasattr(os, "register_at_fork"):
        return
    if not _fork_hook_registered:
        os.register_at_fork(after_in_child=_ignore_ctrl_c_in_a_worker)
        _fork_hook_registered = True
    _in_scan = True


def _scan_ended() -> None:
    global _in_scan
    _in_scan = False


@click.command(epilog=EXIT_HELP)
@click.argument("results")
@click.option("--format", "-f", "fmt", type=click.Choice(("text", "json", "html")), default="text", show_default=True,
              help="html: one self-contained page for a fleet (failed logs by kind and by month, top incidents)")
@click.option("--top", type=click.IntRange(min=1), default=10, show_default=True, help="fingerprints to list")
def summarize(results: str, fmt: str, top: int) -> None:
    """Summarise a results file of 'oomdoctor scan' (JSONL or CSV; a path or an fsspec URL):
    incidents, frameworks, versions, top fingerprints and the logs behind each.

    A line that is no scan record is an error (exit code 2, naming FILE:LINE); only the
    unfinished last line of a scan that was killed while writing it is left out, with a
    warning."""
    from ..read.reader import InputError
    from .records import RecordsError, read_records
    from .summary import summarize as summarize_records

    def partial(line: int) -> None:
        _warn(f"{results}:{line}: an unfinished last record (a scan killed while writing it) is left out")

    records = read_records(results, strict=True, on_partial=partial)
    try:
        if fmt == "html":
            from ..report.fleet_html import render_fleet_html
            from .fleet import fleet_data
            data = fleet_data(records, top=top, source=results)
            click.echo(render_fleet_html(data), nl=False)
            sys.exit(data["exit_code"])
        stats = summarize_records(records)
    except (InputError, RecordsError) as exc:
        _fail(str(exc))
    if fmt == "json":
        click.echo(json.dumps(stats.to_dict(top=top), indent=2))
    else:
        click.echo(stats.render(top=top), nl=False)
    sys.exit(stats.exit_code)
