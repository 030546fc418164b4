#!/usr/bin/env python3
"""Speed of `oomdoctor scan` next to ripgrep, on the same archive, in one run.

    python bench/bench_scan.py            # 1 GiB archive, 5 GiB single log
    python bench/bench_scan.py --quick    # 256 MiB archive, 512 MiB single log

Makes the archives once under bench/out/ (git-ignored) with
../shared/bench/make_archive.py (--seed 0), then times, best of --rounds, interleaved:

  rg        rg -j1 -c PATTERN over the tree (the naive OOM pattern; finds lines only)
  jobs1     oomdoctor scan --jobs 1 (full triage: every log classified)
  jobs2     oomdoctor scan --jobs 2
  python    oomdoctor scan --jobs 1 with the pure-Python prefilter (OOMDOCTOR_PREFILTER=re)
  gz        oomdoctor scan --jobs 1 over the --compress gz archive, against gzip -dc of it
  rss       peak RSS of oomdoctor scan --jobs 1 on one huge log (made by streaming)

and prints each time and the ratios the targets are stated in. Wall-clock times include
the start of the interpreter (about 0.3 s), as a user would see them.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
OUT = HERE / "out"
MAKE_ARCHIVE = REPO.parent / "shared" / "bench" / "make_archive.py"
BASELINE = REPO.parent / "shared" / "bench" / "baseline_scan.py"
PATTERN = ("out of memory|OutOfMemoryError|Signal 9|oom_kill|Out of memory: Killed"
           "|Expected all tensors to be on the same device")
TARGETS = {"jobs1": 1.0, "jobs2": 0.6, "python": 4.0}


def make_archive(out: Path, size: str, *extra: str) -> Path:
    if (out / "manifest.json").exists():
        return out
    if not MAKE_ARCHIVE.exists():
        sys.exit(f"archive generator not found: {MAKE_ARCHIVE}")
    if out.exists():
        shutil.rmtree(out)
    print(f"making {out} ({size}) ...", file=sys.stderr)
    subprocess.run([sys.executable, str(MAKE_ARCHIVE), "--size", size, "--seed", "0", "--out", str(out), *extra],
                   check=True)
    return out


def make_huge_log(path: Path, size: int, archive: Path) -> Path:
    """One log of about ``size`` bytes: a real banner, training output repeated, an OOM at
    the end. Written block by block: never held in memory."""
    if path.exists() and path.stat().st_size >= size:
        return path
    manifest = json.loads((archive / "manifest.json").read_text())["files"]
    clean = next(rel for rel, f in manifest.items() if not f["failure"] and not f["distractor_line"]
                 and f["compressed"] == "none" and f["bytes"] > 2**20)
    failing = next(rel for rel, f in manifest.items() if f["kind"] == "cuda-oom-new-format" and f["compressed"] == "none")
    body = (archive / clean).read_bytes()
    tail = (archive / failing).read_bytes()
    print(f"making {path} ({size / 2**30:.1f} GiB) ...", file=sys.stderr)
    with open(path, "wb") as fh:
        written = 0
        while written + len(tail) < size:
            fh.write(body)
            written += len(body)
        fh.write(tail)
    return path


def timed(cmd: list[str], env: dict | None = None, stdout=subprocess.DEVNULL) -> tuple[float, int, int]:
    """(wall seconds, exit code, peak RSS of the process in bytes)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=stdout, stderr=subprocess.DEVNULL, env={**os.environ, **(env or {})})
    _, status, usage = os.wait4(proc.pid, 0)
    dt = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    return dt, proc.returncode, usage.ru_maxrss * 1024


def oomdoctor_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "oomdoctor", "scan", *args, "--exclude", "manifest.json",
            "--no-summary", "--no-progress", "-o", os.devnull]


def best(label: str, runs: dict, cmd: list[str], env: dict | None = None) -> None:
    dt, rc, rss = timed(cmd, env)
    prev = runs.get(label)
    if prev is None or dt < prev[0]:
        runs[label] = (dt, rc, rss)


def breakdown(root: Path) -> dict:
    """Where the time goes, measured in this process (after the knowledge base is loaded)."""
    from oomdoctor.pipeline import diagnose_view
    from oomdoctor.reader import SCAN_REGIONS, has_anchor, read_view
    from oomdoctor.scan.engine import warm_up
    from oomdoctor.scan.sources import enumerate_tasks

    warm_up()
    tasks = [t for t in enumerate_tasks([str(root)], exclude=["manifest.json"]) if t.kind == "file"]
    t0 = time.perf_counter()
    hits = []
    for t in tasks:
        with open(t.path, "rb", buffering=0) as fh:
            if has_anchor(fh, t.path)[0]:
                hits.append(t.path)
    pass1 = time.perf_counter() - t0
    t0 = time.perf_counter()
    for path in hits:
        with open(path, "rb", buffering=0) as fh:
            diagnose_view(read_view(fh, path, full_limit=0, regions=SCAN_REGIONS), source=path)
    return {"logs": len(tasks), "pass1": pass1, "triggered": len(hits), "parse": time.perf_counter() - t0}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller archive and single log")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--huge", default=None, help="size of the single log for peak RSS (default 5G, quick 512M)")
    ap.add_argument("--skip-python", action="store_true", help="skip the (slow) pure-Python prefilter run")
    a = ap.parse_args()
    size = "256M" if a.quick else "1G"
    huge = a.huge or ("512M" if a.quick else "5G")
    OUT.mkdir(exist_ok=True)
    plain = make_archive(OUT / f"archive-{size.lower()}", size)
    gz = make_archive(OUT / f"archive-{size.lower()}-gz", size, "--compress", "gz")
    mult = {"M": 2**20, "G": 2**30}[huge[-1].upper()]
    big = make_huge_log(OUT / f"single-{huge.lower()}.log", int(float(huge[:-1]) * mult), plain)
    total = json.loads((plain / "manifest.json").read_text())["total_bytes"]

    rg = shutil.which("rg")
    if rg:
        base_cmd = [rg, "-j1", "-c", PATTERN, str(plain)]
        base_name = "rg -j1"
    else:
        base_cmd = [sys.executable, str(BASELINE), "hyperscan", str(plain)]
        base_name = "baseline_scan.py hyperscan (ripgrep not installed)"
    gz_files = sorted(str(p) for p in gz.rglob("*.gz"))
    gunzip_cmd = ["sh", "-c", 'xargs -0 gzip -dc > /dev/null']

    try:
        import hyperscan  # noqa: F401
        native = "hyperscan"
    except ImportError:
        native = "none (pure-Python prefilter)"
    try:
        import isal  # noqa: F401
        inflate = "ISA-L"
    except ImportError:
        inflate = "zlib"
    print(f"archive {plain} ({total / 2**30:.2f} GiB), prefilter: {native}, inflate: {inflate}, "
          f"cores: {os.cpu_count()}", file=sys.stderr)

    # warm the page cache (making the 5 GiB log may have evicted the archives): all runs read from memory
    for root in (plain, gz):
        for p in root.rglob("*"):
            if p.is_file():
                with open(p, "rb") as fh:
                    while fh.read(1 << 22):
                        pass
    runs: dict = {}
    for r in range(a.rounds):
        print(f"round {r + 1}/{a.rounds} ...", file=sys.stderr)
        best("rg", runs, base_cmd)
        best("jobs1", runs, oomdoctor_cmd(str(plain), "--jobs", "1"))
        best("jobs2", runs, oomdoctor_cmd(str(plain), "--jobs", "2"))
        if not a.skip_python and r == 0:   # one round: it is the slow one
            best("python", runs, oomdoctor_cmd(str(plain), "--jobs", "1"), env={"OOMDOCTOR_PREFILTER": "re"})
        best("gz", runs, oomdoctor_cmd(str(gz), "--jobs", "1"))
        t0 = time.perf_counter()
        subprocess.run(gunzip_cmd, input="\0".join(gz_files).encode(), check=True)
        dt = time.perf_counter() - t0
        if "gunzip" not in runs or dt < runs["gunzip"][0]:
            runs["gunzip"] = (dt, 0, 0)
    best("rss", runs, oomdoctor_cmd(str(big), "--jobs", "1"))

    t_rg = runs["rg"][0]
    stages = breakdown(plain)
    print()
    print(f"{'run':<34}{'seconds':>9}{'ratio':>9}{'target':>10}  exit  peak RSS")
    print(f"{base_name:<34}{t_rg:9.2f}{1.0:9.2f}{'':>10}  {runs['rg'][1]:>4}  {runs['rg'][2] / 2**20:6.0f} MiB")
    for label, name in (("jobs1", "oomdoctor scan --jobs 1"), ("jobs2", "oomdoctor scan --jobs 2"),
                        ("python", "  same, pure-Python prefilter")):
        if label not in runs:
            continue
        dt, rc, rss = runs[label]
        print(f"{name:<34}{dt:9.2f}{dt / t_rg:9.2f}{'<= ' + str(TARGETS[label]):>10}  {rc:>4}  {rss / 2**20:6.0f} MiB")
    t_gz, t_gunzip = runs["gz"][0], runs["gunzip"][0]
    print(f"{'gzip -dc (gz archive)':<34}{t_gunzip:9.2f}   {total / t_gunzip / 1e6:6.0f} MB/s")
    print(f"{'oomdoctor scan --jobs 1 (gz)':<34}{t_gz:9.2f}   {total / t_gz / 1e6:6.0f} MB/s  "
          f"throughput ratio {t_gunzip / t_gz:.2f} (target >= 1.5)")
    print(f"in one process, {stages['logs']} logs: read + prefilter of every byte {stages['pass1']:.2f} s "
          f"({stages['pass1'] / t_rg:.2f} x rg); region pass + parse + classify of the "
          f"{stages['triggered']} logs with an anchor {stages['parse']:.2f} s")
    dt, rc, rss = runs["rss"]
    print(f"{'single log ' + huge:<34}{dt:9.2f}   {big.stat().st_size / dt / 1e6:6.0f} MB/s  "
          f"peak RSS {rss / 2**20:.0f} MiB (target <= 150 MB)  exit {rc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
