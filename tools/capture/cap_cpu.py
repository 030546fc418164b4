"""Real failure output that a CPU-only torch can produce (no accelerator needed)."""
import sys
import torch
what = sys.argv[1]
if what == "cpualloc":
    x = torch.empty(2**50, dtype=torch.uint8)
elif what == "cpualloc_model":
    # the shape a user meets: a layer far too large for host memory
    layer = torch.nn.Linear(65536, 163840)  # 40 GiB of float32 weights
elif what == "dataloader":
    import killed_worker  # beside this script
    killed_worker.run()
elif what == "mismatch":
    a = torch.zeros(4, device="meta"); b = torch.zeros(4)
    print(a.mul_(b))
