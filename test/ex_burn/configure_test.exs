defmodule ExBurn.ConfigureTest do
  # Node-wide settings: not async, so no other test runs under a changed limit or default
  # backend (a 1 MB limit, or Nx's global backend switched to ExBurn, would fail them).
  use ExUnit.Case, async: false

  alias ExBurn.BurnBridge

  test "a configured memory limit refuses smaller requests" do
    ExBurn.configure!(memory_limit: 1_000_000, nx_backend: false)

    try do
      e = catch_error(BurnBridge.zeros({1000, 1000}))
      assert %ExBurn.Error{kind: :out_of_memory} = e
      assert e.message =~ "4000000 bytes"
      assert %{shape: {10, 10}} = BurnBridge.zeros({10, 10})
    after
      ExBurn.configure!(memory_limit: :auto, nx_backend: false)
    end

    assert %{shape: {1000, 1000}} = BurnBridge.zeros({1000, 1000})
  end
end
