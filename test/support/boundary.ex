defmodule ExBurn.Test.Boundary do
  @moduledoc false
  # Helpers shared by the tests that attack the boundary (boundary, bounded_errors,
  # non_finite): the error a call raises, and a small classification dataset.

  alias ExBurn.BurnBridge

  @doc "The `ExBurn.Error` that `fun` raises (the test fails when it raises none)."
  def error(fun) do
    fun.()
    ExUnit.Assertions.flunk("expected an ExBurn.Error")
  rescue
    e in ExBurn.Error -> e
  end

  @doc "Options of one epoch as the training NIF takes them (the engine's `EpochOptions`)."
  def epoch_options do
    %{
      epoch: 1,
      batch_size: 4,
      shuffle: nil,
      lrs: [0.1],
      warmup: 0,
      first_step: 0,
      accumulate: 1,
      progress_every: 0,
      accuracy: true,
      on_non_finite: :raise
    }
  end

  @doc "`n` samples of 4 normal features (seed 3), labelled by the sign of their sum (s64)."
  def data(n \\ 16) do
    x = BurnBridge.random_normal({n, 4}, seed: 3)
    y = x |> BurnBridge.sum(axes: [1]) |> BurnBridge.greater(0.0) |> BurnBridge.as_type(:s64)
    {x, y}
  end
end
