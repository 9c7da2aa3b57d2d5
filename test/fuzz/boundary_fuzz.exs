# Generated malformed calls over every NIF and every documented public function of ExBurn, run
# in a child OS process by test/ex_burn/fuzz_test.exs (a crash takes only this VM down).
#
#   elixir -pa _build/test/lib/ex_burn/ebin test/fuzz/boundary_fuzz.exs SEED CALLS
#
# Each call gets random terms, mutations of valid arguments, or valid arguments. A public
# function must return or raise ExBurn.Error; a NIF must answer {:ok, _} or
# {:error, {kind, message}}. Anything else is recorded, and so are a call that holds a normal
# scheduler for a second or more without yielding (the VM's long_schedule monitor) and
# processes left alive at the end. Terms include integers of 2^64 and 2^1,000,000, lists,
# keyword lists and tuples of two million elements (shared through persistent_term, so no
# call copies them), schedules and callbacks giving extreme numbers, and datasets holding NaN
# and infinities. The last line printed is "FUZZ RESULT <base64 of the summary term>". Paths
# handed to functions never leave the working directory (the parent runs this in a temporary
# one).

defmodule ExBurn.Fuzz do
  alias ExBurn.{BurnBridge, Layers, Model, Tensor}

  @ops ~w(exp add sum reshape pad dot conv while cond full iota slice gather sort window_sum
          reduce broadcast as_type select argmax transpose concatenate bogus)a
  @option_names ~w(device type axes axis keep_axes batch_size epochs shuffle seed min max
                   learning_rate optimizer loss momentum beta_1 epsilon clip_norm verbose
                   validation_data callbacks lr_schedule warmup accuracy on_non_finite check_inputs limit
                   precision num_classes ratio convert strict rename metadata name activation
                   kernel_size strides padding channels rate alpha memory_limit default_device
                   dot_precision nx_backend monitor factor min_lr restore_best drop_last)a

  # A call holding a normal scheduler this long without yielding stalls the VM (a bug; the
  # heaviest legitimate NIF work is dirty and Elixir code yields).
  @stall_ms 1_000

  def run(seed, calls) do
    :rand.seed(:exsss, {seed, seed * 7 + 1, seed * 13 + 3})
    fixtures = fixtures()
    targets = targets()
    nifs = ExBurn.Nif.nifs()
    Process.put({__MODULE__, :engine}, Map.to_list(ExBurn.engine_config()))
    before = MapSet.new(Process.list())
    :erlang.system_monitor(self(), [{:long_schedule, @stall_ms}])

    stats =
      Enum.reduce(
        1..calls,
        %{calls: 0, nif: 0, public: 0, ok: 0, errors: %{}, bad: [], slow: [], panics: []},
        fn i, st ->
          if rem(i, 2_000) == 0, do: IO.puts("progress #{i}")

          if :rand.uniform() < 0.4 do
            {name, arity} = Enum.random(nifs)
            st = call_nif(name, arity, fixtures, st)
            if name in [:memory_limit, :config_set], do: reset()
            st
          else
            {mod, fun, arity} = Enum.random(targets)
            st = call_public(mod, fun, arity, fixtures, st)
            if fun == :configure!, do: reset()
            st
          end
        end
      )

    :erlang.system_monitor(:undefined)
    stats = Enum.reduce(left_behind(before, 30), stats, &bad(&2, {:left_behind, &1}))

    %{
      stats
      | bad: Enum.take(Enum.reverse(stats.bad), 50),
        slow: Enum.take(stats.slow, 20),
        panics: Enum.uniq(stats.panics)
    }
    |> Map.put(:targets, length(targets))
    |> Map.put(:nifs, length(nifs))
  end

  # ---- what is called ----

  # Every documented public function of ExBurn's documented modules. ExBurn.Nif.* are
  # compile-time build configuration (not called at run time); ExBurn.Backend and
  # ExBurn.Compiler implement Nx's behaviours and are called by Nx with arguments it validated.
  @behaviour_impls [ExBurn.Backend, ExBurn.Compiler, ExBurn.Defn.Compiler]
  defp targets do
    {:ok, mods} = :application.get_key(:ex_burn, :modules)

    for mod <- mods,
        String.starts_with?(inspect(mod), "ExBurn"),
        not String.starts_with?(inspect(mod), "ExBurn.Nif"),
        mod not in @behaviour_impls,
        Code.ensure_loaded?(mod),
        {:docs_v1, _, _, _, mdoc, _, docs} <- [Code.fetch_docs(mod)],
        mdoc != :hidden,
        {{:function, fun, arity}, _, _, fdoc, _} <- docs,
        fdoc != :hidden,
        fun not in [:exception, :message],
        # __jit__/__compile__/... are Nx.Defn.Compiler callbacks that `ExBurn` carries.
        not String.starts_with?(Atom.to_string(fun), "__") do
      {mod, fun, arity}
    end
  end

  # Processes alive now that were not before the run, once the stopping ones are gone (a
  # stopped process ends shortly after the call that stopped it).
  defp left_behind(before, tries) do
    left = Enum.reject(Process.list(), &MapSet.member?(before, &1))

    cond do
      left == [] ->
        []

      tries == 0 ->
        Enum.map(left, &Process.info(&1, [:current_function, :initial_call, :dictionary]))
        |> Enum.map(&short/1)

      true ->
        Process.sleep(100)
        left_behind(before, tries - 1)
    end
  end

  # Calls that change node-wide settings are undone, so later calls test what they should.
  # The settings a call may have changed, back to what they were when the run started.
  defp reset do
    engine = Process.get({__MODULE__, :engine}) || []
    ExBurn.configure!([default_device: :cpu, memory_limit: :auto, dot_precision: :default] ++ engine)
  end

  defp fixtures do
    t = Tensor.new([[1.0, 2.0], [3.0, 4.0]])
    freed = Tensor.new([1.0])
    Tensor.free(freed)

    model =
      Layers.input("x", shape: {nil, 2})
      |> Layers.dense(3, name: "d")
      |> Model.compile(seed: 1)

    # Huge terms live in persistent_term: handing them to a call's process copies nothing.
    :persistent_term.put({__MODULE__, :huge}, %{
      ints: [2 ** 64, -(2 ** 64), 2 ** 1_000_000, -(2 ** 1_000_000)],
      lists: [
        List.duplicate(1, 2_000_000),
        List.duplicate({:axes, [0]}, 2_000_000),
        List.duplicate(t, 2_000_000),
        List.to_tuple(List.duplicate(0, 2_000_000))
      ]
    })

    %{
      model_bytes: Model.serialize_params(model),
      tensors: [
        t,
        freed,
        Tensor.new([1, 2, 3], type: :s64),
        Tensor.new(0.5),
        BurnBridge.zeros({0, 2}),
        Tensor.new([:nan, :infinity, 1.0]),
        Tensor.new([[1, 2]], type: :u8)
      ],
      model: model,
      layers: Layers.input("x", shape: {nil, 2}),
      data: {t, Tensor.new([0, 1], type: :s64)},
      # NaN and infinities in inputs and in float targets
      odd_data: [
        {Tensor.new([[:nan, 1.0], [:infinity, 2.0]]), Tensor.new([0, 1], type: :s64)},
        {Tensor.new([[:neg_infinity, 1.0], [3.0, 2.0]]),
         Tensor.new([[0.0, :nan, 1.0], [1.0, 0.0, :infinity]])}
      ]
    }
  end

  # ---- random terms ----

  defp pick(list), do: Enum.random(list)

  def term(fx, depth \\ 0) do
    case :rand.uniform(if depth > 2, do: 14, else: 22) do
      1 ->
        pick([0, 1, -1, 2, 7, 255, 256, -129])

      2 ->
        pick([2 ** 31, 2 ** 32, 2 ** 40, 2 ** 63, 2 ** 64, -(2 ** 63) - 1, 2 ** 70, 2 ** 128])

      3 ->
        pick([0.0, -0.0, 1.5, -2.5, 1.0e308, -1.0e308, 5.0e-324, 3.4e38, 1.0e39])

      4 ->
        pick([nil, true, false, :nan, :infinity, :neg_infinity, :cpu, :cuda, :vulkan, :metal])

      5 ->
        pick([
          :f32,
          :f64,
          :s64,
          :u8,
          :pred,
          :bf16,
          :c64,
          :f8,
          {:f, 32},
          {:s, 8},
          {:u, 64},
          {:c, 64},
          {:f, 7},
          {:s, 4}
        ])

      6 ->
        pick(@ops ++ [:low, :high, :same, :valid, :last, :first, :relu, :adam, :sgd, :raise, :skip])

      7 ->
        safe_binary()

      8 ->
        shape()

      9 ->
        pick(fx.tensors)

      10 ->
        pick([fx.model, fx.layers, fx.data, fx.model.ref, hd(fx.tensors).ref])

      11 ->
        pick([self(), make_ref(), fn -> :ok end, fn x -> x end, fn _, _ -> :ok end])

      12 ->
        pick([{:cuda, 0}, {:cuda, -1}, {:cuda, 2 ** 40}, {:tpu, 0}, {:cpu, 0}, {:vulkan, 1}])

      13 ->
        keyword(fx, depth)

      14 ->
        pick([[], {}, %{}, ""])

      15 ->
        for(_ <- 1..:rand.uniform(5), do: term(fx, depth + 1))

      16 ->
        List.to_tuple(for(_ <- 1..:rand.uniform(5), do: term(fx, depth + 1)))

      17 ->
        Map.new(1..:rand.uniform(4), fn _ ->
          {pick(@option_names ++ [:layers, :output, :op, :inputs]), term(fx, depth + 1)}
        end)

      18 ->
        [term(fx, depth + 1) | term(fx, depth + 1)]

      19 ->
        deep()

      20 ->
        large()

      21 ->
        huge()

      22 ->
        pick([extreme(), schedule(), callback(), pick(fx.odd_data)])
    end
  end

  # Integers beyond 64 bits (often), or a list, keyword list or tuple of two million elements.
  defp huge do
    h = :persistent_term.get({__MODULE__, :huge})
    if :rand.uniform() < 0.6, do: pick(h.ints), else: pick(h.lists)
  end

  # Numbers at and beyond the edges of a float, and things that are not numbers.
  defp extreme do
    [two_64, _, two_1m, _] = :persistent_term.get({__MODULE__, :huge}).ints
    pick([1.0e308, -1.0e308, -0.0, 0.0, 5.0e-324, two_64, two_1m, -1, :nan, :infinity, "0.1", nil])
  end

  defp schedule do
    x = fn -> extreme() end

    pick([
      {:exponential, 1.0e300, 1.0e300},
      {:step, x.(), pick([1, 0, 2 ** 64]), x.()},
      {:exponential, x.(), x.()},
      {:cosine, x.(), x.()},
      x.()
    ])
  end

  # Callbacks giving extreme learning rates, other returns, a stop, or an ExBurn.Error.
  defp callback do
    v = extreme()

    pick([
      fn m -> Map.put(m, :learning_rate, v) end,
      fn _ -> v end,
      fn m -> Map.put(m, :stop_training, true) end,
      fn _ -> raise ExBurn.Error.new(kind: :argument, message: "from a callback") end
    ])
  end

  defp keyword(fx, depth) do
    for _ <- 1..:rand.uniform(3), do: {pick(@option_names), term(fx, depth + 1)}
  end

  defp shape do
    dims = for _ <- 0..:rand.uniform(4), do: pick([0, 1, 2, 3, 5, 2 ** 31, 2 ** 40, -1])
    if :rand.uniform() < 0.8, do: List.to_tuple(dims), else: dims
  end

  # Binaries never contain "/" or "~": as paths they stay in the working directory.
  defp safe_binary do
    case :rand.uniform(4) do
      1 -> pick(["abc", "x.safetensors", "ckpt", "", ".", "..", "name", "ok\0bad"])
      2 -> for(_ <- 1..:rand.uniform(40), into: <<>>, do: <<:rand.uniform(256) - 1>>) |> scrub()
      3 -> :binary.copy("a", :rand.uniform(1000))
      4 -> <<0, 0, 8, 3, 0, 0, 0, 2>>
    end
  end

  defp scrub(bin), do: bin |> :binary.replace("/", "_", [:global]) |> :binary.replace("~", "_", [:global])

  defp deep do
    n = pick([200, 2_000, 100_000])
    Enum.reduce(1..n, pick([0, :x, %{}]), fn _, a -> pick([[a], {a}, %{k: a}]) end)
  end

  defp large, do: List.duplicate(pick([0, 1.0, :a]), pick([10_000, 100_000]))

  # ---- arguments: random, mutated valid, or valid ----

  defp args_for(arity, valid, fx) do
    case {:rand.uniform(3), valid} do
      {1, _} -> for _ <- 1..arity//1, do: term(fx)
      {_, nil} -> for _ <- 1..arity//1, do: term(fx)
      {2, v} -> mutate(v, fx)
      {3, v} -> v
    end
  end

  defp mutate([], _fx), do: []

  defp mutate(args, fx) do
    i = :rand.uniform(length(args)) - 1
    List.update_at(args, i, fn a -> mutate_one(a, fx) end)
  end

  defp mutate_one(a, fx) when is_list(a) and a != [] do
    if Keyword.keyword?(a) and :rand.uniform() < 0.7 do
      {k, _} = pick(a)
      Keyword.put(a, k, term(fx))
    else
      term(fx)
    end
  end

  defp mutate_one(a, fx) when is_tuple(a) and tuple_size(a) > 0 and :erlang.element(1, a) != :__struct__ do
    if :rand.uniform() < 0.5,
      do: put_elem(a, :rand.uniform(tuple_size(a)) - 1, term(fx)),
      else: term(fx)
  end

  defp mutate_one(_a, fx), do: term(fx)

  # Valid NIF calls to mutate (one per NIF; the rest start random).
  defp valid_nif(name, fx) do
    [t | _] = fx.tensors
    m = fx.model.ref
    {x, y} = fx.data

    case name do
      :tensor_from_binary ->
        [<<0::32, 0::32>>, {2}, {:f, 32}, :cpu]

      :tensor_to_binary ->
        [t.ref, nil]

      :tensor_info ->
        [t.ref]

      :tensor_to_device ->
        [t.ref, :cpu]

      :tensor_deallocate ->
        [Tensor.new([1.0]).ref]

      :eval_op ->
        [{:sum, %{axes: [0]}}, [t.ref], :cpu]

      :program_build ->
        [%{inputs: 1, instrs: [%{op: :exp, args: [0]}], outputs: [1]}, []]

      :program_run ->
        nil

      :build_info ->
        []

      :device_info ->
        [:cpu]

      :device_sync ->
        [:cpu]

      :memory_limit ->
        [nil]

      :config_get ->
        []

      :config_set ->
        [elem(ExBurn.Nif.config_get(), 1)]

      :model_new ->
        [
          fx.model.spec,
          %{loss: :mse, optimizer: %{kind: :sgd}, seed: 0, learning_rate: 0.1, dtype: {:f, 32}},
          :cpu
        ]

      :spec_info ->
        [fx.model.spec]

      :model_train_step ->
        [m, [x.ref], y.ref, %{learning_rate: 0.01, on_non_finite: :raise}]

      :model_train_epoch ->
        [m, [x.ref], y.ref, epoch_opts(), nil, nil, []]

      :model_evaluate ->
        [m, [x.ref], y.ref, %{batch_size: 2, accuracy: true}]

      :model_predict ->
        [m, [x.ref], 2]

      :model_gradients ->
        [m, [x.ref], y.ref]

      :model_profile_step ->
        [m, [x.ref], y.ref, 0.01]

      :model_call ->
        [
          m,
          pick([
            :info,
            :parameters,
            :meta,
            {:freeze, ["d"]},
            {:unfreeze, []},
            {:save, "fz.safetensors"},
            {:cast, {:f, 64}}
          ])
        ]

      :model_set_parameters ->
        [m, [{"d.bias", Tensor.new([0.0, 0.0, 0.0]).ref}], false]

      :model_load ->
        [{:bytes, fx.model_bytes}, :cpu]

      :tensors_save ->
        [[{"a", t.ref}], "fz_tensors.safetensors", [{"k", "v"}]]

      :tensors_load ->
        [{:path, "fz_tensors.safetensors"}, :cpu]

      _ ->
        nil
    end
    |> then(fn v -> v && Enum.map(v, &scrub_paths/1) end)
  end

  defp epoch_opts,
    do: %{
      epoch: 1,
      batch_size: 2,
      shuffle: nil,
      lrs: [0.01],
      warmup: 0,
      first_step: 0,
      accumulate: 1,
      progress_every: 0,
      accuracy: true,
      on_non_finite: :raise,
      check_inputs: pick([true, false])
    }

  defp scrub_paths(b) when is_binary(b), do: scrub(b)
  defp scrub_paths(other), do: other

  # ---- calling ----

  defp call_nif(name, arity, fx, st) do
    args = args_for(arity, valid_nif(name, fx), fx) |> Enum.map(&safe_for_paths/1)
    st = %{st | calls: st.calls + 1, nif: st.nif + 1}

    case timed(fn -> apply(ExBurn.Nif, name, args) end, args) do
      {:stalled, ms, _} -> bad(st, {:nif, name, :stalled_ms, ms, short(args)})
      {:ok, {:ok, _}} -> %{st | ok: st.ok + 1}
      {:ok, {:error, {kind, msg}}} when is_atom(kind) and is_binary(msg) -> count(st, kind, {name, msg})
      {:ok, other} -> bad(st, {:nif, name, :bad_reply, short(other), short(args)})
      {:raised, e} -> bad(st, {:nif, name, e.__struct__, short(Exception.message(e)), short(args)})
      {:caught, kind, v} -> bad(st, {:nif, name, kind, short(v), short(args)})
      :timeout -> %{st | slow: [{:nif, name, short(args)} | st.slow]}
    end
  end

  # A request to save goes to a scrubbed relative path.
  defp safe_for_paths({:save, p}) when is_binary(p), do: {:save, scrub(p)}
  defp safe_for_paths(other), do: other

  defp call_public(mod, fun, arity, fx, st) do
    args = args_for(arity, valid_public(mod, fun, arity, fx), fx)
    st = %{st | calls: st.calls + 1, public: st.public + 1}

    case timed(fn -> apply(mod, fun, args) end, args) do
      {:stalled, ms, _} -> bad(st, {mod, fun, arity, :stalled_ms, ms, short(args)})
      {:ok, _} -> %{st | ok: st.ok + 1}
      {:raised, %ExBurn.Error{kind: kind, message: msg}} -> count(st, kind, {mod, fun, msg})
      {:raised, e} -> bad(st, {mod, fun, arity, e.__struct__, short(Exception.message(e)), short(args)})
      {:caught, kind, v} -> bad(st, {mod, fun, arity, kind, short(v), short(args)})
      :timeout -> %{st | slow: [{mod, fun, arity, short(args)} | st.slow]}
    end
  end

  # Valid calls of the public API to mutate.
  defp valid_public(mod, fun, arity, fx) do
    [t | _] = fx.tensors

    case {mod, fun, arity} do
      {ExBurn.Training, :fit, 3} -> [fx.model, pick([fx.data | fx.odd_data]), fit_opts()]
      {ExBurn.Training, :schedule_lr, 3} -> [schedule(), pick([0, 1, 5, 2 ** 64]), pick([1, 10])]
      {ExBurn.Dataset, fun, _} when fun in [:stats, :split, :shuffle] -> [pick([fx.data | fx.odd_data])]
      {ExBurn.Training, :train_step, _} -> [fx.model, fx.data, []]
      {ExBurn.Training, :evaluate, _} -> [fx.model, fx.data, []]
      {ExBurn.Training, :predict, _} -> [fx.model, elem(fx.data, 0), []]
      {ExBurn.Model, :compile, 2} -> [Layers.dense(fx.layers, 2), [optimizer: :sgd, learning_rate: 0.1]]
      {ExBurn.Model, :save, 2} -> [fx.model, "fz_model.safetensors"]
      {ExBurn.Model, :load, 2} -> ["fz_model.safetensors", []]
      {ExBurn.Model, :put_parameters, _} -> [fx.model, %{"d.bias" => Tensor.new([0.0, 0.0, 0.0])}, []]
      {ExBurn.Layers, :dense, _} -> [fx.layers, 4, [activation: :relu]]
      {ExBurn.Layers, :conv, _} -> [Layers.input("i", shape: {nil, 6, 6, 1}), 2, [kernel_size: 3]]
      {ExBurn.BurnBridge, :pad, 3} -> [t, 0.0, [{1, 1, 0}, {0, 0, 1}]]
      {ExBurn.BurnBridge, :slice, _} -> [t, [0, 0], [1, 2], nil]
      {ExBurn.BurnBridge, _, 1} -> [t]
      {ExBurn.BurnBridge, _, 2} -> [t, t]
      {ExBurn.Dataset, :loader, _} -> [fx.data, [batch_size: 1]]
      {ExBurn.Dataset, :one_hot, 2} -> [Tensor.new([0, 1], type: :s64), [num_classes: 3]]
      {ExBurn.Tensor, :new, _} -> [[1.0, 2.0], [type: :f64]]
      {ExBurn.Tensor, :from_binary, _} -> [<<0::64>>, {2}, :f32, []]
      {ExBurn.Op, :eval, 4} -> [:sum, [t], [axes: [0]], []]
      _ -> nil
    end
  end

  defp fit_opts do
    [epochs: pick([1, 2, 3]), batch_size: 2, verbose: pick([false, false, true])]
    |> Keyword.put(:lr_schedule, pick([nil, schedule()]))
    |> Keyword.put(:callbacks, pick([[], [callback()], [callback(), callback()]]))
    |> Keyword.put(:on_non_finite, pick([:raise, :skip, :stop]))
    |> Keyword.put(:check_inputs, pick([true, false]))
  end

  defp timed(fun, args) do
    task =
      Task.async(fn ->
        try do
          result = fun.()
          # Lazy results (streams) are run too, unless the call gave back one of its own arguments
          # (the generated functions are not streams).
          if (is_struct(result, Stream) or is_function(result, 2)) and result not in args,
            do: Stream.run(Stream.take(result, 3))

          {:ok, result}
        rescue
          e -> {:raised, e}
        catch
          kind, v -> {:caught, kind, v}
        end
      end)

    result =
      case Task.yield(task, 15_000) || Task.shutdown(task, :brutal_kill) do
        {:ok, r} -> r
        {:exit, reason} -> {:caught, :exit, reason}
        nil -> :timeout
      end

    case stalls(task.pid, 0) do
      0 -> result
      ms -> {:stalled, ms, result}
    end
  end

  # The longest time (ms) `pid` held a normal scheduler without yielding, past @stall_ms.
  defp stalls(pid, acc) do
    receive do
      {:monitor, ^pid, :long_schedule, info} -> stalls(pid, max(acc, info[:timeout]))
      {:monitor, _other, :long_schedule, _} -> stalls(pid, acc)
    after
      0 -> acc
    end
  end

  # Caught panics are ExBurn.Error too, but each is a check that should have come first: kept
  # for the report.
  defp count(st, kind, where) do
    st = %{st | errors: Map.update(st.errors, kind, 1, &(&1 + 1))}
    if kind == :panic and length(st.panics) < 30, do: %{st | panics: [short(where) | st.panics]}, else: st
  end

  defp bad(st, entry), do: %{st | bad: [entry | st.bad]}
  # Bounded (ExBurn.Format: bignums by bit size); inspect would print 2^1,000,000 in full.
  defp short(term), do: ExBurn.Format.term(term) |> String.slice(0, 300)
end

:ok = Application.load(:ex_burn)
[seed, calls] = System.argv() |> Enum.map(&String.to_integer/1)
IO.puts("seed #{seed}")
summary = ExBurn.Fuzz.run(seed, calls)
IO.puts("FUZZ RESULT " <> Base.encode64(:erlang.term_to_binary(summary)))
