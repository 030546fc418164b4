"""Scan records: one per log, written as JSON Lines (or CSV) as each log finishes.

A record is the log's ``path``, ``size`` and ``mtime`` (what ``--resume`` compares) and
the same fields as ``oomdoctor diagnose --format json``. A log that could not be read
gives ``{"path", "size", "mtime", "error"}`` with a one-line reason instead. A log with
no failure anchor at all is not parsed: its record has empty diagnoses and events, and
``lines_read`` 0 (its lines were never counted).

The ``--out`` file itself, locked for the whole scan and made ready for ``--resume``, is
``results.ResultsFile``.
"""
from __future__ import annotations

import csv
import json
import os
import re
from typing import IO, Any, Iterable, Iterator, Optional

from .progress import printable

FORMATS = ("jsonl", "csv")

CSV_FIELDS = ("path", "size", "mtime", "error", "failure", "incident", "title", "confidence",
              "memory_failure", "oom_kinds", "line", "phase", "framework", "framework_version",
              "torch_version", "deepspeed_version", "zero_stage", "fingerprint", "bytes_read")

_CLEAN_TEMPLATE: Optional[dict] = None


def report_record(path: str, size: Optional[int], mtime: Optional[float], report) -> dict:
    rec: dict[str, Any] = {"path": path, "size": size, "mtime": mtime}
    rec.update(report.model_dump(mode="json"))
    return rec


def clean_record(path: str, size: Optional[int], mtime: Optional[float], bytes_read: int) -> dict:
    """Record of a log without any anchor: what an empty report looks like, built once."""
    global _CLEAN_TEMPLATE
    if _CLEAN_TEMPLATE is None:
        from .. import __version__
        from ..report.model import Report
        _CLEAN_TEMPLATE = Report(tool_version=__version__).model_dump(mode="json")
    rec: dict[str, Any] = {"path": path, "size": size, "mtime": mtime}
    rec.update(_CLEAN_TEMPLATE)   # shallow: records are only ever serialised, never changed
    rec["source"] = path
    rec["bytes_read"] = bytes_read
    return rec


def error_record(path: str, size: Optional[int], mtime: Optional[float], error: str) -> dict:
    line = (error or "cannot read").replace("\r", " ").split("\n")[0].strip()
    return {"path": path, "size": size, "mtime": mtime, "error": line[:300]}


def is_failure(rec: dict) -> bool:
    """Did the log fail? Same test as diagnose's exit code (``Report.found_anything``): a
    diagnosis that is not a warning, an OOM event that ended something, a failure of another
    kind, or a process that died without its error in the log."""
    if rec.get("error"):
        return False
    return bool(any(not d.get("warning") for d in rec.get("diagnoses") or [])
                or any(not e.get("survived") and not e.get("symptom") for e in rec.get("oom_events") or [])
                or any(not f.get("secondary") for f in rec.get("failures") or [])
                or (rec.get("phase_detail") or {}).get("stops_early") == "process_died")


def key(rec: dict) -> tuple:
    return (rec.get("path"), rec.get("size"), rec.get("mtime"))


# -- writing -------------------------------------------------------------------------------

# json escapes C0 controls even with ensure_ascii=False, but leaves DEL, C1 controls (an
# 8-bit CSI on some terminals) and lone surrogates (a file name that is not UTF-8) as they
# are: the first two would reach a terminal that shows the records, the last cannot be
# encoded at all. As \u escapes, the record still holds the real name.
_UNSAFE_IN_JSON = re.compile("[\x7f-\x9f\ud800-\udfff]")


def _escape(match: re.Match) -> str:
    return f"\\u{ord(match.group()):04x}"


def to_json_line(rec: dict) -> str:
    text = json.dumps(rec, ensure_ascii=False, separators=(",", ":"))
    if _UNSAFE_IN_JSON.search(text):   # outside strings JSON text is ASCII: only names match
        text = _UNSAFE_IN_JSON.sub(_escape, text)
    return text + "\n"


def csv_row(rec: dict) -> dict:
    env = rec.get("environment") or {}
    diags = rec.get("diagnoses") or []
    top = diags[0] if diags else {}
    events = rec.get("oom_events") or []
    first_line = None
    if events:
        first_line = events[0].get("line")
    elif top.get("evidence"):
        first_line = top["evidence"][0].get("line")
    return {
        "path": rec.get("path"), "size": rec.get("size"), "mtime": rec.get("mtime"),
        "error": rec.get("error") or "", "failure": int(is_failure(rec)) if not rec.get("error") else "",
        "incident": top.get("incident", ""), "title": top.get("title", ""), "confidence": top.get("confidence", ""),
        "memory_failure": "" if not top else int(bool(top.get("memory_failure"))),
        "oom_kinds": ";".join(sorted({e.get("kind", "") for e in events})), "line": first_line or "",
        "phase": rec.get("phase") or "", "framework": env.get("framework") or "",
        "framework_version": env.get("framework_version") or "", "torch_version": env.get("torch_version") or "",
        "deepspeed_version": env.get("deepspeed_version") or "",
        "zero_stage": "" if env.get("zero_stage") is None else env.get("zero_stage"),
        "fingerprint": rec.get("fingerprint") or "", "bytes_read": rec.get("bytes_read", ""),
    }


class RecordWriter:
    """Streams records to a file or stdout, flushing each so an interrupted scan keeps them.

    CSV has no escapes: rows written to a terminal get names made printable (as ``ls``
    does); rows written to a file or a pipe keep them as they are."""

    def __init__(self, out: IO[str], fmt: str = "jsonl", *, header: bool = True):
        self.out = out
        self.fmt = fmt
        self._csv = None
        self._tty = bool(getattr(out, "isatty", lambda: False)())
        if fmt == "csv":
            self._csv = csv.DictWriter(out, fieldnames=list(CSV_FIELDS), extrasaction="ignore")
            if header:
                self._csv.writeheader()
                self.out.flush()   # before worker processes fork with a copy of the buffer

    def write(self, rec: dict) -> None:
        if self._csv is not None:
            row = csv_row(rec)
            if self._tty:
                row = {k: printable(v) if isinstance(v, str) else v for k, v in row.items()}
            self._csv.writerow(row)
        else:
            self.out.write(to_json_line(rec))
        self.out.flush()


# -- reading (summarize, resume) -----------------------------------------------------------

def is_csv_header(first: str) -> bool:
    return first.startswith("path,") or first.startswith('"path"')


def read_records(path: str) -> Iterator[dict]:
    """Records of a JSONL or CSV results file; an unfinished last line is ignored.

    Bytes that are not UTF-8 (a CSV row of a file name that is not) are read back as the
    same lone surrogates the scan had, so that such a name keeps its identity on resume."""
    with open(path, "r", encoding="utf-8", errors="surrogateescape", newline="") as fh:
        first = fh.readline()
        fh.seek(0)
        if is_csv_header(first):
            yield from _read_csv(fh)
            return
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict) and "path" in rec:
                yield rec


def allow_long_csv_fields() -> None:
    """A name can be long (a URL, a member name in a pax header) and the csv module stops
    at 128 KiB a field: a results file we wrote must read back whatever its names."""
    if csv.field_size_limit() < _CSV_FIELD_LIMIT:
        csv.field_size_limit(_CSV_FIELD_LIMIT)


_CSV_FIELD_LIMIT = 64 * 2**20


def _read_csv(fh) -> Iterator[dict]:
    allow_long_csv_fields()
    for row in csv.DictReader(fh):
        rec = csv_record(row)
        if rec is not None:
            yield rec


def csv_record(row: dict) -> Optional[dict]:
    """The record that a CSV row stands for (the fields the summary needs)."""
    if not row.get("path"):
        return None
    rec: dict[str, Any] = {"path": row["path"], "size": _num(row.get("size"), int),
                           "mtime": _num(row.get("mtime"), float)}
    if row.get("error"):
        rec["error"] = row["error"]
        return rec
    env = {"framework": row.get("framework") or None, "framework_version": row.get("framework_version") or None,
           "torch_version": row.get("torch_version") or None,
           "deepspeed_version": row.get("deepspeed_version") or None}
    rec["environment"] = env
    rec["fingerprint"] = row.get("fingerprint") or None
    rec["phase"] = row.get("phase") or None
    if row.get("incident"):
        rec["diagnoses"] = [{"incident": row["incident"], "title": row.get("title") or "",
                             "memory_failure": row.get("memory_failure") == "1"}]
    elif row.get("failure") == "1":
        rec["oom_events"] = [{"kind": k} for k in (row.get("oom_kinds") or "").split(";") if k]
    return rec


def _num(text: Optional[str], kind):
    if text in (None, ""):
        return None
    try:
        return kind(text)
    except ValueError:
        return None


def done_keys(path: str) -> set:
    """(path, size, mtime) of the logs a results file has records of, for ``skip``: of
    several records of one path the last counts, and an error record does not count (that
    log is tried again)."""
    if not os.path.exists(path):
        return set()
    last: dict = {}
    for rec in read_records(path):
        last[rec.get("path")] = rec
    return {key(r) for r in last.values() if not r.get("error")}


def iter_lines(records: Iterable[dict]) -> Iterator[str]:
    for rec in records:
        yield to_json_line(rec)

