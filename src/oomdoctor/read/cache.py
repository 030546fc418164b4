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
- the catastrophic-backtracking verdict of each KB pattern, keyed by the pattern;
- the literal sets the parsers ask the native literal index about, so that it answers the
  first log of a process in one pass (``read.literal_index``).

The store is one ``marshal`` file per ``regex`` version and Python, in the user's cache
directory (``OOMDOCTOR_CACHE_DIR``, else ``$XDG_CACHE_HOME/oomdoctor`` or
``~/.cache/oomdoctor``; ``OOMDOCTOR_CACHE=off`` turns it off). ``marshal`` builds plain
values only (never runs code, unlike pickle), and the file is used only when the current
user owns it and no one else may write it. Anything wrong with it (missing, unreadable,
corrupt, from another version) costs only the work it would have saved: every entry is
checked as it is used, and new entries are written back, merged with what another
process wrote meanwhile, when the process exits.
"""
from __future__ import annotations

import atexit
import hashlib
import marshal
import os
import stat
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Optional

import regex

try:   # the constructor regex's own unpickler calls (see regex._main._pickle)
    from regex import _regex as _native
except ImportError:   # pragma: no cover - every regex release has it
    _native = None

FORMAT = 1
# a bound on what the file may hold: the shipped patterns and KB number about 600, and a
# team's KB directories add theirs
MAX_ENTRIES = 20_000
MAX_BYTES = 64 << 20

# store name -> {key: value}; "patterns": (pattern, flags) -> pickled data;
# "kb": digest -> YAML data (marshal bytes); "safety": pattern -> verdict (None: safe);
# "literals": a literal set the parsers asked the literal index about -> True
_STORES = ("patterns", "kb", "safety", "literals")


def enabled() -> bool:
    return os.environ.get("OOMDOCTOR_CACHE", "").strip().lower() not in ("off", "0", "no", "false")


def cache_dir() -> Path:
    env = os.environ.get("OOMDOCTOR_CACHE_DIR")
    if env:
        return Path(env)
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA")
        return Path(base) / "oomdoctor" / "Cache" if base else Path.home() / ".oomdoctor-cache"
    base = os.environ.get("XDG_CACHE_HOME")
    return (Path(base) if base else Path.home() / ".cache") / "oomdoctor"


def cache_file() -> Path:
    tag = sys.implementation.cache_tag or "py"
    return cache_dir() / f"startup-{FORMAT}-regex{regex.__version__}-{tag}.marshal"


class _Cache:
    """The file's entries (read on first use) and the ones this process added."""

    def __init__(self) -> None:
        self.loaded: Optional[dict[str, dict]] = None
        self.new: dict[str, dict] = {name: {} for name in _STORES}
        self.compiled: dict[tuple[str, int], Any] = {}

    def store(self, name: str) -> dict:
        if self.loaded is None:
            self.loaded = _read(cache_file()) if enabled() else {}
        return self.loaded.setdefault(name, {})

    def add(self, name: str, key: Any, value: Any) -> None:
        if not enabled():
            return
        self.new[name][key] = value
        self.store(name)[key] = value
        global _HOOKED
        if not _HOOKED:
            _HOOKED = True
            atexit.register(save)

    def save(self) -> None:
        """Merge this process's new entries into the file (another process may have written
        it since it was read) and replace it atomically. Never raises."""
        if not any(self.new.values()) or not enabled():
            return
        path = cache_file()
        try:
            merged = _read(path)
            total = sum(len(v) for v in merged.values())
            for name, entries in self.new.items():
                into = merged.setdefault(name, {})
                for key, value in entries.items():
                    if key not in into and total < MAX_ENTRIES:
                        into[key] = value
                        total += 1
            blob = marshal.dumps({"format": FORMAT, "stores": merged})
            if len(blob) > MAX_BYTES:
                return
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd, tmp = tempfile.mkstemp(prefix=".startup-", dir=path.parent)
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(blob)
                os.replace(tmp, path)
            except BaseException:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
                raise
            for entries in self.new.values():
                entries.clear()
        except (OSError, ValueError, TypeError, RecursionError):
            pass   # a cache that cannot be written costs only the next start's time


def _trusted(st: os.stat_result) -> bool:
    """Ours, a plain file, and writable by no one else (POSIX; Windows has no such bits)."""
    if not stat.S_ISREG(st.st_mode):
        return False
    if hasattr(os, "getuid"):
        return st.st_uid == os.getuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    return True


def _read(path: Path) -> dict[str, dict]:
    """The file's stores, or empty ones when it is missing, foreign, too big or corrupt."""
    try:
        with open(path, "rb") as fh:
            st = os.fstat(fh.fileno())
            if not _trusted(st) or st.st_size > MAX_BYTES:
                return {}
            data = marshal.loads(fh.read())
    except (OSError, EOFError, ValueError, TypeError):
        return {}
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("stores"), dict):
        return {}
    return {name: dict(store) for name, store in data["stores"].items()
            if name in _STORES and isinstance(store, dict)}


_CACHE = _Cache()
_HOOKED = False


def compile_pattern(pattern: str, flags: int = 0) -> "regex.Pattern":
    """``regex.compile(pattern, flags)``, rebuilt from the cached compiled code when the
    cache has it (and kept for the rest of the process either way)."""
    key = (pattern, int(flags))   # a RegexFlag is an int that marshal does not keep
    got = _CACHE.compiled.get(key)
    if got is not None:
        return got
    data = _CACHE.store("patterns").get(key) if enabled() else None
    if data is not None and _native is not None:
        try:
            got = _native.compile(*data)
            if got.pattern != pattern:
                got = None
        except Exception:   # an entry from a damaged file: compile instead
            got = None
    if got is None:
        got = regex.compile(pattern, flags)
        pickled = getattr(got, "_pickled_data", None)
        if pickled is not None and _native is not None:
            _CACHE.add("patterns", key, pickled)
    _CACHE.compiled[key] = got
    return got


def verdict(pattern: str, judge: Callable[[str], Optional[str]]) -> Optional[str]:
    """``judge(pattern)`` (a KB pattern's backtracking risk: None or the reason), cached."""
    store = _CACHE.store("safety") if enabled() else {}
    if pattern in store:
        got = store[pattern]
        if got is None or isinstance(got, str):
            return got
    got = judge(pattern)
    _CACHE.add("safety", pattern, got)
    return got


def yaml_data(text: str, parse: Callable[[str], Any]) -> Any:
    """``parse(text)`` for a knowledge file's text, from the cache when it holds that text's
    data. Only plain data (what ``marshal`` keeps) is cached; the caller validates it."""
    if not enabled():
        return parse(text)
    key = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=20).hexdigest()
    store = _CACHE.store("kb")
    kept = store.get(key)
    if isinstance(kept, bytes):
        try:   # kept as marshal bytes: each use gets its own copy to build on
            return marshal.loads(kept)
        except (EOFError, ValueError, TypeError):
            pass
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
    return [key for key in _CACHE.store("literals")
            if isinstance(key, tuple) and len(key) == 2 and isinstance(key[1], bool)
            and isinstance(key[0], tuple) and all(isinstance(w, str) for w in key[0])]


def remember_literal_set(key: tuple[tuple[str, ...], bool]) -> None:
    if enabled() and key not in _CACHE.store("literals"):
        _CACHE.add("literals", key, True)


def save() -> None:
    """Write the new entries now (tests; a long-lived process that wants them kept early)."""
    _CACHE.save()


def reset() -> None:
    """Forget what this process read and compiled (tests that change the cache's place)."""
    global _CACHE
    _CACHE = _Cache()
