defmodule ExBurn.Format do
  @moduledoc false
  # Bounded rendering of user terms for error messages. `inspect/2` bounds the items of each
  # collection, not the whole: a bignum prints every digit (quadratic, on a normal scheduler),
  # a term of shared subterms prints exponentially many nodes, a map lists all its keys first.
  # Here one budget of nodes covers the whole term, collections state their size before their
  # first elements (counted without walking a list past a cap), integers beyond 64 bits print
  # their bit size, binaries their size and first bytes; structs show their fields, never call
  # an Inspect implementation (ExBurn.Tensor's reads the device).

  import Bitwise
  import Kernel, except: [bit_size: 1]

  @nodes 16
  @depth 4
  @bytes 48
  # A list is walked this far to tell its length (a few microseconds).
  @count_cap 10_000
  @max_int (1 <<< 64) - 1
  @min_int 1 - (1 <<< 64)

  @doc false
  # The term as a short string (at most a few hundred characters whatever the term).
  def term(value) do
    {doc, _budget} = render(value, @nodes, 0)
    IO.iodata_to_binary(doc)
  end

  @doc false
  # The bit size of an integer, for integers too large to print (constant time: the external
  # size of a bignum is its byte count plus a fixed header).
  def bit_size(0), do: 0

  def bit_size(i) when is_integer(i) and i >= @min_int and i <= @max_int,
    do: length(Integer.digits(abs(i), 2))

  def bit_size(i) when is_integer(i) do
    size = :erlang.external_size(i)
    bytes = size - if(size < 260, do: 4, else: 7)
    8 * (bytes - 1) + bit_size(abs(i) >>> (8 * (bytes - 1)))
  end

  defp render(_value, budget, _depth) when budget <= 0, do: {"...", 0}
  defp render(_value, budget, depth) when depth > @depth, do: {"...", budget - 1}

  defp render(i, budget, _depth) when is_integer(i) and i >= @min_int and i <= @max_int,
    do: {Integer.to_string(i), budget - 1}

  defp render(i, budget, _depth) when is_integer(i) do
    sign = if i < 0, do: "a negative", else: "an"
    {"<#{sign} integer of #{bit_size(i)} bits>", budget - 1}
  end

  defp render(x, budget, _depth) when is_float(x), do: {Float.to_string(x), budget - 1}
  defp render(a, budget, _depth) when is_atom(a), do: {inspect(a), budget - 1}

  defp render(b, budget, _depth) when is_binary(b) and byte_size(b) <= @bytes,
    do: {inspect(b, printable_limit: @bytes, limit: 16), budget - 1}

  defp render(b, budget, _depth) when is_binary(b) do
    head = inspect(binary_part(b, 0, @bytes), printable_limit: @bytes, limit: 16)
    {"<a binary of #{byte_size(b)} bytes, starting #{head}>", budget - 1}
  end

  defp render(b, budget, _depth) when is_bitstring(b),
    do: {"<a bitstring of #{Kernel.bit_size(b)} bits>", budget - 1}

  defp render([], budget, _depth), do: {"[]", budget - 1}

  defp render(list, budget, depth) when is_list(list) do
    {items, tail, budget} = list_items(list, budget - 1, depth, [])

    tail =
      case tail do
        [] -> []
        :more -> [", ... (", count(list), " elements)"]
        other -> [" | ", elem(render(other, 1, depth + 1), 0)]
      end

    {["[", Enum.intersperse(items, ", "), tail, "]"], budget}
  end

  defp render(t, budget, depth) when is_tuple(t) do
    n = tuple_size(t)

    {items, budget} =
      Enum.reduce_while(0..(n - 1)//1, {[], budget - 1}, fn i, {acc, b} ->
        if b <= 0, do: {:halt, {acc, b}}, else: {:cont, add(render(elem(t, i), b, depth + 1), acc)}
      end)

    more = if length(items) < n, do: [", ... (#{n} elements)"], else: []
    {["{", items |> Enum.reverse() |> Enum.intersperse(", "), more, "}"], budget}
  end

  defp render(%{__struct__: mod} = s, budget, depth) when is_atom(mod) do
    {fields, budget} = map_entries(:maps.iterator(Map.delete(s, :__struct__)), budget - 1, depth, [], true)
    {["%", inspect(mod), "{", Enum.intersperse(fields, ", "), more(s, length(fields) + 1), "}"], budget}
  end

  defp render(m, budget, depth) when is_map(m) do
    {entries, budget} = map_entries(:maps.iterator(m), budget - 1, depth, [], false)
    {["%{", Enum.intersperse(entries, ", "), more(m, length(entries)), "}"], budget}
  end

  # Pids, ports, references and functions print in a fixed small size.
  defp render(other, budget, _depth), do: {inspect(other), budget - 1}

  defp add({doc, budget}, acc), do: {[doc | acc], budget}

  defp more(m, shown) when map_size(m) > shown, do: [", ... (#{map_size(m)} keys)"]
  defp more(_m, _shown), do: []

  defp list_items([h | t], budget, depth, acc) when budget > 0 do
    {doc, budget} = render(h, budget, depth + 1)
    list_items(t, budget, depth, [doc | acc])
  end

  defp list_items([], budget, _depth, acc), do: {Enum.reverse(acc), [], budget}
  defp list_items([_ | _], budget, _depth, acc), do: {Enum.reverse(acc), :more, budget}
  defp list_items(improper, budget, _depth, acc), do: {Enum.reverse(acc), improper, budget}

  defp map_entries(iter, budget, depth, acc, struct?) do
    case :maps.next(iter) do
      {k, v, next} when budget > 0 ->
        {kdoc, budget} = key(k, budget, depth, struct?)
        {vdoc, budget} = render(v, budget, depth + 1)
        map_entries(next, budget, depth, [[kdoc, vdoc] | acc], struct?)

      _ ->
        {Enum.reverse(acc), budget}
    end
  end

  defp key(k, budget, _depth, _struct?) when is_atom(k) do
    name = inspect(k)

    label =
      if String.starts_with?(name, ":") and not String.starts_with?(name, ":\""),
        do: String.slice(name, 1..-1//1) <> ": ",
        else: name <> " => "

    {label, budget}
  end

  defp key(k, budget, depth, _struct?) do
    {doc, budget} = render(k, budget, depth + 1)
    {[doc, " => "], budget}
  end

  # The length of a list, walking at most @count_cap cells.
  defp count(list), do: count(list, 0)
  defp count([_ | t], n) when n < @count_cap, do: count(t, n + 1)
  defp count([], n), do: Integer.to_string(n)
  defp count([_ | _], n), do: "more than #{n}"
  defp count(_improper, n), do: Integer.to_string(n)

  @doc false
  # Whether a list has at most `max` elements, walking at most `max + 1` cells (improper
  # lists count their proper part).
  def at_most?(list, max) when is_list(list) and is_integer(max), do: at_most(list, max)

  defp at_most([_ | t], max) when max > 0, do: at_most(t, max - 1)
  defp at_most([_ | _], _max), do: false
  defp at_most(_, _max), do: true
end
