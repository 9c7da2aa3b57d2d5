defmodule ExBurn.Native do
  @moduledoc false
  # The one place that calls ExBurn.Nif: turns {:error, {kind, message}} into ExBurn.Error and
  # reports a missing or mismatched library clearly. Where a call runs (normal or dirty
  # scheduler) is decided by the native side from the decoded arguments.
  #
  # The first call checks that the loaded library was built from the same version as this
  # Elixir code (a library left over from another checkout or release would decode other
  # terms); the answer is kept in a persistent term, so later calls pay one lookup.

  alias ExBurn.Error

  @version Mix.Project.config()[:version]
  @checked {__MODULE__, :version_check}

  @doc "Calls the NIF `name` with `args` and unwraps the result; `op` names it in errors."
  def call(name, args, op \\ nil) do
    case :persistent_term.get(@checked, nil) do
      :ok -> :ok
      nil -> check_version!(op)
      %Error{} = error -> raise %{error | op: op}
    end

    ExBurn.Nif
    |> apply(name, args)
    |> unwrap(op)
  rescue
    e in ErlangError ->
      case e.original do
        :nif_not_loaded ->
          raise not_loaded(op)

        other ->
          reraise Error.new(kind: :execution, op: op, message: ExBurn.Format.term(other)), __STACKTRACE__
      end

    # A precompiled library that failed to load leaves ExBurn.Nif itself unloaded.
    e in UndefinedFunctionError ->
      if e.module == ExBurn.Nif, do: raise(not_loaded(op)), else: reraise(e, __STACKTRACE__)
  end

  defp unwrap({:ok, value}, _op), do: value

  defp unwrap({:error, {kind, message}}, op),
    do: raise(Error.new(kind: kind, op: op, message: strip_op(message, op)))

  # The engine names the op in its messages (programs run many); ExBurn.Error adds it too.
  defp strip_op(message, nil), do: message
  defp strip_op(message, op), do: String.replace_prefix(message, "#{op}: ", "")

  # Runs once per VM (a race runs it twice, harmlessly). A library that is not loaded is not
  # remembered: the call itself reports it, and a later load is checked then. A library of the
  # right version then takes the engine settings of the application environment
  # (`ExBurn.EngineConfig`), before the first call goes on (no device has started yet) and
  # before other processes skip the check; a bad setting raises here, at every call, until
  # it is fixed.
  defp check_version!(op) do
    info =
      try do
        ExBurn.Nif.build_info()
      catch
        :error, _not_loaded -> :not_loaded
      end

    case info != :not_loaded and version_error(info, @version) do
      %Error{} = error ->
        :persistent_term.put(@checked, error)
        raise %{error | op: op}

      :ok ->
        ExBurn.EngineConfig.apply_app_env!(op)
        :persistent_term.put(@checked, :ok)

      false ->
        :ok
    end
  end

  @doc false
  # Checks a `build_info` answer and remembers the outcome for later calls.
  def verify(info) do
    result = version_error(info, @version)
    :persistent_term.put(@checked, result)
    result
  end

  @doc """
  Compares the loaded library's `build_info` answer with the Elixir package version: `:ok`,
  or the `ExBurn.Error` (kind `:nif_not_loaded`, `details` with both versions) that calls raise.
  """
  @spec version_error(term(), String.t()) :: :ok | Error.t()
  def version_error({:ok, %{version: version}}, version), do: :ok

  def version_error({:ok, %{version: library}}, expected) do
    Error.new(
      kind: :nif_not_loaded,
      message:
        "the loaded ExBurn native library is version #{library}, but the Elixir code is #{expected}; " <>
          "the library is left unused. #{how_to_get_library()}",
      details: %{library_version: library, expected_version: expected}
    )
  end

  def version_error(other, expected) do
    Error.new(
      kind: :nif_not_loaded,
      message:
        "the loaded ExBurn native library did not report its version (#{inspect(other, limit: 5)}; " <>
          "ExBurn #{expected} expects it). #{how_to_get_library()}",
      details: %{library_version: nil, expected_version: expected}
    )
  end

  @doc false
  # Forgets the version check (tests).
  def reset_version_check, do: :persistent_term.erase(@checked)

  defp not_loaded(op) do
    Error.new(
      kind: :nif_not_loaded,
      op: op,
      message:
        "the ExBurn native library is not loaded (#{inspect(ExBurn.Nif.load_error())}). " <>
          how_to_get_library()
    )
  end

  defp how_to_get_library do
    "In a checkout of ExBurn, build it with `bin/setup` (`EX_BURN_VARIANT=cuda bin/setup` for a " <>
      "GPU variant). As a dependency, run `mix deps.compile ex_burn --force`: it downloads the " <>
      "precompiled library for your platform, or builds it from source with `EX_BURN_BUILD=1` " <>
      ~s[(needs cargo and {:rustler, "~> 0.37", runtime: false} in your deps). ] <>
      "See guides/installation.md."
  end
end
