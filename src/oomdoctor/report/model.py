"""The report: what a user, a job wrapper or a fleet scan gets back (pydantic).

Renderers (``report.text``, ``report.markdown``, ``report.json``) read only this model. ``oomdoctor schema`` prints its JSON
Schema; ``SCHEMA_VERSION`` changes when a field is removed or changes meaning.
"""
from __future__ import annotations

from typing import Iterable, Optional

from pydantic import Field, model_validator

from ..facts.models import (
    Environment,
    Facts,
    Failure,
    Frame,
    MemorySample,
    Model,
    OomEvent,
    PhaseInfo,
    RankSummary,
    fatal_events,
)
from ..kb.diagnosis import Diagnosis
from ..memory.models import MemoryReport

SCHEMA_VERSION = "1.2"   # 1.1: Diagnosis.warning, OomEvent.symptom, PhaseInfo.stops_early
#                          1.2: oom_events_total, oom_events_left_out (oom_events is a bounded sample)


class RunAttempt(Model):
    """One run of a command wrapped by ``oomdoctor run`` (several with ``--retry``)."""

    attempt: int = Field(description="1 for the first run")
    env_changes: dict[str, str] = Field(default_factory=dict, description="environment set by --retry for this run, on top of the caller's")
    exit_status: int = Field(description="what the shell saw: the exit code, or 128+N for signal N")
    signal: Optional[str] = Field(default=None, description="the signal that ended the job, e.g. SIGKILL")
    duration_s: float
    incident: Optional[str] = Field(default=None, description="top diagnosis of this run's failure")
    lines: int = Field(default=0, description="lines of output the run printed")


def failure_seen(warnings: Iterable[bool], survived: Iterable[bool], secondary: Iterable[bool],
                 stops_early: Optional[str]) -> bool:
    """The one test of "did the log fail", over a report or its JSON: a diagnosis that is not a
    warning, an OOM error the run did not survive, a failure of another kind that is not a
    cascade, or a process that died without its error in the log."""
    return (any(not w for w in warnings) or any(not s for s in survived) or any(not s for s in secondary)
            or stops_early == "process_died")


class Report(Model):
    schema_version: str = SCHEMA_VERSION
    tool_version: str
    source: Optional[str] = None
    diagnoses: list[Diagnosis] = Field(default_factory=list)
    oom_events: list[OomEvent] = Field(default_factory=list, description="the OOM events found, or a bounded sample "
                                                                        "of them (see oom_events_left_out)")
    oom_events_total: int = Field(default=0, description="OOM events found in the log, those left out included")
    oom_events_left_out: int = Field(default=0, description="OOM events found but not listed in oom_events: the "
                                                            "first, the last (the final failure) and one per distinct "
                                                            "rank, device and request size are kept")
    failures: list[Failure] = Field(default_factory=list)
    environment: Environment = Field(default_factory=Environment)
    phase: Optional[str] = Field(default=None, description="model_load, forward, backward, optimizer_step, checkpoint_save, checkpoint_load, eval, data_loading, epoch_end, unknown")
    phase_detail: PhaseInfo = Field(default_factory=PhaseInfo)
    frames: list[Frame] = Field(default_factory=list)
    memory_samples: list[MemorySample] = Field(default_factory=list)
    ranks: RankSummary = Field(default_factory=RankSummary)
    memory: Optional[MemoryReport] = Field(default=None, description="memory arithmetic: budget, request fingerprint, fit of fixes")
    fingerprint: Optional[str] = Field(default=None, description="stable id of this failure for fleets (no PIDs, times, sizes)")
    lines_read: int = 0
    bytes_read: int = 0
    notes: list[str] = Field(default_factory=list)
    attempts: list[RunAttempt] = Field(default_factory=list, description="oomdoctor run: every run of the command, first to last")

    @model_validator(mode="after")
    def _count_events(self) -> Report:
        # a report built from its events alone counts them
        self.oom_events_total = max(self.oom_events_total, len(self.oom_events) + self.oom_events_left_out)
        return self

    @property
    def top(self) -> Optional[Diagnosis]:
        return self.diagnoses[0] if self.diagnoses else None

    @property
    def found_oom(self) -> bool:
        return bool(fatal_events(self.oom_events)) or any(d.memory_failure for d in self.diagnoses)

    @property
    def found_anything(self) -> bool:
        """A failure was seen, memory or not: an OOM error the run did not survive (memory
        pressure or the symptom of another fault: it ended the run either way), a diagnosis
        that is not a warning, a failure of another kind (NCCL timeout, illegal memory access,
        device mismatch ...), or a process that died without its error in the log."""
        return failure_seen((d.warning for d in self.diagnoses), (e.survived for e in self.oom_events),
                            (f.secondary for f in self.failures), self.phase_detail.stops_early)

    # -- the renderers, for notebooks and job wrappers ---------------------------------
    def to_text(self, *, verbose: bool = False, width: Optional[int] = None) -> str:
        """The terminal report (one screen; ``verbose`` for everything), without colour."""
        from .text import render_text
        return render_text(self, color=False, verbose=verbose, width=width)

    def to_markdown(self) -> str:
        """The report as markdown, to paste into an issue."""
        from .markdown import render_markdown
        return render_markdown(self)

    def to_html(self) -> str:
        """One self-contained HTML page: verdict, a picture of the memory, evidence, fixes."""
        from .html import render_html
        return render_html(self)

    def _repr_markdown_(self) -> str:  # Jupyter shows this
        return self.to_markdown()

    def _repr_html_(self) -> str:  # Jupyter prefers this where HTML is shown
        return self.to_html()

    @classmethod
    def from_facts(cls, facts: Facts, *, tool_version: str, source: Optional[str] = None) -> "Report":
        return cls(
            tool_version=tool_version,
            source=source,
            oom_events=facts.oom_events,
            oom_events_left_out=facts.oom_events_left_out,
            failures=facts.failures,
            environment=facts.environment,
            phase=facts.phase.phase,
            phase_detail=facts.phase,
            frames=facts.frames,
            memory_samples=facts.memory_samples,
            ranks=facts.ranks,
            lines_read=facts.lines_read,
            bytes_read=facts.bytes_read,
            notes=facts.notes,
        )


def report_json_schema() -> dict:
    """The JSON Schema of the report as written (every field present, defaults included)."""
    schema = Report.model_json_schema(mode="serialization")
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": f"urn:oomdoctor:schema:report:{SCHEMA_VERSION}", **schema}
