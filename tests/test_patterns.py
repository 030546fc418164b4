"""Patterns are compiled when a log first needs them (read/patterns.py)."""
from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap

import regex

from oomdoctor.read.patterns import LazyPattern, lazy


def test_lazy_pattern_compiles_on_first_use_and_answers_like_the_pattern():
    p = lazy(r"(?P<n>\d+) GiB", regex.I)
    assert "_compiled" not in p.__dict__
    assert p.pattern == r"(?P<n>\d+) GiB" and p.flags == regex.I
    m = p.search("tried 12 gib")
    assert m is not None and m.group("n") == "12"
    assert "_compiled" in p.__dict__
    compiled = regex.compile(r"(?P<n>\d+) GiB", regex.I)
    text = "1 GiB, 2 gib and 3 GIB"
    assert [m.span() for m in p.finditer(text)] == [m.span() for m in compiled.finditer(text)]
    assert p.sub("N", text) == compiled.sub("N", text)
    assert p.groupindex == compiled.groupindex
    # the timeout keyword of the regex module still reaches the search
    assert p.search(text, timeout=1.0) is not None


def test_lazy_pattern_pickles_as_its_source():
    p = lazy(r"a+b")
    p.search("aab")
    q = pickle.loads(pickle.dumps(p))
    assert isinstance(q, LazyPattern) and q.pattern == "a+b" and q.match("ab")


def test_importing_the_pipeline_compiles_almost_nothing():
    code = textwrap.dedent("""
        import regex
        calls = []
        real = regex.compile
        def counting(pattern, flags=0, *a, **k):
            calls.append(pattern)
            return real(pattern, flags, *a, **k)
        regex.compile = counting
        import oomdoctor.pipeline  # noqa: F401
        print(len(calls))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    # about 300 patterns were compiled at import before they became lazy
    assert int(out.stdout.strip()) < 10
