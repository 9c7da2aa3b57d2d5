defmodule ExBurn.FuzzTest do
  # Malformed calls over every NIF and documented public function, in a child OS process
  # (test/fuzz/boundary_fuzz.exs): the VM must survive, NIFs must answer {:ok, _} or
  # {:error, {kind, message}}, public functions must return or raise ExBurn.Error.
  # EX_BURN_FUZZ_SEED reproduces a run; EX_BURN_FUZZ_CALLS changes its length.
  use ExUnit.Case, async: false

  alias ExBurn.Test.ChildVM

  @moduletag :tmp_dir

  @tag timeout: 600_000
  test "20,000 malformed calls: the VM survives and answers only ExBurn.Error", %{tmp_dir: dir} do
    seed = env_int("EX_BURN_FUZZ_SEED", :rand.uniform(1_000_000_000))
    calls = env_int("EX_BURN_FUZZ_CALLS", 20_000)
    script = Path.expand("../fuzz/boundary_fuzz.exs", __DIR__)
    copy = Path.join(dir, "boundary_fuzz.exs")
    File.cp!(script, copy)
    IO.puts("\n  [fuzz] seed #{seed} (EX_BURN_FUZZ_SEED=#{seed} reproduces this run), #{calls} calls")

    t0 = System.monotonic_time(:millisecond)
    port = ChildVM.start(copy, [Integer.to_string(seed), Integer.to_string(calls)], cd: dir)
    {status, lines} = ChildVM.await_exit(port, 540_000)
    seconds = (System.monotonic_time(:millisecond) - t0) / 1000

    assert status == 0,
           "the fuzzing VM died (status #{inspect(status)}) with seed #{seed}; last output:\n" <>
             Enum.join(Enum.take(lines, -30), "\n")

    summary =
      case Enum.find(lines, &String.starts_with?(&1, "FUZZ RESULT ")) do
        "FUZZ RESULT " <> b64 -> b64 |> Base.decode64!() |> :erlang.binary_to_term()
        nil -> flunk("no result from the fuzzing VM; output:\n" <> Enum.join(Enum.take(lines, -30), "\n"))
      end

    IO.puts(
      "  [fuzz] #{summary.calls} calls in #{Float.round(seconds, 1)} s (#{summary.nif} to #{summary.nifs} NIFs, " <>
        "#{summary.public} to #{summary.targets} public functions): #{summary.ok} returned, " <>
        "ExBurn.Error by kind #{inspect(summary.errors)}, #{length(summary.slow)} over 15 s"
    )

    for p <- summary.panics, do: IO.puts("  [fuzz] caught panic: #{p}")
    for s <- summary.slow, do: IO.puts("  [fuzz] over 15 s: #{inspect(s, limit: 12)}")
    assert summary.calls >= calls

    # A caught panic keeps the VM alive but means a check came too late: the boundary
    # refuses bad terms itself, so none is expected.
    assert summary.panics == [],
           "seed #{seed}: panics caught at the boundary (a missing check):\n" <>
             Enum.join(summary.panics, "\n")

    assert summary.bad == [],
           "seed #{seed}: calls answered with something else than ExBurn.Error:\n" <>
             Enum.map_join(summary.bad, "\n", &inspect(&1, limit: 20))
  end

  defp env_int(name, default) do
    case System.get_env(name) do
      nil -> default
      "" -> default
      v -> String.to_integer(v)
    end
  end
end
