"""`summarize`: the same numbers from the JSONL and the CSV of one scan, failures named by
their kind, `--format json` with failures by kind, and records whose fields have the wrong
type refused as `FILE:LINE: not a scan record (...)`, never an internal error."""
from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from click.testing import CliRunner

import oomdoctor.scan
from oomdoctor.cli import main
from oomdoctor.scan import command
from oomdoctor.scan.fleet import fleet_data
from oomdoctor.scan.records import RecordsError, RecordWriter, csv_record, is_failure, read_records
from oomdoctor.scan.summary import latest, summarize

FIXTURES = Path(__file__).parent / "fixtures" / "logs"


def write(records: list[dict], path: Path, fmt: str) -> Path:
    with open(path, "w", encoding="utf-8", newline="") as fh:
        w = RecordWriter(fh, fmt)
        for rec in records:
            w.write(rec)
    return path


@pytest.fixture(scope="module")
def fixture_scan(tmp_path_factory) -> tuple[Path, Path]:
    recs = list(oomdoctor.scan.scan([str(FIXTURES)], jobs=1))
    d = tmp_path_factory.mktemp("scan")
    return write(recs, d / "r.jsonl", "jsonl"), write(recs, d / "r.csv", "csv")


def test_the_jsonl_and_the_csv_of_one_scan_give_the_same_summary(fixture_scan):
    jsonl, csv_ = fixture_scan
    a = summarize(read_records(str(jsonl), strict=True))
    b = summarize(read_records(str(csv_), strict=True))
    assert a.failures > 50 and a.clean > 50 and a.bytes_read > 100_000
    assert (a.logs, a.failures, a.clean, a.errors, a.bytes_read) == (b.logs, b.failures, b.clean, b.errors, b.bytes_read)
    assert a.frameworks == b.frameworks
    assert sum(b.incidents.values()) == b.failures and sum(b.kinds.values()) == b.failures
    # every incident that is a diagnosis counts the same logs (CSV has no failure kinds: the
    # logs that failed of something else are "unknown" there)
    diagnosed = {inc: n for inc, n in a.incidents.items() if inc in a.titles}
    assert diagnosed and all(b.incidents[inc] == n for inc, n in diagnosed.items())
    assert a.fingerprints == b.fingerprints


def test_a_csv_row_keeps_whether_it_failed_its_bytes_and_its_oom_kinds():
    base = {"path": "a.log", "size": "10", "mtime": "1.5", "error": "", "bytes_read": "2048"}
    warning = csv_record({**base, "failure": "0", "incident": "bfc-warning", "oom_kinds": "xla"})
    assert not is_failure(warning) and warning["bytes_read"] == 2048
    assert warning["oom_events"] == [{"kind": "xla"}]
    failed = csv_record({**base, "failure": "1", "incident": "activation-memory",
                         "oom_kinds": "cuda_caching_allocator;host_oom_killer"})
    assert is_failure(failed)
    assert [e["kind"] for e in failed["oom_events"]] == ["cuda_caching_allocator", "host_oom_killer"]
    survived = csv_record({**base, "failure": "0", "incident": "", "oom_kinds": "cuda_caching_allocator"})
    assert not is_failure(survived)
    s = summarize([{**r, "path": f"{i}.log"} for i, r in enumerate((warning, failed, survived))])
    assert (s.failures, s.clean, s.bytes_read) == (1, 2, 3 * 2048)


def test_a_failure_that_is_no_oom_is_named_by_its_kind(fixture_scan):
    rec = {"path": "x.log", "diagnoses": [], "oom_events": [], "failures": [{"kind": "nccl_timeout"}]}
    died = {"path": "y.log", "diagnoses": [], "oom_events": [], "failures": [],
            "phase_detail": {"stops_early": "process_died"}}
    s = summarize([rec, died])
    assert s.incidents == {"nccl_timeout": 1, "process died": 1}
    a = summarize(read_records(str(fixture_scan[0]), strict=True))
    assert "unknown" not in a.incidents and "nccl_timeout" in a.incidents


def test_summarize_json_has_the_failures_by_kind(fixture_scan):
    res = CliRunner().invoke(main, ["summarize", str(fixture_scan[0]), "-f", "json"])
    assert res.exit_code == 1, res.stderr
    data = json.loads(res.stdout)
    assert data["kinds"] and sum(data["kinds"].values()) == data["failures"]
    assert data["kinds"] == fleet_data(read_records(str(fixture_scan[0])))["kinds"]


def test_the_last_record_of_a_path_counts_in_the_order_of_the_last_records():
    a1, b, a2 = {"path": "a", "error": "x"}, {"path": "b"}, {"path": "a"}
    assert latest([a1, b, a2]) == [b, a2]
    s = summarize([a1, b, a2])
    assert (s.logs, s.errors) == (2, 0)
    data = fleet_data([a1, b, a2])
    assert (data["logs"], data["errors"]) == (2, 0)


WRONG = [
    ('"diagnoses":"oops"', "diagnoses is a string, not a list"),
    ('"diagnoses":[1]', "diagnoses[0] is a number, not an object"),
    ('"diagnoses":[{"incident":["a"]}]', "diagnoses[0].incident is a list, not a string"),
    ('"bytes_read":"12"', "bytes_read is a string, not a number"),
    ('"fingerprint":["a"]', "fingerprint is a list, not a string"),
    ('"oom_events":[{"kind":["cuda"]}]', "oom_events[0].kind is a list, not a string"),
    ('"failures":{"kind":"x"}', "failures is an object, not a list"),
    ('"environment":"torch"', "environment is a string, not an object"),
    ('"environment":{"framework":{}}', "environment.framework is an object, not a string"),
    ('"phase_detail":{"stops_early":1}', "phase_detail.stops_early is a number, not a string"),
    ('"size":[1]', "size is a list, not a number"),
    ('"error":true', "error is a boolean, not a string"),
]


@pytest.mark.parametrize("fmt", ["text", "json", "html"])
@pytest.mark.parametrize("field,why", WRONG)
def test_a_record_with_a_field_of_the_wrong_type_is_no_scan_record(tmp_path: Path, field: str, why: str, fmt: str):
    results = tmp_path / "r.jsonl"
    results.write_text('{"path":"ok.log","diagnoses":[]}\n{"path":"a",' + field + "}\n")
    res = CliRunner().invoke(main, ["summarize", str(results), "-f", fmt])
    assert res.exit_code == 2, (res.output, res.stderr)
    err = res.stderr.strip()
    assert err == f"oomdoctor: {results}:2: not a scan record ({why})", err
    with pytest.raises(RecordsError, match=":2: not a scan record"):
        list(read_records(str(results), strict=True))
    assert [r["path"] for r in read_records(str(results))] == ["ok.log"]   # not strict: left out


def test_resume_refuses_a_record_with_a_field_of_the_wrong_type(tmp_path: Path):
    log = tmp_path / "a.log"
    log.write_text("step 1 loss 0.1\n")
    results = tmp_path / "r.jsonl"
    content = ('{"path":"w.log","size":1,"mtime":1.0,"diagnoses":[]}\n'
               '{"path":"x.log","size":1,"mtime":1.0,"diagnoses":"oops"}\n')
    results.write_text(content)
    res = CliRunner().invoke(main, ["scan", str(log), "-o", str(results), "--resume", "-j", "1"])
    assert res.exit_code == 2 and f"{results}:2: a line that is no scan record" in res.stderr, res.stderr
    assert results.read_text() == content


def test_the_fork_hook_of_a_scan_is_registered_once_and_acts_during_a_scan_only(monkeypatch):
    hooks = []
    monkeypatch.setattr(os, "register_at_fork", lambda **kw: hooks.append(kw["after_in_child"]))
    monkeypatch.setattr(command, "_fork_hook_registered", False)
    monkeypatch.setattr(command, "_in_scan", False)
    command._ctrl_c_to_the_parent_only()
    command._ctrl_c_to_the_parent_only()
    assert len(hooks) == 1
    command._scan_ended()
    before = signal.getsignal(signal.SIGINT)
    hooks[0]()                      # a fork outside a scan keeps its Ctrl-C
    assert signal.getsignal(signal.SIGINT) is before
