"""The knowledge base: one YAML file per incident, validated and compiled at load.

An incident file says what evidence counts and how much (``signals``), when the incident
can apply at all (``requires``), what fixes it in each framework's syntax
(``remediations``), and carries example logs that the test suite runs. The engine in
``classify.py`` knows no incident by name. The condition language is described in
``docs/knowledge-format.md`` and enforced by the models below; a broken file is reported
as ``file: field: reason``; YAML aliases and regular expressions that can backtrack
catastrophically are refused as ``file: line N: reason``.

Search path: the shipped KB, then ``$OOMDOCTOR_KB`` (``os.pathsep``-separated
directories), then directories passed with ``--kb``. A later file with the same id
replaces an earlier one, so a team can override a shipped incident.
"""
from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal, Optional, Union

import regex as re
import yaml
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from yaml.composer import Composer, ComposerError
from yaml.constructor import SafeConstructor
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.resolver import Resolver

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
FRAMEWORK_KEYS = (
    "llamafactory", "axolotl", "xtuner", "hf", "trl", "deepspeed", "accelerate", "fsdp",
    "llama-cookbook", "megatron", "ms-swift", "unsloth", "torchtune", "env", "code",
    "slurm", "kubernetes", "shell",
)


class KnowledgeError(Exception):
    """A knowledge-base file that cannot be used; str() is 'file: field: reason'."""


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
        re.compile(value)
    except re.error as exc:
        raise ValueError(f"invalid regular expression {value!r}: {exc}") from None
    # the classifier's timeout bounds such a pattern on one log, but a search that times
    # out counts as no match (a wrong score, silently) and a scan of thousands of logs
    # pays the timeout on each: refuse the pattern when the file is loaded
    reason = backtracking_risk(value)
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


class Signal(_Strict):
    id: str
    weight: float = Field(description="added to the score when the condition holds; negative for counter-evidence")
    when: Condition
    says: str = Field(description="the reason in words; {fact.name} placeholders are filled in")


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

    @field_validator("min_versions")
    @classmethod
    def _versions(cls, v: dict[str, str]) -> dict[str, str]:
        from packaging.version import InvalidVersion, Version
        for pkg, ver in v.items():
            try:
                Version(str(ver))
            except InvalidVersion:
                raise ValueError(f"min_versions.{pkg}: {ver!r} is not a version") from None
        return {k: str(x) for k, x in v.items()}


class Example(_Strict):
    name: str
    expect: Literal["top", "ranked", "absent", "not-top"] = Field(
        description="top: first diagnosis; ranked: in the top 3; absent: not diagnosed; not-top: not first")
    log: str
    note: Optional[str] = None


class Incident(_Strict):
    id: str = Field(pattern=r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
    title: str
    summary: str
    explanation: str
    memory_failure: bool = True
    fallback: bool = False
    priority: int = Field(default=0, description="breaks score ties; higher first")
    min_score: float = Field(default=2.0, description="score needed to be reported")
    requires: list[Condition] = Field(default_factory=list)
    signals: list[Signal]
    remediations: list[RemediationSpec]
    next_steps: list[str] = Field(default_factory=list)
    references: list[str] = Field(default_factory=list)
    examples: list[Example]

    @model_validator(mode="after")
    def _examples(self) -> "Incident":
        pos = sum(1 for e in self.examples if e.expect in ("top", "ranked"))
        neg = sum(1 for e in self.examples if e.expect in ("absent", "not-top"))
        if pos < 2 or neg < 1:
            raise ValueError(f"examples: need at least two positive and one negative example (have {pos} and {neg})")
        ids = [s.id for s in self.signals]
        if len(ids) != len(set(ids)):
            raise ValueError("signals: ids must be unique")
        rids = [r.id for r in self.remediations]
        if len(rids) != len(set(rids)):
            raise ValueError("remediations: ids must be unique")
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


def _format_error(path: Path, exc: ValidationError, root: Optional[Node] = None) -> str:
    err = exc.errors()[0]
    more = f" (+{len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
    cause = (err.get("ctx") or {}).get("error")
    if isinstance(cause, UnsafePattern) and root is not None:
        # a pattern is found by its line: the field path of a deeply nested condition is not
        return f"{path}: line {_line_of(root, err['loc'])}: {cause}{more}"
    loc = ".".join(str(p) for p in err["loc"] if p not in ("function-after",)) or "(file)"
    msg = err["msg"].removeprefix("Value error, ")
    return f"{path}: {loc}: {msg}{more}"


def _line_of(node: Node, loc: tuple) -> int:
    """The line of the YAML value at a validation error's location. Parts of the location
    that name no child (a validator's name) are passed over."""
    for key in loc:
        if isinstance(node, MappingNode):
            node = next((v for k, v in node.value if isinstance(k, ScalarNode) and k.value == str(key)), node)
        elif isinstance(node, SequenceNode) and isinstance(key, int) and 0 <= key < len(node.value):
            node = node.value[key]
    return node.start_mark.line + 1


# An alias needs an anchor, and an anchor is '&' and a name: text without such a pair
# cannot hold an alias that resolves, and is left to libyaml's faster composer
_MAY_ANCHOR = re.compile(r"&[^ \t\r\n,\[\]{}]")
_FAST = getattr(yaml, "CSafeLoader", None)


def _parse(path: Path) -> tuple[Any, Optional[Node]]:
    """The file's data and its YAML node tree (for line numbers)."""
    text = path.read_text(encoding="utf-8")
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
    try:
        data, root = _parse(path)
    except _AliasFound as exc:
        raise KnowledgeError(f"{path}: line {exc.problem_mark.line + 1}: YAML alias {exc.problem} is not "
                             "allowed in knowledge files (write the value out)") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else "(file)"
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise KnowledgeError(f"{path}: {where}: invalid YAML: {problem}") from None
    except RecursionError:
        raise KnowledgeError(f"{path}: (file): invalid YAML: nested too deeply") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise KnowledgeError(f"{path}: (file): cannot read: {exc}") from None
    if not isinstance(data, dict):
        raise KnowledgeError(f"{path}: (file): expected a mapping with id, title, signals, ...")
    try:
        incident = Incident.model_validate(data)
    except ValidationError as exc:
        raise KnowledgeError(_format_error(path, exc, root)) from None
    except RecursionError:
        raise KnowledgeError(f"{path}: (file): conditions nested too deeply") from None
    if incident.id != path.stem:
        raise KnowledgeError(f"{path}: id: '{incident.id}' does not match the file name '{path.stem}'")
    return incident


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

    Files are parsed and validated on every start, with no cache on disk: a cache of the
    validated data (JSON, validated again when read) saves only ~20 ms of the ~60 ms this
    takes for the shipped KB, and a pickle, which saves it all, runs the code of whoever
    can write to the cache directory."""
    dirs = kb_dirs(extra) if include_shipped else [Path(p) for p in (extra or [])]
    incidents: dict[str, Incident] = {}
    files: dict[str, Path] = {}
    problems: list[str] = []
    for path, inc, problem in _walk(dirs):
        if problem is not None:
            if strict:
                raise KnowledgeError(problem)
            problems.append(problem)
            continue
        incidents[inc.id] = inc
        files[inc.id] = path
    return KnowledgeBase(incidents, files, problems)


def _walk(dirs: list[Path]):
    """(path, incident, None) for each file that loads, (path, None, problem) for the rest,
    directories in order and files in name order: what loading and lint both read."""
    for d in dirs:
        if not d.is_dir():
            yield d, None, f"{d}: (directory): not a directory"
            continue
        for path in sorted(d.glob("*.yaml")) + sorted(d.glob("*.yml")):
            try:
                yield path, load_file(path), None
            except KnowledgeError as exc:
                yield path, None, str(exc)


@lru_cache(maxsize=1)
def _default() -> KnowledgeBase:
    return load_knowledge()


def default_knowledge() -> KnowledgeBase:
    return _default()


def lint(dirs: Optional[list[Union[str, Path]]] = None, *, include_shipped: bool = True) -> list[str]:
    """Every problem in the given KB directories, one line each (empty list: all good)."""
    problems: list[str] = []
    seen: dict[str, Path] = {}
    targets = kb_dirs(dirs) if include_shipped else [Path(p) for p in (dirs or [])]
    for path, inc, problem in _walk(targets):
        if problem is not None:
            problems.append(problem)
            continue
        if inc.id in seen and seen[inc.id].parent == path.parent:
            problems.append(f"{path}: id: duplicate of {seen[inc.id]}")
        seen[inc.id] = path
    return problems
