"""`oomdoctor summarize --format html`: one self-contained page for a fleet, with failed logs
by kind and by month and the top incidents; the renderer (report.fleet_html) takes plain
dicts and fetches nothing."""
from __future__ import annotations

import calendar
import json
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

from oomdoctor.report.fleet_html import render_fleet_html
from oomdoctor.scan.fleet import fleet_data, month_of

from test_scan_inputs import CLEAN, failing_log


def oomdoctor(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "oomdoctor", *args], capture_output=True, timeout=300)


class Page(HTMLParser):
    """The page's URLs (src/href) and the text of each element with an id."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self.tags: list[str] = []
        self.ids: dict[str, str] = {}
        self._open: list[tuple[str, str]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        for k, v in attrs:
            if k in ("src", "href", "xlink:href", "action") and v:
                self.urls.append(v)
            if k == "id":
                self._open.append((v, ""))

    def handle_data(self, data):
        self._open = [(i, t + data) for i, t in self._open]

    def handle_endtag(self, tag):
        if self._open and tag in ("b", "table"):
            i, t = self._open.pop()
            self.ids[i] = t


def parse(page: str) -> Page:
    p = Page()
    p.feed(page)
    return p


def ts(year: int, month: int) -> float:
    return float(calendar.timegm((year, month, 15, 12, 0, 0)))


def records() -> list[dict]:
    oom = {"diagnoses": [{"incident": "activation-memory", "title": "Activations do not fit", "warning": False}],
           "oom_events": [{"kind": "cuda_caching_allocator"}], "environment": {"framework": "axolotl"},
           "fingerprint": "aaaa", "phase": "forward"}
    host = {"oom_events": [{"kind": "host_oom_killer"}], "environment": {}, "fingerprint": "bbbb"}
    return [
        {"path": "/l/1.log", "size": 1, "mtime": ts(2026, 9), **oom},
        {"path": "/l/2.log", "size": 1, "mtime": ts(2026, 10), **oom},
        {"path": "/l/3.log", "size": 1, "mtime": ts(2026, 10), **host},
        {"path": "/l/4.log", "size": 1, "mtime": ts(2026, 11), "diagnoses": [], "oom_events": []},
        {"path": "/l/5.log", "size": 0, "mtime": None, "error": "empty file"},
        {"path": "/l/<script>alert(1)</script>.log", "size": 1, "mtime": ts(2026, 11), **oom},
    ]


def test_fleet_data_counts_by_kind_and_month():
    data = fleet_data(records(), top=5, source="r.jsonl")
    assert (data["logs"], data["failures"], data["clean"], data["errors"]) == (6, 4, 1, 1)
    assert data["kinds"] == {"cuda_caching_allocator": 3, "host_oom_killer": 1}
    assert data["top_incidents"][0] == {"incident": "activation-memory", "title": "Activations do not fit", "logs": 3}
    months = {m["month"]: m for m in data["by_month"]}
    assert [m["month"] for m in data["by_month"]] == ["2026-09", "2026-10", "2026-11", "unknown"]
    assert months["2026-10"]["failures"] == 2 and months["2026-10"]["kinds"] == {"cuda_caching_allocator": 1,
                                                                                "host_oom_killer": 1}
    assert months["2026-11"]["logs"] == 2 and months["2026-11"]["failures"] == 1
    assert months["unknown"]["errors"] == 1
    json.dumps(data)   # plain data
    assert month_of(None) == month_of(float("nan")) == month_of(1e30) == "unknown"


def test_the_page_shows_the_counts_and_fetches_nothing():
    page = render_fleet_html(fleet_data(records(), top=5, source="r.jsonl"))
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    p = parse(page)
    assert p.urls == []                                        # nothing fetched, no links out
    assert "http" not in page.replace("http://www.w3.org/2000/svg", "")   # not even in text
    assert "script" not in p.tags and "<script>" not in page   # the hostile name is escaped
    assert "&lt;script&gt;" in page
    assert (p.ids["logs"], p.ids["failures"], p.ids["clean"], p.ids["errors"]) == ("6", "4", "1", "1")
    assert re.search(r"3\s*cuda_caching_allocator", p.ids["by-kind"])
    assert re.search(r"3\s*activation-memory\s*Activations do not fit", p.ids["top-incidents"])
    assert re.search(r"2026-10\s*2\s*2\s*0\s*cuda", p.ids["by-month"])      # month, logs, failed, unreadable
    assert "<svg" in page and page.count("<rect") == 4               # one bar part per kind and month
    assert "empty file" in p.ids["unreadable"]


def test_an_empty_fleet_renders():
    page = render_fleet_html(fleet_data([], source=None))
    assert parse(page).ids["logs"] == "0" and "holds no records" in page and "<svg" not in page


def test_summarize_html_of_a_real_scan(tmp_path: Path):
    root = tmp_path / "logs"
    root.mkdir()
    (root / "a.log").write_bytes(failing_log())
    (root / "b.log").write_bytes(CLEAN)
    (root / "c.log").write_bytes(failing_log(5))
    out = tmp_path / "r.jsonl"
    oomdoctor("scan", str(root), "-o", str(out), "--no-summary")
    p = oomdoctor("summarize", "-f", "html", str(out))
    assert p.returncode == 1, p.stderr              # the exit code of summarize: failures found
    page = p.stdout.decode()
    parsed = parse(page)
    assert parsed.urls == [] and (parsed.ids["logs"], parsed.ids["failures"]) == ("3", "2")
    assert re.search(r"2\s*cuda_caching_allocator", parsed.ids["by-kind"])
    js = json.loads(oomdoctor("summarize", "-f", "json", str(out)).stdout)
    for incident, n in js["incidents"].items():
        assert re.search(rf"{n}\s*{re.escape(incident)}", parsed.ids["top-incidents"])
