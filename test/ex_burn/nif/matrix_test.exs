defmodule ExBurn.Nif.MatrixTest do
  use ExUnit.Case, async: true

  alias ExBurn.Nif.{Config, Matrix}

  # An independent reading of native/targets.txt (plain regexes, not Matrix.parse/1): what
  # ExBurn.Nif offers must be exactly what the release workflow builds from the same file.
  defp file_lines do
    Matrix.path()
    |> File.read!()
    |> String.split("\n")
    |> Enum.map(&(&1 |> String.replace(~r/#.*/, "") |> String.trim()))
    |> Enum.reject(&(&1 == ""))
  end

  test "ExBurn.Nif's targets, NIF versions and variants are the file's" do
    {nifs, entries} = Enum.split_with(file_lines(), &String.starts_with?(&1, "nif "))
    rows = Enum.map(entries, &String.split/1)

    assert Config.nif_versions() == Enum.map(nifs, &String.replace_prefix(&1, "nif ", ""))
    assert Config.nif_versions() == ["2.15"]
    assert Config.targets() == rows |> Enum.map(&hd/1) |> Enum.uniq()

    expected_variants =
      for [t, v | _] <- rows, v != "-", reduce: %{} do
        acc -> Map.update(acc, t, [String.to_atom(v)], &(&1 ++ [String.to_atom(v)]))
      end

    assert Config.variants() == expected_variants

    inputs = %{
      version: "1.0.0",
      target: "x86_64-unknown-linux-gnu",
      config_variant: nil,
      env: %{},
      listed: []
    }

    plan = Config.plan(Map.merge(inputs, %{cargo?: false, rustler?: false, cuda_driver?: false}))
    opts = Config.rustler_precompiled_options(plan, "1.0.0", %{})
    assert opts[:targets] == Config.targets()
    assert opts[:nif_versions] == Config.nif_versions()
    assert Map.new(opts[:variants], fn {t, vs} -> {t, Keyword.keys(vs)} end) == expected_variants
    assert length(Config.artifact_names("1.0.0")) == length(rows) * length(nifs)
  end

  test "the matrix covers the distribution contract" do
    v = Config.variants()
    assert v["x86_64-unknown-linux-gnu"] == [:cuda, :vulkan]
    assert v["aarch64-unknown-linux-gnu"] == [:cuda, :vulkan]
    assert :vulkan in v["x86_64-pc-windows-msvc"]

    for t <- ~w(x86_64-unknown-linux-musl aarch64-unknown-linux-musl aarch64-apple-darwin
                x86_64-apple-darwin aarch64-apple-ios aarch64-linux-android) do
      assert t in Config.targets()
      refute Map.has_key?(v, t), t
    end

    assert Config.features("aarch64-apple-darwin", :cpu) == ["flex", "metal"]
    assert Config.features("aarch64-linux-android", :cpu) == ["flex", "vulkan"]
    assert Enum.all?(Config.matrix().entries, &("flex" in &1.features))
  end

  test "artifact names follow rustler_precompiled" do
    names = Config.artifact_names("0.4.0")
    assert "libex_burn_nif-v0.4.0-nif-2.15-x86_64-unknown-linux-gnu.so.tar.gz" in names
    assert "libex_burn_nif-v0.4.0-nif-2.15-x86_64-unknown-linux-gnu--cuda.so.tar.gz" in names
    assert "libex_burn_nif-v0.4.0-nif-2.15-aarch64-apple-darwin.so.tar.gz" in names
    assert "ex_burn_nif-v0.4.0-nif-2.15-x86_64-pc-windows-msvc--vulkan.dll.tar.gz" in names
    assert names == Enum.uniq(names)
  end

  test "parse/1 reads comments, defaults and variants and rejects malformed lines" do
    m = Matrix.parse("nif 2.15 # x\n\nt-u-v - flex r cargo\nt-u-v cuda flex,cuda r cargo\n")
    assert m.nif_versions == ["2.15"]
    assert [%{variant: nil}, %{variant: :cuda, features: ["flex", "cuda"]}] = m.entries

    for bad <- ["nif 2\nt-u-v - flex r cargo\n", "nif 2.15\nt-u-v - flex\n", "nif 2.15\n", ""] do
      assert_raise ArgumentError, fn -> Matrix.parse(bad) end
    end
  end
end
