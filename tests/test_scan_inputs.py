"""What `oomdoctor scan` reads: directories, globs, compressed files, tar members, URLs,
and every kind of bad input, each becoming one error record while the scan goes on."""
from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import tarfile
from pathlib import Path

import pytest

import oomdoctor
from oomdoctor.scan import records
from oomdoctor.scan.sources import MEMBER_SEP

OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
       "79.15 GiB of which 1.00 GiB is free. Including non-PyTorch memory, this process has 78.14 GiB memory in use. "
       "Of the allocated memory 70.00 GiB is allocated by PyTorch, and 7.50 GiB is reserved by PyTorch but unallocated.")


def failing_log(n_before: int = 40) -> bytes:
    lines = [f"step {i} loss 1.{i:03d}" for i in range(n_before)]
    lines += ["Traceback (most recent call last):", '  File "train.py", line 10, in <module>',
              "    loss = model(batch)", OOM, "done"]
    return ("\n".join(lines) + "\n").encode()


CLEAN = b"".join(f"step {i} loss 0.{i:04d}\n".encode() for i in range(200))


def by_name(recs) -> dict[str, dict]:
    return {os.path.basename(r["path"].split(MEMBER_SEP)[-1]): r for r in recs}


def scan(*paths, **kw) -> list[dict]:
    return list(oomdoctor.scan([str(p) for p in paths], **kw))


def test_directory_recursive_with_compressed_logs(tmp_path: Path):
    zstandard = pytest.importorskip("zstandard")
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "plain.log").write_bytes(failing_log())
    (tmp_path / "a" / "b" / "g.log.gz").write_bytes(gzip.compress(failing_log()))
    (tmp_path / "a" / "b" / "z.log.zst").write_bytes(zstandard.ZstdCompressor().compress(failing_log()))
    (tmp_path / "a" / "b" / "x.log.xz").write_bytes(lzma.compress(failing_log()))
    (tmp_path / "a" / "b" / "j.log.bz2").write_bytes(bz2.compress(failing_log()))
    (tmp_path / "clean.log").write_bytes(CLEAN)
    recs = by_name(scan(tmp_path))
    assert set(recs) == {"plain.log", "g.log.gz", "z.log.zst", "x.log.xz", "j.log.bz2", "clean.log"}
    for name in ("plain.log", "g.log.gz", "z.log.zst", "x.log.xz", "j.log.bz2"):
        rec = recs[name]
        assert rec["oom_events"][0]["kind"] == "cuda_caching_allocator", name
        assert rec["oom_events"][0]["line"] == 44, name          # original line number, after inflating
        assert rec["bytes_read"] == len(failing_log()), name
    clean = recs["clean.log"]
    assert not records.is_failure(clean) and clean["diagnoses"] == [] and clean["bytes_read"] == len(CLEAN)
    assert recs["g.log.gz"]["size"] == (tmp_path / "a" / "b" / "g.log.gz").stat().st_size


def test_order_is_depth_first_by_name(tmp_path: Path):
    for rel in ("b.log", "a/z.log", "a/c/d.log", "c.log"):
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(CLEAN)
    got = [os.path.relpath(r["path"], tmp_path) for r in scan(tmp_path)]
    assert got == ["a/c/d.log", "a/z.log", "b.log", "c.log"]


def test_globs_include_exclude(tmp_path: Path):
    for rel in ("x/job1.log", "x/job2.out", "x/tmp/job3.log", "y/job4.log"):
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(CLEAN)
    names = lambda recs: sorted(os.path.relpath(r["path"], tmp_path) for r in recs)  # noqa: E731
    assert names(scan(tmp_path / "*" / "*.log")) == ["x/job1.log", "y/job4.log"]
    assert names(scan(tmp_path, include=["*.log"], exclude=["tmp/*", "x/tmp/*"])) == ["x/job1.log", "y/job4.log"]
    assert names(scan(tmp_path, exclude=["job2.out"])) == ["x/job1.log", "x/tmp/job3.log", "y/job4.log"]
    none = scan(tmp_path / "nothing-*.log")
    assert len(none) == 1 and "no file matches" in none[0]["error"]


def make_tar(path: Path, members: list[tuple[str, bytes]], mode: str = "w", links=()) -> None:
    with tarfile.open(path, mode) as tf:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = 1_700_000_000
            tf.addfile(info, io.BytesIO(data))
        for name, target in links:
            info = tarfile.TarInfo(name)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            tf.addfile(info)


@pytest.mark.parametrize("suffix,mode", [(".tar", "w"), (".tar.gz", "w:gz"), (".tgz", "w:gz"), (".tar.xz", "w:xz")])
def test_tar_members_are_read_as_streams(tmp_path: Path, suffix: str, mode: str):
    archive = tmp_path / f"logs{suffix}"
    make_tar(archive, [("job/rank0.log", failing_log()), ("job/rank1.log", CLEAN),
                       ("job/rank2.log.gz", gzip.compress(failing_log(5)))], mode)
    before = sorted(os.listdir(tmp_path))
    recs = scan(archive)
    assert sorted(os.listdir(tmp_path)) == before        # nothing extracted
    assert [r["path"] for r in recs] == [f"{archive}{MEMBER_SEP}job/rank{i}.log" + (".gz" if i == 2 else "")
                                         for i in range(3)]
    assert [records.is_failure(r) for r in recs] == [True, False, True]
    assert recs[2]["oom_events"][0]["line"] == 9
    assert recs[0]["mtime"] == 1_700_000_000


def test_hostile_tar_members_are_reported_not_followed(tmp_path: Path):
    archive = tmp_path / "evil.tar"
    make_tar(archive, [("../../etc/passwd", b"root:x:0:0\n"), ("/abs/path.log", CLEAN), ("ok.log", failing_log())],
             links=[("link.log", "/etc/shadow")])
    recs = by_name(scan(archive))
    assert "unsafe member path" in recs["passwd"]["error"]
    assert "unsafe member path" in recs["path.log"]["error"]
    assert "link member" in recs["link.log"]["error"]
    assert records.is_failure(recs["ok.log"])
    assert not (tmp_path.parent / "etc").exists()


def test_bad_input_becomes_error_records_and_the_scan_goes_on(tmp_path: Path):
    zstandard = pytest.importorskip("zstandard")
    gz = gzip.compress(failing_log(2000))
    (tmp_path / "a-truncated.log.gz").write_bytes(gz[: len(gz) // 2])
    (tmp_path / "b-corrupt.log.gz").write_bytes(gz[:20] + b"\x00garbage" * 50 + gz[-8:])
    zst = zstandard.ZstdCompressor().compress(failing_log(2000))
    (tmp_path / "c-truncated.log.zst").write_bytes(zst[: len(zst) // 2])
    (tmp_path / "d-binary.bin").write_bytes(bytes(range(256)) * 64)
    (tmp_path / "e-nul.log").write_bytes(b"\x00" * 100_000)
    (tmp_path / "f-empty.log").write_bytes(b"")
    tar = tmp_path / "g-truncated.tar"
    make_tar(tar, [("one.log", failing_log()), ("two.log", CLEAN * 50)])
    tar.write_bytes(tar.read_bytes()[:3000])
    (tmp_path / "h-good.log").write_bytes(failing_log())
    os.symlink(tmp_path / "missing.log", tmp_path / "i-broken-link.log")
    recs = scan(tmp_path)
    errors = {os.path.basename(r["path"]): r["error"] for r in recs if r.get("error")}
    assert set(errors) >= {"a-truncated.log.gz", "b-corrupt.log.gz", "c-truncated.log.zst", "d-binary.bin",
                           "e-nul.log", "f-empty.log", "i-broken-link.log"}
    assert "binary" in errors["d-binary.bin"] and "binary" in errors["e-nul.log"]
    assert errors["f-empty.log"] == "empty file"
    assert errors["i-broken-link.log"] == "broken symbolic link"
    assert any("truncated" in e for name, e in errors.items() if "g-truncated.tar" in name), errors
    for e in errors.values():
        assert "\n" not in e and "Traceback" not in e
    good = [r for r in recs if r["path"].endswith("h-good.log")]
    assert len(good) == 1 and records.is_failure(good[0])


def test_symlink_loop_is_reported_once(tmp_path: Path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x.log").write_bytes(CLEAN)
    os.symlink(tmp_path / "d", tmp_path / "d" / "loop")
    recs = scan(tmp_path)
    assert [os.path.relpath(r["path"], tmp_path) for r in recs] == ["d/loop", "d/x.log"]
    assert "loop" in recs[0]["error"]


def test_permission_denied(tmp_path: Path, monkeypatch):
    from oomdoctor.scan import engine
    (tmp_path / "secret.log").write_bytes(failing_log())
    (tmp_path / "open.log").write_bytes(failing_log())
    real = engine.open_task

    def guarded(task):
        if task.path.endswith("secret.log"):
            raise PermissionError(13, "Permission denied")
        return real(task)

    monkeypatch.setattr(engine, "open_task", guarded)
    recs = by_name(scan(tmp_path))
    assert recs["secret.log"]["error"] == "permission denied"
    assert records.is_failure(recs["open.log"])


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root reads files whatever their mode")
def test_permission_denied_for_real(tmp_path: Path):
    p = tmp_path / "secret.log"
    p.write_bytes(failing_log())
    p.chmod(0)
    try:
        assert scan(p)[0]["error"] == "permission denied"
    finally:
        p.chmod(0o644)


def test_fsspec_file_and_memory_urls(tmp_path: Path):
    fsspec = pytest.importorskip("fsspec")
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "a.log").write_bytes(failing_log())
    (tmp_path / "logs" / "b.log.gz").write_bytes(gzip.compress(CLEAN))
    recs = by_name(scan(f"file://{tmp_path}/logs"))
    assert records.is_failure(recs["a.log"]) and not records.is_failure(recs["b.log.gz"])
    assert recs["a.log"]["path"].startswith("file://")

    fs = fsspec.filesystem("memory")
    fs.pipe("/oomscan/x/job.log", failing_log())
    fs.pipe("/oomscan/x/ok.log", CLEAN)
    try:
        recs = by_name(scan("memory://oomscan", jobs=1))
        assert set(recs) == {"job.log", "ok.log"}
        assert recs["job.log"]["oom_events"][0]["line"] == 44
        assert recs["job.log"]["path"].startswith("memory://") and recs["job.log"]["path"].endswith("oomscan/x/job.log")
        glob_recs = scan("memory://oomscan/x/*.log")
        assert len(glob_recs) == 2
    finally:
        fs.rm("/oomscan", recursive=True)


def test_resume_keys_skip_done_logs(tmp_path: Path):
    (tmp_path / "a.log").write_bytes(failing_log())
    (tmp_path / "b.log").write_bytes(CLEAN)
    first = scan(tmp_path)
    again = scan(tmp_path, skip={records.key(first[0])})
    assert [r["path"] for r in again] == [first[1]["path"]]
    os.utime(tmp_path / "a.log", (1, 1))          # changed since: scanned again
    assert len(scan(tmp_path, skip={records.key(first[0])})) == 2


def test_scan_is_callable_from_the_package():
    import oomdoctor.scan as mod
    assert callable(oomdoctor.scan) and callable(mod)
    assert list(oomdoctor.scan([])) == []


def test_pure_python_prefilter_gives_the_same_records(tmp_path: Path, monkeypatch):
    from oomdoctor.read import prefilter
    (tmp_path / "a.log").write_bytes(failing_log())
    (tmp_path / "b.log").write_bytes(CLEAN)
    (tmp_path / "c.log.gz").write_bytes(gzip.compress(failing_log(3000)))
    native = scan(tmp_path)
    for value, engine in (("python", "python"), ("re", "python"), ("trie", "trie")):
        monkeypatch.setenv("OOMDOCTOR_PREFILTER", value)
        monkeypatch.setattr(prefilter, "_MATCHERS", {})
        assert prefilter.anchor_matcher().engine == engine
        assert scan(tmp_path) == native
