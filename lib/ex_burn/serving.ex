if Code.ensure_loaded?(Nx) do
  defmodule ExBurn.Serving do
    alias ExBurn.Options

    @new_opts [
      device: [
        type: {:or, [nil, :device]},
        default: nil,
        doc: "where the computation runs (default `ExBurn.default_device/0`)"
      ],
      output: [
        type: {:in, [:device, :host]},
        default: :device,
        doc:
          "`:device` answers with `ExBurn.Backend` tensors on the device (each client slices its rows " <>
            "out of the batch result there); `:host` copies each batch result to `Nx.BinaryBackend` " <>
            "once, in the serving process, and clients slice it on the host: one device read per batch " <>
            "instead of one per request, for servers that send results away (CPU, 32-row batches of a " <>
            "small MLP: 32k -> 47k requests/s; `bench/results/defn_cpu.md`)"
      ],
      defn_options: [
        type: :keyword,
        default: [],
        doc: "more options for `ExBurn.Compiler` (for example `max_concurrency: 2` with `partitions: true`)"
      ]
    ]
    @batching_opts [
      batch_size: [
        type: {:or, [nil, :pos_integer]},
        default: nil,
        doc: "the largest batch run at once (inputs are padded or split to it)"
      ],
      batch_timeout: [
        type: {:or, [nil, :non_neg_integer]},
        default: nil,
        doc: "milliseconds to wait for a batch to fill (Nx's default is 100)"
      ],
      partitions: [
        type: {:or, [nil, :boolean]},
        default: nil,
        doc: "start one partition per `:max_concurrency`"
      ]
    ]

    @moduledoc """
    Batched, concurrent inference with `Nx.Serving` on Burn, for a defn function (compiled by
    `ExBurn.Compiler`) or a compiled `ExBurn.Model`.

        serving = ExBurn.Serving.build(&MyModel.predict/1, batch_size: 32, batch_timeout: 5)

        children = [{Nx.Serving, serving: serving, name: MyServing}]
        ExBurn.Serving.run(MyServing, Nx.tensor([[1.0, 2.0]]))

    The result is an `Nx.Serving` struct, so everything of Nx.Serving works unchanged:
    supervision, `partitions: true` (one partition per `:max_concurrency`), and distribution
    across nodes (`Nx.Serving.batched_run({:distributed, name}, batch)`).

    ## Options (`new/2` and `build/2`)

    #{ExBurn.Options.docs(@new_opts)}

    `build/2` also takes:

    #{ExBurn.Options.docs(@batching_opts)}
    """

    @type target ::
            (Nx.Tensor.t() -> Nx.Container.t())
            | {(Nx.Container.t(), Nx.Tensor.t() -> Nx.Container.t()), Nx.Container.t()}
            | struct()
    @type name :: atom() | {:local, atom()} | {:distributed, atom()}

    @doc """
    A serving running `target` on each batch, compiled with `ExBurn.Compiler`:

      * a function of one batch tensor (a `defn` function or any Nx function)
      * `{fun, params}`: a function of parameters and a batch, with its parameters (moved to
        the device once, passed as arguments so the program does not embed them)
      * an `ExBurn.Model` (its `ExBurn.Model.predict/3`)

    Results sent to other nodes are copied to `Nx.BinaryBackend` first (device memory does not
    cross nodes). Options are listed in the module docs.
    """
    @spec new(target(), keyword()) :: Nx.Serving.t()
    def new(target, opts \\ []) do
      opts = Options.validate!(opts, @new_opts, :serving)
      device = opts[:device] || ExBurn.default_device()
      defn_options = [compiler: ExBurn.Compiler, device: device] ++ opts[:defn_options]
      batch_fun = batch_fun(target)
      output = output_fun(opts[:output])

      fn defn_opts -> output.(batch_fun.(defn_opts)) end
      |> Nx.Serving.new(defn_options)
      |> Nx.Serving.distributed_postprocessing(&to_binary_backend/1)
    end

    defp to_binary_backend(output),
      do: Nx.Defn.Composite.traverse(output, &Nx.backend_transfer(&1, Nx.BinaryBackend))

    defp output_fun(:device), do: & &1
    defp output_fun(:host), do: fn run -> &to_binary_backend(run.(&1)) end

    # For the compiler options Nx.Serving passes, the function it runs on each batch.
    defp batch_fun(fun) when is_function(fun, 1), do: &Nx.Defn.jit(fun, &1)

    defp batch_fun({fun, params}) when is_function(fun, 2) do
      fn opts ->
        params =
          Nx.Defn.Composite.traverse(params, &Nx.backend_copy(&1, {ExBurn.Backend, device: opts[:device]}))

        jitted = Nx.Defn.jit(fun, opts)
        &jitted.(params, &1)
      end
    end

    defp batch_fun(%ExBurn.Model{} = model), do: fn opts -> &predict(model, &1, opts) end

    defp batch_fun(other) do
      raise ExBurn.Error.new(
              kind: :argument,
              op: :serving,
              message: "expected a function of one batch or an ExBurn.Model, got #{Options.short(other)}"
            )
    end

    # Realises the batch on the model's device, runs the model, returns an Nx tensor.
    defp predict(model, batch, opts) do
      input = Nx.Defn.jit_apply(&Function.identity/1, [batch], opts)

      case ExBurn.Model.predict(model, ExBurn.Backend.burn_tensor(input)) do
        {:ok, out} -> ExBurn.Backend.nx_tensor(out)
        {:error, error} -> raise error
      end
    end

    @doc """
    `new/2` plus the batching options `:batch_size`, `:batch_timeout` and `:partitions`:
    a serving ready for `{Nx.Serving, serving: serving, name: name}`.
    """
    @spec build(target(), keyword()) :: Nx.Serving.t()
    def build(target, opts \\ []) do
      unless is_list(opts) and Options.proper_list?(opts) and Keyword.keyword?(opts),
        do: Options.fail(:serving, "options must be a keyword list, got #{Options.short(opts)}")

      {batching, opts} = Keyword.split(opts, Keyword.keys(@batching_opts))
      batching = Options.validate!(batching, @batching_opts, :serving)
      serving = new(target, opts)
      serving = if n = batching[:batch_size], do: with_batch_size(serving, n), else: serving
      serving = if ms = batching[:batch_timeout], do: with_timeout(serving, ms), else: serving

      case batching[:partitions] do
        nil -> serving
        p -> put_process_option(serving, :partitions, p)
      end
    end

    @doc "Sets the largest batch the serving runs at once."
    @spec with_batch_size(Nx.Serving.t(), pos_integer()) :: Nx.Serving.t()
    def with_batch_size(%Nx.Serving{} = serving, size) do
      Nx.Serving.batch_size(serving, Options.check!(size, :pos_integer, "batch size", :serving))
    end

    def with_batch_size(other, _size),
      do: Options.fail(:serving, "expected an Nx.Serving, got #{Options.short(other)}")

    @doc "Sets how long (milliseconds) a started serving waits for a batch to fill."
    @spec with_timeout(Nx.Serving.t(), non_neg_integer()) :: Nx.Serving.t()
    def with_timeout(%Nx.Serving{} = serving, ms) do
      put_process_option(serving, :batch_timeout, Options.check!(ms, :non_neg_integer, "timeout", :serving))
    end

    def with_timeout(other, _ms),
      do: Options.fail(:serving, "expected an Nx.Serving, got #{Options.short(other)}")

    defp put_process_option(serving, key, value),
      do: Nx.Serving.process_options(serving, Keyword.put(serving.process_options, key, value))

    @doc """
    Runs `input` (a tensor whose first axis is the batch, or an `Nx.Batch`): inline for a
    serving struct, through the started serving for a name (`{:distributed, name}` picks a
    serving on any connected node).
    """
    @spec run(Nx.Serving.t() | name(), Nx.Tensor.t() | Nx.Batch.t()) :: Nx.Container.t()
    def run(%Nx.Serving{} = serving, input), do: Nx.Serving.run(serving, batch(input))

    # Device memory does not cross nodes: inputs for other nodes go as binaries.
    def run({:distributed, _} = name, %Nx.Tensor{} = input),
      do: Nx.Serving.batched_run(name, batch(Nx.backend_copy(input, Nx.BinaryBackend)))

    def run(name, input), do: Nx.Serving.batched_run(name, batch(input))

    defp batch(%Nx.Batch{} = batch), do: batch
    defp batch(%Nx.Tensor{} = tensor), do: Nx.Batch.concatenate([tensor])

    defp batch(other),
      do: Options.fail(:serving, "expected a tensor or an Nx.Batch, got #{Options.short(other)}")

    @doc """
    Where the serving `name` runs: `%{name: name, running: boolean, local: pid | nil,
    nodes: %{node => processes}}` (processes are counted with their partition weight).
    """
    @spec status(atom()) :: map()
    def status(name) when not is_atom(name), do: Options.fail(:serving, "expected a serving name (an atom)")

    def status(name) do
      members = if Process.whereis(Nx.Serving.PG), do: :pg.get_members(Nx.Serving.PG, name), else: []
      local = Enum.find(members, &(node(&1) == node()))
      nodes = Enum.frequencies_by(members, &node/1)
      %{name: name, running: members != [], local: local, nodes: nodes}
    end
  end
end
