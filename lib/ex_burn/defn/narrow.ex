defmodule ExBurn.Defn.Narrow do
  @moduledoc """
  Nx types Burn lacks, emulated over a wider Burn type: f8 (`{:f, 8}`, E5M2) and
  `{:f8_e4m3fn, 8}` are held as `{:f, 32}`, `{:s, 2}`/`{:s, 4}` as `{:s, 8}` and
  `{:u, 2}`/`{:u, 4}` as `{:u, 8}`.

  Every op whose result has such a type computes in the storage type and then runs the
  engine's `narrow` op, which maps each value to the value `Nx.BinaryBackend` stores for it
  (floats rounded as `Nx.Floating.dump_f8/1` and `dump_f8_e4m3fn/1` do, integers wrapped to
  their width). Binaries cross in Nx's packed layout (`decode/2`, `encode/2`). The values
  are those of `Nx.BinaryBackend`, computed in f32 rather than in Elixir floats; the memory
  and speed are those of the storage type plus a host round trip per op (an emulation, not a
  fast path). `Nx.bitcast/2` to or from these types goes through their binary.
  """

  import Bitwise

  # Each emulated type: the engine's name for it (`narrow`'s `to`) and its storage type.
  @emulated %{
    {:f, 8} => {:f8, {:f, 32}},
    {:f8_e4m3fn, 8} => {:f8_e4m3fn, {:f, 32}},
    {:s, 2} => {:s2, {:s, 8}},
    {:s, 4} => {:s4, {:s, 8}},
    {:u, 2} => {:u2, {:u, 8}},
    {:u, 4} => {:u4, {:u, 8}}
  }

  @doc """
  Whether `type` is emulated.

  ## Examples

      iex> ExBurn.Defn.Narrow.emulated?({:f, 8})
      true
      iex> ExBurn.Defn.Narrow.emulated?({:f, 16})
      false
  """
  @spec emulated?(term()) :: boolean()
  def emulated?(type), do: is_map_key(@emulated, type)

  @doc """
  The Burn type that holds values of `type` (`type` itself when it is not emulated).

  ## Examples

      iex> ExBurn.Defn.Narrow.storage({:f8_e4m3fn, 8})
      {:f, 32}
      iex> ExBurn.Defn.Narrow.storage({:s, 4})
      {:s, 8}
      iex> ExBurn.Defn.Narrow.storage({:bf, 16})
      {:bf, 16}
  """
  @spec storage(tuple()) :: tuple()
  def storage(type) when is_map_key(@emulated, type), do: elem(@emulated[type], 1)
  def storage({class, bits} = type) when is_atom(class) and is_integer(bits), do: type
  def storage(other), do: fail(:storage, "not a type: #{ExBurn.Options.short(other)}")

  @doc """
  Lowers Nx op `name` with emulated types among its output and inputs: `lower` (the real
  lowering, `ExBurn.Defn.Lower.lower/3`) runs on the storage types, and a `narrow` step
  follows when the output type is emulated. `population_count` and `count_leading_zeros`
  of 2/4-bit integers count within the type's width; a bitcast between f8 and 8-bit integers
  is refused (`ExBurn.Error` of kind `:unsupported_dtype`: the stored value is not its bits;
  eager `Nx.bitcast/2` goes through the binary).
  """
  @spec lower(atom(), map(), list(), (atom(), map(), list() -> {list(), list()})) :: {list(), list()}
  def lower(name, out, args, lower)
      when not (is_atom(name) and is_map(out) and is_map_key(out, :type) and is_list(args) and
                  is_function(lower, 3)) do
    fail(
      :lower,
      "expected an op name, an output template, a list of arguments and a 3-ary function, got: " <>
        Enum.map_join([name, out, args, lower], ", ", &ExBurn.Options.short/1)
    )
  end

  def lower(:bitcast, %{type: {_, ob}} = out, [%{type: {_, tb}} = t], _lower) when ob == 8 or tb == 8 do
    raise ExBurn.Error.new(
            kind: :unsupported_dtype,
            op: :bitcast,
            message:
              "bitcast from #{inspect(t.type)} to #{inspect(out.type)} is not supported inside a " <>
                "compiled program (f8 is emulated over f32); eager Nx.bitcast/2 is"
          )
  end

  def lower(name, %{type: {_, bits} = type} = out, [t], lower)
      when name in [:population_count, :count_leading_zeros] and bits in [2, 4] do
    {inputs, instrs} = lower.(name, view(out), [view(t)])
    # Count the low `bits` bits only: mask first (negative values are sign-extended in
    # storage); leading zeros of the masked byte include the 8 - bits unused ones.
    stored = storage(type)
    mask = {:full, [shape: [], dtype: stored, value: (1 <<< bits) - 1], []}
    n = length(inputs)
    [{op, attrs, [0]}] = instrs
    masked = [mask, {:bitwise_and, [out: stored], [0, n]}, {op, attrs, [n + 1]}]

    tail =
      if name == :count_leading_zeros,
        do: [
          {:full, [shape: [], dtype: stored, value: 8 - bits], []},
          {:subtract, [out: stored], [n + 2, n + 3]}
        ],
        else: []

    narrowed({inputs, masked ++ tail}, out)
  end

  def lower(name, out, args, lower),
    do: narrowed(lower.(name, view(out), Enum.map(args, &view/1)), out)

  # A `narrow` step after the recipe's last one when the output type is emulated.
  defp narrowed({inputs, instrs}, out) do
    case @emulated[out.type] do
      nil -> {inputs, instrs}
      {to, _} -> {inputs, instrs ++ [{:narrow, [to: to], [length(inputs) + length(instrs) - 1]}]}
    end
  end

  defp view(%{type: type} = t), do: %{t | type: storage(type)}
  defp view(list) when is_list(list), do: Enum.map(list, &view/1)
  defp view(other), do: other

  defp fail(op, message), do: raise(ExBurn.Error.new(kind: :argument, op: op, message: message))

  @doc """
  Converts a binary of `count` values of Nx type `type` in Nx's layout (bit-packed for 2/4-bit
  integers) into the storage type's layout. Other types pass through.

  ## Examples

      iex> ExBurn.Defn.Narrow.decode(<<-8::4-signed, 7::4-signed>>, {:s, 4})
      <<248, 7>>
      iex> ExBurn.Defn.Narrow.decode(<<0x3C>>, {:f, 8})
      <<1.0::float-32-native>>
  """
  @spec decode(bitstring(), tuple()) :: binary()
  def decode(bin, type) when not is_bitstring(bin), do: bad(:decode, bin, type)
  def decode(bin, {:f, 8}), do: for(<<b <- bin>>, into: <<>>, do: f8_to_f32(b, {5, 2, 15}))
  def decode(bin, {:f8_e4m3fn, 8}), do: for(<<b <- bin>>, into: <<>>, do: f8_to_f32(b, {4, 3, 7}))

  def decode(bin, {:s, bits}) when bits in [2, 4],
    do: for(<<x::signed-integer-native-size(bits) <- bin>>, into: <<>>, do: <<x::signed-8>>)

  def decode(bin, {:u, bits}) when bits in [2, 4],
    do: for(<<x::unsigned-integer-native-size(bits) <- bin>>, into: <<>>, do: <<x::8>>)

  def decode(bin, {class, bits}) when is_atom(class) and is_integer(bits), do: bin
  def decode(bin, type), do: bad(:decode, bin, type)

  @doc """
  Converts a binary of the storage type back to Nx's layout of `type` (values not of the
  type are rounded or wrapped as `Nx.BinaryBackend` stores them). Other types pass through.

  ## Examples

      iex> ExBurn.Defn.Narrow.encode(<<248, 7>>, {:s, 4})
      <<-8::4-signed, 7::4-signed>>
      iex> ExBurn.Defn.Narrow.encode(<<1.0::float-32-native>>, {:f, 8})
      <<0x3C>>
  """
  @spec encode(binary(), tuple()) :: bitstring()
  def encode(bin, type) when not is_binary(bin), do: bad(:encode, bin, type)
  def encode(bin, {:f, 8}), do: for(<<x::32-native <- bin>>, into: <<>>, do: f32_to_e5m2(x))
  def encode(bin, {:f8_e4m3fn, 8}), do: for(<<x::32-native <- bin>>, into: <<>>, do: f32_to_e4m3fn(x))

  def encode(bin, {:s, bits}) when bits in [2, 4],
    do: for(<<x::signed-8 <- bin>>, into: <<>>, do: <<x::signed-integer-native-size(bits)>>)

  def encode(bin, {:u, bits}) when bits in [2, 4],
    do: for(<<x::8 <- bin>>, into: <<>>, do: <<x::unsigned-integer-native-size(bits)>>)

  def encode(bin, {class, bits}) when is_atom(class) and is_integer(bits), do: bin
  def encode(bin, type), do: bad(:encode, bin, type)

  defp bad(op, bin, type),
    do:
      fail(
        op,
        "expected a binary and a type, got: #{ExBurn.Options.short(bin)}, #{ExBurn.Options.short(type)}"
      )

  # ---- f8 <-> f32 bit patterns ----

  @f32_nan 0x7FC00000

  # An f8 code as f32 bits: E5M2 ({5, 2, 15}, the top byte of an f16: infinities, NaNs with
  # payload) or E4M3FN ({4, 3, 7}: no infinities, NaN only at S.1111.111).
  defp f8_to_f32(b, {e_bits, m_bits, bias}) do
    sign = b >>> 7
    exp = b >>> m_bits &&& (1 <<< e_bits) - 1
    man = b &&& (1 <<< m_bits) - 1
    top = (1 <<< e_bits) - 1

    bits =
      cond do
        e_bits == 5 and exp == top -> sign <<< 31 ||| 0x7F800000 ||| man <<< (23 - m_bits)
        e_bits == 4 and exp == top and man == 7 -> sign <<< 31 ||| @f32_nan
        exp == 0 and man == 0 -> sign <<< 31
        exp == 0 -> float_bits(sign, man * :math.pow(2, 1 - bias - m_bits))
        true -> sign <<< 31 ||| (exp - bias + 127) <<< 23 ||| man <<< (23 - m_bits)
      end

    <<bits::32-native>>
  end

  defp float_bits(sign, magnitude) do
    <<bits::32>> = <<magnitude::float-32>>
    sign <<< 31 ||| bits
  end

  # f32 bits -> E5M2 byte as Nx.Floating.dump_f8/1: the f16 (nearest even), low byte dropped.
  # A NaN keeps its sign and payload (a binary's NaNs cross unchanged; `narrow` gives op
  # results Nx's NaN, 0x7E).
  defp f32_to_e5m2(x) do
    case classify(x) do
      :nan -> <<(x >>> 24 &&& 0x80) ||| 0x7C ||| nan_payload(x >>> 21 &&& 3)>>
      :infinity -> <<0x7C>>
      :neg_infinity -> <<0xFC>>
      {:zero, sign} -> <<sign <<< 7>>
      v -> binary_part(<<v::float-16>>, 0, 1)
    end
  end

  # An f32 NaN whose top mantissa bits are zero would read as infinity: Nx's quiet NaN.
  defp nan_payload(0), do: 2
  defp nan_payload(m), do: m

  # f32 bits -> E4M3FN byte as Nx.Floating.dump_f8_e4m3fn/1.
  defp f32_to_e4m3fn(x) do
    case classify(x) do
      :nan -> <<(x >>> 24 &&& 0x80) ||| 0x7F>>
      :infinity -> <<0x7E>>
      :neg_infinity -> <<0xFE>>
      {:zero, sign} -> <<sign <<< 7>>
      v -> e4m3fn_byte(v)
    end
  end

  defp e4m3fn_byte(v) do
    clamped = max(-448.0, min(448.0, v))
    {sign, a} = if clamped < 0, do: {1, -clamped}, else: {0, clamped}
    e = floor(:math.log2(a))

    if e + 7 <= 0 do
      <<sign::1, 0::4, min(7, round(a / :math.pow(2, -6) * 8))::3>>
    else
      m = ((a / :math.pow(2, e) - 1.0) * 8) |> round() |> min(7) |> max(0)
      if e + 7 == 15 and m >= 7, do: <<sign::1, 15::4, 6::3>>, else: <<sign::1, e + 7::4, m::3>>
    end
  end

  defp classify(bits) do
    exp = bits >>> 23 &&& 0xFF
    man = bits &&& 0x7FFFFF
    sign = bits >>> 31

    cond do
      exp == 0xFF and man != 0 -> :nan
      exp == 0xFF -> if sign == 0, do: :infinity, else: :neg_infinity
      exp == 0 and man == 0 -> {:zero, sign}
      true -> with <<v::float-32>> <- <<bits::32>>, do: v
    end
  end
end
