defmodule ExBurn.NarrowTest do
  # The emulated types' binary conversions, without Nx (the values against Nx.BinaryBackend:
  # test/ex_burn/nx_narrow_test.exs).
  use ExUnit.Case, async: true
  doctest ExBurn.Defn.Narrow

  alias ExBurn.Defn.Narrow

  test "every f8 code crosses to f32 and back unchanged, NaN payloads and zero signs included" do
    codes = for b <- 0..255, into: <<>>, do: <<b>>

    for type <- [{:f, 8}, {:f8_e4m3fn, 8}] do
      stored = Narrow.decode(codes, type)
      assert byte_size(stored) == 4 * 256
      assert Narrow.encode(stored, type) == codes, inspect(type)
    end
  end

  test "2/4-bit integers cross bit-packed and sign-extended" do
    assert Narrow.decode(<<0b10_11_01_00>>, {:s, 2}) == <<-2::signed-8, -1::signed-8, 1, 0>>
    assert Narrow.decode(<<0b10_11_01_00>>, {:u, 2}) == <<2, 3, 1, 0>>
    assert Narrow.encode(<<-2::signed-8, -1::signed-8, 1, 0>>, {:s, 2}) == <<0b10_11_01_00>>
    assert Narrow.decode(<<0xF7::8, 0x8::4>>, {:s, 4}) == <<-1::signed-8, 7, -8::signed-8>>
  end

  test "bad arguments raise ExBurn.Error naming the function" do
    for call <- [
          fn -> Narrow.decode(:nope, {:f, 8}) end,
          fn -> Narrow.encode(<<0>>, :f8) end,
          fn -> Narrow.storage(fn -> :ok end) end,
          fn -> Narrow.lower("add", %{type: {:f, 8}}, [], &Function.identity/1) end
        ] do
      error = assert_raise ExBurn.Error, call
      assert error.kind == :argument
    end
  end
end
