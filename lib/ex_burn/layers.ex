defmodule ExBurn.Layers do
  @moduledoc """
  Builds models without Axon, with Axon's names and options.

      model =
        ExBurn.Layers.input("pixels", shape: {nil, 784})
        |> ExBurn.Layers.dense(128, activation: :relu, name: "hidden")
        |> ExBurn.Layers.dropout(rate: 0.2)
        |> ExBurn.Layers.dense(10, activation: :softmax)

  A model is the node of its output layer; the graph travels with it, so branches made from
  one node can be joined again with `add/2` or `concatenate/2`. Layer names (given with
  `:name` or generated as `dense_0`, `conv_1`, ... in graph order) address parameters
  (`"hidden.kernel"`, `"hidden.bias"`).

  Shapes exclude nothing: like Axon, `input/2` takes the batch axis as `nil`. Convolutions
  and pools take channels last by default (`channels: :first` for NCHW).
  """

  defstruct [:id, nodes: %{}]

  @type t :: %__MODULE__{id: pos_integer(), nodes: %{pos_integer() => map()}}

  @activations [:relu, :sigmoid, :tanh, :softmax, :log_softmax, :gelu, :silu, :leaky_relu, :elu, :linear]

  @doc "The activations the builder knows."
  @spec activations() :: [atom()]
  def activations, do: @activations

  defp node(op, inputs, name, kind) do
    id = System.unique_integer([:positive, :monotonic])
    nodes = Enum.reduce(inputs, %{}, fn %__MODULE__{nodes: n}, acc -> Map.merge(acc, n) end)

    layer = %{
      id: id,
      op: op,
      kind: kind,
      name: name,
      inputs: Enum.map(inputs, & &1.id),
      rank: out_rank(op, inputs)
    }

    %__MODULE__{id: id, nodes: Map.put(nodes, id, layer)}
  end

  @doc "The rank (with the batch axis) of a layer's output."
  @spec rank(t()) :: pos_integer()
  def rank(%__MODULE__{id: id, nodes: nodes}), do: nodes[id].rank

  defp out_rank({:input, %{shape: shape}}, []), do: length(shape) + 1
  defp out_rank(:flatten, _), do: 2
  defp out_rank({:global_avg_pool, %{keep_axes: false}}, _), do: 2
  defp out_rank({:embedding, _}, [x]), do: rank(x) + 1
  defp out_rank(_op, [x | _]), do: rank(x)

  defp opts!(opts, allowed), do: Keyword.validate!(opts, allowed)

  # An activation given as a layer option becomes its own layer, named after the layer when
  # that has a name (`hidden` -> `hidden_relu`), else generated like any other.
  defp with_activation(layer, nil), do: layer

  defp with_activation(%__MODULE__{id: id, nodes: nodes} = layer, act) do
    case nodes[id].name do
      nil -> activation(layer, act)
      name -> activation(layer, act, name: "#{name}_#{act}")
    end
  end

  @doc """
  A model input.

  ## Options

    * `:shape` - required; the batch axis as `nil` first, e.g. `{nil, 784}`
    * `:type` - element type fed to the input (`{:f, 32}`; integer types for embeddings)
  """
  @spec input(String.t(), keyword()) :: t()
  def input(name, opts) do
    opts = opts!(opts, [:shape, type: {:f, 32}])
    shape = opts[:shape] |> Tuple.to_list()

    case shape do
      [nil | rest] ->
        node({:input, %{shape: rest, dtype: ExBurn.Type.normalize!(opts[:type])}}, [], name, :input)

      _ ->
        raise ArgumentError, "input shape must start with nil (the batch axis), got #{inspect(opts[:shape])}"
    end
  end

  @doc """
  A fully connected layer on the last axis (`kernel` `[in, units]`, `bias` `[units]`).

  ## Options

    * `:activation` - an activation applied after (see `activations/0`)
    * `:use_bias` - default `true`
    * `:name` - layer name
  """
  @spec dense(t(), pos_integer(), keyword()) :: t()
  def dense(x, units, opts \\ []) when is_integer(units) and units > 0 do
    opts = opts!(opts, [:name, :activation, use_bias: true])

    {:dense, %{units: units, use_bias: opts[:use_bias]}}
    |> node([x], opts[:name], :dense)
    |> with_activation(opts[:activation])
  end

  @doc """
  A 1d or 2d convolution (by the length of `:kernel_size`), Burn kernel layout
  `[filters, in_channels, k...]`.

  ## Options

    * `:kernel_size` - integer (every spatial axis) or tuple (default 3)
    * `:strides` - integer or tuple (default 1)
    * `:padding` - `:valid` (default) or `:same`
    * `:kernel_dilation` - integer or tuple (default 1)
    * `:channels` - `:last` (default) or `:first`
    * `:activation`, `:use_bias`, `:name` - as in `dense/3`
  """
  @spec conv(t(), pos_integer(), keyword()) :: t()
  def conv(x, filters, opts \\ []) do
    opts =
      opts!(opts, [
        :name,
        :activation,
        :strides,
        :kernel_dilation,
        kernel_size: {3, 3},
        padding: :valid,
        channels: :last,
        use_bias: true
      ])

    ks = window(opts[:kernel_size], x)
    n = length(ks)

    attrs = %{
      filters: filters,
      kernel_size: ks,
      strides: opts[:strides] && expand(opts[:strides], n),
      padding: opts[:padding],
      dilation: opts[:kernel_dilation] && expand(opts[:kernel_dilation], n),
      channels: opts[:channels],
      use_bias: opts[:use_bias]
    }

    {:conv, attrs} |> node([x], opts[:name], :conv) |> with_activation(opts[:activation])
  end

  for {fun, op} <- [max_pool: :max_pool, avg_pool: :avg_pool] do
    @doc """
    #{if op == :max_pool, do: "Max", else: "Average"} pooling (1d or 2d).

    ## Options

      * `:kernel_size` - integer (every spatial axis) or tuple (default 2)
      * `:strides` - default: the kernel size
      * `:padding` - `:valid` (default) or `:same`
      * `:channels` - `:last` (default) or `:first`
      * `:name` - layer name
    """
    @spec unquote(fun)(t(), keyword()) :: t()
    def unquote(fun)(x, opts \\ []) do
      opts = opts!(opts, [:name, :strides, kernel_size: 2, padding: :valid, channels: :last])
      ks = window(opts[:kernel_size], x)

      attrs = %{
        kernel_size: ks,
        strides: opts[:strides] && expand(opts[:strides], length(ks)),
        padding: opts[:padding],
        channels: opts[:channels]
      }

      node({unquote(op), attrs}, [x], opts[:name], unquote(op))
    end
  end

  @doc """
  Mean over all spatial axes.

  ## Options

    * `:channels` - `:last` (default) or `:first`
    * `:keep_axes` - keep the spatial axes with size 1 (default `false`)
    * `:name` - layer name
  """
  @spec global_avg_pool(t(), keyword()) :: t()
  def global_avg_pool(x, opts \\ []) do
    opts = opts!(opts, [:name, channels: :last, keep_axes: false])

    node(
      {:global_avg_pool, %{channels: opts[:channels], keep_axes: opts[:keep_axes]}},
      [x],
      opts[:name],
      :global_avg_pool
    )
  end

  @doc "Flattens every axis after the batch axis. Options: `:name`."
  @spec flatten(t(), keyword()) :: t()
  def flatten(x, opts \\ []) do
    opts = opts!(opts, [:name])
    node(:flatten, [x], opts[:name], :flatten)
  end

  @doc "Randomly zeroes activations during training. Options: `:rate` (default 0.5), `:name`."
  @spec dropout(t(), keyword()) :: t()
  def dropout(x, opts \\ []) do
    opts = opts!(opts, [:name, rate: 0.5])
    node({:dropout, %{rate: opts[:rate] * 1.0}}, [x], opts[:name], :dropout)
  end

  @doc """
  Batch normalisation (`gamma`, `beta`, running `mean` and `var`).

  ## Options

    * `:epsilon` - default `1.0e-5`
    * `:momentum` - running-statistics momentum, default `0.1`
    * `:channel_index` - default `-1` (last)
    * `:name` - layer name
  """
  @spec batch_norm(t(), keyword()) :: t()
  def batch_norm(x, opts \\ []) do
    opts = opts!(opts, [:name, epsilon: 1.0e-5, momentum: 0.1, channel_index: -1])

    attrs = %{
      epsilon: opts[:epsilon] * 1.0,
      momentum: opts[:momentum] * 1.0,
      channel_index: opts[:channel_index]
    }

    node({:batch_norm, attrs}, [x], opts[:name], :batch_norm)
  end

  @doc "Layer normalisation over the last axis. Options: `:epsilon` (default `1.0e-5`), `:name`."
  @spec layer_norm(t(), keyword()) :: t()
  def layer_norm(x, opts \\ []) do
    opts = opts!(opts, [:name, epsilon: 1.0e-5])
    node({:layer_norm, %{epsilon: opts[:epsilon] * 1.0}}, [x], opts[:name], :layer_norm)
  end

  @doc "Integer ids `[batch, seq]` to vectors `[batch, seq, embedding_size]`. Options: `:name`."
  @spec embedding(t(), pos_integer(), pos_integer(), keyword()) :: t()
  def embedding(x, vocab_size, embedding_size, opts \\ []) do
    opts = opts!(opts, [:name])

    node(
      {:embedding, %{vocab_size: vocab_size, embedding_size: embedding_size}},
      [x],
      opts[:name],
      :embedding
    )
  end

  @doc """
  An element-wise activation (see `activations/0`).

  ## Options

    * `:alpha` - slope for `:leaky_relu` (default 0.01) and scale for `:elu` (default 1.0)
    * `:name` - layer name
  """
  @spec activation(t(), atom(), keyword()) :: t()
  def activation(x, act, opts \\ []) when act in @activations do
    opts = opts!(opts, [:name, :alpha])
    alpha = opts[:alpha] || if(act == :elu, do: 1.0, else: 0.01)
    node({:activation, %{activation: act, alpha: alpha * 1.0}}, [x], opts[:name], act)
  end

  for act <- @activations -- [:linear] do
    @doc "Shorthand for `activation(x, #{inspect(act)}, opts)`."
    @spec unquote(act)(t(), keyword()) :: t()
    def unquote(act)(x, opts \\ []), do: activation(x, unquote(act), opts)
  end

  @doc "Element-wise sum of two (or more) layers of equal shape. Options: `:name`."
  @spec add(t() | [t()], t() | keyword(), keyword()) :: t()
  def add(a, b, opts \\ [])
  def add(%__MODULE__{} = a, %__MODULE__{} = b, opts), do: add([a, b], opts)

  def add(layers, opts, []) when is_list(layers) do
    opts = opts!(opts, [:name])
    node(:add, layers, opts[:name], :add)
  end

  @doc "Concatenates layers along `:axis` (default -1). Options: `:axis`, `:name`."
  @spec concatenate(t() | [t()], t() | keyword(), keyword()) :: t()
  def concatenate(a, b, opts \\ [])
  def concatenate(%__MODULE__{} = a, %__MODULE__{} = b, opts), do: concatenate([a, b], opts)

  def concatenate(layers, opts, []) when is_list(layers) do
    opts = opts!(opts, [:name, axis: -1])
    node({:concatenate, %{axis: opts[:axis]}}, layers, opts[:name], :concatenate)
  end

  @doc """
  The engine's spec of the model: layers in graph order with generated names, inputs as
  indices, and the output index.
  """
  @spec to_spec(t()) :: map()
  def to_spec(%__MODULE__{id: out, nodes: nodes}) do
    order = nodes |> Map.keys() |> Enum.sort()
    index = order |> Enum.with_index() |> Map.new()

    {layers, _counts} =
      Enum.map_reduce(order, %{}, fn id, counts ->
        %{op: op, kind: kind, name: name, inputs: ins} = nodes[id]
        n = Map.get(counts, kind, 0)

        layer = %{
          name: name || "#{kind}_#{n}",
          op: op,
          inputs: Enum.map(ins, &Map.fetch!(index, &1))
        }

        {layer, Map.put(counts, kind, n + 1)}
      end)

    names = Enum.map(layers, & &1.name)

    if length(Enum.uniq(names)) != length(names) do
      dup = names -- Enum.uniq(names)

      raise ExBurn.Error.new(
              kind: :argument,
              op: :compile,
              message: "duplicate layer names #{inspect(Enum.uniq(dup))}"
            )
    end

    %{layers: layers, output: Map.fetch!(index, out)}
  end

  # An integer window size applies to every spatial axis (Axon's convention).
  defp window(n, x) when is_integer(n), do: List.duplicate(n, max(rank(x) - 2, 1))
  defp window(t, _x), do: tuple_list(t)

  defp tuple_list(n) when is_integer(n), do: [n]
  defp tuple_list(t) when is_tuple(t), do: Tuple.to_list(t)
  defp tuple_list(l) when is_list(l), do: l

  defp expand(n, count) when is_integer(n), do: List.duplicate(n, count)
  defp expand(t, _count), do: tuple_list(t)
end
