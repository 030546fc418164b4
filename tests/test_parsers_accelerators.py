"""MPS, XLA/JAX/torch_xla and TensorFlow out-of-memory messages (parsers/accelerators.py).

Each ``accel-*.log`` fixture has a sibling ``.yaml`` with the facts a user would check:
kind, strength, exact byte sizes, device, the lines the evidence points at. The facts
are checked through ``extract(normalise(text))`` and through the whole pipeline.
"""
from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oomdoctor.read.normalise import normalise
from oomdoctor.parsers import accelerators
from oomdoctor.parsers.base import ParseContext


def _accelerators_only(text: str) -> ParseContext:
    ctx = ParseContext(normalise(text))
    accelerators.parse(ctx)
    return ctx


# -- MPS -------------------------------------------------------------------------------

def test_mps_units_before_2_8_are_binary():
    ctx = _accelerators_only(
        "RuntimeError: MPS backend out of memory (MPS allocated: 1.00 GB, other allocations: 512.00 MB, "
        "max allowed: 2.00 GB). Tried to allocate 1.00 KB on private pool.")
    (ev,) = ctx.facts.oom_events
    assert (ev.allocated_by_pytorch_bytes, ev.other_allocations_bytes, ev.total_capacity_bytes,
            ev.tried_to_allocate_bytes) == (2**30, 512 * 2**20, 2 * 2**30, 1024)


def test_mps_repeated_by_two_processes_is_one_event():
    msg = ("RuntimeError: MPS backend out of memory (MPS allocated: 3.50 GiB, other allocations: 1.00 GiB, "
           "max allowed: 4.50 GiB). Tried to allocate 20.00 MiB on private pool.")
    ctx = _accelerators_only(f"[rank0]: {msg}\n[rank1]: {msg}\n")
    (ev,) = ctx.facts.oom_events
    assert ev.count == 2 and ev.ranks == [0, 1] and ev.line == 1


def test_mps_words_without_figures_still_make_an_event():
    ctx = _accelerators_only("RuntimeError: MPS backend out of memory (MPS allocated: ")
    (ev,) = ctx.facts.oom_events
    assert ev.kind == "mps" and ev.tried_to_allocate_bytes is None


def _mps_format(n: int, new_units: bool) -> str:
    """MPSAllocator's format_size: 'bytes' up to 1024, then two decimals, binary factors."""
    if n <= 1024:
        return f"{n} bytes"
    names = ("KiB", "MiB", "GiB") if new_units else ("KB", "MB", "GB")
    for name, factor in zip(names, (2**10, 2**20, 2**30)):
        if n <= factor * 1024 or name in ("GiB", "GB"):
            return f"{n / factor:.2f} {name}"
    raise AssertionError  # pragma: no cover


def _factor(printed: str) -> int:
    unit = printed.split()[-1]
    return {"bytes": 1, "KB": 2**10, "KiB": 2**10, "MB": 2**20, "MiB": 2**20, "GB": 2**30, "GiB": 2**30}[unit]


@settings(max_examples=150, deadline=None)
@given(alloc=st.integers(0, 2**36), other=st.integers(0, 2**34), req=st.integers(1, 2**33),
       new_units=st.booleans(), wrap_at=st.integers(0, 200))
def test_mps_sizes_parse_back_within_printed_precision(alloc, other, req, new_units, wrap_at):
    printed = [_mps_format(n, new_units) for n in (alloc, other, req)]
    msg = (f"RuntimeError: MPS backend out of memory (MPS allocated: {printed[0]}, other allocations: "
           f"{printed[1]}). Tried to allocate {printed[2]} on shared pool.")
    cut = len("RuntimeError: ") + wrap_at % (len(msg) - 20)
    text = msg[:cut] + "\n" + msg[cut:]  # a terminal hard wrap anywhere in the message
    (ev,) = _accelerators_only(text).facts.oom_events
    for got, n, p in zip((ev.allocated_by_pytorch_bytes, ev.other_allocations_bytes, ev.tried_to_allocate_bytes),
                         (alloc, other, req), printed):
        assert abs(got - n) <= _factor(p) * Decimal("0.005") + 1


# -- XLA -------------------------------------------------------------------------------

def _xla_format(n: int) -> str:
    """XLA's HumanReadableNumBytes: no space, two decimals, binary units."""
    if n < 1024:
        return f"{n}B"
    for name, factor in (("KiB", 2**10), ("MiB", 2**20), ("GiB", 2**30), ("TiB", 2**40)):
        if n < factor * 1024 or name == "TiB":
            return f"{n / factor:.2f}{name}"
    raise AssertionError  # pragma: no cover


@settings(max_examples=150, deadline=None)
@given(n=st.integers(1, 2**42))
def test_xla_request_sizes_parse_back_exactly(n):
    text = (f"jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate {n} bytes.\n"
            f"RuntimeError: Resource exhausted: Failed to allocate request for {_xla_format(n)} ({n}B) on device ordinal 3\n")
    evs = _accelerators_only(text).facts.oom_events
    assert [e.tried_to_allocate_bytes for e in evs] == [n, n]
    assert evs[1].device_index == 3


@settings(max_examples=150, deadline=None)
@given(req=st.integers(1, 2**37), free=st.integers(0, 2**37))
def test_tpu_sizes_parse_back_within_printed_precision(req, free):
    def g(n: int) -> str:  # the TPU runtime prints "6.48G" / "895.55M"
        return f"{n / 2**30:.2f}G" if n >= 2**30 else f"{n / 2**20:.2f}M"
    text = (f"RuntimeError: Bad StatusOr access: RESOURCE_EXHAUSTED: Error allocating device buffer: "
            f"Attempting to allocate {g(req)}. That was not possible. There are {g(free)} free.")
    (ev,) = _accelerators_only(text).facts.oom_events
    for got, n in ((ev.tried_to_allocate_bytes, req), (ev.free_bytes, free)):
        factor = 2**30 if n >= 2**30 else 2**20
        assert abs(got - n) <= factor * 0.005 + 1


def test_bfc_warning_that_is_not_a_failure_is_no_event():
    ctx = _accelerators_only(
        "W external/xla/xla/tsl/framework/bfc_allocator.cc:291] Allocator (GPU_0_bfc) ran out of memory trying to "
        "allocate 2.12GiB with freed_by_count=0. The caller indicates that this is not a failure, but this may mean "
        "that there could be performance gains if more memory were available.")
    assert ctx.facts.oom_events == []


def test_fatal_bfc_line_alone_is_an_event_with_the_rounded_size():
    ctx = _accelerators_only(
        "W external/xla/xla/tsl/framework/bfc_allocator.cc:501] Allocator (GPU_1_bfc) ran out of memory trying to "
        "allocate 1.25TiB (rounded to 1374521760000)requested by op ")
    (ev,) = ctx.facts.oom_events
    assert (ev.kind, ev.tried_to_allocate_bytes, ev.device_index) == ("xla", 1374521760000, 1)


def test_grpc_resource_exhausted_is_not_memory():
    ctx = _accelerators_only("grpc: RESOURCE_EXHAUSTED: Received message larger than max (8388608 vs. 4194304)")
    assert ctx.facts.oom_events == []


@pytest.mark.parametrize("text", ["", "\n\n", "MPS backend out of memory (" * 500,
                                  "OOM when allocating tensor with shape[" + "1," * 5000,
                                  "Attempting to allocate 9" * 3000 + "That was not possible."])
def test_hostile_input_never_raises(text):
    _accelerators_only(text)


_RETRY_WARNING = ("2024-03-15 22:54:07.499744: W external/org_tensorflow/tensorflow/tsl/framework/bfc_allocator.cc:290] "
                  "Allocator (GPU_0_bfc) ran out of memory trying to allocate 7.31GiB with freed_by_count=0. The caller "
                  "indicates that this is not a failure, but this may mean that there could be performance gains if more "
                  "memory were available.\n")


@pytest.mark.parametrize("after, counted", [
    # the log stops inside the traceback right under the warning: the retry failed
    ("Traceback (most recent call last):\n", True),
    ('Traceback (most recent call last):\n  File "/app/run_alphafold.py", line 432, in <module>\n    app.run(main)\n', True),
    # the traceback's error line is there: it says what failed
    ("Traceback (most recent call last):\n  File \"/app/run.py\", line 4, in <module>\nValueError: bad shape\n", False),
    # the run went on after the warning
    ("I0315 22:54:09 model.py:175] Total JAX model predict time 41.2s\n", False),
    # a traceback that ends in an error with no message is not cut
    ('Traceback (most recent call last):\n  File "/app/run.py", line 400, in main\n    time.sleep(1)\nKeyboardInterrupt\n',
     False),
    ('Traceback (most recent call last):\n  File "/app/run.py", line 12, in check\n    assert ok\nAssertionError\n', False),
    ("", False),
])
def test_a_retry_warning_counts_only_when_the_log_stops_in_a_traceback_under_it(after, counted):
    events = _accelerators_only(_RETRY_WARNING + after).facts.oom_events
    assert [(e.strength, e.tried_to_allocate_bytes) for e in events] == (
        [("likely", round(7.31 * 2 ** 30))] if counted else [])


_BFC_STATS = """Limit:                       {limit}
InUse:                       {in_use}
MaxInUse:                    {max_in_use}
NumAllocs:                        1187
MaxAllocSize:                 31457280
"""


def test_the_bfc_statistics_alone_are_a_likely_failure():
    (ev,) = _accelerators_only(_BFC_STATS.format(limit=1073741824, in_use=1073610752, max_in_use=1073676288)
                               ).facts.oom_events
    assert ev.strength == "likely" and ev.message_format == "bfc-allocator-stats"
    assert "1.00 GiB limit" in ev.detail and ev.backend is None
    header = "2019-01-01 10:00:00.000000: I tensorflow/core/common_runtime/bfc_allocator.cc:1101] Stats: \n"
    (ev,) = _accelerators_only(header + _BFC_STATS.format(limit=1073741824, in_use=1073610752, max_in_use=1073676288)
                               ).facts.oom_events
    assert ev.backend == "TF"


@pytest.mark.parametrize("text", [
    # the rows without their Limit and InUse above are something else's
    "MaxInUse:                    1073676288\n",
    "Limit: 10\nInUse: 9\nsomething\nelse\nmore\nMaxInUse: 12\n",
])
def test_a_lone_maxinuse_row_is_not_the_statistics(text):
    assert not _accelerators_only(text).facts.oom_events
