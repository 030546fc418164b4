"""ParseContext's whole-log searches: the literal gates give the same lines as a plain
per-line search, and every phase marker's gate covers every line the marker matches."""
from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from oomdoctor.read.normalise import normalise
from oomdoctor.parsers import phase
from oomdoctor.parsers.base import ParseContext

FIXTURES = Path(__file__).parent / "fixtures" / "logs"

_WORDS = ["Error", "error", "oom", "Kill", "loss", "Saving", "İstanbul", "ﬁle", "ß", "x", "\t", " "]


def _ctx(texts: list[str]) -> ParseContext:
    return ParseContext(normalise("\n".join(texts)))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.sampled_from(_WORDS), max_size=6).map("".join), max_size=30),
       st.lists(st.sampled_from(["error", "oom", "kill", "saving", "istanbul", "ss", "x"]), min_size=1, max_size=3))
def test_lines_with_equals_a_per_line_search(texts, literals):
    ctx = _ctx(texts)
    lits = tuple(literals)
    assert ctx.lines_with(lits) == [i for i, ln in enumerate(ctx.lines) if any(w in ln.text for w in lits)]
    assert ctx.lines_with(lits, fold=True) == [
        i for i, ln in enumerate(ctx.lines) if any(w in ln.text.lower() for w in lits)]


def test_gated_grep_finds_what_the_whole_log_search_finds():
    ctx = _ctx(["step 1", "Saving model checkpoint to out/", "loss 3", "[INFO] SAVING CHECKPOINT", "done"])
    rx = phase.MARKERS["saving_checkpoint"]
    assert ctx.grep(rx, phase.MARKER_GATES["saving_checkpoint"]) == ctx.grep(rx) == [1, 3]


def _fixture_lines() -> list[str]:
    out = []
    for path in sorted(FIXTURES.rglob("*.log")) + sorted((FIXTURES.parent / "real").glob("*.log")):
        out.extend(path.read_text(encoding="utf-8", errors="replace").splitlines())
    return out


def test_every_marker_match_holds_one_of_its_gate_literals():
    assert set(phase.MARKER_GATES) == set(phase.MARKERS)
    samples = _fixture_lines() + [
        "Saving model checkpoint to /out/checkpoint-500", "saving checkpoint to /scratch/run",
        "Initializing nuScenes detection evaluation",
        "Loading checkpoint shards: 100%", "Instantiating LlamaForCausalLM model under default dtype torch.bfloat16.",
        "Continuing training from checkpoint, will skip to saved global_step", "Resuming from step 400",
        "{'train_runtime': 1234.5, 'train_samples_per_second': 3.2}", "***** Running training *****",
        "Starting training", "Epoch(train) [1][10/100]", "***** Running Evaluation *****", "Epoch(val) [1][5/10]",
        "***** Running Prediction *****", "Created reference model", "Before initializing optimizer states",
        "Creating fp16 ZeRO stage 3 optimizer", "DeepSpeedZeRoOffload initialize [begin]",
        "Stage 3 initialize beginning", "After creating fp16 partitions: 1", "Creating ZeRO Offload",
        "Running tokenizer on dataset (num_proc=16)", "Map (num_proc=8): 100%", "Generating train split: 1000",
    ]
    checked = 0
    for name, rx in phase.MARKERS.items():
        gate = phase.MARKER_GATES[name]
        for text in samples:
            if rx.search(text):
                checked += 1
                assert any(w in text.lower() for w in gate), (name, text)
    assert checked >= 25


def test_explained_lines_are_each_events_line_and_evidence():
    from oomdoctor.facts.models import OomEvent
    ctx = _ctx(["a", "b", "c", "d"])
    ctx.facts.oom_events += [OomEvent(kind="cuda_caching_allocator", strength="certain", **ctx.at(ctx.lines[1])),
                             OomEvent(kind="host_oom_killer", strength="certain", **ctx.at(ctx.lines[3]))]
    ctx.facts.oom_events[0].evidence.append(ctx.evidence(2))
    assert ctx.explained_lines() == {2, 3, 4}
    assert ctx.explained_lines(skip_kinds=frozenset({"host_oom_killer"})) == {2, 3}
