"""A results file is scan records and nothing else: `scan --resume` refuses a file of another
kind (text, a report of diagnose, the other format, a line that is no record) and leaves it
as it was; `summarize` stops at a line it cannot read, naming FILE:LINE, and leaves out only
the unfinished last record of a killed scan, with a warning."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from test_scan_inputs import CLEAN, failing_log

FIXTURES = Path(__file__).parent / "fixtures" / "logs"


def oomdoctor(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "oomdoctor", *args], capture_output=True, timeout=300)


def one_line_error(p: subprocess.CompletedProcess, *needles: str) -> str:
    assert p.returncode == 2, p.stderr
    err = p.stderr.decode().strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err and "internal error" not in err, err
    for needle in needles:
        assert needle in err, err
    return err


@pytest.fixture()
def logs(tmp_path: Path) -> Path:
    root = tmp_path / "logs"
    root.mkdir()
    (root / "a.log").write_bytes(failing_log())
    (root / "b.log").write_bytes(CLEAN)
    return root


REPORT = json.dumps({"schema_version": "1.2", "tool_version": "0.1.0", "diagnoses": []})


@pytest.mark.parametrize("content", [
    b"my notes\nmore\n",
    b"my notes without a newline",                  # one unfinished line that is no record
    (REPORT + "\n").encode(),                        # diagnose -f json of one line
    json.dumps(json.loads(REPORT), indent=2).encode() + b"\n",   # diagnose -f json as it prints
    b"\x00\x01binary\xff\n",
])
@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_resume_refuses_what_is_no_results_file_and_leaves_it(tmp_path: Path, logs: Path, content: bytes, fmt: str):
    out = tmp_path / "out"
    out.write_bytes(content)
    p = oomdoctor("scan", str(logs), "-o", str(out), "-f", fmt, "--resume")
    one_line_error(p, "no scan records")
    assert out.read_bytes() == content


def test_resume_refuses_a_file_with_a_line_that_is_no_record(tmp_path: Path, logs: Path):
    out = tmp_path / "r.jsonl"
    assert oomdoctor("scan", str(logs / "a.log"), "-o", str(out), "--no-summary").returncode == 1
    with open(out, "a") as fh:
        fh.write("garbage\n")
    before = out.read_bytes()
    one_line_error(oomdoctor("scan", str(logs), "-o", str(out), "--resume"), f"{out}:2", "no scan record")
    assert out.read_bytes() == before
    # the other format: refused, untouched
    one_line_error(oomdoctor("scan", str(logs), "-o", str(out), "-f", "csv", "--resume"), "--format jsonl")
    assert out.read_bytes() == before


def test_resume_still_drops_the_first_record_of_a_killed_scan(tmp_path: Path, logs: Path):
    out = tmp_path / "r.jsonl"
    out.write_text('{"path":"' + str(logs / "a.log") + '","size":12')   # killed while writing it
    p = oomdoctor("scan", str(logs), "-o", str(out), "--resume", "--no-summary")
    assert p.returncode == 1, p.stderr
    assert [json.loads(line)["path"].rsplit("/", 1)[-1] for line in out.read_text().splitlines()] == ["a.log", "b.log"]


def test_summarize_names_the_line_it_cannot_read(tmp_path: Path, logs: Path):
    out = tmp_path / "r.jsonl"
    oomdoctor("scan", str(logs), "-o", str(out), "--no-summary")
    lines = out.read_text().splitlines(keepends=True)
    for bad in ("garbage\n", "[1, 2]\n", '{"no": "path"}\n'):
        damaged = tmp_path / "damaged.jsonl"
        damaged.write_text(lines[0] + bad + lines[1])
        one_line_error(oomdoctor("summarize", str(damaged)), f"{damaged}:2", "not a scan record")
    text = tmp_path / "notes.txt"
    text.write_text("just notes\n")
    one_line_error(oomdoctor("summarize", str(text), "-f", "json"), f"{text}:1")
    report = tmp_path / "report.json"
    report.write_bytes(oomdoctor("diagnose", "-f", "json", str(logs / "a.log")).stdout)
    one_line_error(oomdoctor("summarize", str(report)), f"{report}:1")
    blank = tmp_path / "blank-lines.jsonl"      # blank lines are no damage
    blank.write_text(lines[0] + "\n\n" + lines[1])
    assert oomdoctor("summarize", str(blank)).returncode == 1


def test_summarize_leaves_out_the_unfinished_last_record_with_a_warning(tmp_path: Path, logs: Path):
    out = tmp_path / "r.jsonl"
    oomdoctor("scan", str(logs), "-o", str(out), "--no-summary")
    with open(out, "a") as fh:
        fh.write('{"path":"/x/c.log","size":1')
    p = oomdoctor("summarize", str(out))
    assert p.returncode == 1, p.stderr
    assert "scanned 2 logs" in p.stdout.decode()
    err = p.stderr.decode()
    assert f"{out}:3" in err and "unfinished" in err and len(err.strip().splitlines()) == 1


def test_summarize_of_a_damaged_csv_names_the_line(tmp_path: Path, logs: Path):
    out = tmp_path / "r.csv"
    oomdoctor("scan", str(logs), "-o", str(out), "-f", "csv", "--no-summary")
    lines = out.read_text().splitlines(keepends=True)
    damaged = tmp_path / "damaged.csv"
    damaged.write_text(lines[0] + lines[1] + "just,three,fields\n" + lines[2])
    one_line_error(oomdoctor("summarize", str(damaged)), f"{damaged}:3")
    partial = tmp_path / "partial.csv"
    partial.write_text("".join(lines) + "/x/c.log,12")
    p = oomdoctor("summarize", str(partial))
    assert p.returncode == 1 and "unfinished" in p.stderr.decode() and "2 logs" in p.stdout.decode()


def test_resume_refuses_an_unfinished_last_line_that_is_no_record(tmp_path: Path, logs: Path):
    out = tmp_path / "r.jsonl"
    oomdoctor("scan", str(logs / "a.log"), "-o", str(out), "--no-summary")
    with open(out, "a") as fh:
        fh.write("a note typed at the end")
    before = out.read_bytes()
    one_line_error(oomdoctor("scan", str(logs), "-o", str(out), "--resume"), f"{out}:2")
    assert out.read_bytes() == before
