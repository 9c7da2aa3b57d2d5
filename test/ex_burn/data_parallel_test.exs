defmodule ExBurn.DataParallelTest do
  # fit with `devices:` (data parallelism). CI has one CPU, so the devices here are the CPU
  # listed more than once: each listed device gets its own copy of the parameters and optimizer
  # state and its slice of every batch, and the gradients are summed across the copies; the
  # losses and weights must be those of training on one device at the same batch size.
  use ExUnit.Case, async: true

  alias ExBurn.{Layers, Model, Tensor, Training}
  import ExBurn.Test.Boundary, only: [data: 1, error: 1]

  defp mlp(extra \\ & &1) do
    Layers.input("x", shape: {nil, 4})
    |> Layers.dense(16, name: "h", activation: :tanh)
    |> extra.()
    |> Layers.dense(2, name: "out")
    |> Model.compile(seed: 5, optimizer: :adam, learning_rate: 0.01, loss: :cross_entropy)
  end

  defp train(devices, opts \\ []) do
    {x, y} = data(66)
    fit_opts = opts ++ [epochs: 4, batch_size: 16, verbose: false]
    fit_opts = if devices, do: [devices: devices] ++ fit_opts, else: fit_opts
    m = Training.fit(mlp(), {x, y}, fit_opts)
    params = m |> Model.parameters() |> Map.new(fn {k, t} -> {k, Tensor.to_list(t) |> List.flatten()} end)
    {Enum.map(m.history, & &1.loss), params}
  end

  defp assert_same({losses_a, params_a}, {losses_b, params_b}) do
    for {a, b} <- Enum.zip(losses_a, losses_b), do: assert_in_delta(a, b, 1.0e-4)

    for {k, va} <- params_a do
      worst = Enum.zip(va, params_b[k]) |> Enum.map(fn {p, q} -> abs(p - q) end) |> Enum.max()
      assert worst <= 1.0e-4, "#{k} differs by #{worst}"
    end
  end

  test "two and three devices train as one does (uneven slices, a two-row last batch)" do
    one = train(nil)
    assert_same(one, train([:cpu, :cpu]))
    assert_same(one, train([:cpu, :cpu, :cpu]))
    # and a different batch size does not: the comparison can fail
    {other, _} = train([:cpu, :cpu], batch_size: 32)
    refute_in_delta List.last(other), List.last(elem(one, 0)), 1.0e-4
  end

  test "the model's device goes first wherever it is listed; a list without it is refused" do
    {x, y} = data(16)
    m = Training.fit(mlp(), {x, y}, epochs: 1, batch_size: 8, verbose: false, devices: [:cpu])
    assert [%{loss: _}] = m.history

    e = error(fn -> Training.fit(mlp(), {x, y}, epochs: 1, verbose: false, devices: [{:vulkan, 3}]) end)
    assert e.kind == :argument and e.message =~ "must include the model's device :cpu"

    e = error(fn -> Training.fit(mlp(), {x, y}, epochs: 1, verbose: false, devices: [:cpu, :gpu]) end)
    assert e.kind == :argument and e.message =~ ":gpu" and e.message =~ "at most 64 devices"

    e = error(fn -> Training.fit(mlp(), {x, y}, epochs: 1, verbose: false, devices: :cpu) end)
    assert e.kind == :argument
  end

  test "accumulated micro-batches train as on one device" do
    one = train(nil, batch_size: 8, accumulate_gradients: 2)
    assert_same(one, train([:cpu, :cpu], batch_size: 8, accumulate_gradients: 2))
    assert_same(one, train([:cpu, :cpu, :cpu], batch_size: 8, accumulate_gradients: 2))
    # without accumulation the losses differ: the comparison can fail
    {plain, _} = train([:cpu, :cpu], batch_size: 8)
    refute_in_delta List.last(plain), List.last(elem(one, 0)), 1.0e-4
  end

  test "batch normalization is refused with several devices" do
    {x, y} = data(16)
    bn = mlp(&Layers.batch_norm(&1, name: "bn"))
    e = error(fn -> Training.fit(bn, {x, y}, epochs: 1, verbose: false, devices: [:cpu, :cpu]) end)
    assert e.kind == :argument and e.message =~ "batch normalization layer \"bn\""
  end

  test "copies of the data that do not match it are refused by the engine" do
    m = mlp()
    {x, y} = data(16)
    {x2, _} = data(8)

    opts = Map.put(ExBurn.Test.Boundary.epoch_options(), :devices, [:cpu, :cpu])

    assert {:ok, %{samples: 16}} =
             ExBurn.Nif.model_train_epoch(m.ref, [x.ref], y.ref, opts, nil, nil, [{[x.ref], y.ref}])

    assert {:error, {:argument, msg}} =
             ExBurn.Nif.model_train_epoch(m.ref, [x.ref], y.ref, opts, nil, nil, [{[x2.ref], y.ref}])

    assert msg =~ "does not match the data"

    assert {:error, {:argument, msg}} =
             ExBurn.Nif.model_train_epoch(m.ref, [x.ref], y.ref, opts, nil, nil, [
               {[x.ref], y.ref},
               {[x.ref], y.ref}
             ])

    assert msg =~ "1 other device(s), got 2 copies"
  end
end
