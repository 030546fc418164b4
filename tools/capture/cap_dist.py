import os, sys, time
import torch, torch.distributed as dist
what = sys.argv[1]
dist.init_process_group("gloo")
rank = dist.get_rank()
GiB = 2**30
if what == "share":
    x = torch.empty(int(torch.cuda.get_device_properties(0).total_memory * 0.6), dtype=torch.uint8, device="cuda")
    dist.barrier()
elif what == "oom":
    torch.cuda.set_device(0)
    x = torch.empty(500 * GiB, dtype=torch.uint8, device="cuda")
elif what == "sigkill":
    if rank == 1:
        os.kill(os.getpid(), 9)
    time.sleep(30)
