"""``oomdoctor.watch()`` and ``install_excepthook()``: diagnosing an OOM inside the process.

The stand-in ``torch`` below is a module with the real names (``torch.cuda`` holding an
``OutOfMemoryError(RuntimeError)``, ``memory_summary``, ``memory_stats``...), so the
live-process path runs without a GPU; with real (CPU) torch installed, a real allocator
failure is diagnosed too.
"""
from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap
import types
from decimal import Decimal

import pytest

import oomdoctor
from oomdoctor.wrap.watch import is_oom

SUMMARY = """\
|===========================================================================|
|                  PyTorch CUDA memory summary, device ID 0                 |
|---------------------------------------------------------------------------|
|            CUDA OOMs: 1            |        cudaMalloc retries: 5         |
|===========================================================================|
|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |
|---------------------------------------------------------------------------|
| Allocated memory      |  61562 MiB |  70144 MiB |   2210 GiB |   2150 GiB |
|---------------------------------------------------------------------------|
| Active memory         |  61562 MiB |  70144 MiB |   2210 GiB |   2150 GiB |
|---------------------------------------------------------------------------|
| Requested memory      |  61540 MiB |  70120 MiB |   2209 GiB |   2149 GiB |
|---------------------------------------------------------------------------|
| GPU reserved memory   |  78250 MiB |  78250 MiB |  78250 MiB |      0 B   |
|---------------------------------------------------------------------------|
| Non-releasable memory |  16688 MiB |  17001 MiB |   1900 GiB |   1884 GiB |
|---------------------------------------------------------------------------|
| Allocations           |    2211    |    2530    |     884 K  |     882 K  |
|---------------------------------------------------------------------------|
| Active allocs         |    2211    |    2530    |     884 K  |     882 K  |
|---------------------------------------------------------------------------|
| GPU reserved segments |     512    |     512    |     512    |       0    |
|---------------------------------------------------------------------------|
| Non-releasable allocs |     301    |     355    |     402 K  |     402 K  |
|---------------------------------------------------------------------------|
| Oversize allocations  |       0    |       0    |       0    |       0    |
|---------------------------------------------------------------------------|
| Oversize GPU segments |       0    |       0    |       0    |       0    |
|===========================================================================|
"""

# One message per wording a real torch build prints (log-formats reference, sections 1-3).
F5 = ("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.20 GiB "
      "is free. Including non-PyTorch memory, this process has 77.94 GiB memory in use. Of the allocated memory "
      "60.12 GiB is allocated by PyTorch, and 16.30 GiB is reserved by PyTorch but unallocated. If reserved but "
      "unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
      "fragmentation.  See documentation for Memory Management  "
      "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")
F3 = ("CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 23.69 GiB total capacity; 21.14 GiB already "
      "allocated; 0 bytes free; 21.57 GiB reserved in total by PyTorch) If reserved memory is >> allocated memory "
      "try setting max_split_size_mb to avoid fragmentation.  See documentation for Memory Management and "
      "PYTORCH_CUDA_ALLOC_CONF")
F1 = ("CUDA out of memory. Tried to allocate 12.50 MiB (GPU 0; 10.92 GiB total capacity; 8.57 MiB already "
      "allocated; 9.28 GiB free; 4.68 MiB cached)")
RUNTIME = "CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported at some other API call."
CPU = ("[enforce fail at alloc_cpu.cpp:114] data. DefaultCPUAllocator: not enough memory: you tried to allocate "
       "34359738368 bytes.")


@pytest.fixture
def fake_torch(monkeypatch):
    """A torch 2.3 stand-in with one A100 in use (no real torch, no GPU needed)."""
    torch = types.ModuleType("torch")
    torch.__version__ = "2.3.0+cu121"
    torch.version = types.SimpleNamespace(cuda="12.1")
    cuda = types.ModuleType("torch.cuda")

    class OutOfMemoryError(RuntimeError):
        pass

    OutOfMemoryError.__module__ = "torch.cuda"      # printed as torch.cuda.OutOfMemoryError (1.13 - 2.3)

    class AcceleratorError(RuntimeError):
        pass

    AcceleratorError.__module__ = "torch"
    cuda.OutOfMemoryError = OutOfMemoryError
    torch.AcceleratorError = AcceleratorError
    cuda.is_available = lambda: True
    cuda.is_initialized = lambda: True
    cuda.device_count = lambda: 1
    cuda.current_device = lambda: 0
    cuda.get_device_name = lambda i=0: "NVIDIA A100-SXM4-80GB"
    cuda.get_device_properties = lambda i=0: types.SimpleNamespace(
        name="NVIDIA A100-SXM4-80GB", total_memory=85_024_112_640, major=8, minor=0)
    cuda.memory_summary = lambda device=None, abbreviated=False: SUMMARY
    cuda.memory_stats = lambda device=None: {
        "allocated_bytes.all.current": 61562 * 2**20, "allocated_bytes.all.peak": 70144 * 2**20,
        "reserved_bytes.all.current": 78250 * 2**20, "reserved_bytes.all.peak": 78250 * 2**20,
        "num_alloc_retries": 5, "num_ooms": 1}
    torch.cuda = cuda
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "torch.cuda", cuda)
    return torch


def _raise(exc: BaseException) -> None:
    raise exc


def _innermost(tb):
    while tb.tb_next is not None:
        tb = tb.tb_next
    return tb.tb_frame.f_code.co_name


def test_oom_is_logged_and_the_same_exception_propagates(fake_torch, caplog, tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "8")
    original = fake_torch.cuda.OutOfMemoryError(F5)
    path = tmp_path / "oom-{rank}.json"
    with caplog.at_level(logging.ERROR, logger="oomdoctor"):
        with pytest.raises(RuntimeError) as info:
            with oomdoctor.watch(report_path=str(path)) as w:
                _raise(original)
    assert info.value is original                       # the same object ...
    assert _innermost(info.value.__traceback__) == "_raise"   # ... raised where it was raised
    assert [r.name for r in caplog.records] == ["oomdoctor"]
    assert caplog.records[0].levelno == logging.ERROR
    report = w.report
    event = report.oom_events[0]
    assert event.kind == "cuda_caching_allocator"
    assert event.tried_to_allocate_bytes == 2 * 2**30
    assert event.reserved_unallocated_bytes == int(Decimal("16.30") * 2**30)
    env = report.environment
    assert env.torch_version.split("+")[0] == "2.3.0"
    assert env.world_size == 8
    assert env.gpu_name == "NVIDIA A100-SXM4-80GB" and env.compute_capability == "8.0"
    assert report.memory_samples, "the allocator's statistics were read"
    written = json.loads((tmp_path / "oom-3.json").read_text())
    assert written["oom_events"][0]["tried_to_allocate_bytes"] == 2 * 2**30


@pytest.mark.parametrize("make, kind", [
    (lambda t: t.cuda.OutOfMemoryError(F5), "cuda_caching_allocator"),
    (lambda t: t.cuda.OutOfMemoryError(F3), "cuda_caching_allocator"),
    (lambda t: RuntimeError(F1), "cuda_caching_allocator"),
    (lambda t: t.AcceleratorError(RUNTIME), "cuda_runtime_error"),
    (lambda t: RuntimeError(RUNTIME), "cuda_runtime_error"),
    (lambda t: RuntimeError(CPU), "cpu_allocator"),
])
def test_each_message_format_is_diagnosed(fake_torch, make, kind):
    exc = make(fake_torch)
    with pytest.raises(type(exc)):
        with oomdoctor.watch() as w:
            raise exc
    assert w.report is not None
    assert kind in {e.kind for e in w.report.oom_events}


def test_what_the_message_lacks_comes_from_the_live_process(fake_torch, monkeypatch):
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:512")
    with pytest.raises(RuntimeError):
        with oomdoctor.watch() as w:
            raise fake_torch.AcceleratorError(RUNTIME)
    env = w.report.environment
    assert env.gpu_capacity_bytes == 85_024_112_640       # the device's, as the message has none
    assert env.alloc_conf == "max_split_size_mb:512"
    assert env.cuda_version == "12.1"


def test_the_imported_framework_and_versions_are_reported(fake_torch, monkeypatch):
    for name, version in (("llamafactory", "0.9.1"), ("deepspeed", "0.14.1"), ("transformers", "4.45.2")):
        mod = types.ModuleType(name)
        mod.__version__ = version
        monkeypatch.setitem(sys.modules, name, mod)
    with pytest.raises(RuntimeError):
        with oomdoctor.watch() as w:
            raise fake_torch.cuda.OutOfMemoryError(F5)
    env = w.report.environment
    assert (env.framework, env.framework_version) == ("llamafactory", "0.9.1")
    assert (env.deepspeed_version, env.transformers_version) == ("0.14.1", "4.45.2")


def test_installed_but_not_imported_packages_are_left_out(monkeypatch):
    from oomdoctor.wrap.watch import installed_versions
    monkeypatch.delitem(sys.modules, "pip", raising=False)
    assert installed_versions(("pip",)) == {}           # installed, but it took no part
    import pip
    assert installed_versions(("pip",)) == {"pip": pip.__version__}


@pytest.mark.parametrize("exc", [
    RuntimeError("mat1 and mat2 shapes cannot be multiplied (4x4096 and 1024x4096)"),
    ValueError("out of memory"),              # not an exception class that torch raises for it
    KeyError("CUDA out of memory"),
])
def test_other_exceptions_pass_without_a_diagnosis(exc, caplog):
    with caplog.at_level(logging.DEBUG, logger="oomdoctor"):
        with pytest.raises(type(exc)):
            with oomdoctor.watch() as w:
                raise exc
    assert w.report is None
    assert not caplog.records


def test_an_oom_re_raised_as_another_exception_is_still_recognised(fake_torch):
    try:
        try:
            raise fake_torch.cuda.OutOfMemoryError(F5)
        except RuntimeError as inner:
            raise RuntimeError("training step failed") from inner
    except RuntimeError as outer:
        assert is_oom(outer)


def test_memory_error_and_class_names_are_enough():
    assert is_oom(MemoryError())
    bare = type("OutOfMemoryError", (RuntimeError,), {})("")
    assert is_oom(bare)


def test_decorator_forms(fake_torch):
    calls = []

    @oomdoctor.watch
    def bare(x):
        calls.append(x)
        raise fake_torch.cuda.OutOfMemoryError(F5)

    @oomdoctor.watch(report_path=None)
    def called(x):
        calls.append(x)
        return x * 2

    class Trainer:
        @oomdoctor.watch
        def train(self, n):
            return n + 1

    assert called(21) == 42
    assert Trainer().train(1) == 2
    with pytest.raises(RuntimeError):
        bare(1)
    assert calls == [21, 1]
    assert bare.__name__ == "bare"


def test_nested_watches_report_once(fake_torch, caplog):
    with caplog.at_level(logging.ERROR, logger="oomdoctor"):
        with pytest.raises(RuntimeError):
            with oomdoctor.watch():
                with oomdoctor.watch():
                    raise fake_torch.cuda.OutOfMemoryError(F5)
    assert len(caplog.records) == 1


def _script(body: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(body)], capture_output=True, timeout=120)


def test_torch_is_never_imported_by_oomdoctor():
    res = _script(f"""
        import sys, oomdoctor
        try:
            with oomdoctor.watch() as w:
                raise RuntimeError({F1!r})
        except RuntimeError:
            pass
        print(w.report.oom_events[0].kind, "torch" in sys.modules)
    """)
    assert res.stdout.decode().split() == ["cuda_caching_allocator", "False"], res.stderr.decode()


def test_excepthook_reports_and_chains_to_the_previous_hook():
    res = _script("""
        import sys, oomdoctor
        def mine(t, e, tb):
            sys.stderr.write("previous hook ran\\n")
            sys.__excepthook__(t, e, tb)
        sys.excepthook = mine
        oomdoctor.install_excepthook()
        oomdoctor.install_excepthook()          # a second call changes nothing
        raise MemoryError()
    """)
    err = res.stderr.decode()
    assert res.returncode == 1
    assert err.count("previous hook ran") == 1
    assert "Traceback (most recent call last)" in err and "MemoryError" in err
    assert err.count("out-of-memory diagnosis (oomdoctor)") == 1


def test_excepthook_ignores_other_failures():
    res = _script("""
        import oomdoctor
        oomdoctor.install_excepthook()
        raise ValueError("bad config")
    """)
    err = res.stderr.decode()
    assert res.returncode == 1 and "ValueError: bad config" in err
    assert "oomdoctor" not in err


def test_with_real_torch_cpu_allocator_failure():
    torch = pytest.importorskip("torch")
    with pytest.raises(RuntimeError) as info:
        with oomdoctor.watch() as w:
            torch.empty(2**62, dtype=torch.uint8)
    assert "DefaultCPUAllocator" in str(info.value)
    assert w.report.oom_events[0].kind == "cpu_allocator"
    assert w.report.environment.torch_version.split("+")[0] == torch.__version__.split("+")[0]


def test_with_real_torch_out_of_memory_class():
    torch = pytest.importorskip("torch")
    exc_type = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
    with pytest.raises(exc_type):
        with oomdoctor.watch() as w:
            raise exc_type(F5)
    assert w.report.oom_events[0].kind == "cuda_caching_allocator"


def _real_cuda():
    """The real torch on a CUDA device: these run on a GPU machine and are skipped elsewhere."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    return torch


def test_a_real_cuda_out_of_memory_with_the_live_allocators_figures():
    torch = _real_cuda()
    total = torch.cuda.get_device_properties(0).total_memory
    with pytest.raises(torch.cuda.OutOfMemoryError) as info:
        with oomdoctor.watch() as w:
            torch.empty(2 * total, dtype=torch.uint8, device="cuda")
    (ev,) = [e for e in w.report.oom_events if e.kind == "cuda_caching_allocator"]
    assert "Tried to allocate" in str(info.value)
    # the message prints GiB with two decimals: the figures agree within that rounding
    assert abs(ev.tried_to_allocate_bytes - 2 * total) <= 0.005 * 2**30
    assert abs(ev.total_capacity_bytes - total) <= 0.005 * 2**30
    assert w.report.environment.gpu_name == torch.cuda.get_device_name(0)
    assert w.report.memory_samples, "the allocator's statistics were read from the live process"
    assert w.report.diagnoses and w.report.diagnoses[0].memory_failure


def test_a_real_cuda_out_of_memory_under_oomdoctor_run(tmp_path):
    _real_cuda()
    script = tmp_path / "job.py"
    script.write_text("import torch\n"
                      "total = torch.cuda.get_device_properties(0).total_memory\n"
                      "x = torch.empty(2 * total, dtype=torch.uint8, device='cuda')\n")
    report = tmp_path / "report.json"
    res = subprocess.run([sys.executable, "-m", "oomdoctor", "run", "--report", str(report), "--",
                          sys.executable, str(script)], capture_output=True, timeout=300)
    assert res.returncode != 0
    assert b"OutOfMemoryError" in res.stderr                          # the job's own output, passed on
    data = json.loads(report.read_text())
    assert data["oom_events"][0]["kind"] == "cuda_caching_allocator"
    assert data["diagnoses"][0]["memory_failure"]
