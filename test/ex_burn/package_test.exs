defmodule ExBurn.PackageTest do
  use ExUnit.Case, async: true

  # The hex package must be able to build from source (the whole cargo workspace and what it
  # includes) and must never carry built libraries or a checksum file that claims artifacts
  # which do not exist.

  @root Path.expand("../..", __DIR__)

  defp listed, do: Mix.Project.config()[:package][:files]

  # The files hex would ship: each listed file, and every file under each listed directory.
  defp shipped do
    for entry <- listed(), path = Path.join(@root, entry), reduce: MapSet.new() do
      acc ->
        files = if File.dir?(path), do: Path.wildcard(Path.join(path, "**/*"), match_dot: true), else: [path]

        files
        |> Enum.reject(&File.dir?/1)
        |> Enum.map(&Path.relative_to(&1, @root))
        |> MapSet.new()
        |> MapSet.union(acc)
    end
  end

  defp shipped?(relative), do: MapSet.member?(shipped(), relative)

  # Files a user's machine reads besides the Elixir sources (lib/**/*.ex, compiled by Mix)
  # and the Rust sources (read by rustc): the project and workspace manifests, the lock
  # file, cargo settings (CUDA pin, musl flags), the matrix and checksum file ExBurn.Nif
  # reads at compile time, and what hex requires of every package (README, LICENSE) plus
  # the formatter settings a dependency's `mix format` imports; the vendored crates' licenses;
  # the op vocabulary ExBurn.Op reads at compile time.
  @metadata ~w(mix.exs README.md LICENSE .formatter.exs checksum-Elixir.ExBurn.Nif.exs
               lib/ex_burn/op/table.eterm
               native/targets.txt Cargo.toml Cargo.lock .cargo/config.toml
               native/ex_burn_core/Cargo.toml native/ex_burn_nif/Cargo.toml
               native/ex_burn_cuda/Cargo.toml
               native/vendor/burn-dispatch/Cargo.toml native/vendor/burn-dispatch/build.rs
               native/vendor/burn-dispatch/README.md native/vendor/burn-dispatch/VENDORED.md
               native/vendor/cubecl-cuda/Cargo.toml native/vendor/cubecl-cuda/build.rs
               native/vendor/cubecl-cuda/README.md native/vendor/cubecl-cuda/VENDORED.md
               native/vendor/cubecl-cuda/LICENSE-APACHE native/vendor/cubecl-cuda/LICENSE-MIT
               native/vendor/burn-cubecl/Cargo.toml native/vendor/burn-cubecl/README.md
               native/vendor/burn-cubecl/VENDORED.md native/vendor/burn-cubecl/LICENSE-APACHE
               native/vendor/burn-cubecl/LICENSE-MIT)

  # Crates compiled only with a GPU feature of the NIF, so absent from the cpu build's
  # dep-info: {directory, feature}. The NIF's feature turns the crate on as an optional
  # dependency, and the crate's own feature of that name compiles its sources (without it the
  # crate is empty, see its lib.rs).
  @feature_only_crates %{"native/ex_burn_cuda" => "cuda"}

  defp feature_only_sources do
    for {dir, _feature} <- @feature_only_crates,
        path <- Path.wildcard(Path.join(@root, "#{dir}/src/**/*.rs")),
        into: MapSet.new(),
        do: Path.relative_to(path, @root)
  end

  # The workspace sources the last `cargo build --release -p ex_burn_nif` (bin/setup) read,
  # from the dep-info file cargo writes beside the library.
  defp rust_sources_read do
    target = System.get_env("CARGO_TARGET_DIR") || Path.expand("~/.cache/ex_burn/target")
    dep_info = Path.join([target, "release", "libex_burn_nif.d"])
    assert File.exists?(dep_info), "#{dep_info} missing: run bin/setup first"
    [_target, deps] = String.split(File.read!(dep_info), ": ", parts: 2)
    paths = deps |> String.replace("\\ ", "\0") |> String.split() |> Enum.map(&String.replace(&1, "\0", " "))
    local = Enum.filter(paths, &String.starts_with?(&1, @root <> "/"))

    assert local != [],
           "#{dep_info} was written by a build of another checkout (#{hd(paths)}): run bin/setup here"

    MapSet.new(local, &Path.relative_to(&1, @root))
  end

  test "the package is exactly what a user's build reads, and small" do
    for entry <- listed(), do: assert(File.exists?(Path.join(@root, entry)), "#{entry} is listed but missing")

    elixir = @root |> Path.join("lib/**/*.ex") |> Path.wildcard() |> MapSet.new(&Path.relative_to(&1, @root))
    rust = rust_sources_read()
    # The patched dependency (Cargo.toml's [patch.crates-io]): cargo reads its sources, but the
    # NIF's dep-info lists workspace sources only.
    vendored =
      for crate <- ~w(burn-dispatch cubecl-cuda burn-cubecl),
          path <- Path.wildcard(Path.join(@root, "native/vendor/#{crate}/src/**/*.rs")),
          into: MapSet.new(),
          do: Path.relative_to(path, @root)

    for crate <- ~w(burn-dispatch cubecl-cuda burn-cubecl) do
      assert Enum.any?(vendored, &String.starts_with?(&1, "native/vendor/#{crate}/")), crate

      assert File.read!(Path.join(@root, "Cargo.toml")) =~
               ~s(#{crate} = { path = "native/vendor/#{crate}" })
    end

    expected = elixir |> MapSet.union(rust) |> MapSet.union(vendored) |> MapSet.union(MapSet.new(@metadata))
    shipped = shipped()
    gated = feature_only_sources()

    assert MapSet.difference(expected, shipped) |> Enum.sort() == [], "read by a build but not shipped"

    assert MapSet.difference(shipped, MapSet.union(expected, gated)) |> Enum.sort() == [],
           "shipped but never read by a build"

    # the cpu build reads none of a feature-only crate; the NIF's feature is what brings it in
    assert MapSet.intersection(rust, gated) |> Enum.sort() == []
    nif = File.read!(Path.join(@root, "native/ex_burn_nif/Cargo.toml"))

    for {dir, feature} <- @feature_only_crates do
      name = Path.basename(dir)
      assert Enum.any?(gated, &String.starts_with?(&1, dir <> "/src/")), dir
      assert Enum.all?(gated, &(&1 in shipped))
      assert nif =~ ~r/^#{name} = \{ path = "..\/#{name}", optional = true/m, dir
      assert nif =~ ~r/^#{feature} = \[[^\]]*"dep:#{name}", "#{name}\/#{feature}"/m, dir
      assert File.read!(Path.join(@root, "#{dir}/src/lib.rs")) =~ ~s|#![cfg(feature = "#{feature}")]|
    end

    # The list with sizes (the test log shows it), a budget per file and for the whole.
    sizes = shipped |> Enum.sort() |> Enum.map(&{&1, File.stat!(Path.join(@root, &1)).size})
    total = sizes |> Enum.map(&elem(&1, 1)) |> Enum.sum()

    if System.get_env("EX_BURN_PACKAGE_LIST") do
      for {file, size} <- sizes, do: IO.puts(String.pad_leading(Integer.to_string(size), 8) <> "  " <> file)
      IO.puts(String.pad_leading(Integer.to_string(total), 8) <> "  total, #{length(sizes)} files")
    end

    for {file, size} <- sizes, file != "Cargo.lock", do: assert(size < 96 * 1024, "#{file}: #{size} bytes")
    # 1.52 MB with the GPU row regions, 2.08 MB with the vendored burn-cubecl (0.56 MB of
    # Burn's sources, 2026-11-25), 2.20 MB with the CUDA attention kernel, 2.35 MB with bounded
    # formatting, size checks and cancellation (2026-11-27), 2.55 MB with the small-loop
    # interpreter, host convolutions, the generated op table and the engine's configuration
    # (2026-11-28), 2.75 MB with the small loops' machine code and the host's f64-rounded
    # functions (2026-11-29), 2.87 MB with the window scatters' and the sums' kernels
    # (2026-11-29, later); a budget, not a hex limit
    assert total < 3_000_000, "package #{total} bytes"
  end

  test "nothing built, no maintainers' tools" do
    for file <- shipped() do
      refute String.starts_with?(file, [
               "priv/",
               "target/",
               "_build/",
               "deps/",
               "native/ex_burn_release",
               "bench/",
               "test/"
             ]),
             file

      refute Path.extname(file) in ~w(.so .dll .dylib .a .rlib .beam .gz), file
      refute Path.basename(file) in ~w(Cross.toml release.yml), file
    end
  end

  test "every workspace member, path dependency and included file is shipped (source builds)" do
    [_, members] = Regex.run(~r/members\s*=\s*\[([^\]]*)\]/, File.read!(Path.join(@root, "Cargo.toml")))
    members = Regex.scan(~r/"([^"]+)"/, members, capture: :all_but_first) |> List.flatten()
    assert Enum.sort(members) == ["native/ex_burn_core", "native/ex_burn_cuda", "native/ex_burn_nif"]

    for member <- members do
      assert shipped?(Path.join(member, "Cargo.toml")), member
      assert Enum.any?(shipped(), &String.starts_with?(&1, member <> "/src/")), member
    end

    for file <- shipped(), Path.basename(file) == "Cargo.toml", member_dir = Path.dirname(file) do
      for [path] <-
            Regex.scan(~r/\bpath\s*=\s*"([^"]+)"/, File.read!(Path.join(@root, file)), capture: :all_but_first) do
        target = Path.join(member_dir, path) |> Path.expand(@root) |> Path.relative_to(@root)
        assert shipped?(target) or shipped?(Path.join(target, "Cargo.toml")), "#{file}: path #{path}"
      end
    end

    for file <- shipped(), Path.extname(file) == ".rs" do
      for [path] <-
            Regex.scan(~r/include_(?:str|bytes)!\("([^"]+)"\)/, File.read!(Path.join(@root, file)),
              capture: :all_but_first
            ) do
        target = Path.join(Path.dirname(file), path) |> Path.expand(@root) |> Path.relative_to(@root)
        assert shipped?(target), "#{file} includes #{path}"
      end
    end
  end

  test "hex deps: rustler_precompiled never 0.9.0, rustler optional and compile-time only" do
    deps = ExBurn.MixProject.hex_deps()

    {:rustler_precompiled, precompiled} = List.keyfind(deps, :rustler_precompiled, 0)
    for v <- ~w(0.8.4 0.8.9 0.9.1 0.9.7 0.10.0 0.10.4), do: assert(Version.match?(v, precompiled), v)
    for v <- ~w(0.8.3 0.9.0 0.11.0 1.0.0), do: refute(Version.match?(v, precompiled), v)

    {:rustler, rustler, opts} = List.keyfind(deps, :rustler, 0)
    assert opts[:optional] == true and opts[:runtime] == false
    assert Version.match?("0.38.0", rustler)

    # What the error messages and the installation guide tell users to add is the same line.
    line = ~s({:rustler, "#{rustler}", runtime: false})
    assert File.read!(Path.join(@root, "guides/installation.md")) =~ line
    assert File.read!(Path.join(@root, "lib/ex_burn/nif/config.ex")) =~ line
    refute File.read!(Path.join(@root, "lib/ex_burn/nif/config.ex")) =~ ~s({:rustler, ">)

    for {name, _req, opts} <- Enum.filter(deps, &(tuple_size(&1) == 3)), opts[:only] do
      assert opts[:runtime] == false, "#{name} is a tool, not a runtime dependency"
    end
  end

  test "hex deps: Nx 0.12 (what Bumblebee 0.7 requires) and 0.13, Axon of either" do
    deps = ExBurn.MixProject.hex_deps()
    {:nx, nx} = List.keyfind(deps, :nx, 0)
    for v <- ~w(0.12.0 0.12.1 0.13.0 0.13.1), do: assert(Version.match?(v, nx), v)
    for v <- ~w(0.11.0 0.14.0 1.0.0), do: refute(Version.match?(v, nx), v)

    {:axon, axon, _opts} = List.keyfind(deps, :axon, 0)
    for v <- ~w(0.8.0 0.9.0), do: assert(Version.match?(v, axon), v)
  end

  test "the checksum file lists exactly a release's artifacts, or nothing for a -dev version" do
    version = Mix.Project.config()[:version]
    {map, _} = Code.eval_file(Path.join(@root, "checksum-Elixir.ExBurn.Nif.exs"))
    assert is_map(map)

    if "dev" in Version.parse!(version).pre do
      assert map == %{}, "a -dev version always builds from source; its checksum file must be empty"
    else
      assert map == %{} or Enum.sort(Map.keys(map)) == Enum.sort(ExBurn.Nif.Config.artifact_names(version))
      for {_, v} <- map, do: assert(v =~ ~r/\Asha256:[0-9a-f]{64}\z/)
    end
  end
end
