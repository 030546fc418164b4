"""What the kernel knows about a job's memory that its log does not say.

A host out-of-memory kill leaves the dying process no chance to print anything; the
evidence is the exit signal, the memory cgroup's counters, and the kernel log. These
readers take a snapshot of the counters before and after a job, read the kernel's kill
lines, and list the job's processes, so ``oomdoctor run`` can say "the kernel killed
your job for memory" with certainty instead of guessing from a bare SIGKILL.

Everything here is best effort: on a machine without the files (macOS, a restricted
container, dmesg_restrict) each reader returns nothing and the diagnosis goes on from
the log alone.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional

UNLIMITED = 2**62                    # cgroup v1 prints ~2**63 for "no limit"


@dataclass
class CgroupState:
    """One reading of the memory cgroup the job runs in."""

    version: int                     # 2 (unified) or 1 (legacy memory controller)
    path: str                        # the cgroup's path as /proc/self/cgroup names it
    directory: str                   # where its files were read
    oom_kill: Optional[int] = None   # processes killed by the OOM killer in this cgroup (and below)
    oom: Optional[int] = None        # v2: times the cgroup hit its limit and the OOM path ran
    failcnt: Optional[int] = None    # v1: times usage hit the limit
    peak: Optional[int] = None       # v2 memory.peak / v1 memory.max_usage_in_bytes (bytes)
    limit: Optional[int] = None      # the tightest memory.max / limit_in_bytes on the way up


def _read_int(path: Path) -> Optional[int]:
    try:
        text = path.read_text().strip()
    except (OSError, ValueError):
        return None
    if text == "max":
        return None
    try:
        return int(text)
    except ValueError:
        return None


def _read_keyed(path: Path) -> dict[str, int]:
    """Files of 'key value' lines (memory.events, memory.oom_control)."""
    out: dict[str, int] = {}
    try:
        text = path.read_text()
    except (OSError, ValueError):
        return out
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            out[parts[0]] = int(parts[1])
    return out


def _tightest_limit(directory: Path, root: Path, name: str) -> Optional[int]:
    """The smallest limit on the way from the cgroup up to the mount root (limits nest)."""
    best: Optional[int] = None
    d = directory
    for _ in range(64):
        value = _read_int(d / name)
        if value is not None and value < UNLIMITED and (best is None or value < best):
            best = value
        if d == root or root not in d.parents:
            break
        d = d.parent
    return best


def read_state(proc_cgroup: str = "/proc/self/cgroup", root: str = "/sys/fs/cgroup") -> Optional[CgroupState]:
    """The memory cgroup of this process, or None when none can be read."""
    try:
        entries = Path(proc_cgroup).read_text().splitlines()
    except OSError:
        return None
    base = Path(root)
    unified = v1 = None
    for entry in entries:
        parts = entry.split(":", 2)
        if len(parts) != 3:
            continue
        hid, controllers, path = parts
        if hid == "0" and controllers == "":
            unified = path
        elif "memory" in controllers.split(","):
            v1 = path
    if unified is not None:
        directory = base / unified.lstrip("/")
        events = directory / "memory.events"
        if events.exists():
            keyed = _read_keyed(events)
            return CgroupState(
                version=2, path=unified, directory=str(directory),
                oom_kill=keyed.get("oom_kill"), oom=keyed.get("oom"),
                peak=_read_int(directory / "memory.peak"),
                limit=_tightest_limit(directory, base, "memory.max"),
            )
    if v1 is not None:
        mount = base / "memory"
        directory = mount / v1.lstrip("/")
        if not (directory / "memory.failcnt").exists():
            directory = mount                    # a container sees its own cgroup as the root
        if (directory / "memory.failcnt").exists():
            return CgroupState(
                version=1, path=v1, directory=str(directory),
                oom_kill=_read_keyed(directory / "memory.oom_control").get("oom_kill"),
                failcnt=_read_int(directory / "memory.failcnt"),
                peak=_read_int(directory / "memory.max_usage_in_bytes"),
                limit=_tightest_limit(directory, mount, "memory.limit_in_bytes"),
            )
    return None


def oom_kills_during(before: Optional[CgroupState], after: Optional[CgroupState]) -> int:
    """How many OOM kills the cgroup counted while the job ran (0 when unknown)."""
    if before is None or after is None or before.oom_kill is None or after.oom_kill is None:
        return 0
    return max(0, after.oom_kill - before.oom_kill)


def _size(n: int) -> str:
    from ..facts.sizes import format_size
    return format_size(n)


def evidence_lines(before: Optional[CgroupState], after: Optional[CgroupState]) -> list[str]:
    """Lines for the report, each starting 'oomdoctor-run: cgroup' so nobody mistakes them for the job's."""
    if after is None:
        return []
    lines: list[str] = []
    if after.version == 2:
        if before is not None and after.oom_kill is not None and before.oom_kill is not None \
                and after.oom_kill > before.oom_kill:
            lines.append(f"oomdoctor-run: cgroup memory.events oom_kill {after.oom_kill} "
                         f"(was {before.oom_kill} before the job)")
        if before is not None and after.oom is not None and before.oom is not None and after.oom > before.oom:
            lines.append(f"oomdoctor-run: cgroup memory.events oom {after.oom} (was {before.oom} before the job)")
        if after.peak is not None:
            limit = f", memory.max {_size(after.limit)}" if after.limit else ""
            lines.append(f"oomdoctor-run: cgroup memory.peak {_size(after.peak)}{limit}")
    else:
        if before is not None and after.oom_kill is not None and before.oom_kill is not None \
                and after.oom_kill > before.oom_kill:
            lines.append(f"oomdoctor-run: cgroup v1 memory.oom_control oom_kill {after.oom_kill} "
                         f"(was {before.oom_kill} before the job)")
        if before is not None and after.failcnt is not None and before.failcnt is not None \
                and after.failcnt > before.failcnt:
            lines.append(f"oomdoctor-run: cgroup v1 memory.failcnt {after.failcnt} "
                         f"(was {before.failcnt} before the job)")
        if after.peak is not None:
            limit = f", memory.limit_in_bytes {_size(after.limit)}" if after.limit else ""
            lines.append(f"oomdoctor-run: cgroup v1 memory.max_usage_in_bytes {_size(after.peak)}{limit}")
    return lines


# -- the job's processes -----------------------------------------------------------------

def session_pids(sid: int, proc: str = "/proc", limit: int = 4096) -> set[int]:
    """PIDs whose session is ``sid`` (the job was started in a session of its own)."""
    found: set[int] = set()
    try:
        names = os.listdir(proc)
    except OSError:
        return found
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"{proc}/{name}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        # "pid (comm) state ppid pgrp session ..." - comm may hold spaces and parentheses
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 3 and fields[3].isdigit() and int(fields[3]) == sid:
            found.add(int(name))
            if len(found) >= limit:
                break
    return found


# -- the kernel log ----------------------------------------------------------------------

_STAMP = re.compile(r"^\[\s*(\d+\.\d+)\]")
_OOM_LINE = re.compile(r"invoked oom-killer|oom-kill:|Killed process \d+|Kill process \d+|oom_reaper: reaped"
                       r"|Memory cgroup out of memory|Out of memory")
_VICTIM = re.compile(r"(?:Killed|Kill|reaped) process (\d+) \(")
_SUMMARY_PID = re.compile(r"oom-kill:.*?[,:]pid=(\d+)")
_SUMMARY_MEMCG = re.compile(r"task_memcg=([^,\s]+)")


@dataclass
class KernelKill:
    pid: int
    line: str
    ours: bool                       # the victim was one of the job's processes or in its cgroup


def read_kernel_log(timeout: float = 3.0) -> Optional[str]:
    """The kernel ring buffer as ``dmesg`` prints it, or None where it cannot be read."""
    exe = shutil.which("dmesg")
    if exe is None:
        return None
    try:
        res = subprocess.run([exe], capture_output=True, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if res.returncode != 0 or not res.stdout:
        return None
    return res.stdout[-4 * 2**20:].decode("utf-8", errors="replace")


def kernel_oom_lines(text: str, *, since: float, pids: Iterable[int], cgroup_path: Optional[str] = None,
                     slack: float = 2.0, max_lines: int = 40) -> tuple[list[str], list[KernelKill]]:
    """The kernel's OOM lines about the job, printed after ``since`` (seconds since boot).

    A line belongs to the job when it names one of its PIDs or its cgroup; an OOM event's
    summary and kill lines are kept together. Lines about other processes are left out:
    another job's OOM on the same host says nothing about this one.
    """
    ours = set(pids)
    kept: list[str] = []
    kills: list[KernelKill] = []
    for line in text.splitlines():
        m = _STAMP.match(line)
        if m is None or float(m.group(1)) < since - slack or not _OOM_LINE.search(line):
            continue
        victim = _VICTIM.search(line) or _SUMMARY_PID.search(line)
        memcg = _SUMMARY_MEMCG.search(line)
        in_cgroup = bool(cgroup_path and memcg and cgroup_path not in ("/", "") and memcg.group(1) == cgroup_path)
        mine = in_cgroup or (victim is not None and int(victim.group(1)) in ours)
        if not mine:
            continue
        if len(kept) < max_lines:
            kept.append(line.rstrip())
        if victim is not None and ("Killed process" in line or "Kill process" in line):
            kills.append(KernelKill(pid=int(victim.group(1)), line=line.rstrip(), ours=True))
    return kept, kills


def monotonic_now() -> float:
    """Seconds since boot on the clock the kernel log's timestamps use (CLOCK_MONOTONIC)."""
    import time
    return time.clock_gettime(time.CLOCK_MONOTONIC) if hasattr(time, "clock_gettime") else time.monotonic()
