"""The terminal output drawn by rich: the report, its colours, the pager, ``kb show``, and
scan's progress bar and summary tables; and that nothing of it reaches a pipe.

The tmux tests run the real CLI in a real terminal (a detached tmux pane of 60 and 120
columns) and read back what the screen shows.
"""
from __future__ import annotations

import io
import itertools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from oomdoctor.kb.knowledge import default_knowledge
from oomdoctor.pipeline import diagnose_source
from oomdoctor.report.render import (
    page,
    pager_command,
    use_color,
    use_rich,
    wants_pager,
)
from oomdoctor.report.terminal import markdown_for_terminal, render_terminal
from oomdoctor.report.text import render_text
from oomdoctor.scan.progress import Progress
from oomdoctor.scan.summary import Summary, failure_kind

LOGS = Path(__file__).parent / "fixtures" / "logs"
EXAMPLE = LOGS / "example-zero3-save.log"          # the README's example (diagnose --example)
SEEDS = sorted(p.name for p in LOGS.glob("seed-*.log"))
ESC = re.compile(r"\x1b\[")
SGR = re.compile(r"\x1b\[[0-9;]*m")
COLOR_ENV = ("NO_COLOR", "FORCE_COLOR", "TERM", "COLUMNS", "LINES", "PAGER", "OOMDOCTOR_PAGER", "LESS",
             "TTY_COMPATIBLE", "TTY_INTERACTIVE")


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def clean_env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in COLOR_ENV}
    env.update(extra)
    return env


def cli(*args: str, env: dict | None = None, stdin=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "oomdoctor", *args], capture_output=True, timeout=300,
                          env=env if env is not None else clean_env(), stdin=stdin, check=False)


@pytest.fixture(scope="module")
def example_report():
    return diagnose_source(str(EXAMPLE), knowledge=default_knowledge())


# -- when rich draws, and colour ------------------------------------------------------------------

@pytest.mark.parametrize("env,tty,color,rich", [
    ({}, True, True, True),
    ({}, False, False, False),
    ({"NO_COLOR": "1"}, True, False, True),                 # layout stays, colour goes
    ({"NO_COLOR": ""}, True, True, True),                   # empty: not set (no-color.org)
    ({"FORCE_COLOR": "1"}, False, True, True),              # force-color.org: a pipe gets colour
    ({"FORCE_COLOR": ""}, False, False, False),
    ({"FORCE_COLOR": "1", "NO_COLOR": "1"}, False, False, True),   # NO_COLOR wins for colour
    ({"TERM": "dumb"}, True, False, False),                 # a dumb terminal gets the plain text
    ({"TERM": "dumb", "FORCE_COLOR": "1"}, True, True, True),
])
def test_no_color_force_color_and_term_dumb(monkeypatch, env, tty, color, rich):
    for key in ("NO_COLOR", "FORCE_COLOR", "TERM"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    stream = FakeTTY() if tty else io.StringIO()
    assert use_color(stream) is color
    assert use_rich(stream) is rich


def test_a_pipe_gets_todays_plain_text_and_never_imports_rich(example_report):
    p = subprocess.run([sys.executable, "-X", "importtime", "-m", "oomdoctor", "diagnose", str(EXAMPLE)],
                       capture_output=True, timeout=300, env=clean_env(), check=False)
    assert p.returncode == 1, p.stderr
    imported = {ln.split("|")[-1].strip() for ln in p.stderr.decode().splitlines() if ln.startswith("import time:")}
    assert not any(m == "rich" or m.startswith("rich.") for m in imported)
    assert p.stdout.decode() == render_text(example_report, width=120)   # unchanged text (no COLUMNS: 120)
    assert not ESC.search(p.stdout.decode())


def test_force_color_draws_the_terminal_report_into_a_pipe():
    p = cli("diagnose", str(EXAMPLE), env=clean_env(FORCE_COLOR="1", COLUMNS="80"))
    out = p.stdout.decode()
    assert p.returncode == 1 and ESC.search(out) and "╭─" in out
    plain = cli("diagnose", str(EXAMPLE), env=clean_env(FORCE_COLOR="1", NO_COLOR="1", COLUMNS="80")).stdout.decode()
    assert "╭─" in plain and not ESC.search(plain)
    assert cli("diagnose", "--no-color", str(EXAMPLE), env=clean_env(FORCE_COLOR="1")).stdout.decode().count("\x1b[") == 0


# -- the report as rich draws it ------------------------------------------------------------------

def _is_knob(line: str) -> bool:
    # knobs and "other stacks" lines are printed verbatim (never cut): the terminal folds them
    return line.startswith(" " * 6)


@pytest.mark.parametrize("fixture", SEEDS, ids=[s[5:-4] for s in SEEDS])
def test_the_default_terminal_report_fits_one_screen(fixture):
    report = diagnose_source(str(LOGS / fixture), knowledge=default_knowledge())
    out = render_terminal(report, width=100)
    lines = out.splitlines()
    assert len(lines) <= 40, out
    assert all(len(ln) <= 100 or _is_knob(ln) for ln in lines), out
    assert "-v for the full report" in out and not ESC.search(out)
    first = min((r for r in report.diagnoses[0].remediations if r.applicable), key=lambda r: r.rank)
    assert " ".join(first.title.split())[:40] in " ".join(out.split())
    for width in (60, 120):
        narrow = render_terminal(report, width=width).splitlines()
        assert all(len(ln) <= width or _is_knob(ln) for ln in narrow), "\n".join(narrow)
        _assert_boxes_whole(narrow)
    full = render_terminal(report, width=100, verbose=True)
    assert len(full.splitlines()) > len(lines) and "Fixes, best first" in full


def test_colour_only_when_asked(example_report):
    assert not ESC.search(render_terminal(example_report, width=80, color=False))
    coloured = render_terminal(example_report, width=80, color=True)
    assert "\x1b[1;31mOOM" in coloured                     # the verdict in bold red
    bare = [SGR.sub("", ln) for ln in coloured.splitlines()]
    assert all(len(ln) <= 80 or _is_knob(ln) for ln in bare)
    assert "\n".join(bare) == render_terminal(example_report, width=80, color=False).rstrip("\n")


def test_log_text_is_never_markup_or_escapes():
    text = "[bold]x[/] :smile: \x1b[2J\x1b]0;title\x07 [rank3]: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    report = diagnose_source(text.encode())
    out = render_terminal(report, width=100, verbose=True)
    assert "\x1b" not in out and "\x07" not in out
    assert "[bold]x[/] :smile:" in out                 # shown as written: no markup, no emoji


def _assert_boxes_whole(lines: list[str]) -> None:
    """Every box drawn whole: a top, sides on every row, a bottom, all of one width."""
    inside, width = False, 0
    for ln in lines:
        s = ln.rstrip()
        if s.startswith("╭"):
            assert not inside and s.endswith("╮"), ln
            inside, width = True, len(s)
        elif s.startswith("╰"):
            assert inside and s.endswith("╯") and len(s) == width, ln
            inside = False
        elif inside and s.startswith("├"):
            assert s.endswith("┤") and len(s) == width, ln
        elif inside:
            assert s.startswith("│") and s.endswith("│") and len(s) == width, ln
        else:
            assert "│" not in s and "╮" not in s and "╯" not in s, ln
    assert not inside


# -- the pager ------------------------------------------------------------------------------------

def test_pager_flag_pipes_the_report_through_pager():
    if shutil.which("sed") is None:
        pytest.skip("no sed to stand in for a pager")
    plain = cli("diagnose", str(EXAMPLE)).stdout.decode()
    p = cli("diagnose", "--pager", str(EXAMPLE), env=clean_env(PAGER="sed s/^/PAGED:/"))
    assert p.returncode == 1
    assert p.stdout.decode() == "".join("PAGED:" + ln + "\n" for ln in plain.splitlines())
    # cat, an empty PAGER, or a pager that is not installed: the text as it is
    for pager in ("cat", "", "no-such-pager-oomdoctor -R"):
        assert cli("diagnose", "--pager", str(EXAMPLE), env=clean_env(PAGER=pager)).stdout.decode() == plain
    # never on its own into a pipe, however long
    long = cli("diagnose", "-v", str(EXAMPLE), env=clean_env(PAGER="sed s/^/PAGED:/", LINES="5")).stdout.decode()
    assert "PAGED:" not in long


def test_less_as_the_pager_when_there_is_one():
    if shutil.which("less") is None:
        pytest.skip("less is not installed")
    plain = cli("diagnose", str(EXAMPLE)).stdout.decode()
    p = cli("diagnose", "--pager", str(EXAMPLE), env=clean_env())     # $PAGER unset: less -FRX
    assert p.returncode == 1 and p.stdout.decode() == plain            # less into a pipe passes it on


def test_auto_pager_only_on_a_terminal_taller_than_the_screen(monkeypatch):
    monkeypatch.delenv("TERM", raising=False)
    monkeypatch.setenv("LINES", "10")
    monkeypatch.setenv("COLUMNS", "80")
    tall, short = "x\n" * 10, "x\n" * 9
    assert wants_pager(tall, None, FakeTTY()) and not wants_pager(short, None, FakeTTY())
    assert not wants_pager(tall * 100, None, io.StringIO())          # a pipe, never
    assert wants_pager(short, True, io.StringIO()) and not wants_pager(tall, False, FakeTTY())
    monkeypatch.setenv("TERM", "dumb")
    assert not wants_pager(tall, None, FakeTTY())


def test_pager_command_as_git_picks_it(monkeypatch):
    monkeypatch.delenv("OOMDOCTOR_PAGER", raising=False)
    monkeypatch.setenv("PAGER", "cat")
    assert pager_command() is None
    monkeypatch.setenv("PAGER", "definitely-not-a-pager-here")
    assert pager_command() is None
    out = io.StringIO()
    page("text\n", out)                                                # absent pager: written as is
    assert out.getvalue() == "text\n"
    if shutil.which("sh"):
        monkeypatch.setenv("OOMDOCTOR_PAGER", "sh -c cat")
        assert pager_command() == "sh -c cat"
    monkeypatch.delenv("OOMDOCTOR_PAGER")
    monkeypatch.delenv("PAGER")
    assert pager_command() == ("less" if shutil.which("less") else None)


# -- kb show --------------------------------------------------------------------------------------

def test_kb_show_renders_markdown_on_a_terminal_and_passes_it_through_a_pipe():
    # the markdown as the library writes it, read in a fresh process like the CLI's
    code = ("from oomdoctor.kb.docs import incident_markdown; "
            "from oomdoctor.kb.knowledge import default_knowledge; "
            "print(incident_markdown(default_knowledge().get('ckpt-save-gather')), end='')")
    md = subprocess.run([sys.executable, "-c", code],
                        capture_output=True, text=True, timeout=300, env=clean_env(), check=True).stdout
    piped = cli("kb", "show", "ckpt-save-gather")
    assert piped.returncode == 0 and piped.stdout.decode() == md + "\n"            # unchanged
    drawn = cli("kb", "show", "ckpt-save-gather", env=clean_env(FORCE_COLOR="1", COLUMNS="80")).stdout.decode()
    assert ESC.search(drawn) and "```" not in drawn
    plain = markdown_for_terminal(md, color=False, width=80)
    assert not ESC.search(plain) and "```" not in plain and "ckpt-save-gather" in plain
    assert all(len(ln) <= 80 for ln in plain.splitlines())


# -- scan: the progress bar and the summary -------------------------------------------------------

def test_progress_bar_on_stderr_never_touches_stdout(monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")
    before = sys.stdout
    tty = FakeTTY()
    bar = Progress(2, 2000, stream=tty, interval=0)
    assert sys.stdout is before                     # not redirected: records stay records
    bar.advance(1, 1000, name="/logs/a.log")
    bar.close()
    assert sys.stdout is before
    out = tty.getvalue()
    assert "1/2 files" in out and "a.log" in out
    assert out.endswith("\x1b[2K")                  # transient: the bar's line erased on exit


def test_progress_bar_cleared_on_ctrl_c():
    tty = FakeTTY()
    with pytest.raises(KeyboardInterrupt):
        bar = Progress(3, 3000, stream=tty, interval=0)
        try:
            bar.advance(1, 1000)
            raise KeyboardInterrupt
        finally:
            bar.close()
    assert tty.getvalue().endswith("\x1b[2K") and "\x1b[?25h" in tty.getvalue()   # erased, cursor back
    bar.close()                                     # twice is harmless


def test_progress_is_off_when_piped_or_dumb(monkeypatch):
    assert not Progress(1, 1, stream=io.StringIO()).enabled
    monkeypatch.setenv("TERM", "dumb")
    assert not Progress(1, 1, stream=FakeTTY()).enabled
    assert Progress(1, 1, stream=FakeTTY(), enabled=True).enabled


def test_scan_progress_forced_goes_to_stderr_and_records_stay_clean(tmp_path):
    out = tmp_path / "r.jsonl"
    p = cli("scan", *(str(LOGS / s) for s in SEEDS), "--progress", "-j", "1", "--no-summary")
    recs = [json.loads(line) for line in p.stdout.decode().splitlines()]        # every line a record
    assert len(recs) == len(SEEDS) and "\x1b" not in p.stdout.decode()
    assert f"{len(SEEDS)}/{len(SEEDS)} files" in p.stderr.decode()
    p = subprocess.run([sys.executable, "-X", "importtime", "-m", "oomdoctor", "scan", str(LOGS / SEEDS[0]),
                        "-o", str(out)], capture_output=True, timeout=300, env=clean_env(), check=False)
    assert not any(ln.split("|")[-1].strip().startswith("rich") for ln in p.stderr.decode().splitlines()
                   if ln.startswith("import time:"))


def test_summary_tables(tmp_path):
    stats = Summary()
    for name in SEEDS:
        rep = json.loads(diagnose_source(str(LOGS / name)).model_dump_json())
        stats.add({"path": f"/logs/{name}", **rep})
    stats.add({"path": "/logs/\x1b[31mbad.log", "error": "not readable"})
    buf = io.StringIO()
    stats.print_tables(buf, top=2, width=60)
    text = buf.getvalue()
    for title in ("Failures by kind", "Top incidents", "Top fingerprints", "Unreadable"):
        assert title in text
    assert "cuda_caching_allocator" in text and "\x1b" not in text and "bad.log" in text
    assert all(len(ln) <= 60 for ln in text.splitlines())
    assert "more incidents (--top)" in text
    assert stats.kinds["cuda_caching_allocator"] >= 3
    assert failure_kind({"failures": [{"kind": "nccl_timeout", "secondary": False}]}) == "nccl_timeout"
    assert stats.render(top=2).startswith(f"scanned {len(SEEDS) + 1} logs")       # the text summary is kept


# -- in a real terminal ---------------------------------------------------------------------------

DONE = "__oomdoctor_test_done__"
_SOCKETS = itertools.count()


def _tmux(tmp_path: Path, command: str, width: int, height: int = 50, escapes: bool = False,
          ctrl_c_after: str | None = None, **env: str) -> str:
    """What a ``width`` x ``height`` terminal shows after ``command`` ran in it (and, with
    ``ctrl_c_after``, was interrupted with Ctrl-C once that text showed)."""
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed: the real-terminal checks need it")
    sock = str(tmp_path / f"tmux-{next(_SOCKETS)}.sock")
    unset = " ".join(f"-u {k}" for k in COLOR_ENV)
    sets = " ".join(f"{k}={shlex.quote(v)}" for k, v in {"TERM": "xterm-256color", **env}.items())
    # Ctrl-C reaches the shell that runs the script too: dash (a /bin/sh, the shell tmux
    # starts where the user's is not set) dies of it and takes the pane with it, unless the
    # signal is trapped (a trap, unlike an ignored signal, is not passed on to the command)
    trap = "trap : INT; " if ctrl_c_after is not None else ""
    script = f"{trap}env {unset} {sets} {command}; echo {DONE} $?; sleep 60"
    base = ["tmux", "-S", sock, "-f", "/dev/null"]
    subprocess.run([*base, "new-session", "-d", "-x", str(width), "-y", str(height), script],
                   check=True, timeout=30, env=clean_env())
    try:
        deadline = time.monotonic() + 120
        while True:
            shown = subprocess.run([*base, "capture-pane", "-p", "-J", *(["-e"] if escapes else [])],
                                   capture_output=True, text=True, timeout=30, check=False).stdout
            if DONE in shown or time.monotonic() > deadline:
                break
            if ctrl_c_after is not None and ctrl_c_after in shown:
                subprocess.run([*base, "send-keys", "C-c"], check=True, timeout=30)
                ctrl_c_after = None
            time.sleep(0.1 if ctrl_c_after else 0.2)
        assert DONE in shown, shown or "the pane closed before the command ended"
        cut = subprocess.run([*base, "capture-pane", "-p"], capture_output=True, text=True, timeout=30,
                             check=False).stdout
    finally:
        subprocess.run([*base, "kill-server"], capture_output=True, timeout=30, check=False)
    assert all(len(ln) <= width for ln in cut.splitlines()), cut
    return shown.split(DONE)[0]


def _cmd(*args: str) -> str:
    return " ".join(shlex.quote(a) for a in (sys.executable, "-m", "oomdoctor", *args))


@pytest.mark.parametrize("width", [60, 120])
def test_the_report_in_a_real_terminal(tmp_path, example_report, width):
    shown = _tmux(tmp_path, _cmd("diagnose", str(EXAMPLE)), width)
    lines = shown.rstrip("\n").splitlines()
    # -J joins what the terminal folded: only a knob (kept whole to be copied) may be longer
    assert all(len(ln.rstrip()) <= width or _is_knob(ln) for ln in lines), shown
    flat = " ".join(shown.split())
    assert flat.startswith("OOM: Out of memory while saving a checkpoint"), shown
    top = example_report.diagnoses[0]
    first = min((r for r in top.remediations if r.applicable), key=lambda r: r.rank)
    assert "First fix" in shown and " ".join(first.title.split()) in flat, shown
    assert "The numbers" in shown and "Evidence" in shown
    _assert_boxes_whole([ln for ln in lines if not _is_knob(ln)])
    assert "-v for the full report" in flat


def test_auto_pager_in_a_real_terminal(tmp_path):
    if shutil.which("sed") is None:
        pytest.skip("no sed to stand in for a pager")
    pager = "sed s/^/PAGED:/"
    long = _tmux(tmp_path, _cmd("diagnose", "-v", str(EXAMPLE)), 100, 30, PAGER=pager)
    assert "PAGED:" in long                                             # taller than the screen
    short = _tmux(tmp_path, _cmd("diagnose", str(EXAMPLE)), 100, 60, PAGER=pager)
    assert "PAGED:" not in short and "First fix" in short              # one screen: no pager
    off = _tmux(tmp_path, _cmd("diagnose", "-v", "--no-pager", str(EXAMPLE)), 100, 30, PAGER=pager)
    assert "PAGED:" not in off


def test_term_dumb_and_no_color_in_a_real_terminal(tmp_path):
    dumb = _tmux(tmp_path, _cmd("diagnose", str(EXAMPLE)), 100, 60, TERM="dumb")
    assert "╭" not in dumb and "The numbers" in dumb                    # the plain text report
    coloured = _tmux(tmp_path, _cmd("diagnose", str(EXAMPLE)), 100, 60, escapes=True)
    assert ESC.search(coloured) and "╭" in coloured
    grey = _tmux(tmp_path, _cmd("diagnose", str(EXAMPLE)), 100, 60, escapes=True, NO_COLOR="1")
    assert not ESC.search(grey) and "╭" in grey                         # the layout, no colour


def test_scan_on_a_terminal_prints_tables_not_records(tmp_path):
    shown = _tmux(tmp_path, _cmd("scan", "-j", "1", *(str(LOGS / s) for s in SEEDS)), 60, 100)
    assert "Failures by kind" in shown and "Top incidents" in shown, shown
    assert '{"path"' not in shown and " files " not in shown, shown     # no records, no bar left over
    assert f"scanned {len(SEEDS)} logs" in shown
    _assert_boxes_whole(shown.splitlines())
    assert all(len(ln.rstrip()) <= 60 for ln in shown.splitlines()), shown
    # (one record is some 30 KB: a pane tall enough to keep all of it)
    records = _tmux(tmp_path, _cmd("scan", "-j", "1", "-f", "jsonl", str(LOGS / SEEDS[0])), 200, 300)
    assert '"framework":"axolotl"' in records                        # an explicit --format: records
    dumb = _tmux(tmp_path, _cmd("scan", "-j", "1", str(LOGS / SEEDS[0])), 100, TERM="dumb")
    assert "incidents:" in dumb and "╭" not in dumb and '"framework"' not in dumb   # the plain summary


def test_ctrl_c_clears_the_scan_progress_bar_in_a_real_terminal(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    data = (LOGS / SEEDS[0]).read_bytes()
    for i in range(1500):      # far more than a scan gets through before the Ctrl-C
        (logs / f"job{i:04d}.log").write_bytes(data)
    shown = _tmux(tmp_path, _cmd("scan", "-j", "2", str(logs)), 100, 30, ctrl_c_after=" files ")
    if "interrupted" not in shown:
        pytest.skip("the scan ended before the Ctrl-C reached it")
    assert " files " not in shown and "ETA" not in shown, shown         # the bar is gone
    assert "Traceback" not in shown and "ForkPoolWorker" not in shown, shown
    assert shown.strip().splitlines()[-1] == "oomdoctor: interrupted", shown


# -- one layout, two back ends; one fallback size; the pager's input -------------------------------

@pytest.mark.parametrize("verbose", [False, True])
def test_plain_and_rich_reports_come_from_the_same_sections(example_report, verbose):
    """text.py and terminal.py lay out sections.py's blocks: the same headings in the same order."""
    from oomdoctor.report.sections import EvidenceLines, Heading, Rows, sections
    heads = [b.title if isinstance(b, Rows) else "Evidence" if isinstance(b, EvidenceLines) else b.text
             for b in sections(example_report, verbose=verbose) if isinstance(b, (Heading, Rows, EvidenceLines))]
    assert heads and (not verbose or "Fixes, best first" in heads)
    plain = render_text(example_report, verbose=verbose, width=100)
    rich = render_terminal(example_report, verbose=verbose, width=100)
    for out in (plain, rich):
        at = [out.index(h) for h in heads]
        assert at == sorted(at), heads


def test_render_draws_the_terminal_report_when_asked(example_report):
    from oomdoctor.report.render import render
    assert (render(example_report, "text", color=False, terminal=True, verbose=True)
            == render_terminal(example_report, color=False, verbose=True))
    assert render(example_report, "text") == render_text(example_report)
    assert render(example_report, "json", terminal=True) == render(example_report, "json")


def test_one_fallback_size_for_every_layout(monkeypatch, example_report):
    """Where the size is not known (no terminal, no COLUMNS/LINES), text, rich and the pager
    decision assume the same one."""
    seen = []
    real = shutil.get_terminal_size

    def spy(fallback=(80, 24)):
        seen.append(tuple(fallback))
        return real(fallback)

    monkeypatch.setattr(shutil, "get_terminal_size", spy)
    render_text(example_report)
    render_terminal(example_report)
    wants_pager("x\n", None, FakeTTY())
    assert len(seen) == 3 and len(set(seen)) == 1, seen


def test_pager_input_is_closed_when_the_pager_quits_early(monkeypatch):
    """A BrokenPipeError writing to the pager still closes its input (else it may wait for it)."""
    import subprocess as sp

    class Stdin:
        closed = False

        def write(self, data):
            raise BrokenPipeError

        def close(self):
            self.closed = True
            raise BrokenPipeError        # flushing what was left: never escapes either

    class Proc:
        def __init__(self, *a, **k):
            self.stdin = Stdin()
            made.append(self)

        def wait(self):
            return 0

    made: list = []
    monkeypatch.setenv("OOMDOCTOR_PAGER", sys.executable)
    monkeypatch.setattr(sp, "Popen", Proc)
    page("x\n" * 10, io.StringIO())
    assert made and made[0].stdin.closed
