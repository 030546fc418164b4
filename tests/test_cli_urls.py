"""fsspec URLs wherever a path is taken: `diagnose URL`, `summarize URL`, `scan --out URL`
(fsspec's memory:// file system, and file:// URLs); a URL or an --out that cannot be used is
a one-line error with exit code 2, never an internal error."""
from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from oomdoctor.cli import main

fsspec = pytest.importorskip("fsspec")

FIXTURES = Path(__file__).parent / "fixtures" / "logs"
EXAMPLE = FIXTURES / "example-zero3-save.log"
CLEAN = b"".join(f"step {i} loss 0.{i:04d}\n".encode() for i in range(200))


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def one_line_error(res, needle: str) -> None:
    assert res.exit_code == 2, (res.output, res.stderr)
    err = res.stderr.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err and "internal error" not in err, err
    assert needle in err, err


@pytest.fixture()
def mem():
    """A folder of its own on fsspec's memory:// file system, with two logs in it."""
    fs = fsspec.filesystem("memory")
    root = f"/oomdoctor-test-{uuid.uuid4().hex[:8]}"
    fs.pipe(f"{root}/logs/a.log", EXAMPLE.read_bytes())
    fs.pipe(f"{root}/logs/b.log", CLEAN)
    yield fs, f"memory://{root}"
    fs.rm(root, recursive=True)


def test_diagnose_a_memory_url_and_a_file_url(mem):
    _fs, root = mem
    res = run("diagnose", "-f", "json", f"{root}/logs/a.log")
    assert res.exit_code == 1, res.stderr
    data = json.loads(res.stdout)
    assert data["diagnoses"][0]["incident"] == "ckpt-save-gather" and data["source"] == f"{root}/logs/a.log"
    local = json.loads(run("diagnose", "-f", "json", str(EXAMPLE)).stdout)
    res = run("diagnose", "-f", "json", EXAMPLE.resolve().as_uri())
    assert res.exit_code == 1 and json.loads(res.stdout)["diagnoses"] == local["diagnoses"]


def test_diagnose_urls_that_cannot_be_read(mem):
    _fs, root = mem
    one_line_error(run("diagnose", f"{root}/logs/nope.log"), "no such file")
    one_line_error(run("diagnose", f"{root}/logs"), "is a directory")
    one_line_error(run("diagnose", "nosuchprotocol://bucket/job.log"), "cannot open this URL")


def test_scan_out_to_a_url_then_summarize_and_resume_it(mem):
    fs, root = mem
    out = f"{root}/results/r.jsonl"
    res = run("scan", f"{root}/logs/a.log", "--out", out, "--no-summary", "-j", "1")
    assert res.exit_code == 1, res.stderr
    recs = [json.loads(line) for line in fs.cat_file(out.removeprefix("memory://")).decode().splitlines()]
    assert [r["path"].rsplit("/", 1)[-1] for r in recs] == ["a.log"]
    # resume: a.log is done, b.log is new; the earlier record stays first
    res = run("scan", f"{root}/logs", "--out", out, "--resume", "-j", "1")
    assert res.exit_code == 1, res.stderr
    assert "scanned 2 logs" in res.stderr                  # the summary covers the whole file
    recs = [json.loads(line) for line in fs.cat_file(out.removeprefix("memory://")).decode().splitlines()]
    assert [r["path"].rsplit("/", 1)[-1] for r in recs] == ["a.log", "b.log"]
    res = run("summarize", out, "-f", "json")
    assert res.exit_code == 1, res.stderr
    data = json.loads(res.stdout)
    assert data["logs"] == 2 and data["failures"] == 1 and data["clean"] == 1
    # resuming a URL that holds something else leaves it as it was
    fs.pipe(f"{root.removeprefix('memory://')}/notes.txt", b"my notes\n")
    one_line_error(run("scan", f"{root}/logs", "--out", f"{root}/notes.txt", "--resume"), "no scan records")
    assert fs.cat_file(f"{root.removeprefix('memory://')}/notes.txt") == b"my notes\n"


def test_scan_out_and_summarize_through_file_urls(tmp_path: Path):
    out = tmp_path / "r.csv"
    res = run("scan", str(EXAMPLE), "--out", out.as_uri(), "-f", "csv", "--no-summary", "-j", "1")
    assert res.exit_code == 1, res.stderr
    assert out.read_text().startswith("path,")
    res = run("summarize", out.as_uri())
    assert res.exit_code == 1 and "1 failed" in res.stdout


def test_out_into_a_missing_directory_is_one_line(tmp_path: Path):
    missing = tmp_path / "missing" / "dir" / "x.jsonl"
    for out in (str(missing), missing.as_uri()):
        res = run("scan", str(EXAMPLE), "--out", out)
        one_line_error(res, "cannot write")
        assert not missing.parent.exists()
    one_line_error(run("scan", str(EXAMPLE), "--out", "nosuchprotocol://bucket/r.jsonl"), "cannot write")


def test_summarize_of_a_missing_file_or_url_is_one_line(tmp_path: Path, mem):
    _fs, root = mem
    one_line_error(run("summarize", str(tmp_path / "nope.jsonl")), "no such file")
    one_line_error(run("summarize", str(tmp_path)), "is a directory")
    one_line_error(run("summarize", f"{root}/nope.jsonl"), "no such file")


def test_without_fsspec_a_url_is_a_one_line_error(monkeypatch, tmp_path: Path):
    for name in [m for m in sys.modules if m == "fsspec" or m.startswith("fsspec.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "fsspec", None)     # import fsspec now fails
    monkeypatch.setitem(sys.modules, "fsspec.core", None)
    for args in (("diagnose", "s3://bucket/job.log"), ("summarize", "s3://bucket/r.jsonl"),
                 ("scan", str(EXAMPLE), "--out", "s3://bucket/r.jsonl")):
        one_line_error(run(*args), "pip install 'oomdoctor[cloud]'")
    # file:// needs no fsspec
    res = run("diagnose", "-f", "json", EXAMPLE.resolve().as_uri())
    assert res.exit_code == 1, res.stderr


def test_an_upload_that_fails_is_one_line(mem):
    """An object store that refuses the records when the scan ends (credentials, quota)."""
    from fsspec.implementations.memory import MemoryFile, MemoryFileSystem

    class Refused(MemoryFile):
        def close(self):
            raise PermissionError("AccessDenied: the bucket refused the upload")

    class RefusingFS(MemoryFileSystem):
        protocol = ("refusing-test",)

        def _open(self, path, mode="rb", **kwargs):
            if "w" in mode:
                return Refused(self, self._strip_protocol(path))
            return super()._open(path, mode, **kwargs)

    fsspec.register_implementation("refusing-test", RefusingFS, clobber=True)
    res = CliRunner().invoke(main, ["scan", str(EXAMPLE), "--out", "refusing-test://bucket/r.jsonl", "-j", "1"])
    one_line_error(res, "cannot write refusing-test://bucket/r.jsonl: AccessDenied")


# -- an interrupted scan into a URL leaves it as it was -------------------------------------

def _upload_fs():
    """An object store in miniature: what is written goes up when the file is closed (or, in
    a transaction, committed), as with s3fs or gcsfs; discarded, it never shows."""
    from fsspec.implementations.memory import MemoryFile, MemoryFileSystem
    from fsspec.spec import AbstractBufferedFile

    class Upload(AbstractBufferedFile):
        def _initiate_upload(self):
            self.parts = []

        def _upload_chunk(self, final=False):
            self.parts.append(self.buffer.getvalue())
            if final and self.autocommit:
                self.commit()
            return True

        def commit(self):
            self.fs.store[self.path] = MemoryFile(self.fs, self.path, b"".join(getattr(self, "parts", [])))

        def discard(self):
            self.parts = []

    class UploadFS(MemoryFileSystem):
        protocol = ("upload-test",)

        @classmethod
        def _strip_protocol(cls, path):
            if isinstance(path, str) and path.startswith("upload-test://"):
                path = "memory://" + path[len("upload-test://"):]
            return super()._strip_protocol(path)

        def _open(self, path, mode="rb", block_size=None, autocommit=True, cache_options=None, **kwargs):
            if "w" in mode:
                return Upload(self, self._strip_protocol(path), mode, block_size=block_size or "default",
                              autocommit=autocommit, cache_options=cache_options)
            return super()._open(path, mode, block_size=block_size, autocommit=autocommit,
                                 cache_options=cache_options, **kwargs)

    fsspec.register_implementation("upload-test", UploadFS, clobber=True)
    return "upload-test"


def _interrupt_after_one_record(monkeypatch) -> None:
    """Ctrl-C once the first log's record is written."""
    import oomdoctor.scan.engine as engine
    real = engine.run_local

    def interrupted(tasks, **kwargs):
        it = real(tasks, **kwargs)
        yield next(it)
        raise KeyboardInterrupt

    monkeypatch.setattr(engine, "run_local", interrupted)


def _results_url(mem, scheme: str) -> tuple:
    """(file system, --out URL in the scheme, where the store keeps it) for r.jsonl."""
    fs, root = mem
    url_root = root.replace("memory://", f"{_upload_fs()}://") if scheme == "upload" else root
    return fs, f"{url_root}/results/r.jsonl", f"{root.removeprefix('memory://')}/results/r.jsonl"


@pytest.mark.parametrize("scheme", ["memory", "upload"])
def test_an_interrupted_scan_into_a_url_leaves_nothing(mem, monkeypatch, scheme: str):
    fs, out, stored = _results_url(mem, scheme)
    _interrupt_after_one_record(monkeypatch)
    res = CliRunner().invoke(main, ["scan", f"{mem[1]}/logs", "--out", out, "-j", "1"])
    assert res.exit_code == 130, (res.output, res.stderr)
    assert not fs.exists(stored), fs.cat_file(stored)


@pytest.mark.parametrize("scheme", ["memory", "upload"])
def test_an_interrupted_resume_of_a_url_leaves_the_earlier_records(mem, monkeypatch, scheme: str):
    fs, out, stored = _results_url(mem, scheme)
    res = run("scan", f"{mem[1]}/logs/a.log", "--out", out, "--no-summary", "-j", "1")
    assert res.exit_code == 1, res.stderr
    before = fs.cat_file(stored)
    assert before.count(b"\n") == 1
    fs.pipe(f"{mem[1].removeprefix('memory://')}/logs/c.log", CLEAN)
    _interrupt_after_one_record(monkeypatch)
    res = CliRunner().invoke(main, ["scan", f"{mem[1]}/logs", "--out", out, "--resume", "-j", "1"])
    assert res.exit_code == 130, (res.output, res.stderr)
    assert fs.cat_file(stored) == before


@pytest.mark.parametrize("resume", [False, True])
def test_a_scan_interrupted_before_it_writes_leaves_a_url_as_it_was(mem, monkeypatch, resume: bool):
    """Ctrl-C while the logs are being listed: the results of the earlier scan stay whole."""
    import oomdoctor.scan.sources as sources
    fs, root = mem
    out = f"{root}/results/r.jsonl"
    stored = f"{root.removeprefix('memory://')}/results/r.jsonl"
    res = run("scan", f"{root}/logs/a.log", "--out", out, "--no-summary", "-j", "1")
    assert res.exit_code == 1, res.stderr
    before = fs.cat_file(stored)

    def listing(*args, **kwargs):
        raise KeyboardInterrupt
        yield

    monkeypatch.setattr(sources, "enumerate_tasks", listing)
    res = CliRunner().invoke(main, ["scan", f"{root}/logs", "--out", out, "-j", "1", *(["--resume"] if resume else [])])
    assert res.exit_code == 130, (res.output, res.stderr)
    assert fs.cat_file(stored) == before


def test_a_whole_scan_into_an_uploading_url_is_committed(mem):
    fs, root = mem
    out = f"{_upload_fs()}://{root.removeprefix('memory://').lstrip('/')}/results/r.csv"
    res = run("scan", f"{root}/logs", "--out", out, "-f", "csv", "--no-summary", "-j", "1")
    assert res.exit_code == 1, res.stderr
    text = fs.cat_file(f"{root.removeprefix('memory://')}/results/r.csv").decode()
    assert text.startswith("path,") and len(text.splitlines()) == 3
