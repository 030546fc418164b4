"""Normalisation: decorations stripped, message and line numbers kept."""
from __future__ import annotations

import functools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from oomdoctor.read.normalise import normalise, strip_ansi, strip_prefixes

CASES = [
    # (physical line, expected text, expected rank)
    ("[rank3]: torch.OutOfMemoryError: CUDA out of memory.", "torch.OutOfMemoryError: CUDA out of memory.", 3),
    ("[default1]:[rank1]: Traceback (most recent call last):", "Traceback (most recent call last):", 1),
    ("0: [rank0]:   File \"train.py\", line 3, in <module>", "  File \"train.py\", line 3, in <module>", 0),
    ("12: RuntimeError: boom", "RuntimeError: boom", 12),
    # srun --label before an indented traceback line: the label goes, the indentation stays
    ("22:   File \"train.py\", line 3, in <module>", "  File \"train.py\", line 3, in <module>", 22),
    (" 3:     return self._apply(fn)", "    return self._apply(fn)", 3),
    ("node2: [rank9]: torch.OutOfMemoryError: x", "torch.OutOfMemoryError: x", 9),
    ("worker-1: [2024-01-01 10:00:00,000] [INFO] [launch.py:12:main] dist_world_size=8", "dist_world_size=8", None),
    ("[2024-03-10 00:20:24,052] [INFO] [logging.py:77:log_dist] [Rank 0] DeepSpeed info: version=0.9.2",
     "DeepSpeed info: version=0.9.2", 0),
    ("[INFO|2025-01-01 12:00:00] loader.py:143 >> trainable params: 4,194,304", "trainable params: 4,194,304", None),
    ("[INFO|trainer.py:2134] 2025-01-01 12:00:00,123 >> ***** Running training *****", "***** Running training *****", None),
    ("06/01/2024 12:00:00 - INFO - llamafactory.model.loader - all params: 7B", "all params: 7B", None),
    ("E0325 20:57:27.620000 2606 site-packages/torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -9)",
     "failed (exitcode: -9)", None),
    ("WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 899505 closing signal SIGTERM",
     "Sending process 899505 closing signal SIGTERM", None),
    ("[1,3]<stderr>:RuntimeError: x", "RuntimeError: x", 3),
    ("rank:  3 | 2022-04-03 18:44:26,615 CRITICAL | Traceback (most recent call last):", "Traceback (most recent call last):", 3),
    ("[rank: 3] Child process with PID 11479 terminated with code 1.", "Child process with PID 11479 terminated with code 1.", 3),
    # the logging module's "%(asctime)s - %(name)s - %(levelname)s - %(message)s", and the other order
    ("2022-06-21 20:40:24,602 - speechbrain.core - ERROR - Exception:", "Exception:", None),
    ("2024-06-02 09:14:11,123 - ERROR - __main__ - RuntimeError: x", "RuntimeError: x", None),
    ("[1,mpirank:5,algo-1]<stderr>:  File \"x.py\", line 3, in f", "  File \"x.py\", line 3, in f", 5),
    ("(RayWorker pid=123, ip=10.0.0.1) ERROR: out", "out", None),
    ("(axolotl-hi-spot, pid=21) [rank0]: RuntimeError: x", "RuntimeError: x", 0),
    ("(raylet, ip=10.0.0.1) A worker died or was killed while executing a task", "A worker died or was killed while executing a task", None),
    ("> torch.cuda.OutOfMemoryError: CUDA out of memory.", "torch.cuda.OutOfMemoryError: CUDA out of memory.", None),
    ("[ 7063.247407] Memory cgroup out of memory: Killed process 63214 (python)", "Memory cgroup out of memory: Killed process 63214 (python)", None),
    ("Mar  1 10:00:00 node1 kernel: [2059991.491542] Out of memory: Killed process 25315 (python3)",
     "Out of memory: Killed process 25315 (python3)", None),
    # journald keeps any service's output under the syslog prefix, with the program's name and pid
    ("Apr 17 01:25:09 node1 ollama[56169]: ggml_cuda_init: found 2 CUDA devices:", "ggml_cuda_init: found 2 CUDA devices:", None),
    ("Nov 28 10:00:01 node1 python[1234]:   File \"train.py\", line 3, in <module>", "  File \"train.py\", line 3, in <module>", None),
    # Docker Compose's service prefix (v2 and v1); the message keeps its indentation
    ("trainer-1  | torch.OutOfMemoryError: x", "torch.OutOfMemoryError: x", None),
    ("web_1  |   File \"/usr/lib/python3.6/threading.py\", line 916, in _bootstrap_inner",
     "  File \"/usr/lib/python3.6/threading.py\", line 916, in _bootstrap_inner", None),
    ("chroma_bench-chroma-1  | 2023-09-29 22:17:52 Killed", "Killed", None),
    # kubectl logs --prefix
    ("[pod/train-job-0/pytorch] [rank1]: RuntimeError: x", "RuntimeError: x", 1),
    ("ERROR    | 2024-08-21 22:56:04 | autotrain.trainers.common:wrapper:121 - HIP out of memory.", "HIP out of memory.", None),
    ("[XTuner][2024-01-01 10:00:00][INFO] Start training", "Start training", None),
    ("ERROR [09/26 19:32:28 d2.engine.train_loop]: Exception during training:", "Exception during training:", None),
    ("[06/09 11:05:25 d2.engine.hooks]: Overall training speed: 22 iterations", "Overall training speed: 22 iterations", None),
    # loguru's default format
    ("2024-12-08 18:25:31.748 | WARNING  | data:next_batch:88 - rank 3 waited 41 ms", "rank 3 waited 41 ms", None),
    ("3: 2024-12-08 18:25:31.748 | INFO     | __main__:<module>:12 - epoch 1 | step 5", "epoch 1 | step 5", 3),
    ("2024-05-01T10:00:00.123456Z torch.OutOfMemoryError: x", "torch.OutOfMemoryError: x", None),
    # the CRI format of Kubernetes nodes' container logs: time, stream, full or partial tag
    ("2024-06-02T09:14:11.123456789Z stderr F   File \"a.py\", line 1, in f", "  File \"a.py\", line 1, in f", None),
    ("2024-06-02T09:14:11.123456789Z stdout P [rank2]: step 3", "step 3", 2),
    # TensorFlow / XLA C++ logging
    ("2024-04-03 10:11:40.412113: W external/xla/xla/tsl/framework/bfc_allocator.cc:291] Allocator (GPU_0_bfc) ran",
     "Allocator (GPU_0_bfc) ran", None),
    # vLLM's logger, before and from 0.8, and its multiprocessing executor's worker (a tensor-parallel
    # worker, not a rank of the job)
    ("(VllmWorkerProcess pid=2420) ERROR 10-14 12:32:47 multiproc_worker_utils.py:233]   File \"/a/aria.py\", line 404, in f",
     "  File \"/a/aria.py\", line 404, in f", None),
    ("(VllmWorker rank=1 pid=2420) ERROR 06-01 10:00:00 [multiproc_executor.py:487] torch.OutOfMemoryError: x",
     "torch.OutOfMemoryError: x", None),
    ("INFO 2024-06-01 10:00:00 run.py:12] step 3", "step 3", None),
    # Metaflow's task prefix (after its timestamp) and a run's id
    ("2023-04-29 06:01:12.977 [177/train/578 (pid 28936)] [09c561ee-a44c-4795-967c-7183a83b3160] OSError: x",
     "OSError: x", None),
    # rich's logging handler: time, level padded to eight, the path column at the row's end
    ("[03/17/23 20:03:12] ERROR    torch.OutOfMemoryError: CUDA out of memory. Tried to     engine.py:12",
     "torch.OutOfMemoryError: CUDA out of memory. Tried to", None),
    ("                    WARNING  colossalai - colossalai - WARNING: x", "colossalai - colossalai - WARNING: x", None),
    ("[20:03:12] INFO     failed in train.py:12", "failed in train.py:12", None),
    ("2025-06-29 11:57:32 INFO     epoch is incremented. current_epoch: 1, epoch: 2        train_util.py:779",
     "epoch is incremented. current_epoch: 1, epoch: 2", None),
    ("    ERROR    y", "    ERROR    y", None),
    ("ERROR  y", "ERROR  y", None),
    ("                    INFO y", "                    INFO y", None),
    # torchrun's rank prefix on a paste's first line, selected one character late
    ("rank0]:   File \"/a/stage_1_and_2.py\", line 1885, in step", "  File \"/a/stage_1_and_2.py\", line 1885, in step", 0),
    ("default3]: torch.OutOfMemoryError: x", "torch.OutOfMemoryError: x", 3),
    # not prefixes: exception names, code, plain text
    ("[1/2/3 done] step", "[1/2/3 done] step", None),
    ("INFO 12 files read", "INFO 12 files read", None),
    ("ERROR 10-14 12:32:47 the job failed", "ERROR 10-14 12:32:47 the job failed", None),
    ("RuntimeError: Expected all tensors to be on the same device", "RuntimeError: Expected all tensors to be on the same device", None),
    ("torch.cuda.OutOfMemoryError: CUDA out of memory.", "torch.cuda.OutOfMemoryError: CUDA out of memory.", None),
    ("    loss.backward()", "    loss.backward()", None),
    # a table's row is not a Compose service ("| " after a name with no number), nor a line that
    # opens with a date other than syslog's
    ("layer  | 0.53 | 0.61", "layer  | 0.53 | 0.61", None),
    ("| epoch_1 | 0.53 |", "| epoch_1 | 0.53 |", None),
]


@pytest.mark.parametrize("raw,text,rank", CASES)
def test_prefixes(raw, text, rank):
    got, got_rank, _host = strip_prefixes(raw)
    assert (got, got_rank) == (text, rank)


def test_json_records_are_read_as_their_message():
    import json
    tb = 'Traceback (most recent call last):\n  File "a.py", line 1, in f\n    x()\nRuntimeError: boom\n'
    docker = "".join(json.dumps({"log": ln + "\n", "stream": "stderr", "time": "2024-06-02T09:14:11Z"}) + "\n"
                     for ln in tb.splitlines())
    lines = normalise(docker.rstrip("\n"))
    assert [ln.text for ln in lines] == tb.splitlines()
    assert [ln.no for ln in lines] == [1, 2, 3, 4]
    # one record holding a whole traceback (a JSON formatter's exc_info): its lines, one number
    lines = normalise('{"level": "error", "msg": ' + json.dumps(tb) + "}")
    assert [ln.text for ln in lines] == tb.splitlines() and {ln.no for ln in lines} == {1}
    assert [ln.text for ln in normalise('{"severity": "ERROR", "textPayload": "[rank1]: RuntimeError: x"}')] == [
        "RuntimeError: x"]
    # a record cut short, and JSON that is no log record, stay as they are
    for text in ('{"log": "RuntimeError: x', '{"train_batch_size": 8, "message_len": 3}', '{"log": 3}'):
        assert [ln.text for ln in normalise(text)] == [text]


def test_ansi_and_escape_remnants():
    assert strip_ansi("\x1b[31mred\x1b[0m and \x1b]0;title\x07x") == "red and x"
    assert strip_ansi("[32m[OKAY][0m") == "[OKAY]"
    assert strip_ansi("[32mdone[m") == "done" and strip_ansi("done [m") == "done "
    # a bracketed file name that starts with "m" is text, not a lost reset sequence
    assert strip_ansi("INFO  [model.py:77] building model") == "INFO  [model.py:77] building model"
    assert strip_ansi("[m.py:3] x [main] y") == "[m.py:3] x [main] y"


def test_carriage_return_bars_and_glued_records_keep_line_numbers():
    text = ("first\n"
            "  0%|          | 0/180 [00:00<?, ?it/s]\r 10%|#         | 18/180 [00:10<01:30, 1.80it/s]Traceback (most recent call last):\n"
            "6:48<1:56:20, 48.14s/it[2024-04-11 11:19:56,682] [INFO] [launch.py:316:sigkill_handler] Killing subprocess 214\n"
            "    ret_val = func(*args, **kwargs)  File \".../stage3.py\", line 2117, in unscale_and_clip_grads\n")
    lines = normalise(text)
    texts = [(ln.no, ln.text) for ln in lines]
    assert (2, "Traceback (most recent call last):") in texts
    assert (3, "Killing subprocess 214") in texts
    assert (4, 'File ".../stage3.py", line 2117, in unscale_and_clip_grads') in texts
    assert [ln.no for ln in lines] == sorted(ln.no for ln in lines)


@pytest.mark.parametrize("raw, text", [
    # full-width forms of ASCII, as a CJK input method leaves them, read as ASCII
    ('  File "run.py", line 762\uff0c in main', '  File "run.py", line 762, in main'),
    ("RuntimeError\uff1aCUDA out of memory.\u3000Tried", "RuntimeError:CUDA out of memory. Tried"),
    # CJK text keeps its own characters; an ASCII line is untouched
    ("\u5df2\u6740\u6b7b", "\u5df2\u6740\u6b7b"),
    ("plain, ascii (text)", "plain, ascii (text)"),
])
def test_full_width_forms_are_read_as_ascii_and_the_raw_line_kept(raw, text):
    line = normalise(raw)[0]
    assert line.text == text and line.raw == raw


def test_indentation_of_traceback_lines_is_kept():
    (ln,) = normalise("[rank0]:     return forward_call(*args, **kwargs)")
    assert ln.text == "    return forward_call(*args, **kwargs)" and ln.rank == 0


# -- the prefix layers: the standard-library loop against the one-call `regex` reading --

def _reference_strip(text: str):
    """The layers as one repeated `regex` alternation (repeated group names, every capture
    kept): what strip_prefixes computes one layer at a time."""
    from oomdoctor.read import normalise as n
    if not n._MAYBE_PREFIX.match(text):
        return text, None, None
    m = _reference().match(text)
    if not m or m.end() == 0:
        return text, None, None
    ranks, hosts = m.captures("rank"), m.captures("host")
    end = len(text)
    if m.captures("column") and (path := n._RICH_PATH.search(text, m.end())):
        end = path.start()
    return text[m.end():end], int(ranks[0]) if ranks else None, next((h for h in hosts if h), None)


@functools.cache
def _reference():
    import regex

    from oomdoctor.read import normalise as n
    alts = ["(?:" + (p.pattern[1:] if p.pattern.startswith("^") else p.pattern) + ")" for p, _k in n._PREFIXES]
    return regex.compile("^(?:" + "|".join(alts) + "){1,12}")


def _fixture_paths():
    from pathlib import Path
    return sorted((Path(__file__).parent / "fixtures").rglob("*.log"))


def _fixture_text(path) -> str:
    # bytes decoded as the reader does: read_text would turn a bare "\r" into a line end
    return path.read_bytes().decode("utf-8", errors="replace")


def _fixture_lines():
    for path in _fixture_paths():
        for line in _fixture_text(path).split("\n"):
            yield line.rstrip("\r")


def test_prefix_layers_read_as_the_layered_reference_on_every_fixture_line():
    lines = list(_fixture_lines())
    assert len(lines) > 5_000
    differ = [ln for ln in lines if strip_prefixes(ln) != _reference_strip(ln)]
    assert differ == []


_LAYERS = ["[rank3]: ", "[default0]:", "node2: ", " 7: ", "[2024-01-01 10:00:00,123] ", "[INFO] ",
           "(RayWorker pid=12, ip=10.0.0.1) ", "> ", "[1,5]<stdout>:", "worker-1: ", "[Rank 4] ",
           "E0325 20:57:27.620000 2606 api.py:869] ", "WARNING:torch.x:", "Mar  1 10:00:00 node9 kernel: ",
           "Apr 17 01:25:09 node1 ollama[56169]: ", "trainer-1  | ", "[pod/train-0/pytorch] ", "[1,mpirank:2,algo-1]<stdout>:"]


@given(st.lists(st.sampled_from(_LAYERS), max_size=14),
       st.sampled_from(["RuntimeError: x", "  File \"a.py\", line 1", "bf16: true", "", "3: 4"]))
def test_prefix_layers_generated(layers, message):
    text = "".join(layers) + message
    assert strip_prefixes(text) == _reference_strip(text)


# -- glue candidates found on the whole text ------------------------------------------------

def _each_line_searched(text: str) -> list:
    """The reference: every physical line searched for glued records on its own."""
    from oomdoctor.read.normalise import normalise_line, restore_lost_case, split_physical
    lines = [ln for no, physical in split_physical(text) for ln in normalise_line(no, physical)]
    return restore_lost_case(lines)


def test_the_whole_text_search_for_glued_records_misses_none_on_any_fixture():
    paths = _fixture_paths()
    assert len(paths) > 800
    for path in paths:
        text = _fixture_text(path)
        assert normalise(text) == _each_line_searched(text), path.name


_GLUE_PIECES = ["it/s]", "s/it]", "Traceback (most recent call last):", '  File "a.py", line 3, in f',
                "[2024-01-01 10:00:00,123] ", "        ", "RuntimeError: ", "Exception: ", "\r", "\x1b[0m", "[0m",
                "**", "\x1f", "\x07", " ", "\t", "x", "[", "100%|███| 3/3 [00:01<00:00, 2.1it/s]", "torch.Error: "]


@given(st.lists(st.lists(st.sampled_from(_GLUE_PIECES), max_size=10).map("".join), min_size=1, max_size=6))
def test_glued_records_found_on_the_whole_text_as_line_by_line(lines):
    text = "\n".join(lines)
    assert normalise(text) == _each_line_searched(text)


def test_syslogs_octal_escapes_of_colours_are_taken_off():
    from oomdoctor.read.normalise import strip_ansi
    assert strip_ansi("#033[2m#033[33m(raylet)#033[0m [DATE] (raylet) node_manager.cc:3007:") == \
        "(raylet) [DATE] (raylet) node_manager.cc:3007:"
    # the escape's shape only: a "#033[" that opens no colour is text
    assert strip_ansi("see #033[1] above") == "see #033[1] above"
