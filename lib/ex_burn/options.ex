defmodule ExBurn.Options do
  @moduledoc false
  # Options written once as a schema that validates them and writes their docs (what
  # nimble_options does; Hex is not always there). A schema is a keyword list of
  # `name: [type: type, default: value, required: boolean, doc: string]`. Every failure is an
  # ExBurn.Error of kind :argument naming the function, the option, the value and what is
  # accepted.
  #
  # Types: :any, :boolean, :atom, :string, :pid, :map, :keyword, :integer, :pos_integer,
  # :non_neg_integer (integers within 64 bits), :number (finite), :pos_number, :non_neg_number,
  # {:number, min, max},
  # {:in, values}, {:list, type}, {:fun, arity}, :device, :type, nil, {:or, [types]},
  # {:custom, fun} or {:custom, fun, "what is expected"} (fun returns {:ok, value} or :error).

  alias ExBurn.Error

  # Integers of the 64-bit range (signed or unsigned): every count, size, seed and byte limit.
  @max_int 18_446_744_073_709_551_615
  @min_int -9_223_372_036_854_775_808
  # Longer option lists are refused before they are read (no function has a tenth as many).
  @max_options 256

  @doc false
  # The options with defaults filled in (and devices and types normalised), in schema order.
  def validate!(opts, schema, op) do
    unless is_list(opts) and ExBurn.Format.at_most?(opts, @max_options),
      do: fail(op, "options must be a keyword list of at most #{@max_options} entries, got #{short(opts)}")

    unless proper_list?(opts) and Enum.all?(opts, &match?({k, _} when is_atom(k), &1)) do
      fail(op, "options must be a keyword list, got #{short(opts)}")
    end

    known = Keyword.keys(schema)

    case Enum.find(opts, fn {k, _} -> k not in known end) do
      nil -> :ok
      {k, _} -> fail(op, "unknown option #{inspect(k)} (accepted: #{Enum.map_join(known, ", ", &inspect/1)})")
    end

    for {name, spec} <- schema, reduce: [] do
      acc ->
        case Keyword.fetch(opts, name) do
          {:ok, value} ->
            [{name, check!(value, Keyword.fetch!(spec, :type), name, op)} | acc]

          :error ->
            cond do
              Keyword.get(spec, :required, false) -> fail(op, "option #{inspect(name)} is required")
              Keyword.has_key?(spec, :default) -> [{name, Keyword.fetch!(spec, :default)} | acc]
              true -> acc
            end
        end
    end
    |> Enum.reverse()
  end

  @doc false
  # One value against one type (for positional arguments too); `name` names it in the error.
  def check!(value, type, name, op) do
    case conform(value, type) do
      {:ok, v} -> v
      :error -> fail(op, "invalid value for #{label(name)}: #{short(value)} (expected #{describe(type)})")
    end
  end

  defp label(name) when is_atom(name), do: inspect(name)
  defp label(name), do: name

  @doc false
  # The "## Options" list of a schema, for @doc strings.
  def docs(schema) do
    Enum.map_join(schema, "\n", fn {name, spec} ->
      default =
        cond do
          Keyword.get(spec, :required) ->
            " (required)"

          Keyword.has_key?(spec, :default) and spec[:default] != nil ->
            " (default `#{inspect(spec[:default])}`)"

          true ->
            ""
        end

      "  * `#{inspect(name)}` - #{Keyword.get(spec, :doc, describe(spec[:type]))}#{default}"
    end)
  end

  defp conform(v, :any), do: {:ok, v}
  defp conform(v, :boolean) when is_boolean(v), do: {:ok, v}
  defp conform(v, :atom) when is_atom(v), do: {:ok, v}
  defp conform(v, :string) when is_binary(v), do: if(String.valid?(v), do: {:ok, v}, else: :error)
  defp conform(v, :pid) when is_pid(v), do: {:ok, v}
  defp conform(v, :map) when is_map(v), do: {:ok, v}
  defp conform(v, :keyword) when is_list(v), do: if(Keyword.keyword?(v), do: {:ok, v}, else: :error)
  defp conform(v, :integer) when is_integer(v) and v >= @min_int and v <= @max_int, do: {:ok, v}
  defp conform(v, :pos_integer) when is_integer(v) and v > 0 and v <= @max_int, do: {:ok, v}
  defp conform(v, :non_neg_integer) when is_integer(v) and v >= 0 and v <= @max_int, do: {:ok, v}
  defp conform(v, :number) when is_number(v), do: finite(v)
  defp conform(v, :pos_number) when is_number(v) and v > 0, do: finite(v)
  defp conform(v, :non_neg_number) when is_number(v) and v >= 0, do: finite(v)
  defp conform(v, {:number, lo, hi}) when is_number(v) and v >= lo and v <= hi, do: finite(v)
  defp conform(v, {:in, values}), do: if(v in values, do: {:ok, v}, else: :error)
  defp conform(v, {:fun, arity}) when is_function(v, arity), do: {:ok, v}
  defp conform(nil, nil), do: {:ok, nil}

  defp conform(v, {:list, type}) when is_list(v) do
    if proper_list?(v) do
      Enum.reduce_while(v, {:ok, []}, fn x, {:ok, acc} ->
        case conform(x, type) do
          {:ok, y} -> {:cont, {:ok, [y | acc]}}
          :error -> {:halt, :error}
        end
      end)
      |> case do
        {:ok, acc} -> {:ok, Enum.reverse(acc)}
        :error -> :error
      end
    else
      :error
    end
  end

  defp conform(v, :device), do: rescue_error(fn -> ExBurn.Device.normalize!(v) end)
  defp conform(v, :type), do: rescue_error(fn -> ExBurn.Type.normalize!(v) end)

  defp conform(v, {:or, types}) do
    Enum.find_value(types, :error, fn t ->
      case conform(v, t) do
        {:ok, _} = ok -> ok
        :error -> nil
      end
    end)
  end

  defp conform(v, {:custom, fun, _expected}), do: conform(v, {:custom, fun})

  defp conform(v, {:custom, fun}) do
    case fun.(v) do
      {:ok, _} = ok -> ok
      _ -> :error
    end
  end

  defp conform(_v, _type), do: :error

  # Floats are always finite in Erlang; bignums beyond the f64 range are refused.
  defp finite(v) when is_float(v), do: {:ok, v}
  defp finite(v) when is_integer(v) and abs(v) < 1.0e300, do: {:ok, v}
  defp finite(_v), do: :error

  @doc false
  def proper_list?([]), do: true
  def proper_list?([_ | t]), do: proper_list?(t)
  def proper_list?(_), do: false

  defp rescue_error(fun) do
    {:ok, fun.()}
  rescue
    _ in ExBurn.Error -> :error
  end

  @doc false
  # A human description of a type.
  def describe(:any), do: "any term"
  def describe(:boolean), do: "true or false"
  def describe(:atom), do: "an atom"
  def describe(:string), do: "a string"
  def describe(:pid), do: "a pid"
  def describe(:map), do: "a map"
  def describe(:keyword), do: "a keyword list"
  def describe(:integer), do: "a 64-bit integer"
  def describe(:pos_integer), do: "a positive integer below 2^64"
  def describe(:non_neg_integer), do: "a non-negative integer below 2^64"
  def describe(:number), do: "a number"
  def describe(:pos_number), do: "a positive number"
  def describe(:non_neg_number), do: "a non-negative number"
  def describe({:number, lo, hi}), do: "a number in [#{lo}, #{hi}]"
  def describe({:in, values}), do: "one of #{Enum.map_join(values, ", ", &inspect/1)}"
  def describe({:list, type}), do: "a list of #{describe(type)}"
  def describe({:fun, arity}), do: "a function of arity #{arity}"
  def describe(:device), do: ":cpu, {:cuda, i}, {:vulkan, i} or {:metal, i}"
  def describe(:type), do: "a type such as {:f, 32} or :f32"
  def describe(nil), do: "nil"
  def describe({:or, types}), do: Enum.map_join(types, " or ", &describe/1)
  def describe({:custom, _, expected}), do: expected
  def describe({:custom, _}), do: "a valid value"

  @doc false
  # A bounded rendering of a term for messages (`ExBurn.Format`: bignums by bit size, one node
  # budget for the whole term).
  def short(term), do: ExBurn.Format.term(term)

  @doc false
  def fail(op, message), do: raise(Error.new(kind: :argument, op: op, message: message))
end
