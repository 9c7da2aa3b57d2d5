defmodule ExBurn.EngineConfigTest do
  # The engine's switches (native/ex_burn_core/src/config.rs) are read once from Elixir and
  # passed down: `ExBurn.configure!/1` sets them, the application environment at the library's
  # first use, and both are validated before they reach the engine.
  use ExUnit.Case, async: false
  doctest ExBurn, only: [engine_config: 0]

  setup do
    before = ExBurn.engine_config()
    on_exit(fn -> ExBurn.configure!(Map.to_list(before)) end)
    %{before: before}
  end

  test "configure!/1 sets the given switches and keeps the others", %{before: before} do
    settings =
      ExBurn.configure!(
        cuda_fusion: not before.cuda_fusion,
        cudnn: not before.cudnn,
        cache_dir: "/tmp/ex_burn_kernels"
      )

    assert settings.cuda_fusion == not before.cuda_fusion
    assert settings.cudnn == not before.cudnn
    assert settings.default_device == :cpu

    assert ExBurn.engine_config() == %{
             before
             | cuda_fusion: not before.cuda_fusion,
               cudnn: not before.cudnn,
               cache_dir: "/tmp/ex_burn_kernels"
           }

    ExBurn.configure!(cache_dir: :off)
    assert ExBurn.engine_config().cache_dir == :off
    assert ExBurn.engine_config().cuda_fusion == not before.cuda_fusion
  end

  test "bad values are refused before they reach the engine", %{before: before} do
    bad = [profile: :loud, cuda_memory: :huge, autotune: true, cache_dir: 3, cublas: :yes, cudnn: 1]

    for {key, value} <- bad do
      err = assert_raise ExBurn.Error, fn -> ExBurn.configure!([{key, value}]) end
      assert err.kind == :argument
      assert err.message =~ inspect(key)
    end

    assert ExBurn.engine_config() == before
    assert {:error, {:argument, message}} = ExBurn.Nif.config_set(%{profile: :off})
    assert message =~ "missing field"
    assert {:error, {:argument, message}} = ExBurn.Nif.config_set(Map.put(to_native(before), :loud, true))
    assert message =~ "unknown field `loud`"
  end

  test "the application environment is applied when the library is first used" do
    Application.put_env(:ex_burn, :cublas, false)
    Application.put_env(:ex_burn, :profile, :off)

    try do
      ExBurn.Native.reset_version_check()
      ExBurn.Tensor.new([1.0])
      assert %{cublas: false, profile: :off} = ExBurn.engine_config()

      Application.put_env(:ex_burn, :cuda_memory, :huge)
      ExBurn.Native.reset_version_check()
      err = assert_raise ExBurn.Error, fn -> ExBurn.Tensor.new([1.0]) end
      assert err.message =~ ":cuda_memory"
    after
      for key <- [:cublas, :profile, :cuda_memory], do: Application.delete_env(:ex_burn, key)
      ExBurn.Native.reset_version_check()
    end
  end

  defp to_native(%{cache_dir: dir} = c) when is_binary(dir), do: %{c | cache_dir: {:dir, dir}}
  defp to_native(c), do: c
end
