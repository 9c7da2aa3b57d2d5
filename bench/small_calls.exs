# Calls of small compiled functions from an Elixir loop (a sampler, an environment step, a
# model on one example at a time): the time of one call, ExBurn against XLA (JAX `jax.jit`,
# bench/small_calls.py, same functions and shapes) and `Nx.Defn.Evaluator` on
# `Nx.BinaryBackend`, in the same run, on the CPU:
#
#   * `a * 2 + 1` on 16 f32;
#   * 20 element-wise ops on 16 f32 (the body of bench/while_small.exs, called once);
#   * a two-layer MLP on one example (1 x 64 -> 64 tanh -> 10, softmax).
#
# Medians of 15 rounds of 2,000 calls (each call's result read back to the host).
# Results: bench/results/small_calls_cpu.md
#
#     mix run bench/small_calls.exs
Code.require_file("support/bench.exs", __DIR__)
Application.ensure_all_started(:nx)

defmodule Bench.SmallCalls do
  import Nx.Defn

  defn(affine(a), do: a * 2 + 1)

  defn twenty(a) do
    b = Nx.sin(a) * 0.5 + Nx.cos(a) * 0.25
    c = Nx.exp(-Nx.abs(b)) + Nx.tanh(a - b)
    d = Nx.max(c, 0.1) * Nx.min(b, 0.9) - Nx.sqrt(Nx.abs(a) + 1)
    e = Nx.select(d > 0, d, -d) + Nx.log(Nx.abs(c) + 1)
    e / (Nx.abs(a) + 2) + b * c
  end

  defn mlp(p, x) do
    h = Nx.tanh(Nx.dot(x, p.w0) + p.b0)
    logits = Nx.dot(h, p.w1) + p.b1
    e = Nx.exp(logits - Nx.reduce_max(logits, axes: [1], keep_axes: true))
    e / Nx.sum(e, axes: [1], keep_axes: true)
  end
end

rounds = 15
per = String.to_integer(System.get_env("EX_BURN_BENCH_CALLS", "2000"))
read = fn out -> Nx.to_binary(out, limit: 1) end

inputs = fn backend ->
  a = Nx.divide(Nx.iota({16}, type: :f32, backend: backend), 16)

  p = %{
    w0: Nx.divide(Nx.iota({64, 64}, type: :f32, backend: backend), 4096 * 8),
    b0: Nx.broadcast(Nx.tensor(0.01, backend: backend), {64}),
    w1: Nx.divide(Nx.iota({64, 10}, type: :f32, backend: backend), 640 * 8),
    b1: Nx.broadcast(Nx.tensor(0.0, backend: backend), {10})
  }

  x = Nx.divide(Nx.iota({1, 64}, type: :f32, backend: backend), 64)
  %{a: a, p: p, x: x}
end

cases = fn compiler, backend ->
  i = inputs.(backend)
  jit = fn f -> Nx.Defn.jit(f, compiler: compiler) end
  affine = jit.(&Bench.SmallCalls.affine/1)
  twenty = jit.(&Bench.SmallCalls.twenty/1)
  mlp = jit.(&Bench.SmallCalls.mlp/2)

  [
    {"`a * 2 + 1`, 16 f32", fn -> read.(affine.(i.a)) end},
    {"20 element-wise ops, 16 f32", fn -> read.(twenty.(i.a)) end},
    {"MLP 64-64-10 on one example, softmax", fn -> read.(mlp.(i.p, i.x)) end}
  ]
end

ours = cases.(ExBurn.Compiler, ExBurn.Backend)
evaluator = cases.(Nx.Defn.Evaluator, Nx.BinaryBackend)

# the results agree (the evaluator's on Nx.BinaryBackend as the reference)
check = fn ->
  i = inputs.(ExBurn.Backend)
  r = inputs.(Nx.BinaryBackend)
  ex = Nx.Defn.jit(&Bench.SmallCalls.twenty/1, compiler: ExBurn.Compiler).(i.a)
  ev = Nx.Defn.jit(&Bench.SmallCalls.twenty/1, compiler: Nx.Defn.Evaluator).(r.a)
  diff = Nx.subtract(Nx.backend_transfer(ex, Nx.BinaryBackend), ev) |> Nx.abs() |> Nx.reduce_max()
  Nx.to_number(diff)
end

diff = check.()

us = fn f -> Bench.median_call_ns(f, rounds, per) / 1000 end

ours_us = Enum.map(ours, fn {name, f} -> {name, us.(f)} end)
ev_us = Enum.map(evaluator, fn {_name, f} -> us.(f) end)

peer =
  case System.cmd("python3", [Path.join(__DIR__, "small_calls.py"), to_string(rounds), to_string(per)],
         stderr_to_stdout: true
       ) do
    {out, 0} ->
      for line <- String.split(out, "\n"), String.starts_with?(line, "small_calls "), into: %{} do
        ["small_calls", k, v] = String.split(line, " ", parts: 3)
        {String.to_integer(k), String.to_float(String.trim(v))}
      end

    _ ->
      %{}
  end

rows =
  ours_us
  |> Enum.zip(ev_us)
  |> Enum.with_index()
  |> Enum.map(fn {{{name, o}, e}, k} ->
    xla = Map.get(peer, k)

    [
      name,
      "#{Float.round(o, 1)} us",
      if(xla, do: "#{Float.round(xla, 1)} us", else: "n/a"),
      if(xla, do: "#{Float.round(xla / o, 2)}x", else: "-"),
      "#{Float.round(e, 1)} us",
      "#{Float.round(e / o, 2)}x"
    ]
  end)

Bench.write(
  "bench/results/small_calls_cpu.md",
  "Small compiled calls on the CPU",
  """
  Machine: #{Bench.machine()}. Run: `mix run bench/small_calls.exs` (#{Date.utc_today()}).
  Medians of #{rounds} rounds of #{per} calls, each call's result read to the host; ratios are
  speeds against the peer in the same run (above 1.0x: ExBurn faster). Largest difference of
  ExBurn's 20-op result from the Evaluator's: #{diff}.
  """,
  [
    "call",
    "ExBurn (ExBurn.Compiler)",
    "XLA (jax.jit)",
    "ExBurn / XLA",
    "Evaluator (BinaryBackend)",
    "ExBurn / Evaluator"
  ],
  rows
)
