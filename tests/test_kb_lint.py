"""`oomdoctor kb lint`: the shipped knowledge base is clean; a broken copy names file, line, column and
the real cause; rules that do not stop loading (examples, checked: notes) warn, and fail with --strict."""
from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from oomdoctor.cli import main
from oomdoctor.kb import knowledge as knowledge_module
from oomdoctor.kb import lint as lint_module
from oomdoctor.kb.knowledge import (
    KnowledgeError,
    Problem,
    load_file,
    load_knowledge,
    shipped_dir,
)
from oomdoctor.kb.lint import check, lint

TAXONOMY_IDS = {
    "ckpt-save-gather", "ckpt-load", "alloc-fragmentation", "activation-memory", "large-vocab-logits",
    "preference-ref-model", "optimizer-state", "model-load", "eval-generation", "gradual-leak", "host-oom",
    "zero3-epoch-end-leak", "pinned-memory", "dataloader-host-oom", "ds-device-mismatch", "stale-gpu-process",
    "ranks-share-gpu", "non-pytorch-memory", "bf16-unsupported", "unknown-oom", "shm-exhausted",
}
TEMPLATE = shipped_dir() / "alloc-fragmentation.yaml"


def test_shipped_kb_lints_clean():
    result = CliRunner().invoke(main, ["kb", "lint"])
    assert result.exit_code == 0, result.output
    assert "knowledge base OK" in result.output
    assert lint() == []
    assert [p for p in check() if p.severity == "error"] == []


def _is_checked_note_problem(p: Problem) -> bool:
    return "has no checked: note" in p.message or "the checked: note for" in p.message


def test_shipped_kb_lints_clean_in_strict_mode():
    """Every shipped knob carries a checked: note that names the versions read."""
    result = CliRunner().invoke(main, ["kb", "lint", "--strict"])
    assert result.exit_code == 0, result.output[-2000:]
    assert lint(strict=True) == []


def test_shipped_kb_has_exactly_the_taxonomy_ids():
    kb = load_knowledge(strict=True)
    assert {inc.id for inc in kb} == TAXONOMY_IDS
    assert [inc.id for inc in kb if inc.fallback] == ["unknown-oom"]
    assert {inc.id for inc in kb if not inc.memory_failure} == {"bf16-unsupported", "ds-device-mismatch"}


def _template() -> dict:
    return yaml.safe_load(TEMPLATE.read_text(encoding="utf-8"))


def _write(directory: Path, name: str, data) -> Path:
    path = directory / f"{name}.yaml"
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def _place(path: Path, loc: tuple, key: bool = False) -> str:
    """'line:col' of the YAML node at ``loc`` (the key's node with ``key``), read independently."""
    node = yaml.compose(path.read_text(encoding="utf-8"))
    for i, part in enumerate(loc):
        if isinstance(node, yaml.MappingNode):
            k, v = next((k, v) for k, v in node.value if k.value == part)
            node = k if key and i == len(loc) - 1 else v
        else:
            node = node.value[part]
    return f"{node.start_mark.line + 1}:{node.start_mark.column + 1}"


def _lint_cli(*args: str):
    result = CliRunner().invoke(main, ["kb", "lint", *args])
    assert "Traceback" not in result.output
    return result


def _unknown_field(d):
    d["signals"][0]["wieght"] = 1
    return d


def _bad_regex(d):
    d["signals"][0]["when"] = {"frame": "(unclosed"}
    return d


def _bad_version(d):
    d["signals"][0]["when"] = {"fact": "env.deepspeed_version", "version": ">=0.14.1,<<0.14.3"}
    return d


def _unknown_framework(d):
    d["remediations"][0]["knobs"]["pytorch-lightning"] = "x"
    return d


def _wrong_type(d):
    d["signals"][1]["weight"] = "heavy"
    return d


# (file stem, how to break the template, the node at fault and whether its key is meant,
#  the reason the message must give)
BROKEN = [
    ("unknown-field", _unknown_field, ("signals", 0, "wieght"), True,
     r"^unknown key 'wieght' \(did you mean 'weight'\? allowed: id, weight, when, says, lead_only\)$"),
    ("bad-regex", _bad_regex, ("signals", 0, "when", "frame"), False, r"^invalid regular expression '\(unclosed'"),
    ("bad-version", _bad_version, ("signals", 0, "when", "version"), False, r"^invalid PEP 440 version specifier"),
    ("unknown-framework", _unknown_framework, ("remediations", 0, "knobs"), False,
     r"^unknown framework key\(s\) pytorch-lightning"),
    ("wrong-type", _wrong_type, ("signals", 1, "weight"), False, r"^weight: Input should be a valid number"),
]


@pytest.mark.parametrize("stem,breaker,loc,key,reason", BROKEN, ids=[b[0] for b in BROKEN])
def test_broken_copy_names_file_line_col_and_reason(tmp_path, stem, breaker, loc, key, reason):
    data = breaker(copy.deepcopy(_template()))
    data["id"] = stem
    path = _write(tmp_path, stem, data)
    result = _lint_cli("--no-shipped", str(tmp_path))
    assert result.exit_code == 1
    lines = [ln for ln in result.output.splitlines() if ": warning: " not in ln]
    assert len(lines) == 1, result.output
    prefix = f"{path}:{_place(path, loc, key)}: "
    assert lines[0].startswith(prefix), (lines[0], prefix)
    message = lines[0][len(prefix):]
    assert re.search(reason, message), message
    assert "more)" not in message and "Field required" not in message
    with pytest.raises(KnowledgeError) as err:
        load_file(path)
    assert str(err.value) == lines[0]


def test_an_unknown_key_is_reported_at_its_line_and_column(tmp_path):
    text = TEMPLATE.read_text(encoding="utf-8").replace("id: alloc-fragmentation", "id: stray-key", 1)
    text = text.replace("memory_failure: true\n", "memory_failure: true\nseverity: high\n", 1)
    path = _write(tmp_path, "stray-key", text)
    line = text.splitlines().index("severity: high") + 1
    problems = check([tmp_path], include_shipped=False)
    assert [(p.line, p.col, p.severity) for p in problems if p.severity == "error"] == [(line, 1, "error")]
    message = next(p.message for p in problems if p.severity == "error")
    assert message.startswith("unknown key 'severity' (allowed: id, title, summary, explanation, ")
    assert f"{path}:{line}:1: unknown key 'severity'" in _lint_cli("--no-shipped", str(tmp_path)).output


def test_a_misspelt_required_key_is_one_problem_not_a_missing_one(tmp_path):
    data = dict(_template(), id="typo")
    data = {("titel" if k == "title" else k): v for k, v in data.items()}
    path = _write(tmp_path, "typo", data)
    errors = [p for p in check([tmp_path], include_shipped=False) if p.severity == "error"]
    assert len(errors) == 1
    assert f"{errors[0].line}:{errors[0].col}" == _place(path, ("titel",), key=True)
    assert errors[0].message.startswith("unknown key 'titel' (did you mean 'title'? allowed: ")
    assert "missing" not in errors[0].message


def test_a_missing_key_is_named(tmp_path):
    data = dict(_template(), id="no-summary")
    del data["summary"]
    del data["signals"][2]["says"]
    path = _write(tmp_path, "no-summary", data)
    result = _lint_cli("--no-shipped", str(tmp_path))
    assert result.exit_code == 1
    lines = [ln for ln in result.output.splitlines() if ": warning: " not in ln]
    assert lines == [f"{path}:1:1: missing required key 'summary'",
                     f"{path}:{_place(path, ('signals', 2))}: missing required key 'says' in signals.2"]


def test_several_problems_of_one_file_are_one_line_each_in_line_order(tmp_path):
    data = _unknown_field(_bad_regex(_wrong_type(copy.deepcopy(_template()))))
    data["id"] = "several"
    data["signals"][3]["when"] = {"all": [{"fact": "oom.device"}]}
    path = _write(tmp_path, "several", data)
    errors = [p for p in check([tmp_path], include_shipped=False) if p.severity == "error"]
    assert [f"{p.line}:{p.col}" for p in errors] == [
        _place(path, ("signals", 0, "when", "frame")), _place(path, ("signals", 0, "wieght"), key=True),
        _place(path, ("signals", 1, "weight")), _place(path, ("signals", 3, "when", "all", 0))]
    assert "needs an operator" in errors[3].message
    with pytest.raises(KnowledgeError) as err:
        load_file(path)
    assert err.value.problems == errors
    assert str(err.value) == f"{errors[0]} (3 more in this file: oomdoctor kb lint shows each)"


def test_invalid_yaml_names_the_line(tmp_path):
    path = _write(tmp_path, "invalid-yaml", "id: invalid-yaml\ntitle: [unclosed\nsummary: x\n")
    problems = lint([tmp_path], include_shipped=False)
    assert len(problems) == 1
    assert re.match(rf"{re.escape(str(path))}:3:\d+: invalid YAML", problems[0]), problems[0]


def test_id_must_match_file_name(tmp_path):
    path = _write(tmp_path, "renamed-copy", _template())
    with pytest.raises(KnowledgeError) as err:
        load_file(path)
    assert str(err.value) == f"{path}:1:5: id: 'alloc-fragmentation' does not match the file name 'renamed-copy'"


def test_every_broken_file_is_reported_not_only_the_first(tmp_path):
    for stem, breaker, *_ in BROKEN:
        data = breaker(copy.deepcopy(_template()))
        data["id"] = stem
        _write(tmp_path, stem, data)
    _write(tmp_path, "good-copy", dict(_template(), id="good-copy"))
    errors = [p for p in check([tmp_path], include_shipped=False) if p.severity == "error"]
    assert sorted(p.path.stem for p in errors) == sorted(b[0] for b in BROKEN)
    assert all(line.split(": ", 1)[0].count(":") == 2 for line in lint([tmp_path], include_shipped=False))


def test_a_valid_user_directory_overrides_a_shipped_incident(tmp_path):
    data = _template()
    data["title"] = "Fragmentation (team wording)"
    _write(tmp_path, "alloc-fragmentation", data)
    assert lint([tmp_path]) == []
    kb = load_knowledge([tmp_path])
    assert kb.get("alloc-fragmentation").title == "Fragmentation (team wording)"
    assert len(kb) == len(TAXONOMY_IDS)


def test_naming_the_shipped_directory_again_is_no_duplicate():
    assert lint([shipped_dir()]) == []


def test_usage_errors_exit_2(tmp_path):
    assert _lint_cli("--no-shipped").exit_code == 2
    assert _lint_cli(str(tmp_path / "missing")).exit_code == 2
    assert _lint_cli("--no-such-option").exit_code == 2


# -- examples: a lint rule, not a loading one ---------------------------------------------

def _without_examples(stem: str) -> dict:
    data = dict(_template(), id=stem)
    del data["examples"]
    return data


def test_a_team_incident_without_examples_loads_and_lint_warns(tmp_path):
    path = _write(tmp_path, "team-incident", _without_examples("team-incident"))
    kb = load_knowledge([tmp_path], strict=True)
    assert kb.get("team-incident") is not None and kb.get("team-incident").examples == []
    assert kb.problems == []

    problems = [p for p in check([tmp_path], include_shipped=False) if p.message.startswith("examples:")]
    assert [(p.path, p.line, p.col, p.severity) for p in problems] == [(path, 1, 1, "warning")]
    assert "at least two positive and one negative example (have 0 and 0" in problems[0].message

    result = _lint_cli("--no-shipped", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert f"{path}:1:1: warning: examples: need at least two positive" in result.output
    assert "knowledge base OK (" in result.output and "--strict fails on them" in result.output

    strict = _lint_cli("--strict", "--no-shipped", str(tmp_path))
    assert strict.exit_code == 1
    assert f"{path}:1:1: examples: need at least two positive" in strict.output
    assert "warning:" not in strict.output and "knowledge base OK" not in strict.output


def test_too_few_examples_are_reported_at_the_examples_key(tmp_path):
    data = dict(_template(), id="one-example")
    data["examples"] = [e for e in data["examples"] if e["expect"] == "top"][:1]
    path = _write(tmp_path, "one-example", data)
    assert load_file(path).id == "one-example"
    problem = next(p for p in check([tmp_path], include_shipped=False) if p.message.startswith("examples:"))
    assert f"{problem.line}:{problem.col}" == _place(path, ("examples",), key=True)
    assert "(have 1 and 0;" in problem.message and problem.severity == "warning"


def test_the_shipped_knowledge_base_must_carry_examples(tmp_path, monkeypatch):
    shipped = tmp_path / "knowledge"
    shipped.mkdir()
    path = _write(shipped, "alloc-fragmentation", _without_examples("alloc-fragmentation"))
    monkeypatch.setattr(knowledge_module, "shipped_dir", lambda: shipped)
    monkeypatch.setattr(lint_module, "shipped_dir", lambda: shipped)
    monkeypatch.delenv("OOMDOCTOR_KB", raising=False)
    assert load_knowledge(strict=True).get("alloc-fragmentation") is not None
    errors = [p for p in check() if p.severity == "error"]
    assert [(p.path, p.message.split(":")[0]) for p in errors] == [(path, "examples")]
    result = _lint_cli()
    assert result.exit_code == 1 and f"{path}:1:1: examples: need at least two positive" in result.output


# -- checked: notes of knobs --------------------------------------------------------------

KNOB_INCIDENT = """\
id: knob-notes
title: Knob notes
summary: s
explanation: e
signals:
  - {id: s1, weight: 3, when: {text: "CUDA out of memory"}, says: x}
remediations:
  - id: r1
    title: R
    knobs:
      hf: "gradient_checkpointing: true"
      deepspeed: '"stage3_max_live_parameters": 1e8'
      shell: docker run --shm-size 16g
      env: FOO=1
    min_versions: {transformers: "4.40.0", torch: "2.1.0"}
    max_versions: {transformers: "4.36.0", torch: "2.11.0"}
    checked:
      hf: transformers 4.57.0 and 5.10.0, training_args.py
      deepspeed: read the docs
      shell: docker 24, the run reference
      trl: trl 0.29.0, dpo_config.py
examples:
  - {name: a, expect: top, log: "CUDA out of memory"}
  - {name: b, expect: ranked, log: "CUDA out of memory"}
  - {name: c, expect: absent, log: "nothing"}
"""


def _at(text: str, needle: str) -> tuple[int, int]:
    row = next(n for n, r in enumerate(text.splitlines(), 1) if needle in r)
    return row, text.splitlines()[row - 1].index(needle) + 1


def test_knob_notes_are_checked_at_their_line_and_column(tmp_path):
    path = _write(tmp_path, "knob-notes", KNOB_INCIDENT)
    assert load_file(path).remediations[0].checked["trl"] == "trl 0.29.0, dpo_config.py"
    got = {(p.line, p.col, p.severity, p.message) for p in check([tmp_path], include_shipped=False)}
    t = KNOB_INCIDENT
    assert got == {
        (*_at(t, "env: FOO=1"), "warning",
         "remediation 'r1': knob 'env' has no checked: note (the package or tool, the version(s) read and the file)"),
        (*_at(t, "read the docs"), "warning",
         ("remediation 'r1': the checked: note for 'deepspeed' names no version "
          "(e.g. 'transformers 4.57.0 and 5.10.0, training_args.py')")),
        (*_at(t, "trl: trl"), "error",
         "remediation 'r1': checked: 'trl' is not one of its knobs (hf, deepspeed, shell, env)"),
        (*_at(t, "transformers: \"4.36.0\""), "error",
         ("remediation 'r1': max_versions transformers 4.36.0 is not above its min_versions 4.40.0: "
          "no version has the knob")),
    }
    result = _lint_cli("--no-shipped", str(tmp_path))
    assert result.exit_code == 1
    row, col = _at(t, "env: FOO=1")
    assert f"{path}:{row}:{col}: warning: remediation 'r1': knob 'env' has no checked: note" in result.output


def test_complete_knob_notes_pass_strict(tmp_path):
    text = (KNOB_INCIDENT.replace("read the docs", "deepspeed 0.9.0, runtime/zero/config.py")
            .replace("      trl: trl 0.29.0, dpo_config.py\n", "      env: torch 2.4.0, c10/cuda/CUDACachingAllocator.cpp\n")
            .replace('transformers: "4.36.0"', 'transformers: "4.58.0"'))
    _write(tmp_path, "knob-notes", text)
    assert check([tmp_path], include_shipped=False) == []
    result = _lint_cli("--strict", "--no-shipped", str(tmp_path))
    assert result.exit_code == 0 and result.output.strip() == "knowledge base OK"


@pytest.mark.parametrize("note,ok", [
    ("transformers 4.57.0, training_args.py", True), ("docker 24, run reference", True),
    ("slurm v23 sbatch man page", True), ("torch 2.4 and 2.5", True), ("Megatron-LM core_r0.11.0", True),
    ("the docs", False), ("", False), ("Slurm sbatch man page: --mem (no package read)", False),
    ("trainer.py", False),
    # a bare word and a number is no version; a known tool and its release number is
    ("TODO 1", False), ("line 120 of trainer.py", False), ("step 3 of the guide", False),
    ("Kubernetes v1.29, emptyDir medium: Memory", True), ("Slurm 25.11 sbatch --mem", True),
    ("Docker 24 run reference", True), ("not verified: no key to read", True),
])
def test_a_note_must_name_a_version(tmp_path, note, ok):
    text = KNOB_INCIDENT.replace("read the docs", repr(note) if note else "''")
    _write(tmp_path, "knob-notes", text)
    flagged = any("'deepspeed' names no version" in p.message for p in check([tmp_path], include_shipped=False))
    assert flagged is not ok


def test_docs_render_removed_in_and_checked(tmp_path):
    from oomdoctor.kb.docs import incident_markdown

    text = KNOB_INCIDENT.replace('transformers: "4.36.0"', 'transformers: "4.58.0"')
    page = incident_markdown(load_file(_write(tmp_path, "knob-notes", text)))
    assert "- Needs: torch ≥ 2.1.0, transformers ≥ 4.40.0" in page
    assert "- Removed in: torch 2.11.0, transformers 4.58.0" in page
    block = page[page.index("- Checked:"):].splitlines()[:5]
    assert block == ["- Checked:", "  - transformers: transformers 4.57.0 and 5.10.0, training_args.py",
                     "  - DeepSpeed JSON: read the docs", "  - shell: docker 24, the run reference",
                     "  - TRL: trl 0.29.0, dpo_config.py"]


# -- documentation kept in step with the code ------------------------------------------------

DOCS = Path(__file__).resolve().parent.parent / "docs"


def _conditions(node):
    """Every condition mapping anywhere inside an incident file."""
    if isinstance(node, dict):
        if "fact" in node or "marker" in node:
            yield node
        for v in node.values():
            yield from _conditions(v)
    elif isinstance(node, list):
        for v in node:
            yield from _conditions(v)


def _rich_fact_names() -> set[str]:
    """Names fact_table produces for a log that has every kind of fact."""
    from oomdoctor.facts import Environment, Facts, MemorySample, OomEvent, ProcessUse, RankSummary
    from oomdoctor.kb.table import fact_table

    gib = 2**30
    ev = OomEvent(kind="cuda_caching_allocator", line=3, tried_to_allocate_bytes=gib, total_capacity_bytes=80 * gib,
                  free_bytes=gib // 2, allocated_by_pytorch_bytes=70 * gib, reserved_unallocated_bytes=2 * gib,
                  process_in_use_bytes=75 * gib, processes=[ProcessUse(pid=1, bytes=75 * gib, is_self=True)])
    facts = Facts(oom_events=[ev], environment=Environment(gpu_name="NVIDIA A100-SXM4-80GB"),
                  memory_samples=[MemorySample(source="trainer_log", line=1, allocated_bytes=1, host_percent=3.0,
                                               alloc_retries=1)])
    names = {n for n in fact_table(facts) if not n.startswith(("marker.", "memory."))}
    # an old-format message (no process list) in a job whose launcher names its workers
    old = OomEvent(kind="cuda_caching_allocator", line=3, device_index=0, tried_to_allocate_bytes=gib,
                   total_capacity_bytes=16 * gib, free_bytes=gib // 2, reserved_total_bytes=8 * gib)
    facts = Facts(oom_events=[old], ranks=RankSummary(worker_pids=[101, 102, 103], stopped_pids=[102, 103]))
    return names | {n for n in fact_table(facts) if not n.startswith(("marker.", "memory."))}


def test_every_fact_the_kb_uses_is_documented_and_produced():
    text = (DOCS / "knowledge-format.md").read_text(encoding="utf-8")
    produced = _rich_fact_names()
    for path in sorted(shipped_dir().glob("*.yaml")):
        for cond in _conditions(yaml.safe_load(path.read_text(encoding="utf-8"))):
            if "fact" in cond:
                name = cond["fact"]
                assert f"`{name}`" in text, f"{path.name}: fact {name} is not in docs/knowledge-format.md"
                assert name in produced or name.startswith("memory."), f"{path.name}: fact {name} is never produced"
            else:
                assert f"`{cond['marker']}`" in text, f"{path.name}: marker {cond['marker']} is not documented"


def test_every_produced_fact_is_documented():
    text = (DOCS / "knowledge-format.md").read_text(encoding="utf-8")
    missing = sorted(n for n in _rich_fact_names() if f"`{n}`" not in text)
    assert not missing, f"document these facts in docs/knowledge-format.md: {missing}"


def test_generated_incident_docs_are_current(tmp_path):
    from oomdoctor.kb.docs import write_docs

    written = write_docs(load_knowledge(strict=True), tmp_path)
    assert {p.name for p in written} == {"README.md", *(f"{i}.md" for i in TAXONOMY_IDS)}
    for path in written:
        shipped = DOCS / "incidents" / path.name
        assert shipped.exists(), f"run: oomdoctor kb docs --out docs/incidents ({path.name} missing)"
        assert shipped.read_text(encoding="utf-8") == path.read_text(encoding="utf-8"), \
            f"docs/incidents/{path.name} is stale: run oomdoctor kb docs --out docs/incidents"


def test_placeholders_name_facts_that_exist():
    from oomdoctor.kb.classify import _PLACEHOLDER

    produced = _rich_fact_names() | {"oom.unaccounted", "oom.unaccounted_share", "env.bf16_capable",
                                     "env.compute_capability"}
    for inc in load_knowledge(strict=True):
        texts = [inc.summary, *inc.next_steps, *(s.says for s in inc.signals),
                 *(nw.why for r in inc.remediations for nw in r.not_when)]
        for text in texts:
            for name in _PLACEHOLDER.findall(text):
                assert name in produced or name.startswith("memory."), f"{inc.id}: unknown placeholder {{{name}}}"
            assert "{phase}" not in text, f"{inc.id}: single-word placeholders are not filled: {text}"


def test_kb_show_prints_mechanism_evidence_and_ranked_fixes():
    result = CliRunner().invoke(main, ["kb", "show", "ckpt-save-gather"])
    assert result.exit_code == 0, result.output
    out = result.output
    assert out.index("## Mechanism") < out.index("## Evidence") < out.index("## Remediations")
    # the two different flags are both there, in the reference's order
    assert out.index("save_only_model: true") < out.index('"stage3_gather_16bit_weights_on_model_save": false')
    assert "- **LLaMA-Factory**:" in out and "- **DeepSpeed JSON**:" in out


def test_kb_docs_without_out_prints_every_incident():
    result = CliRunner().invoke(main, ["kb", "docs"])
    assert result.exit_code == 0
    for incident_id in TAXONOMY_IDS:
        assert f"`{incident_id}`" in result.output


def test_a_shared_condition_reads_as_if_written_out():
    from oomdoctor.kb.knowledge import _shared_conditions
    shared = _shared_conditions([shipped_dir()])
    assert not shared.problems and "deepspeed-optimizer-construction" in shared.conditions
    signals = {s.id: s for s in load_knowledge().get("optimizer-state").signals}
    assert signals["optimizer-construction-frames"].when == shared.conditions["deepspeed-optimizer-construction"].when
    # ... and the file uses it rather than writing it out again
    raw = yaml.safe_load((shipped_dir() / "optimizer-state.yaml").read_text(encoding="utf-8"))
    assert {s["id"]: s["when"] for s in raw["signals"]}["optimizer-construction-frames"] == {
        "use": "deepspeed-optimizer-construction"}


def test_an_unknown_shared_condition_is_named_where_it_is_used(tmp_path):
    data = dict(_template(), id="uses-nothing")
    data["signals"][0]["when"] = {"use": "no-such-condition"}
    path = _write(tmp_path, "uses-nothing", data)
    (problem,) = lint([tmp_path], include_shipped=False)
    assert problem == f"{path}:{_place(path, ('signals', 0, 'when', 'use'))}: no shared condition 'no-such-condition' (known: none)"


def test_a_team_directory_shares_its_own_conditions_and_lint_checks_them(tmp_path):
    (tmp_path / "conditions").mkdir()
    _write(tmp_path / "conditions", "big-request", {"id": "big-request", "says": "a request of 8 GiB or more",
                                                    "when": {"fact": "oom.tried_to_allocate_bytes", "gte": 8 * 2**30}})
    data = dict(_template(), id="team-incident")
    data["signals"][0]["when"] = {"not": {"use": "big-request"}}
    _write(tmp_path, "team-incident", data)
    assert [p for p in check([tmp_path], include_shipped=False) if p.severity == "error"] == []
    inc = load_knowledge([tmp_path], include_shipped=False).get("team-incident")
    assert inc.signals[0].when.not_.fact == "oom.tried_to_allocate_bytes"
    # a broken shared condition is a problem of its own file, at its node
    bad = _write(tmp_path / "conditions", "big-request", {"id": "big-request", "says": "x", "when": {"frame": "(a+)+"}})
    errors = [p for p in check([tmp_path], include_shipped=False) if p.severity == "error"]
    assert errors[0].path == bad and f"{errors[0].line}:{errors[0].col}" == _place(bad, ("when", "frame"))
    assert "backtrack" in errors[0].message
    # ... and its use says so, not that the id is unknown
    assert [p.message for p in errors[1:]] == [f"shared condition 'big-request' could not be loaded (see {bad})"]


def test_shared_conditions_in_yml_files_and_use_only_where_a_condition_stands(tmp_path):
    (tmp_path / "conditions").mkdir()
    (tmp_path / "conditions" / "big-request.yml").write_text(
        "id: big-request\nsays: a request of 8 GiB or more\nwhen: {fact: oom.tried_to_allocate_bytes, gte: 8589934592}\n",
        encoding="utf-8")
    data = dict(_template(), id="team-incident")
    data["signals"][0]["when"] = {"use": "big-request"}
    data["remediations"][0]["auto_env"] = {"use": "expandable"}   # a mapping that is no condition
    _write(tmp_path, "team-incident", data)
    inc = load_knowledge([tmp_path], include_shipped=False, strict=True).get("team-incident")
    assert inc.signals[0].when.fact == "oom.tried_to_allocate_bytes"
    assert inc.remediations[0].auto_env == {"use": "expandable"}


@pytest.mark.parametrize("change,reason", [
    (lambda d: d["signals"][0].update(lead_only=True, weight=-1), r"is lead_only with weight -1: a prior adds weight"),
    (lambda d: (d["signals"][0].update(lead_only=True), d.update(memory_failure=False)),
     r"leads are listed only for memory incidents other than the fallback"),
])
def test_a_lead_only_signal_that_could_never_make_a_lead_is_an_error(tmp_path, change, reason):
    data = copy.deepcopy(_template())
    data["id"] = "prior-misused"
    change(data)
    path = _write(tmp_path, "prior-misused", data)
    errors = [p for p in check([tmp_path], include_shipped=False) if p.severity == "error"]
    assert len(errors) == 1 and re.search(reason, errors[0].message), errors
    with pytest.raises(KnowledgeError):
        load_file(path)
