# Compiled only when Nx is loadable (the Nx-free build has no Nx modules to refer to).
if Code.ensure_loaded?(Nx) do
  defmodule ExBurn.NxFunctionBitsTest do
    @moduledoc """
    f32 element-wise functions, remainders and powers on the CPU give `Nx.BinaryBackend`'s bits
    (the function in f64, rounded once to f32) over their domains, eager and compiled alike. (Not subnormal inputs
    or results out of f32's range: `Nx.BinaryBackend` writes subnormal results as zero and
    raises on some overflows.)
    """
    use ExBurn.Test.NxCase, async: true

    @ops [
      exp: :all,
      expm1: :plain,
      log: :positive,
      log1p: :plain_positive,
      sigmoid: :all,
      sqrt: :positive,
      rsqrt: :positive,
      cbrt: :plain,
      sin: :all,
      cos: :all,
      tan: :all,
      asin: :unit,
      acos: :unit,
      atan: :all,
      sinh: :all,
      cosh: :all,
      tanh: :all,
      asinh: :all,
      acosh: :above_one,
      atanh: :unit,
      erf: :all,
      erfc: :all,
      erf_inv: :plain_unit
    ]

    setup_all do
      :rand.seed(:exsss, {7, 11, 13})
      wide = for _ <- 1..6_000, do: (:rand.uniform() - 0.5) * 40
      unit = for _ <- 1..6_000, do: (:rand.uniform() - 0.5) * 1.98
      f32 = &Nx.tensor(&1, type: :f32, backend: Nx.BinaryBackend)

      positive = Enum.map(wide ++ unit, &(abs(&1) + 1.0e-3))

      # (`plain`: without zeros and tiny values, where Nx.BinaryBackend's formulas for expm1,
      # log1p, cbrt and erf_inv lose -0.0 and round expm1(1.0e-30) to 0; ExBurn gives libm's)
      domains = %{
        all: f32.(wide ++ unit ++ [0.0, -0.0, 1.0e-30, -1.0e-30, 88.7, -87.3]),
        plain: f32.(wide ++ unit ++ [88.7, -87.3]),
        positive: f32.(positive ++ [1.0e-30, 3.0e38]),
        plain_positive: f32.(positive ++ [3.0e38]),
        unit: f32.(unit ++ [0.0, -0.0, 0.99999994]),
        plain_unit: f32.(unit ++ [0.99999994]),
        above_one: f32.(Enum.map(wide, &(abs(&1) + 1.0)) ++ [1.0])
      }

      %{domains: domains}
    end

    defp ulps_apart(a, b) do
      as_int = &(&1 |> Nx.bitcast(:s32) |> Nx.as_type(:s64))

      differ =
        Nx.not_equal(as_int.(a), as_int.(b))
        |> Nx.logical_and(Nx.logical_not(Nx.logical_and(Nx.is_nan(a), Nx.is_nan(b))))

      Nx.to_number(Nx.sum(differ))
    end

    # `op` of `args` on ExBurn, eager and inside ExBurn.Compiler (its first operand computed
    # there), against Nx.BinaryBackend, bit for bit
    defp assert_bits(op, args) do
      want = apply(Nx, op, args)
      burn = Enum.map(args, &Nx.backend_copy(&1, ExBurn.Backend))
      eager = apply(Nx, op, burn) |> binary()

      fun =
        case burn do
          [_] -> &apply(Nx, op, [Nx.multiply(&1, 1.0)])
          [_, _] -> &apply(Nx, op, [Nx.multiply(&1, 1.0), &2])
        end

      compiled = Nx.Defn.jit_apply(fun, burn, compiler: ExBurn.Compiler) |> binary()
      assert ulps_apart(eager, want) == 0, "#{op} eager: #{ulps_apart(eager, want)} elements differ"
      assert ulps_apart(compiled, want) == 0, "#{op} compiled: #{ulps_apart(compiled, want)} elements differ"
    end

    for op <- [:remainder, :pow, :atan2] do
      test "#{op}", %{domains: domains} do
        op = unquote(op)
        # (no zero divisors, no zero to a negative power: Nx.BinaryBackend raises on those)
        x = domains.plain
        y = if op == :pow, do: Nx.divide(Nx.reverse(x), 7), else: Nx.reverse(x)
        x = if op == :pow, do: Nx.add(Nx.abs(x), 0.01), else: x
        assert_bits(op, [x, y])
      end
    end

    for {op, domain} <- @ops do
      test "#{op}", %{domains: domains} do
        assert_bits(unquote(op), [domains[unquote(domain)]])
      end
    end
  end
end
