defmodule ExBurn.CancelTest do
  @moduledoc """
  Native work stops when its caller dies: endless `while` loops whose callers are killed free
  their dirty schedulers at once, and other dirty work runs right after.
  """
  # Not async: it occupies every dirty CPU scheduler on purpose.
  use ExUnit.Case, async: false

  alias ExBurn.Tensor

  # A `while` loop that never ends (i < i + 1), on the engine's dirty CPU schedulers.
  defp endless do
    state = %{inputs: 1, instrs: [], outputs: [0]}
    one = %{op: {:full, %{shape: [], dtype: {:s, 64}, value: {:i, 1}}}, args: []}
    cond = %{inputs: 1, instrs: [one, %{op: :add, args: [0, 1]}, %{op: :less, args: [0, 2]}], outputs: [3]}
    body = %{state | instrs: [one, %{op: :add, args: [0, 1]}], outputs: [2]}
    ExBurn.Op.eval(:while, [Tensor.new(0, type: :s64)], cond: cond, body: body, state: 1)
  end

  # Dirty CPU work of a few milliseconds: a 256x256 matmul.
  defp other_work do
    a = ExBurn.BurnBridge.random_uniform({256, 256}, seed: 1)
    ExBurn.BurnBridge.matmul(a, a) |> Tensor.to_binary(limit: 1)
  end

  test "killing the callers of endless loops frees every dirty scheduler at once" do
    loops = :erlang.system_info(:dirty_cpu_schedulers) + 1

    callers =
      for _ <- 1..loops do
        spawn(fn -> endless() end)
      end

    # every dirty CPU scheduler is now busy in a loop that never ends by itself
    Process.sleep(300)
    refs = Enum.map(callers, &Process.monitor/1)
    Enum.each(callers, &Process.exit(&1, :kill))
    for ref <- refs, do: assert_receive({:DOWN, ^ref, :process, _, :killed}, 1_000)

    task = Task.async(&other_work/0)

    assert {:ok, <<_::binary>>} = Task.yield(task, 10_000) || Task.shutdown(task, :brutal_kill),
           "dirty work did not run after the loops' callers were killed"
  end
end
