# The peer of bench/while_small.exs: the same `while` body (20 ops on 16-element f32 tensors)
# under jax.lax.while_loop in one jax.jit, on the CPU. Prints the milliseconds of the median of
# 5 calls of N iterations and the first three values.
import os, sys, time
# the CPU peer even where JAX sees a GPU: XLA on the CPU
os.environ.setdefault("JAX_PLATFORMS", "cpu")
import jax, jax.numpy as jnp

n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000

def body(x, v):
    a = x * 1.0001 + v
    b = jnp.sin(a) * 0.5
    c = jnp.abs(b - x) + 0.1
    d = jnp.sqrt(c) * jnp.exp(-c)
    e = jnp.maximum(d, 0.0) + jnp.minimum(a, 1.0)
    f = e / (1.0 + jnp.abs(e))
    g = f - jnp.mean(f)
    return g * 0.99 + x * 0.01

@jax.jit
def run(x, v, n):
    return jax.lax.while_loop(lambda s: s[0] < n, lambda s: (s[0] + 1, body(s[1], v)), (0, x))[1]

x = jnp.arange(16, dtype=jnp.float32) / 16
v = jnp.array([i / 100 for i in range(1, 17)], dtype=jnp.float32)
run(x, v, 10).block_until_ready()
times = []
for _ in range(5):
    t = time.perf_counter(); r = run(x, v, n).block_until_ready(); times.append(time.perf_counter() - t)
print(f"{sorted(times)[2] * 1000:.3f} {float(r[0]):.9g} {float(r[1]):.9g} {float(r[2]):.9g} jax {jax.__version__}")
