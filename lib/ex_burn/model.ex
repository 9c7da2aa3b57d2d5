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

  alias ExBurn.{Native, Options, Tensor}

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
  @fraction {:custom, &__MODULE__.fraction/1}

  @doc false
  def fraction(v) when is_number(v) and v >= 0 and v < 1, do: {:ok, v}
  def fraction(_), do: :error

  # Optimizer settings (nil: Burn's default); also overridable per `ExBurn.Training.fit/3`.
  @optimizer_schema [
    momentum: [type: {:or, [nil, @fraction]}, doc: "SGD / RMSprop momentum in [0, 1)"],
    dampening: [type: {:or, [nil, {:number, 0, 1}]}, doc: "SGD momentum dampening in [0, 1]"],
    nesterov: [type: {:or, [nil, :boolean]}, doc: "SGD Nesterov momentum (needs `:momentum`)"],
    beta_1: [type: {:or, [nil, @fraction]}, doc: "Adam/AdamW first-moment decay in [0, 1)"],
    beta_2: [type: {:or, [nil, @fraction]}, doc: "Adam/AdamW second-moment decay in [0, 1)"],
    epsilon: [type: {:or, [nil, {:number, 1.0e-300, 1}]}, doc: "Adam/AdamW/RMSprop epsilon in (0, 1]"],
    alpha: [type: {:or, [nil, {:number, 0, 1}]}, doc: "RMSprop smoothing constant in [0, 1]"],
    centered: [type: {:or, [nil, :boolean]}, doc: "RMSprop centred variant"],
    weight_decay: [type: {:or, [nil, :non_neg_number]}, doc: "L2 penalty (AdamW: decoupled decay)"],
    clip_norm: [type: {:or, [nil, :pos_number]}, doc: "clip each parameter's gradient to this L2 norm"],
    clip_value: [type: {:or, [nil, :pos_number]}, doc: "clip each gradient element to `[-v, v]`"]
  ]
  @optimizer_keys Keyword.keys(@optimizer_schema)

  @doc false
  def optimizer_schema, do: @optimizer_schema

  @compile_opts [
                  loss: [
                    type: {:in, @losses},
                    default: :cross_entropy,
                    doc:
                      "`:cross_entropy` (integer labels or one-hot targets), `:mse`, `:binary_cross_entropy`"
                  ],
                  optimizer: [
                    type: {:in, @optimizers},
                    default: :adam,
                    doc: "`:adam`, `:sgd`, `:adamw`, `:rmsprop`"
                  ],
                  learning_rate: [type: :non_neg_number, default: 1.0e-3, doc: "the base learning rate"],
                  device: [
                    type: {:or, [nil, :device]},
                    default: nil,
                    doc: "default `ExBurn.default_device/0`"
                  ],
                  seed: [
                    type: {:number, 0, 18_446_744_073_709_551_615},
                    default: 0,
                    doc: "initialisation (and dropout) seed, an integer"
                  ],
                  type: [
                    type: {:in, [{:f, 32}, {:f, 64}, {:f, 16}, {:bf, 16}, :f32, :f64, :f16, :bf16]},
                    default: {:f, 32},
                    doc: "float type of parameters and activations"
                  ]
                ] ++ @optimizer_schema

  @device_opts [device: [type: {:or, [nil, :device]}, default: nil, doc: "default `ExBurn.default_device/0`"]]

  @doc """
  Builds a model's parameters (Glorot-uniform kernels, zero biases, from `:seed`) and its
  optimizer on a device.

  ## Options

  #{Options.docs(@compile_opts)}

  Absent optimizer settings take Burn's defaults (Adam: betas 0.9/0.999, epsilon 1e-5;
  SGD momentum dampening 0.1; RMSprop alpha 0.99, momentum 0.9). Settings that do not belong
  to the chosen optimizer are refused.
  """
  @spec compile(ExBurn.Layers.t() | struct(), keyword()) :: t()
  def compile(model, opts \\ []) do
    opts = Options.validate!(opts, @compile_opts, :compile)
    unless is_integer(opts[:seed]), do: Options.fail(:compile, "the seed must be an integer")
    spec = to_spec(model)
    device = opts[:device] || ExBurn.default_device()
    optimizer = optimizer_config(opts[:optimizer], opts)

    options = %{
      loss: opts[:loss],
      optimizer: optimizer,
      seed: opts[:seed],
      learning_rate: opts[:learning_rate] * 1.0,
      dtype: ExBurn.Type.normalize!(opts[:type])
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
    Options.fail(:compile, "expected an ExBurn.Layers or Axon model, got #{Options.short(other)}")
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
  def info(other), do: not_a_model(other, :info)

  @doc false
  # The error of a public function given something that is not a compiled model.
  def not_a_model(other, op),
    do: Options.fail(op, "expected a compiled ExBurn.Model, got #{Options.short(other)}")

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
  def summary(model) when is_struct(model, __MODULE__) or is_struct(model, ExBurn.Layers) do
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

  def summary(other), do: not_a_model(other, :summary)

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
  def loss_function(other), do: not_a_model(other, :loss_function)

  @doc "The optimizer the model trains with."
  @spec optimizer(t()) :: atom()
  def optimizer(%__MODULE__{optimizer: o}), do: o
  def optimizer(other), do: not_a_model(other, :optimizer)

  @doc "The weight decay (L2 penalty) in use, or `nil`."
  @spec weight_decay(t()) :: float() | nil
  def weight_decay(%__MODULE__{optimizer_config: c}), do: Map.get(c, :weight_decay)
  def weight_decay(other), do: not_a_model(other, :weight_decay)

  @doc "Parameters (and batch-norm running statistics) as `%{\"layer.param\" => tensor}`."
  @spec parameters(t()) :: %{String.t() => Tensor.t()}
  def parameters(%__MODULE__{ref: ref}) do
    ref |> call(:parameters) |> Map.new(fn {n, t} -> {n, Tensor.wrap(t)} end)
  end

  def parameters(other), do: not_a_model(other, :parameters)

  @put_opts [
    convert: [
      type: :boolean,
      default: false,
      doc: "convert parameters of another type to the model's float type (otherwise they are refused)"
    ]
  ]

  @doc """
  Replaces parameters by name and returns the model. Each must have the shape and the float
  type of the parameter it replaces.

  ## Options

  #{Options.docs(@put_opts)}
  """
  @spec put_parameters(t(), %{String.t() => Tensor.t()}, keyword()) :: t()
  def put_parameters(model, params, opts \\ [])

  def put_parameters(%__MODULE__{} = model, params, opts)
      when (is_map(params) and not is_struct(params)) or is_list(params) do
    opts = Options.validate!(opts, @put_opts, :put_parameters)

    if is_list(params) and not Options.proper_list?(params),
      do: Options.fail(:put_parameters, "expected a map of name => tensor, got an improper list")

    list =
      Enum.map(params, fn
        {n, %Tensor{} = t} when is_binary(n) or is_atom(n) ->
          {to_string(n), Tensor.to_device(t, model.device).ref}

        other ->
          Options.fail(:put_parameters, "expected {name, tensor} pairs, got #{Options.short(other)}")
      end)

    Native.call(:model_set_parameters, [model.ref, list, opts[:convert]], :put_parameters)
    model
  end

  def put_parameters(%__MODULE__{}, params, _opts),
    do: Options.fail(:put_parameters, "expected a map of name => tensor, got #{Options.short(params)}")

  def put_parameters(other, _params, _opts), do: not_a_model(other, :put_parameters)

  @doc "Freezes layers by name: their parameters stop changing. Returns the model."
  @spec freeze(t(), [String.t()]) :: t()
  def freeze(%__MODULE__{} = model, layers) do
    call(model.ref, {:freeze, names!(layers, :freeze)})
    model
  end

  def freeze(other, _layers), do: not_a_model(other, :freeze)

  @doc "Unfreezes layers by name (all of them with `:all`). Returns the model."
  @spec unfreeze(t(), [String.t()] | :all) :: t()
  def unfreeze(%__MODULE__{} = model, :all), do: unfreeze(model, [])

  def unfreeze(%__MODULE__{} = model, layers) do
    call(model.ref, {:unfreeze, names!(layers, :unfreeze)})
    model
  end

  def unfreeze(other, _layers), do: not_a_model(other, :unfreeze)

  defp names!(layers, op) when is_list(layers) do
    unless Options.proper_list?(layers), do: Options.fail(op, "expected a proper list of layer names")

    Enum.map(layers, fn
      n when is_binary(n) or (is_atom(n) and not is_nil(n)) -> to_string(n)
      other -> Options.fail(op, "expected layer names, got #{Options.short(other)}")
    end)
  end

  defp names!(other, op), do: Options.fail(op, "expected a list of layer names, got #{Options.short(other)}")

  @doc "Whether a layer is frozen."
  @spec frozen?(t(), String.t()) :: boolean()
  def frozen?(%__MODULE__{} = model, layer) do
    [name] = names!([layer], :frozen?)
    name in frozen_layers(model)
  end

  def frozen?(other, _layer), do: not_a_model(other, :frozen?)

  @doc "Names of the frozen layers."
  @spec frozen_layers(t()) :: MapSet.t(String.t())
  def frozen_layers(%__MODULE__{ref: ref}), do: MapSet.new(call(ref, :info).frozen)
  def frozen_layers(other), do: not_a_model(other, :frozen_layers)

  @doc "An independent copy (parameters, optimizer state, frozen layers)."
  @spec clone(t()) :: t()
  def clone(%__MODULE__{} = model), do: %{model | ref: call(model.ref, :clone)}
  def clone(other), do: not_a_model(other, :clone)

  @doc "A copy on another device (parameters and optimizer state move); same device: the model."
  @spec to_device(t(), ExBurn.Device.t() | atom()) :: t()
  def to_device(%__MODULE__{} = model, device) do
    device = Options.check!(device, :device, "device", :to_device)

    if device == model.device,
      do: model,
      else: %{model | ref: call(model.ref, {:to_device, device}), device: device}
  end

  def to_device(other, _device), do: not_a_model(other, :to_device)

  @doc "A copy with float parameters cast to `type` (`{:f, 16}` or `{:bf, 16}` for inference)."
  @spec quantize(t(), term()) :: t()
  def quantize(other, _type) when not is_struct(other, __MODULE__), do: not_a_model(other, :quantize)

  def quantize(%__MODULE__{} = model, type) do
    type = ExBurn.Type.normalize!(type)

    unless ExBurn.Type.float?(type) do
      raise ExBurn.Error.new(
              kind: :dtype,
              op: :quantize,
              message: "quantize needs a float type, got #{Options.short(type)}"
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
  def predict(model, input, opts \\ []) do
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
    call(model.ref, {:save, path!(path, :save)})
    :ok
  end

  def save(other, _path), do: not_a_model(other, :save)

  defp path!(path, op) do
    if is_binary(path) and String.valid?(path) and path != "",
      do: Path.expand(path),
      else: Options.fail(op, "expected a file path (a non-empty string), got #{Options.short(path)}")
  end

  @doc """
  Loads a model saved with `save/2`. Takes a path (with options) or, as in the original API,
  a template model whose device is used.

  ## Options

    * `:device` - where to load it (default `ExBurn.default_device/0`)

  A truncated, corrupt or foreign file gives `{:error, %ExBurn.Error{kind: :corrupt}}`.
  """
  @spec load(Path.t() | t(), keyword() | Path.t()) :: {:ok, t()} | {:error, ExBurn.Error.t()}
  def load(path_or_model, opts_or_path \\ [])

  def load(%__MODULE__{device: d}, path), do: load(path, device: d)

  def load(path, opts) do
    opts = Options.validate!(opts, @device_opts, :load)
    source = {:path, path!(path, :load)}
    {:ok, from_native(Native.call(:model_load, [source, device(opts)], :load), device(opts))}
  rescue
    e in ExBurn.Error -> {:error, e}
  end

  @doc "The whole model as a binary (the `save/2` format), e.g. to send over the network."
  @spec serialize_params(t()) :: binary()
  def serialize_params(%__MODULE__{ref: ref}), do: call(ref, :serialize)
  def serialize_params(other), do: not_a_model(other, :serialize_params)

  @doc """
  A model from `serialize_params/1` output (the bytes themselves, never a path).

  ## Options

  #{Options.docs(@device_opts)}
  """
  @spec deserialize_params(binary(), keyword()) :: {:ok, t()} | {:error, ExBurn.Error.t()}
  def deserialize_params(binary, opts \\ []) do
    opts = Options.validate!(opts, @device_opts, :deserialize_params)

    unless is_binary(binary),
      do: Options.fail(:deserialize_params, "expected a binary, got #{Options.short(binary)}")

    {:ok,
     from_native(
       Native.call(:model_load, [{:bytes, binary}, device(opts)], :deserialize_params),
       device(opts)
     )}
  rescue
    e in ExBurn.Error -> {:error, e}
  end

  @export_opts [
    metadata: [
      type: {:or, [:map, :keyword]},
      default: %{},
      doc: "string metadata to store beside `exported_by: ex_burn`"
    ]
  ]

  @doc """
  Writes the parameters alone to a safetensors file that other tools read.

  ## Options

  #{Options.docs(@export_opts)}
  """
  @spec export(t(), Path.t(), keyword()) :: :ok
  def export(model, path, opts \\ [])

  def export(%__MODULE__{} = model, path, opts) do
    opts = Options.validate!(opts, @export_opts, :export)
    path = path!(path, :export)
    tensors = model |> parameters() |> Enum.map(fn {n, t} -> {n, t.ref} end)
    meta = Enum.map(opts[:metadata], fn {k, v} -> {text!(k), text!(v)} end)
    Native.call(:tensors_save, [tensors, path, [{"exported_by", "ex_burn"} | meta]], :export)
    :ok
  end

  def export(other, _path, _opts), do: not_a_model(other, :export)

  defp text!(v) when is_binary(v) or is_atom(v) or is_number(v), do: to_string(v)

  defp text!(v),
    do: Options.fail(:export, "metadata keys and values must be strings, got #{Options.short(v)}")

  @import_opts [
    rename: [type: {:fun, 1}, default: &Function.identity/1, doc: "maps file names to parameter names"],
    strict: [type: :boolean, default: true, doc: "fail on file tensors the model lacks"],
    convert: [
      type: :boolean,
      default: false,
      doc: "convert tensors of another type (f16, f64, ...) to the model's float type; otherwise refused"
    ]
  ]

  @doc """
  Loads parameters from a safetensors file (e.g. written by `export/3` or another tool) into
  the model by name. Shapes must match; types must be the model's unless `convert: true`.

  ## Options

  #{Options.docs(@import_opts)}
  """
  @spec import_params(t(), Path.t(), keyword()) :: t()
  def import_params(model, path, opts \\ [])

  def import_params(%__MODULE__{} = model, path, opts) do
    opts = Options.validate!(opts, @import_opts, :import_params)
    source = {:path, path!(path, :import_params)}
    {tensors, _meta} = Native.call(:tensors_load, [source, model.device], :import_params)
    known = model |> parameters() |> Map.keys() |> MapSet.new()

    params =
      for {name, t} <- tensors, new = opts[:rename].(name), reduce: %{} do
        acc ->
          cond do
            not is_binary(new) ->
              Options.fail(:import_params, ":rename must return strings, got #{Options.short(new)}")

            new in known ->
              Map.put(acc, new, Tensor.wrap(t))

            opts[:strict] ->
              Options.fail(:import_params, "the model has no parameter #{Options.short(new)}")

            true ->
              acc
          end
      end

    put_parameters(model, params, convert: opts[:convert])
  end

  def import_params(other, _path, _opts), do: not_a_model(other, :import_params)

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
