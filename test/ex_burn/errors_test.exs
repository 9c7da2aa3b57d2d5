defmodule ExBurn.ErrorsTest do
  use ExUnit.Case, async: true

  alias ExBurn.{BurnBridge, Tensor}

  defp kind(fun) do
    try do
      fun.()
      flunk("expected an ExBurn.Error")
    rescue
      e in ExBurn.Error -> e.kind
    end
  end

  test "wrong binary size is a shape error" do
    assert kind(fn -> Tensor.from_binary(<<1, 2, 3>>, {2}, :f32) end) == :shape
  end

  test "shape mismatches are shape errors" do
    a = Tensor.new([1.0, 2.0, 3.0])
    b = Tensor.new([1.0, 2.0])
    assert kind(fn -> BurnBridge.add(a, b) end) == :shape
    assert kind(fn -> BurnBridge.reshape(a, {2}) end) == :shape
    assert kind(fn -> BurnBridge.matmul(Tensor.new([[1.0, 2.0]]), Tensor.new([[1.0, 2.0]])) end) == :shape
  end

  test "types Burn lacks are refused by name" do
    for type <- [{:c, 64}, {:c, 128}, {:f, 8}, {:s, 4}, {:u, 2}, :c64] do
      e = catch_error(Tensor.from_binary(<<0::64>>, {1}, type))
      assert %ExBurn.Error{kind: :unsupported_dtype} = e
      assert Exception.message(e) =~ "not supported"
    end

    assert kind(fn -> BurnBridge.as_type(Tensor.new([1]), {:c, 64}) end) == :unsupported_dtype
  end

  test "devices missing from the loaded library are refused with the variant to install" do
    compiled = ExBurn.device_info().backends

    for family <- [:cuda, :vulkan, :metal], family not in compiled do
      e = catch_error(Tensor.new([1.0], device: {family, 0}))
      assert %ExBurn.Error{kind: :device_unavailable} = e
      assert e.message =~ "#{family} variant"
    end
  end

  test "a freed tensor gives :deallocated, and freeing twice is harmless" do
    t = Tensor.new([1.0, 2.0])
    assert Tensor.free(t) == :ok
    assert Tensor.free(t) == :ok
    assert kind(fn -> Tensor.to_binary(t) end) == :deallocated
    assert kind(fn -> BurnBridge.exp(t) end) == :deallocated
    assert kind(fn -> BurnBridge.add(Tensor.new([1.0, 2.0]), t) end) == :deallocated
  end

  test "bad argument types are argument errors" do
    assert kind(fn -> Tensor.from_binary(:not_binary, {1}, :f32) end) == :argument
    assert kind(fn -> Tensor.from_binary(<<0::32>>, {-1}, :f32) end) == :argument
    assert kind(fn -> Tensor.from_binary(<<0::32>>, {1}, :float) end) == :argument
    assert kind(fn -> Tensor.from_binary(<<0::32>>, {1}, "f32") end) == :argument
    assert kind(fn -> BurnBridge.add("a", 1) end) == :argument
    assert kind(fn -> BurnBridge.sum(Tensor.new([1.0]), axes: [3]) end) == :argument
    # malformed terms straight at the NIF boundary come back as errors, not crashes
    assert kind(fn -> ExBurn.Native.call(:eval_op, [:no_such_op, [], :cpu]) end) == :argument
    assert kind(fn -> ExBurn.Native.call(:eval_op, [{:sum, %{axes: "x"}}, [], :cpu]) end) == :argument
    assert kind(fn -> ExBurn.Native.call(:eval_op, [:exp, [:not_a_ref], :cpu]) end) == :argument

    assert kind(fn -> ExBurn.Native.call(:tensor_from_binary, [<<>>, {0}, {:f, 32}, {:gpu, 1}]) end) ==
             :argument
  end

  test "integer division by zero is refused before the kernel and the VM goes on" do
    a = Tensor.new([1, 2], type: :s32)
    z = Tensor.new([0, 0], type: :s32)
    assert kind(fn -> BurnBridge.quotient(a, z) end) == :argument
    assert BurnBridge.add(a, a) |> Tensor.to_list() == [2, 4]
  end
end
