defmodule ExBurn.Native do
  @moduledoc false
  # The one place that calls ExBurn.Nif: picks the scheduler flavour by cost class, turns
  # {:error, {kind, message}} into ExBurn.Error, and reports a missing library clearly.

  alias ExBurn.Error

  # Work on at most this many elements runs on a normal scheduler (well under 1 ms on CPU).
  @small 16_384

  @doc false
  def small_limit, do: @small

  @doc """
  The scheduler flavour for work of `elements` elements on `device`: `:normal` for small host
  work, `:cpu` (dirty CPU) for large host work, `:io` (dirty IO) for GPU work.
  """
  def flavour(:cpu, elements) when elements <= @small, do: :normal
  def flavour(:cpu, _elements), do: :cpu
  def flavour(_gpu, _elements), do: :io

  @doc "Calls `name` (or its `_cpu`/`_io` flavour) and unwraps the result."
  def call(name, args, op \\ nil, flavour \\ :normal) do
    fun =
      case flavour do
        :normal -> name
        :cpu -> :"#{name}_cpu"
        :io -> :"#{name}_io"
      end

    ExBurn.Nif
    |> apply(fun, args)
    |> unwrap(op)
  rescue
    e in ArgumentError ->
      reraise Error.new(kind: :argument, op: op, message: Exception.message(e)), __STACKTRACE__

    e in ErlangError ->
      case e.original do
        :nif_not_loaded -> raise not_loaded(op)
        other -> reraise Error.new(kind: :execution, op: op, message: inspect(other)), __STACKTRACE__
      end
  end

  defp unwrap({:ok, value}, _op), do: value

  defp unwrap({:error, {kind, message}}, op),
    do: raise(Error.new(kind: kind, op: op, message: message))

  defp not_loaded(op) do
    Error.new(
      kind: :nif_not_loaded,
      op: op,
      message:
        "the ExBurn native library is not loaded (#{inspect(ExBurn.Nif.load_error())}); " <>
          "build it with `bin/setup` (or `mix ex_burn.build`), or install a precompiled variant"
    )
  end
end
