if Code.ensure_loaded?(Nx) do
  defmodule ExBurn.NxComplexTest do
    @moduledoc """
    Complex lowerings that Nx's own suite found missing or different (bench/results/conformance.md),
    each compared with Nx.BinaryBackend (+ Nx.Defn.Evaluator) by value.
    """
    use ExBurn.Test.NxCase, async: false

    import ExBurn.Test.NxReference, except: [assert_close: 3]

    defp assert_close(got, want, tol),
      do: ExBurn.Test.NxReference.assert_close(got, want, tol, type: true, equal_nan: true)

    defp same_number?(%Complex{re: a, im: b}, %Complex{re: c, im: d}),
      do: same_number?(a, c) and same_number?(b, d)

    defp same_number?(a, b) when is_float(a) and is_float(b), do: abs(a - b) <= 1.0e-5 * max(abs(a), 1.0)
    defp same_number?(a, b), do: a == b

    # A well-conditioned lower (upper) triangular complex matrix, batch shape `batch`.
    defp triangular(batch, n, lower?, type) do
      shape = List.to_tuple(batch ++ [n, n])
      re = Nx.iota(shape, type: :f64) |> Nx.multiply(0.37) |> Nx.sin()
      im = Nx.iota(shape, type: :f64) |> Nx.multiply(0.61) |> Nx.cos()
      mask = if lower?, do: Nx.tri(n, n), else: Nx.transpose(Nx.tri(n, n))
      a = Nx.select(Nx.broadcast(mask, shape), Nx.complex(re, im), 0)
      a |> Nx.add(Nx.multiply(Nx.eye(n), 3)) |> Nx.as_type(type)
    end

    defp right_hand_side(shape, type) do
      re = Nx.iota(shape, type: :f64) |> Nx.multiply(0.83) |> Nx.cos()
      im = Nx.iota(shape, type: :f64) |> Nx.multiply(0.29) |> Nx.sin()
      Nx.complex(re, im) |> Nx.as_type(type)
    end

    describe "complex triangular_solve" do
      test "every option, b of rank 1 and 2, batched, c64 and c128, eager and compiled" do
        for type <- [:c64, :c128],
            batch <- [[], [2]],
            lower <- [true, false],
            left <- [true, false],
            transform <- [:none, :transpose, :conjugate],
            b_rank <- [1, 2] do
          a = triangular(batch, 3, lower, type)
          b_dims = if b_rank == 1, do: [3], else: if(left, do: [3, 2], else: [2, 3])
          b = right_hand_side(List.to_tuple(batch ++ b_dims), type)
          opts = [lower: lower, left_side: left, transform_a: transform]
          solve = &Nx.LinAlg.triangular_solve(&1, &2, opts)
          want = on_binary(solve, [a, b])
          tol = if type == :c64, do: 1.0e-5, else: 1.0e-12
          assert_close(solve.(a, b), want, tol)
          assert_close(Nx.Defn.jit_apply(solve, [a, b], compiler: ExBurn.Compiler), want, tol)
        end
      end

      test "a complex matrix with a real right-hand side, a real matrix with a complex one" do
        a = triangular([], 4, true, :c64)
        b = Nx.tensor([1.0, -2.0, 0.5, 3.0])

        assert_close(
          Nx.LinAlg.triangular_solve(a, b),
          on_binary(&Nx.LinAlg.triangular_solve/2, [a, b]),
          1.0e-5
        )

        ra = Nx.real(a)
        cb = right_hand_side({4, 2}, :c64)

        for opts <- [[], [transform_a: :conjugate, lower: false, left_side: true]] do
          ra = if opts == [], do: ra, else: Nx.transpose(ra)
          want = on_binary(&Nx.LinAlg.triangular_solve(&1, &2, opts), [ra, cb])
          assert_close(Nx.LinAlg.triangular_solve(ra, cb, opts), want, 1.0e-5)
        end
      end

      test "entries on the unused side of the diagonal are ignored; a zero diagonal raises eagerly, gives NaN compiled" do
        a =
          Nx.tensor([
            [1, Complex.new(5, 5), 7],
            [1, Complex.new(0, 1), Complex.new(:nan, 1)],
            [Complex.new(0, 1), 1, 1]
          ])

        b = Nx.tensor([1, -1, Complex.new(3, 3)])

        assert_close(
          Nx.LinAlg.triangular_solve(a, b),
          on_binary(&Nx.LinAlg.triangular_solve/2, [a, b]),
          1.0e-6
        )

        zero = Nx.broadcast(Nx.tensor(0, type: :c64), {3, 3})

        assert_raise ArgumentError, "can't solve for singular matrix", fn ->
          Nx.LinAlg.triangular_solve(zero, zero)
        end

        solved = Nx.Defn.jit_apply(&Nx.LinAlg.triangular_solve/2, [zero, zero], compiler: ExBurn.Compiler)
        assert solved |> Nx.is_nan() |> Nx.all() |> Nx.to_number() == 1
      end

      test "solve, invert and matrix_power with a negative exponent on complex matrices" do
        m = Nx.tensor([[Complex.new(1, 1), 2, Complex.new(0, 1)], [3, Complex.new(0, -2), 1], [0.5, 1, 4]])
        v = Nx.tensor([1, Complex.new(0, 1), -2])
        assert_close(Nx.LinAlg.solve(m, v), on_binary(&Nx.LinAlg.solve/2, [m, v]), 1.0e-5)
        assert_close(Nx.LinAlg.invert(m), on_binary(&Nx.LinAlg.invert/1, [m]), 1.0e-5)
        power = &Nx.LinAlg.matrix_power(&1, -3)
        assert_close(power.(m), on_binary(power, [m]), 1.0e-5)
      end
    end

    describe "complex reduce and window_reduce with a function" do
      defp assert_fold(fun, args) do
        want = on_binary(fun, args)
        assert_close(apply(fun, args), want, 1.0e-5)
        assert_close(Nx.Defn.jit_apply(fun, args, compiler: ExBurn.Compiler), want, 1.0e-5)
      end

      test "Nx's cases: infinite and finite elements added" do
        t = Nx.tensor([Complex.new(:infinity, 3), Complex.new(-2, 4)])
        assert_fold(&Nx.reduce(&1, 0, fn x, acc -> Nx.add(x, acc) end), [t])
        assert_fold(&Nx.window_reduce(&1, 0, {2}, fn x, acc -> Nx.add(x, acc) end), [t])
      end

      test "any axes, mixed real and complex ops, a real input with a complex accumulator" do
        z =
          Nx.iota({2, 3, 4})
          |> Nx.add(Nx.multiply(Nx.Constants.i(), Nx.remainder(Nx.iota({2, 3, 4}), 3)))
          |> Nx.divide(7)

        for opts <- [[], [axes: [1]], [axes: [0, 2]], [axes: [2], keep_axes: true]] do
          fun = fn x, acc -> Nx.add(Nx.multiply(x, acc), Nx.conjugate(x)) end
          assert_fold(&Nx.reduce(&1, Complex.new(1, 0.5), opts, fun), [z])
        end

        real_part = fn x, acc -> Nx.add(Nx.multiply(Nx.real(x), 2), acc) end
        assert_fold(&Nx.reduce(&1, Complex.new(0.0, 0.25), [axes: [1]], real_part), [z])
        larger = fn x, acc -> Nx.select(Nx.greater(Nx.abs(x), Nx.abs(acc)), x, acc) end
        assert_fold(&Nx.reduce(&1, Complex.new(0.1, 0.0), [axes: [0]], larger), [z])
        assert_fold(&Nx.reduce(Nx.as_type(&1, :c128), 0, fn x, acc -> Nx.add(x, acc) end), [z])

        assert_fold(
          &Nx.reduce(&1, Complex.new(0, 1), fn x, acc -> Nx.multiply(x, acc) end),
          [Nx.tensor([1.0, 2.0, 3.0])]
        )
      end

      test "window_reduce with strides, padding and dilations" do
        z = Nx.iota({2, 3, 4}) |> Nx.add(Nx.Constants.i()) |> Nx.divide(5)
        fun = fn x, acc -> Nx.add(Nx.multiply(x, x), acc) end

        for {window, opts} <- [
              {{1, 2, 2}, []},
              {{2, 2, 1}, [strides: [1, 2, 1], padding: :same]},
              {{1, 2, 3}, [padding: [{0, 0}, {1, 0}, {1, 1}], window_dilations: [1, 1, 2]]}
            ] do
          assert_fold(&Nx.window_reduce(&1, Complex.new(0.5, -1), window, opts, fun), [z])
        end
      end

      test "a function that is not element-wise runs on the host eagerly and raises naming the op compiled" do
        t = Nx.tensor([Complex.new(1, 2), Complex.new(3, 4)])
        fun = &Nx.reduce(&1, 0, fn x, acc -> Nx.sum(Nx.stack([x, acc])) end)
        assert_close(fun.(t), on_binary(fun, [t]), 1.0e-6)

        error = assert_raise ExBurn.Error, fn -> Nx.Defn.jit_apply(fun, [t], compiler: ExBurn.Compiler) end

        assert error.kind == :unsupported and error.message =~ "(got :sum)"
      end
    end

    describe "complex special values and products" do
      # Every combination of Inf, -Inf, NaN, 0, 3 and -2 as real and imaginary parts.
      defp special_grid do
        values = [:infinity, :neg_infinity, :nan, 0.0, 3.0, -2.0]
        for re <- values, im <- values, do: Complex.new(re, im)
      end

      test "sqrt, rsqrt, cbrt, acosh, asinh, asin, acos, log, log1p and abs as Complex computes them" do
        zs = special_grid()
        t = Nx.tensor(zs, type: :c64)

        for f <- [:sqrt, :rsqrt, :cbrt, :acosh, :asinh, :asin, :acos, :log, :log1p, :abs] do
          got = apply(Nx, f, [t]) |> binary() |> Nx.to_flat_list()

          for {z, g} <- Enum.zip(zs, got) do
            # Complex itself raises for some (cbrt of a NaN part): nothing to compare
            want =
              try do
                z
                |> Nx.tensor(type: :c64, backend: Nx.BinaryBackend)
                |> then(&apply(Nx, f, [&1]))
                |> Nx.to_number()
              rescue
                ArithmeticError -> :raises
              end

            assert want == :raises or same_number?(g, want),
                   "#{f}(#{inspect(z)}): got #{inspect(g)}, want #{inspect(want)}"
          end
        end
      end

      test "a product starts from 1 + 0i: an infinite first factor makes it NaN, as in Nx" do
        t = Nx.tensor([Complex.new(:infinity, 3), Complex.new(-2, 4)])
        got = t |> Nx.product() |> binary()
        assert Nx.to_number(Nx.is_nan(Nx.real(got))) == 1 and Nx.to_number(Nx.is_nan(Nx.imag(got))) == 1

        for list <- [
              [Complex.new(2, 1), Complex.new(:infinity, 0)],
              [Complex.new(:infinity, 3)],
              [Complex.new(1, 2), Complex.new(3, -1), Complex.new(0.5, 0.5)]
            ] do
          t = Nx.tensor(list)
          assert_close(Nx.product(t), on_binary(&Nx.product/1, [t]), 1.0e-6)
        end
      end

      test "window_product multiplies exactly, as Nx's fold from 1" do
        t = Nx.tensor([Complex.new(2, 3), Complex.new(-2, 7)])
        assert t |> Nx.window_product({2}) |> binary() == on_binary(&Nx.window_product(&1, {2}), [t])

        z = Nx.iota({2, 3, 4}) |> Nx.add(Nx.Constants.i()) |> Nx.subtract(5)

        for {window, opts} <- [
              {{1, 2, 2}, []},
              {{2, 2, 1}, [strides: [1, 2, 1], padding: :same]},
              {{1, 2, 3}, [padding: [{0, 0}, {1, 0}, {1, 1}], window_dilations: [1, 1, 2]]}
            ] do
          product = &Nx.window_product(&1, window, opts)
          assert binary(product.(z)) == on_binary(product, [z])
          assert binary(Nx.Defn.jit_apply(product, [z], compiler: ExBurn.Compiler)) == on_binary(product, [z])
        end
      end

      test "atan2 of complex numbers: zero imaginary parts only, else ArithmeticError (NaN when compiled)" do
        a = Nx.tensor([Complex.new(7, 0), Complex.new(-1, 0)])
        b = Nx.tensor([Complex.new(2.0, 0.0), Complex.new(-3, 0)])
        assert_close(Nx.atan2(a, b), on_binary(&Nx.atan2/2, [a, b]), 1.0e-6)

        for {x, y} <- [
              {7, Complex.new(:infinity, 3)},
              {Complex.new(2, 1), 7},
              {a, Nx.tensor(Complex.new(1, :nan))}
            ] do
          assert_raise ArithmeticError, "Complex.atan2 only accepts real numbers as arguments", fn ->
            Nx.atan2(x, y)
          end
        end

        c = Nx.tensor([Complex.new(2, 0), Complex.new(2, 1)])
        got = Nx.Defn.jit_apply(&Nx.atan2/2, [a, c], compiler: ExBurn.Compiler) |> binary()
        assert_close(got[0], on_binary(&Nx.atan2/2, [a[0], c[0]]), 1.0e-6)
        assert Nx.to_number(Nx.is_nan(Nx.real(got[1]))) == 1 and Nx.to_number(Nx.is_nan(Nx.imag(got[1]))) == 1
      end
    end

    describe "complex pow" do
      test "as Complex.pow in f64, rounded once: exact integer powers, special cases, special values" do
        values = [:infinity, :neg_infinity, :nan, 0.0, 3.0, -2.0, 1.0, -1.0, 0.5]
        zs = for re <- values, im <- [0.0, 3.0, -2.0, :infinity, :nan], do: Complex.new(re, im)
        pairs = for a <- zs, b <- zs, do: {a, b}
        a = Nx.tensor(Enum.map(pairs, &elem(&1, 0)), type: :c64)
        b = Nx.tensor(Enum.map(pairs, &elem(&1, 1)), type: :c64)
        got = Nx.pow(a, b) |> binary() |> Nx.to_flat_list()

        for {{x, y}, g} <- Enum.zip(pairs, got) do
          on = &Nx.tensor(&1, type: :c64, backend: Nx.BinaryBackend)
          want = Nx.pow(on.(x), on.(y)) |> Nx.to_number()

          assert same_number?(g, want),
                 "#{inspect(x)} ** #{inspect(y)}: got #{inspect(g)}, want #{inspect(want)}"
        end

        x = Nx.tensor([[1.5, -2.0], [0.3, 4.0]])
        y = Nx.tensor([Complex.new(0.5, 1), Complex.new(2, 0)])
        assert_close(Nx.pow(x, y), on_binary(&Nx.pow/2, [x, y]), 1.0e-6)
      end

      test "Nx's gradient of powers: i ** 2 is exactly -1" do
        grad = fn t ->
          Nx.Defn.grad(t, &Nx.sum(Nx.concatenate([Nx.pow(&1, 2), Nx.pow(&1, 3)], axis: 1)))
        end

        t = Nx.tensor([[Complex.new(0, 1), 2], [3, Complex.new(0, 4)]])
        got = Nx.Defn.jit_apply(grad, [t], compiler: ExBurn.Compiler)

        assert binary(got) ==
                 Nx.tensor([[Complex.new(-3, 2), 16], [33, Complex.new(-48, 8)]], backend: Nx.BinaryBackend)
      end
    end
  end
end
