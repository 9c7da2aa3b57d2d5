if Code.ensure_loaded?(Nx) do
  defmodule ExBurn.NxConformanceTest do
    @moduledoc """
    Cases Nx's and Axon's own test suites found (bench/results/conformance.md), each compared
    with Nx.BinaryBackend + Nx.Defn.Evaluator.
    """
    use ExBurn.Test.NxCase, async: false

    test "conv with an output permutation (channels last), eager and compiled, and its gradient" do
      x = Nx.iota({2, 5, 5, 3}, type: :f32) |> Nx.divide(10)
      k = Nx.iota({4, 3, 2, 2}, type: :f32) |> Nx.subtract(20) |> Nx.divide(7)

      conv = fn x, k ->
        Nx.conv(x, k, input_permutation: [0, 3, 1, 2], output_permutation: [0, 3, 1, 2])
      end

      want = on_binary(conv, [x, k])
      assert_close(conv.(x, k), want)
      assert_close(Nx.Defn.jit_apply(conv, [x, k], compiler: ExBurn.Compiler), want)

      grad = fn x, k -> Nx.Defn.grad(k, fn k -> Nx.sum(conv.(x, k)) end) end

      assert_close(
        Nx.Defn.jit_apply(grad, [x, k], compiler: ExBurn.Compiler),
        on_binary(grad, [x, k]),
        1.0e-3
      )
    end

    test "arguments a compiled function never reads are not materialised" do
      f = Nx.Defn.jit(fn _x, y -> Nx.add(y, 1) end, compiler: ExBurn.Compiler)
      assert Nx.to_number(f.(Nx.template({2}, :f32), Nx.tensor(1.0))) == 2.0
    end

    test "a heavily shared expression compiles in linear time" do
      fun = fn x -> Enum.reduce(1..40, x, fn _, acc -> Nx.add(acc, acc) end) end

      {us, out} =
        :timer.tc(fn -> Nx.Defn.jit_apply(fun, [Nx.tensor([1.0, 2.0])], compiler: ExBurn.Compiler) end)

      assert Nx.to_list(out) == [2 ** 40 * 1.0, 2 ** 41 * 1.0]
      assert us < 10_000_000
    end

    test "scalars wrap to the tensor's integer type" do
      assert Nx.to_list(Nx.Random.key(-5)) == [4_294_967_295, 4_294_967_291]
      u = Nx.tensor([1, 2], type: :u64)
      assert Nx.to_list(Nx.add(u, 2 ** 63)) == Nx.to_list(on_binary(&Nx.add(&1, 2 ** 63), [u]))
      assert Nx.to_list(Nx.add(u, Nx.tensor(2 ** 63, type: :u64))) == [2 ** 63 + 1, 2 ** 63 + 2]
    end

    test "erfc keeps its tail" do
      assert_close(
        Nx.erfc(Nx.tensor([1.0, 4.0, 6.0], type: :f64)),
        on_binary(&Nx.erfc/1, [Nx.tensor([1.0, 4.0, 6.0], type: :f64)]),
        1.0e-15
      )

      assert Nx.to_number(Nx.erfc(Nx.tensor(4.0))) > 1.5e-8
    end

    test "argmax and argmin answer the last NaN, as Nx does" do
      t = Nx.tensor([[:nan, :nan, 1.0], [:neg_infinity, :nan, 1.0], [1.0, 2.0, 0.0]])
      assert Nx.to_list(Nx.argmax(t, axis: 1)) == [1, 1, 1]
      assert Nx.to_list(Nx.argmin(t, axis: 1)) == [1, 1, 2]
    end

    test "to_batched is a lazy stream" do
      batches = Nx.to_batched(Nx.iota({5, 2}), 2, leftover: :repeat)
      assert is_function(batches, 2) or is_struct(batches, Stream)
      assert Enum.map(batches, &Nx.to_list/1) == [[[0, 1], [2, 3]], [[4, 5], [6, 7]], [[8, 9], [0, 1]]]
    end

    test "out-of-range indices and negative shifts raise ArgumentError with Nx's messages" do
      t = Nx.iota({2, 2})

      assert_raise ArgumentError, "index 3 is out of bounds for axis 0 in shape {2, 2}", fn ->
        Nx.indexed_add(t, Nx.tensor([[3, 0]]), Nx.tensor([1]))
      end

      assert_raise ArgumentError, ~r/out of bounds/, fn -> Nx.gather(t, Nx.tensor([[0, 5]])) end
      assert_raise ArgumentError, "cannot left shift by -1", fn -> Nx.left_shift(1, Nx.tensor(-1)) end
    end

    test "complex elementary functions, pow, product, all/any and conv match the binary backend" do
      z = Nx.tensor([Complex.new(1.0, 2.0), Complex.new(-0.5, 0.25), Complex.new(0.3, -1.2)])

      for f <- ExBurn.Defn.Complex.Math.functions() do
        got = apply(Nx, f, [z])
        want = on_binary(&apply(Nx, f, [&1]), [z])
        assert_close(got, want, 1.0e-4)
      end

      w = Nx.tensor([Complex.new(0.5, -1.0), Complex.new(2.0, 0.5), Complex.new(-1.0, -1.0)])
      assert_close(Nx.pow(z, w), on_binary(&Nx.pow/2, [z, w]), 1.0e-4)
      assert_close(Nx.product(z), on_binary(&Nx.product/1, [z]), 1.0e-4)
      assert Nx.to_number(Nx.all(z)) == 1
      assert Nx.to_number(Nx.any(Nx.tensor([Complex.new(0, 0)]))) == 0

      x = Nx.reshape(z, {1, 1, 3})
      k = w |> Nx.slice([0], [2]) |> Nx.reshape({1, 1, 2})
      assert_close(Nx.conv(x, k), on_binary(&Nx.conv/2, [x, k]), 1.0e-4)
    end

    test "a complex product multiplies (exact for exact factors), over any axes" do
      t = Nx.tensor([[1, 0, 0], [0, Complex.new(0, 2), 0], [0, 0, 3]])
      assert Nx.to_number(Nx.LinAlg.determinant(t)) == Complex.new(0.0, 6.0)

      assert Nx.to_number(
               Nx.product(Nx.tensor([Complex.new(1, 2), Complex.new(3, -1), Complex.new(0.5, 0.5)]))
             ) ==
               Complex.new(0.0, 5.0)

      x = Nx.iota({2, 3, 4}) |> Nx.add(Nx.Constants.i()) |> Nx.divide(5)

      for opts <- [[], [axes: [1]], [axes: [0, 2]], [axes: [2], keep_axes: true], [axes: [0, 1, 2]]] do
        got = binary(Nx.product(x, opts))
        want = on_binary(&Nx.product(&1, opts), [x])
        assert Nx.shape(got) == Nx.shape(want)
        rel = Nx.divide(Nx.abs(Nx.subtract(got, want)), Nx.abs(want)) |> Nx.reduce_max() |> Nx.to_number()
        assert rel < 1.0e-6, "#{inspect(opts)}: relative error #{rel}"
      end
    end

    test "a zero-size ExBurn tensor has no Nx form: ExBurn.Error, not Nx's ArgumentError" do
      t = ExBurn.Tensor.from_binary(<<>>, {0, 2}, {:f, 32})
      e = assert_raise ExBurn.Error, fn -> ExBurn.BurnBridge.to_nx(t) end
      assert e.kind == :shape and e.message =~ "zero-size"
    end
  end
end
