"""Loading knowledge-base YAML from files that are hostile: no code from a planted cache
file, no alias bomb, no regular expression that backtracks catastrophically. Every hostile
input is made here, in a temporary directory."""
from __future__ import annotations

import copy
import hashlib
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from oomdoctor import __version__
from oomdoctor.cli import main
from oomdoctor.kb.knowledge import (
    KnowledgeError,
    load_file,
    load_knowledge,
    shipped_dir,
)
from oomdoctor.kb.lint import lint
from oomdoctor.kb.regex_safety import NESTED, OVERLAP, backtracking_risk

TEMPLATE = shipped_dir() / "alloc-fragmentation.yaml"


def _template() -> dict:
    return yaml.safe_load(TEMPLATE.read_text(encoding="utf-8"))


def _quoted(text: str) -> str:
    """A YAML single-quoted scalar (backslashes stay as written)."""
    return "'" + text.replace("'", "''") + "'"


def _write_with(directory: Path, stem: str, place, value: str) -> tuple[Path, str]:
    """Write the template as ``stem`` with ``value`` put where ``place`` puts the marker;
    return the file and the place of the value, 'line:col'."""
    data = copy.deepcopy(_template())
    data["id"] = stem
    place(data, "@@VALUE@@")
    text = yaml.safe_dump(data, sort_keys=False, width=10_000)
    line, row = next((n, row) for n, row in enumerate(text.splitlines(), 1) if "@@VALUE@@" in row)
    col = (row.index("'@@VALUE@@'") if "'@@VALUE@@'" in row else row.index("@@VALUE@@")) + 1
    path = directory / f"{stem}.yaml"
    path.write_text(text.replace("'@@VALUE@@'", value).replace("@@VALUE@@", value), encoding="utf-8")
    return path, f"{line}:{col}"


def _lint_cli(directory: Path):
    result = CliRunner().invoke(main, ["kb", "lint", "--no-shipped", str(directory)])
    assert "Traceback" not in result.output
    return result


def _shipped_patterns() -> list[str]:
    found: list[str] = []

    def walk(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("text", "frame", "matches") and isinstance(value, str):
                    found.append(value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for path in sorted(shipped_dir().glob("*.yaml")):
        walk(yaml.safe_load(path.read_text(encoding="utf-8")))
    return found


# -- the shipped knowledge base ------------------------------------------------------------

def test_shipped_kb_loads_strict_and_lints_clean():
    kb = load_knowledge(strict=True)
    assert len(kb) >= 20 and kb.problems == []
    assert lint() == []
    result = CliRunner().invoke(main, ["kb", "lint"])
    assert result.exit_code == 0, result.output
    assert "knowledge base OK" in result.output


def test_every_shipped_pattern_passes_the_backtracking_check():
    patterns = _shipped_patterns()
    assert len(patterns) > 50
    assert [p for p in patterns if backtracking_risk(p)] == []


# -- no cache file is read or written ---------------------------------------------------------

class _Planted:
    """Unpickling this creates ``marker``: the proof that a planted file ran code."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def _old_cache_name(dirs: list[Path]) -> str:
    """The file name the pickle cache used for exactly these directories."""
    h = hashlib.sha1(__version__.encode())
    for d in dirs:
        for path in sorted(d.glob("*.y*ml")):
            st = path.stat()
            h.update(f"{path}\0{st.st_mtime_ns}\0{st.st_size}\n".encode())
    return f"kb-{h.hexdigest()[:20]}.pickle"


def test_a_planted_cache_file_is_never_unpickled(tmp_path, monkeypatch):
    kb_dir = tmp_path / "kb"
    kb_dir.mkdir()
    (kb_dir / "alloc-fragmentation.yaml").write_text(TEMPLATE.read_text(encoding="utf-8"), encoding="utf-8")
    cache = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("OOMDOCTOR_NO_CACHE", raising=False)
    marker = tmp_path / "code-ran"
    planted = cache / "oomdoctor" / _old_cache_name([kb_dir])
    planted.parent.mkdir(parents=True)
    planted.write_bytes(pickle.dumps(_Planted(marker)))
    unpickled: list[object] = []
    monkeypatch.setattr(pickle, "load", lambda *a, **k: unpickled.append(a))
    monkeypatch.setattr(pickle, "loads", lambda *a, **k: unpickled.append(a))

    kb = load_knowledge([kb_dir], include_shipped=False)

    assert unpickled == [] and not marker.exists()
    assert [inc.id for inc in kb] == ["alloc-fragmentation"] and kb.problems == []


def test_loading_writes_nothing_to_the_cache_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("OOMDOCTOR_NO_CACHE", raising=False)
    load_knowledge()
    load_knowledge([shipped_dir()])
    assert not (tmp_path / "cache").exists() and not (tmp_path / "home").exists()


def test_without_a_home_nothing_lands_in_the_current_directory(tmp_path, monkeypatch):
    # no HOME and no password entry: '~' stays '~', a directory relative to the cwd
    monkeypatch.delenv("HOME", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.delenv("OOMDOCTOR_NO_CACHE", raising=False)
    monkeypatch.setattr(os.path, "expanduser", lambda p: p)
    monkeypatch.chdir(tmp_path)
    load_knowledge()
    assert list(tmp_path.iterdir()) == []


# -- YAML aliases ------------------------------------------------------------------------------

def test_an_alias_is_refused_with_file_and_line(tmp_path):
    text = TEMPLATE.read_text(encoding="utf-8").replace("id: alloc-fragmentation", "id: aliased", 1)
    text += "next_steps:\n  - &step capture a memory snapshot\n  - *step\n"
    path = tmp_path / "aliased.yaml"
    path.write_text(text, encoding="utf-8")
    alias_line = len(text.splitlines())   # '  - *step': the alias is in column 5
    with pytest.raises(KnowledgeError) as err:
        load_file(path)
    assert str(err.value) == (f"{path}:{alias_line}:5: YAML alias *step is not allowed in knowledge files "
                              "(write the value out)")

    result = _lint_cli(tmp_path)
    assert result.exit_code == 1
    assert result.output.strip() == str(err.value)

    kb = load_knowledge([tmp_path], include_shipped=False)
    assert len(kb) == 0 and kb.problems == [str(err.value)]
    with pytest.raises(KnowledgeError):
        load_knowledge([tmp_path], include_shipped=False, strict=True)


def test_an_alias_without_its_anchor_is_refused_the_same_way(tmp_path):
    text = TEMPLATE.read_text(encoding="utf-8").replace("id: alloc-fragmentation", "id: dangling", 1)
    text += "next_steps:\n  - *nowhere\n"
    path = tmp_path / "dangling.yaml"
    path.write_text(text, encoding="utf-8")
    assert lint([tmp_path], include_shipped=False) == [
        (f"{path}:{len(text.splitlines())}:5: YAML alias *nowhere is not allowed in knowledge files "
         "(write the value out)")]


def test_ampersands_in_values_are_no_anchors(tmp_path):
    data = dict(_template(), id="ampersands")
    data["remediations"][0]["knobs"]["shell"] = "ulimit -l unlimited && python train.py &>log &"
    data["next_steps"] = ["Q&A: see the &amp; thread", "a&b"]
    (tmp_path / "ampersands.yaml").write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    inc = load_file(tmp_path / "ampersands.yaml")
    assert inc.remediations[0].knobs["shell"] == "ulimit -l unlimited && python train.py &>log &"
    assert inc.next_steps == ["Q&A: see the &amp; thread", "a&b"]


def test_an_anchor_without_alias_is_harmless(tmp_path):
    text = TEMPLATE.read_text(encoding="utf-8").replace("id: alloc-fragmentation", "id: anchored", 1)
    text += "next_steps:\n  - &step capture a memory snapshot\n"
    (tmp_path / "anchored.yaml").write_text(text, encoding="utf-8")
    assert lint([tmp_path], include_shipped=False) == []


def _alias_bomb(levels: int) -> str:
    """Nested aliases: ``levels`` short lines that stand for 9**levels conditions."""
    rows = ["id: laughs", "requires:", "  - any:", "    - &c0 {fact: oom.any, eq: true}"]
    rows += [f"    - &c{k} {{all: [{', '.join([f'*c{k - 1}'] * 9)}]}}" for k in range(1, levels + 1)]
    return "\n".join(rows) + "\n"


def test_a_billion_laughs_file_is_refused_at_once(tmp_path):
    bomb = _alias_bomb(9)
    assert len(bomb) < 1024
    (tmp_path / "laughs.yaml").write_text(bomb, encoding="utf-8")
    # its own process: a loader that expanded the aliases would take minutes and gigabytes
    result = subprocess.run([sys.executable, "-m", "oomdoctor", "kb", "lint", "--no-shipped", str(tmp_path)],
                            check=False, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    col = bomb.splitlines()[4].index("*c0") + 1
    expected = f"{tmp_path / 'laughs.yaml'}:5:{col}: YAML alias *c0 is not allowed in knowledge files"
    assert result.stdout.strip() == expected + " (write the value out)"
    assert "Traceback" not in result.stderr


def test_a_small_alias_bomb_is_reported_by_lint_and_skipped_by_loading(tmp_path):
    (tmp_path / "laughs.yaml").write_text(_alias_bomb(3), encoding="utf-8")
    problems = lint([tmp_path], include_shipped=False)
    assert len(problems) == 1 and problems[0].startswith(f"{tmp_path / 'laughs.yaml'}:5:")
    assert "YAML alias *c0" in problems[0]
    assert load_knowledge([tmp_path], include_shipped=False).problems == problems


# -- regular expressions that backtrack catastrophically ----------------------------------------

def _in_signal_text(d, v):
    d["signals"][0]["when"] = {"text": v}


def _in_nested_frame(d, v):
    d["signals"][1]["when"] = {"all": [{"fact": "oom.device", "eq": True}, {"not": {"frame": v, "innermost": 3}}]}


def _in_not_when_matches(d, v):
    d["remediations"][0]["not_when"] = [{"when": {"fact": "env.alloc_conf", "matches": v}, "why": "already on"}]


def _in_requires(d, v):
    d["requires"] = [{"any": [{"fact": "oom.device", "eq": True}, {"text": v, "near_failure": 5}]}]


PLACES = [_in_signal_text, _in_nested_frame, _in_not_when_matches, _in_requires]
DANGEROUS = [
    (r"(a+)+b", NESTED),
    (r"(\w*)*$", NESTED),
    (r"^(\s*#.*)*$", NESTED),
    (r"CUDA out of memory(?:\s*\w+\s?)*Tried", NESTED),
    (r"(?:\d{1,3})+x", NESTED),
    (r"(a|a)*b", OVERLAP),
    (r"(?:alloc|al+oc|[a-z]+)+ failed", NESTED),
    (r"(?:\w|\d\d)+!", OVERLAP),
]


@pytest.mark.parametrize("place", PLACES, ids=lambda f: f.__name__.lstrip("_"))
@pytest.mark.parametrize("pattern,reason", DANGEROUS, ids=[p for p, _ in DANGEROUS])
def test_a_dangerous_pattern_is_refused_with_file_and_line(tmp_path, place, pattern, reason):
    path, where = _write_with(tmp_path, "hostile", place, _quoted(pattern))
    expected = f"{path}:{where}: pattern {pattern!r} can backtrack catastrophically ({reason})"
    with pytest.raises(KnowledgeError) as err:
        load_file(path)
    assert str(err.value) == expected
    result = _lint_cli(tmp_path)
    assert result.exit_code == 1 and result.output.strip() == expected


def test_loading_skips_a_file_with_a_dangerous_pattern_and_keeps_the_rest(tmp_path):
    path, where = _write_with(tmp_path, "hostile", _in_signal_text, _quoted("(x+x+)+y"))
    (tmp_path / "alloc-fragmentation.yaml").write_text(TEMPLATE.read_text(encoding="utf-8"), encoding="utf-8")
    kb = load_knowledge([tmp_path], include_shipped=False)
    assert [inc.id for inc in kb] == ["alloc-fragmentation"]
    assert kb.problems == [f"{path}:{where}: pattern '(x+x+)+y' can backtrack catastrophically ({NESTED})"]


def test_a_long_dangerous_pattern_is_shortened_in_the_message(tmp_path):
    pattern = "memory(?:" + "|".join(f"word{i}" for i in range(30)) + "|(?:\\w+\\s?)+)*!"
    path, where = _write_with(tmp_path, "hostile", _in_signal_text, _quoted(pattern))
    problems = lint([tmp_path], include_shipped=False)
    shown = pattern[:77] + "..."
    assert problems == [f"{path}:{where}: pattern {shown!r} can backtrack catastrophically ({NESTED})"]


SAFE = [
    r"(?:\d+\.)+\d+", r"(?:\w+,)*\w+", r"(a|b)*c", r"(?:a|ab)*c", r"(?:[^,]+,)*", r"(?:\d{3})+\b",
    r"(\w+)(?:\s+\1)*", r"(?:foo|fa)+", r"(?:.*\n)*x", r"(a+){2}b", r"(?>a+)+b", r"(?:a+)++b",
    r"(?:\d|\w)+!", r"(?i)(?:a|B)+x", r"(?:,\d{3})*", r"(?:[A-Za-z_]\w*\.)*\w+\(", r"(?:ab?)+c",
    r"Tried to allocate (\d+(?:\.\d+)?) ([GM]iB)", r"(?m)^\s*File \"[^\"]+\", line \d+(?:, in \w+)?$",
    # only the regex module reads these: not judged, never an error
    r"[[:alpha:]]+", r"\p{Lu}+\d+", r"(?:out of memory){e<=1}", r"(?<size>\d+) ?(?<unit>[GM]iB)",
]


@pytest.mark.parametrize("pattern", SAFE)
def test_a_safe_pattern_loads(tmp_path, pattern):
    _write_with(tmp_path, "benign", _in_signal_text, _quoted(pattern))
    assert lint([tmp_path], include_shipped=False) == []


BACKTRACKING = [
    r"(a+)+", r"(\w*)*", r"(a|a)*", r"(a*)*b", r"(\w+\s?)*x", r"(a?b?)*c", r"(x+x+)+y", r"(?:a|ab|b)*c",
    r"(a+a)+b", r"(?:\s*\w+=\S+)+$", r"(?:(a+)+){2}", r"(?=(a+)+b)", r"(a{1,3})+", r"(?:\d{3,5})+x",
    r"(?P<n>a+)+", r"(?s:.*,)*x", r"(?:[^,]|a)+", r"(.*?,)*x", r"(a|a){1,100}", r"(?:(a)\1?)+",
    r"(?x) ( a + ) + b", r"(?:ab(?:\w)+b){1,3}!", r"(a+){2,5}b", r"(?i)(?:ab|AB|c)+x",
    r"(?<size>\d+)(?:\s*\w+)*?x",
]


@pytest.mark.parametrize("pattern", BACKTRACKING)
def test_backtracking_risk_finds_exponential_patterns(pattern):
    assert backtracking_risk(pattern) in (NESTED, OVERLAP)


@pytest.mark.parametrize("pattern", SAFE)
def test_backtracking_risk_accepts_safe_patterns(pattern):
    assert backtracking_risk(pattern) is None


def test_backtracking_risk_is_quick_on_large_or_deep_patterns():
    import time

    start = time.perf_counter()
    assert backtracking_risk("(" * 2000 + "a" + ")" * 2000) is None          # too deep for the parser
    assert backtracking_risk("(?:" + "[ab]?" * 400 + ")*c") is None            # too large to judge
    assert backtracking_risk("(a*)*" + "x" * 20_000) == NESTED
    assert time.perf_counter() - start < 5
