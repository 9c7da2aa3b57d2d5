defmodule ExBurn.Tensor do
  @moduledoc """
  A tensor living in Burn, on some device.

  The struct holds a reference to the native tensor plus its shape (a tuple, as in Nx), type
  (`{:f, 32}` ...) and device. Data crosses the boundary in Nx's exact little-endian layout.
  Native memory is released when the struct is garbage collected, or at once with `free/1`;
  using a freed tensor raises `ExBurn.Error` of kind `:deallocated`. A process that has received
  `:collect_after` bytes of tensors (`ExBurn.configure!/1`, default 256 MiB) since its last
  garbage collection collects itself, so tensors it dropped do not wait for its heap to fill.

      iex> t = ExBurn.Tensor.new([[1, 2], [3, 4]], type: :s32)
      iex> {t.shape, t.type, t.device}
      {{2, 2}, {:s, 32}, :cpu}
      iex> ExBurn.Tensor.to_list(t)
      [[1, 2], [3, 4]]
  """

  import Kernel, except: [byte_size: 1]
  alias ExBurn.{Device, Native, Options, Type}

  defstruct [:ref, :shape, :type, :device]

  @type shape :: tuple()
  @type t :: %__MODULE__{ref: reference(), shape: shape(), type: Type.t(), device: Device.t()}

  @doc false
  def wrap({ref, shape, type, device}) do
    ExBurn.Collector.note(shape, type)
    %__MODULE__{ref: ref, shape: shape, type: type, device: device}
  end

  @device_opts [
    device: [
      type: {:or, [nil, :device]},
      default: nil,
      doc: "where to place it (default `ExBurn.default_device/0`)"
    ]
  ]

  @doc """
  Builds a tensor from Nx-layout binary data (little-endian elements of `type`, row-major).
  The binary's size must be the shape's element count times the type's size.

  ## Options

  #{Options.docs(@device_opts)}
  """
  @spec from_binary(binary(), shape() | [non_neg_integer()], term(), keyword()) :: t()
  def from_binary(data, shape, type, opts \\ []) do
    opts = Options.validate!(opts, @device_opts, :from_binary)
    unless is_binary(data), do: Options.fail(:from_binary, "expected a binary, got #{Options.short(data)}")
    type = Type.normalize!(type)
    shape = normalize_shape!(shape)
    device = opts[:device] || ExBurn.default_device()

    Native.call(:tensor_from_binary, [data, shape, type, device], :from_binary)
    |> wrap()
  end

  @new_opts [
              type: [
                type: {:or, [nil, :type]},
                default: nil,
                doc: "element type (default `{:f, 32}` when any element is a float, else `{:s, 32}`)"
              ]
            ] ++ @device_opts

  @doc """
  Builds a tensor from a number or a nested list of numbers (floats may also be `:nan`,
  `:infinity`, `:neg_infinity`).

  ## Options

  #{Options.docs(@new_opts)}
  """
  @spec new(number() | atom() | list(), keyword()) :: t()
  def new(data, opts \\ []) do
    opts = Options.validate!(opts, @new_opts, :new)
    {shape, flat} = flatten(data)
    type = opts[:type] || if(Enum.any?(flat, &(is_float(&1) or is_atom(&1))), do: {:f, 32}, else: {:s, 32})
    from_binary(Type.encode(flat, type, :new), shape, type, device: opts[:device])
  end

  defp flatten(n) when is_number(n) or n in [:nan, :infinity, :neg_infinity], do: {{}, [n]}

  defp flatten(list) when is_list(list) do
    unless proper?(list), do: Options.fail(:new, "expected a nested list of numbers, got an improper list")
    parts = Enum.map(list, &flatten/1)
    shapes = parts |> Enum.map(&elem(&1, 0)) |> Enum.uniq()

    case shapes do
      [] ->
        {{0}, []}

      [inner] ->
        {Tuple.insert_at(inner, 0, length(list)), Enum.flat_map(parts, &elem(&1, 1))}

      _ ->
        raise ExBurn.Error.new(kind: :shape, op: :new, message: "ragged nested list")
    end
  end

  defp flatten(other),
    do: Options.fail(:new, "expected a number or a nested list of numbers, got #{Options.short(other)}")

  @doc """
  Reads the data back as an Nx-layout binary.

  ## Options

    * `:limit` - read only the first `limit` elements
  """
  @spec to_binary(t(), keyword()) :: binary()
  def to_binary(t, opts \\ [])

  def to_binary(%__MODULE__{} = t, opts) do
    opts = Options.validate!(opts, [limit: [type: {:or, [nil, :non_neg_integer]}, default: nil]], :to_binary)
    Native.call(:tensor_to_binary, [t.ref, opts[:limit]], :to_binary)
  end

  def to_binary(other, _opts), do: not_a_tensor(other, :to_binary)

  @doc "The elements as a nested list (non-finite floats as `:nan`, `:infinity`, `:neg_infinity`)."
  @spec to_list(t()) :: number() | list()
  def to_list(%__MODULE__{} = t) do
    flat = t |> to_binary() |> Type.decode(t.type)
    nest(flat, Tuple.to_list(t.shape))
  end

  def to_list(other), do: not_a_tensor(other, :to_list)

  defp nest([x], []), do: x
  defp nest(flat, [_]), do: flat

  defp nest(flat, [_ | inner]) do
    size = Enum.product(inner)
    if size == 0, do: [], else: flat |> Enum.chunk_every(size) |> Enum.map(&nest(&1, inner))
  end

  @doc "Frees the native memory now. Later use of the tensor raises kind `:deallocated`."
  @spec free(t()) :: :ok
  def free(%__MODULE__{ref: ref}) do
    Native.call(:tensor_deallocate, [ref], :free)
    :ok
  end

  def free(other), do: not_a_tensor(other, :free)

  @doc "Copies the tensor to `device`."
  @spec to_device(t(), Device.t() | atom()) :: t()
  def to_device(%__MODULE__{} = t, device) do
    device = Device.normalize!(device)
    if device == t.device, do: t, else: wrap(Native.call(:tensor_to_device, [t.ref, device], :to_device))
  end

  def to_device(other, _device), do: not_a_tensor(other, :to_device)

  @doc "Rank (number of axes)."
  @spec rank(t()) :: non_neg_integer()
  def rank(%__MODULE__{shape: s}), do: tuple_size(s)
  def rank(other), do: not_a_tensor(other, :rank)

  @doc "Number of elements."
  @spec numel(t()) :: non_neg_integer()
  def numel(%__MODULE__{shape: s}), do: s |> Tuple.to_list() |> Enum.product()
  def numel(other), do: not_a_tensor(other, :numel)

  @doc "Size in bytes of the data."
  @spec byte_size(t()) :: non_neg_integer()
  def byte_size(%__MODULE__{type: type} = t), do: numel(t) * Type.byte_size(type)
  def byte_size(other), do: not_a_tensor(other, :byte_size)

  @doc false
  # The error of a public function given something that is not an ExBurn.Tensor.
  def not_a_tensor(other, op), do: Options.fail(op, "expected an ExBurn.Tensor, got #{Options.short(other)}")

  # Axes a tensor may have (the engine's limit).
  @max_rank 64
  @max_dim 18_446_744_073_709_551_615

  @doc false
  # A shape as a tuple of dimensions: at most 64 axes, each a non-negative integer of 64 bits
  # (larger ones are refused here, before anything is built or formatted in full).
  def normalize_shape!(shape) when is_tuple(shape) and tuple_size(shape) <= @max_rank,
    do: normalize_shape!(Tuple.to_list(shape))

  def normalize_shape!(shape) when is_list(shape) do
    cond do
      not ExBurn.Format.at_most?(shape, @max_rank) ->
        bad_shape!(shape, "at most #{@max_rank} axes")

      proper?(shape) and Enum.all?(shape, &(is_integer(&1) and &1 >= 0 and &1 <= @max_dim)) ->
        List.to_tuple(shape)

      true ->
        bad_shape!(shape, "a tuple of non-negative integers below 2^64")
    end
  end

  def normalize_shape!(shape) when is_tuple(shape), do: bad_shape!(shape, "at most #{@max_rank} axes")
  def normalize_shape!(other), do: bad_shape!(other, "a tuple of non-negative integers below 2^64")

  defp bad_shape!(shape, expected),
    do: Options.fail(:shape, "invalid shape #{Options.short(shape)} (expected #{expected})")

  defp proper?([]), do: true
  defp proper?([_ | t]), do: proper?(t)
  defp proper?(_), do: false

  defimpl Inspect do
    import Inspect.Algebra

    @max 30

    def inspect(t, opts) do
      {class, bits} = t.type
      dims = t.shape |> Tuple.to_list() |> Enum.map_join(&"[#{&1}]")
      header = "#{class}#{bits}#{dims} #{Kernel.inspect(t.device)}"

      body =
        try do
          n = ExBurn.Tensor.numel(t)
          values = t |> ExBurn.Tensor.to_binary(limit: @max) |> ExBurn.Type.decode(t.type)
          shown = Enum.map_join(values, ", ", &format_value(&1, t.type))
          if n > @max, do: "[#{shown}, ...]", else: "[#{shown}]"
        rescue
          e in ExBurn.Error -> "(#{e.kind})"
        end

      concat(["#ExBurn.Tensor<", header, " ", color(body, :list, opts), ">"])
    end

    # Floats narrower than 64 bits print with the fewest digits that read back to the same value.
    defp format_value(x, {_, bits} = type) when is_float(x) and bits < 64 do
      bin = ExBurn.Type.encode([x], type)

      # significant digits (decimal places would turn denormals into 0.0)
      Enum.find_value(1..16, fn d ->
        r = x |> :erlang.float_to_binary(scientific: d) |> :erlang.binary_to_float()
        if ExBurn.Type.encode([r], type) == bin, do: Float.to_string(r)
      end) || Float.to_string(x)
    end

    defp format_value(x, _type), do: Kernel.inspect(x)
  end
end
