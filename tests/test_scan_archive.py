"""`oomdoctor scan` against a generated archive whose truth is known (manifest.json).

The archive comes from ../shared/bench/make_archive.py (beside the repository in CI):
synthetic multi-GPU training logs, some ending in a failure, some holding OOM-looking
text in runs that did not fail (distractors). The manifest names, per file, the failure
kind, the phase, and the 1-based key line.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import oomdoctor
from oomdoctor.read.normalise import strip_ansi
from oomdoctor.scan import records

REPO = Path(__file__).resolve().parent.parent
MAKE_ARCHIVE = REPO.parent / "shared" / "bench" / "make_archive.py"

# The manifest's failure kinds, in our vocabulary: the OOM event kind the record must
# carry (memory failures), or the non-memory failure kind (and then no OOM event at all).
# "cuda-oom-old-format"/"-new-format" differ only by the message wording of the caching
# allocator (torch <= 2.0 vs >= 2.1): both are one event kind for us.
KIND_MAP = {
    "cuda-oom-old-format": ("oom", "cuda_caching_allocator"),
    "cuda-oom-new-format": ("oom", "cuda_caching_allocator"),
    "host-oom-torchrun": ("oom", "host_oom_killer"),
    "host-oom-kernel": ("oom", "host_oom_killer"),
    "host-oom-slurm": ("oom", "host_oom_killer"),
    "ds-device-mismatch": ("failure", "device_mismatch"),
    "nccl-timeout": ("failure", "nccl_timeout"),
    "nan-loss": ("failure", "nan_loss"),
}
# The manifest's phases in our vocabulary. Its "epoch_end" failures die in the evaluation
# that runs at the end of an epoch ("***** Running Evaluation *****", "Evaluating: 45%"),
# which our phase model calls "eval"; a failure between epochs without one is "epoch_end".
PHASE_MAP = {
    "checkpoint_save": {"checkpoint_save"},
    "forward": {"forward"},
    "backward": {"backward"},
    "optimizer_step": {"optimizer_step"},
    "model_load": {"model_load"},
    "epoch_end": {"epoch_end", "eval"},
}


def make_archive(out: Path, *args: str) -> dict:
    if not MAKE_ARCHIVE.exists():
        pytest.skip(f"archive generator not found at {MAKE_ARCHIVE} (the shared/ folder beside the repository)")
    subprocess.run([sys.executable, str(MAKE_ARCHIVE), "--seed", "0", "--out", str(out), "-q", *args],
                   check=True, timeout=600)
    return json.loads((out / "manifest.json").read_text())


@pytest.fixture(scope="module")
def small_archive(tmp_path_factory):
    out = tmp_path_factory.mktemp("archive") / "a"
    return out, make_archive(out, "--size", "20M")


@pytest.fixture(scope="module")
def rich_archive(tmp_path_factory):
    """Many short logs, half of them failing and a third of the rest with distractors:
    every failure kind and phase of the generator in a few seconds of scanning."""
    out = tmp_path_factory.mktemp("archive") / "r"
    return out, make_archive(out, "--size", "10M", "--jobs", "120", "--fail-rate", "0.5",
                             "--distractor-rate", "0.3", "--compress", "mixed")


@pytest.fixture(scope="module")
def rich_records(rich_archive):
    return scan_by_rel(rich_archive[0])


def scan_by_rel(root: Path, **kw) -> dict[str, dict]:
    recs = list(oomdoctor.scan([str(root)], exclude=["manifest.json"], **kw))
    prefix = str(root) + os.sep
    return {r["path"][len(prefix):].replace(os.sep, "/"): r for r in recs}


def file_lines(root: Path, rel: str) -> list[bytes]:
    data = (root / rel).read_bytes()
    if rel.endswith(".gz"):
        import gzip
        data = gzip.decompress(data)
    return data.split(b"\n")


def cited(rec: dict) -> list[dict]:
    """Every (line, text) the record points at: events, failures and their evidence."""
    out = []
    for e in rec.get("oom_events") or []:
        out.extend(e.get("evidence") or [])
    for f in rec.get("failures") or []:
        out.extend(f.get("evidence") or [])
    for d in rec.get("diagnoses") or []:
        out.extend(d.get("evidence") or [])
    return out


def cited_lines(rec: dict) -> set[int]:
    lines = {e["line"] for e in rec.get("oom_events") or []} | {f["line"] for f in rec.get("failures") or []}
    return lines | {ev["line"] for ev in cited(rec)}


def check_line_texts(root: Path, rel: str, rec: dict) -> list[str]:
    """Each cited line number must hold the text the record quotes for it."""
    problems = []
    lines = None
    for ev in cited(rec):
        if lines is None:
            lines = file_lines(root, rel)
        raw = lines[ev["line"] - 1].decode("utf-8", "replace") if 0 < ev["line"] <= len(lines) else ""
        raw = strip_ansi(raw)     # evidence quotes the line with colours removed
        quoted = ev["text"].strip()
        if quoted and quoted[:80] not in raw:
            problems.append(f"{rel}: line {ev['line']} does not hold {quoted[:60]!r}")
    return problems


def check_against_manifest(root: Path, manifest: dict, recs: dict[str, dict], *, phases: bool = True) -> list[str]:
    problems: list[str] = []
    assert set(recs) == set(manifest["files"]), "one record per log"
    for rel, truth in sorted(manifest["files"].items()):
        rec = recs[rel]
        if rec.get("error"):
            problems.append(f"{rel}: unreadable: {rec['error']}")
            continue
        problems.extend(check_line_texts(root, rel, rec))
        if not truth["failure"]:
            if records.is_failure(rec):
                what = "distractor" if truth["distractor_line"] else "clean log"
                problems.append(f"{rel}: {what} reported as a failure ({[d['incident'] for d in rec['diagnoses']]})")
            continue
        kind, name = KIND_MAP[truth["kind"]]
        events = {e["kind"] for e in rec["oom_events"]}
        fails = {f["kind"] for f in rec["failures"]}
        if kind == "oom" and name not in events:
            problems.append(f"{rel}: {truth['kind']}: no {name} event (events {sorted(events)})")
        if kind == "failure" and (name not in fails or events):
            problems.append(f"{rel}: {truth['kind']}: failures {sorted(fails)}, events {sorted(events)}")
        if truth["line"] not in cited_lines(rec):
            problems.append(f"{rel}: {truth['kind']}: key line {truth['line']} not cited")
        if phases and rec["phase"] not in PHASE_MAP[truth["phase"]]:
            problems.append(f"{rel}: {truth['kind']}: phase {rec['phase']}, expected {truth['phase']}")
    return problems


def test_small_archive_matches_manifest(small_archive):
    root, manifest = small_archive
    recs = scan_by_rel(root)
    assert check_against_manifest(root, manifest, recs) == []
    failing = [r for r in recs.values() if records.is_failure(r)]
    assert len(failing) == sum(1 for f in manifest["files"].values() if f["failure"]) > 0


def test_rich_archive_failures_distractors_and_lines(rich_archive, rich_records):
    """All kinds: each failing log found with its kind and key line, no distractor taken
    for a failure, every cited line number right (also inside .gz logs)."""
    root, manifest = rich_archive
    recs = rich_records
    assert sum(1 for f in manifest["files"].values() if f["distractor_line"]) >= 10
    assert check_against_manifest(root, manifest, recs, phases=False) == []


def test_scan_agrees_with_diagnose(rich_archive, rich_records):
    """The scan parses regions of a log; diagnose reads a small log whole. Same findings."""
    root, manifest = rich_archive
    recs = rich_records
    keys = ("diagnoses", "oom_events", "failures", "phase", "fingerprint")
    checked = 0
    for rel, truth in sorted(manifest["files"].items()):
        if not (truth["failure"] or truth["distractor_line"]):
            continue
        rec = recs[rel]
        report = oomdoctor.diagnose(str(root / rel)).model_dump(mode="json")
        for k in keys:
            if k == "diagnoses":
                assert [d["incident"] for d in rec[k]] == [d["incident"] for d in report[k]], rel
            elif k in ("oom_events", "failures"):
                assert [(e["kind"], e["line"]) for e in rec[k]] == [(e["kind"], e["line"]) for e in report[k]], rel
            else:
                assert rec[k] == report[k], (rel, k)
        for k in ("torch_version", "deepspeed_version", "zero_stage", "framework", "gpu_name"):
            assert rec["environment"][k] == report["environment"][k], (rel, k)
        checked += 1
    assert checked > 40


def test_results_identical_whatever_the_number_of_processes(rich_archive, rich_records):
    root, _ = rich_archive
    two = list(oomdoctor.scan([str(root)], exclude=["manifest.json"], jobs=2))
    one = list(rich_records.values())
    assert one == two
    assert [r["path"] for r in one] == sorted(r["path"] for r in one)   # name order, depth first


def test_dask_local_cluster_gives_the_same_records(small_archive):
    pytest.importorskip("dask.distributed", reason="dask is an optional extra: pip install 'oomdoctor[dask]'")
    root, _ = small_archive
    local = list(oomdoctor.scan([str(root)], jobs=1))
    dask = list(oomdoctor.scan([str(root)], jobs=2, engine="dask"))
    assert dask == local
    assert any(records.is_failure(r) for r in dask)


def test_pure_python_search_gives_the_same_records(small_archive, monkeypatch):
    """Hyperscan (when installed), the pure-Python pivots and the plain pattern: the same
    records for every log of the archive."""
    from oomdoctor.read import prefilter
    root, _ = small_archive
    monkeypatch.setattr(prefilter, "_MATCHERS", {})
    default = scan_by_rel(root)
    for value in ("python", "trie"):
        monkeypatch.setenv("OOMDOCTOR_PREFILTER", value)
        monkeypatch.setattr(prefilter, "_MATCHERS", {})
        assert prefilter.anchor_matcher().engine == value
        assert scan_by_rel(root) == default, value
