"""``oomdoctor kb lint``: every problem of the knowledge files, one ``file:line:col: message`` each.

Two kinds of problem:

* errors: a file that does not load (``knowledge.py`` refuses it: invalid YAML, an alias,
  an unknown or missing key, a bad or catastrophic regular expression), two files with one
  id in one directory, a ``checked:`` note for a framework the remediation has no knob for,
  a ``max_versions`` not above the ``min_versions`` of the same package, and, in the shipped
  knowledge base only, an incident without two positive and one negative example;
* warnings, which fail only with ``--strict``: a team's incident without those examples,
  a knob without a ``checked:`` note, a note that names no version: no dotted number
  (``4.57.0``, ``v1.29``) and no known tool with its release number (``docker 24``,
  ``slurm v23``; ``KNOWN_TOOLS``), unless it says ``not verified: <why>``, the honest note
  for advice that has no key to read.

A ``checked:`` note says where a knob was verified, so that the next reader can check it
again: the package or tool, the released version(s) read and the file, e.g.
``transformers 4.57.0 and 5.10.0, training_args.py``.
"""
from __future__ import annotations

from pathlib import Path

import regex as re
from packaging.version import InvalidVersion, Version
from yaml.nodes import Node

from .knowledge import Incident, Problem, _problem, _walk, kb_dirs, shipped_dir

__all__ = ["Problem", "check", "failing", "format_problems", "lint"]

# Tools whose releases go by one number, so that 'docker 24' or 'slurm v23' names a version
# where 'TODO 1', 'line 120' or 'step 3' does not.
KNOWN_TOOLS = ("docker", "podman", "containerd", "kubernetes", "k8s", "kubectl", "helm", "slurm", "pbs",
               "lsf", "htcondor", "linux", "kernel", "systemd", "cuda", "rocm", "nccl", "nvidia-driver")
# a version: a dotted number (4.57.0, 0.9, core_r0.11.0, Kubernetes v1.29, Slurm 25.11), or a
# known tool and a release number ('docker 24', 'slurm v23')
_VERSION = re.compile(r"\d+\.\d+|\b(?:" + "|".join(re.escape(t) for t in KNOWN_TOOLS) + r")[ \t]+v?\d+\b",
                      re.IGNORECASE)
_POSITIVE = ("top", "ranked")
_NEGATIVE = ("absent", "not-top", "lead")


def check(dirs: list[str | Path] | None = None, *, include_shipped: bool = True) -> list[Problem]:
    """Every problem (errors and warnings) in the given directories, plus the shipped
    knowledge base and ``$OOMDOCTOR_KB`` unless ``include_shipped`` is False; files in
    order, each file's problems in line order."""
    targets = kb_dirs(dirs) if include_shipped else [Path(p) for p in (dirs or [])]
    unique: list[Path] = []
    for d in targets:        # the shipped directory named again is not a second copy of it
        if not any(_same(d, u) for u in unique):
            unique.append(d)
    shipped = shipped_dir()
    problems: list[Problem] = []
    seen: dict[str, Path] = {}
    for path, inc, root, error in _walk(unique):
        if error is not None:
            problems.extend(error.problems)
            continue
        found = _examples(path, inc, root, _same(path.parent, shipped)) + _knobs(path, inc, root)
        if inc.id in seen and seen[inc.id].parent == path.parent:
            found.append(_problem(path, root, ("id",), f"id '{inc.id}' is also the id of {seen[inc.id]}"))
        seen[inc.id] = path
        problems.extend(sorted(found, key=lambda p: (p.line or 0, p.col or 0)))
    return problems


def failing(problems: list[Problem], strict: bool = False) -> list[Problem]:
    """The problems that make lint fail: errors, and warnings too when ``strict``."""
    return [p for p in problems if strict or p.severity == "error"]


def format_problems(problems: list[Problem], strict: bool = False) -> list[str]:
    """One ``file:line:col: message`` line per problem (``warning:`` after the place unless strict)."""
    return [p.format(strict=strict) for p in problems]


def lint(dirs: list[str | Path] | None = None, *, include_shipped: bool = True,
         strict: bool = False) -> list[str]:
    """The problems that fail, as lines (an empty list: all good)."""
    return format_problems(failing(check(dirs, include_shipped=include_shipped), strict), strict)


def _same(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return a == b


def _examples(path: Path, inc: Incident, root: Node | None, shipped: bool) -> list[Problem]:
    """Two positive and one negative example: required of the shipped knowledge base
    (``tests/test_kb_examples.py`` runs them), a warning for a team's own incident."""
    pos = sum(1 for e in inc.examples if e.expect in _POSITIVE)
    neg = sum(1 for e in inc.examples if e.expect in _NEGATIVE)
    if pos >= 2 and neg >= 1:
        return []
    message = (f"examples: need at least two positive and one negative example (have {pos} and {neg}; "
               f"positive: expect {' or '.join(_POSITIVE)}, negative: expect {' or '.join(_NEGATIVE)})")
    return [_problem(path, root, ("examples",), message, key=True, severity="error" if shipped else "warning")]


def _knobs(path: Path, inc: Incident, root: Node | None) -> list[Problem]:
    """Each knob has a ``checked:`` note that names a version; notes only for knobs; a
    version range that is not empty."""
    found: list[Problem] = []
    for i, spec in enumerate(inc.remediations):
        at = ("remediations", i)
        for framework in spec.knobs:
            if framework not in spec.checked:
                found.append(_problem(
                    path, root, (*at, "knobs", framework),
                    f"remediation '{spec.id}': knob '{framework}' has no checked: note (the package or tool, "
                    "the version(s) read and the file)", key=True, severity="warning"))
        for framework, note in spec.checked.items():
            if framework not in spec.knobs:
                found.append(_problem(
                    path, root, (*at, "checked", framework),
                    f"remediation '{spec.id}': checked: '{framework}' is not one of its knobs "
                    f"({', '.join(spec.knobs)})", key=True))
            elif not _VERSION.search(note) and not note.lower().startswith("not verified:"):
                # "not verified: <why>" is an honest answer for advice with no key to read
                found.append(_problem(
                    path, root, (*at, "checked", framework),
                    f"remediation '{spec.id}': the checked: note for '{framework}' names no version "
                    "(e.g. 'transformers 4.57.0 and 5.10.0, training_args.py')", severity="warning"))
        for package, highest in spec.max_versions.items():
            lowest = spec.min_versions.get(package)
            if lowest is None:
                continue
            try:
                empty = Version(highest) <= Version(lowest)
            except InvalidVersion:   # refused when the file loaded
                continue
            if empty:
                found.append(_problem(
                    path, root, (*at, "max_versions", package),
                    f"remediation '{spec.id}': max_versions {package} {highest} is not above its "
                    f"min_versions {lowest}: no version has the knob", key=True))
    return found
