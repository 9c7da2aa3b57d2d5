# The PyTorch peer of bench/gpu/data_parallel.exs: the same MLP (768 inputs, LAYERS hidden
# layers of WIDTH gelu units, 1000 classes, cross-entropy, Adam lr 1e-4 with PyTorch's fused
# update, f32 with TF32 products) trained with DistributedDataParallel (NCCL, default 25 MiB
# gradient buckets overlapped with the backward pass) on 1, 2 and every GPU of the host, the
# same global batch split over the GPUs. Each configuration: EPOCHS epochs of STEPS steps on
# random data already on the GPUs; the step time is the median over the epochs after the first
# of the epoch's wall time over STEPS (as the ExBurn script measures it).
#
#     python3 bench/gpu/data_parallel_torch.py        (ROWS, LAYERS, WIDTH, STEPS, EPOCHS as there)
#
# Prints "torch_ddp rows <r> gpus <n> ms <median ms/step> loss <last epoch's mean loss>".
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

LAYERS = int(os.environ.get("LAYERS", "7"))
WIDTH = int(os.environ.get("WIDTH", "4096"))
STEPS = int(os.environ.get("STEPS", "20"))
EPOCHS = int(os.environ.get("EPOCHS", "4"))
ROWS = [int(r) for r in os.environ.get("ROWS", "8192,16384").split(",")]


def model():
    dims = [768] + [WIDTH] * LAYERS
    layers = []
    for a, b in zip(dims, dims[1:]):
        layers += [torch.nn.Linear(a, b), torch.nn.GELU()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(WIDTH, 1000))


def run(rank, world, rows, port, out):
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.cuda.set_device(rank)
    if world > 1:
        dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    torch.manual_seed(11)
    net = model().cuda()
    if world > 1:
        net = torch.nn.parallel.DistributedDataParallel(net, device_ids=[rank])
    opt = torch.optim.Adam(net.parameters(), lr=1e-4, fused=True)
    per = rows // world
    g = torch.Generator(device="cuda").manual_seed(rows + rank)
    x = torch.randn(STEPS, per, 768, device="cuda", generator=g)
    y = torch.randint(0, 1000, (STEPS, per), device="cuda", generator=g)
    lossf = torch.nn.CrossEntropyLoss()
    times, last = [], 0.0
    for _ in range(EPOCHS):
        torch.cuda.synchronize()
        if world > 1:
            dist.barrier()
        t0 = time.perf_counter()
        total = torch.zeros((), device="cuda")
        for s in range(STEPS):
            opt.zero_grad(set_to_none=True)
            loss = lossf(net(x[s]), y[s])
            loss.backward()
            opt.step()
            total += loss.detach()
        last = total.item() / STEPS
        times.append((time.perf_counter() - t0) * 1000 / STEPS)
    if rank == 0:
        t = sorted(times[1:])
        out.put((t[len(t) // 2], last))
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    gpus = torch.cuda.device_count()
    ctx = mp.get_context("spawn")
    for rows in ROWS:
        for n in sorted({1, 2, gpus}):
            if n > gpus:
                continue
            q = ctx.Queue()
            port = 29500 + rows % 1000 + n
            procs = [ctx.Process(target=run, args=(r, n, rows, port, q)) for r in range(n)]
            for p in procs:
                p.start()
            ms, loss = q.get()
            for p in procs:
                p.join()
            print(f"torch_ddp rows {rows} gpus {n} ms {ms:.3f} loss {loss:.6f}", flush=True)
    sys.exit(0)
