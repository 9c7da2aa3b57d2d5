# The XLA side of bench/cpu_peers.exs: the same four workloads under jax.jit on the CPU
# (what EXLA users get: EXLA is XLA). Prints `jax VERSION`, then `WORKLOAD MILLISECONDS` lines
# (medians).
#
#     python3 bench/cpu_peers.py ROUNDS
import os
import sys
import time

# the CPU peer even where JAX sees a GPU (the device tool's hosts): XLA on the CPU
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import jax.numpy as jnp

rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 15
key = jax.random.PRNGKey(0)


def median_ms(fn, *args):
    for _ in range(2):
        jax.tree_util.tree_map(lambda a: a.block_until_ready(), fn(*args))
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        out = fn(*args)
        jax.tree_util.tree_map(lambda a: a.block_until_ready(), out)
        times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    return times[len(times) // 2]


# matmul 2048^2, f32
n = 2048
a = jax.random.normal(key, (n, n), jnp.float32)
b = jax.random.normal(key, (n, n), jnp.float32)
matmul = jax.jit(lambda a, b: a @ b)

# MLP 784-1024-1024-10, batch 512: value_and_grad of softmax cross-entropy + SGD step
sizes = [784, 1024, 1024, 10]
params = {}
for i, (fan_in, fan_out) in enumerate(zip(sizes, sizes[1:])):
    params[f"w{i}"] = jax.random.normal(key, (fan_in, fan_out), jnp.float32) * 0.03
    params[f"b{i}"] = jnp.zeros((fan_out,), jnp.float32)
x = jax.random.uniform(key, (512, 784), jnp.float32)
y = jax.nn.one_hot(jnp.arange(512) % 10, 10)


def loss(p, x, y):
    h = jax.nn.relu(x @ p["w0"] + p["b0"])
    h = jax.nn.relu(h @ p["w1"] + p["b1"])
    logits = h @ p["w2"] + p["b2"]
    return -jnp.mean(jnp.sum(y * jax.nn.log_softmax(logits), axis=-1))


@jax.jit
def step(p, x, y):
    l, g = jax.value_and_grad(loss)(p, x, y)
    return l, jax.tree_util.tree_map(lambda w, d: w - 0.01 * d, p, g)


# CNN forward, batch 64 of 1x28x28 (NCHW, Nx's default layout, on both sides): conv 3x3 to 32,
# relu, conv 3x3 to 64, relu, max pool 2, dense 10
cnn = {
    "k1": jax.random.normal(key, (32, 1, 3, 3), jnp.float32) * 0.1,
    "k2": jax.random.normal(key, (64, 32, 3, 3), jnp.float32) * 0.05,
    "w": jax.random.normal(key, (64 * 12 * 12, 10), jnp.float32) * 0.01,
}
images = jax.random.uniform(key, (64, 1, 28, 28), jnp.float32)


@jax.jit
def cnn_forward(p, x):
    dn = ("NCHW", "OIHW", "NCHW")
    h = jax.nn.relu(jax.lax.conv_general_dilated(x, p["k1"], (1, 1), "VALID", dimension_numbers=dn))
    h = jax.nn.relu(jax.lax.conv_general_dilated(h, p["k2"], (1, 1), "VALID", dimension_numbers=dn))
    h = jax.lax.reduce_window(h, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")
    return h.reshape((h.shape[0], -1)) @ p["w"]


# the gradient of a next-token cross-entropy with respect to the logits (GPT-2's loss)
logits = jax.random.normal(key, (4, 64, 5000), jnp.float32) * 2.0
targets = (jnp.arange(4 * 64).reshape(4, 64) * 37) % 5000


def token_loss(logits, targets):
    m = jnp.max(logits, axis=2, keepdims=True)
    lse = jnp.log(jnp.sum(jnp.exp(logits - m), axis=2, keepdims=True)) + m
    picked = jnp.take_along_axis(logits, targets[:, :, None], axis=2)
    return jnp.mean(lse - picked)


token_grad = jax.jit(jax.grad(token_loss))

results = {
    "matmul": median_ms(matmul, a, b),
    "mlp_step": median_ms(step, params, x, y),
    "cnn_forward": median_ms(cnn_forward, cnn, images),
    "token_grad": median_ms(token_grad, logits, targets),
}
print(f"jax {jax.__version__}")
for name, value in results.items():
    print(f"{name} {value:.4f}")
