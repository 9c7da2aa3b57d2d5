defmodule ExBurn.Model do
  @moduledoc """
  Compiled models: Burn modules built in Rust from an `ExBurn.Layers` model (or an Axon model
  when Axon is loaded), with their optimizer.

      model = ExBurn.Model.compile(layers, loss: :cross_entropy, optimizer: :adam, learning_rate: 1.0e-3)
      IO.puts(ExBurn.Model.summary(model))

  A compiled model is a handle on native state. Training updates it in place: functions that
  return a model return the same handle, except `clone/1`, `to_device/2`, `quantize/2` and
  `load/2`, which return new ones. Parameters are addressed as `"layer.param"`.
  """

  alias ExBurn.{Native, Tensor}

  defstruct [:ref, :spec, :device, :loss, :optimizer, :learning_rate, :optimizer_config, :seed, history: []]

  @type t :: %__MODULE__{
          ref: reference(),
          spec: map(),
          device: ExBurn.Device.t(),
          loss: atom(),
          optimizer: atom(),
          learning_rate: float(),
          optimizer_config: map(),
          seed: non_neg_integer(),
          history: [map()]
        }

  @losses [:cross_entropy, :mse, :binary_cross_entropy]
  @optimizers [:sgd, :adam, :adamw, :rmsprop]
  @optimizer_keys [
    :momentum,
    :dampening,
    :nesterov,
    :beta_1,
    :beta_2,
    :epsilon,
    :alpha,
    :centered,
    :weight_decay,
    :clip_norm,
    :clip_value
  ]

  @doc """
  Builds a model's parameters (Glorot-uniform kernels, zero biases, from `:seed`) and its
  optimizer on a device.

  ## Options

    * `:loss` - `:cross_entropy` (integer labels or one-hot targets; default), `:mse`,
      `:binary_cross_entropy`
    * `:optimizer` - `:adam` (default), `:sgd`, `:adamw`, `:rmsprop`
    * `:learning_rate` - default `1.0e-3`
    * `:weight_decay` - L2 penalty (AdamW: decoupled decay)
    * `:momentum`, `:dampening`, `:nesterov` - SGD (RMSprop: `:momentum`) settings
    * `:beta_1`, `:beta_2`, `:epsilon` - Adam/AdamW settings; `:alpha`, `:centered` - RMSprop
    * `:clip_norm`, `:clip_value` - clip each parameter's gradient by L2 norm or by value
    * `:device` - default `ExBurn.default_device/0`
    * `:seed` - initialisation seed (default 0)

  Absent optimizer settings take Burn's defaults (Adam: betas 0.9/0.999, epsilon 1e-5;
  SGD momentum dampening 0.1; RMSprop alpha 0.99, momentum 0.9).
  """
  @spec compile(ExBurn.Layers.t() | struct(), keyword()) :: t()
  def compile(model, opts \\ []) do
    opts =
      Keyword.validate!(
        opts,
        [loss: :cross_entropy, optimizer: :adam, learning_rate: 1.0e-3, device: nil, seed: 0] ++
          @optimizer_keys
      )

    unless opts[:loss] in @losses do
      raise ExBurn.Error.new(
              kind: :argument,
              op: :compile,
              message: "unknown loss #{inspect(opts[:loss])} (#{inspect(@losses)})"
            )
    end

    unless opts[:optimizer] in @optimizers do
      raise ExBurn.Error.new(
              kind: :argument,
              op: :compile,
              message: "unknown optimizer #{inspect(opts[:optimizer])} (#{inspect(@optimizers)})"
            )
    end

    spec = to_spec(model)
    device = ExBurn.Device.normalize!(opts[:device] || ExBurn.default_device())
    optimizer = optimizer_config(opts[:optimizer], opts)

    options = %{
      loss: opts[:loss],
      optimizer: optimizer,
      seed: opts[:seed],
      learning_rate: opts[:learning_rate] * 1.0
    }

    ref = Native.call(:model_new, [spec, options, device], :compile)

    %__MODULE__{
      ref: ref,
      spec: spec,
      device: device,
      loss: opts[:loss],
      optimizer: opts[:optimizer],
      learning_rate: opts[:learning_rate] * 1.0,
      optimizer_config: optimizer,
      seed: opts[:seed]
    }
  end

  @doc false
  def optimizer_config(kind, opts) do
    base = %{kind: kind}

    Enum.reduce(@optimizer_keys, base, fn key, acc ->
      case opts[key] do
        nil -> acc
        false when key in [:nesterov, :centered] -> acc
        v when is_number(v) -> Map.put(acc, key, v * 1.0)
        v -> Map.put(acc, key, v)
      end
    end)
  end

  defp to_spec(%ExBurn.Layers{} = layers), do: ExBurn.Layers.to_spec(layers)
  defp to_spec(%{layers: _, output: _} = spec), do: spec

  defp to_spec(%{__struct__: Axon} = axon) do
    # ExBurn.Axon exists only when Axon was loadable at compile time; its name is built at
    # run time so that builds without Axon do not warn (Elixir >= 1.18 follows a variable
    # bound to a module literal).
    converter = Module.concat(ExBurn, Axon)

    if Code.ensure_loaded?(converter) do
      axon |> converter.to_layers() |> ExBurn.Layers.to_spec()
    else
      raise ExBurn.Error.new(kind: :unsupported, op: :compile, message: "Axon models need Axon loaded")
    end
  end

  defp to_spec(other) do
    raise ExBurn.Error.new(
            kind: :argument,
            op: :compile,
            message: "expected an ExBurn.Layers or Axon model, got #{inspect(other)}"
          )
  end

  @doc "The layers, shapes and parameter counts of a compiled model or a layers model."
  @spec info(t() | ExBurn.Layers.t()) :: map()
  def info(%__MODULE__{spec: spec} = model) do
    native = Native.call(:model_call, [model.ref, :info], :info)

    spec
    |> layer_info()
    |> Map.merge(native)
    |> Map.merge(%{loss: model.loss, optimizer: model.optimizer, learning_rate: model.learning_rate})
  end

  def info(%ExBurn.Layers{} = layers), do: layers |> ExBurn.Layers.to_spec() |> layer_info()

  defp layer_info(spec) do
    %{shapes: shapes, params: params} = Native.call(:spec_info, [spec], :info)

    layers =
      for {{layer, shape}, ps} <- spec.layers |> Enum.zip(shapes) |> Enum.zip(params) do
        counted = Enum.reject(ps, fn {n, _} -> n in ["mean", "var"] end)

        %{
          name: layer.name,
          type: layer_type(layer.op),
          output_shape: List.to_tuple([nil | shape]),
          params: Enum.reduce(counted, 0, fn {_, s}, acc -> acc + Enum.product(s) end)
        }
      end

    %{layers: layers, param_count: Enum.reduce(layers, 0, &(&1.params + &2))}
  end

  defp layer_type({op, _}), do: op
  defp layer_type(op), do: op

  @doc "A Keras-style table of layers, output shapes and parameter counts."
  @spec summary(t() | ExBurn.Layers.t()) :: String.t()
  def summary(model) do
    info = info(model)
    frozen = if is_struct(model, __MODULE__), do: Map.get(info, :frozen, []), else: []

    rows =
      Enum.map(info.layers, fn l ->
        name = if l.name in frozen, do: l.name <> " (frozen)", else: l.name
        [name, to_string(l.type), inspect(l.output_shape), group(l.params)]
      end)

    header = ["Layer", "Type", "Output shape", "Params"]

    widths =
      Enum.map(0..3, fn i ->
        Enum.max([String.length(Enum.at(header, i)) | Enum.map(rows, &String.length(Enum.at(&1, i)))])
      end)

    line = fn cells ->
      cells |> Enum.zip(widths) |> Enum.map_join("  ", fn {c, w} -> String.pad_trailing(c, w) end)
    end

    rule = String.duplicate("-", Enum.sum(widths) + 6)
    trainable = info.layers |> Enum.reject(&(&1.name in frozen)) |> Enum.map(& &1.params) |> Enum.sum()

    Enum.join(
      [rule, line.(header), rule] ++
        Enum.map(rows, line) ++
        [rule, "Total params: #{group(info.param_count)}", "Trainable params: #{group(trainable)}", rule],
      "\n"
    )
  end

  defp group(n),
    do:
      n
      |> Integer.to_string()
      |> String.reverse()
      |> String.replace(~r/(\d{3})(?=\d)/, "\\1,")
      |> String.reverse()

  @doc "The loss the model trains with."
  @spec loss_function(t()) :: atom()
  def loss_function(%__MODULE__{loss: l}), do: l

  @doc "The optimizer the model trains with."
  @spec optimizer(t()) :: atom()
  def optimizer(%__MODULE__{optimizer: o}), do: o

  @doc "The weight decay (L2 penalty) in use, or `nil`."
  @spec weight_decay(t()) :: float() | nil
  def weight_decay(%__MODULE__{optimizer_config: c}), do: Map.get(c, :weight_decay)

  @doc "Parameters (and batch-norm running statistics) as `%{\"layer.param\" => tensor}`."
  @spec parameters(t()) :: %{String.t() => Tensor.t()}
  def parameters(%__MODULE__{ref: ref}) do
    ref |> call(:parameters) |> Map.new(fn {n, t} -> {n, Tensor.wrap(t)} end)
  end

  @doc "Replaces parameters by name (shapes must match); returns the model."
  @spec put_parameters(t(), %{String.t() => Tensor.t()}) :: t()
  def put_parameters(%__MODULE__{} = model, params) do
    list =
      Enum.map(params, fn {n, %Tensor{} = t} -> {to_string(n), Tensor.to_device(t, model.device).ref} end)

    Native.call(:model_set_parameters, [model.ref, list], :put_parameters)
    model
  end

  @doc "Freezes layers by name: their parameters stop changing. Returns the model."
  @spec freeze(t(), [String.t()]) :: t()
  def freeze(%__MODULE__{} = model, layers) do
    call(model.ref, {:freeze, Enum.map(layers, &to_string/1)})
    model
  end

  @doc "Unfreezes layers by name (all of them with `:all`). Returns the model."
  @spec unfreeze(t(), [String.t()] | :all) :: t()
  def unfreeze(%__MODULE__{} = model, :all), do: unfreeze(model, [])

  def unfreeze(%__MODULE__{} = model, layers) do
    call(model.ref, {:unfreeze, Enum.map(layers, &to_string/1)})
    model
  end

  @doc "Whether a layer is frozen."
  @spec frozen?(t(), String.t()) :: boolean()
  def frozen?(%__MODULE__{} = model, layer), do: to_string(layer) in frozen_layers(model)

  @doc "Names of the frozen layers."
  @spec frozen_layers(t()) :: MapSet.t(String.t())
  def frozen_layers(%__MODULE__{ref: ref}), do: MapSet.new(call(ref, :info).frozen)

  @doc "An independent copy (parameters, optimizer state, frozen layers)."
  @spec clone(t()) :: t()
  def clone(%__MODULE__{} = model), do: %{model | ref: call(model.ref, :clone)}

  @doc "A copy on another device (parameters and optimizer state move); same device: the model."
  @spec to_device(t(), ExBurn.Device.t() | atom()) :: t()
  def to_device(%__MODULE__{} = model, device) do
    device = ExBurn.Device.normalize!(device)

    if device == model.device,
      do: model,
      else: %{model | ref: call(model.ref, {:to_device, device}), device: device}
  end

  @doc "A copy with float parameters cast to `type` (`{:f, 16}` or `{:bf, 16}` for inference)."
  @spec quantize(t(), term()) :: t()
  def quantize(%__MODULE__{} = model, type) do
    type = ExBurn.Type.normalize!(type)

    unless ExBurn.Type.float?(type) do
      raise ExBurn.Error.new(
              kind: :dtype,
              op: :quantize,
              message: "quantize needs a float type, got #{inspect(type)}"
            )
    end

    %{model | ref: call(model.ref, {:cast, type})}
  end

  @doc """
  The model's output for `input` in inference mode (dropout off, batch-norm running
  statistics), computed natively in one NIF call. `input` is an `ExBurn.Tensor` (or a list
  for several inputs); when Nx is loaded it may be an Nx tensor, and the output is then an Nx
  tensor on `ExBurn.Backend` (usable directly in `defn` code compiled by `ExBurn.Compiler`).

  ## Options

    * `:batch_size` - evaluate in batches of this size (default: all at once)
  """
  @spec predict(t(), term(), keyword()) :: {:ok, Tensor.t() | struct()} | {:error, ExBurn.Error.t()}
  def predict(%__MODULE__{} = model, input, opts \\ []) do
    {:ok, ExBurn.Training.predict(model, input, opts)}
  rescue
    e in ExBurn.Error -> {:error, e}
  end

  @doc "Same as `predict/3`: the forward pass in inference mode."
  @spec forward(t(), term(), keyword()) :: {:ok, Tensor.t() | struct()} | {:error, ExBurn.Error.t()}
  def forward(model, input, opts \\ []), do: predict(model, input, opts)

  @doc """
  Saves the model (parameters as safetensors, spec, options, optimizer state) to `path`,
  atomically: a crash mid-save leaves the previous file intact.
  """
  @spec save(t(), Path.t()) :: :ok
  def save(%__MODULE__{} = model, path) do
    call(model.ref, {:save, Path.expand(path)})
    :ok
  end

  @doc """
  Loads a model saved with `save/2`. Takes a path (with options) or, as in the original API,
  a template model whose device is used.

  ## Options

    * `:device` - where to load it (default `ExBurn.default_device/0`)

  A truncated, corrupt or foreign file gives `{:error, %ExBurn.Error{kind: :corrupt}}`.
  """
  @spec load(Path.t() | t(), keyword() | Path.t()) :: {:ok, t()} | {:error, ExBurn.Error.t()}
  def load(%__MODULE__{device: d}, path) when is_binary(path), do: load(path, device: d)

  def load(path, opts) when is_binary(path) do
    opts = Keyword.validate!(opts, [:device])
    {:ok, from_native(Native.call(:model_load, [Path.expand(path), device(opts)], :load), device(opts))}
  rescue
    e in ExBurn.Error -> {:error, e}
  end

  @doc "The whole model as a binary (the `save/2` format), e.g. to send over the network."
  @spec serialize_params(t()) :: binary()
  def serialize_params(%__MODULE__{ref: ref}), do: call(ref, :serialize)

  @doc "A model from `serialize_params/1` output. Options: `:device`."
  @spec deserialize_params(binary(), keyword()) :: {:ok, t()} | {:error, ExBurn.Error.t()}
  def deserialize_params(binary, opts \\ []) when is_binary(binary) do
    {:ok, from_native(Native.call(:model_load, [binary, device(opts)], :deserialize_params), device(opts))}
  rescue
    e in ExBurn.Error -> {:error, e}
  end

  @doc """
  Writes the parameters alone to a safetensors file that other tools read.

  ## Options

    * `:metadata` - map of string metadata to store (default: the layer names)
  """
  @spec export(t(), Path.t(), keyword()) :: :ok
  def export(%__MODULE__{} = model, path, opts \\ []) do
    opts = Keyword.validate!(opts, metadata: %{})
    tensors = model |> parameters() |> Enum.map(fn {n, t} -> {n, t.ref} end)
    meta = Enum.map(opts[:metadata], fn {k, v} -> {to_string(k), to_string(v)} end)
    Native.call(:tensors_save, [tensors, Path.expand(path), [{"exported_by", "ex_burn"} | meta]], :export)
    :ok
  end

  @doc """
  Loads parameters from a safetensors file (e.g. written by `export/3` or another tool) into
  the model by name.

  ## Options

    * `:rename` - a function mapping file names to parameter names (default: identity)
    * `:strict` - fail on file tensors the model lacks (default `true`)
  """
  @spec import_params(t(), Path.t(), keyword()) :: t()
  def import_params(%__MODULE__{} = model, path, opts \\ []) do
    opts = Keyword.validate!(opts, rename: & &1, strict: true)
    {tensors, _meta} = Native.call(:tensors_load, [Path.expand(path), model.device], :import_params)
    known = model |> parameters() |> Map.keys() |> MapSet.new()

    params =
      for {name, t} <- tensors, new = opts[:rename].(name), reduce: %{} do
        acc ->
          cond do
            new in known ->
              Map.put(acc, new, Tensor.wrap(t))

            opts[:strict] ->
              raise ExBurn.Error.new(
                      kind: :argument,
                      op: :import_params,
                      message: "the model has no parameter #{inspect(new)}"
                    )

            true ->
              acc
          end
      end

    put_parameters(model, params)
  end

  defp from_native(ref, device) do
    # Reconstruct the Elixir view from the stored spec and options.
    info = Native.call(:model_call, [ref, :info], :load)
    refresh(%__MODULE__{ref: ref, device: info.device || device, learning_rate: 1.0e-3})
  end

  defp refresh(model) do
    {spec, options} = Native.call(:model_call, [model.ref, :meta], :load)

    %{
      model
      | spec: spec,
        loss: options.loss,
        optimizer: options.optimizer.kind,
        optimizer_config: drop_nils(options.optimizer),
        learning_rate: options.learning_rate,
        seed: options.seed
    }
  end

  defp drop_nils(map), do: map |> Enum.reject(fn {_, v} -> v in [nil, false] end) |> Map.new()

  defp device(opts), do: ExBurn.Device.normalize!(opts[:device] || ExBurn.default_device())

  defp call(ref, request), do: Native.call(:model_call, [ref, request], request_name(request))

  defp request_name({name, _}), do: name
  defp request_name(name), do: name
end
