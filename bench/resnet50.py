# The peers of bench/resnet50.exs: a ResNet-50 (v1.5) training step, batch normalization on
# the batch's statistics, softmax cross-entropy, SGD lr 0.01 with momentum 0.9 (PyTorch's
# form: v = 0.9 v + g, p -= lr v, as Polaris's), NCHW, f32 with TF32 products, from the
# starting weights bench/resnet50.exs wrote (argument 3) and the same images and labels.
#
#     python3 bench/resnet50.py <torch|torch_compile|jax> <full|tiny> <weights file> [rounds]
#
# Prints "<peer>_ms <median ms per step>", "<peer>_losses <first three losses>" and
# "<peer>_mem <MiB of GPU memory this process holds after its runs>" (nvidia-smi).
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_common as common  # noqa: E402

PEER, SIZE, WEIGHTS = sys.argv[1], sys.argv[2], sys.argv[3]
ROUNDS = int(sys.argv[4]) if len(sys.argv) > 4 else 10
C = {
    "full": dict(batch=64, image=224, classes=1000, base=64, blocks=[3, 4, 6, 3]),
    "tiny": dict(batch=4, image=64, classes=10, base=8, blocks=[1, 1, 1, 1]),
}[SIZE]
LR, MOMENTUM = 0.01, 0.9
# RESNET_TF32=0: products and convolutions in full f32 (a check of the peers' TF32 rounding)
TF32 = os.environ.get("RESNET_TF32", "1") != "0"


def shapes():
    """The parameters' names and shapes in file order (Bench.ResNet.shapes/1)."""
    bn = lambda name, ch: [(name + ".g", (ch,)), (name + ".b", (ch,))]
    out = [("conv1", (C["base"], 3, 7, 7))] + bn("bn1", C["base"])
    width = C["base"]
    for s, n in enumerate(C["blocks"]):
        mid = C["base"] * 2**s
        for b in range(n):
            pre = f"l{s}.{b}."
            out += [(pre + "conv1", (mid, width, 1, 1))] + bn(pre + "bn1", mid)
            out += [(pre + "conv2", (mid, mid, 3, 3))] + bn(pre + "bn2", mid)
            out += [(pre + "conv3", (4 * mid, mid, 1, 1))] + bn(pre + "bn3", 4 * mid)
            if b == 0:
                out += [(pre + "down", (4 * mid, width, 1, 1))] + bn(pre + "bnd", 4 * mid)
            width = 4 * mid
    return out + [("fc.w", (width, C["classes"])), ("fc.b", (C["classes"],))]


def data():
    """Images sin(0.37 i) / 2 over the flat index, labels (7 i + 3) mod classes."""
    b, s = C["batch"], C["image"]
    x = (np.sin(np.arange(b * 3 * s * s, dtype=np.float32) * np.float32(0.37)) * 0.5).astype(np.float32)
    y = (np.arange(b) * 7 + 3) % C["classes"]
    return x.reshape(b, 3, s, s), y.astype(np.int64)


def stages():
    """(prefix, stride, has a projection) of every block, in order."""
    return [
        (f"l{s}.{b}.", 2 if s > 0 and b == 0 else 1, b == 0)
        for s, n in enumerate(C["blocks"])
        for b in range(n)
    ]



def torch_peer(compiled):
    import torch
    import torch.nn.functional as fn

    torch.backends.cuda.matmul.allow_tf32 = TF32
    torch.backends.cudnn.allow_tf32 = TF32
    torch.backends.cudnn.benchmark = True
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    w = common.weights(WEIGHTS, shapes())
    p = {k: torch.tensor(v, device=dev, requires_grad=True) for k, v in w.items()}
    x, y = (torch.tensor(a, device=dev) for a in data())

    def bn(h, name):
        return fn.batch_norm(h, None, None, p[name + ".g"], p[name + ".b"], training=True, eps=1e-5)

    def loss_fn(x, y):
        h = fn.relu(bn(fn.conv2d(x, p["conv1"], stride=2, padding=3), "bn1"))
        h = fn.max_pool2d(h, 3, stride=2, padding=1)
        for pre, stride, first in stages():
            o = fn.relu(bn(fn.conv2d(h, p[pre + "conv1"]), pre + "bn1"))
            o = fn.relu(bn(fn.conv2d(o, p[pre + "conv2"], stride=stride, padding=1), pre + "bn2"))
            o = bn(fn.conv2d(o, p[pre + "conv3"]), pre + "bn3")
            skip = bn(fn.conv2d(h, p[pre + "down"], stride=stride), pre + "bnd") if first else h
            h = fn.relu(o + skip)
        logits = h.mean((2, 3)) @ p["fc.w"] + p["fc.b"]
        return fn.cross_entropy(logits, y)

    if compiled:
        loss_fn = torch.compile(loss_fn)
    opt = torch.optim.SGD(list(p.values()), lr=LR, momentum=MOMENTUM, foreach=True)

    return common.torch_step_timed(torch, loss_fn, (x, y), opt, ROUNDS)


def jax_peer():
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_default_matmul_precision", "tensorfloat32" if TF32 else "highest")
    p = {k: jnp.asarray(v) for k, v in common.weights(WEIGHTS, shapes()).items()}
    x, y = (jnp.asarray(a) for a in data())
    dn = ("NCHW", "OIHW", "NCHW")

    def conv(h, k, stride=1, pad=0):
        return jax.lax.conv_general_dilated(
            h, k, (stride, stride), [(pad, pad), (pad, pad)], dimension_numbers=dn
        )

    def bn(h, name, p):
        m = h.mean((0, 2, 3), keepdims=True)
        v = ((h - m) ** 2).mean((0, 2, 3), keepdims=True)
        g, b = p[name + ".g"].reshape(1, -1, 1, 1), p[name + ".b"].reshape(1, -1, 1, 1)
        return (h - m) * jax.lax.rsqrt(v + 1e-5) * g + b

    def loss_fn(p, x, y):
        h = jax.nn.relu(bn(conv(x, p["conv1"], 2, 3), "bn1", p))
        h = jax.lax.reduce_window(
            h, -jnp.inf, jax.lax.max, (1, 1, 3, 3), (1, 1, 2, 2), [(0, 0), (0, 0), (1, 1), (1, 1)]
        )
        for pre, stride, first in stages():
            o = jax.nn.relu(bn(conv(h, p[pre + "conv1"]), pre + "bn1", p))
            o = jax.nn.relu(bn(conv(o, p[pre + "conv2"], stride, 1), pre + "bn2", p))
            o = bn(conv(o, p[pre + "conv3"]), pre + "bn3", p)
            skip = bn(conv(h, p[pre + "down"], stride), pre + "bnd", p) if first else h
            h = jax.nn.relu(o + skip)
        logits = h.mean((2, 3)) @ p["fc.w"] + p["fc.b"]
        lse = jax.nn.logsumexp(logits, axis=-1)
        return (lse - jnp.take_along_axis(logits, y[:, None], axis=-1)[:, 0]).mean()

    @jax.jit
    def step(p, v, x, y):
        loss, g = jax.value_and_grad(loss_fn)(p, x, y)
        v = jax.tree.map(lambda v, g: MOMENTUM * v + g, v, g)
        return loss, jax.tree.map(lambda p, v: p - LR * v, p, v), v

    state = {"p": p, "v": jax.tree.map(jnp.zeros_like, p)}

    def one():
        loss, state["p"], state["v"] = step(state["p"], state["v"], x, y)
        return loss

    return common.jax_timed(one, ROUNDS)


common.run_peer(
    PEER, {"torch": lambda: torch_peer(False), "torch_compile": lambda: torch_peer(True), "jax": jax_peer}
)
