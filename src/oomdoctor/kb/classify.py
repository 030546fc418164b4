"""The generic engine: score every incident of the knowledge base against the facts.

For each incident: if its ``requires`` conditions hold, add the weights of the signals
whose conditions hold (negative weights are counter-evidence). Incidents at or above
their ``min_score`` are reported, best first, with a confidence, the reasons in words,
the evidence lines, and the remediations that apply to this log's hardware and versions,
each written in the detected framework's syntax. The fallback incident (an OOM is
certain, its cause is not) is kept apart: it is flagged ``fallback`` and only reported
when no real cause is confident. Deterministic: ties break on priority, then id.
"""
from __future__ import annotations

import bisect
import functools
import math
from typing import Any, Iterable, Optional

import regex as re
from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from ..read.cache import compile_pattern
from ..facts.derived import primary_event, superseded
from ..facts.models import Evidence, Facts, fatal_events
from ..facts.sizes import format_size
from ..read.literals import required_literals
from ..read.normalise import Line, join_lines
from ..read.patterns import lazy
from .diagnosis import AGAINST, PRIOR, TIMED_OUT, Diagnosis, Knob, Remediation
from .frameworks import (
    DEFAULT_PREFERENCE,
    OTHER_RUNTIME_FORMATS,
    OWN_KNOBS_ONLY,
    PREFERENCE,
    STACK_REFUSAL,
    canonical_framework,
)
from .knowledge import Condition, Incident, KnowledgeBase, RemediationSpec
from .table import fact_table

# the reading fields each statistics fact reads (the others read the use figures)
_DEVICE_AND_HOST_USE = ("allocated_bytes", "max_allocated_bytes", "reserved_bytes", "max_reserved_bytes", "used_bytes",
                        "alloc_retries", "num_ooms", "host_used_bytes", "host_percent")
_STATS_FIELDS = {
    "stats.host_percent_max": ("host_percent",), "stats.host_percent_high": ("host_percent",),
    "stats.host_request_max": ("host_request_bytes",), "stats.host_request_large": ("host_request_bytes",),
    "stats.host_pressure": ("host_percent", "host_request_bytes"),
    "stats.allocated_growing": ("allocated_bytes",), "stats.reserved_growing": ("reserved_bytes",),
    "stats.alloc_retries": ("alloc_retries",),
}

REGEX_TIMEOUT = 0.2
CONFIDENT = 5.0          # a real cause scoring this much pushes the fallback out
MAX_EVIDENCE = 10

_SIZE_FACTS = {"oom.tried_to_allocate", "oom.total_capacity", "oom.free", "oom.process_in_use",
               "oom.allocated", "oom.reserved_unallocated", "oom.reserved_total", "oom.unallocated",
               "oom.non_pytorch", "oom.other_process_bytes", "oom.host_bytes", "env.gpu_capacity_bytes",
               "oom.unaccounted", "memory.missing", "memory.model_states", "memory.activations", "memory.logits_fp32",
               "stats.host_request_max", "oom.host_request_max"}
_PLACEHOLDER = lazy(r"\{([a-z_]+(?:\.[a-z0-9_]+)+)\}")


class Evaluator:
    """Evaluates conditions against one log's facts, lines and frames (with caching)."""

    def __init__(self, facts: Facts, lines: list[Line], table: Optional[dict[str, Any]] = None):
        self.facts = facts
        self.lines = lines
        self.table = table if table is not None else fact_table(facts)
        self.frames = [(f"{fr.file}:{fr.function}  {fr.code or ''}", fr.line) for fr in facts.frames]
        first = facts.ranks.first_failure_line
        ev = primary_event(facts)
        self.failure_line = first or (ev.line if ev else None)
        self._text_cache: dict[tuple[str, Optional[int]], Optional[int]] = {}
        self._joined: Optional[tuple[str, list[int]]] = None
        self._all_frames: Optional[str] = None
        self._nos: Optional[list[int]] = None
        # a window of the blob, and its lower-cased copy for case-insensitive gates
        self._windows: dict[tuple[int, int], tuple[str, Optional[str]]] = {}
        # what is being evaluated, (incident, part), and the parts whose regex timed out:
        # a search that ran out of time is not "no match", the report says it was not read
        self.context: tuple[str, str] | None = None
        self.timeouts: list[tuple[str, str]] = []
        self._timed_out_patterns: set[tuple[str, int | None]] = set()

    # -- helpers ----------------------------------------------------------------
    def _rx(self, pattern: str) -> re.Pattern:
        return _compiled(pattern)

    def _search(self, pattern: str, text: str) -> bool:
        try:
            return self._rx(pattern).search(text, timeout=REGEX_TIMEOUT) is not None
        except TimeoutError:
            self._timed_out()
            return False

    def _timed_out(self) -> None:
        where = self.context or ("?", "a condition")
        if where not in self.timeouts:
            self.timeouts.append(where)

    def timeout_notes(self) -> list[str]:
        """One note per incident part whose pattern ran out of time on this log."""
        return [f"{part} of incident {incident} {TIMED_OUT}; its evidence was not read"
                for incident, part in self.timeouts]

    def evidence_for_fact(self, name: str) -> list[int]:
        if name.startswith("oom."):
            ev = primary_event(self.facts)
            return [ev.line] if ev else []
        if name.startswith("env."):
            line = self.facts.environment.sources.get(name[4:])
            return [line] if line else []
        if name.startswith("phase"):
            return [self.facts.phase.line] if self.facts.phase.line else []
        if name.startswith("failure."):
            return [f.line for f in self.facts.failures if not f.secondary][:2]
        if name.startswith("marker."):
            return self.facts.markers.get(name[7:], [])[-1:]
        if name.startswith("stats."):
            # the latest readings that carry what the fact reads (a host allocation tcmalloc
            # reported is no evidence of how full the host or the device was)
            fields = _STATS_FIELDS.get(name, _DEVICE_AND_HOST_USE)
            return [s.line for s in self.facts.memory_samples if any(getattr(s, f) is not None for f in fields)][-3:]
        return []

    # -- evaluation -------------------------------------------------------------
    def holds(self, cond: Condition, lines_out: Optional[list[int]] = None) -> bool:
        if cond.all is not None:
            return all(self.holds(c, lines_out) for c in cond.all)
        if cond.any is not None:
            return any(self.holds(c, lines_out) for c in cond.any)
        if cond.not_ is not None:
            return not self.holds(cond.not_, None)
        if cond.fact is not None:
            ok = self._fact(cond)
            if ok and lines_out is not None:
                lines_out.extend(self.evidence_for_fact(cond.fact))
            return ok
        if cond.frame is not None:
            frames = self.frames[-cond.innermost:] if cond.innermost else self.frames
            gate = required_literals(cond.frame)
            if gate is not None and frames and not gate.may_match(self._frames_text()):
                return False  # no frame holds a literal every match needs
            for text, line in frames:
                if self._search(cond.frame, text):
                    if lines_out is not None:
                        lines_out.append(line)
                    return True
            return False
        if cond.text is not None:
            line = self._text(cond.text, cond.near_failure)
            if line is not None and lines_out is not None:
                lines_out.append(line)
            return line is not None
        if cond.marker is not None:
            found = self.facts.markers.get(cond.marker) or []
            if cond.near_failure and self.failure_line:
                # near the failure, and the stage it began still going on when it failed
                found = [n for n in found if 0 <= self.failure_line - n <= cond.near_failure
                         and not superseded(self.facts.markers, cond.marker, n, self.failure_line)]
            if found and lines_out is not None:
                lines_out.append(found[-1])
            return bool(found)
        return False  # pragma: no cover - validated

    def _frames_text(self) -> str:
        if self._all_frames is None:
            self._all_frames = "\n".join(text for text, _line in self.frames)
        return self._all_frames

    def _blob(self) -> tuple[str, list[int]]:
        """All normalised lines as one text (one regex pass per pattern instead of one
        call per line) and the offset where each line starts."""
        if self._joined is None:
            self._joined = join_lines(self.lines)
        return self._joined

    def _gate_passes(self, gate, blob: str, lo: int, hi: int) -> bool:
        """``gate.may_match`` over ``blob[lo:hi]``; the window and its lower-cased copy are
        made once per log, not once per pattern."""
        window = self._windows.get((lo, hi))
        if window is None:
            text = blob if (lo, hi) == (0, len(blob)) else blob[lo:hi]
            window = self._windows[(lo, hi)] = (text, None)
        text, low = window
        if gate.fold and low is None:
            low = text.lower()
            self._windows[(lo, hi)] = (text, low)
        return gate.may_match(text, low)

    def _text(self, pattern: str, near: Optional[int]) -> Optional[int]:
        key = (pattern, near)
        if key in self._text_cache:
            if key in self._timed_out_patterns:
                self._timed_out()
            return self._text_cache[key]
        blob, starts = self._blob()
        lo, hi = 0, len(blob)
        if near and self.failure_line:
            if self._nos is None:
                self._nos = [ln.no for ln in self.lines]
            first = bisect.bisect_left(self._nos, self.failure_line - near)
            last = bisect.bisect_right(self._nos, self.failure_line)
            lo = starts[first] if first < len(starts) else hi
            hi = starts[last] - 1 if last < len(starts) else hi
        found = None
        gate = required_literals(pattern)
        if gate is not None and not self._gate_passes(gate, blob, lo, hi):
            self._text_cache[key] = None
            return None
        try:
            # MULTILINE so that ^ and $ keep meaning the start and end of a log line
            m = self._rx("(?m)" + pattern).search(blob, lo, max(lo, hi), timeout=REGEX_TIMEOUT * 5)
        except TimeoutError:
            m = None
            self._timed_out_patterns.add(key)
            self._timed_out()
        if m is not None:
            found = self.lines[bisect.bisect_right(starts, m.start()) - 1].no
        self._text_cache[key] = found
        return found

    def _fact(self, c: Condition) -> bool:
        value = self.table.get(c.fact)
        if c.exists is not None:
            present = value is not None and value != [] and value is not False
            return present == c.exists
        if value is None:
            return False
        if c.eq is not None and not _equal(value, c.eq):
            return False
        if c.ne is not None and _equal(value, c.ne):
            return False
        if c.in_ is not None:
            vals = value if isinstance(value, list) else [value]
            if not any(_equal(v, w) for v in vals for w in c.in_):
                return False
        if c.not_in is not None:
            vals = value if isinstance(value, list) else [value]
            if any(_equal(v, w) for v in vals for w in c.not_in):
                return False
        for op, bound in (("gt", c.gt), ("gte", c.gte), ("lt", c.lt), ("lte", c.lte)):
            if bound is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                return False
            if not {"gt": value > bound, "gte": value >= bound, "lt": value < bound, "lte": value <= bound}[op]:
                return False
        if c.version is not None:
            v = _version(value)
            if v is None or v not in SpecifierSet(c.version, prereleases=True):
                return False
        if c.matches is not None and not self._search(c.matches, str(value)):
            return False
        return True

    def fill(self, text: str) -> str:
        def sub(m: re.Match) -> str:
            name = m.group(1)
            value = self.table.get(name)
            if value is None:
                return "?"
            if name in _SIZE_FACTS and isinstance(value, int):
                return format_size(value)
            if isinstance(value, float):
                return f"{value:.2f}"
            return str(value)
        return _PLACEHOLDER.sub(sub, text)


@functools.lru_cache(maxsize=4096)
def _compiled(pattern: str) -> re.Pattern:
    """KB patterns compiled once per process (a scan classifies thousands of logs)."""
    return compile_pattern(pattern)


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, str) and isinstance(b, str):
        return a.lower() == b.lower()
    return a == b


def _version(value: Any) -> Optional[Version]:
    try:
        return Version(str(value).split("+")[0].strip())
    except InvalidVersion:
        return None


def _installed_versions(table: dict[str, Any]) -> dict[str, Optional[str]]:
    fw = table.get("env.framework")
    versions = {
        "torch": table.get("env.torch_version"),
        "transformers": table.get("env.transformers_version"),
        "deepspeed": table.get("env.deepspeed_version"),
        "accelerate": table.get("env.accelerate_version"),
        "peft": table.get("env.peft_version"),
        "trl": table.get("env.trl_version"),
    }
    if fw and table.get("env.framework_version"):
        versions[fw] = table["env.framework_version"]
    return versions


def _confidence(score: float, fallback: bool) -> float:
    conf = 1.0 - math.exp(-max(score, 0.0) / 4.0)
    return round(min(conf, 0.3 if fallback else 0.97), 2)


def choose_knobs(spec: RemediationSpec, framework: Optional[str], zero: bool) -> tuple[Optional[Knob], list[Knob]]:
    order = list(PREFERENCE.get(framework or "", DEFAULT_PREFERENCE))
    if zero and "deepspeed" in order:
        # under DeepSpeed the JSON is often the place to change; keep the framework first
        order.remove("deepspeed")
        order.insert(1, "deepspeed")
    keys = [k for k in order if k in spec.knobs] + [k for k in spec.knobs if k not in order]
    knobs = [Knob(framework=k, setting=spec.knobs[k].strip()) for k in keys]
    return (knobs[0] if knobs else None), knobs[1:]


def _version_refusal(spec, installed: dict) -> Optional[str]:
    """Why the versions the log shows rule a fix out: older than the first release with it
    (``min_versions``), or at or past the release that removed it (``max_versions``)."""
    for limits, too_old in ((spec.min_versions, True), (spec.max_versions, False)):
        for pkg, bound in limits.items():
            shown = installed.get(pkg)
            have = _version(shown) if shown else None
            if have is None:
                continue
            if too_old and have < Version(bound):
                return f"needs {pkg} >= {bound}; the log shows {shown}"
            if not too_old and have >= Version(bound):
                return f"{pkg} {bound} removed it; the log shows {shown}"
    return None


# A log that names no framework: the runtime whose out-of-memory error it shows says whose
# knobs come first. XLA's messages are JAX's (torch_xla's logs carry PyTorch's frames, which
# name the framework), TensorFlow's allocator's are TensorFlow's; PyTorch's CUDA code fits
# neither. Only the order changes: no fix is ruled out on this guess.
_BACKEND_STACK = {"XLA": "jax", "TF": "tensorflow"}


def other_runtime(table: dict, framework: Optional[str]) -> Optional[str]:
    """The framework or runtime whose allocator failed, where it is not PyTorch's and the log
    names no framework and no PyTorch version (CuPy or TensorRT beside PyTorch is PyTorch's job)."""
    if framework or table.get("env.torch_version"):
        return None
    return OTHER_RUNTIME_FORMATS.get(table.get("oom.message_format") or "")


def _next_steps(inc: Incident, e: Evaluator, framework: Optional[str]) -> list[str]:
    steps = [e.fill(s) for s in inc.next_steps]
    runtime = other_runtime(e.table, framework)
    if runtime and steps:
        steps.insert(0, f"The memory ran out in {runtime}'s allocator: where the steps below name PyTorch's "
                        f"tools, take the same measurement with {runtime}'s own.")
    return steps


def remediations_for(incident: Incident, ev: Evaluator, framework: Optional[str]) -> list[Remediation]:
    table = ev.table
    stack = framework or _BACKEND_STACK.get(table.get("oom.backend") or "")
    installed = _installed_versions(table)
    zero = table.get("env.zero_stage") is not None
    # a stack whose users can apply only its own knobs: JAX's, TensorFlow's, or none (another
    # framework's allocator failed, and no knob is written for it); a shell or Slurm line of
    # another stack's fix sets that stack's variables
    runtime = other_runtime(table, framework)
    own = (f"{runtime}, whose allocator failed", None) if runtime else \
        (framework, framework) if framework in OWN_KNOBS_ONLY else None
    applicable: list[tuple[int, int, Remediation]] = []
    rejected: list[Remediation] = []
    for pos, spec in enumerate(incident.remediations):
        ev.context = (incident.id, f"remediation {spec.id}")
        why: Optional[str] = None
        for req in spec.requires:
            if not ev.holds(req):
                why = "its preconditions do not hold for this log"
                break
        if why is None:
            for nw in spec.not_when:
                if ev.holds(nw.when):
                    why = ev.fill(nw.why)
                    break
        if why is None:
            why = _version_refusal(spec, installed)
        if why is None and own and own[1] not in spec.knobs:
            why = f"{STACK_REFUSAL}{own[0]}: its knobs are other stacks' ({', '.join(sorted(spec.knobs))})"
        knob, others = choose_knobs(spec, stack, zero)
        rem = Remediation(
            id=spec.id, rank=0, title=spec.title, knob=knob, other_knobs=others,
            memory_effect=spec.memory_effect, cost=spec.cost, caveats=list(spec.caveats),
            min_versions=dict(spec.min_versions), applicable=why is None, why_not=why,
            auto_env=dict(spec.auto_env), saving=spec.saving,
        )
        if why is None:
            boosted = any(ev.holds(b) for b in spec.boost_when)
            applicable.append((0 if boosted else 1, pos, rem))
        else:
            rejected.append(rem)
    ev.context = None
    ordered = [r for _, _, r in sorted(applicable, key=lambda x: (x[0], x[1]))] + rejected
    for i, r in enumerate(ordered, 1):
        r.rank = i
    return ordered


def score_incident(incident: Incident, ev: Evaluator) -> Optional[tuple[float, float, list[str], list[str], list[int]]]:
    """(score, prior, reasons, the priors' reasons, evidence lines), or None where a requirement
    fails. ``prior`` sums the lead-only signals that hold: it may make a lead, never a finding."""
    lines: list[int] = []
    ev.context = (incident.id, "a requirement")
    try:
        for req in incident.requires:
            if not ev.holds(req, lines):
                return None
        return _score_signals(incident, ev, lines)
    finally:
        ev.context = None


def _score_signals(incident: Incident, ev: Evaluator,
                   lines: list[int]) -> tuple[float, float, list[str], list[str], list[int]]:
    score = prior = 0.0
    because: list[str] = []
    priors: list[str] = []
    for sig in incident.signals:
        sig_lines: list[int] = []
        ev.context = (incident.id, f"signal {sig.id}")
        if ev.holds(sig.when, sig_lines):
            if sig.lead_only:
                prior += sig.weight
                priors.append(PRIOR + ev.fill(sig.says))
            elif sig.weight > 0:
                score += sig.weight
                because.append(ev.fill(sig.says))
                lines.extend(sig_lines)
            else:
                score += sig.weight
                because.append(AGAINST + ev.fill(sig.says))
    return score, prior, because, priors, lines


def _evidence(ev: Evaluator, line_nos: Iterable[int]) -> list[Evidence]:
    wanted = sorted(set(n for n in line_nos if n))[: MAX_EVIDENCE]
    out: list[Evidence] = []
    by_no: dict[int, Line] = {}
    for ln in ev.lines:
        if ln.no in wanted and ln.no not in by_no:
            by_no[ln.no] = ln
    for n in wanted:
        ln = by_no.get(n)
        if ln is not None:
            out.append(Evidence(line=n, text=(ln.raw or ln.text)[:400]))
    return out


# What a log that stops before its error line is read under: "had it run out of memory
# here". Incidents score as usual against it; what scores is a lead, never a finding.
HYPOTHESIS = {"oom.any": True, "oom.device": True, "oom.hypothetical": True}
# What a run that has not failed but shows memory pressure is read under: "had it run out
# of memory now". What scores is a warning about the cause, never a failure.
PRESSURE = {"oom.any": True, "oom.device": True, "oom.pressure": True}
# ... and a run whose host memory is nearly full: "had the host run out now"
HOST_PRESSURE = {"oom.any": True, "oom.host": True, "oom.pressure": True}
LEAD_CONFIDENCE = 0.3


def _score_all(kb: KnowledgeBase, ev: Evaluator, *, memory: bool = True,
               other: bool = True) -> tuple[list[tuple], list[tuple], list[tuple]]:
    """Every incident that scores its ``min_score``; and, scored in the same pass, the memory
    incidents (the fallback aside) that score at least PARTIAL_SCORE but less than that,
    without and (ranked) with their lead-only priors."""
    scored, partial, leads = [], [], []
    for inc in kb:
        if (inc.memory_failure and not memory) or (not inc.memory_failure and not other):
            continue
        res = score_incident(inc, ev)
        if res is None:
            continue
        score, prior, because, priors, line_nos = res
        row = (score, inc.priority, inc.id, inc, because, line_nos)
        if score >= inc.min_score:
            # a finding: the evidence named it, and a prior adds nothing to that
            scored.append(row)
        elif inc.memory_failure and not inc.fallback:
            if score >= PARTIAL_SCORE:
                partial.append(row)
            if score + prior >= PARTIAL_SCORE:
                # with the priors counted: a lead after the fallback at most, whatever the sum
                leads.append((score, (score + prior, inc.priority, inc.id, inc, because + priors, line_nos)))
    # leads best first: by their evidence, a prior breaking ties (it is no evidence)
    leads.sort(key=lambda r: (-r[0], -r[1][0], -r[1][1], r[1][2]))
    return scored, partial, [row for _evidence, row in leads]


# Partial evidence: an incident scoring at least this much, below its min_score, is a lead
# when nothing specific is found (at most PARTIAL_LEADS of them).
PARTIAL_SCORE = 1.0
PARTIAL_LEADS = 2
# ... and beside a finding, at least this much, up to a list of LISTED memory incidents
LEAD_BESIDE_FINDING = 1.5
LISTED = 3


def _ranked(scored: list[tuple]) -> list[tuple]:
    """Best first. The fallback (an OOM whose cause is unknown) never outranks a specific
    memory incident with evidence, and goes when one is confident."""
    real = [s for s in scored if not s[3].fallback]
    best_real = max((s[0] for s in real if s[3].memory_failure), default=None)
    if best_real is not None and best_real >= CONFIDENT:
        scored = real
    return sorted(scored, key=lambda s: (s[3].fallback and best_real is not None, -s[0], -s[1], s[2]))


def classify(facts: Facts, kb: KnowledgeBase, *, lines: Optional[list[Line]] = None,
             framework: Optional[str] = None, notes: list[str] | None = None) -> list[Diagnosis]:
    """The diagnoses, best first. ``notes``, when given, gets one line per knowledge-base
    pattern that timed out on this log (its incident and signal), never a silent no-match."""
    # every OOM was caught and the run went on: memory is not why the job ended
    survived_only = bool(facts.oom_events) and not fatal_events(facts.oom_events)
    ev = Evaluator(facts, lines or [])
    detected = (canonical_framework(framework) or framework) if framework else ev.table.get("env.framework")
    scored, partial, leads = _score_all(kb, ev, memory=not survived_only)
    found = [(s, ev, False) for s in _ranked(scored)]
    stops = ev.table.get("phase.stops_early")
    no_failure = not survived_only and not ev.table.get("oom.any") and not ev.table.get("failure.any")
    hypothesis = None
    if no_failure and stops and not any(s[3].memory_failure for s, _e, _l in found):
        # No failure line at all: the log stops inside a traceback, or a process died and
        # its error is not in the log. Absence is not evidence, so nothing is diagnosed;
        # what would explain a memory failure at the place the log stops is listed as leads.
        hypothesis = HYPOTHESIS
    elif no_failure and not found and not stops:
        # a run that has not failed but is short of memory (on the device, else the host): warnings
        hypothesis = (PRESSURE if ev.table.get("stats.pressure")
                      else HOST_PRESSURE if ev.table.get("stats.host_pressure") else None)
    if hypothesis is not None:
        hyp = Evaluator(facts, lines or [], table={**ev.table, **hypothesis})
        warnings = [s for s in _score_all(kb, hyp, other=False)[0] if not s[3].fallback]
        found += [(s, hyp, True) for s in _ranked(warnings)]
    elif any(s[3].fallback for s, _e, _l in found) and all(s[3].fallback for s, _e, _l in found if s[3].memory_failure):
        # A certain OOM whose cause no incident reaches: the incidents that some of the
        # evidence (or a lead-only prior) points to, short of what naming them needs, are
        # listed as leads.
        found += [(s, ev, True) for s in leads[:PARTIAL_LEADS]]
    elif hypothesis is None:
        # A finding with room beside it: what more of the evidence also points to follows it
        # as a lead (the forward pass of a job whose fragmented cache was named first; the
        # model loading under a failure first read as another's). A weak prior of the
        # evidence (a training step, a model placed on the device) is not enough here; the
        # lead-only prior of an OOM the log does not place is, below.
        named = sum(1 for s, _e, _l in found if s[3].memory_failure)
        beside = [s for s in partial if s[0] >= LEAD_BESIDE_FINDING]
        if 0 < named < LISTED:
            found += [(s, ev, True) for s in _ranked(beside)[:LISTED - named]]
            # ... and where room is left, the commonest cause of an OOM the log does not place (a
            # lead-only prior), unless a finding says what holds the memory (another process, a
            # library's buffers): a fragmented cache or a leak says how, not whose
            have = {s[2] for s, _e, _l in found}
            room = LISTED - sum(1 for s, _e, _l in found if s[3].memory_failure)
            if not any(s[3].attributes_memory for s, _e, lead in found if not lead):
                prior = [s for s in leads if s[2] not in have and any(b.startswith(PRIOR) for b in s[4])]
                found += [(s, ev, True) for s in prior[:max(0, room)]]
    out: list[Diagnosis] = []
    for (score, _prio, _id, inc, because, line_nos), e, lead in found:
        confidence = _confidence(score, inc.fallback)
        if lead and stops:
            confidence = min(confidence, LEAD_CONFIDENCE)
            where = "stops inside a traceback" if stops == "cut_traceback" else "says a process died"
            because = [f"no failure line: the log {where} without its error; had it run out of memory there, "
                       "this is the likeliest cause"] + because
        elif lead and hypothesis is None:
            confidence = min(confidence, LEAD_CONFIDENCE)
            because = ["a lead, not a finding: " + ("some of the evidence points here, short of what naming it needs"
                                                    if any(not b.startswith((PRIOR, AGAINST)) for b in because) else
                                                    "nothing in the log points here; it is the commonest cause")] + because
        elif lead:
            confidence = min(confidence, LEAD_CONFIDENCE)
            because = ["no failure: the run shows memory pressure; if it runs out of memory, this is the likeliest "
                       "cause"] + because
        out.append(Diagnosis(
            incident=inc.id, title=inc.title, confidence=confidence,
            score=round(score, 2), fallback=inc.fallback, memory_failure=inc.memory_failure, warning=lead,
            explanation=e.fill(inc.summary.strip()), because=because,
            evidence=_evidence(e, line_nos), remediations=remediations_for(inc, e, detected),
            next_steps=_next_steps(inc, e, detected), references=list(inc.references),
        ))
    if notes is not None:
        for e in (ev, hyp) if hypothesis is not None else (ev,):
            notes.extend(n for n in e.timeout_notes() if n not in notes)
    return out
