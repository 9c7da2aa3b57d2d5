defmodule ExBurn.NxLowerTest do
  @moduledoc """
  `ExBurn.Defn.Lower` and `ExBurn.Defn.Complex`: the op table shared by the backend and the
  compiler, as pure data (no Nx, no native library needed).
  """
  use ExUnit.Case, async: true

  alias ExBurn.Defn.{Complex, Lower}

  doctest ExBurn.Defn.Lower
  doctest ExBurn.Defn.Complex

  defp t(shape, type), do: %{shape: shape, type: type}

  test "casts inputs to Nx's output type only where they differ" do
    a = t({2}, {:f, 32})
    b = t({2}, {:s, 8})
    assert {[^a, ^b, ^a], instrs} = Lower.lower(:clip, t({2}, {:f, 32}), [a, b, a])
    assert instrs == [{:as_type, [dtype: {:f, 32}], [1]}, {:clip, [], [0, 3, 2]}]
  end

  test "reductions cast their result when the engine's type differs from Nx's" do
    x = t({3}, {:f, 32})
    {[^x], instrs} = Lower.lower(:reduce_max, t({}, {:f, 64}), [x, [axes: nil]])
    assert [{:reduce_max, _, [0]}, {:as_type, [dtype: {:f, 64}], [1]}] = instrs
  end

  test "tensor slice starts become inputs of dynamic axes" do
    x = t({4, 4}, {:f, 32})
    start = t({}, {:s, 32})

    {[^x, ^start], [{:slice, attrs, [0, 1]}]} =
      Lower.lower(:slice, t({2, 2}, {:f, 32}), [x, [1, start], [2, 2], [1, 1]])

    assert attrs[:starts] == [1, 0] and attrs[:dynamic] == [1]
  end

  test "native blocks map to engine ops; others have no lowering" do
    x = t({3}, {:s, 32})

    assert {:cumulative_sum, [^x, opts]} =
             Lower.block(%{__struct__: Nx.Block.CumulativeSum, axis: 0, reverse: true}, [x])

    assert opts == [axis: 0, reverse: true]
    assert Lower.block(%{__struct__: Nx.Block.LinAlg.QR, eps: 1.0e-10, mode: :reduced}, [x]) == nil
  end

  test "complex ops work on the parts of the float storage" do
    c = t({3}, {:c, 64})
    {[^c, ^c], instrs} = Lower.lower(:add, t({3}, {:c, 64}), [c, c])
    ops = Enum.map(instrs, &elem(&1, 0))
    # split both inputs into parts, add the parts, stack them back
    assert Enum.count(ops, &(&1 == :slice)) == 4
    assert Enum.count(ops, &(&1 == :add)) == 2
    assert List.last(ops) == :stack
    assert Complex.storage({:c, 128}, {}) == {{:f, 64}, {2}}
  end

  test "unsupported ops and types raise naming them" do
    error =
      assert_raise ExBurn.Error, fn ->
        Lower.lower(:sort, t({3}, {:c, 64}), [t({3}, {:c, 64}), [axis: 0, direction: :asc]])
      end

    assert error.kind == :unsupported and error.op == :sort

    error =
      assert_raise ExBurn.Error, fn ->
        Lower.lower(:add, t({}, {:f, 128}), [t({}, {:f, 128}), t({}, {:f, 128})])
      end

    assert error.kind == :unsupported_dtype and error.op == :add
  end

  test "emulated types compute in their storage type and narrow the result" do
    assert {[_, _], [{:add, [out: {:f, 32}], [0, 1]}, {:narrow, [to: :f8], [2]}]} =
             Lower.lower(:add, t({}, {:f, 8}), [t({}, {:f, 8}), t({}, {:f, 8})])

    assert {[_], [{:as_type, [dtype: {:f, 32}], [0]}]} =
             Lower.lower(:as_type, t({}, {:f, 32}), [t({}, {:u, 4})])
  end
end
