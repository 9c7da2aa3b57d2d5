defmodule ExBurn.MixProject do
  use Mix.Project

  @version "0.4.0-dev"
  @source_url "https://github.com/ex-burn/ex_burn"

  def project do
    [
      app: :ex_burn,
      version: @version,
      elixir: "~> 1.14",
      start_permanent: Mix.env() == :prod,
      elixirc_paths: if(Mix.env() == :test, do: ["lib", "test/support"], else: ["lib"]),
      deps: deps(),
      package: package(),
      description: "Burn (Rust) deep learning from Elixir: Nx backend, Defn compiler, native training.",
      source_url: @source_url,
      docs: docs()
    ]
  end

  # `mix docs` (ex_doc, a dev dependency): the README, the guides (their code is run by
  # test/ex_burn/guides_test.exs), the changelog and the public modules by area.
  defp docs do
    [
      main: "readme",
      source_ref: "v#{@version}",
      extras: [
        {"README.md", title: "Overview"},
        "guides/installation.md",
        "guides/introduction.livemd",
        "guides/training.md",
        "guides/nx.md",
        "guides/serving.md",
        "guides/gpu.md",
        "guides/scaling.md",
        "CHANGELOG.md",
        {"CONTRIBUTING.md", title: "Contributing"}
      ],
      groups_for_extras: [
        Guides: ~r{^guides/},
        Project: ["CHANGELOG.md", "CONTRIBUTING.md"]
      ],
      groups_for_modules: [
        "Tensors and devices": [
          ExBurn,
          ExBurn.Tensor,
          ExBurn.BurnBridge,
          ExBurn.Device,
          ExBurn.Type,
          ExBurn.Error
        ],
        "Native training": [
          ExBurn.Layers,
          ExBurn.Model,
          ExBurn.Training,
          ExBurn.Callbacks,
          ExBurn.Dataset,
          ExBurn.Axon,
          ExBurn.Collective,
          ~r/^ExBurn\.Training\./
        ],
        Nx: [ExBurn.Backend, ExBurn.Compiler, ExBurn.Serving, ~r/^ExBurn\.Defn\./],
        Installation: [ExBurn.Nif.Config, ExBurn.Nif.Matrix],
        Internals: [ExBurn.Op]
      ]
    ]
  end

  def application do
    [extra_applications: [:logger, :crypto]]
  end

  # Hex packages are declared for real users. On a machine without Hex (no registry, no
  # archive) Mix aborts on any Hex dependency, so the list is empty there and the optional
  # integrations compile only when their modules are loadable (e.g. from ERL_LIBS).
  defp deps, do: if(hex_available?(), do: hex_deps(), else: [])

  @doc false
  # Public so that test/ex_burn/package_test.exs can check it without Hex. RELEASE.md,
  # "Dependencies", explains each requirement.
  def hex_deps do
    [
      # Downloads and verifies the artifact at compile time. Not 0.9.0; minors are capped
      # because rustler_precompiled's 0.x minors change its options and target lists.
      {:rustler_precompiled, "~> 0.8.4 or ~> 0.9.1 or ~> 0.10.0"},
      # Source builds only (EX_BURN_BUILD=1, unreleased versions, other targets). Optional: a
      # user who wants source builds adds it; nothing of it runs after compilation.
      {:rustler, "~> 0.37", optional: true, runtime: false},
      # 0.12 too: Bumblebee 0.7 requires nx ~> 0.12.0 (test/ex_burn/package_test.exs). CI's
      # matrix pins one of the two with EX_BURN_CI_NX.
      {:nx, System.get_env("EX_BURN_CI_NX") || "~> 0.12.0 or ~> 0.13.0"},
      {:axon, "~> 0.8", optional: true},
      {:telemetry, "~> 1.0", optional: true},
      {:ex_doc, "~> 0.34", only: :dev, runtime: false}
    ]
  end

  defp hex_available? do
    System.get_env("EX_BURN_NO_HEX_DEPS") in [nil, "", "0"] and Code.ensure_loaded?(Hex)
  end

  defp package do
    [
      licenses: ["Apache-2.0"],
      links: %{"GitHub" => @source_url},
      # What a user's machine reads, and nothing else: the Elixir sources (with the op
      # vocabulary lib/ex_burn/op/table.eterm, read at compile time), and for a source
      # build the cargo workspace of the NIF (its crates' sources: the engine, the NIF and the
      # CUDA kernels the cuda variant installs; the patched burn-dispatch, cubecl-cuda and
      # burn-cubecl it builds with, the lock file, the CUDA pin and musl flags) plus the
      # release matrix that ExBurn.Nif reads. Not the release
      # tool (native/ex_burn_release, its own workspace), examples, tests, benchmarks, or
      # built libraries. test/ex_burn/package_test.exs checks the list against the files a
      # source build reads.
      files: ~w(lib mix.exs README.md LICENSE .formatter.exs
                checksum-Elixir.ExBurn.Nif.exs native/targets.txt
                Cargo.toml Cargo.lock .cargo/config.toml
                native/ex_burn_core/src native/ex_burn_core/Cargo.toml
                native/ex_burn_nif/src native/ex_burn_nif/Cargo.toml
                native/ex_burn_cuda/src native/ex_burn_cuda/Cargo.toml
                native/vendor/burn-dispatch native/vendor/cubecl-cuda
                native/vendor/burn-cubecl)
    ]
  end
end
