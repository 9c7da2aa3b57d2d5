defmodule ExBurn.Native do
  @moduledoc false
  # The one place that calls ExBurn.Nif: turns {:error, {kind, message}} into ExBurn.Error and
  # reports a missing library clearly. Where a call runs (normal or dirty scheduler) is decided
  # by the native side from the decoded arguments.

  alias ExBurn.Error

  @doc "Calls the NIF `name` with `args` and unwraps the result; `op` names it in errors."
  def call(name, args, op \\ nil) do
    ExBurn.Nif
    |> apply(name, args)
    |> unwrap(op)
  rescue
    e in ErlangError ->
      case e.original do
        :nif_not_loaded -> raise not_loaded(op)
        other -> reraise Error.new(kind: :execution, op: op, message: inspect(other)), __STACKTRACE__
      end
  end

  defp unwrap({:ok, value}, _op), do: value

  defp unwrap({:error, {kind, message}}, op),
    do: raise(Error.new(kind: kind, op: op, message: strip_op(message, op)))

  # The engine names the op in its messages (programs run many); ExBurn.Error adds it too.
  defp strip_op(message, nil), do: message
  defp strip_op(message, op), do: String.replace_prefix(message, "#{op}: ", "")

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
