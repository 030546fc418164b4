"""``oomdoctor scan PATH...`` and ``oomdoctor summarize RESULTS``.

Exit codes of both: 0 no failure found, 1 failures found, 3 some logs could not be read
(3 wins over 1: the scan is incomplete; the records say which logs failed), 2 usage error.
"""
from __future__ import annotations

import json
import os
import sys
import time
from typing import Optional

import click

from .records import FORMATS

EXIT_HELP = "Exit code: 0 no failure found, 1 failures found, 3 some logs could not be read, 2 usage error."


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
def scan(paths: tuple[str, ...], out: Optional[str], fmt: str, resume: bool, include: tuple[str, ...],
         exclude: tuple[str, ...], jobs: Optional[int], engine: str, scheduler: Optional[str],
         progress: Optional[bool], summary: bool, top: int) -> None:
    """Triage many logs: files, directories (recursive), globs, .gz/.zst/.bz2/.xz, tar
    archives (members read as streams) and fsspec URLs (s3://, gs://, file://, ...)."""
    from . import records
    from .engine import default_jobs, run_dask, run_local
    from .progress import Progress
    from .sources import enumerate_tasks
    from .summary import Summary, summarize as summarize_records

    if resume and not out:
        raise click.UsageError("--resume needs --out FILE (the results of the earlier run)")
    if scheduler and engine != "dask":
        raise click.UsageError("--scheduler goes with --engine dask")
    jobs = jobs or default_jobs()
    started = time.monotonic()
    done = records.done_keys(out) if resume and out else set()
    tasks = list(enumerate_tasks(paths, include, exclude, done=done))
    bar = Progress(len(tasks), sum(t.size or 0 for t in tasks), enabled=progress)

    appending = bool(resume and out and os.path.exists(out) and os.path.getsize(out) > 0)
    if out:
        if appending:
            records.trim_partial_line(out)
        stream = open(out, "a" if appending else "w", encoding="utf-8", newline="")
    else:
        stream = click.get_text_stream("stdout")
    writer = records.RecordWriter(stream, fmt, header=not appending)
    stats = Summary()
    try:
        results = run_dask(tasks, jobs=jobs, scheduler=scheduler) if engine == "dask" else run_local(tasks, jobs=jobs)
        for task, recs in zip(tasks, results):
            for rec in recs:
                writer.write(rec)
                stats.add(rec)
            bar.advance(1, task.size or 0)
    finally:
        bar.close()
        if out:
            stream.close()
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
