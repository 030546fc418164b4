"""What the classifier says about a log: ranked diagnoses with their remediations (pydantic).

The report (``report.model.Report``) carries a list of these; the memory arithmetic fills
in each remediation's ``fit``.
"""
from __future__ import annotations

from typing import Optional

from pydantic import Field

from ..facts.models import Evidence, Model
from ..memory.models import Fit

# the words of a pattern's timeout note (kb/classify.py writes it); the report finds the note
# by them (report/common.py) without importing the classifier
TIMED_OUT = "timed out on this log"
# how a diagnosis's reason from counter-evidence, and one from a lead-only prior, begins (the
# report dims them and never quotes one as the diagnosis's first reason)
AGAINST, PRIOR = "against: ", "prior: "


class Knob(Model):
    """One way to apply a remediation, in one framework's syntax."""

    framework: str = Field(description="llamafactory, axolotl, xtuner, hf, trl, deepspeed, accelerate, fsdp, llama-cookbook, env, code, ...")
    setting: str = Field(description="the exact change: a YAML/JSON snippet, an argument, an environment variable")
    note: Optional[str] = None


class Remediation(Model):
    id: str
    rank: int = Field(description="1 = apply first")
    title: str
    knob: Optional[Knob] = Field(default=None, description="the knob for the detected (or requested) framework")
    other_knobs: list[Knob] = Field(default_factory=list)
    memory_effect: Optional[str] = None
    cost: Optional[str] = None
    caveats: list[str] = Field(default_factory=list)
    min_versions: dict[str, str] = Field(default_factory=dict)
    applicable: bool = True
    why_not: Optional[str] = Field(default=None, description="why it does not apply to this log (hardware, versions)")
    auto_env: dict[str, str] = Field(default_factory=dict, description="environment-only change that is safe to apply automatically")
    fit: Optional[Fit] = None
    saving: Optional[str] = Field(default=None, description="name of the memory-arithmetic estimate of its saving (docs/memory.md)")


class Diagnosis(Model):
    incident: str = Field(description="a knowledge-base incident id (TAXONOMY)")
    title: str
    confidence: float = Field(ge=0.0, le=1.0)
    score: float
    fallback: bool = Field(default=False, description="generic match: an OOM is certain, its cause is not")
    memory_failure: bool = Field(default=True, description="False for non-memory incidents (bf16-unsupported, ds-device-mismatch)")
    warning: bool = Field(default=False, description="no failure is shown: memory pressure seen in a run that did not fail, "
                                                     "or a lead where the log stops before its error line; never a failure "
                                                     "(exit code 0, not a failure in scan)")
    explanation: str
    because: list[str] = Field(default_factory=list, description="the signals that matched, in words")
    evidence: list[Evidence] = Field(default_factory=list)
    remediations: list[Remediation] = Field(default_factory=list)
    next_steps: list[str] = Field(default_factory=list, description="what to capture when the log cannot decide")
    references: list[str] = Field(default_factory=list)
