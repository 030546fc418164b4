"""Print the allocator setting, fail with a CUDA OOM the first time, succeed the second.

    python env_then_oom.py STATE_FILE

Also prints OOMDOCTOR_TEST_KEEP and the working directory, so a test can check that
nothing but the environment variable named by the fix changed between attempts.
"""
import os
import sys

state = sys.argv[1]
print(f"PYTORCH_CUDA_ALLOC_CONF={os.environ.get('PYTORCH_CUDA_ALLOC_CONF', '<unset>')}")
print(f"OOMDOCTOR_TEST_KEEP={os.environ.get('OOMDOCTOR_TEST_KEEP', '<unset>')}")
print(f"cwd={os.getcwd()} argv={sys.argv[1:]}")
sys.stdout.flush()
if os.path.exists(state):
    print("training finished")
    sys.exit(0)
with open(state, "w") as fh:
    fh.write("first attempt failed\n")
sys.stderr.write(
    "Traceback (most recent call last):\n"
    '  File "/opt/train.py", line 88, in <module>\n'
    "    loss.backward()\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
    "of 79.15 GiB of which 1.20 GiB is free. Including non-PyTorch memory, this process has 77.94 GiB "
    "memory in use. Of the allocated memory 60.12 GiB is allocated by PyTorch, and 16.30 GiB is reserved "
    "by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for "
    "Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)\n"
)
sys.exit(1)
