defmodule ExBurn.Nif.ConfigTest do
  use ExUnit.Case, async: true

  alias ExBurn.Nif.Config

  @gnu "x86_64-unknown-linux-gnu"

  defp inputs(overrides) do
    Map.merge(
      %{
        version: "1.0.0",
        target: @gnu,
        config_variant: nil,
        env: %{},
        # A released version whose checksum file lists every artifact of the matrix.
        listed: Config.artifact_names("1.0.0"),
        cargo?: false,
        rustler?: false,
        cuda_driver?: false
      },
      Map.new(overrides)
    )
  end

  defp plan(overrides), do: Config.plan(inputs(overrides))

  describe "variant choice" do
    test "parse_variant/1 accepts config atoms, env strings, aliases and auto" do
      assert Config.parse_variant(nil) == {:ok, nil}
      assert Config.parse_variant("") == {:ok, nil}
      assert Config.parse_variant("auto") == {:ok, nil}
      assert Config.parse_variant("flex") == {:ok, :cpu}
      assert Config.parse_variant(:auto) == {:ok, nil}
      assert Config.parse_variant(:cuda) == {:ok, :cuda}
      assert Config.parse_variant("vulkan") == {:ok, :vulkan}
      assert Config.parse_variant("CUDA") == {:ok, :cuda}
      assert Config.parse_variant("metal") == {:ok, :metal}
      assert {:error, msg} = Config.parse_variant("rocm")
      assert msg =~ ~s(unknown ExBurn variant "rocm")
      assert msg =~ "cpu, cuda, vulkan, metal"
      assert {:error, _} = Config.parse_variant(42)
    end

    test "config wins over env, explicit wins over detection" do
      assert Config.choose_variant(:vulkan, :cuda, true) == {:vulkan, :config}
      assert Config.choose_variant(nil, :cpu, true) == {:cpu, :env}
      assert Config.choose_variant(nil, nil, true) == {:cuda, :auto}
      assert Config.choose_variant(nil, nil, false) == {:cpu, :auto}
    end

    test "no variant and no driver: the default artifact" do
      p = plan([])
      assert %{variant: :cpu, artifact_variant: nil, force_build?: false, error: nil} = p
      assert p.features == ["flex"]
    end

    test "a CUDA driver selects the cuda artifact where one exists" do
      assert %{variant: :cuda, variant_source: :auto, artifact_variant: :cuda, force_build?: false} =
               plan(cuda_driver?: true)

      # Detection never forces a build: macOS has no cuda artifact, so the default is used.
      assert %{variant: :cpu, artifact_variant: nil, force_build?: false, error: nil} =
               plan(cuda_driver?: true, target: "aarch64-apple-darwin")
    end

    test "an explicit variant is not overridden by detection, and detection is skipped" do
      never = fn -> flunk("the CUDA probe must not run when a variant is given") end
      env = %{"EX_BURN_VARIANT" => "cpu"}
      assert %{variant: :cpu, variant_source: :env} = plan(env: env, cuda_driver?: never)

      assert %{variant: :vulkan, variant_source: :config, artifact_variant: :vulkan} =
               plan(config_variant: :vulkan, env: %{"EX_BURN_VARIANT" => "cuda"}, cuda_driver?: never)
    end

    test "a variant the default artifact already contains needs no suffix" do
      assert %{artifact_variant: nil, force_build?: false} =
               plan(config_variant: :metal, target: "aarch64-apple-darwin")

      assert %{artifact_variant: nil, force_build?: false} =
               plan(env: %{"EX_BURN_VARIANT" => "vulkan"}, target: "aarch64-linux-android")
    end

    test "an invalid value is an error that names the settings" do
      p = plan(env: %{"EX_BURN_VARIANT" => "tpu"})
      assert p.error =~ ~s(unknown ExBurn variant "tpu")
      assert p.error =~ "EX_BURN_BUILD"
      assert plan(config_variant: "nope").error =~ "nope"
    end
  end

  describe "forced builds" do
    test "EX_BURN_BUILD forces a build whose features follow the variant" do
      p = plan(env: %{"EX_BURN_BUILD" => "1", "EX_BURN_VARIANT" => "cuda"}, cargo?: true, rustler?: true)
      assert %{force_build?: true, reason: :requested, features: ["flex", "cuda"], error: nil} = p

      for off <- ["0", "false", ""] do
        refute plan(env: %{"EX_BURN_BUILD" => off}).force_build?, off
      end

      assert plan(env: %{"RUSTLER_PRECOMPILED_FORCE_BUILD_ALL" => "true"}, cargo?: true, rustler?: true).reason ==
               :requested
    end

    test "a -dev version builds, because its checksum file lists nothing" do
      assert %{force_build?: true, reason: :dev_version, error: nil} =
               plan(version: "0.4.0-dev", listed: [], cargo?: true, rustler?: true)

      assert plan(version: "0.4.0-dev.2", listed: [], cargo?: true, rustler?: true).reason == :dev_version
      assert plan(version: "0.4.0-dev", listed: []).error =~ "development version"
      assert plan(version: "0.4.0-dev").reason == :dev_version, "names of another version do not count"

      rc = "0.4.0-rc.1"
      refute plan(version: rc, listed: Config.artifact_names(rc)).force_build?
    end

    test "an artifact the checksum file lists is downloaded, whatever the version (mirrors, CI)" do
      dev = "0.4.0-dev"
      name = "libex_burn_nif-v#{dev}-nif-2.15-#{@gnu}--cuda.so.tar.gz"

      assert %{force_build?: false, reason: nil, artifact: ^name, artifact_variant: :cuda, error: nil} =
               plan(version: dev, listed: [name], env: %{"EX_BURN_VARIANT" => "cuda"})

      # The default artifact is not listed there: the CPU variant builds from source.
      assert plan(version: dev, listed: [name], cargo?: true, rustler?: true).reason == :dev_version
    end

    test "a release version whose checksum file lacks the artifact builds from source" do
      name = "libex_burn_nif-v1.0.0-nif-2.15-#{@gnu}.so.tar.gz"
      p = plan(listed: Config.artifact_names("1.0.0") -- [name], cargo?: true, rustler?: true)
      assert %{force_build?: true, reason: :unlisted, artifact: ^name, error: nil} = p

      p = plan(listed: [], rustler?: true)
      assert p.error =~ "#{name} is not listed in ExBurn's checksum file"
      assert p.error =~ "needs cargo"
    end

    test "listed_artifacts/1 reads the names of a checksum file" do
      dir = Path.join(System.tmp_dir!(), "ex_burn_listed_#{System.unique_integer([:positive])}")
      File.mkdir_p!(dir)
      file = Path.join(dir, "checksum.exs")
      hash = "sha256:" <> String.duplicate("0", 64)
      File.write!(file, ~s(%{\n  "b.tar.gz" => "#{hash}",\n  "a.tar.gz" => "#{hash}",\n}\n))
      assert Config.listed_artifacts(file) == ["a.tar.gz", "b.tar.gz"]
      assert Config.listed_artifacts(Path.join(dir, "missing.exs")) == []
      File.rm_rf!(dir)

      assert Path.basename(Config.checksum_path()) == "checksum-Elixir.ExBurn.Nif.exs"
      assert File.exists?(Config.checksum_path())
      version = Mix.Project.config()[:version]
      assert Config.listed_artifacts() in [[], Enum.sort(Config.artifact_names(version))]
    end

    test "a target outside the matrix builds from source when cargo and rustler are there" do
      p = plan(target: "riscv64gc-unknown-linux-gnu", cargo?: true, rustler?: true)
      assert %{force_build?: true, reason: :unsupported_target, features: ["flex"], error: nil} = p

      p = plan(target: "riscv64gc-unknown-linux-gnu", config_variant: :vulkan, cargo?: true, rustler?: true)
      assert p.features == ["flex", "vulkan"]
    end

    test "an explicit variant the target lacks builds from source with its feature" do
      p = plan(target: "aarch64-apple-darwin", config_variant: :cuda, cargo?: true, rustler?: true)
      assert %{reason: :unavailable_variant, features: ["flex", "metal", "cuda"], error: nil} = p
    end

    test "nothing fits and cargo is absent: the error lists targets, variants and env vars" do
      p = plan(target: "riscv64gc-unknown-linux-gnu", rustler?: true)
      assert p.error =~ "no precompiled ExBurn library exists for target riscv64gc-unknown-linux-gnu"
      assert p.error =~ "needs cargo (install Rust from https://rustup.rs)"
      refute p.error =~ "{:rustler"

      for t <- Config.targets(), do: assert(p.error =~ "  - #{t}")
      assert p.error =~ "x86_64-unknown-linux-gnu (variants: cuda, vulkan)"

      for var <- ~w(EX_BURN_VARIANT EX_BURN_BUILD EX_BURN_BASE_URL RUSTLER_PRECOMPILED_GLOBAL_CACHE_PATH),
          do: assert(p.error =~ var)

      assert plan(target: "x86_64-apple-darwin", config_variant: :cuda, cargo?: true).error =~
               ~s(no precompiled cuda variant exists for x86_64-apple-darwin, and building it from source needs {:rustler)
    end
  end

  describe "rustler_precompiled options" do
    test "name, version, URL, matrix and the variant callbacks" do
      p = plan(cuda_driver?: true)
      opts = Config.rustler_precompiled_options(p, "1.2.3", %{})
      assert opts[:otp_app] == :ex_burn
      assert opts[:crate] == "ex_burn_nif"
      assert opts[:version] == "1.2.3"
      assert opts[:base_url] == "https://github.com/ex-burn/ex_burn/releases/download/v1.2.3"
      assert opts[:nif_versions] == ["2.15"]
      assert opts[:features] == ["flex", "cuda"]
      assert opts[:default_features] == false
      refute Keyword.has_key?(opts, :force_build)

      callbacks = opts[:variants][@gnu]
      assert Keyword.keys(callbacks) == [:cuda, :vulkan]
      assert callbacks[:cuda].() == true
      assert callbacks[:vulkan].() == false

      cpu = Config.rustler_precompiled_options(plan([]), "1.2.3", %{})
      refute Enum.any?(cpu[:variants][@gnu], fn {_, f} -> f.() end)
    end

    test "EX_BURN_BASE_URL overrides the download location; a forced plan sets force_build" do
      opts =
        Config.rustler_precompiled_options(plan([]), "1.2.3", %{"EX_BURN_BASE_URL" => "http://127.0.0.1:8000"})

      assert opts[:base_url] == "http://127.0.0.1:8000/"
      assert Config.base_url("1.2.3", %{"EX_BURN_BASE_URL" => ""}) =~ "github.com"

      assert Config.base_url("1", %{"EX_BURN_BASE_URL" => "https://m.example/nifs"}) ==
               "https://m.example/nifs"

      forced = plan(version: "2.0.0-dev", listed: [], cargo?: true, rustler?: true)
      assert Config.rustler_precompiled_options(forced, "2.0.0-dev", %{})[:force_build] == true
    end
  end

  describe "download failures" do
    test "cached_tarball/2 follows rustler_precompiled's cache location" do
      assert Config.cached_tarball("a.tar.gz", %{"RUSTLER_PRECOMPILED_GLOBAL_CACHE_PATH" => "/opt/nifs"}) ==
               "/opt/nifs/a.tar.gz"

      assert Config.cached_tarball("a.tar.gz", %{"MIX_XDG" => "1", "XDG_CACHE_HOME" => "/x"}) =~
               ~r{rustler_precompiled/precompiled_nifs/a\.tar\.gz$}
    end

    test "a checksum mismatch names the artifact, URL and both hashes, and removes the bad tarball" do
      dir = Path.join(System.tmp_dir!(), "ex_burn_mismatch_#{System.unique_integer([:positive])}")
      File.mkdir_p!(dir)
      file = "libex_burn_nif-v1.0.0-nif-2.15-#{@gnu}--cuda.so.tar.gz"
      File.write!(Path.join(dir, file), "tampered")
      received = "sha256:" <> Base.encode16(:crypto.hash(:sha256, "tampered"), case: :lower)
      expected = "sha256:" <> String.duplicate("ab", 32)
      checksum_path = Path.join(dir, "checksum-Elixir.ExBurn.Nif.exs")
      File.write!(checksum_path, ~s(%{\n  "#{file}" => "#{expected}",\n}\n))

      p = plan(env: %{"EX_BURN_VARIANT" => "cuda"})
      env = %{"EX_BURN_BASE_URL" => "http://127.0.0.1:8765", "RUSTLER_PRECOMPILED_GLOBAL_CACHE_PATH" => dir}

      # rustler_precompiled 0.8's message: its advice on its own force_build setting is left out.
      reason = """
      Error while downloading precompiled NIF: the integrity check failed because the checksum of files does not match.

      You can force the project to build from scratch with:

          config :rustler_precompiled, :force_build, ex_burn: true

      In order to force the build, you also need to add Rustler as a dependency in your `mix.exs`:

          {:rustler, ">= 0.0.0", optional: true}
      """

      me = self()
      opts = [remove: &send(me, {:removed, &1}), checksum_path: checksum_path]
      message = Config.download_error(reason, p, "1.0.0", env, opts)

      cached = Path.join(dir, file)
      assert_received {:removed, ^cached}
      assert message =~ "ExBurn could not use the precompiled library #{file}"
      assert message =~ "from http://127.0.0.1:8765/#{file}"
      assert message =~ "integrity check failed"
      assert message =~ "expected #{expected}\n  received #{received}"
      assert message =~ "removed from the cache (#{cached})"
      assert message =~ "never edit the checksum file"
      assert message =~ "EX_BURN_BUILD=1"
      refute message =~ ":force_build"
      refute message =~ ~s(">= 0.0.0")

      # The default remover deletes the file, and a file that cannot be read is said so.
      Config.download_error(reason, p, "1.0.0", env, checksum_path: checksum_path)
      refute File.exists?(cached)

      assert Config.download_error(reason, p, "1.0.0", env, checksum_path: checksum_path) =~
               "received (unreadable)"

      File.rm_rf!(dir)
    end

    test "other failures keep the cache and say where a tarball can be put" do
      me = self()

      message =
        Config.download_error("couldn't fetch NIF: 404", plan([]), "1.0.0", %{},
          remove: &send(me, {:removed, &1})
        )

      refute_received {:removed, _}
      assert message =~ "couldn't fetch NIF: 404"

      assert message =~
               "https://github.com/ex-burn/ex_burn/releases/download/v1.0.0/libex_burn_nif-v1.0.0-nif-2.15-#{@gnu}.so.tar.gz"

      assert message =~ "offline installs"
    end
  end

  describe "host target and probes" do
    test "host_target/4 normalises like rustler_precompiled" do
      unix = {:unix, :linux}
      assert Config.host_target("x86_64-pc-linux-gnu", unix, 8, %{}) == @gnu
      assert Config.host_target("aarch64-unknown-linux-gnu", unix, 8, %{}) == "aarch64-unknown-linux-gnu"
      assert Config.host_target("x86_64-alpine-linux-musl", unix, 8, %{}) == "x86_64-unknown-linux-musl"

      assert Config.host_target("amd64-portbld-freebsd14.0", {:unix, :freebsd}, 8, %{}) ==
               "x86_64-unknown-freebsd"

      assert Config.host_target("aarch64-apple-darwin23.4.0", {:unix, :darwin}, 8, %{}) ==
               "aarch64-apple-darwin"

      assert Config.host_target("arm-apple-darwin22.1.0", {:unix, :darwin}, 8, %{}) == "aarch64-apple-darwin"
      assert Config.host_target("win32", {:win32, :nt}, 8, %{}) == "x86_64-pc-windows-msvc"

      nerves = %{"TARGET_ARCH" => "aarch64", "TARGET_OS" => "linux", "TARGET_ABI" => "musl"}
      assert Config.host_target("x86_64-pc-linux-gnu", unix, 8, nerves) == "aarch64-unknown-linux-musl"
    end

    test "this machine's target is in the matrix (the artifact CI tests)" do
      assert Config.host_target() in Config.targets()
    end

    test "cuda_driver?/1 looks for the driver, nvidia-smi and libcuda" do
      none = [exists?: fn _ -> false end, find_executable: fn _ -> nil end, env: %{}]
      refute Config.cuda_driver?(none)

      assert Config.cuda_driver?(
               Keyword.put(none, :find_executable, &(&1 == "nvidia-smi" && "/usr/bin/nvidia-smi"))
             )

      assert Config.cuda_driver?(Keyword.put(none, :exists?, &(&1 == "/proc/driver/nvidia/version")))

      ld = [exists?: &(&1 == "/opt/nv/lib/libcuda.so.1"), env: %{"LD_LIBRARY_PATH" => "/x:/opt/nv/lib"}]
      assert Config.cuda_driver?(Keyword.merge(none, ld))
    end

    test "a library built in this checkout wins over rustler_precompiled" do
      assert Config.loader(true, false) == :precompiled
      assert Config.loader(true, true) == :local
      assert Config.loader(false, false) == :local
    end
  end
end
