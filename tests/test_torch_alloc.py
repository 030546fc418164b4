"""The caching-allocator OOM parser on every version's message and on broken real-world copies."""
from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from msggen import FORMATS, GIB, MIB, message, printed_bytes
from oomdoctor.read.normalise import normalise
from oomdoctor.parsers import extract
from oomdoctor.facts.sizes import to_bytes


def events(text: str):
    return extract(normalise(text)).oom_events


def one(text: str):
    evs = events(text)
    assert len(evs) == 1, [e.model_dump() for e in evs]
    return evs[0]


SIZES = dict(dev=3, req=int(3.39 * GIB), total=int(79.32 * GIB), free=int(2.4 * GIB),
             alloc=int(73.28 * GIB), unalloc=int(1.59 * GIB))


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_parses_to_exact_bytes(fmt):
    text, exp = message(fmt, **SIZES)
    ev = one(text)
    for field, value in exp.items():
        assert getattr(ev, field) == value, field


@pytest.mark.parametrize("fmt,kind,backend,exc,label", [
    ("F1", "cuda_caching_allocator", "CUDA", "RuntimeError", "torch-1.0-1.3"),
    ("F2", "cuda_caching_allocator", "CUDA", "RuntimeError", "torch-1.4-2.0"),
    ("F3", "cuda_caching_allocator", "CUDA", "torch.cuda.OutOfMemoryError", "torch-1.10-2.0"),
    ("F4", "cuda_caching_allocator", "CUDA", "torch.cuda.OutOfMemoryError", "torch-2.1"),
    ("F5", "cuda_caching_allocator", "CUDA", "torch.cuda.OutOfMemoryError", "torch-2.2-2.9"),
    ("F7", "cuda_caching_allocator", "CUDA", "torch.OutOfMemoryError", "torch-2.10"),
    ("F8", "cuda_caching_allocator", "CUDA", "torch.OutOfMemoryError", "torch-2.11+"),
    ("HIP", "hip", "HIP", "torch.OutOfMemoryError", None),
    ("NPU", "npu", "NPU", "RuntimeError", "torch_npu-2.1-2.9"),
    ("NPU210", "npu", "NPU", "torch.OutOfMemoryError", "torch_npu-2.10+"),
    ("XPU", "xpu", "XPU", "torch.OutOfMemoryError", "xpu"),
])
def test_kind_exception_and_version_wording(fmt, kind, backend, exc, label):
    ev = one(message(fmt, **SIZES)[0])
    assert (ev.kind, ev.backend, ev.exception) == (kind, backend, exc)
    if label:
        assert ev.message_format == label


def test_private_pools_and_allowed_and_processes():
    text, exp = message("F6", dev=0, req=768 * MIB, total=int(83.05 * GIB), free=int(140.38 * MIB),
                        alloc=int(21.82 * GIB), unalloc=int(797.79 * MIB), this=int(23.33 * GIB),
                        others=((4242, int(1.5 * GIB)),), priv=104 * MIB, allowed=int(40 * GIB))
    ev = one(text)
    assert ev.private_pool_bytes == 104 * MIB
    assert ev.allowed_bytes == 40 * GIB
    assert ev.process_in_use_bytes == printed_bytes(int(23.33 * GIB))
    assert [(p.pid, p.is_self) for p in ev.processes] == [(None, True), (4242, False)]
    assert ev.message_format == "torch-2.4-2.9"


def test_container_process_entry_taken_as_this_process():
    # In containers NVML reports host PIDs: "Process 105400 has ..." is this process.
    text = ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.39 GiB. GPU 1 has a total capacity "
            "of 79.32 GiB of which 2.40 GiB is free. Process 105400 has 76.92 GiB memory in use. Of the allocated "
            "memory 73.28 GiB is allocated by PyTorch, and 1.59 GiB is reserved by PyTorch but unallocated.")
    ev = one(text)
    assert ev.process_in_use_bytes == printed_bytes(int(76.92 * GIB))
    assert ev.processes[0].pid == 105400 and not ev.processes[0].is_self


def test_absurd_nvml_figures_are_dropped_not_reported():
    text = ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 1 has a total capacty "
            "of 24.00 GiB of which 0 bytes is free. Including non-PyTorch memory, this process has 17179869184.00 GiB "
            "memory in use. Of the allocated memory 23.01 GiB is allocated by PyTorch, and 121.23 MiB is reserved by "
            "PyTorch but unallocated.")
    facts = extract(normalise(text))
    ev = facts.oom_events[0]
    assert ev.process_in_use_bytes is None and ev.processes == []
    assert ev.free_bytes == 0 and ev.device_index == 1
    assert any("NVML" in n for n in facts.notes)


def test_hard_wrapped_mid_word_and_blank_device():
    text = ("[rank1]: torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU  has a to\n"
            "tal capacity of 23.67 GiB of which 1.59 GiB is free. Including non-PyTorch memory, this process has\n"
            " 22.06 GiB memory in use. Of the allocated memory 19.75 GiB is allocated by PyTorch, and 1.78 GiB i\n"
            "s reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTO\n"
            "RCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.\n")
    ev = one(text)
    assert ev.device_index is None
    assert ev.total_capacity_bytes == printed_bytes(int(23.67 * GIB))
    assert ev.reserved_unallocated_bytes == printed_bytes(int(1.78 * GIB))
    assert ev.process_in_use_bytes == printed_bytes(int(22.06 * GIB))
    assert ev.ranks == [1] and ev.line == 1


def test_wrap_inside_a_number():
    text = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 8.36 GiB. GPU 1 has a total capacity of 47.50 GiB "
            "of which 1.52 GiB is free. Including non-PyTorch memory, this process has 45.97 GiB memory in use. Of the allocated memory 4\n"
            "0.30 GiB is allocated by PyTorch, and 4.91 GiB is reserved by PyTorch but unallocated.\n")
    assert one(text).allocated_by_pytorch_bytes == printed_bytes(int(40.30 * GIB))


def test_wrapped_into_an_indented_column_by_a_table_layout_logger():
    # (a logger that lays its records out as a table wraps the message into its column, the time
    # at the right of the first row, each row padded to the column's width)
    pad = " " * 28
    text = ("Unable to segment document : CUDA out of memory. Tried to allocate 70.24 GiB. GPU 0 has a total capacity "
            "of 23.68 GiB of which 2.55 GiB is free. [12/20/23 17:50:53]\n"
            "       Process 1932079 has 21.12 GiB memory in use. Of the allocated memory 19.20 GiB is allocated by "
            "PyTorch, and 390.95 MiB is reserved by PyTorch but" + pad + "\n"
            "       unallocated. If reserved but unallocated memory is large try setting max_split_size_mb to avoid "
            "fragmentation." + pad + "\n")
    ev = one(text)
    assert ev.allocated_by_pytorch_bytes == printed_bytes(int(19.20 * GIB))
    assert ev.reserved_unallocated_bytes == printed_bytes(int(390.95 * MIB))
    assert ev.process_in_use_bytes == printed_bytes(int(21.12 * GIB))


def test_an_indented_code_line_under_the_message_is_not_its_column():
    text = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
            "23.67 GiB of which 1.59 GiB is free.\n"
            "       x = self.proj(x)  # Of the allocated memory 9.00 GiB is allocated by PyTorch\n")
    assert one(text).allocated_by_pytorch_bytes is None


def test_a_message_that_starts_in_an_indented_column_goes_on_in_its_rows():
    # (rich's logging handler prints the time and level in a left column and wraps the message in
    # the column beside it: every row after the first is indented as far as the message starts)
    col = " " * 29
    text = ("[01/23/25 10:01:02] ERROR    Command failed with an unexpected error.\n"
            + col + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 7.63 GiB. GPU 0 has a total\n"
            + col + "capacity of 79.10 GiB of which 3.11 GiB is free. Including non-PyTorch memory, this process\n"
            + col + "has 75.98 GiB memory in use. Of the allocated memory 70.10 GiB is allocated by PyTorch, and\n"
            + col + "4.23 GiB is reserved by PyTorch but unallocated.\n")
    ev = one(text)
    assert (ev.device_index, ev.total_capacity_bytes) == (0, printed_bytes(int(79.10 * GIB)))
    assert ev.allocated_by_pytorch_bytes == printed_bytes(int(70.10 * GIB))
    assert ev.reserved_unallocated_bytes == printed_bytes(int(4.23 * GIB))


def test_a_message_after_a_time_and_level_goes_on_in_the_rows_under_it():
    # (rich's handler, the message on the record's first row: the rows it wrapped onto are
    # indented to where it began, and the path column ends the first row)
    col = " " * 29
    text = ("[11/29/26 03:26:09] ERROR    torch.OutOfMemoryError: CUDA out of memory. Tried to     engine.py:12\n"
            + col + "allocate 2.00 GiB. GPU 0 has a total capacity of 79.19\n"
            + col + "GiB of which 1.02 GiB is free.\n")
    ev = one(text)
    assert (ev.tried_to_allocate_bytes, ev.free_bytes) == (2 * GIB, printed_bytes(int(1.02 * GIB)))
    # ... and rows indented otherwise are not its own
    other = text.replace(col, " " * 4)
    assert one(other).free_bytes is None


def test_an_indented_message_stops_at_code_a_frame_or_a_new_record():
    col = " " * 4
    deeper = (col + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
              "of 23.67 GiB of which 1.59 GiB is free.\n" + col + "    x = f(y)  # Of the allocated memory 9.00 GiB "
              "is allocated by PyTorch\n")
    frame = (col + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
             "of 23.67 GiB of which 1.59 GiB is free.\n" + col + 'File "/x/of_the_allocated.py", line 3, in f  '
             "# Of the allocated memory 9.00 GiB is allocated by PyTorch\n")
    record = (col + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
              "capacity of 23.67 GiB of which 1.59 GiB is free.\n" + col + "[2024-06-02 09:14:11] Of the allocated "
              "memory 9.00 GiB is allocated by PyTorch\n")
    for text in (deeper, frame, record):
        assert one(text).allocated_by_pytorch_bytes is None, text


def test_old_format_rewrapped_without_parentheses():
    text = ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB \n"
            "GPU 0; 8.00 GiB total capacity; 7.20 GiB already allocated; 0 bytes free; 7.30 GiB reserved in total by PyTorch\n"
            "If reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.  \n")
    ev = one(text)
    assert (ev.device_index, ev.free_bytes, ev.tried_to_allocate_bytes) == (0, 0, 20 * MIB)
    assert ev.reserved_total_bytes == printed_bytes(int(7.30 * GIB))


def test_two_ranks_interleaved_on_one_line_are_two_events():
    a, _ = message("F3", **{**SIZES, "dev": 0})
    b, _ = message("F3", **{**SIZES, "dev": 3, "free": 355 * MIB})
    garbled = "torch.cudatorch.cuda..OutOfMemoryErrorOutOfMemoryError: : " + a.split(": ", 1)[1] + b.split(": ", 1)[1]
    evs = events(garbled)
    assert [e.device_index for e in evs] == [0, 3]
    assert evs[0].exception == "torch.cuda.OutOfMemoryError"


def test_exception_class_on_the_previous_line():
    text = "torch.OutOfMemoryError:\nCUDA out of memory. Tried to allocate 130.00 MiB. GPU 0 has a total capacity of 79.10 GiB of which 12.81 MiB is free."
    assert one(text).exception == "torch.OutOfMemoryError"


def test_same_message_twice_folds_distinct_devices_do_not():
    text, _ = message("F5", **SIZES)
    logged = "ERROR    | 2024-08-21 22:56:04 | autotrain.trainers.common:wrapper:121 - " + text.split(": ", 1)[1]
    ev = one(text + "\n\n" + logged)
    assert ev.count == 2 and len(ev.evidence) == 2
    other, _ = message("F5", **{**SIZES, "dev": 5})
    assert len(events(text + "\n" + other)) == 2


def test_truncated_copy_is_its_own_event_and_complete_one_is_primary():
    from oomdoctor.facts.derived import primary_event
    full, _ = message("F5", **{**SIZES, "dev": 1})
    cut = message("F5", **{**SIZES, "dev": 5})[0][:150]
    facts = extract(normalise(cut + "\n\n" + full))
    assert len(facts.oom_events) == 2
    assert primary_event(facts).device_index == 1


def test_notebook_header_without_message_still_counts():
    text = ("---------------------------------------------------------------------------\n"
            "OutOfMemoryError                          Traceback (most recent call last)\n"
            "<ipython-input-13-941869335d74> in <cell line: 1>()\n"
            "----> 1 predictions = trainer.predict(test_dataset)\n")
    ev = one(text)
    assert ev.kind == "cuda_caching_allocator" and ev.tried_to_allocate_bytes is None and ev.line == 2


LABELLED = ["F1", "F2", "F3", "F4", "F5", "F7", "F8"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fmt=st.sampled_from(LABELLED), width=st.integers(50, 160), words=st.booleans())
def test_wrapping_keeps_the_version_wording_and_the_hint(fmt, width, words):
    """A message pasted into an issue or a narrow terminal: hard-wrapped at the width, or
    word-wrapped. The version label, the hint and the sizes are those of the whole line."""
    import textwrap
    text, exp = message(fmt, **SIZES)
    whole = one(text)
    if words:
        lines = textwrap.wrap(text, width, break_on_hyphens=False)
    else:
        lines = [text[i:i + width] for i in range(0, len(text), width)]
    ev = one("\n".join(["step 10 loss 1.23", *lines, "", "next job"]) + "\n")
    assert ev.message_format == whole.message_format, lines
    assert ev.hint == whole.hint, lines
    for field, value in exp.items():
        assert getattr(ev, field) == value, (field, lines)


@pytest.mark.parametrize("text", [
    "RuntimeError: CUDA out of memory. Tried to allocate more than 1EB memory.",
    "NPU out of memory. Tried to allocate more than 1EB memory",
    "RuntimeError: CUDA out of memory. Tried to allocate  more than 1EB memory.",
])
def test_1eb_request_is_not_an_allocator_oom_event(text: str):
    assert events(text) == []


def test_a_message_whose_request_is_garbled_is_kept_with_the_figures_it_has():
    ev = one("RuntimeError: CUDA out of memory. Tried to allocate 512.\u2014 MiB (GPU 0; 2.95 GiB total capacity; "
             "1.81 GiB already allocated; 356.00 MiB free; 1.89 GiB reserved in total by PyTorch )\n")
    assert ev.tried_to_allocate_bytes is None and ev.total_capacity_bytes == to_bytes("2.95", "GiB")
    assert ev.free_bytes == to_bytes("356.00", "MiB") and ev.message_format.startswith("request unreadable")


def test_a_log_cut_right_after_tried_to_allocate_keeps_its_failure():
    ev = one("step 41 loss 0.93\ntorch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate\n")
    assert (ev.kind, ev.exception, ev.tried_to_allocate_bytes) == ("cuda_caching_allocator", "torch.cuda.OutOfMemoryError", None)


def test_hint_is_kept_but_says_nothing_by_itself():
    ev = one(message("F5", **SIZES)[0])
    assert ev.hint and "expandable_segments" in ev.hint
    # a hint alone (no message) is not an OOM
    assert events("If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True") == []


# -- properties ------------------------------------------------------------------

sizes = st.integers(min_value=0, max_value=2**37)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fmt=st.sampled_from(FORMATS), dev=st.integers(0, 15), req=st.integers(1, 2**37), total=sizes,
       free=sizes, alloc=sizes, unalloc=sizes)
def test_generated_messages_parse_back_to_exact_bytes(fmt, dev, req, total, free, alloc, unalloc):
    text, exp = message(fmt, dev=dev, req=req, total=total, free=free, alloc=alloc, unalloc=unalloc)
    ev = one(text)
    for field, value in exp.items():
        assert getattr(ev, field) == value, (field, text)


def _decorate(text: str, rnd: random.Random) -> str:
    """ANSI, rank/host/timestamp prefixes, a hard wrap at a random column, noise lines."""
    col = rnd.randrange(40, max(41, len(text) - 10))
    wrapped = [text[:col], text[col:]] if rnd.random() < 0.7 else [text]
    prefix = rnd.choice(["", "[rank3]: ", "[default0]:", "node2: ", "0: [rank0]: ", "2024-05-01T10:00:00.123Z "])
    lines = [prefix + "\x1b[31m" + wrapped[0] + "\x1b[0m"] + wrapped[1:]
    noise = ["{'loss': 1.234, 'learning_rate': 2e-05, 'epoch': 0.5}", " 45%|████▌     | 45/100 [01:02<01:10,  1.2s/it]",
             "[2024-05-01 10:00:00,000] [INFO] [engine.py:100:step] step=45"]
    return "\n".join(rnd.sample(noise, 2) + lines + [""] + rnd.sample(noise, 1)) + "\n"


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fmt=st.sampled_from(FORMATS), seed=st.integers(0, 2**32 - 1), req=st.integers(2**20, 2**36),
       alloc=sizes, unalloc=sizes)
def test_decorations_change_no_fact(fmt, seed, req, alloc, unalloc):
    text, exp = message(fmt, dev=2, req=req, total=80 * GIB, free=300 * MIB, alloc=alloc, unalloc=unalloc)
    ev = one(_decorate(text, random.Random(seed)))
    for field, value in exp.items():
        assert getattr(ev, field) == value, field


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=4000))
def test_arbitrary_bytes_never_raise(data):
    """Any input gives a report, or (binary data) a one-line InputError: never a crash."""
    import oomdoctor
    from oomdoctor.read.reader import InputError
    try:
        report = oomdoctor.diagnose(data)
    except InputError as exc:
        assert "\n" not in str(exc) and str(exc)
        return
    assert report.lines_read >= 0


def test_a_notebook_header_whose_message_was_pasted_above_it_is_that_message():
    from oomdoctor.read.normalise import normalise
    from oomdoctor.parsers import extract
    text = ("`OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 14.75 GiB total capacity; 13.91 GiB "
            "already allocated; 6.81 MiB free; 14.02 GiB reserved in total by PyTorch)`\n\n"
            "---------------------------------------------------------------------------\n"
            "OutOfMemoryError                          Traceback (most recent call last)\n"
            "<ipython-input-4-f24794477812> in <cell line: 6>()\n"
            "----> 6 results = model.train(dataset=\"ludwig://alpaca\")\n")
    assert len(extract(normalise(text)).oom_events) == 1
    # ... but a second cell's failure, below another header, is its own
    second = text + ("\n---------------------------------------------------------------------------\n"
                     "OutOfMemoryError                          Traceback (most recent call last)\n"
                     "<ipython-input-5-aaaa> in <cell line: 1>()\n----> 1 model.train()\n")
    assert len(extract(normalise(second)).oom_events) == 2
    # ... and a cut second cell after a whole first one: the message above it is the first cell's
    whole = ("---------------------------------------------------------------------------\n"
             "OutOfMemoryError                          Traceback (most recent call last)\n"
             "<ipython-input-4-aaaa> in <cell line: 6>()\n----> 6 model.train()\n"
             "OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 14.75 GiB total capacity; "
             "13.91 GiB already allocated; 6.81 MiB free; 14.02 GiB reserved in total by PyTorch)\n\n"
             "---------------------------------------------------------------------------\n"
             "OutOfMemoryError                          Traceback (most recent call last)\n"
             "<ipython-input-5-bbbb> in <cell line: 1>()\n----> 1 model.train()\n")
    assert len(extract(normalise(whole)).oom_events) == 2
    # ... while a message pasted after a cell's own is the next header's
    msg = ("OutOfMemoryError: CUDA out of memory. Tried to allocate {} MiB (GPU 0; 14.75 GiB total capacity; 13.91 GiB "
           "already allocated; 6.81 MiB free; 14.02 GiB reserved in total by PyTorch)\n")
    head = "OutOfMemoryError                          Traceback (most recent call last)\n"
    pasted = head + "----> 6 model.train()\n" + msg.format("20.00") + "\n" + msg.format("40.00") + "\n" + head
    assert len(extract(normalise(pasted)).oom_events) == 2
