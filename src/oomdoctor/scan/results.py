"""The ``--out`` file of a scan: locked while the scan writes it, made ready for ``--resume``.

Two scans into one file would each write from offsets of their own, over each other's
records; so the file is locked (``flock``, exclusive, non-blocking) before anything in it
is read or changed, and a second scan stops at once with a one-line error.

On ``--resume`` the file must end with one record per log, whatever happened to it: the
unfinished last record of a killed scan goes (however long it is), and so does every
record the scan is about to write again (a log whose record was an error is tried again;
a log changed since it was scanned is scanned again), and any earlier record of a path
that has a later one. Lines that are no record at all are left as they are.
"""
from __future__ import annotations

import contextlib
import csv
import json
import os
import stat
import tempfile
from typing import IO, Callable, Iterable, Iterator, NamedTuple, Optional

from .records import allow_long_csv_fields, csv_record, is_csv_header, key
from .sources import MEMBER_SEP


class OutputError(Exception):
    """The --out file cannot be used; the message is one line for the user (exit code 2)."""


class _Unit(NamedTuple):
    """One whole line (JSONL) or row (CSV) of a results file, by its byte span."""

    start: int
    end: int
    kind: str                    # "record" | "header" (CSV) | "other" (not a record: kept as is)
    path: Optional[str] = None
    key: tuple = ()
    error: bool = False


class ResultsFile:
    """The ``--out`` file, held by one scan from its start to its end.

    Opened without truncating and locked before anything else; then a fresh scan empties
    it, and a resumed one reads it (``done_keys``) and, once the tasks are known, calls
    ``prepare_resume``. The lock goes with the process, however it ends.
    """

    def __init__(self, path: str, fmt: str, resume: bool):
        self.path = path
        self.fmt = fmt
        self.units: list[_Unit] = []
        self.complete = 0          # bytes up to the end of the last whole line or row
        self.fd, self.regular = _open_locked(path)
        try:
            if resume:
                if not self.regular:
                    raise OutputError(f"cannot resume {path}: not a regular file")
                self._load()
            elif self.regular:
                os.ftruncate(self.fd, 0)
        except BaseException:
            os.close(self.fd)
            raise

    # -- resume --------------------------------------------------------------------------

    def _load(self) -> None:
        with open(self.fd, "rb", closefd=False) as fh:
            fh.seek(0)
            found = "csv" if is_csv_header(fh.readline(64).decode("utf-8", "replace")) else "jsonl"
            fh.seek(0)
            size = os.fstat(self.fd).st_size
            self.units = list(_csv_units(fh, size, self.path) if found == "csv" else _jsonl_units(fh))
        self.complete = self.units[-1].end if self.units else 0
        if not self.units:
            return
        if found != self.fmt:
            raise OutputError(f"{self.path} holds {found.upper()} records: resume it with --format {found}")
        if not any(u.kind != "other" for u in self.units):
            raise OutputError(f"{self.path} holds no scan records: --resume goes with the --out of an earlier scan")

    def _last(self) -> dict:
        """Index of the last record of each path (the one that counts)."""
        return {u.path: i for i, u in enumerate(self.units) if u.kind == "record"}

    def done_keys(self) -> set:
        """Keys of the logs not to scan again: the last record of each path, unless an error."""
        return {self.units[i].key for i in self._last().values() if not self.units[i].error}

    def prepare_resume(self, superseded: Callable[[str, tuple], bool]) -> None:
        """Leave the whole records that stay: ``superseded(path, key)`` says which ones the
        scan is about to write again (an error tried again, a log changed since); earlier
        records of a path that has a later one go too."""
        last = self._last()
        keep = [u for i, u in enumerate(self.units)
                if u.kind != "record" or (last[u.path] == i and not superseded(u.path, u.key))]
        if len(keep) == len(self.units):
            if os.fstat(self.fd).st_size > self.complete:
                os.ftruncate(self.fd, self.complete)   # the unfinished record of a killed scan
            return
        self._rewrite(keep)

    def _rewrite(self, keep: list[_Unit]) -> None:
        """Write the kept lines to a new file beside the old one and put it in its place:
        a scan killed meanwhile leaves the old file whole. The new file is locked before it
        takes the name, so a scan that opens the name at any moment finds it locked."""
        real = os.path.realpath(self.path)
        directory, base = os.path.split(real)
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{base}.", suffix=".resume", dir=directory or ".")
        except OSError as exc:
            raise OutputError(f"cannot resume {self.path}: cannot write a file beside it ({_reason(exc)})") from None
        try:
            _lock(fd)
            for start, end in _spans(keep):
                _copy(self.fd, fd, start, end)
            if hasattr(os, "fchmod"):
                os.fchmod(fd, stat.S_IMODE(os.fstat(self.fd).st_mode))
            os.fsync(fd)
            os.replace(tmp, real)
        except BaseException as exc:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            if isinstance(exc, OSError):
                raise OutputError(f"cannot resume {self.path}: {_reason(exc)}") from None
            raise
        os.close(self.fd)
        self.fd = fd
        self.units = keep

    # -- writing -------------------------------------------------------------------------

    @property
    def empty(self) -> bool:
        return not self.regular or os.fstat(self.fd).st_size == 0

    def stream(self) -> IO[str]:
        """A text stream that appends records. Names that are not UTF-8 keep their bytes
        (CSV has no escapes; JSON lines escape them and never need it)."""
        return open(self.fd, "a", encoding="utf-8", errors="surrogateescape", newline="", closefd=False)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)   # releases the lock
            self.fd = -1


def superseded_by(tasks: Iterable) -> Callable[[str, tuple], bool]:
    """Which records of a results file the scan of ``tasks`` writes again: every record of
    a log it scans (or reports), and of an archive it reads, every member's record but
    those of the members it skips as done (``Task.done``)."""
    logs: set = set()
    archives: dict = {}
    for t in tasks:
        if t.kind == "tar":
            archives[t.path] = t.done
        else:
            logs.add(t.path)

    def superseded(path: str, key: tuple) -> bool:
        if path in logs or path in archives:
            return True
        cut = path.find(MEMBER_SEP)
        while cut >= 0:   # an archive's name may hold the separator too: try each place
            done = archives.get(path[:cut])
            if done is not None:
                return key not in done
            cut = path.find(MEMBER_SEP, cut + 1)
        return False

    return superseded


def _open_locked(path: str) -> tuple[int, bool]:
    """The file opened for reading and writing, not truncated, and locked; and whether it
    is a regular file (a terminal or /dev/null is neither locked nor truncated)."""
    for _ in range(20):
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o666)
        except IsADirectoryError:
            raise OutputError(f"cannot write {path}: it is a directory") from None
        except OSError as exc:
            raise OutputError(f"cannot write {path}: {_reason(exc)}") from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return fd, False
            if not _lock(fd):
                raise OutputError(f"{path} is in use by another scan (it is locked): "
                                  "wait for that scan to end, or write to another --out")
            # A resumed scan puts a new file in place of the old one: the lock must be on the
            # file that the name stands for now, not on one it stood for when we opened it.
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(path))
            except FileNotFoundError:
                same = False
        except BaseException:
            os.close(fd)
            raise
        if same:
            return fd, True
        os.close(fd)
    raise OutputError(f"cannot lock {path}: it keeps being replaced")


def _lock(fd: int) -> bool:
    """Exclusive lock, without waiting. False when another process holds it."""
    try:
        import fcntl
    except ImportError:   # no flock on this platform: unlocked
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError:   # a file system without locks (ENOLCK, EOPNOTSUPP): go on unlocked
        return True
    return True


def _jsonl_units(fh) -> Iterator[_Unit]:
    pos = 0
    for line in fh:
        start, pos = pos, pos + len(line)
        if not line.endswith(b"\n"):
            return   # the unfinished last line of a killed scan, however long
        try:
            rec = json.loads(line)
        except ValueError:
            rec = None
        if isinstance(rec, dict) and isinstance(rec.get("path"), str) and _hashable(key(rec)):
            yield _Unit(start, pos, "record", rec["path"], key(rec), bool(rec.get("error")))
        else:
            yield _Unit(start, pos, "other")


def _hashable(k: tuple) -> bool:
    """A key is compared in sets: a hand-edited line with a list for a size is no record."""
    return all(v is None or isinstance(v, (str, int, float)) for v in k)


def _csv_units(fh, size: int, path: str) -> Iterator[_Unit]:
    """Rows by byte span: the reader pulls exactly the lines of each row (a quoted name
    may hold a newline), so the end of the last line pulled is the end of the row."""
    pos = 0
    whole = True   # the last line pulled ends with a newline

    def lines() -> Iterator[str]:
        nonlocal pos, whole
        for raw in fh:
            pos += len(raw)
            whole = raw.endswith(b"\n")
            yield raw.decode("utf-8", "surrogateescape")

    header: Optional[list] = None
    start = 0
    allow_long_csv_fields()
    rows = csv.reader(lines(), strict=True)
    while True:
        try:
            row = next(rows)
        except StopIteration:
            return
        except csv.Error:
            if pos >= size:
                return   # a row cut short at the end of the file: the unfinished last record
            raise OutputError(f"cannot resume {path}: damaged CSV row at byte {start}") from None
        if not whole:
            return       # the file ends inside this row: unfinished
        if header is None:
            header = row
            yield _Unit(start, pos, "header")
        else:
            rec = csv_record(dict(zip(header, row)))
            yield (_Unit(start, pos, "record", rec["path"], key(rec), bool(rec.get("error")))
                   if rec is not None else _Unit(start, pos, "other"))
        start = pos


def _spans(units: list[_Unit]) -> Iterator[tuple[int, int]]:
    """Byte ranges to copy, neighbours joined."""
    start = end = None
    for u in units:
        if start is not None and u.start == end:
            end = u.end
            continue
        if start is not None:
            yield start, end
        start, end = u.start, u.end
    if start is not None:
        yield start, end


def _copy(src: int, dst: int, start: int, end: int) -> None:
    while start < end:
        chunk = os.pread(src, min(1 << 20, end - start), start)
        if not chunk:
            raise OutputError("the results file shrank while it was being read")
        view = memoryview(chunk)
        while view:
            view = view[os.write(dst, view):]
        start += len(chunk)


def _reason(exc: OSError) -> str:
    if isinstance(exc, PermissionError):
        return "permission denied"
    return (exc.strerror or str(exc) or type(exc).__name__).splitlines()[0]
