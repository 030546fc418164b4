"""How much slower is a job under ``oomdoctor run``? A job that prints 1 GB, side by side.

    python bench/bench_run.py                      # 1 GiB, 3 rounds, both children
    python bench/bench_run.py --size 256M --repeat 1 --child print
    python bench/bench_run.py --child print --buffering buffered   # print() block-buffered
    python bench/bench_run.py --baseline-src ../old/src  # before/after in the same rounds
    OOMDOCTOR_PREFILTER=re python bench/bench_run.py     # without Hyperscan

Two children:
- ``print``: a Python loop that prints training-log lines with print() (metrics dicts,
  progress lines, logger records), the way a trainer's output is produced. This is the
  case the target is about: throughput of ``oomdoctor run -- job > /dev/null`` within
  1.2x of ``job > /dev/null``. Under PYTHONUNBUFFERED=1 (``--buffering unbuffered``; the
  default follows the environment) each print() is two write() calls, and a write into
  a pipe costs the job more than one into /dev/null; block-buffered, print() writes
  4 KiB at a time and the pipe costs next to nothing.
- ``bulk``: writes 1 MiB blocks straight to fd 1 (memory-bandwidth output). Written to
  /dev/null directly nothing is ever copied, so any pipe in between costs far more than
  the job itself.

Each is run to /dev/null and to a file (where a scheduler puts a job's output), wrapped
and not, and through ``| cat`` (the cost of any pipe at all, for reference). Each round
runs the commands one after the other (order alternating between rounds) and records
wall time, CPU time (user + system, the job and the wrapper together) and the peak RSS
of each run's processes; the median of the rounds is reported with the wrapped/direct
time ratios. The load average is printed before and after: on a shared machine the wall
times move with it, the CPU times much less.
"""
from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import textwrap
from typing import Optional

HERE = os.path.dirname(os.path.abspath(__file__))
FLOOD = os.path.join(HERE, "..", "tests", "helpers", "flood.py")

PRINT_CHILD = textwrap.dedent("""
    import sys
    lines = [
        "{'loss': 1.2345, 'grad_norm': 0.87, 'learning_rate': 1.9e-05, 'epoch': 0.12}",
        " 45%|####5     | 900/2000 [10:00<12:13,  1.50it/s]",
        "[INFO|2025-01-01 12:00:00] trainer.py:2134 >> step 100/2000 throughput 12.3 samples/s",
        "2025-01-01 12:00:00,123 - INFO - data - processed shard 17 of 128 in 3.2s",
        "[2025-01-01 12:00:00,123] [INFO] [logging.py:96:log_dist] [Rank 0] step=100, skipped=0, lr=[1.9e-05]",
    ]
    total = int(sys.argv[1])
    written = i = 0
    while written < total:
        line = lines[i % 5]
        print(line)
        written += len(line) + 1
        i += 1
""")

MEASURE = textwrap.dedent("""
    import resource, subprocess, sys, time
    shell = sys.argv[1] == "shell"
    start = time.perf_counter()
    res = subprocess.run(sys.argv[2] if shell else sys.argv[2:], shell=shell,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - start
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(res.returncode, elapsed, usage.ru_maxrss, usage.ru_utime + usage.ru_stime)
""")


def parse_size(text: str) -> int:
    units = {"K": 2**10, "M": 2**20, "G": 2**30}
    text = text.strip().upper().rstrip("B").rstrip("I")
    return int(float(text[:-1]) * units[text[-1]]) if text[-1] in units else int(text)


def measure(cmd: list[str], shell: bool = False, env: Optional[dict] = None) -> tuple[float, int, float]:
    """Wall seconds, peak RSS (KiB) and CPU seconds of one run."""
    args = [sys.executable, "-c", MEASURE, "shell" if shell else "argv"] + ([" ".join(cmd)] if shell else cmd)
    out = subprocess.run(args, capture_output=True, check=True, timeout=3600, env=env).stdout.decode().split()
    if out[0] != "0":
        raise SystemExit(f"command failed ({out[0]}): {cmd}")
    return float(out[1]), int(out[2]), float(out[3])


def bench(child: str, size: int, repeat: int, sinks: tuple[str, ...], env: dict,
          baseline_src: Optional[str] = None) -> list[tuple[str, float, int, float]]:
    with tempfile.TemporaryDirectory() as tmp:
        if child == "print":
            script = os.path.join(tmp, "print_child.py")
            with open(script, "w") as fh:
                fh.write(PRINT_CHILD)
        else:
            script = FLOOD
        job = f"{shlex.quote(sys.executable)} {shlex.quote(script)} {size}"
        wrapper = f"{shlex.quote(sys.executable)} -m oomdoctor run --"
        before = (f"PYTHONPATH={shlex.quote(os.path.abspath(baseline_src))} {wrapper}"
                  if baseline_src else None)
        log = shlex.quote(os.path.join(tmp, "job.log"))
        runs = {}
        if "devnull" in sinks:
            runs["job > /dev/null"] = f"{job} > /dev/null"
            runs["oomdoctor run > /dev/null"] = f"{wrapper} {job} > /dev/null"
            if before:
                runs["baseline run > /dev/null"] = f"{before} {job} > /dev/null"
        if "file" in sinks:
            runs["job > file"] = f"{job} > {log}"
            runs["oomdoctor run > file"] = f"{wrapper} {job} > {log}"
            if before:
                runs["baseline run > file"] = f"{before} {job} > {log}"
        if "cat" in sinks:
            runs["job | cat > /dev/null"] = f"{job} | cat > /dev/null"
        times: dict[str, list[float]] = {k: [] for k in runs}
        rss: dict[str, list[int]] = {k: [] for k in runs}
        cpu: dict[str, list[float]] = {k: [] for k in runs}
        for r in range(repeat):
            order = list(runs) if r % 2 == 0 else list(reversed(list(runs)))
            for name in order:
                seconds, peak, used = measure([runs[name]], shell=True, env=env)
                times[name].append(seconds)
                rss[name].append(peak)
                cpu[name].append(used)
        return [(name, statistics.median(times[name]), max(rss[name]), statistics.median(cpu[name]))
                for name in runs]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="1G", help="bytes the job prints (e.g. 1G, 256M)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--child", choices=("print", "bulk", "both"), default="both")
    ap.add_argument("--sinks", default="devnull,file,cat",
                    help="comma-separated: devnull (job > /dev/null), file (job > a file), cat (job | cat)")
    ap.add_argument("--buffering", choices=("env", "unbuffered", "buffered"), default="env",
                    help="the print child's stdout: as PYTHONUNBUFFERED says (env), unbuffered "
                         "(PYTHONUNBUFFERED=1: two writes a line) or block-buffered")
    ap.add_argument("--baseline-src", metavar="DIR",
                    help="also run the wrapper from this source tree (PYTHONPATH=DIR), e.g. the src/ "
                         "of a checkout of an earlier version: before and after in the same rounds")
    args = ap.parse_args()
    size = parse_size(args.size)
    env = dict(os.environ)
    if args.buffering == "unbuffered":
        env["PYTHONUNBUFFERED"] = "1"
    elif args.buffering == "buffered":
        env.pop("PYTHONUNBUFFERED", None)
    from oomdoctor.wrap import capture
    engine = "hyperscan" if capture._hyperscan_finder() is not None else "re (pure Python)"
    print(f"job output: {size / 2**20:.0f} MiB, rounds: {args.repeat}, cores: {os.cpu_count()}, "
          f"prefilter: {engine}, print(): {'unbuffered' if env.get('PYTHONUNBUFFERED') else 'buffered'}, "
          f"load average: {os.getloadavg()[0]:.1f}")
    for child in (("print", "bulk") if args.child == "both" else (args.child,)):
        sinks = tuple(x.strip() for x in args.sinks.split(","))
        results = {name: (sec, peak, used)
                   for name, sec, peak, used in bench(child, size, args.repeat, sinks, env, args.baseline_src)}
        print(f"\nchild: {child}")
        print(f"  {'command':<26} {'seconds':>8} {'MB/s':>8} {'CPU s':>7} {'peak RSS':>10}")
        for name, (seconds, peak, used) in results.items():
            print(f"  {name:<26} {seconds:8.2f} {size / seconds / 1e6:8.1f} {used:7.2f} {peak / 1024:7.1f} MB")
        for base, wrapped in (("job > /dev/null", "oomdoctor run > /dev/null"),
                              ("job > /dev/null", "baseline run > /dev/null"),
                              ("job > file", "oomdoctor run > file"), ("job > file", "baseline run > file")):
            if base in results and wrapped in results:
                print(f"  time ratio {wrapped} / {base}: {results[wrapped][0] / results[base][0]:.2f}x "
                      f"(CPU {results[wrapped][2] / results[base][2]:.2f}x)")
    print(f"\nload average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
