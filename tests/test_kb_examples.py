"""Every example log of every knowledge-base incident, run through the whole pipeline.

One parametrised test: adding an incident (or an example) is adding YAML, nothing here.
``expect`` says where the incident must end up for that log:

* ``top``     - it is the first diagnosis;
* ``ranked``  - it is among the first three;
* ``absent``  - it is not diagnosed at all;
* ``not-top`` - it may be listed, but not first;
* ``lead``    - it is listed, but only as a lead (a warning, never a finding).

``first_fix`` (optional, with ``top`` or ``ranked``) names the remediation the incident's
diagnosis must rank first for that log: the fix a user reads first.
"""
from __future__ import annotations

import pytest

from oomdoctor.kb.knowledge import default_knowledge
from oomdoctor.pipeline import diagnose_source

KB = default_knowledge()
CASES = [(inc.id, ex) for inc in sorted(KB, key=lambda i: i.id) for ex in inc.examples]


def _ranking(report) -> str:
    return ", ".join(f"{d.incident} ({d.score:g})" for d in report.diagnoses) or "nothing"


@pytest.mark.parametrize("incident_id,example", CASES, ids=[f"{i}:{ex.name}" for i, ex in CASES])
def test_example(incident_id, example):
    report = diagnose_source(example.log.encode("utf-8"), knowledge=KB)
    ranked = [d.incident for d in report.diagnoses]
    seen = f"diagnosed: {_ranking(report)}"
    if example.expect == "top":
        assert ranked[:1] == [incident_id], seen
    elif example.expect == "ranked":
        assert incident_id in ranked[:3], seen
    elif example.expect == "absent":
        assert incident_id not in ranked, seen
    elif example.expect == "lead":
        assert incident_id in ranked and all(d.warning for d in report.diagnoses if d.incident == incident_id), seen
    else:  # not-top
        assert ranked[:1] != [incident_id], seen
    if example.first_fix is not None:
        diagnosis = next(d for d in report.diagnoses if d.incident == incident_id)
        first = [r.id for r in diagnosis.remediations if r.applicable][:1]
        assert first == [example.first_fix], f"first fix: {first or 'none'}; {seen}"

