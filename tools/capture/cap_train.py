"""Training-shaped failures on a CUDA GPU: what a user's job prints when it dies.

Each case is a small but real training (or evaluation, or loading) program whose sizes are
chosen from the device's free memory so that it fails where its name says, on any card.
Run one case per process: ``python3 cap_train.py <case>``. ``capture.sh`` runs them all.
"""
import os
import sys
import time

import torch

GiB = 2**30
what = sys.argv[1]
dev = torch.device("cuda:0")


def free_bytes() -> int:
    return torch.cuda.mem_get_info(0)[0]


def mlp(width: int, depth: int) -> torch.nn.Module:
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers).to(dev)


def train_steps(model, batch_rows: int, width: int, steps: int = 3, log_memory: bool = False):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for step in range(steps):
        x = torch.randn(batch_rows, width, device=dev)
        loss = model(x).float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if log_memory:
            print(f"step {step} loss {loss.item():.4f} "
                  f"allocated {torch.cuda.memory_allocated() / GiB:.2f} GiB "
                  f"reserved {torch.cuda.memory_reserved() / GiB:.2f} GiB", flush=True)


if what == "forward":
    # the batch's activations do not fit: the first layers' outputs fill the card
    width = 8192
    model = mlp(width, 8)
    rows = int(free_bytes() * 0.3) // (width * 4)
    print(f"batch of {rows} rows x {width}", flush=True)
    train_steps(model, rows, width)
elif what == "backward":
    # the forward pass fits; its saved activations leave too little for the gradients
    width, depth = 8192, 8
    model = mlp(width, depth)
    rows = int(free_bytes() * 0.86 / (depth + 1)) // (width * 4)
    print(f"batch of {rows} rows x {width}", flush=True)
    train_steps(model, rows, width)
elif what == "optimizer":
    # weights and gradients fit; AdamW's two state tensors per weight do not
    width = 32768
    n = max(1, int(free_bytes() * 0.3) // (width * width * 4))
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width, bias=False) for _ in range(n)]).to(dev)
    print(f"{n} layers, {sum(p.numel() for p in model.parameters()) / 1e9:.2f} B parameters", flush=True)
    train_steps(model, 8, width)
elif what == "leak":
    # the running loss keeps every step's graph alive: allocated memory climbs each step
    width = 8192
    model = mlp(width, 4)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    rows = int(free_bytes() * 0.005) // (width * 4)
    total = 0
    for step in range(10_000):
        x = torch.randn(rows, width, device=dev)
        loss = model(x).pow(2).mean()
        total = total + loss  # keeps the graph (and its saved activations) of every step
        loss.backward(retain_graph=True)
        opt.step()
        opt.zero_grad(set_to_none=True)
        print(f"step {step} loss {loss.item():.4f} running {total.item():.4f} "
              f"allocated {torch.cuda.memory_allocated() / GiB:.2f} GiB", flush=True)
elif what == "eval":
    # evaluation without torch.no_grad(), keeping every batch's output on the GPU
    width = 8192
    model = mlp(width, 4)
    train_steps(model, 1024, width, steps=2)
    print("evaluating", flush=True)
    model.eval()
    rows = int(free_bytes() * 0.01) // (width * 4)

    def evaluate(model, batches):
        outputs = []
        for i in range(batches):
            x = torch.randn(rows, width, device=dev)
            outputs.append(model(x))
            print(f"eval batch {i} allocated {torch.cuda.memory_allocated() / GiB:.2f} GiB", flush=True)
        return torch.cat(outputs)

    evaluate(model, 10_000)
elif what == "ckpt_load":
    # resuming: a checkpoint loaded straight onto a GPU that the new run already fills
    path = "/tmp/cap_ckpt.pt"
    state = {f"layer{i}.weight": torch.randn(16384, 16384) for i in range(4)}  # 4 GiB
    torch.save({"model": state, "step": 1000}, path)
    del state
    print("saved", os.path.getsize(path), "bytes", flush=True)
    model = mlp(8192, 2)
    hold = torch.empty(free_bytes() - 2 * GiB, dtype=torch.uint8, device=dev)
    print("resuming from", path, flush=True)

    def load_checkpoint(path):
        return torch.load(path, map_location="cuda", weights_only=True)

    ckpt = load_checkpoint(path)
elif what == "compiled":
    # the same activation blow-up inside a torch.compile'd forward
    width = 8192
    model = torch.compile(mlp(width, 8))
    rows = int(free_bytes() * 0.3) // (width * 4)
    print(f"batch of {rows} rows x {width}", flush=True)
    train_steps(model, rows, width)
elif what == "hf_trainer":
    from torch.utils.data import Dataset
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    class Random(Dataset):
        def __init__(self, n, seq):
            self.n, self.seq = n, seq

        def __len__(self):
            return self.n

        def __getitem__(self, i):
            ids = torch.randint(0, 50257, (self.seq,))
            return {"input_ids": ids, "labels": ids}

    cfg = GPT2Config(n_layer=24, n_embd=1024, n_head=16, n_positions=1024)
    model = GPT2LMHeadModel(cfg)
    args = TrainingArguments(output_dir="/tmp/cap_hf", per_device_train_batch_size=96, max_steps=20,
                             logging_steps=1, report_to="none", save_strategy="no", bf16=True)
    Trainer(model=model, args=args, train_dataset=Random(10_000, 1024)).train()
elif what == "hf_eval":
    # Trainer evaluation keeps every batch's logits on the GPU until the end
    from torch.utils.data import Dataset
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    class Random(Dataset):
        def __init__(self, n, seq):
            self.n, self.seq = n, seq

        def __len__(self):
            return self.n

        def __getitem__(self, i):
            ids = torch.randint(0, 50257, (self.seq,))
            return {"input_ids": ids, "labels": ids}

    cfg = GPT2Config(n_layer=2, n_embd=256, n_head=4, n_positions=1024)
    model = GPT2LMHeadModel(cfg)
    args = TrainingArguments(output_dir="/tmp/cap_hf", per_device_train_batch_size=8,
                             per_device_eval_batch_size=16, max_steps=4, eval_strategy="steps",
                             eval_steps=2, logging_steps=1, report_to="none", save_strategy="no")
    Trainer(model=model, args=args, train_dataset=Random(1000, 1024), eval_dataset=Random(4000, 1024)).train()
elif what == "lightning":
    import lightning as L

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(*[torch.nn.Linear(8192, 8192) for _ in range(8)])

        def training_step(self, batch, i):
            (x,) = batch
            return self.net(x).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters())

    rows = int(free_bytes() * 0.15) // (8192 * 4)
    data = torch.utils.data.TensorDataset(torch.zeros(rows, 8192))
    L.Trainer(accelerator="gpu", devices=1, max_epochs=1, enable_checkpointing=False, logger=False).fit(
        Module(), torch.utils.data.DataLoader(data, batch_size=rows))
elif what == "jax":
    import jax
    import jax.numpy as jnp

    @jax.jit
    def step(w, x):
        h = x
        for _ in range(8):
            h = jnp.tanh(h @ w)
        return (h ** 2).mean()

    w = jnp.ones((8192, 8192), jnp.float32)
    limit = jax.devices()[0].memory_stats()["bytes_limit"]
    rows = int(limit * 0.5) // (8192 * 4)
    x = jnp.ones((rows, 8192), jnp.float32)
    print(jax.grad(step)(w, x))
elif what == "cupy":
    import cupy
    size = int(free_bytes() * 0.6)
    keep = cupy.zeros(size, dtype=cupy.uint8)
    more = cupy.zeros(size, dtype=cupy.uint8)
elif what == "cublas":
    # torch's context exists; raw allocations outside torch take the rest, then the first
    # matrix product must create a cuBLAS handle and workspace
    a = torch.randn(256, 256, device=dev)
    import cupy
    held = []
    for chunk in (1024 * 2**20, 64 * 2**20, 2**20):
        while True:
            try:
                held.append((cupy.cuda.runtime.malloc(chunk), chunk))
            except cupy.cuda.runtime.CUDARuntimeError:
                break
    print("held", sum(c for _, c in held) // 2**20, "MiB outside torch", flush=True)
    print((a @ a).sum().item())
elif what == "triton_smem":
    import triton
    import triton.language as tl

    @triton.jit
    def big_tile(a_ptr, out_ptr, BLOCK: tl.constexpr):
        r = tl.arange(0, BLOCK)
        tile = tl.load(a_ptr + r[:, None] * BLOCK + r[None, :])
        tl.store(out_ptr + r[:, None] * BLOCK + r[None, :], tl.dot(tile, tile))

    a = torch.randn(512, 512, device=dev)
    out = torch.empty_like(a)
    big_tile[(1,)](a, out, BLOCK=512)
    print(out.sum().item())
elif what == "shm":
    # DataLoader workers hand batches over through /dev/shm; capture.sh runs this case
    # with a small tmpfs mounted there
    class Big(torch.utils.data.Dataset):
        def __len__(self):
            return 64

        def __getitem__(self, i):
            return torch.randn(4, 1024, 1024)  # 16 MiB a sample

    for i, batch in enumerate(torch.utils.data.DataLoader(Big(), batch_size=4, num_workers=2)):
        print("batch", i, tuple(batch.shape), flush=True)
elif what == "nccl_dup":
    # two ranks on one GPU with NCCL: a setup error, not memory
    import torch.distributed as dist
    dist.init_process_group("nccl")
    torch.cuda.set_device(0)
    t = torch.ones(1, device=dev)
    dist.all_reduce(t)
    torch.cuda.synchronize()
    print(t.item())
else:
    sys.exit(f"unknown case {what}")
time.sleep(0.1)
