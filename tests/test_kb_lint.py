"""`oomdoctor kb lint`: the shipped knowledge base is clean; a broken copy names file, field, reason."""
from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from oomdoctor.cli import main
from oomdoctor.kb.knowledge import KnowledgeError, lint, load_file, load_knowledge, shipped_dir

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


def _unknown_field(d):
    d["signals"][0]["wieght"] = 1
    return d


def _bad_regex(d):
    d["signals"][0]["when"] = {"frame": "(unclosed"}
    return d


def _bad_version(d):
    d["signals"][0]["when"] = {"fact": "env.deepspeed_version", "version": ">=0.14.1,<<0.14.3"}
    return d


def _too_few_examples(d):
    d["examples"] = [e for e in d["examples"] if e["expect"] == "top"][:1]
    return d


def _unknown_framework(d):
    d["remediations"][0]["knobs"]["pytorch-lightning"] = "x"
    return d


# (file stem, how to break the template, field the message must name, reason it must give)
BROKEN = [
    ("unknown-field", _unknown_field, "signals.0.wieght", r"Extra inputs are not permitted"),
    ("bad-regex", _bad_regex, "signals.0.when.frame", r"invalid regular expression"),
    ("bad-version", _bad_version, "signals.0.when.version", r"invalid PEP 440 version specifier"),
    ("too-few-examples", _too_few_examples, "examples", r"at least two positive and one negative"),
    ("unknown-framework", _unknown_framework, "remediations.0.knobs", r"unknown framework key"),
]


@pytest.mark.parametrize("stem,breaker,field,reason", BROKEN, ids=[b[0] for b in BROKEN])
def test_broken_copy_names_file_field_and_reason(tmp_path, stem, breaker, field, reason):
    data = breaker(copy.deepcopy(_template()))
    data["id"] = stem
    path = _write(tmp_path, stem, data)
    result = CliRunner().invoke(main, ["kb", "lint", "--no-shipped", str(tmp_path)])
    assert result.exit_code == 1
    line = result.output.strip()
    assert line.startswith(f"{path}: "), line
    assert field in line and re.search(reason, line), line


def test_invalid_yaml_names_the_line(tmp_path):
    path = _write(tmp_path, "invalid-yaml", "id: invalid-yaml\ntitle: [unclosed\nsummary: x\n")
    problems = lint([tmp_path], include_shipped=False)
    assert len(problems) == 1
    assert problems[0].startswith(f"{path}: line ") and "invalid YAML" in problems[0]


def test_id_must_match_file_name(tmp_path):
    path = _write(tmp_path, "renamed-copy", _template())
    with pytest.raises(KnowledgeError) as err:
        load_file(path)
    assert str(err.value) == f"{path}: id: 'alloc-fragmentation' does not match the file name 'renamed-copy'"


def test_every_broken_file_is_reported_not_only_the_first(tmp_path):
    for stem, breaker, _, _ in BROKEN:
        data = breaker(copy.deepcopy(_template()))
        data["id"] = stem
        _write(tmp_path, stem, data)
    _write(tmp_path, "good-copy", dict(_template(), id="good-copy"))
    problems = lint([tmp_path], include_shipped=False)
    assert sorted(Path(p.split(": ", 1)[0]).stem for p in problems) == sorted(b[0] for b in BROKEN)


def test_a_valid_user_directory_overrides_a_shipped_incident(tmp_path):
    data = _template()
    data["title"] = "Fragmentation (team wording)"
    _write(tmp_path, "alloc-fragmentation", data)
    assert lint([tmp_path]) == []
    kb = load_knowledge([tmp_path])
    assert kb.get("alloc-fragmentation").title == "Fragmentation (team wording)"
    assert len(kb) == len(TAXONOMY_IDS)


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
    from oomdoctor.kb.table import fact_table
    from oomdoctor.facts import Environment, Facts, MemorySample, OomEvent, ProcessUse

    gib = 2**30
    ev = OomEvent(kind="cuda_caching_allocator", line=3, tried_to_allocate_bytes=gib, total_capacity_bytes=80 * gib,
                  free_bytes=gib // 2, allocated_by_pytorch_bytes=70 * gib, reserved_unallocated_bytes=2 * gib,
                  process_in_use_bytes=75 * gib, processes=[ProcessUse(pid=1, bytes=75 * gib, is_self=True)])
    facts = Facts(oom_events=[ev], environment=Environment(gpu_name="NVIDIA A100-SXM4-80GB"),
                  memory_samples=[MemorySample(source="trainer_log", line=1, allocated_bytes=1, host_percent=3.0,
                                               alloc_retries=1)])
    return {n for n in fact_table(facts) if not n.startswith(("marker.", "memory."))}


def test_every_fact_the_kb_uses_is_documented_and_produced():
    text = (DOCS / "knowledge-format.md").read_text(encoding="utf-8")
    produced = _rich_fact_names() | {"oom.unaccounted", "oom.unaccounted_share"}
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
