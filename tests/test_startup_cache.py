"""The start-up cache (``oomdoctor.read.cache``): what it rebuilds behaves as what it saves a
start from building, and a missing, damaged or foreign file costs only time."""
from __future__ import annotations

import json
import marshal
import os
import subprocess
import sys
from pathlib import Path

import pytest
import regex

from oomdoctor.read import cache
from oomdoctor.kb.knowledge import load_knowledge
from oomdoctor.read.patterns import LazyPattern

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """A cache of its own in ``tmp_path``, forgotten before and after the test."""
    monkeypatch.setenv("OOMDOCTOR_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("OOMDOCTOR_CACHE", raising=False)
    cache.reset()
    yield tmp_path
    cache.reset()


def _sample_lines() -> list[str]:
    lines: list[str] = []
    for path in sorted((FIXTURES / "logs").glob("*.log"))[::3] + sorted((FIXTURES / "real").glob("*.log"))[::25]:
        lines.extend(path.read_text(encoding="utf-8", errors="replace").splitlines()[:200])
    return lines


def _code_patterns() -> list[LazyPattern]:
    """Every lazy pattern the package's modules hold (in their globals, and in the tables,
    lists and tuples there; not through ``gc``, which does not list what ``gc.freeze`` froze)."""
    import oomdoctor.parsers  # noqa: F401 - every family's patterns exist once imported
    import oomdoctor.pipeline  # noqa: F401
    found: dict = {}

    def walk(value, depth: int) -> None:
        if isinstance(value, LazyPattern):
            found[(value.pattern, int(value.flags))] = value
        elif depth and isinstance(value, (list, tuple, set, frozenset)):
            for item in value:
                walk(item, depth - 1)
        elif depth and isinstance(value, dict):
            for item in value.values():
                walk(item, depth - 1)

    for name, module in list(sys.modules.items()):
        if name.startswith("oomdoctor") and module is not None:
            for value in vars(module).values():
                walk(value, 4)
    return sorted(found.values(), key=lambda p: (p.pattern, int(p.flags)))


def test_every_pattern_rebuilt_from_its_cached_code_matches_as_compiled():
    """Each of the parsers' patterns and the KB's, rebuilt from what the file keeps (its
    pickled data through marshal), finds the same matches as the compiled pattern on
    lines of the fixture logs."""
    kb = load_knowledge()
    sources = {(p.pattern, int(p.flags)) for p in _code_patterns()}
    for inc in kb.incidents.values():
        for text in _kb_patterns(inc.model_dump(by_alias=True)):
            sources.add((text, 0))
    assert len(sources) > 300
    lines = _sample_lines()
    text = "\n".join(lines)
    for pattern, flags in sorted(sources):
        compiled = regex.compile(pattern, flags)
        rebuilt = cache._native.compile(*marshal.loads(marshal.dumps(compiled._pickled_data)))
        assert (rebuilt.pattern, rebuilt.flags, rebuilt.groupindex) == (compiled.pattern, compiled.flags,
                                                                         compiled.groupindex), pattern
        got = [(m.span(), m.groups()) for m in rebuilt.finditer(text, timeout=5)]
        want = [(m.span(), m.groups()) for m in compiled.finditer(text, timeout=5)]
        assert got == want, pattern


def _kb_patterns(node) -> list[str]:
    out: list[str] = []
    if isinstance(node, dict):
        for key in ("frame", "text", "matches"):
            if isinstance(node.get(key), str):
                out.append(node[key])
        for value in node.values():
            out.extend(_kb_patterns(value))
    elif isinstance(node, list):
        for value in node:
            out.extend(_kb_patterns(value))
    return out


def test_a_saved_pattern_is_read_back_in_a_new_process_state(fresh):
    first = cache.compile_pattern(r"Tried to allocate (\d+(?:\.\d+)?) ([KMG]iB)", regex.I)
    cache.save()
    files = list(fresh.iterdir())
    assert [f.name for f in files] == [cache.cache_file().name]
    cache.reset()
    store = cache._CACHE.store("patterns")
    assert (first.pattern, int(regex.I)) in store
    again = cache.compile_pattern(first.pattern, regex.I)
    assert again is not first
    assert again.search("tried to allocate 2.00 GiB").groups() == ("2.00", "GiB")
    assert not any(cache._CACHE.new.values())   # nothing new to write: it came from the file


def test_a_damaged_file_is_ignored_and_replaced(fresh):
    path = cache.cache_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\x00not marshal at all")
    path.chmod(0o600)
    assert cache.compile_pattern(r"out of memory").search("CUDA out of memory")
    cache.save()
    cache.reset()
    assert ("out of memory", 0) in cache._CACHE.store("patterns")


def test_a_wrong_entry_is_compiled_instead(fresh):
    good = regex.compile("bar")
    cache._CACHE.store("patterns")[("foo", 0)] = good._pickled_data   # the code of another pattern
    cache._CACHE.store("patterns")[("baz", 0)] = ("baz", "not code")
    assert cache.compile_pattern("foo").search("a foo") and not cache.compile_pattern("foo").search("bar")
    assert cache.compile_pattern("baz").search("baz")


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX permissions")
def test_a_file_others_may_write_is_not_read(fresh):
    cache.compile_pattern("x+y")
    cache.save()
    cache.cache_file().chmod(0o666)
    cache.reset()
    assert cache._CACHE.store("patterns") == {}


def test_turned_off_it_writes_nothing(fresh, monkeypatch):
    monkeypatch.setenv("OOMDOCTOR_CACHE", "off")
    assert cache.compile_pattern("a+b").search("aab")
    cache.save()
    assert list(fresh.iterdir()) == []


def test_an_unwritable_place_costs_nothing_but_time(fresh, monkeypatch):
    blocker = fresh / "file"
    blocker.write_text("")
    monkeypatch.setenv("OOMDOCTOR_CACHE_DIR", str(blocker / "cache"))   # under a file: cannot exist
    assert cache.compile_pattern("c+d").search("ccd")
    cache.save()   # no exception


def test_the_kb_loads_the_same_from_the_cache(fresh):
    cold = load_knowledge()
    cache.save()
    cache.reset()
    assert cache._CACHE.store("kb") and cache._CACHE.store("safety")
    warm = load_knowledge()
    assert not cache._CACHE.new["kb"]   # every file's data came from the cache
    assert {k: v.model_dump() for k, v in warm.incidents.items()} == {k: v.model_dump() for k, v in cold.incidents.items()}


def _broken_incident(kb_dir: Path) -> None:
    """A shipped incident whose only fault is a pattern that does not compile, deep in the file."""
    shipped = sorted((Path(__file__).resolve().parent.parent / "knowledge").glob("*.yaml"))[0]
    text = shipped.read_text(encoding="utf-8").replace(f"id: {shipped.stem}", "id: broken", 1)
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if i > 5 and line.strip().startswith("- "))
    indent = lines[at][: len(lines[at]) - len(lines[at].lstrip())]
    lines.insert(at, f"{indent}- {{text: 'a(', weight: 1}}")
    (kb_dir / "broken.yaml").write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_a_broken_kb_file_says_where_as_without_the_cache(fresh, tmp_path_factory, monkeypatch):
    kb_dir = tmp_path_factory.mktemp("kb")
    _broken_incident(kb_dir)
    monkeypatch.setenv("OOMDOCTOR_CACHE", "off")
    off = load_knowledge([kb_dir], include_shipped=False).problems
    monkeypatch.delenv("OOMDOCTOR_CACHE")
    cold = load_knowledge([kb_dir], include_shipped=False).problems
    cache.save()
    cache.reset()
    warm = load_knowledge([kb_dir], include_shipped=False).problems
    assert off and off == cold == warm
    place = regex.search(r"broken\.yaml:(\d+):(\d+): ", warm[0])
    assert place and int(place.group(1)) > 5   # the pattern's own line, not the file's first


def test_the_literal_sets_of_one_run_are_compiled_for_the_next(fresh):
    from oomdoctor.read import literal_index
    cache.remember_literal_set((("CUDA out of memory", "Killed"), False))
    cache.save()
    cache.reset()
    assert (("CUDA out of memory", "Killed"), False) in cache.literal_sets()
    cache._CACHE.store("literals")[("not", "a key")] = True
    assert all(isinstance(k[0], tuple) for k in cache.literal_sets())
    cache._CACHE.store("literals")[(("", "x"), False)] = True   # an empty literal breaks a native index
    assert (("", "x"), False) not in cache.literal_sets()
    literal_index._CHECKED = False   # a new process: the index is built again
    try:
        index = literal_index.shared()
        if index is None:
            pytest.skip("neither Hyperscan nor ahocorasick-rs is installed")
        assert (("CUDA out of memory", "Killed"), False) in index
    finally:
        literal_index._CHECKED = False


def test_a_native_database_is_built_once_and_loaded_after(fresh):
    built = []

    def build():
        built.append(1)
        return ["db", len(built)]

    def dump(db):
        return marshal.dumps(db)

    key = ("lib-1.0-block", "digest")
    assert cache.native_database(key, build, dump, marshal.loads) == ["db", 1]
    cache.save()
    cache.reset()
    assert cache.native_database(key, build, dump, marshal.loads) == ["db", 1]
    assert built == [1]   # loaded, not built


def test_a_native_database_the_library_refuses_is_built_again_and_replaced(fresh):
    def refuse(_data):
        raise ValueError("database built for another platform")

    key = ("lib-1.0-block", "digest")
    cache._CACHE.store("native")[key] = b"from another CPU"
    assert cache.native_database(key, lambda: "rebuilt", str.encode, refuse) == "rebuilt"
    cache.save()
    cache.reset()
    assert cache._CACHE.store("native")[key] == b"rebuilt"


def test_a_new_native_database_replaces_the_librarys_one_before(fresh):
    # the literal sets grow as parsers ask about new ones: the database of the sets before is
    # of no more use, and the file would grow by one database a set
    cache.native_database(("lib-1.0-block", "first"), lambda: "a", str.encode, bytes.decode)
    cache.native_database(("other-2.0-block", "kept"), lambda: "c", str.encode, bytes.decode)
    cache.save()
    cache.reset()
    cache.native_database(("lib-1.0-block", "second"), lambda: "b", str.encode, bytes.decode)
    # ... within one process too, and whatever release of the library built the one before
    cache.native_database(("lib-1.1-block", "third"), lambda: "d", str.encode, bytes.decode)
    cache.save()
    cache.reset()
    assert sorted(cache._CACHE.store("native")) == [("lib-1.1-block", "third"), ("other-2.0-block", "kept")]


def test_the_hyperscan_index_answers_the_same_from_its_cached_database(fresh):
    hyperscan = pytest.importorskip("hyperscan")
    from oomdoctor.read import literal_index
    blob = "step 3\ntorch.OutOfMemoryError: CUDA out of memory.\nKILLED by signal\ndone"
    starts = [0, 7, 51, 68]
    keys = [(("CUDA out of memory", "Killed"), False), (("killed",), True)]
    answers = []
    for _ in range(2):
        index = literal_index.LiteralIndex()
        for key in keys:
            index.register(key, remember=False)
        answers.append(index.lines(blob, starts))
        cache.save()
        cache.reset()
    assert answers[0] == answers[1] == {keys[0]: [1], keys[1]: [2]}
    stored = cache._CACHE.store("native")
    assert [k[0] for k in stored] == [f"hyperscan-{hyperscan.__version__}-block"]


def _env_with_cache() -> dict:
    """The caller's environment without a setting that turns the cache off."""
    return {k: v for k, v in os.environ.items() if k != "OOMDOCTOR_CACHE"}


def test_cli_reports_are_the_same_with_a_cold_and_a_warm_cache(tmp_path):
    log = FIXTURES / "logs" / sorted(p.name for p in (FIXTURES / "logs").glob("*.log"))[0]
    env = dict(_env_with_cache(), OOMDOCTOR_CACHE_DIR=str(tmp_path / "c"))
    runs = [subprocess.run([sys.executable, "-m", "oomdoctor", "diagnose", "--format", "json", str(log)],
                           capture_output=True, text=True, env=env) for _ in range(2)]
    assert (tmp_path / "c").is_dir()
    assert runs[0].returncode == runs[1].returncode
    assert json.loads(runs[0].stdout) == json.loads(runs[1].stdout)


def test_a_file_changed_after_it_was_written_is_ignored_whole(fresh):
    """A flipped bit in compiled code can hang or crash regex's C compiler, which does not
    check the code: the file's digest refuses any change."""
    cache.compile_pattern(r"Tried to allocate (\d+)")
    cache.save()
    path = cache.cache_file()
    blob = bytearray(path.read_bytes())
    blob[len(blob) // 2] ^= 0x01
    path.write_bytes(bytes(blob))
    cache.reset()
    assert cache._CACHE.store("patterns") == {}
    assert cache.compile_pattern(r"Tried to allocate (\d+)").search("Tried to allocate 20").group(1) == "20"
    cache.save()   # and the damaged file is replaced by a good one
    cache.reset()
    assert (r"Tried to allocate (\d+)", 0) in cache._CACHE.store("patterns")


def test_no_home_directory_turns_the_cache_off(monkeypatch):
    monkeypatch.delenv("OOMDOCTOR_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.delenv("LOCALAPPDATA", raising=False)

    def no_home():
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(Path, "home", staticmethod(no_home))
    cache.reset()
    try:
        assert cache.cache_dir() is None and not cache.enabled()
        assert cache.compile_pattern("e+f").search("eef")
        cache.save()
    finally:
        cache.reset()


def test_a_verdict_is_kept_for_the_code_that_judged_it(fresh):
    calls = []

    def judge(pattern):
        calls.append(pattern)
        return None

    assert cache.verdict("(a+)+", judge, "v1") is None
    cache.save()
    cache.reset()
    assert cache.verdict("(a+)+", lambda p: "nested quantifier", "v1") is None   # from the file
    assert cache.verdict("(a+)+", lambda p: "nested quantifier", "v2") == "nested quantifier"
    assert calls == ["(a+)+"]


def test_a_full_cache_keeps_what_the_process_used(fresh, monkeypatch):
    monkeypatch.setattr(cache, "MAX_ENTRIES", 4)
    for word in ("one", "two", "three"):
        cache.compile_pattern(word)
    cache.save()
    cache.reset()
    cache.compile_pattern("two")           # used from the file
    cache.compile_pattern("four")          # new
    cache.compile_pattern("five")          # new: past the bound
    cache.save()
    cache.reset()
    assert set(cache._CACHE.store("patterns")) == {("two", 0), ("four", 0), ("five", 0)}


def test_only_the_program_writes_the_cache(tmp_path):
    log = FIXTURES / "logs" / sorted(p.name for p in (FIXTURES / "logs").glob("*.log"))[0]
    lib, cli = tmp_path / "lib", tmp_path / "cli"
    run = lambda args, where: subprocess.run(  # noqa: E731
        [sys.executable, *args], capture_output=True, text=True, env=dict(_env_with_cache(), OOMDOCTOR_CACHE_DIR=str(where)))
    assert run(["-c", f"import oomdoctor; oomdoctor.diagnose({str(log)!r})"], lib).returncode == 0
    assert not lib.exists()   # a library caller (a training job under watch()) writes nothing
    run(["-m", "oomdoctor", "diagnose", str(log)], cli)
    assert [p.name for p in cli.iterdir()] == [cache.cache_file().name]
