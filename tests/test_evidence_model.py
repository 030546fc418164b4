"""The evidence model on logs that stop early, hide their phase, or carry OOM lines that are
not memory pressure. The logs here are synthetic: short hand-written windows in the shapes
real logs take (tests/fixtures/real has the real ones)."""
from __future__ import annotations

import textwrap

import pytest

import oomdoctor
from oomdoctor.kb.classify import LEAD_CONFIDENCE


def report(log: str):
    return oomdoctor.diagnose(textwrap.dedent(log).lstrip("\n"), text=True)


def incidents(rep) -> list[str]:
    return [d.incident for d in rep.diagnoses]


CUT_IN_OPTIMIZER = """
    {'loss': 1.21, 'learning_rate': 2e-05, 'epoch': 0.01}
    Traceback (most recent call last):
      File "/opt/conda/lib/python3.10/site-packages/transformers/trainer.py", line 2283, in _inner_training_loop
        self.optimizer.step()
      File "/opt/conda/lib/python3.10/site-packages/torch/optim/optimizer.py", line 385, in wrapper
        out = func(*args, **kwargs)
      File "/opt/conda/lib/python3.10/site-packages/torch/optim/adamw.py", line 176, in step
        self._init_group(
      File "/opt/conda/lib/python3.10/site-packages/torch/optim/adamw.py", line 128, in _init_group
        state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
"""


def test_a_traceback_cut_before_its_error_gives_leads_not_a_diagnosis():
    rep = report(CUT_IN_OPTIMIZER)
    assert rep.phase_detail.stops_early == "cut_traceback"
    assert rep.oom_events == []
    assert incidents(rep)[0] == "optimizer-state"
    assert all(d.warning and d.confidence <= LEAD_CONFIDENCE for d in rep.diagnoses)
    assert "no failure line" in rep.diagnoses[0].because[0]
    assert not rep.found_anything          # exit code 0: nothing in the log shows a failure
    from oomdoctor.report.text import render_text
    first = render_text(rep, color=False).splitlines()[0]
    assert first.startswith("No error line: the log stops inside a traceback. Lead")


def test_a_traceback_the_run_went_on_after_is_no_lead():
    rep = report(CUT_IN_OPTIMIZER + """
    {'loss': 1.19, 'learning_rate': 2e-05, 'epoch': 0.02}
     2%|▏         | 20/1000 [00:40<32:40,  2.00s/it]
    """)
    assert rep.phase_detail.stops_early is None
    assert rep.diagnoses == []


def test_a_failure_that_is_not_memory_leaves_no_lead():
    rep = report(CUT_IN_OPTIMIZER + "    RuntimeError: The size of tensor a (4096) must match the size of tensor b (4097)\n")
    assert all(not d.memory_failure for d in rep.diagnoses)
    assert not any(d.warning for d in rep.diagnoses)


def test_a_process_that_died_without_its_error_is_a_failure_with_leads():
    rep = report("""
    [INFO|trainer.py:3410] 2024-05-02 10:11:12,001 >> Saving model checkpoint to saves/llama3-8b/checkpoint-500
    [2024-05-02 10:11:40,120] [INFO] [launch.py:319:sigkill_handler] Killing subprocess 4021
    [2024-05-02 10:11:40,121] [INFO] [launch.py:319:sigkill_handler] Killing subprocess 4022
    [2024-05-02 10:11:44,502] [ERROR] [launch.py:325:sigkill_handler] ['/usr/bin/python', '-u', 'train.py'] exits with return code = 1
    """)
    assert rep.phase_detail.stops_early == "process_died"
    assert incidents(rep)[:1] == ["ckpt-save-gather"]
    assert all(d.warning for d in rep.diagnoses)
    assert rep.found_anything              # a process died: exit code 1


def test_leads_do_not_branch_on_the_phase():
    """The same cut traceback in another phase leads to that phase's incident."""
    rep = report("""
    Traceback (most recent call last):
      File "/opt/conda/lib/python3.10/site-packages/transformers/trainer.py", line 4120, in evaluation_loop
        losses, logits, labels = self.prediction_step(model, inputs, prediction_loss_only, ignore_keys=ignore_keys)
      File "/opt/conda/lib/python3.10/site-packages/transformers/trainer_seq2seq.py", line 310, in prediction_step
        generated_tokens = self.model.generate(**gen_kwargs)
    """)
    assert incidents(rep)[:1] == ["eval-generation"]
    assert all(d.warning for d in rep.diagnoses)


FRAGMENTED = ("RuntimeError: CUDA out of memory. Tried to allocate 1.25 GiB (GPU 0; 31.75 GiB total capacity; "
              "24.62 GiB already allocated; 1.06 GiB free; 27.97 GiB reserved in total by PyTorch)\n")


def test_a_finding_that_does_not_place_the_oom_keeps_the_commonest_cause_as_a_lead():
    """A fragmented cache is named, but nothing says where the job was: the step's
    activations follow it as a lead (low confidence), not as a second finding."""
    rep = report(FRAGMENTED)
    assert incidents(rep) == ["alloc-fragmentation", "activation-memory"]
    assert not rep.diagnoses[0].warning
    lead = rep.diagnoses[1]
    assert lead.warning and lead.confidence <= LEAD_CONFIDENCE
    assert lead.because[0].startswith("a lead, not a finding")


def test_a_finding_that_says_what_holds_the_memory_gets_no_commonest_cause_lead():
    """NCCL's own buffers are named (non-pytorch-memory, attributes_memory in the knowledge
    base): the step's activations are no lead beside them."""
    rep = report("node2:411:411 [3] transport/net.cc:890 NCCL WARN Cuda failure 2 'out of memory'\n")
    assert incidents(rep) == ["non-pytorch-memory"]
    # the same unplaced OOM with a fragmented cache named instead keeps the lead (the test above)
    assert "activation-memory" in incidents(report(FRAGMENTED))


def test_a_placed_oom_gets_no_commonest_cause_lead():
    """The same message in a model's load: the log places the OOM, so no prior lead."""
    rep = report("""
    Traceback (most recent call last):
      File "/opt/conda/lib/python3.10/site-packages/transformers/modeling_utils.py", line 3531, in from_pretrained
        model = cls(config, *model_args, **model_kwargs)
    """ + "    " + FRAGMENTED)
    assert rep.phase == "model_load"
    assert "activation-memory" not in incidents(rep)


# -- OOM lines that are not memory pressure ------------------------------------------------

def test_a_cublas_failure_after_a_bad_index_is_a_symptom():
    rep = report("""
    ../aten/src/ATen/native/cuda/Indexing.cu:1146: indexSelectLargeIndex: block: [5,0,0], thread: [64,0,0] Assertion `srcIndex < srcSelectDimSize` failed.
    RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`
    """)
    (ev,) = rep.oom_events
    assert ev.kind == "cublas_alloc" and ev.symptom
    assert not any(d.memory_failure for d in rep.diagnoses)
    assert any("not counted as memory pressure" in n for n in rep.notes)


def test_a_request_no_device_could_hold_is_a_symptom():
    rep = report("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 9876.00 TiB. GPU 0 has a total "
                 "capacity of 79.33 GiB of which 70.10 GiB is free.\n")
    (ev,) = rep.oom_events
    assert ev.symptom and "far larger" in ev.symptom
    assert not any(d.memory_failure for d in rep.diagnoses)


IMPORT_BAD_ALLOC = """
    Traceback (most recent call last):
      File "/opt/app/bin/infer.py", line 18, in <module>
        from app.nets.search import BatchSearch
      File "/opt/app/nets/search.py", line 17, in <module>
        class Hypothesis(NamedTuple):
      File "/opt/app/nets/search.py", line 20, in Hypothesis
        yseq: torch.Tensor = torch.tensor([])
    RuntimeError: std::bad_alloc
"""


def test_a_bad_alloc_thrown_while_a_module_is_imported_is_a_symptom():
    rep = report(IMPORT_BAD_ALLOC)
    (ev,) = rep.oom_events
    assert ev.symptom and "imported" in ev.symptom
    assert not any(d.memory_failure for d in rep.diagnoses)
    # ... and a native module's own initialisation, the import innermost
    rep = report("""
    Traceback (most recent call last):
      File "/opt/app/run.py", line 3, in <module>
        import faiss
      File "/env/site-packages/faiss/__init__.py", line 10, in <module>
        from .swigfaiss import *
    MemoryError: std::bad_alloc
    """)
    assert rep.oom_events and all(ev.symptom for ev in rep.oom_events)


@pytest.mark.parametrize("change", [
    # the same error from a function a training loop called: the host's memory
    ("      File \"/opt/app/nets/search.py\", line 20, in Hypothesis", "      File \"/opt/app/nets/search.py\", line 20, in collate"),
    # a script's own top-level code, no import above it: the data it loads
    ("        from app.nets.search import BatchSearch", "        data = load_all(args.path)"),
    # another error at the same place
    ("RuntimeError: std::bad_alloc", "MemoryError"),
    # an imported module's own code that computes (loads its data) at import time
    ("        class Hypothesis(NamedTuple):", "        INDEX = build_index(np.load('/data/all_vectors.npy'))"),
])
def test_a_host_allocation_failure_outside_an_import_stays_memory(change):
    rep = report(IMPORT_BAD_ALLOC.replace(*change))
    assert rep.oom_events and not any(ev.symptom for ev in rep.oom_events)
    assert any(d.memory_failure for d in rep.diagnoses)


def test_a_cublas_failure_on_its_own_is_still_memory():
    rep = report("RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`\n")
    (ev,) = rep.oom_events
    assert ev.symptom is None
    assert any(d.memory_failure for d in rep.diagnoses)


# -- message recognition -------------------------------------------------------------------

@pytest.mark.parametrize("tail", ["Tried to all", "Tried to", "Tried", ""])
def test_an_allocator_message_cut_mid_word_is_an_event(tail: str):
    rep = report(f"""
    Traceback (most recent call last):
      File "train.py", line 88, in <module>
        loss.backward()
    torch.OutOfMemoryError: CUDA out of memory. {tail}
    """)
    (ev,) = rep.oom_events
    assert ev.kind == "cuda_caching_allocator" and ev.tried_to_allocate_bytes is None
    assert rep.phase == "backward"


def test_a_message_that_goes_on_is_not_cut():
    rep = report("torch.OutOfMemoryError: CUDA out of memory. Tried\nto allocate 2.00 GiB. GPU 0 has a total capacity of 79.33 GiB of which 1.10 GiB is free.\n")
    (ev,) = rep.oom_events
    assert ev.tried_to_allocate_bytes == 2 * 2**30


def test_nccl_last_error_calloc_block():
    rep = report("""
    torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5
    ncclUnhandledCudaError: Call to CUDA function failed.
    Last error:
    Failed to CUDA calloc async 4 bytes
    """)
    assert [e.kind for e in rep.oom_events] == ["nccl"]
    assert incidents(rep)[:1] == ["non-pytorch-memory"]


def test_rich_boxed_traceback_frames():
    rep = report("""
    ╭───────────────────── Traceback (most recent call last) ─────────────────────╮
    │ /usr/local/lib/python3.10/dist-packages/transformers/trainer.py:1539 in train │
    │ /usr/local/lib/python3.10/dist-packages/torch/optim/adamw.py:128 in _init_group │
    ╰─────────────────────────────────────────────────────────────────────────────╯
    OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity of 23.65 GiB of which 120.00 MiB is free.
    """)
    assert [f.function for f in rep.frames][-1] == "_init_group"
    assert rep.phase == "optimizer_step"


# -- phase -----------------------------------------------------------------------------------

def test_phase_from_another_ranks_traceback_after_the_error_line():
    rep = report("""
    [rank4]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 56.00 MiB. GPU 4 has a total capacity of 79.33 GiB of which 49.81 MiB is free.
    [rank5]: Traceback (most recent call last):
    [rank5]:   File "/app/src/llamafactory/train/sft/workflow.py", line 52, in run_sft
    [rank5]:     model = load_model(tokenizer, model_args, finetuning_args, training_args.do_train)
    """)
    assert rep.phase == "model_load"


_TAIL = ('  File "/x/transformers/modeling_utils.py", line 445, in load_state_dict\n'
         '    return torch.load(checkpoint_file, map_location="cpu")\n'
         '  File "/x/torch/serialization.py", line 607, in load\n'
         '    return _load(opened_zipfile, map_location, pickle_module, **pickle_load_args)\n'
         'RuntimeError: CUDA out of memory. Tried to allocate 64.00 MiB (GPU 0; 39.59 GiB total capacity; '
         '37.90 GiB already allocated; 10.19 MiB free; 38.03 GiB reserved in total by PyTorch)\n')


@pytest.mark.parametrize("callers,phase", [
    # the Trainer reloading its best checkpoint at the end of training
    ('  File "/x/transformers/trainer.py", line 1771, in _inner_training_loop\n'
     '    self._load_best_model()\n'
     '  File "/x/transformers/trainer.py", line 1867, in _load_best_model\n'
     '    state_dict = load_state_dict(best_model_path)\n', "checkpoint_load"),
    # a user function named like a load, under a training step: the library frames decide
    ('  File "/x/transformers/trainer.py", line 1771, in _inner_training_loop\n'
     '    self.restore_weights(step)\n'
     '  File "train.py", line 80, in restore_weights\n'
     '    state_dict = load_state_dict(path)\n', "checkpoint_load"),
    # loading the model before any training
    ('  File "train.py", line 20, in main\n'
     '    model = AutoModelForCausalLM.from_pretrained(args.model)\n'
     '  File "/x/transformers/modeling_utils.py", line 3100, in from_pretrained\n'
     '    state_dict = load_state_dict(resolved_archive_file)\n', "model_load"),
])
def test_reading_tensors_is_a_load_decided_by_the_callers(callers: str, phase: str):
    log = 'Traceback (most recent call last):\n' + callers + _TAIL
    assert report(log).phase == phase


# -- ranking ---------------------------------------------------------------------------------

def test_the_fallback_never_outranks_a_specific_incident_with_evidence():
    rep = report("""
    Traceback (most recent call last):
      File "/x/transformers/models/llama/modeling_llama.py", line 330, in forward
        attn_weights = torch.matmul(query_states, key_states.transpose(2, 3))
    torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity of 79.33 GiB of which 1.10 GiB is free. Including non-PyTorch memory, this process has 78.20 GiB memory in use. Of the allocated memory 77.00 GiB is allocated by PyTorch, and 300.00 MiB is reserved by PyTorch but unallocated.
    """)
    ranked = incidents(rep)
    assert ranked[0] != "unknown-oom"
    assert "unknown-oom" not in ranked or ranked.index("unknown-oom") > 0


def test_a_bare_message_is_unknown_oom():
    rep = report("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 256.00 MiB. GPU 0 has a total capacity "
                 "of 23.64 GiB of which 180.44 MiB is free. Including non-PyTorch memory, this process has 23.45 GiB "
                 "memory in use. Of the allocated memory 22.81 GiB is allocated by PyTorch, and 188.09 MiB is reserved "
                 "by PyTorch but unallocated.\n")
    assert incidents(rep)[:1] == ["unknown-oom"]


# -- memory pressure without a failure ------------------------------------------------------

def test_a_cache_that_dwarfs_what_is_allocated_is_a_warning():
    rep = report("""
    [2023-11-02 18:56:22,389] [INFO] [axolotl.load_model:404] [PID:5470] [RANK:0] GPU memory usage after model load: 7.494GB (+0.114GB cache, +1.341GB misc)
    [2023-11-02 18:57:01,107] [INFO] [axolotl.callbacks.on_step_end:122] [PID:5470] [RANK:0] GPU memory usage while training: 13.270GB (+56.066GB cache, +1.374GB misc)
    """)
    assert incidents(rep)[:1] == ["alloc-fragmentation"]
    assert all(d.warning for d in rep.diagnoses)
    assert not rep.found_anything
    from oomdoctor.report.text import render_text
    assert render_text(rep, color=False).startswith("Warning, no failure:")


def test_deepspeed_cache_flushes_are_a_warning():
    rep = report("""
    [2024-03-01 10:00:01,000] [WARNING] [stage3.py:2069:step] 4 pytorch allocator cache flushes since last step. this happens when there is high memory pressure and is detrimental to performance. if this is happening frequently consider adjusting settings to reduce memory consumption. If you are unable to make the cache flushes go away consider adding get_accelerator().empty_cache() calls in your training loop to ensure that all ranks flush their caches at the same time
    {'loss': 1.02, 'learning_rate': 1e-05, 'epoch': 0.1}
    """)
    assert incidents(rep)[:1] == ["alloc-fragmentation"]
    assert all(d.warning for d in rep.diagnoses)


def test_deepspeed_cache_flushes_pasted_without_their_count_are_the_same_warning():
    rep = report("""
    pytorch allocator cache flushes since last step. this happens when there is high memory pressure and is detrimental to performance.
    """)
    assert incidents(rep)[:1] == ["alloc-fragmentation"]
    assert all(d.warning for d in rep.diagnoses)
    assert [s.alloc_retries for s in rep.memory_samples] == [1]


def test_rising_allocations_are_a_leak_warning():
    lines = "\n".join(f"    step {i * 100}: mem_alloc {10 + 2 * i:.2f} GB mem_reserved {12 + 2 * i:.2f} GB" for i in range(8))
    rep = report("\n" + lines + "\n")
    assert incidents(rep)[:1] == ["gradual-leak"]
    assert all(d.warning for d in rep.diagnoses)


def test_memory_pressure_in_a_run_that_failed_otherwise_is_no_warning():
    rep = report("""
    [2023-11-02 18:57:01,107] [INFO] [axolotl.callbacks.on_step_end:122] [PID:5470] [RANK:0] GPU memory usage while training: 13.270GB (+56.066GB cache, +1.374GB misc)
    [rank0]:[E ProcessGroupNCCL.cpp:1414] [PG 0 Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600003 milliseconds before timing out.
    """)
    assert not any(d.memory_failure for d in rep.diagnoses)
    assert not any(d.warning for d in rep.diagnoses)


def test_colab_frames_and_the_line_that_ran():
    rep = report("""
    ---------------------------------------------------------------------------
    OutOfMemoryError                          Traceback (most recent call last)
    [<ipython-input-7-3d62c575fcfd>](https://localhost:8080/#) in <cell line: 1>()
    ----> 1 trainer_stats = trainer.train()

    [/usr/local/lib/python3.10/dist-packages/accelerate/utils/operations.py](https://localhost:8080/#) in _convert_to_fp32(tensor)
        779
        780     def _convert_to_fp32(tensor):
    --> 781         return tensor.float()
        782
    """)
    assert [(f.function, f.code) for f in rep.frames][-1] == ("_convert_to_fp32", "return tensor.float()")
    assert incidents(rep)[:1] == ["large-vocab-logits"]


def test_vllm_allocator_cuda_error_is_a_runtime_oom():
    rep = report("""
    (TaskRunner pid=9668)   File "/env/lib/python3.12/site-packages/vllm/device_allocator/cumem.py", line 76, in create_and_map
    (TaskRunner pid=9668)     python_create_and_map(*allocation_handle)
    (TaskRunner pid=9668) RuntimeError: CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:62
    """)
    assert [e.kind for e in rep.oom_events] == ["cuda_runtime_error"]


def test_accelerate_prepare_places_the_model():
    rep = report("""
    Traceback (most recent call last):
      File "train.py", line 140, in train
        model, optimizer = accelerator.prepare(model, optimizer)
      File "/opt/conda/lib/python3.10/site-packages/accelerate/accelerator.py", line 1292, in prepare
        result = tuple(self._prepare_one(obj, first_pass=True) for obj in args)
      File "/opt/conda/lib/python3.10/site-packages/accelerate/accelerator.py", line 1169, in _prepare_one
        return self.prepare_model(obj, device_placement=device_placement)
    """)
    assert rep.phase == "model_load"
    assert incidents(rep)[:1] == ["model-load"] and rep.diagnoses[0].warning


def test_this_process_has_0_bytes_is_not_believed():
    rep = report("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of "
                 "79.33 GiB of which 1.10 GiB is free. Including non-PyTorch memory, this process has 0 bytes memory in "
                 "use. Of the allocated memory 77.00 GiB is allocated by PyTorch, and 300.00 MiB is reserved by PyTorch "
                 "but unallocated.\n")
    assert "stale-gpu-process" not in incidents(rep)
    assert any("0 bytes in use" in n for n in rep.notes)
    assert rep.oom_events[0].process_in_use_bytes == 0     # reported as printed, not used


def test_the_cuda_context_is_not_another_process_in_old_messages():
    """A 4 GiB card: the ~0.5 GiB context is a large share of it, and no other process is there."""
    rep = report("RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 3.82 GiB total capacity; "
                 "2.60 GiB already allocated; 50.00 MiB free; 2.74 GiB reserved in total by PyTorch)\n")
    assert "stale-gpu-process" not in incidents(rep)


def test_amp_unscaling_is_the_optimizer_step():
    rep = report("""
    Traceback (most recent call last):
      File "/opt/conda/lib/python3.10/site-packages/transformers/trainer.py", line 1938, in _inner_training_loop
        self.accelerator.clip_grad_norm_(
      File "/opt/conda/lib/python3.10/site-packages/torch/cuda/amp/grad_scaler.py", line 284, in unscale_
        optimizer_state["found_inf_per_device"] = self._unscale_grads_(optimizer, inv_scale, found_inf, False)
    ValueError: Attempting to unscale FP16 gradients.
    """)
    assert rep.phase == "optimizer_step"


def test_the_code_line_above_a_bare_error_names_backward():
    rep = report("""
    Variable._execution_engine.run_backward(  # Calls into the C++ engine to run the backward pass
    RuntimeError: element 0 of tensors does not require grad and does not have a grad_fn
    """)
    assert rep.phase == "backward"


def test_another_runtimes_device_allocation_failure_is_an_oom():
    rep = report("""
    2024-05-01 10:00:00.000: 1234 ERROR NRT:nrt_allocate Failed to alloc DEVICE memory: 1073741824
    RuntimeError: nrt_allocate failed
    """)
    (ev,) = rep.oom_events
    assert (ev.kind, ev.backend, ev.tried_to_allocate_bytes) == ("device_runtime", "Neuron", 2**30)
    assert any(d.memory_failure for d in rep.diagnoses)


@pytest.mark.parametrize("line, backend", [
    ('RuntimeError: nrt_tensor_allocate status=4 message="Allocation Failure"', "Neuron"),
    ('RuntimeError: nrt_load_collectives status=4 message="Allocation Failure"', "Neuron"),
    ("2024-Jul-30 14:22:31.305961 65191:69012 ERROR   NRT:nrt_infodump      Failure: NRT_RESOURCE in nrt_load()", "Neuron"),
    ("RuntimeError: Could not load the model status=4 message=Allocation Failure", None),
])
def test_the_neuron_runtimes_resource_status_is_a_device_allocation_failure(line, backend):
    (ev,) = report(line).oom_events
    assert (ev.kind, ev.backend) == ("device_runtime", backend)
    # its other statuses are other failures
    assert not report('RuntimeError: nrt_tensor_allocate status=1 message="Failure"').oom_events


def _new_format_oom(request: str, total: str, free: str, in_use: str, allocated: str, unallocated: str) -> str:
    """A synthetic message in the allocator's wording of torch 2.1 and later."""
    return (f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {request}. GPU 0 has a total capacity of "
            f"{total} of which {free} is free. Including non-PyTorch memory, this process has {in_use} memory "
            f"in use. Of the allocated memory {allocated} is allocated by PyTorch, and {unallocated} is reserved by "
            "PyTorch but unallocated.\n")


def test_a_certain_oom_with_partial_evidence_lists_leads_after_the_unknown_cause():
    # synthetic message: the process's own tensors fill the device, nothing else is known
    text = _new_format_oom("2.00 GiB", "79.15 GiB", "10.00 MiB", "79.13 GiB", "77.50 GiB", "100.10 MiB")
    diags = oomdoctor.diagnose(text).diagnoses
    assert diags[0].incident == "unknown-oom" and not diags[0].warning
    leads = diags[1:]
    assert leads and len(leads) <= 2
    assert all(d.warning and d.confidence <= 0.3 and d.because[0].startswith("a lead, not a finding") for d in leads)
    assert leads[0].incident == "activation-memory"


def test_a_failure_that_is_not_memory_gets_no_memory_leads():
    text = ("[E ProcessGroupNCCL.cpp:475] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, "
            "OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1800001 milliseconds before timing out.\n")
    assert not any(d.warning for d in oomdoctor.diagnose(text).diagnoses)


# synthetic: TensorFlow's message names the tensor and nothing else (no frame, no figures; a matrix,
# which a weight or a batch may be)
_UNPLACED_TF = ("2020-12-08 15:56:49.623677: W tensorflow/core/framework/op_kernel.cc:1767] OP_REQUIRES failed at "
                "cwise_ops_common.cc:82 : Resource exhausted: OOM when allocating tensor with shape[4096,4096] and "
                "type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc\n")


def test_a_device_oom_the_log_does_not_place_lists_activations_as_a_lead():
    diags = oomdoctor.diagnose(_UNPLACED_TF).diagnoses
    assert [d.incident for d in diags[:2]] == ["unknown-oom", "activation-memory"]
    assert not diags[0].warning
    lead = diags[1]
    assert lead.warning and lead.confidence <= LEAD_CONFIDENCE
    assert lead.because[0] == "a lead, not a finding: nothing in the log points here; it is the commonest cause"
    assert any(b.startswith("prior: ") for b in lead.because)


def test_a_lead_only_prior_never_makes_a_finding_even_where_the_sum_reaches_min_score():
    # synthetic: own tensors hold most of the device (one weak signal) and no phase (the prior):
    # together they reach activation-memory's min_score, and it is still a lead after the unknown cause
    text = ("RuntimeError: CUDA out of memory. Tried to allocate 1.50 GiB (GPU 0; 15.78 GiB total capacity; "
            "13.19 GiB already allocated; 1.41 GiB free; 13.22 GiB reserved in total by PyTorch)\n")
    diags = oomdoctor.diagnose(text).diagnoses
    assert diags[0].incident == "unknown-oom"
    [act] = [d for d in diags if d.incident == "activation-memory"]
    assert act.warning and act.score >= 2


def test_a_prior_is_no_lead_beside_a_finding():
    # synthetic: a fragmented cache named, no phase: the unplaced prior does not list activations beside it
    text = _new_format_oom("2.00 GiB", "23.65 GiB", "1.50 GiB", "22.10 GiB", "12.00 GiB", "9.50 GiB")
    diags = oomdoctor.diagnose(text).diagnoses
    assert diags[0].incident == "alloc-fragmentation" and not diags[0].warning
    assert "activation-memory" not in [d.incident for d in diags]
