# The peers of bench/gpt2_layer.exs: one GPT-2-small transformer layer (pre-layer-norm, d 768,
# 12 heads, MLP 3072, causal attention, tanh GELU), batch 8 x 512 tokens, f32 with TF32 matmuls
# allowed, forward and forward + backward (gradients of mean(y^2) with respect to every
# parameter). Prints "<name> <median ms>" lines for PyTorch (eager, scaled_dot_product_attention)
# and JAX (jax.jit); a peer that is not installed is skipped. With a second argument (torch or
# jax) only that peer runs, and a "<peer>_mem <MiB>" line gives the GPU memory this process
# holds after its runs (nvidia-smi, CUDA context included; JAX without preallocation).
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_common as common  # noqa: E402

B, S, D, H, F = 8, 512, 768, 12, 3072
ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 20


def median_ms(f, sync):
    return common.median_ms(f, ROUNDS, sync=sync)[0]


def torch_peer():
    import torch
    import torch.nn.functional as fn

    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(0)

    def param(*shape, scale=0.02):
        return (torch.randn(*shape, device=dev, generator=g) * scale).requires_grad_()

    p = {
        "ln1_g": torch.ones(D, device=dev, requires_grad=True),
        "ln1_b": torch.zeros(D, device=dev, requires_grad=True),
        "w_qkv": param(D, 3 * D), "b_qkv": param(3 * D),
        "w_o": param(D, D), "b_o": param(D),
        "ln2_g": torch.ones(D, device=dev, requires_grad=True),
        "ln2_b": torch.zeros(D, device=dev, requires_grad=True),
        "w_1": param(D, F), "b_1": param(F),
        "w_2": param(F, D), "b_2": param(D),
    }
    x = torch.randn(B, S, D, device=dev, generator=g)

    def layer(x):
        h = fn.layer_norm(x, (D,), p["ln1_g"], p["ln1_b"], 1e-5)
        q, k, v = (h @ p["w_qkv"] + p["b_qkv"]).split(D, dim=-1)
        heads = lambda t: t.view(B, S, H, D // H).transpose(1, 2)
        a = fn.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True)
        x = x + a.transpose(1, 2).reshape(B, S, D) @ p["w_o"] + p["b_o"]
        h = fn.layer_norm(x, (D,), p["ln2_g"], p["ln2_b"], 1e-5)
        return x + fn.gelu(h @ p["w_1"] + p["b_1"], approximate="tanh") @ p["w_2"] + p["b_2"]

    def fwd():
        with torch.no_grad():
            return layer(x)

    def fwd_bwd():
        loss = (layer(x) ** 2).mean()
        return torch.autograd.grad(loss, list(p.values()))

    sync = lambda _: torch.cuda.synchronize()
    print("torch_fwd", median_ms(fwd, sync))
    print("torch_fwd_bwd", median_ms(fwd_bwd, sync))


def jax_peer():
    import jax
    import jax.numpy as jnp

    k = jax.random.split(jax.random.PRNGKey(0), 8)
    n = lambda key, *shape: jax.random.normal(key, shape, jnp.float32) * 0.02
    p = {
        "ln1_g": jnp.ones(D), "ln1_b": jnp.zeros(D),
        "w_qkv": n(k[0], D, 3 * D), "b_qkv": n(k[1], 3 * D),
        "w_o": n(k[2], D, D), "b_o": n(k[3], D),
        "ln2_g": jnp.ones(D), "ln2_b": jnp.zeros(D),
        "w_1": n(k[4], D, F), "b_1": n(k[5], F),
        "w_2": n(k[6], F, D), "b_2": n(k[7], D),
    }
    x = jax.random.normal(jax.random.PRNGKey(1), (B, S, D), jnp.float32)

    def ln(x, g, b):
        m = x.mean(-1, keepdims=True)
        v = ((x - m) ** 2).mean(-1, keepdims=True)
        return (x - m) * jax.lax.rsqrt(v + 1e-5) * g + b

    def layer(p, x):
        h = ln(x, p["ln1_g"], p["ln1_b"])
        q, kk, v = jnp.split(h @ p["w_qkv"] + p["b_qkv"], 3, axis=-1)
        heads = lambda t: t.reshape(B, S, H, D // H).transpose(0, 2, 1, 3)
        s = heads(q) @ heads(kk).transpose(0, 1, 3, 2) / jnp.sqrt(D // H)
        mask = jnp.tril(jnp.ones((S, S), bool))
        a = jax.nn.softmax(jnp.where(mask, s, -1e9), axis=-1) @ heads(v)
        x = x + a.transpose(0, 2, 1, 3).reshape(B, S, D) @ p["w_o"] + p["b_o"]
        h = ln(x, p["ln2_g"], p["ln2_b"])
        return x + jax.nn.gelu(h @ p["w_1"] + p["b_1"], approximate=True) @ p["w_2"] + p["b_2"]

    fwd = jax.jit(layer)
    fwd_bwd = jax.jit(jax.value_and_grad(lambda p, x: (layer(p, x) ** 2).mean()))
    sync = lambda out: jax.block_until_ready(out)
    print("jax_fwd", median_ms(lambda: fwd(p, x), sync))
    print("jax_fwd_bwd", median_ms(lambda: fwd_bwd(p, x), sync))


only = sys.argv[2] if len(sys.argv) > 2 else None
if only == "jax":
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
for name, peer in (("torch", torch_peer), ("jax", jax_peer)):
    if only and name != only:
        continue
    try:
        peer()
        mib = common.process_gpu_mib() if only else None
        if mib is not None:
            print(f"{name}_mem {mib}")
    except ImportError as e:
        print(f"# {name} skipped: {e}")
