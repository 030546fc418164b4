#!/usr/bin/env python3
"""Benchmark: `oomdoctor diagnose` on a 1 MB and a 100 MB training log.

Reports wall time and peak RSS of each run, side by side with baselines measured in the
same run on the same file (`grep -c` for the OOM pattern, and a plain Python pass that
reads every line), as ratios. Not a test: numbers depend on the machine.

    python bench/bench_parse.py [--sizes 1,100] [--repeat 3] [--keep]
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


def run(cmd: list[str]) -> tuple[float, int, int]:
    """(wall seconds, peak RSS in KiB, exit code) of one command in a fresh child."""
    probe = ("import resource, subprocess, sys, time, json;"
             "t = time.perf_counter(); p = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL);"
             "print(json.dumps([time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, p.returncode]))")
    out = subprocess.run([sys.executable, "-c", probe, *cmd], capture_output=True, text=True, check=True).stdout
    wall, rss, rc = json.loads(out)
    return wall, rss, rc


def best(cmd: list[str], repeat: int) -> tuple[float, int, int]:
    runs = [run(cmd) for _ in range(repeat)]
    return min(r[0] for r in runs), max(r[1] for r in runs), runs[0][2]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1,100", help="log sizes in MB")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", action="store_true", help="keep the generated logs")
    args = ap.parse_args()
    oomdoctor = shutil.which("oomdoctor") or os.path.join(os.path.dirname(sys.executable), "oomdoctor")
    tmp = tempfile.mkdtemp(prefix="oomdoctor-bench-")
    readlines = "import sys\nn = 0\nfor line in open(sys.argv[1], 'rb'):\n    n += 1\nprint(n)"
    print(f"{'size':>6} {'oomdoctor s':>12} {'RSS MB':>7} {'grep -c s':>10} {'py-read s':>10} {'÷grep':>7} {'÷py-read':>9}")
    for mb in (float(s) for s in args.sizes.split(",")):
        path = os.path.join(tmp, f"train-{mb:g}MB.log")
        make_log(path, int(mb * 2**20))
        ours = best([oomdoctor, "diagnose", "--format", "json", path], args.repeat)
        grep = best(["grep", "-c", "out of memory", path], args.repeat)
        pyread = best([sys.executable, "-c", readlines, path], args.repeat)
        print(f"{mb:>4g}MB {ours[0]:>12.3f} {ours[1] / 1024:>7.1f} {grep[0]:>10.3f} {pyread[0]:>10.3f} "
              f"{ours[0] / grep[0]:>7.1f} {ours[0] / pyread[0]:>9.1f}")
    if not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        print("logs kept in", tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
