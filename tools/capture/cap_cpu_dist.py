import os, sys, time
import torch, torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record
what = sys.argv[1]

@record
def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if what == "cpuoom":
        x = torch.empty(2**50, dtype=torch.uint8)
    elif what == "sigkill":
        if rank == 1:
            time.sleep(1)
            os.kill(os.getpid(), 9)
        time.sleep(30)

if __name__ == "__main__":
    main()
