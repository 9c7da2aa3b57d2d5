defmodule ExBurn.Collector do
  @moduledoc false
  # Prompt release of tensors Elixir no longer references.
  #
  # A tensor is a small resource term on the process heap that owns large native memory (host
  # or GPU). The BEAM collects a process when its heap fills, which tiny resource terms hardly
  # do: a loop that drops a 64 MiB result per iteration could hold gigabytes of dead tensors
  # before the next collection. So every tensor a process receives from the engine counts its
  # bytes here (in the process dictionary), and once a process has received `collect_after`
  # bytes (`ExBurn.configure!/1`, else `config :ex_burn, collect_after: ...`, default 256 MiB)
  # since its last collection, it collects its own garbage, which frees the native memory of
  # every tensor it no longer references.

  @key {__MODULE__, :bytes}
  @setting {ExBurn, :collect_after}

  @doc "The default threshold in bytes."
  def default, do: 256 * 1024 * 1024

  @doc "Sets the threshold (`:never` turns collection off)."
  def put(bytes) when is_integer(bytes) and bytes > 0, do: :persistent_term.put(@setting, bytes)
  def put(:never), do: :persistent_term.put(@setting, :never)

  @doc "The threshold in bytes, or `:never`."
  def threshold do
    case :persistent_term.get(@setting, nil) do
      nil ->
        value = Application.get_env(:ex_burn, :collect_after, default())

        unless value == :never or (is_integer(value) and value > 0) do
          raise ExBurn.Error.new(
                  kind: :argument,
                  message:
                    "config :ex_burn, collect_after: expected a positive integer (bytes) or :never, " <>
                      "got #{ExBurn.Options.short(value)}"
                )
        end

        :persistent_term.put(@setting, value)
        value

      value ->
        value
    end
  end

  @doc "Counts a tensor of `shape` and `type` received by this process."
  def note(shape, {_, bits}) do
    bytes = div(elements(shape, 0, 1) * bits + 7, 8)

    case threshold() do
      :never ->
        :ok

      limit ->
        total = (Process.get(@key) || 0) + bytes

        if total >= limit do
          Process.put(@key, 0)
          :erlang.garbage_collect()
        else
          Process.put(@key, total)
        end
    end

    :ok
  end

  defp elements(shape, i, acc) when i < tuple_size(shape), do: elements(shape, i + 1, acc * elem(shape, i))
  defp elements(_shape, _i, acc), do: acc
end
