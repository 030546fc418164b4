"""Region mode and the anchor pass, checked against a plain line-by-line reading.

The reader works on blocks (hits found in bulk, lines split only where something is
kept), so blocks are made tiny here to put every boundary in awkward places.
"""
from __future__ import annotations

import gzip
import importlib.util
import io
import pickle
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from oomdoctor.read import prefilter
from oomdoctor.read.regions import MARKER_REACH
from oomdoctor.read import reader
from oomdoctor.read.reader import Regions

PIECES = ["step 12 loss 1.5", "CUDA out of memory. Tried to allocate 2 GiB", "torch version 2.1.0",
          "Traceback (most recent call last):", "  File \"x.py\", line 3, in f", "", "Killed",
          "epoch 3\r epoch 3 10%\r epoch 3 20%", "x" * 300, "deepspeed info: version=0.14.1", "\x1b[31mred\x1b[0m",
          "exit code 0", "exit code 137", "ok", "^C"]

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
    if r.skip_clean and not anchors and not prefilter.ends_interrupted(prefilter.keep_tail(b"", data)):
        return []
    keep = set(range(1, min(n, r.head_lines) + 1))
    if not r.head_progress:
        keep = {no for no in keep if lines[no - 1].count(b"\r") <= reader.PROGRESS_CR}
    if r.context:
        keep |= {i + 1 for i, ln in enumerate(lines) if context.search(ln)}
    for a in anchors:
        keep |= set(range(max(1, a - r.before), min(n, a + r.after) + 1))
    if r.markers and anchors:
        # phase markers, looked for from MARKER_REACH lines before the first anchor to the last
        # (the generated logs are shorter than the reach)
        marker = prefilter.trie_pattern(prefilter.MARKER_LITERALS)
        keep |= {i + 1 for i, ln in enumerate(lines)
                 if max(1, anchors[0] - MARKER_REACH) <= i + 1 <= anchors[-1] and marker.search(ln)}
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
    # (an anchor, or the interrupt's echo that ends a log stopped from outside)
    assert found == (bool(prefilter.anchor_pattern().search(data))
                     or prefilter.ends_interrupted(prefilter.keep_tail(b"", pad + data)))
    if not found:
        assert n == len(pad) + len(data)


def test_native_and_fallback_matchers_agree():
    pytest.importorskip("hyperscan", reason="the native prefilter is an optional extra (oomdoctor[fast])")
    native = prefilter.Matcher(prefilter.ANCHOR_LITERALS, native=True)
    fallback = prefilter.Matcher(prefilter.ANCHOR_LITERALS, native=False)
    trie = prefilter.Matcher(prefilter.ANCHOR_LITERALS, engine="trie")
    assert (native.engine, fallback.engine, trie.engine) == ("hyperscan", "python", "trie")
    data = "\n".join(PIECES * 3).encode()
    line_of = lambda ends: sorted({data.count(b"\n", 0, e) for e in ends})  # noqa: E731
    assert line_of(native.ends(data)) == line_of(fallback.ends(data)) == line_of(trie.ends(data))
    assert native.search(data) and not native.search(b"all good\n")


# -- the pure-Python search (pivots) ------------------------------------------------------

LITERAL_SETS = {"anchor": prefilter.ANCHOR_LITERALS, "context": prefilter.CONTEXT_LITERALS}


@pytest.mark.parametrize("which", sorted(LITERAL_SETS))
def test_every_literal_is_found_through_a_pivot_it_contains(which):
    literals = LITERAL_SETS[which]
    plan = prefilter.plan_pivots(tuple(literals))
    owners: dict[bytes, list] = {}
    for p in plan:
        for w in p.literals:
            owners.setdefault(w, []).append(p)
            held = prefilter.letters(w) if p.kind == "letters" else w
            assert p.needle in held, (p, w)
    assert sorted(owners) == sorted({w.encode() for w in literals})
    assert all(len(ps) == 1 for ps in owners.values())
    assert prefilter.Matcher(literals, engine="python").engine == "python"


def test_the_pivots_are_few_and_rarely_common_bytes():
    plan = prefilter.plan_pivots(tuple(prefilter.ANCHOR_LITERALS))
    assert len(plan) < len(prefilter.ANCHOR_LITERALS) / 1.5
    # a byte pivot costs a comparison at each occurrence: never a digit, a space or a vowel
    assert not [p.needle for p in plan if p.kind == "byte" and p.needle in b" 0123456789aeiou.:"]


NOISE = st.text(alphabet="abcdeEOMKkUxyz rorTS0123456789:-_/\n().\r\x00\xff", max_size=60)


def planted(literals):
    """Text of noise, whole literals, literals cut short and literals broken by a byte."""
    lit = st.sampled_from(literals)
    cut = lit.flatmap(lambda w: st.integers(1, max(1, len(w) - 1)).map(lambda k: w[:k]))
    broken = st.tuples(lit, st.sampled_from(" \n-x")).flatmap(
        lambda t: st.integers(1, max(1, len(t[0]) - 1)).map(lambda k: t[0][:k] + t[1] + t[0][k:]))
    return st.lists(st.one_of(NOISE, lit, cut, broken), max_size=40).map("".join)


@settings(max_examples=300, deadline=None)
@given(data=st.data(), which=st.sampled_from(sorted(LITERAL_SETS)), repeat=st.sampled_from([1, 1, 1, 7, 3000]))
def test_pure_python_search_finds_what_the_plain_pattern_finds(data, which, repeat):
    literals = LITERAL_SETS[which]
    text = data.draw(planted(literals)).encode("utf-8", "surrogatepass") * repeat
    pattern = prefilter.trie_pattern(literals)
    matcher = prefilter.Matcher(literals, engine="python")
    expected = [m.end() for m in pattern.finditer(text)]
    assert matcher.ends(text) == expected
    assert matcher.search(text) == bool(expected)


@pytest.mark.parametrize("where", [prefilter.STRETCH, prefilter.Matcher.WINDOW, 3 * prefilter.STRETCH + 5])
def test_pure_python_search_across_stretch_and_window_edges(where):
    _every_anchor_found_across(where, "python")


def _every_anchor_found_across(where: int, engine: str) -> None:
    """Each anchor literal planted just before, across and just after offset ``where``."""
    matcher = prefilter.Matcher(prefilter.ANCHOR_LITERALS, engine=engine)
    pattern = prefilter.anchor_pattern()
    for literal in prefilter.ANCHOR_LITERALS:
        w = literal.encode()
        for shift in (-len(w), -len(w) // 2, -1, 0, 1):
            at = max(0, where + shift)
            text = b"12 ab: " * (at // 7) + b"." * (at % 7) + w + b" 0.5 loss\n" * 100
            assert matcher.search(text), (literal, shift)
            assert matcher.ends(text) == [m.end() for m in pattern.finditer(text)], (literal, shift)


def test_pure_python_search_of_literals_without_letters():
    matcher = prefilter.Matcher(["1234", "x: 9", "::"], engine="python")
    assert matcher.engine == "python"
    assert all(p.kind != "letters" for p in prefilter.plan_pivots(("1234", "x: 9", "::")))
    assert matcher.ends(b"a 1234 b\nx: 9 ::\n") == [6, 13, 16]
    assert not matcher.search(b"123 4 x:9 :\n")


# -- Aho-Corasick (ahocorasick-rs), the tier between Hyperscan and the pivots ---------------

FIXTURES = Path(__file__).parent / "fixtures"
FIXTURE_LOGS = sorted(FIXTURES.glob("logs/*.log")) + sorted(FIXTURES.glob("real/*.log"))


needs_ac = pytest.mark.skipif(importlib.util.find_spec("ahocorasick_rs") is None,
                              reason="the portable native prefilter is an optional extra (oomdoctor[fast])")


def _engines(literals) -> dict:
    """Every engine that can run here, for these literals."""
    engines = {"python": prefilter.Matcher(literals, engine="python"),
               "trie": prefilter.Matcher(literals, engine="trie"),
               "ahocorasick": prefilter.Matcher(literals, engine="ahocorasick")}
    native = prefilter.Matcher(literals, native=True)
    if native.engine == "hyperscan":
        engines["hyperscan"] = native
    return engines


def _lines(data: bytes, ends: list[int]) -> list[int]:
    return sorted({data.count(b"\n", 0, e - 1) for e in ends})


@needs_ac
def test_the_tiers(monkeypatch):
    """Hyperscan, else Aho-Corasick, else the pivots; frequent literals skip the automaton."""
    assert prefilter.Matcher(prefilter.ANCHOR_LITERALS, engine="ahocorasick").engine == "ahocorasick"
    assert prefilter.Matcher(prefilter.CONTEXT_LITERALS, engine="ahocorasick", frequent=True).engine == "trie"
    monkeypatch.setattr(prefilter, "_hyperscan_database", lambda _literals: None)
    monkeypatch.delenv("OOMDOCTOR_PREFILTER", raising=False)
    assert prefilter.Matcher(prefilter.ANCHOR_LITERALS).engine == "ahocorasick"
    for value, engine in (("ahocorasick", "ahocorasick"), ("aho-corasick", "ahocorasick"), ("python", "python"),
                          ("trie", "trie")):
        monkeypatch.setenv("OOMDOCTOR_PREFILTER", value)
        assert prefilter.Matcher(prefilter.ANCHOR_LITERALS).engine == engine, value
    monkeypatch.delenv("OOMDOCTOR_PREFILTER")
    monkeypatch.setattr(prefilter, "_ac_automata", lambda _literals: None)
    assert prefilter.Matcher(prefilter.ANCHOR_LITERALS).engine == "python"


@needs_ac
def test_aho_corasick_is_used_in_groups_that_take_its_fast_path():
    m = prefilter.Matcher(prefilter.ANCHOR_LITERALS, engine="ahocorasick")
    assert len(m._ac.automata) == -(-len(prefilter.ANCHOR_LITERALS) // prefilter.AC_GROUP) > 1
    # every literal is in some group: each is found alone, at the start, the middle and the end
    for literal in prefilter.ANCHOR_LITERALS:
        w = literal.encode()
        for text in (w, b"ab " + w + b" cd", b"x\n" + w):
            assert m.search(text), literal
            assert m.ends(text) == [hit.end() for hit in prefilter.anchor_pattern().finditer(text)], literal
    assert pickle.loads(pickle.dumps(m)).engine == "ahocorasick"     # rebuilt in a worker


@needs_ac
@pytest.mark.parametrize("path", FIXTURE_LOGS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_aho_corasick_finds_the_lines_of_every_engine_on_every_fixture(path):
    data = path.read_bytes()
    for which, literals in LITERAL_SETS.items():
        engines = _engines(literals)
        expected = [m.end() for m in prefilter.trie_pattern(literals).finditer(data)]
        assert engines["ahocorasick"].ends(data) == expected, which
        lines = {name: _lines(data, m.ends(data)) for name, m in engines.items()}
        assert all(v == lines["trie"] for v in lines.values()), (which, lines)
        assert {name: m.search(data) for name, m in engines.items()} == dict.fromkeys(engines, bool(expected))


@needs_ac
@settings(max_examples=300, deadline=None)
@given(data=st.data(), which=st.sampled_from(sorted(LITERAL_SETS)), repeat=st.sampled_from([1, 1, 1, 7, 3000]))
def test_aho_corasick_finds_what_the_plain_pattern_finds(data, which, repeat):
    literals = LITERAL_SETS[which]
    text = data.draw(planted(literals)).encode("utf-8", "surrogatepass") * repeat
    matcher = prefilter.Matcher(literals, engine="ahocorasick")
    expected = [m.end() for m in prefilter.trie_pattern(literals).finditer(text)]
    assert matcher.ends(text) == expected
    assert matcher.search(text) == bool(expected)
    assert matcher.search(memoryview(text)) == bool(expected)


@needs_ac
@pytest.mark.parametrize("where", [prefilter.AC_WINDOW, 3 * prefilter.AC_WINDOW + 5])
def test_aho_corasick_across_window_edges(where):
    """search() looks at a block in windows: a literal across a window's end is found."""
    _every_anchor_found_across(where, "ahocorasick")


@needs_ac
@settings(max_examples=150, deadline=None)
@given(lines=lines_st, block=st.integers(min_value=1, max_value=300))
def test_aho_corasick_anchor_pass_across_block_seams(lines, block):
    """The anchor pass reads blocks; a literal across two of them is found (the seam)."""
    data = "\n".join(lines).encode()
    saved = dict(prefilter._MATCHERS), reader.PASS_BLOCK, reader.PYTHON_PASS_SCALE
    prefilter._MATCHERS["anchor"] = prefilter.Matcher(prefilter.ANCHOR_LITERALS, engine="ahocorasick")
    reader.PASS_BLOCK, reader.PYTHON_PASS_SCALE = block, 1
    try:
        pad = b"." * 65536
        found, n = reader.has_anchor(io.BytesIO(pad + data), "t")
    finally:
        prefilter._MATCHERS.clear()
        prefilter._MATCHERS.update(saved[0])
        reader.PASS_BLOCK, reader.PYTHON_PASS_SCALE = saved[1], saved[2]
    # (an anchor, or the interrupt's echo that ends a log stopped from outside)
    assert found == (bool(prefilter.anchor_pattern().search(data))
                     or prefilter.ends_interrupted(prefilter.keep_tail(b"", pad + data)))
    if not found:
        assert n == len(pad) + len(data)


@needs_ac
def test_aho_corasick_gives_the_same_records(monkeypatch, tmp_path):
    """The same verdicts, whichever engine finds the anchors: every fixture log, plain and gzip."""
    import shutil

    import oomdoctor
    for path in FIXTURE_LOGS:
        shutil.copy(path, tmp_path / f"{path.parent.name}-{path.name}")
    (tmp_path / "z.log.gz").write_bytes(gzip.compress(b"step 1 loss 2.0\n" * 20000 + FIXTURE_LOGS[0].read_bytes()))
    records = {}
    for value in ("", "ahocorasick", "python"):
        monkeypatch.setenv("OOMDOCTOR_PREFILTER", value)
        monkeypatch.setattr(prefilter, "_MATCHERS", {})
        if value:
            assert prefilter.anchor_matcher().engine == value
        records[value] = list(oomdoctor.scan([str(tmp_path)], jobs=1))
    assert len(records[""]) == len(FIXTURE_LOGS) + 1
    assert records["ahocorasick"] == records[""] == records["python"]


# -- gzip ---------------------------------------------------------------------------------

def inflate(data: bytes, size: int = 1000) -> bytes:
    stream = reader.open_decompressed(io.BytesIO(data), data[:2])
    parts = []
    while True:
        part = stream.read(size)
        assert len(part) <= size
        if not part:
            return b"".join(parts)
        parts.append(part)


def test_gzip_members_padding_and_bounded_reads():
    a, b = b"first member\n" * 5000, b"second\n" * 3
    data = gzip.compress(a) + gzip.compress(b) + b"\x00" * 10
    assert inflate(data) == a + b
    assert inflate(data, 7) == a + b
    # a small file that inflates to a lot comes out in pieces of the size asked for
    assert len(inflate(gzip.compress(b"\x00" * 20_000_000), 2**20)) == 20_000_000


def test_truncated_and_corrupt_gzip_streams():
    data = gzip.compress(b"step 1 loss 2.0\n" * 20000 + b"CUDA out of memory\n", mtime=0)
    with pytest.raises(EOFError):
        inflate(data[: len(data) // 2])
    corrupt = bytearray(data)
    corrupt[-6] ^= 0xFF     # the CRC of the member
    with pytest.raises(reader.READ_ERRORS):
        inflate(bytes(corrupt))
    with pytest.raises(reader.InputError, match="cannot read"):
        reader.has_anchor(io.BytesIO(data[:100]), "t")
    # trailing garbage after the member is ignored, as gzip -dc does, and said
    view = reader.read_view(io.BytesIO(data + b"trailing garbage"), "t", full_limit=0)
    assert any("trailing garbage after the gzip data was ignored" in n for n in view.notes)
    assert any("CUDA out of memory" in text for _no, text in view.pairs)


def test_small_logs_are_still_read_whole():
    data = b"".join(f"line {i}\n".encode() for i in range(5000)) + b"CUDA out of memory\n"
    view = reader.read_view(io.BytesIO(data), "t")
    assert view.mode == "full" and len(view.pairs) == 5001


def test_memory_stays_bounded_on_a_huge_line():
    data = b"a" * (5 * 2**20) + b" CUDA out of memory\nnext\n"
    view = reader.read_view(io.BytesIO(data), "t", full_limit=0)
    assert view.lines_read == 2
    assert all(len(text) <= reader.MAX_KEPT_LINE for _, text in view.pairs)


TAIL_PIECES = [b"^C", b"\n", b" ", b"x" * 70, b"\t", b'"', b"\r\n", b"ab\n", b"\n" * 300, b"\x1b[0m", b"\r",
               b"\x1b[?25h" * 4, b"\x1b", b"[0m"]


@settings(max_examples=300, deadline=None)
@given(pieces=st.lists(st.sampled_from(TAIL_PIECES), max_size=40), block=st.integers(min_value=1, max_value=700))
# (a blank block between the echo and a quote is a line break, not nothing)
@example(pieces=[b"^C", b"\n", b'"'], block=1)
# (an escape code cut between blocks, after more blanks than the tail keeps: the text stays)
@example(pieces=[b"^C", b"\n" * 300, b"\x1b[0m"], block=1)
def test_the_kept_tail_is_the_same_read_in_blocks_of_any_size(pieces, block):
    """Read in blocks of any size, the kept tail (escape codes out, only a block's end copied)
    tells what the whole log's does: whether it ends at an interrupt's echo."""
    data = b"".join(pieces)
    tail = b""
    for i in range(0, len(data), block):
        tail = prefilter.keep_tail(tail, data[i:i + block])
    assert len(tail) <= 2 * prefilter.TAIL_KEEP   # the last text and the blanks after it
    whole = prefilter.keep_tail(b"", data)
    assert prefilter.ends_interrupted(tail) == prefilter.ends_interrupted(whole)
    # ... and what the parser would read as the echo ending the log, the first pass finds
    if data.replace(b"\x1b[0m", b"").replace(b"\x1b[?25h", b"").rstrip().endswith(b"^C") and b"\x1b\x1b" not in data:
        assert prefilter.ends_interrupted(tail)
