"""An OOM that the run caught and went on after is not why the job ended.

Batch-size finders and trainers that skip a batch log the OOM and keep training; the
report must not blame memory for a job that died of something else, or finished. Progress
lines alone do not prove it: stdout buffered in a pipe reaches the log after an
unbuffered traceback, and other ranks' bars tick on for a moment after one rank's OOM.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from oomdoctor.kb.knowledge import default_knowledge
from oomdoctor.pipeline import diagnose_source

OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity of "
       "79.15 GiB of which 2.91 GiB is free. Including non-PyTorch memory, this process has 76.23 GiB memory in use. "
       "Of the allocated memory 73.10 GiB is allocated by PyTorch, and 1.62 GiB is reserved by PyTorch but "
       "unallocated. If reserved but unallocated memory is large try setting "
       "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
       "Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")

CAUGHT_THEN_OTHER_ERROR = f"""\
***** Running training *****
  Instantaneous batch size per device = 64
  0%|          | 0/782 [00:00<?, ?it/s]
Traceback (most recent call last):
  File "/home/user/train.py", line 88, in train_step
    loss.backward()
{OOM}
WARNING: out of memory at batch size 64, retrying with batch size 32
***** Running training *****
  Instantaneous batch size per device = 32
{{'loss': 1.9021, 'grad_norm': 2.118, 'learning_rate': 4.9e-05, 'epoch': 0.06}}
{{'loss': 1.6114, 'grad_norm': 1.873, 'learning_rate': 4.8e-05, 'epoch': 0.13}}
 13%|█▎        | 200/1563 [05:02<34:20,  1.51s/it]
Traceback (most recent call last):
  File "/home/user/train.py", line 140, in <module>
    trainer.train()
  File "/home/user/train.py", line 98, in compute_metrics
    result = metric.compute(predictions=preds, references=labels)
ValueError: Predictions and/or references don't match the expected format.
"""

SKIPPED_BATCH_THEN_DONE = "\n".join(
    [f"epoch 001:  {s * 100} / 5000 loss=7.{s} ppl=150 wps=3000 num_updates={s * 100}" for s in range(1, 4)]
    + [f"| WARNING: ran out of memory with exception: {OOM}", "| WARNING: attempting to recover from OOM, skipping batch"]
    + [f"epoch 001:  {s * 100} / 5000 loss=6.{s} ppl=120 wps=3000 num_updates={s * 100}" for s in range(4, 9)]
    + ["{'train_runtime': 1800.0, 'train_samples_per_second': 12.1, 'epoch': 1.0}"]) + "\n"

# A real OOM whose earlier loss lines, buffered on stdout, were flushed after the traceback.
BUFFERED_STDOUT = f"""\
***** Running training *****
Traceback (most recent call last):
  File "/home/user/train.py", line 88, in train_step
    loss.backward()
{OOM}
{{'loss': 2.3110, 'learning_rate': 5e-05, 'epoch': 0.01}}
{{'loss': 2.2874, 'learning_rate': 5e-05, 'epoch': 0.02}}
"""

# rank 3 runs out of memory; the other ranks' bars tick once more, then the job is torn down
OTHER_RANKS_TICK = f"""\
[rank0]:  10%|█         | 100/1000 [05:00<45:00,  3.00s/it]
[rank3]: Traceback (most recent call last):
[rank3]:   File "/home/user/train.py", line 88, in train_step
[rank3]:     loss.backward()
[rank3]: {OOM}
[rank0]:  10%|█         | 101/1000 [05:03<45:00,  3.00s/it]
[rank1]:  10%|█         | 101/1000 [05:03<45:00,  3.00s/it]
[rank2]:  10%|█         | 101/1000 [05:03<45:00,  3.00s/it]
E0325 20:57:27.620000 2606 api.py:869] failed (exitcode: 1) local_rank: 3 (pid: 2630) of binary: /usr/bin/python
"""


def report(text: str):
    return diagnose_source(text.encode(), knowledge=default_knowledge())


def test_caught_oom_then_another_error_is_not_an_oom_failure():
    rep = report(CAUGHT_THEN_OTHER_ERROR)
    assert [e.survived for e in rep.oom_events] == [True]
    assert not any(d.memory_failure for d in rep.diagnoses)
    assert not rep.found_oom
    # the job died of the ValueError, and that is the failure reported
    primary = [f for f in rep.failures if not f.secondary]
    assert primary and primary[0].message.startswith("ValueError")


def test_skipped_batch_and_finished_run_is_not_a_failure():
    rep = report(SKIPPED_BATCH_THEN_DONE)
    assert [e.survived for e in rep.oom_events] == [True]
    assert rep.diagnoses == [] and not rep.found_anything


def test_buffered_loss_lines_after_the_traceback_do_not_hide_the_oom():
    rep = report(BUFFERED_STDOUT)
    assert [e.survived for e in rep.oom_events] == [False]
    assert rep.diagnoses and rep.diagnoses[0].memory_failure


def test_other_ranks_bars_after_one_ranks_oom_do_not_hide_it():
    rep = report(OTHER_RANKS_TICK)
    assert [e.survived for e in rep.oom_events] == [False]
    assert rep.diagnoses and rep.diagnoses[0].memory_failure


def test_cli_says_the_oom_was_survived_and_exits_0(tmp_path):
    log = tmp_path / "job.log"
    log.write_text(SKIPPED_BATCH_THEN_DONE)
    text = subprocess.run([sys.executable, "-m", "oomdoctor", "diagnose", str(log)], capture_output=True, text=True)
    assert text.returncode == 0, text.stderr
    assert "survived" in text.stdout.splitlines()[0] and "was caught" in text.stdout
    js = subprocess.run([sys.executable, "-m", "oomdoctor", "diagnose", "--format", "json", str(log)],
                        capture_output=True, text=True)
    assert json.loads(js.stdout)["oom_events"][0]["survived"] is True


# The exception reached the top of the script: that process ended, whatever its buffered
# stdout (losses, the end-of-training summary) printed after the traceback.
EVAL_OOM_THEN_BUFFERED_SUMMARY = f"""\
***** Running Evaluation *****
Traceback (most recent call last):
  File "/home/user/run_clm.py", line 640, in <module>
    main()
  File "/home/user/run_clm.py", line 610, in main
    metrics = trainer.evaluate()
{OOM}
{{'loss': 2.3110, 'learning_rate': 5e-05, 'epoch': 0.98}}
{{'loss': 2.2874, 'learning_rate': 5e-05, 'epoch': 0.99}}
{{'train_runtime': 1800.0, 'train_samples_per_second': 12.1, 'epoch': 1.0}}
"""


def test_an_oom_that_reached_the_top_of_the_script_was_not_survived():
    rep = report(EVAL_OOM_THEN_BUFFERED_SUMMARY)
    assert [e.survived for e in rep.oom_events] == [False]
    assert rep.diagnoses and rep.diagnoses[0].memory_failure


def _rank_oom_then(knock_on: str) -> str:
    return (f"[rank3]: Traceback (most recent call last):\n[rank3]:   File \"/home/user/train.py\", line 88, in step\n"
            f"[rank3]:     loss.backward()\n[rank3]: {OOM}\n"
            "[rank0]: {'loss': 1.9021, 'epoch': 0.06}\n[rank0]: {'loss': 1.8114, 'epoch': 0.07}\n"
            f"[rank0]: Traceback (most recent call last):\n[rank0]:   File \"/home/user/train.py\", line 90, in step\n"
            f"[rank0]:     dist.all_reduce(t)\n[rank0]: {knock_on}\n")


@pytest.mark.parametrize("knock_on", [
    "KeyboardInterrupt",
    "torch.distributed.elastic.multiprocessing.api.SignalException: Process 4121 got signal: 15",
    "torch.distributed.DistStoreError: Timed out after 1801 seconds waiting for clients. 7/8 clients joined.",
    "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.3]:51022",
])
def test_other_ranks_knock_on_errors_are_not_a_different_failure(knock_on):
    rep = report(_rank_oom_then(knock_on))
    assert [e.survived for e in rep.oom_events] == [False]
    assert rep.found_oom


def test_a_memory_summary_between_the_caught_oom_and_the_recovery_message():
    summary = "\n".join(["|===========================================================================|",
                         "|                  PyTorch CUDA memory summary, device ID 0                 |"]
                        + [f"| Allocated memory      |  {70 + k}.1 GiB |  75.0 GiB |  10.2 TiB |  10.1 TiB |"
                           for k in range(9)])
    text = SKIPPED_BATCH_THEN_DONE.replace("| WARNING: attempting", summary + "\n| WARNING: attempting")
    assert [e.survived for e in report(text).oom_events] == [True]


def test_json_progress_lines_count_as_going_on():
    text = "\n".join(line.replace("loss=", '{"loss": "').replace(" ppl=", '", "ppl": "') + '"}'
                     if line.startswith("epoch 001") else line
                     for line in SKIPPED_BATCH_THEN_DONE.splitlines()) + "\n"
    assert '"loss": "6.4' in text
    assert [e.survived for e in report(text).oom_events] == [True]
