defmodule ExBurn.TensorTest do
  use ExUnit.Case, async: true
  doctest ExBurn.Tensor

  alias ExBurn.Tensor

  @types ExBurn.Type.supported()

  test "every dtype round-trips byte-exactly, including arbitrary bit patterns" do
    for type <- @types, shape <- [{}, {0}, {7}, {2, 3, 4}, {3, 0, 2}] do
      n = shape |> Tuple.to_list() |> Enum.product()
      bin = :crypto.strong_rand_bytes(n * ExBurn.Type.byte_size(type))
      t = Tensor.from_binary(bin, shape, type)
      assert {t.shape, t.type, t.device} == {shape, type, :cpu}
      assert Tensor.to_binary(t) == bin, "#{inspect(type)} #{inspect(shape)}"
    end
  end

  test "limit reads only the first elements" do
    t = Tensor.new([[1, 2, 3], [4, 5, 6]], type: :s16)
    assert Tensor.to_binary(t, limit: 4) == ExBurn.Type.encode([1, 2, 3, 4], {:s, 16})
    assert Tensor.to_binary(t, limit: 0) == <<>>
    assert byte_size(Tensor.to_binary(t, limit: 100)) == 12
  end

  test "lists, non-finite values and negative zero survive" do
    t = Tensor.new([1.5, :nan, :infinity, :neg_infinity, -0.0], type: :f64)
    assert [1.5, :nan, :infinity, :neg_infinity, z] = Tensor.to_list(t)
    assert <<_::binary-32, 0, 0, 0, 0, 0, 0, 0, 0x80>> = Tensor.to_binary(t)
    assert z == 0.0
    assert Tensor.to_list(Tensor.new(3)) == 3
    assert Tensor.to_list(Tensor.new([], type: :f32)) == []
  end

  test "inspect shows type, shape, device and values" do
    t = Tensor.new([[1, 2], [3, 4]], type: :u8)
    assert inspect(t) == "#ExBurn.Tensor<u8[2][2] :cpu [1, 2, 3, 4]>"
    big = ExBurn.BurnBridge.iota({100})
    assert inspect(big) =~ ~r/^#ExBurn.Tensor<s32\[100\] :cpu \[0, 1, 2, .*, 29, \.\.\.\]>$/
  end

  test "inspect prints floats with the fewest significant digits, denormals included" do
    assert inspect(Tensor.from_binary(<<1::32-little>>, {1}, :f32)) == "#ExBurn.Tensor<f32[1] :cpu [1.4e-45]>"

    assert inspect(Tensor.from_binary(<<1::16-little>>, {1}, :bf16)) ==
             "#ExBurn.Tensor<bf16[1] :cpu [9.2e-41]>"

    assert inspect(Tensor.new([0.1, 3.14159, -2.5])) == "#ExBurn.Tensor<f32[3] :cpu [0.1, 3.14159, -2.5]>"
  end

  test "to_device on the same device returns the tensor, unknown devices are refused" do
    t = Tensor.new([1.0])
    assert Tensor.to_device(t, :cpu) == t
    assert %ExBurn.Error{kind: :argument} = catch_error(Tensor.to_device(t, :tpu))
  end
end
