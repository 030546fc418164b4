"""Public architecture figures of common model families, and the shape a log implies.

Logs often name the model ("model_name_or_path: meta-llama/Meta-Llama-3-8B") without
echoing its config. The bundled table (``memory/model_shapes.yaml``, figures from each
model's config.json on its public model card) fills in hidden size, layers, heads,
vocabulary and parameter count. Figures the log prints itself always win over the
table: a fine-tune may have resized its vocabulary. No network is used.

``resolve_shape(env)`` merges both and says where each figure came from, so the memory
arithmetic can name its assumptions.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional

import yaml

from ..facts.models import Environment
from ..read.patterns import lazy

DATA_FILE = Path(__file__).resolve().parent / "model_shapes.yaml"
CARD_URL = "https://huggingface.co/{repo}/blob/main/config.json"

# Split "Meta-Llama-3.1-8B-Instruct" into words, then letters from the digits that follow
# them ("qwen2.5" -> "qwen", "2.5"; "r1" -> "r", "1"), keeping sizes ("8b", "0.5b",
# "8x7b") whole. Bounded patterns on short strings only.
_WORD = lazy(r"[a-z0-9.]+")
_LETTER_DIGIT = lazy(r"(?<=[a-z])(?<!\dx)(?=\d)")   # but "8x7b" stays whole


@dataclass(frozen=True)
class ModelShape:
    """One architecture: the figures of its config.json, and where they came from."""

    name: str
    arch: Optional[str] = None
    repo: Optional[str] = None
    hidden_size: Optional[int] = None
    num_layers: Optional[int] = None
    num_attention_heads: Optional[int] = None
    num_kv_heads: Optional[int] = None
    intermediate_size: Optional[int] = None
    vocab_size: Optional[int] = None
    params: Optional[int] = None
    head_dim: Optional[int] = None
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    fused_qkv: bool = False
    fused_gate_up: bool = False
    norms_per_layer: int = 2
    gpt2_style: bool = False
    max_position_embeddings: Optional[int] = None
    num_experts: Optional[int] = None
    experts_per_token: Optional[int] = None
    moe_intermediate_size: Optional[int] = None
    shared_experts: int = 0
    first_dense_layers: int = 0
    q_lora_rank: Optional[int] = None
    kv_lora_rank: Optional[int] = None
    qk_nope_head_dim: Optional[int] = None
    qk_rope_head_dim: Optional[int] = None
    v_head_dim: Optional[int] = None
    match: tuple[tuple[str, ...], ...] = ()

    @property
    def source(self) -> Optional[str]:
        return CARD_URL.format(repo=self.repo) if self.repo else None

    @property
    def dim_per_head(self) -> Optional[int]:
        if self.head_dim:
            return self.head_dim
        if self.hidden_size and self.num_attention_heads:
            return self.hidden_size // self.num_attention_heads
        return None

    @property
    def kv_dim(self) -> Optional[int]:
        """Width of the k (or v) projection: kv heads x head dim (GQA/MQA shrink it)."""
        d = self.dim_per_head
        kv = self.num_kv_heads or self.num_attention_heads
        return kv * d if kv and d else None

    @property
    def q_dim(self) -> Optional[int]:
        d = self.dim_per_head
        return self.num_attention_heads * d if self.num_attention_heads and d else None


@dataclass
class ResolvedShape:
    """The shape of the model in a log: each figure with its origin ("log" or the table)."""

    shape: ModelShape
    origin: dict[str, str] = field(default_factory=dict)
    table_entry: Optional[ModelShape] = None

    def get(self, name: str) -> Optional[int]:
        return getattr(self.shape, name)

    def says(self, name: str) -> str:
        return self.origin.get(name, "unknown")


# -- the table ------------------------------------------------------------------------

def _entry(raw: dict[str, Any]) -> ModelShape:
    kwargs: dict[str, Any] = {}
    for key, value in raw.items():
        if key == "match":
            kwargs["match"] = tuple(tuple(str(t).lower() for t in s) for s in value)
        elif key in ModelShape.__dataclass_fields__:
            kwargs[key] = value
        else:
            raise ValueError(f"model_shapes.yaml: {raw.get('name')}: unknown field {key!r}")
    return ModelShape(**kwargs)


@lru_cache(maxsize=1)
def table() -> tuple[ModelShape, ...]:
    """Every entry of the bundled table (read once)."""
    data = yaml.load(DATA_FILE.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    return tuple(_entry(raw) for raw in data.get("models", []))


def name_tokens(name: str) -> set[str]:
    """Words of a model name or path, lower-case, letters split from trailing digits."""
    text = name.lower()[:512].replace("_", "-")
    out: set[str] = set()
    for word in _WORD.findall(text):
        for part in _LETTER_DIGIT.split(word.strip(".")):
            part = part.strip(".")
            if part:
                out.add(part)
    return out


def lookup(name: Optional[str]) -> Optional[ModelShape]:
    """The table entry a model name or path names, or None (also when ambiguous).

    An entry matches when every token of one of its ``match`` sets is in the name; the
    entry with the most matching tokens wins, so "gemma-2-2b" is Gemma 2 2B, not Gemma 2B.
    Equally specific matches with different figures cancel out.
    """
    if not name:
        return None
    tokens = name_tokens(name)
    best: list[tuple[int, ModelShape]] = []
    for entry in table():
        score = max((len(s) for s in entry.match if set(s) <= tokens), default=0)
        if score:
            best.append((score, entry))
    if not best:
        return None
    top = max(s for s, _ in best)
    winners = [e for s, e in best if s == top]
    first = winners[0]
    if any(_figures(w) != _figures(first) for w in winners[1:]):
        return None
    return first


def _figures(e: ModelShape) -> tuple:
    return (e.hidden_size, e.num_layers, e.num_attention_heads, e.num_kv_heads,
            e.intermediate_size, e.vocab_size, e.params)


def family_vocabularies(arch: str) -> dict[int, list[str]]:
    """Vocabulary sizes of the table's models of one architecture (``modeling_<arch>.py``)."""
    out: dict[int, list[str]] = {}
    for e in table():
        if e.arch == arch and e.vocab_size:
            out.setdefault(e.vocab_size, []).append(e.name)
    return out


# -- parameter count ------------------------------------------------------------------

def layer_params(s: ModelShape, moe: bool = False) -> Optional[int]:
    """Parameters of one decoder layer (attention + MLP + norms)."""
    h, inter = s.hidden_size, s.intermediate_size
    if not h or not inter:
        return None
    if s.gpt2_style:
        # c_attn (h x 3h + 3h), c_proj (h x h + h), MLP h->I->h with biases, two LayerNorms
        return 3 * h * h + 3 * h + h * h + h + 2 * h * inter + inter + h + 4 * h
    if s.kv_lora_rank and s.num_attention_heads:
        # multi-head latent attention (DeepSeek-V2): low-rank q and kv projections
        a = s.num_attention_heads
        qk = (s.qk_nope_head_dim or 0) + (s.qk_rope_head_dim or 0)
        attn = 0
        if s.q_lora_rank:
            attn += h * s.q_lora_rank + s.q_lora_rank + s.q_lora_rank * a * qk
        else:
            attn += h * a * qk
        attn += h * (s.kv_lora_rank + (s.qk_rope_head_dim or 0)) + s.kv_lora_rank
        attn += s.kv_lora_rank * a * ((s.qk_nope_head_dim or 0) + (s.v_head_dim or 0))
        attn += a * (s.v_head_dim or 0) * h
    else:
        q, kv = s.q_dim, s.kv_dim
        if not q or not kv:
            return None
        attn = h * q + 2 * h * kv + q * h
        if s.qkv_bias:
            attn += q + 2 * kv
    if moe and s.num_experts:
        inner = s.moe_intermediate_size or inter
        mlp = (s.num_experts + s.shared_experts) * 3 * h * inner + h * s.num_experts
    else:
        mlp = 3 * h * inter
    return attn + mlp + s.norms_per_layer * h


def count_params(s: ModelShape) -> Optional[int]:
    """Total parameters implied by the figures (embeddings, layers, final norm).

    Gated (SwiGLU/GeGLU) MLPs with three matrices, RMSNorm weights only, untied output
    layer unless ``tie_word_embeddings`` — the layout of every family in the table except
    GPT-2, which has its own branch (learned positions, biases, LayerNorm with bias).
    """
    h, L, V = s.hidden_size, s.num_layers, s.vocab_size
    if not h or not L or not V:
        return None
    embed = V * h * (1 if s.tie_word_embeddings else 2)
    if s.gpt2_style:
        embed += (s.max_position_embeddings or 0) * h
        final_norm = 2 * h
    else:
        final_norm = h
    if s.num_experts and not s.gpt2_style:
        dense, moe = layer_params(s, moe=False), layer_params(s, moe=True)
        if dense is None or moe is None:
            return None
        layers = s.first_dense_layers * dense + (L - s.first_dense_layers) * moe
    else:
        one = layer_params(s)
        if one is None:
            return None
        layers = L * one
    return embed + layers + final_norm


# -- merging the log with the table ---------------------------------------------------

_SHAPE_FIELDS = ("hidden_size", "num_layers", "num_attention_heads", "num_kv_heads",
                 "intermediate_size", "vocab_size")


def resolve_shape(env: Environment) -> ResolvedShape:
    """The model's figures: what the log echoes, then the table entry its name maps to.

    The parameter count comes from the log ("all params", "Number of parameters"), else
    the table, else — when the log echoes a complete shape — the count it implies
    (origin "computed").
    """
    entry = lookup(env.model_name)
    values: dict[str, Any] = {}
    origin: dict[str, str] = {}
    for name in _SHAPE_FIELDS:
        logged = getattr(env, name, None)
        if isinstance(logged, int) and logged > 0:
            values[name] = int(logged)
            origin[name] = "log"
        elif entry is not None and getattr(entry, name):
            values[name] = getattr(entry, name)
            origin[name] = f"table: {entry.name}"
    # A log that gives heads but not KV heads: a multi-head model unless the table says
    # otherwise. Only assumed when the table has nothing to say.
    if "num_kv_heads" not in values and "num_attention_heads" in values and entry is None:
        values["num_kv_heads"] = values["num_attention_heads"]
        origin["num_kv_heads"] = "assumed equal to attention heads (the log does not say)"
    if entry is not None:
        # The entry's count only stands when the log's figures agree with it (a resized
        # vocabulary changes it); otherwise it is recomputed from the merged figures.
        agrees = all(values.get(n) == getattr(entry, n) for n in _SHAPE_FIELDS if getattr(entry, n))
        shape = ModelShape(**{**entry.__dict__, **values, "params": entry.params if agrees else None})
    else:
        shape = ModelShape(name=env.model_name or "model", **values)
    params = env.total_params if (env.total_params or 0) > 0 else None
    if params:
        origin["params"] = "log"
    elif shape.params:
        params = shape.params
        origin["params"] = f"table: {entry.name}" if entry else "table"
    else:
        params = count_params(shape)
        if params:
            origin["params"] = "computed from the shape (gated MLP, untied embeddings assumed)"
    shape = ModelShape(**{**shape.__dict__, "params": params})
    return ResolvedShape(shape=shape, origin=origin, table_entry=entry)
