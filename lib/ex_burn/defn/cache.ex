defmodule ExBurn.Defn.Cache do
  @moduledoc false
  # Compiled programs, in a public ETS table owned by a small process started on first use
  # (ExBurn has no application callback, and the package must work without one).

  @table __MODULE__

  @doc "Returns the value stored under `key`, computing and storing it with `fun` on a miss."
  @spec fetch(term(), (() -> term())) :: term()
  def fetch(key, fun) do
    table = table()

    case :ets.lookup(table, key) do
      [{^key, value}] ->
        value

      [] ->
        value = fun.()
        :ets.insert(table, {key, value})
        value
    end
  end

  @doc "Number of cached entries."
  @spec size() :: non_neg_integer()
  def size, do: :ets.info(table(), :size)

  @doc "Drops every cached entry."
  @spec clear() :: :ok
  def clear do
    :ets.delete_all_objects(table())
    :ok
  end

  defp table do
    case :ets.whereis(@table) do
      :undefined -> start_owner()
      _ref -> @table
    end
  end

  defp start_owner do
    parent = self()

    pid =
      spawn(fn ->
        try do
          :ets.new(@table, [:named_table, :public, :set, read_concurrency: true])
          send(parent, {__MODULE__, :ready})
          Process.sleep(:infinity)
        rescue
          # another process created it first
          ArgumentError -> send(parent, {__MODULE__, :ready})
        end
      end)

    receive do
      {__MODULE__, :ready} -> :ok
    after
      5_000 ->
        raise ExBurn.Error.new(
                kind: :execution,
                message: "could not start the program cache (#{inspect(pid)})"
              )
    end

    @table
  end
end
