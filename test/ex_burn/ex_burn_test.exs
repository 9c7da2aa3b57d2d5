defmodule ExBurnTest do
  use ExUnit.Case, async: true

  test "the library is loaded and reports what it contains" do
    assert ExBurn.nif_loaded?()
    info = ExBurn.device_info()
    assert :cpu in info.backends
    assert info.nif_version == "2.15"
    assert info.version == ExBurn.version()
    assert %{device: :cpu, available: true} = Enum.find(info.devices, &(&1.device == :cpu))
    assert is_boolean(info.cuda_available)
  end

  test "default device, names and availability" do
    assert ExBurn.default_device() == :cpu
    assert ExBurn.device_name() =~ "CPU"
    assert ExBurn.available?(:cpu)
    assert ExBurn.cuda_available?() == ExBurn.available?(:cuda)
  end

  test "configure! refuses devices the library lacks" do
    unless :cuda in ExBurn.device_info().backends do
      assert %ExBurn.Error{kind: :device_unavailable} = catch_error(ExBurn.configure!(default_device: :cuda))
    end

    assert %{default_device: :cpu} = ExBurn.configure!(default_device: :cpu, nx_backend: false)
  end

  test "smoke test and summary" do
    assert ExBurn.smoke_test() == :ok
    assert ExBurn.summary() =~ "Backends compiled in: cpu"
  end
end
