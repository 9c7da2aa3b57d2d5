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
  alias ExBurn.{Op, Tensor, Type}

  @type tensor :: Tensor.t()
  @type tensor_or_number :: Tensor.t() | number()

  # ---- creation ----

  @doc """
  A tensor of `shape` filled with zeros.

  ## Options

    * `:device` - where to create it (default `ExBurn.default_device/0`)
  """
  @spec zeros(tuple() | list(), term(), keyword()) :: tensor()
  def zeros(shape, type \\ :f32, opts \\ []), do: full(shape, 0, type, opts)

  @doc "A tensor of `shape` filled with ones. Options as in `zeros/3`."
  @spec ones(tuple() | list(), term(), keyword()) :: tensor()
  def ones(shape, type \\ :f32, opts \\ []), do: full(shape, 1, type, opts)

  @doc "A tensor of `shape` filled with `value`. Options as in `zeros/3`."
  @spec full(tuple() | list(), number() | atom(), term(), keyword()) :: tensor()
  def full(shape, value, type \\ :f32, opts \\ []) do
    opts = Keyword.validate!(opts, [:device])
    Op.eval1(:full, [], [shape: shape_list(shape), dtype: type, value: value], opts)
  end

  @doc """
  Counts 0, 1, 2, ... over the whole tensor, or along `:axis`.

  ## Options

    * `:axis` - count along this axis only
    * `:device` - where to create it
  """
  @spec iota(tuple() | list(), term(), keyword()) :: tensor()
  def iota(shape, type \\ :s32, opts \\ []) do
    opts = Keyword.validate!(opts, [:axis, :device])

    Op.eval1(
      :iota,
      [],
      [shape: shape_list(shape), dtype: type, axis: opts[:axis]],
      Keyword.take(opts, [:device])
    )
  end

  @doc "An identity matrix of size `n` (or a batch of them for a shape of rank >= 2)."
  @spec eye(pos_integer() | tuple(), term(), keyword()) :: tensor()
  def eye(n_or_shape, type \\ :f32, opts \\ [])
  def eye(n, type, opts) when is_integer(n), do: eye({n, n}, type, opts)

  def eye(shape, type, opts) do
    opts = Keyword.validate!(opts, [:device])
    Op.eval1(:eye, [], [shape: shape_list(shape), dtype: type], opts)
  end

  @doc """
  Uniform random numbers in `[min, max)`, reproducible for a given seed on any device.

  ## Options

    * `:min`, `:max` - the range (default 0.0 and 1.0)
    * `:seed` - the generator seed (default 0)
    * `:type` - element type (default `{:f, 32}`)
    * `:device` - where to create it
  """
  @spec random_uniform(tuple() | list(), keyword()) :: tensor()
  def random_uniform(shape, opts \\ []) do
    opts = Keyword.validate!(opts, min: 0.0, max: 1.0, seed: 0, type: :f32, device: nil)

    attrs = [
      shape: shape_list(shape),
      dtype: opts[:type],
      min: opts[:min] * 1.0,
      max: opts[:max] * 1.0,
      seed: opts[:seed]
    ]

    Op.eval1(:random_uniform, [], attrs, device: opts[:device])
  end

  @doc """
  Normal random numbers, reproducible for a given seed on any device.

  ## Options

    * `:mean`, `:std` - the distribution (default 0.0 and 1.0)
    * `:seed`, `:type`, `:device` - as in `random_uniform/2`
  """
  @spec random_normal(tuple() | list(), keyword()) :: tensor()
  def random_normal(shape, opts \\ []) do
    opts = Keyword.validate!(opts, mean: 0.0, std: 1.0, seed: 0, type: :f32, device: nil)

    attrs = [
      shape: shape_list(shape),
      dtype: opts[:type],
      mean: opts[:mean] * 1.0,
      std: opts[:std] * 1.0,
      seed: opts[:seed]
    ]

    Op.eval1(:random_normal, [], attrs, device: opts[:device])
  end

  # ---- element-wise ----

  @unary ~w(neg abs sign exp expm1 log log1p sqrt rsqrt cbrt sin cos tan asin acos atan sinh cosh
            tanh asinh acosh atanh erf erfc erf_inv sigmoid relu floor ceil round is_nan is_infinity
            logical_not bitwise_not population_count count_leading_zeros)a

  for name <- @unary do
    @doc "Element-wise `#{name}` (Nx semantics; float functions of integers give `{:f, 32}`)."
    @spec unquote(name)(tensor()) :: tensor()
    def unquote(name)(%Tensor{} = t), do: Op.eval1(unquote(name), [t])
  end

  @binary ~w(add subtract multiply divide quotient remainder pow atan2 min max bitwise_and
             bitwise_or bitwise_xor left_shift right_shift equal not_equal less less_equal
             greater greater_equal logical_and logical_or logical_xor)a

  for name <- @binary do
    @doc "Element-wise `#{name}` with broadcasting and Nx type promotion."
    @spec unquote(name)(tensor_or_number(), tensor_or_number()) :: tensor()
    def unquote(name)(a, b) do
      {a, b} = operands(a, b)
      Op.eval1(unquote(name), [a, b])
    end
  end

  defp operands(%Tensor{} = a, %Tensor{} = b), do: {a, b}
  defp operands(%Tensor{} = a, b), do: {a, scalar(b, a)}
  defp operands(a, %Tensor{} = b), do: {scalar(a, b), b}

  defp operands(a, b) do
    raise ExBurn.Error.new(
            kind: :argument,
            message: "expected tensors or numbers, got #{inspect(a)} and #{inspect(b)}"
          )
  end

  # A number meets a tensor: it takes the tensor's type, or f32 when a float meets integers.
  defp scalar(n, %Tensor{type: type, device: device}) when is_number(n) or is_atom(n) do
    type = if is_float(n) and not Type.float?(type), do: {:f, 32}, else: type
    full({}, n, type, device: device)
  end

  @doc "Converts to another type (floats to integers truncate; integers wrap)."
  @spec as_type(tensor(), term()) :: tensor()
  def as_type(%Tensor{} = t, type), do: Op.eval1(:as_type, [t], dtype: type)

  @doc "Picks `on_true` where `pred` is non-zero, else `on_false` (broadcast together)."
  @spec select(tensor(), tensor_or_number(), tensor_or_number()) :: tensor()
  def select(%Tensor{} = pred, on_true, on_false) do
    {t, f} = operands(on_true, on_false)
    Op.eval1(:select, [pred, t, f])
  end

  @doc "Clamps every element into `[min, max]`."
  @spec clip(tensor(), tensor_or_number(), tensor_or_number()) :: tensor()
  def clip(%Tensor{} = t, min, max) do
    lo = if is_number(min), do: scalar(min, t), else: min
    hi = if is_number(max), do: scalar(max, t), else: max
    Op.eval1(:clip, [t, lo, hi])
  end

  # ---- reductions ----

  @reductions ~w(sum product reduce_max reduce_min all any)a

  for name <- @reductions do
    @doc """
    `#{name}` over `:axes` (all axes by default).

    ## Options

      * `:axes` - list of axes to reduce
      * `:keep_axes` - keep reduced axes with size 1 (default `false`)
    """
    @spec unquote(name)(tensor(), keyword()) :: tensor()
    def unquote(name)(%Tensor{} = t, opts \\ []) do
      opts = Keyword.validate!(opts, axes: nil, keep_axes: false)
      Op.eval1(unquote(name), [t], axes: opts[:axes], keep_axes: opts[:keep_axes])
    end
  end

  @doc "Mean over `:axes` (options as in `sum/2`); integers average in `{:f, 32}`."
  @spec mean(tensor(), keyword()) :: tensor()
  def mean(%Tensor{} = t, opts \\ []) do
    opts = Keyword.validate!(opts, axes: nil, keep_axes: false)
    axes = opts[:axes] || Enum.to_list(0..(tuple_size(t.shape) - 1)//1)
    count = Enum.reduce(axes, 1, &(elem(t.shape, &1) * &2))
    type = if Type.float?(t.type), do: t.type, else: {:f, 32}
    t |> as_type(type) |> sum(opts) |> divide(count * 1.0)
  end

  for name <- [:argmax, :argmin] do
    @doc """
    Index of the #{if name == :argmax, do: "largest", else: "smallest"} element.

    ## Options

      * `:axis` - along this axis (default: over the flattened tensor)
      * `:keep_axis` - keep the axis with size 1 (default `false`)
      * `:tie_break` - `:low` (first, default) or `:high` (last)
      * `:type` - index type (default `{:s, 64}`)
    """
    @spec unquote(name)(tensor(), keyword()) :: tensor()
    def unquote(name)(%Tensor{} = t, opts \\ []) do
      opts = Keyword.validate!(opts, axis: nil, keep_axis: false, tie_break: :low, type: {:s, 64})
      attrs = [axis: opts[:axis], keep_axis: opts[:keep_axis], tie_break: opts[:tie_break], out: opts[:type]]
      Op.eval1(unquote(name), [t], attrs)
    end
  end

  # ---- linear algebra and nn ----

  @doc """
  Matrix product: `a`'s last axis with `b`'s first (rank 2) or second-to-last axis; leading
  axes of rank >= 3 operands are batch axes and must agree.

  ## Options

    * `:precision` - `:default` or `:highest` for f32 (default `ExBurn.dot_precision/0`)
  """
  @spec matmul(tensor(), tensor(), keyword()) :: tensor()
  def matmul(%Tensor{shape: sa} = a, %Tensor{shape: sb} = b, opts \\ []) do
    {ra, rb} = {tuple_size(sa), tuple_size(sb)}
    batch = Enum.to_list(0..(Kernel.min(Kernel.max(ra - 2, 0), Kernel.max(rb - 2, 0)) - 1)//1)
    contract_b = if rb >= 2, do: rb - 2, else: 0
    dot(a, [ra - 1], batch, b, [contract_b], batch, opts)
  end

  @doc """
  General contraction of `a`'s `contract_a` axes with `b`'s `contract_b` axes, batching over
  `batch_a`/`batch_b`.

  ## Options

    * `:precision` - `:default` (TF32 tensor cores for f32 on recent NVIDIA GPUs) or
      `:highest` (full f32 accuracy); default `ExBurn.dot_precision/0`
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
  def dot(%Tensor{} = a, contract_a, batch_a, %Tensor{} = b, contract_b, batch_b, opts \\ []) do
    opts = Keyword.validate!(opts, precision: ExBurn.dot_precision())

    Op.eval1(:dot, [a, b],
      contract_a: contract_a,
      batch_a: batch_a,
      contract_b: contract_b,
      batch_b: batch_b,
      precision: opts[:precision]
    )
  end

  @doc "Softmax along `axis` (default the last)."
  @spec softmax(tensor(), integer() | nil) :: tensor()
  def softmax(%Tensor{} = t, axis \\ nil), do: Op.eval1(:softmax, [t], axis: axis || tuple_size(t.shape) - 1)

  @doc "Log-softmax along `axis` (default the last)."
  @spec log_softmax(tensor(), integer() | nil) :: tensor()
  def log_softmax(%Tensor{} = t, axis \\ nil),
    do: Op.eval1(:log_softmax, [t], axis: axis || tuple_size(t.shape) - 1)

  # ---- shape ----

  @doc "Reshapes to `shape` (same number of elements)."
  @spec reshape(tensor(), tuple() | list()) :: tensor()
  def reshape(%Tensor{} = t, shape), do: Op.eval1(:reshape, [t], shape: shape_list(shape))

  @doc "Permutes axes (reverses them by default)."
  @spec transpose(tensor(), [non_neg_integer()] | nil) :: tensor()
  def transpose(%Tensor{} = t, axes \\ nil), do: Op.eval1(:transpose, [t], axes: axes)

  @doc "Removes size-1 axes (all of them, or those in `axes`)."
  @spec squeeze(tensor(), [non_neg_integer()] | nil) :: tensor()
  def squeeze(%Tensor{} = t, axes \\ nil), do: Op.eval1(:squeeze, [t], axes: axes)

  @doc "Broadcasts to `shape` (axes aligned on the right, or mapped by `axes`)."
  @spec broadcast(tensor(), tuple() | list(), [non_neg_integer()] | nil) :: tensor()
  def broadcast(%Tensor{} = t, shape, axes \\ nil),
    do: Op.eval1(:broadcast, [t], shape: shape_list(shape), axes: axes)

  @doc "A strided slice: `starts`, `lengths` and optional `strides` per axis."
  @spec slice(tensor(), [integer()], [non_neg_integer()], [pos_integer()] | nil) :: tensor()
  def slice(%Tensor{} = t, starts, lengths, strides \\ nil),
    do: Op.eval1(:slice, [t], starts: starts, lengths: lengths, strides: strides)

  @doc "Writes `update` into `t` at `starts` (clamped so it fits)."
  @spec put_slice(tensor(), [integer()], tensor()) :: tensor()
  def put_slice(%Tensor{} = t, starts, %Tensor{} = update),
    do: Op.eval1(:put_slice, [t, update], starts: starts)

  @doc "Joins tensors along `axis`."
  @spec concatenate([tensor()], non_neg_integer()) :: tensor()
  def concatenate(tensors, axis \\ 0) when is_list(tensors), do: Op.eval1(:concatenate, tensors, axis: axis)

  @doc "Stacks tensors along a new `axis`."
  @spec stack([tensor()], non_neg_integer()) :: tensor()
  def stack(tensors, axis \\ 0) when is_list(tensors), do: Op.eval1(:stack, tensors, axis: axis)

  @doc "Pads with `value`: one `{low, high, interior}` per axis (negative low/high crop)."
  @spec pad(tensor(), number(), [{integer(), integer(), non_neg_integer()}]) :: tensor()
  def pad(%Tensor{} = t, value, config), do: Op.eval1(:pad, [t, scalar(value, t)], config: config)

  @doc "Reverses the order along `axes` (all by default)."
  @spec reverse(tensor(), [non_neg_integer()] | nil) :: tensor()
  def reverse(%Tensor{} = t, axes \\ nil), do: Op.eval1(:reverse, [t], axes: axes)

  if Code.ensure_loaded?(Nx) do
    @doc "Converts to an `Nx.Tensor` on Nx's default backend (requires Nx)."
    @spec to_nx(tensor()) :: Nx.Tensor.t()
    def to_nx(%Tensor{} = t), do: t |> Tensor.to_binary() |> Nx.from_binary(t.type) |> Nx.reshape(t.shape)

    @doc "Converts an `Nx.Tensor` to an ExBurn tensor (requires Nx). Options: `:device`."
    @spec from_nx(Nx.Tensor.t(), keyword()) :: tensor()
    def from_nx(nx, opts \\ []), do: Tensor.from_binary(Nx.to_binary(nx), Nx.shape(nx), Nx.type(nx), opts)
  end

  defp shape_list(shape) when is_tuple(shape), do: Tuple.to_list(shape)
  defp shape_list(shape) when is_list(shape), do: shape
end
