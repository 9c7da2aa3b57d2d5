# Compiled only when Nx is loadable (the Nx-free build has no Nx modules to refer to).
if Code.ensure_loaded?(Nx) do
  defmodule ExBurn.NxCompilerPathsTest do
    @moduledoc """
    Paths users take through `ExBurn.Compiler` that broke from outside: deep hooked
    expressions (generation loops), `cond` clauses that are only valid when earlier ones are
    false, and functions given to `Nx.reduce/4` by `Nx.Defn.Evaluator`. Each compared with the
    Evaluator on `Nx.BinaryBackend`.
    """
    use ExBurn.Test.NxCase, async: false

    import Nx.Defn
    import ExBurn.Test.NxReference

    defp burn_jit(fun, args, opts \\ []),
      do: Nx.Defn.jit_apply(fun, args, [compiler: ExBurn.Compiler] ++ opts)

    # Runs `fun` in a task: a regression to exponential cost fails here instead of hanging CI.
    defp within(seconds, fun) do
      task = Task.async(fun)

      case Task.yield(task, seconds * 1000) || Task.shutdown(task, :brutal_kill) do
        {:ok, value} -> value
        nil -> flunk("did not finish within #{seconds} s")
      end
    end

    # The largest cached entry, in words: what every call copies out of the program cache.
    defp largest_cache_entry do
      ExBurn.Defn.Cache
      |> :ets.tab2list()
      |> Enum.map(&:erts_debug.flat_size/1)
      |> Enum.max()
    end

    defp hooked_chain(depth) do
      fn x ->
        x
        |> then(&Enum.reduce(1..depth, &1, fn _, a -> Nx.divide(Nx.add(a, a), 2) end))
        |> Nx.Defn.Kernel.hook(:chain)
      end
    end

    describe "deep expression DAGs (each node shared by the next: 2^depth paths)" do
      setup do
        ExBurn.Defn.Cache.clear()
        :ok
      end

      deftransformp(deep(x), do: Enum.reduce(1..200, x, fn _, a -> Nx.subtract(Nx.add(a, a), a) end))

      defn(deep_hooked(x), do: hook(deep(x), :deep))

      defn deep_loop(x) do
        {_, y} = while({i = 0, y = x}, i < 3, do: {i + 1, hook(deep(y), :step)})
        y
      end

      # One test, in this order: if a program kept expressions, the first assertion fails at
      # once instead of the runs below hanging in an exponential copy (which no timeout stops).
      test "hooked 22- and 200-deep DAGs (also as a while body) compile and run in linear time" do
        x = Nx.tensor([1.5, -2.0, 3.0])

        for {fun, args} <- [{hooked_chain(22), [x]}, {&deep_hooked/1, [x]}, {&deep_loop/1, [x]}] do
          %{hooks: hooks} = ExBurn.Compiler.lower(fun, args)
          assert map_size(hooks) == 1

          # (a failure must not print the value: formatting an expression DAG is exponential too)
          templates? = Enum.all?(hooks, &match?({_, {_, %Nx.Tensor{data: %Nx.TemplateBackend{}}}}, &1))
          assert templates?, "the program keeps hooked expressions instead of templates"
        end

        parent = self()

        got =
          within(20, fn ->
            burn_jit(hooked_chain(22), [x], hooks: %{chain: &send(parent, {:hooked, &1})})
          end)

        assert_close(got, x)
        assert_receive {:hooked, value}
        assert_close(value, x)

        assert_close(
          within(20, fn -> burn_jit(&deep_hooked/1, [x], hooks: %{deep: &send(parent, &1)}) end),
          x
        )

        assert_close(within(20, fn -> burn_jit(&deep_loop/1, [x]) end), x)
        # what every call copies out of the program cache stays small
        assert largest_cache_entry() < 50_000
      end
    end

    describe "cond clauses are decided in order" do
      defn guarded_take(t, i) do
        cond do
          i >= Nx.size(t) -> 0
          Nx.take(t, i) > 0 -> 1
          true -> 2
        end
      end

      defn three_way(x) do
        cond do
          Nx.sum(x) > 10 -> x * 2
          Nx.sum(x) < 0 -> -x
          x[0] == 1 -> x + 1
          true -> x + 100
        end
      end

      test "a later predicate valid only when earlier ones are false is never computed otherwise" do
        t = Nx.tensor([3, -1])

        for i <- [0, 1, 2, 7] do
          assert Nx.to_number(burn_jit(&guarded_take/2, [t, i])) ==
                   Nx.to_number(on_binary(&guarded_take/2, [t, Nx.tensor(i)]))
        end
      end

      test "every clause and the last branch give the Evaluator's value" do
        for v <- [[5.0, 6.0], [-1.0, -2.0], [1.0, 2.0], [2.0, 3.0]] do
          x = Nx.tensor(v)
          assert_close(burn_jit(&three_way/1, [x]), on_binary(&three_way/1, [x]))
        end
      end

      defn hooked_branches(x) do
        cond do
          Nx.sum(x) > 0 -> hook(x * 2, :taken)
          true -> hook(x * 3, :not_taken)
        end
      end

      test "a hook in a clause not taken is not called" do
        parent = self()
        on = %{taken: &send(parent, {:taken, &1}), not_taken: &send(parent, {:not_taken, &1})}
        burn_jit(&hooked_branches/1, [Nx.tensor([1.0])], hooks: on)
        assert_receive {:taken, _}
        refute_received {:not_taken, _}
      end
    end

    describe "hooks run while the program runs" do
      defn slow_steps(m) do
        {_, m} =
          while {i = 0, m}, i < 8 do
            m = Nx.dot(m, m) / 512
            {i + 1, hook(m, :step)}
          end

        m
      end

      test "each loop iteration's hook is called when the engine reaches it, not at the end" do
        parent = self()
        m = Nx.eye(512, type: :f32)
        burn_jit(&slow_steps/1, [m])
        t0 = System.monotonic_time(:microsecond)
        on = %{step: fn _ -> send(parent, {:step, System.monotonic_time(:microsecond)}) end}
        burn_jit(&slow_steps/1, [m], hooks: on)
        done = System.monotonic_time(:microsecond)

        times =
          for _ <- 1..8 do
            assert_receive {:step, t}
            t
          end

        assert times == Enum.sort(times)
        # the first iteration's hook comes long before the eighth iteration ends
        assert hd(times) - t0 < (done - t0) * 0.6,
               "hooks at #{inspect(Enum.map(times, &(&1 - t0)))} us of #{done - t0}"
      end

      test "a hook that raises makes the call raise, in the caller" do
        error =
          assert_raise RuntimeError, fn ->
            burn_jit(&slow_steps/1, [Nx.eye(4, type: :f32)], hooks: %{step: fn _ -> raise "from the hook" end})
          end

        assert error.message == "from the hook"
      end

      defn(hooked_endless(x), do: while(x, x < x + 1, do: hook(x + 1, :tick)))

      test "hooks run in the caller's process, as under the Evaluator; one that raises stops the program" do
        key = {__MODULE__, :seen_by}
        Process.put(key, :the_caller)
        on = %{step: fn _ -> send(self(), {:in, Process.get(key)}) end}
        burn_jit(&slow_steps/1, [Nx.eye(4, type: :f32)], hooks: on)
        for _ <- 1..8, do: assert_received({:in, :the_caller})

        # an endless loop whose hook raises at its third call: the call raises, the loop stops
        count = :counters.new(1, [])

        raising = fn _ ->
          :counters.add(count, 1, 1)
          if :counters.get(count, 1) == 3, do: raise("enough")
        end

        assert_raise RuntimeError, "enough", fn ->
          burn_jit(&hooked_endless/1, [Nx.tensor(0)], hooks: %{tick: raising})
        end

        # every dirty scheduler is free again: the stopped loops do not hold one
        for _ <- 1..(:erlang.system_info(:dirty_cpu_schedulers) + 1) do
          assert_raise RuntimeError, fn ->
            burn_jit(&hooked_endless/1, [Nx.tensor(0)], hooks: %{tick: fn _ -> raise "x" end})
          end
        end

        assert burn_jit(&Nx.add/2, [Nx.tensor(1), Nx.tensor(2)]) |> Nx.to_number() == 3
      end
    end

    describe "stopping compiled calls" do
      defn(endless(x), do: while(x, x < x + 1, do: x + 1))

      test "a timeout stops a call with kind :cancelled; the caller's death stops it too" do
        error = assert_raise ExBurn.Error, fn -> burn_jit(&endless/1, [Nx.tensor(0)], timeout: 200) end
        assert error.kind == :cancelled and error.message =~ "timed out after 200 ms"

        error = assert_raise ExBurn.Error, fn -> burn_jit(&endless/1, [Nx.tensor(0)], timeout: -1) end
        assert error.kind == :argument

        callers = for _ <- 1..4, do: spawn(fn -> burn_jit(&endless/1, [Nx.tensor(0)]) end)
        Process.sleep(200)
        Enum.each(callers, &Process.exit(&1, :kill))
        # every dirty scheduler is free again: a compiled call runs at once
        task = Task.async(fn -> burn_jit(&Nx.add(&1, 1), [Nx.tensor(1)]) end)
        assert {:ok, two} = Task.yield(task, 10_000) || Task.shutdown(task, :brutal_kill)
        assert Nx.to_number(two) == 2
      end
    end

    describe "functions given to reduce and window_reduce by Nx.Defn.Evaluator" do
      defn(custom_sum(t), do: Nx.reduce(t, 0, fn x, acc -> x + acc end))
      defn(custom_max(t), do: Nx.window_reduce(t, 0, {1, 2}, fn x, acc -> max(x, acc) end))
      defn(custom_axes(t), do: Nx.reduce(t, 1, [axes: [1]], fn x, acc -> x * acc end))

      test "run eagerly on ExBurn.Backend and equal the BinaryBackend's values" do
        t = Nx.tensor([[1, 2, 3], [4, 5, 6]])

        for fun <- [&custom_sum/1, &custom_max/1, &custom_axes/1] do
          got = Nx.Defn.jit_apply(fun, [t], compiler: Nx.Defn.Evaluator)
          assert %ExBurn.Backend{} = got.data
          assert Nx.to_flat_list(got) == Nx.to_flat_list(on_binary(fun, [t]))
        end
      end

      test "compiled, element-wise functions run in the program" do
        t = Nx.tensor([1.0, 2.0, 3.0, 4.0])
        assert_close(burn_jit(&custom_sum/1, [t]), Nx.tensor(10.0))
        assert_close(burn_jit(&custom_max/1, [Nx.reshape(t, {2, 2})]), Nx.tensor([[2.0], [4.0]]))
      end
    end
  end
end
