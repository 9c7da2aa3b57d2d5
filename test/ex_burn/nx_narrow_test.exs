if Code.ensure_loaded?(Nx) do
  defmodule ExBurn.NxNarrowTest do
    # The types Burn lacks (f8 E5M2, f8 E4M3FN, 2/4-bit integers), emulated over wider storage
    # (ExBurn.Defn.Narrow): every value and every op result must be bit for bit what
    # Nx.BinaryBackend + Nx.Defn.Evaluator store, eager and compiled.
    use ExBurn.Test.NxCase, async: true

    @f8 [{:f, 8}, {:f8_e4m3fn, 8}]
    @ints [{:s, 2}, {:s, 4}, {:u, 2}, {:u, 4}]

    # Specials, both zeros, the f8 ranges' edges, and values between representable ones
    # (including ties of the f16 and of E4M3FN's rounding, and magnitudes past 448).
    @floats [
      0.0,
      -0.0,
      1.0,
      -1.0,
      1.2,
      0.5772,
      3.14159,
      1.97,
      -1.97,
      448.0,
      -448.0,
      449.0,
      1000.0,
      -60_000.0,
      57_344.0,
      1.0e-3,
      1.953125e-3,
      -2.5e-3,
      1.5e-5,
      6.0e-8,
      0.1,
      0.3,
      2.75,
      5.5,
      0.0625,
      0.09375,
      :nan,
      :infinity,
      :neg_infinity
    ]

    defp floats(n, seed) do
      :rand.seed(:exsss, {seed, seed, seed})
      for _ <- 1..n, do: (:rand.uniform() - 0.5) * :math.pow(2, :rand.uniform(40) - 20)
    end

    defp ints({:s, bits}), do: Enum.to_list(-Bitwise.bsl(1, bits - 1)..(Bitwise.bsl(1, bits - 1) - 1))
    defp ints({:u, bits}), do: Enum.to_list(0..(Bitwise.bsl(1, bits) - 1))

    # Bit-for-bit equality with the reference (the binaries in Nx's layout), except the sign
    # of f8 zeros: Nx.Floating.load_f8 reads 0x80 as 0.0 on OTP 25 and as -0.0 on later OTPs
    # (OTP 27 made -0.0 a distinct literal), so the reference's zero signs depend on the VM.
    defp assert_same(got, want, what \\ "") do
      assert {Nx.type(got), Nx.shape(got)} == {Nx.type(want), Nx.shape(want)}, what
      {got, want} = {bytes(got), bytes(want)}
      assert got == want, "#{what}: got #{inspect(got)}, want #{inspect(want)}"
    end

    defp bytes(%{type: type} = t) when type in @f8,
      do: for(<<b <- Nx.to_binary(t)>>, into: <<>>, do: <<if(b == 0x80, do: 0, else: b)>>)

    defp bytes(t), do: Nx.to_binary(t)

    defp on_reference(fun), do: Nx.with_default_backend(Nx.BinaryBackend, fun)

    test "f8 values cross in Nx's layout and every f32 rounds as Nx.BinaryBackend stores it" do
      for type <- @f8 do
        bytes = for b <- 0..255, into: <<>>, do: <<b>>
        assert_same(Nx.from_binary(bytes, type), on_reference(fn -> Nx.from_binary(bytes, type) end))

        values = @floats ++ floats(2_000, 7)
        f32 = Nx.tensor(values, type: :f32)

        assert_same(Nx.as_type(f32, type), on_reference(fn -> Nx.as_type(binary(f32), type) end))
        assert_same(Nx.tensor(values, type: type), on_reference(fn -> Nx.tensor(values, type: type) end))
      end
    end

    test "2/4-bit integers cross bit-packed, wrap as Nx.BinaryBackend does" do
      for type <- @ints do
        values = ints(type)
        t = Nx.tensor(values, type: type)
        ref = on_reference(fn -> Nx.tensor(values, type: type) end)
        assert_same(t, ref)
        assert Nx.to_flat_list(t) == values
        assert Nx.bit_size(t) == length(values) * elem(type, 1)

        wide = Nx.tensor(Enum.to_list(-40..40), type: :s32)
        assert_same(Nx.as_type(wide, type), on_reference(fn -> Nx.as_type(binary(wide), type) end))
      end
    end

    defp float_ops do
      [
        {:add, &Nx.add/2},
        {:subtract, &Nx.subtract/2},
        {:multiply, &Nx.multiply/2},
        {:divide, &Nx.divide(&1, Nx.add(Nx.abs(&2), 1))},
        {:max, &Nx.max/2},
        {:exp_of_sum, &Nx.exp(Nx.add(&1, &2))},
        {:sqrt_abs, fn a, _ -> Nx.sqrt(Nx.abs(a)) end},
        {:sum, fn a, _ -> Nx.sum(a) end},
        {:dot, fn a, b -> Nx.dot(Nx.reshape(a, {4, 5}), Nx.reshape(b, {5, 4})) end},
        {:as_f32_and_back, fn a, b -> Nx.as_type(Nx.multiply(Nx.as_type(a, :f32), b), Nx.type(a)) end},
        {:bitcast, fn a, _ -> Nx.bitcast(a, :u8) end},
        {:sort, fn a, _ -> Nx.sort(a) end}
      ]
    end

    test "f8 ops round every result as Nx.BinaryBackend and the Evaluator do, eager and compiled" do
      for type <- @f8, {name, fun} <- float_ops() do
        a = Nx.tensor(Enum.take(floats(20, 3), 20), type: type)
        b = Nx.tensor(Enum.take(floats(20, 5), 20), type: type)
        want = on_binary(fun, [a, b])
        assert_same(fun.(a, b), want, "#{name} #{inspect(type)} eager")

        unless name == :bitcast do
          got = Nx.Defn.jit_apply(fun, [a, b], compiler: ExBurn.Compiler)
          assert_same(got, want, "#{name} #{inspect(type)} compiled")
        end
      end
    end

    defp int_ops do
      [
        {:add, &Nx.add/2},
        {:subtract, &Nx.subtract/2},
        {:multiply, &Nx.multiply/2},
        {:negate, fn a, _ -> Nx.negate(a) end},
        {:bitwise_not, fn a, _ -> Nx.bitwise_not(a) end},
        {:left_shift, fn a, _ -> Nx.left_shift(a, 1) end},
        {:population_count, fn a, _ -> Nx.population_count(a) end},
        {:sum, fn a, _ -> Nx.sum(a) end},
        {:max, &Nx.max/2},
        {:as_f32, fn a, _ -> Nx.as_type(a, :f32) end},
        {:bitcast,
         fn a, _ ->
           Nx.bitcast(
             a,
             (elem(Nx.type(a), 0) == :s && {:u, elem(Nx.type(a), 1)}) || {:s, elem(Nx.type(a), 1)}
           )
         end}
      ]
    end

    test "2/4-bit integer ops wrap every result as Nx.BinaryBackend and the Evaluator do" do
      for type <- @ints, {name, fun} <- int_ops() do
        values = ints(type)
        a = Nx.tensor(values, type: type)
        b = Nx.tensor(Enum.reverse(values), type: type)
        want = on_binary(fun, [a, b])
        assert_same(fun.(a, b), want, "#{name} #{inspect(type)} eager")

        got = Nx.Defn.jit_apply(fun, [a, b], compiler: ExBurn.Compiler)
        assert_same(got, want, "#{name} #{inspect(type)} compiled")
      end
    end

    test "random numbers and constants of f8 types are the reference's" do
      for type <- @f8 do
        key = Nx.Random.key(44)
        {u, _} = Nx.Random.uniform(key, shape: {64}, type: type)
        ru = on_reference(fn -> elem(Nx.Random.uniform(Nx.Random.key(44), shape: {64}, type: type), 0) end)
        assert_same(u, ru, "uniform")

        for c <- [:pi, :e, :euler_gamma, :epsilon, :smallest_positive_normal, :nan, :infinity] do
          assert_same(
            apply(Nx.Constants, c, [type]),
            on_reference(fn -> apply(Nx.Constants, c, [type]) end),
            "#{c}"
          )
        end
      end
    end

    # Nx.BinaryBackend has no count_leading_zeros of 2/4-bit integers: counted within the width.
    test "count_leading_zeros of 2/4-bit integers counts within the type's width" do
      assert Nx.to_flat_list(Nx.count_leading_zeros(Nx.s4([-8, -1, 0, 1, 3, 7]))) == [0, 0, 4, 3, 2, 1]
      assert Nx.to_flat_list(Nx.count_leading_zeros(Nx.u2([0, 1, 2, 3]))) == [2, 1, 0, 0]
      assert Nx.to_flat_list(Nx.population_count(Nx.s2([-2, -1, 0, 1]))) == [1, -2, 0, 1]
    end

    test "bitcast of an emulated type inside a compiled program raises naming it" do
      a = Nx.tensor([1.0], type: {:f, 8})

      assert_raise ExBurn.Error, ~r/bitcast from \{:f, 8\}/, fn ->
        Nx.Defn.jit_apply(&Nx.bitcast(&1, :u8), [a], compiler: ExBurn.Compiler)
      end
    end
  end
end
