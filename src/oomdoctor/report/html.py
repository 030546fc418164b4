"""HTML output: one self-contained page (inline CSS and SVG, nothing fetched) with the
verdict, a picture of the device's memory at the failure, memory over time when the log
has readings, the evidence with line numbers, and the fixes.

Every string that comes from the log is escaped: a log is untrusted input.
"""
from __future__ import annotations

import html
from typing import TYPE_CHECKING, NamedTuple, Optional, Sequence

from ..facts.derived import allocated_of, job_processes, outside_pytorch, split_processes, unallocated_of
from ..facts.sizes import format_size
from .common import (
    clean,
    diagnosis_evidence,
    evidence_ref,
    knob_name,
    no_fix_line,
    number_rows,
    pct,
    primary_event,
    shown_diagnoses,
    split_fixes,
    verdict,
    where_rows,
)

if TYPE_CHECKING:
    from ..facts.models import OomEvent
    from .model import Report

BAR_WIDTH = 760
OVERFLOW = 60       # room right of the bar for a request larger than the free memory
CHART_HEIGHT = 160

_CSS = """
body{font:15px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2em auto;max-width:820px;color:#1d1d1f}
h1{font-size:1.3em;margin:0 0 .3em} h2{font-size:1.05em;margin:1.6em 0 .4em;border-bottom:1px solid #ddd}
.detail{color:#555} table{border-collapse:collapse} td{padding:2px 14px 2px 0;vertical-align:top}
td.v{font-variant-numeric:tabular-nums;text-align:right;font-weight:600} td.n{color:#666}
pre{background:#f5f5f7;padding:8px 10px;overflow-x:auto;border-radius:4px;font-size:13px}
code,.ev{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:13px}
.ev{white-space:pre-wrap;word-break:break-all;margin:1px 0} .ev b{color:#888;font-weight:400}
.legend span{display:inline-block;margin-right:14px;font-size:13px}
.legend i{display:inline-block;width:11px;height:11px;margin-right:4px;vertical-align:-1px}
.fix{margin:.8em 0} .fix .t{font-weight:600} .muted{color:#777;font-size:13px} .req{fill:#1d1d1f}
"""
# the memory picture's segments, in the bar's order (their CSS rules are made from these)
_COLOURS = {"allocated": "#d9534f", "unallocated": "#f0ad4e", "pool": "#e8c07a", "outside": "#8e6cc0",
            "workers": "#9db6e0", "others": "#5b7fbf", "unaccounted": "#aaa", "free": "#5cb85c"}
_CSS += " ".join(f".seg-{key}{{fill:{colour}}}" for key, colour in _COLOURS.items()) + "\n"


class Segment(NamedTuple):
    key: str
    label: str
    bytes: int


def e(text: object) -> str:
    """Escaped for HTML, without control characters or lone surrogates (a file name that is
    not UTF-8): the page always encodes. None is empty."""
    return html.escape("" if text is None else clean(text, tabs=False), quote=True)


def memory_segments(ev: "OomEvent", worker_pids: Sequence[int] = ()) -> list[Segment]:
    """The device's capacity split as the allocator's message tells it, summing to capacity;
    listed processes that the launcher names as this job's workers are drawn apart from
    foreign ones."""
    cap = ev.total_capacity_bytes
    if not cap:
        return []
    alloc = allocated_of(ev) or 0
    unalloc = unallocated_of(ev) or 0
    me, others = split_processes(ev)
    outside = max(0, outside_pytorch(ev, me.bytes if me is not None else ev.process_in_use_bytes) or 0)
    job, foreign_procs = job_processes(others, worker_pids)
    workers, foreign = sum(p.bytes for p in job), sum(p.bytes for p in foreign_procs)
    free = ev.free_bytes or 0
    parts = [Segment("allocated", "allocated by PyTorch", alloc),
             Segment("unallocated", "reserved by PyTorch, unallocated", unalloc),
             Segment("pool", "PyTorch's private pools (CUDA graphs, MemPool)", ev.private_pool_bytes or 0),
             Segment("outside", "this process outside PyTorch", outside),
             Segment("workers", "this job's other workers", workers),
             Segment("others", "other processes", foreign)]
    used = sum(p.bytes for p in parts)
    rest = max(0, cap - used - free)
    parts += [Segment("unaccounted", "not accounted for", rest), Segment("free", "free", min(free, cap))]
    total = sum(p.bytes for p in parts) or 1
    if total > cap:  # figures that do not add up (rounding, stale NVML): scale to the bar
        parts = [Segment(p.key, p.label, int(p.bytes * cap / total)) for p in parts]
    return [p for p in parts if p.bytes > 0]


def _memory_svg(ev: "OomEvent", worker_pids: Sequence[int] = ()) -> str:
    segments = memory_segments(ev, worker_pids)
    if not segments:
        return ""
    cap = ev.total_capacity_bytes or 1
    x = 0.0
    rects = []
    for seg in segments:
        w = BAR_WIDTH * seg.bytes / cap
        rects.append(f'<rect class="seg-{seg.key}" data-bytes="{seg.bytes}" x="{x:.1f}" y="0" width="{w:.1f}" '
                     f'height="34"><title>{e(seg.label)}: {e(format_size(seg.bytes))}</title></rect>')
        x += w
    req = ev.tried_to_allocate_bytes
    marker = ""
    if req:
        # drawn under the free memory it had to fit in: what sticks out past it is what was missing
        start = sum(BAR_WIDTH * seg.bytes / cap for seg in segments if seg.key != "free")
        w = min(BAR_WIDTH + OVERFLOW - start, BAR_WIDTH * req / cap)
        marker = (f'<rect class="req" x="{start:.1f}" y="44" width="{max(w, 2):.1f}" height="10">'
                  f'<title>the request that failed: {e(format_size(req))}</title></rect>'
                  f'<text x="0" y="70" font-size="12">the request that failed: {e(format_size(req))}'
                  f'{" (" + e(pct(req / cap)) + " of the device)" if cap else ""}, drawn under the free memory</text>')
    legend = "".join(f'<span><i style="background:{_COLOURS[s.key]}"></i>{e(s.label)} '
                     f'{e(format_size(s.bytes))}</span>' for s in segments)
    return (f'<svg class="memory" width="{BAR_WIDTH + OVERFLOW}" height="76" role="img" aria-label="device memory at the failure">'
            + "".join(rects) + marker + "</svg>"
            + f'<div class="legend">{legend}</div>'
            + f'<p class="muted">capacity {e(format_size(cap))}</p>')


def _timeline_svg(report: "Report") -> str:
    points = [(s.line, s.allocated_bytes, s.reserved_bytes) for s in report.memory_samples
              if s.allocated_bytes is not None]
    if len(points) < 2:
        return ""
    top = max(max(a, r or 0) for _n, a, r in points) or 1
    xs = [n for n, _a, _r in points]
    lo, hi = min(xs), max(xs)
    span = (hi - lo) or 1

    def path(values: list[tuple[int, int]]) -> str:
        return " ".join(f"{(n - lo) / span * (BAR_WIDTH - 20) + 10:.1f},{CHART_HEIGHT - 10 - v / top * (CHART_HEIGHT - 30):.1f}"
                        for n, v in values)
    alloc = path([(n, a) for n, a, _r in points])
    reserved = [(n, r) for n, _a, r in points if r is not None]
    lines = f'<polyline class="allocated" fill="none" stroke="#d9534f" stroke-width="2" points="{alloc}"/>'
    if len(reserved) >= 2:
        lines += f'<polyline class="reserved" fill="none" stroke="#f0ad4e" stroke-width="2" points="{path(reserved)}"/>'
    return (f'<svg class="timeline" width="{BAR_WIDTH}" height="{CHART_HEIGHT}" role="img" '
            f'aria-label="memory over the log">{lines}'
            f'<text x="10" y="14" font-size="12">peak {e(format_size(top))}; lines {lo}-{hi}</text></svg>'
            '<div class="legend"><span><i style="background:#d9534f"></i>allocated</span>'
            '<span><i style="background:#f0ad4e"></i>reserved</span></div>')


def _rows(rows) -> str:
    return "<table>" + "".join(f'<tr><td>{e(r.label)}</td><td class="v">{e(r.value)}</td>'
                               f'<td class="n">{e(r.note or "")}</td></tr>' for r in rows) + "</table>"


def render_html(report: "Report", *, top: Optional[int] = None) -> str:
    diagnoses = shown_diagnoses(report, top)
    d = diagnoses[0] if diagnoses else None
    head, detail = verdict(report, diagnoses)
    out = ['<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
           f"<title>oomdoctor: {e(head)}</title><style>{_CSS}</style></head><body>",
           f"<h1>{e(head)}</h1>"]
    if detail:
        out.append(f'<p class="detail">{e(detail)}</p>')
    ev = primary_event(report)
    picture = _memory_svg(ev, report.ranks.worker_pids) if ev is not None else ""
    if picture:
        out += ["<h2>Device memory at the failure</h2>", picture]
    nums = number_rows(report)
    if nums:
        out += ["<h2>The numbers</h2>", _rows(nums)]
    timeline = _timeline_svg(report)
    if timeline:
        out += ["<h2>Memory over the log</h2>", timeline]
    where = where_rows(report)
    if where:
        out += ["<h2>Where</h2>", _rows(where)]
    evidence = diagnosis_evidence(report, d)
    if evidence:
        out.append("<h2>Evidence</h2>")
        out += [f'<div class="ev"><b>{e(evidence_ref(x, False))}</b>  {e(x.text)}</div>' for x in evidence]
    if d is not None:
        if d.explanation:
            out += ["<h2>Why</h2>", f"<p>{e(d.explanation)}</p>"]
            out.append("<ul>" + "".join(f"<li>{e(b)}</li>" for b in d.because) + "</ul>")
        ok, not_ok = split_fixes(d)
        if not ok and not_ok:
            out += ["<h2>Fixes</h2>", f"<p>{e(no_fix_line(not_ok))}</p>"]
        if ok:
            out.append("<h2>Fixes, best first</h2>")
            for n, rem in enumerate(ok, 1):
                out.append(f'<div class="fix"><div class="t">{n}. {e(rem.title)}</div>')
                if rem.knob is not None:
                    out.append(f'<div class="muted">{e(knob_name(rem.knob))}</div><pre>{e(rem.knob.setting)}</pre>')
                if rem.memory_effect:
                    out.append(f'<div class="muted">saves: {e(rem.memory_effect)}</div>')
                out.append("</div>")
        if len(diagnoses) > 1:
            out.append("<h2>Other candidates</h2><ul>" + "".join(
                f"<li>{e(o.title)} ({e(o.incident)}, {e(pct(o.confidence))})</li>" for o in diagnoses[1:]) + "</ul>")
    if report.notes:
        out.append("<h2>Notes</h2><ul>" + "".join(f"<li>{e(n)}</li>" for n in report.notes) + "</ul>")
    src = f" of {e(report.source)}" if report.source else ""
    out.append(f'<p class="muted">read {report.lines_read:,} lines{src}; oomdoctor {e(report.tool_version)}</p>')
    out.append("</body></html>")
    return "\n".join(out)
