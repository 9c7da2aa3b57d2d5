defmodule ExBurn.CollectorTest do
  # Not async: counts the tensors the whole VM holds on the CPU.
  use ExUnit.Case, async: false

  import Bitwise
  alias ExBurn.{BurnBridge, Tensor}

  defp held, do: Enum.find(ExBurn.device_info().devices, &(&1.device == :cpu)).tensors_held

  # In a fresh process whose heap is large (a long list kept alive, as in a process holding
  # state), so that the BEAM itself would not collect during the loop: `n` results of 4 MiB
  # each, every one dropped at once. Returns how many more tensors the VM holds at the end.
  defp dropped_results(collect_after, n) do
    ExBurn.configure!(collect_after: collect_after)
    x = Tensor.from_binary(:binary.copy(<<1.0::float-32-little>>, 1 <<< 20), {1 <<< 20}, :f32)

    task =
      Task.async(fn ->
        state = Enum.to_list(1..1_000_000)
        :erlang.garbage_collect()
        before = held()
        for _ <- 1..n, do: BurnBridge.add(x, 1.0)
        grown = held() - before
        {grown, length(state)}
      end)

    {grown, _} = Task.await(task, 60_000)
    grown
  after
    ExBurn.configure!()
  end

  test "tensors a process dropped are freed after collect_after bytes, not when its heap fills" do
    # 64 results of 4 MiB, collected every 16 MiB: at most 4 dead results at any time.
    assert dropped_results(16 <<< 20, 64) <= 4
    # Without it the heap never fills during the loop and every dead result stays allocated.
    assert dropped_results(:never, 64) >= 60
  end

  test "device_info counts the tensors the VM holds and frees" do
    before = held()
    t = Tensor.new([1.0, 2.0, 3.0])
    assert held() == before + 1
    :ok = Tensor.free(t)
    assert held() == before
  end

  test "collect_after is validated" do
    assert_raise ExBurn.Error, ~r/collect_after/, fn -> ExBurn.configure!(collect_after: 0) end
    assert_raise ExBurn.Error, ~r/collect_after/, fn -> ExBurn.configure!(collect_after: :soon) end
  end
end
