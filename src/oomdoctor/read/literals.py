"""Literals that every match of a regex must hold: a substring test before the regex.

A knowledge-base text pattern such as ``Malloc pin memory failed|cudaHostAlloc`` cannot
match a log that holds neither literal, and ``str.find`` answers that at memory speed
where the regex engine walks the whole log. ``required_literals`` reads the pattern's
syntax tree and returns a set of literals of which every match contains at least one;
when it cannot prove such a set it returns ``None`` and the caller runs the regex.
"""
from __future__ import annotations

import functools
from typing import NamedTuple, Optional

try:  # the standard library's regex parser (public as sre_parse before 3.11)
    from re import _constants as _C
    from re import _parser as _sre
except ImportError:  # pragma: no cover - Python < 3.11
    import sre_constants as _C  # type: ignore[no-redef]
    import sre_parse as _sre  # type: ignore[no-redef]

MIN_LENGTH = 3   # shorter literals hit nearly every log: no gain over the regex
_REPEATS = tuple(getattr(_C, n) for n in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT") if hasattr(_C, n))
_ATOMIC = getattr(_C, "ATOMIC_GROUP", None)

# Syntax of the ``regex`` module that the standard parser reads differently or not at
# all (POSIX classes, Unicode properties, fuzzy matching, version flags): no gate.
_FOREIGN = ("[[:", "\\p", "\\P", "(?V", "(?|", "\\X", "{e", "(?r", "(?f", "(?b", "(?e",
            "\\m", "\\M", "\\G", "\\K", "(?(DEFINE")


class Gate(NamedTuple):
    literals: tuple[str, ...]
    fold: bool                  # lower-cased: compare with lower-cased, ASCII-only text

    def may_match(self, text: str, lowered: Optional[str] = None) -> bool:
        """False only when no match of the pattern can exist in ``text``. ``lowered`` is
        ``text.lower()`` when the caller has it (it tests many gates on one text)."""
        if self.fold:
            if not text.isascii():
                return True    # case folding beyond ASCII is the regex engine's business
            text = lowered if lowered is not None else text.lower()
        return any(lit in text for lit in self.literals)


@functools.lru_cache(maxsize=2048)
def required_literals(pattern: str) -> Optional[Gate]:
    """A ``Gate`` for ``pattern``, or ``None`` when no useful literal set is provable."""
    if any(f in pattern for f in _FOREIGN):
        return None
    try:
        parsed = _sre.parse(pattern)
    except Exception:  # the regex module accepts more than the standard parser
        return None
    flags = parsed.state.flags
    if flags & _C.SRE_FLAG_VERBOSE:
        return None
    fold = bool(flags & _C.SRE_FLAG_IGNORECASE)
    got = _sequence(list(parsed), fold)
    if not got or min(len(lit) for lit in got) < MIN_LENGTH:
        return None
    if fold and not all(lit.isascii() for lit in got):
        return None
    return Gate(tuple(sorted(got)), fold)


def _sequence(items: list, fold: bool) -> Optional[frozenset[str]]:
    """The most selective literal set required by a sequence of parsed items."""
    candidates: list[frozenset[str]] = []
    run: list[str] = []

    def close_run() -> None:
        if run:
            candidates.append(frozenset({"".join(run)}))
            run.clear()

    for op, av in items:
        if op is _C.LITERAL:
            ch = chr(av)
            run.append(ch.lower() if fold else ch)
            continue
        if op is _C.AT:
            continue  # ^, $, \b take no characters: the run goes on
        close_run()
        if op is _C.SUBPATTERN:
            _group, add_flags, del_flags, sub = av
            if (add_flags | del_flags) & (_C.SRE_FLAG_IGNORECASE | _C.SRE_FLAG_VERBOSE):
                return None  # a scoped case change: the literals would not compare
            got = _sequence(list(sub), fold)
            if got:
                candidates.append(got)
        elif op is _C.BRANCH:
            union: set[str] = set()
            for branch in av[1]:
                got = _sequence(list(branch), fold)
                if not got:
                    union = set()
                    break
                union |= got
            if union:
                candidates.append(frozenset(union))
        elif op in _REPEATS:
            low, _high, sub = av
            if low >= 1:
                got = _sequence(list(sub), fold)
                if got:
                    candidates.append(got)
        elif _ATOMIC is not None and op is _ATOMIC:
            got = _sequence(list(av), fold)
            if got:
                candidates.append(got)
        # anything else (classes, any, back references, lookarounds) requires nothing
    close_run()
    if not candidates:
        return None
    # prefer the set whose shortest literal is longest, then the smaller set
    return max(candidates, key=lambda s: (min(len(x) for x in s), -len(s)))
