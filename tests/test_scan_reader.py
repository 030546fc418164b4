"""Region mode and the anchor pass, checked against a plain line-by-line reading.

The reader works on blocks (hits found in bulk, lines split only where something is
kept), so blocks are made tiny here to put every boundary in awkward places.
"""
from __future__ import annotations

import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oomdoctor import prefilter, reader
from oomdoctor.reader import Regions

PIECES = ["step 12 loss 1.5", "CUDA out of memory. Tried to allocate 2 GiB", "torch version 2.1.0",
          "Traceback (most recent call last):", "  File \"x.py\", line 3, in f", "", "Killed",
          "epoch 3\r epoch 3 10%\r epoch 3 20%", "x" * 300, "deepspeed info: version=0.14.1", "\x1b[31mred\x1b[0m",
          "exit code 0", "exit code 137", "ok"]

lines_st = st.lists(st.sampled_from(PIECES), min_size=0, max_size=80)


def reference(data: bytes, r: Regions) -> list[tuple[int, str]]:
    """What region mode keeps, line by line."""
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    anchor = prefilter.anchor_pattern()
    context = prefilter.context_pattern()
    n = len(lines)
    anchors = [i + 1 for i, ln in enumerate(lines) if anchor.search(ln)]
    if r.skip_clean and not anchors:
        return []
    keep = set(range(1, min(n, r.head_lines) + 1))
    if not r.head_progress:
        keep = {no for no in keep if lines[no - 1].count(b"\r") <= reader.PROGRESS_CR}
    if r.context:
        keep |= {i + 1 for i, ln in enumerate(lines) if context.search(ln)}
    for a in anchors:
        keep |= set(range(max(1, a - r.before), min(n, a + r.after) + 1))
    keep |= set(range(max(1, n - r.tail_lines + 1), n + 1))
    return [(no, reader._decode(lines[no - 1])) for no in sorted(keep)]


@settings(max_examples=150, deadline=None)
@given(lines=lines_st, block=st.integers(min_value=1, max_value=400), final_newline=st.booleans(),
       scan_like=st.booleans())
def test_region_mode_keeps_what_a_line_by_line_reading_keeps(lines, block, final_newline, scan_like):
    data = "\n".join(lines).encode() + (b"\n" if final_newline and lines else b"")
    regions = (Regions(head_lines=4, tail_lines=3, before=5, after=2, context=False, skip_clean=True, head_progress=False)
               if scan_like else Regions(head_lines=4, tail_lines=3, before=5, after=2))
    old = reader.BLOCK
    reader.BLOCK = block
    try:
        view = reader.read_view(io.BytesIO(data), "t", full_limit=0, regions=regions)
    finally:
        reader.BLOCK = old
    expected = reference(data, regions)
    if not data:
        assert view.pairs == [] and view.bytes_read == 0
        return
    if scan_like and not expected:
        assert view.mode == "clean" and view.pairs == []
    else:
        assert view.pairs == expected
    assert view.bytes_read == len(data)
    assert view.lines_read == len(data.split(b"\n")) - (1 if data.endswith(b"\n") or not data else 0)


@settings(max_examples=150, deadline=None)
@given(lines=lines_st, block=st.integers(min_value=1, max_value=300))
def test_anchor_pass_finds_literals_across_block_seams(lines, block):
    data = "\n".join(lines).encode()
    old = reader.PASS_BLOCK
    reader.PASS_BLOCK = block
    try:
        # the first block is the 64 KiB peek; a long prefix pushes the rest into small blocks
        pad = b"." * 65536
        found, n = reader.has_anchor(io.BytesIO(pad + data), "t")
    finally:
        reader.PASS_BLOCK = old
    assert found == bool(prefilter.anchor_pattern().search(data))
    if not found:
        assert n == len(pad) + len(data)


def test_native_and_fallback_matchers_agree():
    pytest.importorskip("hyperscan", reason="the native prefilter is an optional extra (oomdoctor[fast])")
    native = prefilter.Matcher(prefilter.ANCHOR_LITERALS, native=True)
    fallback = prefilter.Matcher(prefilter.ANCHOR_LITERALS, native=False)
    assert native.engine == "hyperscan" and fallback.engine == "re"
    data = "\n".join(PIECES * 3).encode()
    line_of = lambda ends: sorted({data.count(b"\n", 0, e) for e in ends})  # noqa: E731
    assert line_of(native.ends(data)) == line_of(fallback.ends(data))
    assert native.search(data) and not native.search(b"all good\n")


def test_small_logs_are_still_read_whole():
    data = b"".join(f"line {i}\n".encode() for i in range(5000)) + b"CUDA out of memory\n"
    view = reader.read_view(io.BytesIO(data), "t")
    assert view.mode == "full" and len(view.pairs) == 5001


def test_memory_stays_bounded_on_a_huge_line():
    data = b"a" * (5 * 2**20) + b" CUDA out of memory\nnext\n"
    view = reader.read_view(io.BytesIO(data), "t", full_limit=0)
    assert view.lines_read == 2
    assert all(len(text) <= reader.MAX_KEPT_LINE for _, text in view.pairs)
