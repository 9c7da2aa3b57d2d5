# A whole GPT-2 small (12 pre-layer-norm layers, d 768, 12 heads, MLP 3072, vocabulary 50,257,
# learned positions, output tied to the token embedding), batch 8 x 1024 tokens, f32 with TF32
# products: one training step (next-token cross-entropy, gradients of every parameter, AdamW
# from Polaris, as an Axon user writes it) compiled whole by `Nx.Defn.jit` with
# `ExBurn.Compiler`, against PyTorch (eager with SDPA and fused AdamW, and `torch.compile`) and
# JAX (`jax.jit` of the same step) on the same device in the same run (bench/gpt2_small.py).
# Every contender starts from the same weights (written by this script to a file the peers
# read) and the same tokens, and trains the same steps: the losses of the first three steps are
# printed side by side (the first is the loss of the starting weights).
#
#     EX_BURN_BENCH_DEVICE=cuda bin/nx-run bench/gpt2_small.exs
#
# GPT2_SIZE=tiny (2 layers, d 64, vocabulary 512, 2 x 64 tokens) checks the script on a CPU;
# EX_BURN_BENCH_PEERS (default "torch torch_compile jax"; empty: none), EX_BURN_BENCH_ROUNDS
# (10 timed steps after 3 warm-up steps).
#
# Results: bench/results/gpt2_small_<device>.md
Code.require_file("support/bench.exs", __DIR__)
Code.require_file("support/gpt2.exs", __DIR__)
{device, size} = Bench.Gpt2.setup()

cfg =
  case size do
    "small" -> %{layers: 12, d: 768, heads: 12, vocab: 50_257, seq: 1024, batch: 8}
    "tiny" -> %{layers: 2, d: 64, heads: 4, vocab: 512, seq: 64, batch: 2}
  end

defmodule Bench.Gpt2Small do
  @moduledoc false

  def block(x, p, c) do
    {b, s, d, h} = {c.batch, c.seq, c.d, c.heads}
    hd = div(d, h)
    heads = fn t -> t |> Nx.reshape({b, s, h, hd}) |> Nx.transpose(axes: [0, 2, 1, 3]) end
    n = Bench.Gpt2.layer_norm(x, p["ln1_g"], p["ln1_b"])
    qkv = Nx.add(Nx.dot(n, p["w_qkv"]), p["b_qkv"])
    q = heads.(Nx.slice_along_axis(qkv, 0, d, axis: 2))
    k = heads.(Nx.slice_along_axis(qkv, d, d, axis: 2))
    v = heads.(Nx.slice_along_axis(qkv, 2 * d, d, axis: 2))
    scores = Nx.divide(Nx.dot(q, [3], [0, 1], k, [3], [0, 1]), :math.sqrt(hd))
    causal = Nx.greater_equal(Nx.iota({s, 1}), Nx.iota({1, s}))
    scores = Nx.select(Nx.broadcast(causal, {b, h, s, s}), scores, -1.0e9)
    e = Nx.exp(Nx.subtract(scores, Nx.reduce_max(scores, axes: [3], keep_axes: true)))
    probs = Nx.divide(e, Nx.sum(e, axes: [3], keep_axes: true))
    att = Nx.dot(probs, [3], [0, 1], v, [2], [0, 1])
    att = att |> Nx.transpose(axes: [0, 2, 1, 3]) |> Nx.reshape({b, s, d})
    x = Nx.add(x, Nx.add(Nx.dot(att, p["w_o"]), p["b_o"]))
    n = Bench.Gpt2.layer_norm(x, p["ln2_g"], p["ln2_b"])
    up = Bench.Gpt2.gelu(Nx.add(Nx.dot(n, p["w_1"]), p["b_1"]))
    Nx.add(x, Nx.add(Nx.dot(up, p["w_2"]), p["b_2"]))
  end

  @doc "Mean next-token cross-entropy of `tokens` ({batch, seq + 1} token ids)."
  def loss(params, tokens, c) do
    inputs = Nx.slice(tokens, [0, 0], [c.batch, c.seq])
    targets = Nx.slice(tokens, [0, 1], [c.batch, c.seq])
    x = Nx.add(Nx.take(params["wte"], inputs), Nx.take(params["wpe"], Nx.iota({c.seq})))

    x =
      Enum.reduce(0..(c.layers - 1), x, fn i, x ->
        block(x, params["h#{i}"], c)
      end)

    x = Bench.Gpt2.layer_norm(x, params["ln_f_g"], params["ln_f_b"])
    logits = Nx.dot(x, [2], params["wte"], [1])
    max = Nx.reduce_max(logits, axes: [2], keep_axes: true)
    lse = Nx.add(Nx.log(Nx.sum(Nx.exp(Nx.subtract(logits, max)), axes: [2], keep_axes: true)), max)
    picked = Nx.take_along_axis(logits, Nx.new_axis(targets, 2), axis: 2)
    Nx.mean(Nx.subtract(lse, picked))
  end

  @doc "One AdamW step: the loss before it, the new parameters and optimizer state."
  def train_step(params, state, tokens, c, update) do
    {loss, grads} = Nx.Defn.value_and_grad(params, &loss(&1, tokens, c))
    {updates, state} = update.(grads, state, params)
    {loss, Polaris.Updates.apply_updates(params, updates), state}
  end
end

rounds = String.to_integer(System.get_env("EX_BURN_BENCH_ROUNDS", "10"))
weights_file = Path.join(System.tmp_dir!(), "ex_burn_gpt2_#{size}_weights.f32")
{params, n_params} = Bench.Gpt2.weights(Bench.Gpt2.shapes(cfg, cfg.seq), 42, weights_file)
tokens = Bench.Gpt2.tokens(cfg.batch, cfg.seq + 1, cfg.vocab)

{init, update} = Polaris.Optimizers.adamw(learning_rate: 1.0e-4, b1: 0.9, b2: 0.999, eps: 1.0e-8, decay: 0.01)

state = init.(params)

step =
  Nx.Defn.jit(fn p, s, t -> Bench.Gpt2Small.train_step(p, s, t, cfg, update) end,
    compiler: ExBurn.Compiler
  )

{first_us, losses, ours_ms, peak_mib} =
  Bench.train_steps(fn p, s -> step.(p, s, tokens) end, {params, state}, rounds, device)

tokens_per_step = cfg.batch * cfg.seq

peer =
  Bench.peers(
    Path.join(__DIR__, "gpt2_small.py"),
    "torch torch_compile jax",
    [size, weights_file, to_string(rounds)],
    ~S"\w+_(?:ms|mem|losses)"
  )

Bench.step_report(%{
  peer: peer,
  ms: ours_ms,
  losses: losses,
  names: [
    {"torch", "PyTorch eager (SDPA, fused AdamW)"},
    {"torch_compile", "torch.compile (fused AdamW)"},
    {"jax", "JAX (jax.jit)"}
  ],
  rate: fn ms -> "#{round(tokens_per_step / ms * 1000)} tokens/s" end,
  path: "bench/results/gpt2_small_#{ExBurn.Device.family(device)}.md",
  title:
    "GPT-2 #{size} training step (#{cfg.layers} layers, d #{cfg.d}, vocabulary #{cfg.vocab}, #{cfg.batch} x #{cfg.seq} tokens, #{Float.round(n_params / 1.0e6, 1)}M parameters), f32 / TF32, AdamW, on #{inspect(device)}",
  script: "bench/gpt2_small.exs",
  rounds: rounds,
  first_us: first_us,
  peak_mib: peak_mib,
  device: device,
  same: "weights and tokens"
})
