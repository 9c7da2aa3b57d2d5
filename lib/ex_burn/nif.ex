defmodule ExBurn.Nif do
  @moduledoc false
  # NIF stubs, generated from one list, and the loader. With rustler_precompiled loaded the
  # artifact for this target and variant is downloaded and verified (ExBurn.Nif.Config);
  # otherwise the library built locally into priv/native is loaded.

  @nifs [
    tensor_from_binary: 4,
    tensor_from_binary_cpu: 4,
    tensor_from_binary_io: 4,
    tensor_to_binary: 2,
    tensor_to_binary_cpu: 2,
    tensor_to_binary_io: 2,
    tensor_info: 1,
    tensor_to_device: 2,
    tensor_deallocate: 1,
    eval_op: 3,
    eval_op_cpu: 3,
    eval_op_io: 3,
    program_compile: 1,
    program_run: 3,
    program_run_cpu: 3,
    program_run_io: 3,
    build_info: 0,
    device_info: 1,
    device_sync: 1
  ]

  @doc false
  def nifs, do: @nifs

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

  @doc false
  def load_error, do: :persistent_term.get({__MODULE__, :load_error}, :not_attempted)

  for {name, arity} <- @nifs do
    args = Macro.generate_arguments(arity, __MODULE__)
    def unquote(name)(unquote_splicing(args)), do: :erlang.nif_error(:nif_not_loaded)
  end
end
