#!/usr/bin/env python3
"""Speed of `oomdoctor scan` next to ripgrep and gzip, on the same archives, in one run.

    python bench/bench_scan.py                 # 1 GiB archive, 5 GiB single log
    python bench/bench_scan.py --huge 1G       # a smaller single log for the peak RSS
    python bench/bench_scan.py --quick         # 256 MiB archive, 512 MiB single log
    python bench/bench_scan.py --passes-only   # only the in-process passes (a minute)
    python bench/bench_scan.py --pivots        # the pure-Python search's pivots, hits per GiB

Makes the archives once under bench/out/ (git-ignored) with
../shared/bench/make_archive.py (--seed 0; plain and --compress gz), then, best of
--rounds, interleaved so that every ratio compares runs made under the same load:

  rg          rg -j1 -c PATTERN over the plain tree (the naive OOM pattern; finds lines only)
  gzip -dc    of every file of the gz tree (one gzip process, the sum over the files)
  passes      in this process, every log read and searched for the anchor literals:
              Hyperscan, Aho-Corasick (ahocorasick-rs, OOMDOCTOR_PREFILTER=ahocorasick:
              what a machine without Hyperscan runs), the pure-Python search
              (OOMDOCTOR_PREFILTER=python);
              over the gz tree: inflate + anchor pass, and the region pass of the logs
              with an anchor (inflated again)
  jobs1/2     oomdoctor scan --jobs 1 / --jobs 2 (full triage: every log classified)
  ahocorasick oomdoctor scan --jobs 1 with OOMDOCTOR_PREFILTER=ahocorasick (no Hyperscan at all)
  python      oomdoctor scan --jobs 1 with the pure-Python search
  gz1/2       oomdoctor scan --jobs 1 / --jobs 2 over the gz tree
  rss         peak RSS of oomdoctor scan --jobs 1 on one huge log (made by streaming)

and prints each time with the ratios the targets are stated in. Wall-clock times of
commands include the start of the interpreter (about 0.3 s), as a user would see them.
`uptime` is printed before and after: on a shared machine the load moves every time.
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
TARGETS = {"jobs1": "<= 1.0 x rg", "jobs2": "<= 0.6 x rg", "python": "<= 4 x rg", "pass-python": "<= 4 x rg",
           "pass-ahocorasick": "<= 2 x rg", "gz": ">= 1.5 x gzip"}


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


def timed(cmd: list[str], env: dict | None = None, stdin: bytes | None = None) -> tuple[float, int, int]:
    """(wall seconds, exit code, peak RSS of the process in bytes)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE if stdin is not None else None, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env={**os.environ, **(env or {})})
    if stdin is not None:
        proc.stdin.write(stdin)
        proc.stdin.close()
    _, status, usage = os.wait4(proc.pid, 0)
    dt = time.perf_counter() - t0
    return dt, os.waitstatus_to_exitcode(status), usage.ru_maxrss * 1024


def oomdoctor_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "oomdoctor", "scan", *args, "--exclude", "manifest.json",
            "--no-summary", "--no-progress", "-o", os.devnull]


def keep_best(runs: dict, label: str, result: tuple) -> None:
    if label not in runs or result[0] < runs[label][0]:
        runs[label] = result


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        return "load: " + " ".join(f"{x:.2f}" for x in os.getloadavg())


# -- in-process passes ---------------------------------------------------------------------

def _tasks(root: Path) -> list:
    from oomdoctor.scan.sources import enumerate_tasks
    return [t for t in enumerate_tasks([str(root)], exclude=["manifest.json"]) if t.kind == "file"]


def _use_engine(engine: str) -> None:
    from oomdoctor.read import prefilter
    prefilter._MATCHERS.clear()
    prefilter._MATCHERS["anchor"] = prefilter.Matcher(prefilter.ANCHOR_LITERALS, engine=engine)


def anchor_pass(root: Path, engine: str) -> tuple[float, list[str]]:
    """Seconds to read every log and search it for the anchors; the logs that hold one."""
    from oomdoctor.read.reader import has_anchor
    _use_engine(engine)
    hits = []
    t0 = time.perf_counter()
    for t in _tasks(root):
        with open(t.path, "rb", buffering=0) as fh:
            if has_anchor(fh, t.path)[0]:
                hits.append(t.path)
    return time.perf_counter() - t0, hits


def region_pass(paths: list[str]) -> tuple[float, list]:
    """Seconds to read the logs with an anchor again, in region mode; the views."""
    from oomdoctor.read.reader import SCAN_REGIONS, read_view
    _use_engine("hyperscan")
    t0 = time.perf_counter()
    views = []
    for path in paths:
        with open(path, "rb", buffering=0) as fh:
            views.append((path, read_view(fh, path, full_limit=0, regions=SCAN_REGIONS)))
    return time.perf_counter() - t0, views


def parse_time(views: list) -> float:
    from oomdoctor.pipeline import diagnose_view
    from oomdoctor.scan.engine import warm_up
    warm_up()
    t0 = time.perf_counter()
    for path, view in views:
        diagnose_view(view, source=path)
    return time.perf_counter() - t0


def pivot_hits(root: Path) -> None:
    """The pure-Python search's pivots and how often each hits in the archive: a byte at
    each occurrence (one comparison in Python), a substring of letters at each hit (a
    stretch of the log searched for its literals)."""
    from oomdoctor.read import prefilter
    plan = prefilter.plan_pivots(tuple(prefilter.ANCHOR_LITERALS))
    counts = dict.fromkeys(range(len(plan)), 0)
    total = 0
    for t in _tasks(root):
        data = Path(t.path).read_bytes()
        total += len(data)
        text = prefilter.letters(data)
        for i, p in enumerate(plan):
            counts[i] += (text if p.kind == "letters" else data).count(p.needle)
    print(f"\n{'pivot':<34}{'searched in':<12}{'hits/GiB':>10}  literals")
    for i, p in enumerate(plan):
        where = {"byte": "bytes", "text": "bytes", "letters": "letters"}[p.kind]
        print(f"{p.needle.decode():<34}{where:<12}{counts[i] * 2**30 / total:10.0f}  "
              + ", ".join(w.decode() for w in p.literals))


# -- main ----------------------------------------------------------------------------------

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller archive and single log")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--huge", default=None, help="size of the single log for peak RSS (default 5G, quick 512M)")
    ap.add_argument("--skip-python", action="store_true", help="skip the full scan with the pure-Python search")
    ap.add_argument("--passes-only", action="store_true", help="only rg, gzip and the in-process passes")
    ap.add_argument("--pivots", action="store_true", help="only the pivots of the pure-Python search and their hits")
    a = ap.parse_args()
    size = "256M" if a.quick else "1G"
    huge = a.huge or ("512M" if a.quick else "5G")
    OUT.mkdir(exist_ok=True)
    plain = make_archive(OUT / f"archive-{size.lower()}", size)
    gz = make_archive(OUT / f"archive-{size.lower()}-gz", size, "--compress", "gz")
    total = json.loads((plain / "manifest.json").read_text())["total_bytes"]
    if a.pivots:
        pivot_hits(plain)
        return 0
    big = None
    if not a.passes_only:
        mult = {"M": 2**20, "G": 2**30}[huge[-1].upper()]
        big = make_huge_log(OUT / f"single-{huge.lower()}.log", int(float(huge[:-1]) * mult), plain)

    rg = shutil.which("rg")
    base_cmd = [rg, "-j1", "-c", PATTERN, str(plain)] if rg else [sys.executable, str(BASELINE), "hyperscan", str(plain)]
    base_name = "rg -j1" if rg else "baseline_scan.py hyperscan"
    gz_files = "\0".join(sorted(str(p) for p in gz.rglob("*.gz"))).encode()
    gunzip_cmd = ["xargs", "-0", "gzip", "-dc"]
    runs: dict = {}
    if big is not None:
        # first, while this process is small: a child's peak RSS counts what it shares
        # with its parent between fork and exec
        keep_best(runs, "rss", timed(oomdoctor_cmd(str(big), "--jobs", "1")))

    from oomdoctor.read import prefilter
    native = prefilter.Matcher(prefilter.ANCHOR_LITERALS).engine
    aho = prefilter.Matcher(prefilter.ANCHOR_LITERALS, engine="ahocorasick").engine == "ahocorasick"
    try:
        import isal  # noqa: F401
        inflate = "ISA-L"
    except ImportError:
        inflate = "zlib"
    before = uptime()
    print(f"archive {plain} ({total / 2**30:.2f} GiB), prefilter: {native}, "
          f"ahocorasick-rs: {'yes' if aho else 'no'}, inflate: {inflate}, "
          f"cores: {os.cpu_count()}\nbefore: {before}", file=sys.stderr)

    # warm the page cache (making the huge log may have evicted the archives): all runs read from memory
    for root in (plain, gz):
        for p in root.rglob("*"):
            if p.is_file():
                with open(p, "rb") as fh:
                    while fh.read(1 << 22):
                        pass
    hits_gz: list[str] = []
    for r in range(a.rounds):
        print(f"round {r + 1}/{a.rounds} ...", file=sys.stderr)
        keep_best(runs, "rg", timed(base_cmd))
        keep_best(runs, "gunzip", timed(gunzip_cmd, stdin=gz_files))
        if native == "hyperscan":
            keep_best(runs, "pass-hyperscan", (anchor_pass(plain, "hyperscan")[0], 0, 0))
        if aho:
            keep_best(runs, "pass-ahocorasick", (anchor_pass(plain, "ahocorasick")[0], 0, 0))
        keep_best(runs, "pass-python", (anchor_pass(plain, "python")[0], 0, 0))
        keep_best(runs, "rg", timed(base_cmd))
        dt, hits_gz = anchor_pass(gz, native)
        keep_best(runs, "pass-gz", (dt, 0, 0))
        keep_best(runs, "region-gz", (region_pass(hits_gz)[0], 0, 0))
        keep_best(runs, "gunzip", timed(gunzip_cmd, stdin=gz_files))
        if a.passes_only:
            continue
        keep_best(runs, "jobs1", timed(oomdoctor_cmd(str(plain), "--jobs", "1")))
        keep_best(runs, "jobs2", timed(oomdoctor_cmd(str(plain), "--jobs", "2")))
        if aho:
            keep_best(runs, "ahocorasick", timed(oomdoctor_cmd(str(plain), "--jobs", "1"),
                                                 env={"OOMDOCTOR_PREFILTER": "ahocorasick"}))
        keep_best(runs, "gz1", timed(oomdoctor_cmd(str(gz), "--jobs", "1")))
        keep_best(runs, "gz2", timed(oomdoctor_cmd(str(gz), "--jobs", "2")))
        keep_best(runs, "gunzip", timed(gunzip_cmd, stdin=gz_files))
        if not a.skip_python and r == 0:   # one round: it is the slow one
            keep_best(runs, "python", timed(oomdoctor_cmd(str(plain), "--jobs", "1"), env={"OOMDOCTOR_PREFILTER": "python"}))
        keep_best(runs, "rg", timed(base_cmd))
    parse = parse_time(region_pass(hits_gz)[1])
    after = uptime()

    t_rg, t_gz = runs["rg"][0], runs["gunzip"][0]
    print()
    print(f"{'run':<46}{'seconds':>9}{'ratio':>8}  {'target':<14}")
    print(f"{base_name:<46}{t_rg:9.2f}{1.0:8.2f}")
    rows = [("pass-hyperscan", "anchor pass, Hyperscan (in-process)"),
            ("pass-ahocorasick", "anchor pass, Aho-Corasick (in-process)"),
            ("pass-python", "anchor pass, pure Python (in-process)"),
            ("jobs1", "oomdoctor scan --jobs 1"), ("jobs2", "oomdoctor scan --jobs 2"),
            ("ahocorasick", "oomdoctor scan --jobs 1, Aho-Corasick"),
            ("python", "oomdoctor scan --jobs 1, pure Python")]
    for label, name in rows:
        if label in runs:
            dt, rc = runs[label][:2]
            flag = f"  exit {rc}" if rc not in (0, 1) else ""
            print(f"{name:<46}{dt:9.2f}{dt / t_rg:8.2f}  {TARGETS.get(label, ''):<14}{flag}")
    print(f"\n{'gz archive':<46}{'seconds':>9}{'MB/s':>8}  x gzip -dc throughput")
    print(f"{'gzip -dc (every file)':<46}{t_gz:9.2f}{total / t_gz / 1e6:8.0f}  1.00")
    gz_rows = [("pass-gz", "inflate + anchor pass (in-process)"),
               ("inflate-prefilter", "  + region pass of the logs with an anchor"),
               ("gz1", "oomdoctor scan --jobs 1"), ("gz2", "oomdoctor scan --jobs 2")]
    runs["inflate-prefilter"] = (runs["pass-gz"][0] + runs["region-gz"][0], 0, 0)
    for label, name in gz_rows:
        if label in runs:
            dt = runs[label][0]
            print(f"{name:<46}{dt:9.2f}{total / dt / 1e6:8.0f}  {t_gz / dt:.2f}  {TARGETS['gz'] if label == 'gz1' else ''}")
    print(f"\n{len(hits_gz)} logs hold an anchor; parsing and classifying their regions takes {parse:.1f} s "
          f"in one process ({parse / max(1, len(hits_gz)) * 1000:.0f} ms a log)")
    if "rss" in runs:
        dt, rc, rss = runs["rss"]
        print(f"single log {huge}: {dt:.2f} s ({big.stat().st_size / dt / 1e6:.0f} MB/s), "
              f"peak RSS {rss / 2**20:.0f} MiB (target <= 150 MB), exit {rc}")
    print(f"\nbefore: {before}\nafter:  {after}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
