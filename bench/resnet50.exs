# A whole ResNet-50 (v1.5: bottleneck blocks of 3, 4, 6 and 3, stride on the 3x3 convolutions,
# batch normalization on the batch's statistics as in training), batch 64 of 3 x 224 x 224
# images, 1,000 classes, NCHW (Nx's default layout), f32 with TF32 products: one training step
# (softmax cross-entropy, gradients of every parameter, SGD with momentum 0.9 from Polaris)
# compiled whole by `Nx.Defn.jit` with `ExBurn.Compiler`, against PyTorch (eager, cuDNN, and
# `torch.compile`) and JAX (`jax.jit` of the same step) on the same device in the same run
# (bench/resnet50.py). Every contender starts from the same weights (written by this script to
# a file the peers read) and the same images and labels, and trains the same steps: the losses
# of the first three steps are printed side by side.
#
#     EX_BURN_BENCH_DEVICE=cuda bin/nx-run bench/resnet50.exs
#
# RESNET_SIZE=tiny (one block per stage, widths / 8, batch 4 of 3 x 64 x 64, 10 classes) checks
# the script on a CPU; EX_BURN_BENCH_PEERS (default "torch torch_compile jax"; empty: none),
# EX_BURN_BENCH_ROUNDS (10 timed steps after 3 warm-up steps).
#
# Results: bench/results/resnet50_<device>.md
Code.require_file("support/bench.exs", __DIR__)
Application.ensure_all_started(:nx)
device = ExBurn.Device.normalize!(String.to_atom(System.get_env("EX_BURN_BENCH_DEVICE", "cpu")))
Nx.default_backend({ExBurn.Backend, device: device})
size = System.get_env("RESNET_SIZE", "full")

cfg =
  case size do
    "full" -> %{batch: 64, image: 224, classes: 1000, base: 64, blocks: [3, 4, 6, 3]}
    "tiny" -> %{batch: 4, image: 64, classes: 10, base: 8, blocks: [1, 1, 1, 1]}
  end

defmodule Bench.ResNet do
  @moduledoc false

  @doc "The parameters' names and shapes in file order (bench/resnet50.py lists the same)."
  def shapes(c) do
    bn = fn name, ch -> [{name <> ".g", {ch}}, {name <> ".b", {ch}}] end
    stem = [{"conv1", {c.base, 3, 7, 7}}] ++ bn.("bn1", c.base)

    {blocks, width} =
      c.blocks
      |> Enum.with_index()
      |> Enum.flat_map_reduce(c.base, fn {n, s}, width ->
        mid = c.base * Integer.pow(2, s)

        Enum.map_reduce(0..(n - 1), width, fn b, width ->
          pre = "l#{s}.#{b}."

          block =
            [{pre <> "conv1", {mid, width, 1, 1}}] ++
              bn.(pre <> "bn1", mid) ++
              [{pre <> "conv2", {mid, mid, 3, 3}}] ++
              bn.(pre <> "bn2", mid) ++
              [{pre <> "conv3", {4 * mid, mid, 1, 1}}] ++
              bn.(pre <> "bn3", 4 * mid) ++
              if(b == 0, do: [{pre <> "down", {4 * mid, width, 1, 1}}] ++ bn.(pre <> "bnd", 4 * mid), else: [])

          {block, 4 * mid}
        end)
      end)

    stem ++ List.flatten(blocks) ++ [{"fc.w", {width, c.classes}}, {"fc.b", {c.classes}}]
  end

  @doc """
  Starting weights (convolutions and the classifier N(0, sqrt(2 / fan_in)), batch-norm gains 1,
  biases 0) from `seed`, written to `file` as f32 in `shapes` order: a map name => tensor.
  """
  def weights(shapes, seed, file) do
    key = Nx.Random.key(seed)

    flat =
      for {{name, shape}, i} <- Enum.with_index(shapes) do
        t =
          cond do
            String.ends_with?(name, ".g") ->
              Nx.broadcast(Nx.tensor(1.0, type: :f32), shape)

            String.ends_with?(name, ".b") ->
              Nx.broadcast(Nx.tensor(0.0, type: :f32), shape)

            true ->
              fan_in =
                case shape do
                  {_, i, h, w} -> i * h * w
                  {i, _} -> i
                end

              {z, _} = Nx.Random.normal(Nx.Random.fold_in(key, i), shape: shape)
              Nx.multiply(z, :math.sqrt(2 / fan_in))
          end

        {name, t}
      end

    File.write!(file, Enum.map(flat, fn {_, t} -> Nx.to_binary(t) end))
    {Map.new(flat), flat |> Enum.map(fn {_, t} -> Nx.size(t) end) |> Enum.sum()}
  end

  @doc "Images `sin(i * 0.37) / 2` over the flat index and labels `(7i + 3) rem classes` (the peers make the same)."
  def data(c) do
    n = c.batch * 3 * c.image * c.image
    x = Nx.iota({n}, type: :f32) |> Nx.multiply(0.37) |> Nx.sin() |> Nx.multiply(0.5)
    y = Nx.iota({c.batch}, type: :s32) |> Nx.multiply(7) |> Nx.add(3) |> Nx.remainder(c.classes)
    {Nx.reshape(x, {c.batch, 3, c.image, c.image}), y}
  end

  defp conv(x, w, stride, pad) do
    Nx.conv(x, w, strides: [stride, stride], padding: [{pad, pad}, {pad, pad}])
  end

  # batch normalization with the batch's statistics (biased variance), as in training
  defp bn(x, p, name) do
    mean = Nx.mean(x, axes: [0, 2, 3], keep_axes: true)
    var = Nx.mean(Nx.pow(Nx.subtract(x, mean), 2), axes: [0, 2, 3], keep_axes: true)
    ch = {1, Nx.axis_size(x, 1), 1, 1}

    Nx.subtract(x, mean)
    |> Nx.multiply(Nx.rsqrt(Nx.add(var, 1.0e-5)))
    |> Nx.multiply(Nx.reshape(p[name <> ".g"], ch))
    |> Nx.add(Nx.reshape(p[name <> ".b"], ch))
  end

  defp relu(x), do: Nx.max(x, 0.0)

  defp block(x, p, pre, stride, first) do
    h = relu(bn(conv(x, p[pre <> "conv1"], 1, 0), p, pre <> "bn1"))
    h = relu(bn(conv(h, p[pre <> "conv2"], stride, 1), p, pre <> "bn2"))
    h = bn(conv(h, p[pre <> "conv3"], 1, 0), p, pre <> "bn3")
    skip = if first, do: bn(conv(x, p[pre <> "down"], stride, 0), p, pre <> "bnd"), else: x
    relu(Nx.add(h, skip))
  end

  @doc "The mean softmax cross-entropy of the batch."
  def loss(p, x, y, c) do
    h = relu(bn(conv(x, p["conv1"], 2, 3), p, "bn1"))

    h =
      Nx.window_max(h, {1, 1, 3, 3},
        strides: [1, 1, 2, 2],
        padding: [{0, 0}, {0, 0}, {1, 1}, {1, 1}]
      )

    h =
      c.blocks
      |> Enum.with_index()
      |> Enum.reduce(h, fn {n, s}, h ->
        Enum.reduce(0..(n - 1), h, fn b, h ->
          block(h, p, "l#{s}.#{b}.", if(s > 0 and b == 0, do: 2, else: 1), b == 0)
        end)
      end)

    logits = Nx.add(Nx.dot(Nx.mean(h, axes: [2, 3]), p["fc.w"]), p["fc.b"])
    max = Nx.reduce_max(logits, axes: [1], keep_axes: true)
    lse = Nx.add(Nx.log(Nx.sum(Nx.exp(Nx.subtract(logits, max)), axes: [1], keep_axes: true)), max)
    picked = Nx.take_along_axis(logits, Nx.new_axis(y, 1), axis: 1)
    Nx.mean(Nx.subtract(lse, picked))
  end

  @doc "One SGD step with momentum: the loss before it, the new parameters and optimizer state."
  def train_step(params, state, x, y, c, update) do
    {loss, grads} = Nx.Defn.value_and_grad(params, &loss(&1, x, y, c))
    {updates, state} = update.(grads, state, params)
    {loss, Polaris.Updates.apply_updates(params, updates), state}
  end
end

rounds = String.to_integer(System.get_env("EX_BURN_BENCH_ROUNDS", "10"))
weights_file = Path.join(System.tmp_dir!(), "ex_burn_resnet50_#{size}_weights.f32")
{params, n_params} = Bench.ResNet.weights(Bench.ResNet.shapes(cfg), 7, weights_file)
{images, labels} = Bench.ResNet.data(cfg)
{init, update} = Polaris.Optimizers.sgd(learning_rate: 0.01, momentum: 0.9)
state = init.(params)

step =
  Nx.Defn.jit(fn p, s, x, y -> Bench.ResNet.train_step(p, s, x, y, cfg, update) end,
    compiler: ExBurn.Compiler
  )

{first_us, losses, ours_ms, peak_mib} =
  Bench.train_steps(fn p, s -> step.(p, s, images, labels) end, {params, state}, rounds, device)

peer =
  Bench.peers(
    Path.join(__DIR__, "resnet50.py"),
    "torch torch_compile jax",
    [size, weights_file, to_string(rounds)],
    ~S"\w+_(?:ms|mem|losses)"
  )

Bench.step_report(%{
  peer: peer,
  ms: ours_ms,
  losses: losses,
  names: [
    {"torch", "PyTorch eager (cuDNN)"},
    {"torch_compile", "torch.compile"},
    {"jax", "JAX (jax.jit)"}
  ],
  rate: fn ms -> "#{round(cfg.batch / ms * 1000)} images/s" end,
  path: "bench/results/resnet50_#{ExBurn.Device.family(device)}.md",
  title:
    "ResNet-50 #{size} training step (batch #{cfg.batch} of 3 x #{cfg.image} x #{cfg.image}, #{cfg.classes} classes, #{Float.round(n_params / 1.0e6, 1)}M parameters), f32 / TF32, SGD with momentum, on #{inspect(device)}",
  script: "bench/resnet50.exs",
  rounds: rounds,
  first_us: first_us,
  peak_mib: peak_mib,
  device: device,
  same: "weights, images and labels"
})
