if Code.ensure_loaded?(Nx) do
  defmodule ExBurn.Compiler do
    @moduledoc """
    An `Nx.Defn.Compiler` on Burn: a `defn` function becomes one engine program, run in ONE
    NIF call per invocation.

        Nx.Defn.default_options(compiler: ExBurn.Compiler)
        Nx.Defn.jit(&MyModule.predict/2, compiler: ExBurn.Compiler, device: {:cuda, 0})

    `ExBurn.Defn.Compiler` is an alias of this module.

    The expression is lowered in pure Elixir by `ExBurn.Defn.Builder` (tensor ops through the
    same `ExBurn.Defn.Lower` table as `ExBurn.Backend`; `while`/`cond` as sub-programs;
    tensors captured by the function as program constants, uploaded once). Programs are cached
    by the function key and the argument templates, and engine programs additionally by their
    structure, so equal computations share one validated program. Results are
    `ExBurn.Backend` tensors on the program's device.

    ## Options

      * `:device` - where the program runs (default: the device of the default backend when it
        is `ExBurn.Backend`, else `ExBurn.default_device/0`)
      * `:hooks` - a map of hook name to function, overriding the functions given to
        `Nx.Defn.Kernel.hook/3` (as in `Nx.Defn.Evaluator`)
      * `:max_concurrency` - `Nx.Serving` partitions per device (default 1)
      * `:devices` - the devices `Nx.Serving` runs partitions on with `partitions: true`
        (default: every device of the family of `:device`, e.g. every CUDA GPU)
      * `:timeout` - milliseconds a call may run (default `:infinity`); past it the engine
        stops at the next instruction or loop iteration and the call raises `ExBurn.Error`
        of kind `:cancelled`

    A call whose process exits (killed, or its task shut down) stops the same way within one
    instruction or loop iteration, and frees its scheduler.

    Hooks (`Nx.Defn.Kernel.hook/2,3`, also inside `while` bodies and `cond` branches) are
    called while the program runs, as the engine reaches them, in that order: once per loop
    iteration with the values of that moment (so a token-by-token callback of a generation
    loop, such as `Nx.Serving`'s streaming, gets each token when it is made); a hook in a
    branch not taken is not called. They run in the calling process (as with
    `Nx.Defn.Evaluator`: `self()` in a hook is the caller) while the program runs in a
    companion process, and the call returns after the last one; an exception raised by a hook
    stops the program and is raised by the call.

    `Nx.runtime_call/4` outside `while`/`cond` splits the function into programs (see
    `ExBurn.Defn.Stages`): each call's argument is computed by one program and handed to the
    callback as `Nx.BinaryBackend` tensors, and its result (checked against the template, else
    `ExBurn.Error` of kind `:shape`) becomes an input of the next. Values a later program shares
    with an earlier one are recomputed.

    Expressions the engine cannot run (runtime calls inside `while`/`cond`, functions given to
    `Nx.reduce/4` or `Nx.window_reduce/5` that are not element-wise, complex ops without a
    lowering) raise `ExBurn.Error` of kind `:unsupported` naming the op when the function is
    compiled.
    """

    @behaviour Nx.Defn.Compiler

    alias ExBurn.Defn.{Cache, Hooks, Stages}
    alias ExBurn.{Native, Tensor}
    alias Nx.Defn.Composite

    @impl true
    @doc "Compiles `fun` for the templates `vars` (cached) and runs it on each argument list."
    def __jit__(key, vars, fun, args_list, opts), do: __compile__(key, vars, fun, opts).(args_list)

    @impl true
    @doc "Compiles `fun` for the templates `vars` (cached) into a function of argument lists."
    def __compile__(key, vars, fun, opts) do
      device = device(opts)
      compiled = compile(key, vars, fun, device)
      run_opts = %{device: device, hooks: Keyword.get(opts, :hooks, %{}), timeout: timeout(opts)}
      fn args_list -> Enum.map(args_list, &run(compiled, &1, run_opts)) end
    end

    defp timeout(opts) do
      case Keyword.get(opts, :timeout, :infinity) do
        :infinity ->
          nil

        ms when is_integer(ms) and ms >= 0 and ms < 4_294_967_296 ->
          ms

        other ->
          ExBurn.Options.fail(
            :defn,
            "timeout must be :infinity or milliseconds, got #{ExBurn.Options.short(other)}"
          )
      end
    end

    @impl true
    @doc """
    One option list per `Nx.Serving` partition (`partitions: true`): one per device, each
    `:max_concurrency` times (default 1), with `:device` set to that device.

    The devices are those listed in `:devices`, else every device of the family of the
    compiler's device (every CUDA GPU of the host for `{:cuda, _}`; the CPU is one device).
    """
    @spec __partitions_options__(keyword()) :: [keyword()]
    def __partitions_options__(opts) do
      per = Keyword.get(opts, :max_concurrency, 1)

      unless is_integer(per) and per >= 1,
        do:
          ExBurn.Options.fail(
            :defn,
            "max_concurrency must be a positive integer, got #{ExBurn.Options.short(per)}"
          )

      for device <- partition_devices(opts), _ <- 1..per do
        opts |> Keyword.delete(:devices) |> Keyword.put(:device, device)
      end
    end

    defp nonempty([], device), do: [device]
    defp nonempty(devices, _device), do: devices

    defp partition_devices(opts) do
      case Keyword.fetch(opts, :devices) do
        {:ok, [_ | _] = devices} ->
          if length(devices) > 1024,
            do: ExBurn.Options.fail(:defn, "devices lists at most 1024 devices, got #{length(devices)}")

          Enum.map(devices, &ExBurn.Device.normalize!/1)

        {:ok, other} ->
          ExBurn.Options.fail(
            :defn,
            "devices must be a non-empty list of devices, got #{ExBurn.Options.short(other)}"
          )

        :error ->
          case device(opts) do
            :cpu ->
              [:cpu]

            # none reachable: the one asked for, which reports why when it runs
            {family, _} = device ->
              for(i <- 0..(ExBurn.Device.count(family) - 1)//1, do: {family, i}) |> nonempty(device)
          end
      end
    end

    @impl true
    @doc "The backend results live on: `ExBurn.Backend` on the compiler's device."
    def __to_backend__(opts), do: {ExBurn.Backend, device: device(opts)}

    @impl true
    @doc "Sharding over meshes is not supported (raises `ExBurn.Error`)."
    def __shard_jit__(_key, _mesh, _vars, _fun, _args_list, _opts) do
      raise ExBurn.Error.new(
              kind: :unsupported,
              op: :shard_jit,
              message: "sharded compilation is not supported by ExBurn.Compiler"
            )
    end

    @doc """
    Lowers `fun` applied to `args` (tensors or templates) without running it, for inspection
    and tests: the engine program term, its constants and hooks, and the output template.
    """
    @spec lower(function(), list()) :: map()
    def lower(fun, args) do
      fun |> Nx.Defn.debug_expr_apply(args) |> build(length(Composite.flatten_list(args)))
    end

    defp build(outputs, inputs) do
      {program, stages} = Stages.build(outputs, inputs)
      Map.merge(program, %{output: template(outputs), stages: stages})
    end

    # ---- compilation (cached) ----

    defp compile(key, vars, fun, device) do
      signature = Enum.map(vars, &template/1)

      Cache.fetch({:defn, Cache.key({key, signature}), device}, fn ->
        lowered = build(fun.(vars), length(Composite.flatten_list(vars)))

        # What a call reads back from the cache (copied out of ETS on every call): the
        # engine programs and what running them needs, not the program terms they came from.
        stages =
          Enum.map(lowered.stages, fn stage ->
            stage
            |> Map.put(:engine, engine_program(stage.program, device))
            |> Map.update!(:program, &Map.take(&1, [:hooks, :used]))
          end)

        used = MapSet.new(Enum.flat_map([lowered | lowered.stages], &used(&1)))

        lowered
        |> Map.drop([:term, :constants])
        |> Map.merge(%{program: engine_program(lowered, device), stages: stages, used_args: used})
      end)
    end

    defp engine_program(%{term: term, constants: constants}, device) do
      Cache.fetch({:program, Cache.key({term, constants}), device}, fn ->
        refs = Enum.map(constants, &to_device(&1, device).ref)
        Native.call(:program_build, [term, refs], :defn)
      end)
    end

    defp template(outputs), do: Stages.template(outputs)

    # ---- running ----

    defp run(compiled, args, %{device: device} = run_opts) do
      # Arguments the programs never read are not materialised (templates, lazy containers).
      refs =
        args
        |> Enum.with_index()
        |> Enum.map(fn {arg, i} ->
          if i in compiled.used_args,
            do: to_device(materialize(arg), device).ref,
            else: placeholder(device)
        end)

      refs = Enum.reduce(compiled.stages, refs, &(&2 ++ runtime_call(&1, &2, run_opts)))
      outputs = run_program(compiled.program, refs, compiled.hooks, run_opts)
      fill(compiled.output, Enum.map(outputs, &Tensor.wrap/1))
    end

    # Runs an engine program; its hooks are called while it runs (ExBurn.Defn.Hooks).
    defp run_program(program, refs, hook_specs, %{device: device, timeout: timeout, hooks: overrides}) do
      Hooks.around(hook_specs, overrides, fn receiver ->
        {outputs, _log} = Native.call(:program_run, [program, refs, device, timeout, receiver], :defn)
        outputs
      end)
    end

    # Runs a stage's program (and its hooks), calls its function on the argument
    # (Nx.BinaryBackend tensors, as Nx expects from compilers) and returns the result's refs on
    # `device`.
    defp runtime_call(stage, refs, %{device: device} = run_opts) do
      outputs = run_program(stage.engine, refs, stage.program.hooks, run_opts)
      argument = stage.argument |> fill(Enum.map(outputs, &Tensor.wrap/1)) |> on_binary_backend()
      result = stage.fun.(argument, stage.opts)

      if not Nx.compatible?(stage.result, result) do
        raise ExBurn.Error.new(
                kind: :shape,
                op: :runtime_call,
                message:
                  "the runtime_call function returned #{inspect(template(result))}, " <>
                    "expected #{inspect(stage.result)}"
              )
      end

      [result]
      |> Composite.flatten_list()
      |> Enum.map(&to_device(&1, device).ref)
    end

    defp on_binary_backend(container),
      do: Composite.traverse(container, &Nx.backend_copy(&1, Nx.BinaryBackend))

    defp used(%{program: %{used: used}}), do: used
    defp used(%{used: used}), do: used

    # What stands for an argument no program reads (one per device, kept).
    defp placeholder(device),
      do: Cache.fetch({:placeholder, device}, fn -> Tensor.new(0.0, device: device).ref end)

    defp materialize(fun) when is_function(fun, 0), do: fun.()
    defp materialize(tensor), do: tensor

    defp fill(template, tensors), do: Hooks.fill(template, tensors)

    defp to_device(%Nx.Tensor{data: %ExBurn.Backend{tensor: %Tensor{device: device} = t}}, device), do: t

    defp to_device(%Nx.Tensor{data: %ExBurn.Backend{tensor: t}}, device), do: Tensor.to_device(t, device)

    defp to_device(%Nx.Tensor{} = t, device) do
      t = Nx.devectorize(t, keep_names: false)
      {type, shape} = ExBurn.Defn.Complex.storage(t.type, t.shape)

      t
      |> Nx.to_binary()
      |> ExBurn.Defn.Narrow.decode(t.type)
      |> Tensor.from_binary(shape, type, device: device)
    end

    defp to_device(number, device) when is_number(number), do: to_device(Nx.tensor(number), device)

    defp device(opts) do
      case opts[:device] do
        nil ->
          case Nx.default_backend() do
            {ExBurn.Backend, backend_opts} -> backend_opts[:device] || ExBurn.default_device()
            _ -> ExBurn.default_device()
          end

        device ->
          ExBurn.Device.normalize!(device)
      end
    end

    @doc false
    # `use ExBurn.Compiler` makes a module another name of this compiler (ExBurn,
    # ExBurn.Defn.Compiler): the behaviour with every callback delegated here.
    defmacro __using__(_opts) do
      quote do
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
  end
end
