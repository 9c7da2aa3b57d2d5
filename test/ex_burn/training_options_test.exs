defmodule ExBurn.TrainingOptionsTest do
  # The training NIFs decode the engine's option types (StepOptions, EpochOptions, EvalOptions
  # in native/ex_burn_core/src/train/model/options.rs) directly: a key the type lacks, a missing
  # field or a bad value is an {:argument, message} error naming it, never a crash.
  use ExUnit.Case, async: true

  alias ExBurn.{Layers, Model, Training}
  import ExBurn.Test.Boundary, only: [data: 0]

  defp mlp do
    Layers.input("x", shape: {nil, 4})
    |> Layers.dense(2, name: "d")
    |> Model.compile(seed: 1, optimizer: :sgd, learning_rate: 0.1)
  end

  @epoch ExBurn.Test.Boundary.epoch_options()

  defp argument({:error, {:argument, message}}), do: message

  test "well-formed options run" do
    m = mlp()
    {x, y} = data()

    assert {:ok, {_loss, true}} =
             ExBurn.Nif.model_train_step(m.ref, [x.ref], y.ref, %{learning_rate: 0.1, on_non_finite: :skip})

    assert {:ok, %{samples: 16}} = ExBurn.Nif.model_train_epoch(m.ref, [x.ref], y.ref, @epoch, nil, nil, [])

    assert {:ok, %{samples: 16}} =
             ExBurn.Nif.model_evaluate(m.ref, [x.ref], y.ref, batch_size: 8, accuracy: false)
  end

  test "unknown keys, missing fields and bad values name what is wrong" do
    m = mlp()
    {x, y} = data()
    step = fn opts -> ExBurn.Nif.model_train_step(m.ref, [x.ref], y.ref, opts) end
    epoch = fn opts -> ExBurn.Nif.model_train_epoch(m.ref, [x.ref], y.ref, opts, nil, nil, []) end

    assert step.(%{learning_rate: 0.1, on_non_finite: :ignore}) |> argument() =~ "ignore"

    assert step.(%{learning_rate: 0.1, on_non_finite: :raise, extra: 1}) |> argument() =~
             "unknown field `extra`"

    assert step.(%{on_non_finite: :raise}) |> argument() =~ "learning_rate"
    assert epoch.(Map.delete(@epoch, :batch_size)) |> argument() =~ "batch_size"
    assert epoch.(%{@epoch | batch_size: -1}) |> argument() =~ "invalid epoch options"
    assert epoch.(%{@epoch | lrs: 0.1}) |> argument() =~ "invalid epoch options"

    assert ExBurn.Nif.model_evaluate(m.ref, [x.ref], y.ref, %{batch_size: 2}) |> argument() =~ "accuracy"

    assert ExBurn.Nif.model_train_epoch(m.ref, [x.ref], y.ref, @epoch, :bad, nil, []) |> argument() =~
             "validation"

    assert Model.info(m).steps == 0
  end

  test "fit's checks reach the engine: non-finite validation data is refused before training" do
    m = mlp()
    {x, y} = data()
    bad = ExBurn.Tensor.new(List.duplicate([:nan, 0.0, 0.0, 0.0], 2))
    validation = {bad, ExBurn.Tensor.new([0, 1], type: :s64)}

    err =
      assert_raise ExBurn.Error, fn ->
        Training.fit(m, {x, y}, epochs: 1, batch_size: 4, validation_data: validation, verbose: false)
      end

    assert err.message =~ "validation"
  end
end
