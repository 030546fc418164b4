"""What a scan reads: paths, directories, globs, archives and URLs turned into tasks.

Enumeration happens up front, in the calling process, in a fixed order (arguments in the
order given, directory entries sorted by name, tar members in archive order), so the
output order does not depend on how many workers there are. A task is small and
picklable: a worker process or a Dask worker opens it itself.

A task is one log file, one tar archive (its members are read in sequence, as streams,
never extracted to disk), or an error found while enumerating (a symlink loop, an
unreadable directory, a glob that matches nothing), which becomes an error record.
"""
from __future__ import annotations

import fnmatch
import glob as globmod
import os
import stat
from dataclasses import dataclass, field
from typing import BinaryIO, Iterable, Iterator, Optional, Sequence

from ..read.pull import first_line
from ..read.remote import is_url

TAR_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz", ".tar.zst", ".tzst")
MEMBER_SEP = "!/"   # "logs.tar.gz!/job-1/rank0.log" names a member of an archive


@dataclass(frozen=True)
class Task:
    """One unit of work: a log, an archive of logs, or an enumeration error."""

    kind: str                      # "file" | "tar" | "error"
    path: str                      # what records call it: a path or a URL
    size: Optional[int] = None     # bytes on disk (compressed size for compressed files)
    mtime: Optional[float] = None
    error: Optional[str] = None
    url: bool = False              # opened through fsspec
    include: tuple[str, ...] = ()  # member filters of an archive
    exclude: tuple[str, ...] = ()
    done: frozenset = field(default_factory=frozenset)  # (path, size, mtime) of members to skip (resume)


def is_tar(name: str) -> bool:
    low = name.lower()
    return low.endswith(TAR_SUFFIXES)


def has_magic(path: str) -> bool:
    return globmod.has_magic(path)


def wanted(relpath: str, include: Sequence[str], exclude: Sequence[str]) -> bool:
    """--include/--exclude: a glob matches the path below the scanned root or the file name."""
    rel = relpath.replace(os.sep, "/").lstrip("/")
    base = rel.rsplit("/", 1)[-1]

    def hit(patterns: Sequence[str]) -> bool:
        return any(fnmatch.fnmatchcase(rel, p) or fnmatch.fnmatchcase(base, p) for p in patterns)

    if include and not hit(include):
        return False
    return not (exclude and hit(exclude))


def enumerate_tasks(paths: Iterable[str], include: Sequence[str] = (), exclude: Sequence[str] = (),
                    done: Optional[set] = None) -> Iterator[Task]:
    """Tasks for the given paths, in a deterministic order; ``done`` keys are skipped (resume)."""
    include, exclude = tuple(include), tuple(exclude)
    done = done or set()
    for arg in paths:
        arg = os.fspath(arg)
        if is_url(arg):
            yield from _url_tasks(arg, include, exclude, done)
        elif not os.path.lexists(arg) and has_magic(arg):
            matches = sorted(globmod.glob(arg, recursive=True))
            if not matches:
                yield Task("error", arg, error="no file matches this pattern")
            for m in matches:
                if os.path.isdir(m):
                    yield from _walk(m, include, exclude, done)
                elif wanted(m, include, exclude):
                    yield from _file_task(m, include, exclude, done)
        elif os.path.isdir(arg):
            yield from _walk(arg, include, exclude, done)
        else:
            yield from _file_task(arg, include, exclude, done)


def _file_task(path: str, include, exclude, done) -> Iterator[Task]:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        yield Task("error", path, error="broken symbolic link" if os.path.islink(path) else "no such file")
        return
    except PermissionError:
        yield Task("error", path, error="permission denied")
        return
    except OSError as exc:
        yield Task("error", path, error=_oserror(exc))
        return
    if not stat.S_ISREG(st.st_mode):
        yield Task("error", path, size=None, error="not a regular file")
        return
    if is_tar(path):
        members_done = frozenset(k for k in done if k[0].startswith(path + MEMBER_SEP))
        yield Task("tar", path, st.st_size, st.st_mtime, include=include, exclude=exclude, done=members_done)
        return
    if (path, st.st_size, st.st_mtime) in done:
        return
    yield Task("file", path, st.st_size, st.st_mtime)


def _walk(root: str, include, exclude, done) -> Iterator[Task]:
    """Depth first in name order (files and directories alike), following symlinked
    directories but never around a loop."""
    try:
        st = os.stat(root)
    except OSError as exc:
        yield Task("error", root, error=_oserror(exc))
        return
    stack = [(_listing(root), ((st.st_dev, st.st_ino),))]
    while stack:
        entries, ancestors = stack[-1]
        entry = next(entries, None)
        if entry is None:
            stack.pop()
            continue
        if isinstance(entry, Task):   # the directory could not be listed
            yield entry
            continue
        path = entry.path
        try:
            is_dir = entry.is_dir(follow_symlinks=True)
        except OSError:
            is_dir = False
        if is_dir:
            try:
                dst = os.stat(path)
            except OSError as exc:
                yield Task("error", path, error=_oserror(exc))
                continue
            key = (dst.st_dev, dst.st_ino)
            if key in ancestors:
                yield Task("error", path, error="symbolic link loop (directory already being scanned)")
                continue
            stack.append((_listing(path), ancestors + (key,)))
            continue
        if wanted(os.path.relpath(path, root), include, exclude):
            yield from _file_task(path, include, exclude, done)


def _listing(d: str) -> Iterator:
    """Entries of a directory in name order, or one error task."""
    try:
        with os.scandir(d) as it:
            entries = sorted(it, key=lambda e: e.name)
    except PermissionError:
        return iter([Task("error", d, error="permission denied (directory)")])
    except OSError as exc:
        return iter([Task("error", d, error=_oserror(exc))])
    return iter(entries)


def _oserror(exc: OSError) -> str:
    if isinstance(exc, PermissionError):
        return "permission denied"
    if exc.errno == 40:  # ELOOP
        return "symbolic link loop"
    return (exc.strerror or str(exc) or type(exc).__name__).splitlines()[0]


# -- fsspec URLs ---------------------------------------------------------------------------

def _url_tasks(url: str, include, exclude, done) -> Iterator[Task]:
    try:
        import fsspec  # noqa: F401  (the error below names the missing package)
        from fsspec.core import url_to_fs
    except ImportError:
        yield Task("error", url, error="URLs need the 'fsspec' package (pip install 'oomdoctor[cloud]')")
        return
    try:
        fs, root = url_to_fs(url)
    except (ImportError, ValueError) as exc:  # e.g. s3:// without s3fs
        yield Task("error", url, error=f"cannot open this URL ({first_line(exc)})")
        return
    proto = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]

    def full(p: str) -> str:
        return fs.unstrip_protocol(p) if hasattr(fs, "unstrip_protocol") else f"{proto}://{p}"

    try:
        if has_magic(root):
            infos = sorted(fs.glob(root, detail=True).items())
            if not infos:
                yield Task("error", url, error="no file matches this pattern")
        elif fs.isdir(root):
            infos = sorted(fs.find(root, withdirs=False, detail=True).items())
        else:
            infos = [(root, fs.info(root))]
    except FileNotFoundError:
        yield Task("error", url, error="no such file")
        return
    except Exception as exc:  # noqa: BLE001 - any backend error becomes an error record
        yield Task("error", url, error=f"cannot list ({first_line(exc)})")
        return
    base = root.rstrip("/")
    for p, info in infos:
        if info.get("type") == "directory":
            continue
        rel = p[len(base):].lstrip("/") if p.startswith(base) else p
        if rel and not wanted(rel, include, exclude):
            continue
        size = info.get("size")
        mtime = _mtime(info)
        name = full(p)
        if is_tar(p):
            members_done = frozenset(k for k in done if k[0].startswith(name + MEMBER_SEP))
            yield Task("tar", name, size, mtime, url=True, include=include, exclude=exclude, done=members_done)
        elif (name, size, mtime) not in done:
            yield Task("file", name, size, mtime, url=True)


def _mtime(info: dict) -> Optional[float]:
    for key in ("mtime", "LastModified", "last_modified", "updated", "created"):
        v = info.get(key)
        if v is None:
            continue
        if isinstance(v, (int, float)):
            return float(v)
        ts = getattr(v, "timestamp", None)
        if callable(ts):
            return float(ts())
    return None


def open_task(task: Task) -> BinaryIO:
    """Open the raw (still compressed) bytes of a file or archive task."""
    if task.url:
        import fsspec
        return fsspec.open(task.path, "rb").open()
    return open(task.path, "rb", buffering=0)
