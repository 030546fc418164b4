"""The report: its model, its fingerprint, and the renderers that read only it.

* ``model``       — ``Report`` (with the classifier's ``Diagnosis`` models), the stable JSON;
* ``fingerprint`` — a stable id of a failure for fleets (no PIDs, times or sizes);
* ``text``, ``markdown``, ``json`` — the output formats; ``render`` picks one;
* ``common``      — rows and wording the text and markdown renderers share.
"""
from __future__ import annotations

from ..kb.diagnosis import Diagnosis, Knob, Remediation
from ..memory.models import Fit
from .model import SCHEMA_VERSION, Report, RunAttempt

__all__ = ["SCHEMA_VERSION", "Diagnosis", "Fit", "Knob", "Remediation", "Report", "RunAttempt"]
