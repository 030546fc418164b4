"""``oomdoctor run [OPTIONS] -- COMMAND ...``: run a training job and diagnose it if it fails.

The wrapper must be invisible to the job and to the scheduler: its output passes through
unchanged (``pump``), signals reach the job's process group and the wrapper exits with the
job's status (``process``). When the job fails, the report (``diagnosis``) is printed to
stderr after the job's own output.

With ``--retry N`` a failure whose top diagnosis has a remediation the knowledge base
marks safe to apply automatically (environment only, e.g. the allocator setting) is run
again with that environment change, at most N times; files are never touched.

This module is imported when the CLI starts, so it imports nothing heavy at the top.
"""
from __future__ import annotations

import os
import re
import shlex
import sys
from typing import Optional

import click

from .diagnosis import diagnose_result
from .process import GRACE, TERMINATING, RunResult, run_once, signal_name

# -- retry ------------------------------------------------------------------------------------

_OPTION_LIST = re.compile(r"^[\w.\-]+:[^,:]*(?:,[\w.\-]+:[^,:]*)*$")


def merge_env_value(old: Optional[str], new: str) -> str:
    """``key:value,...`` settings (the allocator's style) are merged; anything else is replaced."""
    if not old:
        return new
    if _OPTION_LIST.match(old) and _OPTION_LIST.match(new):
        merged = dict(item.split(":", 1) for item in old.split(","))
        merged.update(item.split(":", 1) for item in new.split(","))
        return ",".join(f"{k}:{v}" for k, v in merged.items())
    return new


def next_env_change(report, env: dict[str, str]) -> Optional[tuple[object, dict[str, str]]]:
    """The first applicable remediation of the top diagnosis whose environment change is new."""
    top = report.top
    if top is None:
        return None
    for rem in top.remediations:
        if not rem.applicable or not rem.auto_env:
            continue
        change = {}
        for key, value in rem.auto_env.items():
            new = merge_env_value(env.get(key), str(value))
            if new != env.get(key):
                change[key] = new
        if change:
            return rem, change
    return None


def attempt_record(number: int, result: RunResult, report=None) -> dict:
    """One entry of the report's ``attempts`` (a plain dict: a job that succeeds never loads pydantic)."""
    return dict(
        attempt=number, env_changes=dict(result.env_changes), exit_status=result.exit_status,
        signal=signal_name(result.signal) if result.signal else None, duration_s=round(result.duration, 3),
        incident=report.top.incident if report is not None and report.top is not None else None,
        lines=result.capture.lines,
    )


def _say(message: str) -> None:
    try:
        sys.stderr.write(message + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def _describe(result: RunResult) -> str:
    if result.killed_after_grace:
        return "was ended after the grace period"
    if result.signal is not None:
        return f"was killed by {signal_name(result.signal)} (exit status {result.exit_status})"
    return f"exited with status {result.returncode}"


def _write(path: str, text: str) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False,
                                 "help_option_names": ["-h", "--help"]},
               epilog="Exit code: the job's own (128 + N when a signal N ended it), 126/127 when the command "
                      "cannot be run or is not found, 2 usage error.")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.option("--report", "report_json", type=click.Path(dir_okay=False), default=None, metavar="FILE.json",
              help="when the job fails, also write the report as JSON here")
@click.option("--markdown", "report_md", type=click.Path(dir_okay=False), default=None, metavar="FILE.md",
              help="when the job fails, also write the report as markdown here")
@click.option("--retry", type=click.IntRange(0, 20), default=0, show_default=True, metavar="N",
              help="rerun a failed job at most N times with an environment-only fix the knowledge base marks safe")
@click.option("--grace", type=click.FloatRange(min=0), default=GRACE, show_default=True, metavar="SECONDS",
              help="after forwarding SIGINT/SIGTERM/SIGHUP, SIGKILL the job's process group if it is still running "
                   "this many seconds later (0: never); keep it below the scheduler's own kill delay")
@click.option("--framework", default=None, metavar="NAME", help="write fixes for this framework instead of the detected one")
@click.option("--kb", "kb_dirs", multiple=True, type=click.Path(exists=True, file_okay=False), metavar="DIR",
              help="extra knowledge-base directory (repeatable; also $OOMDOCTOR_KB)")
@click.option("--color/--no-color", default=None, help="colour the report (default: when stderr is a terminal, unless NO_COLOR)")
def run(command: tuple[str, ...], report_json: Optional[str], report_md: Optional[str], retry: int, grace: float,
        framework: Optional[str], kb_dirs: tuple[str, ...], color: Optional[bool]) -> None:
    """Run COMMAND (after --), pass its output through, and diagnose it if it fails.

    \b
    oomdoctor run -- torchrun --nproc_per_node 8 train.py --config cfg.yaml
    oomdoctor run --report oom.json --retry 1 -- python train.py

    Exits with the command's status (128+N when signal N ended it). A job that succeeds
    prints nothing extra.
    """
    argv = list(command)
    env = dict(os.environ)
    changes: dict[str, str] = {}
    attempts = []
    final = None                 # (report, result) of the last failed attempt
    result = None
    for number in range(1, retry + 2):
        try:
            result = run_once(argv, env=env if changes else None, grace=grace)
        except FileNotFoundError:
            _say(f"oomdoctor: {argv[0]}: command not found")
            sys.exit(127)
        except PermissionError:
            _say(f"oomdoctor: {argv[0]}: permission denied")
            sys.exit(126)
        result.env_changes = dict(changes)
        if not result.failed:
            attempts.append(attempt_record(number, result))
            break
        report = None
        try:
            kb = None
            if kb_dirs:
                from ..kb.knowledge import load_knowledge
                kb = load_knowledge(list(kb_dirs))
            report = diagnose_result(result, knowledge=kb, framework=framework)
        except Exception as exc:  # noqa: BLE001 - the job's status matters more than our report
            _say(f"oomdoctor: could not diagnose the failure ({type(exc).__name__}: {str(exc)[:200]})")
        attempts.append(attempt_record(number, result, report))
        if report is not None:
            final = (report, result)
        if report is None or number > retry or result.forwarded or result.output_closed:
            break
        nxt = next_env_change(report, env)
        if nxt is None:
            break
        rem, change = nxt
        said = ", ".join(f"{k}={v}" + (f" (was {env[k]})" if env.get(k) else " (was unset)") for k, v in change.items())
        _say(f"oomdoctor: attempt {number} {_describe(result)}: {report.top.incident}. "
             f"Retrying with {said}: {rem.title} (only the environment changes)")
        env.update(change)
        changes.update(change)
    assert result is not None
    if final is not None:
        try:
            _finish(final[0], final[1], attempts, result, report_json, report_md, color)
        except Exception as exc:  # noqa: BLE001 - whatever happens here, exit with the job's status
            _say(f"oomdoctor: could not write the report ({type(exc).__name__}: {str(exc)[:200]})")
    sys.exit(result.exit_status)


def _interrupted(result: RunResult) -> Optional[str]:
    """The signal that stopped the job on purpose: one we forwarded, or SIGINT (Ctrl-C)."""
    forwarded = [s for s in result.forwarded if s in TERMINATING]
    if forwarded:
        return forwarded[0]
    if result.signal is not None and signal_name(result.signal) == "SIGINT" or result.exit_status == 130:
        return "SIGINT"
    return None


def _finish(report, failed: RunResult, attempts: list, last: RunResult, report_json: Optional[str],
            report_md: Optional[str], color: Optional[bool]) -> None:
    """Print the report of the last failed attempt (and the attempts), write the files."""
    from ..report.render import render, use_color
    from ..report.model import RunAttempt

    report.attempts = [RunAttempt(**a) for a in attempts]
    attempts = report.attempts
    try:
        interrupt = _interrupted(last)
        if interrupt:
            # a person's Ctrl-C or the scheduler's stop is why it ended: nothing to diagnose
            # on the terminal (the report files still record the run)
            _say(f"oomdoctor: the job was stopped by {interrupt}; not diagnosed")
        elif last.failed and not last.output_closed:
            text = render(report, "text", color=use_color(sys.stderr) if color is None else color)
            _say(f"\noomdoctor: {shlex.join(failed.argv)[:200]} {_describe(failed)}; diagnosis:")
            sys.stderr.write(text if text.endswith("\n") else text + "\n")
        if len(attempts) > 1:
            for a in attempts:
                env = " ".join(f"{k}={v}" for k, v in a.env_changes.items()) or "original environment"
                outcome = "succeeded" if a.exit_status == 0 else f"exit status {a.exit_status}" + (
                    f", {a.incident}" if a.incident else "")
                _say(f"oomdoctor: attempt {a.attempt} ({env}): {outcome}")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    if report_json:
        _write(report_json, render(report, "json"))
    if report_md:
        _write(report_md, render(report, "markdown"))
