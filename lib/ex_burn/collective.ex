defmodule ExBurn.Collective do
  @moduledoc """
  Sums across devices, for data parallelism written by hand: a `defn` training step run on each
  GPU on its slice of the batch, its gradients summed across the GPUs, the same update applied
  on each.

      grads = for {device, slice} <- Enum.zip(devices, slices), do: grad_step(params[device], slice)
      summed = ExBurn.Collective.all_reduce(grads)

  Between NVIDIA GPUs the sums run on NCCL (`libnccl.so.2`, loaded at run time); otherwise, and
  when a device appears twice, they go through the first tensor's device. `ExBurn.Training.fit/3`
  does all of this itself with `devices:`.
  """

  alias ExBurn.{Native, Options, Tensor}

  @max_parts 1024
  @max_leaves 65_536

  @doc """
  Sums across devices: `parts` holds one tensor, or one container of tensors, per device (maps,
  tuples and lists of the same structure in every part); returns the same list with every
  tensor replaced by the sum of the tensors at its place in all the parts, on the tensor's own
  device.

  Tensors are `ExBurn.Tensor`s or `Nx.Tensor`s of `ExBurn.Backend` (names are kept), floats of
  one type and shape at each place. A list of one part is returned as it is.

      iex> a = ExBurn.Tensor.new([1.0, 2.0])
      iex> b = ExBurn.Tensor.new([10.0, 20.0])
      iex> [sa, sb] = ExBurn.Collective.all_reduce([%{w: a}, %{w: b}])
      iex> {ExBurn.Tensor.to_list(sa.w), ExBurn.Tensor.to_list(sb.w)}
      {[11.0, 22.0], [11.0, 22.0]}

  Anything else (another structure, a leaf that is not such a tensor, integer tensors, shapes
  or types that differ at a place) is an `ExBurn.Error` of kind `:argument`.
  """
  @spec all_reduce([term()]) :: [term()]
  def all_reduce([_ | _] = parts) do
    unless Options.proper_list?(parts) and ExBurn.Format.at_most?(parts, @max_parts),
      do: fail("expected a proper list of at most #{@max_parts} parts, got #{Options.short(parts)}")

    [first | _] = leaves = Enum.map(parts, &leaves/1)
    n = length(first)

    if n > @max_leaves,
      do: fail("a part holds at most #{@max_leaves} tensors, got #{n}")

    skeleton = skeleton(hd(parts))

    for part <- tl(parts), skeleton(part) != skeleton do
      fail("every part must have the structure of the first, got #{Options.short(part)}")
    end

    case parts do
      [_] ->
        parts

      _ ->
        sets = leaves |> Enum.map(fn ls -> Enum.map(ls, &ref/1) end) |> transpose(n)
        summed = Native.call(:tensors_all_reduce, [sets], :all_reduce)
        per_part = summed |> transpose(length(parts))

        for {part, sums} <- Enum.zip(parts, per_part) do
          {rebuilt, []} = rebuild(part, sums)
          rebuilt
        end
    end
  end

  def all_reduce(other), do: fail("expected a non-empty list of parts, got #{Options.short(other)}")

  defp fail(message), do: Options.fail(:all_reduce, message)

  # The tensors of a part in a fixed order (maps by sorted key).
  defp leaves(part), do: part |> collect([]) |> Enum.reverse()

  defp collect(%Tensor{} = t, acc), do: [t | acc]
  defp collect(%{__struct__: Nx.Tensor} = t, acc), do: [t | acc]
  defp collect(%{__struct__: s} = other, _acc) when s != Nx.Tensor, do: bad_leaf(other)

  defp collect(%{} = map, acc),
    do: map |> Enum.sort_by(&elem(&1, 0)) |> Enum.reduce(acc, fn {_, v}, acc -> collect(v, acc) end)

  defp collect(tuple, acc) when is_tuple(tuple), do: tuple |> Tuple.to_list() |> collect_list(acc)
  defp collect(list, acc) when is_list(list), do: collect_list(list, acc)
  defp collect(other, _acc), do: bad_leaf(other)

  defp collect_list(list, acc) do
    unless Options.proper_list?(list) and ExBurn.Format.at_most?(list, @max_leaves),
      do: fail("containers are proper lists of at most #{@max_leaves} elements, got #{Options.short(list)}")

    Enum.reduce(list, acc, &collect/2)
  end

  defp bad_leaf(other),
    do:
      fail(
        "expected ExBurn tensors (ExBurn.Tensor or Nx tensors of ExBurn.Backend), got #{Options.short(other)}"
      )

  # The structure of a part with its tensors left out.
  defp skeleton(%Tensor{}), do: :tensor
  defp skeleton(%{__struct__: Nx.Tensor}), do: :tensor

  defp skeleton(%{} = map),
    do: map |> Enum.sort_by(&elem(&1, 0)) |> Enum.map(fn {k, v} -> {k, skeleton(v)} end)

  defp skeleton(tuple) when is_tuple(tuple), do: {:tuple, tuple |> Tuple.to_list() |> Enum.map(&skeleton/1)}
  defp skeleton(list) when is_list(list), do: {:list, Enum.map(list, &skeleton/1)}

  defp ref(%Tensor{ref: ref}), do: ref
  defp ref(%{__struct__: Nx.Tensor, data: %{__struct__: ExBurn.Backend, tensor: %Tensor{ref: ref}}}), do: ref
  defp ref(other), do: bad_leaf(other)

  defp transpose(rows, width), do: rows |> Enum.zip_with(& &1) |> pad(width)
  defp pad([], width), do: List.duplicate([], width)
  defp pad(cols, _width), do: cols

  # The part with its tensors replaced, in the order of `leaves/1`.
  defp rebuild(%Tensor{}, [t | rest]), do: {Tensor.wrap(t), rest}

  defp rebuild(%{__struct__: Nx.Tensor, data: data} = nx, [t | rest]),
    do: {%{nx | data: %{data | tensor: Tensor.wrap(t)}}, rest}

  defp rebuild(%{} = map, sums) do
    {pairs, rest} =
      map
      |> Enum.sort_by(&elem(&1, 0))
      |> Enum.map_reduce(sums, fn {k, v}, acc ->
        {v, acc} = rebuild(v, acc)
        {{k, v}, acc}
      end)

    {Map.new(pairs), rest}
  end

  defp rebuild(tuple, sums) when is_tuple(tuple) do
    {items, rest} = tuple |> Tuple.to_list() |> Enum.map_reduce(sums, &rebuild/2)
    {List.to_tuple(items), rest}
  end

  defp rebuild(list, sums) when is_list(list), do: Enum.map_reduce(list, sums, &rebuild/2)
end
