defmodule ExBurn.Callbacks do
  @moduledoc """
  Training callbacks: functions that receive the metrics map after each epoch and return it,
  possibly changed. The map holds `:epoch`, `:loss`, `:learning_rate`, `:samples_per_second`,
  `:accuracy`, `:val_loss`, `:val_accuracy` (when measured) and `:model`.

  A callback stops training by returning `stop_training: true`, and changes the learning rate
  of the following epochs by returning a different `:learning_rate`. Callbacks that keep
  state (early stopping, plateaus) keep it in the training process, per callback.
  """

  alias ExBurn.{Model, Options}

  @type callback :: (map() -> map())

  @doc false
  def run(callbacks, metrics) do
    metrics =
      Enum.reduce(callbacks, metrics, fn cb, m ->
        case cb.(m) do
          %{epoch: _} = next -> next
          other -> Options.fail(:fit, "a callback must return the metrics map, got #{Options.short(other)}")
        end
      end)

    telemetry(metrics)
    metrics
  end

  # Only when the telemetry application runs (it is an optional dependency: loaded but not
  # started, :telemetry.execute/3 logs a warning per event).
  defp telemetry(metrics) do
    if Code.ensure_loaded?(:telemetry) and List.keymember?(Application.started_applications(), :telemetry, 0) do
      measurements =
        Map.take(metrics, [:loss, :val_loss, :accuracy, :val_accuracy, :samples_per_second, :seconds])

      apply(:telemetry, :execute, [
        [:ex_burn, :training, :epoch],
        measurements,
        Map.take(metrics, [:epoch, :learning_rate])
      ])
    end
  end

  @doc "Prints one line per epoch with the metrics."
  @spec logging() :: callback()
  def logging do
    fn metrics ->
      IO.puts(format(metrics))
      metrics
    end
  end

  @doc false
  def format(m, epochs \\ nil)

  def format(m, _epochs) when not is_map(m) or not is_map_key(m, :epoch) or not is_map_key(m, :loss),
    do: Options.fail(:format, "expected the metrics map of an epoch, got #{Options.short(m)}")

  def format(m, epochs) do
    parts = [
      if(epochs, do: "Epoch #{m.epoch}/#{epochs}", else: "epoch #{m.epoch}"),
      "loss #{fmt(m.loss)}",
      m[:accuracy] && "accuracy #{fmt(m.accuracy)}",
      m[:val_loss] && "val_loss #{fmt(m.val_loss)}",
      m[:val_accuracy] && "val_accuracy #{fmt(m.val_accuracy)}",
      m[:samples_per_second] && "#{round(m.samples_per_second)} samples/s"
    ]

    parts |> Enum.reject(&(&1 in [nil, false])) |> Enum.join("  ")
  end

  defp fmt(x) when is_float(x), do: :erlang.float_to_binary(x, decimals: 4)
  defp fmt(x), do: Options.short(x)

  defp monitor(m, nil), do: Map.get(m, :val_loss, m.loss)

  defp monitor(m, key) do
    case Map.fetch(m, key) do
      {:ok, v} ->
        v

      :error ->
        Options.fail(:callback, "the monitored metric #{Options.short(key)} is not in the epoch's metrics")
    end
  end

  # Whether `value` improves on `best` by more than `delta` (non-finite values never do).
  defp improves?(value, nil, _delta), do: is_number(value)
  defp improves?(value, best, delta) when is_number(value), do: value < best - delta
  defp improves?(_value, _best, _delta), do: false

  @monitor_opts [
    monitor: [
      type: {:or, [nil, :atom]},
      default: nil,
      doc: "metric to watch, lower is better (default `:val_loss`, else `:loss`)"
    ]
  ]

  @early_opts @monitor_opts ++
                [
                  restore_best: [
                    type: :boolean,
                    default: true,
                    doc: "put the best weights back when stopping"
                  ]
                ]

  @doc """
  Stops when the monitored value has not improved by `min_delta` for `patience` epochs, and
  restores the best weights seen.

  ## Options

  #{Options.docs(@early_opts)}
  """
  @spec early_stopping(pos_integer(), number(), keyword()) :: callback()
  def early_stopping(patience, min_delta \\ 0.0, opts \\ []) do
    Options.check!(patience, :pos_integer, "patience", :early_stopping)
    Options.check!(min_delta, :non_neg_number, "min_delta", :early_stopping)
    opts = Options.validate!(opts, @early_opts, :early_stopping)
    key = {__MODULE__, make_ref()}

    fn metrics ->
      value = monitor(metrics, opts[:monitor])
      state = Process.get(key, %{best: nil, wait: 0, snapshot: nil})

      state =
        if improves?(value, state.best, min_delta) do
          snapshot = if opts[:restore_best], do: Model.clone(metrics.model), else: nil
          %{best: value, wait: 0, snapshot: snapshot}
        else
          %{state | wait: state.wait + 1}
        end

      Process.put(key, state)

      if state.wait >= patience do
        if state.snapshot, do: Model.put_parameters(metrics.model, Model.parameters(state.snapshot))
        Process.delete(key)
        metrics |> Map.put(:stop_training, true) |> Map.put(:best, state.best)
      else
        metrics
      end
    end
  end

  @doc """
  Saves the model every `every` epochs to `path` (a directory gets `epoch_<n>.safetensors`;
  a path may contain `{epoch}`).
  """
  @spec checkpoint(pos_integer(), Path.t()) :: callback()
  def checkpoint(every, path) do
    Options.check!(every, :pos_integer, "every", :checkpoint)
    Options.check!(path, :string, "path", :checkpoint)

    fn metrics ->
      if rem(metrics.epoch, every) == 0 do
        file =
          cond do
            String.contains?(path, "{epoch}") ->
              String.replace(path, "{epoch}", Integer.to_string(metrics.epoch))

            File.dir?(path) or Path.extname(path) == "" ->
              Path.join(path, "epoch_#{metrics.epoch}.safetensors")

            true ->
              path
          end

        File.mkdir_p!(Path.dirname(file))
        Model.save(metrics.model, file)
        Map.put(metrics, :checkpoint, file)
      else
        metrics
      end
    end
  end

  @doc "Sends `{:ex_burn_history, metrics}` (without the model) to `pid` after each epoch."
  @spec history(pid()) :: callback()
  def history(pid) do
    Options.check!(pid, :pid, "pid", :history)

    fn metrics ->
      send(pid, {:ex_burn_history, Map.delete(metrics, :model)})
      metrics
    end
  end

  @plateau_opts [
                  factor: [type: {:number, 0, 1}, default: 0.5, doc: "multiplier of the learning rate"],
                  min_lr: [type: :non_neg_number, default: 1.0e-6, doc: "the lowest learning rate"]
                ] ++ @monitor_opts

  @doc """
  Multiplies the learning rate by `factor` when the monitored value has not improved for
  `patience` epochs, down to `:min_lr`.

  ## Options

  #{Options.docs(@plateau_opts)}
  """
  @spec reduce_lr_on_plateau(pos_integer(), keyword()) :: callback()
  def reduce_lr_on_plateau(patience, opts \\ []) do
    Options.check!(patience, :pos_integer, "patience", :reduce_lr_on_plateau)
    opts = Options.validate!(opts, @plateau_opts, :reduce_lr_on_plateau)
    key = {__MODULE__, make_ref()}

    fn metrics ->
      value = monitor(metrics, opts[:monitor])
      {best, wait} = Process.get(key, {nil, 0})

      {best, wait} = if improves?(value, best, 0), do: {value, 0}, else: {best, wait + 1}

      if wait >= patience do
        Process.put(key, {best, 0})
        Map.put(metrics, :learning_rate, max(metrics.learning_rate * opts[:factor], opts[:min_lr]))
      else
        Process.put(key, {best, wait})
        metrics
      end
    end
  end

  @doc """
  Raises the learning rate linearly over the first `epochs` epochs (epoch `e` trains at
  `e / epochs` of the base rate). For per-step warmup use `fit/3`'s `:warmup` option.
  """
  @spec warmup(pos_integer()) :: callback()
  def warmup(epochs) do
    Options.check!(epochs, :pos_integer, "epochs", :warmup)
    key = {__MODULE__, make_ref()}

    fn metrics ->
      base = Process.get(key) || metrics.learning_rate * epochs
      Process.put(key, base)
      Map.put(metrics, :learning_rate, base * min(1.0, (metrics.epoch + 1) / epochs))
    end
  end

  @doc "Sends `{:training_progress, epoch, loss, val_loss}` to `pid` after each epoch."
  @spec screen_callback(pid()) :: callback()
  def screen_callback(pid) do
    Options.check!(pid, :pid, "pid", :screen_callback)

    fn metrics ->
      send(pid, {:training_progress, metrics.epoch, metrics.loss, metrics[:val_loss]})
      metrics
    end
  end
end

defmodule ExBurn.Training.LoggingCallback do
  @moduledoc "The original API's logging callback: `callbacks: [&ExBurn.Training.LoggingCallback.log/1]`."

  @doc "Prints the epoch's metrics and returns them."
  @spec log(map()) :: map()
  def log(metrics), do: ExBurn.Callbacks.logging().(metrics)
end

defmodule ExBurn.Training.EarlyStoppingCallback do
  @moduledoc "The original API's early stopping: `ExBurn.Training.EarlyStoppingCallback.wait(5, 1.0e-4)`."

  @doc "See `ExBurn.Callbacks.early_stopping/3`."
  @spec wait(pos_integer(), number()) :: ExBurn.Callbacks.callback()
  def wait(patience, min_delta \\ 0.0), do: ExBurn.Callbacks.early_stopping(patience, min_delta)
end

defmodule ExBurn.Training.CheckpointCallback do
  @moduledoc "The original API's checkpoints: `ExBurn.Training.CheckpointCallback.every(5, \"/checkpoints\")`."

  @doc "See `ExBurn.Callbacks.checkpoint/2`."
  @spec every(pos_integer(), Path.t()) :: ExBurn.Callbacks.callback()
  def every(n, path), do: ExBurn.Callbacks.checkpoint(n, path)
end
