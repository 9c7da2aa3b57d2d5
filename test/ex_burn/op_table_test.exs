defmodule ExBurn.OpTableTest do
  # One op vocabulary: the Elixir lists (ExBurn.Op, from which BurnBridge and the Defn lowering
  # derive theirs) come from lib/ex_burn/op/table.eterm, generated from the native op table;
  # the loaded library must declare the same table, and its facts must be what the ops do.
  use ExUnit.Case, async: true

  alias ExBurn.{BurnBridge, Op, Tensor}

  test "the table compiled in (lib/ex_burn/op/table.eterm) is the loaded library's" do
    assert Op.table() == Op.native_table()
  end

  test "each op is declared once" do
    all = Op.names() |> Keyword.values() |> List.flatten()
    assert all -- Enum.uniq(all) == []
  end

  test "the float functions are the unary ops that compute integers in f32" do
    i = Tensor.new([1, 0], type: :s32)

    for name <- Op.names(:unary) do
      %Tensor{type: type} = Op.eval1(name, [i])
      assert {name, type == {:f, 32}} == {name, name in Op.float_functions()}
    end
  end

  test "the typed reductions are those that take an `out` type" do
    x = Tensor.new([1, 2], type: :s32)

    for name <- Op.names(:reduce) do
      typed? =
        try do
          Op.eval1(name, [x], out: {:s, 64})
          true
        rescue
          ExBurn.Error -> false
        end

      assert {name, typed?} == {name, name in Op.typed_reductions()}
    end
  end

  test "every element-wise op of a family runs under its wire name" do
    x = Tensor.new([0.25, 0.5], type: :f32)
    y = Tensor.new([0.5, 0.25], type: :f32)

    for name <- Op.names(:unary) do
      input =
        if name in ~w(bitwise_not population_count count_leading_zeros)a, do: [Tensor.new([1, 6])], else: [x]

      assert %Tensor{shape: {2}} = Op.eval1(name, input)
    end

    i = Tensor.new([1, 6], type: :s32)
    j = Tensor.new([2, 4], type: :s32)

    for name <- Op.names(:binary) do
      assert %Tensor{shape: {2}} = Op.eval1(name, [i, j])
    end

    for name <- Op.names(:compare) ++ Op.names(:logical) do
      assert %Tensor{shape: {2}, type: {:u, 8}} = Op.eval1(name, [x, y])
    end
  end

  test "family attributes decode and are checked on the nested form" do
    x = Tensor.new([[1.0, 5.0], [3.0, 2.0]], type: :f32)
    assert Tensor.to_list(Op.eval1(:reduce_max, [x], axes: [1])) == [5.0, 3.0]
    assert Tensor.to_list(Op.eval1(:sum, [x], axes: [0], out: {:f, 64})) == [4.0, 7.0]
    assert Tensor.to_list(Op.eval1(:argmin, [x], axis: 1)) == [0, 1]
    assert Tensor.to_list(Op.eval1(:cumulative_max, [x], axis: 0, reverse: true)) == [[3.0, 5.0], [3.0, 2.0]]
    assert Tensor.to_list(Op.eval1(:window_sum, [x], window_dims: [2, 1])) == [[4.0, 7.0]]
    assert Tensor.to_list(BurnBridge.add(x, 1)) == [[2.0, 6.0], [4.0, 3.0]]

    err = assert_raise ExBurn.Error, fn -> Op.eval1(:reduce_max, [x], out: {:f, 64}) end
    assert err.message =~ "reduce_max takes no `out`"
    err = assert_raise ExBurn.Error, fn -> Op.eval1(:window_max, [x], window_dims: [1, 1], bogus: 1) end
    assert err.message =~ "bogus"
    err = assert_raise ExBurn.Error, fn -> Op.eval1(:add, [x, x], axes: [0]) end
    assert err.message =~ "axes"
    err = assert_raise ExBurn.Error, fn -> Op.eval1(:no_such_op, [x]) end
    assert err.message =~ "no_such_op"
  end
end
