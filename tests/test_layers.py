"""The package's folders follow the pipeline, and imports only go down it.

Layers, lowest first (docs/architecture.md):

    facts → read → parsers → memory → kb → report → pipeline → scan, wrap → cli (the doors)

A module may import its own layer's modules and those of lower layers; ``scan`` and
``wrap`` are two doors side by side and do not import each other. Imports under
``if TYPE_CHECKING:`` are annotations only and do not count. Every import counts,
including those inside functions, so a circle cannot hide behind a lazy import.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

import oomdoctor

PACKAGE = Path(oomdoctor.__file__).resolve().parent
LAYERS = [
    ("facts",),
    ("read",),
    ("parsers",),
    ("memory",),
    ("kb",),
    ("report",),
    ("pipeline",),
    ("scan", "wrap"),
    ("cli", "__init__", "__main__", "_moved"),
]
LAYER_OF = {top: i for i, tops in enumerate(LAYERS) for top in tops}


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE).with_suffix("")
    parts = ["oomdoctor", *rel.parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def top_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _type_checking_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def imports_of(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module) for every runtime import of a oomdoctor module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _type_checking_lines(tree)
    me = module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.startswith("oomdoctor")]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            elif node.module and node.module.startswith("oomdoctor"):
                target = node.module
            else:
                continue
            # "from . import x" imports the submodule x when there is one
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                out.append((node.lineno, sub if _exists(sub) else target))
    return out


def _exists(module: str) -> bool:
    rel = Path(*module.split(".")[1:])
    return (PACKAGE / rel).with_suffix(".py").is_file() or (PACKAGE / rel / "__init__.py").is_file()


MODULES = sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_only_go_down_the_pipeline(path: Path):
    me = module_name(path)
    mine = top_of(me)
    assert mine in LAYER_OF, f"{me}: a new top-level module or folder needs a layer in this test and docs/architecture.md"
    bad = []
    for line, target in imports_of(path):
        theirs = top_of(target)
        if theirs == "__init__" and target == "oomdoctor" and mine != "__init__":
            # `from .. import __version__`: the version string, not the API
            continue
        if theirs not in LAYER_OF:
            bad.append(f"line {line}: {target} (no layer)")
        elif LAYER_OF[theirs] > LAYER_OF[mine] or {mine, theirs} == {"scan", "wrap"}:
            bad.append(f"line {line}: {target} is above {me}")
    assert not bad, f"{me} imports upwards:\n" + "\n".join(bad)


def test_no_import_circles():
    graph = {module_name(p): {t for _l, t in imports_of(p)} for p in MODULES}
    # a package's __init__ importing its own submodules is how packages re-export; a
    # submodule importing its package's __init__ back is the circle to catch
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for t in sorted(graph.get(m, ())):
            if t not in graph or t == m:
                continue
            if t.startswith(m + "."):
                continue  # a package importing its own submodule
            if state.get(t) == 1:
                cycle = stack[stack.index(t):] + [t]
                raise AssertionError("import circle: " + " → ".join(cycle))
            if t not in state:
                visit(t)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)


def test_the_check_sees_an_upward_import(tmp_path: Path, monkeypatch):
    """The layer check itself: a facts module importing the classifier is caught."""
    bad = PACKAGE / "facts" / "_layer_probe.py"
    bad.write_text("from ..kb.classify import classify\n", encoding="utf-8")
    try:
        with pytest.raises(AssertionError, match="imports upwards"):
            test_imports_only_go_down_the_pipeline(bad)
    finally:
        bad.unlink()


def test_old_module_paths_still_import_with_a_warning():
    import importlib
    import sys

    sys.modules.pop("oomdoctor.reader", None)
    with pytest.warns(DeprecationWarning, match="oomdoctor.read.reader"):
        old = importlib.import_module("oomdoctor.reader")
    from oomdoctor.read import reader
    assert old is reader
    assert reader.__spec__.name == "oomdoctor.read.reader"
