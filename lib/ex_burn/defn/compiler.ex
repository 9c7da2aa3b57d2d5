if Code.ensure_loaded?(Nx) do
  defmodule ExBurn.Defn.Compiler do
    @moduledoc """
    Alias of `ExBurn.Compiler` (`Nx.Defn.default_options(compiler: ExBurn.Defn.Compiler)`);
    options and behaviour are documented there.
    """

    use ExBurn.Compiler
  end
end
