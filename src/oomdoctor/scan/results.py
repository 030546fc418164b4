"""The ``--out`` file of a scan: locked while the scan writes it, made ready for ``--resume``.

Two scans into one file would each write from offsets of their own, over each other's
records; so the file is locked (``flock``, exclusive, non-blocking) before anything in it
is read or changed, and a second scan stops at once with a one-line error.

On ``--resume`` the file must end with one record per log, whatever happened to it: the
unfinished last record of a killed scan goes (however long it is), and so does every
record the scan is about to write again (a log whose record was an error is tried again;
a log changed since it was scanned is scanned again), and any earlier record of a path
that has a later one. A file that holds lines that are no record (another file, the other
format, a hand edit) is refused before anything in it changes.

``--out`` may be an fsspec URL (``results_file``): ``file://`` is the local file it names;
any other is written through fsspec as one stream, committed only when the scan ends whole
(object stores neither append nor lock; an interrupted scan leaves the URL as it was), and
resumed by reading it back whole.
"""
from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import stat
import tempfile
from typing import IO, Callable, Iterable, Iterator, NamedTuple, Optional

from ..read.pull import first_line
from ..read.reader import InputError, resolve_path
from .records import (
    PARTIAL_RECORD,
    allow_long_csv_fields,
    csv_record,
    is_csv_header,
    key,
    record_problem,
)
from .sources import MEMBER_SEP


class OutputError(InputError):
    """The --out file cannot be used; the message is one line for the user (exit code 2).
    An ``InputError``, so that one raised while records are written (a URL whose upload
    fails) is still one line, never an internal error."""


class _Unit(NamedTuple):
    """One whole line (JSONL) or row (CSV) of a results file, by its byte span."""

    start: int
    end: int
    kind: str                    # "record" | "header" (CSV) | "blank" | "other" (not a record: refused)
    path: Optional[str] = None
    key: tuple = ()
    error: bool = False


class _Resumable:
    """What both kinds of results file do for ``--resume`` with the whole lines (rows) of
    the earlier file, ``units``: which logs are done, and which records stay."""

    units: list[_Unit]

    def _last(self) -> dict:
        """Index of the last record of each path (the one that counts)."""
        return {u.path: i for i, u in enumerate(self.units) if u.kind == "record"}

    def done_keys(self) -> set:
        """Keys of the logs not to scan again: the last record of each path, unless an error."""
        return {self.units[i].key for i in self._last().values() if not self.units[i].error}

    def _staying(self, superseded: Callable[[str, tuple], bool]) -> list[_Unit]:
        """The lines that stay: ``superseded(path, key)`` says which records the scan is about
        to write again (an error tried again, a log changed since); earlier records of a path
        that has a later one go too."""
        last = self._last()
        return [u for i, u in enumerate(self.units)
                if u.kind != "record" or (last[u.path] == i and not superseded(u.path, u.key))]


class ResultsFile(_Resumable):
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
        self._stream: Optional[IO[str]] = None
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
        size = os.fstat(self.fd).st_size
        with open(self.fd, "rb", closefd=False) as fh:
            fh.seek(0)
            self.units = load_units(fh, size, self.path, self.fmt)
        self.complete = self.units[-1].end if self.units else 0

    def prepare_resume(self, superseded: Callable[[str, tuple], bool]) -> None:
        """Leave the whole records that stay (``_staying``)."""
        keep = self._staying(superseded)
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
        if self._stream is None:
            self._stream = open(self.fd, "a", encoding="utf-8", errors="surrogateescape", newline="",
                                closefd=False)
        return self._stream

    def close(self, commit: bool = True) -> None:
        """Flush the stream and let the file go (and its lock). A local file keeps every
        record written, whatever ``commit`` says: each was flushed as it was written, and
        ``--resume`` goes on from there."""
        stream, self._stream = self._stream, None
        try:
            if stream is not None:
                if commit:
                    stream.close()
                else:   # an exception is on its way: it is the one to report
                    with contextlib.suppress(Exception):
                        stream.close()
        finally:
            if self.fd >= 0:
                os.close(self.fd)   # releases the lock
                self.fd = -1


def results_file(out: str, fmt: str, resume: bool):
    """The ``--out`` of a scan: a ``ResultsFile`` for a path (or a ``file://`` URL), a
    ``UrlResultsFile`` for any other fsspec URL."""
    target, remote = resolve_path(out)
    return UrlResultsFile(target, fmt, resume) if remote else ResultsFile(target, fmt, resume)


class UrlResultsFile(_Resumable):
    """``--out URL`` through fsspec: what ``ResultsFile`` does for a path, without the lock
    (object stores have none) and without appending (they have none either): the records
    are written as one stream, complete when the scan ends; ``--resume`` reads the earlier
    records back whole, and writes the ones that stay first.

    Nothing is written before ``stream()``, and what is written is committed by
    ``close()`` only (an fsspec transaction: an object store completes the upload then):
    ``close(commit=False)``, for a scan that failed or was interrupted, discards it, and
    whatever the URL held before stays as it was."""

    regular = True

    def __init__(self, url: str, fmt: str, resume: bool):
        from ..read.remote import UrlError, url_fs
        self.path = url
        self.fmt = fmt
        self.units: list[_Unit] = []
        self.data = b""
        self._kept = b""
        self._wfs = None           # the file system the upload is a transaction of
        self._out = None           # the fsspec file, from stream() to close()
        self._raw: Optional[_Guarded] = None
        self._stream: Optional[IO[str]] = None
        try:
            self.fs, self.fspath = url_fs(url)
        except UrlError as exc:
            raise OutputError(f"cannot write {url}: {exc}") from None
        if resume:
            try:
                self.data = self.fs.cat_file(self.fspath)
            except FileNotFoundError:
                self.data = b""
            except Exception as exc:  # noqa: BLE001 - any backend error is one line
                raise OutputError(f"cannot resume {url}: {first_line(exc)}") from None
            self.units = load_units(io.BytesIO(self.data), len(self.data), url, fmt)
            self._kept = self.data[: self.units[-1].end] if self.units else b""
        else:
            self._check()

    def _check(self) -> None:
        """Refuse a directory before the scan starts (nothing is written)."""
        try:
            isdir = self.fs.isdir(self.fspath)
        except Exception as exc:  # noqa: BLE001 - a bucket, credentials
            raise OutputError(f"cannot write {self.path}: {first_line(exc)}") from None
        if isdir:
            raise OutputError(f"cannot write {self.path}: it is a directory")

    def _open(self) -> None:
        self._check()
        wfs = _private(self.fs)
        try:
            wfs.start_transaction()   # commit() completes the upload; discard() drops it
            try:
                self._out = wfs.open(self.fspath, "wb")
            except NotImplementedError:   # no deferred commit on this file system: written as it goes
                wfs.transaction.complete(commit=False)
                self._out = wfs.open(self.fspath, "wb")
            self._wfs = wfs if getattr(wfs, "_intrans", False) else None
        except BaseException as exc:
            _end_transaction(wfs)
            if isinstance(exc, OutputError):
                raise
            if isinstance(exc, Exception):   # a missing directory, a bucket, credentials
                raise OutputError(f"cannot write {self.path}: {first_line(exc)}") from None
            raise

    def prepare_resume(self, superseded: Callable[[str, tuple], bool]) -> None:
        keep = self._staying(superseded)
        self._kept = b"".join(self.data[a:b] for a, b in _spans(keep))
        self.units = keep
        self.data = b""

    @property
    def empty(self) -> bool:
        return not self._kept

    def stream(self) -> IO[str]:
        """The stream the records go to, the records that stay (``--resume``) first. The
        upload starts here: an ``OutputError`` when the URL cannot be written."""
        if self._stream is None:
            self._open()
            try:
                self._raw = _Guarded(self._out, self.path)
                if self._kept:
                    self._raw.write(self._kept)
                self._stream = io.TextIOWrapper(io.BufferedWriter(self._raw), encoding="utf-8",
                                                errors="surrogateescape", newline="")
            except BaseException:
                self.close(commit=False)
                raise
        return self._stream

    def close(self, commit: bool = True) -> None:
        """Commit the upload (``commit``), or discard it: a scan that failed or was
        interrupted leaves the URL as it was. Safe to call twice."""
        stream, self._stream = self._stream, None
        raw, self._raw = self._raw, None
        out, self._out = self._out, None
        wfs, self._wfs = self._wfs, None
        if out is None:
            return
        if not commit or stream is None:
            _discard(stream, raw, out, wfs)
            return
        try:
            stream.close()        # the last records, then the fsspec file (the last part uploaded)
            if wfs is not None:
                try:
                    wfs.end_transaction()   # an object store completes the upload here
                except Exception as exc:  # noqa: BLE001
                    raise OutputError(f"cannot write {self.path}: {first_line(exc)}") from None
        except BaseException:
            _discard(stream, raw, out, wfs)
            raise
        with contextlib.suppress(Exception):   # the shared instance reads it back (a resumed scan's summary)
            self.fs.invalidate_cache(self.fspath)
            self.fs.invalidate_cache(self.fs._parent(self.fspath))


def _private(fs):
    """An instance of the file system of its own (fsspec caches and shares them), so that
    its transaction holds the results file only; the shared one where none can be made."""
    try:
        return type(fs)(**getattr(fs, "storage_options", {}), skip_instance_cache=True)
    except Exception:  # noqa: BLE001 - a file system that takes positional arguments
        return fs


def _end_transaction(fs) -> None:
    if getattr(fs, "_intrans", False):
        with contextlib.suppress(Exception):
            fs.transaction.complete(commit=False)


def _discard(stream, raw, out, wfs) -> None:
    """Drop an upload: no error, nothing committed, nothing left to flush on the way out."""
    if raw is not None:
        raw.aborted = True      # what the stream still holds goes nowhere
    if stream is not None:
        with contextlib.suppress(Exception):
            stream.close()
    with contextlib.suppress(Exception):
        out.discard()           # s3fs: the multipart upload is aborted
    if wfs is not None:
        _end_transaction(wfs)
    try:
        from fsspec.spec import AbstractBufferedFile
    except ImportError:  # pragma: no cover - a URL was opened, so fsspec is there
        AbstractBufferedFile = ()  # type: ignore[assignment]  # noqa: N806
    if isinstance(out, AbstractBufferedFile):
        out.closed = True       # closing would upload the buffer (and, autocommitting, complete it)
    else:
        with contextlib.suppress(Exception):
            out.close()


class _Guarded(io.RawIOBase):
    """An fsspec file whose failures (an upload refused, a network error) are ``OutputError``;
    once ``aborted``, a sink (the upload is being discarded)."""

    def __init__(self, f, url: str):
        self._f = f
        self._url = url
        self.aborted = False

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:  # type: ignore[override]
        if self.aborted:
            return len(b)
        try:
            self._f.write(bytes(b))
        except Exception as exc:  # noqa: BLE001
            raise OutputError(f"cannot write {self._url}: {first_line(exc)}") from None
        return len(b)

    def flush(self) -> None:
        if self.closed or self.aborted or getattr(self._f, "closed", False):
            return
        try:
            self._f.flush()
        except Exception as exc:  # noqa: BLE001
            raise OutputError(f"cannot write {self._url}: {first_line(exc)}") from None

    def close(self) -> None:
        if self.closed:
            return
        try:
            if not self.aborted:
                self._f.close()   # the last part uploaded (committed by the transaction's end)
        except Exception as exc:  # noqa: BLE001
            raise OutputError(f"cannot write {self._url}: {first_line(exc)}") from None
        finally:
            super().close()


def load_units(fh, size: int, path: str, fmt: str) -> list[_Unit]:
    """The whole lines (rows) of a results file that ``--resume`` may go on with, or an
    ``OutputError`` that leaves it untouched: a file of the other format, a file with no scan
    record in it (notes, a report of ``diagnose``), a line that is no record. Only the
    unfinished last line of a killed scan is let go (cut off by ``prepare_resume``)."""
    head = fh.read(64)
    fh.seek(0)
    found = "csv" if is_csv_header(head.decode("utf-8", "replace")) else "jsonl"
    units = list(_csv_units(fh, size, path) if found == "csv" else _jsonl_units(fh))
    if not any(u.kind in ("record", "header") for u in units):
        if size and not (found == "csv" or (not units and PARTIAL_RECORD.match(head.decode("utf-8", "replace")))):
            # notes, a report, any text: only a first record cut short by a killed scan may go
            raise OutputError(f"{path} holds no scan records: --resume goes with the --out of an earlier scan")
        if not units:
            return units
    if found != fmt:
        raise OutputError(f"{path} holds {found.upper()} records: resume it with --format {found}")
    complete = units[-1].end if units else 0
    if found == "jsonl" and size > complete:
        fh.seek(complete)
        if not PARTIAL_RECORD.match(fh.read(64).decode("utf-8", "replace")):
            units.append(_Unit(complete, size, "other"))   # an unfinished line, but of no record
    for no, u in enumerate(units, 1):
        if u.kind == "other":
            where = f"{path}:{no}" if found == "jsonl" else f"{path} (row {no - 1})"
            raise OutputError(f"cannot resume {where}: a line that is no scan record (remove it, or write "
                              "to another --out)")
    return units


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
        if not line.strip():
            yield _Unit(start, pos, "blank")
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            rec = None
        if isinstance(rec, dict) and isinstance(rec.get("path"), str) and record_problem(rec) is None:
            yield _Unit(start, pos, "record", rec["path"], key(rec), bool(rec.get("error")))
        else:
            yield _Unit(start, pos, "other")


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
