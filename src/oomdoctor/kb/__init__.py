"""The knowledge base: incident YAML loaded and checked, the classifier that scores it.

* ``knowledge`` — load, validate and lint ``knowledge/*.yaml`` (and a team's own directories);
* ``table``     — the named facts conditions test (``oom.kind``, ``phase``, ``memory.request_is``);
* ``classify``  — the generic engine: weighted evidence per incident, ranked with a confidence;
* ``diagnosis`` — what it returns (``Diagnosis``, ``Remediation``, ``Knob``);
* ``docs``      — the incident reference generated from the YAML.

The engine knows no incident by name: knowledge is data.
"""
