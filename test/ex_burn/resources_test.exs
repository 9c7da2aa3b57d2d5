defmodule ExBurn.ResourcesTest do
  # Not async: these measure the whole OS process.
  use ExUnit.Case, async: false

  alias ExBurn.{BurnBridge, Tensor}

  defp rss_mb do
    "/proc/self/status"
    |> File.read!()
    |> then(&Regex.run(~r/VmRSS:\s+(\d+) kB/, &1))
    |> then(fn [_, kb] -> String.to_integer(kb) / 1024 end)
  end

  defp churn(n) do
    bin = :binary.copy(<<1.0::float-32-little>>, 256)

    for _ <- 1..n do
      t = Tensor.from_binary(bin, {256}, :f32)
      BurnBridge.add(t, t)
    end

    :ok
  end

  @tag timeout: 300_000
  test "100k tensors created and dropped leave memory flat" do
    # warm up allocators, then measure 100k tensors (1 KiB each + one op result each)
    churn(5_000)
    :erlang.garbage_collect()
    before = rss_mb()

    for _ <- 1..10 do
      churn(10_000)
      :erlang.garbage_collect()
    end

    Process.sleep(50)
    growth = rss_mb() - before

    IO.puts(
      "\n  [memory] RSS before #{Float.round(before, 1)} MiB, growth after 100k tensors #{Float.round(growth, 1)} MiB"
    )

    # 100k leaked tensors would hold >= 200 MiB
    assert growth < 40
  end

  @tag timeout: 300_000
  test "a long op on a dirty scheduler leaves normal-scheduler processes responsive" do
    # ~3 s on the 2-core CI machine (the issue asks for an op of at least 2 s).
    n = 5120
    a = BurnBridge.random_uniform({n, n}, seed: 1)
    b = BurnBridge.random_uniform({n, n}, seed: 2)
    parent = self()

    pinger =
      spawn_link(fn ->
        send(parent, {:latencies, ping_loop([])})
      end)

    t0 = System.monotonic_time(:microsecond)
    c = BurnBridge.matmul(a, b)
    _ = Tensor.to_binary(c, limit: 1)
    op_ms = (System.monotonic_time(:microsecond) - t0) / 1000
    send(pinger, :stop)
    assert_receive {:latencies, lat}, 5_000

    sorted = Enum.sort(lat)
    p50 = Enum.at(sorted, div(length(sorted), 2))
    p99 = Enum.at(sorted, min(length(sorted) - 1, div(length(sorted) * 99, 100)))
    max = List.last(sorted)

    IO.puts(
      "\n  [scheduler] #{n}x#{n} matmul took #{round(op_ms)} ms; #{length(lat)} pings every 5 ms, " <>
        "extra latency p50 #{p50} us, p99 #{p99} us, max #{max} us"
    )

    assert op_ms >= 1_000, "the op must be long for this test to mean anything"
    # A normal scheduler blocked by the op would answer one late ping carrying the
    # whole op time; a responsive one answers many, none of them late by more than a
    # fraction of the op (generous bounds: CI machines may be busy).
    assert length(lat) > 10
    assert max < op_ms * 1000 / 4
    assert p99 < 250_000
  end

  defp ping_loop(acc) do
    t0 = System.monotonic_time(:microsecond)

    receive do
      :stop -> acc
    after
      5 ->
        late = System.monotonic_time(:microsecond) - t0 - 5_000
        ping_loop([max(late, 0) | acc])
    end
  end
end
