defmodule ExBurn do
  @moduledoc """
  Burn, the Rust deep-learning framework, from Elixir.

  ExBurn runs tensors on Burn's pure-Rust CPU backend (present in every build) and, in the
  `cuda`, `vulkan` and `metal` variants, on GPUs. It offers:

    * `ExBurn.Tensor` and `ExBurn.BurnBridge` - tensors and ops without Nx
    * `ExBurn.Backend` and `ExBurn.Compiler` - an Nx backend and `Nx.Defn` compiler (with Nx)
    * native training with Burn's autodiff (`ExBurn.Model`, `ExBurn.Training`)

  This module reports what the loaded library can do and holds the default device.
  """

  alias ExBurn.{Device, Native, Options}

  @version Mix.Project.config()[:version]

  @doc "The ExBurn version."
  @spec version() :: String.t()
  def version, do: @version

  @configure_opts [
    default_device: [
      type: :device,
      default: :cpu,
      doc: "device used when none is given; it must be available in the loaded library"
    ],
    nx_backend: [
      type: :boolean,
      default: true,
      doc: "when Nx is loaded, also make `ExBurn.Backend` Nx's global default backend on that device"
    ],
    defn_compiler: [
      type: :boolean,
      default: false,
      doc: "when Nx is loaded, also make `ExBurn.Compiler` the global default `Nx.Defn` compiler"
    ],
    dot_precision: [
      type: {:in, [:default, :highest]},
      default: :default,
      doc:
        "`:default` (the fastest f32 path: TF32 tensor cores on recent NVIDIA GPUs) or `:highest` " <>
          "(full f32 accuracy at about 4x the GPU cost; no change on the CPU); see `dot_precision/0`"
    ],
    memory_limit: [
      type: {:or, [{:in, [:auto]}, :pos_integer]},
      default: :auto,
      doc:
        "the largest allocation ExBurn makes, in bytes: larger requests (tensors, results, model " <>
          "parameters, batches) raise `ExBurn.Error` of kind `:out_of_memory` before allocating. " <>
          "`:auto` refuses what the device cannot hold (the host's available memory, a GPU's total memory)"
    ],
    collect_after: [
      type: {:or, [{:in, [:never]}, :pos_integer]},
      default: 268_435_456,
      doc:
        "a process that has received this many bytes of tensors since its last garbage collection " <>
          "(until the first `configure!/1`: `config :ex_burn, collect_after: ...`, else 256 MiB) " <>
          "collects itself, which frees the native memory of the tensors it no longer references " <>
          "(tensors are small terms on the heap: without this, dropped results wait for the heap to fill). " <>
          "`:never` leaves collection to the BEAM"
    ]
  ]

  # The native engine's switches: each keeps its setting when not given (see the docs below).
  @engine_opts ExBurn.EngineConfig.schema()

  @doc """
  Configures ExBurn for this node.

  ## Options

  #{Options.docs(@configure_opts)}

  ### Engine switches

  The native engine's run-time switches. Each keeps its setting when not given; it starts
  as the application environment sets it (`config :ex_burn, cuda_fusion: false`, applied
  when the library is first used), else as its `EX_BURN_*` environment variable does, else
  at its default. They are applied before the default device is checked.

  #{Options.docs(@engine_opts)}

  Returns the resulting settings (those of the engine switches included).
  """
  @spec configure!(keyword()) :: map()
  def configure!(opts \\ []) do
    opts = Options.validate!(opts, @configure_opts ++ @engine_opts, :configure!)
    {engine, opts} = Keyword.split(opts, ExBurn.EngineConfig.keys())
    engine = ExBurn.EngineConfig.put!(engine, :configure!)
    device = opts[:default_device]
    precision = opts[:dot_precision]

    unless available?(device) do
      raise ExBurn.Error.new(
              kind: :device_unavailable,
              op: :configure!,
              message: "device #{inspect(device)} is not available: #{device_problem(device)}"
            )
    end

    limit = if opts[:memory_limit] == :auto, do: nil, else: opts[:memory_limit]
    Native.call(:memory_limit, [limit], :configure!)
    ExBurn.Collector.put(opts[:collect_after])
    :persistent_term.put({__MODULE__, :default_device}, device)
    :persistent_term.put({__MODULE__, :dot_precision}, precision)

    nx? = Code.ensure_loaded?(Nx) and Code.ensure_loaded?(ExBurn.Backend)
    # Nx keeps its defaults in its application environment: load it when only its code is there.
    if nx?, do: Application.load(:nx)

    if nx? and opts[:nx_backend] do
      apply(Nx, :global_default_backend, [{ExBurn.Backend, device: device}])
    end

    if nx? and opts[:defn_compiler] do
      apply(Nx.Defn, :global_default_options, [[compiler: ExBurn.Compiler]])
    end

    Map.merge(engine, %{
      default_device: device,
      nx_backend: nx? and opts[:nx_backend],
      defn_compiler: nx? and opts[:defn_compiler],
      dot_precision: precision,
      memory_limit: opts[:memory_limit],
      collect_after: opts[:collect_after]
    })
  end

  @doc """
  The native engine's switches in force (the engine options of `configure!/1`), as a map.

  ## Examples

      iex> %{cuda_memory: memory, autotune: autotune} = ExBurn.engine_config()
      iex> {memory in [:driver, :exclusive, :pooled], autotune in [:skip_small, :all]}
      {true, true}
  """
  @spec engine_config() :: %{atom() => term()}
  def engine_config, do: ExBurn.EngineConfig.current!(:engine_config)

  @doc """
  Precision of f32 dots and matmuls (`ExBurn.BurnBridge.dot/7`, `Nx.dot` on `ExBurn.Backend`
  and in programs compiled by `ExBurn.Compiler` afterwards): set by `configure!/1`, else
  `config :ex_burn, dot_precision: :highest`, else `:default`.
  """
  @spec dot_precision() :: :default | :highest
  def dot_precision do
    case :persistent_term.get({__MODULE__, :dot_precision}, nil) do
      nil -> check_precision!(Application.get_env(:ex_burn, :dot_precision, :default))
      p -> p
    end
  end

  defp check_precision!(p) when p in [:default, :highest], do: p

  defp check_precision!(p) do
    raise ExBurn.Error.new(
            kind: :argument,
            op: :configure!,
            message: "dot_precision must be :default or :highest, got #{Options.short(p)}"
          )
  end

  @doc """
  The default device: set by `configure!/1`, else `config :ex_burn, default_device: ...`, else
  the `EX_BURN_DEFAULT_DEVICE` environment variable (`cpu`, `cuda`, `cuda:1`, `vulkan`), else
  `:cpu`.
  """
  @spec default_device() :: Device.t()
  def default_device do
    case :persistent_term.get({__MODULE__, :default_device}, nil) do
      nil -> Device.normalize!(Application.get_env(:ex_burn, :default_device) || env_device())
      d -> d
    end
  end

  defp env_device do
    case System.get_env("EX_BURN_DEFAULT_DEVICE", "cpu") |> String.split(":") do
      [family] -> String.to_existing_atom(family)
      [family, i] -> {String.to_existing_atom(family), String.to_integer(i)}
    end
  rescue
    _ ->
      raise ExBurn.Error.new(
              kind: :argument,
              message: "bad EX_BURN_DEFAULT_DEVICE: #{System.get_env("EX_BURN_DEFAULT_DEVICE")}"
            )
  end

  @doc "Whether the native library is loaded."
  @spec nif_loaded?() :: boolean()
  def nif_loaded? do
    match?({:ok, _}, safe(fn -> Native.call(:build_info, []) end))
  end

  @doc """
  What the loaded library contains and which devices answer: `%{version, backends,
  nif_version, default_device, devices, cuda_available}`. `devices` lists the device 0 of each
  compiled backend with its name, availability, memory limit and available memory, and
  `tensors_held` and `bytes_held`: the tensors the VM holds there (alive in some process, not yet
  freed by `ExBurn.Tensor.free/1` or garbage collection) and their bytes; on a CUDA device that
  holds tensors, `pool_in_use` and `pool_reserved`: the bytes of the memory pools' live buffers
  and all the bytes they hold from the driver (`nil` elsewhere).
  """
  @spec device_info() :: map()
  def device_info do
    build = Native.call(:build_info, [], :device_info)

    devices =
      for b <- build.backends, b != :wgpu do
        d = if b == :cpu, do: :cpu, else: {b, 0}
        Map.put(Native.call(:device_info, [d], :device_info), :device, d)
      end

    build
    |> Map.put(:default_device, default_device())
    |> Map.put(:devices, devices)
    |> Map.put(:cuda_available, Enum.any?(devices, &(&1.family == :cuda and &1.available)))
  end

  @doc "The name of the default device, e.g. `\"CPU (16 threads, flex backend)\"` or the GPU model."
  @spec device_name() :: String.t()
  def device_name do
    Native.call(:device_info, [default_device()], :device_name).name
  end

  @doc "Whether a CUDA GPU can be used (the cuda variant is loaded and a driver answers)."
  @spec cuda_available?() :: boolean()
  def cuda_available? do
    case safe(fn -> Native.call(:device_info, [{:cuda, 0}]) end) do
      {:ok, %{available: available}} -> available
      _ -> false
    end
  end

  @doc "Whether `device` can be used with the loaded library."
  @spec available?(Device.t() | atom()) :: boolean()
  def available?(device) do
    device = Options.check!(device, :device, "device", :available?)

    case safe(fn -> Native.call(:device_info, [device]) end) do
      {:ok, %{available: available}} -> available
      _ -> false
    end
  end

  defp device_problem(device) do
    case safe(fn -> ExBurn.Tensor.new([0.0], device: device) end) do
      {:error, e} -> Exception.message(e)
      {:ok, _} -> "unknown"
    end
  end

  @doc """
  Runs a small end-to-end check on the default device: builds tensors, adds and multiplies
  them, reads the result and compares it with the expected values.
  """
  @spec smoke_test() :: :ok | {:error, String.t()}
  def smoke_test do
    result =
      safe(fn ->
        a = ExBurn.Tensor.new([[1.0, 2.0], [3.0, 4.0]])
        b = ExBurn.BurnBridge.matmul(a, ExBurn.BurnBridge.add(a, a))
        ExBurn.Tensor.to_list(b)
      end)

    case result do
      {:ok, [[14.0, 20.0], [30.0, 44.0]]} -> :ok
      {:ok, other} -> {:error, "unexpected result #{Options.short(other)}"}
      {:error, e} -> {:error, Exception.message(e)}
    end
  end

  @doc "A printable summary of version, backends and devices."
  @spec summary() :: String.t()
  def summary do
    case safe(&device_info/0) do
      {:ok, info} ->
        devices =
          Enum.map_join(info.devices, "\n", fn d ->
            "  #{inspect(d.device)}: #{d.name} (#{if d.available, do: "available", else: "unavailable"})"
          end)

        """
        ExBurn #{version()} (native #{info.version}, NIF #{info.nif_version}, #{info.target})
        Backends compiled in: #{Enum.join(info.backends, ", ")}
        Default device: #{inspect(info.default_device)}
        Devices:
        #{devices}
        """

      {:error, e} ->
        "ExBurn #{version()}: #{Exception.message(e)}\n"
    end
  end

  defp safe(fun) do
    {:ok, fun.()}
  rescue
    e -> {:error, e}
  end

  if Code.ensure_loaded?(Nx) do
    # `Nx.Defn.default_options(compiler: ExBurn)`: the module is also the Defn compiler.
    # Evaluated, not written as `use`: a `use` is expanded even when Nx (and so
    # ExBurn.Compiler) does not exist.
    Code.eval_quoted(quote(do: use(ExBurn.Compiler)), [], __ENV__)
  end
end
