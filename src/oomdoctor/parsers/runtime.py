"""GPU out-of-memory failures that do not come from PyTorch's caching allocator
(log-formats.md §2.1-2.4, §1.5, §1.6, §3.6, §3.7).

``CUDA error: out of memory`` means a CUDA call outside the allocator failed: the CUDA
context, pinned host memory, cuBLAS/cuDNN workspaces, NCCL buffers, an extension. The
remedies differ from the allocator's, so these get their own kinds. NCCL usually says
"out of memory" only in its NCCL_DEBUG lines, while the exception says "unhandled cuda
error"; both are folded into one event. Wrappers that hide the cause (the DataLoader
pin-memory thread, FSDP's state-dict ``clone()``) are recorded in ``detail``.
"""
from __future__ import annotations

from typing import Callable, Optional

import regex as re

from ..facts.models import OomEvent
from ..facts.sizes import parse_size, to_bytes
from ..read.patterns import lazy
from .base import EXC_AT_START as _EXC_AT_START, ParseContext
from .traceback import CARET

_NUM = r"\d[\d,]{0,20}(?:\.\d{1,6})?"
_UNIT = r"(?:[KMGTPE]i?B|bytes?|B|[KMGTPE])(?![A-Za-z])"
_SIZE_PARTS = lazy(rf"(?P<num>{_NUM})\s*(?P<unit>{_UNIT})")

# -- CUDA runtime / driver -----------------------------------------------------------------
# "CUDA Error: out of memory at .../cumem_allocator.cpp" (vLLM's allocator) capitalises it; a
# message typed out again by hand may spell it "Cuda error: out of memory"
# Caffe2's CUDA_ENFORCE prints the runtime's code: "error == cudaSuccess. 2 vs 0." (2 is
# cudaErrorMemoryAllocation); Caffe's glog CHECK the same in its own form: "Check failed: error ==
# cudaSuccess (2 vs. 0)  out of memory"
# (a library's own check, lmdeploy's TurboMind: "[TM][ERROR] CUDA runtime error: out of memory
# /lmdeploy/src/turbomind/utils/memory_utils.cu:32")
_CUDA_ERROR = lazy(r"(?:CUDA|Cuda) (?:runtime )?[Ee]rror: out of memory|cuda runtime error \(2\) : out of memory"
                   r"|\b\w{1,20} == cudaSuccess(?:\. 2 vs 0\.| \(2 vs\. 0\))"
                   # (MXNet's mshadow: "Check failed: e == cudaSuccess CUDA: out of memory"; GraphVite's:
                   # "Check failed: error == cudaSuccess CUDA error out of memory at .../memory.h:131")
                   r"|Check failed: \w{1,20} == cudaSuccess:? CUDA(?::| error:?) out of memory"
                         r"|CUDA driver error: out of memory|THCudaCheck FAIL [^\n]{0,300}?error=2 : out of memory"
                   # (a program's own CUDA check naming its source first, COLMAP's CudaSafeCall:
                   # "CUDA error at /colmap/src/mvs/gpu_mat.h:167 - out of memory")
                   r"|CUDA error at \S{1,300}?:\d{1,7} - out of memory"
                   # RMM's out_of_memory exception, which it throws for a failed device allocation
                   # only ("std::bad_alloc: out_of_memory: CUDA error at: .../cuda_memory_resource.hpp"),
                   # its runtime error's name cut off
                   r"|\bout_of_memory: CUDA error at:")
# TensorFlow's "failed to allocate 3.77G (4046333952 bytes) from device: ..."
_FAILED_TO_ALLOCATE = r"failed to allocate (?P<size>" + _NUM + r"\s*" + _UNIT + r")\s*\((?P<n>\d{1,20}) bytes\)[^\n]{0,80}"
# (and its managed memory, XLA's when a job asks for more than the device: "failed to alloc
# 34357903360 bytes unified memory; result: CUDA_ERROR_OUT_OF_MEMORY: out of memory")
_CUDA_DRIVER_OOM = lazy(r"(?:" + _FAILED_TO_ALLOCATE + r"|failed to alloc (?P<unified>\d{1,20}) bytes unified memory; result: )?"
                        r"CUDA_ERROR_OUT_OF_MEMORY")
# ... and its pinned host buffers ("failed to alloc 4294967296 bytes on host: CUDA_ERROR_OUT_OF_MEMORY",
# cuMemHostAlloc): page-locked host memory, not the device's
_CUDA_HOST_OOM = lazy(r"failed to alloc(?:ate)? (?P<n>\d{1,20}) bytes on host: CUDA_ERROR_OUT_OF_MEMORY"
                      # ... and the host allocator's own warning after it, or alone (TensorFlow's
                      # gpu_host_allocator.h / device_host_allocator.h: "could not allocate pinned host
                      # memory of size: N"; XLA's stream_executor_allocator.cc: "... pinned host of size: N")
                      r"|could not allocate pinned host (?:memory )?of size: (?P<n2>\d{1,20})")
# the same line from TensorFlow's ROCm build: HIP's allocation failure by number (1002 is
# hipErrorMemoryAllocation before ROCm renumbered it, 2 after)
_HIP_DRIVER_OOM = lazy(_FAILED_TO_ALLOCATE + r"hipError_t\((?:1002|2)\)")
_CUDA_ENUM = lazy(r"cudaErrorMemoryAllocation")
# ggml's CUDA backend (llama.cpp and what embeds it) refused page-locked host memory for a
# buffer: "ggml_cuda_host_malloc: failed to allocate 6558.12 MiB of pinned memory: out of
# memory" (older builds: "WARNING: failed to allocate 258.00 MB of pinned memory: ..."), with
# the CUDA error's own words last; it falls back to pageable memory and may go on
_GGML_PINNED = lazy(r"failed to allocate (?P<size>\d{1,9}(?:\.\d{1,3})? (?:MiB|MB)) of pinned memory(?:: (?P<why>[^;\n]{1,80}))?")
# ... and the CUDA errors that refuse it for a reason that is not memory: the driver too old for
# the runtime ("CUDA driver version is insufficient for CUDA runtime version"), a driver that does
# not go with the card ("system has unsupported display driver / cuda driver combination"), no
# device at all. The buffer is then pageable and the run goes on: no memory ran short
_PINNED_NOT_MEMORY = lazy(r"\bdriver\b|no CUDA-capable device|initiali[sz]ation error|not supported", re.I)
# the code of a traceback's innermost frame that asks for page-locked host memory
# ("buffer = torch.empty(size, dtype=torch.uint8, pin_memory=True)", "x.pin_memory()")
# (a tensor made pinned, not a DataLoader or an argument parser told to pin)
_PINNING_CODE = lazy(r"\btorch\.(?:empty|zeros|ones|full|tensor|empty_like|zeros_like)\([^\n]*\bpin_memory\s*=\s*True\b"
                     r"|\.pin_memory\(\)|\bcudaHost(?:Alloc|Register)\b|\bcudaMallocHost\b")
# TensorFlow's GPU allocator retries a refused region with this fraction of its size
_BACKPEDAL = 0.9
# the CUDA driver's calls that allocate device memory (cuMemAlloc and its variants; the virtual-memory
# API's cuMemCreate, and cuMemMap, which maps what cuMemCreate allocated)
_CU_MEM_CALL = r"cuMem(?:Create|Map|Alloc(?!Host)\w{0,20})"
# a CUDA driver call's result printed as a number by a library that calls the driver itself
# (torch_memory_saver: "CUresult error  result=2 ... func=cu_mem_create", later "CUresult
# error: 2 (out of memory)"): 2 is CUDA_ERROR_OUT_OF_MEMORY, memory outside PyTorch's allocator
_CU_RESULT_OOM = lazy(r"CUresult\b[^\n]{0,20}?(?:\bresult\s*=\s*|\berror:\s*)2\b"
                      # ... or by the driver's device-memory call it names (NVSHMEM's heap: "non-zero
                      # status: 2 cuMemCreate failed"; "cuMemAlloc failed with error 2"); not the
                      # pinned host memory of cuMemAllocHost
                      r"|\bstatus:?\s*2\s{1,3}" + _CU_MEM_CALL + r"\s+failed\b"
                      r"|\b" + _CU_MEM_CALL + r"\b[^\n]{0,20}?\b(?:failed with (?:error|status|code)|returned|error|status|code)"
                      r"\s*[:=]?\s*\(?2(?![.\w])")
# a CUDA call's status printed as a number by a library's own check ("cuda execution failed
# with error 2", spconv; "CUDA error 2" without its name): 2 is cudaErrorMemoryAllocation
_CUDA_CODE_2 = lazy(r"\bCUDA (?:error|Error):? 2(?![.\w])|\b(?:Cuda|cuda) Error:? 2(?![.\w])|\b(?:Cuda|cuda) error 2(?![.\w])"
                    r"|\b(?:CUDA|Cuda|cuda)\b(?:\s\w+){0,2}? failed with error 2(?![.\w])")
# the C++ source an error message names right after it ("... out of memory at .../x.cpp:62")
_LIBRARY_SOURCE = lazy(r"\G\s*at\s+(?P<path>\S{0,300}?/(?P<file>\w{1,80}\.(?:cpp|cu|cc|h))):\d{1,7}")
# ... and a library's own "CUDA runtime error: out of memory" (a CUDA check macro's words, not
# torch's) with its source right after it without "at" (lmdeploy's TurboMind: "... out of
# memory /lmdeploy/src/turbomind/utils/memory_utils.cu:32"), or right before it (Open3D:
# ".../MemoryManagerCUDA.cpp:25 CUDA runtime error: out of memory"); a bare "file.cu:89: CUDA
# error: out of memory" is any kernel's launch check, not an allocator's
_LIBRARY_SOURCE_BARE = lazy(r"\G\s*(?P<path>\S{0,300}?/(?P<file>\w{1,80}\.(?:cpp|cu|cc|h))):\d{1,7}")
_LIBRARY_SOURCE_BEFORE = lazy(r"(?P<path>\S{0,300}?[/\\](?P<file>\w{1,80}\.(?:cpp|cu|cc|h))):\d{1,7}:?\s*$")
# ... when it is PyTorch's own (c10, ATen, torch 0.x's THC, torch/csrc; Windows builds print
# "...\aten\src\thc\generic/THCStorage.cu")
_PYTORCH_SOURCE = lazy(r"(?i)\bc10[/\\]|[/\\]THC[A-Z]?[/\\]|[/\\]aten[/\\]|torch[/\\](?:lib|csrc)[/\\]")

# The lines C10_CUDA_CHECK appends to the message; their wording dates the torch release.
_SUFFIX = lazy(r"CUDA kernel errors might be asynchronously reported|For debugging consider passing"
                     r"|TORCH_USE_CUDA_DSA|Search for `cuda\w+' in|AMD_SERIALIZE_KERNEL")
_HIP_ERROR = lazy(r"HIP error: out of memory|hipErrorOutOfMemory")

# -- cuBLAS / cuDNN / other CUDA libraries --------------------------------------------------
_LIB_ALLOC = lazy(r"(?P<status>CUBLAS_STATUS_ALLOC_FAILED|CUDNN_STATUS_ALLOC_FAILED|CUSOLVER_STATUS_ALLOC_FAILED"
                        r"|CUFFT_ALLOC_FAILED|HIPBLAS_STATUS_ALLOC_FAILED|rocblas_status_memory_error"
                        # cuRAND's and cuSPARSE's (CuPy, spaCy's thinc, torch.sparse)
                        r"|CURAND_STATUS_ALLOCATION_FAILED|CUSPARSE_STATUS_ALLOC_FAILED"
                        # nvJPEG (DALI's and torchvision's GPU JPEG decoding)
                        r"|NVJPEG_STATUS_ALLOCATOR_FAILURE)")
_CUBLAS_CREATE = lazy(r"CUBLAS_STATUS_NOT_INITIALIZED when calling `cublas(?:Lt)?Create")
# ... and TensorFlow's stream executor saying it of the same call, beside a BFC allocator that
# took most of the device first: "failed to create cublas handle: CUBLAS_STATUS_NOT_INITIALIZED"
_TF_CUBLAS_CREATE = lazy(r"failed to create cublas handle: CUBLAS_STATUS_NOT_INITIALIZED")
# cuBLAS's ALLOC_FAILED status in its own words (cublasGetStatusString), as XLA's and TensorFlow's
# stream executor print it: "failed to create cublas handle: the resource allocation failed"
# (ggml's CUDA backend: "CUDA error: the resource allocation failed" with its cublasCreate call under
# it; the words are cuBLAS's status string, no CUDA runtime error reads so)
_CUBLAS_ALLOC_WORDS = lazy(r"\b(?:cublas[^\n]{0,80}?|CUDA error): the resource allocation failed\b", re.I)
_CUDNN_NO_ALGO = lazy(r"Unable to find a valid cuDNN algorithm to run convolution"
                            r"|(?:GET|FIND) was unable to find an engine to execute this computation")
_WHEN_CALLING = lazy(r"when calling `(?P<call>[^`]{1,200})`")
# cuDNN's catch-all status: most often a workspace or handle it could not allocate
_CUDNN_INTERNAL = lazy(r"cuDNN error: CUDNN_STATUS_INTERNAL_ERROR")
_NVML_RESOURCES = lazy(r"NVML_ERROR_INSUFFICIENT_RESOURCES")
# thrust's allocation failure, raised through the framework's op (a sort on the GPU): "thrust::system::
# detail::bad_alloc"; with the runtime's words it reads "bad_alloc: cudaErrorMemoryAllocation"
# (its what(): "temporary_buffer::allocate: get_temporary_buffer failed", the scratch memory of a
# sort or a scan, printed alone where a CUDA extension catches it)
_THRUST_BAD_ALLOC = lazy(r"thrust::system::detail::bad_alloc|temporary_buffer::allocate: get_temporary_buffer failed")
# Signs whose event needs no figures from the text: (pattern, kind, fold key, strength, detail)
_FIXED_CUDA_SIGNS = (
    (_CUBLAS_CREATE, "cublas_alloc", "create", "likely",
     "CUBLAS_STATUS_NOT_INITIALIZED in cublasCreate: the handle's device memory could not be allocated"),
    (_CUBLAS_ALLOC_WORDS, "cublas_alloc", "alloc-words", "certain",
     "cuBLAS could not allocate the device memory of its handle or workspace (CUBLAS_STATUS_ALLOC_FAILED)"),
    (_CUDNN_NO_ALGO, "cublas_alloc", "cudnn-no-algorithm", "weak",
     "cuDNN found no algorithm; workspaces that cannot be allocated are dropped silently"),
    (_CUDA_ENUM, "cuda_runtime_error", "cudaErrorMemoryAllocation", "certain", "cudaErrorMemoryAllocation"),
    (_CUDA_CODE_2, "cuda_runtime_error", "cuda-status-2", "likely",
     "a CUDA call failed with status 2 (cudaErrorMemoryAllocation): memory outside PyTorch's allocator"),
    (_CU_RESULT_OOM, "cuda_runtime_error", "curesult-2", "certain",
     "CUresult 2 (CUDA_ERROR_OUT_OF_MEMORY) from a direct CUDA driver call: memory outside PyTorch's allocator"),
    (_CUDNN_INTERNAL, "cublas_alloc", "cudnn-internal", "weak",
     "CUDNN_STATUS_INTERNAL_ERROR: cuDNN's catch-all error, most often memory it could not allocate"),
    (_NVML_RESOURCES, "cuda_runtime_error", "nvml-insufficient", "likely",
     "NVML_ERROR_INSUFFICIENT_RESOURCES: the driver could not allocate what was asked"),
    (_THRUST_BAD_ALLOC, "cuda_runtime_error", "thrust-bad-alloc", "likely",
     "thrust (CUDA's parallel-algorithms library: sorts, scans) could not allocate its temporary device memory"),
)

# Other runtimes' words for a failed device allocation: AWS Neuron's runtime ("nrt") prints
# "Failed to alloc DEVICE memory: 1073741824"; generic C++ runtimes "failed to allocate N
# bytes of device memory"; Intel Gaudi's PyTorch bridge "FATAL ERROR :: MODULE:PT_DEVMEM
# Allocation failed for size::469762048 (448)MB" (its graph compiler's pool: "MODULE:DEVMEM").
_DEVICE_ALLOC = lazy(r"Failed to alloc(?:ate)? DEVICE memory(?::\s*(?P<n>\d{1,20}))?"
                           r"|[Ff]ailed to allocate (?P<n2>\d{1,20}) bytes (?:of|on) (?:the )?device memory"
                           # (Theano's GPU arrays: "Error allocating 147865600 bytes of device memory (out of memory)")
                           r"|[Ee]rror allocating (?P<n4>\d{1,20}) bytes of device memory"
                           # (as Gaudi's bridge raises it: "FATAL ERROR :: MODULE:..." after an exception)
                           r"|FATAL ERROR :: MODULE:(?:PT_)?DEVMEM Allocation failed for size::(?P<n3>\d{1,20})"
                           # the Neuron runtime's resource status (NRT_RESOURCE, 4) from any of its calls:
                           # "nrt_tensor_allocate status=4 message="Allocation Failure"", "nrt_load_collectives
                           # status=4 ...", its info dump's "Failure: NRT_RESOURCE in nrt_load()"
                           r"|\bstatus=4 message=\"?Allocation Failure\b|\bFailure: NRT_RESOURCE in nrt_\w+")
_NEURON = lazy(r"(?i)neuron|\bnrt[_.:]")
# OpenCL's status for a buffer the device could not back with memory, from any runtime or binding
# (pyopencl: "clEnqueueMapBuffer failed: MEM_OBJECT_ALLOCATION_FAILURE"; C: CL_MEM_OBJECT_ALLOCATION_FAILURE)
_OPENCL_ALLOC = lazy(r"(?:(?P<call>\bcl[A-Z]\w{2,40})(?: failed)?:?\s{0,3})?(?<![\w])(?:CL_)?MEM_OBJECT_ALLOCATION_FAILURE\b")
# Tenstorrent's allocator (tt-metal, under ttnn, tt-train and tt-xla): "Out of Memory: Not enough space
# to allocate 131072000 B DRAM buffer across 12 banks, where each bank needs to store 10924032 B, but
# bank size is only 1073741792 B" (L1 is the chip's own SRAM; both are the device's)
_TT_ALLOC = lazy(r"Out of Memory: Not enough space to allocate (?P<n>\d{1,20}) B (?P<where>DRAM|L1) buffer"
                 r"(?: across (?P<banks>\d{1,4}) banks?, where each bank needs to store (?P<per>\d{1,20}) B,"
                 r" but bank size is only (?P<cap>\d{1,20}) B)?")
# a CUDA library's own device allocator refusing a request (PhysX, in Isaac Gym: "PxgCudaDeviceMemoryAllocator
# fail to allocate memory 339738624 bytes!! Result = 2"): the device's memory, outside PyTorch's allocator.
# The result it prints is CUDA's: 2 is out of memory; another (700, an illegal address) is a
# knock-on of an earlier crash, not memory, and is no match
_CUDA_LIB_ALLOCATOR = lazy(r"\b\w{0,20}(?:Cuda|CUDA)\w{0,20}Device\w{0,20}Allocator fail(?:ed|s)? to allocate (?:device )?memory:? "
                           r"(?P<n>\d{1,20}) bytes(?!!*\s*Result = (?!2\b)\d)")
# ... and DeepSpeed's inference kernels refusing to run when their workspace does not fit the
# device (its inference context: "RuntimeError: Workspace can't be allocated, no enough memory.")
_DS_WORKSPACE = lazy(r"Workspace can't be allocated, no enough memory")
# An inference engine sizing its KV cache from the memory the device has left (a rollout engine
# beside the model being trained, an evaluation server): vLLM's "No available memory for the
# cache blocks", its check that one sequence's cache fits ("... is larger than the maximum
# number of tokens that can be stored in KV cache", v1's "... larger than the available KV
# cache memory"), its start-up guard ("Free memory on device (12.18/23.56 GiB) on startup is
# less than desired GPU memory utilization"); SGLang's "Not enough memory. Please try to
# increase --mem-fraction-static"; text-generation-inference's router when its warmup ran out of
# device memory ("Server error: Not enough memory to handle 31000 prefill tokens. You need to
# decrease `--max-batch-prefill-tokens`")
# (each read as raised, at the line's start or after its exception's name, not quoted in prose)
_ENGINE_BUDGET = lazy(r"(?:^|Error:\s{0,3}|Server error:\s{0,3}|Warmup\(Generation\(\"\s{0,3})(?:No available memory for the cache blocks"
                      r"|The model's max seq len \(\d{1,9}\) is larger than the maximum number of tokens that can be stored in KV cache"
                      r"|To serve at least one request with the models?'s? max seq len \(\d{1,9}\), \([\d.]{1,12} GiB KV cache is needed, "
                      r"which is larger than the available KV cache memory"
                      r"|Free memory on device (?:\S{1,20} )?\((?P<free>[\d.]{1,12})/(?P<cap>[\d.]{1,12}) GiB\) on startup is less than desired GPU memory utilization"
                      # (vLLM's report of what its budget leaves the cache after the weights and the
                      # profiled activations, below zero: the error that follows says no cache blocks)
                      r"|Available KV cache memory: -[\d.]{1,12} GiB"
                      r"|(?P<sglang>Not enough memory\. Please try to increase --mem-fraction-static)"
                      r"|(?P<tgi>Not enough memory to handle \d{1,9} (?:prefill|total) tokens))")
# transformers' check of a quantized model's device map (bitsandbytes 4- and 8-bit; accelerate's
# own bnb loader words it the same): what the GPUs could not hold was placed on the CPU or the
# disk, where quantized weights cannot go - the weights do not fit the devices' memory
# ("ValueError: Some modules are dispatched on the CPU or the disk. Make sure you have enough
# GPU RAM to fit the quantized model.")
_QUANTIZED_MAP_WORDS = (r"Some modules are dispatched on the CPU or the disk\. Make sure you have enough GPU RAM"
                        # (AWQ's quantizer: "You are attempting to load an AWQ model with a device_map that
                        # contains a CPU or disk device.")
                        r"|You are attempting to load an? \w{1,20} model with a device_map that contains a CPU or disk device")
# ... and the device map that sent weights to the disk because the GPUs' and the host's memory
# (max_memory) could not hold them, with no folder to put them in (transformers'
# from_pretrained: "The current `device_map` had weights offloaded to the disk. Please provide an
# `offload_folder` for them."; accelerate's dispatch_model: "You are trying to offload the whole
# model to the disk."). A map the user wrote may ask for the disk: likely, not certain
_DISK_MAP_WORDS = (r"The current `?device_map`? had weights offloaded to the disk"
                   r"|You are trying to offload the whole model to the disk"
                   # accelerate's dispatch_model: "We need an `offload_dir` to dispatch this model according
                   # to this `device_map`, the following submodules need to be offloaded: ..."
                   r"|We need an `?offload_dir`? to dispatch this model according to this `?device_map`?")
# both refusals are raised while the model is loaded or placed (parsers/phase.py's loading marker)
DEVICE_MAP_REFUSED_WORDS = _QUANTIZED_MAP_WORDS + "|" + _DISK_MAP_WORDS
_QUANTIZED_MAP = lazy(r"(?:^\s*|Error:\s{0,3})(?:" + _QUANTIZED_MAP_WORDS + ")")
_DISK_MAP = lazy(r"(?:^\s*|Error:\s{0,3})(?:" + _DISK_MAP_WORDS + ")")
# (literal gate, pattern, message format, backend, strength, what it says; likely: the same
# refusal follows a map the user wrote for the CPU, or a machine whose GPU is not visible)
_DEVICE_MAP_REFUSALS = (
    ("CPU or ", _QUANTIZED_MAP, "quantized-device-map", "CUDA", "likely",
     "the quantized model's weights do not fit the GPUs: its device map put modules on the CPU or the disk, "
     "where quantized weights cannot be placed"),
    ("offload", _DISK_MAP, "disk-device-map", None, "likely",
     "the model's weights did not fit the GPUs' and the host's memory: its device map sent some to the disk, "
     "with no folder given for them"),
)
# accelerate's find_executable_batch_size halving the batch after each out-of-memory error
# until none is left: every size tried ran out of memory
_NO_BATCH_SIZE = lazy(r"(?:^|Error:\s{0,3})No executable batch size found, reached zero")
# literals of which every match of _ENGINE_BUDGET holds one: only such lines are searched
_ENGINE_GATES = ("memory for the cache blocks", "stored in KV cache", "available KV cache memory", "Available KV cache memory: -",
                 "on startup is less than desired", "mem-fraction-static", "Not enough memory to handle")
# PaddlePaddle's allocator: "Out of memory error on GPU 0. Cannot allocate 172.000000MB memory
# on GPU 0, 23.486572GB memory has been allocated and available memory is only 167.062500MB."
# (releases before 2.0 leave out what has been allocated: "... memory on GPU 0, available
# memory is only 117.750000MB.")
_PADDLE_OOM = lazy(r"Out of memory error on GPU (?P<dev>\d{1,3})\.\s*Cannot allocate (?P<req>" + _NUM + r"\s*" + _UNIT + r") memory"
                   r"(?: on GPU \d{1,3})?(?:,\s*(?P<alloc>" + _NUM + r"\s*" + _UNIT + r") memory has been allocated)?"
                   r"(?:,?\s*(?:and )?available memory is only (?P<free>" + _NUM + r"\s*" + _UNIT + r"))?")
# ... and its legacy allocator of releases 1.x (legacy_allocator.cc), which logs the refusal
# before it raises, the device's size below it: "Cannot allocate 36.000000MB in GPU 0, available
# 342.625000MB", "total 8502771712"
_PADDLE_LEGACY = lazy(r"Cannot allocate (?P<req>" + _NUM + r"\s*" + _UNIT + r") in GPU (?P<dev>\d{1,3}), available (?P<free>"
                      + _NUM + r"\s*" + _UNIT + r")")
_PADDLE_LEGACY_TOTAL = lazy(r"^\s*total (?P<n>\d{1,20})\s*$")
# ... and its releases before 1.5 refusing the first chunk of GPU memory the allocator asks
# for (a fraction of the device) when less is free (platform/gpu_info.cc, GpuMaxChunkSize):
# "EnforceNotMet: enforce allocating <= available failed, 1829703254 > 1604058880"
_PADDLE_CHUNK = lazy(r"enforce allocating <= available failed, (?P<req>\d{1,20}) > (?P<free>\d{1,20})")
# CuPy's memory pool (under Chainer, and any CuPy code): "cupy.cuda.memory.OutOfMemoryError: out of
# memory to allocate 205520896 bytes (total 16068929536 bytes)"; the total is what the pool
# already holds
_CUPY_POOL = lazy(r"out of memory to allocate (?P<n>\d{1,20}) bytes \(total (?P<held>\d{1,20}) bytes\)"
                  # CuPy 8 and later: "Out of memory allocating 8,589,934,592 bytes (allocated so far: 77,309,411,328 bytes)."
                  # (a console that wraps its messages may cut it before what the pool holds:
                  # "... bytes (allocated so" / "far: 13,736,083,968 bytes).',)", read below)
                  r"|Out of memory allocating (?P<n2>\d{1,3}(?:,\d{3}){0,6}) bytes"
                  r" \(allocated so(?:\s{1,3}far: (?P<held2>\d{1,3}(?:,\d{3}){0,6}) bytes\))?")
_CUPY_HELD_REST = lazy(r"^\s*(?:so\s{1,3})?far: (?P<held>\d{1,3}(?:,\d{3}){0,6}) bytes\)")
# Julia's CUDA.jl (Flux and every Julia GPU code) when its pool cannot allocate even after a
# garbage collection (OutOfGPUMemoryError): "Out of GPU memory trying to allocate 146.250 MiB",
# then "Effective GPU memory usage: 99.50% (3.792 GiB/3.810 GiB)" and "Memory pool usage:
# 960.548 MiB (2.688 GiB reserved)"
_CUDA_JL = lazy(r"Out of GPU memory trying to allocate (?P<req>" + _NUM + r"\s*" + _UNIT + r")")
_CUDA_JL_USAGE = lazy(r"^\s*Effective GPU memory usage: [\d.]{1,6}% \((?P<used>" + _NUM + r"\s*" + _UNIT + r")/(?P<total>"
                      + _NUM + r"\s*" + _UNIT + r")\)")
_CUDA_JL_POOL = lazy(r"^\s*Memory pool usage: (?P<alloc>" + _NUM + r"\s*" + _UNIT + r") \((?P<res>" + _NUM + r"\s*" + _UNIT
                     + r") reserved\)")
# CatBoost's GPU memory pool (NCudaLib::TOutOfMemoryError): "Error: Out of memory. Requested
# 1070.546387; Free 1010.952393", sizes in MB (its stack-like pool divides by MB; later releases
# print the unit)
_CATBOOST_POOL = lazy(r"Error: Out of memory\. Requested (?P<n>\d{1,12}(?:\.\d{1,8})?)(?: MB)?; Free (?P<free>\d{1,12}(?:\.\d{1,8})?)")
# ggml's CUDA check (llama.cpp, whisper.cpp): the line under its "CUDA error: out of memory"
_GGML_WHERE = lazy(r"^\s*current device: (?P<dev>\d{1,3}), in function (?P<fn>\w{1,80})")
# ONNX Runtime's memory arena (BFCArena, one per execution provider: the CPU's and the GPU
# providers' alike) failing to grow: "onnxruntime::BFCArena::AllocateRawInternal Failed to
# allocate memory for requested buffer of size 159383552"
_ORT_ARENA = lazy(r"BFCArena::AllocateRawInternal[^\n]{0,200}?Failed to allocate memory for requested buffer of size (?P<n>\d{1,20})")
# ... whose side the log may say: a GPU provider named without "not available" (ONNX Runtime
# falls back to the CPU provider with that warning), the CUDA allocator's own failure
_ORT_GPU = {"CUDAExecutionProvider": "CUDA", "ROCMExecutionProvider": "HIP", "TensorrtExecutionProvider": "CUDA",
            "MIGraphXExecutionProvider": "HIP", "DmlExecutionProvider": "DirectML", "cuda_allocator.cc": "CUDA",
            "CUDA failure ": "CUDA"}
_ORT_NOT_USED = lazy(r"not in available provider names|not available|[Ff]alling back|fallback|Failed to create|EP Error"
                     r"|[Aa]vailable providers", re.I)
_ORT_CPU_ONLY = lazy(r"providers\s*=\s*\[\s*['\"]CPUExecutionProvider['\"]\s*\]")
# a trainer's own out-of-memory handler retrying with a smaller batch (the Dreambooth extension of
# the Stable Diffusion web UI: "OOM Detected, reducing batch/grad size to 24/1."): each retry is an
# out-of-memory error the trainer caught; a batch reduced to zero ends the run
BATCH_RETRY_FORMAT = "batch-size-retry"
_OOM_RETRY = lazy(r"OOM Detected, reducing batch/grad size to (?P<batch>\d{1,6})/(?P<grad>\d{1,6})")
# A CUDA runtime or driver call named with its result in words, as frameworks' C++ checks
# print it ("cudaGetLastError out of memory errno:2", MindSpore's "cudaHostAlloc failed, ret[2],
# out of memory"): the call says which memory, page-locked host memory for the host allocators
_CUDA_CALL_OOM = lazy(r"\b(?!cudaError\b|cudaSuccess\b)(?P<call>cu(?:da|Mem)[A-Z]\w{2,40})\b[^\n]{0,300}?\bout of memory\b")
# ... or a CUDA check that prints where it failed on one line, then the error's string and the call
# on the next ("CUDA Runtime Error at: .../data_struct_cuda.cu:83" / "out of memory cudaMalloc(&p, n)")
_STRING_THEN_CALL = lazy(r"^\W{0,3}out of memory\s+(?P<call>cu(?:da|Mem)[A-Z]\w{2,40})\s*\(")
_ERROR_WORD = lazy(r"\b(?i:error|failed|failure)\b")
# ... its message hard-wrapped mid-word: the next line starts with the rest of the cut word
_WORD_REST_OOM = lazy(r"^[a-z]{1,12}\W{0,3}out of memory\b")
# ... on a line that says something failed (not a notice that a call "will not run out of memory";
# not "no error"): a word of failure, an exception's name or an error record's level (dlib's "Error while
# calling cudaMalloc(...) in file ...: code: 2, reason: out of memory")
_FAILURE_WORD = lazy(r"\b(?:failed|errno|returned)\b|\bret\[|(?<!\bno )\berror\b|\w+Error:|^\W*(?:ERROR|Error\b|FATAL|[EF]\d{4} )")
# ... or a library's own check saying that memory could not be allocated, with the device
# allocation call that failed ("Could not allocate memory: gpu_memory.h:112 cudaMalloc(&rawptr,
# n_bytes) failed with error out of memory", whatever the error's words or where a paste cuts them)
_ALLOC_CALL_FAILED = lazy(r"(?i:could not|cannot|can't|unable to|failed to) allocate memory\b[^\n]{0,300}?"
                          r"\b(?P<call>cudaMalloc\w{0,20}|cuMemAlloc\w{0,20}|hipMalloc\w{0,20})\b")
# ... or that names the call and the size it could not get ("Faiss assertion 'cudaMalloc(p, size)
# == cudaSuccess' failed ...; details: Failed to cudaMalloc 16000000000 bytes")
_CALL_SIZE_FAILED = lazy(r"(?i:unable|failed) to (?P<call>cudaMalloc\w{0,20}|cuMemAlloc\w{0,20}|hipMalloc\w{0,20})"
                         r" (?P<n>\d[\d,]{0,20}) bytes\b")
# the CUDA_CALL check of CNTK and of ONNX Runtime, which took it from CNTK: "CUDA failure 2: out of
# memory ; GPU=0 ; hostname=node1 ; [file=... ; line=47 ;] expr=cudaMalloc((void**)&p, size);",
# the call named after the error's words (the device -1 where none was set)
_CUDA_FAILURE_CHECK = lazy(r"\bCUDA failure (?P<code>\d{1,4}): out of memory ; GPU=(?P<dev>-?\d{1,3})\b"
                           r"(?:[^\n]{0,400}?\bexpr=(?P<call>cu(?:da|Mem)[A-Z]\w{2,40}))?")
_HOST_ALLOC_CALLS = ("cudaHostAlloc", "cudaMallocHost", "cuMemHostAlloc", "cuMemAllocHost", "cudaHostRegister",
                     "cuMemHostRegister")

# -- other frameworks' own allocators ------------------------------------------------------
# Jittor's memory check (src/mem/mem_info.cc): "GPU memory is overflow, please reduce your
# batch_size or data size!", then "Total: 23.65GB Used: 47.36GB" on the next line (CPU for the
# host's memory)
_JITTOR_OVERFLOW = lazy(r"^\s*(?P<where>GPU|CPU) ?memory is overflow, please reduce your batch_size or data size")
# these frameworks' words quoted in advice, or in a notice of a fallback the job took ("to avoid
# 'Executor creation failed ...', lower ...", "... alloc failed for prefetch buffer; continuing
# without prefetch"): no failure
_QUOTED_ADVICE = lazy(r"\b(?i:to avoid|avoid|if you (?:see|get|hit)|continuing without|falling back|fall back|instead)\b"
                      r"|['\"`‘“](?:GPU|CPU|Executor creation|Device|Malloc)")
# literals one of which every form below holds (the advice test runs only on such lines;
# _QUICK, the lines this family reads at all, includes them)
_FRAMEWORK_GATES = ("memory is overflow", "isn't enough", "Failed to allocate again", "buffer of size",
                    "insufficient GPU memory", "PinnedPlace", "Maximum pool size exceeded", "CNMEM_STATUS_OUT_OF_MEMORY",
                    "Insufficient GPU memory error", "is more than total mem size", "RetryOOM")
# MLC LLM's check that the model fits before it runs (TVMError: "Insufficient GPU memory error: The
# available single GPU memory is 19314.976 MB, which is less than the sum of model weight size
# (51.083 MB) and temporary buffer size (106.819 MB)."): what is available, and the parts summed
_MLC_CHECK = lazy(r"Insufficient GPU memory error: The available single GPU memory is (?P<avail>\d{1,9}(?:\.\d{1,6})?) MB,"
                  r" which is less than the sum of (?P<parts>[^\n]{0,300})")
_MLC_PART = lazy(r"\((\d{1,9}(?:\.\d{1,6})?) MB\)")
_MLC_END = lazy(r"MB\)\.")
# The RAPIDS Memory Manager (cuDF, cuML, XGBoost's and NVTabular's GPU data) refusing to grow its
# pool: "out_of_memory: RMM failure at:.../pool_memory_resource_impl.cpp:72: Maximum pool size
# exceeded (failed to allocate 1.000000 GiB): ..." (its pool and arena resources), and before
# RMM 0.15 its cnmem pool: "std::bad_alloc: CNMEM error at: ...: CNMEM_STATUS_OUT_OF_MEMORY".
# (Its CUDA calls' own failures name cudaErrorMemoryAllocation and are read as the runtime's.)
# (older releases name no size: then the line must name RMM or its exception, the "rmm" group)
_RMM_POOL = lazy(r"(?P<rmm>(?:RMM|rmm|out_of_memory)[^\n]{0,300}?)?Maximum pool size exceeded"
                 r"(?: \(failed to allocate (?P<num>\d{1,12}(?:\.\d{1,9})?) (?P<unit>[KMGTPE]?i?B)\))?"
                 r"|CNMEM_STATUS_OUT_OF_MEMORY")
# The RAPIDS Accelerator for Apache Spark's retry framework giving up on a task whose memory it
# could not get by spilling, retrying or splitting its input: "com.nvidia.spark.rapids.jni.
# GpuSplitAndRetryOOM: GPU OutOfMemory: could not split inputs and retry" (releases before 24.02
# leave out the side: "...jni.SplitAndRetryOOM: ..."; the host's: "CpuRetryOOM")
_SPARK_RAPIDS_OOM = lazy(r"\bcom\.nvidia\.spark\.rapids\.jni\.(?P<side>Gpu|Cpu)?(?:SplitAndRetry|Retry)OOM\b")
_JITTOR_TOTALS = lazy(r"^\s*Total: ?(?P<total>" + _NUM + r"\s*" + _UNIT + r") ?Used: ?(?P<used>" + _NUM + r"\s*" + _UNIT + r")")
# MindSpore's device memory pool (GPU or Ascend): "Device(id:0) memory isn't enough and alloc
# failed, kernel name: ..., alloc size: 1073741824B", "Malloc for kernel output failed, Memory
# isn't enough, node:Default/Cast-op446"
_MINDSPORE_POOL = lazy(r"(?i:memory isn't enough)(?=[^\n]{0,40}?\balloc failed)|\b(?i:malloc|alloc)[\w ]{0,40} failed,"
                       r" (?i:memory isn't enough)")
_MINDSPORE_SIZE = lazy(r"alloc size: ?(?P<n>\d{1,20}) ?B?\b")
# ... and its dynamic allocator refusing a block larger than the device (mem_dynamic_allocator.cc:
# "TotalUsedMemStatistics : 24725382656 plus TotalUsedByEventMemStatistics : 0 and plus alloc size
# : 100555779072 is more than total mem size : 61079552000.")
_MINDSPORE_TOTAL = lazy(r"\bTotalUsedMemStatistics ?: ?(?P<used>\d{1,20})\b[^\n]{0,120}?\bplus alloc size ?: ?(?P<n>\d{1,20})"
                        r" is more than total mem size ?: ?(?P<total>\d{1,20})")
# nnabla's caching allocator: one retry after freeing its cache ("Failed to allocate. Freeing
# memory cache and retrying."); the retry failing ("Failed to allocate again.") ends the run
_NNABLA_RETRY = "Freeing memory cache and retrying"
_NNABLA_AGAIN = lazy(r"^\s*Failed to allocate again\.")
# ggml (llama.cpp, ollama, whisper.cpp) failing to allocate a backend's buffer: its graph
# allocator "ggml_gallocr_reserve_n: failed to allocate ROCm0 buffer of size 18035509504", a
# model's weights "... failed to allocate CUDA0 buffer of size N"; the backend names the memory
# ("CUDA_Host" is its page-locked host buffer; the CPU backend's own line names no backend:
# "ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer of size N")
_GGML_BUFFER = lazy(r"\bfailed to allocate (?P<be>CUDA|ROCm|Metal|Vulkan|SYCL|CANN|MUSA|CPU)(?P<dev>\d{0,3})"
                    r"(?P<host>_Host)? buffer of size (?P<n>\d{1,20})"
                    r"|\bggml_backend_(?P<cpu>cpu)_buffer_type_alloc_buffer: failed to allocate buffer of size (?P<n2>\d{1,20})")
_GGML_MIB_ROUNDING = 2**20 // 100 + 1   # (the last printed digit of a MiB figure, 0.01 MiB)
_GGML_KIND = {"CUDA": ("cuda_runtime_error", "CUDA"), "ROCm": ("hip", "HIP"), "MUSA": ("device_runtime", "MUSA"),
              "Metal": ("mps", "MPS"), "Vulkan": ("device_runtime", "Vulkan"), "SYCL": ("xpu", "XPU"),
              "CANN": ("npu", "NPU"), "CPU": ("cpu_allocator", "host")}
# ... and its CUDA backend's own line for the same failure, with the size and the device:
# "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 24289.03 MiB on device 0: cudaMalloc
# failed: out of memory"
_GGML_ALLOCATING = lazy(r"\ballocating (?P<size>" + _NUM + r"\s*" + _UNIT + r") on device (?P<dev>\d{1,3}):\s*"
                        r"(?=(?:cuda|hip)Malloc\w{0,20} failed)")
# TensorRT-LLM's executor that could not create a component (its KV cache, a drafter) in the
# memory left: "Executor creation failed due to insufficient GPU memory.", then "Total GPU
# memory (GiB): 140.06" and "Free GPU memory before component creation attempt (GiB): 108.86"
_TRTLLM_EXECUTOR = lazy(r"Executor creation failed due to insufficient GPU memory")
_TRTLLM_TOTAL = lazy(r"^\s*Total GPU memory \(GiB\):\s*(?P<n>[\d.]{1,12})")
_TRTLLM_TABLE = 7   # lines under the error in which it prints them
_TRTLLM_FREE = lazy(r"^\s*Free GPU memory before component creation attempt \(GiB\):\s*(?P<n>[\d.]{1,12})")
# PaddlePaddle's page-locked host allocator: "cudaHostAlloc Cannot allocate 122880000 bytes in
# CUDAPinnedPlace" (with "cudaHostAlloc failed." from its system allocator before it)
_PADDLE_PINNED = lazy(r"\b(?P<call>cudaHostAlloc|hipHostMalloc) Cannot allocate (?P<n>\d{1,20}) bytes in (?:CUDA|HIP|XPU)?PinnedPlace")

# -- TensorRT ------------------------------------------------------------------------------
# Its builder and runtime allocating device memory through their own allocator (cudaMalloc):
# TensorRT 5-7 "Cuda Error in allocate: 2 (out of memory)", "Cuda Error in
# nvinfer1::internal::DefaultAllocator::allocate: 2 (out of memory)", "OutOfMemory Error in
# ...::computeCosts: 0"; TensorRT 8 and later "Error Code 1: Cuda Runtime (out of memory)"
# (with "[defaultAllocator.cpp::allocate::31]"). The request is on a warning beside it:
# "Requested amount of GPU memory (15485030400 bytes) could not be allocated" (TensorRT 7 and
# before: "Requested amount of memory (150994944 bytes) could not be allocated"), "User allocator
# error allocating 15485030400-byte buffer".
_TRT_OOM = lazy(r"\bCuda Error in [\w:<>`'(). -]{1,160}?: 2 \(out of memory\)|\bError Code 1: Cuda Runtime \(out of memory\)"
                # TensorRT 8 and later growing its builder's memory: "[virtualMemoryBuffer.cpp::resizePhysical::140]
                # Error Code 2: OutOfMemory (no further information)"
                r"|\bOutOfMemory Error in \S|\bError Code \d{1,2}: OutOfMemory\b")
_TRT_SIZE = lazy(r"Requested amount of (?:GPU )?memory \((?P<n>\d{1,20}) bytes\)|allocating (?P<n2>\d{1,20})-byte buffer"
                 # (TensorRT 10 puts it in the error: "Error Code 2: OutOfMemory (Requested size was 16654532608 bytes.)")
                 r"|Requested size was (?P<n3>\d{1,20}) bytes")

# -- NCCL ----------------------------------------------------------------------------------
_NCCL_OOM = lazy(r"Cuda failure (?:\d{1,4} )?'out of memory'"
                       r"|NCCL WARN (?:Failed to CUDA (?:calloc|malloc|host alloc)|Failed to cuMem\w{0,40})[^\n]{0,200}"
                       # NCCL >= 2.19 puts the cause under "Last error:" in the exception's message
                       r"|(?:^|Last error:\s*)Failed to CUDA (?:calloc|malloc|host alloc)(?: async)? \d+ bytes"
                       r"|NCCL WARN [^\n]{0,200}?out of memory")
# ... and its shared-memory transport, which could not create its segment in /dev/shm ("NCCL WARN
# Error while creating shared memory segment /dev/shm/nccl-Ewjreo (size 33030528), error: No space
# left on device (28)", or under "Last error:" without the reason): shared memory ran out when the
# reason is ENOSPC or ENOMEM, likely so when none is given; another reason ("Call to shm_open
# failed : Permission denied" above it) is not memory
_NCCL_SHM = lazy(r"Error while creating shared memory segment \S{0,200} \(size (?P<n>\d{1,20})\)"
                 r"(?:, error: [^\n]{0,80}?\s*\((?P<errno>\d{1,4})\))?")
_NCCL_SHM_REASON = lazy(r"NCCL WARN Call to \w{1,30} failed\s*:\s*(?P<why>[^\n]{1,80})")
_SHM_SPACE_ERRNOS = (28, 12)   # ENOSPC, ENOMEM
_NCCL_DEV = lazy(r"(?:^|\s)[\w.-]{0,80}:\d{1,9}:\d{1,9} \[(?P<dev>\d{1,3})\]")
_NCCL_UNHANDLED = lazy(r"unhandled cuda error|ncclUnhandledCudaError", re.I)

# -- bitsandbytes: its C code prints "Error <cuda string> at line N in file F" and exits ----
_BNB_CHECK = lazy(r"Error out of memory at line \d{1,7} in file (?P<file>\S{1,300})")
# (the package's folder: transformers' own "utils/bitsandbytes.py", which places a quantized
# model's weights as it loads, is not bitsandbytes' code)
_BNB_FRAME = lazy(r"bitsandbytes[/\\]")

# -- wrappers ------------------------------------------------------------------------------
_FSDP_CLONE = lazy(r"Failed to clone\(\) tensor with name (?P<name>\S{1,300}) on rank (?P<rank>\d{1,6})")
_PIN_THREAD = lazy(r"Caught (?P<exc>\w{1,60}) in pin memory thread(?: for device (?P<dev>\d{1,3}))?")

# -- Ascend NPU and Intel XPU ------------------------------------------------------------
_NPU_WORKSPACE = lazy(r"NPU out of memory\.\s*NPUWorkspaceAllocator tried to allocate (?P<size>" + _NUM + r"\s*" + _UNIT + r")"
                            r"(?:\s*\(NPU (?P<dev>\d{1,3});[^)]{0,200}?(?P<free>" + _NUM + r"\s*" + _UNIT + r") free)?")
_NPU_PIN = lazy(r"Malloc pin memory failed, host out of memory(?:, \w?ried to allocate size:\s*(?P<size>" + _NUM + r"(?:\s*" + _UNIT + r")?))?")
_NPU_DEVICE = lazy(r"NPU out of memory\.\s*device id:\s*(?P<dev>\d{1,3})")
_NPU_REJECTED = lazy(r"NPU out of memory\.\s*Allocation was preemptively rejected[^\n]{0,200}?"
                           r"(?:Requested size:\s*(?P<size>" + _NUM + r"(?:\s*" + _UNIT + r")?))?")
_NPU_ACL = lazy(r"ACL_ERROR_RT_MEMORY_ALLOCATION")
# CANN's own report of a failed device allocation (the Ascend runtime under torch_npu or
# MindSpore): "EL0004: [time] Failed to allocate memory.", "rtMalloc execute failed,
# reason=[driver error:out of memory]"; the report's lines name the device ("device_id=7",
# "device_id:0", "deviceId=6") and often the size ("size:4110811136")
# (later CANN releases name the error's type before its code: "Memory_Allocation_Failure(EL0004):
# Failed to allocate memory requested by GE module.")
_CANN_OOM = lazy(r"\bEL0004\)?:(?:\s*[\d.:-]{10,30})?\s*Failed to allocate memory"
                 r"|rtMalloc execute failed, reason=\[driver error:out of memory\]")
_CANN_DEVICE = lazy(r"\bdevice_?[iI]d\s*[=:]\s*(?P<dev>\d{1,3})\b")
_CANN_SIZE = lazy(r"\bsize\s*[=:]\s*(?P<n>\d{4,20})\b")
# Intel Gaudi's bridge failing its graph's workspace ("SYNHELPER workspace Allocation of size
# ::14493510400 failed!")
_HPU_WORKSPACE = lazy(r"workspace Allocation of size ::(?P<n>\d{1,20}) failed")
# a Vulkan renderer on the same GPU (a simulator's or viewer's: Isaac Sim, a splatting viewer)
# refused device memory: "VkResult: ERROR_OUT_OF_DEVICE_MEMORY", "vkAllocateMemory failed for flags: 2."
_VULKAN = lazy(r"(?:\bVK_|(?<![A-Z_]))ERROR_OUT_OF_DEVICE_MEMORY\b|\bvkAllocateMemory failed")
_XPU = lazy(r"(?P<code>UR_RESULT_ERROR_OUT_OF_DEVICE_MEMORY|ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY"
                  r"|UR_RESULT_ERROR_OUT_OF_RESOURCES|PI_ERROR_OUT_OF_RESOURCES|UR_RESULT_ERROR_OUT_OF_HOST_MEMORY)")

_MAX_EVIDENCE = 12
_QUICK = ("out of memory", "OUT_OF_MEMORY", "CUDA error: invalid argument", "shared memory segment", "allocate pinned host", "ailed to alloc", "MemoryAllocation", "ALLOC_FAILED", "ALLOCATION_FAILED", "NOT_INITIALIZED",
          "cuDNN", "unable to find an engine", "memory_error", "NCCL WARN", "Failed to clone()",
          "pin memory thread", "OutOfMemory", "OUT_OF_RESOURCES", "OUT_OF_DEVICE_MEMORY",
          "OUT_OF_HOST_MEMORY", "MEMORY_ALLOCATION", "INSUFFICIENT_RESOURCES", "Failed to CUDA",
          "DEVICE memory", "device memory", "status=4 message=", "NRT_RESOURCE", "hipError_t(1002)", "hipError_t(2)", "Out of memory error on GPU", "B in GPU ", "allocating <= available", "ut of memory allocating", "Out of GPU memory trying",
          "CUresult", "DEVMEM Allocation failed", "Allocator fail", "cudaSuccess. 2 vs 0", "cudaSuccess (2 vs. 0)", "memory for the cache blocks",
          "stored in KV cache", "available KV cache memory", "Available KV cache memory: -", "on startup is less than desired",
          "mem-fraction-static", "Not enough memory to handle", "No executable batch size", "EL0004", "rtMalloc execute failed", "MEM_OBJECT_ALLOCATION",
          "workspace Allocation of size", "bad_alloc", "Out of memory. Requested", "OOM Detected", "requested buffer", "ALLOCATOR_FAILURE", "Not enough space to allocate",
          "allocate memory", "vkAllocateMemory failed", "CUDA error 2", "CUDA error: 2", "uda error 2", "Error 2", "Error: 2",
          "failed with error 2", "to cudaMalloc", "to hipMalloc", "cuMem", "get_temporary_buffer failed",
          "dispatched on the CPU", "offloaded to the disk",
          "whole model to the disk", "resource allocation failed", "CPU or disk device", "to dispatch this model",
          "Workspace can't be allocated") + _FRAMEWORK_GATES


def _event_above(ctx: ParseContext, events, i: int, same, reach: int = 3, here: bool = False) -> Optional[OomEvent]:
    """The event for which ``same`` holds reported on one of the ``reach`` lines above line ``i``
    (or on it, with ``here``): one failure that ggml reports in two lines."""
    no = ctx.lines[i].no
    return next((ev for ev in events.by_key.values() if (0 if here else 1) <= no - ev.line <= reach and same(ev)), None)


def _ggml_buffer_above(ctx: ParseContext, events, i: int) -> Optional[OomEvent]:
    """ggml's report of a device buffer it could not allocate, on one of the three lines above."""
    return _event_above(ctx, events, i, lambda ev: ev.message_format == "ggml-buffer" and ev.kind != "cpu_allocator")


def nccl_shm_strength(ctx: ParseContext, i: int, m) -> Optional[str]:
    """How surely NCCL's failed shared-memory segment (``m``, a match of its message on line
    ``i``) says /dev/shm ran out: "certain" for ENOSPC/ENOMEM (on the line or from the call
    reported just above it), "likely" with no reason given, None for another reason
    ("Call to shm_open failed : Permission denied" is not memory)."""
    if m is not None and m.group("errno"):
        return "certain" if int(m.group("errno")) in _SHM_SPACE_ERRNOS else None
    above = (ctx.search(_NCCL_SHM_REASON, ctx.lines[j].text) for j in range(max(0, i - 3), i))
    why = next((r.group("why") for r in above if r), None)
    if why is not None and not shm_reason_is_room(why):
        return None
    return "certain" if why else "likely"


def shm_reason_is_room(why: str) -> bool:
    """Does the reason a shared-memory call gives ("No space left on device", "Permission
    denied") say /dev/shm had no room (ENOSPC, ENOMEM in words)?"""
    return any(w in why for w in ("No space left", "Cannot allocate memory"))


def nccl_shm_match(ctx: ParseContext, i: int, text: str):
    """NCCL's shared-memory segment message on line ``i``, joined with the next line (or this
    one with the line above) where the message was hard-wrapped (a terminal, a paste quoted
    line by line): its "Error" at the end of the line above, its reason on the next line."""
    m = ctx.search(_NCCL_SHM, text) if "shared memory segment" in text else None
    if "shared memory segment" in text and (m is None or not m.group("errno")):
        whole = (ctx.rejoined(i - 1, _NCCL_SHM, max_lines=2) if i and m is None else None) \
            or ctx.rejoined(i, _NCCL_SHM, max_lines=1)
        if whole is not None and (m is None or whole.group("errno")):
            m = whole
    return m


def _nccl_shm(ctx: ParseContext, events, i: int, m, exc) -> None:
    """NCCL's shared-memory segment that could not be created: an event when /dev/shm was out of
    room (the reason it gives, or none: likely), one for the WARN line and its echo under "Last
    error:"."""
    strength = nccl_shm_strength(ctx, i, m)
    if strength is None:
        return
    n = int(m.group("n"))
    events.add(("nccl", "shm"), i, lambda: OomEvent(
        kind="nccl", backend="shm", line=0, exception=exc, strength=strength, message_format="nccl-shm-segment",
        tried_to_allocate_bytes=n, detail="NCCL could not create a shared-memory segment in /dev/shm for its "
        "transport between processes: " + m.group(0)[:200]))


def _size(text: Optional[str]) -> Optional[int]:
    if not text:
        return None
    m = _SIZE_PARTS.search(text)
    if m:
        return to_bytes(m.group("num"), m.group("unit"))
    digits = text.replace(",", "").strip()
    return int(digits) if digits.isdigit() else None


class _Events:
    """This family's events, one per distinct message; later copies fold into it."""

    def __init__(self, ctx: ParseContext):
        self.ctx = ctx
        self.by_key: dict[tuple, OomEvent] = {}
        # lines that earlier families (the allocator, accelerators) already explained
        self.taken = ctx.explained_lines()
        # the last driver refusal (event, line index, size): TensorFlow's next try asks for less
        self.backpedal: Optional[tuple[OomEvent, int, int]] = None

    def add(self, key: tuple, idx: int, make: Callable[[], OomEvent]) -> OomEvent:
        line = self.ctx.lines[idx]
        ev = self.by_key.get(key)
        if ev is None:
            ev = make()
            ev.line = line.no
            self.by_key[key] = ev
            self.ctx.facts.oom_events.append(ev)
        else:
            ev.count += 1
        if ev.exception is None:  # a log line first, the raised exception later
            ev.exception = _exception(self.ctx, line.text)
        if line.rank is not None and line.rank not in ev.ranks:
            ev.ranks.append(line.rank)
        self.cover(ev, idx)
        return ev

    def cover(self, ev: OomEvent, idx: int) -> None:
        no = self.ctx.lines[idx].no
        self.taken.add(no)
        if len(ev.evidence) < _MAX_EVIDENCE and all(e.line != no for e in ev.evidence):
            ev.evidence.append(self.ctx.evidence(idx))


def _ggml_where(ctx: ParseContext, i: int):
    """(the match, its line) of ggml's CUDA check naming the device and the function under the
    error at line ``i`` ("  current device: 0, in function ggml_cuda_pool_malloc_vmm at
    .../ggml-cuda.cu:7812"), in some builds after its source's "ggml-cuda.cu:97: CUDA error"
    line; (None, None) when it is not there."""
    for j in range(i + 1, min(len(ctx.lines), i + 3)):
        text = ctx.lines[j].text
        m = ctx.search(_GGML_WHERE, text) if "current device" in text else None
        if m:
            return m, j
        if not text.rstrip().endswith("CUDA error"):
            break
    return None, None


def _exception(ctx: ParseContext, text: str) -> Optional[str]:
    m = ctx.search(_EXC_AT_START, text)
    return m.group(1) if m else None


def _message(text: str, start: int) -> str:
    """The message from the match on, without the exception class: the folding key."""
    return re.sub(r"\s+", " ", text[start:start + 300]).strip()


def _cuda_suffix(ctx: ParseContext, i: int, exc: Optional[str]) -> tuple[Optional[str], list[int]]:
    """Which torch wording the lines after ``CUDA error: ...`` use, and those lines."""
    seen: list[int] = []
    texts = []
    rank = ctx.lines[i].rank
    for j in range(i + 1, min(len(ctx.lines), i + 8)):
        ln = ctx.lines[j]
        if ln.rank != rank or not ctx.search(_SUFFIX, ln.text):
            if ln.text.strip() and ln.rank == rank:
                break
            continue
        seen.append(j)
        texts.append(ln.text)
    joined = "\n".join(texts)
    if "Search for `" in joined:
        fmt = "torch>=2.9"
    elif exc and exc.endswith("AcceleratorError"):
        fmt = "torch>=2.8"
    elif "CUDA_LAUNCH_BLOCKING=1." in joined:
        fmt = "torch2.0-2.3" if "TORCH_USE_CUDA_DSA" in joined else "torch1.9-1.13"
    elif "API call,so" in joined:
        fmt = "torch1.9-1.13"
    elif "CUDA_LAUNCH_BLOCKING=1" in joined:
        fmt = "torch2.4-2.8"
    elif "AMD_SERIALIZE_KERNEL" in joined:
        fmt = "rocm"
    else:
        fmt = None
    return fmt, seen


_TRT_AFTERMATH = 40   # lines after a builder's OutOfMemory in which its build's failure is reported
_TRT_ENDED = ("fail", "traceback", "exception", "segmentation fault", "core dumped", "aborted")


def _trt_build_failed(ctx: ParseContext, i: int) -> bool:
    """Did something fail after TensorRT's builder reported a tactic out of memory (the engine's
    build, the conversion that called it, an exception, the process crashing)?"""
    for j in range(i + 1, min(len(ctx.lines), i + 1 + _TRT_AFTERMATH)):
        low = ctx.lines[j].text.lower()
        if any(w in low for w in _TRT_ENDED) and "outofmemory" not in low:
            return True
    return False


def _paddle_event(events: _Events, i: int, exc: Optional[str], m, **figures) -> None:
    """PaddlePaddle's GPU allocator refusing a request (a match with ``dev``, ``req`` and ``free``),
    in any release's wording: one event per device and request."""
    events.add(("cuda_runtime_error", "Paddle", m.group("dev"), m.group("req")), i, lambda: OomEvent(
        kind="cuda_runtime_error", backend="CUDA", exception=exc, line=0, message_format="paddle-allocator",
        device_index=int(m.group("dev")), tried_to_allocate_bytes=_size(m.group("req")),
        free_bytes=_size(m.group("free")), detail="PaddlePaddle's GPU allocator could not allocate the request",
        **figures))


def _pool_event(events: _Events, i: int, exc: Optional[str], pool: str, fmt: str, n: Optional[int], **figures) -> None:
    """A library's own GPU memory pool that could not serve a request of ``n`` bytes."""
    events.add(("cuda_runtime_error", fmt, n), i, lambda: OomEvent(
        kind="cuda_runtime_error", backend="CUDA", exception=exc, line=0, message_format=fmt,
        tried_to_allocate_bytes=n, detail=f"{pool} could not allocate the request", **figures))


def _ort_side(ctx: ParseContext) -> tuple[str, Optional[str], str]:
    """Which memory an ONNX Runtime arena held: a GPU provider the log names in use, the CPU
    provider alone, or neither said (the arena's message is the same for both)."""
    cpu = [j for j in ctx.lines_with(("CPUExecutionProvider",)) if ctx.search(_ORT_CPU_ONLY, ctx.lines[j].text)]
    if cpu or ctx.lines_with(("not in available provider names",)):
        return "cpu_allocator", "host", "host memory: the session runs on the CPU provider"
    for j in ctx.lines_with(tuple(_ORT_GPU)):
        text = ctx.lines[j].text
        if not ctx.search(_ORT_NOT_USED, text):
            word = next(w for w in _ORT_GPU if w in text)
            return "device_runtime", _ORT_GPU[word], f"the GPU's: the log names {word.strip()}"
    return "runtime_arena", None, "the log does not say whether the arena is the CPU provider's or a GPU's"


def _in_bitsandbytes(ctx: ParseContext, i: int) -> bool:
    """Do the traceback frames right above line ``i`` run inside bitsandbytes?"""
    for j in range(i - 1, max(-1, i - 30), -1):
        t = ctx.lines[j].text
        if "Traceback (most recent call last)" in t:
            return False
        if t.lstrip().startswith("File ") and _BNB_FRAME.search(t):
            return True
    return False


# what else a custom kernel's check prints beside it (the next calls' error strings) or what says
# the code is CUDA's
_CUDA_NEAR = ("illegal memory access", "invalid argument", "launch failure", "CUDA", "cuda", ".cu:", ".cu\"")


def _cuda_words_near(ctx: ParseContext, i: int, span: int = 3) -> bool:
    lines = ctx.lines[max(0, i - span):i] + ctx.lines[i + 1:i + 1 + span]
    return any(w in ln.text for ln in lines for w in _CUDA_NEAR)


def _call_event(events: _Events, i: int, exc: Optional[str], call: Optional[str], n: Optional[int] = None,
                dev: Optional[int] = None, what: Optional[str] = None) -> None:
    """A named CUDA or HIP call that could not allocate: the device's memory, or page-locked
    host memory where the call pins it."""
    host = call in _HOST_ALLOC_CALLS
    what = what or (f"{call} of {n} bytes failed" if n else f"{call} failed: out of memory")
    events.add(("cuda_runtime_error", "call", call, n, dev), i, lambda: OomEvent(
        kind="cuda_runtime_error", backend="HIP" if call and call.startswith("hip") else "CUDA", exception=exc,
        line=0, message_format="cuda-driver-host-alloc" if host else "cuda-call", tried_to_allocate_bytes=n,
        device_index=dev, detail=what + (" (page-locked host memory)" if host else "")))


def _pinning_code_above(ctx: ParseContext, i: int) -> bool:
    """The code line printed right above line ``i`` (past Python's caret line; not a frame's
    'File "..."' line) makes a pinned tensor or calls cudaHostAlloc."""
    for j in range(i - 1, max(-1, i - 4), -1):
        text = ctx.lines[j].text
        if not text.strip() or CARET.match(text):
            continue
        return ("pin" in text or "Host" in text) and not text.lstrip().startswith('File "') \
            and ctx.search(_PINNING_CODE, text) is not None
    return False


def _line_events(ctx: ParseContext, events: _Events, i: int) -> None:
    ln = ctx.lines[i]
    text = ln.text
    if ln.no in events.taken:
        return
    exc = _exception(ctx, text)
    if text.strip() == "out of memory" and _cuda_words_near(ctx, i):
        # a CUDA error's string printed alone, as the check of custom CUDA kernels does
        # (py-faster-rcnn's nms_kernel.cu, "std::cout << cudaGetErrorString(error)", and the
        # detection and rotated-box ops copied from it in every framework): a call of that op
        # could not allocate device memory. Only beside other CUDA words: the two words alone
        # are any program's
        events.add(("cuda_runtime_error", "error-string"), i, lambda: OomEvent(
            kind="cuda_runtime_error", backend="CUDA", line=0, strength="likely", message_format="cuda-error-string",
            detail="a CUDA call failed with 'out of memory', its error string printed alone (a custom kernel's check)"))
        return

    m = ctx.search(_TRT_OOM, text) if "(out of memory)" in text or "OutOfMemory" in text else None
    if m and m.group(0).endswith(": OutOfMemory") and not _trt_build_failed(ctx, i):
        # the builder reports each tactic that does not fit its memory and goes on with the others
        # that do: only a build that then fails ended on it
        m = None
    if m:
        n = None
        for j in range(max(0, i - 3), min(len(ctx.lines), i + 4)):
            size = ctx.search(_TRT_SIZE, ctx.lines[j].text) if "byte" in ctx.lines[j].text else None
            if size:
                n = int(size.group("n") or size.group("n2") or size.group("n3"))
                break
        ev = events.add(("cuda_runtime_error", "tensorrt"), i, lambda: OomEvent(
            kind="cuda_runtime_error", backend="CUDA", exception=exc, line=0, message_format="tensorrt",
            tried_to_allocate_bytes=n, detail="TensorRT could not allocate device memory (its builder or runtime)"))
        if ev.tried_to_allocate_bytes is None and n is not None:
            ev.tried_to_allocate_bytes = n
        return

    m = ctx.search(_CUDA_ERROR, text)
    if m:
        fmt, suffix = _cuda_suffix(ctx, i, exc)
        key_text = _message(text, m.start())
        if m.group(0).startswith(("cuda runtime error", "THCudaCheck")):
            fmt, key_text = "thc-cuda-runtime-error", "thc"  # THC logs the failure, then raises it
        elif m.group(0).startswith("CUDA driver"):
            fmt = "cuda-driver-error"
        detail = None
        if _in_bitsandbytes(ctx, i):
            fmt, detail = "bitsandbytes", "CUDA call inside bitsandbytes failed"
        else:
            # "CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:62": another
            # library's own allocator (vLLM's) failed, outside PyTorch's caching allocator
            # (PyTorch's own sources are not another library: c10, ATen, and torch 0.x's THC,
            # whose THCStorage.cu allocated every tensor's storage)
            src = ctx.search(_LIBRARY_SOURCE, text, m.end())
            if src is None and " runtime " in m.group(0):
                src = ctx.search(_LIBRARY_SOURCE_BARE, text, m.end()) or ctx.search(
                    _LIBRARY_SOURCE_BEFORE, text[max(0, m.start() - 400):m.start()])
            if src and not ctx.search(_PYTORCH_SOURCE, src.group("path")):
                fmt, detail = "library-allocator", f"a CUDA allocation in {src.group('file')} failed"
        ggml, at = _ggml_where(ctx, i)
        if ggml and detail is None:
            fmt, detail = "ggml-cuda-check", f"ggml's CUDA call in {ggml.group('fn')} failed"
        ev = events.add(("cuda_runtime_error", fmt == "bitsandbytes", key_text), i, lambda: OomEvent(
            kind="cuda_runtime_error", backend="CUDA", exception=exc, message_format=fmt, detail=detail, line=0,
            device_index=int(ggml.group("dev")) if ggml else None))
        for j in suffix:
            events.taken.add(ctx.lines[j].no)
        if ggml:
            for j in range(i + 1, at + 1):
                events.cover(ev, j)
        if ev.message_format is None and fmt:
            ev.message_format = fmt
        return
    m = ctx.search(_HIP_ERROR, text)
    if m:
        events.add(("hip", _message(text, m.start())), i, lambda: OomEvent(
            kind="hip", backend="HIP", exception=exc, message_format="hip-runtime-error", line=0))
        return
    m = ctx.search(_HIP_DRIVER_OOM, text) if "hipError_t(" in text else None
    if m:
        n = int(m.group("n"))
        events.add(("hip", "driver", n), i, lambda: OomEvent(
            kind="hip", backend="HIP", exception=exc, message_format="hip-driver-api", tried_to_allocate_bytes=n,
            line=0, detail="hipErrorMemoryAllocation"))
        return
    if "CUDA error: invalid argument" in text and _pinning_code_above(ctx, i):
        # cudaHostAlloc refusing one page-locked buffer larger than the driver will lock (a few
        # GiB on some systems) answers "invalid argument", not "out of memory": the code of the
        # innermost frame, printed right above, says the tensor was being pinned
        events.add(("cuda_runtime_error", "pinned-refused"), i, lambda: OomEvent(
            kind="cuda_runtime_error", backend="CUDA", exception=exc, message_format="cuda-pinned-invalid-argument",
            line=0, strength="likely", detail="a pinned (page-locked) host buffer was refused (CUDA's \"invalid "
                                             "argument\": more than the driver locks in one allocation)"))
        return
    m = ctx.search(_GGML_PINNED, text) if "of pinned memory" in text else None
    if m:
        # (likely, as TensorFlow's refused pinned buffer below: the run may go on without it)
        why = (m.group("why") or "").strip()
        if why and ctx.search(_PINNED_NOT_MEMORY, why):
            return
        events.add(("cuda_runtime_error", "ggml-host"), i, lambda: OomEvent(
            kind="cuda_runtime_error", backend="CUDA", exception=exc, message_format="ggml-pinned-host-alloc",
            tried_to_allocate_bytes=_size(m.group("size")), line=0, strength="likely",
            detail="pinned (page-locked) host memory refused" + (f" ({why})" if why else "")))
        return
    m = ctx.search(_CUDA_HOST_OOM, text) if "on host" in text or "pinned host" in text else None
    if m:
        # TensorFlow's and XLA's host allocator retries a refused pinned buffer smaller (each try
        # a line, the size shrinking) and a run may go on from it: one event, the first size,
        # likely rather than certain (its host BFC allocator's own "ran out" is the certain one)
        n = int(m.group("n") or m.group("n2"))
        events.add(("cuda_runtime_error", "host"), i, lambda: OomEvent(
            kind="cuda_runtime_error", backend="CUDA", exception=exc, message_format="cuda-driver-host-alloc",
            tried_to_allocate_bytes=n, line=0, strength="likely",
            detail="CUDA_ERROR_OUT_OF_MEMORY allocating pinned (page-locked) host memory"))
        return
    m = ctx.search(_CUDA_DRIVER_OOM, text)
    at = i
    if (m is None or not m.group("n")) and i and "failed to allocate" in ctx.lines[i - 1].text:
        # "failed to allocate 3.77G (4046333952 bytes) from device: CUDA_ERROR_OUT_OF_MEM" / "ORY"
        joined = ctx.rejoined(i - 1, _CUDA_DRIVER_OOM, max_lines=1)
        if joined and joined.group("n"):
            m, at = joined, i - 1
    if m:
        size = m.group("n") or m.group("unified")
        n = int(size) if size else None
        last = events.backpedal
        if n and last is not None and 0 < at - last[1] <= 2 and abs(n - _BACKPEDAL * last[2]) <= 0.01 * last[2]:
            # TensorFlow's GPU allocator asking again for nine tenths of what the driver just
            # refused (its "backpedal" while it grows its region): the same attempt, not a new OOM
            events.cover(last[0], at)
            last[0].count += 1
            events.backpedal = (last[0], at, n)
            return
        ev = events.add(("cuda_runtime_error", "driver", n), at, lambda: OomEvent(
            kind="cuda_runtime_error", backend="CUDA", exception=exc, message_format="cuda-driver-api",
            tried_to_allocate_bytes=n, line=0,
            detail="CUDA_ERROR_OUT_OF_MEMORY" + (" allocating unified (managed) memory" if m.group("unified") else "")))
        events.backpedal = (ev, at, n) if n else None
        return
    m = ctx.search(_LIB_ALLOC, text)
    if m:
        call = ctx.search(_WHEN_CALLING, text)
        status = m.group("status")
        backend = "HIP" if status.lower().startswith(("hip", "roc")) else "CUDA"
        detail = status + (f" when calling {call.group('call')}" if call else "")
        events.add(("cublas_alloc", _message(text, m.start())), i, lambda: OomEvent(
            kind="cublas_alloc", backend=backend, exception=exc, detail=detail, line=0))
        return
    if "cublas handle" in text and ctx.search(_TF_CUBLAS_CREATE, text):
        events.add(("cublas_alloc", "tf-create"), i, lambda: OomEvent(
            kind="cublas_alloc", strength="likely", backend="TF", exception=exc, line=0,
            message_format="tensorflow-cublas-create",
            detail="TensorFlow could not create its cuBLAS handle (CUBLAS_STATUS_NOT_INITIALIZED): the handle's "
                   "device memory could not be allocated beside TensorFlow's own allocator"))
        return
    for rx, kind, key, strength, detail in _FIXED_CUDA_SIGNS:
        if ctx.search(rx, text):
            events.add((kind, key), i, lambda kind=kind, strength=strength, detail=detail: OomEvent(
                kind=kind, strength=strength, backend="CUDA", exception=exc, line=0, detail=detail))
            return
    m = ctx.search(_NCCL_OOM, text)
    if m:
        dev = ctx.search(_NCCL_DEV, text)
        d = int(dev.group("dev")) if dev else None
        # one event per device, as the allocator's messages are (each names its GPU); a line
        # that names none (the "Last error:" echo of an exception) is the first device's
        key = ("nccl", d)
        if d is None:
            key = next((k for k in events.by_key if k[0] == "nccl"), key)
        elif ("nccl", None) in events.by_key and not any(k[0] == "nccl" and k[1] is not None for k in events.by_key):
            # the echo came first: it was this device's
            first = events.by_key.pop(("nccl", None))
            first.device_index = d
            events.by_key[key] = first
        events.add(key, i, lambda: OomEvent(
            kind="nccl", backend="CUDA", line=0, device_index=d,
            detail="NCCL could not allocate GPU memory for its buffers: "
                   + text[m.start():m.start() + 200].replace("NCCL WARN ", "", 1).strip()))
        return
    m = nccl_shm_match(ctx, i, text)
    if m:
        _nccl_shm(ctx, events, i, m, exc)
        return
    m = ctx.search(_BNB_CHECK, text)
    if m:
        # a CUDA runtime error (bitsandbytes' CUDA_CHECK); the library is in message_format
        events.add(("bitsandbytes", m.group("file")), i, lambda: OomEvent(
            kind="cuda_runtime_error", backend="CUDA", line=0, message_format="bitsandbytes",
            detail=f"bitsandbytes CUDA allocation failed ({m.group('file')})"))
        return
    m = ctx.search(_CUDA_FAILURE_CHECK, text) if "CUDA failure " in text else None
    if m:
        call, dev = m.group("call"), int(m.group("dev"))
        _call_event(events, i, exc, call, dev=dev if dev >= 0 else None,
                    what=f"{call or 'a CUDA call'} failed: out of memory (CUDA error {m.group('code')})")
        return
    # (after NCCL's: its WARN lines name the CUDA call that failed)
    sized = ctx.search(_CALL_SIZE_FAILED, text) if " bytes" in text and "to " in text else None
    m = sized or (ctx.search(_CUDA_CALL_OOM, text) if "out of memory" in text else None)
    at, call_text = i, text
    if not m and i and "out of memory" in text and "cu" in (prev := ctx.lines[i - 1].text) \
            and prev[-1:].isalnum() and ctx.search(_WORD_REST_OOM, text):
        # the call on the line above, its message hard-wrapped mid-word ("... pooled_storage_manager.h:107:
        # cudaMalloc fail" / "ed: out of memory"), when this line starts with the rest of the cut word
        # and the failure (two whole lines, a call named on one and a failure on the next, are two
        # messages)
        joined = ctx.rejoined(i - 1, _CUDA_CALL_OOM, max_lines=1)
        if joined:
            m, at, call_text = joined, i - 1, joined.string
    after = 0
    if not m and "allocate memory" in text:
        # (its own words hold "failed to": the failure must be the call's, after it)
        m = ctx.search(_ALLOC_CALL_FAILED, text)
        after = m.end("call") if m else 0
    if not m and i and text.lstrip(" `'\"").startswith("out of memory"):
        s2 = ctx.search(_STRING_THEN_CALL, text)
        if s2 and ctx.search(_ERROR_WORD, ctx.lines[i - 1].text):
            _call_event(events, i, exc, s2.group("call"))
            return
    # ("Failed to cudaMalloc N bytes" says its failure in its own words)
    if m and (sized or ctx.search(_FAILURE_WORD, call_text[after:])):
        call = m.group("call")
        n = int(sized.group("n").replace(",", "")) if sized else None
        ggml = ctx.search(_GGML_ALLOCATING, call_text) if not sized and "allocating" in call_text else None
        if ggml:
            n = _size(ggml.group("size"))
        elif not sized and (same := _ggml_buffer_above(ctx, events, at)) is not None:
            # the backend's line cut to its last words ("cudaMalloc failed: out of memory") under
            # ggml's report of the buffer it was for: one failure
            events.cover(same, at)
            return
        _call_event(events, at, exc, call, n=n, dev=int(ggml.group("dev")) if ggml else None)
        return
    m = ctx.search(_CUPY_POOL, text) if "out of memory to allocate" in text or "ut of memory allocating" in text else None
    if m:
        n = int((m.group("n") or m.group("n2")).replace(",", ""))
        held = m.group("held") or m.group("held2")
        if held is None and i + 1 < len(ctx.lines) and "far: " in ctx.lines[i + 1].text:
            rest = ctx.search(_CUPY_HELD_REST, ctx.lines[i + 1].text)
            held = rest.group("held") if rest else None
        _pool_event(events, i, exc, "CuPy's memory pool", "cupy-memory-pool", n,
                    reserved_total_bytes=int(held.replace(",", "")) if held else None)
        return
    m = ctx.search(_CUDA_JL, text) if "Out of GPU memory trying" in text else None
    if m:
        # its figures on the next two lines (usage first), read once and covered with it
        usage = pool = None
        figures = []
        for j in range(i + 1, min(len(ctx.lines), i + 3)):
            t = ctx.lines[j].text
            if j == i + 1 and (usage := ctx.search(_CUDA_JL_USAGE, t)) is not None:
                figures.append(j)
            elif pool is None and (pool := ctx.search(_CUDA_JL_POOL, t)) is not None:
                figures.append(j)
        total, used = (_size(usage.group("total")), _size(usage.group("used"))) if usage else (None, None)
        ev = events.add(("device_runtime", "cuda-jl", m.group("req")), i, lambda: OomEvent(
            kind="device_runtime", backend="CUDA", exception=exc, line=0, message_format="cuda-jl-pool",
            tried_to_allocate_bytes=_size(m.group("req")), total_capacity_bytes=total,
            # (the device's free memory is its total less what is in use, as CUDA.jl reads both)
            free_bytes=total - used if total is not None and used is not None else None,
            # (what the pool holds; what of it is in use stays in the detail: the pool frees what it
            # caches and collects garbage before it gives up, so the rest is no PyTorch cache)
            reserved_total_bytes=_size(pool.group("res")) if pool else None,
            detail="Julia's CUDA.jl could not allocate the request from its memory pool"
                   + (f" (in use {pool.group('alloc')} of {pool.group('res')} it holds)" if pool else "")))
        for j in figures:
            events.cover(ev, j)
        return
    m = ctx.search(_CATBOOST_POOL, text) if "Out of memory. Requested" in text else None
    if m:
        n, free = (int(float(m.group(g)) * 2**20) for g in ("n", "free"))
        _pool_event(events, i, exc, "CatBoost's GPU memory pool", "catboost-memory-pool", n, free_bytes=free)
        return
    m = None
    if "requested buffer" in text:
        # (or hard-wrapped between the arena's function and its message: the long C++ signature
        # pushes "Failed to allocate ..." onto a line of its own)
        m = ctx.search(_ORT_ARENA, text) or (ctx.rejoined(i - 1, _ORT_ARENA, max_lines=1) if i else None)
    if m:
        n = int(m.group("n"))
        kind, backend, side = _ort_side(ctx)
        events.add(("onnxruntime-arena", n), i, lambda: OomEvent(
            kind=kind, backend=backend, exception=exc, line=0, message_format="onnxruntime-arena",
            tried_to_allocate_bytes=n, host_bytes=n if kind == "cpu_allocator" else None,
            detail=f"ONNX Runtime's memory arena could not grow by {n} bytes ({side})"))
        return
    m = ctx.search(_OOM_RETRY, text) if "OOM Detected" in text else None
    if m:
        batch = int(m.group("batch"))
        # the retries fold into one event, which says the last size tried; one that reaches
        # zero is the finder giving up, another event (a run that goes on after a retry
        # survived it: parsers/phase.py reads that)
        ev = events.add(("device_runtime", "batch-retry", batch == 0), i, lambda: OomEvent(
            kind="device_runtime", exception=exc, line=0,
            message_format="batch-size-finder" if batch == 0 else BATCH_RETRY_FORMAT))
        ev.detail = ("the trainer caught an out-of-memory error and reduced the batch"
                     + (" to zero: every size it tried ran out of memory" if batch == 0 else f" (last to {batch})"))
        return
    m = ctx.search(_PADDLE_OOM, text) if "Out of memory error on GPU" in text else None
    if m:
        # (Paddle raises it when cudaMalloc itself fails: the CUDA runtime's out of memory)
        _paddle_event(events, i, exc, m, already_allocated_bytes=_size(m.group("alloc")))
        return
    m = ctx.search(_PADDLE_LEGACY, text) if "B in GPU " in text else None
    if m:
        total = ctx.below(i, _PADDLE_LEGACY_TOTAL, lines=2)
        _paddle_event(events, i, exc, m, total_capacity_bytes=int(total.group("n")) if total else None)
        return
    m = ctx.search(_PADDLE_CHUNK, text) if "allocating <= available" in text else None
    if m:
        events.add(("cuda_runtime_error", "Paddle-chunk", m.group("req")), i, lambda: OomEvent(
            kind="cuda_runtime_error", backend="CUDA", exception=exc, line=0, message_format="paddle-gpu-chunk",
            tried_to_allocate_bytes=int(m.group("req")), free_bytes=int(m.group("free")),
            detail="PaddlePaddle's GPU allocator asked for its first chunk of device memory and less was free"))
        return
    m = ctx.search(_ENGINE_BUDGET, text) if any(g in text for g in _ENGINE_GATES) else None
    if m:
        engine, says = (("text-generation-inference", "ran out of device memory in its warmup") if m.group("tgi")
                        else ("SGLang" if m.group("sglang") else "vLLM", "found too little device memory left for its KV cache"))
        cap = to_bytes(m.group("cap"), "GiB") if m.group("cap") else None
        free = to_bytes(m.group("free"), "GiB") if m.group("free") else None
        events.add(("device_runtime", engine), i, lambda: OomEvent(
            kind="device_runtime", backend="CUDA", exception=exc, line=0, message_format="inference-engine-budget",
            total_capacity_bytes=cap, free_bytes=free,
            # the start-up guard measures before the engine allocates anything: PyTorch has
            # reserved nothing yet, so what is not free is held by other processes (and the
            # CUDA context)
            reserved_total_bytes=0 if free is not None else None,
            detail=f"{engine} {says}: " + text[m.start():m.start() + 160].strip()))
        return
    for gate, rx, fmt, backend, strength, detail in _DEVICE_MAP_REFUSALS:
        if gate in text and ctx.search(rx, text):
            events.add(("device_runtime", fmt), i, lambda: OomEvent(
                kind="device_runtime", backend=backend, exception=exc, line=0, message_format=fmt,
                strength=strength, detail=detail))
            return
    m = ctx.search(_NO_BATCH_SIZE, text) if "No executable batch size" in text else None
    if m:
        events.add(("device_runtime", "batch-finder"), i, lambda: OomEvent(
            kind="device_runtime", exception=exc, line=0, message_format="batch-size-finder",
            detail="the batch-size finder halved the batch to zero: every size it tried ran out of memory"))
        return
    if _framework_allocators(ctx, events, i, text, exc):
        return
    m = ctx.search(_CUDA_LIB_ALLOCATOR, text) if "Allocator" in text else None
    if m:
        n = int(m.group("n"))
        events.add(("cuda_runtime_error", "library-allocator", n), i, lambda: OomEvent(
            kind="cuda_runtime_error", backend="CUDA", exception=exc, line=0, tried_to_allocate_bytes=n,
            detail=text[m.start():m.start() + 200].strip()))
        return
    m = ctx.search(_DS_WORKSPACE, text) if "Workspace can't be allocated" in text else None
    if m:
        events.add(("cuda_runtime_error", "library-allocator", None), i, lambda: OomEvent(
            kind="cuda_runtime_error", backend="CUDA", exception=exc, line=0, message_format="library-allocator",
            detail="DeepSpeed's inference kernels could not allocate their workspace on the device"))
        return
    m = ctx.search(_TT_ALLOC, text) if "Not enough space to allocate" in text else None
    if m:
        n = int(m.group("n"))
        events.add(("device_runtime", "TT", n), i, lambda: OomEvent(
            kind="device_runtime", backend="Tenstorrent", exception=exc, line=0, message_format="tt-metal-allocator",
            tried_to_allocate_bytes=n, detail=f"Tenstorrent's allocator could not place a {m.group('where')} buffer"
            + (f" across {m.group('banks')} banks ({m.group('per')} B per bank, {m.group('cap')} B each)"
               if m.group("banks") else "")))
        return
    m = ctx.search(_OPENCL_ALLOC, text) if "MEM_OBJECT_ALLOCATION" in text else None
    if m:
        call = m.group("call")
        events.add(("device_runtime", "OpenCL"), i, lambda: OomEvent(
            kind="device_runtime", backend="OpenCL", exception=exc, line=0, message_format="opencl-allocation",
            detail=f"{call or 'an OpenCL call'} failed: the device could not allocate memory for a buffer"
                   " (CL_MEM_OBJECT_ALLOCATION_FAILURE)"))
        return
    m = ctx.search(_DEVICE_ALLOC, text)
    if m:
        n = m.group("n") or m.group("n2") or m.group("n3") or m.group("n4")
        backend = "HPU" if m.group("n3") else "Neuron" if ctx.search(_NEURON, text) else None
        events.add(("device_runtime", backend, n), i, lambda: OomEvent(
            kind="device_runtime", backend=backend, exception=exc, line=0,
            tried_to_allocate_bytes=int(n) if n else None, detail=text[m.start():m.start() + 200].strip()))
        return
    _npu_xpu(ctx, events, i, text, exc)


def _framework_allocators(ctx: ParseContext, events: _Events, i: int, text: str, exc: Optional[str]) -> bool:
    """Frameworks other than PyTorch saying their own allocator ran out (Jittor, MindSpore,
    nnabla, PaddlePaddle's page-locked host memory, ggml, TensorRT-LLM's executor); True when the
    line is one."""
    if not any(g in text for g in _FRAMEWORK_GATES) or ctx.search(_QUOTED_ADVICE, text):
        return False
    m = ctx.search(_MLC_CHECK, text) if "Insufficient GPU memory error" in text else None
    if m:
        summed = m.group("parts")
        ended = _MLC_END.search(summed) is not None
        if not ended and i + 1 < len(ctx.lines):
            summed += " " + ctx.lines[i + 1].text   # wrapped by a terminal or a paste
            ended = _MLC_END.search(summed) is not None
        # the sum only when the message was read to its end and no figure was cut by a wrap
        # ("(40" / "00.000 MB)"): a part left out would make the check look as if it misfired
        parts = [float(x) for x in _MLC_PART.findall(summed)] if ended else []
        if len(parts) != summed.count("("):
            parts = []
        avail = int(float(m.group("avail")) * 2**20)
        need = int(sum(parts) * 2**20) if parts else None
        events.add(("device_runtime", "mlc-check"), i, lambda: OomEvent(
            kind="device_runtime", backend="CUDA", exception=exc, line=0, message_format="mlc-memory-check",
            tried_to_allocate_bytes=need, free_bytes=avail,
            # (its own figures may say the model fits: then the check misfired, a bug of its estimate)
            symptom=(f"the check's own figures show {avail // 2**20} MiB available for the {need // 2**20} MiB it sums: "
                     "it misfired (its estimate or its reading of the device), not memory pressure")
            if need is not None and avail >= need else None,
            detail="MLC LLM's check found the model's weights and buffers larger than the GPU memory available"))
        return True
    m = ctx.search(_JITTOR_OVERFLOW, text) if "memory is overflow" in text else None
    if m:
        totals = ctx.below(i, _JITTOR_TOTALS)
        total = _size(totals.group("total")) if totals else None
        used = _size(totals.group("used")) if totals else None
        if m.group("where") == "CPU":
            events.add(("cpu_allocator", "jittor"), i, lambda: OomEvent(
                kind="cpu_allocator", backend="host", exception=exc, line=0, message_format="jittor-memory-check",
                host_bytes=used, detail="Jittor's memory check: the host's memory is overflowing"))
        else:
            # (its "Used" counts what its variables need, which may exceed the device: a figure
            # of its own, not an allocator's reserved memory)
            events.add(("device_runtime", "jittor"), i, lambda: OomEvent(
                kind="device_runtime", backend="CUDA", exception=exc, line=0, message_format="jittor-memory-check",
                total_capacity_bytes=total,
                detail="Jittor's memory check: its variables need more GPU memory than the device has"
                       + (f" ({totals.group('used')} of {totals.group('total')})" if totals else "")))
        return True
    m = ctx.search(_MINDSPORE_POOL, text) if "isn't enough" in text else None
    if m:
        size = ctx.search(_MINDSPORE_SIZE, text)
        n = int(size.group("n")) if size else None
        events.add(("device_runtime", "mindspore", n), i, lambda: OomEvent(
            kind="device_runtime", exception=exc, line=0, message_format="mindspore-memory-pool",
            tried_to_allocate_bytes=n, detail="MindSpore's device memory pool could not allocate: "
            + text[m.start():m.start() + 160].strip()))
        return True
    m = ctx.search(_MINDSPORE_TOTAL, text) if "is more than total mem size" in text else None
    if m:
        n, total = int(m.group("n")), int(m.group("total"))
        events.add(("device_runtime", "mindspore", n), i, lambda: OomEvent(
            kind="device_runtime", exception=exc, line=0, message_format="mindspore-dynamic-allocator",
            tried_to_allocate_bytes=n, total_capacity_bytes=total,
            detail=f"MindSpore's memory pool could not add a block of {n} bytes: {int(m.group('used'))} bytes "
                   f"in use, the device's total {total}"))
        return True
    if "Failed to allocate again" in text and ctx.search(_NNABLA_AGAIN, text) \
            and any(_NNABLA_RETRY in ctx.lines[j].text for j in range(max(0, i - 4), i)):
        events.add(("device_runtime", "nnabla"), i, lambda: OomEvent(
            kind="device_runtime", exception=exc, line=0, message_format="nnabla-caching-allocator",
            detail="nnabla's caching allocator freed its cache and still could not allocate"))
        return True
    m = ctx.search(_RMM_POOL, text) if ("pool size" in text or "CNMEM" in text) else None
    if m and (m.group("rmm") or m.group("num") or m.group(0).startswith("CNMEM")):
        n = to_bytes(m.group("num"), m.group("unit")) if m.group("num") else None
        _pool_event(events, i, exc, "the RAPIDS Memory Manager's pool (cuDF, cuML, XGBoost)", "rmm-memory-pool", n)
        return True
    m = ctx.search(_SPARK_RAPIDS_OOM, text) if "RetryOOM" in text else None
    if m:
        host = m.group("side") == "Cpu"
        events.add(("spark-rapids", host), i, lambda: OomEvent(
            kind="cpu_allocator" if host else "cuda_runtime_error", backend="host" if host else "CUDA",
            exception=m.group(0)[m.group(0).rfind(".") + 1:], line=0, message_format="spark-rapids-retry-oom",
            detail=f"the RAPIDS Accelerator for Spark could not get {'host' if host else 'GPU'} memory for a task by "
                   "spilling, retrying or splitting its input"))
        return True
    m = ctx.search(_GGML_BUFFER, text) if "buffer of size" in text else None
    if m:
        n = int(m.group("n") or m.group("n2"))
        be = "CPU" if m.group("cpu") else m.group("be")
        kind, backend = _GGML_KIND[be]
        dev = int(m.group("dev")) if m.group("dev") and kind != "cpu_allocator" else None
        fmt, host = "ggml-buffer", n if kind == "cpu_allocator" else None
        if m.group("host"):
            # the backend's page-locked host buffer (cudaMallocHost), not the device's memory
            kind, fmt, host, dev = "cuda_runtime_error", "cuda-driver-host-alloc", n, None
        # the same failure its backend's own line reported just above (ggml's CUDA backend:
        # "allocating 1234.00 MiB on device 0: cudaMalloc failed"): one event (that line rounds
        # to a hundredth of a MiB: 8900.01 MiB is this line's 9332334592 bytes)
        same = _event_above(ctx, events, i, lambda ev: ev.tried_to_allocate_bytes is not None
                            and abs(ev.tried_to_allocate_bytes - n) <= _GGML_MIB_ROUNDING, here=True)
        if same is not None:
            if same.kind == "cuda_runtime_error" and kind not in ("cuda_runtime_error", "cpu_allocator") \
                    and not m.group("host"):
                # ggml's HIP and MUSA builds run its CUDA backend's code under CUDA's names
                # ("cudaMalloc failed"); the buffer's backend ("ROCm0") says whose memory it was
                same.kind, same.backend = kind, backend
            events.cover(same, i)
            return True
        what = f"{be}{m.group('dev') or ''}{m.group('host') or ''}"
        events.add(("ggml-buffer", what, n), i, lambda: OomEvent(
            kind=kind, backend=backend, exception=exc, line=0, message_format=fmt,
            tried_to_allocate_bytes=n, host_bytes=host, device_index=dev,
            detail=f"ggml could not allocate a {what} buffer of {n} bytes"
                   + (" (page-locked host memory)" if m.group("host") else "")))
        return True
    m = ctx.search(_TRTLLM_EXECUTOR, text) if "insufficient GPU memory" in text else None
    if m:
        total, free = (to_bytes(x.group("n"), "GiB") if (x := ctx.below(i, rx, _TRTLLM_TABLE)) else None
                       for rx in (_TRTLLM_TOTAL, _TRTLLM_FREE))
        events.add(("device_runtime", "TensorRT-LLM"), i, lambda: OomEvent(
            kind="device_runtime", backend="CUDA", exception=exc, line=0, message_format="inference-engine-budget",
            total_capacity_bytes=total, free_bytes=free,
            detail="TensorRT-LLM's executor could not create a component (its KV cache, a drafter) in the GPU "
                   "memory left"))
        return True
    m = ctx.search(_PADDLE_PINNED, text) if "PinnedPlace" in text else None
    if m:
        n = int(m.group("n"))
        call = m.group("call")
        events.add(("cuda_runtime_error", "call", call, n, None), i, lambda: OomEvent(
            kind="cuda_runtime_error", backend="HIP" if call.startswith("hip") else "CUDA", exception=exc, line=0,
            message_format="cuda-driver-host-alloc", tried_to_allocate_bytes=n, host_bytes=n,
            detail=f"{call} of {n} bytes failed (page-locked host memory, PaddlePaddle's pinned allocator)"))
        return True
    return False


def _npu_xpu(ctx: ParseContext, events: _Events, i: int, text: str, exc: Optional[str]) -> None:
    m = ctx.search(_NPU_WORKSPACE, text)
    if m:
        events.add(("npu", "workspace", m.group("size")), i, lambda: OomEvent(
            kind="npu", backend="NPU", exception=exc, line=0, message_format="npu-workspace-allocator",
            tried_to_allocate_bytes=_size(m.group("size")), free_bytes=_size(m.group("free")),
            device_index=int(m.group("dev")) if m.group("dev") else None,
            detail="operator workspace (NPUWorkspaceAllocator)"))
        return
    m = ctx.search(_NPU_PIN, text)
    if m:
        events.add(("npu", "pin", m.group("size")), i, lambda: OomEvent(
            kind="npu", backend="NPU", exception=exc, line=0, message_format="npu-pin-memory",
            host_bytes=_size(m.group("size")), detail="pinned host memory could not be allocated"))
        return
    m = ctx.search(_NPU_DEVICE, text)
    if m:
        events.add(("npu", "device", m.group("dev")), i, lambda: OomEvent(
            kind="npu", backend="NPU", exception=exc, line=0, device_index=int(m.group("dev")),
            message_format="npu-device-id"))
        return
    m = ctx.search(_NPU_REJECTED, text)
    if m:
        events.add(("npu", "rejected", m.group("size")), i, lambda: OomEvent(
            kind="npu", backend="NPU", exception=exc, line=0, message_format="npu-preemptive-reject",
            tried_to_allocate_bytes=_size(m.group("size")), detail="per_process_memory_fraction limit"))
        return
    m = ctx.search(_CANN_OOM, text) if "EL0004" in text or "rtMalloc execute failed" in text else None
    if m:
        # the report's lines (indented, up to the next record on this rank) say which device
        # and how much: one event for the whole report, its lines taken
        block = [i]
        for j in range(i + 1, min(len(ctx.lines), i + 12)):
            ln = ctx.lines[j]
            if not ln.text[:1].isspace() or ln.rank != ctx.lines[i].rank:
                break
            block.append(j)
        dev = size = None
        for j in block:
            t = ctx.lines[j].text
            if dev is None and (d := ctx.search(_CANN_DEVICE, t)):
                dev = int(d.group("dev"))
            if size is None and (z := ctx.search(_CANN_SIZE, t)):
                size = int(z.group("n"))
        ev = events.add(("npu", "cann", dev), i, lambda: OomEvent(
            kind="npu", backend="NPU", exception=exc, line=0, message_format="cann-el0004",
            device_index=dev, tried_to_allocate_bytes=size,
            detail="the Ascend runtime could not allocate device memory (EL0004 / rtMalloc)"))
        for j in block[1:]:
            events.cover(ev, j)
        return
    m = ctx.search(_HPU_WORKSPACE, text) if "workspace Allocation of size" in text else None
    if m:
        n = int(m.group("n"))
        events.add(("device_runtime", "HPU-workspace", n), i, lambda: OomEvent(
            kind="device_runtime", backend="HPU", exception=exc, line=0, message_format="hpu-workspace",
            tried_to_allocate_bytes=n, detail="Gaudi's graph workspace could not be allocated on the device"))
        return
    m = ctx.search(_NPU_ACL, text)
    if m:
        events.add(("npu", "acl"), i, lambda: OomEvent(
            kind="npu", strength="likely", backend="NPU", exception=exc, line=0,
            detail="ACL_ERROR_RT_MEMORY_ALLOCATION"))
        return
    m = ctx.search(_VULKAN, text) if "OUT_OF_DEVICE_MEMORY" in text or "vkAllocateMemory" in text else None
    if m:
        events.add(("device_runtime", "vulkan"), i, lambda: OomEvent(
            kind="device_runtime", backend="Vulkan", exception=exc, line=0, message_format="library-allocator",
            detail="a Vulkan renderer could not allocate device memory: " + text[m.start():m.start() + 120].strip()))
        return
    m = ctx.search(_XPU, text)
    if m:
        code = m.group("code")
        certain = "OUT_OF_DEVICE_MEMORY" in code
        events.add(("xpu", code), i, lambda: OomEvent(
            kind="xpu", strength="certain" if certain else "likely", backend="XPU", exception=exc,
            line=0, detail=code))


def _fold_nccl_errors(ctx: ParseContext, events: _Events) -> None:
    """The torch-side "unhandled cuda error" is the same failure as NCCL's OOM WARN."""
    ev = next((e for k, e in events.by_key.items() if k[0] == "nccl"), None)
    if ev is None:
        return
    for i in ctx.lines_with(("nhandled",)):
        ln = ctx.lines[i]
        if ln.no in events.taken:
            continue
        if ctx.search(_NCCL_UNHANDLED, ln.text):
            events.cover(ev, i)
            exc = _exception(ctx, ln.text)
            if exc and ev.exception is None:
                ev.exception = exc
            if ln.rank is not None and ln.rank not in ev.ranks:
                ev.ranks.append(ln.rank)


def _wrappers(ctx: ParseContext, events: _Events) -> None:
    """FSDP's clone() failure and the DataLoader pin-memory thread hide the OOM they wrap."""
    for i in ctx.lines_with(("Failed to clone()", "pin memory thread")):
        text = ctx.lines[i].text
        if "Failed to clone()" in text:
            m = ctx.search(_FSDP_CLONE, text) or ctx.rejoined(i, _FSDP_CLONE)
            if m:
                _fsdp_clone(ctx, events, i, m)
        elif "pin memory thread" in text:
            m = ctx.search(_PIN_THREAD, text)
            if m:
                _pin_thread(ctx, events, i, m)


def _event_near(ctx: ParseContext, no: int, after: int) -> Optional[OomEvent]:
    """The first OOM event whose message is on line ``no`` or within ``after`` lines below."""
    best = None
    for ev in ctx.facts.oom_events:
        lines = [ev.line] + [e.line for e in ev.evidence]
        hits = [x for x in lines if no <= x <= no + after]
        if hits and (best is None or min(hits) < best[0]):
            best = (min(hits), ev)
    return best[1] if best else None


def _add_detail(ev: OomEvent, note: str) -> None:
    if ev.detail is None:
        ev.detail = note
    elif note not in ev.detail:
        ev.detail = f"{ev.detail}; {note}"


def _fsdp_clone(ctx: ParseContext, events: _Events, i: int, m: re.Match) -> None:
    note = f"FSDP state-dict cloning: clone() of {m.group('name')} on rank {m.group('rank')} failed"
    ev = _event_near(ctx, ctx.lines[i].no, 0)
    if ev is not None:
        _add_detail(ev, note)
        return
    rank = int(m.group("rank"))
    ev = events.add(("fsdp-clone", m.group("name")), i, lambda: OomEvent(
        kind="cuda_runtime_error", strength="likely", backend="CUDA", line=0,
        exception=_exception(ctx, ctx.lines[i].text), detail=note))
    if rank not in ev.ranks:
        ev.ranks.append(rank)


def _pin_thread(ctx: ParseContext, events: _Events, i: int, m: re.Match) -> None:
    ev = _event_near(ctx, ctx.lines[i].no, 80)
    dev = int(m.group("dev")) if m.group("dev") else None
    if ev is None:
        if "OutOfMemory" not in m.group("exc"):
            return
        ev = events.add(("pin-thread", dev), i, lambda: OomEvent(
            kind="cuda_runtime_error", strength="likely", backend="CUDA", line=0,
            exception=m.group("exc"), detail="pin memory thread"))
    else:
        events.cover(ev, i)
        _add_detail(ev, "pin memory thread")
    if ev.device_index is None and dev is not None:
        ev.device_index = dev


# XGBoost's report of a failed device allocation, under its "Memory allocation error on worker 0:
# std::bad_alloc: ..." (common/device_helpers.cuh): "- Free memory: 11310923776" and "- Requested
# memory: 47996" (bytes, or a size with its unit in releases that format them: "1.95398GB")
_XGB_FIGURE = lazy(r"^\s*- (?P<what>Free|Requested) memory: (?P<size>\d[\d.]{0,24}\s*(?:[KMGTP]i?B|B)?)\s*$")


def _xgboost_figures(ctx: ParseContext, events: _Events) -> None:
    for ev in events.by_key.values():
        idx = ctx.index_of(ev.line)
        if idx is None or "Memory allocation error on worker" not in ctx.lines[idx].text:
            continue
        for ln in ctx.lines[idx + 1:idx + 3]:
            m = ctx.search(_XGB_FIGURE, ln.text)
            if m is None:
                break
            size = m.group("size").strip()
            n = int(size) if size.isdigit() else parse_size(size)
            if m.group("what") == "Free" and ev.free_bytes is None:
                ev.free_bytes = n
            elif m.group("what") == "Requested" and ev.tried_to_allocate_bytes is None:
                ev.tried_to_allocate_bytes = n


def parse(ctx: ParseContext) -> None:
    events = _Events(ctx)
    for i in ctx.lines_with(_QUICK):
        _line_events(ctx, events, i)
    _xgboost_figures(ctx, events)
    _fold_nccl_errors(ctx, events)
    _wrappers(ctx, events)
