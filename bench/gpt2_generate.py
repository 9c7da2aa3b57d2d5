# The peers of bench/gpt2_generate.exs: greedy generation with a key/value cache on GPT-2 small
# (12 layers, d 768, 12 heads, vocabulary 50,257; a 32-token prompt, 128 new tokens) at batch
# 1 and 16, f32 with TF32 products, from the weights bench/gpt2_generate.exs wrote (argument 3).
#
#     python3 bench/gpt2_generate.py <torch|jax> <small|tiny> <weights file> [rounds]
#
# Prints "<peer>_ms_<batch> <median ms of one generation, ids on the host>" and
# "<peer>_ids_<batch> <the chosen ids, row by row>".
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_common as common  # noqa: E402

PEER, SIZE, WEIGHTS = sys.argv[1], sys.argv[2], sys.argv[3]
ROUNDS = int(sys.argv[4]) if len(sys.argv) > 4 else 5
C = {
    "small": dict(layers=12, d=768, heads=12, vocab=50257, ctx=1024, prompt=32, new=128),
    "tiny": dict(layers=2, d=64, heads=4, vocab=512, ctx=64, prompt=8, new=16),
}[SIZE]
L, D, H, V, CTX, P, N = (C[k] for k in ("layers", "d", "heads", "vocab", "ctx", "prompt", "new"))
HD = D // H
SHAPES = common.shapes(L, D, V, CTX)


def weights():
    return common.weights(WEIGHTS, SHAPES)


def prompt(b):
    return common.tokens(b, P, V)


def median_ms(f):
    return common.median_ms(f, ROUNDS, warmup=1)[0]


def torch_peer():
    import torch
    import torch.nn.functional as fn

    torch.backends.cuda.matmul.allow_tf32 = True
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    p = {k: torch.tensor(v, device=dev) for k, v in weights().items()}

    @torch.no_grad()
    def step(tok, pos, cache):
        b, t = tok.shape
        positions = torch.arange(pos, pos + t, device=dev)
        x = p["wte"][tok] + p["wpe"][positions]
        m = cache.shape[4]
        visible = torch.arange(m, device=dev)[None, :] <= positions[:, None]
        for i in range(L):
            w = lambda k: p[f"h{i}.{k}"]
            h = fn.layer_norm(x, (D,), w("ln1_g"), w("ln1_b"), 1e-5)
            q, k, v = (h @ w("w_qkv") + w("b_qkv")).split(D, dim=-1)
            heads = lambda u: u.view(b, t, H, HD).transpose(1, 2)
            cache[i, 0, :, :, pos : pos + t] = heads(k)
            cache[i, 1, :, :, pos : pos + t] = heads(v)
            a = fn.scaled_dot_product_attention(heads(q), cache[i, 0], cache[i, 1], attn_mask=visible)
            x = x + a.transpose(1, 2).reshape(b, t, D) @ w("w_o") + w("b_o")
            h = fn.layer_norm(x, (D,), w("ln2_g"), w("ln2_b"), 1e-5)
            x = x + fn.gelu(h @ w("w_1") + w("b_1"), approximate="tanh") @ w("w_2") + w("b_2")
        x = fn.layer_norm(x[:, -1], (D,), p["ln_f_g"], p["ln_f_b"], 1e-5)
        return x @ p["wte"].t()

    def generate(b):
        tok = torch.tensor(prompt(b), device=dev)
        cache = torch.zeros(L, 2, b, H, P + N, HD, device=dev)
        nxt = step(tok, 0, cache).argmax(-1)
        out = [nxt]
        for i in range(1, N):
            nxt = step(nxt[:, None], P + i - 1, cache).argmax(-1)
            out.append(nxt)
        return torch.stack(out, 1).cpu().numpy()

    return generate


def jax_peer():
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_default_matmul_precision", "tensorfloat32")
    p = {k: jnp.asarray(v) for k, v in weights().items()}

    def ln(x, g, b):
        m = x.mean(-1, keepdims=True)
        v = ((x - m) ** 2).mean(-1, keepdims=True)
        return (x - m) * jax.lax.rsqrt(v + 1e-5) * g + b

    def step(p, tok, pos, cache):
        b, t = tok.shape
        positions = jnp.arange(t) + pos
        x = p["wte"][tok] + p["wpe"][positions]
        m = cache.shape[4]
        visible = jnp.arange(m)[None, :] <= positions[:, None]
        heads = lambda u: u.reshape(b, t, H, HD).transpose(0, 2, 1, 3)
        for i in range(L):
            w = lambda k: p[f"h{i}.{k}"]
            h = ln(x, w("ln1_g"), w("ln1_b"))
            q, k, v = jnp.split(h @ w("w_qkv") + w("b_qkv"), 3, axis=-1)
            cache = jax.lax.dynamic_update_slice(cache, heads(k)[None, None], (i, 0, 0, 0, pos, 0))
            cache = jax.lax.dynamic_update_slice(cache, heads(v)[None, None], (i, 1, 0, 0, pos, 0))
            s = heads(q) @ cache[i, 0].transpose(0, 1, 3, 2) / jnp.sqrt(HD)
            a = jax.nn.softmax(jnp.where(visible, s, -1e9), axis=-1) @ cache[i, 1]
            x = x + a.transpose(0, 2, 1, 3).reshape(b, t, D) @ w("w_o") + w("b_o")
            h = ln(x, w("ln2_g"), w("ln2_b"))
            x = x + jax.nn.gelu(h @ w("w_1") + w("b_1"), approximate=True) @ w("w_2") + w("b_2")
        x = ln(x[:, -1], p["ln_f_g"], p["ln_f_b"])
        return x @ p["wte"].T, cache

    @jax.jit
    def generate_jit(p, tok):
        b = tok.shape[0]
        cache = jnp.zeros((L, 2, b, H, P + N, HD), jnp.float32)
        logits, cache = step(p, tok, 0, cache)
        first = logits.argmax(-1).astype(jnp.int32)
        out = jnp.zeros((b, N), jnp.int32).at[:, 0].set(first)

        def body(i, state):
            nxt, out, cache = state
            logits, cache = step(p, nxt[:, None], P + i - 1, cache)
            nxt = logits.argmax(-1).astype(jnp.int32)
            return nxt, out.at[:, i].set(nxt), cache

        _, out, _ = jax.lax.fori_loop(1, N, body, (first, out, cache))
        return out

    def generate(b):
        return np.asarray(generate_jit(p, jnp.asarray(prompt(b), jnp.int32)))

    return generate


generate = {"torch": torch_peer, "jax": jax_peer}[PEER]()
for b in (1, 16):
    print(f"{PEER}_ms_{b} {median_ms(lambda: generate(b))}")
    print(f"{PEER}_ids_{b} {' '.join(str(int(v)) for v in generate(b).reshape(-1))}")
