defmodule ExBurn.Nif do
  @moduledoc false
  # NIF stubs, generated from one list, and the loader. With rustler_precompiled loaded (a hex
  # install) the artifact for this target and variant is downloaded from EX_BURN_BASE_URL (default:
  # the GitHub release) and checksum-verified, or built with cargo when ExBurn.Nif.Config decides
  # so. Otherwise, and in a checkout where bin/setup built priv/native/libex_burn_nif, that local
  # library is loaded.

  alias ExBurn.Nif.Config

  # One name per operation: each NIF starts on a normal scheduler and moves itself to a dirty
  # one when its work is costly (native/ex_burn_nif/src/sched.rs).
  @nifs [
    tensor_from_binary: 4,
    tensor_to_binary: 2,
    tensor_info: 1,
    tensor_to_device: 2,
    tensors_all_reduce: 1,
    tensor_deallocate: 1,
    eval_op: 3,
    program_build: 2,
    program_run: 5,
    op_table: 0,
    build_info: 0,
    device_info: 1,
    device_sync: 1,
    memory_limit: 1,
    config_get: 0,
    config_set: 1,
    model_new: 3,
    spec_info: 1,
    model_train_step: 4,
    model_train_epoch: 7,
    model_evaluate: 4,
    model_predict: 3,
    model_gradients: 3,
    model_profile_step: 4,
    model_call: 2,
    model_set_parameters: 3,
    model_load: 2,
    tensors_save: 3,
    tensors_load: 2
  ]

  @doc false
  def nifs, do: @nifs

  local_library = Path.expand("../../priv/native/libex_burn_nif", __DIR__)
  local_files = for ext <- ~w(.so .dll .dylib), do: local_library <> ext
  for file <- local_files, do: @external_resource(file)
  local? = Enum.any?(local_files, &File.exists?/1)

  if Config.loader(Code.ensure_loaded?(RustlerPrecompiled), local?) == :precompiled do
    # The plan depends on which artifacts the checksum file lists (unlisted ones are built).
    @external_resource Config.checksum_path()
    version = Mix.Project.config()[:version]
    plan = Config.plan(Config.inputs(version, Application.compile_env(:ex_burn, :variant)))
    if plan.error, do: Mix.raise(plan.error)

    opts = Config.rustler_precompiled_options(plan, version)
    # Evaluated, not written as `use`: a `use` in either branch would be expanded even when
    # RustlerPrecompiled does not exist (Nx-free, Hex-free builds). A failed download or
    # checksum is re-raised with what to do about it (and a bad tarball leaves the cache).
    try do
      Code.eval_quoted(quote(do: use(RustlerPrecompiled, var!(opts))), [opts: opts], __ENV__)
    rescue
      e in RuntimeError ->
        if plan.force_build?, do: reraise(e, __STACKTRACE__)
        Mix.raise(Config.download_error(Exception.message(e), plan, version))
    end
  else
    @on_load :load_local
    @doc false
    def load_local do
      path = Path.join([:code.priv_dir(:ex_burn), "native", "libex_burn_nif"])

      case :erlang.load_nif(String.to_charlist(path), 0) do
        :ok -> :persistent_term.put({__MODULE__, :load_error}, nil)
        {:error, reason} -> :persistent_term.put({__MODULE__, :load_error}, reason)
      end

      # Loading never fails the module: calls then raise ExBurn.Error kind :nif_not_loaded.
      :ok
    end
  end

  @doc false
  def load_error, do: :persistent_term.get({__MODULE__, :load_error}, :not_attempted)

  for {name, arity} <- @nifs do
    args = Macro.generate_arguments(arity, __MODULE__)
    def unquote(name)(unquote_splicing(args)), do: :erlang.nif_error(:nif_not_loaded)
  end
end
