# A `while` whose body is 20 ops on 16-element f32 tensors (element-wise math and one mean),
# the shape of nearest-neighbour descents, tree searches and samplers: ExBurn.Compiler against
# Nx.Defn.Evaluator on Nx.BinaryBackend and XLA (jax.lax.while_loop in jax.jit,
# bench/while_small.py; `pip install "jax[cpu]"`), same run, same values.
#
#     bin/nx-run bench/while_small.exs [iterations]      (default 100_000)
#
# Results: bench/results/while_small.md
Application.ensure_all_started(:nx)

defmodule Bench.WhileSmall do
  import Nx.Defn

  defn body(x, v) do
    a = x * 1.0001 + v
    b = Nx.sin(a) * 0.5
    c = Nx.abs(b - x) + 0.1
    d = Nx.sqrt(c) * Nx.exp(-c)
    e = Nx.max(d, 0.0) + Nx.min(a, 1.0)
    f = e / (1.0 + Nx.abs(e))
    g = f - Nx.mean(f)
    g * 0.99 + x * 0.01
  end

  defn run(x, v, n) do
    {_, x, _, _} =
      while {i = 0, x, v, n}, i < n do
        {i + 1, body(x, v), v, n}
      end

    x
  end

  def median_ms(fun, calls) do
    times = for _ <- 1..calls, do: elem(:timer.tc(fun), 0) / 1000
    Enum.at(Enum.sort(times), div(calls, 2))
  end
end

n = String.to_integer(List.first(System.argv()) || "100000")
x = Nx.iota({16}, type: :f32) |> Nx.divide(16)
v = Nx.tensor(Enum.map(1..16, &(&1 / 100)), type: :f32)

burn = Nx.Defn.jit(&Bench.WhileSmall.run/3, compiler: ExBurn.Compiler)
burn.(x, v, 10)
burn_ms = Bench.WhileSmall.median_ms(fn -> burn.(x, v, n) end, 5)
got = burn.(x, v, n) |> Nx.to_flat_list() |> Enum.take(3)

# the Evaluator on a tenth of the iterations (it is slow), scaled
m = max(div(n, 10), 1)
{xb, vb} = {Nx.backend_copy(x, Nx.BinaryBackend), Nx.backend_copy(v, Nx.BinaryBackend)}
eval = Nx.Defn.jit(&Bench.WhileSmall.run/3, compiler: Nx.Defn.Evaluator)
eval_ms = Bench.WhileSmall.median_ms(fn -> eval.(xb, vb, m) end, 3) * n / m

py = Path.join(__DIR__, "while_small.py")

xla =
  case System.cmd("python3", [py, to_string(n)], stderr_to_stdout: true) do
    {out, 0} ->
      [ms, a, b, c | version] = out |> String.split("\n", trim: true) |> List.last() |> String.split(" ")

      %{
        ms: String.to_float(ms),
        first: Enum.map([a, b, c], &String.to_float/1),
        version: Enum.join(version, " ")
      }

    {out, _} ->
      %{error: String.slice(out, -200, 200)}
  end

cpu = File.read!("/proc/cpuinfo") |> then(&Regex.run(~r/model name\s*:\s*(.*)/, &1)) |> List.last()
IO.puts("machine: #{cpu}, #{System.schedulers_online()} schedulers; #{n} iterations")

IO.puts(
  "ExBurn.Compiler: #{Float.round(burn_ms, 1)} ms (#{Float.round(burn_ms * 1000 / n, 2)} us/iteration), first values #{inspect(got)}"
)

IO.puts(
  "Evaluator + BinaryBackend: #{Float.round(eval_ms, 1)} ms (scaled from #{m} iterations): ExBurn #{Float.round(eval_ms / burn_ms, 2)}x faster"
)

case xla do
  %{ms: ms, first: first, version: version} ->
    IO.puts(
      "XLA (#{version}, jax.lax.while_loop): #{Float.round(ms, 2)} ms, first values #{inspect(first)}: ExBurn / XLA speed #{Float.round(ms / burn_ms, 4)}x"
    )

  %{error: e} ->
    IO.puts("XLA: not run (#{e})")
end
