"""`oomdoctor scan` and `oomdoctor diagnose` give the same verdict on the same log.

A scan parses only the logs that hold an anchor (``read/prefilter.py``) and of those only
regions; diagnose reads a small log whole. They agree when every line a parser family
flags holds an anchor (or lies in an anchor's window), which is checked three ways:

* over every fixture and corpus log: the same verdict (failed or not) and the same top
  incident;
* structurally: every trigger literal of the failure families, and every literal their
  flagging patterns require, holds an anchor (so "no anchor" never means "clean" for a log
  the parsers would flag); the phase markers are kept by region mode;
* over generated training logs (hypothesis) with a failure at a random place.
"""
from __future__ import annotations

import gzip
import random
import re
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import oomdoctor
from oomdoctor.parsers import accelerators, host, lookalikes, phase, runtime, torch_alloc
from oomdoctor.pipeline import diagnose_source
from oomdoctor.read import prefilter
from oomdoctor.scan import records

if sys.version_info >= (3, 11):
    from re import _constants as C
    from re import _parser as sre
else:  # pragma: no cover
    import sre_constants as C  # type: ignore[no-redef]
    import sre_parse as sre  # type: ignore[no-redef]

REPO = Path(__file__).resolve().parent.parent
LOGS = (sorted((REPO / "tests" / "fixtures" / "logs").glob("*.log"))
        + sorted((REPO / "tests" / "fixtures" / "real").glob("*.log"))
        + sorted((REPO.parent / "shared" / "corpus" / "cases").glob("*.log")))


def verdict(rec: dict) -> tuple[bool, object]:
    """Failed or not (the exit code's test, on either side's JSON), and the top incident."""
    diags = rec.get("diagnoses") or []
    return records.is_failure(rec), (diags[0]["incident"] if diags else None)


def diagnosed(path: Path) -> dict:
    return diagnose_source(str(path)).model_dump(mode="json")


# -- every fixture and corpus log ------------------------------------------------------------

@pytest.fixture(scope="module")
def scanned() -> dict[str, dict]:
    return {rec["path"]: rec for rec in oomdoctor.scan([str(p) for p in LOGS], jobs=1)}


def test_there_are_logs_to_compare():
    assert len(LOGS) > 300


@pytest.mark.parametrize("path", LOGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_scan_and_diagnose_agree_on_every_fixture_log(path: Path, scanned: dict):
    rec = scanned[str(path)]
    assert not rec.get("error"), rec.get("error")
    assert verdict(rec) == verdict(diagnosed(path))


# -- the anchors cover what the parsers flag -------------------------------------------------

ANCHORS = prefilter.Matcher(prefilter.ANCHOR_LITERALS, engine="trie")
MARKERS = prefilter.Matcher(prefilter.MARKER_LITERALS, engine="trie")


def anchored(text: str, matcher: prefilter.Matcher = ANCHORS) -> bool:
    return matcher.search(text.encode())


# Trigger literals that gate a family's patterns but are far broader than any line the
# family flags: as anchors they would put a window on most lines of every log. For these
# the family's patterns are checked instead (below), and here, the messages they gate.
BROAD = {
    "cuDNN": ["RuntimeError: cuDNN error: CUDNN_STATUS_INTERNAL_ERROR",
              "RuntimeError: Unable to find a valid cuDNN algorithm to run convolution"],
    "1EB": ["RuntimeError: Trying to create tensor with negative dimension. Tried to allocate more than 1EB memory."],
    "ECC": ["RuntimeError: CUDA error: uncorrectable ECC error encountered"],
    "Timeout": ["[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, "
                "Timeout(ms)=1800000) ran for 1800512 milliseconds before timing out."],
    "timing out": ["Watchdog caught collective operation timeout: ran for 1800512 milliseconds before timing out."],
    "timed out": ["Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels"],
    "-15": ["failed (exitcode: -15) local_rank: 0 (pid: 4312)", "  exitcode  : -15 (pid: 4312)"],
    "-11": ["failed (exitcode: -11) local_rank: 0 (pid: 4312)", "Process 4312 exits with return code = -11"],
    "nan": ["{'loss': nan, 'grad_norm': nan, 'learning_rate': 2e-05, 'epoch': 0.3}", "Epoch 1: loss=nan",
            "Loss is nan, stopping training", "step 120 loss nan",
            '{"epoch": 73, "train_loss": "nan", "train_ntokens": "15558.8"}', "{'loss': 'nan'}"],
    "NaN": ["train_loss: NaN", "loss=NaN", "NaN loss detected"],
    "bf16": ["ValueError: Your setup doesn't support bf16/gpu. You need torch>=1.10, using Ampere GPU with cuda>=11.0",
             "ValueError: bf16 mixed precision requires PyTorch >= 1.10 and a supported device."],
    "BF16": ["Current device does not support BF16"],
    "bfloat16": ["bfloat16 is not supported on this GPU"],
    "FlashAttention": ["RuntimeError: FlashAttention only supports Ampere GPUs or newer."],
    "flash_attn": ["flash_attn requires compute capability >= 8.0"],
    "flash-attn": ["flash-attn only supports Ampere GPUs or newer"],
    "flash attn": ["flash attn requires an Ampere GPU"],
    "tf32": ["ValueError: --tf32 requires Ampere or a newer GPU arch, cuda>=11 and torch>=1.7"],
    # (runtime's pattern needs "could not / cannot / can't / unable to / failed to" before it)
    "allocate memory": ["Uncaught exception: Could not allocate memory: gpu_memory.h:112 cudaMalloc(&rawptr, n) failed",
                        "Cannot allocate memory for the buffer: cudaMalloc failed", "Unable to allocate memory: cuMemAlloc failed",
                        "failed to allocate memory (cudaMalloc returned 2)", "can't allocate memory: hipMalloc failed"],
}

TRIGGERS = {
    "torch_alloc._QUICK": torch_alloc._QUICK,
    "runtime._QUICK": runtime._QUICK,
    "lookalikes._RULES": tuple(lit for _kind, lits, _rx in lookalikes._RULES for lit in lits),
}


@pytest.mark.parametrize("family", sorted(TRIGGERS))
def test_trigger_literals_hold_an_anchor(family: str):
    missing = [lit for lit in TRIGGERS[family] if not anchored(lit) and lit not in BROAD]
    assert not missing, f"{family}: add an anchor inside each of {missing} to prefilter.ANCHOR_LITERALS"


@pytest.mark.parametrize("literal", sorted(BROAD))
def test_messages_behind_broad_trigger_literals_hold_an_anchor(literal: str):
    for message in BROAD[literal]:
        assert literal in message
        assert anchored(message), message


def test_host_trigger_literals_are_broad_words():
    # host._QUICK gates by words ("rank", "memory", "exit", "Error") that most lines of a
    # training log hold; its patterns are checked one by one below instead
    assert {"rank", "memory", "exit"} <= set(host._QUICK)


# What every match of a pattern must hold, read from its syntax tree: a pattern is covered
# when every match holds an anchor. Groups are read in line; small character classes,
# alternations and optional parts are expanded into the strings they allow.
MAX_VARIANTS = 64
_REPEATS = tuple(getattr(C, n) for n in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT") if hasattr(C, n))


def _strings(items) -> list[str] | None:
    """All strings a short literal-only sequence can match, or None."""
    out = [""]
    for op, av in items:
        if op is C.LITERAL:
            alts = [chr(av)]
        elif op is C.AT:
            continue
        elif op is C.IN and all(o is C.LITERAL for o, _ in av) and len(av) <= 4:
            alts = [chr(v) for _, v in av]
        elif op is C.SUBPATTERN:
            got = _strings(av[3])
            if got is None:
                return None
            alts = got
        elif op is C.BRANCH:
            alts = []
            for b in av[1]:
                got = _strings(b)
                if got is None:
                    return None
                alts += got
        elif op in _REPEATS and av[1] == 1:
            got = _strings(av[2])
            if got is None:
                return None
            alts = got + ([""] if av[0] == 0 else [])
        elif op in _REPEATS and av[0] == av[1] <= 8:       # "\*{5}"
            got = _strings(av[2])
            if got is None or len(got) != 1:
                return None
            alts = [got[0] * av[0]]
        else:
            return None
        out = [a + b for a in out for b in alts]
        if len(out) > MAX_VARIANTS:
            return None
    return out


def _flat(items) -> list:
    out = []
    for op, av in items:
        if op is C.SUBPATTERN and not (av[1] or av[2]):
            out += _flat(av[3])          # a group matches its items in line
        else:
            out.append((op, av))
    return out


def covered(items, matcher: prefilter.Matcher = ANCHORS) -> bool:
    """Does every match of this parsed sequence hold one of the matcher's literals?"""
    items = _flat(list(items))
    for k, (op, av) in enumerate(items):
        if op in _REPEATS and av[:2] == (0, 1) and _strings([(op, av)]) is None:
            # an optional part: the matches without it, and those with it
            return (covered(items[:k] + items[k + 1:], matcher)
                    and covered(items[:k] + list(av[2]) + items[k + 1:], matcher))
    span: list = []

    def span_covered() -> bool:
        got = _strings(span)
        return bool(got) and all(anchored(s, matcher) for s in got)

    for op, av in items:
        if _strings([(op, av)]) is not None:
            span.append((op, av))
            continue
        if span_covered():
            return True
        span = []
        if op is C.BRANCH and all(covered(b, matcher) for b in av[1]):
            return True
        if op in _REPEATS and av[0] >= 1 and covered(av[2], matcher):
            return True
    return span_covered()


def pattern_covered(rx, matcher: prefilter.Matcher = ANCHORS) -> bool:
    return covered(sre.parse(rx.pattern), matcher)


# Patterns of the failure families that flag nothing themselves: they read details off a
# line already found (sizes, hints, frames, the rest of a message), or they are checked
# through the messages they match, as libraries print them.
DETAIL = {
    # _ASYNC_ROW reads the table below the cudaMallocAsync message (its "out of memory" is the anchor)
    # _OOM_MESSAGE only tells which lines hold a message beside an exception named alone;
    # _WRAP_PAD takes a terminal's padding out of a message already found
    # _SENTENCE tells which indented lines continue a message already found
    "torch_alloc": {"_STOP", "_END", "_GOES_ON", "_HINT_VAR", "_SIZE_PARTS", "_ASYNC_ROW", "_OOM_MESSAGE", "_WRAP_PAD", "_SENTENCE"},
    # _CANN_DEVICE and _CANN_SIZE read the lines of the Ascend runtime's report under its EL0004 line;
    # _FAILURE_WORD qualifies a line that names a CUDA call and "out of memory" (the anchor)
    # _TRT_SIZE reads the request on the warning beside TensorRT's error (the anchor); _GGML_WHERE the
    # device under ggml's "CUDA error: out of memory"; _ORT_NOT_USED and _ORT_CPU_ONLY say which
    # provider an ONNX Runtime arena served; _JITTOR_TOTALS the totals under Jittor's check,
    # _MINDSPORE_SIZE the size on MindSpore's line, _GGML_ALLOCATING the size on ggml's cudaMalloc
    # line (its "out of memory" is the anchor), _TRTLLM_TOTAL and _TRTLLM_FREE the figures under
    # TensorRT-LLM's executor error (their messages are the anchors); _QUOTED_ADVICE only rules out
    # advice that quotes those frameworks' messages; _ERROR_WORD qualifies the line above a CUDA
    # check's "out of memory cudaMalloc(...)" (the anchor); _XGB_FIGURE the figures under XGBoost's
    # allocation error, _CUDA_JL_USAGE and _CUDA_JL_POOL those under CUDA.jl's (their messages are
    # the anchors), _CUPY_HELD_REST the rest of CuPy's message on the line a console wrapped it to,
    # _MLC_PART and _MLC_END the sizes MLC LLM's check sums and its end (its message is the anchor);
    # _PADDLE_LEGACY_TOTAL the device's size under Paddle 1.x's legacy allocator refusal (the anchor)
    # _PINNED_NOT_MEMORY reads the reason ggml gives for a refused pinned buffer (its message is the
    # anchor); _PINNING_CODE the frame's code (past its CARET line, traceback's pattern) above a "CUDA error: invalid argument" (the anchor)
    "runtime": {"_SIZE_PARTS", "_SUFFIX", "_WHEN_CALLING", "_NCCL_DEV", "_BNB_FRAME", "_NEURON", "_LIBRARY_SOURCE",
                "_PYTORCH_SOURCE", "_LIBRARY_SOURCE_BEFORE", "_LIBRARY_SOURCE_BARE", "_CANN_DEVICE", "_CANN_SIZE", "_FAILURE_WORD", "_TRT_SIZE", "_GGML_WHERE",
                "_ORT_NOT_USED", "_ORT_CPU_ONLY", "_JITTOR_TOTALS", "_MINDSPORE_SIZE", "_GGML_ALLOCATING",
                "_TRTLLM_TOTAL", "_TRTLLM_FREE", "_QUOTED_ADVICE", "_ERROR_WORD", "_XGB_FIGURE", "_CUDA_JL_USAGE",
                "_CUDA_JL_POOL", "_CUPY_HELD_REST", "_MLC_PART", "_MLC_END", "_PADDLE_LEGACY_TOTAL",
                "_PINNED_NOT_MEMORY", "_PINNING_CODE", "CARET"},
    # _NODE_DEVICE reads the node TensorFlow prints under its OOM line (the anchor), _HBM_CAPACITY
    # the table a TPU reservation failure prints under its line; _DISK_FULL only rules out a hint;
    # _XLA_ASYNC_FREE and _XLA_ASYNC_IN_USE the figures under the async allocator's failure;
    # _BFC_LIMIT the BFC allocator's limit in the statistics above its error (the anchor); _GGML_METAL_OVER
    # ggml's over-the-working-set warning above its Metal command buffer's failure (the anchor)
    # _BFC_STATS_LIMIT and _BFC_STATS_IN_USE the rows above the allocator statistics' MaxInUse row (the anchor)
    "accelerators": {"_SIZE_PARTS", "_MPS_HINT", "_XLA_USED", "_XLA_MEMORYISH", "_BUFFER_ASSIGNMENT", "_BUFFER_TOTAL",
                     "_TF_HINT", "_DEVICE_IN_NAME", "_NODE_DEVICE", "_HBM_CAPACITY", "_DISK_FULL", "_XLA_ASYNC_FREE",
                     "_XLA_ASYNC_IN_USE", "_BFC_LIMIT", "_GGML_METAL_OVER", "_BFC_STATS_LIMIT", "_BFC_STATS_IN_USE"},
    # _WRAPPED_CUDA_FAULT only rules out a MemoryError (the anchor) that wraps a CUDA fault;
    # _K_REAPER follows the kernel's "Killed process" line; _CFE_* are parts of torchrun's
    # failure summary, printed with its "ChildFailedError" and "exitcode" lines; _SHM_PATH
    # qualifies a "No space left on device" line; _ENOMEM_SIZE reads the size of an ENOMEM line,
    # _ARROW_SIZE the size in an ArrowMemoryError's message; _GO_TIMEOUT only rules out a
    # "signal: killed" line (its anchor is " killed"); _PADDLE_CPU_SIZE reads the size under Paddle
    # 1.x's posix_memalign enforce (the anchor)
    "host": {"_WRAPPED_CUDA_FAULT", "_K_REAPER", "_CFE_TITLE", "_CFE_SECTION", "_CFE_RANK", "_CFE_TIME", "_SHM_PATH", "_ENOMEM_SIZE", "_ARROW_SIZE",
             "_GO_TIMEOUT", "_PADDLE_CPU_SIZE"},
}
# \s* between words (a message a terminal wrapped) or numbers in the middle: checked by
# the messages the libraries print
BY_EXAMPLE = {
    ("torch_alloc", "ANCHOR"): ["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has",
                                "CUDA out of memory.Tried to allocate 20.00 MiB"],
    ("torch_alloc", "_CUT"): ["RuntimeError: CUDA out of memory. Tried", "torch.cuda.OutOfMemoryError: CUDA out of memory."],
    # (the call's name after "to" is the anchor: "to cudaMalloc", "to hipMalloc", "to cuMemAlloc")
    ("runtime", "_CALL_SIZE_FAILED"): ["details: Failed to cudaMalloc 16000000000 bytes",
                                       "unable to hipMalloc 1,073,741,824 bytes", "FAILED to cuMemAlloc 4096 bytes"],
    ("accelerators", "_MPS_START"): ["RuntimeError: MPS backend out of memory (MPS allocated: 17.75 GB"],
    ("accelerators", "_MPS"): ["MPS backend out of memory (MPS allocated: 1.2 GB, other allocations: 3.4 GB, "
                               "max allowed: 18.13 GB). Tried to allocate 256 MB on private pool."],
    ("host", "_EXIT_STATUS"): ["srun: error: node12: task 0: Exited with exit code 137", "exit code 137", "Exit Code: 137",
                               "exit status 137", "exit status: 137", "exited with code 137",
                               "subprocess.CalledProcessError: Command 'x' returned non-zero exit status 137."],
    # the BFC allocator's dump rows are read on lines whose logger prefix names bfc_allocator.cc
    # (the anchor), or by its own total line
    ("accelerators", "_BFC_DUMP_ROW"): [
        "2018-06-13 08:25:52.813991: I T:\\src\\tensorflow\\core\\common_runtime\\bfc_allocator.cc:665] Chunk at "
        "0000000C0439DD00 of size 983040",
        "I tensorflow/core/common_runtime/bfc_allocator.cc:1049] InUse at 7f2b8e000000 of size 1280 next 1",
        "I tensorflow/core/common_runtime/bfc_allocator.cc:1088] Sum Total of in-use chunks: 10.25GiB"],
    # (its look-behind for a hedge is beyond the coverage check: by the words platforms print)
    ("host", "_PLATFORM_OOM_KILLER"): [
        'The job has been killed by "OOM Killer", please check your job\'s memory usage.',
        "The container was killed by the OOM killer.", "the task was terminated by oom-killer",
        "the pod got killed by oom_killer", "the trials were killed by the OOMKiller"],
    ("lookalikes", "nccl_timeout"): BROAD["Timeout"] + BROAD["timed out"],
    ("lookalikes", "flash_attn_unsupported"): BROAD["FlashAttention"] + BROAD["flash_attn"] + BROAD["flash-attn"]
    + BROAD["flash attn"] + ["FlashAttention is only supported on sm_80 and newer"],
    ("lookalikes", "bf16_unsupported"): BROAD["bf16"] + BROAD["BF16"] + BROAD["bfloat16"]
    + ["Bfloat16 is only supported on GPUs with compute capability of at least 8.0",
       "--bf16 requires an Ampere GPU", "bf16 isn't supported on your GPU"],
    ("lookalikes", "nan_loss"): BROAD["nan"] + BROAD["NaN"],
}

FAMILIES = {"torch_alloc": torch_alloc, "runtime": runtime, "accelerators": accelerators, "host": host}


def family_patterns():
    for fam, mod in FAMILIES.items():
        for name, value in sorted(vars(mod).items()):
            if isinstance(value, re.Pattern) or (hasattr(value, "pattern") and hasattr(value, "search")):
                if name not in DETAIL[fam]:
                    yield fam, name, value
    for kind, _lits, rx in lookalikes._RULES:
        yield "lookalikes", kind, rx
    yield "lookalikes", "_EXCEPTION_LINE", lookalikes._EXCEPTION_LINE
    yield "phase", "process_died", phase.MARKERS["process_died"]


# Patterns read on a log's last line only, which the scan's first pass and region mode look
# at instead of an anchor (``prefilter.ends_interrupted``): their matches, as logs end with them
TAIL_ONLY = {("host", "_INTERRUPT_ECHO"): ["^C", '^C"', "  ^C  ", "`^C`"]}


@pytest.mark.parametrize("fam,name,rx", list(family_patterns()), ids=lambda v: v if isinstance(v, str) else "")
def test_what_the_failure_families_flag_holds_an_anchor(fam: str, name: str, rx):
    if (fam, name) in TAIL_ONLY:
        for text in TAIL_ONLY[(fam, name)]:
            assert rx.search(text), (name, text)
            for end in (b"\n", b"\n\n\n", b"\x1b[0m\x1b[?25h\n", b""):
                assert prefilter.ends_interrupted(prefilter.keep_tail(b"step 3\n", text.encode() + end)), (name, text)
        assert not prefilter.ends_interrupted(prefilter.keep_tail(b"", b"^C\nstep 3\n"))
        return
    examples = BY_EXAMPLE.get((fam, name))
    if examples is not None:
        for text in examples:
            assert rx.search(text), (name, text)
            assert anchored(text), (name, text)
        return
    assert pattern_covered(rx), f"{fam}.{name}: some match of {rx.pattern[:120]!r} holds no anchor"


def test_each_line_of_a_wrapped_allocator_message_holds_an_anchor():
    # a terminal or an issue tracker cut the message; the allocator family joins it again
    for line in ("RuntimeError: CUDA out of", "memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total capacity;"):
        assert anchored(line), line


@pytest.mark.parametrize("line", [
    # lines of healthy runs: DeepSpeed's environment report, wandb's step warning
    "shared memory (/dev/shm) size .... 8.0 GB",
    "wandb: WARNING Step only supports monotonically increasing values, use define_metric to set a custom x axis.",
    # the JVM's garbage collector (a Spark job beside training), a pool restarting its workers
    "2024-01-01T10:00:00.123+0000: [GC (Allocation Failure) [PSYoungGen: 65536K->10720K(76288K)] 65536K->10736K(251392K)",
    "Worker 3 restarted after 12 tasks",
])
def test_lines_every_healthy_run_prints_are_not_anchors(line: str):
    # an anchor in a line that healthy runs print makes a scan parse every such log in full
    assert not anchored(line), line


def test_the_pattern_check_sees_a_missing_anchor():
    assert pattern_covered(re.compile(r"Killed process \d+"))
    assert not pattern_covered(re.compile(r"reaped process \d+"))
    assert not pattern_covered(re.compile(r"exit(?:ed)? with status \d+"))
    assert pattern_covered(re.compile(r"oom[-_ ]kill event"))


@pytest.mark.parametrize("name", sorted(phase.MARKERS))
def test_region_mode_keeps_every_phase_marker(name: str):
    """Phase markers are kept as lines near anchors (the phase is the last marker before a
    failure, parsers/phase.py), in the case the libraries print them; process_died, which
    makes a failure, is an anchor itself."""
    rx = phase.MARKERS[name]
    if name == "process_died":
        assert pattern_covered(rx)
    else:
        assert pattern_covered(rx, MARKERS), f"{name}: add its literals to prefilter.MARKER_LITERALS"


# -- generated logs (hypothesis) --------------------------------------------------------------

OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {req:.2f} GiB. GPU 0 has a total capacity of "
       "79.15 GiB of which 312.00 MiB is free. Including non-PyTorch memory, this process has 78.83 GiB memory in use. "
       "Of the allocated memory 75.10 GiB is allocated by PyTorch, and 2.21 GiB is reserved by PyTorch but unallocated.")
BANNER = ["[2024-05-01 10:00:00,000] [INFO] [real_accelerator.py:191:get_accelerator] Setting ds_accelerator to cuda",
          "torch version: 2.3.1+cu121", "transformers version: 4.41.2", "***** Running training *****",
          "  Num examples = 52,002", "  Num Epochs = 3", "  Instantaneous batch size per device = 8",
          "  Gradient Accumulation steps = 4", "  Total optimization steps = 4,875"]
WARNING = ("/opt/conda/lib/python3.10/site-packages/torch/utils/checkpoint.py:464: UserWarning: torch.utils.checkpoint: "
           "the use_reentrant parameter should be passed explicitly. Exception: none")


def progress(step: int) -> str:
    if step % 10:
        return f" {step * 100 // 5000:>3d}%|██        | {step}/5000 [{step // 60:02d}:{step % 60:02d}<1:00:00,  1.31it/s]"
    return f"{{'loss': {1.5 - step / 10000:.4f}, 'grad_norm': 0.8{step % 97}, 'learning_rate': 2e-05, 'epoch': {step / 1625:.2f}}}"


def failure_lines(kind: str, step: int) -> list[str]:
    if kind == "oom":
        return ["Traceback (most recent call last):",
                '  File "/workspace/train.py", line 212, in <module>', "    trainer.train()",
                '  File "/opt/conda/lib/python3.10/site-packages/transformers/trainer.py", line 1885, in train',
                "    return inner_training_loop(",
                '  File "/opt/conda/lib/python3.10/site-packages/torch/nn/modules/module.py", line 1532, in _call_impl',
                "    return forward_call(*args, **kwargs)",
                OOM.format(req=1 + step % 7)]
    if kind == "host":
        return ["WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 4313 closing signal SIGTERM",
                "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 0 (pid: 4312) "
                "of binary: /opt/conda/bin/python",
                "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
                "train.py FAILED", "Root Cause (first observed failure):", "[0]:",
                "  rank      : 0 (local_rank: 0)", "  exitcode  : -9 (pid: 4312)",
                "  error_file: <N/A>", "  traceback : Signal 9 (SIGKILL) received by PID 4312"]
    return []


def training_log(seed: int, lines: int, kind: str, at: float, ends: bool, warnings: int, saves: int,
                 evals: int = 0) -> str:
    rng = random.Random(seed)
    out = list(BANNER)
    where = int(lines * at)
    warn_at = {rng.randrange(lines) for _ in range(warnings)}
    save_at = {rng.randrange(lines) for _ in range(saves)}
    eval_at = {rng.randrange(lines) for _ in range(evals)}
    for step in range(1, lines + 1):
        if step in warn_at:
            out.append(WARNING)
            out.append("  warnings.warn(")
        if step in save_at:
            out.append(f"Saving model checkpoint to ./out/checkpoint-{step}")
        if step in eval_at:
            out += ["***** Running Evaluation *****", "  Num examples = 500", "  Batch size = 8"]
            out += [f" {k * 16}%|██        | {k}/6 [00:0{k}<00:05,  1.10it/s]" for k in range(1, 6)]
            out.append(f"{{'eval_loss': 1.2{step % 10}, 'eval_runtime': 5.1, 'epoch': {step / 1625:.2f}}}")
        if step == where and kind != "none":
            out += failure_lines(kind, step)
            if ends:
                break
        out.append(progress(step))
    return "\n".join(out) + "\n"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10**6), lines=st.integers(300, 2500), kind=st.sampled_from(["oom", "host", "none"]),
       at=st.floats(0.05, 0.95), ends=st.booleans(), warnings=st.integers(0, 6), saves=st.integers(0, 4),
       evals=st.integers(0, 3), compressed=st.booleans())
def test_scan_and_diagnose_agree_on_generated_logs(tmp_path_factory, seed, lines, kind, at, ends, warnings, saves,
                                                   evals, compressed):
    text = training_log(seed, lines, kind, at, ends, warnings, saves, evals).encode()
    folder = tmp_path_factory.mktemp("gen")
    path = folder / ("job.log.gz" if compressed else "job.log")
    path.write_bytes(gzip.compress(text, mtime=0) if compressed else text)
    rec = list(oomdoctor.scan([str(path)], jobs=1))[0]
    assert not rec.get("error"), rec.get("error")
    diag = diagnosed(path)
    assert verdict(rec) == verdict(diag)
    assert verdict(diag)[0] == (kind != "none")
