defmodule ExBurn.TrainingTest do
  use ExUnit.Case, async: true
  doctest ExBurn.Training

  alias ExBurn.{BurnBridge, Callbacks, Layers, Model, Tensor, Training}

  # Two linearly separable classes in 8 dimensions.
  defp blobs(n, seed \\ 1) do
    x = BurnBridge.random_normal({n, 8}, seed: seed)
    w = BurnBridge.random_normal({8, 1}, seed: 99)

    y =
      x
      |> BurnBridge.matmul(w)
      |> BurnBridge.greater(0)
      |> BurnBridge.as_type(:s64)
      |> BurnBridge.reshape({n})

    {x, y}
  end

  defp mlp(opts \\ []) do
    Layers.input("x", shape: {nil, 8})
    |> Layers.dense(16, activation: :relu, name: "hidden")
    |> Layers.dense(2, activation: :softmax, name: "out")
    |> Model.compile(Keyword.merge([optimizer: :adam, learning_rate: 0.02, seed: 3], opts))
  end

  test "fit learns, reports history and metrics" do
    {x, y} = blobs(256)

    model =
      Training.fit(mlp(), {x, y}, epochs: 8, batch_size: 32, validation_data: blobs(128, 2), verbose: false)

    assert length(model.history) == 8
    [first | _] = model.history
    last = List.last(model.history)
    assert last.loss < first.loss
    assert last.val_accuracy > 0.9
    assert Map.has_key?(last, :samples_per_second)
    {loss, acc} = Training.evaluate(model, {x, y}, true)
    assert is_float(loss) and acc > 0.9
    # without accuracy: the same loss, no predictions compared
    assert Training.evaluate(model, {x, y}) == loss
  end

  @tag :telemetry
  test "each epoch emits [:ex_burn, :training, :epoch] when telemetry runs" do
    parent = self()
    id = {__MODULE__, make_ref()}

    :ok =
      apply(:telemetry, :attach, [
        id,
        [:ex_burn, :training, :epoch],
        fn event, measurements, meta, _ -> send(parent, {:event, event, measurements, meta}) end,
        nil
      ])

    try do
      Training.fit(mlp(), blobs(64), epochs: 2, batch_size: 32, verbose: false)
      assert_receive {:event, [:ex_burn, :training, :epoch], %{loss: l1}, %{epoch: 1}} when is_float(l1)
      assert_receive {:event, [:ex_burn, :training, :epoch], %{loss: _}, %{epoch: 2, learning_rate: _}}
    after
      apply(:telemetry, :detach, [id])
    end
  end

  test "learning-rate schedules give their sequences" do
    assert Enum.map(0..4, &Training.schedule_lr({:step, 0.1, 2, 0.5}, &1, 5)) == [0.1, 0.1, 0.05, 0.05, 0.025]

    assert Enum.map(0..2, &Training.schedule_lr({:exponential, 1.0, 0.5}, &1, 3)) == [1.0, 0.5, 0.25]

    cos = Enum.map(0..4, &Training.schedule_lr({:cosine, 1.0, 0.0}, &1, 5))
    assert_in_delta hd(cos), 1.0, 1.0e-12
    assert_in_delta Enum.at(cos, 2), 0.5, 1.0e-12
    assert_in_delta List.last(cos), 0.0, 1.0e-12
    assert Enum.map(0..4, &Training.warmup(&1, 4)) == [0.25, 0.5, 0.75, 1.0, 1.0]
    assert Training.schedule_lr(0.3, 7, 9) == 0.3
  end

  test "fit applies the schedule per epoch" do
    {x, y} = blobs(64)

    model =
      Training.fit(mlp(), {x, y},
        epochs: 3,
        batch_size: 64,
        lr_schedule: {:exponential, 0.1, 0.5},
        verbose: false
      )

    assert Enum.map(model.history, & &1.learning_rate) == [0.1, 0.05, 0.025]
  end

  test "early stopping stops and restores the best weights" do
    {x, y} = blobs(128)
    parent = self()

    # A monitor that improves twice then gets worse: stop after patience 2, restore epoch 2.
    scores = %{1 => 1.0, 2 => 0.5, 3 => 0.9, 4 => 0.8, 5 => 0.7, 6 => 0.6}
    fake = fn m -> Map.put(m, :score, scores[m.epoch]) end

    record = fn m ->
      send(parent, {:params, m.epoch, Model.parameters(m.model)["out.bias"] |> Tensor.to_list()})
      m
    end

    stop = Callbacks.early_stopping(2, 0.0, monitor: :score)

    model =
      Training.fit(mlp(), {x, y}, epochs: 6, batch_size: 16, callbacks: [fake, record, stop], verbose: false)

    assert length(model.history) == 4
    assert List.last(model.history).stop_training
    assert_received {:params, 2, best}
    assert Model.parameters(model)["out.bias"] |> Tensor.to_list() == best
  end

  test "reduce_lr_on_plateau lowers the rate and screen_callback reports" do
    {x, y} = blobs(64)
    flat = fn m -> Map.put(m, :score, 1.0) end

    cbs = [
      flat,
      Callbacks.reduce_lr_on_plateau(1, factor: 0.5, monitor: :score),
      Callbacks.screen_callback(self())
    ]

    model =
      Training.fit(mlp(learning_rate: 0.1), {x, y}, epochs: 4, batch_size: 64, callbacks: cbs, verbose: false)

    assert Enum.map(model.history, & &1.learning_rate) |> Enum.map(&Float.round(&1, 6)) == [
             0.1,
             0.1,
             0.05,
             0.025
           ]

    assert_received {:training_progress, 1, loss, nil} when is_float(loss)
  end

  test "stop_training from a custom callback halts" do
    {x, y} = blobs(64)
    stop = fn m -> if m.epoch == 2, do: Map.put(m, :stop_training, true), else: m end
    assert length(Training.fit(mlp(), {x, y}, epochs: 5, callbacks: [stop], verbose: false).history) == 2
  end

  test "train_step, gradients and profile" do
    {x, y} = blobs(32)
    model = mlp()
    {loss, ^model} = Training.train_step(model, {x, y})
    assert is_float(loss)
    grads = Training.compute_gradients(model, {x, y})
    assert Map.keys(grads) |> Enum.sort() == ["hidden.bias", "hidden.kernel", "out.bias", "out.kernel"]
    assert grads["hidden.kernel"].shape == {8, 16}
    prof = Training.profile_step(model, {x, y})
    assert prof.forward_ms > 0 and prof.backward_ms > 0 and prof.optimizer_ms >= 0
  end

  test "frozen layers keep their parameters through fit" do
    {x, y} = blobs(64)
    model = mlp() |> Model.freeze(["hidden"])
    assert Model.frozen?(model, "hidden")
    before = Model.parameters(model) |> Map.new(fn {k, v} -> {k, Tensor.to_list(v)} end)
    model = Training.fit(model, {x, y}, epochs: 2, batch_size: 16, verbose: false)
    after_ = Model.parameters(model) |> Map.new(fn {k, v} -> {k, Tensor.to_list(v)} end)
    assert before["hidden.kernel"] == after_["hidden.kernel"]
    refute before["out.kernel"] == after_["out.kernel"]
    assert Model.summary(model) =~ "hidden (frozen)"
    assert MapSet.to_list(Model.frozen_layers(Model.unfreeze(model, :all))) == []
  end

  test "fit option overrides rebuild the optimizer" do
    {x, y} = blobs(32)

    model =
      Training.fit(mlp(optimizer: :sgd, learning_rate: 0.1), {x, y},
        epochs: 1,
        nesterov: true,
        clip_norm: 1.0,
        verbose: false
      )

    assert model.optimizer_config.nesterov
    assert model.optimizer_config.momentum == 0.9
    assert model.optimizer_config.clip_norm == 1.0
  end

  test "bad data raises ExBurn.Error" do
    model = mlp()
    bad = BurnBridge.zeros({4, 3})

    assert %ExBurn.Error{kind: :shape} =
             catch_error(Training.train_step(model, {bad, Tensor.new([0, 1, 0, 1])}))

    assert %ExBurn.Error{kind: :argument} = catch_error(Training.train_step(model, {:nope, :nope}))
  end
end
