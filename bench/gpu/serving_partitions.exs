# Nx.Serving throughput on one GPU against every GPU of the host (`partitions: true`, one
# partition per device), same run, same model and requests:
#
#   an MLP of LAYERS (default 8) layers of WIDTH (default 8192) units, tanh, on batches of
#   ROWS (default 2048) rows of 256 features (the first layer 256 -> WIDTH), summed to one
#   number per row; each request is one full batch; CLIENTS (default 4 per device) clients
#   send REQUESTS (default 200) requests in all.
#
# Every answer is checked against the first one computed on {:cuda, 0} (all requests carry
# the same input), and the devices that answered are counted from the results.
#
#     mix run bench/gpu/serving_partitions.exs        (needs two or more CUDA GPUs)
#
# Results: bench/results/multi_gpu_scaling.md
Application.ensure_all_started(:nx)

defmodule Bench.Partitions do
  import Nx.Defn

  defn weight(layer, opts \\ []) do
    opts = keyword!(opts, rows: 1, cols: 1)
    i = Nx.iota({opts[:rows], opts[:cols]}, type: :f32)
    Nx.sin(i * 0.000123 + layer) * (0.3 / Nx.sqrt(opts[:rows]))
  end

  # a plain function, traced by the compiler: the layers unrolled
  def predict(ws, x) do
    ws
    |> Tuple.to_list()
    |> Enum.reduce(x, fn w, h -> Nx.tanh(Nx.dot(h, w)) end)
    |> Nx.sum(axes: [1])
  end

  def env(name, default), do: String.to_integer(System.get_env(name, default))
end

layers = Bench.Partitions.env("LAYERS", "8")
width = Bench.Partitions.env("WIDTH", "8192")
rows = Bench.Partitions.env("ROWS", "2048")
requests = Bench.Partitions.env("REQUESTS", "200")
# DRY=1: two partitions on the CPU (a check of this script, not a measurement)
{gpus, devices} =
  if System.get_env("DRY") do
    {2, [:cpu, :cpu]}
  else
    gpus = ExBurn.Device.count(:cuda)
    gpus >= 2 || raise "needs two or more CUDA GPUs, found #{gpus}"
    {gpus, for(i <- 0..(gpus - 1), do: {:cuda, i})}
  end

# the weights, made on each partition's device (the same values everywhere)
weights = fn device ->
  make = &Nx.Defn.jit(&1, compiler: ExBurn.Compiler, device: device)

  for l <- 1..layers do
    {r, c} = if l == 1, do: {256, width}, else: {width, width}
    make.(&Bench.Partitions.weight(&1, rows: r, cols: c)).(Nx.tensor(l * 1.0))
  end
  |> List.to_tuple()
end

serving = fn devs ->
  Nx.Serving.new(
    fn opts ->
      ws = weights.(opts[:device])
      jitted = Nx.Defn.jit(&Bench.Partitions.predict/2, opts)
      &jitted.(ws, &1)
    end,
    compiler: ExBurn.Compiler,
    devices: devs
  )
  |> Nx.Serving.batch_size(rows)
end

x = Nx.iota({rows, 256}, type: :f32) |> Nx.divide(rows * 256) |> Nx.backend_copy(Nx.BinaryBackend)
batch = Nx.Batch.concatenate([x])

run = fn devs ->
  name = :"partitions_#{length(devs)}"

  {:ok, sup} =
    Supervisor.start_link(
      [{Nx.Serving, serving: serving.(devs), name: name, batch_timeout: 1, partitions: true}],
      strategy: :one_for_one
    )

  call = fn -> Nx.Serving.batched_run(name, batch) end
  # warm-up: compile and first runs on every partition
  1..(4 * length(devs))
  |> Task.async_stream(fn _ -> Nx.to_binary(call.()) end,
    max_concurrency: 2 * length(devs),
    timeout: :infinity
  )
  |> Stream.run()

  clients = Bench.Partitions.env("CLIENTS", "4") * length(devs)
  t0 = System.monotonic_time(:microsecond)

  answers =
    1..requests
    |> Task.async_stream(
      fn _ ->
        out = call.()
        %ExBurn.Backend{tensor: %{device: device}} = out.data
        {device, Nx.to_binary(out)}
      end,
      max_concurrency: clients,
      timeout: :infinity
    )
    |> Enum.map(fn {:ok, a} -> a end)

  s = (System.monotonic_time(:microsecond) - t0) / 1.0e6
  Supervisor.stop(sup)
  %{seconds: s, rps: requests / s, answers: answers}
end

one = run.([hd(devices)])
all = run.(devices)
reference = one.answers |> hd() |> elem(1) |> Nx.from_binary(:f32)
scale = reference |> Nx.abs() |> Nx.reduce_max() |> Nx.to_number()

worst =
  for {_, bin} <- one.answers ++ all.answers, reduce: 0.0 do
    acc ->
      max(
        acc,
        bin |> Nx.from_binary(:f32) |> Nx.subtract(reference) |> Nx.abs() |> Nx.reduce_max() |> Nx.to_number()
      )
  end

by_device = fn answers -> answers |> Enum.frequencies_by(&elem(&1, 0)) |> Enum.sort() |> inspect() end
flops = 2.0 * rows * (256 * width + (layers - 1) * width * width)

IO.puts("""
machine: #{gpus} GPUs, #{:erlang.system_info(:logical_processors_available)} CPU cores; MLP #{layers} x #{width}, batches of #{rows} rows (#{Float.round(flops / 1.0e9, 1)} GFLOP each), #{requests} requests
| partitions | requests/s | answered by | TFLOP/s |
| --- | --- | --- | --- |
| 1 ({:cuda, 0}) | #{Float.round(one.rps, 1)} | #{by_device.(one.answers)} | #{Float.round(one.rps * flops / 1.0e12, 1)} |
| #{gpus} (every GPU) | #{Float.round(all.rps, 1)} | #{by_device.(all.answers)} | #{Float.round(all.rps * flops / 1.0e12, 1)} |
scaling #{Float.round(all.rps / one.rps, 2)}x; largest difference of any answer from the first: #{worst} (answers up to #{scale})
""")
