"""Launchers and ranks: world size, nodes and hosts (torchrun, deepspeed, accelerate, NCCL rings)."""
from __future__ import annotations

import ast
import base64
import binascii
import json
from typing import Optional

from ...read.patterns import lazy
from .collector import CONFIG, LAUNCH, RUNTIME, WEAK, Collector
from .forms import finditer

# -- world size -----------------------------------------------------------------------

_WORLD = lazy(
    r"dist_world_size=(?P<dist>\d{1,7})|WORLD INFO DICT: (?P<dict>\{[^\n]{0,20000}\})"
    r"|nnodes=(?P<nn>\d{1,5}), num_local_procs=(?P<nl>\d{1,5})|--world_info=(?P<b64>[A-Za-z0-9+/=]{8,20000})"
    r"|(?:^|, |using )world[ _]size: (?P<ws>\d{1,7})|^Num processes: (?P<np>\d{1,7})"
    r"|global_world_sizes=\[(?P<gws>\d{1,7})|\bn[Rr]anks (?P<nr>\d{1,7})(?: nNodes (?P<nnodes>\d{1,5}))?"
    r"|\bWORLD_SIZE['\"]?\s*(?:=|:\s*|,\s*)['\"]?(?P<env>\d{1,7})\b"
    # xtuner and ms-swift launch through these environment variables
    r"|\bNPROC_PER_NODE=(?P<npn>\d{1,5})\b|\bNNODES=(?P<nnodes_env>\d{1,5})\b"
    # torchrun's worker group (group_world_size counts nodes) and the store-based barrier
    r"|\bgroup_world_size=(?P<gws_nodes>\d{1,5})\b|Completed store-based barrier for key:\S{1,80} with (?P<barrier>\d{1,7}) nodes"
    r"|\bmpirun\b[^\n]{0,200}?\s-n(?:p)? (?P<mpi>\d{1,6})\b"
    # timm's train.py: "Training with a single process on 1 GPUs." / "Training in distributed
    # mode with multiple processes, 1 device per process.Process 0, total 8, device cuda:0."
    r"|^Training with a (?P<single>single) process on \d{1,4} (?:GPU|device)s?\b"
    r"|^Training in distributed mode with multiple processes, \d{1,4} (?:GPU|device) per process\.\s*"
    r"Process \d{1,7}, total (?P<timm>\d{1,7})\b"
    # TRL's GRPO trainer refusing its batch: "The global train batch size (7 x 1) must be evenly
    # divisible by the number of generations", later "The effective train batch size (7 x 1 x 4)
    # must be ..." (processes x per-device batch [x accumulation])
    r"|\bThe (?:global|effective) (?:train|eval) batch size \((?P<trl>\d{1,7}) x \d{1,7}(?: x \d{1,7})?(?: = \d{1,9})?\) must be")
# fairscale's initialize_model_parallel (Meta's llama reference code and its forks) and older
# Megatron print the size of each parallel group as they set them up: "> initializing model
# parallel with size 1", "> initializing ddp with size 1", "> initializing pipeline with size 1"
# (Megatron: "tensor model parallel", "pipeline model parallel", "data parallel"); the job's
# world is their product, once all three are printed
_PARALLEL_GROUP = lazy(r"^[>\s]{0,4}initializing (?P<g>(?:tensor )?model parallel|ddp|data parallel"
                       r"|pipeline(?: model parallel)?) with size (?P<n>\d{1,6})\s*$")
_GROUP_PART = {"model parallel": "mp_size", "tensor model parallel": "mp_size", "ddp": "dp_size",
               "data parallel": "dp_size", "pipeline": "pp_size", "pipeline model parallel": "pp_size"}
_NCCL_CHANNEL = lazy(r"NCCL INFO Channel \d+(?:/\d+)? : (?P<a>\d{1,6})\[[0-9a-fA-Fx]+\] -> (?P<b>\d{1,6})\[")


def _hosts(col: Collector, mapping: dict, line: int, prio: int) -> None:
    if isinstance(mapping, dict) and mapping and all(isinstance(v, list) for v in mapping.values()):
        col.set("world_size", sum(len(v) for v in mapping.values()), line, prio)
        col.set("num_nodes", len(mapping), line, prio)


# every line world() can use holds one of these (lower case): its two tests below
NEEDS = ("nccl info channel", "world", "nnodes", "ranks", "num processes", "nproc_per_node", "barrier", "mpirun",
         "initializing",
         "training with a single process", "training in distributed mode", "global train batch size",
         "global eval batch size", "effective train batch size", "effective eval batch size")


def world(col: Collector, text: str, low: str, line: int, nccl: list) -> None:
    if "nccl info channel" in low:
        m = _NCCL_CHANNEL.search(text)
        if m:  # every rank sits on the ring, so the highest one seen is world size - 1
            top = max(int(m.group("a")), int(m.group("b")))
            if top + 1 > nccl[0]:
                nccl[0], nccl[1] = top + 1, line
        return
    if "initializing" in low and "with size" in low:
        m = _PARALLEL_GROUP.search(text)
        if m:
            col.part(_GROUP_PART[m.group("g")], int(m.group("n")), line, RUNTIME)
        return
    if not ("world" in low or "nnodes" in low or "ranks" in low or "num processes" in low or "nproc_per_node" in low
            or "barrier" in low or "mpirun" in low or low.startswith("training ") or "batch size (" in low):
        return
    for m in finditer(_WORLD, text)[:3]:
        g = m.groupdict()
        if g["dist"]:
            col.set("world_size", int(g["dist"]), line, RUNTIME)
        elif g["dict"]:
            try:
                _hosts(col, ast.literal_eval(g["dict"]), line, RUNTIME)
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                pass
        elif g["nn"]:
            col.set("world_size", int(g["nn"]) * int(g["nl"]), line, RUNTIME)
            col.set("num_nodes", int(g["nn"]), line, RUNTIME)
        elif g["b64"]:
            try:
                _hosts(col, json.loads(base64.b64decode(g["b64"], validate=False)[:20000]), line, RUNTIME - 1)
            except (binascii.Error, ValueError, UnicodeDecodeError):
                pass
        elif g["ws"] or g["np"] or g["gws"]:
            col.set("world_size", int(g["ws"] or g["np"] or g["gws"]), line, RUNTIME)
        elif g["nr"]:
            col.set("world_size", int(g["nr"]), line, RUNTIME - 2)
            if g["nnodes"]:
                col.set("num_nodes", int(g["nnodes"]), line, RUNTIME - 2)
        elif g["env"]:
            col.set("world_size", int(g["env"]), line, CONFIG)
        elif g["npn"]:
            col.part("nproc_per_node", int(g["npn"]), line, LAUNCH)
        elif g["nnodes_env"]:
            col.part("nnodes", int(g["nnodes_env"]), line, LAUNCH)
        elif g["gws_nodes"]:
            col.set("num_nodes", int(g["gws_nodes"]), line, RUNTIME - 2)
        elif g["barrier"]:
            col.set("world_size", int(g["barrier"]), line, RUNTIME - 2)
        elif g["mpi"]:
            col.set("world_size", int(g["mpi"]), line, LAUNCH)
        elif g["single"] or g["timm"]:
            col.set("world_size", int(g["timm"] or 1), line, RUNTIME)
        elif g["trl"]:
            col.set("world_size", int(g["trl"]), line, RUNTIME)


# GPT-NeoX hands its DeepSpeed configuration to each worker as base64-encoded JSON on the
# command line the launcher echoes ("'--deepspeed_config', 'eyJ0cmFpbl9i...'")
_B64_CONFIG = lazy(r"--(?:deepspeed|megatron)_config['\"]?(?:,\s*|=|\s+)['\"]?(?P<b64>eyJ[A-Za-z0-9+/=_-]{8,40000})")


def b64_configs(text: str) -> list[str]:
    """The JSON text of the base64-encoded configurations on a launcher's command line."""
    out = []
    for m in finditer(_B64_CONFIG, text)[:2]:
        b64 = m.group("b64")
        try:
            decoded = base64.b64decode(b64 + "=" * (-len(b64) % 4), altchars=b"-_" if "-" in b64 or "_" in b64 else None)
            out.append(decoded.decode("utf-8"))
        except (binascii.Error, ValueError, UnicodeDecodeError):
            pass
    return out


# -- world size from what the launcher does -----------------------------------------------
# When a worker fails, torchrun's agent and the DeepSpeed launcher stop every other local
# worker and name each one: together with the failed one, those are the node's workers.
_TEARDOWN = lazy(r"Sending process (?P<pid>\d{1,9}) closing signal|Killing subprocess (?P<killed>\d{1,9})"
                 r"|failed \(exitcode: -?\d{1,4}\) local_rank: \d{1,5} \(pid: (?P<failed>\d{1,9})\)")
# ColossalAI / Megatron-style "data parallel size: 4, pipeline parallel size: 1, tensor
# parallel size: 1" (often hard-wrapped): the ranks are their product.
_PARALLEL = lazy(r"data[ -]parallel size: (?P<dp>\d{1,6}),\s*pipeline[ -](?:model[ -])?parallel size: (?P<pp>\d{1,6}),"
                 r"\s*tensor[ -](?:model[ -])?parallel size: (?P<tp>\d{1,6})")


def launcher_world(ctx, col: Collector) -> None:
    """World size from a launcher's teardown (the workers it stops, per host) and from a
    framework's parallel sizes, when nothing states it."""
    workers: set[tuple] = set()          # (host, pid): pids repeat across nodes
    failed: set[str] = set()             # the workers it reports failed (not stopped)
    first: Optional[int] = None
    for i in ctx.lines_with(("closing signal", "killing subprocess", "failed (exitcode"), fold=True):
        ln = ctx.lines[i]
        for m in finditer(_TEARDOWN, ln.text)[:4]:
            workers.add((ln.host, m.group("pid") or m.group("killed") or m.group("failed")))
            if m.group("failed"):
                failed.add(m.group("failed"))
            first = ln.no if first is None else first
    if len(workers) > 1:
        col.set("world_size", len(workers), first, WEAK - 1)
    # the processes of this job: an OOM message that lists one of them lists a sibling rank.
    # Only from one host: pids repeat across nodes, and an OOM message lists its own node's.
    if len({host for host, _pid in workers}) == 1:
        ctx.facts.ranks.worker_pids = sorted({int(pid) for _host, pid in workers})
        ctx.facts.ranks.stopped_pids = sorted({int(pid) for _host, pid in workers if pid not in failed})
    ranks_world(ctx, col)
    for i in ctx.lines_with(("parallel size:",), fold=True):
        text, _offsets = ctx.join(i, max_lines=3, sep=" ")
        m = ctx.search(_PARALLEL, text)
        if m:
            col.set("world_size", int(m.group("dp")) * int(m.group("pp")) * int(m.group("tp")), ctx.lines[i].no, RUNTIME - 3)
            break


# NCCL's "[Rank 6] Watchdog caught ...", composer's "Global rank 1 (PID 787) exited"
_RANK_NAMED = lazy(r"\[Rank (?P<r>\d{1,5})\]|\bGlobal rank (?P<g>\d{1,5})\b")


def ranks_world(ctx, col: Collector) -> None:
    """The weakest reading: the ranks that messages name ("[Rank 6] Watchdog caught ...",
    "Global rank 1 exited"), when they cover most of 0..N-1, are all of a job of N ranks.
    Line prefixes such as "[rank3]:" are not counted: a log collector's labels are not the
    job's ranks."""
    ranks: dict[int, int] = {}   # rank -> first line naming it
    for i in ctx.lines_with(("[Rank ", "Global rank ")):
        for m in finditer(_RANK_NAMED, ctx.lines[i].text)[:4]:
            ranks.setdefault(int(m.group("r") or m.group("g")), ctx.lines[i].no)
    # the normaliser takes a leading "[Rank 6] " for a prefix: the raw line still names it
    for ln in ctx.lines:
        if ln.rank is not None and ln.rank not in ranks and "[Rank " in ln.raw:
            m = ctx.search(_RANK_NAMED, ln.raw)
            if m and m.group("r"):
                ranks.setdefault(int(m.group("r")), ln.no)
    if len(ranks) >= 2 and 2 * len(ranks) >= max(ranks) + 1:
        col.set("world_size", max(ranks) + 1, min(ranks.values()), WEAK - 2)
