"""An on-disk cache of the work every start repeats: compiled patterns and parsed KB files.

A pasted log pays, before its first line is read, for the ``regex`` module compiling each
pattern the log needs in Python (about 0.3 ms apiece, 80 to 120 patterns for a long log)
and for PyYAML building the knowledge files' data in Python. Both are pure functions of
text that rarely changes, so their results are kept between runs:

- a compiled pattern is kept as what ``regex`` itself pickles it to (its compiled code:
  ints, strings and dicts) and rebuilt by the call its unpickler makes, which skips the
  Python parser: about 0.01 ms instead of 0.3;
- a knowledge file is kept as the plain data its YAML holds, keyed by a digest of its text,
  and validated again by the KB's models each time it is used (only the YAML step is saved);
- the catastrophic-backtracking verdict of each KB pattern, keyed by the pattern and by the
  code that judged it;
- the literal sets the parsers ask the native literal index about, so that it answers the
  first log of a process in one pass (``read.literal_index``), and the Hyperscan database
  compiled from them, as Hyperscan serialises it (compiling ~400 literals takes about 60 ms,
  loading them back a few microseconds; Hyperscan refuses a database built for another CPU).

The store is one ``marshal`` file in the user's cache directory (``OOMDOCTOR_CACHE_DIR``,
else ``$XDG_CACHE_HOME/oomdoctor``, ``~/.cache/oomdoctor``, ``~/Library/Caches/oomdoctor``
on macOS, ``%LOCALAPPDATA%\\oomdoctor\\Cache`` on Windows; ``OOMDOCTOR_CACHE=off`` turns it
off), named by the versions its contents depend on. It must be trusted as the interpreter's
own byte-code caches are: compiled code is handed to ``regex``'s C compiler, which does not
check it (Hyperscan checks a database's version, platform and checksum, not what it holds).
So the file is read only when the current user owns it and no one else may write it
(POSIX), and only whole: it carries a digest of its contents, and a file that a crash, a
full disk or a flipped bit changed is ignored and replaced. Anything wrong with it costs only
the work it would have saved. Only the command-line program writes it (at exit, merged with
what another process wrote meanwhile); a library caller reads it but never writes it, so a
training job that imports oomdoctor writes nothing to the user's home directory.
"""
from __future__ import annotations

import atexit
import hashlib
import marshal
import os
import stat
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Optional

import regex
import yaml

try:   # the constructor regex's own unpickler calls (see regex._main._pickle)
    from regex import _regex as _native
except ImportError:   # pragma: no cover - every regex release has it
    _native = None

FORMAT = 2
# a bound on what the file may hold: the shipped patterns and KB number about 600, and a
# team's KB directories add theirs; at the bound a save keeps what the process used
MAX_ENTRIES = 20_000
MAX_BYTES = 64 << 20
_DIGEST = 32   # bytes of blake2b at the head of the file, over the rest of it
_STALE_TEMP = 3600   # seconds after which a save's leftover temporary file is removed

# store name -> {key: value}; "patterns": (pattern, flags) -> pickled data;
# "kb": digest -> YAML data (marshal bytes); "safety": (judge's digest, pattern) -> verdict
# (None: safe); "literals": a literal set the parsers asked the literal index about -> True;
# "native": (library and version, digest of what was compiled) -> the library's serialised form
_STORES = ("patterns", "kb", "safety", "literals", "native")


def enabled() -> bool:
    return (os.environ.get("OOMDOCTOR_CACHE", "").strip().lower() not in ("off", "0", "no", "false")
            and cache_dir() is not None)


def cache_dir() -> Optional[Path]:
    """Where the cache lives; None when there is no such place (no home directory)."""
    env = os.environ.get("OOMDOCTOR_CACHE_DIR")
    if env:
        return Path(env)
    try:
        if sys.platform == "win32":
            base = os.environ.get("LOCALAPPDATA")   # per user: no one else's to write
            return Path(base) / "oomdoctor" / "Cache" if base else None
        xdg = os.environ.get("XDG_CACHE_HOME")
        if xdg:
            return Path(xdg) / "oomdoctor"
        if sys.platform == "darwin":
            return Path.home() / "Library" / "Caches" / "oomdoctor"
        return Path.home() / ".cache" / "oomdoctor"
    except (RuntimeError, KeyError, OSError):   # no HOME and no passwd entry (cron, containers)
        return None


def cache_file() -> Optional[Path]:
    folder = cache_dir()
    if folder is None:
        return None
    tag = sys.implementation.cache_tag or "py"
    return folder / f"startup-{FORMAT}-regex{regex.__version__}-yaml{yaml.__version__}-{tag}.marshal"


class _Cache:
    """The file's entries (read on first use), the ones this process added, the keys it used
    from the file and the ones it found wrong there."""

    def __init__(self) -> None:
        self.loaded: Optional[dict[str, dict]] = None
        self.new: dict[str, dict] = {name: {} for name in _STORES}
        self.used: dict[str, set] = {name: set() for name in _STORES}
        self.rejected: dict[str, set] = {name: set() for name in _STORES}
        self.dropped: dict[str, set] = {name: set() for name in _STORES}   # entries a save removes
        self.compiled: dict[tuple[str, int], Any] = {}

    def store(self, name: str) -> dict:
        if self.loaded is None:
            try:
                path = cache_file() if enabled() else None
                self.loaded = _read(path) if path is not None else {}
            except Exception:   # noqa: BLE001 - a cache is never worth a failure
                self.loaded = {}
        return self.loaded.setdefault(name, {})

    def add(self, name: str, key: Any, value: Any) -> None:
        if not enabled():
            return
        self.new[name][key] = value
        self.store(name)[key] = value

    def save(self) -> None:
        """Merge this process's new entries into the file (another process may have written
        it since it was read) and replace it atomically. Never raises."""
        try:
            self._save()
        except Exception:   # noqa: BLE001 - a cache that cannot be written costs only time
            pass

    def _save(self) -> None:
        if not any(self.new.values()) or not enabled():
            return
        path = cache_file()
        if path is None:
            return
        merged = _read(path)
        changed = False
        total = sum(len(v) for v in merged.values())
        if total + sum(len(v) for v in self.new.values()) > MAX_ENTRIES:
            # full: keep what this process used and what it adds, drop the rest (entries
            # for patterns and files that no longer exist, sets older code asked about)
            merged = {name: {k: v for k, v in list(merged.get(name, {}).items()) if k in self.used[name]}
                      for name in _STORES}
            total, changed = sum(len(v) for v in merged.values()), True
        for name, keys in self.dropped.items():
            for key in keys:
                if merged.get(name, {}).pop(key, None) is not None:
                    total, changed = total - 1, True
        for name, entries in self.new.items():
            into = merged.setdefault(name, {})
            for key, value in list(entries.items()):
                # an entry this process found wrong in the file is replaced, not kept
                if (key not in into or key in self.rejected[name]) and total < MAX_ENTRIES:
                    total += key not in into
                    into[key] = value
                    changed = True
        if not changed:
            return
        body = marshal.dumps({"format": FORMAT, "stores": merged})
        if len(body) + _DIGEST > MAX_BYTES:
            return
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        _remove_stale_temps(path.parent)
        fd, tmp = tempfile.mkstemp(prefix=".startup-", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(hashlib.blake2b(body, digest_size=_DIGEST).digest() + body)
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        for entries in self.new.values():
            entries.clear()
        for keys in self.dropped.values():
            keys.clear()


def _remove_stale_temps(folder: Path) -> None:
    """Temporary files of saves that a killed process left behind."""
    now = time.time()
    for leftover in folder.glob(".startup-*"):
        try:
            if now - leftover.stat().st_mtime > _STALE_TEMP:
                leftover.unlink()
        except OSError:
            pass


def _trusted(st: os.stat_result) -> bool:
    """Ours, a plain file, and writable by no one else (POSIX; on Windows the folder is the
    user's own profile)."""
    if not stat.S_ISREG(st.st_mode):
        return False
    if hasattr(os, "getuid"):
        return st.st_uid == os.getuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    return True


def _read(path: Path) -> dict[str, dict]:
    """The file's stores, or empty ones when it is missing, foreign, too big, changed since it
    was written (its digest), or not what this version writes."""
    try:
        # (not blocking on a FIFO someone put there: its type is checked before any read)
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except OSError:
        return {}
    try:
        with os.fdopen(fd, "rb") as fh:
            st = os.fstat(fh.fileno())
            if not _trusted(st) or st.st_size > MAX_BYTES:
                return {}
            blob = fh.read(MAX_BYTES + 1)
        digest, body = blob[:_DIGEST], blob[_DIGEST:]
        if len(digest) != _DIGEST or hashlib.blake2b(body, digest_size=_DIGEST).digest() != digest:
            return {}
        data = marshal.loads(body)
    except (OSError, EOFError, ValueError, TypeError):
        return {}
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("stores"), dict):
        return {}
    return {name: dict(store) for name, store in data["stores"].items()
            if name in _STORES and isinstance(store, dict)}


_CACHE = _Cache()
_WRITES = False


def write_at_exit() -> None:
    """Have this process write its new entries when it exits: the command-line program's
    choice (a library caller's process only reads the cache)."""
    global _WRITES
    if not _WRITES:
        _WRITES = True
        atexit.register(save)


def compile_pattern(pattern: str, flags: int = 0) -> "regex.Pattern":
    """``regex.compile(pattern, flags)``, rebuilt from the cached compiled code when the
    cache has it (and kept for the rest of the process either way)."""
    key = (pattern, int(flags))   # a RegexFlag is an int that marshal does not keep
    got = _CACHE.compiled.get(key)
    if got is not None:
        return got
    # (a process that made VERSION1 the default compiles another language: no cache)
    usable = enabled() and _native is not None and regex.DEFAULT_VERSION == regex.VERSION0
    data = _CACHE.store("patterns").get(key) if usable else None
    if data is not None:
        try:
            got = _native.compile(*data)
            if got.pattern != pattern:
                got = None
        except Exception:   # noqa: BLE001 - an entry that is not this pattern's code
            got = None
        if got is None:
            _CACHE.rejected["patterns"].add(key)
        else:
            _CACHE.used["patterns"].add(key)
    if got is None:
        got = regex.compile(pattern, flags)
        pickled = getattr(got, "_pickled_data", None)
        if usable and pickled is not None:
            _CACHE.add("patterns", key, pickled)
    _CACHE.compiled[key] = got
    return got


_FILE_DIGESTS: dict[str, str] = {}


def file_digest(path: str) -> str:
    """A digest of a source file's bytes (once a process): what a verdict depends on."""
    got = _FILE_DIGESTS.get(path)
    if got is None:
        try:
            got = hashlib.blake2b(Path(path).read_bytes(), digest_size=8).hexdigest()
        except OSError:
            got = "unknown"
        _FILE_DIGESTS[path] = got
    return got


def verdict(pattern: str, judge: Callable[[str], Optional[str]], version: str) -> Optional[str]:
    """``judge(pattern)`` (a KB pattern's backtracking risk: None or the reason), cached under
    ``version``, the judging code's own (a change to it judges every pattern again)."""
    key = (version, pattern)
    store = _CACHE.store("safety") if enabled() else {}
    if key in store:
        got = store[key]
        if got is None or isinstance(got, str):
            _CACHE.used["safety"].add(key)
            return got
        _CACHE.rejected["safety"].add(key)
    got = judge(pattern)
    _CACHE.add("safety", key, got)
    return got


def yaml_data(text: str, parse: Callable[[str], Any]) -> Any:
    """``parse(text)`` for a knowledge file's text, from the cache when it holds that text's
    data. Only plain data (what ``marshal`` keeps) is cached; the caller validates it."""
    if not enabled():
        return parse(text)
    key = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=20).hexdigest()
    kept = _CACHE.store("kb").get(key)
    if isinstance(kept, bytes):
        try:   # kept as marshal bytes: each use gets its own copy to build on
            data = marshal.loads(kept)
            _CACHE.used["kb"].add(key)
            return data
        except (EOFError, ValueError, TypeError):
            _CACHE.rejected["kb"].add(key)
    data = parse(text)
    try:
        kept = marshal.dumps(data)   # only plain values: a YAML date or set is not cached
    except ValueError:
        return data
    _CACHE.add("kb", key, kept)
    return data


def literal_sets() -> list[tuple[tuple[str, ...], bool]]:
    """The literal sets earlier runs asked ``ParseContext.lines_with`` about (well-formed
    ones only), for the literal index to compile before the first log."""
    if not enabled():
        return []
    out = []
    for key in list(_CACHE.store("literals")):
        if (isinstance(key, tuple) and len(key) == 2 and isinstance(key[1], bool) and isinstance(key[0], tuple)
                and key[0] and all(isinstance(w, str) and w for w in key[0])):
            out.append(key)
    return out


def remember_literal_set(key: tuple[tuple[str, ...], bool]) -> None:
    if enabled():
        _CACHE.used["literals"].add(key)
        if key not in _CACHE.store("literals"):
            _CACHE.add("literals", key, True)


def native_database(key: tuple[str, str], build: Callable[[], Any], dump: Callable[[Any], bytes],
                    load: Callable[[bytes], Any]) -> Any:
    """``build()`` (a native library's compiled database), loaded from its serialised form
    when the cache holds it under ``key`` (the library and its version, and a digest of the
    database's input). An entry the library refuses (another CPU, another build) is built
    again and replaced."""
    kept = _CACHE.store("native").get(key) if enabled() else None
    if isinstance(kept, bytes):
        try:
            got = load(kept)
            _CACHE.used["native"].add(key)
            return got
        except Exception:   # noqa: BLE001 - an entry the library will not take
            _CACHE.rejected["native"].add(key)
    got = build()
    if enabled():
        try:
            data = bytes(dump(got))
        except Exception:   # noqa: BLE001 - a database that cannot be serialised is not kept
            return got
        # one database per library: the literal sets grow as parsers ask about new ones, and
        # the database of the sets before is of no more use (some 100 KB each)
        store = _CACHE.store("native")
        library = key[0].split("-", 1)[0]   # (its other releases' databases too)
        for old in [k for k in store if k != key and isinstance(k, tuple) and k and isinstance(k[0], str)
                    and k[0].split("-", 1)[0] == library]:
            del store[old]
            _CACHE.new["native"].pop(old, None)
            _CACHE.dropped["native"].add(old)
        _CACHE.add("native", key, data)
    return got


def save() -> None:
    """Write the new entries now (the program's exit hook; tests)."""
    _CACHE.save()


def reset() -> None:
    """Forget what this process read and compiled (tests that change the cache's place)."""
    global _CACHE
    _CACHE = _Cache()
