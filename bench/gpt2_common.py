# Shared by the Python peers of the GPT-2 benchmarks (bench/gpt2_layer.py, bench/gpt2_small.py,
# bench/gpt2_generate.py) and of bench/resnet50.py: the parameters' names and shapes in the
# order bench/support/gpt2.exs writes the starting weights, reading that file, the token ids,
# the median time of a call, a timed training step of PyTorch or JAX, the GPU memory a process
# holds, and the lines the Elixir side reads.
import os
import subprocess
import time

import numpy as np


def shapes(layers, d, vocab, positions):
    """The parameters' names and shapes, in file order."""
    layer = [
        ("ln1_g", (d,)), ("ln1_b", (d,)), ("w_qkv", (d, 3 * d)), ("b_qkv", (3 * d,)),
        ("w_o", (d, d)), ("b_o", (d,)), ("ln2_g", (d,)), ("ln2_b", (d,)),
        ("w_1", (d, 4 * d)), ("b_1", (4 * d,)), ("w_2", (4 * d, d)), ("b_2", (d,)),
    ]
    return (
        [("wte", (vocab, d)), ("wpe", (positions, d))]
        + [(f"h{i}.{k}", s) for i in range(layers) for k, s in layer]
        + [("ln_f_g", (d,)), ("ln_f_b", (d,))]
    )


def weights(path, shapes):
    """The starting weights in `path` (f32, in the order of `shapes`) by name."""
    flat = np.fromfile(path, dtype="<f4")
    out, at = {}, 0
    for name, shape in shapes:
        n = int(np.prod(shape))
        out[name] = flat[at : at + n].reshape(shape)
        at += n
    assert at == flat.size, (at, flat.size)
    return out


def tokens(batch, length, vocab):
    """Token ids (i * 7919 + 13) mod vocab, as Bench.Gpt2.tokens/3 makes them."""
    return ((np.arange(batch * length, dtype=np.int64) * 7919 + 13) % vocab).reshape(batch, length)


def median_ms(f, rounds, warmup=3, sync=lambda r: r):
    """`warmup` calls of `f` (their results through `sync`), then the median milliseconds of
    `rounds` more calls, each ended by `sync`: `(ms, warm-up results)`."""
    warm = [sync(f()) for _ in range(warmup)]
    ts = []
    for _ in range(rounds):
        t = time.perf_counter()
        sync(f())
        ts.append(time.perf_counter() - t)
    ts.sort()
    return ts[len(ts) // 2] * 1e3, warm


def process_gpu_mib():
    """MiB of GPU memory this process holds (nvidia-smi), or None."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    for line in out.splitlines():
        pid, mib = [v.strip() for v in line.split(",")]
        if pid == str(os.getpid()):
            return int(mib)
    return None


def torch_step_timed(torch, loss_fn, args, opt, rounds):
    """A PyTorch training step (zero the gradients, `loss_fn(*args)`, backward, `opt.step()`)
    timed as `median_ms` times it, each step ended by a device synchronisation: `(ms, the
    first three steps' losses)`."""

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(*args)
        loss.backward()
        opt.step()
        return loss.detach()

    def sync(loss):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        return loss.item()

    ms, losses = median_ms(step, rounds, sync=sync)
    return ms, [float(v) for v in losses]


def jax_timed(one, rounds):
    """`one()` (a JAX step returning its loss) timed as `median_ms` times it, each step ended
    when its loss is ready: `(ms, the first three steps' losses)`."""
    import jax

    ms, losses = median_ms(one, rounds, sync=lambda loss: jax.block_until_ready(loss).item())
    return ms, [float(v) for v in losses]


def report(name, result):
    """Prints a peer's `<name>_ms`, `<name>_losses` and `<name>_mem` lines (the GPU memory its
    process holds) for the Elixir side; `result` is `(ms, losses)`."""
    ms, losses = result
    print(f"{name}_ms {ms}")
    print(f"{name}_losses {' '.join(f'{l:.6f}' for l in losses)}")
    mib = process_gpu_mib()
    if mib is not None:
        print(f"{name}_mem {mib}")


def run_peer(name, peers):
    """Runs peer `name` of `peers` (name -> function giving `(ms, losses)`) and prints its
    lines (`report`); JAX is kept from taking most of the GPU's memory up front."""
    if name == "jax":
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    report(name, peers[name]())
