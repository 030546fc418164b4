"""Text that someone else chose (file names, YAML keys, log lines) never drives the terminal and
never breaks the output: escape sequences are removed whole, names that are not UTF-8 are shown
with U+FFFD, in every format, whatever the encoding of stdout."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from oomdoctor import cli
from oomdoctor.cli import main
from oomdoctor.kb.knowledge import shipped_dir
from oomdoctor.report.common import clean
from oomdoctor.report.fleet_html import render_fleet_html

EXAMPLE = Path(__file__).parent / "fixtures" / "logs" / "example-zero3-save.log"
OSC = "\x1b]0;PWNED\x07"          # sets the terminal's title
needs_bytes_names = pytest.mark.skipif(sys.platform in ("darwin", "win32"),
                                       reason="the file system must take names that are not UTF-8")


def oomdoctor(*args: str, env: dict | None = None, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "oomdoctor", *args], capture_output=True, cwd=cwd,
                          env={**os.environ, **(env or {})}, timeout=120, check=False)


def _no_controls(data: bytes) -> None:
    assert b"\x1b" not in data and b"\x07" not in data, data[:400]


# -- the sanitiser -------------------------------------------------------------------------------

@pytest.mark.parametrize("raw,shown", [
    ("a\x1b[31mred\x1b[0m b", "ared b"),                 # whole CSI sequences, no "[31m" left
    ("x" + OSC + "y", "xy"),                            # OSC ended by BEL
    ("x\x1b]0;T\x1b\\y", "xy"),                         # OSC ended by ST
    ("\x9b31mz", "z"),                                  # 8-bit CSI
    ("\x07\x7f\x85q", "q"),                             # other controls, DEL, C1
    ("bad\udcffname", "bad\ufffdname"),                 # a byte that is not UTF-8 (os.fsdecode)
    ("plain text, ünïcode", "plain text, ünïcode"),
])
def test_clean_removes_whole_sequences_and_surrogates(raw, shown):
    assert clean(raw) == shown
    clean(raw).encode("utf-8")                          # never a UnicodeEncodeError


def test_clean_keeps_newlines_and_tabs_unless_asked():
    assert clean("a\tb\nc") == "a    b\nc"
    assert clean("a\tb\nc", oneline=True, tabs=False) == "a\tbc"


# -- file names that are not UTF-8 (finding: internal errors) ------------------------------------

@pytest.fixture
def bad_name(tmp_path) -> str:
    name = os.fsdecode(b"bad\xff.log")
    try:
        shutil.copy(EXAMPLE, tmp_path / name)
    except (OSError, UnicodeEncodeError):
        pytest.skip("the file system does not take this name")
    return name


@needs_bytes_names
def test_json_of_a_name_that_is_not_utf8(tmp_path, bad_name):
    p = oomdoctor("diagnose", "-f", "json", bad_name, cwd=tmp_path)
    assert p.returncode == 1, p.stderr
    assert json.loads(p.stdout)["source"] == "bad\ufffd.log"


@needs_bytes_names
def test_json_of_two_files_one_not_utf8(tmp_path, bad_name):
    shutil.copy(EXAMPLE, tmp_path / "ok.log")
    p = oomdoctor("diagnose", "-f", "json", bad_name, "ok.log", cwd=tmp_path)
    assert p.returncode == 1, p.stderr
    assert "\ufffd" in json.loads(p.stdout)["source"]


@needs_bytes_names
def test_per_file_json_of_a_name_that_is_not_utf8(tmp_path, bad_name):
    p = oomdoctor("diagnose", "--per-file", "-f", "json", bad_name, cwd=tmp_path)
    assert p.returncode == 1, p.stderr
    assert json.loads(p.stdout)[0]["source"] == "bad\ufffd.log"


@needs_bytes_names
@pytest.mark.parametrize("fmt", ["text", "markdown", "html"])
def test_verbose_reports_on_a_strict_stdout(tmp_path, bad_name, fmt):
    p = oomdoctor("diagnose", "-v", "-f", fmt, bad_name, cwd=tmp_path, env={"PYTHONIOENCODING": "utf-8:strict"})
    assert p.returncode == 1, p.stderr
    assert b"internal error" not in p.stderr


def test_fleet_page_of_names_that_are_not_utf8():
    page = render_fleet_html({"logs": 2, "failures": 1, "errors": 1, "source": "res\udcff.jsonl",
                              "kinds": {"cuda\udcff": 1},
                              "errors_examples": [{"path": "bad\udcff.log" + OSC, "error": "unreadable"}]})
    page.encode("utf-8")                                # strict: no lone surrogate left
    assert "bad\ufffd.log" in page and "\x1b" not in page


def test_fleet_page_numbers_are_numbers():
    """Counts are written as integers, never as whatever the dict holds."""
    page = render_fleet_html({"logs": 3.0, "failures": 1, "clean": 2, "errors": 0,
                              "by_month": [{"month": "2026-01", "logs": 3, "failures": 1.0, "errors": 0}]})
    assert '<b id="logs">3</b>' in page
    with pytest.raises((TypeError, ValueError)):
        render_fleet_html({"logs": "<script>alert(1)</script>"})


# -- escape sequences from names and YAML (finding: raw to the terminal) -------------------------

def test_an_input_error_naming_a_file_is_printable(tmp_path):
    p = oomdoctor("diagnose", str(tmp_path / (OSC + ".log")))
    assert p.returncode == 2
    _no_controls(p.stderr)
    assert b".log: no such file" in p.stderr


def test_per_file_markdown_heading_is_printable(tmp_path):
    name = tmp_path / ("\x1b[31mred" + OSC + ".log")
    shutil.copy(EXAMPLE, name)
    for fmt in ("markdown", "text"):
        p = oomdoctor("diagnose", "--per-file", "-f", fmt, str(name))
        assert p.returncode == 1, p.stderr
        _no_controls(p.stdout)
        assert b"red.log" in p.stdout                   # the name, less its escape sequences


@pytest.fixture
def hostile_kb(tmp_path) -> Path:
    """A team's incident with a key that sets the terminal's title: not loaded, and linted."""
    text = (shipped_dir() / "alloc-fragmentation.yaml").read_text(encoding="utf-8")
    (tmp_path / "alloc-fragmentation.yaml").write_text('"\\e]0;T\\a": 1\n' + text, encoding="utf-8")
    return tmp_path


def test_kb_lint_lines_are_printable(hostile_kb):
    result = CliRunner().invoke(main, ["kb", "lint", "--no-shipped", str(hostile_kb)])
    assert result.exit_code == 1, result.output
    assert "unknown key" in result.output
    _no_controls(result.output.encode())


def test_skipped_knowledge_file_warning_is_printable(hostile_kb):
    p = oomdoctor("kb", "list", "--kb", str(hostile_kb))
    assert p.returncode == 0, p.stderr
    assert b"knowledge file skipped" in p.stderr
    _no_controls(p.stderr)


# -- kb facts and --per-file ---------------------------------------------------------------------

def test_kb_facts_closes_the_log(monkeypatch):
    from oomdoctor.read import reader
    opened = []
    real = reader.open_source

    def tracked(src):
        stream, name = real(src)
        opened.append(stream)
        return stream, name

    monkeypatch.setattr(reader, "open_source", tracked)
    result = CliRunner().invoke(main, ["kb", "facts", str(EXAMPLE)])
    assert result.exit_code == 0, result.output
    assert opened and all(s.closed for s in opened)


def test_per_file_never_falls_through_to_a_merged_report(monkeypatch):
    """diagnose --per-file hands over to _diagnose_per_file and ends there, whether or not it exits."""
    calls = []
    monkeypatch.setattr(cli, "_diagnose_per_file", lambda *a, **k: calls.append(a))
    from oomdoctor import pipeline
    monkeypatch.setattr(pipeline, "diagnose_many", lambda *a, **k: pytest.fail("merged report built"))
    result = CliRunner().invoke(main, ["diagnose", "--per-file", str(EXAMPLE), str(EXAMPLE)])
    assert result.exit_code == 0, result.output
    assert len(calls) == 1 and result.output == ""
