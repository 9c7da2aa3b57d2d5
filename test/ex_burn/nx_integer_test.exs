# Compiled only when Nx is loadable (the Nx-free build has no Nx modules to refer to).
if Code.ensure_loaded?(Nx) do
  defmodule ExBurn.NxIntegerTest do
    @moduledoc """
    Integer semantics bit for bit against `Nx.BinaryBackend`: every integer op on every integer
    type over edge values (0, ±1, the type's min and max, 2^(bits-1) and its neighbours, powers
    of two; every value of the 8-bit types), eagerly (`ExBurn.Backend`) and compiled
    (`ExBurn.Compiler`). Nx computes integers with big integers and stores the result's low bits
    (two's complement), so wrapping, shifts by the width or more and u64 values above 2^63 all
    have one answer. Each op x type x mode is one call on tensors of all the cases.
    """
    use ExUnit.Case, async: true
    import Bitwise

    @moduletag :nx

    @signed [{:s, 8}, {:s, 16}, {:s, 32}, {:s, 64}]
    @unsigned [{:u, 8}, {:u, 16}, {:u, 32}, {:u, 64}]
    @ints @signed ++ @unsigned

    @arith [:add, :subtract, :multiply, :min, :max, :bitwise_and, :bitwise_or, :bitwise_xor]
    @compare [:equal, :not_equal, :less, :less_equal, :greater, :greater_equal]
    @unary [:negate, :abs, :sign, :bitwise_not, :population_count, :count_leading_zeros]

    # Type pairs whose merged type differs from both (or mixes signedness).
    @mixed [
      {{:u, 8}, {:s, 8}},
      {{:u, 64}, {:s, 64}},
      {{:u, 32}, {:s, 8}},
      {{:s, 16}, {:u, 16}},
      {{:u, 64}, {:u, 8}}
    ]

    setup do
      Application.ensure_all_started(:nx)
      :ok
    end

    # ---- element-wise binary ----

    for op <- @arith ++ @compare ++ [:quotient, :remainder, :divide], type <- @ints do
      @tag op: op
      test "#{op} on #{inspect(type)} over all pairs of edge values" do
        type = unquote(type)
        op = unquote(op)

        # (no zero divisors: quotient and remainder by zero raise, below)
        pairs = edge_pairs(type, unquote(op in [:quotient, :remainder, :divide]))

        check(&apply(Nx, op, [&1, &2]), pair_args(pairs, type, type), "#{op} #{inspect(type)}")
      end
    end

    for op <- [:left_shift, :right_shift], type <- @ints do
      @tag op: op
      test "#{op} on #{inspect(type)} by 0..70" do
        type = unquote(type)
        pairs = for a <- edge(type), b <- 0..70, do: {a, b}

        check(
          &apply(Nx, unquote(op), [&1, &2]),
          pair_args(pairs, type, type),
          "#{unquote(op)} #{inspect(type)}"
        )
      end
    end

    for type <- @ints do
      @tag op: :pow
      test "pow on #{inspect(type)}" do
        type = unquote(type)
        bases = Enum.uniq(edge(type) ++ Enum.map([5, 7, -3, -5, 255], &wrap(&1, type)))
        small = for a <- bases, b <- 0..70, do: {a, b}
        check(&Nx.pow/2, pair_args(small, type, type), "pow #{inspect(type)} by 0..70")
        # exponents of every size, on the bases whose powers the reference can compute
        huge =
          for a <- Enum.uniq(Enum.filter([0, 1, -1], &(wrap(&1, type) == &1))),
              b <- edge(type),
              b >= 0,
              do: {a, b}

        check(&Nx.pow/2, pair_args(huge, type, type), "pow #{inspect(type)} by large exponents")
      end
    end

    # What the second operand of `op` is: a shift amount or exponent, a divisor, any value.
    op_class = fn
      op when op in [:pow, :left_shift, :right_shift] -> :amount
      op when op in [:quotient, :remainder] -> :divisor
      _ -> :any
    end

    for {ta, tb} <- @mixed,
        op <- @arith ++ @compare ++ [:quotient, :remainder, :pow, :left_shift, :right_shift] do
      @tag op: op
      test "#{op} on #{inspect(ta)} and #{inspect(tb)}" do
        {ta, tb} = {unquote(ta), unquote(tb)}
        op = unquote(op)

        bs =
          case unquote(op_class.(op)) do
            :amount -> Enum.map([0, 1, 2, 7, 8, 31, 63, 64, 65], &wrap(&1, tb))
            :divisor -> Enum.reject(edge(tb), &(&1 == 0))
            :any -> edge(tb)
          end

        pairs = for a <- edge(ta), b <- bs, do: {a, b}
        check(&apply(Nx, op, [&1, &2]), pair_args(pairs, ta, tb), "#{op} #{inspect(ta)} #{inspect(tb)}")
      end
    end

    for type <- @ints do
      test "scalar operands on #{inspect(type)} (broadcast and literals)" do
        type = unquote(type)
        x = tensor(edge(type), type)

        for {name, fun} <- [
              shr: &Nx.right_shift(&1, 3),
              shl: &Nx.left_shift(&1, 65),
              shr_wide: &Nx.right_shift(&1, 64),
              add: &Nx.add(&1, 1),
              mul: &Nx.multiply(&1, 3),
              sub: &Nx.subtract(1, &1),
              quot: &Nx.quotient(&1, 3),
              rem: &Nx.remainder(&1, -2),
              less: &Nx.less(&1, 2),
              max: &Nx.max(&1, 1),
              pow: &Nx.pow(&1, 3)
            ] do
          check(fun, [x], "#{name} #{inspect(type)}")
        end
      end
    end

    test "integer division divides the f64 values and rounds the quotient once" do
      # dividing the f32 roundings of the operands gives 1381989.625 for the first pair
      for type <- [{:s, 32}, {:u, 32}, {:s, 64}, {:u, 64}] do
        a = tensor([1_080_715_965, 7, 2_147_483_647, 16_777_217, 123_456_789], type)
        b = tensor([782, 2, 3, 3, 10], type)
        check(&Nx.divide/2, [a, b], "divide #{inspect(type)}")
      end
    end

    for type <- @ints do
      test "refusals on #{inspect(type)}: division by zero, negative shifts and exponents" do
        type = unquote(type)
        x = tensor([1, 2, 3], type)
        zero = tensor([1, 0, 1], type)
        check(&Nx.quotient/2, [x, zero], "quotient by zero")
        check(&Nx.remainder/2, [x, zero], "remainder by zero")

        if unquote(type in @signed) do
          negative = tensor([1, -1, 2], type)
          check(&Nx.left_shift/2, [x, negative], "left shift by -1")
          check(&Nx.right_shift/2, [x, negative], "right shift by -1")
          check(&Nx.pow/2, [x, negative], "pow by -1")
        end
      end
    end

    # ---- element-wise unary ----

    for op <- @unary, type <- @ints do
      @tag op: op
      test "#{op} on #{inspect(type)}" do
        type = unquote(type)
        check(&apply(Nx, unquote(op), [&1]), [tensor(wide(type), type)], "#{unquote(op)} #{inspect(type)}")
      end
    end

    # ---- reductions, sorts ----

    for type <- @ints do
      test "reductions on #{inspect(type)}" do
        type = unquote(type)
        x = matrix(type)

        for {name, fun} <- [
              sum: &Nx.sum/1,
              sum_rows: &Nx.sum(&1, axes: [1]),
              sum_cols: &Nx.sum(&1, axes: [0], keep_axes: true),
              sum_typed: &Nx.sum(&1, axes: [1], type: type),
              product: &Nx.product/1,
              product_rows: &Nx.product(&1, axes: [1]),
              product_cols: &Nx.product(&1, axes: [0]),
              reduce_min: &Nx.reduce_min/1,
              reduce_min_rows: &Nx.reduce_min(&1, axes: [1]),
              reduce_max: &Nx.reduce_max/1,
              reduce_max_cols: &Nx.reduce_max(&1, axes: [0]),
              argmin: &Nx.argmin/1,
              argmin_rows: &Nx.argmin(&1, axis: 1),
              argmin_high: &Nx.argmin(&1, axis: 0, tie_break: :high),
              argmax: &Nx.argmax/1,
              argmax_rows: &Nx.argmax(&1, axis: 1),
              argmax_high: &Nx.argmax(&1, axis: 1, tie_break: :high)
            ] do
          check(fun, [x], "#{name} #{inspect(type)}")
        end
      end

      test "sort and argsort on #{inspect(type)}" do
        type = unquote(type)
        values = wide(type)
        # every value twice, in an order unlike the sorted one, so ties are exercised
        shuffled = Enum.sort_by(values ++ values, &:erlang.phash2/1)
        x = tensor(shuffled, type)
        m = matrix(type)

        for {name, fun} <- [
              sort: &Nx.sort/1,
              sort_desc: &Nx.sort(&1, direction: :desc),
              argsort: &Nx.argsort(&1, stable: true),
              argsort_desc: &Nx.argsort(&1, direction: :desc, stable: true)
            ] do
          check(fun, [x], "#{name} #{inspect(type)}")
          check(fun, [m], "#{name} rows #{inspect(type)}")
        end
      end
    end

    # ---- conversions ----

    for from <- @ints do
      test "as_type from #{inspect(from)} to every integer and float type" do
        from = unquote(from)
        x = tensor(wide(from) ++ [wrap(0x1000_0000_0000_0801, from), wrap(0x1000_0010_0000_0001, from)], from)

        # (not bf16: Nx.BinaryBackend stores bf16 by truncating the f32 value, ExBurn rounds it
        # to nearest as for every bf16 result)
        for to <- @ints ++ [{:f, 16}, {:f, 32}, {:f, 64}] do
          check(&Nx.as_type(&1, to), [x], "#{inspect(from)} -> #{inspect(to)}")
        end
      end
    end

    for from <- [{:f, 32}, {:f, 64}] do
      test "as_type from #{inspect(from)} (NaN, infinities, out of range) to every integer type" do
        from = unquote(from)
        x = Nx.tensor(edge_floats(from), type: from, backend: Nx.BinaryBackend)

        for to <- @ints do
          check(&Nx.as_type(&1, to), [x], "#{inspect(from)} -> #{inspect(to)}")
        end
      end
    end

    # ---- Nx.Random in f64 (built on u64 shifts) ----

    test "f64 random draws: uniform in [0, 1) and normal never NaN over 10^6 draws, eager and compiled" do
      key = Nx.Random.key(1234) |> Nx.backend_copy(ExBurn.Backend)
      uniform = fn key -> Nx.Random.uniform(key, shape: {1_000_000}, type: :f64) |> elem(0) end
      normal = fn key -> Nx.Random.normal(key, shape: {1_000_000}, type: :f64) |> elem(0) end

      for {mode, run} <- modes() do
        u = run.(uniform, [key])
        assert u.type == {:f, 64}
        assert Nx.to_number(Nx.any(Nx.is_nan(u))) == 0, "#{mode}: NaN in uniform"
        assert Nx.to_number(Nx.reduce_min(u)) >= 0.0, "#{mode}: uniform below 0"
        assert Nx.to_number(Nx.reduce_max(u)) < 1.0, "#{mode}: uniform at or above 1"
        assert_in_delta Nx.to_number(Nx.mean(u)), 0.5, 0.005

        n = run.(normal, [key])
        bad = Nx.logical_or(Nx.is_nan(n), Nx.is_infinity(n))
        assert Nx.to_number(Nx.any(bad)) == 0, "#{mode}: NaN or infinity in normal"
        assert_in_delta Nx.to_number(Nx.mean(n)), 0.0, 0.01
        assert_in_delta Nx.to_number(Nx.standard_deviation(n)), 1.0, 0.01
      end
    end

    test "f64 and f32 uniform draws are Nx's bit for bit" do
      key = Nx.Random.key(7)

      for type <- [{:f, 64}, {:f, 32}] do
        check(
          fn key -> Nx.Random.uniform(key, shape: {256}, type: type) |> elem(0) end,
          [key],
          "uniform #{inspect(type)}"
        )
      end
    end

    # ---- helpers ----

    defp modes do
      [
        eager: fn fun, args -> apply(fun, Enum.map(args, &Nx.backend_copy(&1, ExBurn.Backend))) end,
        compiled: fn fun, args ->
          Nx.Defn.jit_apply(fun, Enum.map(args, &Nx.backend_copy(&1, ExBurn.Backend)),
            compiler: ExBurn.Compiler
          )
        end
      ]
    end

    # `fun` of `args` (BinaryBackend tensors) eagerly and compiled against Nx.BinaryBackend, bit for
    # bit; where the reference raises, ours must raise ArgumentError (eager) or ExBurn.Error of
    # kind :argument (compiled).
    defp check(fun, args, label) do
      want =
        try do
          {:ok, apply(fun, args)}
        rescue
          e -> {:raise, e}
        end

      for {mode, run} <- modes() do
        case want do
          {:raise, e} ->
            got =
              try do
                {:ok, run.(fun, args)}
              rescue
                e -> {:raise, e}
              end

            case got do
              {:raise, %ArgumentError{}} ->
                :ok

              {:raise, %ExBurn.Error{kind: :argument}} when mode == :compiled ->
                :ok

              other ->
                flunk("#{label} (#{mode}): Nx raises #{inspect(e)}, ExBurn gave #{inspect(other)}")
            end

          {:ok, want} ->
            got = run.(fun, args)
            assert {got.type, got.shape} == {want.type, want.shape}, "#{label} (#{mode}): type/shape"
            got = Nx.backend_copy(got, Nx.BinaryBackend)

            if Nx.to_binary(got) != Nx.to_binary(want) do
              flunk("#{label} (#{mode}): differs from Nx at\n" <> diff(args, got, want))
            end
        end
      end
    end

    defp diff(args, got, want) do
      ins = Enum.map(args, &(&1 |> Nx.backend_copy(Nx.BinaryBackend) |> Nx.to_flat_list()))
      g = Nx.to_flat_list(got)
      w = Nx.to_flat_list(want)
      n = length(g)
      ins = Enum.map(ins, fn l -> if length(l) == n, do: l, else: List.duplicate(:_, n) end)

      rows =
        [g, w | ins]
        |> Enum.zip()
        |> Enum.reject(fn row -> elem(row, 0) == elem(row, 1) end)

      shown =
        rows
        |> Enum.take(8)
        |> Enum.map_join("\n", fn row ->
          [g, w | ins] = Tuple.to_list(row)
          "  args #{inspect(ins)}: got #{inspect(g)}, Nx #{inspect(w)}"
        end)

      shown <> "\n  (#{length(rows)} of #{n} elements differ)"
    end

    # Every pair of edge values of `type` (without zero second operands for divisions).
    defp edge_pairs(type, division?) do
      for a <- edge(type), b <- edge(type), not division? or b != 0, do: {a, b}
    end

    defp tensor(values, type), do: Nx.tensor(values, type: type, backend: Nx.BinaryBackend)

    defp pair_args(pairs, ta, tb) do
      {as, bs} = Enum.unzip(pairs)
      [tensor(as, ta), tensor(bs, tb)]
    end

    # `v` stored in `type` (its low bits, two's complement).
    defp wrap(v, {:u, bits}), do: Integer.mod(v, 1 <<< bits)
    defp wrap(v, {:s, bits}), do: Integer.mod(v + (1 <<< (bits - 1)), 1 <<< bits) - (1 <<< (bits - 1))

    # 0, ±1, ±2, 3, the extremes and their neighbours, 2^(bits-1) and its neighbours, a bit
    # pattern: about 14 values per type.
    defp edge({_, bits} = type) do
      half = 1 <<< (bits - 1)
      pattern = div((1 <<< bits) - 1, 3) ||| 1

      [0, 1, -1, 2, -2, 3, half, half - 1, half + 5, -half, (1 <<< bits) - 1, (1 <<< bits) - 2, pattern]
      |> Enum.map(&wrap(&1, type))
      |> Enum.uniq()
    end

    # edge values, every power of two and its neighbours, their negations; every value of the
    # 8-bit types
    defp wide({_, 8} = type), do: Enum.map(0..255, &wrap(&1, type))

    defp wide({_, bits} = type) do
      powers = for k <- 0..(bits - 1), p = 1 <<< k, v <- [p, p - 1, p + 1, -p, -p - 1], do: v
      Enum.uniq(edge(type) ++ Enum.map(powers, &wrap(&1, type)))
    end

    # A matrix of rows of four edge values (products wrap, extremes and ties in every row).
    defp matrix(type) do
      values = edge(type)
      rows = values |> Enum.chunk_every(4, 4, [1, 1, 1, 1]) |> Enum.map(&Enum.take(&1, 4))
      rows = rows ++ [Enum.take(Enum.reverse(values), 4), List.duplicate(Enum.max(values), 4)]
      tensor(rows, type)
    end

    defp edge_floats(type) do
      finite = [
        0.0,
        -0.0,
        0.4,
        -0.4,
        0.5,
        -0.5,
        0.99,
        1.0,
        -1.0,
        1.5,
        -1.5,
        2.5,
        -2.5,
        127.9,
        128.0,
        -128.0,
        -128.9,
        -129.0,
        255.5,
        256.0,
        -256.5,
        32767.9,
        32768.0,
        -32769.0,
        65535.9,
        65536.0,
        2_147_483_520.0,
        2_147_483_648.0,
        -2_147_483_648.0,
        -2_147_483_904.0,
        4_294_967_040.0,
        4_294_967_296.0,
        -4_294_967_296.0,
        9.223372036854775e18,
        -9.223372036854775e18,
        9.223372036854776e18,
        -9.223372036854776e18,
        1.8446744073709552e19,
        -1.8446744073709552e19,
        3.0e19,
        -3.0e19,
        1.0e20,
        -1.0e20,
        1.2345e30,
        -1.2345e30,
        3.4e38,
        -3.4e38,
        1.0e-45
      ]

      wide =
        if type == {:f, 64},
          do: [1.0e300, -1.0e300, 1.7976931348623157e308, 4.9e-324, 1.0e22 + 1.0e6],
          else: []

      finite ++ wide ++ [:nan, :infinity, :neg_infinity]
    end
  end
end
