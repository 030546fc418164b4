"""The fleet page of ``oomdoctor summarize --format html``: one self-contained HTML page
(inline CSS and SVG; nothing fetched, no script) with the counts, failed logs by kind,
failures month by month, the top incidents and fingerprints, the stacks that failed and
the logs that could not be read.

It takes plain dicts (what ``scan.fleet.fleet_data`` builds from a results file), so that
this layer knows nothing of scans. Every string is escaped: names and reasons come from
file names and logs that anyone may have written.
"""
from __future__ import annotations

import math
from typing import Optional

from ..facts.sizes import format_size
from .html import e

CHART_WIDTH = 760
CHART_HEIGHT = 180
PALETTE = ("#d9534f", "#5b7fbf", "#f0ad4e", "#8e6cc0", "#5cb85c", "#e377c2", "#17becf", "#8c564b", "#bcbd22")
OTHER_COLOUR = "#aaa"
MAX_KINDS_IN_CHART = len(PALETTE)

_CSS = """
body{font:15px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2em auto;max-width:880px;color:#1d1d1f}
h1{font-size:1.3em;margin:0 0 .3em} h2{font-size:1.05em;margin:1.6em 0 .4em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;width:100%} th{text-align:left;font-weight:600;border-bottom:1px solid #ddd}
td,th{padding:3px 12px 3px 0;vertical-align:top} td.n{font-variant-numeric:tabular-nums;text-align:right;width:5em}
td.bar{width:40%} .bar i{display:inline-block;height:11px;background:#d9534f;border-radius:2px}
code{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:13px;word-break:break-all}
td.m code,td.k code{white-space:nowrap;word-break:normal}
.muted{color:#777;font-size:13px} .counts span{display:inline-block;margin-right:22px}
.counts b{font-size:1.4em;font-variant-numeric:tabular-nums} .failed b{color:#d9534f} .errors b{color:#c08000}
.legend span{display:inline-block;margin-right:14px;font-size:13px}
.legend i{display:inline-block;width:11px;height:11px;margin-right:4px;vertical-align:-1px}
svg text{font:11px system-ui,sans-serif;fill:#555}
"""


def render_fleet_html(data: dict, *, title: Optional[str] = None) -> str:
    """The page for ``data``: the keys of ``Summary.to_dict`` plus ``kinds`` (failed logs by
    kind), ``top_incidents`` ([{incident, title, logs}]), ``by_month`` ([{month, logs,
    failures, errors, kinds}]) and ``source`` (the results file), any of them missing or empty."""
    source = data.get("source")
    title = title or "oomdoctor fleet summary" + (f": {source}" if source else "")
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           f"<title>{e(title)}</title><style>{_CSS}</style></head><body>",
           f"<h1>{e(title)}</h1>"]
    logs, failures = data.get("logs", 0), data.get("failures", 0)
    out.append('<p class="counts">'
               f'<span><b id="logs">{int(logs or 0)}</b> logs</span>'
               f'<span class="failed"><b id="failures">{int(failures or 0)}</b> failed</span>'
               f'<span><b id="clean">{int(data.get("clean") or 0)}</b> clean</span>'
               f'<span class="errors"><b id="errors">{int(data.get("errors") or 0)}</b> unreadable</span>'
               f'<span class="muted">{e(format_size(data.get("bytes_read") or 0))} read</span></p>')
    kinds = data.get("kinds") or {}
    _counts_table(out, "Failed logs by kind", "kind", kinds, "by-kind")
    _over_time(out, data.get("by_month") or [], kinds)
    _incidents(out, data)
    _fingerprints(out, data.get("top_fingerprints") or [])
    _counts_table(out, "Failed logs by framework", "framework", data.get("frameworks") or {}, "by-framework")
    _counts_table(out, "Failed logs by version", "version", data.get("versions") or {}, "by-version")
    _unreadable(out, data)
    if not logs:
        out.append('<p class="muted">The results file holds no records.</p>')
    out.append('<p class="muted">oomdoctor summarize --format html; the records: oomdoctor summarize '
               '--format json, or the results file itself.</p>')
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def _bar(n: int, scale: int) -> str:
    """A bar for ``n`` of the table's largest count ``scale``."""
    width = 0 if not scale or not n else max(1, round(100 * n / scale))
    return f'<td class="bar"><i style="width:{width}%"></i></td>'


def _counts_table(out: list, heading: str, what: str, counts: dict, ident: str) -> None:
    if not counts:
        return
    total = max(int(n) for n in counts.values())
    out.append(f'<h2>{e(heading)}</h2><table id="{ident}"><tr><th>logs</th><th>{e(what)}</th><th></th></tr>')
    for name, n in counts.items():
        out.append(f'<tr><td class="n">{int(n)}</td><td><code>{e(name)}</code></td>{_bar(int(n), total)}</tr>')
    out.append("</table>")


def _colours(kinds: dict) -> dict:
    names = list(kinds)[:MAX_KINDS_IN_CHART]
    return {k: PALETTE[i] for i, k in enumerate(names)}


def _over_time(out: list, months: list, kinds: dict) -> None:
    if not months:
        return
    out.append("<h2>Failures over time</h2>")
    out.append('<p class="muted">By month of each log\'s modification time (UTC); logs whose time is not '
               "known are counted under \u201cunknown\u201d.</p>")
    colours = _colours(kinds)
    top = max((int(m.get("failures", 0)) for m in months), default=0)
    if top:
        out.append(_chart(months, colours, top))
        legend = [f'<span><i style="background:{c}"></i>{e(k)}</span>' for k, c in colours.items()]
        if len(kinds) > len(colours):
            legend.append(f'<span><i style="background:{OTHER_COLOUR}"></i>other kinds</span>')
        out.append('<p class="legend">' + "".join(legend) + "</p>")
    out.append('<table id="by-month"><tr><th>month</th><th>logs</th><th>failed</th><th>unreadable</th>'
               "<th>failed by kind</th></tr>")
    for m in months:
        by_kind = ", ".join(f"{e(k)} {int(n)}" for k, n in (m.get("kinds") or {}).items())
        out.append(f'<tr><td class="m"><code>{e(m.get("month"))}</code></td><td class="n">{int(m.get("logs", 0))}</td>'
                   f'<td class="n">{int(m.get("failures", 0))}</td><td class="n">{int(m.get("errors", 0))}</td>'
                   f'<td class="muted">{by_kind}</td></tr>')
    out.append("</table>")


def _chart(months: list, colours: dict, top: int) -> str:
    """Failed logs a month, one bar each, stacked by kind (the chart's kinds, then the rest)."""
    left, right, bottom, top_pad = 34, 24, 22, 8
    plot_h = CHART_HEIGHT - bottom - top_pad
    step = (CHART_WIDTH - left - right) / max(1, len(months))
    bar_w = max(2.0, min(48.0, step * 0.7))
    parts = [f'<svg width="{CHART_WIDTH}" height="{CHART_HEIGHT}" viewBox="0 0 {CHART_WIDTH} {CHART_HEIGHT}" '
             'role="img" aria-label="failed logs by month">',
             f'<line x1="{left}" y1="{top_pad + plot_h}" x2="{CHART_WIDTH}" y2="{top_pad + plot_h}" stroke="#ccc"/>',
             f'<text x="{left - 4}" y="{top_pad + 9}" text-anchor="end">{top}</text>',
             f'<text x="{left - 4}" y="{top_pad + plot_h}" text-anchor="end">0</text>']
    label_every = max(1, math.ceil(52 / step))     # a label is about 45 pixels wide
    for i, m in enumerate(months):
        x = left + i * step + (step - bar_w) / 2
        y = top_pad + plot_h
        stacks = [(colours.get(k, OTHER_COLOUR), int(n)) for k, n in (m.get("kinds") or {}).items()]
        rest = int(m.get("failures", 0)) - sum(n for _c, n in stacks)
        if rest > 0:
            stacks.append((OTHER_COLOUR, rest))
        stacks.sort(key=lambda s: s[0] == OTHER_COLOUR)
        for colour, n in stacks:
            h = plot_h * n / top
            y -= h
            parts.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar_w:.1f}" height="{h:.1f}" fill="{colour}">'
                         f'<title>{e(m.get("month"))}: {n}</title></rect>')
        if i % label_every == 0:
            parts.append(f'<text x="{x + bar_w / 2:.1f}" y="{CHART_HEIGHT - 6}" text-anchor="middle">'
                         f'{e(m.get("month"))}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _incidents(out: list, data: dict) -> None:
    rows = data.get("top_incidents")
    if rows is None:   # a plain Summary.to_dict: incidents without titles
        rows = [{"incident": k, "title": "", "logs": n} for k, n in (data.get("incidents") or {}).items()]
    if not rows:
        return
    scale = max(int(r.get("logs", 0)) for r in rows)
    out.append('<h2>Top incidents</h2><table id="top-incidents"><tr><th>logs</th><th>incident</th><th>title</th>'
               "<th></th></tr>")
    for r in rows:
        out.append(f'<tr><td class="n">{int(r.get("logs", 0))}</td><td class="k"><code>{e(r.get("incident"))}</code></td>'
                   f'<td>{e(r.get("title"))}</td>{_bar(int(r.get("logs", 0)), scale)}</tr>')
    out.append("</table>")
    more = data.get("more_incidents")
    if more:
        out.append(f'<p class="muted">{int(more)} more incidents (summarize --top N)</p>')


def _fingerprints(out: list, rows: list) -> None:
    if not rows:
        return
    out.append('<h2>Top fingerprints</h2><table id="top-fingerprints"><tr><th>logs</th><th>fingerprint</th>'
               "<th>incident</th><th>logs that show it</th></tr>")
    for r in rows:
        phase = r.get("phase")
        what = e(r.get("incident")) + (f' <span class="muted">during {e(phase)}</span>' if phase else "")
        files = r.get("files") or []
        shown = "<br>".join(f"<code>{e(p)}</code>" for p in files)
        if int(r.get("logs", 0)) > len(files):
            shown += f'<br><span class="muted">and {int(r.get("logs", 0)) - len(files)} more</span>'
        out.append(f'<tr><td class="n">{int(r.get("logs", 0))}</td><td class="k"><code>{e(r.get("fingerprint"))}</code></td>'
                   f"<td>{what}</td><td>{shown}</td></tr>")
    out.append("</table>")


def _unreadable(out: list, data: dict) -> None:
    rows = data.get("errors_examples") or []
    if not rows:
        return
    out.append('<h2>Unreadable logs</h2><table id="unreadable"><tr><th>log</th><th>error</th></tr>')
    for r in rows:
        out.append(f'<tr><td><code>{e(r.get("path"))}</code></td><td>{e(r.get("error"))}</td></tr>')
    out.append("</table>")
    more = int(data.get("errors", 0)) - len(rows)
    if more > 0:
        out.append(f'<p class="muted">and {more} more</p>')
