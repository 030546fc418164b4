"""Thousands of OOM messages in one log (automatic batch-size retries, a server failing
request after request): de-duplication is linear and the report keeps a bounded sample,
says how many it left out, and always keeps the final failure. The logs are generated here."""
from __future__ import annotations

import json

from oomdoctor import diagnose
from oomdoctor.facts.models import MAX_EVENTS, OomEvent, sample_events
from oomdoctor.parsers import torch_alloc
from oomdoctor.parsers.base import ParseContext
from oomdoctor.read.normalise import normalise

N = 20_000


def _retries(n: int) -> str:
    """n distinct allocator messages: each rank asks a different size, as a retry loop does."""
    return "\n".join(
        f"[rank{i % 8}]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {2048 + i} KiB. "
        f"GPU {i % 8} has a total capacity of 79.15 GiB of which 100.00 MiB is free." for i in range(n))


def test_twenty_thousand_distinct_ooms_keep_a_bounded_sample_and_the_last():
    report = diagnose(_retries(N).encode())
    assert len(report.oom_events) <= MAX_EVENTS
    assert report.oom_events_total == N
    assert report.oom_events_left_out == N - len(report.oom_events)
    # the final failure is kept: the last message of the log
    assert max(e.line for e in report.oom_events) == N
    assert report.oom_events[-1].tried_to_allocate_bytes == (2048 + N - 1) * 1024
    assert any("left out of the report" in n for n in report.notes)
    data = json.loads(report.model_dump_json())
    assert len(data["oom_events"]) <= MAX_EVENTS
    assert data["oom_events_total"] == N
    assert data["oom_events"][-1]["line"] == N
    assert "left out of the report" in report.to_text(verbose=True)


def _same_calls(n: int, monkeypatch) -> int:
    """Comparisons de-duplication makes over n messages that all fall in one bucket (same
    device and request, a different free figure each): the worst case for it."""
    text = "\n".join(f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total "
                     f"capacity of 79.15 GiB of which {i} KiB is free." for i in range(n))
    calls = [0]
    same = torch_alloc._same

    def counted(a, b):
        calls[0] += 1
        return same(a, b)
    monkeypatch.setattr(torch_alloc, "_same", counted)
    ctx = ParseContext(normalise(text), None)
    torch_alloc.parse(ctx)
    assert len(ctx.facts.oom_events) == n      # all distinct: nothing folded wrongly
    return calls[0]


def test_deduplication_work_grows_linearly(monkeypatch):
    small, large = _same_calls(1000, monkeypatch), _same_calls(5000, monkeypatch)
    # quadratic work would grow 25 times; linear work 5 times
    assert large <= 6 * small
    assert large <= torch_alloc._TWIN_SCAN * 5000


def test_identical_copies_still_fold_in_a_large_bucket():
    text = "\n".join(f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total "
                     f"capacity of 79.15 GiB of which {i % 300} KiB is free." for i in range(900))
    ctx = ParseContext(normalise(text), None)
    torch_alloc.parse(ctx)
    assert len(ctx.facts.oom_events) == 300
    assert all(e.count == 3 for e in ctx.facts.oom_events)


def test_sample_keeps_every_kind_the_first_the_last_and_the_event_diagnosed():
    events = [OomEvent(kind="cuda_caching_allocator", tried_to_allocate_bytes=i, line=i + 1) for i in range(500)]
    host = OomEvent(kind="host_oom_killer", line=250)
    events.insert(250, host)
    keep = events[300]
    kept = sample_events(events, keep=keep)
    assert len(kept) == MAX_EVENTS
    assert host in kept and keep in kept
    assert kept[0] is events[0] and kept[-1] is events[-1]
    assert [e.line for e in kept] == sorted(e.line for e in kept)   # the log's order
