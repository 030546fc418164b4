"""The real-log corpus (tests/fixtures/real): well-formed cases, and a score that only goes up.

Every case is a log users posted in a public issue thread with its label from the thread
(README.md beside the cases). The score is computed in-process with the rules of the
corpus scorer (tests/real_corpus.py) and must stay at or above the floor in ratchet.yaml.
"""
from __future__ import annotations

from pathlib import Path

import re

import pytest
import yaml

from real_corpus import REAL, load_cases, score

TAXONOMY = {
    "ckpt-save-gather", "ckpt-load", "alloc-fragmentation", "activation-memory", "large-vocab-logits",
    "preference-ref-model", "optimizer-state", "model-load", "eval-generation", "gradual-leak", "host-oom",
    "zero3-epoch-end-leak", "pinned-memory", "dataloader-host-oom", "shm-exhausted", "ds-device-mismatch",
    "stale-gpu-process", "ranks-share-gpu", "non-pytorch-memory", "bf16-unsupported", "not-oom", "unknown-oom",
}
FIELDS = {"id", "source", "framework", "accelerator", "primary", "also", "inferable", "resolution",
          "resolution_confirmed", "facts", "notes", "half"}
CASES = load_cases()
_IP = re.compile(r"(?<![\d.])(?:\d{1,3}\.){3}\d{1,3}(?![\d.])")
# four-part versions the logs print, not addresses ("Jittor(1.3.7.16)")
_VERSIONS = {"1.3.7.16"}


def test_the_corpus_is_large_and_varied():
    assert len(CASES) >= 200
    repos = {"/".join(label["source"].split("/")[3:5]) for label, _log in CASES}
    assert len(repos) >= 25
    assert sum(label["primary"] == "not-oom" for label, _log in CASES) >= 40
    assert {1, 2, 3, 4, 5, 6, 7, 8} <= {label["half"] for label, _log in CASES}


@pytest.mark.parametrize("label,log", CASES, ids=[label["id"] for label, _ in CASES])
def test_case_is_well_formed(label: dict, log: Path):
    assert label["id"] == log.stem and log.is_file()
    assert set(label) <= FIELDS, f"unknown fields {set(label) - FIELDS}"
    assert label["source"].startswith("https://github.com/")
    assert label["primary"] in TAXONOMY
    assert set(label.get("also") or []) <= TAXONOMY
    assert str(label["inferable"]).lower() in ("yes", "partly", "no", "true", "false")
    assert isinstance(label["half"], int) and label["half"] >= 1
    text = log.read_text(encoding="utf-8", errors="replace")
    assert text.strip(), "an empty log"
    # anonymised as CASE_FORMAT.md says: addresses become 10.0.0.x
    # (0.0.0.0/8 addresses no host: a four-part version such as "catboost = 0.7.2.3" reads as one)
    ips = {m.group(0) for m in _IP.finditer(text) if not m.group(0).startswith("0.")} - {"127.0.0.1"} - _VERSIONS
    assert all(ip.startswith("10.0.0.") for ip in ips), ips


def test_cases_come_from_distinct_threads():
    sources = [label["source"] + ("#" + label["id"] if label["id"].endswith("-b") else "") for label, _ in CASES]
    assert len(sources) == len(set(sources))


def test_the_score_does_not_fall_below_the_ratchet():
    floor = yaml.safe_load((REAL / "ratchet.yaml").read_text(encoding="utf-8"))
    scored, _silent = score(CASES)
    got = scored.figures
    assert scored.errors == 0
    assert got["false_alarms"] <= floor["false_alarms"], scored.line("corpus")
    for key in ("top1", "top3", "facts"):
        assert got[key] >= floor[key] - 1e-9, f"{key} fell below {floor[key]}: {scored.line('corpus')}"
