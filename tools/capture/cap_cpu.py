"""Real failure output that a CPU-only torch can produce (no accelerator needed)."""
import os, sys, time
import torch
what = sys.argv[1]
if what == "cpualloc":
    x = torch.empty(2**50, dtype=torch.uint8)
elif what == "cpualloc_model":
    # the shape a user meets: a layer far too large for host memory
    layer = torch.nn.Linear(65536, 163840)  # 40 GiB of float32 weights
elif what == "dataloader":
    class DS(torch.utils.data.Dataset):
        def __len__(self): return 100
        def __getitem__(self, i):
            if i == 3: os.kill(os.getpid(), 9)
            return torch.zeros(4)
    for b in torch.utils.data.DataLoader(DS(), num_workers=2, batch_size=2):
        pass
elif what == "mismatch":
    a = torch.zeros(4, device="meta"); b = torch.zeros(4)
    print(a.mul_(b))
