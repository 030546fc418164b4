"""Score the project's real-log corpus (tests/fixtures/real) with the project's own code.

    python tests/real_corpus.py                 # both halves, summary per half
    python tests/real_corpus.py --half 2 -v     # one half, every miss

Grades each case the way ../shared/corpus/score.py does (the same rules for top-1, top-3,
facts, false alarms and `inferable: no` cases), but in-process, so the whole corpus takes
seconds. ``tests/test_real_corpus.py`` fails when a figure falls below the ratchet in
tests/fixtures/real/README.md.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import yaml

REAL = Path(__file__).resolve().parent / "fixtures" / "real"
NON_OOM = {"not-oom"}
UNITS = {"bytes": 1, "b": 1, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "pib": 2**50,
         "eib": 2**60, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "eb": 10**18,
         "k": 2**10, "m": 2**20, "g": 2**30}
SIZE_FIELDS = {k: k + "_bytes" for k in ("tried_to_allocate", "total_capacity", "free", "process_in_use",
                                          "allocated_by_pytorch", "reserved_unallocated", "reserved_total",
                                          "already_allocated")}
ENV_FIELDS = {"deepspeed_version", "torch_version", "transformers_version", "zero_stage", "offload", "world_size"}


def load_cases(root: Path = REAL) -> list[tuple[dict, Path]]:
    out = []
    for y in sorted(root.glob("*.yaml")):
        if not y.with_suffix(".log").exists():
            continue  # ratchet.yaml: the test's floor, not a case
        out.append((yaml.safe_load(y.read_text(encoding="utf-8")), y.with_suffix(".log")))
    return out


def _size(text) -> Optional[tuple[float, float]]:
    m = re.fullmatch(r"\s*([0-9.]+)\s*([A-Za-z]+)\s*", str(text))
    if not m or m.group(2).lower() not in UNITS:
        return None
    num, scale = m.group(1), UNITS[m.group(2).lower()]
    decimals = len(num.split(".")[1]) if "." in num else 0
    value = float(num) * scale
    return value, max(0.5 * 10 ** -decimals * scale, value * 0.005, 1)


def _public(v) -> str:
    return str(v).split("+", 1)[0]


def check_facts(facts: dict, report: dict) -> tuple[int, int, list[str]]:
    matched = total = 0
    misses: list[str] = []
    events = report.get("oom_events") or []
    env = report.get("environment") or {}
    for key, want in (facts or {}).items():
        if want is None or key == "notes":
            continue
        ok: Optional[bool] = None
        got: object = None
        if key == "gpu_index":
            got = [e.get("device_index") for e in events]
            ok = want in got
        elif key in SIZE_FIELDS:
            parsed = _size(want)
            if parsed is None:
                continue
            value, tol = parsed
            got = [e.get(SIZE_FIELDS[key]) for e in events]
            ok = any(isinstance(g, (int, float)) and abs(g - value) <= tol for g in got)
        elif key == "oom_kind":
            got = [e.get("kind") for e in events]
            ok = (want == "none" and not events) or want in got
        elif key == "oom_count":
            got = len(events)
            ok = got == want
        elif key in ENV_FIELDS:
            got = env.get(key)
            ok = _public(got) == _public(want)
        elif key == "phase":
            if want == "unknown":
                continue
            got = report.get("phase")
            ok = got == want
        if ok is None:
            continue
        total += 1
        matched += ok
        if not ok:
            misses.append(f"{key}={want} got {got if not isinstance(got, list) else got[:3]}")
    return matched, total, misses


@dataclass
class Tally:
    n: int = 0
    top1: int = 0
    top3: int = 0
    facts_ok: int = 0
    facts_total: int = 0
    false_alarms: int = 0
    missed: int = 0
    errors: int = 0
    rows: list = field(default_factory=list)

    def line(self, name: str) -> str:
        n = self.n or 1
        facts = self.facts_ok / self.facts_total if self.facts_total else 0.0
        return (f"{name}: cases {self.n}  top1 {self.top1 / n:.1%}  top3 {self.top3 / n:.1%}  "
                f"facts {self.facts_ok}/{self.facts_total} ({facts:.1%})  false-alarms {self.false_alarms}  "
                f"missed {self.missed}  errors {self.errors}")

    @property
    def figures(self) -> dict:
        n = self.n or 1
        return {"top1": self.top1 / n, "top3": self.top3 / n,
                "facts": self.facts_ok / self.facts_total if self.facts_total else 0.0,
                "false_alarms": self.false_alarms}


def grade(label: dict, report: Optional[dict], tally: Tally) -> None:
    """The rules of ../shared/corpus/score.py for one case."""
    tally.n += 1
    if report is None:
        tally.errors += 1
        tally.rows.append((label["id"], "error", []))
        return
    primary = label["primary"]
    accept = {primary, *(label.get("also") or [])}
    diags = report.get("diagnoses") or []
    ranked = [d.get("incident") for d in diags]
    alarms = [d.get("incident") for d in diags if d.get("incident") not in NON_OOM and not d.get("warning")]
    if primary in NON_OOM:
        ok1 = not alarms or ranked[0] in accept
        ok3 = not alarms or bool(set(ranked[:3]) & accept)
        if [a for a in alarms if a not in accept]:
            tally.false_alarms += 1
    else:
        if not ranked:
            tally.missed += 1
        none_ok = "not-oom" in accept and not alarms
        if primary == "unknown-oom":
            ok1 = (not ranked and bool(report.get("oom_events"))) or bool(ranked[:1] and ranked[0] in accept)
            ok3 = ok1 or bool(set(ranked[:3]) & accept)
        else:
            ok1 = none_ok or bool(ranked[:1]) and ranked[0] in accept
            ok3 = none_ok or bool(set(ranked[:3]) & accept)
    tally.top1 += bool(ok1)
    tally.top3 += bool(ok3)
    m, t, misses = check_facts(label.get("facts"), report)
    tally.facts_ok += m
    tally.facts_total += t
    tally.rows.append((label["id"], "ok" if ok1 else f"MISS want {primary} got {ranked[:3]}", misses))


def diagnose_json(log: Path) -> Optional[dict]:
    from oomdoctor.pipeline import diagnose_source

    try:
        return json.loads(diagnose_source(str(log)).model_dump_json())
    except Exception:  # an error is scored, not raised: the summary counts it
        return None


def score(cases: list[tuple[dict, Path]], reports: Optional[dict] = None) -> tuple[Tally, Tally]:
    """(scored, log-silent): cases whose log shows the cause, and `inferable: no` ones apart.
    ``reports`` keeps each log's report, for a log scored in several tallies."""
    scored, silent = Tally(), Tally()
    reports = {} if reports is None else reports
    for label, log in cases:
        inferable = str(label.get("inferable", "yes")).lower() in ("yes", "partly", "true")
        if log not in reports:
            reports[log] = diagnose_json(log)
        grade(label, reports[log], scored if inferable else silent)
    return scored, silent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--half", type=int, help="one batch (the cases' `half:` field)")
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args()
    cases = load_cases()
    every = sorted({label.get("half") for label, _log in cases} - {None})
    halves = [args.half] if args.half else [*every, None]
    out = {}
    reports: dict = {}   # each log diagnosed once, for its batch and for the whole
    for h in halves:
        scored, silent = score([c for c in cases if h is None or c[0].get("half") == h], reports)
        name = f"half {h}" if h else "all"
        out[name] = scored.figures
        if not args.json:
            print(scored.line(name))
            print(f"  log-silent {silent.n}: top1 {silent.top1}/{silent.n}, false-alarms {silent.false_alarms}")
        if args.verbose:
            for cid, verdict, misses in scored.rows:
                if verdict != "ok" or misses:
                    print(f"  {cid}: {verdict}" + (f"; facts: {'; '.join(misses)}" if misses else ""))
    if args.json:
        print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
