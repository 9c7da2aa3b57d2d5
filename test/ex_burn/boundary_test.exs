defmodule ExBurn.BoundaryTest do
  # The failure classes an adversarial user found (each test is one of their examples or the
  # class it stands for): every one must come back as ExBurn.Error, never take the VM down.
  use ExUnit.Case, async: true

  @moduletag :tmp_dir

  alias ExBurn.{BurnBridge, Dataset, Layers, Model, Op, Tensor, Training}
  import ExBurn.Test.Boundary, only: [error: 1, data: 0, data: 1]

  defp mlp(opts \\ []) do
    Layers.input("x", shape: {nil, 4})
    |> Layers.dense(3, name: "d")
    |> Model.compile(Keyword.merge([seed: 1], opts))
  end

  defp kernel(model), do: Model.parameters(model)["d.kernel"] |> Tensor.to_list()

  describe "recursive terms are bounded and unknown attributes refused" do
    test "a 100,000-deep attribute is an argument error" do
      t = Tensor.new([1.0, 2.0])
      deep = Enum.reduce(1..100_000, 0, fn _, a -> [a] end)
      assert %{kind: :argument} = error(fn -> Op.eval(:add, [t, t], junk: deep) end)
      assert %{kind: :argument} = error(fn -> Op.eval(:sum, [t], axes: deep) end)
    end

    test "a deep model spec is an argument error" do
      deep = Enum.reduce(1..100_000, %{}, fn _, a -> %{layers: [a]} end)
      assert %{kind: :argument} = error(fn -> Model.compile(%{layers: [deep], output: 0}) end)
    end

    test "a misspelt attribute names itself and the accepted ones" do
      t = Tensor.new([1.0, 2.0])
      e = error(fn -> Op.eval1(:sum, [t], axis: [0]) end)
      assert e.kind == :argument
      assert e.message =~ "axis" and e.message =~ "axes"
    end

    test "a long attribute list still decodes (on a dirty scheduler)" do
      t = BurnBridge.zeros({1, 1})
      axes = List.duplicate(0, 50_000)
      assert %{kind: :argument} = error(fn -> Op.eval1(:sum, [t], axes: axes) end)
    end
  end

  describe "non-finite values never become Erlang floats" do
    test "fit on data with a NaN raises :non_finite naming epoch and batch; weights unchanged" do
      m = mlp()
      {x, y} = data(8)
      bad = BurnBridge.pad(BurnBridge.slice(x, [1, 0], [7, 4]), :nan, [{1, 0, 0}, {0, 0, 0}])
      before = kernel(m)
      # check_inputs: false: the step's own check (the default finds the NaN before training)
      e =
        error(fn ->
          Training.fit(m, {bad, y}, epochs: 1, batch_size: 8, shuffle: false, check_inputs: false)
        end)

      assert e.kind == :non_finite
      assert e.message =~ "epoch 1, batch 1 of 1"
      assert kernel(m) == before
    end

    test "the default verbose progress survives a diverging run" do
      m = mlp(optimizer: :sgd, learning_rate: 1.0e30)
      {x, y} = data(64)
      e = error(fn -> Training.fit(m, {BurnBridge.multiply(x, 1.0e30), y}, epochs: 3, batch_size: 8) end)
      assert e.kind == :non_finite
    end

    test ":skip leaves bad batches out and :stop ends training" do
      {x, y} = data(8)
      nan_row = BurnBridge.pad(BurnBridge.slice(x, [1, 0], [7, 4]), :nan, [{1, 0, 0}, {0, 0, 0}])
      m = mlp()

      skipped =
        Training.fit(m, {nan_row, y},
          epochs: 1,
          batch_size: 1,
          shuffle: false,
          verbose: false,
          on_non_finite: :skip,
          check_inputs: false
        )

      assert [%{skipped_batches: 1, loss: loss}] = skipped.history
      assert is_float(loss)

      stopped =
        Training.fit(mlp(), {nan_row, y},
          epochs: 2,
          batch_size: 1,
          shuffle: false,
          verbose: false,
          on_non_finite: :stop,
          check_inputs: false
        )

      assert [%{stopped: :non_finite, loss: :nan}] = stopped.history
      assert {:nan, _} = Training.train_step(m, {nan_row, y}, on_non_finite: :skip)
    end

    test "tensors and specs read back non-finite values as atoms" do
      t = Tensor.new([:nan, :infinity, :neg_infinity, 1.0])
      assert Tensor.to_list(t) == [:nan, :infinity, :neg_infinity, 1.0]

      assert Tensor.to_list(BurnBridge.divide(Tensor.new([1.0, -1.0, 0.0]), 0.0)) == [
               :infinity,
               :neg_infinity,
               :nan
             ]
    end
  end

  describe "sizes are checked before allocating" do
    test "results the device cannot hold are refused with the bytes asked and available" do
      e = error(fn -> BurnBridge.zeros({100_000, 100_000}) end)
      assert e.kind == :out_of_memory
      assert e.message =~ "40000000000 bytes"

      one = Tensor.new([1.0])

      for f <- [
            fn -> BurnBridge.broadcast(one, {100_000, 100_000}) end,
            fn -> BurnBridge.pad(one, 0.0, [{0, 10_000_000_000, 0}]) end,
            fn -> BurnBridge.concatenate(List.duplicate(BurnBridge.zeros({1000, 1000}), 10_000)) end,
            fn -> BurnBridge.matmul(BurnBridge.zeros({200_000, 1}), BurnBridge.zeros({1, 200_000})) end,
            fn -> BurnBridge.add(BurnBridge.zeros({200_000, 1}), BurnBridge.zeros({1, 200_000})) end,
            fn -> Dataset.one_hot(BurnBridge.iota({60_000}, :s64), num_classes: 1_000_000) end,
            fn -> Layers.input("x", shape: {nil, 4}) |> Layers.dense(2 ** 40) |> Model.compile() end
          ] do
        assert %{kind: :out_of_memory} = error(f)
      end
    end

    test "element counts that overflow are shape errors, not phantom tensors" do
      huge = {4_294_967_296, 4_294_967_296}
      assert %{kind: :shape} = error(fn -> Tensor.from_binary(<<>>, huge, {:f, 32}) end)
      assert %{kind: :shape} = error(fn -> BurnBridge.full(huge, 1.0) end)
      assert %{kind: :shape} = error(fn -> BurnBridge.broadcast(Tensor.new([1.0]), Tuple.append(huge, 2)) end)
      assert %{kind: :argument} = error(fn -> Tensor.from_binary(<<>>, {2 ** 70}, {:f, 32}) end)
    end
  end

  describe "models" do
    test "parameters of another type are refused unless converted" do
      m = mlp()
      f16 = BurnBridge.as_type(Tensor.new([0.0, 0.0, 0.0]), :f16)
      assert %{kind: :dtype} = error(fn -> Model.put_parameters(m, %{"d.bias" => f16}) end)
      Model.put_parameters(m, %{"d.bias" => f16}, convert: true)
      assert %{type: {:f, 32}} = Model.parameters(m)["d.bias"]
      {loss, _} = Training.train_step(m, data())
      assert is_float(loss)
    end

    test "import_params of an f16 file needs convert: true", %{tmp_dir: dir} do
      path = Path.join(dir, "half.safetensors")
      m = mlp()
      half = Model.quantize(m, :f16)
      :ok = Model.export(half, path)
      assert %{kind: :dtype} = error(fn -> Model.import_params(m, path) end)
      Model.import_params(m, path, convert: true)
      assert is_float(elem(Training.train_step(m, data()), 0))
    end

    test "embedding ids out of range and targets of the wrong width are argument/shape errors" do
      m =
        Layers.input("ids", shape: {nil, 3}, type: :s64)
        |> Layers.embedding(5, 4)
        |> Layers.flatten()
        |> Layers.dense(2)
        |> Model.compile()

      ids = Tensor.new([[1, 2, 9]], type: :s64)
      assert %{kind: :argument} = error(fn -> Training.train_step(m, {ids, Tensor.new([0], type: :s64)}) end)
      assert %{kind: :argument} = error(fn -> Training.predict(m, ids) end)

      d = mlp()
      x = Tensor.new([[1.0, 2.0, 3.0, 4.0]])
      assert %{kind: :shape} = error(fn -> Training.train_step(d, {x, Tensor.new([[0.0, 1.0]])}) end)

      assert %{kind: :shape} =
               error(fn -> Training.train_step(d, {Tensor.new([[1.0, 2.0]]), Tensor.new([0], type: :s64)}) end)

      # The model is still usable after each refusal.
      assert is_float(elem(Training.train_step(d, {x, Tensor.new([[0.0, 1.0, 0.0]])}), 0))
    end

    test "data is never taken for a path" do
      assert {:error, %{kind: :corrupt}} = Model.deserialize_params("/etc/passwd")
    end

    # What a tensor sent to another node looks like there: a reference, not a resource.
    test "a reference that is not a tensor of this node says so" do
      t = %{Tensor.new([1.0]) | ref: make_ref()}
      e = error(fn -> BurnBridge.add(t, t) end)
      assert e.kind == :argument and e.message =~ "not an ExBurn tensor of this node"
      e = error(fn -> BurnBridge.concatenate([t, t]) end)
      assert e.kind == :argument and e.message =~ "Nx.backend_copy"
    end
  end

  describe "integer arithmetic" do
    test "integer quotient and remainder by zero are argument errors" do
      a = Tensor.new([1, 2, 3])
      z = Tensor.new([0, 1, 0])
      assert %{kind: :argument} = error(fn -> BurnBridge.quotient(a, z) end)
      assert %{kind: :argument} = error(fn -> BurnBridge.remainder(a, z) end)
      assert Tensor.to_list(BurnBridge.quotient(a, Tensor.new([1, 2, 3]))) == [1, 1, 1]
    end

    test "comparisons of unsigned integers with infinities" do
      u = Tensor.new([1, 2], type: :u8)
      assert Tensor.to_list(BurnBridge.less_equal(u, :infinity)) == [1, 1]
      assert Tensor.to_list(BurnBridge.greater(u, :neg_infinity)) == [1, 1]
    end
  end

  describe "options" do
    test "bad options are ExBurn.Error :argument naming the option" do
      m = mlp()
      d = data()

      for {opts, name} <- [
            {[epochs: -2], ":epochs"},
            {[batch_size: 0], ":batch_size"},
            {[warmup: -3], ":warmup"},
            {[shuffle: :sometimes], ":shuffle"},
            {[on_non_finite: :ignore], ":on_non_finite"},
            {[lr_schedule: {:cosine, -1, 0}], ":lr_schedule"},
            {[callbacks: [:not_a_fun]], ":callbacks"},
            {[nope: 1], ":nope"},
            {:not_a_list, "keyword"}
          ] do
        e = error(fn -> Training.fit(m, d, opts) end)
        assert e.kind == :argument and e.message =~ name, inspect({opts, e.message})
      end

      assert %{kind: :argument} = error(fn -> Dataset.loader(d, batch_size: 0) end)
      assert %{kind: :argument} = error(fn -> mlp(learning_rate: -1.0) end)
      assert %{kind: :argument} = error(fn -> mlp(optimizer: :adam, momentum: 0.9) end)
    end

    test "documented overrides work alone; epochs: 0 trains nothing; empty data is refused" do
      m = mlp()
      d = data()

      for opt <- [clip_norm: 1.0, clip_value: 0.5, weight_decay: 1.0e-4] do
        assert [_] = Training.fit(m, d, [{:epochs, 1}, {:verbose, false}, opt]).history
      end

      assert [] = Training.fit(m, d, epochs: 0).history
      empty = {BurnBridge.zeros({0, 4}), Tensor.from_binary(<<>>, {0}, :s64)}
      assert %{kind: :argument} = error(fn -> Training.fit(m, empty) end)
    end

    test "bad positional arguments are ExBurn.Error, not FunctionClauseError" do
      for f <- [
            fn -> Tensor.to_list(:nope) end,
            fn -> Tensor.new("abc") end,
            fn -> Tensor.new([1, :x]) end,
            fn -> BurnBridge.exp(1) end,
            fn -> BurnBridge.add("a", 1) end,
            fn -> BurnBridge.sum(Tensor.new([1.0]), axes: [:x]) end,
            fn -> BurnBridge.reshape(Tensor.new([1.0]), {-1}) end,
            fn -> Model.parameters(%{}) end,
            fn -> Training.fit(:model, {1, 2}) end,
            fn -> Layers.dense(:x, 3) end,
            fn -> Layers.input("x", shape: {nil, 4}) |> Layers.dense(0) end,
            fn -> Dataset.split({1, 2}) end,
            fn -> ExBurn.configure!(default_device: :tpu) end
          ] do
        assert %ExBurn.Error{} = error(f)
      end
    end

    # Found by the fuzz campaign: improper lists reached Enum.map.
    test "improper lists are ExBurn.Error :argument" do
      t = Tensor.new([[1.0, 2.0], [3.0, 4.0]])
      m = Layers.input("x", shape: {nil, 2}) |> Layers.dense(2) |> Model.compile()
      y = Tensor.new([0, 1], type: :s64)

      for f <- [
            fn -> BurnBridge.stack([t | :x]) end,
            fn -> BurnBridge.concatenate([t | t]) end,
            fn -> ExBurn.Op.eval(:sum, [t | "x"], axes: [0]) end,
            fn -> Training.predict(m, [t | 1.0]) end,
            fn -> Training.fit(m, {[t | :low], y}, epochs: 1, verbose: false) end,
            fn -> Training.evaluate(m, {[t | :select], y}) end,
            fn -> Model.unfreeze(m, ["dense_0" | :valid]) end,
            fn -> Layers.input("x", shape: {nil, 1, 8, 8}) |> Layers.conv(2, kernel_size: [3 | nil]) end,
            # found by the fuzz (seed 227940347)
            fn -> ExBurn.Type.encode([-0.0 | 5.0e-324], :f64) end
          ] do
        assert %ExBurn.Error{kind: :argument} = error(f)
      end
    end

    # Found by the boundary fuzzer: an improper list where the NIFs take tensor handles was
    # refused only by a caught panic (the foreign-reference hint decoded it as a list).
    test "improper lists of handles reach the NIFs as :argument errors, not panics" do
      %Tensor{ref: ref} = Tensor.new([1.0, 2.0])

      for {name, args} <- [
            tensor_info: [[ref | :x]],
            tensor_to_binary: [[ref | ref], nil],
            eval_op: [%{op: :add}, [ref | make_ref()], :cpu],
            tensor_deallocate: [[make_ref() | ref]]
          ] do
        assert {:error, {:argument, message}} = apply(ExBurn.Nif, name, args)
        assert message =~ "improper list", "#{name}: #{message}"
      end
    end
  end
end
