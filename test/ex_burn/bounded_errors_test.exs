defmodule ExBurn.BoundedErrorsTest do
  # Issue 31, classes 1, 2, 6 and 7: errors format user values within a bound and never hold a
  # normal scheduler; sizes are checked before anything proportional to them is built; every
  # failure is an ExBurn.Error and leaves no process behind.
  #
  # Stalls are measured with the VM's own monitor (`:erlang.system_monitor/2`, `long_schedule`):
  # how long the calling process held a normal scheduler without yielding, whatever else the
  # machine does. The bounds are 10-20x below what each call took before its fix.
  use ExUnit.Case, async: false

  import Bitwise
  alias ExBurn.{BurnBridge, Dataset, Format, Layers, Model, Op, Options, Tensor, Training}
  import ExBurn.Test.Boundary, only: [error: 1, data: 0, data: 1]

  @moduletag :tmp_dir

  @huge 1 <<< 1_000_000

  # Runs `fun` in a process of its own; returns its result (or the ExBurn.Error it raised) and
  # the longest time it held a normal scheduler in one go (ms; 0 when never over 50 ms).
  defp held(fun) do
    previous = :erlang.system_monitor(self(), [{:long_schedule, 50}])

    task =
      Task.async(fn ->
        try do
          {:ok, fun.()}
        rescue
          e in ExBurn.Error -> {:error, e}
        end
      end)

    result = Task.await(task, 120_000)
    restore(previous)
    {result, longest(task.pid, 0)}
  end

  defp restore(:undefined), do: :erlang.system_monitor(:undefined)
  defp restore({pid, opts}), do: :erlang.system_monitor(pid, opts)

  defp longest(pid, acc) do
    receive do
      {:monitor, ^pid, :long_schedule, info} -> longest(pid, max(acc, info[:timeout]))
      {:monitor, _other, _, _} -> longest(pid, acc)
    after
      0 -> acc
    end
  end

  defp mlp(opts \\ []) do
    Layers.input("x", shape: {nil, 4})
    |> Layers.dense(3, name: "d")
    |> Model.compile(Keyword.merge([seed: 1, optimizer: :sgd, learning_rate: 0.1], opts))
  end

  describe "class 1: error messages are bounded and quick" do
    test "integers beyond 64 bits print their bit size, in every argument position" do
      t = Tensor.new([1.0, 2.0])
      x = Layers.input("x", shape: {nil, 2})

      calls = [
        fn -> Tensor.from_binary(<<>>, {@huge}, :f32) end,
        fn -> Tensor.from_binary(<<>>, [@huge], :f32) end,
        fn -> Tensor.to_binary(t, limit: @huge) end,
        fn -> Tensor.new([1.0], type: {:f, @huge}) end,
        fn -> Tensor.to_device(t, {:cuda, @huge}) end,
        fn -> ExBurn.Type.normalize!({:f, @huge}) end,
        fn -> BurnBridge.full({2, @huge}, 1.0) end,
        fn -> BurnBridge.add(t, @huge) end,
        fn -> BurnBridge.slice(t, [@huge], [1]) end,
        fn -> Op.eval(:sum, [t], axes: [@huge]) end,
        fn -> Layers.dense(x, @huge) end,
        fn -> Dataset.one_hot(Tensor.new([0], type: :s64), num_classes: @huge) end,
        fn -> Training.fit(mlp(), data(), epochs: @huge, verbose: false) end,
        fn -> Training.schedule_lr({:step, 0.1, @huge, 0.5}, 1, 2) end,
        fn -> Model.compile(x, seed: @huge) end,
        fn -> ExBurn.configure!(memory_limit: -@huge) end
      ]

      for call <- calls do
        {{:error, e}, ms} = held(call)
        assert ms < 500, "#{e.message}: held a scheduler #{ms} ms"
        assert byte_size(e.message) < 1_000
        refute e.message =~ ~r/\d{30}/
      end

      # The native boundary answers the same way when called directly.
      for args <- [
            [<<>>, {@huge}, {:f, 32}, :cpu],
            [<<>>, {2}, {:f, @huge}, :cpu],
            [<<>>, {2}, {:f, 32}, {:cuda, @huge}]
          ] do
        {{:ok, {:error, {:argument, msg}}}, ms} = held(fn -> apply(ExBurn.Nif, :tensor_from_binary, args) end)
        assert ms < 500
        assert msg =~ "64" and byte_size(msg) < 1_000
      end

      {{:ok, {:error, {:argument, msg}}}, _} = held(fn -> ExBurn.Nif.tensor_to_binary(t.ref, -@huge) end)
      assert msg =~ "beyond 64 bits"
    end

    test "the bounded rendering: sizes for big things, one budget for the whole term" do
      assert Format.term(1 <<< 64) == "<an integer of 65 bits>"
      assert Format.term(-(1 <<< 10_000_000)) == "<a negative integer of 10000001 bits>"
      assert Format.term((1 <<< 64) - 1) == "18446744073709551615"
      assert Format.bit_size(@huge - 1) == 1_000_000
      assert Format.bit_size(1 <<< 2047) == 2048

      # 8^30 nodes sharing one subterm each level; a 5M list; a map of 100,000 keys. Each is
      # built where it is rendered: a message or a spawn copies a term without its sharing.
      makers = [
        fn -> Enum.reduce(1..30, 0, fn _, a -> List.duplicate(a, 8) end) end,
        fn -> List.duplicate(1.0, 2_000_000) end,
        fn -> Map.new(1..100_000, &{&1, &1}) end,
        fn -> :binary.copy("x", 10_000_000) end
      ]

      for make <- makers do
        {{:ok, {text, ms}}, _} =
          held(fn ->
            term = make.()
            {us, text} = :timer.tc(fn -> Format.term({term, term}) end)
            {text, div(us, 1000)}
          end)

        assert byte_size(text) < 2_000 and ms < 200
      end

      long = List.duplicate(1.0, 2_000_000)
      wide = Map.new(1..100_000, &{&1, &1})

      assert Format.term(long) =~ "more than 10000 elements"
      assert Format.term(wide) =~ "100000 keys"
      assert Format.term(:binary.copy("x", 10_000_000)) =~ "10000000 bytes"
      # Structs show their fields: the Inspect of a tensor reads the device, never called here.
      assert Format.term(Tensor.new([1.0])) =~ "shape: {1}"
    end

    test "option lists, attribute lists and argument lists of millions are refused unread" do
      t = Tensor.new([1.0, 2.0])
      model = mlp()
      kw = fn -> List.duplicate({:axes, [0]}, 2_000_000) end
      many = fn -> List.duplicate(t, 2_000_000) end

      calls = [
        fn -> Tensor.from_binary(<<0::64>>, {2}, :f32, kw.()) end,
        fn -> Op.eval(:sum, [t], kw.()) end,
        fn -> Op.eval(:add, many.()) end,
        fn -> Tensor.from_binary(<<>>, List.duplicate(1, 2_000_000), :f32) end,
        fn -> Tensor.from_binary(<<>>, List.to_tuple(List.duplicate(1, 2_000_000)), :f32) end,
        fn -> Training.predict(model, many.()) end,
        fn -> ExBurn.Error.new(List.duplicate({:kind, :x}, 2_000_000)) end
      ]

      # The lists are built inside the measured process: what is measured is the longest
      # stretch without yielding (building a list yields; a BIF or NIF over it would not).
      for call <- calls do
        {{:error, e}, ms} = held(call)
        assert e.kind == :argument
        assert ms < 500, "#{e.message}: held a scheduler #{ms} ms"
        assert byte_size(e.message) < 1_000
      end
    end

    test "the native boundary refuses long lists after a bounded look, or decodes them dirty" do
      t = Tensor.new([1.0, 2.0])
      model = mlp()

      calls = [
        fn -> ExBurn.Nif.eval_op(:add, List.duplicate(t.ref, 2_000_000), :cpu) end,
        fn -> ExBurn.Nif.eval_op({:sum, List.duplicate({:axes, [0]}, 2_000_000)}, [t.ref], :cpu) end,
        fn -> ExBurn.Nif.eval_op({:sum, List.to_tuple(List.duplicate(1, 2_000_000))}, [t.ref], :cpu) end,
        fn ->
          ExBurn.Nif.tensor_from_binary(<<>>, List.to_tuple(List.duplicate(1, 2_000_000)), {:f, 32}, :cpu)
        end,
        fn ->
          ExBurn.Nif.model_set_parameters(model.ref, List.duplicate({"d.bias", t.ref}, 2_000_000), false)
        end
      ]

      for call <- calls do
        {{:ok, {:error, {_kind, msg}}}, ms} = held(call)
        assert ms < 500, "#{msg}: held a scheduler #{ms} ms"
        assert byte_size(msg) < 5_000
      end
    end

    test "60,000 handles given to a NIF directly are decoded on a dirty scheduler" do
      t = Tensor.new([1.0])
      refs = List.duplicate(t.ref, 60_000)
      attrs = %{axis: 0}

      {{:ok, {:ok, [out]}}, ms} = held(fn -> ExBurn.Nif.eval_op({:concatenate, attrs}, refs, :cpu) end)
      assert ms == 0, "eval_op held a normal scheduler #{ms} ms"
      assert ExBurn.Tensor.wrap(out).shape == {60_000}

      program = ExBurn.Native.call(:program_build, [%{inputs: 60_000, instrs: [], outputs: [0]}, []])
      {{:ok, {:ok, {[_], []}}}, ms} = held(fn -> ExBurn.Nif.program_run(program, refs, :cpu, nil, nil) end)
      assert ms == 0, "program_run held a normal scheduler #{ms} ms"
    end

    test "concatenating 60,000 tensors never holds a scheduler for long, and is right" do
      ts = for i <- 1..60_000, do: Tensor.new([i])
      {{:ok, joined}, ms} = held(fn -> BurnBridge.concatenate(ts) end)
      assert ms < 300, "held a scheduler #{ms} ms"
      assert Tensor.to_list(joined) == Enum.to_list(1..60_000)

      rows = for i <- 1..3_000, do: Tensor.new([[i, -i]])
      {{:ok, stacked}, ms} = held(fn -> BurnBridge.stack(rows, 1) end)
      assert ms < 300
      assert stacked.shape == {1, 3_000, 2}
      assert Tensor.to_list(stacked) == [for(i <- 1..3_000, do: [i, -i])]

      # The parts of a tree join are checked together before any is made.
      big = BurnBridge.zeros({1000, 1000})
      assert %{kind: :out_of_memory} = error(fn -> BurnBridge.concatenate(List.duplicate(big, 10_000)) end)
    end
  end

  describe "class 2: sizes are checked before anything proportional to them is built" do
    test "fit on data declaring 10^13 rows is refused by its shape, with nothing built per step" do
      rows = 10_000_000_000_000
      x = BurnBridge.zeros({rows, 0})
      y = BurnBridge.zeros({rows, 0})
      {{:error, e}, _} = held(fn -> Training.fit(mlp(), {x, y}, epochs: 3, batch_size: 1, verbose: false) end)
      assert e.kind == :shape

      assert %{kind: :shape} = error(fn -> Training.evaluate(mlp(), {x, y}) end)
      assert %{kind: :shape} = error(fn -> Training.predict(mlp(), x) end)
    end

    test "epochs x steps: 2^62 epochs cost only the epochs run" do
      stop = fn m -> if m.epoch == 2, do: Map.put(m, :stop_training, true), else: m end

      model =
        Training.fit(mlp(), data(),
          epochs: 1 <<< 62,
          batch_size: 1,
          warmup: (1 <<< 64) - 1,
          callbacks: [stop],
          verbose: false
        )

      assert length(model.history) == 2
    end

    test "counts and sizes beyond 64 bits are argument errors before anything is built" do
      for opts <- [
            [epochs: 1 <<< 64],
            [batch_size: 1 <<< 64],
            [warmup: 1 <<< 64],
            [accumulate_gradients: 1 <<< 70]
          ] do
        assert %{kind: :argument} = error(fn -> Training.fit(mlp(), data(), [verbose: false] ++ opts) end)
      end

      assert %{kind: :argument} = error(fn -> Tensor.from_binary(<<>>, Tuple.duplicate(1, 65), :f32) end)
      assert %{kind: :argument} = error(fn -> Training.warmup(1 <<< 64, 1) end)
    end

    test "gzip IDX files inflate no further than their header declares", %{tmp_dir: dir} do
      path = fn name, bin -> Path.join(dir, name) |> tap(&File.write!(&1, bin)) end
      header = fn dims -> <<0, 0, 0x08, length(dims)>> <> for(d <- dims, into: <<>>, do: <<d::big-32>>) end

      # 4 MB of zeros behind a header declaring 4 bytes: a bomb, cut at the declared size.
      bomb = path.("bomb.gz", :zlib.gzip(header.([4]) <> :binary.copy(<<0>>, 4_000_000)))
      {{:error, e}, _} = held(fn -> Dataset.read_idx(bomb) end)
      assert e.kind == :corrupt and e.message =~ "declares"

      # A header declaring 2^96 bytes is refused before inflating anything.
      huge = path.("huge.gz", :zlib.gzip(header.([4_294_967_295, 4_294_967_295, 4_294_967_295])))
      assert %{kind: :out_of_memory} = error(fn -> Dataset.read_idx(huge) end)

      assert %{kind: :corrupt} = error(fn -> Dataset.read_idx(path.("junk.gz", :zlib.gzip("not idx"))) end)
      assert %{kind: :io} = error(fn -> Dataset.read_idx(dir) end)
      ok = path.("ok.gz", :zlib.gzip(header.([3]) <> <<7, 8, 9>>))
      assert Dataset.read_idx(ok) |> Tensor.to_list() == [7, 8, 9]
    end

    test "statistics of integer labels are counted on the device" do
      labels = BurnBridge.iota({100_000}, :s64) |> BurnBridge.remainder(7)
      x = BurnBridge.zeros({100_000, 1})
      assert Dataset.stats({x, labels}).classes == 7
      assert Dataset.stats({BurnBridge.zeros({0, 1}), BurnBridge.zeros({0}, :s64)}).classes == 0
    end
  end

  describe "classes 6 and 7: extreme numbers and contract leaks are ExBurn.Error" do
    test "schedules whose rate leaves the float range are argument errors" do
      for schedule <- [{:exponential, 1.0e300, 1.0e300}, {:step, 1.0e300, 1, 1.0e10}] do
        # :skip: epoch 1's rate (1.0e300) would make the f32 weights infinite, a step left out
        opts = [epochs: 3, lr_schedule: schedule, verbose: false, on_non_finite: :skip]
        e = error(fn -> Training.fit(mlp(), data(), opts) end)
        assert e.kind == :argument and e.message =~ "float range"
        assert %{kind: :argument} = error(fn -> Training.schedule_lr(schedule, 5, 10) end)
      end

      for bad <- [
            {:exponential, @huge, 0.5},
            {:cosine, -1.0, 0.0},
            {:step, 0.1, 0, 0.5},
            {:step, "a", 1, 2},
            -0.5
          ] do
        assert %{kind: :argument} =
                 error(fn -> Training.fit(mlp(), data(), lr_schedule: bad, verbose: false) end)

        assert %{kind: :argument} = error(fn -> Training.schedule_lr(bad, 0, 1) end)
      end
    end

    test "a callback's learning rate must be a finite non-negative number" do
      for lr <- [1.0e308, @huge, -1, :nan, :infinity, "0.1", nil] do
        cb = &Map.put(&1, :learning_rate, lr)
        e = error(fn -> Training.fit(mlp(), data(), epochs: 2, callbacks: [cb], verbose: false) end)
        assert e.kind == :argument and e.message =~ "learning_rate"
      end

      # -0.0 is zero; 2^64 is large but finite (the loss check guards the weights).
      model =
        Training.fit(mlp(), data(), epochs: 2, callbacks: [&Map.put(&1, :learning_rate, -0.0)], verbose: false)

      assert Enum.map(model.history, & &1.learning_rate) == [0.1, 0.0]
    end

    test "learning rates reach the engine only when finite and non-negative" do
      m = mlp()
      {x, y} = data()

      for lr <- [:nan, -1.0] do
        step = %{learning_rate: lr, on_non_finite: :raise}
        assert {:error, {:argument, _}} = ExBurn.Nif.model_train_step(m.ref, [x.ref], y.ref, step)
        assert {:error, {:argument, _}} = ExBurn.Nif.model_profile_step(m.ref, [x.ref], y.ref, lr)
      end

      assert Model.info(m).steps == 0
    end

    test "Dataset.stats of data with NaN or infinities reads them as atoms" do
      x = Tensor.new([[1.0, :nan], [2.0, 3.0]])
      s = Dataset.stats({x, Tensor.new([0, 1], type: :s64)})
      assert %{mean: :nan, std: :nan, min: :nan, max: :nan, classes: 2} = s

      s = Dataset.stats({Tensor.new([[1.0, :infinity], [2.0, 3.0]]), Tensor.new([[0.0], [1.0]])})
      assert %{mean: :infinity, max: :infinity, min: 1.0, classes: 1} = s
      assert s.std in [:nan, :infinity]
    end

    test "a rank-0 input before global_avg_pool is a shape error found before building" do
      spec = %{
        layers: [
          %{name: "x", op: {:input, %{shape: []}}, inputs: []},
          %{name: "g", op: {:global_avg_pool, %{}}, inputs: [0]}
        ],
        output: 1
      }

      e = error(fn -> Model.compile(spec) end)
      assert e.kind == :shape and e.message =~ "global_avg_pool"
    end

    test "failing fits leave no process behind" do
      boom = fn _ -> raise ExBurn.Error.new(kind: :argument, message: "boom") end
      before = length(Process.list())

      ExUnit.CaptureIO.capture_io(fn ->
        for _ <- 1..200 do
          assert %{message: "boom"} =
                   error(fn -> Training.fit(mlp(), data(4), epochs: 2, callbacks: [boom], verbose: true) end)
        end

        for _ <- 1..20 do
          nan = {Tensor.new([[:nan, 1.0, 1.0, 1.0]]), Tensor.new([0], type: :s64)}
          assert %{kind: :non_finite} = error(fn -> Training.fit(mlp(), nan, epochs: 2, verbose: true) end)
        end
      end)

      assert settled(before), "#{length(Process.list()) - before} processes left behind"
    end

    test "a re-sealed checkpoint lacking a parameter is corrupt", %{tmp_dir: dir} do
      {tensors, meta} = ExBurn.Nif.tensors_load({:bytes, Model.serialize_params(mlp())}, :cpu) |> elem(1)

      for gone <- ["d.kernel", "d.bias"] do
        path = Path.join(dir, "#{gone}.safetensors")

        kept =
          Enum.reject(tensors, fn {n, _} -> n == gone end) |> Enum.map(fn {n, {ref, _, _, _}} -> {n, ref} end)

        {:ok, :ok} = ExBurn.Nif.tensors_save(kept, path, meta)
        assert {:error, %ExBurn.Error{kind: :corrupt, message: msg}} = Model.load(path)
        assert msg =~ gone
      end

      all = Enum.map(tensors, fn {n, {ref, _, _, _}} -> {n, ref} end)
      {:ok, :ok} = ExBurn.Nif.tensors_save(all, Path.join(dir, "all.safetensors"), meta)
      assert {:ok, %Model{}} = Model.load(Path.join(dir, "all.safetensors"))
    end

    test "ExBurn.Error.new keeps its fields printable" do
      assert Exception.message(ExBurn.Error.new(message: {:a, 1 <<< 100})) =~ "101 bits"
      assert %{kind: :argument} = error(fn -> ExBurn.Error.new(kind: "shape") end)
      assert is_binary(ExBurn.Error.format_error(ExBurn.Error.new(details: %{big: @huge})))
      assert Options.short(@huge) == "<an integer of 1000001 bits>"
    end
  end

  # Whether the process count is back to `before` within a few seconds (stopped processes
  # finish asynchronously).
  defp settled(before, tries \\ 50) do
    cond do
      length(Process.list()) <= before ->
        true

      tries == 0 ->
        false

      true ->
        Process.sleep(100)
        settled(before, tries - 1)
    end
  end
end
