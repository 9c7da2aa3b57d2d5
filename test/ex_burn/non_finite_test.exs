defmodule ExBurn.NonFiniteTest do
  # Issue 31, class 6: NaN and infinities never train silently. `fit` checks its data first
  # (`check_inputs`), and every step's loss, gradients and updated parameters are checked before
  # the step is kept (`on_non_finite`). The activations' values on NaN and infinities against
  # Nx.BinaryBackend: nx_non_finite_test.exs (and the engine's tests in src/train/net.rs).
  use ExUnit.Case, async: true

  alias ExBurn.{BurnBridge, Layers, Model, Tensor, Training}
  import ExBurn.Test.Boundary, only: [error: 1, data: 0, data: 1]

  defp mlp(opts \\ []) do
    Layers.input("x", shape: {nil, 4})
    |> Layers.dense(8, activation: :relu, name: "h")
    |> Layers.dense(3, name: "o")
    |> Model.compile(Keyword.merge([seed: 1, optimizer: :sgd, learning_rate: 0.1], opts))
  end

  # `x` with row `row` replaced by `value` (:nan, :infinity, :neg_infinity) in every feature.
  defp poison(x, row, value) do
    {n, f} = x.shape
    bad = Tensor.new(List.duplicate(List.duplicate(value, f), 1))

    [
      if(row > 0, do: BurnBridge.slice(x, [0, 0], [row, f])),
      bad,
      if(row < n - 1, do: BurnBridge.slice(x, [row + 1, 0], [n - row - 1, f]))
    ]
    |> Enum.reject(&is_nil/1)
    |> BurnBridge.concatenate(0)
  end

  defp params(model), do: model |> Model.parameters() |> Map.new(fn {k, t} -> {k, Tensor.to_list(t)} end)

  defp finite?(model) do
    model |> params() |> Map.values() |> List.flatten() |> Enum.all?(&is_float/1)
  end

  @quiet [verbose: false, shuffle: false]

  describe "fit checks its data before training (check_inputs: true)" do
    test "NaN in x before a relu raises, naming the tensor and the first sample; nothing trains" do
      m = mlp()
      {x, y} = data()
      before = params(m)
      e = error(fn -> Training.fit(m, {poison(x, 5, :nan), y}, @quiet) end)
      assert e.kind == :non_finite and e.op == :fit
      assert e.message =~ "the training inputs hold NaN, first at sample 5"
      assert params(m) == before
      assert Model.info(m).steps == 0
    end

    test "infinite targets and validation data are named too" do
      {x, y} = data()
      m = mlp(loss: :mse)
      targets = x |> BurnBridge.slice([0, 0], [16, 3]) |> poison(2, :infinity)
      e = error(fn -> Training.fit(m, {x, targets}, @quiet) end)
      assert e.kind == :non_finite and e.message =~ "the training targets hold inf, first at sample 2"

      val = {poison(x, 9, :neg_infinity), y}
      e = error(fn -> Training.fit(mlp(), {x, y}, [validation_data: val] ++ @quiet) end)
      assert e.kind == :non_finite and e.message =~ "the validation inputs hold -inf, first at sample 9"
    end

    test "several inputs: the message says which" do
      a = Layers.input("a", shape: {nil, 2})
      b = Layers.input("b", shape: {nil, 2})
      m = Layers.concatenate(a, b) |> Layers.dense(3) |> Model.compile(seed: 1)
      {x, y} = data()
      [xa, xb] = [BurnBridge.slice(x, [0, 0], [16, 2]), BurnBridge.slice(x, [0, 2], [16, 2])]
      e = error(fn -> Training.fit(m, {[xa, poison(xb, 0, :nan)], y}, @quiet) end)
      assert e.message =~ "input 2 of the training inputs hold NaN, first at sample 0"
    end

    test "check_inputs is validated" do
      e = error(fn -> Training.fit(mlp(), data(), check_inputs: :yes) end)
      assert e.kind == :argument and e.message =~ "check_inputs"
    end
  end

  describe "every step is checked (on_non_finite)" do
    test ":raise fails at the first step and leaves the weights as they were" do
      for optimizer <- [:sgd, :adam] do
        m = mlp(optimizer: optimizer)
        {x, y} = data()
        twin = Model.clone(m)
        before = params(m)
        opts = [check_inputs: false, batch_size: 4] ++ @quiet
        e = error(fn -> Training.fit(m, {poison(x, 1, :nan), y}, opts) end)
        assert e.kind == :non_finite
        assert e.message =~ "the loss is NaN at epoch 1, batch 1 of 4"
        assert params(m) == before
        assert Model.info(m).steps == 0
        # the optimizer state is as before too: the next step equals an untouched twin's
        Training.fit(m, {x, y}, @quiet)
        Training.fit(twin, {x, y}, @quiet)
        assert params(m) == params(twin)
      end
    end

    test ":skip never writes NaN and trains on the other batches" do
      m = mlp()
      {x, y} = data()
      before = params(m)
      # a callback sees the weights after each epoch
      seen = fn metrics ->
        send(self(), {:finite, finite?(metrics.model)})
        metrics
      end

      opts = [check_inputs: false, batch_size: 4, epochs: 3, on_non_finite: :skip, callbacks: [seen]]
      m = Training.fit(m, {poison(x, 6, :nan), y}, opts ++ @quiet)
      assert Enum.map(m.history, & &1.skipped_batches) == [1, 1, 1]
      assert Enum.all?(m.history, &is_float(&1.loss))
      for _ <- 1..3, do: assert_received({:finite, true})
      assert Model.info(m).steps == 9
      assert params(m) != before
    end

    test "a learning rate that makes the weights infinite is caught the same way" do
      {x, y} = data()
      x = BurnBridge.multiply(x, 1.0e3)
      m = mlp(learning_rate: 1.0e38)
      before = params(m)
      e = error(fn -> Training.fit(m, {x, y}, @quiet) end)
      assert e.kind == :non_finite
      assert e.message =~ "(times the learning rate)"
      assert e.message =~ "epoch 1, batch 1 of 1"
      assert params(m) == before

      skipped = Training.fit(m, {x, y}, [epochs: 2, batch_size: 8, on_non_finite: :skip] ++ @quiet)
      assert Enum.map(skipped.history, & &1.skipped_batches) == [2, 2]
      assert params(m) == before

      stopped = Training.fit(m, {x, y}, [epochs: 2, on_non_finite: :stop] ++ @quiet)
      assert [%{stopped: :non_finite}] = stopped.history
      assert params(m) == before
    end

    test "train_step and profile_step undo a non-finite step" do
      m = mlp()
      {x, y} = data(4)
      before = params(m)
      nan = poison(x, 0, :nan)
      assert %{kind: :non_finite} = error(fn -> Training.train_step(m, {nan, y}) end)
      assert {:nan, ^m} = Training.train_step(m, {nan, y}, on_non_finite: :skip)
      assert %{kind: :non_finite} = error(fn -> Training.profile_step(m, {nan, y}) end)
      big = BurnBridge.multiply(x, 1.0e3)
      {loss, _} = Training.train_step(m, {big, y}, learning_rate: 1.0e38, on_non_finite: :skip)
      assert is_float(loss)
      assert params(m) == before
      assert {loss, _} = Training.train_step(m, {x, y})
      assert is_float(loss) and params(m) != before and finite?(m)
    end
  end
end
