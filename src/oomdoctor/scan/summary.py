"""The fleet view: what failed, how often, on which stack, and which logs show it.

Built from records only (``oomdoctor summarize results.jsonl`` reads them back), so the
summary of a finished scan and of a results file are the same. When a results file holds
several records of one path (files joined with cat, or edited), the last one counts, as
it would have replaced the others on ``--resume``.
"""
from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Iterable, Optional

from ..facts.sizes import format_size
from .progress import printable
from .records import is_failure

EXAMPLES = 5   # files listed under each fingerprint


@dataclass
class Summary:
    logs: int = 0
    failures: int = 0
    clean: int = 0
    errors: int = 0
    bytes_read: int = 0
    seconds: Optional[float] = None
    incidents: collections.Counter = field(default_factory=collections.Counter)
    titles: dict = field(default_factory=dict)
    frameworks: collections.Counter = field(default_factory=collections.Counter)
    versions: collections.Counter = field(default_factory=collections.Counter)
    fingerprints: collections.Counter = field(default_factory=collections.Counter)
    fingerprint_info: dict = field(default_factory=dict)          # fp -> (incident, phase)
    fingerprint_files: dict = field(default_factory=dict)         # fp -> [paths]
    error_examples: list = field(default_factory=list)

    def add(self, rec: dict) -> None:
        self.logs += 1
        if rec.get("error"):
            self.errors += 1
            if len(self.error_examples) < EXAMPLES:
                self.error_examples.append((rec.get("path"), rec.get("error")))
            return
        self.bytes_read += rec.get("bytes_read") or 0
        if not is_failure(rec):
            self.clean += 1
            return
        self.failures += 1
        diags = rec.get("diagnoses") or []
        if diags:
            incident = diags[0].get("incident") or "unknown"
            self.titles.setdefault(incident, diags[0].get("title") or "")
        else:
            kinds = sorted({e.get("kind") or "?" for e in rec.get("oom_events") or []})
            incident = "oom:" + ",".join(kinds) if kinds else "unknown"
        self.incidents[incident] += 1
        env = rec.get("environment") or {}
        fw = env.get("framework") or "unknown"
        fwv = env.get("framework_version")
        self.frameworks[f"{fw} {fwv}" if fwv else fw] += 1
        for lib, key in (("torch", "torch_version"), ("deepspeed", "deepspeed_version"),
                         ("transformers", "transformers_version")):
            v = env.get(key)
            if v:
                self.versions[f"{lib} {v}"] += 1
        fp = rec.get("fingerprint")
        if fp:
            self.fingerprints[fp] += 1
            self.fingerprint_info.setdefault(fp, (incident, rec.get("phase")))
            files = self.fingerprint_files.setdefault(fp, [])
            if len(files) < EXAMPLES:
                files.append(rec.get("path"))

    @property
    def exit_code(self) -> int:
        """0: no failure found; 1: failures found; 3: some logs could not be read."""
        if self.errors:
            return 3
        return 1 if self.failures else 0

    def to_dict(self, top: int = 10) -> dict:
        return {
            "logs": self.logs, "failures": self.failures, "clean": self.clean, "errors": self.errors,
            "bytes_read": self.bytes_read, "seconds": self.seconds,
            "incidents": dict(self.incidents.most_common()),
            "frameworks": dict(self.frameworks.most_common()),
            "versions": dict(self.versions.most_common()),
            "top_fingerprints": [
                {"fingerprint": fp, "logs": n, "incident": self.fingerprint_info[fp][0],
                 "phase": self.fingerprint_info[fp][1], "files": self.fingerprint_files[fp]}
                for fp, n in self.fingerprints.most_common(top)],
            "errors_examples": [{"path": p, "error": e} for p, e in self.error_examples],
        }

    def render(self, top: int = 10) -> str:
        out: list[str] = []
        took = f" in {self.seconds:.1f} s" if self.seconds is not None else ""
        out.append(f"scanned {self.logs} logs ({format_size(self.bytes_read)}){took}: "
                   f"{self.failures} failed, {self.clean} clean, {self.errors} unreadable")
        if self.incidents:
            out.append("incidents:")
            for inc, n in self.incidents.most_common():
                title = self.titles.get(inc, "")
                out.append(f"  {n:6d}  {inc}" + (f"  ({title})" if title else ""))
        if self.frameworks:
            out.append("failed logs by framework:")
            out.extend(f"  {n:6d}  {fw}" for fw, n in self.frameworks.most_common(top))
        if self.versions:
            out.append("failed logs by version:")
            out.extend(f"  {n:6d}  {v}" for v, n in self.versions.most_common(top))
        if self.fingerprints:
            out.append("top fingerprints:")
            for fp, n in self.fingerprints.most_common(top):
                incident, phase = self.fingerprint_info[fp]
                out.append(f"  {n:6d}  {fp}  {incident}" + (f" during {phase}" if phase else ""))
                files = self.fingerprint_files[fp]
                for p in files:
                    out.append(f"            {p}")
                if n > len(files):
                    out.append(f"            ... and {n - len(files)} more")
        if self.error_examples:
            out.append("unreadable:")
            out.extend(f"          {p}: {e}" for p, e in self.error_examples)
            if self.errors > len(self.error_examples):
                out.append(f"          ... and {self.errors - len(self.error_examples)} more")
        # paths, error reasons, versions and phases come from file names, logs and results
        # files that anyone may have written: each line is made safe for a terminal
        return "\n".join(printable(line) for line in out) + "\n"


def summarize(records: Iterable[dict]) -> Summary:
    """Summary of records; of several records of one path, the last one counts."""
    last: dict = {}
    for rec in records:
        path = rec.get("path")
        last.pop(path, None)   # keep first-seen order of the final records
        last[path] = rec
    s = Summary()
    for rec in last.values():
        s.add(rec)
    return s
