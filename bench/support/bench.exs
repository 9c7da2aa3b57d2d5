# Shared helpers for the bench scripts: timing, machine facts, results tables.
defmodule Bench do
  @moduledoc false

  @doc "Median of `runs` timings (microseconds) of `fun`, after `warmup` calls."
  def median_us(fun, runs, warmup \\ 1) do
    for _ <- 1..warmup, do: fun.()

    1..runs
    |> Enum.map(fn _ -> elem(:timer.tc(fun), 0) end)
    |> median()
  end

  @doc """
  Medians of `runs` rounds of timings (microseconds) of each function in `funs`: each round
  times `batch` consecutive calls of every function in turn (after one warm-up call each), so
  that a machine whose speed drifts during the run slows every contender alike, while each
  contender runs as a loop of its own would (its buffers reused call after call). The calling
  process is garbage-collected before each function's calls, outside their time.
  """
  def interleaved_median_us(funs, runs, batch \\ 1) do
    Enum.each(funs, fn f -> f.() end)

    timed = fn f ->
      :erlang.garbage_collect()
      for _ <- 1..batch, do: elem(:timer.tc(f), 0)
    end

    1..runs
    |> Enum.map(fn _ -> Enum.map(funs, timed) end)
    |> Enum.zip_with(&List.flatten/1)
    |> Enum.map(&median/1)
  end

  @doc "Median per-call time (ns) of `fun`, measured over `batches` batches of `per` calls."
  def median_call_ns(fun, batches, per) do
    for _ <- 1..per, do: fun.()

    1..batches
    |> Enum.map(fn _ ->
      {us, _} = :timer.tc(fn -> for _ <- 1..per, do: fun.() end)
      us * 1000 / per
    end)
    |> median()
  end

  def median(list) do
    sorted = Enum.sort(list)
    Enum.at(sorted, div(length(sorted), 2))
  end

  @doc "A one-line description of this machine."
  def machine do
    cpu =
      case File.read("/proc/cpuinfo") do
        {:ok, s} -> s |> String.split("\n") |> Enum.find_value("unknown CPU", &model/1)
        _ -> "unknown CPU"
      end

    "#{cpu}, #{System.schedulers_online()} cores, OTP #{System.otp_release()}, Elixir #{System.version()}"
  end

  defp model("model name" <> rest), do: rest |> String.split(":", parts: 2) |> List.last() |> String.trim()
  defp model(_), do: nil

  @doc "Runs python3 code and returns its stdout, or nil when python3 or a module is missing."
  def python(code) do
    case System.find_executable("python3") do
      nil ->
        nil

      py ->
        case System.cmd(py, ["-c", code], stderr_to_stdout: true) do
          {out, 0} -> String.trim(out)
          _ -> nil
        end
    end
  end

  @doc "MiB of GPU memory the OS process `pid` holds (nvidia-smi, CUDA context included), or nil."
  def gpu_mib(pid \\ System.pid()) do
    smi = System.find_executable("nvidia-smi")

    case smi &&
           System.cmd(smi, ~w(--query-compute-apps=pid,used_memory --format=csv,noheader,nounits),
             stderr_to_stdout: true
           ) do
      {out, 0} ->
        Enum.find_value(String.split(out, "\n", trim: true), fn line ->
          case line |> String.split(",", trim: true) |> Enum.map(&String.trim/1) do
            [^pid, mib] -> String.to_integer(mib)
            _ -> nil
          end
        end)

      _ ->
        nil
    end
  end

  @doc "Starts sampling this OS process's GPU memory every 100 ms; `gpu_peak/1` stops it."
  def gpu_sampler do
    me = System.pid()

    spawn(fn ->
      loop = fn loop, peak ->
        receive do
          {:stop, from} -> send(from, {:peak, peak})
        after
          100 -> loop.(loop, max(peak, gpu_mib(me) || 0))
        end
      end

      loop.(loop, gpu_mib(me) || 0)
    end)
  end

  @doc "Stops a sampler and returns the peak it saw (MiB), with one last sample."
  def gpu_peak(sampler) do
    send(sampler, {:stop, self()})
    receive(do: ({:peak, p} -> max(p, gpu_mib() || 0)))
  end

  @doc "Writes a markdown results file."
  def write(path, title, intro, header, rows) do
    table =
      [
        "| " <> Enum.join(header, " | ") <> " |",
        "|" <> String.duplicate(" --- |", length(header))
        | Enum.map(rows, fn r -> "| " <> Enum.map_join(r, " | ", &to_string/1) <> " |" end)
      ]
      |> Enum.join("\n")

    body = "# #{title}\n\n#{intro}\n\n#{table}\n"
    File.mkdir_p!(Path.dirname(path))
    File.write!(path, body)
    IO.puts(body)
  end
end
