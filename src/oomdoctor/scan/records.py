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
import io
import itertools
import json
import re
from typing import IO, Any, Callable, Iterable, Iterator, Optional

from ..report.model import failure_seen
from ..report.render import isatty
from ..report.common import printable

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


RECORD_SCHEMA_VERSION = "1"   # changes when a field of the records themselves does (the report's own fields
#                               follow the report's schema_version)

_KEY_PROPERTIES = {
    "path": {"type": "string", "description": "the log: a path, an fsspec URL, or ARCHIVE!/MEMBER for a member "
                                             "of a tar archive"},
    "size": {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "null"}],
             "description": "bytes on disk (compressed size for a compressed log); null when not known"},
    "mtime": {"anyOf": [{"type": "number"}, {"type": "null"}],
              "description": "modification time, seconds since the epoch; null when not known"},
}


def record_json_schema() -> dict:
    """The JSON Schema of one JSON-lines record of ``oomdoctor scan``: a report record (the
    log's path, size and mtime, then every field of ``diagnose --format json``) or an error
    record (path, size, mtime and a one-line error, nothing else)."""
    from ..report.model import SCHEMA_VERSION, report_json_schema
    report = report_json_schema()
    defs = dict(report.pop("$defs", {}))
    report.pop("$schema", None)
    report.pop("$id", None)
    report_record = dict(report)
    report_record["title"] = "ReportRecord"
    report_record["description"] = "a log that was read: path, size and mtime, then the report of diagnose"
    report_record["properties"] = {**_KEY_PROPERTIES, **report["properties"]}
    report_record["required"] = [*_KEY_PROPERTIES, *report.get("required", [])]
    defs["ReportRecord"] = report_record
    defs["ErrorRecord"] = {
        "title": "ErrorRecord", "type": "object", "additionalProperties": False,
        "description": "a log that could not be read (or found, or listed), and why",
        "properties": {**_KEY_PROPERTIES,
                       "error": {"type": "string", "minLength": 1, "description": "the reason, one line"}},
        "required": [*_KEY_PROPERTIES, "error"],
    }
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": f"urn:oomdoctor:schema:scan-record:{RECORD_SCHEMA_VERSION}+report-{SCHEMA_VERSION}",
            "title": "ScanRecord",
            "description": "one line of 'oomdoctor scan --format jsonl' (a results file, or stdout)",
            "oneOf": [{"$ref": "#/$defs/ReportRecord"}, {"$ref": "#/$defs/ErrorRecord"}],
            "$defs": defs}


def error_record(path: str, size: Optional[int], mtime: Optional[float], error: str) -> dict:
    line = (error or "cannot read").replace("\r", " ").split("\n")[0].strip()
    return {"path": path, "size": size, "mtime": mtime, "error": line[:300]}


def is_failure(rec: dict) -> bool:
    """Did the log fail? Same test as diagnose's exit code (``Report.found_anything``): a
    diagnosis that is not a warning, an OOM event the run did not survive, a failure of another
    kind, or a process that died without its error in the log. A record read back from CSV
    carries the answer (``failure``): the row holds too little to work it out again."""
    if rec.get("error"):
        return False
    if isinstance(rec.get("failure"), bool):   # a CSV row says so itself (its ``failure`` column)
        return rec["failure"]
    return failure_seen((bool(d.get("warning")) for d in rec.get("diagnoses") or []),
                        (bool(e.get("survived")) for e in rec.get("oom_events") or []),
                        (bool(f.get("secondary")) for f in rec.get("failures") or []),
                        (rec.get("phase_detail") or {}).get("stops_early"))


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
        self._tty = isatty(out)
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


class RecordsError(Exception):
    """A results file that cannot be read as scan records: one line, ``FILE:LINE: why``.
    (Not the reader's ``InputError``: this module is loaded with the CLI, the reader is not.)"""


PARTIAL_RECORD = re.compile(r'\s*\{\s*"path"\s*:')   # how every JSON-lines record begins


def open_results(path: str) -> IO[bytes]:
    """A results file (a path, or an fsspec URL) opened for reading, or ``InputError``."""
    from ..read.reader import open_path
    return open_path(path, "is a directory, not a results file")


def read_records(path: str, *, strict: bool = False,
                 on_partial: Optional[Callable[[int], None]] = None) -> Iterator[dict]:
    """Records of a JSONL or CSV results file (a path or an fsspec URL).

    The unfinished last line of a scan that was killed while it wrote a record (no newline
    at its end, not valid JSON) is left out; ``on_partial(line)`` is told. Other lines that
    are no record (a field of the wrong type included: ``record_problem``) are skipped, or
    with ``strict`` raise ``RecordsError`` naming the line. Blank lines are skipped.

    Bytes that are not UTF-8 (a CSV row of a file name that is not) are read back as the
    same lone surrogates the scan had, so that such a name keeps its identity on resume."""
    with open_results(path) as raw:
        fh = io.TextIOWrapper(raw, encoding="utf-8", errors="surrogateescape", newline="")
        first = fh.readline()
        if is_csv_header(first):
            yield from _read_csv(fh, first, path, strict, on_partial)
            return
        lines = itertools.chain([first] if first else [], fh)
        for no, line in enumerate(lines, 1):
            text = line.strip()
            if not text:
                continue
            try:
                rec = json.loads(text)
            except ValueError as exc:
                if not line.endswith("\n") and PARTIAL_RECORD.match(line):
                    if on_partial is not None:   # the last line, cut short by a killed scan
                        on_partial(no)
                    continue
                if strict:
                    raise RecordsError(f"{path}:{no}: not a scan record (not JSON: {exc.msg})") from None
                continue
            if isinstance(rec, dict) and isinstance(rec.get("path"), str):
                problem = record_problem(rec)
                if problem is None:
                    yield rec
                elif strict:
                    raise RecordsError(f"{path}:{no}: not a scan record ({problem})")
            elif strict:
                what = "a JSON object without a path" if isinstance(rec, dict) else f"JSON {type(rec).__name__}"
                raise RecordsError(f"{path}:{no}: not a scan record ({what})")


_STRING = (str,)
_NUMBER = (int, float)
# The fields of a record that the summary (and --resume) read, and what each must be when
# it is there and not null: a type, or for a list the fields of each of its objects, or for
# an object its own fields.
_OBJECT_FIELDS = {
    "environment": {"framework": _STRING, "framework_version": _STRING, "torch_version": _STRING,
                    "deepspeed_version": _STRING, "transformers_version": _STRING},
    "phase_detail": {"stops_early": _STRING},
}
_LIST_FIELDS = {
    "diagnoses": {"incident": _STRING, "title": _STRING, "warning": (bool,)},
    "oom_events": {"kind": _STRING, "survived": (bool,), "symptom": (bool,)},
    "failures": {"kind": _STRING, "secondary": (bool,)},
}
_SCALAR_FIELDS = {"size": (int,), "mtime": _NUMBER, "error": _STRING, "failure": (bool,), "bytes_read": (int,),
                  "fingerprint": _STRING, "phase": _STRING}


def _json_type(value: object) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    return {str: "a string", list: "a list", dict: "an object"}.get(type(value), type(value).__name__)


def _wrong(value: object, types: tuple) -> bool:
    return value is not None and (not isinstance(value, types) or (isinstance(value, bool) and bool not in types))


def record_problem(rec: dict) -> Optional[str]:
    """Why a JSON object with a path is no scan record after all: a field that the summary or
    ``--resume`` reads holds the wrong type (``"diagnoses": "oops"``, a list for a size); None
    when there is none. Null stands for a field that is not there."""
    for name, types in _SCALAR_FIELDS.items():
        value = rec.get(name)
        if _wrong(value, types):
            return f"{name} is {_json_type(value)}, not {_json_type(types[0]())}"
    for name, fields in _OBJECT_FIELDS.items():
        value = rec.get(name)
        if _wrong(value, (dict,)):
            return f"{name} is {_json_type(value)}, not an object"
        problem = _fields_problem(value or {}, fields, name)
        if problem:
            return problem
    for name, fields in _LIST_FIELDS.items():
        value = rec.get(name)
        if _wrong(value, (list,)):
            return f"{name} is {_json_type(value)}, not a list"
        for i, item in enumerate(value or ()):
            if not isinstance(item, dict):
                return f"{name}[{i}] is {_json_type(item)}, not an object"
            problem = _fields_problem(item, fields, f"{name}[{i}]")
            if problem:
                return problem
    return None


def _fields_problem(obj: dict, fields: dict, where: str) -> Optional[str]:
    for name, types in fields.items():
        value = obj.get(name)
        if _wrong(value, types):
            return f"{where}.{name} is {_json_type(value)}, not {_json_type(types[0]())}"
    return None


def allow_long_csv_fields() -> None:
    """A name can be long (a URL, a member name in a pax header) and the csv module stops
    at 128 KiB a field: a results file we wrote must read back whatever its names."""
    if csv.field_size_limit() < _CSV_FIELD_LIMIT:
        csv.field_size_limit(_CSV_FIELD_LIMIT)


_CSV_FIELD_LIMIT = 64 * 2**20


def _read_csv(fh, first: str, path: str = "", strict: bool = False,
              on_partial: Optional[Callable[[int], None]] = None) -> Iterator[dict]:
    allow_long_csv_fields()
    tail = {"whole": first.endswith("\n")}

    def lines() -> Iterator[str]:
        for line in itertools.chain([first], fh):
            tail["whole"] = line.endswith("\n")
            yield line

    reader = csv.reader(lines())
    header = next(reader, None)
    if not header:
        return
    start = reader.line_num + 1
    rows = []   # (first line, row): each row is looked at once the next one is read
    for row in _csv_rows(reader, path):
        rows.append((start, row))
        start = reader.line_num + 1
        if len(rows) > 1:
            rec = _csv_checked(header, *rows.pop(0), path, strict)
            if rec is not None:
                yield rec
    if rows:
        no, row = rows[0]
        if row and not tail["whole"] and (len(row) != len(header) or csv_record(dict(zip(header, row))) is None):
            if on_partial is not None:   # the last row, cut short by a killed scan
                on_partial(no)
            return
        rec = _csv_checked(header, no, row, path, strict)
        if rec is not None:
            yield rec


def _csv_rows(reader, path: str) -> Iterator[list]:
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise RecordsError(f"{path}:{reader.line_num}: not a scan record (damaged CSV: {exc})") from None
        yield row


def _csv_checked(header: list, no: int, row: list, path: str, strict: bool) -> Optional[dict]:
    if not row:
        return None
    rec = csv_record(dict(zip(header, row)))
    if strict and (rec is None or len(row) != len(header)):
        why = (f"a CSV row of {len(row)} fields, the header has {len(header)}" if len(row) != len(header)
               else "no path")
        raise RecordsError(f"{path}:{no}: not a scan record ({why})")
    return rec


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
    rec["bytes_read"] = _num(row.get("bytes_read"), int)
    # whether the log failed is the row's own word: the top incident may be a warning, and an
    # OOM may have been survived, and the row says neither (``is_failure`` goes by this)
    rec["failure"] = {"1": True, "0": False}.get((row.get("failure") or "").strip())
    if row.get("incident"):
        rec["diagnoses"] = [{"incident": row["incident"], "title": row.get("title") or "",
                             "memory_failure": row.get("memory_failure") == "1"}]
    kinds = [k for k in (row.get("oom_kinds") or "").split(";") if k]
    if kinds:
        rec["oom_events"] = [{"kind": k} for k in kinds]
    return rec


def _num(text: Optional[str], kind):
    if text in (None, ""):
        return None
    try:
        return kind(text)
    except ValueError:
        return None


def iter_lines(records: Iterable[dict]) -> Iterator[str]:
    for rec in records:
        yield to_json_line(rec)

