defmodule ExBurn.Progress do
  @moduledoc false
  # Training progress output, rendered by a separate process because the training process
  # is inside a NIF while an epoch runs; the NIF sends {:ex_burn_progress, done, total, loss}.
  # On a terminal: one redrawn bar per epoch (loss, accuracy, ETA, samples/s); otherwise one
  # plain line per epoch.

  def start(epochs, samples) do
    tty? = match?({:ok, _}, :io.columns())
    parent = self()

    pid =
      spawn_link(fn ->
        loop(%{epochs: epochs, samples: samples, tty: tty?, epoch: 0, t0: now(), parent: parent})
      end)

    %{pid: pid, tty: tty?}
  end

  def pid(nil), do: nil
  def pid(%{pid: pid}), do: pid

  def epoch(nil, _), do: :ok
  def epoch(%{pid: pid}, e), do: send(pid, {:epoch, e})

  def epoch_done(nil, _), do: :ok

  def epoch_done(%{pid: pid}, metrics) do
    send(pid, {:done, Map.delete(metrics, :model), self()})

    receive do
      {:printed, ^pid} -> :ok
    after
      1_000 -> :ok
    end
  end

  def stop(nil), do: :ok

  def stop(%{pid: pid}) do
    Process.unlink(pid)
    send(pid, :stop)
    :ok
  end

  defp now, do: System.monotonic_time(:millisecond)

  defp loop(s) do
    receive do
      {:epoch, e} ->
        loop(%{s | epoch: e, t0: now()})

      {:ex_burn_progress, done, total, loss} ->
        if s.tty, do: draw(s, done, total, loss)
        loop(s)

      {:done, metrics, from} ->
        line = ExBurn.Callbacks.format(metrics, s.epochs) <> "  (#{Float.round(metrics.seconds * 1.0, 2)}s)"

        if s.tty, do: IO.write("\r\e[2K" <> line <> "\n"), else: IO.puts(line)
        send(from, {:printed, self()})
        loop(s)

      :stop ->
        :ok
    end
  end

  # Losses arrive as floats, or as :nan / :infinity / :neg_infinity.
  defp format_loss(loss) when is_number(loss), do: :erlang.float_to_binary(loss * 1.0, decimals: 4)
  defp format_loss(loss), do: inspect(loss)

  defp draw(s, done, total, loss) do
    elapsed = max(now() - s.t0, 1)
    width = 30
    filled = div(done * width, max(total, 1))

    bar =
      String.duplicate("=", filled) <>
        if(filled < width, do: ">", else: "") <> String.duplicate(" ", max(width - filled - 1, 0))

    eta = div(elapsed * (total - done), max(done, 1))
    rate = round(s.samples * done / max(total, 1) / (elapsed / 1000))

    IO.write(
      "\r\e[2KEpoch #{s.epoch}/#{s.epochs} [#{bar}] #{done}/#{total}  loss #{format_loss(loss)}  " <>
        "ETA #{Float.round(eta / 1000, 1)}s  #{rate} samples/s"
    )
  end
end
