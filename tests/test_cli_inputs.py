"""The CLI on good and bad input: exit codes, one-line errors, never a traceback."""
from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures" / "logs"
OOM_LINE = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
            "79.15 GiB of which 1.00 GiB is free. Including non-PyTorch memory, this process has 78.14 GiB memory in use. "
            "Of the allocated memory 70.00 GiB is allocated by PyTorch, and 7.50 GiB is reserved by PyTorch but unallocated.")


def oomdoctor(*args: str, stdin: bytes | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "oomdoctor", *args], input=stdin, capture_output=True,
                          env={**os.environ, **(env or {})}, timeout=120)


def assert_one_line_error(p: subprocess.CompletedProcess, needle: str) -> None:
    assert p.returncode == 2, p.stderr
    err = p.stderr.decode().strip()
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1, err
    assert needle in err


def test_oom_log_exit_1_and_json_fields():
    p = oomdoctor("diagnose", "-f", "json", "-", stdin=OOM_LINE.encode())
    assert p.returncode == 1
    data = json.loads(p.stdout)
    for field in ("diagnoses", "oom_events", "environment", "phase", "schema_version"):
        assert field in data
    ev = data["oom_events"][0]
    assert ev["kind"] == "cuda_caching_allocator" and ev["tried_to_allocate_bytes"] == 2 * 2**30


def test_clean_log_exit_0():
    p = oomdoctor("diagnose", "-", stdin=b"{'loss': 1.2, 'epoch': 0.5}\nTraining completed.\n")
    assert p.returncode == 0, p.stderr


def test_empty_input_is_an_empty_report(tmp_path):
    f = tmp_path / "empty.log"
    f.write_bytes(b"")
    p = oomdoctor("diagnose", "-f", "json", str(f))
    assert p.returncode == 0
    data = json.loads(p.stdout)
    assert data["oom_events"] == [] and data["diagnoses"] == []


def test_missing_file(tmp_path):
    assert_one_line_error(oomdoctor("diagnose", str(tmp_path / "nope.log")), "no such file")


def test_directory(tmp_path):
    assert_one_line_error(oomdoctor("diagnose", str(tmp_path)), "is a directory")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_unreadable(tmp_path):
    f = tmp_path / "secret.log"
    f.write_text(OOM_LINE)
    f.chmod(0)
    assert_one_line_error(oomdoctor("diagnose", str(f)), "permission denied")


def test_binary_and_nul_filled(tmp_path):
    f = tmp_path / "model.bin"
    f.write_bytes(bytes(range(256)) * 64)
    assert_one_line_error(oomdoctor("diagnose", str(f)), "binary")
    g = tmp_path / "zeros.log"
    g.write_bytes(b"\x00" * 100_000)
    assert_one_line_error(oomdoctor("diagnose", str(g)), "binary")


def test_invalid_utf8_and_crlf_still_parse(tmp_path):
    f = tmp_path / "mixed.log"
    f.write_bytes(b"caf\xe9 \xff\xfe broken bytes\r\n" + OOM_LINE.encode() + b"\r\n")
    p = oomdoctor("diagnose", "-f", "json", str(f))
    assert p.returncode == 1
    ev = json.loads(p.stdout)["oom_events"][0]
    assert ev["line"] == 2 and ev["reserved_unallocated_bytes"] == int(7.5 * 2**30)


def test_nul_bytes_inside_text(tmp_path):
    f = tmp_path / "nul.log"
    f.write_bytes(b"step 1\x00\x00\n" + OOM_LINE.encode() + b"\n")
    p = oomdoctor("diagnose", "-f", "json", str(f))
    assert p.returncode == 1 and json.loads(p.stdout)["oom_events"][0]["line"] == 2


def test_gzip_log_and_truncated_gzip(tmp_path):
    body = ("{'loss': 1.0}\n" * 2000 + OOM_LINE + "\n").encode()
    f = tmp_path / "job.log.gz"
    f.write_bytes(gzip.compress(body))
    p = oomdoctor("diagnose", "-f", "json", str(f))
    assert p.returncode == 1 and json.loads(p.stdout)["oom_events"][0]["line"] == 2001
    cut = tmp_path / "cut.log.gz"
    cut.write_bytes(gzip.compress(body)[:40])
    p = oomdoctor("diagnose", "-f", "json", str(cut))
    assert p.returncode in (0, 2)
    assert "Traceback" not in p.stderr.decode()


def test_huge_single_line_is_bounded(tmp_path):
    f = tmp_path / "one-line.log"
    with open(f, "wb") as fh:
        chunk = b"x" * 2**20
        for _ in range(40):
            fh.write(chunk)
        fh.write(b"\n" + OOM_LINE.encode() + b"\n")
    p = oomdoctor("diagnose", "-f", "json", str(f))
    assert p.returncode == 1
    data = json.loads(p.stdout)
    assert data["oom_events"][0]["line"] == 2 and data["lines_read"] == 2


def test_several_paths_are_one_job(tmp_path):
    a, b = tmp_path / "rank0.log", tmp_path / "rank1.log"
    a.write_text("[2024-01-01 10:00:00,000] [INFO] [logging.py:96:log_dist] [Rank 0] DeepSpeed info: version=0.14.1, git-hash=unknown, git-branch=unknown\n")
    b.write_text(OOM_LINE + "\n")
    p = oomdoctor("diagnose", "-f", "json", str(a), str(b))
    data = json.loads(p.stdout)
    assert p.returncode == 1
    assert data["oom_events"] and data["environment"]["deepspeed_version"] == "0.14.1"


def test_broken_kb_file_is_skipped_with_a_warning_and_nothing_is_lost(tmp_path):
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "my-incident.yaml").write_text("id: my-incident\ntitle: [unclosed\n")
    p = oomdoctor("diagnose", "-f", "json", "--kb", str(kb), "-", stdin=OOM_LINE.encode())
    assert p.returncode == 1
    err = p.stderr.decode()
    assert "my-incident.yaml" in err and "invalid YAML" in err and "Traceback" not in err
    data = json.loads(p.stdout)
    assert data["oom_events"] and data["diagnoses"]
    assert any("my-incident.yaml" in n for n in data["notes"])
    lint = oomdoctor("kb", "lint", "--no-shipped", str(kb))
    assert lint.returncode == 1 and b"my-incident.yaml:3:1: " in lint.stdout and b"invalid YAML" in lint.stdout


def test_schema_is_json_schema():
    p = oomdoctor("schema")
    assert p.returncode == 0
    schema = json.loads(p.stdout)
    assert schema["title"] == "Report" and "oom_events" in schema["properties"]


def test_example_runs():
    p = oomdoctor("diagnose", "--example")
    assert p.returncode == 1, p.stderr
    assert b"ckpt-save-gather" in p.stdout
