"""The fleet view as plain data, for ``summarize --format html`` (``report.fleet_html``):
the summary's counts, failed logs by kind, the top incidents and fingerprints, and the
logs, failures and unreadable logs of each month (of each log's mtime, UTC).

Of several records of one path the last one counts, as in ``summary.summarize``.
"""
from __future__ import annotations

import collections
import datetime
from typing import Iterable, Optional

from .records import is_failure
from .summary import failure_kind, latest, summary_of

UNKNOWN_MONTH = "unknown"


def month_of(mtime) -> str:
    """``YYYY-MM`` (UTC) of a record's mtime; ``unknown`` without one (or a nonsense one)."""
    if not isinstance(mtime, (int, float)) or isinstance(mtime, bool) or mtime != mtime:
        return UNKNOWN_MONTH
    try:
        return datetime.datetime.fromtimestamp(mtime, tz=datetime.timezone.utc).strftime("%Y-%m")
    except (OverflowError, OSError, ValueError):
        return UNKNOWN_MONTH


def fleet_data(records: Iterable[dict], *, top: int = 10, source: Optional[str] = None) -> dict:
    """Everything the fleet page shows, as JSON-able dicts and lists."""
    final = latest(records)   # of several records of one path the last one, as summarize takes them
    stats = summary_of(final)
    data = stats.to_dict(top=top)
    data["source"] = source
    data["top_incidents"] = [{"incident": inc, "title": stats.titles.get(inc, ""), "logs": n}
                             for inc, n in stats.incidents.most_common(top)]
    data["more_incidents"] = max(0, len(stats.incidents) - top)
    months: dict = {}
    for rec in final:
        m = months.setdefault(month_of(rec.get("mtime")), {"logs": 0, "failures": 0, "errors": 0,
                                                           "kinds": collections.Counter()})
        m["logs"] += 1
        if rec.get("error"):
            m["errors"] += 1
        elif is_failure(rec):
            m["failures"] += 1
            m["kinds"][failure_kind(rec)] += 1
    order = sorted(k for k in months if k != UNKNOWN_MONTH) + ([UNKNOWN_MONTH] if UNKNOWN_MONTH in months else [])
    data["by_month"] = [{"month": k, "logs": months[k]["logs"], "failures": months[k]["failures"],
                         "errors": months[k]["errors"], "kinds": dict(months[k]["kinds"].most_common())}
                        for k in order]
    data["exit_code"] = stats.exit_code
    return data
