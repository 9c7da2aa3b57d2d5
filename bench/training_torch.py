"""PyTorch peer for bench/training.exs: the same MLP, Adam, cross-entropy, batches cut from a
resident dataset. Usage: python3 bench/training_torch.py <device> <sizes> <batch> <steps> [warmup]
Prints: torch <sizes> batch <b> <device>: <ms> ms/step, <samples/s> samples/s"""
import sys
import time

import torch

device = sys.argv[1] if len(sys.argv) > 1 else "cpu"
sizes = [int(s) for s in (sys.argv[2] if len(sys.argv) > 2 else "784,1024,1024,10").split(",")]
batch = int(sys.argv[3]) if len(sys.argv) > 3 else 512
steps = int(sys.argv[4]) if len(sys.argv) > 4 else 20
warmup = int(sys.argv[5]) if len(sys.argv) > 5 else 3

layers = []
for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
    layers.append(torch.nn.Linear(a, b))
    if i + 2 < len(sizes):
        layers.append(torch.nn.ReLU())
model = torch.nn.Sequential(*layers).to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
loss_fn = torch.nn.CrossEntropyLoss()
n = batch * 8
x_all = torch.randn(n, sizes[0], device=device)
y_all = torch.randint(0, sizes[-1], (n,), device=device)


def step(k):
    lo = (k % 8) * batch
    x, y = x_all[lo:lo + batch], y_all[lo:lo + batch]
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()


def sync():
    if device.startswith("cuda"):
        torch.cuda.synchronize()


for k in range(warmup):
    step(k)
sync()
t0 = time.perf_counter()
for k in range(steps):
    step(k)
sync()
ms = (time.perf_counter() - t0) * 1e3 / steps
print(f"torch {'-'.join(map(str, sizes))} batch {batch} {device}: {ms:.3f} ms/step, {batch / ms * 1e3:.0f} samples/s")
