"""The fleet view: what failed, how often, on which stack, and which logs show it.

Built from records only (``oomdoctor summarize results.jsonl`` reads them back), so the
summary of a finished scan and of a results file are the same. When a results file holds
several records of one path (files joined with cat, or edited), the last one counts, as
it would have replaced the others on ``--resume``.
"""
from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import IO, Iterable, Optional

from ..facts.sizes import format_size
from ..report.common import printable
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
    kinds: collections.Counter = field(default_factory=collections.Counter)   # failed logs by kind

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
        kind = failure_kind(rec)
        self.kinds[kind] += 1
        diags = rec.get("diagnoses") or []
        if diags:
            incident = diags[0].get("incident") or "unknown"
            self.titles.setdefault(incident, diags[0].get("title") or "")
        else:
            kinds = sorted({e.get("kind") or "?" for e in rec.get("oom_events") or []})
            # a failure that is no OOM is named by its kind (nccl_timeout, process died ...)
            incident = "oom:" + ",".join(kinds) if kinds else kind
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
            "kinds": dict(self.kinds.most_common()),
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


    def print_tables(self, stream: IO[str], top: int = 10, color: bool = False, width: int | None = None) -> None:
        """The summary as rich tables, for a person at a terminal: the counts, failed logs by
        kind, the top incidents and fingerprints (``top`` of each), the unreadable logs."""
        from rich import box
        from rich.table import Table
        from rich.text import Text

        from ..report.terminal import make_console
        console = make_console(stream, color=color, width=width, terminal=color)

        wide = console.width >= 100      # titles and example logs only where they fit

        def table(title: str, *columns: str) -> Table:
            t = Table(title=Text(title, style="bold"), title_justify="left", box=box.ROUNDED,
                      header_style="bold", caption_justify="left")
            console.print()
            for name in columns:
                t.add_column(name, justify="right" if name == "logs" else "left", no_wrap=name == "logs",
                             overflow="fold")
            return t

        took = f" in {self.seconds:.1f} s" if self.seconds is not None else ""
        head = Text.assemble(
            (f"scanned {self.logs} logs", "bold"), f" ({format_size(self.bytes_read)}){took}: ",
            (f"{self.failures} failed", "bold red" if self.failures else ""), f", {self.clean} clean, ",
            (f"{self.errors} unreadable", "bold yellow" if self.errors else ""))
        console.print(head)
        if self.kinds:
            t = table("Failures by kind", "logs", "kind")
            for kind, n in self.kinds.most_common():
                t.add_row(str(n), Text(printable(kind)))
            console.print(t)
        if self.incidents:
            t = table("Top incidents", "logs", "incident", *(("title",) if wide else ()))
            for inc, n in self.incidents.most_common(top):
                title = Text(printable(self.titles.get(inc, "")), style="dim")
                t.add_row(str(n), Text(printable(inc)), *((title,) if wide else ()))
            if len(self.incidents) > top:
                t.caption = f"{len(self.incidents) - top} more incidents (--top)"
            console.print(t)
        if self.fingerprints:
            t = table("Top fingerprints", "logs", "fingerprint", "incident", *(("a log that shows it",) if wide else ()))
            for fp, n in self.fingerprints.most_common(top):
                incident, phase = self.fingerprint_info[fp]
                what = Text(printable(incident) + (f" during {printable(phase)}" if phase else ""))
                files = self.fingerprint_files[fp]
                example = Text(printable(files[0]) if files else "", style="dim")
                t.add_row(str(n), Text(printable(fp)), what, *((example,) if wide else ()))
            if len(self.fingerprints) > top:
                t.caption = f"{len(self.fingerprints) - top} more fingerprints (--top)"
            console.print(t)
        if self.error_examples:
            t = table("Unreadable", "log", "error")
            for p, e in self.error_examples:
                t.add_row(Text(printable(p)), Text(printable(e)))
            if self.errors > len(self.error_examples):
                t.caption = f"... and {self.errors - len(self.error_examples)} more"
            console.print(t)
        console.print()
        console.print(Text("records: --out FILE, or pipe stdout (oomdoctor scan ... | jq); "
                           "oomdoctor summarize FILE for the full summary", style="dim"))


def failure_kind(rec: dict) -> str:
    """What a failed log died of: the kind of its first OOM that ended something, else of
    its first failure that was not a consequence of another, else how it stops."""
    for e in rec.get("oom_events") or []:
        if not e.get("survived") and not e.get("symptom"):
            return e.get("kind") or "oom"
    for f in rec.get("failures") or []:
        if not f.get("secondary"):
            return f.get("kind") or "failure"
    stops = (rec.get("phase_detail") or {}).get("stops_early")
    if stops:
        return str(stops).replace("_", " ")
    if not rec.get("diagnoses"):
        return "unknown"   # a CSV row that failed and says no more
    return "diagnosed, no error line"


def latest(records: Iterable[dict]) -> list[dict]:
    """Of several records of one path the last one, in the order of those last records (a
    path recorded again takes the place of its new record)."""
    last: dict = {}
    for rec in records:
        path = rec.get("path")
        last.pop(path, None)   # order of the last records, not of the first
        last[path] = rec
    return list(last.values())


def summary_of(records: Iterable[dict]) -> Summary:
    """Summary of records taken as they are (``latest`` already applied)."""
    s = Summary()
    for rec in records:
        s.add(rec)
    return s


def summarize(records: Iterable[dict]) -> Summary:
    """Summary of records; of several records of one path, the last one counts."""
    return summary_of(latest(records))
