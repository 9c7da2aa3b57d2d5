if Code.ensure_loaded?(Nx) do
  defmodule ExBurn.Test.NxReference do
    @moduledoc false
    # The reference of the conformance tests: Nx.BinaryBackend + Nx.Defn.Evaluator, compared
    # with ExBurn by value (`==` on two tensors compares opaque data on a non-binary backend).

    import ExUnit.Assertions

    @doc "A copy of `t` on Nx.BinaryBackend."
    def binary(t), do: Nx.backend_copy(t, Nx.BinaryBackend)

    @doc "`fun` applied to BinaryBackend copies of `args` with the Evaluator."
    def on_binary(fun, args) do
      Nx.with_default_backend(Nx.BinaryBackend, fn ->
        Nx.Defn.jit_apply(fun, Enum.map(args, &binary/1), compiler: Nx.Defn.Evaluator)
      end)
    end

    @doc """
    Asserts that `got` has the shape (and, with `type: true`, the type) of `want` and its values
    within `tol`, absolute and relative (NaNs equal where `equal_nan: true`).
    """
    def assert_close(got, want, tol \\ 1.0e-5, opts \\ []) do
      got = binary(got)
      want = binary(want)

      if opts[:type],
        do: assert({Nx.shape(got), Nx.type(got)} == {Nx.shape(want), Nx.type(want)}),
        else: assert(Nx.shape(got) == Nx.shape(want))

      close = Nx.all_close(got, want, atol: tol, rtol: tol, equal_nan: opts[:equal_nan] || false)
      assert Nx.to_number(close) == 1, "got #{inspect(got)}, want #{inspect(want)}"
    end
  end
end

if Code.ensure_loaded?(Nx) do
  defmodule ExBurn.Test.NxCase do
    @moduledoc false
    # Tests with Nx: tagged `:nx` (run only where Nx is loadable), ExBurn.Backend as the
    # process's default backend, the reference helpers imported.
    use ExUnit.CaseTemplate

    using do
      quote do
        @moduletag :nx
        import ExBurn.Test.NxReference
      end
    end

    setup do
      Application.ensure_all_started(:nx)
      Nx.default_backend(ExBurn.Backend)
      :ok
    end
  end
end
