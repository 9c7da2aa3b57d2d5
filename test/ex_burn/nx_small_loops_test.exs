# Compiled only when Nx is loadable (the Nx-free build has no Nx modules to refer to).
if Code.ensure_loaded?(Nx) do
  defmodule ExBurn.NxSmallLoopsTest do
    @moduledoc """
    `while` loops over small tensors, written as Nx users write them (samplers, fixed-point
    iterations, descents), long enough that the CPU compiles their element-wise stretches to
    machine code: the same bits as `Nx.Defn.Evaluator` on `Nx.BinaryBackend` for finite
    values, and as the same program run op by op on ExBurn for NaN and infinities.
    """
    use ExBurn.Test.NxCase, async: true

    import Nx.Defn

    # more iterations than the CPU interprets before compiling (64)
    @iterations 150

    defn damped(x, v) do
      a = x * 1.0001 + v
      b = Nx.sin(a) * 0.5
      c = Nx.abs(b - x) + 0.1
      d = Nx.sqrt(c) * Nx.exp(-c)
      e = Nx.max(d, 0.0) + Nx.min(a, 1.0)
      f = e / (1.0 + Nx.abs(e))
      g = f - Nx.mean(f)
      g * 0.99 + x * 0.01
    end

    defn relax(x, v) do
      # a vector of the last axis and a scalar broadcast against [rows, cols]
      y = Nx.rsqrt(Nx.abs(x) + 1.0) * v - Nx.negate(x) / 3.0
      z = Nx.min(Nx.max(y, -2.0), 2.0)
      Nx.select(z > 0.25, z - 0.5, z + x * 0.125)
    end

    defn sampler(x, v) do
      # a comparison's mask feeding arithmetic, as a rejection step does
      keep = Nx.less_equal(Nx.abs(x), 1.5)
      step = Nx.cos(x + v) * 0.3 - Nx.tanh(x) * 0.1
      x + step * keep - (1 - keep) * x * 0.5
    end

    defn iterate(body_fun, x, v, n) do
      {_, x, _, _} =
        while {i = 0, x, v, n}, i < n do
          {i + 1, body_fun.(x, v), v, n}
        end

      x
    end

    defp run(compiler, backend, body, x, v) do
      {x, v} = {Nx.backend_copy(x, backend), Nx.backend_copy(v, backend)}

      Nx.with_default_backend(backend, fn ->
        Nx.Defn.jit_apply(&iterate(body, &1, &2, @iterations), [x, v], compiler: compiler)
      end)
    end

    defp bits(t), do: t |> Nx.backend_copy(Nx.BinaryBackend) |> Nx.to_binary()

    defp values(shape, seed) do
      n = Tuple.product(shape)
      :rand.seed(:exsss, {seed, seed, seed})
      for(_ <- 1..n, do: :rand.uniform() * 2 - 1) |> Nx.tensor(type: :f32) |> Nx.reshape(shape)
    end

    for name <- [:damped, :relax, :sampler], shape <- [{16}, {5}, {3, 4}, {2, 8}] do
      test "#{name} on #{inspect(shape)}: the Evaluator's bits" do
        {name, shape} = {unquote(name), unquote(Macro.escape(shape))}
        body = Function.capture(__MODULE__, name, 2)
        x = values(shape, 3)
        v = if name == :relax, do: values({elem(shape, tuple_size(shape) - 1)}, 5), else: values(shape, 5)
        got = run(ExBurn.Compiler, ExBurn.Backend, body, x, v)
        want = run(Nx.Defn.Evaluator, Nx.BinaryBackend, body, x, v)
        assert bits(got) == bits(want), "#{inspect(got)} vs #{inspect(want)}"
      end
    end

    test "NaN and infinities flow through a long loop as through its ops run one by one" do
      x =
        Nx.tensor(
          [
            :nan,
            :infinity,
            :neg_infinity,
            -0.0,
            0.0,
            1.0e30,
            -1.0e-30,
            2.5,
            -3.0,
            0.5,
            7.0,
            -7.0,
            1.0,
            -1.0,
            0.1,
            1.0e-40
          ],
          type: :f32
        )

      v = Nx.tensor(Enum.map(1..16, &(&1 / 10 - 0.8)), type: :f32)

      for body <- [&damped/2, &sampler/2] do
        got = run(ExBurn.Compiler, ExBurn.Backend, body, x, v)
        want = run(Nx.Defn.Evaluator, ExBurn.Backend, body, x, v)
        assert bits(got) == bits(want)
      end
    end
  end
end
