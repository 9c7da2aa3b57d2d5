defmodule ExBurn.EngineConfig do
  @moduledoc false
  # The engine's run-time switches (native/ex_burn_core/src/config.rs `Config`): the options of
  # `ExBurn.configure!/1` that the native engine reads, validated here and sent whole.
  #
  # Where a setting comes from, first match wins: `ExBurn.configure!/1`; the application
  # environment (`config :ex_burn, cuda_fusion: false`), applied when the library is first used
  # (`ExBurn.Native`, before any device starts); the `EX_BURN_*` environment variable, read by
  # the engine in one place (`Config::from_env`) as the fallback; the default.

  alias ExBurn.{Error, Options}

  @schema [
    profile: [
      type: {:in, [:off, :host, :sync, :gpu]},
      doc:
        "time compiled programs step by step and print a table to standard error every 16 runs: " <>
          "`:host` (the host's time per step), `:sync` (each step waits for its device: device time), " <>
          "`:gpu` (CUDA events: the GPU's own time), `:off` (env `EX_BURN_PROFILE=1|sync|gpu`; default `:off`)"
    ],
    attention: [
      type: :boolean,
      doc:
        "run the attentions of compiled programs as one step where a kernel exists (the CPU, CUDA); " <>
          "`false` runs them op by op (env `EX_BURN_ATTENTION=0`; default `true`)"
    ],
    cublas: [
      type: :boolean,
      doc:
        "matrix products on CUDA by cuBLAS where it loads; `false` keeps Burn's kernels (env `EX_BURN_CUBLAS=0`; default `true`)"
    ],
    cudnn: [
      type: :boolean,
      doc:
        "2-D convolutions on CUDA by cuDNN where it loads; `false` keeps Burn's kernels (env `EX_BURN_CUDNN=0`; default `true`)"
    ],
    cuda_fusion: [
      type: :boolean,
      doc:
        "fused element-wise kernels and row regions in compiled programs on CUDA " <>
          "(env `EX_BURN_CUDA_FUSION=0`; default `true`)"
    ],
    cuda_memory: [
      type: {:in, [:driver, :exclusive, :pooled]},
      doc:
        "how freed GPU memory is kept: `:driver` (pages go back to the CUDA driver's pool after each " <>
          "piece of work), `:exclusive` (kept per size bucket), `:pooled` (CubeCL's default). " <>
          "Before the first CUDA device starts only: a different value afterwards raises " <>
          "`ExBurn.Error` of kind `:argument` (env `EX_BURN_CUDA_MEMORY`; default `:driver`)"
    ],
    autotune: [
      type: {:in, [:skip_small, :all]},
      doc:
        "`:skip_small` runs a fixed kernel for small convolutions and short reductions (short first " <>
          "runs), `:all` autotunes every one as Burn does. Before the first CUDA device starts only " <>
          "(env `EX_BURN_AUTOTUNE=all`; default `:skip_small`)"
    ],
    cache_dir: [
      type: {:or, [{:in, [:default, :off]}, :string]},
      doc:
        "where compiled CUDA kernels and autotune results are kept across runs: a directory, `:default` " <>
          "(`~/.cache/ex_burn/cubecl`) or `:off` (CubeCL's defaults). Before the first CUDA device " <>
          "starts only (env `EX_BURN_CACHE_DIR`; default `:default`)"
    ]
  ]

  @doc false
  def schema, do: @schema

  @doc false
  def keys, do: Keyword.keys(@schema)

  @doc false
  # The settings in force, as a map of the schema's keys.
  def current!(op), do: :config_get |> ExBurn.Native.call([], op) |> from_native()

  @doc false
  # Applies validated `changes` over the settings in force; returns the new settings.
  def put!([], op), do: current!(op)

  def put!(changes, op) do
    settings = Map.merge(current!(op), Map.new(changes))
    ExBurn.Native.call(:config_set, [to_native(settings)], op)
    settings
  end

  @doc false
  # Applies the application environment's settings, calling the library directly (the first
  # `ExBurn.Native.call` runs this before it goes on); raises `ExBurn.Error` when a setting,
  # or the environment variable the engine falls back to, is invalid.
  def apply_app_env!(op) do
    opts = for key <- keys(), {:ok, value} <- [Application.fetch_env(:ex_burn, key)], do: {key, value}
    changes = Options.validate!(opts, @schema, :config)
    current = ExBurn.Nif.config_get() |> unwrap(op) |> from_native()

    if changes != [] do
      settings = Map.merge(current, Map.new(changes))
      ExBurn.Nif.config_set(to_native(settings)) |> unwrap(op)
    end

    :ok
  end

  defp unwrap({:ok, value}, _op), do: value

  defp unwrap({:error, {kind, message}}, op),
    do: raise(Error.new(kind: kind, op: op, message: "engine configuration: #{message}"))

  defp from_native(%{cache_dir: {:dir, dir}} = c), do: %{c | cache_dir: dir}
  defp from_native(c), do: c

  defp to_native(%{cache_dir: dir} = c) when is_binary(dir), do: %{c | cache_dir: {:dir, dir}}
  defp to_native(c), do: c
end
