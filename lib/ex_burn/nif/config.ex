defmodule ExBurn.Nif.Config do
  @moduledoc """
  Every decision about which native library ExBurn gets, as plain functions over explicit
  inputs: the variant, whether to build from source, the cargo features of that build, the
  download location, and the error when nothing fits. `ExBurn.Nif` applies them at compile
  time; nothing here needs rustler_precompiled, so the rules are tested everywhere.

  ## Inputs (all read at compile time)

    * `config :ex_burn, variant: :cpu | :cuda | :vulkan | :metal` - wins over the env var.
    * `EX_BURN_VARIANT` - the same values as strings; unset or `auto` = detect a CUDA driver.
    * `EX_BURN_BUILD` - any value but `0`/`false` forces a source build (needs cargo and rustler).
    * `RUSTLER_PRECOMPILED_FORCE_BUILD_ALL` - rustler_precompiled's own switch; also forces.
    * `EX_BURN_BASE_URL` - where the tarballs are downloaded from (mirrors, a local test server).
    * `checksum-Elixir.ExBurn.Nif.exs` - only an artifact it lists can be downloaded.

  An artifact that the checksum file does not list cannot be verified, so it is built from
  source: every `-dev` version (its checksum file is empty) and any other unreleased commit. So
  is a target that is not in the matrix, or a variant the matrix does not offer for it. A
  source build needs cargo and rustler; without them the plan carries an error that explains.
  """

  alias ExBurn.Nif.Matrix

  @external_resource Matrix.path()
  @matrix Matrix.parse(File.read!(Matrix.path()))
  @crate "ex_burn_nif"
  @checksum_path Path.expand("../../../checksum-Elixir.ExBurn.Nif.exs", __DIR__)
  @source_url "https://github.com/ex-burn/ex_burn"

  @typedoc "What the user asked for (`:cpu` is the default artifact)."
  @type variant :: :cpu | atom()

  @typedoc "The decision for one compile."
  @type plan :: %{
          target: String.t(),
          variant: variant() | nil,
          variant_source: :config | :env | :auto | nil,
          artifact_variant: atom() | nil,
          force_build?: boolean(),
          reason: nil | :requested | :dev_version | :unlisted | :unsupported_target | :unavailable_variant,
          artifact: String.t() | nil,
          features: [String.t()],
          error: nil | String.t()
        }

  @doc "The parsed release matrix (`native/targets.txt`)."
  @spec matrix() :: Matrix.t()
  def matrix, do: @matrix

  @doc "The Rust crate every artifact is built from."
  @spec crate() :: String.t()
  def crate, do: @crate

  @doc "NIF versions artifacts are built for."
  @spec nif_versions() :: [String.t()]
  def nif_versions, do: @matrix.nif_versions

  @doc "Targets with a precompiled artifact, in file order."
  @spec targets() :: [String.t()]
  def targets, do: @matrix.entries |> Enum.map(& &1.target) |> Enum.uniq()

  @doc "Non-default variants per target, e.g. `%{\"x86_64-unknown-linux-gnu\" => [:cuda, :vulkan]}`."
  @spec variants() :: %{String.t() => [atom()]}
  def variants do
    for %{variant: v, target: t} <- @matrix.entries, v != nil, reduce: %{} do
      acc -> Map.update(acc, t, [v], &(&1 ++ [v]))
    end
  end

  @doc """
  Every tarball a release of `version` publishes (target x NIF version x variant), named as
  rustler_precompiled downloads them: `lib<crate>-v<version>-nif-<nif>-<target>[--<variant>]`
  plus `.so.tar.gz` (`.dll.tar.gz` and no `lib` on Windows).
  """
  @spec artifact_names(String.t()) :: [String.t()]
  def artifact_names(version) do
    for nif <- nif_versions(),
        %{target: t, variant: v} <- @matrix.entries,
        do: artifact_name(version, nif, t, v)
  end

  @doc "The tarball name of one artifact (`variant` `nil` for the default artifact)."
  @spec artifact_name(String.t(), String.t(), String.t(), atom() | nil) :: String.t()
  def artifact_name(version, nif, target, variant) do
    windows? = String.contains?(target, "windows")
    suffix = if variant, do: "--#{variant}", else: ""
    prefix = if windows?, do: "", else: "lib"

    "#{prefix}#{@crate}-v#{version}-nif-#{nif}-#{target}#{suffix}.#{if windows?, do: "dll", else: "so"}.tar.gz"
  end

  @doc """
  Where the checksum file is: the project root, where rustler_precompiled reads it (the root
  of the ex_burn dependency when ExBurn compiles).
  """
  @spec checksum_path() :: Path.t()
  def checksum_path, do: @checksum_path

  @doc """
  The artifact names listed in a checksum file (`%{}` when the file is missing). Only names
  matter here; rustler_precompiled verifies the hash of what it downloads.
  """
  @spec listed_artifacts(Path.t()) :: [String.t()]
  def listed_artifacts(path \\ @checksum_path), do: path |> checksums() |> Map.keys() |> Enum.sort()

  @doc "The map of a checksum file: artifact name => `\"sha256:<hex>\"` (`%{}` when it is missing)."
  @spec checksums(Path.t()) :: %{optional(String.t()) => String.t()}
  def checksums(path \\ @checksum_path) do
    case File.read(path) do
      {:ok, text} ->
        {map, _binding} = Code.eval_string(text, [], file: path)
        map

      {:error, :enoent} ->
        %{}
    end
  end

  @doc "Every value `EX_BURN_VARIANT` accepts: `:cpu`, the matrix's variants and GPU features."
  @spec known_variants() :: [variant()]
  def known_variants do
    gpu = for e <- @matrix.entries, f <- [e.variant | e.features], f not in [nil, "flex"], do: to_atom(f)
    Enum.uniq([:cpu | gpu])
  end

  @doc """
  Download location: `EX_BURN_BASE_URL`, else the GitHub release `v<version>`. A URL without a
  path gets `/` (rustler_precompiled would otherwise build an invalid relative URL).
  """
  @spec base_url(String.t(), %{optional(String.t()) => String.t()}) :: String.t()
  def base_url(version, env \\ System.get_env()) do
    case env["EX_BURN_BASE_URL"] do
      url when url not in [nil, ""] ->
        if URI.parse(url).path in [nil, ""], do: url <> "/", else: url

      _ ->
        "#{@source_url}/releases/download/v#{version}"
    end
  end

  @doc """
  Parses a variant from config (atom or string) or the env var, ignoring case. `nil`, `""` and
  `auto` mean "detect"; `flex` is `:cpu`.
  """
  @spec parse_variant(atom() | String.t() | nil) :: {:ok, variant() | nil} | {:error, String.t()}
  def parse_variant(nil), do: {:ok, nil}

  def parse_variant(value) when is_atom(value) or is_binary(value) do
    name = value |> to_string() |> String.downcase()
    found = Enum.find(known_variants(), &(Atom.to_string(&1) == name))

    cond do
      name in ["", "auto"] ->
        {:ok, nil}

      name == "flex" ->
        {:ok, :cpu}

      found ->
        {:ok, found}

      true ->
        {:error,
         "unknown ExBurn variant #{inspect(value)}; use one of " <>
           Enum.map_join(known_variants(), ", ", &Atom.to_string/1) <> " (or leave it unset)"}
    end
  end

  def parse_variant(value), do: parse_variant(inspect(value))

  @doc """
  The variant to use and where it came from: config wins over env; an explicit value always
  wins over detection; with neither, a CUDA driver means `:cuda`, else `:cpu`.
  """
  @spec choose_variant(variant() | nil, variant() | nil, boolean()) :: {variant(), :config | :env | :auto}
  def choose_variant(config, env, cuda_driver?) do
    cond do
      config != nil -> {config, :config}
      env != nil -> {env, :env}
      cuda_driver? -> {:cuda, :auto}
      true -> {:cpu, :auto}
    end
  end

  @doc """
  Whether this machine has an NVIDIA driver: `/proc/driver/nvidia`, `nvidia-smi` on the PATH,
  or `libcuda` / `nvcuda.dll` in a usual place or on `LD_LIBRARY_PATH`. Options `:exists?`,
  `:find_executable` and `:env` replace the probes (tests).
  """
  @spec cuda_driver?(keyword()) :: boolean()
  def cuda_driver?(opts \\ []) do
    exists? = Keyword.get(opts, :exists?, &File.exists?/1)
    find = Keyword.get(opts, :find_executable, &System.find_executable/1)
    env = Keyword.get_lazy(opts, :env, &System.get_env/0)

    ld_dirs = String.split(env["LD_LIBRARY_PATH"] || "", ":", trim: true)

    libs =
      for dir <-
            ld_dirs ++
              ~w(/usr/lib/x86_64-linux-gnu /usr/lib/aarch64-linux-gnu /usr/lib64 /usr/lib /usr/lib/wsl/lib),
          do: Path.join(dir, "libcuda.so.1")

    find.("nvidia-smi") != nil or
      Enum.any?(["/proc/driver/nvidia/version", "C:/Windows/System32/nvcuda.dll" | libs], exists?)
  end

  @doc """
  The Rust target triple of this machine, computed like rustler_precompiled does (including its
  `TARGET_ARCH`/`TARGET_VENDOR`/`TARGET_OS`/`TARGET_ABI` overrides for cross builds).
  """
  @spec host_target(String.t(), {atom(), atom()}, pos_integer(), map()) :: String.t()
  def host_target(
        system_architecture \\ List.to_string(:erlang.system_info(:system_architecture)),
        os_type \\ :os.type(),
        word_size \\ :erlang.system_info(:wordsize),
        env \\ System.get_env()
      ) do
    parts = String.split(system_architecture, "-")

    keys =
      case length(parts) do
        4 -> [:arch, :vendor, :os, :abi]
        3 -> [:arch, :vendor, :os]
        _ -> []
      end

    original = keys |> Enum.zip(parts) |> Map.new()

    overridden =
      Enum.reduce(
        [arch: "TARGET_ARCH", vendor: "TARGET_VENDOR", os: "TARGET_OS", abi: "TARGET_ABI"],
        original,
        fn
          {key, var}, acc -> if env[var], do: Map.put(acc, key, env[var]), else: acc
        end
      )

    system =
      if overridden != original and original[:vendor] == overridden[:vendor] and overridden[:os] == "linux",
        do: Map.put(overridden, :vendor, "unknown"),
        else: overridden

    case os_type do
      {:win32, _} -> windows_target(system, word_size)
      _ -> system |> normalize_unix() |> join_triple()
    end
  end

  defp windows_target(system, word_size) do
    given = join_triple(system)

    if given in targets() do
      given
    else
      arch = if word_size == 8, do: "x86_64", else: "i686"

      system
      |> Map.put_new(:arch, arch)
      |> Map.put_new(:vendor, "pc")
      |> Map.put_new(:os, "windows")
      |> Map.put_new(:abi, "msvc")
      |> join_triple()
    end
  end

  defp normalize_unix(%{os: os} = s) do
    cond do
      os =~ "darwin" -> %{s | arch: if(s.arch == "arm", do: "aarch64", else: s.arch), os: "darwin"}
      os =~ "linux" -> %{s | arch: normalize_arch(s.arch), vendor: linux_vendor(s.vendor)}
      os =~ "freebsd" -> %{s | arch: normalize_arch(s.arch), vendor: "unknown", os: "freebsd"}
      true -> s
    end
  end

  defp normalize_unix(s), do: s

  defp linux_vendor(v) when v in ~w(pc redhat suse alpine), do: "unknown"
  defp linux_vendor(v), do: v

  defp normalize_arch("amd64"), do: "x86_64"
  defp normalize_arch("riscv64"), do: "riscv64gc"
  defp normalize_arch(arch), do: arch

  defp join_triple(s), do: for(k <- [:arch, :vendor, :os, :abi], s[k], do: s[k]) |> Enum.join("-")

  @doc """
  The artifact variant that serves `variant` on `target`: `{:ok, nil}` for the default
  artifact (`:cpu`, or a feature the default already has, like Metal on macOS), `{:ok, v}` for
  a listed variant, `:unavailable` otherwise (including targets outside the matrix).
  """
  @spec artifact_variant(String.t(), variant()) :: {:ok, atom() | nil} | :unavailable
  def artifact_variant(target, variant) do
    lines = Enum.filter(@matrix.entries, &(&1.target == target))
    default = Enum.find(lines, &(&1.variant == nil))

    cond do
      default == nil -> :unavailable
      variant == :cpu -> {:ok, nil}
      Enum.any?(lines, &(&1.variant == variant)) -> {:ok, variant}
      Atom.to_string(variant) in default.features -> {:ok, nil}
      true -> :unavailable
    end
  end

  @doc """
  Cargo features of a source build of `variant` for `target`: those of the matching matrix line
  when there is one, else the default line's (or `flex`) plus the variant's own feature.
  """
  @spec features(String.t(), variant()) :: [String.t()]
  def features(target, variant) do
    line = fn v -> Enum.find(@matrix.entries, &(&1.target == target and &1.variant == v)) end

    case artifact_variant(target, variant) do
      {:ok, v} ->
        line.(v).features

      :unavailable ->
        base = if d = line.(nil), do: d.features, else: ["flex"]
        if variant == :cpu, do: base, else: Enum.uniq(base ++ [Atom.to_string(variant)])
    end
  end

  @doc """
  Gathers the real inputs of `plan/1`: env vars, cargo and rustler availability, the CUDA probe
  (only run when no variant is given), the host target and the artifacts the checksum file lists.
  """
  @spec inputs(String.t(), term()) :: map()
  def inputs(version, config_variant) do
    env = System.get_env()

    %{
      version: version,
      target: host_target(),
      config_variant: config_variant,
      env: env,
      listed: listed_artifacts(),
      cargo?: System.find_executable("cargo") != nil,
      rustler?: Code.ensure_loaded?(Rustler),
      elixir_version: System.version(),
      cuda_driver?: fn -> cuda_driver?(env: env) end
    }
  end

  @doc """
  Decides variant, artifact, forced build and features from `inputs` (see `inputs/2`; keys
  `:version`, `:target`, `:config_variant`, `:env`, `:listed` (artifact names in the checksum
  file; missing = none), `:cargo?`, `:rustler?`, `:cuda_driver?`, the last a boolean or a
  zero-arity function, and `:elixir_version` (missing = not checked)). `error` is set when
  nothing fits, and when a source build would run on an Elixir older than
  `source_build_elixir/0`.
  """
  @spec plan(map()) :: plan()
  def plan(inputs) do
    case {parse_variant(inputs.config_variant), parse_variant(inputs.env["EX_BURN_VARIANT"])} do
      {{:ok, config}, {:ok, from_env}} -> decide(inputs, config, from_env)
      {{:error, message}, _} -> invalid(inputs, message)
      {_, {:error, message}} -> invalid(inputs, message)
    end
  end

  defp decide(inputs, config, from_env) do
    detect = fn ->
      if is_function(inputs.cuda_driver?), do: inputs.cuda_driver?.(), else: inputs.cuda_driver?
    end

    {variant, source} = choose_variant(config, from_env, config == nil and from_env == nil and detect.())
    target = inputs.target

    {variant, availability} =
      case {artifact_variant(target, variant), source} do
        # Detection never forces a build: without a CUDA artifact the CPU one is used.
        {:unavailable, :auto} when variant != :cpu -> {:cpu, artifact_variant(target, :cpu)}
        {found, _} -> {variant, found}
      end

    env = inputs.env
    artifact_variant = with({:ok, v} <- availability, do: v, else: (_ -> nil))

    # rustler_precompiled picks one of the NIF versions at compile time; a release lists all.
    names =
      if availability == :unavailable,
        do: [],
        else: for(nif <- nif_versions(), do: artifact_name(inputs.version, nif, target, artifact_variant))

    listed = Map.get(inputs, :listed, [])

    reason =
      cond do
        truthy?(env["EX_BURN_BUILD"]) or env["RUSTLER_PRECOMPILED_FORCE_BUILD_ALL"] in ["1", "true"] ->
          :requested

        target not in targets() ->
          :unsupported_target

        availability == :unavailable ->
          :unavailable_variant

        Enum.all?(names, &(&1 in listed)) ->
          nil

        "dev" in Version.parse!(inputs.version).pre ->
          :dev_version

        true ->
          :unlisted
      end

    plan = %{
      target: target,
      variant: variant,
      variant_source: source,
      artifact_variant: artifact_variant,
      force_build?: reason != nil,
      reason: reason,
      artifact: List.first(names),
      features: features(target, variant),
      error: nil
    }

    cond do
      reason != nil and not source_build_elixir?(inputs) ->
        %{plan | error: old_elixir_message(plan, inputs)}

      reason != nil and not (inputs.cargo? and inputs.rustler?) ->
        %{plan | error: no_fit_message(plan, inputs)}

      true ->
        plan
    end
  end

  @source_build_elixir "1.15.0"

  @doc """
  The oldest Elixir a source build works on: Rustler's build (rustler 0.37 and later) uses
  options Elixir 1.14 lacks and stops there with `invalid option :lines`. Precompiled
  libraries load on Elixir 1.14.
  """
  @spec source_build_elixir() :: String.t()
  def source_build_elixir, do: @source_build_elixir

  defp source_build_elixir?(inputs) do
    case Map.get(inputs, :elixir_version) do
      nil -> true
      version -> Version.compare(version, @source_build_elixir) != :lt
    end
  end

  defp old_elixir_message(plan, inputs) do
    """
    #{why(plan, inputs)}, and building ExBurn from source needs Elixir #{@source_build_elixir} or \
    newer; this is Elixir #{inputs.elixir_version}.

    Upgrade Elixir, or use a precompiled library (Elixir 1.14 is enough for those): unset \
    EX_BURN_BUILD and RUSTLER_PRECOMPILED_FORCE_BUILD_ALL, and depend on a released version of \
    ExBurn for one of the precompiled targets:
    #{supported_targets()}

    #{env_help()}
    """
  end

  defp invalid(inputs, message) do
    %{
      target: inputs.target,
      variant: nil,
      variant_source: nil,
      artifact_variant: nil,
      force_build?: false,
      reason: nil,
      artifact: nil,
      features: [],
      error: message <> "\n\n" <> env_help()
    }
  end

  defp truthy?(value), do: value not in [nil, "", "0", "false", "no"]

  @doc "The message raised when neither a precompiled artifact nor a source build can serve."
  @spec no_fit_message(plan(), map()) :: String.t()
  def no_fit_message(plan, inputs) do
    why = why(plan, inputs)

    missing =
      [
        !inputs.cargo? && "cargo (install Rust from https://rustup.rs)",
        !inputs.rustler? && ~s({:rustler, "~> 0.37", runtime: false} in your deps)
      ]
      |> Enum.filter(& &1)
      |> Enum.join(" and ")

    """
    #{why}, and building it from source needs #{missing}.

    Precompiled targets (NIF #{Enum.join(nif_versions(), ", ")}):
    #{supported_targets()}

    #{env_help()}
    """
  end

  defp why(plan, inputs) do
    case plan.reason do
      :unsupported_target -> "no precompiled ExBurn library exists for target #{plan.target}"
      :unavailable_variant -> "no precompiled #{plan.variant} variant exists for #{plan.target}"
      :dev_version -> "ExBurn #{inputs.version} is a development version, which builds from source"
      :unlisted -> "#{plan.artifact} is not listed in ExBurn's checksum file (an unreleased commit?)"
      :requested -> "a source build was requested (EX_BURN_BUILD / RUSTLER_PRECOMPILED_FORCE_BUILD_ALL)"
    end
  end

  defp supported_targets do
    Enum.map_join(targets(), "\n", fn t ->
      extra = Map.get(variants(), t, [])
      "  - #{t}" <> if(extra == [], do: "", else: " (variants: #{Enum.join(extra, ", ")})")
    end)
  end

  defp env_help do
    """
    Settings (read when ExBurn compiles; run `mix deps.compile ex_burn --force` after a change):
      EX_BURN_VARIANT=cpu|cuda|vulkan   or config :ex_burn, variant: :cuda (config wins)
      EX_BURN_BUILD=1                   build from source with cargo (needs the :rustler dep)
      EX_BURN_BASE_URL=<url>            download artifacts from a mirror
      RUSTLER_PRECOMPILED_GLOBAL_CACHE_PATH=<dir>   use pre-downloaded tarballs (offline)\
    """
  end

  @doc """
  Options for `use RustlerPrecompiled` from a `plan/1` result. `force_build` is only set when
  the plan forces one, so `config :rustler_precompiled, :force_build, ex_burn: true` still
  works; `features` always follow the variant, whatever forces the build.
  """
  @spec rustler_precompiled_options(plan(), String.t(), map()) :: keyword()
  def rustler_precompiled_options(plan, version, env \\ System.get_env()) do
    variants =
      Map.new(variants(), fn {target, names} ->
        {target, for(name <- names, do: {name, fn -> name == plan.artifact_variant end})}
      end)

    [
      otp_app: :ex_burn,
      crate: @crate,
      version: version,
      base_url: base_url(version, env),
      nif_versions: nif_versions(),
      targets: targets(),
      variants: variants,
      features: plan.features,
      default_features: false
    ] ++ if(plan.force_build?, do: [force_build: true], else: [])
  end

  @doc """
  Where rustler_precompiled keeps a downloaded tarball: `RUSTLER_PRECOMPILED_GLOBAL_CACHE_PATH`,
  else its user cache directory (`~/.cache/rustler_precompiled/precompiled_nifs` on Linux).
  """
  @spec cached_tarball(String.t(), map()) :: Path.t()
  def cached_tarball(artifact, env \\ System.get_env()) do
    dir =
      if global = env["RUSTLER_PRECOMPILED_GLOBAL_CACHE_PATH"] do
        global
      else
        opts = if env["MIX_XDG"], do: %{os: :linux}, else: %{}
        :filename.basedir(:user_cache, "rustler_precompiled/precompiled_nifs", opts)
      end

    Path.join(dir, artifact)
  end

  @doc """
  The error raised when rustler_precompiled cannot provide the artifact of `plan` (`reason` is
  its message, whose advice about its own `force_build` setting is left out: ExBurn's settings
  follow). An artifact that fails the checksum is removed from the cache (rustler_precompiled
  stores a download before it checks it, and would otherwise fail on that same file forever),
  and the message shows the expected and the received sha256.

  Options (tests): `:remove` (default `File.rm/1`), `:checksum_path` (default `checksum_path/0`).
  """
  @spec download_error(String.t(), plan(), String.t(), map(), keyword()) :: String.t()
  def download_error(reason, plan, version, env \\ System.get_env(), opts \\ []) do
    remove = Keyword.get(opts, :remove, &File.rm/1)
    checksum_file = Keyword.get(opts, :checksum_path, @checksum_path)
    cached = cached_tarball(plan.artifact, env)
    url = String.trim_trailing(base_url(version, env), "/") <> "/" <> plan.artifact
    [reason | _] = String.split(reason, "\n\nYou can force the project to build from scratch", parts: 2)

    detail =
      if reason =~ "integrity check failed" do
        received =
          case File.read(cached) do
            {:ok, bytes} -> "sha256:" <> Base.encode16(:crypto.hash(:sha256, bytes), case: :lower)
            {:error, _} -> "(unreadable)"
          end

        remove.(cached)
        expected = Map.get(checksums(checksum_file), plan.artifact, "(not listed)")

        """
        Its sha256 is not the one #{Path.basename(checksum_file)} lists for it:
          expected #{expected}
          received #{received}
        The file is not the one that was released. Usual causes: a truncated download, a proxy
        or mirror (EX_BURN_BASE_URL) that serves different bytes, a file copied into the cache by
        hand. The file was removed from the cache (#{cached}), so the next compile downloads it
        again. Fix the source; never edit the checksum file to make this go away.
        """
      else
        """
        Check that the URL is reachable from this machine (proxies: HTTP_PROXY/HTTPS_PROXY), or
        put the tarball into #{Path.dirname(cached)} (offline installs).
        """
      end

    """
    ExBurn could not use the precompiled library #{plan.artifact}
    (target #{plan.target}, variant #{plan.variant}; from #{url}).

    #{String.trim(reason)}

    #{detail}
    To build from source instead, set EX_BURN_BUILD=1 (needs cargo and {:rustler, "~> 0.37", runtime: false} in your deps).

    #{env_help()}
    """
  end

  @doc """
  `:local` loads `priv/native/libex_burn_nif` (built by `bin/setup` in a checkout; it wins when
  present), `:precompiled` hands over to rustler_precompiled when it is loaded.
  """
  @spec loader(boolean(), boolean()) :: :local | :precompiled
  def loader(rustler_precompiled?, local_library?) do
    if rustler_precompiled? and not local_library?, do: :precompiled, else: :local
  end

  defp to_atom(name) when is_atom(name), do: name
  defp to_atom(name), do: String.to_atom(name)
end
