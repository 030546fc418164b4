"""The knowledge base: one YAML file per incident, validated and compiled at load.

An incident file says what evidence counts and how much (``signals``), when the incident
can apply at all (``requires``), what fixes it in each framework's syntax
(``remediations``), and carries example logs that the test suite runs. The engine in
``classify.py`` knows no incident by name. The condition language is described in
``docs/knowledge-format.md`` and enforced by the models below. A file that breaks them
(invalid YAML, a YAML alias, an unknown key, a missing one, a bad regular expression or one
that can backtrack catastrophically) is refused, reported as ``file:line:col: reason`` at
the YAML node that is wrong. Rules that do not stop a file from loading (example logs, the
``checked:`` notes of knobs) are checked by ``oomdoctor kb lint`` (``lint.py``).

Search path: the shipped KB, then ``$OOMDOCTOR_KB`` (``os.pathsep``-separated
directories), then directories passed with ``--kb``. A later file with the same id
replaces an earlier one, so a team can override a shipped incident.
"""
from __future__ import annotations

import difflib
import os
import types
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal, Optional, Union, get_args, get_origin

import regex as re
import yaml
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from yaml.composer import Composer, ComposerError
from yaml.constructor import SafeConstructor
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.resolver import Resolver

from ..read import cache
from ..read.patterns import lazy
from .frameworks import FRAMEWORK_KEYS
from . import regex_safety
from .regex_safety import backtracking_risk

try:  # libyaml's parser when PyYAML was built with it (the wheels are): ~10x faster at start-up
    from yaml.cyaml import CParser as _Parser
except ImportError:  # pragma: no cover - PyYAML without libyaml
    from yaml.parser import Parser
    from yaml.reader import Reader
    from yaml.scanner import Scanner

    class _Parser(Reader, Scanner, Parser):  # type: ignore[no-redef]
        def __init__(self, stream):
            Reader.__init__(self, stream)
            Scanner.__init__(self)
            Parser.__init__(self)

ENV_VAR = "OOMDOCTOR_KB"


@dataclass(frozen=True)
class Problem:
    """One problem of a knowledge file, at the YAML node that is wrong (1-based line and
    column; None for a file or directory that cannot be read at all)."""

    path: Path
    line: int | None
    col: int | None
    message: str
    severity: Literal["error", "warning"] = "error"

    def format(self, strict: bool = False) -> str:
        """``file:line:col: message``; a warning says so unless ``strict`` makes it an error."""
        where = f"{self.path}:{self.line}:{self.col}" if self.line is not None else str(self.path)
        label = "warning: " if self.severity == "warning" and not strict else ""
        return f"{where}: {label}{self.message}"

    def __str__(self) -> str:
        return self.format()


class KnowledgeError(Exception):
    """A knowledge-base file that cannot be used. ``problems`` lists every reason;
    str() is the first as 'file:line:col: reason' (and how many more there are)."""

    def __init__(self, problems: Problem | list[Problem]):
        self.problems = [problems] if isinstance(problems, Problem) else list(problems)
        first = str(self.problems[0])
        more = len(self.problems) - 1
        super().__init__(first + (f" ({more} more in this file: oomdoctor kb lint shows each)" if more else ""))


class _AliasFound(ComposerError):
    pass


class _NoAliases(Composer):
    """Builds the document from the parser's events and refuses aliases: ``*name`` repeats
    a whole subtree, so nine lines of nested aliases stand for 9**9 conditions that
    validation would build one by one (minutes and gigabytes from a file under 1 KB).
    libyaml's own composer cannot be told this, and composing in Python takes ~1.5x as
    long: files that cannot hold an anchor are left to libyaml (``_parse``)."""

    def compose_node(self, parent, index):
        if self.check_event(AliasEvent):
            event = self.get_event()
            raise _AliasFound(None, None, f"*{event.anchor}", event.start_mark)
        return super().compose_node(parent, index)


class _Loader(_NoAliases, _Parser, SafeConstructor, Resolver):
    def __init__(self, stream):
        _Parser.__init__(self, stream)
        _NoAliases.__init__(self)
        SafeConstructor.__init__(self)
        Resolver.__init__(self)


class UnsafePattern(ValueError):
    """A regular expression that can backtrack catastrophically."""

    def __init__(self, pattern: str, reason: str):
        shown = pattern if len(pattern) <= 80 else pattern[:77] + "..."
        super().__init__(f"pattern {shown!r} can backtrack catastrophically ({reason})")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _check_regex(value: str) -> str:
    try:
        cache.compile_pattern(value)
    except re.error as exc:
        raise ValueError(f"invalid regular expression {value!r}: {exc}") from None
    # the classifier's timeout bounds such a pattern on one log, but a search that times
    # out counts as no match (a wrong score, silently) and a scan of thousands of logs
    # pays the timeout on each: refuse the pattern when the file is loaded
    reason = cache.verdict(value, backtracking_risk, cache.file_digest(regex_safety.__file__))
    if reason:
        raise UnsafePattern(value, reason)
    return value


class Condition(_Strict):
    """One test over the facts. Exactly one of fact / frame / text / marker / all / any / not."""

    fact: Optional[str] = None
    eq: Optional[Any] = None
    ne: Optional[Any] = None
    in_: Optional[list[Any]] = Field(default=None, alias="in")
    not_in: Optional[list[Any]] = None
    gt: Optional[float] = None
    gte: Optional[float] = None
    lt: Optional[float] = None
    lte: Optional[float] = None
    exists: Optional[bool] = None
    version: Optional[str] = None
    matches: Optional[str] = None

    frame: Optional[str] = Field(default=None, description="regex over 'file:function  code' of any frame")
    innermost: Optional[int] = Field(default=None, description="only the N innermost frames")
    text: Optional[str] = Field(default=None, description="regex over any normalised line")
    marker: Optional[str] = Field(default=None, description="a named marker seen in the log")
    near_failure: Optional[int] = Field(default=None, description="text/marker within N lines before the first failure")

    all: Optional[list["Condition"]] = None
    any: Optional[list["Condition"]] = None
    not_: Optional["Condition"] = Field(default=None, alias="not")

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    @field_validator("frame", "text", "matches")
    @classmethod
    def _regex(cls, v: Optional[str]) -> Optional[str]:
        return None if v is None else _check_regex(v)

    @field_validator("version")
    @classmethod
    def _spec(cls, v: Optional[str]) -> Optional[str]:
        if v is None:
            return v
        try:
            SpecifierSet(v)
        except InvalidSpecifier:
            raise ValueError(f"invalid PEP 440 version specifier {v!r}") from None
        return v

    @model_validator(mode="after")
    def _one_kind(self) -> "Condition":
        kinds = [k for k in ("fact", "frame", "text", "marker", "all", "any", "not_") if getattr(self, k) is not None]
        if len(kinds) != 1:
            raise ValueError("a condition needs exactly one of fact, frame, text, marker, all, any, not"
                             + (f" (got {', '.join(k.rstrip('_') for k in kinds)})" if kinds else ""))
        ops = [k for k in ("eq", "ne", "in_", "not_in", "gt", "gte", "lt", "lte", "exists", "version", "matches")
               if getattr(self, k) is not None]
        if self.fact is not None and not ops:
            raise ValueError(f"fact {self.fact!r} needs an operator (eq, ne, in, not_in, gt, gte, lt, lte, exists, version, matches)")
        if self.fact is None and ops:
            raise ValueError("operators (eq, in, gte, ...) only go with 'fact'")
        return self


Condition.model_rebuild()


class SharedCondition(_Strict):
    """A condition several incidents test, written once: ``conditions/<id>.yaml`` beside the
    incident files, used in any of them as ``{use: <id>}``."""

    id: str = Field(pattern=r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
    says: str = Field(description="what the condition recognises, in words")
    when: Condition


class Signal(_Strict):
    id: str
    weight: float = Field(description="added to the score when the condition holds; negative for counter-evidence")
    when: Condition
    says: str = Field(description="the reason in words; {fact.name} placeholders are filled in")
    lead_only: bool = Field(default=False, description=(
        "a prior, not evidence: its weight counts toward a lead (after an OOM whose cause nothing "
        "names) and never toward the incident's min_score"))


class Inapplicable(_Strict):
    when: Condition
    why: str


class RemediationSpec(_Strict):
    id: str
    title: str
    knobs: dict[str, str] = Field(description="framework -> exact setting")
    memory_effect: Optional[str] = None
    cost: Optional[str] = None
    caveats: list[str] = Field(default_factory=list)
    min_versions: dict[str, str] = Field(default_factory=dict, description="package -> minimum version, e.g. transformers: 4.36.0")
    max_versions: dict[str, str] = Field(default_factory=dict, description=(
        "package -> first version that no longer has the knob (removed or changed meaning), exclusive"))
    checked: dict[str, str] = Field(default_factory=dict, description=(
        "framework -> where the knob was verified: the file and the released versions read, "
        "so that the next reader can check it again"))
    requires: list[Condition] = Field(default_factory=list, description="all must hold or the fix does not apply")
    not_when: list[Inapplicable] = Field(default_factory=list, description="conditions under which it does not apply, and why")
    boost_when: list[Condition] = Field(default_factory=list, description="move up when any holds")
    auto_env: dict[str, str] = Field(default_factory=dict, description="safe environment-only change for 'oomdoctor run --retry'")
    saving: Optional[str] = Field(default=None, description="name of the memory-arithmetic estimate of this fix's saving")

    @field_validator("knobs")
    @classmethod
    def _frameworks(cls, v: dict[str, str]) -> dict[str, str]:
        unknown = sorted(set(v) - set(FRAMEWORK_KEYS))
        if unknown:
            raise ValueError(f"unknown framework key(s) {', '.join(unknown)}; use {', '.join(FRAMEWORK_KEYS)}")
        if not v:
            raise ValueError("a remediation needs at least one knob")
        return v

    @field_validator("min_versions", "max_versions")
    @classmethod
    def _versions(cls, v: dict[str, str]) -> dict[str, str]:
        from packaging.version import InvalidVersion, Version
        for pkg, ver in v.items():
            try:
                Version(str(ver))
            except InvalidVersion:
                raise ValueError(f"{pkg}: {ver!r} is not a version") from None
        return {k: str(x) for k, x in v.items()}


class Example(_Strict):
    name: str
    expect: Literal["top", "ranked", "absent", "not-top", "lead"] = Field(
        description="top: first diagnosis; ranked: in the top 3; absent: not diagnosed; not-top: not first; "
                    "lead: listed, but only as a lead (never a finding)")
    log: str
    note: Optional[str] = None
    first_fix: Optional[str] = Field(
        default=None, description="the id of the remediation the report must rank first for this log "
                                  "(with expect top or ranked)")


class Incident(_Strict):
    id: str = Field(pattern=r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
    title: str
    summary: str
    explanation: str
    memory_failure: bool = True
    fallback: bool = False
    priority: int = Field(default=0, description="breaks score ties; higher first")
    attributes_memory: bool = Field(default=False, description="a finding of this incident says what holds the "
                                    "memory (another process, a library's buffers): the commonest cause of an OOM "
                                    "the log does not place is not listed beside it as a lead")
    min_score: float = Field(default=2.0, description="score needed to be reported")
    requires: list[Condition] = Field(default_factory=list)
    signals: list[Signal]
    remediations: list[RemediationSpec]
    next_steps: list[str] = Field(default_factory=list)
    references: list[str] = Field(default_factory=list)
    # two positive and one negative example are a lint rule (lint.py), not a loading one:
    # a team's own incident is used before anyone has written its examples
    examples: list[Example] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique_ids(self) -> "Incident":
        ids = [s.id for s in self.signals]
        if len(ids) != len(set(ids)):
            raise ValueError("signals: ids must be unique")
        rids = [r.id for r in self.remediations]
        if len(rids) != len(set(rids)):
            raise ValueError("remediations: ids must be unique")
        for ex in self.examples:
            if ex.first_fix is not None and ex.first_fix not in rids:
                raise ValueError(f"examples: '{ex.name}' expects first_fix '{ex.first_fix}', which is no "
                                 f"remediation of this incident ({', '.join(rids)})")
            if ex.first_fix is not None and ex.expect not in ("top", "ranked"):
                raise ValueError(f"examples: '{ex.name}' has first_fix with expect {ex.expect}: a first fix "
                                 "is checked only where the incident is diagnosed (top or ranked)")
        return self

    @model_validator(mode="after")
    def _priors(self) -> "Incident":
        for s in self.signals:
            if s.lead_only and s.weight <= 0:
                raise ValueError(f"signals: '{s.id}' is lead_only with weight {s.weight:g}: a prior adds weight "
                                 "(counter-evidence is never lead-only)")
            if s.lead_only and (self.fallback or not self.memory_failure):
                raise ValueError(f"signals: '{s.id}' is lead_only, but leads are listed only for memory incidents "
                                 "other than the fallback")
        return self


class KnowledgeBase:
    def __init__(self, incidents: dict[str, Incident], files: dict[str, Path], problems: Optional[list[str]] = None):
        self.incidents = incidents
        self.files = files
        # files that were skipped because they are broken ('file: field: reason')
        self.problems = problems or []

    def __iter__(self):
        return iter(self.incidents.values())

    def __len__(self) -> int:
        return len(self.incidents)

    def get(self, incident_id: str) -> Optional[Incident]:
        return self.incidents.get(incident_id)


def shipped_dir() -> Path:
    """The KB inside the installed package, or the repository's top-level knowledge/."""
    package = Path(__file__).resolve().parent.parent
    packaged = package / "knowledge"
    if packaged.is_dir():
        return packaged
    return package.parent.parent / "knowledge"


def _node_at(root: Node | None, loc: tuple, key: bool = False) -> Node | None:
    """The YAML node at a location (mapping keys and list indexes); the nearest existing
    parent where the location goes further than the file. With ``key`` the last step gives
    the mapping key's node (an unknown key is reported where the key is written)."""
    node = root
    for i, part in enumerate(loc):
        if isinstance(node, MappingNode):
            pair = next(((k, v) for k, v in node.value if isinstance(k, ScalarNode) and k.value == str(part)), None)
            if pair is None:
                break
            node = pair[0] if key and i == len(loc) - 1 else pair[1]
        elif isinstance(node, SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
            node = node.value[part]
        else:
            break
    return node


def _mark(root: Node | None, loc: tuple = (), key: bool = False) -> tuple[int, int]:
    """(line, column), 1-based, of the node at ``loc`` (see ``_node_at``); 1:1 without one."""
    node = _node_at(root, loc, key)
    return (node.start_mark.line + 1, node.start_mark.column + 1) if node is not None else (1, 1)


def _problem(path: Path, root: Node | None, loc: tuple, message: str, *, key: bool = False,
             severity: Literal["error", "warning"] = "error") -> Problem:
    line, col = _mark(root, loc, key)
    return Problem(path, line, col, message, severity)


def _unwrap(tp: Any) -> Any:
    """``X`` for ``Optional[X]``."""
    if get_origin(tp) in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


def _model_at(loc: tuple, top: Optional[type[BaseModel]] = None) -> type[BaseModel] | None:
    """The model that validates the mapping at ``loc`` (``top``, Incident by default, at the top)."""
    tp: Any = top or Incident
    for part in loc:
        tp = _unwrap(tp)
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            field = next((f for n, f in tp.model_fields.items() if part in (n, f.alias)), None)
            if field is None:
                return None
            tp = field.annotation
        elif get_origin(tp) in (list, dict):
            tp = get_args(tp)[-1]
        else:
            return None
    tp = _unwrap(tp)
    return tp if isinstance(tp, type) and issubclass(tp, BaseModel) else None


def _allowed_keys(loc: tuple, top: Optional[type[BaseModel]] = None) -> list[str]:
    model = _model_at(loc, top)
    return [f.alias or n for n, f in model.model_fields.items()] if model is not None else []


def _validation_problems(path: Path, exc: ValidationError, root: Node | None,
                         top: Optional[type[BaseModel]] = None) -> list[Problem]:
    """One problem per YAML node that pydantic refused, each naming its real cause: an
    unknown key (and the key it is a typo of, whose 'missing' error it then stands for), a
    missing key, or the first error at that node."""
    errors = []
    for err in exc.errors(include_url=False):
        loc = tuple(p for p in err["loc"] if p not in ("function-after", "[key]"))
        errors.append((loc, err))
    missing: dict[tuple, set[str]] = {}
    for loc, err in errors:
        if err["type"] == "missing" and loc:
            missing.setdefault(loc[:-1], set()).add(str(loc[-1]))
    typo_of: set[tuple] = set()       # missing keys explained by a misspelt key
    problems: list[Problem] = []
    seen: set[tuple] = set()
    for loc, err in errors:
        if err["type"] != "extra_forbidden" or not loc or loc in seen:
            continue
        seen.add(loc)
        parent, name = loc[:-1], str(loc[-1])
        allowed = _allowed_keys(parent, top)
        near = difflib.get_close_matches(name, sorted(missing.get(parent, ())), n=1, cutoff=0.6) \
            or difflib.get_close_matches(name, allowed, n=1, cutoff=0.75)
        if near and near[0] in missing.get(parent, ()):
            typo_of.add(parent + (near[0],))
        hint = f"did you mean '{near[0]}'? " if near else ""
        listed = f"allowed: {', '.join(allowed)}" if allowed else "no keys are allowed here"
        problems.append(_problem(path, root, loc, f"unknown key '{name}' ({hint}{listed})", key=True))
    for loc, err in errors:
        if loc in seen or loc in typo_of:
            continue       # one problem per node: the first error there
        seen.add(loc)
        if err["type"] == "missing":
            where = f" in {'.'.join(str(p) for p in loc[:-1])}" if len(loc) > 1 else ""
            problems.append(_problem(path, root, loc, f"missing required key '{loc[-1]}'{where}"))
            continue
        cause = (err.get("ctx") or {}).get("error")
        if err["type"] == "value_error" or isinstance(cause, UnsafePattern):
            message = str(cause) if cause is not None else err["msg"].removeprefix("Value error, ")
        else:
            field = next((str(p) for p in reversed(loc) if isinstance(p, str)), "")
            if loc and not isinstance(loc[-1], str):
                field = ".".join(str(p) for p in loc)
            message = f"{field}: {err['msg']}" if field else err["msg"]
        problems.append(_problem(path, root, loc, message))
    return sorted(problems, key=lambda p: (p.line or 0, p.col or 0))


# An alias needs an anchor, and an anchor is '&' and a name: text without such a pair
# cannot hold an alias that resolves, and is left to libyaml's faster composer
_MAY_ANCHOR = lazy(r"&[^ \t\r\n,\[\]{}]")
_FAST = getattr(yaml, "CSafeLoader", None)


def _parse(path: Path, nodes: bool = True) -> tuple[Any, Optional[Node]]:
    """The file's data and its YAML node tree (for line numbers). Without ``nodes`` the
    tree is not built (None) and the data may come from the start-up cache, keyed by the
    text: loading needs the places only when a file has a problem, and then reads it again."""
    text = path.read_text(encoding="utf-8")
    if not nodes:
        return cache.yaml_data(text, lambda t: _parse_text(t)[0]), None
    return _parse_text(text)


def _parse_text(text: str) -> tuple[Any, Optional[Node]]:
    if _FAST is not None and not _MAY_ANCHOR.search(text):
        try:
            return _compose(_FAST(text))
        except yaml.YAMLError:
            pass   # parsed again below, so that the error reads as for any file
    return _compose(_Loader(text))


def _compose(loader) -> tuple[Any, Optional[Node]]:
    try:
        root = loader.get_single_node()
        return (loader.construct_document(root) if root is not None else None), root
    finally:
        loader.dispose()


def load_file(path: Path) -> Incident:
    """One incident file, validated; KnowledgeError when it cannot be used. Its ``{use: id}``
    conditions are those of the search path (``kb_dirs``) and of its own directory."""
    dirs = list(dict.fromkeys(d.resolve() for d in kb_dirs() + [path.parent] if d.is_dir()))
    return _load(path, _shared_conditions(dirs))[0]


def _read(path: Path, nodes: bool = True) -> tuple[Any, Optional[Node]]:
    """The file's data and node tree; KnowledgeError for what is not YAML this KB reads."""
    try:
        return _parse(path, nodes)
    except _AliasFound as exc:
        mark = exc.problem_mark
        raise KnowledgeError(Problem(path, mark.line + 1, mark.column + 1, f"YAML alias {exc.problem} is not "
                                     "allowed in knowledge files (write the value out)")) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        raise KnowledgeError(Problem(path, line, col, f"invalid YAML: {problem}")) from None
    except RecursionError:
        raise KnowledgeError(Problem(path, 1, 1, "invalid YAML: nested too deeply")) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise KnowledgeError(Problem(path, None, None, f"cannot read: {exc}")) from None


def _load(path: Path, shared: Optional[_Shared] = None, nodes: bool = True) -> tuple[Incident, Node | None]:
    """The incident and the YAML node tree it was read from (for the places lint reports).
    Without ``nodes`` (loading, not lint) the tree is built only for a file with a problem,
    so that the problem says where it is."""
    return _read_then(path, lambda read: _load_data(path, read, shared), nodes)


def _read_then(path: Path, build, nodes: bool):
    """``build`` of the file's data; without ``nodes`` first of its cached data and no node
    tree, then, for a file with a problem, again with the tree so that the problem says where."""
    if not nodes:
        try:
            return build(_read(path, nodes=False))
        except KnowledgeError:
            pass
    return build(_read(path))


def _load_data(path: Path, read: tuple[Any, Optional[Node]], shared: Optional[_Shared]) -> tuple[Incident, Node | None]:
    data, root = read
    if not isinstance(data, dict):
        raise KnowledgeError(_problem(path, root, (), "expected a mapping with id, title, signals, ..."))
    data = _expand(data, shared or _Shared(), path, root, ())
    try:
        incident = Incident.model_validate(data)
    except ValidationError as exc:
        raise KnowledgeError(_validation_problems(path, exc, root)) from None
    except RecursionError:
        raise KnowledgeError(_problem(path, root, (), "conditions nested too deeply")) from None
    if incident.id != path.stem:
        raise KnowledgeError(_problem(path, root, ("id",),
                                      f"id: '{incident.id}' does not match the file name '{path.stem}'"))
    return incident, root


# where a KB directory keeps its shared conditions
CONDITIONS_DIR = "conditions"


# the keys under which conditions stand: only there is {use: id} a shared condition
_CONDITION_KEYS = frozenset({"when", "requires", "boost_when"})


@dataclass
class _Shared:
    """The shared conditions of a search path: those that load, the ids whose file does not
    (a use of one is reported as that, not as an unknown id), and those files' problems."""

    conditions: dict[str, SharedCondition] = field(default_factory=dict)
    broken: dict[str, Path] = field(default_factory=dict)
    problems: list[KnowledgeError] = field(default_factory=list)


def _expand(data: Any, shared: _Shared, path: Path, root: Node | None, loc: tuple) -> Any:
    """``data`` with every ``{use: id}`` where a condition stands replaced by that shared
    condition's ``when`` (validated with the incident, as if written out in its place)."""
    if isinstance(data, dict):
        if set(data) == {"use"} and isinstance(data["use"], str) and _CONDITION_KEYS.intersection(loc):
            name = data["use"]
            cond = shared.conditions.get(name)
            if cond is None:
                if name in shared.broken:
                    message = f"shared condition '{name}' could not be loaded (see {shared.broken[name]})"
                else:
                    message = f"no shared condition '{name}' (known: {', '.join(sorted(shared.conditions)) or 'none'})"
                raise KnowledgeError(_problem(path, root, loc + ("use",), message))
            return cond.when.model_dump(by_alias=True, exclude_unset=True)
        return {k: _expand(v, shared, path, root, loc + (k,)) for k, v in data.items()}
    if isinstance(data, list):
        return [_expand(v, shared, path, root, loc + (i,)) for i, v in enumerate(data)]
    return data


def _shared_conditions(dirs: list[Path], nodes: bool = True) -> _Shared:
    """The shared conditions of every directory (a later one with the same id replaces an
    earlier one, as incidents do), and the files that could not be used. Without ``nodes``
    as for ``_load``."""
    shared = _Shared()
    for d in dirs:
        for path in _yaml_files(d / CONDITIONS_DIR):
            try:
                cond = _read_then(path, lambda read, _p=path: _shared_condition(_p, read), nodes)
            except KnowledgeError as exc:
                shared.problems.append(exc)
                shared.broken[path.stem] = path
                shared.conditions.pop(path.stem, None)
            else:
                shared.conditions[cond.id] = cond
                shared.broken.pop(cond.id, None)
    return shared


def _shared_condition(path: Path, read: tuple[Any, Optional[Node]]) -> "SharedCondition":
    data, root = read
    if not isinstance(data, dict):
        raise KnowledgeError(_problem(path, root, (), "expected a mapping with id, says, when"))
    try:
        cond = SharedCondition.model_validate(data)
    except ValidationError as exc:
        raise KnowledgeError(_validation_problems(path, exc, root, SharedCondition)) from None
    if cond.id != path.stem:
        raise KnowledgeError(_problem(path, root, ("id",), f"id: '{cond.id}' does not match the file name '{path.stem}'"))
    return cond


def _yaml_files(folder: Path) -> list[Path]:
    """A directory's YAML files in name order (``.yaml`` first, then ``.yml``); none if it is not one."""
    return sorted(folder.glob("*.yaml")) + sorted(folder.glob("*.yml")) if folder.is_dir() else []


def kb_dirs(extra: Optional[list[Union[str, Path]]] = None) -> list[Path]:
    dirs = [shipped_dir()]
    env = os.environ.get(ENV_VAR)
    if env:
        dirs.extend(Path(p) for p in env.split(os.pathsep) if p)
    dirs.extend(Path(p) for p in (extra or []))
    return dirs


def load_knowledge(extra: Optional[list[Union[str, Path]]] = None, *, include_shipped: bool = True,
                   strict: bool = False) -> KnowledgeBase:
    """Load every incident. A broken file is skipped and listed in ``problems`` (so one bad
    file of a team's KB does not cost the user their diagnosis), or raised when ``strict``.

    Files are validated on every start; what their YAML holds, their patterns' compiled
    code and their safety verdicts come from the start-up cache (``oomdoctor.read.cache``) when
    it has them: plain data in ``marshal``, never a pickle, which would run the code of
    whoever can write to the cache directory."""
    dirs = kb_dirs(extra) if include_shipped else [Path(p) for p in (extra or [])]
    incidents: dict[str, Incident] = {}
    files: dict[str, Path] = {}
    problems: list[str] = []
    for path, inc, _root, error in _walk(dirs, nodes=False):
        if error is not None:
            if strict:
                raise error
            problems.append(str(error))
            continue
        incidents[inc.id] = inc
        files[inc.id] = path
    return KnowledgeBase(incidents, files, problems)


def _walk(dirs: list[Path], nodes: bool = True):
    """(path, incident, YAML root node, None) for each file that loads, (path, None, None,
    KnowledgeError) for the rest, directories in order and files in name order: what
    loading and lint both read. Without ``nodes`` the root is None (see ``_load``)."""
    shared = _shared_conditions([d for d in dirs if d.is_dir()], nodes)
    for error in shared.problems:
        yield error.problems[0].path, None, None, error
    for d in dirs:
        if not d.is_dir():
            yield d, None, None, KnowledgeError(Problem(d, None, None, "not a directory"))
            continue
        for path in _yaml_files(d):
            try:
                inc, root = _load(path, shared, nodes)
            except KnowledgeError as exc:
                yield path, None, None, exc
            else:
                yield path, inc, root, None


@lru_cache(maxsize=1)
def _default() -> KnowledgeBase:
    return load_knowledge()


def default_knowledge() -> KnowledgeBase:
    return _default()

