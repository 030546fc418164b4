"""Size fingerprinting: which tensor of this configuration was the failed request?

The allocator prints the request rounded (see ``formulas.allocator_size``) with two
decimals, so a request is compared with every tensor the configuration implies — logits
``b × s × V`` (fp32 after the loss's upcast, or 16-bit), one weight matrix (h×h, h×kv,
h×I, the V×h embedding, fused q/k/v or gate/up), a whole decoder layer gathered at once,
the whole model, this rank's optimizer-state shard, a DeepSpeed communication bucket —
and a match is claimed when the printed sizes are equal.

How strong a match is depends on where the shape came from (``evidence``):

* ``log``    — every dimension is printed in the log (config echo, sequence length);
* ``table``  — the log names the model and the table gives its figures;
* ``tokens`` — the vocabulary is known (log or table) but not b·s: the match needs b·s to
  be a power of two (padded or packed batches of 2^k tokens), which random sizes rarely are;
* ``family`` — only the architecture is known (``modeling_llama.py`` in the traceback):
  the vocabularies of that family in the table, b·s a power of two. Reported as "could
  be", never as "is".
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..facts.models import Facts
from ..facts.sizes import format_size
from ..read.patterns import lazy
from . import formulas as F
from .setup import TrainingSetup
from .shapes import family_vocabularies, layer_params

KIND_ORDER = ("logits", "embedding", "layer_weight", "layer", "full_model", "optimizer_state", "gather_bucket")
EVIDENCE_ORDER = ("log", "table", "tokens", "family")
CLAIMED = {"log", "table", "tokens"}
MAX_BATCH_MULTIPLE = 64            # micro-batch × 2 (paired) when the log gives no batch size
MIN_TOKENS, MAX_TOKENS = 256, 1 << 22
_MODELING = lazy(r"modeling_([a-z0-9_]+)\.py")
DS_DEFAULT_BUCKET = 500_000_000    # DeepSpeed reduce/allgather bucket default (elements)


@dataclass(frozen=True)
class Match:
    kind: str
    tensor: str           # "1 × 8192 × 128256 fp32 logits"
    nbytes: int           # the tensor's size
    evidence: str         # log | table | tokens | family
    note: Optional[str] = None
    rank: tuple = ()      # tie-break within a kind: fp32 logits (the loss's upcast) and fewer tokens first

    def sort_key(self) -> tuple:
        return (EVIDENCE_ORDER.index(self.evidence), KIND_ORDER.index(self.kind), self.rank)


def _fits(nbytes: int, request: int) -> bool:
    if nbytes < F.K_MIN_LARGE_ALLOC:
        # anything from 1 to 10 MiB is served from a 20 MiB block: the size says nothing
        return False
    return F.printed_equal(F.allocator_size(nbytes), request) or F.printed_equal(nbytes, request)


def _dtype_name(nbytes: int) -> str:
    return {4: "fp32", 2: "16-bit", 1: "8-bit"}[nbytes]


def _is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _origin(st: TrainingSetup, *names: str) -> str:
    """log when every figure is from the log, else table (when all are known)."""
    says = [st.shape.says(n) for n in names]
    return "log" if all(s == "log" for s in says) else "table"


def _token_counts(request: int, per_token: int) -> list[int]:
    """Integer token counts n with n·per_token printing as the request."""
    # "1.00 GiB" parses to exactly 2**30, which itself prints as "1024.00 MiB": at a unit's
    # boundary the size was printed in the larger unit, with that unit's rounding
    unit = F.print_unit(request + 1)
    lo = max(1, (request - unit // 100 - F.K_ROUND_LARGE) // per_token)
    hi = (request + unit // 100) // per_token + 1
    if hi - lo > 4096:
        return []
    return [n for n in range(lo, hi + 1) if _fits(n * per_token, request)]


def logits_matches(st: TrainingSetup, request: int, vocab: int, evidence: str, family: str = "") -> list[Match]:
    out: list[Match] = []
    b, s = st.micro_batch, st.seq_len
    tag = f" ({family})" if family else ""
    for nbytes in (4, 2):
        dt = _dtype_name(nbytes)
        per_token = vocab * nbytes
        for n in _token_counts(request, per_token):
            if s and evidence in ("log", "table"):
                for seq in (s, s - 1):
                    if seq <= 0 or n % seq:
                        continue
                    k = n // seq
                    shown = f"{k} × {seq} × {vocab} {dt} logits{tag}"
                    if b is not None and (k == b or (st.paired and k == 2 * b)):
                        note = "chosen + rejected concatenated" if k == 2 * b and k != b else None
                        if seq == s - 1:
                            note = "the shifted labels' length (s − 1)" + (f"; {note}" if note else "")
                        out.append(Match("logits", shown, n * per_token, evidence, note,
                                         (nbytes == 2, k != b, seq != s, n)))
                    elif b is None and 1 <= k <= MAX_BATCH_MULTIPLE:
                        out.append(Match("logits", shown, n * per_token, evidence,
                                         "batch of %d sequences (the micro-batch is not in the log)" % k,
                                         (nbytes == 2, k, seq != s, n)))
            if _is_pow2(n) and MIN_TOKENS <= n <= MAX_TOKENS:
                limit = 2 * b * s if (b and s) else (MAX_BATCH_MULTIPLE * s if s else MAX_TOKENS)
                if n <= limit:
                    ev = "family" if evidence == "family" else "tokens"
                    out.append(Match("logits", f"{n} tokens × {vocab} {dt} logits{tag}", n * per_token, ev,
                                     "b·s inferred from the size; the log does not give both", (nbytes == 2, 0, 0, n)))
    # the shifted (s − 1) length prints the same as s once rounded: keep it only alone
    exact = {(m.rank[0], m.tensor.split(" × ")[0]) for m in out if m.rank and not m.rank[2]}
    return [m for m in out if not (m.rank and m.rank[2] and (m.rank[0], m.tensor.split(" × ")[0]) in exact)]


def weight_matches(st: TrainingSetup, request: int) -> list[Match]:
    sh = st.shape.shape
    h, inter, vocab = sh.hidden_size, sh.intermediate_size, sh.vocab_size
    out: list[Match] = []
    mats: list[tuple[str, str, int, int, tuple[str, ...]]] = []
    if h and vocab:
        mats.append(("embedding", "embedding / LM head", vocab, h, ("vocab_size", "hidden_size")))
    if h and sh.q_dim:
        mats.append(("layer_weight", "attention q/o projection", h, sh.q_dim, ("hidden_size", "num_attention_heads")))
    if h and sh.kv_dim and sh.kv_dim != sh.q_dim:
        mats.append(("layer_weight", "attention k/v projection", h, sh.kv_dim, ("hidden_size", "num_kv_heads")))
    if h and sh.fused_qkv and sh.q_dim and sh.kv_dim:
        mats.append(("layer_weight", "fused q/k/v projection", h, sh.q_dim + 2 * sh.kv_dim, ("hidden_size",)))
    if h and inter:
        mats.append(("layer_weight", "MLP projection", h, inter, ("hidden_size", "intermediate_size")))
        if sh.fused_gate_up:
            mats.append(("layer_weight", "fused gate/up projection", h, 2 * inter, ("hidden_size", "intermediate_size")))
    if h and sh.moe_intermediate_size:
        mats.append(("layer_weight", "expert MLP projection", h, sh.moe_intermediate_size, ("hidden_size",)))
    for kind, what, rows, cols, names in mats:
        for nbytes in (2, 4):
            size = rows * cols * nbytes
            if _fits(size, request):
                note = None if nbytes == 2 else "fp32: the weight, its gradient, its fp32 master copy or one Adam state"
                out.append(Match(kind, f"{rows} × {cols} {_dtype_name(nbytes)} {what}", size,
                                 _origin(st, *names), note))
    one = layer_params(sh)
    if one:
        for nbytes in (2, 4):
            if _fits(one * nbytes, request):
                out.append(Match("layer", f"one decoder layer's {one:,} parameters in {_dtype_name(nbytes)}",
                                 one * nbytes, _origin(st, "hidden_size", "intermediate_size"),
                                 "a whole layer gathered at once (ZeRO-3 / FSDP unit)"))
    return out


def model_matches(st: TrainingSetup, request: int) -> list[Match]:
    out: list[Match] = []
    params = st.params
    ev = "log" if st.shape.says("params") == "log" else "table"
    if params:
        for nbytes in (2, 4):
            if _fits(params * nbytes, request):
                out.append(Match("full_model", f"all {params:,} parameters in {_dtype_name(nbytes)}",
                                 params * nbytes, ev, "a full copy of the model (weights, gradients or a DDP bucket set)"))
    world = st.world
    trained = st.trainable or params
    if trained and world and world > 1 and (st.zero_stage or 0) >= 1:
        part = trained // world
        for nbytes, what in ((4, "fp32 optimizer-state partition (master copy, m or v)"), (2, "16-bit parameter partition")):
            if _fits(part * nbytes, request):
                out.append(Match("optimizer_state" if nbytes == 4 else "full_model",
                                 f"{trained:,} / {world} GPUs × {nbytes} B: this rank's {what}", part * nbytes, ev))
    if st.zero_stage is not None and st.zero_stage >= 1 and st.sharding and st.sharding.startswith("ZeRO"):
        h = st.dim("hidden_size")
        buckets = [(DS_DEFAULT_BUCKET, "DeepSpeed default bucket (5e8 elements)")]
        if h:
            buckets += [(h * h, "hidden² bucket (HF 'auto' reduce_bucket_size)"),
                        (int(0.9 * h * h), "0.9·hidden² bucket (HF 'auto' stage3_prefetch_bucket_size)")]
        for elems, what in buckets:
            for nbytes in (2, 4):
                if _fits(elems * nbytes, request):
                    out.append(Match("gather_bucket", f"{what} in {_dtype_name(nbytes)}", elems * nbytes,
                                     "log" if elems == DS_DEFAULT_BUCKET else _origin(st, "hidden_size")))
    return out


def architecture_of(facts: Facts) -> Optional[str]:
    """The transformers model type of the innermost ``modeling_<arch>.py`` frame."""
    for fr in reversed(facts.frames):
        m = _MODELING.search(fr.file[-200:])
        if m:
            return m.group(1)
    return None


def match_request(st: TrainingSetup, facts: Facts, request: Optional[int]) -> list[Match]:
    """Every tensor of the configuration whose printed size equals the request, best first."""
    if not request or request < F.K_MIN_LARGE_ALLOC or request >= 1 << 50:
        return []
    found: list[Match] = []
    vocab = st.dim("vocab_size")
    if vocab:
        found += logits_matches(st, request, vocab, _origin(st, "vocab_size"))
    found += weight_matches(st, request)
    found += model_matches(st, request)
    if not vocab:
        arch = architecture_of(facts)
        if arch:
            for v, names in family_vocabularies(arch).items():
                shown = ", ".join(names[:2]) + (", …" if len(names) > 2 else "")
                found += logits_matches(st, request, v, "family", family=f"vocabulary of {shown}")
    unique: dict[str, Match] = {}
    for m in sorted(found, key=Match.sort_key):
        unique.setdefault(m.tensor, m)
    return list(unique.values())[:8]


def describe(matches: list[Match], request: int) -> tuple[Optional[str], Optional[str], Optional[str], Optional[str]]:
    """(request_is, request_could_be, evidence, explanation) for a list of matches."""
    if not matches:
        return None, None, None, None
    best = matches[0]
    size = format_size(request)
    # name what else it could be: other kinds first, then one other shape of the same kind
    others = [m for m in matches[1:] if m.kind != best.kind]
    same = [m for m in matches[1:] if m.kind == best.kind and m.evidence == best.evidence][:1]
    alternatives = (others + same)[:2]
    text = f"{size} = {best.tensor}"
    if best.note:
        text += f" ({best.note})"
    if alternatives:
        text += "; or " + "; or ".join(m.tensor for m in alternatives)
    if best.evidence == "family":
        text += ". The log names neither the model nor b·s: the shape is a guess from the architecture"
    elif best.evidence == "tokens":
        text += ". The vocabulary is known, b·s is inferred"
    claimed = best.kind if best.evidence in CLAIMED else None
    return claimed, best.kind, best.evidence, text
