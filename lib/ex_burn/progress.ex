defmodule ExBurn.Progress do
  @moduledoc false
  # Training progress output, rendered by a separate process because the training process
  # is inside a NIF while an epoch runs; the NIF sends {:ex_burn_progress, done, total, loss}.
  #
  # Two styles: `:bar` redraws one line per epoch with `\r` (bar, loss, ETA, samples/s) and
  # ends it with the epoch's metrics; `:lines` prints only the metrics line of each epoch
  # (logs, pipes, CI). `EX_BURN_PROGRESS=bar|lines` or `config :ex_burn, progress: :bar`
  # chooses; otherwise `style/1` looks at where the output goes.

  @doc false
  def start(epochs, samples) do
    style = style()
    width = width()
    parent = self()

    pid =
      spawn_link(fn ->
        loop(%{
          epochs: epochs,
          samples: samples,
          style: style,
          width: width,
          epoch: 0,
          t0: now(),
          parent: parent
        })
      end)

    %{pid: pid, style: style}
  end

  @doc false
  def pid(nil), do: nil
  def pid(%{pid: pid}), do: pid

  @doc false
  def epoch(nil, _), do: :ok
  def epoch(%{pid: pid}, e), do: send(pid, {:epoch, e})

  @doc false
  def epoch_done(nil, _), do: :ok

  def epoch_done(%{pid: pid}, metrics) do
    send(pid, {:done, Map.delete(metrics, :model), self()})

    receive do
      {:printed, ^pid} -> :ok
    after
      1_000 -> :ok
    end
  end

  @doc false
  def stop(nil), do: :ok

  def stop(%{pid: pid}) do
    Process.unlink(pid)
    send(pid, :stop)
    :ok
  end

  @doc false
  # The output style: the setting (env var, then application config), else `:bar` when the
  # output is a terminal. `probe` replaces the terminal check (tests).
  def style(
        env \\ System.get_env("EX_BURN_PROGRESS"),
        config \\ Application.get_env(:ex_burn, :progress),
        probe \\ &terminal?/0
      ) do
    case {parse(env), parse(config)} do
      {style, _} when style in [:bar, :lines] -> style
      {_, style} when style in [:bar, :lines] -> style
      _ -> if probe.(), do: :bar, else: :lines
    end
  end

  defp parse(value) when value in [:bar, "bar"], do: :bar
  defp parse(value) when value in [:lines, "lines"], do: :lines
  defp parse(_), do: :auto

  @doc false
  # Whether this process's output reaches a terminal. `:io.columns/0` answers only where the
  # shell handles output (iex, OTP 26+); under `mix run` on OTP 25 it fails even in a terminal,
  # so then the standard output of the VM is looked at (Linux), or TERM (elsewhere).
  def terminal? do
    opts = :io.getopts()

    cond do
      is_list(opts) and Keyword.has_key?(opts, :terminal) -> opts[:terminal] == true
      match?({:ok, _}, :io.columns()) -> true
      Process.group_leader() != Process.whereis(:user) -> false
      true -> stdout_terminal?()
    end
  end

  defp stdout_terminal? do
    case File.read_link("/proc/self/fd/1") do
      {:ok, path} -> String.starts_with?(path, ["/dev/pts/", "/dev/tty", "/dev/console"])
      {:error, _} -> System.get_env("TERM") not in [nil, "", "dumb"]
    end
  end

  defp width do
    case :io.columns() do
      {:ok, n} when n > 20 ->
        n

      _ ->
        case Integer.parse(System.get_env("COLUMNS") || "") do
          {n, ""} when n > 20 -> n
          _ -> 80
        end
    end
  end

  defp now, do: System.monotonic_time(:millisecond)

  defp loop(s) do
    receive do
      {:epoch, e} ->
        loop(%{s | epoch: e, t0: now()})

      {:ex_burn_progress, done, total, loss} ->
        if s.style == :bar, do: IO.write("\r\e[2K" <> bar_line(s, done, total, loss, now() - s.t0))
        loop(s)

      {:done, metrics, from} ->
        line = ExBurn.Callbacks.format(metrics, s.epochs) <> "  (#{Float.round(metrics.seconds * 1.0, 2)}s)"

        if s.style == :bar, do: IO.write("\r\e[2K" <> line <> "\n"), else: IO.puts(line)
        send(from, {:printed, self()})
        loop(s)

      :stop ->
        :ok
    end
  end

  # Losses arrive as floats, or as :nan / :infinity / :neg_infinity.
  defp format_loss(loss) when is_number(loss), do: :erlang.float_to_binary(loss * 1.0, decimals: 4)
  defp format_loss(loss), do: inspect(loss)

  @doc false
  # One redrawn line, cut to the terminal's width (a wrapped line could not be redrawn).
  def bar_line(s, done, total, loss, elapsed_ms) do
    elapsed = max(elapsed_ms, 1)
    bar_width = 20
    filled = div(min(done, total) * bar_width, max(total, 1))
    arrow = if filled < bar_width, do: ">", else: ""

    bar =
      String.duplicate("=", filled) <> arrow <> String.duplicate(" ", bar_width - filled - byte_size(arrow))

    eta = div(elapsed * max(total - done, 0), max(done, 1))
    rate = round(s.samples * done / max(total, 1) / (elapsed / 1000))

    line =
      "Epoch #{s.epoch}/#{s.epochs} [#{bar}] #{done}/#{total}  loss #{format_loss(loss)}  " <>
        "ETA #{Float.round(eta / 1000, 1)}s  #{rate} samples/s"

    String.slice(line, 0, s.width - 1)
  end
end
