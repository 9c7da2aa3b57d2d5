# The peers of bench/gpt2_small.exs: a GPT-2 small training step (12 pre-layer-norm layers,
# d 768, 12 heads, vocabulary 50,257, batch 8 x 1024 tokens, output tied to the token
# embedding, next-token cross-entropy, AdamW lr 1e-4, betas 0.9/0.999, eps 1e-8, decay 0.01 on
# every parameter), f32 with TF32 products, from the starting weights bench/gpt2_small.exs
# wrote (argument 3) and the same tokens.
#
#     python3 bench/gpt2_small.py <torch|torch_compile|jax> <small|tiny> <weights file> [rounds]
#
# Prints "<peer>_ms <median ms per step>", "<peer>_losses <first three losses>" and
# "<peer>_mem <MiB of GPU memory this process holds after its runs>" (nvidia-smi).
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_common as common  # noqa: E402

PEER, SIZE, WEIGHTS = sys.argv[1], sys.argv[2], sys.argv[3]
ROUNDS = int(sys.argv[4]) if len(sys.argv) > 4 else 10
C = {
    "small": dict(layers=12, d=768, heads=12, vocab=50257, seq=1024, batch=8),
    "tiny": dict(layers=2, d=64, heads=4, vocab=512, seq=64, batch=2),
}[SIZE]
L, D, H, V, S, B = (C[k] for k in ("layers", "d", "heads", "vocab", "seq", "batch"))
LR, B1, B2, EPS, WD = 1e-4, 0.9, 0.999, 1e-8, 0.01
SHAPES = common.shapes(L, D, V, S)


def weights():
    return common.weights(WEIGHTS, SHAPES)


def tokens():
    return common.tokens(B, S + 1, V)



def torch_peer(compiled):
    import torch
    import torch.nn.functional as fn

    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    p = {k: torch.tensor(v, device=dev, requires_grad=True) for k, v in weights().items()}
    tok = torch.tensor(tokens(), device=dev)
    inp, tgt = tok[:, :-1], tok[:, 1:]
    hd = D // H

    def block(x, i):
        w = lambda k: p[f"h{i}.{k}"]
        h = fn.layer_norm(x, (D,), w("ln1_g"), w("ln1_b"), 1e-5)
        q, k, v = (h @ w("w_qkv") + w("b_qkv")).split(D, dim=-1)
        heads = lambda t: t.view(B, S, H, hd).transpose(1, 2)
        a = fn.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True)
        x = x + a.transpose(1, 2).reshape(B, S, D) @ w("w_o") + w("b_o")
        h = fn.layer_norm(x, (D,), w("ln2_g"), w("ln2_b"), 1e-5)
        return x + fn.gelu(h @ w("w_1") + w("b_1"), approximate="tanh") @ w("w_2") + w("b_2")

    def loss_fn(inp, tgt):
        x = p["wte"][inp] + p["wpe"][torch.arange(S, device=dev)]
        for i in range(L):
            x = block(x, i)
        x = fn.layer_norm(x, (D,), p["ln_f_g"], p["ln_f_b"], 1e-5)
        return fn.cross_entropy((x @ p["wte"].t()).view(-1, V), tgt.reshape(-1))

    if compiled:
        loss_fn = torch.compile(loss_fn)
    opt = torch.optim.AdamW(
        list(p.values()), lr=LR, betas=(B1, B2), eps=EPS, weight_decay=WD, fused=dev == "cuda"
    )

    return common.torch_step_timed(torch, loss_fn, (inp, tgt), opt, ROUNDS)


def jax_peer():
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_default_matmul_precision", "tensorfloat32")
    p = {k: jnp.asarray(v) for k, v in weights().items()}
    tok = jnp.asarray(tokens(), dtype=jnp.int32)
    hd = D // H

    def ln(x, g, b):
        m = x.mean(-1, keepdims=True)
        v = ((x - m) ** 2).mean(-1, keepdims=True)
        return (x - m) * jax.lax.rsqrt(v + 1e-5) * g + b

    def loss_fn(p, tok):
        inp, tgt = tok[:, :-1], tok[:, 1:]
        x = p["wte"][inp] + p["wpe"][jnp.arange(S)]
        mask = jnp.tril(jnp.ones((S, S), bool))
        heads = lambda t: t.reshape(B, S, H, hd).transpose(0, 2, 1, 3)
        for i in range(L):
            w = lambda k: p[f"h{i}.{k}"]
            h = ln(x, w("ln1_g"), w("ln1_b"))
            q, k, v = jnp.split(h @ w("w_qkv") + w("b_qkv"), 3, axis=-1)
            s = heads(q) @ heads(k).transpose(0, 1, 3, 2) / jnp.sqrt(hd)
            a = jax.nn.softmax(jnp.where(mask, s, -1e9), axis=-1) @ heads(v)
            x = x + a.transpose(0, 2, 1, 3).reshape(B, S, D) @ w("w_o") + w("b_o")
            h = ln(x, w("ln2_g"), w("ln2_b"))
            x = x + jax.nn.gelu(h @ w("w_1") + w("b_1"), approximate=True) @ w("w_2") + w("b_2")
        x = ln(x, p["ln_f_g"], p["ln_f_b"])
        logits = x @ p["wte"].T
        lse = jax.nn.logsumexp(logits, axis=-1)
        return (lse - jnp.take_along_axis(logits, tgt[..., None], axis=-1)[..., 0]).mean()

    @jax.jit
    def step(p, m, v, t, tok):
        loss, g = jax.value_and_grad(loss_fn)(p, tok)
        m = jax.tree.map(lambda m, g: B1 * m + (1 - B1) * g, m, g)
        v = jax.tree.map(lambda v, g: B2 * v + (1 - B2) * g * g, v, g)
        c1, c2 = 1 - B1**t, 1 - B2**t
        upd = lambda p, m, v: p - LR * ((m / c1) / (jnp.sqrt(v / c2) + EPS) + WD * p)
        return loss, jax.tree.map(upd, p, m, v), m, v

    state = {"p": p, "m": jax.tree.map(jnp.zeros_like, p), "v": jax.tree.map(jnp.zeros_like, p), "t": 0}

    def one():
        state["t"] += 1
        loss, state["p"], state["m"], state["v"] = step(
            state["p"], state["m"], state["v"], jnp.float32(state["t"]), tok
        )
        return loss

    return common.jax_timed(one, ROUNDS)


common.run_peer(
    PEER, {"torch": lambda: torch_peer(False), "torch_compile": lambda: torch_peer(True), "jax": jax_peer}
)
