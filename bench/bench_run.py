"""How much slower is a job under ``oomdoctor run``? A job that prints 1 GB, side by side.

    python bench/bench_run.py                      # 1 GiB, 3 rounds, both children
    python bench/bench_run.py --size 256M --repeat 1 --child print
    OOMDOCTOR_PREFILTER=re python bench/bench_run.py     # without Hyperscan

Two children:
- ``print``: a Python loop that prints training-log lines with print() (metrics dicts,
  progress lines, logger records), the way a trainer's output is produced. This is the
  case the target is about: throughput of ``oomdoctor run -- job > /dev/null`` within
  1.2x of ``job > /dev/null``.
- ``bulk``: writes 1 MiB blocks straight to fd 1 (memory-bandwidth output). Written to
  /dev/null directly nothing is ever copied, so any pipe in between costs far more than
  the job itself.

Each is run to /dev/null and to a file (where a scheduler puts a job's output), wrapped
and not, and through ``| cat`` (the cost of any pipe at all, for reference). Each round
runs the commands one after the other (order alternating between rounds) and records
wall time and the peak RSS of each run's processes; the median of the rounds is reported
with the wrapped/direct time ratios.
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
    print(res.returncode, elapsed, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
""")


def parse_size(text: str) -> int:
    units = {"K": 2**10, "M": 2**20, "G": 2**30}
    text = text.strip().upper().rstrip("B").rstrip("I")
    return int(float(text[:-1]) * units[text[-1]]) if text[-1] in units else int(text)


def measure(cmd: list[str], shell: bool = False) -> tuple[float, int]:
    args = [sys.executable, "-c", MEASURE, "shell" if shell else "argv"] + ([" ".join(cmd)] if shell else cmd)
    out = subprocess.run(args, capture_output=True, check=True, timeout=3600).stdout.decode().split()
    if out[0] != "0":
        raise SystemExit(f"command failed ({out[0]}): {cmd}")
    return float(out[1]), int(out[2])


def bench(child: str, size: int, repeat: int, sinks: tuple[str, ...]) -> list[tuple[str, float, int]]:
    with tempfile.TemporaryDirectory() as tmp:
        if child == "print":
            script = os.path.join(tmp, "print_child.py")
            with open(script, "w") as fh:
                fh.write(PRINT_CHILD)
        else:
            script = FLOOD
        job = f"{shlex.quote(sys.executable)} {shlex.quote(script)} {size}"
        wrapper = f"{shlex.quote(sys.executable)} -m oomdoctor run --"
        log = shlex.quote(os.path.join(tmp, "job.log"))
        runs = {}
        if "devnull" in sinks:
            runs["job > /dev/null"] = f"{job} > /dev/null"
            runs["oomdoctor run > /dev/null"] = f"{wrapper} {job} > /dev/null"
        if "file" in sinks:
            runs["job > file"] = f"{job} > {log}"
            runs["oomdoctor run > file"] = f"{wrapper} {job} > {log}"
        if "cat" in sinks:
            runs["job | cat > /dev/null"] = f"{job} | cat > /dev/null"
        times: dict[str, list[float]] = {k: [] for k in runs}
        rss: dict[str, list[int]] = {k: [] for k in runs}
        for r in range(repeat):
            order = list(runs) if r % 2 == 0 else list(reversed(list(runs)))
            for name in order:
                seconds, peak = measure([runs[name]], shell=True)
                times[name].append(seconds)
                rss[name].append(peak)
        return [(name, statistics.median(times[name]), max(rss[name])) for name in runs]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="1G", help="bytes the job prints (e.g. 1G, 256M)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--child", choices=("print", "bulk", "both"), default="both")
    ap.add_argument("--sinks", default="devnull,file,cat",
                    help="comma-separated: devnull (job > /dev/null), file (job > a file), cat (job | cat)")
    args = ap.parse_args()
    size = parse_size(args.size)
    from oomdoctor import capture
    engine = "hyperscan" if capture._hyperscan_finder() is not None else "re (pure Python)"
    print(f"job output: {size / 2**20:.0f} MiB, rounds: {args.repeat}, cores: {os.cpu_count()}, "
          f"prefilter: {engine}")
    for child in (("print", "bulk") if args.child == "both" else (args.child,)):
        sinks = tuple(x.strip() for x in args.sinks.split(","))
        results = dict((name, (sec, peak)) for name, sec, peak in bench(child, size, args.repeat, sinks))
        print(f"\nchild: {child}")
        print(f"  {'command':<26} {'seconds':>8} {'MB/s':>8} {'peak RSS':>10}")
        for name, (seconds, peak) in results.items():
            print(f"  {name:<26} {seconds:8.2f} {size / seconds / 1e6:8.1f} {peak / 1024:7.1f} MB")
        for base, wrapped in (("job > /dev/null", "oomdoctor run > /dev/null"), ("job > file", "oomdoctor run > file")):
            if base in results and wrapped in results:
                print(f"  time ratio {wrapped} / {base}: {results[wrapped][0] / results[base][0]:.2f}x")


if __name__ == "__main__":
    main()
