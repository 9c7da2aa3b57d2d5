defmodule ExBurn.NativeVersionTest do
  @moduledoc "The loaded native library must be the version of the Elixir code."
  # Not async: the check's outcome is node-wide state.
  use ExUnit.Case, async: false

  alias ExBurn.{BurnBridge, Native, Tensor}

  setup do
    on_exit(&Native.reset_version_check/0)
  end

  test "the library built from this checkout reports the package version" do
    assert {:ok, %{version: version}} = ExBurn.Nif.build_info()
    assert version == ExBurn.version()
    assert Native.version_error({:ok, %{version: version}}, ExBurn.version()) == :ok
  end

  test "a different library version is an ExBurn.Error naming both versions" do
    error = Native.version_error({:ok, %{version: "0.3.1"}}, "0.4.0")
    assert %ExBurn.Error{kind: :nif_not_loaded, details: details} = error
    assert details == %{library_version: "0.3.1", expected_version: "0.4.0"}
    assert error.message =~ "version 0.3.1"
    assert error.message =~ "0.4.0"
    assert error.message =~ "bin/setup"
    assert error.message =~ "mix deps.compile ex_burn --force"
    assert error.message =~ "EX_BURN_BUILD=1"
    refute error.message =~ "mix ex_burn.build"

    assert %ExBurn.Error{kind: :nif_not_loaded, details: %{library_version: nil}} =
             Native.version_error({:ok, %{}}, "0.4.0")
  end

  test "after a mismatch every call raises, and a fresh check lets calls through again" do
    assert %ExBurn.Error{} = Native.verify({:ok, %{version: "0.0.1"}})

    error = assert_raise ExBurn.Error, fn -> BurnBridge.ones({2}) end
    assert error.kind == :nif_not_loaded
    assert error.op == :full
    assert error.details.library_version == "0.0.1"
    refute ExBurn.nif_loaded?()

    Native.reset_version_check()
    assert Tensor.to_list(BurnBridge.ones({2})) == [1.0, 1.0]
    assert ExBurn.nif_loaded?()
  end
end
