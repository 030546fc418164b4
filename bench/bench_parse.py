#!/usr/bin/env python3
"""Benchmark: `oomdoctor diagnose` on a 1 MB and a 100 MB training log.

Reports wall time and peak RSS of each run (with the start-up cache filled by the first
round, as a user's later runs find it, and without it), side by side with baselines measured in the
same rounds on the same file, as ratios: `python -c "import pydantic, click, yaml, regex"`
(the floor of any Python tool built on those libraries), `grep -c` for the OOM pattern,
a plain Python pass that reads every line, and, with ``--baseline-src``, the diagnose of
another source tree (the previous version). Runs are interleaved round by round so that
each ratio compares runs made under the same load; the best of the rounds is kept.
Not a test: numbers depend on the machine.

    python bench/bench_parse.py [--sizes 1,100] [--repeat 5] [--keep]
    python bench/bench_parse.py --sizes 1 --baseline-src ../oomdoctor-previous/src
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from typing import Optional

HERE = os.path.dirname(os.path.abspath(__file__))

OOM = ("[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.91 GiB. GPU 0 has a total capacity "
       "of 79.15 GiB of which 1.20 GiB is free. Including non-PyTorch memory, this process has 77.93 GiB memory in use. "
       "Of the allocated memory 71.02 GiB is allocated by PyTorch, and 5.40 GiB is reserved by PyTorch but unallocated. "
       "If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
       "fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)\n")

HEAD = """[2024-06-02 09:14:11,201] [INFO] [real_accelerator.py:203:get_accelerator] Setting ds_accelerator to cuda (auto detect)
[2024-06-02 09:15:02,113] [INFO] [logging.py:96:log_dist] [Rank 0] DeepSpeed info: version=0.14.4, git-hash=unknown, git-branch=unknown
[INFO|2024-06-02 09:14:30] llamafactory.hparams.parser:355 >> Process rank: 0, device: cuda:0, n_gpu: 1, distributed training: True, compute dtype: torch.bfloat16
[INFO|trainer.py:2048] 2024-06-02 09:31:40,116 >> ***** Running training *****
[INFO|trainer.py:2049] 2024-06-02 09:31:40,116 >>   Num examples = 52,002
"""

TAIL = """[rank0]: Traceback (most recent call last):
[rank0]:   File "/opt/conda/lib/python3.10/site-packages/transformers/trainer.py", line 3318, in training_step
[rank0]:     loss = self.compute_loss(model, inputs)
[rank0]:   File "/opt/conda/lib/python3.10/site-packages/transformers/models/llama/modeling_llama.py", line 1210, in forward
[rank0]:     logits = logits.float()
""" + OOM


def make_log(path: str, size: int, seed: int = 0) -> None:
    """A training log of about ``size`` bytes: banners, progress bars, step logs, an OOM at the end."""
    rnd = random.Random(seed)
    with open(path, "w") as fh:
        fh.write(HEAD)
        written = len(HEAD)
        step = 0
        while written < size - 2000:
            step += 1
            lines = [
                f"{{'loss': {rnd.uniform(0.5, 2.5):.4f}, 'grad_norm': {rnd.uniform(0.1, 4):.4f}, 'learning_rate': 1.9e-05, 'epoch': {step / 5000:.2f}}}\n",
                f" {step % 100:3d}%|{'█' * (step % 10):10s}| {step}/50000 [1:02:03<10:00:00,  1.23s/it]\r",
                f"[2024-06-02 10:{step % 60:02d}:00,000] [INFO] [logging.py:96:log_dist] [Rank 0] step={step}, skipped=0, lr=[1.9e-05], mom=[(0.9, 0.999)]\n",
            ]
            chunk = "".join(lines)
            fh.write(chunk)
            written += len(chunk.encode())
        fh.write(TAIL)


def run(cmd: list[str], env: Optional[dict] = None) -> tuple[float, int, int]:
    """(wall seconds, peak RSS in KiB, exit code) of one command in a fresh child."""
    probe = ("import resource, subprocess, sys, time, json;"
             "t = time.perf_counter(); p = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL);"
             "print(json.dumps([time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, p.returncode]))")
    out = subprocess.run([sys.executable, "-c", probe, *cmd], capture_output=True, text=True, check=True,
                         env=env).stdout
    wall, rss, rc = json.loads(out)
    return wall, rss, rc


def interleaved(cmds: dict[str, tuple[list[str], dict]], repeat: int) -> dict[str, tuple[float, int, int]]:
    """Best wall time, peak RSS and exit code of each command, run round-robin."""
    runs: dict[str, list] = {name: [] for name in cmds}
    for _ in range(repeat):
        for name, (cmd, env) in cmds.items():
            runs[name].append(run(cmd, env))
    return {name: (min(r[0] for r in rs), max(r[1] for r in rs), rs[0][2]) for name, rs in runs.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1,100", help="log sizes in MB")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--baseline-src", help="a source tree (its src/ directory) to diagnose the same logs with")
    ap.add_argument("--keep", action="store_true", help="keep the generated logs")
    args = ap.parse_args()
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)   # users run with their byte-code caches
    tmp = tempfile.mkdtemp(prefix="oomdoctor-bench-")
    # the start-up cache of the runs measured: its own, filled by the first round (users'
    # later runs find it filled), and one run per round without it
    warm = dict(env, OOMDOCTOR_CACHE_DIR=os.path.join(tmp, "cache"))
    cold = dict(env, OOMDOCTOR_CACHE="off")
    readlines = "import sys\nn = 0\nfor line in open(sys.argv[1], 'rb'):\n    n += 1\nprint(n)"
    header = f"{'size':>6} {'run':<26} {'seconds':>8} {'RSS MB':>7} {'÷imports':>9} {'÷grep':>7} {'÷py-read':>9}"
    print(header)
    for mb in (float(s) for s in args.sizes.split(",")):
        path = os.path.join(tmp, f"train-{mb:g}MB.log")
        make_log(path, int(mb * 2**20))
        cmds = {
            "imports": ([sys.executable, "-c", "import pydantic, click, yaml, regex"], env),
            "grep -c": (["grep", "-c", "out of memory", path], env),
            "py-read": ([sys.executable, "-c", readlines, path], env),
            "oomdoctor diagnose": ([sys.executable, "-m", "oomdoctor", "diagnose", "--format", "json", path], warm),
            # a first run on a machine: nothing in the start-up cache (oomdoctor.read.cache)
            "diagnose, no cache": ([sys.executable, "-m", "oomdoctor", "diagnose", "--format", "json", path], cold),
        }
        if args.baseline_src:
            base_env = dict(env, PYTHONPATH=os.path.abspath(args.baseline_src))
            cmds["baseline diagnose"] = ([sys.executable, "-m", "oomdoctor", "diagnose", "--format", "json", path], base_env)
        got = interleaved(cmds, args.repeat)
        for name, (wall, rss, _rc) in got.items():
            print(f"{mb:>4g}MB {name:<26} {wall:>8.3f} {rss / 1024:>7.1f} {wall / got['imports'][0]:>9.2f} "
                  f"{wall / got['grep -c'][0]:>7.1f} {wall / got['py-read'][0]:>9.1f}")
    if not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        print("logs kept in", tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
