"""The reader never loses the failure: large logs past every cap, truncated and damaged
compressed files, logs in UTF-16/32, logs full of NULs or terminal control bytes.

Inputs are generated here (in tmp_path when they are files); the large ones are made just
past the point where region mode has to drop something.
"""
from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import os
import subprocess
import sys
from pathlib import Path

import pytest

import oomdoctor
from oomdoctor.pipeline import diagnose_source
from oomdoctor.read import inflate, reader, regions
from oomdoctor.read.reader import InputError, Regions, read_view

OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
       "79.15 GiB of which 1.00 GiB is free. Including non-PyTorch memory, this process has 78.14 GiB memory in use. "
       "Of the allocated memory 70.00 GiB is allocated by PyTorch, and 7.50 GiB is reserved by PyTorch but unallocated.")
TRACEBACK = ["Traceback (most recent call last):", '  File "/workspace/train.py", line 88, in <module>',
             "    loss = model(**batch).loss", OOM]
WARNING = "/opt/conda/lib/python3.10/site-packages/datasets/load.py:1461: UserWarning: Exception: retrying the download"


# Peak RSS of a child process, in KiB: VmHWM starts afresh at exec, where getrusage's
# ru_maxrss keeps the high-water mark of the (forked) parent, the test runner
PEAK_RSS = "[int(x.split()[1]) for x in open('/proc/self/status') if x.startswith('VmHWM:')][0]"


needs_proc = pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="peak memory is read from /proc")


def oomdoctor_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "oomdoctor", *args], capture_output=True,
                          env={**os.environ, **(env or {})}, timeout=300)


def steps(first: int, n: int) -> list[str]:
    return [f"step {i} loss {1 + (i % 997) / 1000:.3f}" for i in range(first, first + n)]


def periodic_warnings_then_oom(warnings: int, gap: int) -> tuple[bytes, int]:
    """A log with a warning every ``gap`` lines, then an OOM; returns it and the OOM's line."""
    lines = ["torch version: 2.3.1", "***** Running training *****"]
    for k in range(warnings):
        lines += steps(k * gap, gap)
        lines.append(WARNING)
    lines += steps(warnings * gap, 50) + TRACEBACK + ["[rank0]: exiting"]
    return ("\n".join(lines) + "\n").encode(), len(lines) - 1


# -- 1. large logs: the last failure, its window, the head and the tail are always kept ------

def test_thousand_periodic_warnings_then_an_oom_is_a_failure(tmp_path: Path):
    # 1000 windows of 311 lines are more than region mode keeps: it used to keep the
    # first ones and refuse the rest, the OOM and the tail with them (exit 0)
    data, oom_line = periodic_warnings_then_oom(1000, 400)
    assert len(data) > reader.FULL_LIMIT
    log = tmp_path / "big.log"
    log.write_bytes(data)
    p = oomdoctor_cli("diagnose", "-f", "json", str(log))
    assert p.returncode == 1, p.stderr
    report = json.loads(p.stdout)
    assert [e["line"] for e in report["oom_events"]] == [oom_line]
    assert any("dropped" in n and "repeated messages" in n for n in report["notes"]), report["notes"]
    assert report["lines_read"] == oom_line + 1


@pytest.fixture
def small_caps(monkeypatch):
    """Region mode with caps small enough to fill in a few hundred lines."""
    monkeypatch.setattr(regions, "MAX_KEPT", 400)
    monkeypatch.setattr(regions, "MAX_REPEATED", 150)
    monkeypatch.setattr(regions, "SEGMENT_LINES", 8)
    return Regions(head_lines=5, tail_lines=5, before=10, after=4, context=False, markers=False)


def view_of(lines: list[str], r: Regions) -> reader.LogView:
    return read_view(io.BytesIO(("\n".join(lines) + "\n").encode()), "t", full_limit=0, regions=r)


def test_repeated_windows_go_first_and_the_latest_are_kept(small_caps):
    lines = ["banner"] * 5 + steps(0, 30) + ["RuntimeError: a one-off problem"] + steps(100, 30)
    for k in range(60):                       # 60 copies of one warning, 40 lines apart
        lines += steps(1000 + 40 * k, 39) + [WARNING]
    lines += steps(9000, 20) + TRACEBACK + steps(9100, 30)
    view = view_of(lines, small_caps)
    kept = {no for no, _ in view.pairs}
    text = dict(view.pairs)
    warnings = [i + 1 for i, ln in enumerate(lines) if ln == WARNING]
    oom = lines.index(OOM) + 1
    assert {1, 2, 3, 4, 5} <= kept                                   # head
    assert set(range(len(lines) - 4, len(lines) + 1)) <= kept        # tail
    assert set(range(oom - 10, oom + 5)) <= kept and text[oom] == OOM  # the failure's window
    assert lines.index("RuntimeError: a one-off problem") + 1 in kept  # a new kind of message
    assert warnings[0] in kept                                        # the first of its kind
    assert warnings[-1] in kept and warnings[1] not in kept           # the latest copies, not the old ones
    assert any("dropped" in n and "repeated messages" in n for n in view.notes)


def test_an_oom_traceback_is_kept_whole_although_a_warning_opened_its_window(small_caps):
    # the warning's window holds the traceback's first lines; the OOM raises them with it
    lines = steps(0, 50)
    for k in range(40):
        lines += steps(100 + 20 * k, 19) + [WARNING]
    lines += ["Traceback (most recent call last):"] + [f'  File "m{k}.py", line {k}, in f{k}' for k in range(6)]
    lines += [OOM] + steps(5000, 200)
    for k in range(40):                       # and more windows after it than the caps hold
        lines += steps(6000 + 20 * k, 19) + [WARNING]
    view = view_of(lines, small_caps)
    kept = dict(view.pairs)
    oom = lines.index(OOM) + 1
    assert all(no in kept for no in range(oom - 7, oom + 1)), "the traceback lost lines"
    assert kept[oom - 7] == "Traceback (most recent call last):"


def test_a_new_failure_outlives_older_and_later_warnings(small_caps):
    lines = steps(0, 20) + TRACEBACK + steps(100, 20)
    for k in range(80):
        lines += steps(1000 + 20 * k, 19) + [f"{WARNING} ({k})"]
    view = view_of(lines, small_caps)
    assert OOM in dict(view.pairs).values()
    assert view.notes


def test_peak_memory_is_bounded_on_a_log_of_repeated_tracebacks(tmp_path: Path):
    """Region mode keeps a bounded share of a log whatever its size; the full measure (a
    100 MB log under 250 MB of peak RSS) is the slow test below."""
    one = "\n".join(TRACEBACK[:3] + ["ValueError: bad sample {}", "step {} loss 0.5"]) + "\n"
    data = "".join(one.format(i, i) for i in range(60_000)).encode() + ("\n".join(TRACEBACK) + "\n").encode()
    view = read_view(io.BytesIO(data), "t", full_limit=0)
    assert len(view.pairs) <= regions.MAX_KEPT + regions.HEAD_LINES + regions.TAIL_LINES
    assert sum(len(t) for _, t in view.pairs) <= regions.MAX_KEPT_BYTES + regions.HEAD_BYTES + regions.TAIL_BYTES
    assert dict(view.pairs)[view.lines_read] == OOM


@pytest.mark.slow
@needs_proc
def test_peak_rss_of_a_100_mb_log_of_repeated_tracebacks(tmp_path: Path, request):
    expr = request.config.getoption("markexpr") or ""
    if "slow" not in expr or "not slow" in expr:
        pytest.skip("a minute of work: run with -m slow")
    one = "\n".join(["[rank0]: Traceback (most recent call last):",
                     '[rank0]:   File "/opt/conda/lib/python3.10/site-packages/torch/utils/data/dataloader.py", line {0}, '
                     "in __next__", "[rank0]:     data = self._next_data()",
                     "[rank0]: ValueError: bad sample {0}", "step {0} loss 1.{0} lr 2e-5"]) + "\n"
    log = tmp_path / "tracebacks.log"
    with open(log, "w") as fh:
        i = size = 0
        while size < 100 * 10**6:
            chunk = "".join(one.format(k) for k in range(i, i + 1000))
            fh.write(chunk)
            size += len(chunk)
            i += 1000
        fh.write("\n".join(TRACEBACK) + "\n")
    code = ("import sys, oomdoctor.pipeline as p; r = p.diagnose_source(sys.argv[1]); "
            f"print({PEAK_RSS}, len(r.oom_events))")
    out = subprocess.run([sys.executable, "-c", code, str(log)], capture_output=True, text=True, timeout=600)
    rss_kib, events = map(int, out.stdout.split())
    assert events == 1
    assert rss_kib < 250 * 1024, f"peak RSS {rss_kib // 1024} MiB"


# -- 2. truncated and damaged compressed files ------------------------------------------------

def compress(kind: str, data: bytes) -> bytes:
    if kind == "gz":
        return gzip.compress(data, mtime=0)
    if kind == "bz2":
        return bz2.compress(data)
    if kind == "xz":
        return lzma.compress(data, preset=1)
    zstandard = pytest.importorskip("zstandard")
    return zstandard.ZstdCompressor(write_checksum=True).compress(data)


def oom_then_filler(filler_lines: int = 100_000) -> bytes:
    """An OOM early on (so that what survives a cut holds it), then a long run of steps."""
    return ("\n".join(steps(0, 100) + TRACEBACK + steps(100, filler_lines)) + "\n").encode()


CODECS = ["gz", "bz2", "xz", "zst"]


@pytest.mark.parametrize("kind", CODECS)
def test_truncated_file_is_diagnosed_from_what_was_inflated(kind: str):
    body = oom_then_filler()
    cut = compress(kind, body)
    cut = cut[: int(len(cut) * 0.7)]
    view = read_view(io.BytesIO(cut), "job.log." + kind)
    assert 0 < view.bytes_read < len(body)
    assert body.startswith("\n".join(t for _, t in view.pairs).encode()[:1000])
    assert any("truncated" in n and "job.log." + kind in n for n in view.notes), view.notes
    assert dict(view.pairs)[104] == OOM


@pytest.mark.parametrize("kind", CODECS)
def test_damaged_file_keeps_what_came_before_the_damage(kind: str):
    body = oom_then_filler()
    data = bytearray(compress(kind, body))
    for k in range(len(data) // 2, len(data) // 2 + 64):
        data[k] ^= 0xA5
    view = read_view(io.BytesIO(bytes(data)), "x")
    assert any(("damaged" in n or "CRC" in n) for n in view.notes), view.notes
    assert "CUDA out of memory" in "\n".join(t for _, t in view.pairs)


def test_gzip_trailing_garbage_and_a_bad_crc_keep_the_whole_log():
    body = ("\n".join(steps(0, 5000) + TRACEBACK) + "\n").encode()
    gz = gzip.compress(body, mtime=0)
    for data, note in ((gz + b"\x00garbage after the member\n", "trailing garbage"),
                       (gz[:-8] + bytes([gz[-8] ^ 0xFF]) + gz[-7:], "CRC")):
        view = read_view(io.BytesIO(data), "x")
        assert view.bytes_read == len(body)
        assert dict(view.pairs)[len(body.splitlines())] == OOM
        assert any(note in n for n in view.notes), view.notes


def test_concatenated_members_and_frames_are_one_log():
    zstandard = pytest.importorskip("zstandard")
    a, b = b"first part\n" * 1000, ("\n".join(TRACEBACK) + "\n").encode()
    for data in (gzip.compress(a) + b"\x00" * 8 + gzip.compress(b), bz2.compress(a) + bz2.compress(b),
                 lzma.compress(a) + lzma.compress(b), zstandard.ZstdCompressor().compress(a)
                 + b"\x50\x2a\x4d\x18\x04\x00\x00\x00skip" + zstandard.ZstdCompressor(write_checksum=True).compress(b)):
        view = read_view(io.BytesIO(data), "x")
        assert view.notes == [] and view.bytes_read == len(a) + len(b)


def test_inflated_size_is_capped_with_a_note(monkeypatch):
    body = oom_then_filler(200_000)
    monkeypatch.setenv("OOMDOCTOR_MAX_INFLATED", "1M")
    view = read_view(io.BytesIO(gzip.compress(body)), "big.log.gz")
    assert view.bytes_read == 2**20
    assert any("1.0 MiB limit" in n and "OOMDOCTOR_MAX_INFLATED" in n for n in view.notes), view.notes
    # a file that inflates to a lot of NULs stops at the cap too, without holding it
    monkeypatch.setenv("OOMDOCTOR_MAX_INFLATED", "2M")
    bomb = gzip.compress(b"step 1\n" + b"\x00" * 50_000_000)
    view = read_view(io.BytesIO(bomb), "bomb.gz")
    assert view.bytes_read == 2 * 2**20 and any("limit" in n for n in view.notes)


@needs_proc
def test_a_small_file_that_inflates_to_a_lot_is_read_in_bounded_memory(tmp_path: Path):
    zstandard = pytest.importorskip("zstandard")
    frame = zstandard.ZstdCompressor(level=1).compress(b"step 1 loss 0.5000 lr 2e-05\n" * 2_400_000)
    bomb = tmp_path / "bomb.log.zst"
    bomb.write_bytes(frame * 16)            # a few hundred KiB that inflate to 1 GiB
    code = ("import sys; from oomdoctor.read import reader; "
            "v = reader.read_view(open(sys.argv[1], 'rb'), 'bomb', full_limit=0, regions=reader.SCAN_REGIONS); "
            f"print({PEAK_RSS}, v.bytes_read, v.notes)")
    out = subprocess.run([sys.executable, "-c", code, str(bomb)], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "OOMDOCTOR_MAX_INFLATED": "300M"})
    rss_kib, nbytes, notes = out.stdout.split(" ", 2)
    assert int(nbytes) == 300 * 2**20 and "300.0 MiB limit" in notes, out.stdout + out.stderr
    assert int(rss_kib) < 200 * 1024


def test_a_bad_inflated_size_setting_is_a_one_line_error(tmp_path: Path, monkeypatch):
    log = tmp_path / "job.log.gz"
    log.write_bytes(gzip.compress(b"step 1\n"))
    p = oomdoctor_cli("diagnose", str(log), env={"OOMDOCTOR_MAX_INFLATED": "lots"})
    err = p.stderr.decode().strip()
    assert p.returncode == 2 and "Traceback" not in err and len(err.splitlines()) == 1
    assert "OOMDOCTOR_MAX_INFLATED='lots'" in err
    for value in ("-5", "0", "4 parsecs"):
        monkeypatch.setenv("OOMDOCTOR_MAX_INFLATED", value)
        with pytest.raises(InputError, match="OOMDOCTOR_MAX_INFLATED"):
            read_view(io.BytesIO(log.read_bytes()), "x")
    for value, size in (("123456", 123456), ("4G", 4 * 2**30), ("1.5m", 3 * 2**19), ("512KiB", 2**19)):
        monkeypatch.setenv("OOMDOCTOR_MAX_INFLATED", value)
        assert inflate.max_inflated() == size


def test_a_damaged_file_does_not_lose_the_other_files_of_a_job(tmp_path: Path):
    a, b = tmp_path / "rank0.log", tmp_path / "rank1.log.gz"
    a.write_text("\n".join(steps(0, 20) + TRACEBACK) + "\n")
    b.write_bytes(gzip.compress(b"step 1\n" * 100_000)[:30] + b"\xff" * 200)
    p = oomdoctor_cli("diagnose", "-f", "json", str(a), str(b))
    assert p.returncode == 1, p.stderr
    report = json.loads(p.stdout)
    assert report["oom_events"]
    assert any(str(b) in n and ("damaged" in n or "truncated" in n) for n in report["notes"]), report["notes"]


def test_scan_reports_what_a_truncated_file_holds(tmp_path: Path):
    body = oom_then_filler()
    gz = gzip.compress(body)
    (tmp_path / "cut.log.gz").write_bytes(gz[: len(gz) // 2])
    (tmp_path / "cut-clean.log.gz").write_bytes(gzip.compress(b"step 1 loss 2\n" * 200_000)[:5000])
    recs = {Path(r["path"]).name: r for r in oomdoctor.scan([str(tmp_path)], jobs=1)}
    cut = recs["cut.log.gz"]
    assert not cut.get("error") and cut["oom_events"][0]["line"] == 104
    assert any("truncated" in n for n in cut["notes"]), cut["notes"]
    # nothing but steps before the cut: not clean, unreadable (a scan must not call it clean)
    assert "truncated" in recs["cut-clean.log.gz"]["error"]


# -- 3. text detection -------------------------------------------------------------------------

ENCODINGS = [("utf-16-le", b"\xff\xfe"), ("utf-16-be", b"\xfe\xff"), ("utf-32-le", b"\xff\xfe\x00\x00"),
             ("utf-32-be", b"\x00\x00\xfe\xff"), ("utf-16-le", b""), ("utf-16-be", b""), ("utf-8", b"\xef\xbb\xbf")]


@pytest.mark.parametrize("encoding,bom", ENCODINGS, ids=[f"{e}{'-bom' if b else ''}" for e, b in ENCODINGS])
def test_unicode_logs_are_read(encoding: str, bom: bytes):
    text = "\n".join(["Überprüfung: Modell geladen ✓"] + steps(0, 30) + TRACEBACK) + "\n"
    data = bom + text.encode(encoding)
    report = diagnose_source(io.BytesIO(data))
    assert [e.line for e in report.oom_events] == [35]
    view = read_view(io.BytesIO(data), "x")
    assert view.pairs[0][1] == "Überprüfung: Modell geladen ✓"
    # region mode reads them the same way
    assert dict(read_view(io.BytesIO(data), "x", full_limit=0).pairs)[35] == OOM


def test_a_nul_run_at_the_start_is_not_binary(tmp_path: Path):
    log = tmp_path / "crashed.log"
    log.write_bytes(b"step 0 loss 2.0\n" + b"\x00" * 6000 + ("\n".join(TRACEBACK) + "\n").encode())
    p = oomdoctor_cli("diagnose", "-f", "json", str(log))
    assert p.returncode == 1, p.stderr
    assert json.loads(p.stdout)["oom_events"][0]["line"] == 5


def test_a_log_that_is_mostly_nul_is_read_past_the_nuls():
    # a node that crashed mid-write: the log's pages are NULs, then the job wrote on
    for lead in (b"", b"step 0 loss 2.0\n"):
        data = lead + b"\x00" * 3_000_000 + ("\n".join(steps(1, 10) + TRACEBACK) + "\n").encode()
        for full_limit in (reader.FULL_LIMIT, 0):
            view = read_view(io.BytesIO(data), "x", full_limit=full_limit)
            assert OOM in dict(view.pairs).values()
            assert any("NUL" in n for n in view.notes), view.notes
        found, _n = reader.has_anchor(io.BytesIO(data), "x")
        assert found


def test_only_nuls_is_still_binary():
    with pytest.raises(InputError, match="binary"):
        read_view(io.BytesIO(b"\x00" * 200_000), "x")


def test_terminal_control_bytes_are_text():
    # a terminal recording: titles end with BEL, `tput sgr0` ends with SI on many terminals
    line = "\x1b]0;user@node07: ~/run\x07\x1b[1m\x0f{}\x1b[m\x0f\x07\r\n"
    text = "".join(line.format(s) for s in steps(0, 300)) + "\n".join(TRACEBACK) + "\n"
    assert not reader.looks_binary(text.encode()[:8192])
    report = diagnose_source(io.BytesIO(text.encode()))
    assert report.oom_events


@pytest.mark.parametrize("sample", [bytes(range(256)) * 32, os.urandom(8192), b"\x7fELF\x02\x01\x01" + os.urandom(8000)])
def test_binary_data_is_still_refused(sample: bytes):
    assert reader.looks_binary(sample)
    with pytest.raises(InputError, match="binary"):
        read_view(io.BytesIO(sample), "x")
