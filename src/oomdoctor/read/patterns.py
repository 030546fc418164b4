"""Patterns compiled when a log first needs them, not when the module is imported.

The parser families hold about 300 patterns and the ``regex`` module compiles each in
Python (about half a millisecond apiece): compiled at import they cost a pasted log
about 0.14 s before a byte is read, and a log uses about a third of them. A
``LazyPattern`` keeps the source and flags and compiles on the first search; after
that its methods are the compiled pattern's own bound methods, so a search through it
costs what a search through the pattern costs. Compiled code is kept between runs
(``oomdoctor.read.cache``), so a later start rebuilds a pattern instead of parsing it.
"""
from __future__ import annotations

from typing import Any

import regex

from .cache import compile_pattern

# The compiled pattern's attributes a caller may use; each is copied onto the lazy
# pattern once it is compiled, so later lookups never reach __getattr__.
_FORWARD = ("search", "match", "fullmatch", "finditer", "findall", "sub", "subn", "split",
            "splititer", "scanner", "groups", "groupindex", "named_lists")


class LazyPattern:
    """A ``regex`` pattern compiled on first use. ``pattern`` and ``flags`` are known
    without compiling (the literal analysis and the prefix combiner read them)."""

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self.pattern = pattern
        self.flags = flags

    def compiled(self) -> "regex.Pattern":
        compiled = self.__dict__.get("_compiled")
        if compiled is None:
            compiled = compile_pattern(self.pattern, self.flags)
            self.__dict__["_compiled"] = compiled
            for name in _FORWARD:
                self.__dict__[name] = getattr(compiled, name)
        return compiled

    def __getattr__(self, name: str) -> Any:
        # Only reached for attributes not set yet: compile, then answer from the pattern.
        if name.startswith("__") or name == "_compiled":
            raise AttributeError(name)
        return getattr(self.compiled(), name)

    def __reduce__(self):
        return (LazyPattern, (self.pattern, self.flags))

    def __repr__(self) -> str:
        return f"lazy({self.pattern!r}, {self.flags})"


def lazy(pattern: str, flags: int = 0) -> LazyPattern:
    """``regex.compile`` deferred to the first search."""
    return LazyPattern(pattern, flags)
