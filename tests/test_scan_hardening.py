"""`oomdoctor scan` with its output file and with names nobody checked: one scan at a
time into an --out file, --resume that leaves one record per log whatever the file went
through, names printed safely on a terminal, and a time budget per log."""
from __future__ import annotations

import csv
import fcntl
import gzip
import io
import json
import os
import re
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

import oomdoctor
from oomdoctor.scan import engine

from test_scan_inputs import CLEAN, failing_log

# what may not reach a terminal: C0 controls but tab and newline, DEL, C1 controls
TERMINAL_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def oomdoctor_cli(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "oomdoctor", *args], capture_output=True, timeout=300, cwd=cwd)


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_bytes().decode().splitlines()]


def csv_rows(path: Path) -> list[dict]:
    return list(csv.DictReader(io.StringIO(path.read_bytes().decode("utf-8", "surrogateescape"), newline="")))


def out_records(path: Path, fmt: str) -> list[dict]:
    return jsonl(path) if fmt == "jsonl" else csv_rows(path)


def slow_gz(path: Path, gib: int = 6) -> Path:
    """A small gzip file that inflates to ``gib`` GiB of lines without any failure anchor:
    seconds of honest work for the reader, made in well under a second."""
    member = gzip.compress(b"step 1 loss 0.5000 lr 0.0001\n" * (64 * 2**20 // 29), 9)
    with open(path, "wb") as fh:
        for _ in range(gib * 16):
            fh.write(member)   # concatenated members are one gzip stream
    return path


def locked(path: Path) -> bool:
    with open(path, "rb") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(fh, fcntl.LOCK_UN)
        return False


# -- one scan at a time into an --out file ---------------------------------------------------

def test_a_scan_into_a_locked_out_file_refuses_at_once_and_leaves_it_alone(tmp_path: Path):
    (tmp_path / "a.log").write_bytes(failing_log())
    out = tmp_path / "results.jsonl"
    out.write_text('{"path": "earlier"}\n')
    with open(out, "rb") as holder:
        fcntl.flock(holder, fcntl.LOCK_EX)
        for extra in ((), ("--resume",)):
            p = oomdoctor_cli("scan", str(tmp_path / "a.log"), "-o", str(out), *extra)
            err = p.stderr.decode()
            assert p.returncode == 2, err
            assert len(err.strip().splitlines()) == 1 and "in use by another scan" in err and "Traceback" not in err
            assert out.read_text() == '{"path": "earlier"}\n'      # neither emptied nor appended to
    p = oomdoctor_cli("scan", str(tmp_path / "a.log"), "-o", str(out))   # the holder is gone
    assert p.returncode == 1 and [r["path"] for r in jsonl(out)] == [str(tmp_path / "a.log")]


def test_two_concurrent_scans_into_one_file_keep_every_record_of_the_first(tmp_path: Path):
    logs = tmp_path / "logs"
    logs.mkdir()
    slow_gz(logs / "0-big.log.gz", gib=4)
    for i in range(1, 6):
        (logs / f"{i}.log").write_bytes(failing_log(i))
    out = tmp_path / "results.jsonl"
    first = subprocess.Popen([sys.executable, "-m", "oomdoctor", "scan", str(logs), "-o", str(out),
                              "--log-timeout", "0", "--jobs", "1", "--no-summary"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not (out.exists() and locked(out)):
            assert first.poll() is None, "the first scan ended without ever locking its output"
            assert time.monotonic() < deadline
            time.sleep(0.02)
        second = oomdoctor_cli("scan", str(logs), "-o", str(out), "--log-timeout", "0")
        assert first.poll() is None, "the first scan was too quick for this test"
    finally:
        _, err = first.communicate(timeout=300)
    assert second.returncode == 2 and "in use by another scan" in second.stderr.decode()
    assert first.returncode == 1, err
    assert [os.path.basename(r["path"]) for r in jsonl(out)] == ["0-big.log.gz"] + [f"{i}.log" for i in range(1, 6)]


# -- --resume: one record per log --------------------------------------------------------------

def log_tree(tmp_path: Path) -> Path:
    root = tmp_path / "logs"
    root.mkdir()
    (root / "a.log").write_bytes(failing_log())
    (root / "b.log").write_bytes(CLEAN)
    (root / "c-empty.log").write_bytes(b"")                  # an error record, tried again on resume
    with tarfile.open(root / "d.tar.gz", "w:gz") as tf:
        for name, data in (("ok.log", failing_log(7)), ("../evil.log", CLEAN)):   # the second: an error record
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 1_700_000_000
            tf.addfile(info, io.BytesIO(data))
    return root


EXPECTED = ["a.log", "b.log", "c-empty.log", "d.tar.gz!/ok.log", "d.tar.gz!/../evil.log"]


def names(recs: list[dict], root: Path) -> list[str]:
    return [os.path.relpath(r["path"], root) if "!/" not in r["path"] else
            os.path.basename(r["path"].split("!/")[0]) + "!/" + r["path"].split("!/", 1)[1] for r in recs]


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_resume_never_duplicates_records(tmp_path: Path, fmt: str):
    root = log_tree(tmp_path)
    out = tmp_path / f"results.{fmt}"
    assert oomdoctor_cli("scan", str(root), "-o", str(out), "-f", fmt).returncode == 3
    assert names(out_records(out, fmt), root) == EXPECTED
    for _ in range(3):   # every resume tries the errors again: it replaces their records
        p = oomdoctor_cli("scan", str(root), "-o", str(out), "-f", fmt, "--resume")
        assert p.returncode == 3, p.stderr
        assert "scanned 5 logs" in p.stderr.decode() and "2 unreadable" in p.stderr.decode()
        assert sorted(names(out_records(out, fmt), root)) == sorted(EXPECTED)
    # a log changed since it was scanned: scanned again, its old record replaced
    (root / "b.log").write_bytes(CLEAN + failing_log())
    (root / "c-empty.log").write_bytes(CLEAN)
    p = oomdoctor_cli("scan", str(root), "-o", str(out), "-f", fmt, "--resume")
    assert p.returncode == 3, p.stderr
    recs = out_records(out, fmt)
    assert sorted(names(recs, root)) == sorted(EXPECTED)
    by_name = dict(zip(names(recs, root), recs))
    assert int(by_name["b.log"]["size"]) == (root / "b.log").stat().st_size
    assert not by_name["c-empty.log"].get("error")


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_resume_trims_a_partial_record_of_any_size(tmp_path: Path, fmt: str):
    root = log_tree(tmp_path)
    out = tmp_path / f"results.{fmt}"
    oomdoctor_cli("scan", str(root / "a.log"), "-o", str(out), "-f", fmt)
    whole = out.read_bytes()
    # a scan killed while writing a 2 MiB record (a log with thousands of events)
    partial = ('{"path": "' + "x" * (2 << 20)) if fmt == "jsonl" else ('"' + "x" * (2 << 20) + "\n" + "y" * 100)
    with open(out, "a") as fh:
        fh.write(partial)
    p = oomdoctor_cli("scan", str(root), "-o", str(out), "-f", fmt, "--resume")
    assert p.returncode == 3, p.stderr
    assert out.read_bytes().startswith(whole)
    assert names(out_records(out, fmt), root) == EXPECTED      # every line whole, none swallowed
    assert "scanned 5 logs" in p.stderr.decode()


def test_resume_of_a_file_that_is_not_its_results_refuses(tmp_path: Path):
    root = log_tree(tmp_path)
    out = tmp_path / "results.jsonl"
    oomdoctor_cli("scan", str(root), "-o", str(out))
    before = out.read_bytes()
    p = oomdoctor_cli("scan", str(root), "-o", str(out), "-f", "csv", "--resume")
    assert p.returncode == 2 and p.stderr.decode().count("\n") == 1 and "--format jsonl" in p.stderr.decode()
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\nmore\n")
    p = oomdoctor_cli("scan", str(root), "-o", str(notes), "--resume")
    assert p.returncode == 2 and "no scan records" in p.stderr.decode()
    assert out.read_bytes() == before and notes.read_text() == "my notes\nmore\n"


# -- names on a terminal -----------------------------------------------------------------------

HOSTILE = "job\x1b]0;owned\x07\x1b[2J\x1b[1;31mred\x9b1A\x07.log"


def test_names_with_escape_sequences_never_reach_the_terminal(tmp_path: Path):
    root = tmp_path / "logs"
    root.mkdir()
    (root / HOSTILE).write_bytes(failing_log())                  # listed under top fingerprints
    (root / ("empty\x1b[31m\r\n.log")).write_bytes(b"")          # listed under unreadable
    with tarfile.open(root / "t.tar", "w") as tf:
        info = tarfile.TarInfo("member\x1b[1Akill.log")
        data = failing_log(3)
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    out = tmp_path / "r.jsonl"
    p = oomdoctor_cli("scan", str(root), "-o", str(out))
    err = p.stderr.decode()
    assert p.returncode == 3, err
    assert not TERMINAL_UNSAFE.search(err), repr(err)
    assert "job" + "red.log" in err and "member" + "kill.log" in err and "empty.log: empty file" in err
    # the records keep the real names
    paths = {r["path"] for r in jsonl(out)}
    assert {str(root / HOSTILE), str(root / "empty\x1b[31m\r\n.log"), f"{root / 't.tar'}!/member\x1b[1Akill.log"} <= paths
    assert not TERMINAL_UNSAFE.search(out.read_text())           # JSON escapes them, C1 included
    s = oomdoctor_cli("summarize", str(out))
    assert s.returncode == 3 and not TERMINAL_UNSAFE.search(s.stdout.decode()) and "jobred.log" in s.stdout.decode()
    # records on stdout: escaped the same way
    p = oomdoctor_cli("scan", str(root / HOSTILE), "--no-summary")
    assert p.returncode == 1 and not TERMINAL_UNSAFE.search(p.stdout.decode())
    assert json.loads(p.stdout)["path"] == str(root / HOSTILE)


def test_a_name_that_is_not_utf8_is_scanned_and_kept(tmp_path: Path):
    root = tmp_path / "logs"
    root.mkdir()
    try:
        with open(os.fsencode(root) + b"/bad\xff\x9b.log", "wb") as fh:
            fh.write(failing_log())
    except (OSError, UnicodeError):
        pytest.skip("this file system takes UTF-8 names only")
    (root / "good.log").write_bytes(CLEAN)
    name = os.fsdecode(os.fsencode(root) + b"/bad\xff\x9b.log")
    for fmt in ("jsonl", "csv"):
        out = tmp_path / f"r.{fmt}"
        p = oomdoctor_cli("scan", str(root), "-o", str(out), "-f", fmt)
        assert p.returncode == 1, p.stderr
        assert "Traceback" not in p.stderr.decode() and "internal error" not in p.stderr.decode()
        assert not TERMINAL_UNSAFE.search(p.stderr.decode())
        assert out_records(out, fmt)[0]["path"] == name           # the real name, bytes and all
        assert oomdoctor_cli("scan", str(root), "-o", str(out), "-f", fmt, "--resume").returncode == 1
        assert len(out_records(out, fmt)) == 2                    # same name, same log: not scanned again


def test_printable_strips_sequences_and_controls():
    from oomdoctor.report.common import printable
    assert printable("a\x1b[1;31mb\x1b[0m") == "ab"
    assert printable("x\x1b]0;title\x07y\x1b]8;;http://e\x1b\\z") == "xyz"
    assert printable("c1\x9b2Jcsi\x85nel\x7f") == "c1csinel"
    assert printable("tab\tstays\r\nnewline goes\x00\x08") == "tab\tstaysnewline goes"
    assert printable("not utf-8 \udcff") == "not utf-8 \ufffd"
    assert printable("plain é ü 日本") == "plain é ü 日本"


def test_the_progress_line_is_printable(monkeypatch):
    from oomdoctor.scan.progress import Progress
    monkeypatch.setenv("COLUMNS", "120")
    class TTY(io.StringIO):
        def isatty(self) -> bool:
            return True

    tty = TTY()
    bar = Progress(2, 2000, stream=tty, interval=0)
    bar.advance(2, 2000, name="/logs/\x1b[2Jfile\x9b1A\x1b]0;title\x07.log")   # a name anyone may choose
    bar.close()
    assert bar.name == "file.log"
    shown = tty.getvalue()
    assert "file.log" in shown and "\x1b[2J" not in shown and "\x9b" not in shown and "title" not in shown


# -- a time budget per log ---------------------------------------------------------------------

def slow_diagnosis(monkeypatch, seconds: float = 60.0) -> None:
    """Every log that gets as far as the pipeline hangs (a parser stuck on a pathological
    line); logs without any failure anchor never get there."""
    import oomdoctor.pipeline as pipeline

    def stuck(*args, **kwargs):
        time.sleep(seconds)
        raise RuntimeError("the time budget did not stop this log")   # becomes an internal error record

    monkeypatch.setattr(pipeline, "diagnose_view", stuck)


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_log_over_its_time_budget_gets_an_error_record_and_the_scan_goes_on(tmp_path: Path, monkeypatch,
                                                                               jobs: int):
    slow_diagnosis(monkeypatch)   # worker processes are forked: they get it too
    (tmp_path / "a-stuck.log").write_bytes(failing_log())
    (tmp_path / "b-clean.log").write_bytes(CLEAN)
    with tarfile.open(tmp_path / "c.tar", "w") as tf:
        for name, data in (("1-stuck.log", failing_log(5)), ("2-clean.log", CLEAN)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    (tmp_path / "d-stuck.log").write_bytes(failing_log(9))
    handler = signal.getsignal(signal.SIGALRM)
    started = time.monotonic()
    recs = list(oomdoctor.scan([str(tmp_path)], jobs=jobs, log_timeout=0.3))
    assert time.monotonic() - started < 20
    got = {os.path.basename(r["path"].split("!/")[-1]): r.get("error") for r in recs}
    assert got == {"a-stuck.log": "took longer than 0.3 s", "b-clean.log": None,
                   "1-stuck.log": "took longer than 0.3 s", "2-clean.log": None,
                   "d-stuck.log": "took longer than 0.3 s"}
    assert signal.getsignal(signal.SIGALRM) is handler          # the caller's handler is back
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_a_streamed_archive_member_over_its_budget_and_the_members_after_it(tmp_path: Path, monkeypatch):
    slow_diagnosis(monkeypatch)
    monkeypatch.setattr(engine, "SPOOL_LIMIT", 16)   # every member read as a stream, in one pass
    with tarfile.open(tmp_path / "a.tar.gz", "w:gz") as tf:
        for name, data in (("1-stuck.log", failing_log()), ("2-clean.log", CLEAN), ("3-stuck.log", failing_log(4))):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    recs = list(oomdoctor.scan([str(tmp_path / "a.tar.gz")], log_timeout=0.3))
    assert [(r["path"].split("!/")[-1], r.get("error")) for r in recs] == [
        ("1-stuck.log", "took longer than 0.3 s"), ("2-clean.log", None), ("3-stuck.log", "took longer than 0.3 s")]


def test_no_budget_without_log_timeout(tmp_path: Path, monkeypatch):
    slow_diagnosis(monkeypatch, seconds=0.5)
    (tmp_path / "a.log").write_bytes(failing_log())
    handler = signal.getsignal(signal.SIGALRM)
    (rec,) = oomdoctor.scan([str(tmp_path)], log_timeout=0)     # the library's default too
    assert "did not stop" in rec["error"]
    assert signal.getsignal(signal.SIGALRM) is handler


def test_log_timeout_on_the_command_line_with_worker_processes(tmp_path: Path):
    logs = tmp_path / "logs"
    logs.mkdir()
    slow_gz(logs / "a-huge.log.gz")                    # about 6 GiB to inflate and search: seconds
    (logs / "b.log").write_bytes(failing_log())
    (logs / "c.log").write_bytes(CLEAN)
    out = tmp_path / "r.jsonl"
    started = time.monotonic()
    p = oomdoctor_cli("scan", str(logs), "-o", str(out), "--jobs", "2", "--log-timeout", "0.5")
    took = time.monotonic() - started
    assert p.returncode == 3, p.stderr
    recs = jsonl(out)
    assert [os.path.basename(r["path"]) for r in recs] == ["a-huge.log.gz", "b.log", "c.log"]
    assert recs[0]["error"] == "took longer than 0.5 s"
    assert recs[1]["diagnoses"] and not recs[2].get("error")
    assert "a-huge.log.gz: took longer than 0.5 s" in p.stderr.decode()
    assert took < 30
    bad = oomdoctor_cli("scan", str(logs / "b.log"), "--log-timeout", "-1")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr.decode()
