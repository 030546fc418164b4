"""The report's ``memory`` section (pydantic): budget, request fingerprint, assumptions.

Kept free of imports from the rest of the memory package so the report model can use it.
``Fit`` is what the arithmetic predicts for one remediation (set on ``Remediation.fit``).
"""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from ..facts.models import Model


class MemoryLine(Model):
    """One amount of memory: estimated from the configuration or reported by the allocator."""

    item: str
    bytes: Optional[int] = Field(default=None, description="None: the log does not give what it needs")
    basis: Optional[str] = Field(default=None, description="the formula with its figures, the allocator field, or why unknown")


class RequestMatch(Model):
    """A tensor of this configuration whose printed size equals the failed request."""

    kind: str = Field(description="logits, embedding, layer_weight, layer, full_model, optimizer_state, gather_bucket")
    tensor: str = Field(description="e.g. '1 × 8192 × 128256 fp32 logits'")
    bytes: int = Field(description="the tensor's exact size (the allocator rounds large requests up to 2 MiB)")
    evidence: str = Field(description="log: all figures printed; table: model name → bundled table; "
                                      "tokens: b·s inferred (a power of two); family: architecture only")
    note: Optional[str] = None


class MemoryReport(Model):
    """Where the memory went, from the allocator's figures and the configuration the log echoes."""

    request_bytes: Optional[int] = None
    free_bytes: Optional[int] = None
    capacity_bytes: Optional[int] = None
    missing_bytes: Optional[int] = Field(default=None, description="request − free: the least the failed allocation lacked")
    request_is: Optional[str] = Field(default=None, description="the tensor kind the request matches (log, table or tokens evidence)")
    request_could_be: Optional[str] = Field(default=None, description="the best match at any evidence, architecture-only included")
    request_evidence: Optional[str] = None
    request_explained: Optional[str] = Field(default=None, description="e.g. '3.91 GiB = 1 × 8192 × 128256 fp32 logits'")
    request_matches: list[RequestMatch] = Field(default_factory=list)
    model: Optional[str] = Field(default=None, description="the bundled-table entry the model name maps to")
    model_source: Optional[str] = None
    figures: dict[str, Optional[int]] = Field(default_factory=dict, description="params, hidden_size, num_layers, ... as used")
    figure_origins: dict[str, str] = Field(default_factory=dict, description="figure -> log | table: <model> | computed")
    estimate: list[MemoryLine] = Field(default_factory=list, description="per-GPU memory the configuration implies")
    allocator: list[MemoryLine] = Field(default_factory=list, description="what the OOM message reported")
    remainder: list[MemoryLine] = Field(default_factory=list, description="allocated memory the estimate does not explain")
    assumptions: list[str] = Field(default_factory=list)
    unknown: list[str] = Field(default_factory=list, description="inputs the log does not give")
    combination: Optional[str] = Field(default=None, description="what combination of fixes closes the gap when no single one does")


class Fit(Model):
    """What the memory arithmetic predicts for one remediation."""

    saving_bytes: Optional[int] = None
    verdict: Literal["fits", "may-fit", "will-not-fit", "unknown"] = "unknown"
    explanation: Optional[str] = None
