"""Command line: ``oomdoctor diagnose | scan | summarize | run | kb | schema``.

Exit codes: 0 nothing failed (warnings only), 1 a failure was diagnosed, memory or not, 2
usage or input error. Errors are one line on stderr, never a traceback.
"""
from __future__ import annotations

import gc
import json
import os
import sys
from typing import Optional

import click

from . import __version__
from .report.render import page, render, use_color, use_rich, wants_pager
from .report.common import printable

FORMATS = ("text", "markdown", "json", "html")
# the exit codes of each command, shown under its --help
DIAGNOSE_EXIT = ("Exit code: 0 nothing failed (or only a warning of memory pressure), 1 a failure was "
                 "diagnosed, memory or not, 2 usage or input error.")
PLAIN_EXIT = "Exit code: 0 done, 2 usage or input error."
LINT_EXIT = "Exit code: 0 no problem (warnings allowed without --strict), 1 problems found, 2 usage error."
KB_DIR = click.Path(exists=True, file_okay=False)   # a --kb that does not exist is a usage error


class FrameworkChoice(click.ParamType):
    """A framework name, case-insensitive, with the aliases users type (llama_factory, HF)."""

    name = "framework"

    def convert(self, value, param, ctx):
        from .kb.frameworks import FRAMEWORKS, canonical_framework, suggest_framework
        if value is None:
            return None
        found = canonical_framework(str(value))
        if found is not None:
            return found
        near = suggest_framework(str(value))
        hint = f" Did you mean '{near}'?" if near else ""
        self.fail(f"'{value}' is not a framework oomdoctor writes fixes for.{hint} "
                  f"Choose from: {', '.join(FRAMEWORKS)}.", param, ctx)


def _version_text() -> str:
    """The version, the Python running it, and which optional speed-ups are active."""
    import importlib.util
    import platform
    parts = []
    for module, what in (("hyperscan", "Hyperscan prefilter"), ("ahocorasick_rs", "Aho-Corasick prefilter"),
                         ("isal", "ISA-L inflate"), ("zstandard", "zstd")):
        parts.append(f"{what}: {'yes' if importlib.util.find_spec(module) else 'no'}")
    return (f"oomdoctor {__version__} (Python {platform.python_version()} {platform.python_implementation()}; "
            + ", ".join(parts) + ")")


def _print_version(ctx: click.Context, _param, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        click.echo(_version_text())
        ctx.exit(0)


class OomdoctorGroup(click.Group):
    """Turns any unexpected exception into a one-line error and exit code 2."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException, SystemExit):
            raise
        except KeyboardInterrupt:
            click.echo("oomdoctor: interrupted", err=True)
            sys.exit(130)
        except BrokenPipeError:
            # output piped into head/less that closed early: not an error
            try:
                sys.stdout = open(os.devnull, "w")
            except OSError:
                pass
            sys.exit(0)
        except Exception as exc:  # noqa: BLE001 - the promise is: never a traceback
            from .kb.knowledge import KnowledgeError
            from .read.reader import InputError
            if isinstance(exc, (InputError, KnowledgeError)):
                # the message may hold a file name or a YAML key: made printable
                click.echo(f"oomdoctor: {printable(exc)}", err=True)
            else:
                msg = str(exc).splitlines()[0] if str(exc) else ""
                click.echo(f"oomdoctor: internal error: {type(exc).__name__}: {printable(msg[:300])} "
                           "(set OOMDOCTOR_DEBUG=1 for details)", err=True)
                if os.environ.get("OOMDOCTOR_DEBUG"):
                    import traceback
                    traceback.print_exc()
            sys.exit(2)


@click.group(cls=OomdoctorGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", "-V", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Show the version, the Python version and the optional speed-ups in use, then exit.")
def main() -> None:
    """Say what ran out of memory in a failed training job, why, and how to fix it."""
    if _is_program():
        from .read import cache
        cache.write_at_exit()   # the start-up cache: the program writes it, a library only reads it


def _load_kb(kb_dirs: tuple[str, ...]):
    from .kb.knowledge import default_knowledge, load_knowledge
    kb = load_knowledge(list(kb_dirs)) if kb_dirs else default_knowledge()
    for problem in kb.problems:
        click.echo(f"oomdoctor: warning: knowledge file skipped: {printable(problem)}", err=True)
    if _is_program():
        # what exists now (modules, models, the KB) lives as long as the command: the
        # collector need not walk it again each time parsing a log fills a generation (about
        # 15 ms of a 1 MB log's diagnose). Not in a caller's process (a test runner, a
        # notebook invoking the CLI), whose heap is not ours to freeze.
        gc.freeze()
    return kb


def _is_program() -> bool:
    """Is this process the oomdoctor program (the console script or ``python -m oomdoctor``),
    not another program that called the CLI's function?"""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is not None and spec.name == "oomdoctor.__main__":
        return True
    return os.path.basename(sys.argv[0] if sys.argv else "").lower() in ("oomdoctor", "oomdoctor.exe")


@main.command(epilog=DIAGNOSE_EXIT)
@click.argument("paths", nargs=-1, required=False)
@click.option("--format", "-f", "fmt", type=click.Choice(FORMATS, case_sensitive=False), default="text",
              show_default=True, help="Text for a terminal, markdown for an issue, json for tools, html for a page "
                   "with a picture of the device's memory.")
@click.option("--top", type=click.IntRange(min=1), default=None, help="show at most N diagnoses")
@click.option("--framework", default=None, metavar="NAME", type=FrameworkChoice(),
              help="write fixes for this framework (llamafactory, axolotl, xtuner, hf, trl, deepspeed, accelerate, fsdp, llama-cookbook, ...) instead of the detected one")
@click.option("--kb", "kb_dirs", multiple=True, type=KB_DIR, metavar="DIR",
              help="extra knowledge-base directory (repeatable; also $OOMDOCTOR_KB)")
@click.option("--color/--no-color", default=None, help="colour the text report (default: on a terminal, unless NO_COLOR)")
@click.option("--example", is_flag=True, help="diagnose the bundled example log")
@click.option("--verbose", "-v", is_flag=True,
              help="the full text report: why, every fix with the knobs of other stacks, environment, notes")
@click.option("--pager/--no-pager", default=None,
              help="show the report through $PAGER (less); default: when it is taller than the terminal")
@click.option("--per-file", is_flag=True,
              help="one report for each PATH instead of one for them all (files of different jobs): text and "
                   "markdown under a heading per file, json as a list of reports; not with --format html")
def diagnose(paths: tuple[str, ...], fmt: str, top: Optional[int], framework: Optional[str],
             kb_dirs: tuple[str, ...], color: Optional[bool], example: bool, verbose: bool,
             pager: bool | None, per_file: bool = False) -> None:
    """Diagnose a log (PATH, several PATHs of one job, or - for stdin; --per-file for
    several jobs)."""
    from .pipeline import diagnose_many

    if example:
        paths = paths + (str(example_log()),)
    if not paths:
        if sys.stdin.isatty():
            raise click.UsageError("give a log file, or pipe one in with '-'")
        paths = ("-",)
    if per_file and fmt == "html":
        raise click.UsageError("--per-file writes several reports and --format html one page: "
                               "run diagnose -f html once per file")
    kb = _load_kb(kb_dirs)
    if per_file:
        _diagnose_per_file(paths, fmt, kb, framework, top, color, verbose, pager)
        return                  # it exits; never a second, merged report
    report = diagnose_many(list(paths), knowledge=kb, framework=framework)
    _warn_unrelated(report)
    colored = use_color() if color is None else color
    # a terminal (or FORCE_COLOR): the text report drawn by rich; pipes get plain text
    out = render(report, fmt, top=top, color=colored, verbose=verbose, terminal=use_rich())
    _show(out, pager, colored)
    sys.exit(1 if report.found_anything else 0)


def _show(out: str, pager: Optional[bool], colored: bool) -> None:
    """Write ``out`` to stdout, ending in one newline, or through the pager when ``--pager``
    or the terminal's height asks for it (``wants_pager``)."""
    if not out.endswith("\n"):
        out += "\n"
    if wants_pager(out, pager):
        page(out)
    else:
        # click strips ANSI when stdout is not a TTY; --color (e.g. into `less -R`) must win
        click.echo(out, nl=False, color=colored or None)


def example_log():
    from pathlib import Path
    here = Path(__file__).resolve().parent
    for p in (here / "examples" / "example-zero3-save.log",
              here.parent.parent / "tests" / "fixtures" / "logs" / "example-zero3-save.log"):
        if p.exists():
            return p
    raise click.ClickException("the bundled example log is missing from this installation")


def _warn_unrelated(report) -> None:
    """Files of two different jobs diagnosed as one: said on stderr too, as the one-screen
    text report shows its notes only with -v."""
    from .pipeline import UNRELATED_NOTE
    for note in report.notes:
        if note.startswith(UNRELATED_NOTE):
            click.echo(f"oomdoctor: warning: {printable(note)}", err=True)


def _diagnose_per_file(paths, fmt: str, kb, framework, top, color, verbose: bool, pager) -> None:
    """``diagnose --per-file``: one report each, in the order given. Text and markdown put a
    heading with the file's name above each; JSON is one list of reports. Exit code 1 when
    any of them has a failure."""
    from .pipeline import diagnose_source
    reports = [diagnose_source(p, knowledge=kb, framework=framework) for p in paths]
    colored = use_color() if color is None else color
    if fmt == "json":
        out = "[\n" + ",\n".join(render(r, "json", top=top).rstrip("\n") for r in reports) + "\n]\n"
    else:
        parts = []
        for path, report in zip(paths, reports):
            name = report.source or ("<stdin>" if path == "-" else str(path))
            if fmt == "markdown":
                parts.append(f"# {printable(name)}\n\n" + render(report, fmt, top=top))
            else:
                body = render(report, fmt, top=top, color=colored, verbose=verbose, terminal=use_rich())
                head = f"==> {printable(name)} <=="
                parts.append((click.style(head, bold=True) if colored else head) + "\n\n" + body)
        out = "\n".join(p if p.endswith("\n") else p + "\n" for p in parts)
    _show(out, pager, colored)
    sys.exit(1 if any(r.found_anything for r in reports) else 0)


@main.command(epilog=PLAIN_EXIT)
@click.option("--record", is_flag=True,
              help="the schema of the JSON-lines records of 'oomdoctor scan' instead: report records and error records")
def schema(record: bool) -> None:
    """Print the JSON Schema of the report that diagnose --format json writes (--record: of
    one record of scan --format jsonl)."""
    if record:
        from .scan.records import record_json_schema
        click.echo(json.dumps(record_json_schema(), indent=2))
        return
    from .report.model import report_json_schema
    click.echo(json.dumps(report_json_schema(), indent=2))


@main.group()
def kb() -> None:
    """List, show and check the knowledge base."""


@kb.command("list", epilog=PLAIN_EXIT)
@click.option("--kb", "kb_dirs", multiple=True, type=KB_DIR, metavar="DIR")
def kb_list(kb_dirs: tuple[str, ...]) -> None:
    """One line per incident: id and title."""
    base = _load_kb(kb_dirs)
    width = max((len(i.id) for i in base), default=10)
    for inc in sorted(base, key=lambda i: i.id):
        tag = " (fallback)" if inc.fallback else ("" if inc.memory_failure else " (not a memory failure)")
        click.echo(printable(f"{inc.id:<{width}}  {inc.title}{tag}"))


@kb.command("show", epilog=PLAIN_EXIT)
@click.argument("incident_id")
@click.option("--kb", "kb_dirs", multiple=True, type=KB_DIR, metavar="DIR")
@click.option("--format", "-f", "fmt", type=click.Choice(("markdown", "yaml")), default="markdown")
def kb_show(incident_id: str, kb_dirs: tuple[str, ...], fmt: str) -> None:
    """Show one incident: mechanism, signals, remediations per framework."""
    base = _load_kb(kb_dirs)
    inc = base.get(incident_id)
    if inc is None:
        raise click.ClickException(f"no incident '{printable(incident_id)}' (see 'oomdoctor kb list')")
    if fmt == "yaml":
        click.echo(base.files[incident_id].read_text(encoding="utf-8"))
        return
    from .kb.docs import incident_markdown
    if use_rich():
        # on a terminal: the markdown rendered by rich; in a pipe: the markdown itself
        from .report.terminal import markdown_for_terminal
        colored = use_color()
        _show(markdown_for_terminal(incident_markdown(inc), color=colored), None, colored)
        return
    click.echo(incident_markdown(inc))


@kb.command("lint", epilog=LINT_EXIT)
@click.argument("dirs", nargs=-1, type=KB_DIR)
@click.option("--no-shipped", is_flag=True, help="check only the given directories")
@click.option("--strict", is_flag=True,
              help="warnings fail too (an incident without examples, a knob without a checked: note)")
def kb_lint(dirs: tuple[str, ...], no_shipped: bool, strict: bool) -> None:
    """Check knowledge-base files: one 'file:line:col: message' line per problem.

    Exit 0 when nothing fails (warnings are printed, and fail only with --strict),
    1 when a problem does, 2 on a usage error."""
    from .kb.lint import check, failing, format_problems
    from .report.common import clean
    if no_shipped and not dirs:
        raise click.UsageError("--no-shipped needs a directory to check")
    problems = check(list(dirs), include_shipped=not no_shipped)
    for line in format_problems(problems, strict):
        click.echo(clean(line, tabs=False))     # a YAML key or value may hold escape sequences
    if failing(problems, strict):
        sys.exit(1)
    click.echo("knowledge base OK" + (f" ({len(problems)} warning{'s' if len(problems) > 1 else ''}; "
                                      "--strict fails on them)" if problems else ""))


@kb.command("docs", epilog=PLAIN_EXIT)
@click.option("--out", type=click.Path(), default=None, help="write one markdown file per incident into this directory")
@click.option("--kb", "kb_dirs", multiple=True, type=KB_DIR, metavar="DIR")
def kb_docs(out: Optional[str], kb_dirs: tuple[str, ...]) -> None:
    """Generate the incident reference docs from the YAML."""
    from .kb.docs import index_markdown, write_docs
    base = _load_kb(kb_dirs)
    if out:
        for path in write_docs(base, out):
            click.echo(path)
    else:
        click.echo(index_markdown(base, full=True))


@kb.command("facts", epilog=PLAIN_EXIT)
@click.argument("path")
def kb_facts(path: str) -> None:
    """Print the named facts that incident conditions can test, for one log."""
    from .kb.table import fact_table
    from .pipeline import facts_from_view
    from .read.reader import open_source, read_view
    stream, name = open_source(path)
    try:
        view = read_view(stream, name)
        facts, _ = facts_from_view(view, name)
    finally:
        if name != "<stdin>":   # as diagnose does: the file (or URL) is closed, stdin is not
            stream.close()
    for key, value in sorted(fact_table(facts).items()):
        if value is not None and value != [] :
            click.echo(f"{key} = {value!r}")


def _register_optional_commands() -> None:
    """Commands that live beside their subsystem (scan, run, summarize)."""
    import importlib
    for module, attr in (("oomdoctor.scan.command", "scan"), ("oomdoctor.scan.command", "summarize"),
                         ("oomdoctor.wrap.command", "run")):
        try:
            mod = importlib.import_module(module)
        except ImportError as exc:
            if exc.name and exc.name.startswith("oomdoctor"):
                continue
            raise
        cmd = getattr(mod, attr, None)
        if isinstance(cmd, click.Command):
            main.add_command(cmd, attr)


_register_optional_commands()
