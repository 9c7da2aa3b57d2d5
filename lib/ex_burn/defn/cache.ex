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

  @doc """
  A key for `fetch/2` standing for `term` in time linear in the term's real size. Nx expression
  DAGs share subtrees, so hashing or storing them as terms walks every path (exponential: a
  doubling chain of depth 23 froze the VM); here an expression node counts as its unique id,
  functions as their code and environment, and the result is a SHA-256.
  """
  @spec key(term()) :: binary()
  def key(term), do: :crypto.hash(:sha256, :erlang.term_to_binary(project(term)))

  if Code.ensure_loaded?(Nx) do
    defp project(%Nx.Tensor{data: %Nx.Defn.Expr{id: id}} = t), do: {:expr, id, t.type, t.shape}

    # argument templates, on every call of a jitted function: their fields directly
    defp project(%Nx.Tensor{data: %Nx.TemplateBackend{}} = t),
      do: {:template, t.type, t.shape, t.names, t.vectorized_axes}
  end

  defp project(fun) when is_function(fun) do
    info = :erlang.fun_info(fun)
    {:fun, info[:module], info[:name], info[:arity], info[:new_uniq], project(info[:env])}
  end

  defp project(list) when is_list(list), do: project_list(list, [])
  defp project(tuple) when is_tuple(tuple), do: {:t, project(Tuple.to_list(tuple))}
  defp project(%_{} = struct), do: {:s, project(Map.to_list(struct))}
  defp project(map) when is_map(map), do: {:m, project(Map.to_list(map))}
  defp project(other), do: other

  defp project_list([h | t], acc), do: project_list(t, [project(h) | acc])
  defp project_list([], acc), do: Enum.reverse(acc)
  defp project_list(tail, acc), do: {:improper, Enum.reverse(acc), project(tail)}

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
