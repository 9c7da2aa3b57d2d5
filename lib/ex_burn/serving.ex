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
        doc:
          "more options for `ExBurn.Compiler` (for example `max_concurrency: 2` or " <>
            "`devices: [{:cuda, 0}, {:cuda, 1}]` with `partitions: true`)"
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
        doc:
          "run one partition per device (every GPU of the device's family, or the `:devices` " <>
            "given in `:defn_options`), each `:max_concurrency` times"
      ]
    ]

    @moduledoc """
    Batched, concurrent inference with `Nx.Serving` on Burn, for a defn function (compiled by
    `ExBurn.Compiler`) or a compiled `ExBurn.Model`.

        serving = ExBurn.Serving.build(&MyModel.predict/1, batch_size: 32, batch_timeout: 5)

        children = [{Nx.Serving, serving: serving, name: MyServing}]
        ExBurn.Serving.run(MyServing, Nx.tensor([[1.0, 2.0]]))

    Each batch a partition runs is a telemetry span, `[:ex_burn, :serving, :batch, :start |
    :stop | :exception]`, with metadata `%{device: device, size: rows}` (on a GPU, `:stop`
    comes when the batch's work is queued; reading the results waits for it).

    The result is an `Nx.Serving` struct, so everything of Nx.Serving works unchanged:
    supervision, `partitions: true` (one partition per device: every GPU of the host, each
    batch placed on a free one; `:max_concurrency` partitions per device), and distribution
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

      fn defn_opts -> defn_opts[:device] |> traced(output.(batch_fun.(defn_opts))) end
      |> Nx.Serving.new(defn_options)
      |> distributed()
    end

    @doc """
    Makes any `Nx.Serving` (one that Bumblebee or your own code built, running on ExBurn) safe
    to call from other nodes: results sent to another node are copied to `Nx.BinaryBackend`
    first, after the serving's own distributed postprocessing (device memory does not cross
    nodes; an ExBurn tensor received on another node has no data). Streaming results are
    copied event by event.

        serving = Bumblebee.Text.generation(model_info, tokenizer, config) |> ExBurn.Serving.distributed()
        children = [{Nx.Serving, serving: serving, name: MyServing}]

    Callers on other nodes send tensors the same way: `run/2` does it for
    `{:distributed, name}`, or pass `&ExBurn.Serving.to_host/1` as the third argument of
    `Nx.Serving.batched_run/3`. Servings made by `new/2` and `build/2` are already distributed.
    """
    @spec distributed(Nx.Serving.t()) :: Nx.Serving.t()
    def distributed(%Nx.Serving{distributed_postprocessing: post} = serving),
      do: Nx.Serving.distributed_postprocessing(serving, &moved_to_host(post.(&1)))

    def distributed(other),
      do: Options.fail(:serving, "expected an Nx.Serving, got #{Options.short(other)}")

    @doc """
    `term` with every tensor in it copied to `Nx.BinaryBackend` (tensors already there are
    kept): in containers, lists, tuples, maps and structs, and lazily in streams. For
    sending inputs or results to other nodes.
    """
    @spec to_host(term()) :: term()
    def to_host(term) do
      each_tensor(term, &Nx.backend_copy(&1, Nx.BinaryBackend), false)
    rescue
      e in ExBurn.Error ->
        reraise e, __STACKTRACE__

      e ->
        reraise ExBurn.Error.new(
                  kind: :argument,
                  op: :to_host,
                  message: "cannot copy the tensors of this term (#{inspect(e.__struct__)})"
                ),
                __STACKTRACE__
    end

    # A result this process computed and sends away (streams too): its device memory is freed
    # at once.
    defp moved_to_host(term), do: each_tensor(term, &Nx.backend_transfer(&1, Nx.BinaryBackend), true)

    # `term` with `fun` applied to each tensor in it. Parts without a tensor are returned as
    # they are, not rebuilt: a term of millions of plain values (or of ExBurn.Tensor structs,
    # which are not Nx tensors) costs one walk and no allocation, so no garbage collection
    # of a copy holds the scheduler.
    defp each_tensor(term, fun, streams?) do
      case walk(term, fun, streams?) do
        :same -> term
        {:new, new} -> new
      end
    end

    # :same, or {:new, term} when a tensor (or stream) inside was replaced.
    # templates (e.g. an Nx.Batch's) have no data to copy
    defp walk(%Nx.Tensor{data: %backend{}}, _fun, _streams?)
         when backend in [Nx.BinaryBackend, Nx.TemplateBackend],
         do: :same

    defp walk(%Nx.Tensor{} = tensor, fun, _streams?), do: {:new, fun.(tensor)}

    # a batch holds closures over its entries: its rows, materialised, make the new batch
    defp walk(%Nx.Batch{stack: [_ | _]} = batch, fun, streams?) do
      rows = Nx.Defn.jit_apply(&Function.identity/1, [%{batch | pad: 0}], compiler: Nx.Defn.Evaluator)

      {:new, %{Nx.Batch.concatenate([each_tensor(rows, fun, streams?)]) | pad: batch.pad, key: batch.key}}
    end

    # a streaming serving's result: copied event by event
    defp walk(%Stream{} = stream, fun, true), do: {:new, Stream.map(stream, &each_tensor(&1, fun, true))}

    defp walk(stream, fun, true) when is_function(stream, 2),
      do: {:new, Stream.map(stream, &each_tensor(&1, fun, true))}

    defp walk(list, fun, streams?) when is_list(list), do: walk_list(list, list, 0, fun, streams?)

    defp walk(tuple, fun, streams?) when is_tuple(tuple),
      do: walk_tuple(tuple, 0, tuple_size(tuple), fun, streams?)

    # structs too (their __struct__ key is kept)
    defp walk(map, fun, streams?) when is_map(map),
      do: walk_map(:maps.next(:maps.iterator(map)), map, fun, streams?)

    defp walk(_other, _fun, _streams?), do: :same

    # Unchanged so far: `seen` elements of `list` are kept as they are.
    defp walk_list([h | t], list, seen, fun, streams?) do
      case walk(h, fun, streams?) do
        :same -> walk_list(t, list, seen + 1, fun, streams?)
        {:new, new} -> {:new, Enum.take(list, seen) ++ [new | rebuild_list(t, fun, streams?, [])]}
      end
    end

    defp walk_list([], _list, _seen, _fun, _streams?), do: :same

    # an improper list keeps its tail
    defp walk_list(tail, list, seen, fun, streams?) do
      case walk(tail, fun, streams?) do
        :same -> :same
        {:new, new} -> {:new, :lists.reverse(Enum.reverse(Enum.take(list, seen)), new)}
      end
    end

    defp rebuild_list([h | t], fun, streams?, acc),
      do: rebuild_list(t, fun, streams?, [each_tensor(h, fun, streams?) | acc])

    defp rebuild_list([], _fun, _streams?, acc), do: Enum.reverse(acc)
    defp rebuild_list(tail, fun, streams?, acc), do: :lists.reverse(acc, each_tensor(tail, fun, streams?))

    defp walk_tuple(_tuple, i, n, _fun, _streams?) when i == n, do: :same

    defp walk_tuple(tuple, i, n, fun, streams?) do
      case walk(elem(tuple, i), fun, streams?) do
        :same ->
          walk_tuple(tuple, i + 1, n, fun, streams?)

        {:new, new} ->
          rest = for j <- (i + 1)..(n - 1)//1, do: each_tensor(elem(tuple, j), fun, streams?)
          {:new, List.to_tuple(Enum.map(0..(i - 1)//1, &elem(tuple, &1)) ++ [new | rest])}
      end
    end

    defp walk_map(:none, _map, _fun, _streams?), do: :same

    defp walk_map({k, v, iterator}, map, fun, streams?) do
      case walk(v, fun, streams?) do
        :same -> walk_map(:maps.next(iterator), map, fun, streams?)
        {:new, new} -> {:new, rebuild_map(:maps.next(iterator), fun, streams?, Map.put(map, k, new))}
      end
    end

    defp rebuild_map(:none, _fun, _streams?, map), do: map

    defp rebuild_map({k, v, iterator}, fun, streams?, map),
      do: rebuild_map(:maps.next(iterator), fun, streams?, Map.put(map, k, each_tensor(v, fun, streams?)))

    # Each batch as a telemetry span naming the partition's device.
    defp traced(device, run) do
      fn batch ->
        meta = %{device: device, size: batch.size}
        :telemetry.span([:ex_burn, :serving, :batch], meta, fn -> {run.(batch), meta} end)
      end
    end

    defp output_fun(:device), do: & &1
    defp output_fun(:host), do: fn run -> &moved_to_host(run.(&1)) end

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
    def run({:distributed, _} = name, input), do: Nx.Serving.batched_run(name, batch(input), &to_host/1)

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
