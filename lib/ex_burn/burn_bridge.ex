defmodule ExBurn.BurnBridge do
  @moduledoc """
  Direct tensor operations on Burn, without Nx.

  Every function here is one op of the engine's op table (one NIF call), with Nx's semantics:
  broadcasting, type promotion, integer wrap-around. Binary ops accept a number for either
  operand; a number takes the type of the tensor it meets (as in Nx).

      iex> a = ExBurn.BurnBridge.ones({2, 2}, :f32)
      iex> b = ExBurn.BurnBridge.add(a, 1)
      iex> ExBurn.Tensor.to_list(ExBurn.BurnBridge.matmul(a, b))
      [[4.0, 4.0], [4.0, 4.0]]
  """

  import Kernel, except: [min: 2, max: 2, round: 1, abs: 1]
  alias ExBurn.{Op, Options, Tensor, Type}

  @type tensor :: Tensor.t()
  @type tensor_or_number :: Tensor.t() | number()

  # ---- creation ----

  @device_opts [
    device: [
      type: {:or, [nil, :device]},
      default: nil,
      doc: "where to create it (default `ExBurn.default_device/0`)"
    ]
  ]

  @doc """
  A tensor of `shape` filled with zeros.

  ## Options

  #{Options.docs(@device_opts)}
  """
  @spec zeros(tuple() | list(), term(), keyword()) :: tensor()
  def zeros(shape, type \\ :f32, opts \\ []), do: full(shape, 0, type, opts)

  @doc "A tensor of `shape` filled with ones. Options as in `zeros/3`."
  @spec ones(tuple() | list(), term(), keyword()) :: tensor()
  def ones(shape, type \\ :f32, opts \\ []), do: full(shape, 1, type, opts)

  @doc "A tensor of `shape` filled with `value`. Options as in `zeros/3`."
  @spec full(tuple() | list(), number() | atom(), term(), keyword()) :: tensor()
  def full(shape, value, type \\ :f32, opts \\ []) do
    opts = Options.validate!(opts, @device_opts, :full)
    Op.eval1(:full, [], [shape: shape_list(shape, :full), dtype: type, value: value], opts)
  end

  @iota_opts [axis: [type: {:or, [nil, :non_neg_integer]}, default: nil, doc: "count along this axis only"]] ++
               @device_opts

  @doc """
  Counts 0, 1, 2, ... over the whole tensor, or along `:axis`.

  ## Options

  #{Options.docs(@iota_opts)}
  """
  @spec iota(tuple() | list(), term(), keyword()) :: tensor()
  def iota(shape, type \\ :s32, opts \\ []) do
    opts = Options.validate!(opts, @iota_opts, :iota)

    Op.eval1(
      :iota,
      [],
      [shape: shape_list(shape, :iota), dtype: type, axis: opts[:axis]],
      Keyword.take(opts, [:device])
    )
  end

  @doc "An identity matrix of size `n` (or a batch of them for a shape of rank >= 2)."
  @spec eye(pos_integer() | tuple(), term(), keyword()) :: tensor()
  def eye(n_or_shape, type \\ :f32, opts \\ [])
  def eye(n, type, opts) when is_integer(n), do: eye({n, n}, type, opts)

  def eye(shape, type, opts) do
    opts = Options.validate!(opts, @device_opts, :eye)
    Op.eval1(:eye, [], [shape: shape_list(shape, :eye), dtype: type], opts)
  end

  @seed_opts [
    seed: [type: {:number, 0, 18_446_744_073_709_551_615}, default: 0, doc: "the generator seed (an integer)"],
    type: [type: :type, default: {:f, 32}, doc: "element type"]
  ]
  @uniform_opts [
                  min: [type: :number, default: 0.0, doc: "the lower end of the range"],
                  max: [type: :number, default: 1.0, doc: "the upper end of the range (excluded)"]
                ] ++ @seed_opts ++ @device_opts

  @doc """
  Uniform random numbers in `[min, max)`, reproducible for a given seed on any device.

  ## Options

  #{Options.docs(@uniform_opts)}
  """
  @spec random_uniform(tuple() | list(), keyword()) :: tensor()
  def random_uniform(shape, opts \\ []) do
    opts = Options.validate!(opts, @uniform_opts, :random_uniform)
    unless is_integer(opts[:seed]), do: Options.fail(:random_uniform, "the seed must be an integer")

    attrs = [
      shape: shape_list(shape, :random_uniform),
      dtype: opts[:type],
      min: opts[:min] * 1.0,
      max: opts[:max] * 1.0,
      seed: opts[:seed]
    ]

    Op.eval1(:random_uniform, [], attrs, device: opts[:device])
  end

  @normal_opts [
                 mean: [type: :number, default: 0.0, doc: "the mean"],
                 std: [type: :non_neg_number, default: 1.0, doc: "the standard deviation"]
               ] ++ @seed_opts ++ @device_opts

  @doc """
  Normal random numbers, reproducible for a given seed on any device.

  ## Options

  #{Options.docs(@normal_opts)}
  """
  @spec random_normal(tuple() | list(), keyword()) :: tensor()
  def random_normal(shape, opts \\ []) do
    opts = Options.validate!(opts, @normal_opts, :random_normal)
    unless is_integer(opts[:seed]), do: Options.fail(:random_normal, "the seed must be an integer")

    attrs = [
      shape: shape_list(shape, :random_normal),
      dtype: opts[:type],
      mean: opts[:mean] * 1.0,
      std: opts[:std] * 1.0,
      seed: opts[:seed]
    ]

    Op.eval1(:random_normal, [], attrs, device: opts[:device])
  end

  # ---- element-wise ----

  @unary Op.names(:unary)

  for name <- @unary do
    @doc "Element-wise `#{name}` (Nx semantics; float functions of integers give `{:f, 32}`)."
    @spec unquote(name)(tensor()) :: tensor()
    def unquote(name)(%Tensor{} = t), do: Op.eval1(unquote(name), [t])
    def unquote(name)(other), do: Tensor.not_a_tensor(other, unquote(name))
  end

  @binary Op.names(:binary) ++ Op.names(:compare) ++ Op.names(:logical)

  for name <- @binary do
    @doc "Element-wise `#{name}` with broadcasting and Nx type promotion."
    @spec unquote(name)(tensor_or_number(), tensor_or_number()) :: tensor()
    def unquote(name)(a, b) do
      {a, b} = operands(a, b, unquote(name))
      Op.eval1(unquote(name), [a, b])
    end
  end

  defp operands(%Tensor{} = a, %Tensor{} = b, _op), do: {a, b}
  defp operands(%Tensor{} = a, b, op), do: {a, scalar(b, a, op)}
  defp operands(a, %Tensor{} = b, op), do: {scalar(a, b, op), b}

  defp operands(a, b, op) do
    Options.fail(op, "expected tensors or numbers, got #{Options.short(a)} and #{Options.short(b)}")
  end

  # A number meets a tensor: it takes the tensor's type, or f32 when a float meets integers.
  defp scalar(n, %Tensor{type: type, device: device}, _op)
       when is_number(n) or n in [:nan, :infinity, :neg_infinity] do
    type = if (is_float(n) or is_atom(n)) and not Type.float?(type), do: {:f, 32}, else: type
    Op.eval1(:full, [], [shape: [], dtype: type, value: n], device: device)
  end

  defp scalar(other, _t, op),
    do: Options.fail(op, "expected a tensor or a number, got #{Options.short(other)}")

  defp tensor_or_scalar(%Tensor{} = x, _like, _op), do: x
  defp tensor_or_scalar(x, like, op), do: scalar(x, like, op)

  @doc "Converts to another type (floats to integers truncate; integers wrap)."
  @spec as_type(tensor(), term()) :: tensor()
  def as_type(%Tensor{} = t, type), do: Op.eval1(:as_type, [t], dtype: type)
  def as_type(other, _type), do: Tensor.not_a_tensor(other, :as_type)

  @doc "Picks `on_true` where `pred` is non-zero, else `on_false` (broadcast together)."
  @spec select(tensor(), tensor_or_number(), tensor_or_number()) :: tensor()
  def select(%Tensor{} = pred, on_true, on_false) do
    {t, f} = operands(on_true, on_false, :select)
    Op.eval1(:select, [pred, t, f])
  end

  def select(other, _on_true, _on_false), do: Tensor.not_a_tensor(other, :select)

  @doc "Clamps every element into `[min, max]`."
  @spec clip(tensor(), tensor_or_number(), tensor_or_number()) :: tensor()
  def clip(%Tensor{} = t, min, max) do
    Op.eval1(:clip, [t, tensor_or_scalar(min, t, :clip), tensor_or_scalar(max, t, :clip)])
  end

  def clip(other, _min, _max), do: Tensor.not_a_tensor(other, :clip)

  # ---- reductions ----

  @reductions Op.names(:reduce)
  @reduce_opts [
    axes: [
      type: {:or, [nil, {:list, :non_neg_integer}]},
      default: nil,
      doc: "the axes to reduce (default: all)"
    ],
    keep_axes: [type: :boolean, default: false, doc: "keep reduced axes with size 1"]
  ]

  for name <- @reductions do
    @doc """
    `#{name}` over `:axes` (all axes by default).

    ## Options

    #{Options.docs(@reduce_opts)}
    """
    @spec unquote(name)(tensor(), keyword()) :: tensor()
    def unquote(name)(t, opts \\ [])

    def unquote(name)(%Tensor{} = t, opts) do
      opts = Options.validate!(opts, @reduce_opts, unquote(name))
      Op.eval1(unquote(name), [t], axes: opts[:axes], keep_axes: opts[:keep_axes])
    end

    def unquote(name)(other, _opts), do: Tensor.not_a_tensor(other, unquote(name))
  end

  @doc """
  Mean over `:axes`; integers average in `{:f, 32}`.

  ## Options

  #{Options.docs(@reduce_opts)}
  """
  @spec mean(tensor(), keyword()) :: tensor()
  def mean(t, opts \\ [])

  def mean(%Tensor{} = t, opts) do
    opts = Options.validate!(opts, @reduce_opts, :mean)
    rank = tuple_size(t.shape)
    axes = opts[:axes] || Enum.to_list(0..(rank - 1)//1)

    if Enum.any?(axes, &(&1 >= rank)) or length(Enum.uniq(axes)) != length(axes) do
      Options.fail(:mean, "axes #{Options.short(axes)} are invalid for a tensor of rank #{rank}")
    end

    count = Enum.reduce(axes, 1, &(elem(t.shape, &1) * &2))
    type = if Type.float?(t.type), do: t.type, else: {:f, 32}
    t |> as_type(type) |> sum(opts) |> divide(count * 1.0)
  end

  def mean(other, _opts), do: Tensor.not_a_tensor(other, :mean)

  @arg_opts [
    axis: [
      type: {:or, [nil, :non_neg_integer]},
      default: nil,
      doc: "along this axis (default: the flattened tensor)"
    ],
    keep_axis: [type: :boolean, default: false, doc: "keep the axis with size 1"],
    tie_break: [
      type: {:in, [:low, :high]},
      default: :low,
      doc: "`:low` (the first wins) or `:high` (the last)"
    ],
    type: [type: :type, default: {:s, 64}, doc: "index type"]
  ]

  for name <- [:argmax, :argmin] do
    @doc """
    Index of the #{if name == :argmax, do: "largest", else: "smallest"} element.

    ## Options

    #{Options.docs(@arg_opts)}
    """
    @spec unquote(name)(tensor(), keyword()) :: tensor()
    def unquote(name)(t, opts \\ [])

    def unquote(name)(%Tensor{} = t, opts) do
      opts = Options.validate!(opts, @arg_opts, unquote(name))
      attrs = [axis: opts[:axis], keep_axis: opts[:keep_axis], tie_break: opts[:tie_break], out: opts[:type]]
      Op.eval1(unquote(name), [t], attrs)
    end

    def unquote(name)(other, _opts), do: Tensor.not_a_tensor(other, unquote(name))
  end

  # ---- linear algebra and nn ----

  @dot_opts [
    precision: [
      type: {:or, [nil, {:in, [:default, :highest]}]},
      default: nil,
      doc:
        "`:default` (TF32 tensor cores for f32 on recent NVIDIA GPUs) or `:highest` (full f32 " <>
          "accuracy); default `ExBurn.dot_precision/0`"
    ]
  ]

  @doc """
  Matrix product: `a`'s last axis with `b`'s first (rank 2) or second-to-last axis; leading
  axes of rank >= 3 operands are batch axes and must agree.

  ## Options

  #{Options.docs(@dot_opts)}
  """
  @spec matmul(tensor(), tensor(), keyword()) :: tensor()
  def matmul(a, b, opts \\ [])

  def matmul(%Tensor{shape: sa} = a, %Tensor{shape: sb} = b, opts)
      when tuple_size(sa) > 0 and tuple_size(sb) > 0 do
    {ra, rb} = {tuple_size(sa), tuple_size(sb)}
    batch = Enum.to_list(0..(Kernel.min(Kernel.max(ra - 2, 0), Kernel.max(rb - 2, 0)) - 1)//1)
    contract_b = if rb >= 2, do: rb - 2, else: 0
    dot(a, [ra - 1], batch, b, [contract_b], batch, opts)
  end

  def matmul(a, b, _opts) do
    Options.fail(
      :matmul,
      "expected two ExBurn.Tensor of rank >= 1, got #{Options.short(a)} and #{Options.short(b)}"
    )
  end

  @doc """
  General contraction of `a`'s `contract_a` axes with `b`'s `contract_b` axes, batching over
  `batch_a`/`batch_b`.

  ## Options

  #{Options.docs(@dot_opts)}
  """
  @spec dot(
          tensor(),
          [non_neg_integer()],
          [non_neg_integer()],
          tensor(),
          [non_neg_integer()],
          [non_neg_integer()],
          keyword()
        ) :: tensor()
  def dot(a, contract_a, batch_a, b, contract_b, batch_b, opts \\ [])

  def dot(%Tensor{} = a, contract_a, batch_a, %Tensor{} = b, contract_b, batch_b, opts) do
    opts = Options.validate!(opts, @dot_opts, :dot)

    for {axes, what} <- [
          {contract_a, "contract_a"},
          {batch_a, "batch_a"},
          {contract_b, "contract_b"},
          {batch_b, "batch_b"}
        ] do
      Options.check!(axes, {:list, :non_neg_integer}, what, :dot)
    end

    Op.eval1(:dot, [a, b],
      contract_a: contract_a,
      batch_a: batch_a,
      contract_b: contract_b,
      batch_b: batch_b,
      precision: opts[:precision] || ExBurn.dot_precision()
    )
  end

  def dot(a, _ca, _ba, b, _cb, _bb, _opts) do
    Options.fail(:dot, "expected two ExBurn.Tensor, got #{Options.short(a)} and #{Options.short(b)}")
  end

  @doc "Softmax along `axis` (default the last)."
  @spec softmax(tensor(), integer() | nil) :: tensor()
  def softmax(t, axis \\ nil), do: softmax_like(:softmax, t, axis)

  @doc "Log-softmax along `axis` (default the last)."
  @spec log_softmax(tensor(), integer() | nil) :: tensor()
  def log_softmax(t, axis \\ nil), do: softmax_like(:log_softmax, t, axis)

  defp softmax_like(op, %Tensor{} = t, axis) do
    axis = Options.check!(axis, {:or, [nil, :non_neg_integer]}, "axis", op)
    Op.eval1(op, [t], axis: axis || Kernel.max(tuple_size(t.shape) - 1, 0))
  end

  defp softmax_like(op, other, _axis), do: Tensor.not_a_tensor(other, op)

  # ---- shape ----

  @axes {:or, [nil, {:list, :non_neg_integer}]}

  @doc "Reshapes to `shape` (same number of elements)."
  @spec reshape(tensor(), tuple() | list()) :: tensor()
  def reshape(%Tensor{} = t, shape), do: Op.eval1(:reshape, [t], shape: shape_list(shape, :reshape))
  def reshape(other, _shape), do: Tensor.not_a_tensor(other, :reshape)

  @doc "Permutes axes (reverses them by default)."
  @spec transpose(tensor(), [non_neg_integer()] | nil) :: tensor()
  def transpose(t, axes \\ nil), do: axes_op(:transpose, t, axes)

  @doc "Removes size-1 axes (all of them, or those in `axes`)."
  @spec squeeze(tensor(), [non_neg_integer()] | nil) :: tensor()
  def squeeze(t, axes \\ nil), do: axes_op(:squeeze, t, axes)

  @doc "Reverses the order along `axes` (all by default)."
  @spec reverse(tensor(), [non_neg_integer()] | nil) :: tensor()
  def reverse(t, axes \\ nil), do: axes_op(:reverse, t, axes)

  defp axes_op(op, %Tensor{} = t, axes), do: Op.eval1(op, [t], axes: Options.check!(axes, @axes, "axes", op))
  defp axes_op(op, other, _axes), do: Tensor.not_a_tensor(other, op)

  @doc "Broadcasts to `shape` (axes aligned on the right, or mapped by `axes`)."
  @spec broadcast(tensor(), tuple() | list(), [non_neg_integer()] | nil) :: tensor()
  def broadcast(t, shape, axes \\ nil)

  def broadcast(%Tensor{} = t, shape, axes) do
    axes = Options.check!(axes, @axes, "axes", :broadcast)
    Op.eval1(:broadcast, [t], shape: shape_list(shape, :broadcast), axes: axes)
  end

  def broadcast(other, _shape, _axes), do: Tensor.not_a_tensor(other, :broadcast)

  @doc "A strided slice: `starts`, `lengths` and optional `strides` per axis."
  @spec slice(tensor(), [integer()], [non_neg_integer()], [pos_integer()] | nil) :: tensor()
  def slice(t, starts, lengths, strides \\ nil)

  def slice(%Tensor{} = t, starts, lengths, strides) do
    Options.check!(starts, {:list, :integer}, "starts", :slice)
    Options.check!(lengths, {:list, :non_neg_integer}, "lengths", :slice)
    Options.check!(strides, {:or, [nil, {:list, :pos_integer}]}, "strides", :slice)
    Op.eval1(:slice, [t], starts: starts, lengths: lengths, strides: strides)
  end

  def slice(other, _starts, _lengths, _strides), do: Tensor.not_a_tensor(other, :slice)

  @doc "Writes `update` into `t` at `starts` (clamped so it fits)."
  @spec put_slice(tensor(), [integer()], tensor()) :: tensor()
  def put_slice(%Tensor{} = t, starts, %Tensor{} = update) do
    Options.check!(starts, {:list, :integer}, "starts", :put_slice)
    Op.eval1(:put_slice, [t, update], starts: starts)
  end

  def put_slice(t, _starts, update),
    do:
      Options.fail(
        :put_slice,
        "expected two ExBurn.Tensor, got #{Options.short(t)} and #{Options.short(update)}"
      )

  @doc "Joins tensors along `axis`."
  @spec concatenate([tensor()], non_neg_integer()) :: tensor()
  def concatenate(tensors, axis \\ 0), do: join(:concatenate, tensors, axis)

  @doc "Stacks tensors along a new `axis`."
  @spec stack([tensor()], non_neg_integer()) :: tensor()
  def stack(tensors, axis \\ 0), do: join(:stack, tensors, axis)

  defp join(op, tensors, axis) do
    Options.check!(axis, :non_neg_integer, "axis", op)
    unless is_list(tensors) and tensors != [], do: Options.fail(op, "expected a non-empty list of tensors")
    Op.eval1(op, tensors, axis: axis)
  end

  @doc "Pads with `value`: one `{low, high, interior}` per axis (negative low/high crop)."
  @spec pad(tensor(), number(), [{integer(), integer(), non_neg_integer()}]) :: tensor()
  def pad(%Tensor{} = t, value, config) do
    triple =
      {:custom,
       fn
         {lo, hi, i} = c when is_integer(lo) and is_integer(hi) and is_integer(i) and i >= 0 -> {:ok, c}
         _ -> :error
       end}

    Options.check!(config, {:list, triple}, "config (one {low, high, interior} per axis)", :pad)
    Op.eval1(:pad, [t, scalar(value, t, :pad)], config: config)
  end

  def pad(other, _value, _config), do: Tensor.not_a_tensor(other, :pad)

  if Code.ensure_loaded?(Nx) do
    @doc """
    Converts to an `Nx.Tensor` on Nx's default backend (requires Nx; `Nx.BinaryBackend` when
    Nx's application is not loaded). Nx has no zero-size dimensions: such tensors raise
    `ExBurn.Error` of kind `:shape`.
    """
    @spec to_nx(tensor()) :: Nx.Tensor.t()
    def to_nx(%Tensor{shape: shape} = t) do
      if 0 in Tuple.to_list(shape) do
        raise ExBurn.Error.new(
                kind: :shape,
                op: :to_nx,
                message: "Nx has no tensors with zero-size dimensions (shape #{Options.short(shape)})"
              )
      end

      t |> Tensor.to_binary() |> Nx.from_binary(t.type, backend: nx_backend()) |> Nx.reshape(shape)
    end

    def to_nx(other), do: Tensor.not_a_tensor(other, :to_nx)

    # Nx's default backend; Nx.BinaryBackend when Nx's application environment is not loaded
    # (Nx on the code path, its application never loaded).
    defp nx_backend do
      Nx.default_backend()
    rescue
      ArgumentError -> Nx.BinaryBackend
    end

    @doc "Converts an `Nx.Tensor` to an ExBurn tensor (requires Nx). Options: `:device`."
    @spec from_nx(Nx.Tensor.t(), keyword()) :: tensor()
    def from_nx(nx, opts \\ [])

    def from_nx(%Nx.Tensor{} = nx, opts),
      do: Tensor.from_binary(Nx.to_binary(nx), Nx.shape(nx), Nx.type(nx), opts)

    def from_nx(other, _opts),
      do: Options.fail(:from_nx, "expected an Nx.Tensor, got #{Options.short(other)}")
  end

  defp shape_list(shape, _op), do: shape |> Tensor.normalize_shape!() |> Tuple.to_list()
end
