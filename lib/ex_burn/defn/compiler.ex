if Code.ensure_loaded?(Nx) do
  defmodule ExBurn.Defn.Compiler do
    @moduledoc """
    Alias of `ExBurn.Compiler` (`Nx.Defn.default_options(compiler: ExBurn.Defn.Compiler)`);
    options and behaviour are documented there.
    """

    @behaviour Nx.Defn.Compiler

    @impl true
    @doc "See `ExBurn.Compiler.__jit__/5`."
    defdelegate __jit__(key, vars, fun, args_list, opts), to: ExBurn.Compiler

    @impl true
    @doc "See `ExBurn.Compiler.__compile__/4`."
    defdelegate __compile__(key, vars, fun, opts), to: ExBurn.Compiler

    @impl true
    @doc "See `ExBurn.Compiler.__partitions_options__/1`."
    defdelegate __partitions_options__(opts), to: ExBurn.Compiler

    @impl true
    @doc "See `ExBurn.Compiler.__to_backend__/1`."
    defdelegate __to_backend__(opts), to: ExBurn.Compiler

    @impl true
    @doc "See `ExBurn.Compiler.__shard_jit__/6`."
    defdelegate __shard_jit__(key, mesh, vars, fun, args_list, opts), to: ExBurn.Compiler
  end
end
