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

  @doc """
  Runs each Python peer named in `EX_BURN_BENCH_PEERS` (else in `default`) as `python3 script
  name args...`: the values of its `key value` lines whose key matches `key` (a regex), as a
  map; a peer that fails is reported and left out.
  """
  def peers(script, default, args, key) do
    for name <- String.split(System.get_env("EX_BURN_BENCH_PEERS", default)), reduce: %{} do
      acc ->
        case System.cmd("python3", [script, name | args], stderr_to_stdout: true) do
          {out, 0} ->
            for line <- String.split(out, "\n", trim: true),
                [_, k, v] <- [Regex.run(~r/^(#{key}) (.+)$/, line)],
                into: acc,
                do: {k, v}

          {out, _} ->
            IO.puts("peer #{name} failed:\n" <> String.slice(out, -2000, 2000))
            acc
        end
    end
  end

  @doc """
  Trains as a loop does, each step on the previous step's parameters and state: `step.(p, s)`
  gives `{loss, p, s}`; every step ends when `device` has finished. Three steps, then `rounds`
  timed ones: `{first step's microseconds, the first three losses, median ms}`, with the GPU
  memory peak of the process (nvidia-smi, MiB) on CUDA devices, else nil, as a fourth element.
  """
  def train_steps(step, {params, state}, rounds, device) do
    sampler = if ExBurn.Device.family(device) == :cuda, do: gpu_sampler()

    run = fn p, s ->
      out = step.(p, s)
      ExBurn.Device.synchronize(device)
      out
    end

    {first_us, {l1, p, s}} = :timer.tc(fn -> run.(params, state) end)
    {l2, p, s} = run.(p, s)
    {l3, p, s} = run.(p, s)

    {times, _} =
      Enum.map_reduce(1..rounds, {p, s}, fn _, {p, s} ->
        t0 = System.monotonic_time(:microsecond)
        {_, p, s} = run.(p, s)
        {System.monotonic_time(:microsecond) - t0, {p, s}}
      end)

    peak = if sampler, do: gpu_peak(sampler)
    {first_us, Enum.map([l1, l2, l3], &Nx.to_number/1), median(times) / 1000, peak}
  end

  @doc """
  Prints and writes (`write/5`) the results of a training-step benchmark against Python peers:
  the `peer` map of `<name>_ms`, `<name>_losses` and `<name>_mem` values, ExBurn's median
  `ms` and first three `losses`, `names` (`{peer name, column label}`), `rate` (a step's
  milliseconds as a throughput, e.g. "82400 tokens/s"), `path`, `title`, `script` (the run's
  file), `rounds`, `first_us` (the first step's time), `peak_mib` (or nil), `device` and `same`
  (what every contender shares, e.g. "weights and tokens").
  """
  def step_report(o) do
    fmt = fn l -> Enum.map_join(l, " / ", &:erlang.float_to_binary(&1, decimals: 5)) end

    IO.puts(
      "ExBurn: #{Float.round(o.ms, 2)} ms/step, first step #{Float.round(o.first_us / 1.0e6, 1)} s, losses #{fmt.(o.losses)}"
    )

    IO.inspect(o.peer, label: "peers")
    peer_ms = fn name -> with v when is_binary(v) <- o.peer[name <> "_ms"], do: String.to_float(v) end

    peer_losses = fn name ->
      with v when is_binary(v) <- o.peer[name <> "_losses"],
           do: v |> String.split(" ") |> Enum.map(&String.to_float/1)
    end

    cell = fn
      nil -> "-"
      ms -> "#{Float.round(ms, 2)} ms (#{o.rate.(ms)})"
    end

    best =
      o.names |> Enum.map(fn {n, _} -> peer_ms.(n) end) |> Enum.reject(&is_nil/1) |> Enum.min(fn -> nil end)

    loss_rows =
      [["ExBurn (Nx.Defn.jit, ExBurn.Compiler)", fmt.(o.losses)]] ++
        for {n, label} <- o.names, l = peer_losses.(n), do: [label, fmt.(l)]

    mem =
      if o.peak_mib,
        do:
          " GPU memory of the process (nvidia-smi, CUDA context included): ExBurn peak #{o.peak_mib} MiB " <>
            "(sampled every 100 ms); after their runs " <>
            Enum.map_join(o.names, ", ", fn {n, _} -> "#{n} #{o.peer[n <> "_mem"] || "-"} MiB" end) <> ".",
        else: ""

    write(
      o.path,
      o.title,
      "Machine: #{machine()}. Device: #{ExBurn.Native.call(:device_info, [o.device]).name}. " <>
        "Run: `EX_BURN_BENCH_DEVICE=... bin/nx-run #{o.script}` (#{Date.utc_today()}). " <>
        "Medians of #{o.rounds} steps after 3 (each step trains on the previous step's weights and " <>
        "optimizer state; each ends when the device has finished). First ExBurn step (tracing, " <>
        "compilation, kernels): #{Float.round(o.first_us / 1.0e6, 1)} s.#{mem}\n\n" <>
        "Losses of the first three steps (same starting #{o.same}):\n\n" <>
        Enum.map_join(loss_rows, "\n", fn [a, b] -> "- #{a}: #{b}" end),
      ["ExBurn (Nx.Defn.jit, ExBurn.Compiler)"] ++ Enum.map(o.names, &elem(&1, 1)) ++ ["ExBurn / best peer"],
      [
        [cell.(o.ms)] ++
          Enum.map(o.names, fn {n, _} -> cell.(peer_ms.(n)) end) ++
          [if(best, do: "#{Float.round(best / o.ms, 2)}x", else: "-")]
      ]
    )
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

    run = "#{intro}\n\n#{table}\n"
    File.mkdir_p!(Path.dirname(path))
    File.write!(path, with_earlier_runs(path, title, run))
    IO.puts("# #{title}\n\n" <> run)
  end

  # The file's title, this run as its first section, then the runs and notes already recorded
  # there (a results file keeps its history; a run never erases it).
  defp with_earlier_runs(path, title, run) do
    section = "## #{Date.utc_today()}, `#{Path.basename(path, ".md")}` run\n\n#{run}"

    earlier =
      case File.read(path) do
        {:ok, text} -> text |> String.replace(~r/\A# [^\n]*\n+/, "") |> String.trim()
        {:error, _} -> ""
      end

    Enum.join(["# #{title}", section | List.wrap(if earlier != "", do: earlier)], "\n\n") <> "\n"
  end
end
