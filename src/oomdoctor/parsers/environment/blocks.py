"""DeepSpeed / FSDP / model configuration dumped as JSON or dict blocks over several lines.

DeepSpeed's ``json = {`` continues over following lines without a log prefix, HF prints
``Model config LlamaConfig {``; ``stage`` is a ZeRO stage only inside a
``zero_optimization`` object.
"""
from __future__ import annotations

from ...read.patterns import lazy
from .collector import CONFIG, Collector, as_bool, as_int
from .forms import offload_of
from .keys import SHAPE_KEYS, apply, h_attn, h_bool, h_optimizer

# -- JSON / dict blocks -----------------------------------------------------------

_TOKEN = lazy(
    r"\s*(?:(?P<s>\"(?:[^\"\\\n]|\\.){0,500}\"|'(?:[^'\\\n]|\\.){0,500}')|(?P<p>[{}\[\]:,])|(?P<a>[^\s{}\[\]:,\"']{1,300}))")
_JSONISH = lazy(r"^\s*(?:[\"'}\]{\[]|-?\d|true|false|null|True|False|None)")
_ACCELERATE_DS_KEYS = {"zero_stage", "offload_optimizer_device", "offload_param_device",
                       "gradient_accumulation_steps", "zero3_save_16bit_model", "deepspeed_config_file"}
_SHAPE_PARENTS = {"", "text_config", "llm_config", "language_config", "text_model", "thinker_config"}


_INTERESTING = lazy(r"zero_optimization|deepspeed_config|hidden_size|num_hidden_layers|vocab_size|"
                          r"\"optimizer\"|'optimizer'|bf16|fp16|train_micro_batch|gradient_accumulation")


class BlockTracker:
    """Follows nested ``{``/``[`` over JSON and Python-dict lines, with the key path.

    A block starts on a line that opens more than it closes (``json = {``,
    ``"zero_optimization": {``, ``Model config LlamaConfig {``) and is followed while
    lines look like JSON; a few unrelated lines in between (another rank's output) are
    skipped, more than ``MAX_GAP`` in a row end the block.
    """

    MAX_GAP = 6
    MAX_LINES = 3000
    MAX_TOKENS_PER_LINE = 1000    # a one-line DeepSpeed config has a few hundred
    TOKEN_BUDGET = 300_000        # per log: hostile input cannot make this quadratic

    def __init__(self, col: Collector):
        self.col = col
        self.stack: list[str] = []
        self.gap = 0
        self.length = 0
        self.zero: dict[str, object] = {}
        self.zero_line = 0
        self.budget = self.TOKEN_BUDGET

    def feed(self, text: str, line: int) -> None:
        if len(text) > 20000:
            text = text[:20000]
        if self.stack:
            if not _JSONISH.match(text):
                self.gap += 1
                if self.gap > self.MAX_GAP:
                    self._reset()
                return
            self.gap = 0
            self.length += 1
            if self.length > self.MAX_LINES:
                self._reset()
                return
            self._tokens(text, line)
        elif "{" in text:
            stripped = text.rstrip()
            opens = stripped.endswith(("{", "["))
            if not opens and not _INTERESTING.search(text):
                return  # a one-line dict without keys of interest ({'loss': ...})
            self._tokens(text, line)
            if self.stack and not opens and not stripped.endswith(","):
                self._reset()  # an unbalanced brace inside a message, not a block
            self.length = 0

    def _reset(self) -> None:
        self.stack = []
        self.gap = 0
        self.zero = {}

    def _tokens(self, text: str, line: int) -> None:
        if self.budget <= 0:
            return
        toks = []
        try:
            for m in _TOKEN.finditer(text, timeout=0.5):
                if m.lastgroup:
                    toks.append((m.lastgroup, m.group(m.lastgroup)))
                    if len(toks) >= self.MAX_TOKENS_PER_LINE:
                        break
        except TimeoutError:
            return
        self.budget -= len(toks)
        i, n = 0, len(toks)
        while i < n:
            kind, val = toks[i]
            if kind in ("s", "a") and i + 1 < n and toks[i + 1] == ("p", ":"):
                key = _unquote(val) if kind == "s" else val
                i += 2
                if i < n and toks[i] in (("p", "{"), ("p", "[")):
                    self._open(key, line)
                    i += 1
                elif i < n and toks[i][0] in ("s", "a"):
                    self._value(key, _unquote(toks[i][1]) if toks[i][0] == "s" else toks[i][1], line)
                    i += 1
                continue
            if kind == "p" and val in "{[":
                self._open("", line)
            elif kind == "p" and val in "}]":
                self._close(line)
            i += 1

    def _open(self, key: str, line: int) -> None:
        if len(self.stack) < 64:
            self.stack.append(key)
            if key == "zero_optimization":
                self.zero, self.zero_line = {}, line

    def _close(self, line: int) -> None:
        if not self.stack:
            return
        key = self.stack.pop()
        if key == "zero_optimization":
            self._finish_zero()

    def _finish_zero(self) -> None:
        z, line = self.zero, self.zero_line
        if "offload_optimizer" in z or "offload_param" in z or "stage" in z:
            self.col.set("offload", offload_of(z.get("offload_optimizer"), z.get("offload_param")),
                         z.get("offload_line", line), CONFIG)
        self.zero = {}

    def _value(self, key: str, value: str, line: int) -> None:
        parent = self.stack[-1] if self.stack else ""
        col = self.col
        if parent == "zero_optimization" or "zero_optimization" in self.stack[-2:-1]:
            self._zero_value(parent, key, value, line)
            return
        if parent in ("bf16", "bfloat16", "fp16") and key == "enabled" and as_bool(value):
            col.part("bf16" if parent != "fp16" else "fp16", True, line, CONFIG + 1)
        elif parent == "deepspeed_config" and key.lower() in _ACCELERATE_DS_KEYS:
            apply(col, key, value, line, CONFIG)  # accelerate's deepspeed_config dict
        elif parent == "optimizer" and key == "type":
            h_optimizer(col, value, line, CONFIG)
        elif parent in _SHAPE_PARENTS:
            k = key.lower()
            if k in SHAPE_KEYS:
                apply(col, k, value, line, CONFIG)
            elif k in ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps"):
                apply(col, k, value, line, CONFIG)
            elif k in ("_attn_implementation", "attn_implementation"):
                h_attn(col, value, line, CONFIG - 2)
            elif k == "transformers_version":
                col.part("transformers_version_json", value, line, CONFIG)

    def _zero_value(self, parent: str, key: str, value: str, line: int) -> None:
        col = self.col
        if parent == "zero_optimization":
            if key == "stage":
                n = as_int(value)
                if n is not None and 0 <= n <= 3:
                    col.set("zero_stage", n, line, CONFIG + 2)
                    self.zero["stage"] = n
            elif key in ("stage3_gather_16bit_weights_on_model_save", "stage3_gather_fp16_weights_on_model_save"):
                h_bool("gather_16bit_weights_on_save")(col, value, line, CONFIG)
            elif key == "cpu_offload" and as_bool(value):  # DeepSpeed <= 0.5 stage 1/2
                self.zero["offload_optimizer"] = "cpu"
                self.zero["offload_line"] = line
            elif key == "cpu_offload_params" and as_bool(value):
                self.zero["offload_param"] = "cpu"
        elif parent in ("offload_optimizer", "offload_param"):
            if key == "device":
                self.zero[parent] = value.lower()
                if value.lower() in ("cpu", "nvme"):
                    self.zero["offload_line"] = line
            elif key == "pin_memory":
                h_bool("pin_memory")(col, value, line, CONFIG)


def _unquote(s: str) -> str:
    return s[1:-1] if len(s) >= 2 and s[0] in "'\"" else s
