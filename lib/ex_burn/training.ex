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

  alias ExBurn.{Callbacks, Model, Native, Options, Progress, Tensor}

  @non_finite [
    type: {:in, [:raise, :skip, :stop]},
    default: :raise,
    doc:
      "what a step whose loss, gradients or batch-norm statistics hold NaN or infinity does; " <>
        "they are checked before the update (one small device read per step, see the training " <>
        "guide), so such a step is never applied: `:raise` (an `ExBurn.Error` of kind " <>
        "`:non_finite` naming the epoch, the batch and what was not finite; the weights and the " <>
        "optimizer state are as before that step), `:skip` (leave the step out), `:stop` (end " <>
        "training after the epoch's completed steps). An update that overflows by itself " <>
        "(finite gradients) is found when the parameters are checked (after each epoch, and " <>
        "when a step fails its check) and always raises"
  ]

  @fit_opts [
              epochs: [type: :non_neg_integer, default: 10, doc: "epochs to train (0: none)"],
              batch_size: [type: :pos_integer, default: 32, doc: "samples per batch"],
              shuffle: [
                type: :boolean,
                default: true,
                doc: "reshuffle each epoch (seeded by the model seed and the epoch)"
              ],
              validation_data: [
                type: {:or, [nil, {:custom, &__MODULE__.pair/1}]},
                default: nil,
                doc: "`{inputs, targets}` evaluated after each epoch"
              ],
              callbacks: [
                type: {:list, {:fun, 1}},
                default: [],
                doc:
                  "functions `metrics -> metrics` called after each epoch (see `ExBurn.Callbacks`); " <>
                    "`stop_training: true` in the returned map stops training, another `:learning_rate` " <>
                    "(a finite non-negative number) sets the rate of the following epochs"
              ],
              verbose: [
                type: :boolean,
                default: true,
                doc:
                  "progress output: a bar with loss, accuracy, ETA and samples/s on a terminal, " <>
                    "plain lines otherwise"
              ],
              lr_schedule: [
                type: {:or, [nil, {:custom, &__MODULE__.schedule/1}]},
                default: nil,
                doc:
                  "`{:step, base, every, gamma}`, `{:exponential, base, gamma}`, `{:cosine, base, min}` " <>
                    "of finite non-negative numbers (per epoch; default: the model's learning rate); a rate " <>
                    "beyond the float range is an `ExBurn.Error` of kind `:argument`"
              ],
              warmup: [
                type: :non_neg_integer,
                default: 0,
                doc: "linear warmup over this many optimizer steps"
              ],
              accumulate_gradients: [type: :pos_integer, default: 1, doc: "micro-batches per optimizer step"],
              devices: [
                type:
                  {:or,
                   [
                     nil,
                     {:custom, &__MODULE__.devices/1,
                      "a list of at most 64 devices (:cpu, {:cuda, i}, {:vulkan, i} or {:metal, i})"}
                   ]},
                default: nil,
                doc:
                  "train on several devices at once (data parallelism), e.g. `[{:cuda, 0}, {:cuda, 1}]`: " <>
                    "the list holds the model's device; every other device gets a copy of the parameters " <>
                    "and optimizer state, each batch's rows are split evenly over the devices and the " <>
                    "gradients summed across them (NCCL between NVIDIA GPUs where the library loads, " <>
                    "else through the host), so losses and weights are those of one device at the same " <>
                    "`:batch_size` (and `:accumulate_gradients`). The model and its data stay on the model's " <>
                    "device. Not combined with batch normalization layers (an `ExBurn.Error` of kind " <>
                    "`:argument`); see the scaling guide"
              ],
              accuracy: [
                type: {:or, [nil, :boolean]},
                default: nil,
                doc:
                  "count correct predictions and report accuracy (default: `true` for classification " <>
                    "losses; `false` skips the per-batch argmax and compare)"
              ],
              on_non_finite: @non_finite,
              check_inputs: [
                type: :boolean,
                default: true,
                doc:
                  "check the inputs, float targets and validation data for NaN and infinities before " <>
                    "training: an `ExBurn.Error` of kind `:non_finite` names the tensor and the first " <>
                    "sample holding one, and nothing is trained (cost: one reduction over the data on its " <>
                    "device, once per call); `false` skips the check"
              ],
              timeout: [
                type: {:or, [{:in, [:infinity]}, :non_neg_integer]},
                default: :infinity,
                doc:
                  "milliseconds the whole call may train; past it the engine stops between two steps " <>
                    "and the call raises an `ExBurn.Error` of kind `:cancelled` (the model keeps the " <>
                    "steps completed before). Training also stops within a step when the calling " <>
                    "process exits"
              ]
            ] ++
              Enum.map(
                Keyword.take(Model.optimizer_schema(), [:clip_norm, :clip_value, :weight_decay, :nesterov]),
                fn {k, spec} ->
                  {k,
                   Keyword.update!(
                     spec,
                     :doc,
                     &(&1 <> "; overrides the compiled setting (the optimizer then starts afresh)")
                   )}
                end
              )

  @doc false
  # A list of at most 64 devices (the length is checked before any element is looked at).
  def devices(list) when is_list(list) do
    with true <- ExBurn.Format.at_most?(list, 64) and Options.proper_list?(list),
         {:ok, devices} <- normalize_devices(list) do
      {:ok, devices}
    else
      _ -> :error
    end
  end

  def devices(_), do: :error

  defp normalize_devices(list) do
    {:ok, Enum.map(list, &ExBurn.Device.normalize!/1)}
  rescue
    ExBurn.Error -> :error
  end

  @doc false
  def pair({_, _} = p), do: {:ok, p}
  def pair(_), do: :error

  @doc false
  # A schedule's numbers are finite (floats, or integers in the float range) and non-negative.
  def schedule(lr) when is_number(lr), do: if(rate?(lr), do: {:ok, lr}, else: :error)

  def schedule({:step, base, every, gamma} = s)
      when is_integer(every) and every > 0 and every <= 18_446_744_073_709_551_615,
      do: if(rate?(base) and rate?(gamma), do: {:ok, s}, else: :error)

  def schedule({:exponential, base, gamma} = s),
    do: if(rate?(base) and rate?(gamma), do: {:ok, s}, else: :error)

  def schedule({:cosine, base, min} = s), do: if(rate?(base) and rate?(min), do: {:ok, s}, else: :error)
  def schedule(_), do: :error

  defp rate?(x) when is_float(x), do: x >= 0
  defp rate?(x) when is_integer(x), do: x >= 0 and x < 1.0e300
  defp rate?(_), do: false

  @doc """
  Trains for `:epochs` epochs and returns the model with `history` (one metrics map per
  epoch).

  NaN and infinities never train silently: the data are checked before the first epoch
  (`:check_inputs`), every step's loss, gradients and batch-norm statistics are checked
  before its update (`:on_non_finite`), and the parameters after each epoch. Both raise
  `ExBurn.Error` of kind `:non_finite` by default.

  ## Options

  #{Options.docs(@fit_opts)}
  """
  @spec fit(Model.t(), {term(), term()}, keyword()) :: Model.t()
  def fit(model, data, opts \\ [])

  def fit(%Model{} = model, {inputs, targets}, opts) do
    opts = Options.validate!(opts, @fit_opts, :fit)
    model = override_optimizer(model, opts)
    data = device_data(model, inputs, targets, :fit)

    val =
      opts[:validation_data] &&
        device_data(model, elem(opts[:validation_data], 0), elem(opts[:validation_data], 1), :fit)

    n = samples(data)
    if n == 0, do: Options.fail(:fit, "the training data has no samples")

    accuracy? = if opts[:accuracy] == nil, do: model.loss != :mse, else: opts[:accuracy]
    progress = if opts[:verbose] and opts[:epochs] > 0, do: Progress.start(opts[:epochs], n), else: nil

    # The progress process ends with the call, however the call ends (a callback raising too).
    try do
      train(model, data, val, n, accuracy?, progress, opts)
    after
      Progress.stop(progress)
    end
  end

  def fit(%Model{}, data, _opts),
    do: Options.fail(:fit, "expected the data as {inputs, targets}, got #{Options.short(data)}")

  def fit(other, _data, _opts), do: Model.not_a_model(other, :fit)

  defp train(model, data, val, n, accuracy?, progress, opts) do
    state = %{history: [], step: 0, lr_scale: 1.0}
    devices = train_devices(model, opts[:devices])
    # the data on each other device, copied once for all epochs
    data = Map.put(data, :copies, copies(data, Enum.drop(devices, 1)))
    deadline = deadline(opts[:timeout])

    final =
      Enum.reduce_while(1..opts[:epochs]//1, state, fn epoch, state ->
        base = epoch_rate(opts[:lr_schedule] || model.learning_rate, epoch, opts[:epochs], state.lr_scale)
        Progress.epoch(progress, epoch)
        # The data are checked for NaN and infinities once, by the first epoch's call.
        check? = opts[:check_inputs] and epoch == 1

        stats =
          epoch_call(
            model,
            data,
            %{
              epoch: epoch,
              batch_size: opts[:batch_size],
              shuffle:
                if(opts[:shuffle],
                  do: rem(model.seed * 1_000_003 + epoch, 18_446_744_073_709_551_616),
                  else: nil
                ),
              lrs: [base],
              warmup: opts[:warmup],
              first_step: state.step,
              accumulate: opts[:accumulate_gradients],
              devices: devices,
              progress_every: if(progress, do: max(1, div(ceil_div(n, opts[:batch_size]), 50)), else: 0),
              accuracy: accuracy?,
              on_non_finite: opts[:on_non_finite],
              check_inputs: check?,
              timeout: time_left(deadline, opts[:timeout])
            },
            if(check? and val != nil, do: {val.inputs, val.target}),
            progress,
            opts[:timeout]
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
          |> put_if(stats.skipped > 0, :skipped_batches, stats.skipped)
          |> put_validation(model, val, accuracy?)
          |> Map.put(:model, model)

        Progress.epoch_done(progress, metrics)
        metrics = Callbacks.run(opts[:callbacks], metrics)
        metrics = if stats.stopped, do: Map.put(metrics, :stopped, :non_finite), else: metrics
        # History keeps the rate this epoch trained with; a callback's new rate applies next.
        history = [metrics |> Map.drop([:model]) |> Map.put(:learning_rate, base) | state.history]

        state = %{
          state
          | history: history,
            step: state.step + stats.steps,
            lr_scale: lr_scale(metrics, base, state.lr_scale)
        }

        if metrics[:stop_training] || stats.stopped, do: {:halt, state}, else: {:cont, state}
      end)

    %{model | history: Enum.reverse(final.history)}
  end

  defp deadline(:infinity), do: nil
  defp deadline(ms), do: System.monotonic_time(:millisecond) + ms

  # What is left of fit's timeout for the next epoch; none left raises as the engine would.
  defp time_left(nil, _timeout), do: nil

  defp time_left(deadline, timeout) do
    case deadline - System.monotonic_time(:millisecond) do
      left when left > 0 ->
        left

      _ ->
        raise timed_out(timeout)
    end
  end

  # fit's timeout error, naming the `timeout:` given to fit (as the engine's names its call's)
  defp timed_out(timeout) do
    ExBurn.Error.new(
      kind: :cancelled,
      op: :fit,
      message: "timed out after #{timeout} ms; the native work was stopped"
    )
  end

  # The rate of an epoch (1-based): the schedule's times the callbacks' scale, a finite float.
  defp epoch_rate(schedule, epoch, epochs, scale) do
    with {:ok, lr} <- scheduled(schedule, epoch - 1, epochs),
         {:ok, rate} <- finite_product(lr, scale) do
      rate
    else
      :error ->
        Options.fail(
          :fit,
          "the learning rate of epoch #{epoch} (lr_schedule #{Options.short(schedule)} times " <>
            "#{scale} from callbacks) is beyond the float range"
        )
    end
  end

  defp finite_product(a, b) do
    # + 0.0 makes a negative zero (a callback returning -0.0) the plain 0.0
    {:ok, a * b * 1.0 + 0.0}
  rescue
    ArithmeticError -> :error
  end

  defp put_if(map, true, key, value) when not is_nil(value), do: Map.put(map, key, value)
  defp put_if(map, _, _, _), do: map

  defp put_validation(metrics, _model, nil, _acc?), do: metrics

  defp put_validation(metrics, model, val, acc?) do
    s = stats_call(model, val, %{batch_size: max(samples(val), 1), accuracy: acc?})
    metrics |> Map.put(:val_loss, s.loss) |> put_if(acc?, :val_accuracy, Map.get(s, :accuracy))
  end

  # A callback changes the rate of the following epochs by returning another :learning_rate: a
  # finite non-negative number (kept as a scale of the schedule's rate).
  defp lr_scale(%{learning_rate: lr}, base, scale) when lr === base, do: scale

  defp lr_scale(%{learning_rate: lr}, base, scale) do
    unless rate?(lr) do
      Options.fail(
        :fit,
        "a callback returned learning_rate #{Options.short(lr)} (expected a finite non-negative number)"
      )
    end

    if base > 0, do: scaled(scale, lr, base), else: scale
  end

  defp lr_scale(_metrics, _base, scale), do: scale

  defp scaled(scale, lr, base) do
    scale * lr / base
  rescue
    ArithmeticError ->
      Options.fail(
        :fit,
        "a callback returned learning_rate #{Options.short(lr)}, which over this epoch's #{base} " <>
          "puts the next epochs' rate beyond the float range"
      )
  end

  defp override_optimizer(model, opts) do
    overrides =
      opts
      |> Keyword.take([:clip_norm, :clip_value, :weight_decay, :nesterov])
      |> Enum.reject(fn {_, v} -> is_nil(v) end)

    if overrides == [] do
      model
    else
      config =
        Model.optimizer_config(model.optimizer, Keyword.merge(Map.to_list(model.optimizer_config), overrides))

      config =
        if config[:nesterov] == true and not Map.has_key?(config, :momentum),
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
  def schedule_lr(schedule, epoch, epochs)
      when not (is_integer(epoch) and epoch >= 0 and is_integer(epochs) and epochs > 0 and
                  epochs <= 18_446_744_073_709_551_615 and epoch <= 18_446_744_073_709_551_615) do
    Options.fail(
      :schedule_lr,
      "expected 64-bit integers epoch >= 0 and epochs > 0, got #{Options.short({schedule, epoch, epochs})}"
    )
  end

  def schedule_lr(schedule, epoch, epochs) do
    if schedule(schedule) == :error,
      do:
        Options.fail(
          :schedule_lr,
          "invalid lr_schedule #{Options.short(schedule)} (expected a rate, {:step, base, every, gamma}, " <>
            "{:exponential, base, gamma} or {:cosine, base, min} of finite non-negative numbers)"
        )

    case scheduled(schedule, epoch, epochs) do
      {:ok, lr} ->
        lr

      :error ->
        Options.fail(
          :schedule_lr,
          "lr_schedule #{Options.short(schedule)} gives a learning rate beyond the float range at epoch #{epoch}"
        )
    end
  end

  # A validated schedule's rate, or :error when it leaves the float range.
  defp scheduled(schedule, epoch, epochs) do
    {:ok, rate(schedule, epoch, epochs)}
  rescue
    ArithmeticError -> :error
  end

  defp rate(lr, _epoch, _epochs) when is_number(lr), do: lr * 1.0
  defp rate({:step, base, every, gamma}, epoch, _), do: base * :math.pow(gamma, div(epoch, every))
  defp rate({:exponential, base, gamma}, epoch, _), do: base * :math.pow(gamma, epoch)

  defp rate({:cosine, base, min}, epoch, epochs) do
    min + 0.5 * (base - min) * (1 + :math.cos(:math.pi() * epoch / max(epochs - 1, 1)))
  end

  @doc "The linear-warmup factor at optimizer step `step` (0-based) for `warmup` steps."
  @spec warmup(non_neg_integer(), non_neg_integer()) :: float()
  def warmup(step, warmup)
      when not (is_integer(step) and step >= 0 and step <= 18_446_744_073_709_551_615 and
                  is_integer(warmup) and warmup >= 0 and warmup <= 18_446_744_073_709_551_615),
      do: Options.fail(:warmup, "expected non-negative 64-bit integers, got #{Options.short({step, warmup})}")

  def warmup(_step, 0), do: 1.0
  def warmup(step, warmup), do: min(1.0, (step + 1) / warmup)

  @step_opts [
    learning_rate: [type: {:or, [nil, :non_neg_number]}, default: nil, doc: "default: the model's"],
    on_non_finite:
      Keyword.put(
        @non_finite,
        :doc,
        "`:raise` (default) or `:skip`/`:stop` (no update; the loss is returned) for a step whose " <>
          "loss, gradients or batch-norm statistics hold NaN or infinity"
      )
  ]

  @doc """
  One optimizer step (forward, backward, update in one NIF call); returns `{loss, model}`.
  A step whose loss, gradients or batch-norm statistics hold NaN or infinity is not applied:
  the weights and the optimizer state stay as they were. The updated parameters are checked
  after the step; an update that overflowed raises.

  ## Options

  #{Options.docs(@step_opts)}
  """
  @spec train_step(Model.t(), {term(), term()}, keyword()) :: {float() | atom(), Model.t()}
  def train_step(model, data, opts \\ [])

  def train_step(%Model{} = model, {inputs, targets}, opts) do
    opts = Options.validate!(opts, @step_opts, :train_step)
    d = device_data(model, inputs, targets, :train_step)
    lr = (opts[:learning_rate] || model.learning_rate) * 1.0
    step_opts = %{learning_rate: lr, on_non_finite: opts[:on_non_finite]}
    {loss, _applied} = Native.call(:model_train_step, [model.ref, d.inputs, d.target, step_opts], :train_step)
    {loss, model}
  end

  def train_step(%Model{}, data, _opts),
    do: Options.fail(:train_step, "expected the batch as {inputs, targets}, got #{Options.short(data)}")

  def train_step(other, _data, _opts), do: Model.not_a_model(other, :train_step)

  @evaluate_opts [
    batch_size: [type: :pos_integer, default: 256, doc: "samples per batch"],
    accuracy: [type: :boolean, default: false, doc: "return `{loss, accuracy}`"]
  ]

  @doc """
  Loss over a dataset without training; with `accuracy?` also the accuracy.

  ## Options (a keyword list in place of `accuracy?`)

  #{Options.docs(@evaluate_opts)}
  """
  @spec evaluate(Model.t(), {term(), term()}, boolean() | keyword()) :: float() | {float(), float()}
  def evaluate(model, data, accuracy_or_opts \\ [])
  def evaluate(model, data, acc?) when is_boolean(acc?), do: evaluate(model, data, accuracy: acc?)

  def evaluate(%Model{} = model, {inputs, targets}, opts) do
    opts = Options.validate!(opts, @evaluate_opts, :evaluate)
    data = device_data(model, inputs, targets, :evaluate)
    if samples(data) == 0, do: Options.fail(:evaluate, "the data has no samples")
    s = stats_call(model, data, %{batch_size: opts[:batch_size], accuracy: opts[:accuracy]})
    if opts[:accuracy], do: {s.loss, Map.get(s, :accuracy)}, else: s.loss
  end

  def evaluate(%Model{}, data, _opts),
    do: Options.fail(:evaluate, "expected the data as {inputs, targets}, got #{Options.short(data)}")

  def evaluate(other, _data, _opts), do: Model.not_a_model(other, :evaluate)

  @predict_opts [
    batch_size: [
      type: {:or, [nil, :pos_integer]},
      default: nil,
      doc: "evaluate in batches of this size (default: all at once)"
    ]
  ]

  @doc """
  The model's output in inference mode, one NIF call. `inputs` are `ExBurn.Tensor`s or, when
  Nx is loaded, Nx tensors: then the output is an Nx tensor on `ExBurn.Backend` (on the
  model's device), and inputs already on `ExBurn.Backend` are used without a copy.

  ## Options

  #{Options.docs(@predict_opts)}
  """
  @spec predict(Model.t(), term(), keyword()) :: Tensor.t() | struct()
  def predict(model, inputs, opts \\ [])

  def predict(%Model{} = model, inputs, opts) do
    opts = Options.validate!(opts, @predict_opts, :predict)
    d = device_data(model, inputs, nil, :predict)
    bs = opts[:batch_size] || max(samples(d), 1)

    model.ref
    |> then(&Native.call(:model_predict, [&1, d.inputs, bs], :predict))
    |> Tensor.wrap()
    |> like_input(inputs)
  end

  def predict(other, _inputs, _opts), do: Model.not_a_model(other, :predict)

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
  def compute_gradients(model, data, opts \\ [])

  def compute_gradients(%Model{} = model, {inputs, targets}, opts) do
    Options.validate!(opts, [], :compute_gradients)
    d = device_data(model, inputs, targets, :compute_gradients)

    :model_gradients
    |> Native.call([model.ref, d.inputs, d.target], :compute_gradients)
    |> Map.new(fn {n, t} -> {n, Tensor.wrap(t)} end)
  end

  def compute_gradients(%Model{}, data, _opts),
    do:
      Options.fail(:compute_gradients, "expected the batch as {inputs, targets}, got #{Options.short(data)}")

  def compute_gradients(other, _data, _opts), do: Model.not_a_model(other, :compute_gradients)

  @profile_opts [
    learning_rate: [type: {:or, [nil, :non_neg_number]}, default: nil, doc: "default: the model's"]
  ]

  @doc """
  Times one training step's phases (the device is synchronised after each):
  `%{forward_ms, backward_ms, optimizer_ms}`. The step is really taken.

  ## Options

  #{Options.docs(@profile_opts)}
  """
  @spec profile_step(Model.t(), {term(), term()}, keyword()) :: map()
  def profile_step(model, data, opts \\ [])

  def profile_step(%Model{} = model, {inputs, targets}, opts) do
    opts = Options.validate!(opts, @profile_opts, :profile_step)
    d = device_data(model, inputs, targets, :profile_step)
    lr = (opts[:learning_rate] || model.learning_rate) * 1.0
    Native.call(:model_profile_step, [model.ref, d.inputs, d.target, lr], :profile_step)
  end

  def profile_step(%Model{}, data, _opts),
    do: Options.fail(:profile_step, "expected the batch as {inputs, targets}, got #{Options.short(data)}")

  def profile_step(other, _data, _opts), do: Model.not_a_model(other, :profile_step)

  # ---- data plumbing ----

  # `opts` are the engine's EpochOptions (native/ex_burn_core/src/train/model/options.rs);
  # `validation` is `{inputs, target}` to check with the data (`check_inputs`) or nil.
  # The model's device first, then the others in the order given.
  defp train_devices(_model, nil), do: []

  defp train_devices(model, devices) do
    case Enum.split_with(devices, &(&1 == model.device)) do
      {[], _} ->
        Options.fail(
          :fit,
          "devices must include the model's device #{inspect(model.device)} " <>
            "(move the model with ExBurn.Model.to_device/2 first)"
        )

      {[own | again], others} ->
        [own | again ++ others]
    end
  end

  defp copies(data, devices) do
    to = fn ref, device -> elem(Native.call(:tensor_to_device, [ref, device], :fit), 0) end

    for device <- devices do
      {Enum.map(data.inputs, &to.(&1, device)), data.target && to.(data.target, device)}
    end
  end

  # One epoch in the engine; `timeout` is fit's (the epoch runs with what is left of it).
  defp epoch_call(model, data, opts, validation, progress, timeout) do
    pid = Progress.pid(progress)
    args = [model.ref, data.inputs, data.target, opts, validation, pid, Map.get(data, :copies, [])]
    Native.call(:model_train_epoch, args, :fit)
  rescue
    # the engine names the time the epoch was given; the error names fit's timeout
    e in ExBurn.Error ->
      case e do
        %ExBurn.Error{kind: :cancelled, message: "timed out after " <> _} when is_integer(timeout) ->
          reraise %{e | message: timed_out(timeout).message}, __STACKTRACE__

        _ ->
          reraise e, __STACKTRACE__
      end
  end

  defp stats_call(model, data, opts) do
    Native.call(:model_evaluate, [model.ref, data.inputs, data.target, opts], :evaluate)
  end

  @doc false
  def device_data(model, inputs, targets, op) do
    inputs = if is_list(inputs), do: inputs, else: [inputs]
    if inputs == [], do: Options.fail(op, "expected at least one input tensor")

    unless ExBurn.Format.at_most?(inputs, 65_536) and Options.proper_list?(inputs),
      do:
        Options.fail(
          op,
          "inputs: expected a proper list of at most 65536 tensors, got #{Options.short(inputs)}"
        )

    tensors = Enum.map(inputs, &to_tensor(&1, model.device, op))

    %{
      inputs: Enum.map(tensors, & &1.ref),
      target: targets && to_tensor(targets, model.device, op).ref,
      n:
        case tensors do
          [%Tensor{shape: shape} | _] when tuple_size(shape) > 0 -> elem(shape, 0)
          _ -> 0
        end
    }
  end

  defp samples(%{n: n}), do: n

  defp to_tensor(%Tensor{} = t, device, _op), do: Tensor.to_device(t, device)

  if Code.ensure_loaded?(Nx) do
    # Nx tensors on ExBurn.Backend are used in place; others are copied once.
    defp to_tensor(%Nx.Tensor{data: %{__struct__: ExBurn.Backend}} = t, device, _op),
      do: t |> ExBurn.Backend.burn_tensor() |> Tensor.to_device(device)

    defp to_tensor(%Nx.Tensor{} = t, device, _op), do: ExBurn.BurnBridge.from_nx(t, device: device)
  end

  defp to_tensor(other, _device, op), do: Tensor.not_a_tensor(other, op)

  defp ceil_div(a, b), do: div(a + b - 1, b)
end
