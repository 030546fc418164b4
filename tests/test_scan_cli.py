"""`oomdoctor scan` and `oomdoctor summarize` on the command line: output, resume, CSV,
summary, exit codes, progress bar, and no traceback whatever the input."""
from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

from oomdoctor.scan.progress import Progress

from test_scan_inputs import CLEAN, failing_log


def oomdoctor(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "oomdoctor", *args], capture_output=True, timeout=300, cwd=cwd)


def tree(tmp_path: Path) -> Path:
    root = tmp_path / "logs"
    (root / "jobs").mkdir(parents=True)
    (root / "jobs" / "a.log").write_bytes(failing_log())
    (root / "jobs" / "b.log").write_bytes(CLEAN)
    (root / "jobs" / "c.log").write_bytes(failing_log(10))
    return root


def test_jsonl_to_stdout_and_summary_on_stderr(tmp_path: Path):
    root = tree(tmp_path)
    p = oomdoctor("scan", str(root), "--jobs", "2")
    assert p.returncode == 1, p.stderr
    recs = [json.loads(line) for line in p.stdout.decode().splitlines()]
    assert [os.path.basename(r["path"]) for r in recs] == ["a.log", "b.log", "c.log"]
    for r in recs:   # path, size, mtime, then the fields of diagnose --format json
        assert {"path", "size", "mtime", "diagnoses", "oom_events", "environment", "phase", "fingerprint"} <= set(r)
    err = p.stderr.decode()
    assert "scanned 3 logs" in err and "2 failed, 1 clean, 0 unreadable" in err
    assert "top fingerprints:" in err and str(root / "jobs" / "a.log") in err
    assert "\r" not in err            # no progress bar when stderr is not a terminal


def test_same_fields_as_diagnose_json(tmp_path: Path):
    root = tree(tmp_path)
    out = tmp_path / "r.jsonl"
    oomdoctor("scan", str(root / "jobs" / "a.log"), "-o", str(out), "--no-summary")
    rec = json.loads(out.read_text())
    diag = json.loads(oomdoctor("diagnose", "-f", "json", str(root / "jobs" / "a.log")).stdout)
    assert set(rec) - {"path", "size", "mtime"} == set(diag)
    assert rec["oom_events"] == diag["oom_events"] and rec["diagnoses"] == diag["diagnoses"]


def test_exit_codes(tmp_path: Path):
    root = tree(tmp_path)
    assert oomdoctor("scan", str(root / "jobs" / "b.log"), "-o", str(tmp_path / "o1")).returncode == 0
    assert oomdoctor("scan", str(root), "-o", str(tmp_path / "o2")).returncode == 1
    (root / "jobs" / "d.log").write_bytes(b"")
    p = oomdoctor("scan", str(root), "-o", str(tmp_path / "o3"))
    assert p.returncode == 3
    assert "1 unreadable" in p.stderr.decode() and "empty file" in p.stderr.decode()
    assert "Traceback" not in p.stderr.decode()
    bad = oomdoctor("scan", str(root), "--resume")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr.decode()


def test_resume_appends_only_new_logs(tmp_path: Path):
    root = tree(tmp_path)
    out = tmp_path / "r.jsonl"
    assert oomdoctor("scan", str(root / "jobs" / "a.log"), "-o", str(out)).returncode == 1
    with open(out, "a") as fh:          # a scan killed in the middle of a record
        fh.write('{"path": "half')
    p = oomdoctor("scan", str(root), "-o", str(out), "--resume")
    assert p.returncode == 1, p.stderr
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert [os.path.basename(r["path"]) for r in recs] == ["a.log", "b.log", "c.log"]
    assert "scanned 3 logs" in p.stderr.decode()      # the summary covers the whole file


def test_csv_and_summarize(tmp_path: Path):
    root = tree(tmp_path)
    out = tmp_path / "r.csv"
    assert oomdoctor("scan", str(root), "-f", "csv", "-o", str(out), "--no-summary").returncode == 1
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    assert [os.path.basename(r["path"]) for r in rows] == ["a.log", "b.log", "c.log"]
    assert [r["failure"] for r in rows] == ["1", "0", "1"]
    assert rows[0]["oom_kinds"] == "cuda_caching_allocator" and rows[0]["line"] == "44"
    s = oomdoctor("summarize", str(out))
    assert s.returncode == 1 and "2 failed, 1 clean" in s.stdout.decode()

    jl = tmp_path / "r.jsonl"
    oomdoctor("scan", str(root), "-o", str(jl), "--no-summary")
    js = json.loads(oomdoctor("summarize", str(jl), "-f", "json").stdout)
    assert js["failures"] == 2 and js["clean"] == 1 and js["errors"] == 0
    top = js["top_fingerprints"][0]
    assert top["logs"] == 2 and len(top["files"]) == 2      # both logs fail the same way


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_only_on_a_terminal():
    tty = FakeTTY()
    bar = Progress(4, 4000, stream=tty, interval=0)
    bar.advance(1, 1000)
    bar.advance(3, 3000)
    bar.close()
    text = tty.getvalue()
    assert "4/4 files" in text and "ETA" in text and "/s" in text
    piped = io.StringIO()
    bar = Progress(4, 4000, stream=piped, interval=0)
    bar.advance(4, 4000)
    bar.close()
    assert piped.getvalue() == ""
