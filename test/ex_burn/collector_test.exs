defmodule ExBurn.CollectorTest do
  # Not async: counts the tensors the whole VM holds on the CPU.
  use ExUnit.Case, async: false

  import Bitwise
  alias ExBurn.{BurnBridge, Tensor}

  defp held, do: Enum.find(ExBurn.device_info().devices, &(&1.device == :cpu)).tensors_held

  # The count once tensors freed by processes that just exited are gone.
  defp settled_held(last \\ nil) do
    now = held()
    if now == last, do: now, else: Process.sleep(20) && settled_held(now)
  end

  # In a fresh process whose heap has room to spare (as a process holding state has), so that
  # the BEAM itself does not collect during the loop: `n` results of 4 MiB each, every one
  # dropped at once. Returns how many more tensors the VM holds at the end of the loop, once
  # the count has settled (the BEAM may run the destructors of what a collection freed a
  # little later: counted at once, 9 were seen in a CI run where at most 4 are dead).
  defp dropped_results(collect_after, n) do
    ExBurn.configure!(collect_after: collect_after)
    x = Tensor.from_binary(:binary.copy(<<1.0::float-32-little>>, 1 <<< 20), {1 <<< 20}, :f32)
    before = settled_held()
    parent = self()

    {pid, ref} =
      :erlang.spawn_opt(
        fn ->
          Enum.each(1..n, fn _ -> BurnBridge.add(x, 1.0) end)
          send(parent, {:grown, settled_held() - before})
        end,
        [:monitor, {:min_heap_size, 2_000_000}]
      )

    receive do
      {:grown, grown} ->
        receive do: ({:DOWN, ^ref, :process, ^pid, _} -> grown)
    after
      60_000 -> flunk("the loop did not finish")
    end
  after
    ExBurn.configure!()
  end

  test "tensors a process dropped are freed after collect_after bytes, not when its heap fills" do
    # 64 results of 4 MiB, collected every 16 MiB: at most 4 dead results at any time (the
    # count is the whole VM's: one more allowed for a tensor another process holds meanwhile).
    assert dropped_results(16 <<< 20, 64) <= 5
    # Without it the heap never fills during the loop and every dead result stays allocated.
    assert dropped_results(:never, 64) >= 60
  end

  test "device_info counts the tensors the VM holds and frees" do
    before = settled_held()
    t = Tensor.new([1.0, 2.0, 3.0])
    assert held() == before + 1
    :ok = Tensor.free(t)
    assert held() == before
  end

  test "collect_after is validated, in configure!/1 and in the application environment" do
    assert_raise ExBurn.Error, ~r/collect_after/, fn -> ExBurn.configure!(collect_after: 0) end
    assert_raise ExBurn.Error, ~r/collect_after/, fn -> ExBurn.configure!(collect_after: :soon) end

    :persistent_term.erase({ExBurn, :collect_after})
    Application.put_env(:ex_burn, :collect_after, -5)

    try do
      assert_raise ExBurn.Error, ~r/config :ex_burn, collect_after/, fn -> ExBurn.Collector.threshold() end
      Application.put_env(:ex_burn, :collect_after, :never)
      assert ExBurn.Collector.threshold() == :never
    after
      Application.delete_env(:ex_burn, :collect_after)
      ExBurn.configure!()
    end
  end
end
