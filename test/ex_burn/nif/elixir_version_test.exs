defmodule ExBurn.Nif.ElixirVersionTest do
  @moduledoc "A source build on an Elixir older than Rustler supports stops at once, saying why."
  use ExUnit.Case, async: true

  alias ExBurn.Nif.Config

  @gnu "x86_64-unknown-linux-gnu"

  defp plan(overrides) do
    %{
      version: "1.0.0",
      target: @gnu,
      config_variant: nil,
      env: %{},
      listed: Config.artifact_names("1.0.0"),
      cargo?: true,
      rustler?: true,
      cuda_driver?: false,
      elixir_version: "1.18.4"
    }
    |> Map.merge(Map.new(overrides))
    |> Config.plan()
  end

  test "a forced build on Elixir 1.14 fails with the requirement, even with cargo and rustler" do
    p = plan(env: %{"EX_BURN_BUILD" => "1"}, elixir_version: "1.14.0")
    assert p.force_build?
    assert p.error =~ "needs Elixir 1.15.0 or"
    assert p.error =~ "this is Elixir 1.14.0"
    assert p.error =~ "EX_BURN_BUILD"
    assert p.error =~ "  - #{@gnu} (variants: cuda, vulkan)"
  end

  test "every reason for a source build is checked: a development version, another target" do
    assert plan(version: "2.0.0-dev", listed: [], elixir_version: "1.14.5").error =~ "development version"
    assert plan(target: "riscv64gc-unknown-linux-gnu", elixir_version: "1.14.2").error =~ "Elixir 1.15.0"
  end

  test "Elixir 1.15 and later build; precompiled downloads need no check" do
    for v <- ["1.15.0", "1.16.3", "1.18.4", "1.19.0-rc.0"] do
      p = plan(env: %{"EX_BURN_BUILD" => "1"}, elixir_version: v)
      assert p.force_build? and p.error == nil, v
    end

    p = plan(elixir_version: "1.14.0")
    refute p.force_build?
    assert p.error == nil
  end

  test "inputs/2 records the running Elixir; the requirement is published" do
    assert Config.inputs("1.0.0", nil).elixir_version == System.version()
    assert Config.source_build_elixir() == "1.15.0"
  end
end
