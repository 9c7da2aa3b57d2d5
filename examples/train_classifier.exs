# The main job: train a classifier natively (Burn autodiff inside Rust), save it, reload it
# and predict, on the default device (the CPU unless configured otherwise). Progress is a
# redrawn bar on a terminal and one line per epoch otherwise (EX_BURN_PROGRESS=bar|lines).
#
#     bin/setup && mix run examples/train_classifier.exs                 # generated data
#     bin/setup && mix run examples/train_classifier.exs /path/to/mnist  # MNIST IDX files
#
# The generated task: 28x28 "images" of 10 classes, each a class prototype (a few smooth
# bumps) plus strong pixel noise, so a model must average evidence over many pixels.
alias ExBurn.{BurnBridge, Dataset, Layers, Model, Tensor, Training}

defmodule Example do
  def timed(label, fun) do
    {us, value} = :timer.tc(fun)
    IO.puts("#{label}: #{Float.round(us / 1_000_000, 2)} s")
    value
  end

  # Prototypes: per class, three Gaussian bumps at seeded positions on a 28x28 grid.
  def generated(n, seed) do
    grid = BurnBridge.iota({28, 28}, :f32, axis: 0)
    cols = BurnBridge.iota({28, 28}, :f32, axis: 1)
    centers = BurnBridge.random_uniform({10, 3, 2}, min: 4.0, max: 24.0, seed: 42) |> Tensor.to_list()

    protos =
      for bumps <- centers do
        bumps
        |> Enum.map(fn [r, c] ->
          d2 =
            BurnBridge.add(
              BurnBridge.pow(BurnBridge.subtract(grid, r), 2),
              BurnBridge.pow(BurnBridge.subtract(cols, c), 2)
            )

          BurnBridge.exp(BurnBridge.divide(d2, -18.0))
        end)
        |> Enum.reduce(&BurnBridge.add/2)
        |> BurnBridge.reshape({1, 784})
      end
      |> BurnBridge.concatenate(0)

    labels = BurnBridge.random_uniform({n}, min: 0, max: 10, type: :s64, seed: seed)
    noise = BurnBridge.random_normal({n, 784}, std: 1.6, seed: seed + 1)
    # One-hot rows times the prototype matrix pick each sample's prototype (exactly).
    picked = labels |> Dataset.one_hot(num_classes: 10) |> BurnBridge.matmul(protos)
    x = BurnBridge.add(picked, noise)
    {x, labels}
  end
end

{train, test} =
  case System.argv() do
    [dir | _] ->
      IO.puts("MNIST from #{dir}")
      Dataset.mnist(dir)

    [] ->
      IO.puts("Generated 10-class task (28x28, noisy prototypes)")
      {Example.generated(12_000, 1), Example.generated(2_000, 7)}
  end

{x_train, y_train} = train
IO.puts(ExBurn.summary())

mlp =
  Layers.input("pixels", shape: {nil, 784})
  |> Layers.dense(256, activation: :relu, name: "hidden1")
  |> Layers.dropout(rate: 0.1)
  |> Layers.dense(128, activation: :relu, name: "hidden2")
  |> Layers.dense(10, activation: :softmax, name: "output")
  |> Model.compile(loss: :cross_entropy, optimizer: :adam, learning_rate: 1.0e-3, seed: 1)

IO.puts(Model.summary(mlp))

mlp =
  Example.timed("MLP training", fn ->
    Training.fit(mlp, train,
      epochs: 4,
      batch_size: 128,
      validation_data: test,
      lr_schedule: {:cosine, 1.0e-3, 1.0e-4}
    )
  end)

{_, mlp_acc} = Training.evaluate(mlp, test, accuracy: true)
IO.puts("MLP validation accuracy: #{Float.round(mlp_acc * 100, 2)}%")

n_train = elem(x_train.shape, 0)
images = fn {x, y} -> {BurnBridge.reshape(x, {elem(x.shape, 0), 28, 28, 1}), y} end

cnn =
  Layers.input("image", shape: {nil, 28, 28, 1})
  |> Layers.conv(8, kernel_size: {3, 3}, activation: :relu, name: "conv1")
  |> Layers.max_pool(kernel_size: {2, 2})
  |> Layers.conv(16, kernel_size: {3, 3}, activation: :relu, name: "conv2")
  |> Layers.max_pool(kernel_size: {2, 2})
  |> Layers.flatten()
  |> Layers.dense(10, activation: :softmax, name: "logits")
  |> Model.compile(optimizer: :adam, learning_rate: 2.0e-3, seed: 2)

IO.puts(Model.summary(cnn))

cnn_train =
  images.(
    {BurnBridge.slice(x_train, [0, 0], [min(n_train, 6000), 784]),
     BurnBridge.slice(y_train, [0], [min(n_train, 6000)])}
  )

cnn =
  Example.timed("CNN training", fn ->
    Training.fit(cnn, cnn_train, epochs: 2, batch_size: 64, validation_data: images.(test))
  end)

{_, cnn_acc} = Training.evaluate(cnn, images.(test), accuracy: true)
IO.puts("CNN validation accuracy: #{Float.round(cnn_acc * 100, 2)}%")

path = Path.join(System.tmp_dir!(), "ex_burn_classifier.safetensors")
Example.timed("save", fn -> Model.save(mlp, path) end)
{:ok, reloaded} = Example.timed("load", fn -> Model.load(path, []) end)

{x_test, y_test} = test
before = Training.predict(mlp, x_test) |> BurnBridge.argmax(axis: 1)
after_ = Training.predict(reloaded, x_test) |> BurnBridge.argmax(axis: 1)
same = BurnBridge.equal(before, after_) |> BurnBridge.all() |> Tensor.to_list() == 1
correct = BurnBridge.equal(after_, y_test) |> BurnBridge.sum() |> Tensor.to_list()

IO.puts(
  "Reloaded model: #{correct}/#{elem(y_test.shape, 0)} correct; predictions identical to the trained model: #{same}"
)

IO.puts(
  "First predictions: #{inspect(Enum.take(Tensor.to_list(after_), 10))} (labels #{inspect(Enum.take(Tensor.to_list(y_test), 10))})"
)

unless mlp_acc >= 0.95 and same,
  do: raise("expected >= 95% validation accuracy and identical reloaded predictions")

IO.puts("train_classifier finished")
