"""`oomdoctor schema --record`: the JSON Schema of scan's JSON-lines records, and every record
a real scan writes (report records, clean ones, error records) validates against it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

FIXTURES = Path(__file__).parent / "fixtures" / "logs"


def oomdoctor(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "oomdoctor", *args], capture_output=True, timeout=600)


@pytest.fixture(scope="module")
def record_schema() -> dict:
    p = oomdoctor("schema", "--record")
    assert p.returncode == 0, p.stderr
    schema = json.loads(p.stdout)
    jsonschema.Draft202012Validator.check_schema(schema)
    return schema


def test_the_record_schema_names_itself_and_both_kinds(record_schema: dict):
    assert record_schema["$schema"].endswith("2020-12/schema")
    assert record_schema["$id"].startswith("urn:oomdoctor:schema:scan-record:")
    report, error = record_schema["$defs"]["ReportRecord"], record_schema["$defs"]["ErrorRecord"]
    assert {"path", "size", "mtime", "diagnoses", "oom_events", "schema_version", "fingerprint"} <= set(report["required"])
    assert set(error["required"]) == {"path", "size", "mtime", "error"} and error["additionalProperties"] is False
    # the report's own schema is unchanged by --record
    plain = json.loads(oomdoctor("schema").stdout)
    assert "path" not in plain["properties"] and plain["$id"].startswith("urn:oomdoctor:schema:report:")


def test_every_record_of_a_real_scan_validates(tmp_path: Path, record_schema: dict):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "empty.log").write_bytes(b"")                        # error record: empty file
    (bad / "binary.log").write_bytes(bytes(range(256)) * 64)     # error record: binary data
    (bad / "truncated.tar.gz").write_bytes(b"\x1f\x8b\x08\x00" + b"\x00" * 20)
    out = tmp_path / "results.jsonl"
    p = oomdoctor("scan", str(FIXTURES), str(bad), str(tmp_path / "missing.log"), "-o", str(out),
                  "--no-summary", "-j", "2")
    assert p.returncode == 3, p.stderr            # some logs could not be read
    lines = out.read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines]
    assert len(records) >= len(list(FIXTURES.iterdir())) + 4
    validator = jsonschema.Draft202012Validator(record_schema)
    for rec in records:
        errors = sorted(validator.iter_errors(rec), key=str)
        assert not errors, f"{rec.get('path')}: {errors[0].message}"
    errors = [r for r in records if "error" in r]
    reports = [r for r in records if "error" not in r]
    assert {os.path.basename(r["path"]) for r in errors} >= {"empty.log", "binary.log", "missing.log"}
    assert any(r["diagnoses"] for r in reports) and any(not r["diagnoses"] and not r["lines_read"] for r in reports)


def test_what_is_no_record_does_not_validate(record_schema: dict):
    validator = jsonschema.Draft202012Validator(record_schema)
    assert validator.is_valid({"path": "a.log", "size": 3, "mtime": 1.5, "error": "empty file"})
    assert not validator.is_valid({"path": "a.log", "size": 3, "mtime": 1.5, "error": "x", "diagnoses": []})
    assert not validator.is_valid({"path": "a.log", "size": 3, "error": "no mtime"})
    assert not validator.is_valid({"size": 3, "mtime": None, "error": "no path"})
    report = json.loads(oomdoctor("diagnose", "-f", "json", str(FIXTURES / "example-zero3-save.log")).stdout)
    assert not validator.is_valid(report)                       # a report alone has no path
    assert validator.is_valid({"path": "x.log", "size": None, "mtime": None, **report})
