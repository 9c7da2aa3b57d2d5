defmodule ExBurn.Op do
  @moduledoc """
  The op vocabulary shared with the native engine, and the eager entry point.

  Every tensor operation of ExBurn (the Nx backend, `ExBurn.BurnBridge`, compiled programs)
  is a value of the engine's op table: an atom for ops without attributes (`:exp`) or
  `{name, attrs}` with a map of attributes. `eval/4` runs one op: an eager op is a
  one-instruction program, one NIF call.
  """

  alias ExBurn.{Native, Tensor}

  @doc """
  Encodes an op and its attributes for the engine.

  Scalar attributes (`:value`) are tagged with `scalar/1`; types are normalised.

  ## Examples

      iex> ExBurn.Op.encode(:exp, [])
      :exp
      iex> ExBurn.Op.encode(:sum, axes: [0], keep_axes: true)
      {:sum, %{axes: [0], keep_axes: true}}
  """
  @spec encode(atom(), keyword()) :: atom() | {atom(), map()}
  def encode(name, []), do: name
  def encode(name, attrs), do: {name, Map.new(attrs, &encode_attr/1)}

  defp encode_attr({:value, v}), do: {:value, scalar(v)}
  defp encode_attr({k, v}) when k in [:dtype, :out] and not is_nil(v), do: {k, ExBurn.Type.normalize!(v)}
  defp encode_attr(kv), do: kv

  @doc """
  Tags a number for the engine: `{:f, float}`, `{:i, int}`, `{:u, int}` (above the s64
  range), or `:nan`, `:infinity`, `:neg_infinity`.
  """
  @spec scalar(number() | atom()) :: tuple() | atom()
  def scalar(x) when x in [:nan, :infinity, :neg_infinity], do: x
  def scalar(x) when is_float(x), do: {:f, x}
  def scalar(x) when is_integer(x) and x > 9_223_372_036_854_775_807, do: {:u, x}
  def scalar(x) when is_integer(x), do: {:i, x}

  @doc """
  Runs one op on `inputs` and returns its result tensors.

  ## Options

    * `:device` - where creation ops (no inputs) place their result (default: the inputs'
      device, else `ExBurn.default_device/0`)
  """
  @spec eval(atom(), [Tensor.t()], keyword(), keyword()) :: [Tensor.t()]
  def eval(name, inputs, attrs \\ [], opts \\ []) do
    device = device_of(inputs, opts)
    refs = Enum.map(inputs, fn %Tensor{ref: r} -> r end)
    size = work_size(name, inputs, attrs)

    :eval_op
    |> Native.call([encode(name, attrs), refs, device], name, Native.flavour(device, size))
    |> Enum.map(&Tensor.wrap/1)
  end

  @doc "Like `eval/4` for ops with one result."
  @spec eval1(atom(), [Tensor.t()], keyword(), keyword()) :: Tensor.t()
  def eval1(name, inputs, attrs \\ [], opts \\ []) do
    [t] = eval(name, inputs, attrs, opts)
    t
  end

  defp device_of([%Tensor{device: d} | _], _opts), do: d
  defp device_of([], opts), do: ExBurn.Device.normalize!(opts[:device] || ExBurn.default_device())

  # Ops whose cost grows faster than their input size count extra when picking a scheduler.
  @superlinear [:dot, :conv, :window_sum, :window_product, :window_max, :window_min, :sort, :argsort]

  defp work_size(_name, [], attrs), do: attrs |> Keyword.get(:shape, []) |> Enum.product()

  defp work_size(name, inputs, _attrs) do
    size = Enum.reduce(inputs, 0, fn %Tensor{shape: s}, acc -> acc + product(s) end)
    if name in @superlinear, do: size * 64, else: size
  end

  defp product(shape) when tuple_size(shape) == 0, do: 1
  defp product(shape), do: shape |> Tuple.to_list() |> Enum.product()
end
