"""`diagnose a.log b.log` of two different jobs says so (a note in the report, a warning on
stderr), and `--per-file` gives one report for each file."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from oomdoctor.facts.models import Environment
from oomdoctor.pipeline import UNRELATED_NOTE, diagnose_many, job_differences

FIXTURES = Path(__file__).parent / "fixtures" / "logs"
ZERO3 = FIXTURES / "example-zero3-save.log"          # LLaMA-Factory, DeepSeek-V2, ZeRO-3, world size 8
AXOLOTL = FIXTURES / "env-axolotl.log"               # axolotl, Mistral-7B, ZeRO-2
OOM_LINE = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
            "79.15 GiB of which 1.00 GiB is free. Including non-PyTorch memory, this process has 78.14 GiB memory in use. "
            "Of the allocated memory 70.00 GiB is allocated by PyTorch, and 7.50 GiB is reserved by PyTorch but unallocated.")


def oomdoctor(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "oomdoctor", *args], capture_output=True, timeout=120,
                          env={**os.environ, "NO_COLOR": "1"})


def test_two_jobs_get_a_note_in_json_and_a_warning_in_text():
    p = oomdoctor("diagnose", "-f", "json", str(ZERO3), str(AXOLOTL))
    assert p.returncode == 1
    notes = json.loads(p.stdout)["notes"]
    note = next(n for n in notes if n.startswith(UNRELATED_NOTE))
    assert "llamafactory vs axolotl" in note and "--per-file" in note
    t = oomdoctor("diagnose", str(ZERO3), str(AXOLOTL))
    assert t.returncode == 1
    err = t.stderr.decode()
    assert "warning: " + UNRELATED_NOTE in err and len(err.strip().splitlines()) == 1
    v = oomdoctor("diagnose", "-v", str(ZERO3), str(AXOLOTL))
    assert UNRELATED_NOTE in v.stdout.decode()      # the full report lists it under Notes


def test_files_of_one_job_get_no_warning(tmp_path: Path):
    a, b = tmp_path / "rank0.log", tmp_path / "rank1.log"
    a.write_text("[INFO] [Rank 0] DeepSpeed info: version=0.14.1, git-hash=unknown, git-branch=unknown\n"
                 "torch 2.3.1+cu121, world_size=8\n")
    b.write_text("[rank1]: " + OOM_LINE + "\n")
    report = diagnose_many([str(a), str(b)])
    assert not [n for n in report.notes if n.startswith(UNRELATED_NOTE)]
    p = oomdoctor("diagnose", str(a), str(b))
    assert p.returncode == 1 and UNRELATED_NOTE not in p.stderr.decode()
    # one file diagnosed on its own never gets the note
    assert not [n for n in diagnose_many([str(ZERO3)]).notes if n.startswith(UNRELATED_NOTE)]


def test_what_counts_as_different_jobs_is_conservative():
    same = job_differences(Environment(model_name="meta-llama/Llama-2-7b-hf", torch_version="2.1.2+cu121",
                                       framework="llamafactory", world_size=8),
                           Environment(model_name="/models/Llama-2-7b-hf/", torch_version="2.1",
                                       framework="deepspeed", gpu_name=None))
    assert same == []     # a hub id and its local copy; 2.1 and 2.1.2; a trainer and the layer below it
    assert job_differences(Environment(world_size=8), Environment(world_size=16)) == ["world size: 8 vs 16"]
    assert job_differences(Environment(framework="axolotl"), Environment(framework="trl")) == \
        ["framework: axolotl vs trl"]
    assert job_differences(Environment(torch_version="2.1.0"), Environment(torch_version="2.3.0")) == \
        ["torch: 2.1.0 vs 2.3.0"]
    assert job_differences(Environment(), Environment(world_size=4, model_name="x")) == []


def test_per_file_text_has_a_heading_for_each_file_in_order():
    p = oomdoctor("diagnose", "--per-file", str(ZERO3), str(AXOLOTL))
    assert p.returncode == 1            # one of them failed
    out = p.stdout.decode()
    heads = [line for line in out.splitlines() if line.startswith("==> ")]
    assert heads == [f"==> {ZERO3} <==", f"==> {AXOLOTL} <=="]
    assert UNRELATED_NOTE not in p.stderr.decode()
    first, second = out.split(f"==> {AXOLOTL} <==")
    assert "ckpt-save-gather" in first or "checkpoint" in first
    assert "ckpt-save-gather" not in second


def test_per_file_json_is_a_list_of_reports_and_markdown_has_headings():
    p = oomdoctor("diagnose", "--per-file", "-f", "json", str(ZERO3), str(AXOLOTL))
    assert p.returncode == 1
    reports = json.loads(p.stdout)
    assert [r["source"] for r in reports] == [str(ZERO3), str(AXOLOTL)]
    assert reports[0]["diagnoses"][0]["incident"] == "ckpt-save-gather"
    single = json.loads(oomdoctor("diagnose", "-f", "json", str(ZERO3)).stdout)
    assert reports[0]["diagnoses"] == single["diagnoses"]
    md = oomdoctor("diagnose", "--per-file", "-f", "markdown", str(ZERO3), str(AXOLOTL)).stdout.decode()
    assert [line for line in md.splitlines() if line.startswith("# /")] == [f"# {ZERO3}", f"# {AXOLOTL}"]


def test_per_file_exit_code_is_0_when_no_file_failed_and_html_is_refused(tmp_path: Path):
    clean = tmp_path / "clean.log"
    clean.write_text("step 1 loss 0.5\nstep 2 loss 0.4\n")
    p = oomdoctor("diagnose", "--per-file", "-f", "json", str(clean), str(clean))
    assert p.returncode == 0 and len(json.loads(p.stdout)) == 2
    h = oomdoctor("diagnose", "--per-file", "-f", "html", str(ZERO3), str(AXOLOTL))
    assert h.returncode == 2 and "--per-file" in h.stderr.decode() and "Traceback" not in h.stderr.decode()
    missing = oomdoctor("diagnose", "--per-file", str(ZERO3), str(tmp_path / "nope.log"))
    assert missing.returncode == 2 and "no such file" in missing.stderr.decode()
