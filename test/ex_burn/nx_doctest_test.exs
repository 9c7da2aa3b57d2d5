if Code.ensure_loaded?(Nx) do
  defmodule ExBurn.NxDoctests do
    @moduledoc false
    # Nx's own doctests, generated as ExUnit's `doctest/2` does, except that excluded examples
    # are registered as skipped with their reason (so every exclusion shows in the counts) and
    # single examples can be excluded by name ("Nx.tensor/2 (17)"), not only whole functions.

    @doc false
    defmacro doctests(module, exclusions) do
      quote bind_quoted: [module: module, exclusions: exclusions, env_file: __CALLER__.file] do
        Code.ensure_compiled!(module)
        file = ExUnit.DocTest.__file__(module)

        for {name, test, tags} <- ExUnit.DocTest.__doctests__(module, []) do
          tags =
            case ExBurn.NxDoctests.reason(module, name, exclusions) do
              nil -> tags
              reason -> [skip: reason] ++ tags
            end

          @file file
          doc = ExUnit.Case.register_test(__MODULE__, env_file, __ENV__.line, :doctest, name, tags)
          def unquote(doc)(_), do: unquote(test)
        end
      end
    end

    @doc false
    # `exclusions` maps a reason to entries: `:moduledoc`, `{fun, arity}` or a test name
    # ("Nx.tensor/2 (17)").
    def reason(module, name, exclusions) do
      key = key(inspect(module), name)

      Enum.find_value(exclusions, fn {reason, entries} -> if key in entries or name in entries, do: reason end)
    end

    defp key(mod, "module " <> _), do: mod && :moduledoc

    defp key(mod, name) do
      [fun, arity] =
        Regex.run(~r/^(.+)\/(\d+) \(\d+\)$/, String.replace_prefix(name, mod <> ".", ""),
          capture: :all_but_first
        )

      {String.to_atom(fun), String.to_integer(arity)}
    end

    @doc false
    def device do
      case System.get_env("EX_BURN_TEST_DEVICE") do
        nil -> :cpu
        "" -> :cpu
        "cpu" -> :cpu
        other -> ExBurn.Device.normalize!(String.to_atom(other))
      end
    end
  end
end

defmodule ExBurn.NxDoctestTest do
  @moduledoc """
  Nx 0.13.1's own doctests, run with `ExBurn.Backend` as the default backend and
  `ExBurn.Compiler` as the default `defn` compiler.

  `EX_BURN_TEST_DEVICE=cuda` runs them on `{:cuda, 0}`. Excluded examples are registered as
  skipped with their reason (below), so `mix test` reports run / passing / skipped.
  """
  use ExUnit.Case, async: false

  @moduletag :nx

  if Code.ensure_loaded?(Nx) do
    import ExBurn.NxDoctests

    setup do
      Application.ensure_all_started(:nx)
      Nx.default_backend({ExBurn.Backend, device: ExBurn.NxDoctests.device()})
      Nx.Defn.default_options(compiler: ExBurn.Compiler)
      :ok
    end

    @exclusions %{}

    doctests(Nx, @exclusions)
    doctests(Nx.LinAlg, @exclusions)
    doctests(Nx.Random, @exclusions)
    doctests(Nx.Constants, @exclusions)
    doctests(Nx.Shape, @exclusions)
    doctests(Nx.Type, @exclusions)
    doctests(Nx.Floating, @exclusions)
    doctests(Nx.Batch, @exclusions)
    doctests(Nx.Defn, @exclusions)
    doctests(Nx.Defn.Composite, @exclusions)
    doctests(Nx.Defn.Tree, @exclusions)
    doctests(Nx.Defn.Expr, @exclusions)
  end
end

defmodule ExBurn.NxKernelDoctestTest do
  @moduledoc "Nx.Defn.Kernel's doctests (they need the kernel's operators imported)."
  use ExUnit.Case, async: false

  @moduletag :nx

  if Code.ensure_loaded?(Nx) do
    import ExBurn.NxDoctests
    use Nx.Defn.Kernel

    setup do
      Application.ensure_all_started(:nx)
      Nx.default_backend({ExBurn.Backend, device: ExBurn.NxDoctests.device()})
      Nx.Defn.default_options(compiler: ExBurn.Compiler)
      :ok
    end

    doctests(Nx.Defn.Kernel, %{})
  end
end
