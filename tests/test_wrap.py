"""``oomdoctor run``: real child processes wrapped the way a Slurm script or launcher would.

The wrapper must be invisible (bytes, exit status, signals), keep bounded memory however
much the job prints, and, when the job fails, report what the log and the kernel say.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from decimal import Decimal
from pathlib import Path

import pytest

HELPERS = Path(__file__).parent / "helpers"
RUN = [sys.executable, "-m", "oomdoctor", "run"]

TEST_INCIDENT = """\
id: test-cuda-oom
title: Test incident - the CUDA caching allocator ran out
summary: A CUDA caching-allocator OOM (test knowledge base).
explanation: Used by the wrapper tests so that they do not depend on the shipped wording.
signals:
  - id: allocator-oom
    weight: 50
    when: {fact: oom.kind, eq: cuda_caching_allocator}
    says: the CUDA caching allocator could not allocate
remediations:
  - id: test-expandable
    title: Let the allocator grow segments in place
    knobs: {env: "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"}
    auto_env: {PYTORCH_CUDA_ALLOC_CONF: "expandable_segments:True"}
examples:
  - name: new-format
    expect: top
    log: "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.20 GiB is free. Of the allocated memory 60.12 GiB is allocated by PyTorch, and 16.30 GiB is reserved by PyTorch but unallocated."
  - name: old-format
    expect: top
    log: "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 23.69 GiB total capacity; 21.14 GiB already allocated; 0 bytes free; 21.57 GiB reserved in total by PyTorch)"
  - name: host
    expect: absent
    log: "Killed"
"""


@pytest.fixture
def tiny_kb(tmp_path: Path) -> Path:
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "test-cuda-oom.yaml").write_text(TEST_INCIDENT)
    return kb


def wrapped(*args: str, timeout: float = 60, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([*RUN, *args], capture_output=True, timeout=timeout, **kw)


# -- pass-through, exit status, report ------------------------------------------------------

def test_output_passes_through_byte_for_byte_and_the_failure_is_diagnosed(tmp_path, tiny_kb):
    out = (HELPERS / "cuda_oom_torch23.stdout").read_bytes()
    err = (HELPERS / "cuda_oom_torch23.stderr").read_bytes()
    rj, rm = tmp_path / "report.json", tmp_path / "report.md"
    res = wrapped("--kb", str(tiny_kb), "--report", str(rj), "--markdown", str(rm), "--no-color", "--",
                  sys.executable, str(HELPERS / "emit.py"), str(HELPERS / "cuda_oom_torch23.stdout"),
                  str(HELPERS / "cuda_oom_torch23.stderr"), "1")
    assert res.returncode == 1
    assert res.stdout == out                       # invalid UTF-8, \r, ANSI, no final newline: all kept
    assert res.stderr.startswith(err)              # the job's stderr first, unchanged
    report_text = res.stderr[len(err):].decode()
    assert "test-cuda-oom" in report_text
    report = json.loads(rj.read_text())
    assert report["diagnoses"][0]["incident"] == "test-cuda-oom"
    event = report["oom_events"][0]
    assert event["kind"] == "cuda_caching_allocator"
    assert event["tried_to_allocate_bytes"] == int(Decimal("1.96") * 2**30)
    assert "Tried to allocate 1.96 GiB" in event["evidence"][0]["text"]
    assert report["attempts"] == [{"attempt": 1, "env_changes": {}, "exit_status": 1, "signal": None,
                                   "duration_s": report["attempts"][0]["duration_s"],
                                   "incident": "test-cuda-oom",
                                   "lines": out.count(b"\n") + err.count(b"\n") + 1}]
    assert "test-cuda-oom" in rm.read_text()


def test_a_job_that_succeeds_prints_nothing_extra(tmp_path):
    rj = tmp_path / "report.json"
    res = wrapped("--report", str(rj), "--", sys.executable, "-c",
                  "import sys; sys.stdout.write('step 1\\n'); sys.stderr.write('warn\\n')")
    assert (res.returncode, res.stdout, res.stderr) == (0, b"step 1\n", b"warn\n")
    assert not rj.exists()


def test_exit_status_is_the_jobs(tmp_path):
    res = wrapped("--", sys.executable, "-c", "import sys; sys.exit(42)")
    assert res.returncode == 42
    assert res.stdout == b""


def test_a_report_that_cannot_be_written_does_not_change_the_exit_status(tmp_path):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    res = wrapped("--report", str(blocker / "report.json"), "--", sys.executable, "-c", "import sys; sys.exit(5)")
    assert res.returncode == 5
    assert "oomdoctor: could not write the report" in res.stderr.decode()


def test_a_job_that_leaves_a_process_holding_its_output_does_not_hang_the_wrapper():
    script = ("import subprocess, sys; p = subprocess.Popen(['sleep', '60']); "
              "print(p.pid, flush=True); sys.exit(3)")
    started = time.monotonic()
    res = wrapped("--", sys.executable, "-c", script, timeout=60)
    orphan = int(res.stdout.split()[0])
    try:
        assert res.returncode == 3
        assert time.monotonic() - started < 30
    finally:
        try:
            os.kill(orphan, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_in_process_invocation_writes_through_python_streams():
    from click.testing import CliRunner

    from oomdoctor.cli import main
    res = CliRunner().invoke(main, ["run", "--", sys.executable, "-c", "print('step 1')"])
    assert (res.exit_code, res.output) == (0, "step 1\n")


def test_a_missing_command_exits_127_like_a_shell():
    res = wrapped("--", "no-such-command-oomdoctor-test")
    assert res.returncode == 127
    assert res.stderr.decode().strip() == "oomdoctor: no-such-command-oomdoctor-test: command not found"


def test_a_bare_sigkill_is_only_possibly_a_host_oom(tmp_path):
    rj = tmp_path / "report.json"
    res = wrapped("--report", str(rj), "--", sys.executable, str(HELPERS / "sigkill_self.py"))
    assert res.returncode == 128 + signal.SIGKILL
    assert res.stdout == b"loading shards\n{'loss': 1.31, 'epoch': 0.01}\n"
    report = json.loads(rj.read_text())
    hosts = [e for e in report["oom_events"] if e["kind"] == "host_oom_killer"]
    assert len(hosts) == 1
    # nothing corroborates it on a quiet machine: no cgroup OOM kill, no kernel kill line
    assert hosts[0]["strength"] == "weak"
    assert "Possibly out of memory" in res.stderr.decode()
    assert any("signal 9 (SIGKILL)" in ev["text"] for ev in hosts[0]["evidence"])
    assert report["attempts"][0]["signal"] == "SIGKILL"
    assert "oomdoctor:" in res.stderr.decode()


def test_ctrl_c_is_not_diagnosed(tmp_path):
    res = wrapped("--", sys.executable, "-c", "import os, signal; print('step 1', flush=True); os.kill(os.getpid(), signal.SIGINT)")
    assert res.returncode in (130, 1)
    assert "not diagnosed" in res.stderr.decode()
    assert "out of memory" not in res.stderr.decode().lower()


# -- signals -------------------------------------------------------------------------------------

@pytest.fixture(autouse=True)
def _reap_leftovers(tmp_path):
    """Whatever a test started under its tmp_path dies with the test, even when an assertion
    failed before the wrapper forwarded its signal (jobs run in their own session)."""
    yield
    needle = str(tmp_path).encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                if needle in fh.read():
                    os.kill(int(entry), signal.SIGKILL)
        except (OSError, ProcessLookupError):
            continue


def _start_terminable(tmp_path: Path, mode: str, *extra: str) -> tuple[subprocess.Popen, Path]:
    markers = tmp_path / "markers"
    markers.mkdir()
    proc = subprocess.Popen([*RUN, *extra, "--", sys.executable, str(HELPERS / "terminable.py"), mode, str(markers)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline() == b"ready\n"
    return proc, markers


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signals_reach_the_whole_process_group(tmp_path, sig):
    proc, markers = _start_terminable(tmp_path, "handle")
    proc.send_signal(sig)
    proc.wait(timeout=30)
    name = signal.Signals(sig).name
    assert proc.returncode == 128 + sig             # the job died of the forwarded signal
    assert (markers / f"job-{name}").exists()
    assert (markers / f"worker-{name}").exists()    # the job's own child got it too


def _gone(pid: int, within: float = 10.0) -> bool:
    end = time.monotonic() + within
    while time.monotonic() < end:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_a_job_ignoring_sigterm_is_killed_after_the_grace_period(tmp_path):
    rj = tmp_path / "report.json"
    proc, markers = _start_terminable(tmp_path, "ignore", "--grace", "2", "--report", str(rj))
    worker = int((markers / "worker-ready").read_text())
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
    assert proc.returncode == 128 + signal.SIGKILL
    assert time.monotonic() - started >= 2.0
    assert (markers / "job-SIGTERM").exists() and (markers / "worker-SIGTERM").exists()
    assert _gone(worker)                            # the whole group was killed, not only the job
    report = json.loads(rj.read_text())
    # the wrapper ended it: that is not an out-of-memory kill
    assert not [e for e in report["oom_events"] if e["kind"] == "host_oom_killer"]


# -- bounded memory --------------------------------------------------------------------------

_MEASURE = textwrap.dedent("""
    import resource, subprocess, sys
    res = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    print(res.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
""")


def _peak_rss_kib(tmp_path: Path, size: int) -> tuple[int, int, dict]:
    rj = tmp_path / f"report-{size}.json"
    cmd = [sys.executable, "-c", _MEASURE, *RUN, "--report", str(rj), "--",
           sys.executable, str(HELPERS / "flood.py"), str(size), "1"]
    out = subprocess.run(cmd, capture_output=True, timeout=300, check=True).stdout.decode().split()
    return int(out[0]), int(out[1]), json.loads(rj.read_text())


@pytest.mark.slow
def test_memory_stays_bounded_however_much_the_job_prints(tmp_path):
    sys.path.insert(0, str(HELPERS))
    try:
        from flood import expected_lines
    finally:
        sys.path.remove(str(HELPERS))
    small_status, small_rss, _ = _peak_rss_kib(tmp_path, 2**20)
    big = 2**30
    big_status, big_rss, report = _peak_rss_kib(tmp_path, big)
    assert small_status == big_status == 1
    # 1 GiB went through; the wrapper grew by less than the capture's budgets allow
    assert big_rss - small_rss < 64 * 1024, (small_rss, big_rss)
    assert report["attempts"][0]["lines"] == expected_lines(big)   # every line was counted
    assert report["lines_read"] == expected_lines(big)


# -- --retry ------------------------------------------------------------------------------------

def test_retry_changes_only_the_environment(tmp_path, tiny_kb):
    work = tmp_path / "work"
    work.mkdir()
    state = work / "state"
    rj = tmp_path / "report.json"
    env = dict(os.environ, OOMDOCTOR_TEST_KEEP="kept")
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    res = wrapped("--retry", "2", "--kb", str(tiny_kb), "--report", str(rj), "--",
                  sys.executable, str(HELPERS / "env_then_oom.py"), str(state), env=env, cwd=str(work))
    assert res.returncode == 0
    runs = res.stdout.decode().split("PYTORCH_CUDA_ALLOC_CONF=")[1:]
    assert len(runs) == 2
    first, second = (r.splitlines() for r in runs)
    assert first[0] == "<unset>" and second[0] == "expandable_segments:True"
    assert first[1:3] == second[1:3]                # same other variables, same cwd and argv
    assert first[1] == "OOMDOCTOR_TEST_KEEP=kept"
    said = res.stderr.decode()
    assert "Retrying with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (was unset)" in said
    assert sorted(p.name for p in work.iterdir()) == ["state"]      # only what the job wrote
    attempts = json.loads(rj.read_text())["attempts"]
    assert [(a["attempt"], a["exit_status"], a["env_changes"], a["incident"]) for a in attempts] == [
        (1, 1, {}, "test-cuda-oom"),
        (2, 0, {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, None),
    ]


def test_no_retry_unless_asked(tmp_path, tiny_kb):
    res = wrapped("--kb", str(tiny_kb), "--", sys.executable, str(HELPERS / "env_then_oom.py"), str(tmp_path / "s"))
    assert res.returncode == 1
    assert res.stdout.decode().count("PYTORCH_CUDA_ALLOC_CONF=") == 1


def test_no_retry_when_the_fix_is_already_in_place(tmp_path, tiny_kb):
    env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True")
    res = wrapped("--retry", "3", "--kb", str(tiny_kb), "--", sys.executable, str(HELPERS / "env_then_oom.py"),
                  str(tmp_path / "s"), env=env)
    assert res.returncode == 1
    assert res.stdout.decode().count("PYTORCH_CUDA_ALLOC_CONF=") == 1
    assert "Retrying" not in res.stderr.decode()



# -- output to a regular file or to /dev/null: the job writes there itself ----------------------

_INTERLEAVED = ("import os\n"
                "for i in range(3000):\n"
                "    os.write(1, b'out %d\\n' % i)\n"
                "    os.write(2, b'err %d ' % i)\n"
                "    os.write(2, b'\\xff\\r\\x1b[0m\\n')\n"
                "os.write(1, b'no final newline')\n")


def _into(path: Path, cmd: list, mode: str = "ab", **kw) -> subprocess.CompletedProcess:
    """Run ``cmd > path 2>&1`` (``>>`` for mode "ab")."""
    with open(path, mode) as fh:
        return subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, timeout=120, **kw)


@pytest.mark.parametrize("mode", ["wb", "ab"])
def test_output_to_a_file_is_byte_identical_to_the_job_run_directly(tmp_path, mode):
    direct, wrapped_log = tmp_path / "direct.log", tmp_path / "wrapped.log"
    for path in (direct, wrapped_log):
        path.write_bytes(b"output of an earlier step\n")
    job = [sys.executable, "-c", _INTERLEAVED]
    assert _into(direct, job, mode).returncode == 0
    assert _into(wrapped_log, [*RUN, "--", *job], mode).returncode == 0
    # same bytes, and stdout and stderr interleaved exactly as without the wrapper
    assert wrapped_log.read_bytes() == direct.read_bytes()


def test_stdout_and_stderr_into_one_pipe_keep_the_jobs_order():
    job = [sys.executable, "-c", _INTERLEAVED]
    direct = subprocess.run(job, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    res = subprocess.run([*RUN, "--", *job], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    assert res.returncode == direct.returncode == 0
    # `2>&1 | tee log`: the same bytes, stdout and stderr interleaved as the job wrote them
    assert res.stdout == direct.stdout


def test_output_into_a_pipe_is_passed_on_while_the_job_runs(tmp_path):
    go = tmp_path / "go"
    script = ("import os, sys, time\n"
              "print('step 1', flush=True)\n"
              "end = time.monotonic() + 60\n"
              f"while not os.path.exists({str(go)!r}):\n"
              "    if time.monotonic() > end:\n"
              "        sys.exit(3)\n"
              "    time.sleep(0.01)\n"
              "print('step 2', flush=True)\n")
    proc = subprocess.Popen([*RUN, "--", sys.executable, "-c", script],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        first = proc.stdout.readline()           # the job waits for us: it has not ended
        go.touch()
        rest = proc.stdout.read()
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stdout.close()
    assert (first, rest) == (b"step 1\n", b"step 2\n")


def _oom_job() -> tuple[list[str], bytes]:
    out = (HELPERS / "cuda_oom_torch23.stdout").read_bytes()
    err = (HELPERS / "cuda_oom_torch23.stderr").read_bytes()
    cmd = [sys.executable, str(HELPERS / "emit.py"), str(HELPERS / "cuda_oom_torch23.stdout"),
           str(HELPERS / "cuda_oom_torch23.stderr"), "1"]
    return cmd, out + err                  # emit.py writes stdout first, then stderr


def _line_count(data: bytes) -> int:
    return data.count(b"\n") + (0 if data.endswith(b"\n") else 1)


def test_a_job_writing_to_a_file_is_diagnosed_with_the_line_numbers_of_its_output(tmp_path, tiny_kb):
    log, rj = tmp_path / "job.log", tmp_path / "report.json"
    log.write_bytes(b"output of an earlier step\n")
    cmd, job_bytes = _oom_job()
    res = _into(log, [*RUN, "--kb", str(tiny_kb), "--report", str(rj), "--no-color", "--", *cmd])
    assert res.returncode == 1
    text = log.read_bytes()
    assert text.startswith(b"output of an earlier step\n" + job_bytes)
    assert b"test-cuda-oom" in text[len(job_bytes):]           # the report follows the job's output
    report = json.loads(rj.read_text())
    assert report["diagnoses"][0]["incident"] == "test-cuda-oom"
    evidence = report["oom_events"][0]["evidence"][0]
    assert "Tried to allocate 1.96 GiB" in evidence["text"]
    # numbered from the job's first line, as in the file without the earlier step's line
    assert evidence["text"] in job_bytes.split(b"\n")[evidence["line"] - 1].decode("utf-8", "replace")
    assert report["attempts"][0]["lines"] == _line_count(job_bytes)


def test_a_job_writing_to_dev_null_is_diagnosed_and_leaves_no_file_behind(tmp_path, tiny_kb):
    scratch, rj = tmp_path / "tmp", tmp_path / "report.json"
    scratch.mkdir()
    cmd, job_bytes = _oom_job()
    res = subprocess.run([*RUN, "--kb", str(tiny_kb), "--report", str(rj), "--", *cmd],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60,
                         env=dict(os.environ, TMPDIR=str(scratch), OOMDOCTOR_RUN_SCRATCH="1"))
    assert res.returncode == 1
    report = json.loads(rj.read_text())
    assert report["diagnoses"][0]["incident"] == "test-cuda-oom"
    assert "Tried to allocate 1.96 GiB" in report["oom_events"][0]["evidence"][0]["text"]
    assert report["attempts"][0]["lines"] == _line_count(job_bytes)
    assert list(scratch.iterdir()) == []


_DISK_WATCH = textwrap.dedent("""
    import os, sys, time
    line = b"{'loss': 1.2345, 'grad_norm': 0.87, 'learning_rate': 1.9e-05, 'epoch': 0.12}\\n"
    chunk = line * (2**20 // len(line))
    total, report = int(sys.argv[1]), sys.argv[2]
    written = peak = 0
    patient = True
    while written < total:
        view = memoryview(chunk)
        while view:
            view = view[os.write(1, view):]
        written += len(chunk)
        used = os.fstat(1).st_blocks * 512        # what our stdout takes on disk
        peak = max(peak, used)
        # a job printing without pause can outrun any reader; give the wrapper a chance to
        # read and free what it read (once it never frees anything, stop waiting for it)
        end = time.monotonic() + 10
        while patient and os.fstat(1).st_blocks * 512 > 8 * 2**20:
            time.sleep(0.001)
            patient = time.monotonic() < end
    with open(report, "w") as fh:
        fh.write(f"{peak} {written // len(line)}")
    sys.exit(1)
""")


def test_dev_null_output_takes_little_disk_however_much_the_job_prints(tmp_path):
    scratch, rj, seen = tmp_path / "tmp", tmp_path / "report.json", tmp_path / "seen"
    scratch.mkdir()
    res = subprocess.run([*RUN, "--report", str(rj), "--", sys.executable, "-c", _DISK_WATCH,
                          str(200 * 10**6), str(seen)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300,
                         env=dict(os.environ, TMPDIR=str(scratch), OOMDOCTOR_RUN_SCRATCH="1"))
    assert res.returncode == 1
    peak, lines = map(int, seen.read_text().split())
    assert peak < 32 * 2**20, peak                         # 200 MB went through it
    assert json.loads(rj.read_text())["attempts"][0]["lines"] == lines      # and none was lost
    assert list(scratch.iterdir()) == []


def test_retry_into_a_file_captures_each_attempt_on_its_own(tmp_path, tiny_kb):
    log, rj = tmp_path / "job.log", tmp_path / "report.json"
    env = dict(os.environ)
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    res = _into(log, [*RUN, "--retry", "1", "--kb", str(tiny_kb), "--report", str(rj), "--", sys.executable,
                      str(HELPERS / "env_then_oom.py"), str(tmp_path / "state")], env=env)
    assert res.returncode == 0
    text = log.read_text()
    first = text.index("PYTORCH_CUDA_ALLOC_CONF=<unset>\n")
    second = text.index("\nPYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n")
    assert first < text.index("Retrying with") < second < text.index("training finished")
    report = json.loads(rj.read_text())
    # attempt 1: three lines on stdout, the four-line traceback on stderr; attempt 2: four lines
    assert [(a["exit_status"], a["lines"]) for a in report["attempts"]] == [(1, 7), (0, 4)]
    assert report["oom_events"][0]["line"] == 7

# -- a real memory-cgroup OOM kill (root with a writable cgroup v1 memory controller) --------

def _limited_cgroup(limit: int):
    from oomdoctor.wrap import cgroup
    state = cgroup.read_state()
    if state is None or state.version != 1 or os.geteuid() != 0:
        return None
    path = Path(state.directory) / f"oomdoctor-test-{os.getpid()}"
    try:
        path.mkdir()
        (path / "memory.limit_in_bytes").write_text(str(limit))
        try:
            (path / "memory.memsw.limit_in_bytes").write_text(str(limit))
        except OSError:
            pass
    except OSError:
        return None
    return path


def test_a_cgroup_oom_kill_is_certain(tmp_path):
    cg = _limited_cgroup(256 * 2**20)
    if cg is None:
        pytest.skip("needs root and a writable cgroup v1 memory controller")
    rj = tmp_path / "report.json"
    try:
        script = f'echo $$ > {cg}/cgroup.procs && exec "$@"'
        res = subprocess.run(["sh", "-c", script, "sh", *RUN, "--report", str(rj), "--", sys.executable, "-c",
                              "import sys; print('allocating', flush=True); x = bytearray(2 * 2**30)"],
                             capture_output=True, timeout=120)
    finally:
        for _ in range(50):
            try:
                cg.rmdir()
                break
            except OSError:
                time.sleep(0.1)
    assert res.returncode == 137
    report = json.loads(rj.read_text())
    host = [e for e in report["oom_events"] if e["kind"] == "host_oom_killer"]
    assert any(e["strength"] == "certain" for e in host)
    texts = " ".join(ev["text"] for e in host for ev in e["evidence"])
    assert "oom_kill 1 (was 0 before the job)" in texts


# -- the capture: original line numbers, what is kept, bounded ----------------------------------

from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

from oomdoctor.wrap import capture as capture_mod  # noqa: E402
from oomdoctor.read import prefilter  # noqa: E402
from oomdoctor.wrap.capture import Capture  # noqa: E402

@pytest.fixture(params=["re", "hyperscan"], autouse=False)
def finder(request, monkeypatch):
    """Run a capture test with each literal finder (Hyperscan only where installed)."""
    if request.param == "hyperscan":
        made = capture_mod._hyperscan_finder()
        if made is None:
            pytest.skip("hyperscan is not installed")
    else:
        made = capture_mod._regex_finder()
    monkeypatch.setattr(capture_mod, "_FINDER", made)
    return request.param


_LINE_TEXTS = ["step 17 done", "", "plain text", "Traceback (most recent call last):",
               '  File "train.py", line 3, in <module>', "RuntimeError: CUDA out of memory.",
               "PyTorch version: 2.3.0", "{'loss': 1.2, 'epoch': 0.5}", "x" * 300, "Killed"]


def _feed_in_pieces(cap: Capture, data: bytes, cuts: list[int], may_scan=None) -> None:
    pos = 0
    for cut in sorted(set(c % (len(data) + 1) for c in cuts)) + [len(data)]:
        cap.feed(data[pos:cut], "stdout", may_scan)
        pos = max(pos, cut)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(_LINE_TEXTS), min_size=0, max_size=120),
       st.lists(st.integers(min_value=0, max_value=10**6), max_size=12),
       st.booleans())
def test_capture_keeps_exactly_head_tail_flagged_lines_and_anchor_windows(finder, texts, cuts, final_newline):
    limits = {"HEAD_LINES": 5, "TAIL_LINES": 4, "BEFORE": 3, "AFTER": 2}
    saved = {k: getattr(capture_mod, k) for k in limits}
    for k, v in limits.items():
        setattr(capture_mod, k, v)
    try:
        data = "\n".join(texts).encode() + (b"\n" if final_newline and texts else b"")
        cap = Capture()
        _feed_in_pieces(cap, data, cuts)
        cap.finish()
        view = cap.view()
    finally:
        for k, v in saved.items():
            setattr(capture_mod, k, v)
    lines = data.decode().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    n = len(lines)
    expected = set(range(1, min(n, 5) + 1)) | set(range(max(1, n - 3), n + 1))
    anchor, candidates = prefilter.anchor_pattern(), capture_mod.candidate_pattern()
    for no, text in enumerate(lines, 1):
        raw = text.encode()
        if anchor.search(raw):
            expected |= set(range(max(1, no - 3), min(n, no + 2) + 1))
        elif candidates.search(raw):
            expected.add(no)
    assert view.lines_read == n
    assert {no for no, _ in view.pairs} == expected
    assert all(text == lines[no - 1] for no, text in view.pairs)      # original numbers, original text


def test_lines_are_numbered_in_the_order_they_complete_across_streams(finder):
    cap = Capture()
    cap.feed(b"a\nb", "stdout")
    cap.feed(b"c\n", "stderr")
    cap.feed(b"\n", "stdout")
    cap.feed(b"unfinished", "stderr")
    cap.finish()
    assert cap.view().pairs == [(1, "a"), (2, "c"), (3, "b"), (4, "unfinished")]


def test_an_enormous_line_is_cut_but_the_numbering_holds(finder):
    cap = Capture()
    cap.feed(b"first\n" + b"=" * (5 * 2**20), "stdout")
    cap.feed(b"=" * 2**20 + b"\nCUDA out of memory\n", "stdout")
    cap.finish()
    pairs = dict(cap.view().pairs)
    assert pairs[1] == "first"
    assert len(pairs[2]) == capture_mod.MAX_LINE
    assert pairs[3] == "CUDA out of memory"
    assert cap.long_lines == 1


def test_unsearched_output_is_named_and_head_and_tail_are_still_kept():
    cap = Capture()
    data = b"".join(b"line %d\n" % i for i in range(1, 20001)) + b"RuntimeError: CUDA out of memory.\n"
    cap.feed(data, "stdout", may_scan=lambda: False)
    cap.finish()
    view = cap.view()
    kept = dict(view.pairs)
    assert kept[1] == "line 1" and kept[20001] == "RuntimeError: CUDA out of memory."
    assert cap.unscanned_lines == 20001
    assert any("20001 lines" in note for note in view.notes)


def test_the_search_stays_within_its_cpu_allowance():
    data = b"".join(b"line %d\n" % i for i in range(1, 20001))
    data = data.replace(b"line 10000\n", b"RuntimeError: CUDA out of memory.\n")
    spent = Capture(scan_share=0.0, scan_burst=0.0)       # no allowance at all
    spent.feed(data, "stdout")
    spent.finish()
    assert spent.unscanned_lines == 20000 and spent.anchors == 0
    free = Capture(scan_share=0.0, scan_burst=60.0)       # a burst far larger than this needs
    free.feed(data, "stdout")
    free.finish()
    assert free.unscanned_lines == 0 and free.anchors == 1


def test_capture_memory_is_bounded_by_its_budgets(finder, monkeypatch):
    sys.path.insert(0, str(HELPERS))
    try:
        from flood import CHUNK
    finally:
        sys.path.remove(str(HELPERS))
    for name, value in (("HEAD_BYTES", 2**19), ("TAIL_BYTES", 2**20), ("EARLY_BYTES", 2**19), ("LATE_BYTES", 2**19)):
        monkeypatch.setattr(capture_mod, name, value)
    cap = Capture()
    peak = 0
    for _ in range(40):                                   # 23 MB, every byte searched
        cap.feed(CHUNK, "stdout")
        peak = max(peak, cap.memory_bytes())
    budget = (capture_mod.HEAD_BYTES + capture_mod.TAIL_BYTES + capture_mod.EARLY_BYTES
              + capture_mod.LATE_BYTES + capture_mod.FEED_MAX + 2 * capture_mod.PARTIAL_LIMIT)
    assert cap.bytes == 40 * len(CHUNK) > 5 * budget
    assert peak <= budget
    assert cap.anchors == 40                              # one warning per chunk, every one seen
    assert len(cap.view().pairs) <= (capture_mod.HEAD_LINES + capture_mod.TAIL_LINES
                                     + capture_mod.EARLY_LINES + capture_mod.LATE_LINES)


def test_once_the_early_store_is_full_repeated_context_is_sampled_and_anchors_all_kept(finder, monkeypatch):
    monkeypatch.setattr(capture_mod, "HEAD_LINES", 2)
    monkeypatch.setattr(capture_mod, "TAIL_LINES", 2)
    monkeypatch.setattr(capture_mod, "EARLY_LINES", 10)
    monkeypatch.setattr(capture_mod, "BEFORE", 3)
    monkeypatch.setattr(capture_mod, "AFTER", 3)
    lines = []
    for step in range(3000):
        lines.append(f"{{'loss': 1.{step}, 'epoch': {step / 1000:.3f}}}")      # context, every line
        if step % 500 == 250:
            lines.append(f"RuntimeError: CUDA out of memory at step {step}")       # anchors
        if step == 2000:
            lines.append("Saving model checkpoint to out/checkpoint-2000")         # a rare context line
    cap = Capture()
    cap.feed(("\n".join(lines) + "\n").encode(), "stdout")
    cap.finish()
    kept = dict(cap.view().pairs)
    for no, text in enumerate(lines, 1):
        if "CUDA out of memory" in text:
            assert kept.get(no) == text and no - 3 in kept and no + 3 in kept   # with its window
    assert "Saving model checkpoint to out/checkpoint-2000" in kept.values()
    assert len(kept) < len(lines) / 10                    # the metrics lines were sampled


# -- cgroup counters and the kernel log ----------------------------------------------------------

from oomdoctor.wrap import cgroup  # noqa: E402


def _tree(tmp_path: Path, files: dict[str, str], proc: str) -> tuple[str, str]:
    root = tmp_path / "cgroup"
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    proc_file = tmp_path / "proc-self-cgroup"
    proc_file.write_text(proc)
    return str(proc_file), str(root)


def test_cgroup_v2_counters_and_the_tightest_limit(tmp_path):
    events = "low 0\nhigh 0\nmax 12\noom {oom}\noom_kill {kill}\noom_group_kill 0\n"
    files = {"job_17/memory.max": str(32 * 2**30), "job_17/step_0/memory.max": "max",
             "job_17/step_0/memory.events": events.format(oom=0, kill=0),
             "job_17/step_0/memory.peak": str(31 * 2**30)}
    proc, root = _tree(tmp_path, files, "0::/job_17/step_0\n")
    before = cgroup.read_state(proc, root)
    (Path(root) / "job_17/step_0/memory.events").write_text(events.format(oom=1, kill=1))
    after = cgroup.read_state(proc, root)
    assert (after.version, after.oom_kill, after.peak, after.limit) == (2, 1, 31 * 2**30, 32 * 2**30)
    assert cgroup.oom_kills_during(before, after) == 1
    assert cgroup.evidence_lines(before, after) == [
        "oomdoctor-run: cgroup memory.events oom_kill 1 (was 0 before the job)",
        "oomdoctor-run: cgroup memory.events oom 1 (was 0 before the job)",
        "oomdoctor-run: cgroup memory.peak 31.00 GiB, memory.max 32.00 GiB",
    ]


def test_cgroup_v1_counters(tmp_path):
    files = {"memory/slurm/uid_0/job_9/memory.failcnt": "0",
             "memory/slurm/uid_0/job_9/memory.max_usage_in_bytes": str(2**30),
             "memory/slurm/uid_0/job_9/memory.limit_in_bytes": str(2**30),
             "memory/slurm/uid_0/job_9/memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n"}
    proc, root = _tree(tmp_path, files, "4:memory:/slurm/uid_0/job_9\n0::/\n")
    before = cgroup.read_state(proc, root)
    d = Path(root) / "memory/slurm/uid_0/job_9"
    (d / "memory.failcnt").write_text("37")
    (d / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
    after = cgroup.read_state(proc, root)
    assert (after.version, after.failcnt, after.oom_kill, after.limit) == (1, 37, 2, 2**30)
    assert cgroup.oom_kills_during(before, after) == 2
    assert "oomdoctor-run: cgroup v1 memory.oom_control oom_kill 2 (was 0 before the job)" in \
        cgroup.evidence_lines(before, after)


def test_no_cgroup_no_evidence(tmp_path):
    proc, root = _tree(tmp_path, {}, "0::/\n")
    assert cgroup.read_state(proc, root) is None
    assert cgroup.read_state(str(tmp_path / "missing"), root) is None
    assert cgroup.evidence_lines(None, None) == []


DMESG = """\
[ 1000.000001] python3 invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0
[ 1000.000300] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/job_17,task_memcg=/job_17/step_0,task=python3,pid=4242,uid=0
[ 1000.000400] Memory cgroup out of memory: Killed process 4242 (python3) total-vm:9000000kB, anon-rss:8123456kB, file-rss:1000kB, shmem-rss:0kB, UID:0 pgtables:17000kB oom_score_adj:0
[ 1200.000000] Out of memory: Killed process 777 (java) total-vm:100kB, anon-rss:50kB, file-rss:0kB, shmem-rss:0kB
[  900.000000] Out of memory: Killed process 4243 (python3) total-vm:100kB, anon-rss:50kB, file-rss:0kB, shmem-rss:0kB
"""


def test_kernel_lines_about_the_job_only():
    kept, kills = cgroup.kernel_oom_lines(DMESG, since=990.0, pids={4242, 4243})
    assert [k.pid for k in kills] == [4242]               # 777 is another job's; 4243 was before ours
    assert kept == DMESG.splitlines()[1:3]
    kept, kills = cgroup.kernel_oom_lines(DMESG, since=990.0, pids=set(), cgroup_path="/job_17/step_0")
    assert kept == DMESG.splitlines()[1:2]                # the summary names the cgroup


# -- the wrapper's own evidence becomes an event ---------------------------------------------

from oomdoctor.facts import Evidence, Facts, OomEvent  # noqa: E402
from oomdoctor.wrap.command import merge_env_value
from oomdoctor.wrap.diagnosis import add_wrapper_event, wrapper_lines
from oomdoctor.wrap.process import RunResult  # noqa: E402


def _result(returncode: int, **kw) -> RunResult:
    return RunResult(argv=["torchrun", "train.py"], returncode=returncode, duration=1.0, capture=Capture(), **kw)


def _event_for(result: RunResult, facts: Facts = None) -> Facts:
    facts = facts or Facts()
    numbered = list(enumerate(wrapper_lines(result), 101))
    add_wrapper_event(facts, numbered, result)
    return facts


def _state(kills: int):
    return cgroup.CgroupState(version=2, path="/job", directory="/x", oom_kill=kills)


def test_a_bare_sigkill_is_weak_and_the_cgroup_counter_makes_it_certain():
    weak = _event_for(_result(-9)).oom_events
    assert [(e.kind, e.strength) for e in weak] == [("host_oom_killer", "weak")]
    certain = _event_for(_result(-9, cgroup_before=_state(0), cgroup_after=_state(1))).oom_events
    assert [(e.kind, e.strength) for e in certain] == [("host_oom_killer", "certain")]
    assert any("oom_kill 1 (was 0 before the job)" in ev.text for ev in certain[0].evidence)
    # a launcher that exits 1 after one of its workers was OOM-killed: the counter alone
    worker = _event_for(_result(1, cgroup_before=_state(3), cgroup_after=_state(4))).oom_events
    assert [(e.kind, e.strength) for e in worker] == [("host_oom_killer", "certain")]


def test_no_event_for_an_ordinary_failure_or_a_kill_by_the_wrapper():
    assert _event_for(_result(1)).oom_events == []
    assert _event_for(_result(-9, killed_after_grace=True, forwarded=["SIGTERM"])).oom_events == []
    assert _event_for(_result(-15, forwarded=["SIGTERM"])).oom_events == []


def test_a_weak_event_from_the_log_is_strengthened_not_duplicated():
    facts = Facts(oom_events=[OomEvent(kind="host_oom_killer", strength="weak", line=5,
                                       evidence=[Evidence(line=5, text="exitcode: -9")])])
    _event_for(_result(-9, cgroup_before=_state(0), cgroup_after=_state(2)), facts)
    assert len(facts.oom_events) == 1
    assert facts.oom_events[0].strength == "certain"
    assert [ev.line for ev in facts.oom_events[0].evidence][0] == 5


def test_env_values_merge_like_the_allocator_reads_them():
    assert merge_env_value(None, "expandable_segments:True") == "expandable_segments:True"
    assert merge_env_value("max_split_size_mb:128", "expandable_segments:True") == \
        "max_split_size_mb:128,expandable_segments:True"
    assert merge_env_value("expandable_segments:False", "expandable_segments:True") == "expandable_segments:True"
    assert merge_env_value("1", "0") == "0"
