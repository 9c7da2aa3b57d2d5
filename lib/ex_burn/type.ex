defmodule ExBurn.Type do
  @moduledoc """
  Element types ExBurn supports, in Nx's notation.

  Burn holds `f16`, `bf16`, `f32`, `f64`, `s8`-`s64` and `u8`-`u64`; Nx's `pred` is `{:u, 8}`.
  Complex types, the `f8` variants and 2/4-bit integers are refused here with an
  `ExBurn.Error` of kind `:unsupported_dtype`; through Nx (`ExBurn.Backend`, `ExBurn.Compiler`)
  complex tensors are pairs of floats and f8/2-bit/4-bit tensors are emulated over wider types
  (`ExBurn.Defn.Narrow`).
  """

  import Kernel, except: [byte_size: 1]

  @supported [
    {:u, 8},
    {:u, 16},
    {:u, 32},
    {:u, 64},
    {:s, 8},
    {:s, 16},
    {:s, 32},
    {:s, 64},
    {:f, 16},
    {:bf, 16},
    {:f, 32},
    {:f, 64}
  ]

  @type t :: {:u | :s | :f | :bf, 8 | 16 | 32 | 64}

  @doc "All supported types."
  @spec supported() :: [t()]
  def supported, do: @supported

  @doc """
  Normalises a type (`{:f, 32}`, or shorthands such as `:f32`, `:bf16`, `:s64`, `:u8`, `:pred`)
  and checks that Burn can hold it.

  ## Examples

      iex> ExBurn.Type.normalize!(:f32)
      {:f, 32}
      iex> ExBurn.Type.normalize!({:bf, 16})
      {:bf, 16}
  """
  @spec normalize!(term()) :: t()
  def normalize!(type) when type in @supported, do: type
  def normalize!(:pred), do: {:u, 8}

  def normalize!(type) when is_atom(type) do
    case Regex.run(~r/^(bf|f|s|u|c)(\d+)$/, Atom.to_string(type)) do
      [_, class, bits] -> normalize!({String.to_atom(class), String.to_integer(bits)})
      _ -> raise ExBurn.Error.new(kind: :argument, message: "unknown type #{ExBurn.Format.term(type)}")
    end
  end

  def normalize!({class, bits} = type) when is_atom(class) and is_integer(bits) do
    raise ExBurn.Error.new(
            kind: :unsupported_dtype,
            message:
              "type #{ExBurn.Format.term(type)} is not supported by Burn " <>
                "(supported: #{Enum.map_join(@supported, ", ", &inspect/1)})"
          )
  end

  def normalize!(other),
    do: raise(ExBurn.Error.new(kind: :argument, message: "not a type: #{ExBurn.Format.term(other)}"))

  @doc "Bytes per element."
  @spec byte_size(t()) :: pos_integer()
  def byte_size(type), do: type |> normalize!() |> elem(1) |> div(8)

  @doc "Whether the type is a float type."
  @spec float?(t()) :: boolean()
  def float?(type), do: elem(normalize!(type), 0) in [:f, :bf]

  @doc """
  Nx's promotion of two tensor types (`Nx.Type.merge/2`).

  ## Examples

      iex> ExBurn.Type.merge({:s, 8}, {:u, 8})
      {:s, 16}
      iex> ExBurn.Type.merge({:f, 16}, {:bf, 16})
      {:f, 32}
  """
  @spec merge(t(), t()) :: t()
  def merge(a, b) when a not in @supported or b not in @supported, do: merge(normalize!(a), normalize!(b))
  def merge(t, t), do: t
  def merge({:f, 16}, {:bf, 16}), do: {:f, 32}
  def merge({:bf, 16}, {:f, 16}), do: {:f, 32}

  def merge({c1, b1} = a, {c2, b2} = b) do
    cond do
      float?(a) and float?(b) -> if b1 >= b2, do: a, else: b
      float?(a) -> a
      float?(b) -> b
      c1 == c2 -> {c1, max(b1, b2)}
      c1 == :s -> {:s, min(64, max(b1, b2 * 2))}
      true -> {:s, min(64, max(b2, b1 * 2))}
    end
  end

  @doc "Decodes `count` little-endian elements of `type` into numbers (and `:nan`, `:infinity`, `:neg_infinity`)."
  @spec decode(binary(), t()) :: [number() | atom()]
  def decode(bin, type) when not is_binary(bin) or type not in @supported do
    type = normalize!(type)

    unless is_binary(bin) and rem(Kernel.byte_size(bin), byte_size(type)) == 0,
      do:
        ExBurn.Options.fail(
          :decode,
          "expected a binary of whole #{inspect(type)} elements, got #{ExBurn.Options.short(bin)}"
        )

    decode(bin, type)
  end

  def decode(bin, {:s, bits}), do: for(<<x::signed-little-size(bits) <- bin>>, do: x)
  def decode(bin, {:u, bits}), do: for(<<x::unsigned-little-size(bits) <- bin>>, do: x)
  def decode(bin, {:f, 16}), do: for(<<x::binary-size(2) <- bin>>, do: float(x, 16))
  def decode(bin, {:bf, 16}), do: for(<<x::binary-size(2) <- bin>>, do: bfloat(x))
  def decode(bin, {:f, 32}), do: for(<<x::binary-size(4) <- bin>>, do: float(x, 32))
  def decode(bin, {:f, 64}), do: for(<<x::binary-size(8) <- bin>>, do: float(x, 64))

  defp float(bin, bits) do
    case bin do
      <<x::float-little-size(bits)>> -> x
      _ -> non_finite(bin, bits)
    end
  end

  defp bfloat(<<lo, hi>>), do: float(<<0, 0, lo, hi>>, 32)

  defp non_finite(bin, bits) do
    <<u::unsigned-little-size(bits)>> = bin
    mbits = %{16 => 10, 32 => 23, 64 => 52}[bits]
    mantissa = Bitwise.band(u, Bitwise.bsl(1, mbits) - 1)
    sign = Bitwise.bsr(u, bits - 1)

    cond do
      mantissa != 0 -> :nan
      sign == 1 -> :neg_infinity
      true -> :infinity
    end
  end

  @doc """
  Encodes numbers (and `:nan`, `:infinity`, `:neg_infinity` for float types) as
  little-endian elements of `type`; integers wrap to the type's width as in Nx. Anything else
  raises `ExBurn.Error` of kind `:argument` naming `op`.
  """
  @spec encode([number() | atom()], t(), atom()) :: binary()
  def encode(values, type, op \\ :encode) do
    type = normalize!(type)

    unless is_list(values) and ExBurn.Options.proper_list?(values),
      do: ExBurn.Options.fail(op, "expected a list of numbers, got #{ExBurn.Options.short(values)}")

    for v <- values, into: <<>> do
      if encodable?(v, type),
        do: encode1(v, type),
        else:
          ExBurn.Options.fail(
            op,
            "cannot store #{ExBurn.Options.short(v)} in a tensor of type #{inspect(type)}"
          )
    end
  end

  defp encodable?(v, _type) when is_integer(v), do: true
  defp encodable?(v, {class, _}) when is_float(v), do: class in [:f, :bf] or abs(v) < 1.0e19
  defp encodable?(v, {class, _}) when v in [:nan, :infinity, :neg_infinity], do: class in [:f, :bf]
  defp encodable?(_v, _type), do: false

  defp encode1(v, {:s, b}), do: <<trunc(v)::signed-little-size(b)>>
  defp encode1(v, {:u, b}), do: <<trunc(v)::unsigned-little-size(b)>>
  defp encode1(v, {:bf, 16}) when is_integer(v) and abs(v) >= 3.4e38, do: encode1(sign_inf(v), {:bf, 16})
  defp encode1(v, {:f, b}) when is_integer(v) and abs(v) >= 1.0e300, do: encode1(sign_inf(v), {:f, b})
  defp encode1(v, {:bf, 16}), do: binary_part(encode1(v, {:f, 32}), 2, 2)
  defp encode1(:nan, {:f, 16}), do: <<0x7E00::little-16>>
  defp encode1(:infinity, {:f, 16}), do: <<0x7C00::little-16>>
  defp encode1(:neg_infinity, {:f, 16}), do: <<0xFC00::little-16>>
  defp encode1(:nan, {:f, 32}), do: <<0x7FC00000::little-32>>
  defp encode1(:infinity, {:f, 32}), do: <<0x7F800000::little-32>>
  defp encode1(:neg_infinity, {:f, 32}), do: <<0xFF800000::little-32>>
  defp encode1(:nan, {:f, 64}), do: <<0x7FF8000000000000::little-64>>
  defp encode1(:infinity, {:f, 64}), do: <<0x7FF0000000000000::little-64>>
  defp encode1(:neg_infinity, {:f, 64}), do: <<0xFFF0000000000000::little-64>>
  defp encode1(v, {:f, 16}) when abs(v) > 65504.0, do: encode1(sign_inf(v), {:f, 16})
  defp encode1(v, {:f, 32}) when abs(v) > 3.4028234663852886e38, do: encode1(sign_inf(v), {:f, 32})
  defp encode1(v, {:f, b}), do: <<v * 1.0::float-little-size(b)>>

  defp sign_inf(v) when v < 0, do: :neg_infinity
  defp sign_inf(_v), do: :infinity
end
