"""Stable fingerprints of failures, for grouping a fleet's jobs.

Built from the incident, the failure kinds, the exception class, the message template
and the innermost frames — never from PIDs, timestamps, sizes, ranks or paths that vary
between runs, so the same bug in a thousand jobs gets one fingerprint.
"""
from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from .model import Report


def _frame_key(file: str, function: str) -> str:
    # keep the package-relative tail of the path: site-packages/<pkg>/.../file.py
    parts = file.replace("\\", "/").split("/")
    if "site-packages" in parts:
        parts = parts[parts.index("site-packages") + 1:]
    else:
        parts = parts[-2:]
    return f"{'/'.join(parts)}:{function}"


def fingerprint_parts(report: "Report") -> list[str]:
    parts: list[str] = []
    if report.diagnoses:
        parts.append(f"incident={report.diagnoses[0].incident}")
    kinds = sorted({e.kind for e in report.oom_events})
    if kinds:
        parts.append("oom=" + ",".join(kinds))
    excs = sorted({e.exception for e in report.oom_events if e.exception})
    if excs:
        parts.append("exc=" + ",".join(excs))
    fails = sorted({f.kind for f in report.failures if not f.secondary})
    if fails:
        parts.append("fail=" + ",".join(fails))
    if report.phase:
        parts.append(f"phase={report.phase}")
    for fr in report.frames[-4:]:
        parts.append("frame=" + _frame_key(fr.file, fr.function))
    return parts


def fingerprint(report: "Report") -> Optional[str]:
    parts = fingerprint_parts(report)
    if not (report.oom_events or report.failures or report.diagnoses):
        return None
    return hashlib.sha1("\n".join(parts).encode()).hexdigest()[:16]
