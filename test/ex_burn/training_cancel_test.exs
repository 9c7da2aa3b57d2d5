defmodule ExBurn.TrainingCancelTest do
  # Training stops when asked: `fit`'s `timeout:` and the death of the calling process both
  # stop the native loop between two steps, free the model and its scheduler, and keep the
  # steps done before. Bounds are relative to an epoch timed in the same test.
  use ExUnit.Case, async: false

  alias ExBurn.{BurnBridge, Layers, Model, Training}

  @quiet [verbose: false, shuffle: false, check_inputs: false]

  defp model do
    Layers.input("x", shape: {nil, 64})
    |> Layers.dense(64, activation: :relu)
    |> Layers.dense(4)
    |> Model.compile(seed: 1, optimizer: :adam)
  end

  defp data do
    x = BurnBridge.random_normal({2048, 64}, seed: 5)
    y = x |> BurnBridge.sum(axes: [1]) |> BurnBridge.greater(0.0) |> BurnBridge.as_type(:s64)
    {x, y}
  end

  # The same samples 32 times: one epoch of it takes as long as 32 of `data`, so only a stop
  # between steps (not between epochs) ends it early.
  defp long({x, y}) do
    {BurnBridge.concatenate(List.duplicate(x, 32), 0), BurnBridge.concatenate(List.duplicate(y, 32), 0)}
  end

  # Milliseconds of one epoch of `data` at batch 8 (256 steps), after a warm-up epoch.
  defp epoch_ms(m, d) do
    Training.fit(m, d, [epochs: 1, batch_size: 8] ++ @quiet)
    {us, _} = :timer.tc(fn -> Training.fit(m, d, [epochs: 1, batch_size: 8] ++ @quiet) end)
    max(div(us, 1000), 1)
  end

  test "a timeout stops fit between steps with kind :cancelled; the model keeps its steps" do
    m = model()
    d = data()
    epoch = epoch_ms(m, d)
    # A busy machine can make the long call's first step late against an epoch timed just
    # before: up to three tries, the timeout doubled each time; every try must be cancelled.
    {us, done, timeout} =
      Enum.reduce_while(0..2, nil, fn try, _ ->
        steps = Model.info(m).steps
        timeout = max(div(epoch, 2), 1) * Integer.pow(2, try)

        {us, e} =
          :timer.tc(fn ->
            try do
              Training.fit(m, long(d), [epochs: 1, batch_size: 8, timeout: timeout] ++ @quiet)
              :finished
            rescue
              e in ExBurn.Error -> e
            end
          end)

        assert %ExBurn.Error{kind: :cancelled, op: :fit} = e
        assert e.message =~ "timed out after #{timeout} ms"
        done = Model.info(m).steps - steps
        if done > 0 or try == 2, do: {:halt, {us, done, timeout}}, else: {:cont, nil}
      end)

    # stopped inside the long epoch (8192 steps), not at its end
    assert div(us, 1000) < max(epoch, timeout) * 16,
           "stopped after #{div(us, 1000)} ms; 256 steps take #{epoch} ms"

    assert done > 0 and done < 4096, "#{done} steps ran"
    # the model is whole and trains on
    assert %Model{} = Training.fit(m, d, [epochs: 1, batch_size: 512] ++ @quiet)
  end

  test "a timeout that runs out in a later epoch names fit's timeout, not what was left of it" do
    m = model()
    d = data()
    epoch = epoch_ms(m, d)
    # the first epoch ends within the timeout; the second starts with about half an epoch left
    timeout = max(div(epoch * 3, 2), 3)

    e =
      assert_raise ExBurn.Error, fn ->
        Training.fit(m, d, [epochs: 8, batch_size: 8, timeout: timeout] ++ @quiet)
      end

    assert e.kind == :cancelled
    assert e.message == "timed out after #{timeout} ms; the native work was stopped"
  end

  test "the timeout is validated" do
    m = model()

    for bad <- [-1, 1.5, :never, "10", 18_446_744_073_709_551_616] do
      e = assert_raise ExBurn.Error, fn -> Training.fit(m, data(), [timeout: bad] ++ @quiet) end
      assert e.kind == :argument and e.message =~ "timeout"
    end
  end

  test "fit stops when its caller dies: the model is free again long before the fit would end" do
    m = model()
    d = data()
    epoch = epoch_ms(m, d)
    parent = self()
    d = long(d)

    caller =
      spawn(fn ->
        send(parent, :started)
        Training.fit(m, d, [epochs: 1, batch_size: 8] ++ @quiet)
        send(parent, :finished)
      end)

    assert_receive :started
    Process.sleep(max(div(epoch, 2), 20))
    Process.exit(caller, :kill)

    # evaluate needs the model, which the stopped fit gives back
    {us, stats} = :timer.tc(fn -> Training.evaluate(m, d, batch_size: 512) end)
    assert is_number(stats) or is_map(stats)
    assert div(us, 1000) < epoch * 16, "the model was busy #{div(us, 1000)} ms; 256 steps take #{epoch} ms"
    refute_received :finished
  end
end
