defmodule ExBurn.ProgressTest do
  @moduledoc "Training progress: a redrawn bar on terminals, one line per epoch elsewhere."
  use ExUnit.Case, async: true

  import ExUnit.CaptureIO
  alias ExBurn.{BurnBridge, Layers, Model, Progress, Training}

  test "the setting wins over detection; the env var over the config" do
    yes = fn -> true end
    no = fn -> false end
    assert Progress.style(nil, nil, yes) == :bar
    assert Progress.style(nil, nil, no) == :lines
    assert Progress.style("lines", nil, yes) == :lines
    assert Progress.style(nil, :bar, no) == :bar
    assert Progress.style("bar", :lines, no) == :bar
    assert Progress.style("auto", :lines, yes) == :lines
    assert Progress.style("nonsense", nil, no) == :lines
  end

  test "output captured by another process is not a terminal" do
    assert capture_io(fn -> send(self(), {:terminal, Progress.terminal?()}) end) == ""
    assert_received {:terminal, false}
  end

  test "a bar line fits the width it was given" do
    s = %{epoch: 2, epochs: 10, samples: 1000, width: 40}
    line = Progress.bar_line(s, 5, 10, 0.5, 100)
    assert String.length(line) == 39
    assert line =~ "Epoch 2/10 [==========>"

    wide = Progress.bar_line(%{s | width: 200}, 10, 10, :nan, 100)
    assert wide =~ "[====================] 10/10  loss :nan  ETA 0.0s"
  end

  test "fit prints one line per epoch when the output is not a terminal" do
    model =
      Layers.input("x", shape: {nil, 4})
      |> Layers.dense(2, activation: :softmax)
      |> Model.compile(seed: 1)

    x = BurnBridge.random_normal({16, 4}, seed: 1)
    y = BurnBridge.random_uniform({16}, min: 0, max: 2, type: :s64, seed: 2)
    out = capture_io(fn -> Training.fit(model, {x, y}, epochs: 2, batch_size: 4) end)
    assert [first, second] = String.split(out, "\n", trim: true)
    assert first =~ ~r/^Epoch 1\/2  loss /
    assert second =~ ~r/^Epoch 2\/2  loss /
    refute out =~ "\r"
  end
end
