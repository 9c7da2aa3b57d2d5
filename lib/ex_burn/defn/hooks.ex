if Code.ensure_loaded?(Nx) do
  defmodule ExBurn.Defn.Hooks do
    @moduledoc false
    # Internal to the Defn compiler: calls the hook functions of a running program while it
    # runs. The program runs inside a NIF call in the caller's process, so the hooks run in a
    # companion process: the engine sends it `{:ex_burn_hook, id, tensors}` as it reaches each
    # hook (per loop iteration, only in the branches taken), and it calls the functions in that
    # order. A token-by-token callback (Nx.Serving streaming, Bumblebee's generation) thus sees
    # each token when it is made, not when the loop ends. The call returns only after every
    # hook has run; an exception of a hook is raised in the caller, as with Nx.Defn.Evaluator.

    alias ExBurn.Tensor
    alias Nx.Defn.Composite

    @doc """
    Runs `call.(receiver)` (a NIF call that sends hook values to `receiver`, a pid or `nil`)
    with the hooks `specs` (id => `{callback spec, value template}`) resolved against the
    `overrides` (hook name => function); returns what `call` returned. With no hook to call,
    `receiver` is `nil`.
    """
    @spec around(map(), map(), (pid() | nil -> result)) :: result when result: term()
    def around(specs, overrides, call) do
      funs =
        for {id, {spec, template}} <- specs,
            fun = resolve(spec, overrides),
            into: %{},
            do: {id, {fun, template}}

      if funs == %{} do
        call.(nil)
      else
        caller = self()
        {runner, monitor} = spawn_monitor(fn -> loop(caller, funs, :ok) end)

        try do
          result = call.(runner)
          send(runner, {:done, caller})

          receive do
            {:hooks_done, ^runner, :ok} ->
              result

            {:hooks_done, ^runner, {:error, kind, reason, stack}} ->
              :erlang.raise(kind, reason, stack)

            {:DOWN, ^monitor, :process, ^runner, reason} ->
              exit({:hook_runner, reason})
          end
        after
          Process.demonitor(monitor, [:flush])
          Process.exit(runner, :kill)
        end
      end
    end

    # Calls each hook in arrival order; after a hook fails, the rest are not called (the
    # program still runs to its end) and the failure is reported when the caller asks.
    defp loop(caller, funs, state) do
      receive do
        {:ex_burn_hook, id, refs} ->
          state =
            case {state, funs} do
              {:ok, %{^id => {fun, template}}} -> call(fun, template, refs)
              _ -> state
            end

          loop(caller, funs, state)

        {:done, ^caller} ->
          send(caller, {:hooks_done, self(), state})
      end
    end

    defp call(fun, template, refs) do
      fun.(fill(template, Enum.map(refs, &Tensor.wrap/1)))
      :ok
    catch
      kind, reason -> {:error, kind, reason, __STACKTRACE__}
    end

    @doc "The function a hook spec calls, given the overrides by name (`nil`: none)."
    @spec resolve(term(), map()) :: (term() -> term()) | nil
    def resolve({:fn, fun}, _overrides), do: fun
    def resolve({:named, name, callback}, overrides), do: overrides[name] || callback

    @doc "Engine results put into a container of templates."
    @spec fill(Nx.Container.t(), [Tensor.t()]) :: Nx.Container.t()
    def fill(template, tensors) do
      {out, []} =
        Composite.traverse(template, tensors, fn t, [r | rest] ->
          {%{t | data: %ExBurn.Backend{tensor: r}}, rest}
        end)

      out
    end
  end
end
