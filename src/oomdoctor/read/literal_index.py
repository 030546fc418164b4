"""One native pass over a log (Hyperscan, else Aho–Corasick) for every literal set the families ask about.

``ParseContext.lines_with(literals)`` answers "which lines hold any of these literals".
In Python that is one ``str.find`` pass over the log's text per literal: about 300
literals over the ~100 KB a scanned log keeps cost about 4 ms a log, a sixth of its
parse. With Hyperscan installed, every set asked for so far in this process is compiled
into one database, and a log is scanned once for all of them; the first log of a process
(and any set asked for the first time) takes the Python path and registers its sets,
which the start-up cache (``oomdoctor.read.cache``) keeps for the next process.

The answers are the Python path's exactly: the same lines for the same literals, case
folded the same way (a folded set is answered here only for text whose lower-casing
Hyperscan's ASCII folding reproduces). Without Hyperscan, ``AhoCorasickIndex`` gives the
same answers with ``ahocorasick-rs``. ``OOMDOCTOR_PREFILTER=python`` turns both off, like
the prefilter; ``=ahocorasick`` skips Hyperscan.
"""
from __future__ import annotations

import bisect
import hashlib
import itertools
import os
import re
import threading
from typing import Optional

from . import cache
from .prefilter import AHO_CORASICK, PURE_PYTHON

Key = tuple[tuple[str, ...], bool]   # (literals, fold)

_KELVIN = "\u212a"   # lower-cases to an ASCII "k": Python's folding, not Hyperscan's


class LiteralIndex:
    def __init__(self) -> None:
        self._keys: list[Key] = []
        self._known: set[Key] = set()
        # (database, the keys it answers, pattern id -> indices into those keys, scratch
        # per thread): replaced as a whole, so a scan never mixes two compilations
        self._state: Optional[tuple] = None
        self.broken = False

    def register(self, key: Key, remember: bool = True) -> None:
        if key not in self._known:
            self._known.add(key)
            self._keys.append(key)
            if remember:
                cache.remember_literal_set(key)

    def __contains__(self, key: Key) -> bool:
        return key in self._known

    def _compile(self) -> bool:
        import hyperscan
        patterns: dict[tuple[str, bool], int] = {}
        owners: list[list[int]] = []
        keys = tuple(self._keys)
        for k, (literals, fold) in enumerate(keys):
            for lit in literals:
                pid = patterns.setdefault((lit, fold), len(patterns))
                if pid == len(owners):
                    owners.append([])
                if not owners[pid] or owners[pid][-1] != k:
                    owners[pid].append(k)
        exprs = [re.escape(lit).encode() for lit, _fold in patterns]
        flags = [hyperscan.HS_FLAG_CASELESS if fold else 0 for _lit, fold in patterns]

        def build():
            db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
            db.compile(expressions=exprs, ids=list(range(len(exprs))), elements=len(exprs), flags=flags)
            return db

        # the database is a function of the expressions and their flags (pattern ids are
        # their positions): compiled once, then loaded from the start-up cache
        digest = hashlib.blake2b(repr((exprs, flags)).encode(), digest_size=20).hexdigest()
        key = (f"hyperscan-{getattr(hyperscan, '__version__', '?')}-block", digest)
        try:
            db = cache.native_database(key, build, hyperscan.dumpb,
                                       lambda data: hyperscan.loadb(data, hyperscan.HS_MODE_BLOCK))
        except Exception:  # noqa: BLE001 - an unusable native library: the Python path
            self.broken = True
            return False
        self._state = (db, keys, owners, threading.local())
        return True

    @staticmethod
    def _scratch(state: tuple):
        db, _keys, _owners, local = state
        scratch = getattr(local, "scratch", None)
        if scratch is None:
            import hyperscan
            scratch = local.scratch = hyperscan.Scratch(db)
        return scratch

    def lines(self, blob: str, starts: list[int]) -> Optional[dict[Key, list[int]]]:
        """For every registered set, the indices of the lines holding one of its literals;
        ``blob`` and ``starts`` are the log's lines joined by newlines and each line's
        offset (``normalise.join_lines``). None when this log must take the Python path."""
        if self.broken or not self._keys:
            return None
        if (self._state is None or len(self._state[1]) != len(self._keys)) and not self._compile():
            return None
        state = self._state
        db, compiled, pattern_keys, _local = state
        try:
            data = blob.encode("utf-8")
        except UnicodeEncodeError:
            return None
        if len(data) != len(blob):   # multi-byte characters: Hyperscan reports byte offsets
            starts = [0] + list(itertools.accumulate(len(part) + 1 for part in data.split(b"\n")[:-1]))
        hits: list[set[int]] = [set() for _ in pattern_keys]

        def on_match(pid: int, _start: int, end: int, _flags: int, _ctx) -> None:
            hits[pid].add(bisect.bisect_right(starts, end - 1) - 1)

        try:
            db.scan(data, match_event_handler=on_match, scratch=self._scratch(state))
        except Exception:  # noqa: BLE001
            return None
        # folded sets: Python lower-cases the text; that agrees with ASCII folding unless
        # lower-casing changes the length (then the Python path goes line by line) or
        # turns a non-ASCII letter into an ASCII one
        fold_ok = blob.isascii() or (_KELVIN not in blob and len(blob.lower()) == len(blob))
        per_key: list[set[int]] = [set() for _ in compiled]
        for pid, lines in enumerate(hits):
            if lines:
                for k in pattern_keys[pid]:
                    per_key[k] |= lines
        return {key: sorted(per_key[k]) for k, key in enumerate(compiled) if fold_ok or not key[1]}


class AhoCorasickIndex(LiteralIndex):
    """The same index on ``ahocorasick-rs`` automata, where Hyperscan is absent: one pass
    over the text for the plain sets, reporting every occurrence of every literal
    (overlapping), and one over the text as Python lower-cases it for the folded sets,
    as the Python path does (so no folding can differ). Measured on the fixture logs, a
    third of the time of the Python path's ``str.find`` passes (bench/README.md)."""

    def _compile(self) -> bool:
        import ahocorasick_rs
        keys = tuple(self._keys)
        patterns: dict[tuple[str, bool], int] = {}
        owners: list[list[int]] = []
        for k, (literals, fold) in enumerate(keys):
            for lit in literals:
                if not lit:   # an empty literal is on every line: the Python path says so
                    continue
                pid = patterns.setdefault((lit, fold), len(patterns))
                if pid == len(owners):
                    owners.append([])
                if not owners[pid] or owners[pid][-1] != k:
                    owners[pid].append(k)
        automata = []
        try:
            for fold in (False, True):
                ids = [pid for (_lit, f), pid in patterns.items() if f == fold]
                if ids:
                    lits = [lit for (lit, f) in patterns if f == fold]
                    automata.append((fold, ahocorasick_rs.AhoCorasick(lits), ids))
        except Exception:  # noqa: BLE001 - an unusable native library: the Python path
            self.broken = True
            return False
        answered = tuple(all(key[0]) for key in keys)
        self._state = (tuple(automata), keys, owners, answered)
        return True

    def lines(self, blob: str, starts: list[int]) -> Optional[dict[Key, list[int]]]:
        if self.broken or not self._keys:
            return None
        if (self._state is None or len(self._state[1]) != len(self._keys)) and not self._compile():
            return None
        automata, compiled, pattern_keys, answered = self._state
        hits: list[set[int]] = [set() for _ in pattern_keys]
        fold_ok = True
        try:
            for fold, automaton, ids in automata:
                text = blob
                if fold:
                    text = blob.lower()
                    if len(text) != len(blob):   # the Python path goes line by line then
                        fold_ok = False
                        continue
                for pid, start, _end in automaton.find_matches_as_indexes(text, overlapping=True):
                    hits[ids[pid]].add(bisect.bisect_right(starts, start) - 1)
        except Exception:  # noqa: BLE001
            return None
        per_key: list[set[int]] = [set() for _ in compiled]
        for pid, lines in enumerate(hits):
            if lines:
                for k in pattern_keys[pid]:
                    per_key[k] |= lines
        return {key: sorted(per_key[k]) for k, key in enumerate(compiled)
                if answered[k] and (fold_ok or not key[1])}


_SHARED: Optional[LiteralIndex] = None
_CHECKED = False


def shared() -> Optional[LiteralIndex]:
    """The process's index: Hyperscan's, else ahocorasick-rs's (also with
    OOMDOCTOR_PREFILTER=ahocorasick, which stands for a machine without Hyperscan), else
    None (also with OOMDOCTOR_PREFILTER=python)."""
    global _SHARED, _CHECKED
    if not _CHECKED:
        _CHECKED = True
        _SHARED = None
        choice = os.environ.get("OOMDOCTOR_PREFILTER", "").lower()
        if choice not in PURE_PYTHON and choice not in AHO_CORASICK:
            try:
                import hyperscan  # noqa: F401
                _SHARED = LiteralIndex()
            except ImportError:
                pass
        if _SHARED is None and choice not in PURE_PYTHON:
            try:
                import ahocorasick_rs  # noqa: F401
                _SHARED = AhoCorasickIndex()
            except ImportError:
                pass
        if _SHARED is not None:
            # the sets earlier runs asked for (the start-up cache): so that the first log of
            # a process is answered in one pass too, not only the ones after it
            for key in cache.literal_sets():
                _SHARED.register(key, remember=False)
    return _SHARED
