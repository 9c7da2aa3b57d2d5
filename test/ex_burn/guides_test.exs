defmodule ExBurn.GuidesTest do
  @moduledoc """
  Runs the Elixir code of every guide (`guides/*.md`, `guides/*.livemd`) and of the README,
  and checks what it shows.

    * A guide's ```elixir blocks run in order with one binding and environment, as cells of a
      notebook do (aliases, imports and variables carry over).
    * A line `# => expected` checks the value of the code above it (back to the previous check
      or the start of the block): `expected` is evaluated and compared with `==`; when it
      starts with `#` (as `#Nx.Tensor<...>` does), it is compared with the inspected value,
      whitespace ignored. Comment lines right below it that start with `#` and at least four
      spaces continue it.
    * `<!-- skip: reason -->` as the last non-blank line before a block leaves that block out
      (it needs a GPU, Bumblebee, several nodes, or is a `mix.exs`/config excerpt).
    * A guide whose run blocks use Nx (`Nx.`, `defn`, `ExBurn.Backend`, `ExBurn.Compiler`,
      `ExBurn.Serving`) is tagged `:nx`, one that uses Axon `:axon`; they run where those are
      loadable (`bin/test-nx`).

  Output (training progress, `IO.puts`) is captured and shown only when a guide fails.
  """
  # Not async: guides change node-wide defaults (Nx's default backend, ExBurn.configure!/1),
  # restored after each guide.
  use ExUnit.Case, async: false

  defmodule Blocks do
    @moduledoc false

    @doc "The ```elixir blocks of a guide: `%{code, line, skip}` (`line`: the first code line)."
    def parse(text) do
      text
      |> String.split("\n")
      |> Enum.with_index(1)
      |> Enum.reduce({:text, nil, []}, fn {line, n}, {state, last, acc} ->
        trimmed = String.trim(line)

        case state do
          :text ->
            cond do
              line =~ ~r/^```elixir\s*$/ -> {{:elixir, n + 1, [], skip_reason(last)}, nil, acc}
              String.starts_with?(line, "```") -> {:other_fence, nil, acc}
              trimmed == "" -> {:text, last, acc}
              true -> {:text, trimmed, acc}
            end

          :other_fence ->
            if closing?(line), do: {:text, nil, acc}, else: {:other_fence, nil, acc}

          {:elixir, first, lines, skip} ->
            if closing?(line) do
              block = %{code: lines |> Enum.reverse() |> Enum.join("\n"), line: first, skip: skip}
              {:text, nil, [block | acc]}
            else
              {{:elixir, first, [line | lines], skip}, nil, acc}
            end
        end
      end)
      |> then(fn {_state, _last, acc} -> Enum.reverse(acc) end)
    end

    # A closing fence has no info string.
    defp closing?(line), do: line =~ ~r/^```\s*$/

    defp skip_reason(nil), do: nil

    defp skip_reason(line) do
      case Regex.run(~r/^<!--\s*skip:\s*(.*?)\s*-->$/, line) do
        [_, reason] -> reason
        nil -> nil
      end
    end

    @doc """
    A block cut at its `# =>` checks: `{code, line, expected | nil, expected_line}`, in order.
    """
    def segments(code, first_line) do
      lines = code |> String.split("\n") |> Enum.with_index(first_line)

      {segments, current, start} =
        Enum.reduce(lines, {[], [], first_line}, fn {line, n}, {segments, current, start} ->
          cond do
            match = Regex.run(~r/^\s*# => (.*)$/, line) ->
              code = current |> Enum.reverse() |> Enum.join("\n")
              {[{code, start, [Enum.at(match, 1)], n} | segments], [], n + 1}

            segments != [] and current == [] and continuation?(line, segments) ->
              [{code, start_line, expected, exp_line} | rest] = segments
              more = String.replace(line, ~r/^\s*#/, "")
              {[{code, start_line, expected ++ [more], exp_line} | rest], [], n + 1}

            true ->
              {segments, [line | current], start}
          end
        end)

      tail = current |> Enum.reverse() |> Enum.join("\n")

      segments
      |> Enum.reverse()
      |> Enum.map(fn {code, line, expected, exp_line} -> {code, line, Enum.join(expected, "\n"), exp_line} end)
      |> Kernel.++(if String.trim(tail) == "", do: [], else: [{tail, start, nil, nil}])
    end

    # `#    more` right below a check continues it (multi-line inspected values).
    defp continuation?(line, [{_code, _line, _expected, _exp_line} | _]), do: line =~ ~r/^\s*#\s{4,}\S/

    @doc "Tags for the code that runs."
    def tags(blocks) do
      code = blocks |> Enum.reject(& &1.skip) |> Enum.map_join("\n", & &1.code)

      [
        nx: code =~ ~r/\bNx\.|\bdefn\b|ExBurn\.(Backend|Compiler|Serving)\b/,
        axon: code =~ ~r/\bAxon\b/
      ]
      |> Enum.filter(&elem(&1, 1))
      |> Enum.map(&elem(&1, 0))
    end
  end

  @root Path.expand("../..", __DIR__)
  @guides Path.wildcard(Path.join(@root, "guides/*.{md,livemd}"))
          |> Enum.sort()
          |> Kernel.++([Path.join(@root, "README.md")])
  for guide <- @guides, do: @external_resource(guide)

  setup do
    nx? = Code.ensure_loaded?(Nx)

    saved =
      if nx?, do: Map.new([:default_backend, :default_defn_options], &{&1, Application.fetch_env(:nx, &1)})

    on_exit(fn ->
      ExBurn.configure!(nx_backend: false)

      for {key, value} <- saved || %{} do
        case value do
          {:ok, v} -> Application.put_env(:nx, key, v)
          :error -> Application.delete_env(:nx, key)
        end
      end
    end)
  end

  test "every guide has Elixir code that runs, and skips say why" do
    assert length(@guides) >= 7

    for guide <- @guides do
      blocks = guide |> File.read!() |> Blocks.parse()
      assert Enum.any?(blocks, &(&1.skip == nil)), "#{guide} has no block that runs"
      for %{skip: reason} <- blocks, reason != nil, do: assert(reason != "", guide)
    end
  end

  test "the block reader: fences, skips, checks and tags" do
    text = """
    # Title

    <!-- skip: needs a GPU -->

    ```elixir
    gpu()
    ```

    ```sh
    ```elixir inside a shell block is text
    ```

    ```elixir
    a = 1 + 1
    # => 2
    inspect(a)
    # => "2"
    Nx.tensor(a)
    # => #Nx.Tensor<
    #      s32
    #      2
    #    >
    a
    ```
    """

    assert [%{skip: "needs a GPU", line: 6}, %{skip: nil, line: 14, code: code}] = Blocks.parse(text)

    assert [
             {"a = 1 + 1", 14, "2", 15},
             {"inspect(a)", 16, ~s("2"), 17},
             {"Nx.tensor(a)", 18, tensor, 19},
             {"a", 23, nil, nil}
           ] = Blocks.segments(code, 14)

    assert String.split(tensor) == ~w(#Nx.Tensor< s32 2 >)
    assert Blocks.tags(Blocks.parse(text)) == [:nx]
  end

  for guide <- @guides do
    name = Path.relative_to(guide, @root)
    blocks = guide |> File.read!() |> Blocks.parse()

    for tag <- Blocks.tags(blocks), do: @tag(tag)
    @tag guide: name
    @tag timeout: 300_000
    @tag capture_log: true
    test "#{name} runs and shows what it says" do
      run_guide(unquote(guide))
    end
  end

  defp run_guide(path) do
    blocks = path |> File.read!() |> Blocks.parse()
    rel = Path.relative_to(path, @root)

    {result, output} =
      ExUnit.CaptureIO.with_io(fn ->
        try do
          env = Code.env_for_eval(file: rel)

          Enum.reduce(blocks, {[], env}, fn
            %{skip: reason}, acc when reason != nil -> acc
            %{code: code, line: line}, acc -> run_block(code, line, rel, acc)
          end)

          :ok
        rescue
          e in ExUnit.AssertionError -> {:error, e.message}
        catch
          kind, reason -> {:error, Exception.format(kind, reason, __STACKTRACE__)}
        end
      end)

    case result do
      :ok -> :ok
      {:error, message} -> flunk("#{rel} failed:\n#{message}\nOutput of the guide:\n#{output}")
    end
  end

  defp run_block(code, line, file, acc) do
    code
    |> Blocks.segments(line)
    |> Enum.reduce(acc, fn {code, line, expected, expected_line}, {binding, env} ->
      {value, binding, env} = eval(code, line, file, binding, env)
      if expected, do: check!(value, expected, "#{file}:#{expected_line}", binding, env)
      {binding, env}
    end)
  end

  defp eval(code, line, file, binding, env) do
    quoted = Code.string_to_quoted!(code, file: file, line: line)
    Code.eval_quoted_with_env(quoted, binding, %{env | file: file, line: line})
  end

  defp check!(value, "#" <> _ = expected, where, _binding, _env) do
    got = inspect(value, limit: :infinity)

    unless squash(got) == squash(expected),
      do: raise(ExUnit.AssertionError, message: "#{where}: expected\n#{expected}\ngot\n#{got}")
  end

  defp check!(value, expected, where, binding, env) do
    {want, _, _} = eval(expected, 1, where, binding, env)

    unless value == want,
      do: raise(ExUnit.AssertionError, message: "#{where}: expected #{inspect(want)}, got #{inspect(value)}")
  end

  defp squash(text), do: String.replace(text, ~r/\s+/, "")
end
