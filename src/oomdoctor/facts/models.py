"""Typed facts pulled out of a log (pydantic models).

Everything a diagnosis uses is here, with the original line numbers it came from, so
that every claim in a report points back into the user's log. Sizes are ``int`` bytes.
Parsers fill these models; the classifier and the renderers only read them.
"""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

OomKind = Literal[
    "cuda_caching_allocator",  # "CUDA out of memory. Tried to allocate ..." (also forks: MLU, GCU)
    "cuda_runtime_error",      # "CUDA error: out of memory" (cudaMalloc outside the allocator, pinned memory, context;
                               # another library's CUDA pool: CuPy, RMM, CatBoost; words naming GPU memory)
    "cublas_alloc",            # CUBLAS_STATUS_ALLOC_FAILED / cuDNN alloc failures
    "nccl",                    # NCCL "Cuda failure 'out of memory'" / unhandled cuda error
    "hip",                     # ROCm caching allocator / HIP error: out of memory
    "npu",                     # Ascend torch_npu
    "xpu",                     # Intel XPU / IPEX
    "mps",                     # Apple MPS
    "xla",                     # XLA / JAX / torch_xla RESOURCE_EXHAUSTED; TensorFlow's "OOM when allocating
                               # tensor" (backend "TF": the same BFC allocator family)
    "bitsandbytes",            # bitsandbytes allocation failures
    "device_runtime",          # another runtime's device allocation failure on a device other than CUDA's, or one
                               # it does not name (AWS Neuron "Failed to alloc DEVICE memory"), or a budget check
    "runtime_arena",           # a runtime's memory arena that could not grow, on a side the log does not name
                               # (ONNX Runtime's BFCArena serves the CPU and the GPU providers alike)
    "host_oom_killer",         # kernel / cgroup / Slurm / Kubernetes kill, SIGKILL -9 of a rank
    "cpu_allocator",           # DefaultCPUAllocator / MemoryError / numpy _ArrayMemoryError
    "dataloader_killed",       # "DataLoader worker (pid N) is killed by signal: Killed"
]

# How sure the event is a memory failure. "weak": consistent with OOM but not proof
# (a bare SIGKILL / exit -9 with nothing corroborating it).
Strength = Literal["certain", "likely", "weak"]

Phase = Literal[
    "model_load", "forward", "backward", "optimizer_step", "checkpoint_save",
    "checkpoint_load", "eval", "data_loading", "epoch_end", "unknown",
]


class Model(BaseModel):
    # every field is written to JSON, defaults included: the schema of the output says so
    model_config = ConfigDict(extra="forbid", validate_assignment=False, json_schema_serialization_defaults_required=True)


class Evidence(Model):
    """One line of the user's log that supports a claim."""

    line: int = Field(description="1-based line number in the original log")
    text: str = Field(description="the raw line (ANSI removed), trimmed to 400 characters; for a later piece of "
                                  "a line that held several (a message glued to a progress bar), from that piece, after '…'")
    source: Optional[str] = Field(default=None, description="the file this line came from, when several were read")


class ProcessUse(Model):
    """One ``Process N has X memory in use`` entry of a PyTorch >= 2.1 OOM message."""

    pid: Optional[int] = None
    bytes: int
    is_self: bool = Field(default=False, description="'Including non-PyTorch memory, this process has ...'")


class OomEvent(Model):
    """One out-of-memory failure: one message, possibly reported by several ranks."""

    kind: OomKind
    strength: Strength = "certain"
    backend: Optional[str] = Field(default=None, description="CUDA, HIP, NPU, XPU, HPU (Intel Gaudi), MPS, MLU, GCU, XLA, TF, Neuron, Tenstorrent, Vulkan (a renderer on the GPU), host, shm (shared memory, /dev/shm)")
    exception: Optional[str] = Field(default=None, description="exception class as printed, e.g. torch.OutOfMemoryError")
    message_format: Optional[str] = Field(default=None, description="which version's wording the message uses")
    device_index: Optional[int] = None
    tried_to_allocate_bytes: Optional[int] = None
    total_capacity_bytes: Optional[int] = None
    free_bytes: Optional[int] = None
    process_in_use_bytes: Optional[int] = Field(default=None, description="this process's total use (PyTorch and not)")
    allocated_by_pytorch_bytes: Optional[int] = None
    reserved_unallocated_bytes: Optional[int] = None
    reserved_total_bytes: Optional[int] = None
    already_allocated_bytes: Optional[int] = None
    cached_unallocated_bytes: Optional[int] = Field(default=None, description="torch <= 1.3 'cached' (reserved minus allocated)")
    current_active_bytes: Optional[int] = None
    private_pool_bytes: Optional[int] = None
    allowed_bytes: Optional[int] = Field(default=None, description="per-process memory fraction limit")
    other_allocations_bytes: Optional[int] = Field(default=None, description="MPS 'other allocations'")
    tensor_shape: Optional[list[int]] = Field(default=None, description="the shape of the tensor that could not be "
                                                                        "allocated, where the message prints it (TensorFlow)")
    processes: list[ProcessUse] = Field(default_factory=list)
    hint: Optional[str] = Field(default=None, description="the allocator's hint text; says which version, never what happened")
    detail: Optional[str] = Field(default=None, description="free text: signal, exit code, kernel victim, NCCL call ...")
    host_bytes: Optional[int] = Field(default=None, description="host allocation size or victim RSS for host events")
    ranks: list[int] = Field(default_factory=list, description="ranks that printed this same failure")
    count: int = Field(default=1, description="copies of this message folded into this event")
    line: int = Field(description="line of the first copy")
    survived: bool = Field(default=False, description="the run went on after it (a later loss, a new run or the "
                                                      "end of training was logged): caught, not why the job ended")
    symptom: Optional[str] = Field(default=None, description="why this event is not believed to be memory pressure: a "
                                                             "size no device has, or a knock-on of a failure that "
                                                             "corrupts the CUDA context (device-side assert, bad index)")
    evidence: list[Evidence] = Field(default_factory=list)


# A log can hold thousands of distinct OOM messages (automatic batch-size retries, a
# server failing request after request); the report keeps a bounded sample of them.
MAX_EVENTS = 50
KEEP_FIRST = 10
KEEP_LAST = 10


def last_seen(ev: OomEvent) -> int:
    """The last line of the log this event (all its folded copies) was seen on."""
    return max([ev.line] + [e.line for e in ev.evidence])


def sample_events(events: list[OomEvent], keep: OomEvent | None = None,
                  cap: int = MAX_EVENTS) -> list[OomEvent]:
    """At most ``cap`` of ``events``, in their order: ``keep`` (the event a diagnosis is
    about), the first of each kind, the last ``KEEP_LAST`` seen (the final failure among
    them), the first ``KEEP_FIRST``, then one per distinct shape (kind, ranks, device,
    request) until the cap.
    Linear in ``len(events)`` apart from one sort of them."""
    if len(events) <= cap:
        return list(events)
    chosen: set[int] = set()
    if keep is not None:
        chosen.add(id(keep))
    kinds: set[str] = set()
    for ev in events:   # every kind stays: the knowledge base tests which kinds the log holds
        if ev.kind not in kinds:
            kinds.add(ev.kind)
            chosen.add(id(ev))
    by_last = sorted(range(len(events)), key=lambda i: last_seen(events[i]))
    for i in reversed(by_last[-KEEP_LAST:]):
        chosen.add(id(events[i]))
    for ev in events[:KEEP_FIRST]:
        chosen.add(id(ev))
    shapes = {(e.kind, tuple(e.ranks), e.device_index, e.tried_to_allocate_bytes)
              for e in events if id(e) in chosen}
    for ev in events:
        if len(chosen) >= cap:
            break
        shape = (ev.kind, tuple(ev.ranks), ev.device_index, ev.tried_to_allocate_bytes)
        if shape not in shapes:
            shapes.add(shape)
            chosen.add(id(ev))
    return [e for e in events if id(e) in chosen]


def fatal_events(events: list[OomEvent]) -> list[OomEvent]:
    """The OOM events that ended something: not the ones the run caught and went on after,
    nor those that are symptoms of another failure."""
    return [e for e in events if not e.survived and not e.symptom]


class Failure(Model):
    """A failure that is not a memory failure (or a consequence of one)."""

    kind: str = Field(description="e.g. device_mismatch, nccl_timeout, illegal_memory_access, bf16_unsupported, sigterm, absurd_allocation")
    message: str
    line: int
    secondary: bool = Field(default=False, description="a consequence of another rank's failure (cascade)")
    evidence: list[Evidence] = Field(default_factory=list)


class Frame(Model):
    """One ``File "...", line N, in func`` frame of a traceback, with its code line."""

    file: str
    lineno: Optional[int] = None
    function: str
    code: Optional[str] = None
    line: int


class Environment(Model):
    """Versions, hardware and configuration echoed by the log."""

    torch_version: Optional[str] = None
    deepspeed_version: Optional[str] = None
    transformers_version: Optional[str] = None
    accelerate_version: Optional[str] = None
    peft_version: Optional[str] = None
    trl_version: Optional[str] = None
    cuda_version: Optional[str] = None
    python_version: Optional[str] = None
    framework_version: Optional[str] = None
    accelerator: Optional[str] = Field(default=None, description="cuda, rocm, npu, xpu, hpu, mps, xla, mlu, gcu, musa, cpu")
    gpu_name: Optional[str] = None
    gpu_capacity_bytes: Optional[int] = None
    compute_capability: Optional[str] = Field(default=None, description="e.g. 7.0 for V100; from the GPU name when not printed")
    gpu_count: Optional[int] = None
    framework: Optional[str] = Field(default=None, description="llamafactory, axolotl, xtuner, llama-recipes, hf-trainer, trl, accelerate, deepspeed, fsdp, megatron, ms-swift, unsloth, torchtune, plain-pytorch, jax, tensorflow, other")
    stage: Optional[str] = Field(default=None, description="training stage: pt, sft, rm, ppo, dpo, kto, orpo, grpo, ...")
    zero_stage: Optional[int] = None
    offload: Optional[Literal["none", "optimizer", "param", "both"]] = None
    pin_memory: Optional[bool] = None
    fsdp: Optional[bool] = None
    fsdp_state_dict_type: Optional[str] = None
    fsdp_sharding_strategy: Optional[str] = Field(default=None, description="FULL_SHARD, SHARD_GRAD_OP, HYBRID_SHARD, HYBRID_SHARD_ZERO2, NO_SHARD")
    world_size: Optional[int] = None
    num_nodes: Optional[int] = None
    # Echoed hyper-parameters
    model_name: Optional[str] = None
    finetuning_type: Optional[str] = Field(default=None, description="full, lora, qlora, freeze")
    quantization_bit: Optional[int] = None
    sequence_length: Optional[int] = None
    micro_batch_size: Optional[int] = None
    gradient_accumulation_steps: Optional[int] = None
    gradient_checkpointing: Optional[bool] = None
    mixed_precision: Optional[str] = Field(default=None, description="bf16, fp16, fp32")
    attn_implementation: Optional[str] = None
    optimizer: Optional[str] = None
    trainable_params: Optional[int] = None
    total_params: Optional[int] = None
    hidden_size: Optional[int] = None
    num_layers: Optional[int] = None
    num_attention_heads: Optional[int] = None
    num_kv_heads: Optional[int] = None
    intermediate_size: Optional[int] = None
    vocab_size: Optional[int] = None
    save_only_model: Optional[bool] = None
    gather_16bit_weights_on_save: Optional[bool] = None
    liger_kernel: Optional[bool] = None
    alloc_conf: Optional[str] = Field(default=None, description="PYTORCH_CUDA_ALLOC_CONF value when the log shows it")
    dataloader_num_workers: Optional[int] = None
    sources: dict[str, int] = Field(default_factory=dict, description="field name -> line it was read from")


class PhaseInfo(Model):
    """Where in the job the failure happened."""

    phase: Optional[Phase] = None
    reason: Optional[str] = Field(default=None, description="the frame or marker that decided it")
    line: Optional[int] = None
    step: Optional[int] = None
    total_steps: Optional[int] = None
    epoch: Optional[float] = None
    markers: list[Evidence] = Field(default_factory=list, description="progress markers seen before the failure")
    stops_early: Optional[Literal["cut_traceback", "process_died"]] = Field(
        default=None, description="the log holds no failure line: it stops inside a traceback (cut_traceback), or a "
                                  "launcher says a process died without its error in the log (process_died)")


class MemorySample(Model):
    """One allocator-statistics reading (memory_summary, see_memory_usage, nvidia-smi, trainer logs)."""

    source: str = Field(description="memory_summary, see_memory_usage, nvidia_smi, list_gpu_processes, mmengine, axolotl, deepspeed_flush, user_print, tcmalloc")
    line: int
    label: Optional[str] = None
    allocated_bytes: Optional[int] = None
    max_allocated_bytes: Optional[int] = None
    reserved_bytes: Optional[int] = None
    max_reserved_bytes: Optional[int] = None
    host_used_bytes: Optional[int] = None
    host_percent: Optional[float] = None
    host_request_bytes: Optional[int] = Field(default=None, description="one host allocation the allocator reported as large (tcmalloc)")
    used_bytes: Optional[int] = Field(default=None, description="device memory in use as the driver sees it (nvidia-smi: the GPU, or one process)")
    total_bytes: Optional[int] = Field(default=None, description="device capacity as the driver reports it (nvidia-smi)")
    device_index: Optional[int] = None
    pid: Optional[int] = None
    alloc_retries: Optional[int] = None
    num_ooms: Optional[int] = None


class RankSummary(Model):
    """Which ranks and devices failed, and which failure came first."""

    failed_ranks: list[int] = Field(default_factory=list)
    failed_devices: list[int] = Field(default_factory=list)
    first_failure_line: Optional[int] = None
    first_failure: Optional[str] = None
    cascade: list[Evidence] = Field(default_factory=list, description="NCCL timeouts, SIGTERMed survivors, ChildFailedError")
    exit_codes: list[int] = Field(default_factory=list)
    worker_pids: list[int] = Field(default_factory=list, description="process ids a launcher names as this job's "
                                                                   "workers (stopping them, or reporting one failed)")
    stopped_pids: list[int] = Field(default_factory=list, description="those of worker_pids the launcher stopped "
                                                                    "(the survivors, not the failed)")


class Facts(Model):
    """Everything the parsers found in one log."""

    oom_events: list[OomEvent] = Field(default_factory=list)
    oom_events_left_out: int = Field(default=0, description="OOM events found but not kept in oom_events (a log "
                                                            "with thousands of them keeps a bounded sample)")
    failures: list[Failure] = Field(default_factory=list)
    environment: Environment = Field(default_factory=Environment)
    phase: PhaseInfo = Field(default_factory=PhaseInfo)
    frames: list[Frame] = Field(default_factory=list, description="traceback frames of the first failure, outermost first")
    memory_samples: list[MemorySample] = Field(default_factory=list)
    ranks: RankSummary = Field(default_factory=RankSummary)
    markers: dict[str, list[int]] = Field(default_factory=dict, description="named markers (e.g. saving_checkpoint) -> lines")
    lines_read: int = 0
    bytes_read: int = 0
    notes: list[str] = Field(default_factory=list, description="what could not be read, and why")
