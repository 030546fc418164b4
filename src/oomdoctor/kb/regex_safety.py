"""Regular expressions that can backtrack catastrophically, found from their syntax tree.

A backtracking engine takes exponential time on a failing input when a repeated part of a
pattern can read the same text in more than one way: ``(a+)+``, ``(\\w*)*``, ``(a|a)*``,
``(\\w+\\s?)*``. ``backtracking_risk`` reads the pattern with the standard library's parser,
builds the position automaton (Glushkov) of every repeat whose body holds a choice, and looks
for the cause of that blow-up: two different paths that read the same text and both come
back to the state they left (exponential ambiguity, Weber and Seidl's criterion), decided on
the pair automaton. Patterns that the standard parser cannot read, or reads differently from
the ``regex`` module, are not judged (``None``): the classifier still runs them with a timeout.
"""
from __future__ import annotations

import functools
import re
from typing import Optional

try:  # the standard library's regex parser (public as sre_parse before 3.11)
    from re import _constants as _C
    from re import _parser as _sre
except ImportError:  # pragma: no cover - Python < 3.11
    import sre_constants as _C  # type: ignore[no-redef]
    import sre_parse as _sre  # type: ignore[no-redef]

NESTED = "nested quantifier"
OVERLAP = "overlapping alternatives under a quantifier"

_REPEATS = (_C.MAX_REPEAT, _C.MIN_REPEAT)
_LEAVES = (_C.LITERAL, _C.NOT_LITERAL, _C.ANY, _C.IN, _C.AT, _C.GROUPREF)
_POSSESSIVE = getattr(_C, "POSSESSIVE_REPEAT", None)   # 3.11+
_ATOMIC = getattr(_C, "ATOMIC_GROUP", None)            # 3.11+
_UNROLL = 8          # counted repeats up to this bound are expanded copy by copy
# beyond these the pair automaton costs too much for load time: the pattern is not judged
_MAX_POSITIONS = 200
_MAX_STEPS = 200_000
# ``regex``-module syntax that the standard parser reads without error but differently:
# POSIX classes, fuzzy-match constraints, version-1 set operations.
_FOREIGN = re.compile(r"\[\[:|\(\?V1|\{[^{}]*(?:\b[eisd]\b|[<>]=?)[^{}]*\}")
# ``(?<name>...)`` is the ``regex`` module's spelling of ``(?P<name>...)``
_NAMED_GROUP = re.compile(r"(?<!\\)\(\?<(?![=!])")
_CATEGORIES = {
    _C.CATEGORY_DIGIT: str.isdecimal, _C.CATEGORY_SPACE: str.isspace,
    _C.CATEGORY_WORD: lambda ch: ch.isalnum() or ch == "_",
    _C.CATEGORY_LINEBREAK: lambda ch: ch == "\n",
}
_CATEGORIES.update({
    _C.CATEGORY_NOT_DIGIT: lambda ch: not ch.isdecimal(), _C.CATEGORY_NOT_SPACE: lambda ch: not ch.isspace(),
    _C.CATEGORY_NOT_WORD: lambda ch: not (ch.isalnum() or ch == "_"),
    _C.CATEGORY_NOT_LINEBREAK: lambda ch: ch != "\n",
})
# characters every pattern is tested over, besides those it names: ASCII and a few others
# that differ in class (letter, decimal digit, space, line separator, symbol, ideograph)
_BASE_ALPHABET = [chr(i) for i in range(128)] + list("é٣\u00a0\u2028€中")


class _Unjudged(Exception):
    """The pattern uses something this analysis does not model."""


@functools.lru_cache(maxsize=4096)
def backtracking_risk(pattern: str) -> Optional[str]:
    """Why ``pattern`` can backtrack catastrophically (``NESTED`` or ``OVERLAP``), else None."""
    if _FOREIGN.search(pattern):
        return None
    try:
        parsed = _sre.parse(_NAMED_GROUP.sub("(?P<", pattern))
    except Exception:  # noqa: BLE001 - only the regex module reads it (or nobody does)
        return None
    try:
        return _Checker(parsed).find(list(parsed), parsed.state.flags)
    except (_Unjudged, RecursionError):
        return None


class _Frag:
    """A piece of the automaton: how many ways it matches the empty string (0, 1 or 2,
    2 standing for 'several'), and the positions it starts and ends in, each with the
    number of ways to get there without reading a character."""

    __slots__ = ("empty", "first", "last")

    def __init__(self, empty: int, first: dict[int, int], last: dict[int, int]):
        self.empty, self.first, self.last = empty, first, last


_EPSILON = _Frag(1, {}, {})


def _add(into: dict[int, int], more: dict[int, int], times: int = 1) -> dict[int, int]:
    out = dict(into)
    for pos, n in more.items():
        out[pos] = min(2, out.get(pos, 0) + n * times)
    return out


class _Checker:
    def __init__(self, parsed):
        self.parsed = parsed
        self.groups: Optional[dict[int, tuple[int, bool]]] = None
        self._alphabet: Optional[list[str]] = None

    @property
    def alphabet(self) -> list[str]:
        # built on first use: most patterns hold no repeat worth a look and never need it
        if self._alphabet is None:
            chars = set(_BASE_ALPHABET)
            _collect_chars(list(self.parsed), chars)
            self._alphabet = sorted(chars)
        return self._alphabet

    # -- finding the repeats worth a look ---------------------------------------------

    def find(self, items: list, flags: int) -> Optional[str]:
        for op, av in items:
            if op in _LEAVES:
                continue
            if op in _REPEATS and av[1] > 1 and _has_choice(list(av[2])):
                if self._ambiguous(op, av, flags):
                    return NESTED if _has_repeat(list(av[2]), 0) else OVERLAP
                # (a+){2,5} is not exponential, but splits a run of n characters in n**4
                # ways: a power that high of a log line's length is no better (a pair,
                # like a+a+, is only quadratic)
                if 3 <= av[1] <= _UNROLL and _has_repeat(list(av[2]), _UNROLL) and \
                        self._ambiguous(op, (av[0], _C.MAXREPEAT, av[2]), flags):
                    return NESTED
            for sub, sub_flags in _children(op, av, flags):
                found = self.find(sub, sub_flags)
                if found:
                    return found
        return None

    def _ambiguous(self, op, av, flags: int) -> bool:
        self.sets: list[int] = []
        self.out: list[list[tuple[int, int]]] = []
        self.edges = 0
        self._item(op, av, flags)
        return self._exponential()

    # -- the position automaton ---------------------------------------------------------

    def _position(self, charset: int) -> _Frag:
        if len(self.sets) >= _MAX_POSITIONS:
            raise _Unjudged
        self.sets.append(charset)
        self.out.append([])
        pos = len(self.sets) - 1
        return _Frag(0, {pos: 1}, {pos: 1})

    def _link(self, last: dict[int, int], first: dict[int, int]) -> None:
        # every way of going from p to q is its own edge: a backtracking matcher tries each
        for p, m in last.items():
            for q, n in first.items():
                for _ in range(min(2, m * n)):
                    self.out[p].append((q, self.edges))
                    self.edges += 1

    def _seq(self, items: list, flags: int) -> _Frag:
        frag = _EPSILON
        for op, av in items:
            frag = self._concat(frag, self._item(op, av, flags))
        return frag

    def _item(self, op, av, flags: int) -> _Frag:
        if op in (_C.LITERAL, _C.NOT_LITERAL, _C.ANY, _C.IN):
            return self._position(self._charset(op, av, flags))
        if op in _REPEATS:
            return self._repeat(av[0], av[1], list(av[2]), flags)
        if op is _C.SUBPATTERN:
            return self._seq(list(av[3]), (flags | av[1]) & ~av[2])
        if op is _C.BRANCH:
            frag = _Frag(0, {}, {})
            for alt in av[1]:
                f = self._seq(list(alt), flags)
                frag = _Frag(min(2, frag.empty + f.empty), _add(frag.first, f.first), _add(frag.last, f.last))
            return frag
        if op is _C.GROUPREF_EXISTS:
            yes = self._seq(list(av[1]), flags)
            no = self._seq(list(av[2]), flags) if av[2] is not None else _EPSILON
            return _Frag(min(2, yes.empty + no.empty), _add(yes.first, no.first), _add(yes.last, no.last))
        if op is _C.GROUPREF:
            # the captured text again: at most the group's characters, never a choice
            charset, empty = self._group(av)
            frag = self._position(charset)
            return _Frag(int(empty), frag.first, frag.last)
        if op in (_ATOMIC, _POSSESSIVE) and op is not None:
            return self._opaque(op, av, flags)
        if op in (_C.AT, _C.ASSERT, _C.ASSERT_NOT):
            return _EPSILON   # zero-width; what an assertion holds is checked on its own
        raise _Unjudged(op)

    def _repeat(self, lo: int, hi: int, body: list, flags: int) -> _Frag:
        if hi == 0:
            return _EPSILON
        if hi <= _UNROLL:
            # x{2,4} is x x (x (x)?)?: one path per count, as the matcher counts
            frag = _EPSILON
            for _ in range(lo):
                frag = self._concat(frag, self._seq(body, flags))
            return self._concat(frag, self._optional(body, hi - lo, flags))
        frag = _EPSILON
        for _ in range(min(lo, _UNROLL) - 1):
            frag = self._concat(frag, self._seq(body, flags))
        loop = self._seq(body, flags)
        self._link(loop.last, loop.first)
        # an iteration that reads nothing ends the loop (the matcher stops there)
        loop = _Frag(1 if lo == 0 else loop.empty, loop.first, loop.last)
        return self._concat(frag, loop)

    def _optional(self, body: list, copies: int, flags: int) -> _Frag:
        if copies == 0:
            return _EPSILON
        inner = self._concat(self._seq(body, flags), self._optional(body, copies - 1, flags))
        return _Frag(min(2, inner.empty + 1), inner.first, inner.last)

    def _concat(self, a: _Frag, b: _Frag) -> _Frag:
        self._link(a.last, b.first)
        return _Frag(min(2, a.empty * b.empty), _add(a.first, b.first, a.empty), _add(b.last, a.last, b.empty))

    def _opaque(self, op, av, flags: int) -> _Frag:
        """An atomic group or possessive repeat never gives back what it took, so to the
        pattern around it, it is one step over its characters."""
        charset, empty = self._summary([(_C.MAX_REPEAT, av)] if op is _POSSESSIVE else list(av), flags)
        if not charset:
            return _EPSILON
        step = self._position(charset)
        return _Frag(int(empty), step.first, step.last)

    def _summary(self, items: list, flags: int) -> tuple[int, bool]:
        """The characters ``items`` can read and whether they can read nothing; records
        the same for every capturing group on the way."""
        charset, empty = 0, True
        for op, av in items:
            if op in (_C.LITERAL, _C.NOT_LITERAL, _C.ANY, _C.IN):
                charset, empty = charset | self._charset(op, av, flags), False
            elif op in _REPEATS or op is _POSSESSIVE:
                chars, can_skip = self._summary(list(av[2]), flags)
                charset, empty = charset | chars, empty and (av[0] == 0 or can_skip)
            elif op is _C.GROUPREF:
                chars, can_skip = self._group(av)
                charset, empty = charset | chars, empty and can_skip
            elif op not in (_C.AT, _C.ASSERT, _C.ASSERT_NOT):
                parts = [self._summary(sub, sub_flags) for sub, sub_flags in _children(op, av, flags)]
                for chars, _ in parts:
                    charset |= chars
                if op is _C.SUBPATTERN and av[0] is not None and self.groups is not None:
                    self.groups[av[0]] = parts[0]
                alternatives = op in (_C.BRANCH, _C.GROUPREF_EXISTS)
                can_skip = (any(e for _, e in parts) or (op is _C.GROUPREF_EXISTS and len(parts) == 1)) \
                    if alternatives else all(e for _, e in parts)
                empty = empty and can_skip
        return charset, empty

    def _group(self, group: int) -> tuple[int, bool]:
        """What a back-reference can read: its group's characters, and whether the group
        can be empty (everything, for a group defined later)."""
        if self.groups is None:
            self.groups = {}
            self._summary(list(self.parsed), self.parsed.state.flags)
        return self.groups.get(group, ((1 << len(self.alphabet)) - 1, True))

    def _charset(self, op, av, flags: int) -> int:
        test = _predicate(op, av, flags)
        mask = 0
        for i, ch in enumerate(self.alphabet):
            if test(ch):
                mask |= 1 << i
        return mask

    # -- exponential ambiguity ----------------------------------------------------------

    def _exponential(self) -> bool:
        """True when some state has two different cycles over the same text: a strongly
        connected part of the pair automaton holds a pair (q, q) and a step on two
        different edges."""
        succ: dict[tuple[int, int], list[tuple[tuple[int, int], bool]]] = {}
        todo = [(q, q) for q in range(len(self.sets))]
        seen = set(todo)
        budget = _MAX_STEPS
        while todo:
            node = todo.pop()
            p, q = node
            steps = []
            budget -= len(self.out[p]) * len(self.out[q])
            if budget < 0:
                raise _Unjudged("too large")
            for p2, e1 in self.out[p]:
                for q2, e2 in self.out[q]:
                    if self.sets[p2] & self.sets[q2]:
                        nxt = (p2, q2)
                        steps.append((nxt, e1 != e2))
                        if nxt not in seen:
                            seen.add(nxt)
                            todo.append(nxt)
            succ[node] = steps
        comp = _components(succ)
        diagonal = {comp[(q, q)] for q in range(len(self.sets))}
        return any(split and comp[a] == comp[b] and comp[a] in diagonal
                   for a, steps in succ.items() for b, split in steps)


def _components(succ: dict) -> dict:
    """Strongly connected components (Tarjan, without recursion): node -> component id."""
    index: dict = {}
    low: dict = {}
    comp: dict = {}
    stack: list = []
    on_stack: set = set()
    counter = 0
    for root in succ:
        if root in index:
            continue
        work = [(root, 0)]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, i = work[-1]
            steps = succ[node]
            if i < len(steps):
                work[-1] = (node, i + 1)
                nxt = steps[i][0]
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    comp[member] = index[node]
                    if member == node:
                        break
    return comp


# -- the parse tree ------------------------------------------------------------------


def _children(op, av, flags: int):
    """The sub-patterns directly inside one parsed item, with the flags they run under."""
    if op in _REPEATS or op is _POSSESSIVE:
        yield list(av[2]), flags
    elif op is _C.SUBPATTERN:
        yield list(av[3]), (flags | av[1]) & ~av[2]
    elif op is _C.BRANCH:
        for alt in av[1]:
            yield list(alt), flags
    elif op in (_C.ASSERT, _C.ASSERT_NOT):
        yield list(av[1]), flags
    elif op is _C.GROUPREF_EXISTS:
        yield list(av[1]), flags
        if av[2] is not None:
            yield list(av[2]), flags
    elif op is _ATOMIC and op is not None:
        yield list(av), flags


def _has_choice(items: list) -> bool:
    """Whether the body can read text in more than one shape (else repeating it is safe)."""
    for op, av in items:
        if op in (_C.BRANCH, _C.GROUPREF_EXISTS, _C.GROUPREF) or (op in _REPEATS and av[0] != av[1]):
            return True
        if op not in (_C.ASSERT, _C.ASSERT_NOT, _ATOMIC, _POSSESSIVE) and \
                any(_has_choice(sub) for sub, _ in _children(op, av, 0)):
            return True
    return False


def _has_repeat(items: list, above: int) -> bool:
    """Whether the body holds a quantifier that allows more than ``above`` copies."""
    for op, av in items:
        if (op in _REPEATS or op is _POSSESSIVE) and av[1] > above:
            return True
        if op not in (_C.ASSERT, _C.ASSERT_NOT) and any(_has_repeat(sub, above) for sub, _ in _children(op, av, 0)):
            return True
    return False


def _collect_chars(items: list, into: set) -> None:
    """Every character the pattern names, in both cases, so that the sets compared below
    overlap on the alphabet exactly when they overlap at all (range ends included)."""
    for op, av in items:
        if op in (_C.LITERAL, _C.NOT_LITERAL):
            codes = [av]
        elif op is _C.IN:
            codes = [a for o, a in av if o is _C.LITERAL] + [c for o, a in av if o is _C.RANGE for c in a]
        else:
            codes = []
            for sub, _ in _children(op, av, 0):
                _collect_chars(sub, into)
        for code in codes:
            ch = chr(code)
            into.update(c for c in (ch, ch.lower(), ch.upper()) if len(c) == 1)


def _predicate(op, av, flags: int):
    """A test for one character against LITERAL, NOT_LITERAL, ANY or IN."""
    fold = bool(flags & _C.SRE_FLAG_IGNORECASE)
    ascii_only = bool(flags & _C.SRE_FLAG_ASCII)

    def variants(ch: str) -> tuple[str, ...]:
        return (ch, ch.lower(), ch.upper()) if fold else (ch,)

    if op is _C.LITERAL:
        return lambda ch: any(v == chr(av) for v in variants(ch))
    if op is _C.NOT_LITERAL:
        return lambda ch: not any(v == chr(av) for v in variants(ch))
    if op is _C.ANY:
        return (lambda ch: True) if flags & _C.SRE_FLAG_DOTALL else (lambda ch: ch != "\n")
    negate = bool(av) and av[0][0] is _C.NEGATE
    tests = []
    for o, a in av:
        if o is _C.LITERAL:
            tests.append(chr(a).__eq__)
        elif o is _C.RANGE:
            tests.append(lambda ch, lo=a[0], hi=a[1]: len(ch) == 1 and lo <= ord(ch) <= hi)
        elif o is _C.CATEGORY:
            cat = _CATEGORIES.get(a)
            if cat is None:
                raise _Unjudged(a)
            if ascii_only and a in (_C.CATEGORY_DIGIT, _C.CATEGORY_SPACE, _C.CATEGORY_WORD):
                tests.append(lambda ch, cat=cat: ch.isascii() and cat(ch))
            elif ascii_only and a in (_C.CATEGORY_NOT_DIGIT, _C.CATEGORY_NOT_SPACE, _C.CATEGORY_NOT_WORD):
                tests.append(lambda ch, cat=cat: not ch.isascii() or cat(ch))
            else:
                tests.append(cat)
        elif o is not _C.NEGATE:
            raise _Unjudged(o)

    def member(ch: str) -> bool:
        hit = any(t(v) for v in variants(ch) for t in tests)
        return hit != negate
    return member
