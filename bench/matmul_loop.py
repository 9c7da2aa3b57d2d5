# The peers of bench/core.exs's GPU memory row: a loop of f32 matrix products whose results
# are dropped at once, the process's GPU memory (nvidia-smi, CUDA context included) sampled
# every 5 products; prints "<peer>_loop_peak <MiB>".
#
#     python3 bench/matmul_loop.py torch|jax <n> <iterations>
import os
import subprocess
import sys

peer, n, iterations = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
if peer == "jax":
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


def process_gpu_mib():
    out = subprocess.run(
        ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
        capture_output=True, text=True, check=True,
    ).stdout
    for line in out.splitlines():
        pid, mib = [v.strip() for v in line.split(",")]
        if pid == str(os.getpid()):
            return int(mib)
    return 0


peak = 0
if peer == "torch":
    import torch

    torch.backends.cuda.matmul.allow_tf32 = True
    a = torch.rand(n, n, device="cuda")
    for i in range(iterations):
        a @ a
        if i % 5 == 4:
            torch.cuda.synchronize()
            peak = max(peak, process_gpu_mib())
else:
    import jax
    import jax.numpy as jnp

    a = jax.random.uniform(jax.random.PRNGKey(0), (n, n), jnp.float32)
    for i in range(iterations):
        jnp.dot(a, a)
        if i % 5 == 4:
            peak = max(peak, process_gpu_mib())
    jax.block_until_ready(a)
print(f"{peer}_loop_peak {max(peak, process_gpu_mib())}")
