# CPU workloads that Nx users run, against XLA in the same run (needs Nx; JAX from PyPI for the
# peer: `pip install "jax[cpu]"`; without it the peer column says so):
#
#   * f32 matmul 2048x2048 (`Nx.dot` under `Nx.Defn.jit`);
#   * MLP 784-1024-1024-10, batch 512: value_and_grad of softmax cross-entropy + SGD step, one
#     `defn`;
#   * CNN forward, batch 64 of 1x28x28: conv 3x3 to 32, relu, conv 3x3 to 64, relu, 2x2 max pool,
#     dense 10;
#   * the gradient of a language model's next-token cross-entropy with respect to its logits
#     (4 x 64 tokens, 5,000 classes), written as GPT-2's loss is (`bench/gpt2_small.exs`).
#
# ExBurn runs them through `Nx.Defn.jit(fun, compiler: ExBurn.Compiler)`, XLA through
# `jax.jit` (bench/cpu_peers.py, same shapes, same layout). Medians after warm-up.
# Results: bench/results/cpu_peers.md
#
#     mix run bench/cpu_peers.exs
#
# With Nx on ERL_LIBS instead of a Hex dependency, Elixir >= 1.15 prunes it from the code path:
# run `mix do compile --no-prune-code-paths + run bench/cpu_peers.exs` instead.
Code.require_file("support/bench.exs", __DIR__)
Application.ensure_all_started(:nx)
Nx.default_backend(ExBurn.Backend)

defmodule Bench.CpuPeers do
  import Nx.Defn

  defn(matmul(a, b), do: Nx.dot(a, b))

  defn loss(p, x, y) do
    h = Nx.max(Nx.dot(x, p.w0) + p.b0, 0)
    h = Nx.max(Nx.dot(h, p.w1) + p.b1, 0)
    logits = Nx.dot(h, p.w2) + p.b2
    shifted = logits - Nx.reduce_max(logits, axes: [1], keep_axes: true)
    log_softmax = shifted - Nx.log(Nx.sum(Nx.exp(shifted), axes: [1], keep_axes: true))
    -Nx.mean(Nx.sum(y * log_softmax, axes: [1]))
  end

  defn step(p, x, y) do
    {l, g} = value_and_grad(p, &loss(&1, x, y))

    {l,
     %{
       p
       | w0: p.w0 - 0.01 * g.w0,
         b0: p.b0 - 0.01 * g.b0,
         w1: p.w1 - 0.01 * g.w1,
         b1: p.b1 - 0.01 * g.b1,
         w2: p.w2 - 0.01 * g.w2,
         b2: p.b2 - 0.01 * g.b2
     }}
  end

  defn token_loss(logits, targets) do
    max = Nx.reduce_max(logits, axes: [2], keep_axes: true)
    lse = Nx.log(Nx.sum(Nx.exp(logits - max), axes: [2], keep_axes: true)) + max
    picked = Nx.take_along_axis(logits, Nx.new_axis(targets, 2), axis: 2)
    Nx.mean(lse - picked)
  end

  defn(token_grad(logits, targets), do: grad(logits, &token_loss(&1, targets)))

  defn cnn(p, x) do
    h = Nx.max(Nx.conv(x, p.k1), 0)
    h = Nx.max(Nx.conv(h, p.k2), 0)
    h = Nx.window_max(h, {1, 1, 2, 2}, strides: [1, 1, 2, 2])
    Nx.dot(Nx.reshape(h, {64, 64 * 12 * 12}), p.w)
  end
end

rounds = String.to_integer(System.get_env("EX_BURN_BENCH_ROUNDS", "15"))
jit = fn f -> Nx.Defn.jit(f, compiler: ExBurn.Compiler) end
sync = fn out -> [out] |> Nx.Defn.Composite.flatten_list() |> Enum.each(&Nx.to_binary(&1, limit: 1)) end
key = Nx.Random.key(0)
normal = fn shape, scale -> Nx.multiply(elem(Nx.Random.normal(key, shape: shape), 0), scale) end

n = 2048
a = normal.({n, n}, 1.0)
b = normal.({n, n}, 1.0)

params = %{
  w0: normal.({784, 1024}, 0.03),
  b0: Nx.broadcast(0.0, {1024}),
  w1: normal.({1024, 1024}, 0.03),
  b1: Nx.broadcast(0.0, {1024}),
  w2: normal.({1024, 10}, 0.03),
  b2: Nx.broadcast(0.0, {10})
}

x = Nx.divide(Nx.iota({512, 784}, type: :f32), 512 * 784)
y = Nx.equal(Nx.new_axis(Nx.remainder(Nx.iota({512}), 10), 1), Nx.iota({1, 10})) |> Nx.as_type(:f32)

cnn = %{
  k1: normal.({32, 1, 3, 3}, 0.1),
  k2: normal.({64, 32, 3, 3}, 0.05),
  w: normal.({64 * 12 * 12, 10}, 0.01)
}

images = Nx.divide(Nx.iota({64, 1, 28, 28}, type: :f32), 64 * 28 * 28)

logits = normal.({4, 64, 5000}, 2.0)
targets = Nx.remainder(Nx.multiply(Nx.iota({4, 64}), 37), 5000)

matmul = jit.(&Bench.CpuPeers.matmul/2)
step = jit.(&Bench.CpuPeers.step/3)
cnn_fwd = jit.(&Bench.CpuPeers.cnn/2)
token_grad = jit.(&Bench.CpuPeers.token_grad/2)

ms = fn f -> Bench.median_us(fn -> sync.(f.()) end, rounds, 2) / 1000 end

ours = %{
  "matmul" => ms.(fn -> matmul.(a, b) end),
  "mlp_step" => ms.(fn -> step.(params, x, y) end),
  "cnn_forward" => ms.(fn -> cnn_fwd.(cnn, images) end),
  "token_grad" => ms.(fn -> token_grad.(logits, targets) end)
}

peer =
  case System.cmd("python3", [Path.join(__DIR__, "cpu_peers.py"), to_string(rounds)], stderr_to_stdout: true) do
    {out, 0} ->
      # (JAX may log to stderr: only the result lines count)
      for line <- String.split(out, "\n", trim: true),
          [_, name, v] <- [Regex.run(~r/^(jax|matmul|mlp_step|cnn_forward|token_grad) (\S+)$/, line)],
          into: %{} do
        if name == "jax", do: {name, v}, else: {name, String.to_float(v)}
      end

    {out, _} ->
      IO.puts("JAX peer unavailable:\n" <> out) && %{}
  end

rows =
  for {name, label, flops} <- [
        {"matmul", "f32 matmul 2048x2048", 2 * n * n * n},
        {"mlp_step", "MLP 784-1024-1024-10 b512, value_and_grad + SGD step", nil},
        {"cnn_forward", "CNN forward b64 1x28x28 (conv 32, conv 64, max pool, dense)", nil},
        {"token_grad", "next-token cross-entropy gradient, logits 4x64x5000", nil}
      ] do
    us_ms = ours[name]
    rate = fn t -> if flops, do: " (#{Float.round(flops / (t / 1000) / 1.0e9, 1)} GFLOP/s)", else: "" end

    case peer[name] do
      nil ->
        [label, "#{Float.round(us_ms, 2)} ms#{rate.(us_ms)}", "-", "-"]

      p ->
        [
          label,
          "#{Float.round(us_ms, 2)} ms#{rate.(us_ms)}",
          "#{Float.round(p, 2)} ms#{rate.(p)}",
          "#{Float.round(p / us_ms, 2)}x"
        ]
    end
  end

Bench.write(
  "bench/results/cpu_peers.md",
  "CPU workloads: ExBurn.Compiler against XLA (jax.jit)",
  "Machine: #{Bench.machine()}. JAX #{peer["jax"] || "absent"} on the same machine, same run. " <>
    "Medians of #{rounds} calls after 2 warm-up calls. Ratio = XLA time / ExBurn time (> 1: ExBurn faster).\n" <>
    "Run: `mix run bench/cpu_peers.exs` (#{Date.utc_today()}).",
  ["workload", "ExBurn (Nx.Defn.jit, ExBurn.Compiler)", "XLA (jax.jit)", "ExBurn / XLA speed"],
  rows
)
