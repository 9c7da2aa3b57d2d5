"""The peer of bench/small_calls.exs: the same small functions under jax.jit on the CPU,
each call's result brought to the host. Prints `small_calls <k> <median us per call>`."""
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_platforms", "cpu")
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 15
per = int(sys.argv[2]) if len(sys.argv) > 2 else 2000


@jax.jit
def affine(a):
    return a * 2 + 1


@jax.jit
def twenty(a):
    b = jnp.sin(a) * 0.5 + jnp.cos(a) * 0.25
    c = jnp.exp(-jnp.abs(b)) + jnp.tanh(a - b)
    d = jnp.maximum(c, 0.1) * jnp.minimum(b, 0.9) - jnp.sqrt(jnp.abs(a) + 1)
    e = jnp.where(d > 0, d, -d) + jnp.log(jnp.abs(c) + 1)
    return e / (jnp.abs(a) + 2) + b * c


@jax.jit
def mlp(p, x):
    h = jnp.tanh(x @ p["w0"] + p["b0"])
    logits = h @ p["w1"] + p["b1"]
    e = jnp.exp(logits - jnp.max(logits, axis=1, keepdims=True))
    return e / jnp.sum(e, axis=1, keepdims=True)


a = jnp.arange(16, dtype=jnp.float32) / 16
p = {
    "w0": jnp.arange(64 * 64, dtype=jnp.float32).reshape(64, 64) / (4096 * 8),
    "b0": jnp.full((64,), 0.01, jnp.float32),
    "w1": jnp.arange(640, dtype=jnp.float32).reshape(64, 10) / (640 * 8),
    "b1": jnp.zeros((10,), jnp.float32),
}
x = jnp.arange(64, dtype=jnp.float32).reshape(1, 64) / 64

cases = [lambda: affine(a), lambda: twenty(a), lambda: mlp(p, x)]
for k, f in enumerate(cases):
    for _ in range(per):
        np.asarray(f())
    ts = []
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(per):
            np.asarray(f())
        ts.append((time.perf_counter() - t) / per * 1e6)
    ts.sort()
    print(f"small_calls {k} {ts[len(ts) // 2]:.3f}")
