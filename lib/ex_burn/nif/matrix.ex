defmodule ExBurn.Nif.Matrix do
  @moduledoc """
  Reads `native/targets.txt`, the release matrix: the one list of NIF versions, targets and
  variants. The release tool (`native/ex_burn_release`, `targets.rs`) reads the same file, so
  what the workflow builds and what `ExBurn.Nif` may download cannot drift apart.

  Format (see the file's header): `nif <x.y>` lines, then one line per artifact,
  `<target> <variant|-> <features> <runner> <builder>`; `#` starts a comment.
  """

  @typedoc "One artifact line; `variant` is `nil` for the default artifact."
  @type entry :: %{
          target: String.t(),
          variant: atom() | nil,
          features: [String.t()],
          runner: String.t(),
          builder: String.t()
        }

  @typedoc "The parsed file."
  @type t :: %{nif_versions: [String.t()], entries: [entry()]}

  @path Path.expand("../../../native/targets.txt", __DIR__)

  @doc "Where the matrix file lives (it ships in the hex package)."
  @spec path() :: Path.t()
  def path, do: @path

  @doc """
  Parses the matrix text. Raises `ArgumentError` naming the line when it is malformed (the
  release tool validates the rest: builders, duplicates, a default line per target).
  """
  @spec parse(String.t()) :: t()
  def parse(text) when is_binary(text) do
    {nifs, entries} =
      text
      |> String.split("\n")
      |> Enum.with_index(1)
      |> Enum.reduce({[], []}, fn {raw, n}, acc -> parse_line(raw, n, acc) end)

    if nifs == [] or entries == [] do
      raise ArgumentError, "targets file needs at least one `nif` line and one target line"
    end

    %{nif_versions: Enum.reverse(nifs), entries: Enum.reverse(entries)}
  end

  defp parse_line(raw, n, {nifs, entries} = acc) do
    case raw |> String.split("#", parts: 2) |> hd() |> String.split() do
      [] ->
        acc

      ["nif", version] ->
        if Regex.match?(~r/^\d+\.\d+$/, version),
          do: {[version | nifs], entries},
          else: bad(n, raw)

      [target, variant, features, runner, builder] ->
        entry = %{
          target: target,
          variant: if(variant == "-", do: nil, else: String.to_atom(variant)),
          features: String.split(features, ","),
          runner: runner,
          builder: builder
        }

        {nifs, [entry | entries]}

      _ ->
        bad(n, raw)
    end
  end

  defp bad(n, raw), do: raise(ArgumentError, "targets file line #{n} is malformed: #{inspect(raw)}")
end
