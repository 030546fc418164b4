"""Raw log text → clean logical lines that keep their original line numbers.

Real logs are decorated by every layer that touched them: ANSI colours, log-shipper
timestamps, pdsh host names, srun labels, torchrun ``[default0]:``, PyTorch's
``[rank3]:``, logger headers (DeepSpeed, glog, LLaMA-Factory, axolotl, mmengine, loguru),
markdown ``> `` quoting, carriage-return progress bars glued to the next message. We
strip them outermost first (log-formats.md §6), remember rank and host as metadata,
and leave the message itself untouched (tracebacks keep their indentation).

Hard-wrapped messages are *not* re-joined here: the parsers that need a whole message
(the allocator OOM, the ChildFailedError block) read a window of following lines,
because only they know where their message ends.
"""
from __future__ import annotations

import bisect
import functools
import itertools
import json
import re as stdlib_re
from dataclasses import dataclass, replace
from typing import Iterable, Iterator, Optional

import regex as re

from .patterns import lazy

MAX_LINE = 64 * 1024  # longer physical lines are cut (a 1 GB single line stays bounded)


@dataclass(slots=True)
class Line:
    no: int                 # 1-based line number in the original input
    raw: str                # the physical line, ANSI removed (for evidence)
    text: str               # the message with decorations stripped
    rank: Optional[int] = None
    host: Optional[str] = None


_ANSI = lazy(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
# Escape sequences whose ESC byte was lost in a copy-paste ("[32m", "[0m").
_BARE_SGR = lazy(r"\[\d{1,3}(?:;\d{1,3})*m(?=\S|$)")
# A bare "[m" (reset) is ambiguous: "[model.py:77]" is text. It is taken when a numbered
# remnant sits on the same line ("[32mINFO[m"), or when no word follows it.
_BARE_RESET = lazy(r"\[m(?=[^\w.]|$)")
_ANY_RESET = lazy(r"\[m")
_CONTROL = lazy(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
# Escape sequences in caret notation: a terminal or pager showed ESC as "^[" and the
# user copied that ("^[[31mJob failed^[[39m").
_CARET_SGR = lazy(r"\^\[\[[0-9;?]*[ -/]*[@-~]")
# ... and in syslog's octal escape: rsyslog writes a control character it receives as "#" and
# three octal digits, ESC as "#033" ("#033[2m#033[33m(raylet)#033[0m")
_SYSLOG_SGR = lazy(r"#033\[[0-9;?]*[A-Za-z]")


# markdown bold that a user put around part of a pasted line
_MD_BOLD_OPENS = lazy(r"\*\*(?:[0-9A-Z\[]|(?:[A-Za-z_]\w*\.)+_?[A-Za-z]\w*(?:Error|Exception)\b)")
_MD_BOLD = lazy(r"\*\*(?=\S)([^*\n]{1,300}?)(?<=\S)\*\*")
# one inline-code span around a whole line (not a fence: "```" is never taken)
_MD_CODE = stdlib_re.compile(r"^\s{0,3}`(?!`)([^`\n]{1,20000}?)`\s?$")

# Full-width forms of ASCII (U+FF01-FF5E) and the ideographic space: a line pasted through a
# CJK input method, or retyped by a translation tool, has them where the program printed ASCII
# ("Out of memory:Killed process 217423（python）total-vm:112518872kB，"). The parsers read the
# ASCII; the raw line keeps what was posted.
_FULLWIDTH = stdlib_re.compile("[\uff01-\uff5e\u3000]")
_FOLD_FULLWIDTH = {c: c - 0xFEE0 for c in range(0xFF01, 0xFF5F)} | {0x3000: 0x20}

# (the standard library's engine: tried on each carriage-return segment of a progress bar,
# seven a line in a tqdm log, where it runs in about half the time of ``regex``)
_BAR_ONLY = stdlib_re.compile(r"^[^|\n]{0,120}\d+%\|[^|]*\|\s*[\d.]+[kMG]?/[\d.]+[kMG]?\s*\[[^\]]*\]\s*$|^\s*$")

_LEVEL = r"(?:TRACE|DEBUG|INFO|NOTICE|WARN|WARNING|ERROR|CRITICAL|FATAL|SUCCESS)"
_DATE = r"\d{4}[-/]\d{2}[-/]\d{2}"
_TIME = r"\d{2}:\d{2}:\d{2}(?:[.,]\d+)?"

# Each entry: (pattern, kind). Applied repeatedly at the start of the line, outermost
# first, until none matches. Named groups ``rank``/``host`` are kept as metadata.
_PREFIXES: list[tuple[re.Pattern, str]] = [
    (lazy(r"^\s{0,3}>\s?"), "quote"),
    # ISO / shipper timestamps: "2024-01-01T10:00:00.123Z ", "[2024-01-01 10:00:00,123] "
    (lazy(rf"^\[?{_DATE}[ T]{_TIME}(?:Z|[+-]\d{{2}}:?\d{{2}})?\]?\s?"), "time"),
    # ... and after it the stream and tag of the CRI format, the container log files Kubernetes
    # nodes keep (/var/log/pods): "2024-06-02T09:14:11.123456789Z stderr F " ("P": a partial line)
    (lazy(r"^(?:stdout|stderr) [FP] "), "time"),
    # dmesg "[12345.678901] " and syslog "Mar  1 10:00:00 host kernel: "
    (lazy(r"^\[\s*\d+\.\d+\]\s?"), "time"),
    # (any program's: journald keeps a service's output so, "Apr 17 01:25:09 node1 ollama[56169]: ")
    (lazy(rf"^[A-Z][a-z]{{2}} [ \d]\d {_TIME} (?P<host>\S+) [\w./@-]+(?:\[\d+\])?: (?:\[\s*\d+\.\d+\] )?"), "time"),
    # Docker Compose "trainer-1  | " (v1 "web_1  | "): the service's name padded to the widest,
    # then "| "; what follows keeps its own indentation (a traceback's frames)
    (lazy(r"^(?P<host>[A-Za-z0-9][\w.-]*[-_]\d+) *\| "), "host"),
    # kubectl logs --prefix "[pod/train-0/pytorch] "
    (lazy(r"^\[pod/(?P<host>[\w.-]+)/[\w.-]+\] "), "host"),
    # OpenMPI --tag-output "[1,3]<stdout>:"
    (lazy(r"^\[\d+,(?P<rank>\d+)\]<std(?:out|err)>:\s?"), "rank"),
    # ... as SageMaker's MPI launcher tags it, with the host: "[1,mpirank:5,algo-1]<stderr>:"
    (lazy(r"^\[\d+,mpirank:(?P<rank>\d+),[\w.-]+\]<std(?:out|err)>:"), "rank"),
    # torchrun --tee "[default0]:" (and custom role names), "[rank3]:", "[Rank 3] "
    (lazy(r"^\[(?:[A-Za-z_][\w-]*?)(?P<rank>\d+)\]:\s?"), "rank"),
    (lazy(r"^\[[Rr]ank:? ?(?P<rank>\d+)\]:?\s?"), "rank"),   # (Lightning's "[rank: 3] ")
    # ... and a paste's first line that lost the bracket ("rank0]:   File ...": a selection
    # begun one character late)
    (lazy(r"^(?:rank|default)(?P<rank>\d{1,5})\]:\s?"), "rank"),
    # ParlAI's "rank:  3 | 2022-04-03 18:44:26,615 CRITICAL | " (the rank padded to two places)
    (lazy(r"^rank: {1,3}(?P<rank>\d+) \| "), "rank"),
    # pdsh "node2: " / "worker-1: " (lower-case start and a digit, never an exception name)
    # Host names have no underscores; YAML keys such as "bf16: true" or "stage3_x: 1" are
    # not hosts, and a bare scalar after the colon is a config echo, not a log line.
    (lazy(r"^(?P<host>(?!(?:bf|fp|tf|int|fp8|e\dm\d)\d*:)[a-z][a-z0-9-]*\d[a-z0-9.-]*|[a-z][a-z0-9]*-[a-z0-9.-]+|localhost): "
                r"(?!\s*$|\s*(?:true|false|True|False|null|None|auto|yes|no|-?\d+(?:\.\d+)?(?:e-?\d+)?|\[.*\]|\{.*\})\s*$)"), "host"),
    # srun --label " 3: " (a traceback's indented lines keep their indentation after it)
    (lazy(r"^\s{0,4}(?P<rank>\d{1,5}): (?=\s*\S)"), "rank"),
    # Ray / vLLM workers "(Worker pid=123) ", "(RayWorker pid=1, ip=10.0.0.1) ", vLLM's
    # multiprocessing executor "(VllmWorker rank=0 pid=2420) " (a tensor-parallel worker, not a rank
    # of the job)
    (lazy(r"^\((?:[\w.-]+,? )?(?:rank=\d+ )?pid=\d+(?:, ip=[\d.]+)?\)\s?"), "host"),
    # ... and Ray's own processes: "(raylet) ", "(raylet, ip=10.0.0.1) ", "(gcs_server) "
    (lazy(r"^\((?:raylet|gcs_server|dashboard_agent|log_monitor|monitor)(?:, ip=[\d.]+)?\)\s?"), "host"),
    # Metaflow's task prefix "[177/train/578 (pid 28936)] " (run/step/task, after its timestamp),
    # and a bracketed UUID after it, a run's or a request's id
    (lazy(r"^\[\d+/[\w.-]+/\d+ \(pid \d+\)\]\s?"), "host"),
    (lazy(r"^\[[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\]\s?"), "host"),
    # rich's logging handler (ColossalAI, kohya's scripts, slideflow, ...): its time "[03/17/23
    # 20:03:12] " ("[%x %X]", "[20:03:12] ", or a format of the ones above, already gone),
    # spaces as wide where the time repeats, then the level padded to eight; the path column at
    # the row's right end goes too (see strip_prefixes)
    (lazy(r"^(?P<column>(?:(?:\[\d{2}/\d{2}/\d{2,4} \d{2}:\d{2}:\d{2}\]|\[\d{2}:\d{2}:\d{2}\]| {9,24}) )?"
          r"(?:DEBUG {4}|INFO {5}|WARNING {2}|ERROR {4}|CRITICAL ))(?=[^\s|])"), "logger"),
    # vLLM's logger (and OpenRLHF's, SkyPilot's, which copy it): "ERROR 10-14 12:32:47
    # multiproc_worker_utils.py:233] ", from vLLM 0.8 "INFO 06-01 10:00:00 [core.py:58] "
    (lazy(rf"^{_LEVEL} (?:\d{{2}}-\d{{2}}|{_DATE}) {_TIME} \[?[\w./-]+\.py:\d+\] "), "logger"),
    # DeepSpeed / python logging "[2024-..] [INFO] [file.py:12:func] " (time already gone)
    (lazy(rf"^\[{_LEVEL}\] \[[\w./-]+:\d+(?::[\w<>]+)?\]\s?"), "logger"),
    # LLaMA-Factory >= 0.9.1 "[INFO|2025-01-01 12:00:00] loader.py:143 >> "
    (lazy(rf"^\[{_LEVEL}\|{_DATE} {_TIME}\] [\w./-]+:\d+ >> "), "logger"),
    # transformers explicit format "[INFO|trainer.py:2134] 2025-01-01 12:00:00,123 >> "
    (lazy(rf"^\[{_LEVEL}\|[\w./-]+:\d+\] {_DATE} {_TIME} >> "), "logger"),
    # LLaMA-Factory <= 0.9.0 / transformers examples "06/01/2024 12:00:00 - INFO - name - "
    (lazy(rf"^\d{{2}}/\d{{2}}/\d{{4}} {_TIME} - {_LEVEL} - [\w.]+ - "), "logger"),
    # mmengine "03/01 10:00:00 - mmengine - INFO - "
    (lazy(rf"^\d{{2}}/\d{{2}} {_TIME} - [\w.]+ - {_LEVEL} - (?:[^ ]+ - \w+ - \d+ - )?"), "logger"),
    # loguru (autotrain) "ERROR    | 2024-08-21 22:56:04 | module:func:12 - "
    (lazy(rf"^{_LEVEL}\s*\| {_DATE} {_TIME} \| [\w.:<>]+ - "), "logger"),
    # loguru's default format once its timestamp is gone: "| INFO     | train:train_loop:214 - "
    (lazy(rf"^\|\s*{_LEVEL}\s*\| [\w.<>-]+:[\w.<>-]+:\d+ - "), "logger"),
    # detectron2's logger "[09/26 19:32:28 d2.engine.train_loop]: ", its level before it when not
    # INFO ("ERROR [09/26 ...]: ", "WARNING [...]: ")
    (lazy(rf"^(?:{_LEVEL} )?\[\d{{2}}/\d{{2}} {_TIME} [\w.]+\]: "), "logger"),
    # XTuner lite "[XTuner][2024-01-01 10:00:00][INFO] "
    (lazy(rf"^\[XTuner\]\[{_DATE} {_TIME}\]\[{_LEVEL}\] "), "logger"),
    # axolotl "[INFO] [axolotl.train.train:12] [PID:123] [RANK:1] " (time already gone)
    (lazy(rf"^\[{_LEVEL}\] \[[\w.]+(?::\d+)?\](?: \[PID:\d+\])?(?: \[RANK:(?P<rank>\d+)\])? "), "logger"),
    # glog (torch >= 2.3 loggers, c10): "E0325 20:57:27.620000 2606 path/file.py:869] "
    (lazy(r"^[IWEFCV]\d{4} \d{2}:\d{2}:\d{2}\.\d+\s+\d+ [\w./-]+:\d+\] "), "logger"),
    # TensorFlow / XLA C++ logging once its timestamp is gone:
    # "2024-04-03 10:11:40.412113: W external/xla/.../bfc_allocator.cc:291] "
    (lazy(r"^: [IWEF] [\w./-]+:\d+\] "), "logger"),
    # c10 "[W ProcessGroupNCCL.cpp:1250] " / "[W1120 08:14:37.404062000 ProcessGroupNCCL.cpp:1250] "
    (lazy(r"^\[[IWEF](?:\d{4} \d{2}:\d{2}:\d{2}\.\d+)? [\w./-]+:\d+\] "), "logger"),
    # torch 2.1/2.2 "torch.distributed.elastic.multiprocessing.api: [WARNING] "
    (lazy(rf"^torch\.[\w.]+: \[{_LEVEL}\] "), "logger"),
    # basicConfig "WARNING:torch.distributed.elastic.multiprocessing.api:"
    (lazy(rf"^{_LEVEL}:[\w.]+:(?=\S)"), "logger"),
    # the logging module's "%(asctime)s - %(name)s - %(levelname)s - " (either order of the two)
    # once its time is gone: "- root - ERROR - ", "- ERROR - __main__ - "
    (lazy(rf"^- (?:[\w.<>-]+ - {_LEVEL}|{_LEVEL} - [\w.<>-]+) - "), "logger"),
    # ... and a level set off by a bar once the time before it is gone: "CRITICAL | "
    (lazy(rf"^{_LEVEL} \| "), "logger"),
    # a bare "[2024-01-01 10:00:00] " after a rank prefix
    (lazy(rf"^\[{_DATE} {_TIME}\]\s?"), "time"),
    # a level left alone once its timestamp is gone: "[INFO] ", "ERROR: ", "WARNING - "
    (lazy(rf"^(?:\[{_LEVEL}\]|{_LEVEL}:|{_LEVEL} -) "), "logger"),
]

# Cheap test: does this line possibly carry any prefix at all? (standard library: one call a line)
_MAYBE_PREFIX = stdlib_re.compile(
    r"^(?: {0,25}(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) |\s{0,4}(?:>|\[|\d|[A-Z][a-z]{2} |[IWEFCV]\d{4} |[a-z][\w-]*: |\(|torch\.|[A-Z]+:|[A-Z]+\s*\||[\w.-]+[-_]\d+ *\| |(?:rank|default)\d{1,5}\]:|"
    + _LEVEL + r" [\d\[]|\||: [IWEF] ))"
)


# the path column of rich's handler, right-aligned at the end of a record's first row
_RICH_PATH = stdlib_re.compile(r" {2,}[\w.-]+\.py:\d+ *$")
_PADDED_EXC = lazy(r"\S( {8,})(?=(?:[A-Za-z_][\w]*\.){0,6}[A-Z]\w*(?:Error|Exception): )")
# a timestamped record glued after other text: the standard library finds the "[" of a
# timestamp in C, a loop over every "[" of a line (often ten or more) costs four times more
_TS_AT = stdlib_re.compile(r"\[\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}")
_FRAME_AT = lazy(r"File \"[^\"]+\", line \d+")


def _after_bars(text: str) -> Iterator[int]:
    """Where a record starts right after a tqdm bar's rate ("...3.2it/s]Traceback")."""
    for token in ("it/s]", "s/it]"):
        i = text.find(token)
        while i >= 0:
            j = i + len(token)
            if j < len(text) and not text[j].isspace():
                yield j
            i = text.find(token, j)


def _glue_candidates(text: str, physicals: list[str]) -> set[int]:
    """Indices of the lines (``text`` is ``physicals`` joined by newlines) that hold a place
    where ``_split_glued`` may cut: the others are never split, so its searches run only on
    the few lines that hold one. Found on the whole text by its literals (``str.find`` runs
    in C; a regex that starts with a character class tries every position in Python's
    engine), as a superset of its cuts on a line that ``normalise_line`` only trims (a line
    that escape codes, markdown bold or control characters change is searched itself)."""
    hits = list(_after_bars(text))
    for token in ("Traceback (most recent call last):", '  File "'):
        i = text.find(token, 1)
        while i > 0:
            if not text[i - 1].isspace():
                hits.append(i)
            i = text.find(token, i + 1)
    hits.extend(m.start() for m in _TS_AT.finditer(text, 1) if text[m.start() - 1] not in "\n \t[")
    for token in ("Error: ", "Exception: "):
        i = text.find(token)
        while i >= 0:
            start = text.rfind("\n", 0, i) + 1
            if text.find("        ", start + 1, i) > 0:
                hits.append(i)
            i = text.find(token, i + 1)
    if not hits:
        return set()
    ends = list(itertools.accumulate(len(p) + 1 for p in physicals))
    return {bisect.bisect_right(ends, at) for at in hits}


def _split_glued(seg: str) -> list[str]:
    """Split one physical line where a record was glued onto another: after a tqdm bar
    ("...it/s]Traceback"), before a traceback header or a timestamped record that does not
    start the line, before a `File "..."` frame glued after a code line. Plain string
    searches find the candidates; a regex confirms the two that need it."""
    cuts: set[int] = set(_after_bars(seg))
    i = seg.find("Traceback (most recent call last):", 1)
    if i > 0 and not seg[i - 1].isspace():
        cuts.add(i)
    if _TS_AT.search(seg, 1):   # most lines have none: one search, no generator
        cuts.update(m.start() for m in _TS_AT.finditer(seg, 1) if seg[m.start() - 1] not in " \t[")
    # an exception line glued after a terminal's padding ("...label_smoothing)    <80 spaces>
    # torch.cuda.OutOfMemoryError: CUDA out of memory"): the issue tracker lost the newline
    i = seg.find("        ", 1) if ("Error: " in seg or "Exception: " in seg) else -1
    if i > 0:
        for m in _PADDED_EXC.finditer(seg, i - 1):
            cuts.add(m.end(1))
    i = seg.find('  File "')
    while i > 0:
        if not seg[i - 1].isspace() and _FRAME_AT.match(seg, i + 2):
            cuts.add(i)
        i = seg.find('  File "', i + 2)
    if not cuts:
        return [seg]
    out, prev = [], 0
    for c in sorted(cuts):
        out.append(seg[prev:c])
        prev = c
    out.append(seg[prev:])
    # a frame split keeps its text starting at 'File "', not at the spaces before it
    return [p.lstrip() if p.lstrip().startswith('File "') else p for p in out]


def strip_ansi(text: str) -> str:
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    if "^[[" in text:
        text = _CARET_SGR.sub("", text)
    if "#033[" in text:
        text = _SYSLOG_SGR.sub("", text)
    if "m" in text and "[" in text:
        numbered = _BARE_SGR.sub("", text)
        if "[m" in text:
            return (_ANY_RESET if numbered != text else _BARE_RESET).sub("", numbered)
        return numbered
    return text


@functools.cache
def _one_layer() -> "stdlib_re.Pattern":
    """All prefix patterns as one anchored alternation, tried in order in C: one call per
    layer instead of one per pattern (compiled on first use, not at import).

    The standard library's engine runs this alternation in less than half the time of
    ``regex``; it has no repeated group names, so each ``rank``/``host`` group is numbered
    (``rank_5``) and ``lastgroup`` tells which one a layer filled (an alternative holds at
    most one)."""
    count = itertools.count()
    alts = []
    for pattern, _kind in _PREFIXES:
        body = pattern.pattern
        body = body[1:] if body.startswith("^") else body
        body = stdlib_re.sub(r"\(\?P<(rank|host)>", lambda m: f"(?P<{m.group(1)}_{next(count)}>", body)
        alts.append("(?:" + body + ")")
    return stdlib_re.compile("|".join(alts))


def strip_prefixes(text: str) -> tuple[str, Optional[int], Optional[str]]:
    """Remove layered decorations (at most 12); return (message, rank, host): the
    outermost rank and host that a layer names."""
    if not _MAYBE_PREFIX.match(text):
        return text, None, None
    layer = _one_layer()
    pos = 0
    rank = host = None
    column = False
    for _ in range(12):
        m = layer.match(text, pos)
        if m is None or m.end() == pos:
            break
        group = m.lastgroup
        if group == "column":
            column = True
        elif group is not None:
            if group[0] == "r":
                if rank is None:
                    rank = int(m.group(group))
            elif host is None and m.group(group):
                host = m.group(group)
        pos = m.end()
    if pos == 0:
        return text, None, None
    if column and (end := _RICH_PATH.search(text, pos)):
        return text[pos:end.start()], rank, host
    return text[pos:], rank, host


def join_lines(lines: list["Line"]) -> tuple[str, list[int]]:
    """The lines' texts joined by newlines, and each line's start offset in that text:
    one regex pass over the whole log costs far less than one call per line."""
    starts, pos = [], 0
    for ln in lines:
        starts.append(pos)
        pos += len(ln.text) + 1
    return "\n".join(ln.text for ln in lines), starts


def split_physical(text: str, start: int = 1) -> Iterator[tuple[int, str]]:
    """Yield (line number, physical line) for text split on \\n only."""
    no = start
    for piece in text.split("\n"):
        yield no, piece
        no += 1


def _without_code_span(raw: str) -> str:
    """The line without the inline-code backticks a user put around pasted output."""
    if raw[-1:] == "`" or raw[-2:] == "` ":
        # a line wrapped in one span ("`Killed`", "`Loading checkpoint shards:   0%|...| 0/2
        # [00:00<?, ?it/s] `"): the whole line
        m = _MD_CODE.match(raw)
        if m:
            return m.group(1)
    if raw.count("`") != 1:
        return raw
    # one end of a span that runs over several pasted lines: its opening backtick starts the
    # first line, its closing one ends the last ("...blk.35.ffn_norm.weight", "Killed`")
    i = raw.index("`")
    if i <= 3 and not raw[:i].strip() or not raw[i + 1:].strip():
        return raw[:i] + raw[i + 1:]
    return raw


# A log kept as JSON records, one a line: Docker's json-file driver ({"log": "...\\n", "stream":
# ..., "time": ...}), the JSON formatters of logging libraries and cloud log exports ("message",
# "msg", "textPayload"). The record's message is the line (several lines where it holds a
# whole traceback); a record cut short or any other JSON is left as it is.
_RECORD_FIELDS = ("log", "message", "msg", "textPayload")
_RECORD_KEYS = tuple(f'"{field}":' for field in _RECORD_FIELDS)


def _record_message(physical: str) -> Optional[str]:
    s = physical.strip()
    if not (s[:2] == '{"' and s[-1:] == "}") or not any(k in s for k in _RECORD_KEYS):
        return None
    try:
        record = json.loads(s)
    except ValueError:
        return None
    if isinstance(record, dict):
        for key in _RECORD_FIELDS:
            value = record.get(key)
            if isinstance(value, str) and value.strip():
                return value.rstrip("\n")
    return None


def normalise_line(no: int, physical: str, glue: bool = True) -> list[Line]:
    """One physical line → one or more logical lines (CR segments, glued records).
    ``glue=False``: the line holds no glue candidate (``_glue_candidates``)."""
    if len(physical) > MAX_LINE:
        physical = physical[:MAX_LINE]
    if physical.endswith("\r"):
        physical = physical[:-1]
    if '{"' in physical[:16]:
        message = _record_message(physical)
        if message is not None:
            # each line of the message is a line of the log (its number the record's)
            return [ln for part in message.split("\n") for ln in normalise_line(no, part)]
    raw = strip_ansi(physical)
    if "**" in raw and not raw[:1].isspace():
        # markdown bold a user put around part of a pasted line ("**RuntimeError: CUDA out of
        # memory.** Tried", "C**UDA ... 1**72.00 MiB"); indented lines are code ("f(**kw)")
        raw = _MD_BOLD.sub(r"\1", raw, count=2)
        if raw.count("**") == 1:
            # one end of a bold span over several pasted lines: it opens the first line and
            # closes the last ("**2020-02-01 ... W tensorflow/...", "Killed**"); an opening
            # one starts a record (a digit, a capital, a bracket, an exception's dotted name),
            # not code ("**kwargs)")
            if raw.rstrip().endswith("**"):
                raw = raw.rstrip()[:-2]
            elif _MD_BOLD_OPENS.match(raw):
                raw = raw[2:]
    if "`" in raw:
        raw = _without_code_span(raw)
    if not raw.isprintable() and _CONTROL.search(raw):  # isprintable: one C pass, no controls
        raw = _CONTROL.sub("", raw.replace("\r", "\x00")).replace("\x00", "\r")
    if not glue and raw != physical:
        glue = True   # what was taken out (escape codes, bold, backticks, controls) may bring two records together
    if "\r" in raw:
        # A terminal shows only the last carriage-return segment; intermediate progress-bar
        # updates (hundreds per line in tqdm logs) carry nothing, but a segment with other
        # text in it (a warning printed mid-bar) is kept.
        parts = raw.split("\r")
        segments = [p for p in parts[:-1] if p.strip() and not _BAR_ONLY.match(p)] + parts[-1:]
    else:
        segments = [raw]
    out: list[Line] = []
    for seg in segments:
        if not seg.strip():
            continue
        parts = _split_glued(seg) if glue and len(seg) > 20 else [seg]
        for part in parts:
            if not part or not part.strip():
                continue
            if len(parts) > 1 and "**" in part and not part[:1].isspace():
                # a record glued after an indented code line keeps the bold a user put in it
                # ("    x = f(*args)      torch.cuda.OutOfMemoryError: ... allocate **35.79 GiB**")
                part = _MD_BOLD.sub(r"\1", part, count=2)
            if not part.isascii() and _FULLWIDTH.search(part):
                part = part.translate(_FOLD_FULLWIDTH)
            text, rank, host = strip_prefixes(part)
            out.append(Line(no=no, raw=raw if len(raw) <= 400 else raw[:400], text=text, rank=rank, host=host))
    if not out:
        out.append(Line(no=no, raw="", text=""))
    return out


# A message pasted with its case lost ("cuda out of memory. tried to allocate 30.00 mib (gpu
# 0; ..."): a forum or a tool lower-cased it. The words whose case the parsers read get it
# back (the raw line keeps the case as posted); the figures are untouched. "Tried" is never
# lower case in any version's wording.
_CASE_LOST = "ut of memory. tried to"
_RECASE_WORDS = {w.lower(): w for w in (
    "CUDA", "HIP", "XPU", "NPU", "MLU", "GCU", "MUSA", "GPU", "Tried", "KiB", "MiB", "GiB", "TiB", "PyTorch",
    "non-PyTorch", "Including", "Process", "If", "See", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF",
    "OutOfMemoryError", "torch.cuda.OutOfMemoryError", "RuntimeError", "True")}
_RECASE = lazy(r"(?<![\w-])(?:" + "|".join(sorted(map(re.escape, _RECASE_WORDS), key=len, reverse=True)) + r")(?![\w-])"
               r"|(?<=[.;]\s{0,3})of(?= the allocated)|(?<=\d\s{0,3})device(?= has a total)")


def _recase(text: str) -> str:
    return _RECASE.sub(lambda m: _RECASE_WORDS.get(m.group(0)) or m.group(0).capitalize(), text)


def restore_lost_case(lines: list[Line]) -> list[Line]:
    """Give a lower-cased allocator message (its line and the lower-case lines that continue
    it, four at most) its case back, before any parser reads it."""
    for i, ln in enumerate(lines):
        if _CASE_LOST not in ln.text:
            continue
        for j in range(i, min(i + 4, len(lines))):
            text = lines[j].text
            if not text.islower() or (j > i and not text.strip()):
                break
            lines[j] = replace(lines[j], raw=lines[j].raw or text, text=_recase(text))
    return lines


def normalise(text: str, start: int = 1) -> list[Line]:
    """Normalise a whole text (already decoded) into logical lines."""
    return normalise_pairs(split_physical(text, start))


def normalise_pairs(pairs: Iterable[tuple[int, str]]) -> list[Line]:
    """Normalise (line number, physical line) pairs, e.g. the regions a scan kept."""
    pairs = list(pairs)
    physicals = [physical for _no, physical in pairs]
    text = "\n".join(physicals)
    glued = _glue_candidates(text, physicals)
    lines: list[Line] = []
    for i, (no, physical) in enumerate(pairs):
        lines.extend(normalise_line(no, physical, i in glued))
    return restore_lost_case(lines) if _CASE_LOST in text else lines
