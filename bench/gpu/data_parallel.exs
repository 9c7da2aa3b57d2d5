# Data-parallel training with `ExBurn.Training.fit(devices: ...)`: step time and losses on
# one GPU against two and against every GPU of the host, same model, same data, same global
# batch, same run.
#
#   An MLP with about GPT-2 small's parameter count (124M): 768 inputs, LAYERS (default 7)
#   hidden layers of WIDTH (default 4096) units (gelu), 1000 classes, cross-entropy, Adam,
#   f32 parameters with the GPU's default (TF32) products. ROWS (default "8192,16384") rows per
#   global batch; 8192 rows of 768 features is GPT-2 small's 8 x 1024 tokens per step.
#   Each configuration: one `fit` of EPOCHS (default 4) epochs of STEPS (default 20) batches
#   (the other devices get their copy of the data once, before the first epoch); the step time
#   is the median over the epochs after the first of the epoch's wall time over STEPS.
#   COUNTS (default "1,2,all"): the numbers of devices to train on, the first ones of the host.
#
# Losses: the last epoch's mean loss on N GPUs against one GPU (same seed, same batches).
#
#     mix run bench/gpu/data_parallel.exs     (needs two or more CUDA GPUs; DRY=1: the CPU twice)
#
# Results: bench/results/multi_gpu_scaling.md
alias ExBurn.{BurnBridge, Layers, Model, Training}

env = fn name, default -> System.get_env(name, default) end
layers = String.to_integer(env.("LAYERS", "7"))
width = String.to_integer(env.("WIDTH", "4096"))
steps = String.to_integer(env.("STEPS", "20"))
epochs = String.to_integer(env.("EPOCHS", "4"))
row_sets = env.("ROWS", "8192,16384") |> String.split(",") |> Enum.map(&String.to_integer/1)

{devices, label} =
  if System.get_env("DRY") do
    {[:cpu, :cpu], "DRY: the CPU twice"}
  else
    gpus = ExBurn.Device.count(:cuda)
    gpus >= 2 || raise "needs two or more CUDA GPUs, found #{gpus}"
    {for(i <- 0..(gpus - 1), do: {:cuda, i}), "#{gpus} GPUs"}
  end

home = hd(devices)

device_sets =
  env.("COUNTS", "1,2,all")
  |> String.split(",")
  |> Enum.map(fn
    "all" -> devices
    k -> Enum.take(devices, String.to_integer(k))
  end)
  |> Enum.uniq()

build = fn ->
  x = Layers.input("x", shape: {nil, 768})

  1..layers
  |> Enum.reduce(x, fn i, h -> Layers.dense(h, width, name: "h#{i}", activation: :gelu) end)
  |> Layers.dense(1000, name: "out")
  |> Model.compile(
    seed: 11,
    optimizer: :adam,
    learning_rate: 1.0e-4,
    loss: :cross_entropy,
    device: home
  )
end

params = 768 * width + width + (layers - 1) * (width * width + width) + width * 1000 + 1000
IO.puts("model: #{layers} x #{width} MLP, #{Float.round(params / 1.0e6, 1)}M parameters; #{label}")

results =
  for rows <- row_sets do
    n = rows * steps
    x = BurnBridge.random_normal({n, 768}, seed: rows, device: home)

    y =
      BurnBridge.random_uniform({n}, min: 0, max: 999.99, seed: rows + 1, device: home)
      |> BurnBridge.floor()
      |> BurnBridge.as_type(:s64)

    for devs <- device_sets do
      opts = [
        epochs: epochs,
        batch_size: rows,
        shuffle: true,
        verbose: false,
        check_inputs: false,
        devices: devs
      ]

      m = Training.fit(build.(), {x, y}, opts)
      times = m.history |> Enum.drop(1) |> Enum.map(&(&1.seconds * 1000 / steps)) |> Enum.sort()
      ms = Enum.at(times, div(length(times), 2))
      loss = List.last(m.history).loss

      IO.puts(
        "rows #{rows}, #{length(devs)} device(s): #{Float.round(ms, 2)} ms/step (epochs: #{inspect(Enum.map(times, &Float.round(&1, 1)))}), loss #{loss}"
      )

      if length(devs) == 1 do
        cut = fn t ->
          BurnBridge.slice(t, [0 | List.duplicate(0, tuple_size(t.shape) - 1)], [
            rows | tl(Tuple.to_list(t.shape))
          ])
        end

        _ = Training.profile_step(m, {cut.(x), cut.(y)})
        p = Training.profile_step(m, {cut.(x), cut.(y)})
        IO.puts("  one step on #{inspect(home)}, each phase synchronised: #{inspect(p)}")
      end

      {rows, length(devs), ms, loss}
    end
  end
  |> List.flatten()

first = length(hd(device_sets))
IO.puts("\n| rows per step | devices | ms/step | against #{first} device(s) | loss |")
IO.puts("| --- | --- | --- | --- | --- |")

for rows <- row_sets do
  [{_, _, t1, _} | _] = runs = Enum.filter(results, &(elem(&1, 0) == rows))

  for {_, n, t, loss} <- runs do
    IO.puts("| #{rows} | #{n} | #{Float.round(t, 2)} | #{Float.round(t / t1, 3)}x | #{loss} |")
  end
end
