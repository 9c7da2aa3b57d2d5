# Compiled only when Nx is loadable (the Nx-free build has no Nx modules to refer to).
if Code.ensure_loaded?(Nx) do
  defmodule ExBurn.NxBackendTest do
    @moduledoc """
    Table-driven agreement of `ExBurn.Backend` with `Nx.BinaryBackend`: every op of the tables
    below, on every type it accepts, on several shapes. Inputs are deterministic and kept in each
    op's domain (and away from x/0, which raises on the BinaryBackend built with complex 0.6).
    """
    use ExUnit.Case, async: true

    @moduletag :nx

    @floats [{:f, 16}, {:bf, 16}, {:f, 32}, {:f, 64}]
    @signed [{:s, 8}, {:s, 16}, {:s, 32}, {:s, 64}]
    @unsigned [{:u, 8}, {:u, 16}, {:u, 32}, {:u, 64}]
    @ints @signed ++ @unsigned
    @all @ints ++ @floats

    @shapes [{}, {5}, {2, 3}, {2, 1, 3}]

    # Nx.BinaryBackend's erf_inv is accurate to ~1e-7 even in f64 (ExBurn's is to ~1e-16).
    @reference_rtol %{erf_inv: 1.0e-6}

    # {name, function, input domains, types}
    @unary [
      {:negate, &Nx.negate/1, [:any], @signed ++ @floats},
      {:abs, &Nx.abs/1, [:any], @all},
      {:sign, &Nx.sign/1, [:any], @all},
      {:floor, &Nx.floor/1, [:any], @all},
      {:ceil, &Nx.ceil/1, [:any], @all},
      {:round, &Nx.round/1, [:any], @all},
      {:exp, &Nx.exp/1, [:small], @all},
      {:expm1, &Nx.expm1/1, [:small], @floats},
      {:log, &Nx.log/1, [:positive], @all},
      {:log1p, &Nx.log1p/1, [:positive], @floats},
      {:sqrt, &Nx.sqrt/1, [:positive], @all},
      {:rsqrt, &Nx.rsqrt/1, [:positive], @floats},
      {:cbrt, &Nx.cbrt/1, [:any], @floats},
      {:sin, &Nx.sin/1, [:any], @all},
      {:cos, &Nx.cos/1, [:any], @floats},
      {:tan, &Nx.tan/1, [:unit], @floats},
      {:asin, &Nx.asin/1, [:unit], @floats},
      {:acos, &Nx.acos/1, [:unit], @floats},
      {:atan, &Nx.atan/1, [:any], @floats},
      {:sinh, &Nx.sinh/1, [:small], @floats},
      {:cosh, &Nx.cosh/1, [:small], @floats},
      {:tanh, &Nx.tanh/1, [:any], @all},
      {:asinh, &Nx.asinh/1, [:any], @floats},
      {:acosh, &Nx.acosh/1, [:ge1], @floats},
      {:atanh, &Nx.atanh/1, [:unit], @floats},
      {:erf, &Nx.erf/1, [:unit], @floats},
      {:erfc, &Nx.erfc/1, [:unit], @floats},
      {:erf_inv, &Nx.erf_inv/1, [:unit], @floats},
      {:sigmoid, &Nx.sigmoid/1, [:any], @all},
      {:is_nan, &Nx.is_nan/1, [:any], @all},
      {:is_infinity, &Nx.is_infinity/1, [:any], @all},
      {:logical_not, &Nx.logical_not/1, [:any], @all},
      {:bitwise_not, &Nx.bitwise_not/1, [:any], @ints},
      {:population_count, &Nx.population_count/1, [:any], @ints},
      {:count_leading_zeros, &Nx.count_leading_zeros/1, [:any], @ints}
    ]

    @binary [
      {:add, &Nx.add/2, [:any, :any], @all},
      {:subtract, &Nx.subtract/2, [:any, :any], @all},
      {:multiply, &Nx.multiply/2, [:any, :any], @all},
      {:divide, &Nx.divide/2, [:any, :nonzero], @all},
      {:quotient, &Nx.quotient/2, [:any, :nonzero], @ints},
      {:remainder, &Nx.remainder/2, [:any, :nonzero], @all},
      {:pow, &Nx.pow/2, [:positive, :exponent], @all},
      {:atan2, &Nx.atan2/2, [:any, :any], @floats},
      {:min, &Nx.min/2, [:any, :any], @all},
      {:max, &Nx.max/2, [:any, :any], @all},
      {:bitwise_and, &Nx.bitwise_and/2, [:any, :any], @ints},
      {:bitwise_or, &Nx.bitwise_or/2, [:any, :any], @ints},
      {:bitwise_xor, &Nx.bitwise_xor/2, [:any, :any], @ints},
      {:left_shift, &Nx.left_shift/2, [:any, :shift], @ints},
      {:right_shift, &Nx.right_shift/2, [:any, :shift], @ints},
      {:equal, &Nx.equal/2, [:any, :any], @all},
      {:not_equal, &Nx.not_equal/2, [:any, :any], @all},
      {:less, &Nx.less/2, [:any, :any], @all},
      {:less_equal, &Nx.less_equal/2, [:any, :any], @all},
      {:greater, &Nx.greater/2, [:any, :any], @all},
      {:greater_equal, &Nx.greater_equal/2, [:any, :any], @all},
      {:logical_and, &Nx.logical_and/2, [:any, :any], @all},
      {:logical_or, &Nx.logical_or/2, [:any, :any], @all},
      {:logical_xor, &Nx.logical_xor/2, [:any, :any], @all}
    ]

    # Ops on a {2, 3, 4} input (quoted: closures cannot be escaped into test bodies).
    @structural [
      {:sum, quote(do: &Nx.sum(&1, axes: [1])), @all},
      {:sum_all, quote(do: &Nx.sum/1), @all},
      {:product, quote(do: &Nx.product(&1, axes: [0, 2], keep_axes: true)), @all},
      {:reduce_max, quote(do: &Nx.reduce_max(&1, axes: [2])), @all},
      {:reduce_min, quote(do: &Nx.reduce_min/1), @all},
      {:all, quote(do: &Nx.all(&1, axes: [1])), @all},
      {:any, quote(do: &Nx.any(&1, axes: [0])), @all},
      {:argmax, quote(do: &Nx.argmax(&1, axis: 1)), @all},
      {:argmin, quote(do: &Nx.argmin(&1, tie_break: :high)), @all},
      {:mean, quote(do: &Nx.mean(&1, axes: [2])), @all},
      {:transpose, quote(do: &Nx.transpose(&1, axes: [2, 0, 1])), @all},
      {:reshape, quote(do: &Nx.reshape(&1, {4, 6})), @all},
      {:reverse, quote(do: &Nx.reverse(&1, axes: [1])), @all},
      {:slice, quote(do: &Nx.slice(&1, [0, 1, 1], [2, 2, 2], strides: [1, 1, 2])), @all},
      {:put_slice,
       quote(do: &Nx.put_slice(&1, [1, 0, 2], Nx.broadcast(Nx.tensor(7, type: &1.type), {1, 2, 2}))), @all},
      {:pad, quote(do: &Nx.pad(&1, Nx.tensor(1, type: &1.type), [{1, 0, 0}, {0, 1, 1}, {-1, 1, 0}])), @all},
      {:concatenate, quote(do: &Nx.concatenate([&1, &1], axis: 2)), @all},
      {:stack, quote(do: &Nx.stack([&1, &1], axis: 1)), @all},
      {:squeeze_broadcast, quote(do: &Nx.broadcast(Nx.sum(&1, axes: [0], keep_axes: true), {3, 2, 3, 4})),
       @all},
      {:as_type_f32, quote(do: &Nx.as_type(&1, :f32)), @all},
      {:as_type_s64, quote(do: &Nx.as_type(&1, :s64)), @all},
      {:as_type_u8, quote(do: &Nx.as_type(&1, :u8)), @ints},
      {:clip, quote(do: &Nx.clip(&1, 1, 5)), @all},
      {:select, quote(do: &Nx.select(Nx.greater(&1, 2), &1, Nx.tensor(0, type: &1.type))), @all},
      {:sort, quote(do: &Nx.sort(&1, axis: 2, direction: :desc)), @all},
      {:argsort, quote(do: &Nx.argsort(&1, axis: 1, stable: true)), @all},
      {:cumulative_sum, quote(do: &Nx.cumulative_sum(&1, axis: 2)), @all},
      {:cumulative_product, quote(do: &Nx.cumulative_product(&1, axis: 0, reverse: true)), @all},
      {:cumulative_max, quote(do: &Nx.cumulative_max(&1, axis: 1)), @all},
      {:cumulative_min, quote(do: &Nx.cumulative_min(&1, axis: 2)), @all},
      {:take, quote(do: &Nx.take(&1, Nx.tensor([2, 0, 1, 1]), axis: 1)), @all},
      {:take_along_axis,
       quote(do: &Nx.take_along_axis(&1, Nx.tensor([[[0], [2], [1]], [[1], [1], [0]]]), axis: 2)), @all},
      {:gather, quote(do: &Nx.gather(&1, Nx.tensor([[0, 1, 2], [1, 2, 3]]))), @all},
      {:indexed_add,
       quote(do: &Nx.indexed_add(&1, Nx.tensor([[0, 1, 2], [0, 1, 2]]), Nx.tensor([1, 2], type: &1.type))),
       @all},
      {:indexed_put, quote(do: &Nx.indexed_put(&1, Nx.tensor([[1, 2, 3]]), Nx.tensor([9], type: &1.type))),
       @all},
      {:dot, quote(do: &Nx.dot(&1, [2], [0], Nx.transpose(&1, axes: [0, 2, 1]), [1], [0])), @all},
      {:dot_plain, quote(do: &Nx.dot(Nx.reshape(&1, {6, 4}), Nx.reshape(&1, {4, 6}))), @all},
      {:window_sum, quote(do: &Nx.window_sum(&1, {1, 2, 2}, strides: [1, 1, 2], padding: :same)), @all},
      {:window_max, quote(do: &Nx.window_max(&1, {2, 2, 1}, padding: [{0, 0}, {1, 0}, {0, 1}])), @all},
      {:window_min, quote(do: &Nx.window_min(&1, {1, 3, 2})), @all},
      {:window_product, quote(do: &Nx.window_product(&1, {1, 1, 2})), @all},
      {:window_scatter_max,
       quote(
         do:
           &Nx.window_scatter_max(
             &1,
             Nx.iota({2, 3, 2}, type: &1.type),
             Nx.tensor(0, type: &1.type),
             {1, 1, 2},
             strides: [1, 1, 2]
           )
       ), @all},
      {:window_scatter_min,
       quote(
         do:
           &Nx.window_scatter_min(
             &1,
             Nx.iota({2, 2, 3}, type: &1.type),
             Nx.tensor(0, type: &1.type),
             {1, 2, 2},
             strides: [1, 1, 1]
           )
       ), @all},
      {:conv, quote(do: &Nx.conv(&1, Nx.iota({2, 3, 2}, type: &1.type), strides: [2])), @floats},
      {:iota_eye,
       quote(
         do:
           &Nx.add(&1, Nx.multiply(Nx.iota({2, 3, 4}, axis: 1, type: &1.type), Nx.eye({3, 4}, type: &1.type)))
       ), @all}
    ]

    setup do
      Application.ensure_all_started(:nx)
      :ok
    end

    for {name, fun, domains, types} <- @unary ++ @binary, type <- types do
      @tag op: name
      test "#{name} on #{inspect(type)}" do
        fun = unquote(Macro.escape(fun))
        type = unquote(type)

        for shape <- unquote(Macro.escape(@shapes)) do
          args = Enum.with_index(unquote(domains), fn domain, i -> input(shape, type, domain, i) end)
          compare(fun, args, "#{inspect(shape)}", unquote(@reference_rtol[name]))
        end

        if length(unquote(domains)) == 2 do
          [d1, d2] = unquote(domains)
          compare(fun, [input({2, 3}, type, d1, 0), input({3}, type, d2, 1)], "broadcast {2, 3} with {3}")
        end
      end
    end

    for {name, fun, types} <- @structural, type <- types do
      @tag op: name
      test "#{name} on #{inspect(type)}" do
        compare(unquote(fun), [input({2, 3, 4}, unquote(type), :small_int, 0)], "{2, 3, 4}")
      end
    end

    # (quoted: closures cannot be escaped into test bodies)
    @complex_ops [
      {:add, quote(do: &Nx.add/2)},
      {:subtract, quote(do: &Nx.subtract/2)},
      {:multiply, quote(do: &Nx.multiply/2)},
      {:divide, quote(do: &Nx.divide/2)},
      {:equal, quote(do: &Nx.equal/2)},
      {:dot, quote(do: &Nx.dot(&1, Nx.transpose(&2)))},
      {:abs, quote(do: &Nx.abs/1)},
      {:conjugate, quote(do: &Nx.conjugate/1)},
      {:real, quote(do: &Nx.real/1)},
      {:imag, quote(do: &Nx.imag/1)},
      {:exp, quote(do: &Nx.exp/1)},
      {:sqrt, quote(do: &Nx.sqrt/1)},
      {:phase, quote(do: &Nx.phase/1)},
      {:sum, quote(do: &Nx.sum(&1, axes: [1]))},
      {:transpose, quote(do: &Nx.transpose/1)},
      {:concatenate, quote(do: &Nx.concatenate([&1, &2], axis: 1))},
      {:take, quote(do: &Nx.take(&1, Nx.tensor([2, 0]), axis: 1))},
      {:fft, quote(do: &Nx.fft/1)},
      {:ifft, quote(do: &Nx.ifft(&1, length: 4))},
      {:as_type_f32, quote(do: &Nx.as_type(&1, :f32))}
    ]

    for {name, fun} <- @complex_ops, type <- [{:c, 64}, {:c, 128}] do
      test "complex #{name} on #{inspect(type)}" do
        fun = unquote(fun)
        a = complex({2, 3}, unquote(type), 0)
        b = complex({2, 3}, unquote(type), 1)
        args = if is_function(fun, 1), do: [a], else: [a, b]
        compare(fun, args, "complex")
      end
    end

    test "real and complex operands mix" do
      compare(&Nx.multiply/2, [complex({3}, {:c, 64}, 0), input({3}, {:s, 32}, :positive, 0)], "c64 * s32")
      compare(&Nx.add/2, [input({3}, {:f, 64}, :any, 0), complex({3}, {:c, 64}, 1)], "f64 + c64")
    end

    test "unsupported callbacks are derived from the behaviour and pinned" do
      assert ExBurn.Backend.unsupported_callbacks() == [from_pointer: 5, to_pointer: 2]

      error =
        assert_raise ExBurn.Error, fn ->
          Nx.to_pointer(Nx.tensor([1], backend: ExBurn.Backend), mode: :local)
        end

      assert error.kind == :unsupported and error.op == :to_pointer
    end

    # f8 and 2/4-bit integers are emulated (test/ex_burn/nx_narrow_test.exs); a type neither
    # Burn nor the emulation holds is refused.
    test "types neither Burn nor the emulation holds are refused, naming the op and type" do
      out = %Nx.Tensor{type: {:f, 128}, shape: {1}, names: [nil]}
      error = assert_raise ExBurn.Error, fn -> ExBurn.Backend.from_binary(out, <<0::128>>, []) end
      assert error.kind == :unsupported_dtype and error.op == :from_binary
      assert error.message =~ "{:f, 128}"
    end

    test "copy, transfer and deallocate really move and free" do
      t = Nx.tensor([1.0, 2.0, 3.0], backend: {ExBurn.Backend, device: :cpu})
      copy = Nx.backend_copy(t, ExBurn.Backend)
      assert copy.data.tensor.ref != t.data.tensor.ref
      assert Nx.backend_deallocate(copy) == :ok
      assert Nx.backend_deallocate(copy) == :already_deallocated
      assert Nx.to_list(t) == [1.0, 2.0, 3.0]

      binary = Nx.backend_transfer(t, Nx.BinaryBackend)
      assert %Nx.BinaryBackend{} = binary.data
      assert_raise ExBurn.Error, ~r/deallocated/, fn -> Nx.to_list(t) end
      assert Nx.to_list(binary) == [1.0, 2.0, 3.0]
    end

    test "to_binary honours limit and inspect shows values" do
      t = Nx.iota({4}, type: :s16, backend: ExBurn.Backend)
      assert Nx.to_binary(t, limit: 2) == <<0::16-little, 1::16-little>>
      assert inspect(t) =~ "[0, 1, 2, 3]"
      c = Nx.tensor([Complex.new(1, 2), Complex.new(3, -4)], backend: ExBurn.Backend)
      assert inspect(c) =~ "[1.0+2.0i, 3.0-4.0i]"
    end

    test "to_batched slices along the first axis, repeating or discarding the leftover" do
      t = Nx.iota({5, 2}, backend: ExBurn.Backend)
      repeat = t |> Nx.to_batched(2, leftover: :repeat) |> Enum.map(&Nx.to_list/1)
      assert repeat == [[[0, 1], [2, 3]], [[4, 5], [6, 7]], [[8, 9], [0, 1]]]
      assert t |> Nx.to_batched(2, leftover: :discard) |> Enum.count() == 2
    end

    test "mixed input types follow Nx's promotion" do
      for a <- [{:u, 8}, {:s, 16}, {:f, 16}, {:bf, 16}], b <- [{:s, 8}, {:u, 32}, {:f, 32}] do
        compare(
          &Nx.add/2,
          [input({3}, a, :positive, 0), input({3}, b, :positive, 1)],
          "#{inspect(a)} + #{inspect(b)}"
        )

        compare(
          &Nx.multiply/2,
          [input({3}, a, :positive, 0), input({3}, b, :positive, 1)],
          "#{inspect(a)} * #{inspect(b)}"
        )
      end
    end

    # ---- helpers ----

    defp compare(fun, args, label, rtol \\ nil) do
      want = apply(fun, args)
      got = apply(fun, Enum.map(args, &Nx.backend_copy(&1, ExBurn.Backend)))
      assert %ExBurn.Backend{} = got.data
      assert got.type == want.type, "#{label}: type #{inspect(got.type)}, want #{inspect(want.type)}"
      assert got.shape == want.shape, "#{label}: shape #{inspect(got.shape)}, want #{inspect(want.shape)}"
      g = got |> Nx.backend_copy(Nx.BinaryBackend) |> Nx.to_flat_list()
      w = Nx.to_flat_list(want)

      Enum.zip(g, w)
      |> Enum.each(fn {a, b} ->
        assert close?(a, b, want.type, rtol), "#{label}: got #{inspect(g)}\nwant #{inspect(w)}"
      end)
    end

    defp close?(%Complex{} = a, %Complex{} = b, {:c, bits}, rtol),
      do: close?(a.re, b.re, {:f, div(bits, 2)}, rtol) and close?(a.im, b.im, {:f, div(bits, 2)}, rtol)

    defp close?(a, a, _type, _rtol), do: true
    defp close?(a, b, _type, _rtol) when is_atom(a) or is_atom(b), do: false

    defp close?(a, b, {_, bits} = type, rtol) do
      if Nx.Type.float?(type) do
        rtol = max(rtol || 0, %{16 => 1.0e-2, 32 => 1.0e-5, 64 => 1.0e-9}[bits])
        rtol = if elem(type, 0) == :bf, do: 2.0e-2, else: rtol
        abs(a - b) <= rtol * (1 + abs(b))
      else
        false
      end
    end

    defp complex(shape, type, salt) do
      n = Nx.size(shape)
      values = for i <- 0..(n - 1)//1, do: Complex.new(rem(i * 3 + salt, 5) - 1.5, rem(i + 2 * salt, 4) - 0.5)
      values |> Nx.tensor(type: type, backend: Nx.BinaryBackend) |> Nx.reshape(shape)
    end

    # Deterministic inputs of `shape` and `type` in a domain; `salt` varies the second operand.
    defp input(shape, type, domain, salt) do
      n = Nx.size(shape)
      values = for i <- 0..(n - 1)//1, do: value(domain, i + salt * 3, type)
      values |> Nx.tensor(type: type, backend: Nx.BinaryBackend) |> Nx.reshape(shape)
    end

    defp value(domain, i, type) do
      float? = Nx.Type.float?(type)
      unsigned? = elem(type, 0) == :u
      k = rem(i * 7 + 3, 11)

      case domain do
        :any when unsigned? -> k
        :any when float? -> (k - 5) * 0.75
        :any -> k - 5
        :small_int -> rem(i * 5 + 1, 7) + if(unsigned?, do: 0, else: -1)
        :small when float? -> (k - 5) * 0.3
        :small -> rem(k, 4)
        :positive when float? -> k * 0.5 + 0.25
        :positive -> k + 1
        :nonzero when float? -> if(k == 5, do: 1.5, else: (k - 5) * 0.5)
        :nonzero when unsigned? -> k + 1
        :nonzero -> if(k == 5, do: 3, else: k - 5)
        :unit when float? -> (k - 5) * 0.15
        :unit -> 0
        :ge1 when float? -> 1 + k * 0.5
        :ge1 -> k + 1
        :exponent when float? -> rem(k, 4) * 0.5
        :exponent -> rem(k, 4)
        :shift -> rem(k, 4)
      end
    end
  end
end
