"""`-f html`: one self-contained page with a picture of the device's memory at the failure."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

import oomdoctor
from oomdoctor.report.html import BAR_WIDTH, memory_segments, render_html

EXAMPLE = Path(__file__).parent / "fixtures" / "logs" / "example-zero3-save.log"


def test_the_memory_picture_splits_the_capacity():
    report = oomdoctor.diagnose(str(EXAMPLE))
    ev = report.oom_events[0]
    segments = {s.key: s.bytes for s in memory_segments(ev)}
    assert segments["allocated"] == ev.allocated_by_pytorch_bytes
    assert segments["unallocated"] == ev.reserved_unallocated_bytes
    assert segments["free"] == ev.free_bytes
    assert abs(sum(segments.values()) - ev.total_capacity_bytes) <= 2**20
    page = render_html(report)
    widths = [float(w) for w in re.findall(r'class="seg-\w+" data-bytes="\d+" x="[\d.]+" y="0" width="([\d.]+)"', page)]
    assert abs(sum(widths) - BAR_WIDTH) < 2
    assert "the request that failed: 3.52 GiB" in page


def test_the_memory_picture_draws_the_jobs_workers_apart_from_other_processes():
    from oomdoctor.facts.models import OomEvent, ProcessUse
    gib = 2**30
    ev = OomEvent(kind="cuda_caching_allocator", line=1, total_capacity_bytes=80 * gib, free_bytes=1 * gib,
                  allocated_by_pytorch_bytes=60 * gib, reserved_unallocated_bytes=2 * gib,
                  processes=[ProcessUse(pid=11, bytes=63 * gib, is_self=True),
                             ProcessUse(pid=12, bytes=6 * gib), ProcessUse(pid=99, bytes=9 * gib)])
    segments = {s.key: s.bytes for s in memory_segments(ev, worker_pids=[11, 12])}
    assert segments["outside"] == 1 * gib and segments["workers"] == 6 * gib and segments["others"] == 9 * gib
    # without the launcher's names, both are other processes
    segments = {s.key: s.bytes for s in memory_segments(ev)}
    assert "workers" not in segments and segments["others"] == 15 * gib
    # memory in private pools is PyTorch's, drawn as such, not outside it (as the numbers count it)
    ev.private_pool_bytes = 1 * gib
    segments = {s.key: s.bytes for s in memory_segments(ev)}
    assert segments["pool"] == 1 * gib and "outside" not in segments


def test_the_page_is_self_contained_and_escapes_the_log():
    log = ("<script>alert(1)</script>\n" + EXAMPLE.read_text(encoding="utf-8"))
    page = oomdoctor.diagnose(log, text=True).to_html()
    assert page.startswith("<!DOCTYPE html>")
    assert "<script" not in page.lower()
    assert not re.search(r'(?:src|href)="(?:https?:)?//', page)   # nothing fetched
    assert "Fixes, best first" in page and "stage3_gather_16bit_weights_on_model_save" in page


def test_memory_over_time_is_drawn_from_the_readings():
    lines = "\n".join(f"step {i * 100}: mem_alloc {10 + 2 * i:.2f} GB mem_reserved {12 + 2 * i:.2f} GB" for i in range(6))
    page = oomdoctor.diagnose(lines + "\n", text=True).to_html()
    assert 'class="timeline"' in page and 'polyline class="allocated"' in page


def test_cli_html_format(tmp_path: Path):
    from click.testing import CliRunner
    from oomdoctor.cli import main
    res = CliRunner().invoke(main, ["diagnose", str(EXAMPLE), "-f", "html"])
    assert res.exit_code == 1 and res.output.startswith("<!DOCTYPE html>")


CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)


@pytest.mark.skipif(CHROMIUM is None, reason="no headless Chromium on this machine (apt-get install chromium)")
def test_a_browser_draws_the_memory_picture(tmp_path: Path):
    """A real browser renders the page: the screenshot holds the bar's colours."""
    page = tmp_path / "report.html"
    page.write_text(oomdoctor.diagnose(str(EXAMPLE)).to_html(), encoding="utf-8")
    shot = tmp_path / "shot.png"
    subprocess.run([CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--screenshot={shot}", "--window-size=900,700", page.as_uri()],
                   check=True, capture_output=True, timeout=120)
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pixels = _png_pixels(data)
    # the allocated (red) and free (green) segments of the bar are on screen
    assert any(abs(r - 0xd9) < 12 and abs(g - 0x53) < 12 and abs(b - 0x4f) < 12 for r, g, b in pixels)
    assert any(abs(r - 0x5c) < 12 and abs(g - 0xb8) < 12 and abs(b - 0x5c) < 12 for r, g, b in pixels)


def _png_pixels(data: bytes) -> list[tuple[int, int, int]]:
    """RGB(A) pixels of a non-interlaced 8-bit PNG (what Chromium writes), decoded with zlib."""
    import struct
    import zlib
    pos, chunks, width = 8, [], 0
    height = channels = 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
            channels = {2: 3, 6: 4}[colour]
        elif kind == b"IDAT":
            chunks.append(body)
        pos += 12 + n
    raw = zlib.decompress(b"".join(chunks))
    stride = width * channels
    rows, prev = [], bytearray(stride)
    for y in range(height):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b, c = prev[i], prev[i - channels] if i >= channels else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return [(row[i], row[i + 1], row[i + 2]) for row in rows[::4] for i in range(0, stride, channels * 4)]
