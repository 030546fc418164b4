"""Memory arithmetic: formulas against worked examples, monotonicity, fingerprints, fit."""
from __future__ import annotations

from typing import Optional

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oomdoctor.kb.table import fact_table
from oomdoctor.facts import Environment, Facts, Frame, OomEvent, PhaseInfo
from oomdoctor.memory import SAVING_ESTIMATES, memory_rows, memory_section
from oomdoctor.memory import formulas as F
from oomdoctor.memory.section import build
from oomdoctor.memory.shapes import count_params, lookup, name_tokens, resolve_shape, table
from oomdoctor.read.normalise import normalise_pairs
from oomdoctor.parsers import extract
from oomdoctor.report import Diagnosis, Remediation, Report
from oomdoctor.facts.sizes import format_size, parse_size

GiB, MiB = 2**30, 2**20
LLAMA3_8B = dict(h=4096, a=32, layers=32, vocab=128256, params=8_030_261_248)


def printed(nbytes: int) -> int:
    """What the OOM message's size parses back to: the allocator's rounding, two decimals."""
    return parse_size(format_size(F.allocator_size(nbytes)))


def oom(request: str, free: str, *, capacity: str = "79.33 GiB", in_use: Optional[str] = None,
        allocated: Optional[str] = None, unallocated: Optional[str] = None) -> OomEvent:
    return OomEvent(kind="cuda_caching_allocator", line=1, tried_to_allocate_bytes=parse_size(request),
                    free_bytes=parse_size(free), total_capacity_bytes=parse_size(capacity),
                    process_in_use_bytes=parse_size(in_use) if in_use else None,
                    allocated_by_pytorch_bytes=parse_size(allocated) if allocated else None,
                    reserved_unallocated_bytes=parse_size(unallocated) if unallocated else None)


def facts_with(event: Optional[OomEvent] = None, frames: Optional[list[str]] = None, phase=None, **env) -> Facts:
    f = Facts(environment=Environment(**env), oom_events=[event] if event else [])
    f.frames = [Frame(file=p, function="forward", line=i) for i, p in enumerate(frames or [], 1)]
    if phase:
        f.phase = PhaseInfo(phase=phase)
    return f


def facts_from_log(text: str) -> Facts:
    lines = normalise_pairs(list(enumerate(text.splitlines(), 1)))
    return extract(lines)


# -- formulas: worked examples of the reference ------------------------------------------

def test_llama3_logits_at_8192_are_3_91_gib():
    size = F.logits_bytes(1, 8192, LLAMA3_8B["vocab"], 4)
    assert size == 4_202_692_608
    assert format_size(size) == "3.91 GiB"
    assert format_size(F.logits_bytes(1, 8192, 256_000, 4)) == "7.81 GiB"   # Gemma 2


def test_activations_llama3_8b_34_gib_without_checkpointing_2_gib_with():
    kw = dict(s=8192, b=1, h=4096, a=32, layers=32, fused_attention=True)
    off = F.activations(**kw, checkpointing=False)
    on = F.activations(**kw, checkpointing=True)
    assert off.total == 34 * GiB
    assert on.checkpoints == 2 * GiB
    # plus one layer's full activations while it is recomputed, minus its own kept input
    assert on.total == 2 * GiB + 34 * GiB // 32 - 2 * 8192 * 4096
    assert on.total < 4 * GiB


def test_unfused_attention_adds_the_score_matrix():
    fused = F.layer_activations(8192, 1, 4096, 32, fused_attention=True)
    plain = F.layer_activations(8192, 1, 4096, 32, fused_attention=False)
    assert plain - fused == 5 * 32 * 8192 * 8192          # 5·a·s²·b
    assert plain == 8192 * 4096 * (34 + 5 * 32 * 8192 // 4096)


def test_zero3_over_8_gpus_is_16_bytes_per_param_over_8():
    p = LLAMA3_8B["params"]
    per = F.state_bytes("mixed", "adam")
    assert per.total == 16
    z3 = F.full_states(p, per_param=per, zero_stage=3, world_size=8)
    assert z3.total == pytest.approx(16 * p / 8, abs=3)
    z0 = F.full_states(p, per_param=per, zero_stage=0, world_size=8)
    assert z0.total == 16 * p
    z1 = F.full_states(p, per_param=per, zero_stage=1, world_size=8)
    assert z1.total == 4 * p + 12 * p // 8
    z2 = F.full_states(p, per_param=per, zero_stage=2, world_size=8)
    assert z2.total == 2 * p + 2 * p // 8 + 12 * p // 8


def test_offload_leaves_16bit_weights_only_as_deepspeed_counts_it():
    p = 7_000_000_000
    per = F.state_bytes()
    opt = F.full_states(p, per_param=per, zero_stage=3, world_size=8, offload_optimizer=True)
    assert (opt.weights, opt.grads, opt.optimizer) == (2 * p // 8, 0, 0)
    both = F.full_states(p, per_param=per, zero_stage=3, world_size=8, offload_optimizer=True, offload_params=True)
    assert both.total == 0


def test_bytes_per_param_of_optimizers_and_adapters():
    assert F.state_bytes("mixed", "adam8bit").total == 10
    assert F.state_bytes("fp32", "adam").total == 16
    assert F.state_bytes("fp32", "adam8bit").optimizer == 2
    lora = F.adapter_states(8_000_000_000, 40_000_000, base_bytes=2)
    assert lora.weights == 16_000_000_000 + 160_000_000
    assert (lora.grads, lora.optimizer) == (160_000_000, 320_000_000)
    assert F.adapter_states(8_000_000_000, None, base_bytes=0.5).total is None


def test_kv_cache_llama3_8b_is_128_kib_per_token():
    per_token = F.kv_cache_per_token(32, 8, 128, 2)
    assert per_token == 131_072
    assert per_token * 8 * 8192 == 8 * GiB


def test_allocator_rounding_matches_pytorch():
    assert F.allocator_size(1) == 2 * MiB              # small pool block
    assert F.allocator_size(5 * MiB) == 20 * MiB       # 1-10 MiB: a 20 MiB block
    assert F.allocator_size(100 * MiB + 1) == 102 * MiB
    assert F.allocator_size(4_202_692_608) == 4_202_692_608
    assert F.printed_equal(4_202_692_608, parse_size("3.91 GiB"))
    assert not F.printed_equal(4_202_692_608, parse_size("3.92 GiB"))


# -- the model table ----------------------------------------------------------------------

@pytest.mark.parametrize("entry", [e for e in table() if e.params], ids=lambda e: e.name)
def test_table_parameter_counts_follow_from_the_figures(entry):
    assert count_params(entry) == entry.params
    assert entry.source and entry.source.startswith("https://huggingface.co/")


@pytest.mark.parametrize("name, expected", [
    ("meta-llama/Meta-Llama-3-8B-Instruct", "Llama-3-8B"),
    ("/models/Llama-3.1-8B", "Llama-3.1-8B"),
    ("Qwen/Qwen2.5-7B-Instruct", "Qwen2.5-7B"),
    ("Qwen/Qwen2-7B", "Qwen2-7B"),
    ("/cache/hf/Qwen2-VL-7B-Instruct", "Qwen2-VL-7B"),
    ("google/gemma-2-2b-it", "Gemma-2-2B"),
    ("google/gemma-2b", "Gemma-2B"),
    ("mistralai/Mistral-7B-Instruct-v0.3", "Mistral-7B-v0.3"),
    ("mistralai/Mistral-7B-Instruct-v0.2", "Mistral-7B-v0.1"),
    ("THUDM/chatglm3-6b", "ChatGLM3-6B"),
    ("saves/DeepSeek-R1-Distill-Qwen-32B/lora/train", "DeepSeek-R1-Distill-Qwen-32B"),
    ("gpt2-xl", "GPT-2-xl"),
    ("checkpoint-3945", None),
    ("qwen-7b", None),
    (None, None),
])
def test_model_names_map_to_table_entries(name, expected):
    entry = lookup(name)
    assert (entry.name if entry else None) == expected


def test_name_tokens_split_versions_from_family_names():
    assert name_tokens("Qwen2.5-1.5B") == {"qwen", "2.5", "1.5b"}
    assert name_tokens("Mixtral-8x7B") == {"mixtral", "8x7b"}


def test_log_figures_win_over_the_table_and_recount_params():
    shape = resolve_shape(Environment(model_name="meta-llama/Llama-2-7b-hf", vocab_size=32001))
    assert shape.get("vocab_size") == 32001 and shape.says("vocab_size") == "log"
    assert shape.get("hidden_size") == 4096 and shape.says("hidden_size").startswith("table")
    assert shape.get("params") == 6_738_415_616 + 2 * 4096   # one more row in embedding and head


# -- monotonicity -------------------------------------------------------------------------

@settings(max_examples=200)
@given(params=st.integers(1_000_000, 10**12), stage=st.integers(0, 3), w1=st.integers(1, 512),
       extra=st.integers(0, 512), optimizer=st.sampled_from(["adam", "adam8bit", "adam4bit"]),
       precision=st.sampled_from(["mixed", "fp32"]), off_opt=st.booleans(), off_par=st.booleans())
def test_more_gpus_never_increase_per_gpu_states(params, stage, w1, extra, optimizer, precision, off_opt, off_par):
    per = F.state_bytes(precision, optimizer)
    kw = dict(per_param=per, zero_stage=stage, offload_optimizer=off_opt, offload_params=off_par and stage == 3)
    assert F.full_states(params, world_size=w1 + extra, **kw).total <= F.full_states(params, world_size=w1, **kw).total


@settings(max_examples=200)
@given(params=st.integers(1_000_000, 10**12), world=st.integers(1, 512), s1=st.integers(0, 3), up=st.integers(0, 3),
       optimizer=st.sampled_from(["adam", "adam8bit"]))
def test_higher_zero_stage_never_increases_per_gpu_states(params, world, s1, up, optimizer):
    s2 = min(3, s1 + up)
    per = F.state_bytes("mixed", optimizer)
    assert (F.full_states(params, per_param=per, zero_stage=s2, world_size=world).total
            <= F.full_states(params, per_param=per, zero_stage=s1, world_size=world).total)


shapes = dict(s=st.integers(1, 32768), b=st.integers(1, 64), h=st.sampled_from([768, 2048, 4096, 5120, 8192]),
              a=st.sampled_from([8, 16, 32, 64]), layers=st.integers(1, 128), fused=st.booleans())


@settings(max_examples=300)
@given(**shapes)
def test_checkpointing_never_increases_activations(s, b, h, a, layers, fused):
    on = F.activations(s, b, h, a, layers, checkpointing=True, fused_attention=fused)
    off = F.activations(s, b, h, a, layers, checkpointing=False, fused_attention=fused)
    assert on.total <= off.total


@settings(max_examples=300)
@given(**shapes, db=st.integers(0, 64), ds=st.integers(0, 8192), ckpt=st.booleans())
def test_larger_batch_or_sequence_never_decreases_activations(s, b, h, a, layers, fused, db, ds, ckpt):
    base = F.activations(s, b, h, a, layers, checkpointing=ckpt, fused_attention=fused).total
    assert F.activations(s, b + db, h, a, layers, checkpointing=ckpt, fused_attention=fused).total >= base
    assert F.activations(s + ds, b, h, a, layers, checkpointing=ckpt, fused_attention=fused).total >= base


# -- fingerprinting -----------------------------------------------------------------------

AXOLOTL_LLAMA3_8192 = """\
base_model: meta-llama/Meta-Llama-3-8B
model_type: LlamaForCausalLM
adapter: lora
lora_r: 16
sequence_len: 8192
sample_packing: true
micro_batch_size: 1
gradient_accumulation_steps: 4
optimizer: adamw_torch
gradient_checkpointing: false
flash_attention: true
trainable params: 41,943,040 || all params: 8,072,204,288 || trainable%: 0.5196
  0%|          | 0/1200 [00:00<?, ?it/s]
Traceback (most recent call last):
  File "/opt/venv/lib/python3.10/site-packages/transformers/trainer.py", line 3318, in training_step
    loss = self.compute_loss(model, inputs)
  File "/opt/venv/lib/python3.10/site-packages/transformers/loss/loss_utils.py", line 36, in ForCausalLMLoss
    logits = logits.float()
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.91 GiB. GPU 0 has a total capacity of 23.64 GiB of which 2.11 GiB is free. Including non-PyTorch memory, this process has 21.52 GiB memory in use. Of the allocated memory 19.70 GiB is allocated by PyTorch, and 1.37 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)
"""


def test_axolotl_llama3_log_names_the_fp32_logits():
    mem = build(facts_from_log(AXOLOTL_LLAMA3_8192))
    assert mem is not None
    assert mem.request_is == "logits" and mem.request_evidence == "table"
    assert mem.request_explained.startswith("3.91 GiB = 1 × 8192 × 128256 fp32 logits")
    assert mem.model == "Llama-3-8B"
    assert mem.missing_bytes == parse_size("3.91 GiB") - parse_size("2.11 GiB")


def test_fingerprint_is_a_fact_for_the_classifier():
    t = fact_table(facts_from_log(AXOLOTL_LLAMA3_8192))
    assert t["memory.request_is"] == "logits"
    assert t["memory.logits_fp32"] == 4_202_692_608
    assert t["memory.missing"] == parse_size("3.91 GiB") - parse_size("2.11 GiB")


def test_dpo_doubles_the_batch_of_the_logits():
    req = printed(2 * 4096 * 152064 * 4)
    f = facts_with(oom(format_size(req), "1.00 GiB"), model_name="Qwen/Qwen2-7B-Instruct",
                   sequence_length=4096, micro_batch_size=1, stage="dpo")
    mem = build(f)
    assert mem.request_is == "logits"
    assert "2 × 4096 × 152064 fp32 logits" in mem.request_explained
    assert "chosen + rejected" in mem.request_explained


def test_logits_with_echoed_shape_only_need_no_model_name():
    req = printed(4 * 2048 * 32000 * 4)
    f = facts_with(oom(format_size(req), "300.00 MiB"), vocab_size=32000, hidden_size=4096,
                   sequence_length=2048, micro_batch_size=4)
    mem = build(f)
    assert (mem.request_is, mem.request_evidence) == ("logits", "log")


def test_weight_matrix_of_a_named_model_during_load():
    # Qwen2.5-32B's MLP projection, 5120 x 27648 in bf16 = 270.00 MiB
    f = facts_with(oom("270.00 MiB", "208.06 MiB", capacity="23.65 GiB"), phase="model_load",
                   model_name="deepseek-ai/DeepSeek-R1-Distill-Qwen-32B")
    mem = build(f)
    assert mem.request_is == "layer_weight"
    assert mem.request_explained == "270.00 MiB = 5120 × 27648 16-bit MLP projection"


def test_embedding_and_full_model_shapes():
    emb = build(facts_with(oom(format_size(printed(128256 * 4096 * 4)), "1.00 GiB"), model_name="Meta-Llama-3-8B"))
    assert emb.request_is == "embedding"
    whole = build(facts_with(oom(format_size(printed(6_738_415_616 * 4)), "13.57 GiB", capacity="39.39 GiB"),
                             model_name="Llama-2-7b-hf"))
    assert whole.request_is == "full_model"
    assert "6,738,415,616 parameters in fp32" in whole.request_explained


def test_optimizer_state_of_a_shard():
    params, world = 7_615_616_512, 8
    req = printed(params // world * 4)
    f = facts_with(oom(format_size(req), "1.00 GiB"), model_name="Qwen2.5-7B", zero_stage=2, world_size=world,
                   finetuning_type="full")
    assert build(f).request_is == "optimizer_state"


def test_only_the_architecture_gives_a_could_be_not_a_claim():
    f = facts_with(oom("3.91 GiB", "1.99 GiB", capacity="14.61 GiB"),
                   frames=["/env/site-packages/transformers/models/llama/modeling_llama.py"])
    mem = build(f)
    assert mem.request_is is None
    assert mem.request_could_be == "logits" and mem.request_evidence == "family"
    assert mem.request_explained.startswith("3.91 GiB = 8192 tokens × 128256 fp32 logits")
    assert fact_table(f)["memory.request_is"] is None


@pytest.mark.parametrize("request_size", ["2.00 GiB", "20.00 MiB", "2.00 MiB", "1.37 GiB", "3.39 GiB"])
def test_sizes_no_tensor_of_the_configuration_has_are_not_claimed(request_size):
    f = facts_with(oom(request_size, "1.00 GiB"), model_name="meta-llama/Meta-Llama-3-8B",
                   sequence_length=4096, micro_batch_size=2)
    assert build(f).request_is is None


@settings(max_examples=150, deadline=None)
@given(b=st.integers(1, 8), s=st.integers(512, 16384), entry=st.sampled_from([e for e in table() if e.vocab_size]))
def test_any_echoed_logits_shape_is_recognised(b, s, entry):
    req = printed(b * s * entry.vocab_size * 4)
    f = facts_with(oom(format_size(req), "100.00 MiB", capacity="139.81 GiB"), vocab_size=entry.vocab_size,
                   sequence_length=s, micro_batch_size=b)
    mem = build(f)
    assert mem.request_is == "logits"
    assert mem.request_matches[0].bytes in (b * s * entry.vocab_size * 4, b * (s - 1) * entry.vocab_size * 4)


# -- budget and fit -------------------------------------------------------------------------

def remediation(rid: str, saving: Optional[str], applicable: bool = True) -> Remediation:
    return Remediation(id=rid, rank=0, title=rid, saving=saving, applicable=applicable)


def diagnosis(*rems: Remediation) -> Diagnosis:
    for i, r in enumerate(rems, 1):
        r.rank = i
    return Diagnosis(incident="large-vocab-logits", title="t", confidence=0.9, score=9, explanation="e",
                     remediations=list(rems))


def test_fits_first_and_fixes_that_cannot_close_the_gap_ranked_down():
    facts = facts_from_log(AXOLOTL_LLAMA3_8192)
    diag = diagnosis(remediation("shorter-sequence", "halve_sequence"),
                     remediation("fragmentation", "expandable_segments"),
                     remediation("more-ranks", "zero_stage_3"),
                     remediation("liger", "fused_cross_entropy"),
                     remediation("mystery", None))
    mem = memory_section(facts, [diag])
    order = [r.id for r in diag.remediations]
    fits = {r.id: r.fit.verdict for r in diag.remediations if r.fit}
    assert fits["liger"] == "fits" and fits["shorter-sequence"] == "fits"
    assert fits["fragmentation"] == "will-not-fit"       # 1.37 GiB unallocated < 1.80 GiB missing
    assert order[:2] == ["shorter-sequence", "liger"]
    assert order.index("fragmentation") > order.index("mystery")
    assert "ranked down" in diag.remediations[order.index("fragmentation")].fit.explanation
    assert [r.rank for r in diag.remediations] == [1, 2, 3, 4, 5]
    assert mem.combination is None


def test_budget_names_states_activations_and_the_allocators_figures():
    mem = build(facts_from_log(AXOLOTL_LLAMA3_8192))
    est = {ln.item: ln.bytes for ln in mem.estimate}
    assert est["weights"] == 2 * (8_072_204_288 - 41_943_040) + 4 * 41_943_040
    assert est["activations"] == 34 * GiB                 # checkpointing off, flash attention
    assert est["logits (fp32)"] == 4_202_692_608
    alloc = {ln.item: ln.bytes for ln in mem.allocator}
    assert alloc["fragmentation"] == parse_size("1.37 GiB")
    assert alloc["non-PyTorch (this process)"] == parse_size("21.52 GiB") - parse_size("19.70 GiB") - parse_size("1.37 GiB")
    assert alloc["other processes"] == parse_size("23.64 GiB") - parse_size("2.11 GiB") - parse_size("21.52 GiB")
    assert mem.remainder[0].item == "allocated beyond the model states"
    assert any("16-bit mixed precision assumed" in a for a in mem.assumptions)


def test_combination_when_no_single_fix_covers_the_gap():
    # full fine-tuning of Llama-3-8B on 2 GPUs without ZeRO: 40 GiB requested, 1 GiB free
    f = facts_with(oom("40.00 GiB", "1.00 GiB", capacity="79.33 GiB"), model_name="Llama-3-8B",
                   world_size=2, zero_stage=0, finetuning_type="full", mixed_precision="bf16",
                   sequence_length=8192, micro_batch_size=1, gradient_checkpointing=False,
                   attn_implementation="sdpa")
    diag = diagnosis(remediation("zero1", "zero_stage_1"), remediation("adam8", "optim_8bit"),
                     remediation("shorter", "halve_sequence"), remediation("liger", "fused_cross_entropy"))
    mem = memory_section(f, [diag])
    verdicts = {r.id: r.fit.verdict for r in diag.remediations}
    assert verdicts["zero1"] == "may-fit"          # 6 B/param × 8.03e9 = 44.9 GiB: covers 39 GiB, no margin
    assert verdicts["liger"] == "will-not-fit"
    assert "fits" not in verdicts.values()
    # one fix per group: ZeRO-1 and 8-bit Adam both shrink the optimizer states
    assert mem.combination.startswith("no single fix covers the gap; zero1 + shorter")
    assert "adam8" not in mem.combination


def test_host_savings_do_not_close_a_gpu_gap():
    f = facts_with(oom("3.52 GiB", "1.88 GiB"), phase="checkpoint_save", model_name="Llama-2-70b-hf",
                   zero_stage=3, world_size=8)
    diag = diagnosis(remediation("save-only-model", "save_only_model"), remediation("no-gather", "no_gather_on_save"))
    memory_section(f, [diag])
    first, second = diag.remediations
    assert first.id == "no-gather" and first.fit.saving_bytes == parse_size("3.52 GiB")
    assert second.fit.verdict == "will-not-fit" and "host RAM" in second.fit.explanation


def test_already_applied_fixes_save_nothing():
    f = facts_with(oom("2.00 GiB", "1.00 GiB"), model_name="Llama-3-8B", sequence_length=4096,
                   micro_batch_size=1, gradient_checkpointing=True, attn_implementation="flash_attention_2",
                   finetuning_type="lora", trainable_params=20_000_000)
    diag = diagnosis(remediation("gc", "gradient_checkpointing"), remediation("fa", "fused_attention"),
                     remediation("mb", "halve_micro_batch"), remediation("lora", "lora"))
    memory_section(f, [diag])
    assert all(r.fit.saving_bytes == 0 and r.fit.verdict == "will-not-fit" for r in diag.remediations)


def test_framework_default_checkpointing_is_named():
    f = facts_with(oom("2.00 GiB", "1.00 GiB"), framework="llamafactory", model_name="Qwen2.5-7B",
                   sequence_length=4096, micro_batch_size=2)
    mem = build(f)
    assert any("LLaMA-Factory checkpoints" in a for a in mem.assumptions)
    diag = diagnosis(remediation("gc", "gradient_checkpointing"))
    memory_section(f, [diag])
    assert diag.remediations[0].fit.saving_bytes == 0


def test_unknown_estimate_name_and_missing_inputs_are_unknown_not_guessed():
    f = facts_with(oom("2.00 GiB", "1.00 GiB"))
    diag = diagnosis(remediation("a", "no_such_estimate"), remediation("b", "gradient_checkpointing"))
    mem = memory_section(f, [diag])
    assert {r.fit.verdict for r in diag.remediations} == {"unknown"}
    assert all(r.fit.saving_bytes is None for r in diag.remediations)
    assert {"micro-batch size", "sequence length", "parameter count"} <= set(mem.unknown)
    assert {ln.item: ln.bytes for ln in mem.estimate}["activations"] is None


def test_absent_when_the_log_lacks_the_inputs():
    assert memory_section(Facts()) is None
    host = OomEvent(kind="host_oom_killer", line=3, strength="weak")
    assert memory_section(facts_with(host)) is None


def test_rows_for_the_renderers():
    facts = facts_from_log(AXOLOTL_LLAMA3_8192)
    diag = diagnosis(remediation("liger", "fused_cross_entropy"))
    report = Report(tool_version="0", diagnoses=[diag])
    report.memory = memory_section(facts, report.diagnoses)
    rows = {label: (value, note) for label, value, note in memory_rows(report)}
    assert rows["request"] == (parse_size("3.91 GiB"), "= 1 × 8192 × 128256 fp32 logits")
    assert rows["missing"][0] == parse_size("3.91 GiB") - parse_size("2.11 GiB")
    assert rows["activations"][0] == 34 * GiB
    assert rows["top fix"][0] == "liger: fits"
    assert memory_rows(Report(tool_version="0")) == []
    assert Report.model_validate_json(report.model_dump_json()).memory == report.memory


def test_every_documented_estimate_name_exists():
    import pathlib
    import re
    doc = (pathlib.Path(__file__).resolve().parents[1] / "docs" / "memory.md").read_text(encoding="utf-8")
    table_part = doc.split("## Estimate names", 1)[1].split("## Verdicts", 1)[0]
    named = set(re.findall(r"^\| `([a-z0-9_]+)`", table_part, re.M))
    named |= set(re.findall(r", `([a-z0-9_]+)`", table_part))
    assert named == set(SAVING_ESTIMATES)


sizes = st.one_of(st.none(), st.integers(-5, 5), st.integers(0, 2**62))


@settings(max_examples=200, deadline=None)
@given(request=sizes, free=sizes, cap=sizes, h=sizes, layers=sizes, heads=sizes, vocab=sizes, s=sizes,
       b=sizes, world=sizes, stage=st.one_of(st.none(), st.integers(-1, 5)), params=sizes, trainable=sizes,
       name=st.one_of(st.none(), st.text(max_size=40)), fsdp=st.one_of(st.none(), st.booleans()),
       phase=st.sampled_from([None, "model_load", "forward", "checkpoint_save"]))
def test_arbitrary_figures_never_break_the_section(request, free, cap, h, layers, heads, vocab, s, b, world,
                                                    stage, params, trainable, name, fsdp, phase):
    ev = OomEvent(kind="cuda_caching_allocator", line=1, tried_to_allocate_bytes=request, free_bytes=free,
                  total_capacity_bytes=cap)
    f = facts_with(ev, phase=phase, hidden_size=h, num_layers=layers, num_attention_heads=heads,
                   vocab_size=vocab, sequence_length=s, micro_batch_size=b, world_size=world, zero_stage=stage,
                   total_params=params, trainable_params=trainable, model_name=name, fsdp=fsdp)
    diag = diagnosis(*(remediation(n, n) for n in sorted(SAVING_ESTIMATES)))
    build(f, [diag])                     # raises on a bug; memory_section would hide it
    assert isinstance(fact_table(f), dict)


def test_bad_input_never_raises():
    weird = facts_with(oom("1.00 GiB", "2.00 GiB"), model_name="x" * 10_000, sequence_length=0,
                       micro_batch_size=0, world_size=0, zero_stage=3, vocab_size=1, hidden_size=1)
    memory_section(weird, [diagnosis(*(remediation(n, n) for n in sorted(SAVING_ESTIMATES)))])
    assert isinstance(fact_table(weird), dict)


def test_gathering_to_cpu_saves_gpu_memory_and_never_counts_as_a_host_saving():
    # at the save: the failed gather is what moves to rank 0's host RAM
    at_save = facts_with(oom("3.52 GiB", "1.88 GiB"), phase="checkpoint_save", model_name="Llama-2-70b-hf",
                         fsdp=True, world_size=8)
    diag = diagnosis(remediation("gather-to-cpu", "gather_to_cpu"))
    memory_section(at_save, [diag])
    fit = diag.remediations[0].fit
    assert fit.saving_bytes == parse_size("3.52 GiB") and "host RAM instead" in fit.explanation
    # elsewhere: the full model in the FSDP parameter dtype, on the GPU, at best "may-fit"
    elsewhere = facts_with(oom("3.52 GiB", "1.88 GiB"), phase="forward", model_name="Llama-2-70b-hf",
                           fsdp=True, world_size=8)
    diag = diagnosis(remediation("gather-to-cpu", "gather_to_cpu"))
    memory_section(elsewhere, [diag])
    fit = diag.remediations[0].fit
    assert "gathered on the GPU" in fit.explanation and fit.verdict != "fits"


def test_a_logits_request_just_over_a_unit_boundary_is_recognised():
    # 1 × 5344 × 50257 fp32 logits = 1.0005 GiB, printed "1.00 GiB", which parses to exactly
    # 2**30 - a size that itself would print as "1024.00 MiB"
    req = printed(5344 * 50257 * 4)
    assert req == 2**30
    f = facts_with(oom(format_size(req), "100.00 MiB", capacity="139.81 GiB"), vocab_size=50257,
                   sequence_length=5344, micro_batch_size=1)
    assert build(f).request_is == "logits"
