if Code.ensure_loaded?(Axon) do
  defmodule ExBurn.Axon do
    @moduledoc """
    Converts Axon models into `ExBurn.Layers` models, so `ExBurn.Model.compile/2` accepts
    them (compiled only when Axon is loaded).

    Supported Axon layers: `input`, `dense`, `conv` (1d/2d, no input dilation or feature
    groups), `max_pool`, `avg_pool`, `global_avg_pool`, `flatten`, `dropout`, `batch_norm`,
    `layer_norm`, `embedding`, the activations of `ExBurn.Layers.activations/0`, `add` and
    `concatenate`. Anything else raises `ExBurn.Error` (kind `:unsupported`) naming the layer.
    Layer names are Axon's (given or generated the way Axon generates them).
    """

    alias ExBurn.Layers

    @doc "The `ExBurn.Layers` model equivalent to an Axon model."
    @spec to_layers(Axon.t()) :: Layers.t()
    def to_layers(%Axon{output: output, nodes: nodes}) do
      {built, _counts} =
        nodes
        |> Map.keys()
        |> Enum.sort()
        |> Enum.reduce({%{}, %{}}, fn id, {built, counts} ->
          node = nodes[id]
          name = node_name(node, counts)
          parents = Enum.map(node.parent, &Map.fetch!(built, &1))
          {Map.put(built, id, convert(node, name, parents)), Map.update(counts, node.op_name, 1, &(&1 + 1))}
        end)

      Map.fetch!(built, output)
    end

    def to_layers(other),
      do: ExBurn.Options.fail(:to_layers, "expected an Axon model, got #{ExBurn.Options.short(other)}")

    defp node_name(%{name: name_fn, op_name: op}, counts) when is_function(name_fn, 2),
      do: name_fn.(op, counts)

    defp node_name(%{name: name}, _counts) when is_binary(name), do: name

    defp unsupported(name, what) do
      raise ExBurn.Error.new(
              kind: :unsupported,
              op: :compile,
              message: "Axon layer #{inspect(name)}: #{what} cannot be converted"
            )
    end

    defp rank(layer), do: Layers.rank(layer)

    defp convert(%{op_name: :input, opts: opts}, name, []) do
      shape = opts[:shape] || unsupported(name, "an input without a shape")
      Layers.input(name, shape: shape)
    end

    defp convert(%{op_name: :dense, meta: meta}, name, [x]) do
      Layers.dense(x, meta.units, name: name, use_bias: Map.get(meta, :use_bias, true))
    end

    defp convert(%{op_name: :conv, opts: opts, parameters: params} = node, name, [x]) do
      if opts[:input_dilation] not in [1, nil] or opts[:feature_group_size] not in [1, nil] do
        unsupported(name, "a conv with input dilation or feature groups")
      end

      r = rank(x)
      channels = opts[:channels] || :last
      kernel = Enum.find(params, &(&1.name == "kernel")) || unsupported(name, "a conv without a kernel")

      dummy =
        if channels == :last,
          do: List.to_tuple([1 | List.duplicate(16, r - 2)] ++ [1]),
          else: List.to_tuple([1, 1 | List.duplicate(16, r - 2)])

      shape = kernel_shape(kernel, dummy) |> Tuple.to_list()

      {ks, units} =
        if channels == :last,
          do: {Enum.drop(shape, -2), List.last(shape)},
          else: {Enum.drop(shape, 2), hd(shape)}

      padding = opts[:padding]
      padding in [:valid, :same] || unsupported(name, "explicit conv padding #{inspect(padding)}")

      Layers.conv(x, units,
        name: name,
        kernel_size: List.to_tuple(ks),
        strides: opts[:strides] || 1,
        padding: padding,
        kernel_dilation: opts[:kernel_dilation] || 1,
        channels: channels,
        use_bias: length(node.parameters) > 1
      )
    end

    defp convert(%{op_name: pool, opts: opts}, name, [x]) when pool in [:max_pool, :avg_pool] do
      if opts[:window_dilations] not in [1, nil], do: unsupported(name, "a dilated pool")
      r = rank(x)
      ks = opts[:kernel_size]
      ks = if is_integer(ks), do: List.to_tuple(List.duplicate(ks, r - 2)), else: ks
      padding = opts[:padding]
      padding in [:valid, :same] || unsupported(name, "explicit pool padding #{inspect(padding)}")

      args = [
        name: name,
        kernel_size: ks,
        strides: opts[:strides],
        padding: padding,
        channels: opts[:channels] || :last
      ]

      apply(Layers, pool, [x, args])
    end

    defp convert(%{op_name: :global_avg_pool, opts: opts}, name, [x]) do
      keep = opts[:keep_axes] || false

      Layers.global_avg_pool(x, name: name, channels: opts[:channels] || :last, keep_axes: keep)
    end

    defp convert(%{op_name: :flatten}, name, [x]), do: Layers.flatten(x, name: name)

    defp convert(%{op_name: :dropout, opts: opts}, name, [x]),
      do: Layers.dropout(x, name: name, rate: opts[:rate])

    defp convert(%{op_name: :batch_norm, opts: opts}, name, [x]) do
      Layers.batch_norm(x,
        name: name,
        epsilon: opts[:epsilon] || 1.0e-5,
        momentum: opts[:momentum] || 0.1,
        channel_index: opts[:channel_index] || -1
      )
    end

    defp convert(%{op_name: :layer_norm, opts: opts}, name, [x]) do
      if opts[:channel_index] not in [-1, nil, rank(x) - 1],
        do: unsupported(name, "a layer norm not on the last axis")

      Layers.layer_norm(x, name: name, epsilon: opts[:epsilon] || 1.0e-5)
    end

    defp convert(%{op_name: :embedding, parameters: [kernel | _]}, name, [x]) do
      [vocab, dim] = kernel |> kernel_shape({1, 1}) |> Tuple.to_list()
      Layers.embedding(x, vocab, dim, name: name)
    end

    defp convert(%{op_name: :add}, name, [_ | _] = xs),
      do: Layers.add(xs, name: name)

    defp convert(%{op_name: :concatenate, opts: opts}, name, [_ | _] = xs) do
      Layers.concatenate(xs, name: name, axis: opts[:axis] || -1)
    end

    defp convert(%{op_name: act, opts: opts}, name, [x]) do
      if act in Layers.activations() do
        args = if opts[:alpha], do: [name: name, alpha: opts[:alpha]], else: [name: name]
        Layers.activation(x, act, args)
      else
        unsupported(name, "layer type #{inspect(act)}")
      end
    end

    defp convert(%{op_name: op}, name, _), do: unsupported(name, "layer type #{inspect(op)}")

    defp kernel_shape(%{shape: fun}, input) when is_function(fun, 1), do: fun.(input)
    defp kernel_shape(%{template: fun}, input) when is_function(fun, 1), do: Nx.shape(fun.(input))
    defp kernel_shape(%{shape: shape}, _input) when is_tuple(shape), do: shape
  end
end
