"""Several files of one job: each file is normalised once, for its configuration and for the
merged report, and the merged report is the one its merged text gives."""
from __future__ import annotations

import pytest

from oomdoctor import pipeline
from real_corpus import REAL

LOGS = sorted(REAL.glob("*.log"))
PAIRS = list(zip(LOGS[:40:2], LOGS[1:40:2]))


@pytest.mark.parametrize("a, b", PAIRS, ids=lambda p: p.stem)
def test_merged_lines_are_the_merged_texts_lines(a, b, monkeypatch):
    seen = {}
    diagnose_view = pipeline.diagnose_view

    def both(view, **kw):
        seen["given"] = diagnose_view(view, **kw)
        seen["normalised"] = len(normalised)   # before this check's own reading of the text
        seen["from_text"] = diagnose_view(view, **{**kw, "lines": None})
        return seen["given"]

    normalised = []
    normalise_pairs = pipeline.normalise_pairs

    def counted(pairs):
        normalised.append(1)
        return normalise_pairs(pairs)

    monkeypatch.setattr(pipeline, "diagnose_view", both)
    monkeypatch.setattr(pipeline, "normalise_pairs", counted)
    pipeline.diagnose_many([str(a), str(b)])
    assert seen["normalised"] == 2   # each file once
    given, from_text = (seen[k].model_dump(mode="json") for k in ("given", "from_text"))
    assert given == from_text
