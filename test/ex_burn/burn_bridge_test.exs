defmodule ExBurn.BurnBridgeTest do
  use ExUnit.Case, async: true
  doctest ExBurn.BurnBridge
  doctest ExBurn.Op
  doctest ExBurn.Type
  doctest ExBurn.Device
  doctest ExBurn.Error

  alias ExBurn.{BurnBridge, Tensor}
  import Tensor, only: [to_list: 1]

  test "synchronize waits for a device and validates it" do
    assert ExBurn.Device.synchronize(:cpu) == :ok
    assert_raise ExBurn.Error, ~r/unknown device/, fn -> ExBurn.Device.synchronize(:tpu) end
  end

  test "creation" do
    assert to_list(BurnBridge.zeros({2}, :s8)) == [0, 0]
    assert to_list(BurnBridge.full({2}, 2.5, :f16)) == [2.5, 2.5]
    assert to_list(BurnBridge.iota({2, 2}, :s64, axis: 1)) == [[0, 1], [0, 1]]
    assert to_list(BurnBridge.eye(2)) == [[1.0, 0.0], [0.0, 1.0]]
    a = BurnBridge.random_uniform({100}, seed: 3, min: -1, max: 1)
    assert to_list(a) == to_list(BurnBridge.random_uniform({100}, seed: 3, min: -1, max: 1))
    assert Enum.all?(to_list(a), &(&1 >= -1 and &1 < 1))
  end

  test "element-wise with numbers keeps the tensor's type, as in Nx" do
    i8 = Tensor.new([100, -100], type: :s8)
    assert to_list(BurnBridge.add(i8, 100)) == [-56, 0]
    assert BurnBridge.multiply(i8, 0.5).type == {:f, 32}
    assert to_list(BurnBridge.subtract(10, Tensor.new([1, 2]))) == [9, 8]
    assert to_list(BurnBridge.remainder(Tensor.new([-7, 7]), 3)) == [-1, 1]
    assert to_list(BurnBridge.less(Tensor.new([1.0, 3.0]), 2)) == [1, 0]
    assert to_list(BurnBridge.round(Tensor.new([2.5, -2.5]))) == [3.0, -3.0]
  end

  test "matmul precision: :highest is accepted, :default is the default, others are refused" do
    x = Tensor.new([[1.1, 2.2, 3.3], [4.4, 5.5, 6.6]])
    y = BurnBridge.transpose(x)
    assert ExBurn.dot_precision() == :default
    assert to_list(BurnBridge.matmul(x, y, precision: :highest)) == to_list(BurnBridge.matmul(x, y))
    assert_raise ExBurn.Error, fn -> BurnBridge.matmul(x, y, precision: :fast) end
    assert_raise ExBurn.Error, ~r/dot_precision/, fn -> ExBurn.configure!(dot_precision: :fast) end
  end

  test "reductions, matmul and shape ops" do
    x = Tensor.new([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    assert to_list(BurnBridge.sum(x, axes: [0])) == [5.0, 7.0, 9.0]
    assert to_list(BurnBridge.mean(x)) == 3.5
    assert to_list(BurnBridge.argmax(x, axis: 1)) == [2, 2]
    assert to_list(BurnBridge.matmul(x, BurnBridge.transpose(x))) == [[14.0, 32.0], [32.0, 77.0]]
    batched = BurnBridge.matmul(BurnBridge.reshape(x, {2, 1, 3}), BurnBridge.ones({2, 3, 1}))
    assert to_list(batched) == [[[6.0]], [[15.0]]]
    assert to_list(BurnBridge.slice(x, [0, 1], [2, 2])) == [[2.0, 3.0], [5.0, 6.0]]
    assert to_list(BurnBridge.concatenate([x, x], 0)) |> length() == 4
    assert to_list(BurnBridge.pad(Tensor.new([1, 2]), 0, [{1, 1, 1}])) == [0, 1, 0, 2, 0]
    assert to_list(BurnBridge.reverse(Tensor.new([1, 2, 3]))) == [3, 2, 1]
    assert to_list(BurnBridge.relu(Tensor.new([-1.0, 1.0]))) == [0.0, 1.0]
    [p, q] = to_list(BurnBridge.softmax(Tensor.new([0.0, 0.0])))
    assert_in_delta p, 0.5, 1.0e-6
    assert_in_delta q, 0.5, 1.0e-6
  end

  test "select and clip broadcast numbers" do
    pred = Tensor.new([1, 0, 1], type: :u8)
    assert to_list(BurnBridge.select(pred, Tensor.new([1.0, 2.0, 3.0]), 0.0)) == [1.0, 0.0, 3.0]
    assert to_list(BurnBridge.clip(Tensor.new([-2, 5, 9]), 0, 6)) == [0, 5, 6]
  end
end
