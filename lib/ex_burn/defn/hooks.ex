if Code.ensure_loaded?(Nx) do
  defmodule ExBurn.Defn.Hooks do
    @moduledoc false
    # Internal to the Defn compiler: calls the hook functions of a running program while it
    # runs, in the caller's process (as Nx.Defn.Evaluator does: `self()` in a hook is the
    # caller, and its process dictionary is the caller's). The program runs inside a NIF call
    # in a companion process; the engine sends the caller `{:ex_burn_hook, id, tensors}` as it
    # reaches each hook (per loop iteration, only in the branches taken), and the caller calls
    # the functions in that order, so a token-by-token callback (Nx.Serving streaming,
    # Bumblebee's generation) sees each token when it is made, not when the loop ends. The
    # call returns after the program and every hook have run. An exception of a hook is raised
    # at once, and the program is stopped; if the caller exits, a watcher stops the program.

    alias ExBurn.Tensor
    alias Nx.Defn.Composite

    @doc """
    Runs `call.(receiver)` (a NIF call that sends hook values to `receiver`, a pid or `nil`)
    with the hooks `specs` (id => `{callback spec, value template}`) resolved against the
    `overrides` (hook name => function); returns what `call` returned. With no hook to call,
    `receiver` is `nil` and `call` runs in the caller.
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

        {worker, monitor} =
          spawn_monitor(fn ->
            reply =
              try do
                {:ok, call.(caller)}
              catch
                kind, reason -> {:error, kind, reason, __STACKTRACE__}
              end

            send(caller, {:ex_burn_program_done, self(), reply})
          end)

        # the program stops when its caller exits (the engine watches the worker)
        watcher = spawn(fn -> watch(caller, worker) end)

        try do
          collect(worker, monitor, funs)
        after
          Process.exit(watcher, :kill)
          Process.exit(worker, :kill)
          Process.demonitor(monitor, [:flush])
        end
      end
    end

    # Calls each hook as its values arrive, until the program's answer (which the worker
    # sends after the engine's last hook message, so every hook has been called by then).
    defp collect(worker, monitor, funs) do
      receive do
        {:ex_burn_hook, id, refs} ->
          with %{^id => {fun, template}} <- funs, do: call(fun, template, refs)
          collect(worker, monitor, funs)

        {:ex_burn_program_done, ^worker, {:ok, result}} ->
          result

        {:ex_burn_program_done, ^worker, {:error, kind, reason, stack}} ->
          :erlang.raise(kind, reason, stack)

        {:DOWN, ^monitor, :process, ^worker, reason} ->
          exit({:ex_burn_program, reason})
      end
    end

    defp watch(caller, worker) do
      ref = Process.monitor(caller)

      receive do
        {:DOWN, ^ref, :process, ^caller, _} -> Process.exit(worker, :kill)
      end
    end

    defp call(fun, template, refs) do
      fun.(fill(template, Enum.map(refs, &Tensor.wrap/1)))
      :ok
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
