defmodule ExBurn.Training do
  @moduledoc """
  Trains compiled models inside Rust with Burn's autodiff: exact gradients, one NIF call per
  step (`train_step/3`) or per epoch (`fit/3`), the dataset resident on the training device
  and batches cut there.

      model = ExBurn.Training.fit(model, {x, y}, epochs: 5, batch_size: 64, validation_data: {vx, vy})
      {loss, accuracy} = ExBurn.Training.evaluate(model, {vx, vy}, true)

  Data are `ExBurn.Tensor`s (Nx tensors too when Nx is loaded): inputs `[samples, ...]`
  (a list for several model inputs) and targets as class ids `[samples]` (integer type) or
  float values (one-hot, regression targets).
  """

  alias ExBurn.{Callbacks, Model, Native, Progress, Tensor}

  @doc """
  Trains for `:epochs` epochs and returns the model with `history` (one metrics map per
  epoch).

  ## Options

    * `:epochs` - default 10
    * `:batch_size` - default 32
    * `:shuffle` - reshuffle each epoch (seeded by the model seed and the epoch; default `true`)
    * `:validation_data` - `{inputs, targets}` evaluated after each epoch
    * `:callbacks` - functions `metrics -> metrics` called after each epoch (see
      `ExBurn.Callbacks`); `stop_training: true` in the returned map stops training
    * `:verbose` - progress output: a bar with loss, accuracy, ETA and samples/s on a
      terminal, plain lines otherwise (default `true`)
    * `:lr_schedule` - `{:step, base, every, gamma}`, `{:exponential, base, gamma}`,
      `{:cosine, base, min}` (per epoch; default: the model's learning rate)
    * `:warmup` - linear warmup over this many optimizer steps (default 0)
    * `:clip_norm`, `:clip_value`, `:weight_decay`, `:nesterov` - override the compiled
      optimizer settings (the optimizer then starts afresh)
    * `:accumulate_gradients` - micro-batches per optimizer step (default 1)
    * `:accuracy` - count correct predictions and report accuracy (default: `true` for
      classification losses; `false` skips the per-batch argmax and compare)
  """
  @spec fit(Model.t(), {term(), term()}, keyword()) :: Model.t()
  def fit(%Model{} = model, {inputs, targets}, opts \\ []) do
    opts =
      Keyword.validate!(opts,
        epochs: 10,
        batch_size: 32,
        shuffle: true,
        validation_data: nil,
        callbacks: [],
        verbose: true,
        lr_schedule: nil,
        warmup: 0,
        clip_norm: nil,
        clip_value: nil,
        weight_decay: nil,
        nesterov: nil,
        accumulate_gradients: 1,
        accuracy: nil
      )

    model = override_optimizer(model, opts)
    data = device_data(model, inputs, targets)

    val =
      opts[:validation_data] &&
        device_data(model, elem(opts[:validation_data], 0), elem(opts[:validation_data], 1))

    n = samples(data)

    steps_per_epoch =
      div(ceil_div(n, opts[:batch_size]) + opts[:accumulate_gradients] - 1, opts[:accumulate_gradients])

    accuracy? = Keyword.get(opts, :accuracy) || (Keyword.get(opts, :accuracy) == nil and model.loss != :mse)
    progress = if opts[:verbose], do: Progress.start(opts[:epochs], n), else: nil

    state = %{model: model, lr_scale: 1.0, history: [], step: 0}

    final =
      Enum.reduce_while(1..opts[:epochs], state, fn epoch, state ->
        base =
          schedule_lr(opts[:lr_schedule] || model.learning_rate, epoch - 1, opts[:epochs]) * state.lr_scale

        lrs = for k <- 0..(steps_per_epoch - 1), do: base * warmup(state.step + k, opts[:warmup])
        Progress.epoch(progress, epoch)

        stats =
          epoch_call(
            model,
            data,
            %{
              batch_size: opts[:batch_size],
              shuffle: if(opts[:shuffle], do: model.seed * 1_000_003 + epoch, else: nil),
              lrs: lrs,
              accumulate: opts[:accumulate_gradients],
              progress_every: if(progress, do: max(1, div(ceil_div(n, opts[:batch_size]), 50)), else: 0),
              accuracy: accuracy?
            },
            progress
          )

        metrics =
          %{
            epoch: epoch,
            loss: stats.loss,
            learning_rate: base,
            samples_per_second: stats.samples / max(stats.seconds, 1.0e-9),
            seconds: stats.seconds
          }
          |> put_if(accuracy?, :accuracy, Map.get(stats, :accuracy))
          |> put_validation(model, val, accuracy?)
          |> Map.put(:model, model)

        Progress.epoch_done(progress, metrics)
        metrics = Callbacks.run(opts[:callbacks], metrics)
        # History keeps the rate this epoch trained with; a callback's new rate applies next.
        history = [metrics |> Map.drop([:model]) |> Map.put(:learning_rate, base) | state.history]

        state = %{
          state
          | history: history,
            step: state.step + stats.steps,
            lr_scale: lr_scale(metrics, base, state.lr_scale)
        }

        if metrics[:stop_training], do: {:halt, state}, else: {:cont, state}
      end)

    Progress.stop(progress)
    %{model | history: Enum.reverse(final.history)}
  end

  defp put_if(map, true, key, value) when not is_nil(value), do: Map.put(map, key, value)
  defp put_if(map, _, _, _), do: map

  defp put_validation(metrics, _model, nil, _acc?), do: metrics

  defp put_validation(metrics, model, val, acc?) do
    s = stats_call(:model_evaluate, model, val, [max(samples(val), 1), acc?])
    metrics |> Map.put(:val_loss, s.loss) |> put_if(acc?, :val_accuracy, Map.get(s, :accuracy))
  end

  # A callback may lower the learning rate by returning a smaller :learning_rate.
  defp lr_scale(%{learning_rate: lr}, base, scale) when base > 0, do: scale * lr / base
  defp lr_scale(_, _, scale), do: scale

  defp override_optimizer(model, opts) do
    overrides =
      opts
      |> Keyword.take([:clip_norm, :clip_value, :weight_decay, :nesterov])
      |> Enum.reject(fn {_, v} -> is_nil(v) end)

    if overrides == [] do
      model
    else
      config = Model.optimizer_config(model.optimizer, Map.to_list(model.optimizer_config) ++ overrides)

      config =
        if config[:nesterov] and not Map.has_key?(config, :momentum),
          do: Map.put(config, :momentum, 0.9),
          else: config

      if config == model.optimizer_config do
        model
      else
        Native.call(:model_call, [model.ref, {:set_optimizer, config}], :fit)
        %{model | optimizer_config: config}
      end
    end
  end

  @doc """
  The learning rate of a schedule at `epoch` (0-based) of `epochs`.

      iex> ExBurn.Training.schedule_lr({:step, 0.1, 2, 0.5}, 3, 10)
      0.05
  """
  @spec schedule_lr(number() | tuple(), non_neg_integer(), pos_integer()) :: float()
  def schedule_lr(lr, _epoch, _epochs) when is_number(lr), do: lr * 1.0
  def schedule_lr({:step, base, every, gamma}, epoch, _), do: base * :math.pow(gamma, div(epoch, every))
  def schedule_lr({:exponential, base, gamma}, epoch, _), do: base * :math.pow(gamma, epoch)

  def schedule_lr({:cosine, base, min}, epoch, epochs) do
    min + 0.5 * (base - min) * (1 + :math.cos(:math.pi() * epoch / max(epochs - 1, 1)))
  end

  def schedule_lr(other, _, _),
    do: raise(ExBurn.Error.new(kind: :argument, op: :fit, message: "unknown lr_schedule #{inspect(other)}"))

  @doc "The linear-warmup factor at optimizer step `step` (0-based) for `warmup` steps."
  @spec warmup(non_neg_integer(), non_neg_integer()) :: float()
  def warmup(_step, 0), do: 1.0
  def warmup(step, warmup), do: min(1.0, (step + 1) / warmup)

  @doc """
  One optimizer step (forward, backward, update in one NIF call); returns `{loss, model}`.

  ## Options

    * `:learning_rate` - default: the model's
  """
  @spec train_step(Model.t(), {term(), term()}, keyword()) :: {float(), Model.t()}
  def train_step(%Model{} = model, {inputs, targets}, opts \\ []) do
    opts = Keyword.validate!(opts, learning_rate: nil)
    d = device_data(model, inputs, targets)
    lr = (opts[:learning_rate] || model.learning_rate) * 1.0
    loss = Native.call(:model_train_step, [model.ref, d.inputs, d.target, lr], :train_step, flavour(model))
    {loss, model}
  end

  @doc """
  Loss over a dataset without training; with `accuracy?` also the accuracy.

  ## Options (as a keyword list in place of `accuracy?`)

    * `:batch_size` - default 256
    * `:accuracy` - return `{loss, accuracy}` (default `false`)
  """
  @spec evaluate(Model.t(), {term(), term()}, boolean() | keyword()) :: float() | {float(), float()}
  def evaluate(model, data, accuracy_or_opts \\ [])
  def evaluate(model, data, acc?) when is_boolean(acc?), do: evaluate(model, data, accuracy: acc?)

  def evaluate(%Model{} = model, {inputs, targets}, opts) do
    opts = Keyword.validate!(opts, batch_size: 256, accuracy: false)
    data = device_data(model, inputs, targets)
    s = stats_call(:model_evaluate, model, data, [opts[:batch_size], opts[:accuracy]])
    if opts[:accuracy], do: {s.loss, Map.get(s, :accuracy)}, else: s.loss
  end

  @doc """
  The model's output in inference mode, one NIF call. `inputs` are `ExBurn.Tensor`s or, when
  Nx is loaded, Nx tensors: then the output is an Nx tensor on `ExBurn.Backend` (on the
  model's device), and inputs already on `ExBurn.Backend` are used without a copy.

  ## Options

    * `:batch_size` - evaluate in batches of this size (default: all at once)
  """
  @spec predict(Model.t(), term(), keyword()) :: Tensor.t() | struct()
  def predict(%Model{} = model, inputs, opts \\ []) do
    opts = Keyword.validate!(opts, batch_size: nil)
    d = device_data(model, inputs, nil)
    bs = opts[:batch_size] || max(samples(d), 1)

    model.ref
    |> then(&Native.call(:model_predict, [&1, d.inputs, bs], :predict, flavour(model)))
    |> Tensor.wrap()
    |> like_input(inputs)
  end

  if Code.ensure_loaded?(Nx) do
    defp like_input(out, [first | _]), do: like_input(out, first)
    defp like_input(out, %Nx.Tensor{}), do: ExBurn.Backend.nx_tensor(out)
  end

  defp like_input(out, _inputs), do: out

  @doc "Same as `predict/3`."
  @spec forward(Model.t(), term(), keyword()) :: Tensor.t()
  def forward(model, inputs, opts \\ []), do: predict(model, inputs, opts)

  @doc "Exact gradients (Burn autodiff) of the loss on a batch: `%{\"layer.param\" => tensor}`."
  @spec compute_gradients(Model.t(), {term(), term()}, keyword()) :: %{String.t() => Tensor.t()}
  def compute_gradients(%Model{} = model, {inputs, targets}, opts \\ []) do
    Keyword.validate!(opts, [])
    d = device_data(model, inputs, targets)

    :model_gradients
    |> Native.call([model.ref, d.inputs, d.target], :compute_gradients, flavour(model))
    |> Map.new(fn {n, t} -> {n, Tensor.wrap(t)} end)
  end

  @doc """
  Times one training step's phases (the device is synchronised after each):
  `%{forward_ms, backward_ms, optimizer_ms}`. The step is really taken.

  ## Options

    * `:learning_rate` - default: the model's
  """
  @spec profile_step(Model.t(), {term(), term()}, keyword()) :: map()
  def profile_step(%Model{} = model, {inputs, targets}, opts \\ []) do
    opts = Keyword.validate!(opts, learning_rate: nil)
    d = device_data(model, inputs, targets)
    lr = (opts[:learning_rate] || model.learning_rate) * 1.0
    Native.call(:model_profile_step, [model.ref, d.inputs, d.target, lr], :profile_step, flavour(model))
  end

  # ---- data plumbing ----

  defp flavour(%Model{device: :cpu}), do: :cpu
  defp flavour(_), do: :io

  defp epoch_call(model, data, opts, progress) do
    pid = Progress.pid(progress)
    Native.call(:model_train_epoch, [model.ref, data.inputs, data.target, opts, pid], :fit, flavour(model))
  end

  defp stats_call(name, model, data, extra) do
    Native.call(name, [model.ref, data.inputs, data.target | extra], :evaluate, flavour(model))
  end

  @doc false
  def device_data(model, inputs, targets) do
    inputs = if is_list(inputs), do: inputs, else: [inputs]
    tensors = Enum.map(inputs, &to_tensor(&1, model.device))

    %{
      inputs: Enum.map(tensors, & &1.ref),
      target: targets && to_tensor(targets, model.device).ref,
      n:
        case tensors do
          [%Tensor{shape: shape} | _] when tuple_size(shape) > 0 -> elem(shape, 0)
          _ -> 0
        end
    }
  end

  defp samples(%{n: n}), do: n

  defp to_tensor(%Tensor{} = t, device), do: Tensor.to_device(t, device)

  if Code.ensure_loaded?(Nx) do
    # Nx tensors on ExBurn.Backend are used in place; others are copied once.
    defp to_tensor(%Nx.Tensor{data: %{__struct__: ExBurn.Backend}} = t, device),
      do: t |> ExBurn.Backend.burn_tensor() |> Tensor.to_device(device)

    defp to_tensor(%Nx.Tensor{} = t, device), do: ExBurn.BurnBridge.from_nx(t, device: device)
  end

  defp to_tensor(other, _device) do
    raise ExBurn.Error.new(
            kind: :argument,
            op: :fit,
            message: "expected an ExBurn.Tensor, got #{inspect(other)}"
          )
  end

  defp ceil_div(a, b), do: div(a + b - 1, b)
end
