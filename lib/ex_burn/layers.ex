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

  def rank(other),
    do: ExBurn.Options.fail(:rank, "expected an ExBurn.Layers model, got #{ExBurn.Options.short(other)}")

  defp out_rank({:input, %{shape: shape}}, []), do: length(shape) + 1
  defp out_rank(:flatten, _), do: 2
  defp out_rank({:global_avg_pool, %{keep_axes: false}}, _), do: 2
  defp out_rank({:embedding, _}, [x]), do: rank(x) + 1
  defp out_rank(_op, [x | _]), do: rank(x)

  alias ExBurn.Options

  # A layer node given to a builder, or an error naming the builder.
  defp layer!(%__MODULE__{} = x, _op), do: x
  defp layer!(other, op), do: Options.fail(op, "expected an ExBurn.Layers model, got #{Options.short(other)}")

  @doc false
  def name_opt(n) when is_binary(n), do: if(String.valid?(n) and n != "", do: {:ok, n}, else: :error)
  def name_opt(n) when is_atom(n) and n not in [nil, true, false], do: {:ok, Atom.to_string(n)}
  def name_opt(_), do: :error

  @doc false
  # An integer for every spatial axis, or one per axis as a tuple or list.
  def sizes_opt(n) when is_integer(n) and n > 0, do: {:ok, n}

  def sizes_opt(t) when is_tuple(t) or is_list(t) do
    l = if is_tuple(t), do: Tuple.to_list(t), else: t

    if l != [] and Options.proper_list?(l) and Enum.all?(l, &(is_integer(&1) and &1 > 0)),
      do: {:ok, t},
      else: :error
  end

  def sizes_opt(_), do: :error

  @name [
    name: [
      type: {:or, [nil, {:custom, &__MODULE__.name_opt/1, "a non-empty string"}]},
      default: nil,
      doc: "layer name"
    ]
  ]
  @activation [
    activation: [
      type: {:or, [nil, {:in, @activations}]},
      default: nil,
      doc: "an activation applied after (see `activations/0`)"
    ]
  ]
  @sizes {:custom, &__MODULE__.sizes_opt/1, "a positive integer or a tuple of them"}
  @channels [channels: [type: {:in, [:last, :first]}, default: :last, doc: "`:last` or `:first`"]]
  @padding [padding: [type: {:in, [:valid, :same]}, default: :valid, doc: "`:valid` or `:same`"]]

  # An activation given as a layer option becomes its own layer, named after the layer when
  # that has a name (`hidden` -> `hidden_relu`), else generated like any other.
  defp with_activation(layer, nil), do: layer

  defp with_activation(%__MODULE__{id: id, nodes: nodes} = layer, act) do
    case nodes[id].name do
      nil -> activation(layer, act)
      name -> activation(layer, act, name: "#{name}_#{act}")
    end
  end

  @input_opts [
    shape: [
      type: {:custom, &__MODULE__.input_shape/1, "a tuple {nil, d1, d2, ...} of positive dimensions"},
      required: true,
      doc: "the batch axis as `nil` first, e.g. `{nil, 784}`"
    ],
    type: [
      type: :type,
      default: {:f, 32},
      doc: "element type fed to the input (integer types for embeddings)"
    ]
  ]

  @doc false
  def input_shape(shape) when is_tuple(shape) and tuple_size(shape) > 1 do
    case Tuple.to_list(shape) do
      [nil | rest] -> if Enum.all?(rest, &(is_integer(&1) and &1 > 0)), do: {:ok, rest}, else: :error
      _ -> :error
    end
  end

  def input_shape(_), do: :error

  @doc """
  A model input.

  ## Options

  #{Options.docs(@input_opts)}
  """
  @spec input(String.t(), keyword()) :: t()
  def input(name, opts) do
    name = Options.check!(name, {:custom, &name_opt/1}, "name", :input)
    opts = Options.validate!(opts, @input_opts, :input)
    node({:input, %{shape: opts[:shape], dtype: opts[:type]}}, [], name, :input)
  end

  @dense_opts @name ++ @activation ++ [use_bias: [type: :boolean, default: true, doc: "add a bias"]]

  @doc """
  A fully connected layer on the last axis (`kernel` `[in, units]`, `bias` `[units]`).

  ## Options

  #{Options.docs(@dense_opts)}
  """
  @spec dense(t(), pos_integer(), keyword()) :: t()
  def dense(x, units, opts \\ []) do
    x = layer!(x, :dense)
    units = Options.check!(units, :pos_integer, "units", :dense)
    opts = Options.validate!(opts, @dense_opts, :dense)

    {:dense, %{units: units, use_bias: opts[:use_bias]}}
    |> node([x], opts[:name], :dense)
    |> with_activation(opts[:activation])
  end

  @conv_opts [
               kernel_size: [type: @sizes, default: {3, 3}, doc: "integer (every spatial axis) or tuple"],
               strides: [type: {:or, [nil, @sizes]}, default: nil, doc: "integer or tuple (default 1)"]
             ] ++
               @padding ++
               [
                 kernel_dilation: [
                   type: {:or, [nil, @sizes]},
                   default: nil,
                   doc: "integer or tuple (default 1)"
                 ]
               ] ++
               @channels ++ @dense_opts

  @doc """
  A 1d or 2d convolution (by the length of `:kernel_size`), Burn kernel layout
  `[filters, in_channels, k...]`.

  ## Options

  #{Options.docs(@conv_opts)}
  """
  @spec conv(t(), pos_integer(), keyword()) :: t()
  def conv(x, filters, opts \\ []) do
    x = layer!(x, :conv)
    filters = Options.check!(filters, :pos_integer, "filters", :conv)
    opts = Options.validate!(opts, @conv_opts, :conv)
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

  @pool_opts [
               kernel_size: [type: @sizes, default: 2, doc: "integer (every spatial axis) or tuple"],
               strides: [type: {:or, [nil, @sizes]}, default: nil, doc: "default: the kernel size"]
             ] ++ @padding ++ @channels ++ @name

  for {fun, op} <- [max_pool: :max_pool, avg_pool: :avg_pool] do
    @doc """
    #{if op == :max_pool, do: "Max", else: "Average"} pooling (1d or 2d).

    ## Options

    #{Options.docs(@pool_opts)}
    """
    @spec unquote(fun)(t(), keyword()) :: t()
    def unquote(fun)(x, opts \\ []) do
      x = layer!(x, unquote(fun))
      opts = Options.validate!(opts, @pool_opts, unquote(fun))
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

  @gap_opts @channels ++
              [keep_axes: [type: :boolean, default: false, doc: "keep the spatial axes with size 1"]] ++ @name

  @doc """
  Mean over all spatial axes.

  ## Options

  #{Options.docs(@gap_opts)}
  """
  @spec global_avg_pool(t(), keyword()) :: t()
  def global_avg_pool(x, opts \\ []) do
    x = layer!(x, :global_avg_pool)
    opts = Options.validate!(opts, @gap_opts, :global_avg_pool)

    node(
      {:global_avg_pool, %{channels: opts[:channels], keep_axes: opts[:keep_axes]}},
      [x],
      opts[:name],
      :global_avg_pool
    )
  end

  @doc """
  Flattens every axis after the batch axis.

  ## Options

  #{Options.docs(@name)}
  """
  @spec flatten(t(), keyword()) :: t()
  def flatten(x, opts \\ []) do
    x = layer!(x, :flatten)
    opts = Options.validate!(opts, @name, :flatten)
    node(:flatten, [x], opts[:name], :flatten)
  end

  @dropout_opts [
                  rate: [
                    type: {:custom, &ExBurn.Model.fraction/1},
                    default: 0.5,
                    doc: "drop probability in [0, 1)"
                  ]
                ] ++
                  @name

  @doc """
  Randomly zeroes activations during training.

  ## Options

  #{Options.docs(@dropout_opts)}
  """
  @spec dropout(t(), keyword()) :: t()
  def dropout(x, opts \\ []) do
    x = layer!(x, :dropout)
    opts = Options.validate!(opts, @dropout_opts, :dropout)
    node({:dropout, %{rate: opts[:rate] * 1.0}}, [x], opts[:name], :dropout)
  end

  @epsilon [epsilon: [type: {:number, 1.0e-300, 1}, default: 1.0e-5, doc: "added to the variance, in (0, 1]"]]
  @bn_opts @epsilon ++
             [
               momentum: [type: {:number, 0, 1}, default: 0.1, doc: "running-statistics momentum in [0, 1]"],
               channel_index: [type: :integer, default: -1, doc: "the channel axis (negative: from the end)"]
             ] ++ @name

  @doc """
  Batch normalisation (`gamma`, `beta`, running `mean` and `var`).

  ## Options

  #{Options.docs(@bn_opts)}
  """
  @spec batch_norm(t(), keyword()) :: t()
  def batch_norm(x, opts \\ []) do
    x = layer!(x, :batch_norm)
    opts = Options.validate!(opts, @bn_opts, :batch_norm)

    attrs = %{
      epsilon: opts[:epsilon] * 1.0,
      momentum: opts[:momentum] * 1.0,
      channel_index: opts[:channel_index]
    }

    node({:batch_norm, attrs}, [x], opts[:name], :batch_norm)
  end

  @ln_opts @epsilon ++ @name

  @doc """
  Layer normalisation over the last axis.

  ## Options

  #{Options.docs(@ln_opts)}
  """
  @spec layer_norm(t(), keyword()) :: t()
  def layer_norm(x, opts \\ []) do
    x = layer!(x, :layer_norm)
    opts = Options.validate!(opts, @ln_opts, :layer_norm)
    node({:layer_norm, %{epsilon: opts[:epsilon] * 1.0}}, [x], opts[:name], :layer_norm)
  end

  @doc """
  Integer ids `[batch, seq]` to vectors `[batch, seq, embedding_size]`.

  ## Options

  #{Options.docs(@name)}
  """
  @spec embedding(t(), pos_integer(), pos_integer(), keyword()) :: t()
  def embedding(x, vocab_size, embedding_size, opts \\ []) do
    x = layer!(x, :embedding)
    vocab_size = Options.check!(vocab_size, :pos_integer, "vocab_size", :embedding)
    embedding_size = Options.check!(embedding_size, :pos_integer, "embedding_size", :embedding)
    opts = Options.validate!(opts, @name, :embedding)

    node(
      {:embedding, %{vocab_size: vocab_size, embedding_size: embedding_size}},
      [x],
      opts[:name],
      :embedding
    )
  end

  @act_opts [
              alpha: [
                type: {:or, [nil, {:number, -1.0e6, 1.0e6}]},
                default: nil,
                doc: "slope for `:leaky_relu` (default 0.01) and scale for `:elu` (default 1.0)"
              ]
            ] ++ @name

  @doc """
  An element-wise activation (see `activations/0`).

  ## Options

  #{Options.docs(@act_opts)}
  """
  @spec activation(t(), atom(), keyword()) :: t()
  def activation(x, act, opts \\ []) do
    x = layer!(x, :activation)
    act = Options.check!(act, {:in, @activations}, "activation", :activation)
    opts = Options.validate!(opts, @act_opts, :activation)
    alpha = opts[:alpha] || if(act == :elu, do: 1.0, else: 0.01)
    node({:activation, %{activation: act, alpha: alpha * 1.0}}, [x], opts[:name], act)
  end

  for act <- @activations -- [:linear] do
    @doc "Shorthand for `activation(x, #{inspect(act)}, opts)`."
    @spec unquote(act)(t(), keyword()) :: t()
    def unquote(act)(x, opts \\ []), do: activation(x, unquote(act), opts)
  end

  @doc """
  Element-wise sum of two (or more) layers of equal shape.

  ## Options

  #{Options.docs(@name)}
  """
  @spec add(t() | [t()], t() | keyword(), keyword()) :: t()
  def add(a, b, opts \\ [])
  def add(%__MODULE__{} = a, %__MODULE__{} = b, opts), do: add([a, b], opts)
  def add(layers, opts, []) when is_list(layers), do: join(:add, layers, opts, @name, & &1)

  def add(a, b, _opts),
    do: Options.fail(:add, "expected layers, got #{Options.short(a)} and #{Options.short(b)}")

  @concat_opts [axis: [type: :integer, default: -1, doc: "the axis (negative: from the end)"]] ++ @name

  @doc """
  Concatenates layers along `:axis`.

  ## Options

  #{Options.docs(@concat_opts)}
  """
  @spec concatenate(t() | [t()], t() | keyword(), keyword()) :: t()
  def concatenate(a, b, opts \\ [])
  def concatenate(%__MODULE__{} = a, %__MODULE__{} = b, opts), do: concatenate([a, b], opts)

  def concatenate(layers, opts, []) when is_list(layers),
    do: join(:concatenate, layers, opts, @concat_opts, &{:concatenate, %{axis: &1[:axis]}})

  def concatenate(a, b, _opts),
    do: Options.fail(:concatenate, "expected layers, got #{Options.short(a)} and #{Options.short(b)}")

  defp join(kind, layers, opts, schema, op) do
    opts = Options.validate!(opts, schema, kind)
    if layers == [], do: Options.fail(kind, "expected at least one layer")
    layers = Enum.map(layers, &layer!(&1, kind))
    node(if(kind == :add, do: :add, else: op.(opts)), layers, opts[:name], kind)
  end

  @doc """
  The engine's spec of the model: layers in graph order with generated names, inputs as
  indices, and the output index.
  """
  @spec to_spec(t()) :: map()
  def to_spec(%__MODULE__{id: out, nodes: nodes}) when is_map_key(nodes, out) do
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
              message: "duplicate layer names #{Options.short(Enum.uniq(dup))}"
            )
    end

    %{layers: layers, output: Map.fetch!(index, out)}
  end

  def to_spec(other),
    do: Options.fail(:to_spec, "expected an ExBurn.Layers model, got #{Options.short(other)}")

  # An integer window size applies to every spatial axis (Axon's convention).
  defp window(n, x) when is_integer(n), do: List.duplicate(n, max(rank(x) - 2, 1))
  defp window(t, _x), do: tuple_list(t)

  defp tuple_list(n) when is_integer(n), do: [n]
  defp tuple_list(t) when is_tuple(t), do: Tuple.to_list(t)
  defp tuple_list(l) when is_list(l), do: l

  defp expand(n, count) when is_integer(n), do: List.duplicate(n, count)
  defp expand(t, _count), do: tuple_list(t)
end
