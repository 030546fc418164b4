import os, sys, time
import torch
what = sys.argv[1]
dev = torch.device("cuda:0")
GiB = 2**30
cap = torch.cuda.get_device_properties(0).total_memory
if what == "plain":
    x = torch.empty(cap // 2 // 4 * 3, dtype=torch.float32, device=dev)
elif what == "frag":
    # one big cached segment, split into chunks, every other chunk freed: the free
    # memory stays reserved (the segment is partly in use, so it cannot be released)
    seg = int(cap * 0.9) // (2 * 2**20) * (2 * 2**20)
    big = torch.empty(seg, dtype=torch.uint8, device=dev); del big
    chunk = seg // 40 // (2 * 2**20) * (2 * 2**20)
    blocks = [torch.empty(chunk, dtype=torch.uint8, device=dev) for _ in range(40)]
    del blocks[::2]
    y = torch.empty(int(cap * 0.3), dtype=torch.uint8, device=dev)
elif what == "fraction":
    torch.cuda.set_per_process_memory_fraction(0.05, 0)
    keep = torch.empty(2 * GiB, dtype=torch.uint8, device=dev)
    x = torch.empty(20 * GiB, dtype=torch.uint8, device=dev)
elif what == "eb":
    x = torch.empty(2**61, dtype=torch.uint8, device=dev)
elif what == "mempool":
    pool = torch.cuda.MemPool()
    with torch.cuda.use_mem_pool(pool):
        a = torch.empty(8 * GiB, dtype=torch.uint8, device=dev)
    b = torch.empty(400 * GiB, dtype=torch.uint8, device=dev)
elif what == "pinned":
    x = torch.empty(2**40, dtype=torch.uint8, pin_memory=True)
elif what == "cpualloc":
    x = torch.empty(2**50, dtype=torch.uint8)
elif what == "summary":
    keep = torch.empty(4 * GiB, dtype=torch.uint8, device=dev)
    try:
        x = torch.empty(400 * GiB, dtype=torch.uint8, device=dev)
    except torch.OutOfMemoryError:
        import traceback; traceback.print_exc()
    print(torch.cuda.memory_summary())
    s = torch.cuda.memory_stats(); print("num_ooms", s["num_ooms"], "num_alloc_retries", s["num_alloc_retries"])
    print(torch.cuda.list_gpu_processes())
elif what in ("hold", "full"):
    if what == "hold":
        h = torch.empty(int(cap * 0.45), dtype=torch.uint8, device=dev)
    else:  # leave almost nothing free, so that another process cannot even make a context
        free, _ = torch.cuda.mem_get_info(0)
        h = torch.empty(free - 96 * 2**20, dtype=torch.uint8, device=dev)
    print("holding", h.numel(), "pid", os.getpid(), flush=True)
    open("/tmp/cap_ready", "w").close()
    time.sleep(300)
elif what == "ctx":
    a = torch.randn(1024, 1024, device=dev)
    print((a @ a).sum().item())
elif what == "dataloader":
    import killed_worker  # beside this script
    killed_worker.run()
elif what == "illegal":
    # a store far outside any allocation; torch sees the sticky error at the next sync
    a = torch.zeros(16, device=dev)
    try:
        import triton, triton.language as tl
        @triton.jit
        def _poke(p, off):
            tl.store(p + off, 1.0)
        _poke[(1,)](a, 1 << 40)
    except Exception as e:
        print("triton path failed:", repr(e)[:300], flush=True)
        import cupy
        k = cupy.RawKernel(r'extern "C" __global__ void poke(float* p){ p[1ULL<<40] = 1.0f; }', 'poke')
        k((1,), (1,), (cupy.uint64(a.data_ptr()),))
    torch.cuda.synchronize()
    print(a.sum().item())
elif what == "assert":
    t = torch.zeros(4, device=dev)
    i = torch.tensor([7], device=dev)
    print(t[i])
    torch.cuda.synchronize()
elif what == "mismatch":
    a = torch.zeros(4, device=dev); b = torch.zeros(4)
    a.mul_(b)
