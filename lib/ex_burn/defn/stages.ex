if Code.ensure_loaded?(Nx) do
  defmodule ExBurn.Defn.Stages do
    @moduledoc false
    # Internal to the Defn compiler and the Nx backend.
    # Splits a defn expression at its `Nx.runtime_call/4` nodes, in pure Elixir.
    #
    # A program runs in one NIF call without returning to Elixir, so each root-scope runtime
    # call becomes a stage: a program computing the call's argument from the function inputs
    # (and the results of earlier calls), then the Elixir callback. The final program computes
    # the outputs with every call result as one more input. Stages recompute what they share
    # with later programs (no intermediate is kept between programs); a hook is called by the
    # first program that computes it, and passes its value through in later ones, so each hook
    # runs once, before the callbacks that depend on it. Runtime calls inside `while` or `cond`
    # cannot be staged: `ExBurn.Defn.Builder` raises `ExBurn.Error` for them.

    alias ExBurn.Defn.Builder
    alias Nx.Defn.{Composite, Expr, Tree}
    alias Nx.Tensor, as: T

    @typedoc "A runtime call stage: the program of its argument, and the call."
    @type stage :: %{
            program: Builder.program(),
            argument: Nx.Container.t(),
            fun: (Nx.Container.t(), keyword() -> Nx.Container.t()),
            result: Nx.Container.t(),
            opts: keyword()
          }

    @doc """
    Lowers `outputs` over `inputs` program inputs into the final program and the stages
    before it (none when there is no runtime call).
    """
    @spec build(Nx.Container.t(), non_neg_integer()) :: {Builder.program(), [stage()]}
    def build(outputs, inputs) do
      {stages, {seeds, n, fired}} =
        outputs
        |> calls()
        |> Enum.map_reduce({%{}, inputs, []}, fn call, {seeds, n, fired} ->
          %T{data: %Expr{id: id, args: [argument, fun, result, opts]}} = call
          program = Builder.build(argument, n, seeds: seeds, skip_hooks: fired)
          k = length(Composite.flatten_list([result]))
          refs = Enum.map(n..(n + k - 1)//1, &{:in, &1})
          seed = if match?(%T{type: {:tuple, _}}, call), do: refs, else: hd(refs)
          stage = %{program: program, argument: template(argument), fun: fun, result: result, opts: opts}
          {stage, {Map.put(seeds, id, seed), n + k, program.hook_nodes ++ fired}}
        end)

      {Builder.build(outputs, n, seeds: seeds, skip_hooks: fired), stages}
    end

    @doc "The value templates of a container."
    @spec template(Nx.Container.t()) :: Nx.Container.t()
    def template(container), do: Composite.traverse(container, &Nx.to_template/1)

    # Root-scope runtime calls, each after the calls its argument depends on.
    defp calls(outputs) do
      {_seen, found} = Composite.reduce(outputs, {%{}, []}, &visit/2)
      Enum.reverse(found)
    end

    defp visit(%T{data: %Expr{id: id} = expr} = t, {seen, found}) do
      if Map.has_key?(seen, id) do
        {seen, found}
      else
        acc = scope_args(t, expr, {Map.put(seen, id, true), found})
        if expr.op == :runtime_call, do: {elem(acc, 0), [t | elem(acc, 1)]}, else: acc
      end
    end

    defp visit(_other, acc), do: acc

    # Arguments in the enclosing scope: for `cond` only the first predicate (later predicates
    # and the branches are conditional), for `while` its initial state.
    defp scope_args(_t, %Expr{op: :cond, args: [[{pred, _} | _], _]}, acc), do: visit(pred, acc)

    defp scope_args(t, _expr, acc) do
      {_args, acc} = Tree.apply_args(t, :scope, acc, fn arg, acc -> {arg, visit(arg, acc)} end)
      acc
    end
  end
end
