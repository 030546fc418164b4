"""Reference docs for the knowledge base, generated from the incident YAML.

The YAML is the single source: ``oomdoctor kb show ID`` prints one incident,
``oomdoctor kb docs --out docs/incidents`` writes one page per incident plus an index.
Output is deterministic (sorted, no timestamps) so the generated pages can be checked in
and diffed.
"""
from __future__ import annotations

from pathlib import Path
from typing import Union

from .frameworks import STACKS
from .knowledge import Condition, Incident, KnowledgeBase, RemediationSpec

GENERATED = "<!-- generated from knowledge/{id}.yaml by `oomdoctor kb docs`; edit the YAML, not this file -->"
_MARK = "<!-- generated from knowledge/"

# Framework keys in the order a reader scans them; unknown keys follow alphabetically.
_KNOB_NAMES = {key: stack.name for key, stack in STACKS.items()}
_KNOB_ORDER = tuple(STACKS)


def _md_escape_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    return str(v)


def condition_text(c: Condition) -> str:
    """A condition in words, e.g. ``phase = checkpoint_save`` or ``frame ~ /GatheredParameters/``."""
    if c.all is not None:
        return "all of (" + "; ".join(condition_text(x) for x in c.all) + ")"
    if c.any is not None:
        return "any of (" + "; ".join(condition_text(x) for x in c.any) + ")"
    if c.not_ is not None:
        return "not (" + condition_text(c.not_) + ")"
    if c.frame is not None:
        where = f" in the {c.innermost} innermost frames" if c.innermost else ""
        return f"a traceback frame matches /{c.frame}/{where}"
    if c.text is not None:
        near = f" within {c.near_failure} lines before the failure" if c.near_failure else ""
        return f"a log line matches /{c.text}/{near}"
    if c.marker is not None:
        near = f" within {c.near_failure} lines before the failure" if c.near_failure else ""
        return f"marker `{c.marker}`{near}"
    parts = []
    for op, sym in (("eq", "="), ("ne", "≠"), ("gt", ">"), ("gte", "≥"), ("lt", "<"), ("lte", "≤")):
        v = getattr(c, op)
        if v is not None:
            parts.append(f"{sym} {_value(v)}")
    if c.in_ is not None:
        parts.append(f"in {_value(c.in_)}")
    if c.not_in is not None:
        parts.append(f"not in {_value(c.not_in)}")
    if c.exists is not None:
        parts.append("is known" if c.exists else "is unknown")
    if c.version is not None:
        parts.append(f"version {c.version}")
    if c.matches is not None:
        parts.append(f"matches /{c.matches}/")
    return f"`{c.fact}` " + " and ".join(parts)


def _knob_keys(spec: RemediationSpec) -> list[str]:
    known = [k for k in _KNOB_ORDER if k in spec.knobs]
    return known + sorted(k for k in spec.knobs if k not in _KNOB_ORDER)


def _checked_keys(spec: RemediationSpec) -> list[str]:
    """The frameworks of ``checked:`` in the order of the knobs (then any other, sorted)."""
    order = _knob_keys(spec)
    return [k for k in order if k in spec.checked] + sorted(k for k in spec.checked if k not in order)


def _remediation_md(rank: int, spec: RemediationSpec) -> list[str]:
    out = [f"### {rank}. {spec.title}", "", f"`{spec.id}`"
           + (f" · memory estimate: `{spec.saving}`" if spec.saving else "")
           + (" · applied automatically by `oomdoctor run --retry`: "
              + ", ".join(f"`{k}={v}`" for k, v in sorted(spec.auto_env.items())) if spec.auto_env else ""), ""]
    for key in _knob_keys(spec):
        setting = spec.knobs[key].strip()
        name = _KNOB_NAMES.get(key, key)
        if "\n" in setting:
            out += [f"- **{name}**:", "", "  ```", *("  " + ln for ln in setting.splitlines()), "  ```"]
        else:
            out.append(f"- **{name}**: `{setting}`")
    out.append("")
    if spec.memory_effect:
        out.append(f"- Memory effect: {spec.memory_effect}")
    if spec.cost:
        out.append(f"- Cost: {spec.cost}")
    if spec.min_versions:
        out.append("- Needs: " + ", ".join(f"{p} ≥ {v}" for p, v in sorted(spec.min_versions.items())))
    if spec.max_versions:
        out.append("- Removed in: " + ", ".join(f"{p} {v}" for p, v in sorted(spec.max_versions.items())))
    if spec.checked:
        out.append("- Checked:")
        for key in _checked_keys(spec):
            out.append(f"  - {_KNOB_NAMES.get(key, key)}: {' '.join(spec.checked[key].split())}")
    for req in spec.requires:
        out.append(f"- Only when: {condition_text(req)}")
    for nw in spec.not_when:
        out.append(f"- Not applicable when {condition_text(nw.when)} — {nw.why}")
    for b in spec.boost_when:
        out.append(f"- Ranked first when: {condition_text(b)}")
    for cav in spec.caveats:
        out.append(f"- Caveat: {cav}")
    out.append("")
    return out


def incident_markdown(incident: Incident) -> str:
    """One incident as a markdown page: mechanism, evidence, ranked fixes per framework."""
    kind = ("fallback (an OOM is certain, the cause is not)" if incident.fallback
            else "memory failure" if incident.memory_failure else "not a memory failure")
    out = [GENERATED.format(id=incident.id), "", f"# {incident.title}", "",
           f"Incident id: `{incident.id}` · {kind} · reported from a score of {incident.min_score:g}", "",
           incident.summary.strip(), "", "## Mechanism", "", incident.explanation.strip(), ""]
    out += ["## Evidence", ""]
    if incident.requires:
        out += ["Considered only when " + "; and ".join(condition_text(c) for c in incident.requires) + ".", ""]
    out += ["| weight | signal | condition |", "| ---: | --- | --- |"]
    for s in incident.signals:
        weight = f"{s.weight:+g} (lead only)" if s.lead_only else f"{s.weight:+g}"
        out.append(f"| {weight} | {_md_escape_cell(s.says)} | {_md_escape_cell(condition_text(s.when))} |")
    out += ["", "## Remediations (best first)", ""]
    for i, spec in enumerate(incident.remediations, 1):
        out += _remediation_md(i, spec)
    if incident.next_steps:
        out += ["## When the log cannot decide", ""] + [f"- {s}" for s in incident.next_steps] + [""]
    if incident.references:
        out += ["## References", ""] + [f"- <{r}>" for r in incident.references] + [""]
    out += ["## Example logs", "", "Run by `tests/test_kb_examples.py`.", ""]
    for ex in incident.examples:
        note = f" — {ex.note}" if ex.note else ""
        out += [f"<details><summary><code>{ex.name}</code> (expect: {ex.expect}){note}</summary>", "",
                "```text", ex.log.rstrip("\n"), "```", "", "</details>", ""]
    return "\n".join(out).rstrip("\n") + "\n"


def index_markdown(kb: KnowledgeBase, full: bool = False) -> str:
    """A table of every incident; with ``full`` each incident's page follows the table."""
    incidents = sorted(kb, key=lambda i: i.id)
    out = ["<!-- generated from knowledge/*.yaml by `oomdoctor kb docs`; edit the YAML, not this file -->", "",
           "# Incident reference", "",
           "One page per incident of the knowledge base. The YAML format is described in "
           "[../knowledge-format.md](../knowledge-format.md).", "",
           "| incident | title | kind | signals | fixes |", "| --- | --- | --- | ---: | ---: |"]
    for inc in incidents:
        kind = "fallback" if inc.fallback else ("memory" if inc.memory_failure else "not memory")
        link = f"[{inc.id}]({inc.id}.md)" if not full else f"`{inc.id}`"
        out.append(f"| {link} | {_md_escape_cell(inc.title)} | {kind} | {len(inc.signals)} | {len(inc.remediations)} |")
    text = "\n".join(out) + "\n"
    if full:
        for inc in incidents:
            body = incident_markdown(inc).split("\n", 2)[2]  # drop the generated-by comment
            text += "\n---\n\n" + body
    return text


def write_docs(kb: KnowledgeBase, out_dir: Union[str, Path]) -> list[Path]:
    """Write README.md and one <id>.md per incident; remove pages of incidents that are gone."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    index = out / "README.md"
    index.write_text(index_markdown(kb), encoding="utf-8")
    written.append(index)
    ids = set()
    for inc in sorted(kb, key=lambda i: i.id):
        path = out / f"{inc.id}.md"
        path.write_text(incident_markdown(inc), encoding="utf-8")
        written.append(path)
        ids.add(inc.id)
    for stale in sorted(out.glob("*.md")):
        if stale.name != "README.md" and stale.stem not in ids:
            try:
                head = stale.read_text(encoding="utf-8")[:200]
            except (OSError, UnicodeDecodeError):
                continue
            if head.startswith(_MARK):  # only pages this function generated
                stale.unlink()
    return written
