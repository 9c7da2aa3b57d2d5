# Compiled only when Nx is loadable (the Nx-free build has no Nx modules to refer to).
if Code.ensure_loaded?(Nx) do
  defmodule ExBurn.NxCompilerTest do
    @moduledoc """
    `ExBurn.Compiler`: lowering (pure Elixir), one NIF call per run, caching, control flow,
    containers, hooks, blocks, and gradients against `Nx.Defn.Evaluator` on `Nx.BinaryBackend`.
    """
    use ExBurn.Test.NxCase, async: false

    import Nx.Defn
    alias Nx.Defn.Composite

    defp burn_jit(fun, args, opts \\ []),
      do: Nx.Defn.jit_apply(fun, args, [compiler: ExBurn.Compiler] ++ opts)

    defp reference(fun, args) do
      args = Enum.map(args, &to_binary_backend/1)

      Nx.with_default_backend(Nx.BinaryBackend, fn ->
        Nx.Defn.jit_apply(fun, args, compiler: Nx.Defn.Evaluator)
      end)
    end

    defp to_binary_backend(%Nx.Tensor{} = t), do: Nx.backend_copy(t, Nx.BinaryBackend)
    defp to_binary_backend(other), do: Composite.traverse(other, &Nx.backend_copy(&1, Nx.BinaryBackend))

    defp assert_all_close(got, want) do
      got = Composite.flatten_list([got])
      want = Composite.flatten_list([want])
      assert length(got) == length(want)

      Enum.zip_with(got, want, fn g, w ->
        assert g.shape == w.shape
        assert g.type == w.type

        assert Nx.to_number(Nx.all_close(Nx.backend_copy(g, Nx.BinaryBackend), w, atol: 1.0e-5, rtol: 1.0e-4)) ==
                 1,
               "got #{inspect(g)}\nwant #{inspect(w)}"
      end)
    end

    # ---- functions under test ----

    defn(chain(x), do: x |> Nx.multiply(2) |> Nx.add(1) |> Nx.exp() |> Nx.log() |> Nx.subtract(0.5))
    defn(reductions(x), do: {Nx.sum(x, axes: [1]), Nx.argmax(x), Nx.mean(x)})
    defn(count_to(x, limit), do: while({x, limit}, Nx.less(x, limit), do: {x + 1, limit}) |> elem(0))

    defn piecewise(x) do
      cond do
        Nx.sum(x) > 10 -> x * 2
        Nx.sum(x) < 0 -> -x
        true -> x + 100
      end
    end

    defn cond_inside_while(x) do
      {i, acc} =
        while {i = 0, acc = x}, i < 4 do
          acc = if rem(i, 2) == 0, do: acc * 2, else: acc - 1
          {i + 1, acc}
        end

      {i, acc}
    end

    defn(containers(%{a: a, b: b}), do: %{sum: a + b, pair: {a * b, Nx.cumulative_sum(a)}})
    defn(with_hook(x), do: hook(x * 2, :doubled) + 1)

    @doc false
    def twice(t, _opts) do
      send(self(), {:called, t.data.__struct__, Nx.to_list(t)})
      Nx.multiply(t, 2)
    end

    @doc false
    def sum_and_negate(t, _opts), do: {Nx.sum(t), Nx.negate(t)}

    @doc false
    def wrong_shape(t, _opts), do: Nx.concatenate([t, t])

    defn runtime_calls(x) do
      y = Nx.runtime_call(x, hook(x + 1, :argument), &twice/2)
      {s, n} = Nx.runtime_call({Nx.sum(x), x}, y * x, &sum_and_negate/2)
      hook(s + n - y, :result)
    end

    defn(runtime_call_wrong_shape(x), do: Nx.runtime_call(x, x, &wrong_shape/2) + 1)

    defn runtime_call_in_loop(x) do
      {_i, acc} =
        while {i = 0, acc = x}, i < 2 do
          {i + 1, Nx.runtime_call(acc, acc, &twice/2)}
        end

      acc
    end

    defn hooks_in_control_flow(x) do
      x = hook(x + 1, :before)

      {_i, acc} =
        while {i = 0, acc = x}, i < 3 do
          acc = hook(acc * 2, :step)
          acc = if i == 1, do: hook(acc + 100, :taken), else: acc
          acc = if i == 7, do: hook(acc - 1, :never), else: acc
          {i + 1, acc}
        end

      hook(acc, :after)
    end

    defn mlp_loss(w1, b1, w2, b2, x, y) do
      h = x |> Nx.dot(w1) |> Nx.add(b1) |> Nx.max(0)
      logits = h |> Nx.dot(w2) |> Nx.add(b2)
      logp = logits - Nx.log(Nx.sum(Nx.exp(logits), axes: [1], keep_axes: true))
      -Nx.mean(Nx.sum(logp * y, axes: [1]))
    end

    defn mlp_grad(w1, b1, w2, b2, x, y) do
      grad({w1, b1, w2, b2}, fn {w1, b1, w2, b2} -> mlp_loss(w1, b1, w2, b2, x, y) end)
    end

    # ---- lowering, without running ----

    test "lowering a chain gives one instruction per op and no constants" do
      lowered = ExBurn.Compiler.lower(&chain/1, [Nx.template({4}, :f32)])
      ops = Enum.map(lowered.term.instrs, &op_name(&1.op))
      assert Enum.reject(ops, &(&1 == :full)) == [:multiply, :add, :exp, :log, :subtract]
      assert Enum.count(ops, &(&1 == :full)) == 3
      assert lowered.term.inputs == 1 and lowered.term.consts == 0
      assert lowered.term.outputs == [lowered.term.inputs + length(ops) - 1]
    end

    test "while lowers to one instruction with condition and body sub-programs" do
      lowered = ExBurn.Compiler.lower(&count_to/2, [Nx.template({}, :s32), Nx.template({}, :s32)])

      assert [%{op: {:while, %{cond: c, body: b, state: 2}}, args: [0, 1]}] = lowered.term.instrs
      assert c.inputs == 2 and length(c.outputs) == 1
      assert b.inputs == 2 and length(b.outputs) == 2
    end

    test "cond branches capture what they read from the enclosing scope; later clauses nest" do
      lowered = ExBurn.Compiler.lower(&piecewise/1, [Nx.template({3}, :f32)])
      assert %{op: {:cond, %{branches: [_, rest] = branches}}, args: args} = List.last(lowered.term.instrs)
      # the first predicate, then x
      assert length(args) == 2
      assert Enum.all?(branches, &(&1.inputs == 1))
      # the second predicate is computed only inside the first clause's else branch
      assert %{op: {:cond, %{branches: [_, _]}}} = List.last(rest.instrs)
      assert Enum.any?(rest.instrs, &(op_name(&1.op) == :sum))
    end

    test "complex dots lower to part dots at the configured f32 dot precision" do
      fun = fn a, b -> Nx.dot(a, b) end
      args = [Nx.template({2, 3}, :c64), Nx.template({3, 2}, :c64)]

      precisions = fn ->
        for %{op: {:dot, attrs}} <- ExBurn.Compiler.lower(fun, args).term.instrs,
            do: attrs[:precision]
      end

      key = {ExBurn, :dot_precision}
      previous = :persistent_term.get(key, nil)

      try do
        :persistent_term.put(key, :default)
        assert precisions.() == List.duplicate(:default, 4)
        :persistent_term.put(key, :highest)
        assert precisions.() == List.duplicate(:highest, 4)
      after
        if previous, do: :persistent_term.put(key, previous), else: :persistent_term.erase(key)
      end
    end

    defn(with_constant(x), do: x * Nx.tensor([1.0, 2.0, 3.0]))

    test "tensors inside the function become program constants" do
      lowered = ExBurn.Compiler.lower(&with_constant/1, [Nx.template({3}, :f32)])
      assert lowered.term.consts == 1
      assert [%Nx.Tensor{shape: {3}}] = lowered.constants
      assert Nx.to_list(burn_jit(&with_constant/1, [Nx.tensor([1.0, 1.0, 2.0])])) == [1.0, 2.0, 6.0]
    end

    test "unsupported expressions fail when compiled, naming the op" do
      fun = fn x -> Nx.reduce(x, 0, fn a, acc -> Nx.add(Nx.sum(a), acc) end) end
      error = assert_raise ExBurn.Error, fn -> burn_jit(fun, [Nx.tensor([1, 2])]) end
      assert error.kind == :unsupported and error.op == :reduce
    end

    # ---- running ----

    test "one NIF call per run, and the compiled program is cached" do
      x = Nx.tensor([1.0, 2.0, 3.0, 4.0])
      burn_jit(&chain/1, [x])
      entries = ExBurn.Defn.Cache.size()
      {result, calls} = native_calls(fn -> burn_jit(&chain/1, [x]) end)
      assert calls == [:program_run]
      assert ExBurn.Defn.Cache.size() == entries
      assert_all_close(result, reference(&chain/1, [x]))
    end

    # Runs `fun` and returns its result with the names of the native calls it made.
    defp native_calls(fun) do
      test = self()

      tracer =
        spawn(fn ->
          collect = fn collect, acc ->
            receive do
              {:trace, _, :call, {ExBurn.Native, :call, [name | _]}} -> collect.(collect, [name | acc])
              :done -> send(test, {:calls, Enum.reverse(acc)})
            end
          end

          collect.(collect, [])
        end)

      :erlang.trace_pattern({ExBurn.Native, :call, 3}, true, [:local])
      :erlang.trace(self(), true, [:call, {:tracer, tracer}])

      try do
        result = fun.()
        :erlang.trace(self(), false, [:call])
        send(tracer, :done)
        assert_receive {:calls, calls}
        {result, calls}
      after
        :erlang.trace_pattern({ExBurn.Native, :call, 3}, false, [:local])
      end
    end

    defn(fold_max(x),
      do: Nx.reduce(x, Nx.Constants.neg_infinity(), [axes: [1]], fn a, acc -> Nx.max(a, acc) end)
    )

    defn(fold_window(x),
      do: Nx.window_reduce(x, 0.0, {2, 2}, [strides: [1, 2]], fn a, acc -> a * 0.5 + acc end)
    )

    test "functions given to reduce and window_reduce become sub-programs" do
      lowered = ExBurn.Compiler.lower(&fold_max/1, [Nx.template({3, 4}, :f32)])
      assert %{op: {:reduce, %{body: %{inputs: 2, outputs: [_]}}}} = List.last(lowered.term.instrs)
      x = Nx.iota({3, 4}, type: :f32) |> Nx.subtract(5) |> Nx.abs()
      assert_all_close(burn_jit(&fold_max/1, [x]), reference(&fold_max/1, [x]))
      assert_all_close(burn_jit(&fold_window/1, [x]), reference(&fold_window/1, [x]))
    end

    test "results agree with the evaluator" do
      x = Nx.iota({3, 4}, type: :f32) |> Nx.subtract(5)

      for {fun, args} <- [
            {&chain/1, [x]},
            {&reductions/1, [x]},
            {&count_to/2, [Nx.tensor(2), Nx.tensor(7)]},
            {&piecewise/1, [Nx.tensor([1.0, 2.0, 3.0])]},
            {&piecewise/1, [Nx.tensor([10.0, 2.0, 3.0])]},
            {&piecewise/1, [Nx.tensor([-10.0, 2.0, 3.0])]},
            {&cond_inside_while/1, [x]},
            {&containers/1, [%{a: Nx.tensor([1, 2, 3]), b: Nx.tensor([4, 5, 6])}]},
            {&Nx.LinAlg.qr/1, [Nx.tensor([[2.0, 1.0], [1.0, 3.0]])]}
          ] do
        assert_all_close(burn_jit(fun, args), reference(fun, args))
      end
    end

    test "results are ExBurn tensors on the compiler's device" do
      out = burn_jit(&chain/1, [Nx.tensor([1.0], backend: Nx.BinaryBackend)])
      assert %ExBurn.Backend{tensor: %ExBurn.Tensor{device: :cpu}} = out.data
      assert ExBurn.Compiler.__to_backend__([]) == {ExBurn.Backend, device: :cpu}
      assert length(ExBurn.Compiler.__partitions_options__(max_concurrency: 3)) == 3
    end

    test "partitions: one option list per device, each max_concurrency times" do
      parts =
        ExBurn.Compiler.__partitions_options__(devices: [:cpu, {:cuda, 1}], max_concurrency: 2, timeout: 5)

      assert Enum.map(parts, & &1[:device]) == [:cpu, :cpu, {:cuda, 1}, {:cuda, 1}]
      assert Enum.all?(parts, &(&1[:timeout] == 5 and not Keyword.has_key?(&1, :devices)))
      assert [[device: :cpu]] = ExBurn.Compiler.__partitions_options__(device: :cpu)

      # every GPU of the family, or the one asked for when the build reaches none
      cuda = ExBurn.Compiler.__partitions_options__(device: {:cuda, 0})
      assert length(cuda) == max(ExBurn.Device.count(:cuda), 1)

      for bad <- [[devices: []], [devices: :cpu], [devices: [:tpu]], [max_concurrency: 0]] do
        assert_raise ExBurn.Error, fn -> ExBurn.Compiler.__partitions_options__(bad) end
      end
    end

    test "hooks run after the program with the hooked value, and can be overridden" do
      test = self()
      burn_jit(&with_hook/1, [Nx.tensor([1, 2])], hooks: %{doubled: &send(test, {:hooked, &1})})
      assert_received {:hooked, value}
      assert Nx.to_list(value) == [2, 4]
    end

    test "hooks inside while and cond run per iteration, in the evaluator's order" do
      names = [:before, :step, :taken, :never, :after]

      calls = fn opts ->
        test = self()
        hooks = Map.new(names, fn name -> {name, &send(test, {:hook, name, Nx.to_list(&1)})} end)
        result = Nx.Defn.jit_apply(&hooks_in_control_flow/1, [Nx.tensor([1, 2])], [hooks: hooks] ++ opts)
        {Nx.to_list(result), collect_hooks([])}
      end

      {result, seen} = calls.(compiler: ExBurn.Compiler)
      assert {result, seen} == calls.(compiler: Nx.Defn.Evaluator)

      assert seen == [
               {:before, [2, 3]},
               {:step, [4, 6]},
               {:step, [8, 12]},
               {:taken, [108, 112]},
               {:step, [216, 224]},
               {:after, [216, 224]}
             ]
    end

    test "runtime calls run between programs, on Nx.BinaryBackend values, as in the evaluator" do
      x = Nx.tensor([1.0, 2.0, 3.0])
      test = self()
      hooks = Map.new([:argument, :result], fn n -> {n, &send(test, {:hook, n, Nx.to_list(&1)})} end)

      run = fn compiler ->
        result = Nx.Defn.jit_apply(&runtime_calls/1, [x], compiler: compiler, hooks: hooks)
        {Nx.to_list(result), collect_hooks([])}
      end

      {result, events} = run.(ExBurn.Compiler)
      assert result == [32.0, 22.0, 8.0]

      assert events == [
               {:argument, [2.0, 3.0, 4.0]},
               {:called, {Nx.BinaryBackend, [2.0, 3.0, 4.0]}},
               {:result, [32.0, 22.0, 8.0]}
             ]

      # the evaluator: same values and order (its callback sees the inputs' backend)
      {eval_result, eval_events} = run.(Nx.Defn.Evaluator)
      assert eval_result == result
      assert Enum.map(eval_events, &drop_backend/1) == Enum.map(events, &drop_backend/1)
      # cached: a second run calls the function and each hook again, once
      assert run.(ExBurn.Compiler) == {result, events}
    end

    defp drop_backend({:called, {_backend, value}}), do: {:called, value}
    defp drop_backend(event), do: event

    test "a runtime call result that does not match its template is an ExBurn.Error" do
      error = assert_raise ExBurn.Error, fn -> burn_jit(&runtime_call_wrong_shape/1, [Nx.tensor([1.0])]) end

      assert error.kind == :shape and error.op == :runtime_call
    end

    test "runtime calls inside while are refused at compile time, naming the op" do
      error = assert_raise ExBurn.Error, fn -> burn_jit(&runtime_call_in_loop/1, [Nx.tensor([1.0])]) end
      assert error.kind == :unsupported and error.op == :runtime_call
      assert error.message =~ "while or cond"
    end

    defp collect_hooks(acc) do
      receive do
        {:hook, name, value} -> collect_hooks([{name, value} | acc])
        {:called, backend, value} -> collect_hooks([{:called, {backend, value}} | acc])
      after
        0 -> Enum.reverse(acc)
      end
    end

    test "ExBurn.Defn.Compiler and ExBurn are aliases" do
      want = Nx.to_list(burn_jit(&chain/1, [Nx.tensor([0.0])]))

      for compiler <- [ExBurn.Defn.Compiler, ExBurn] do
        result = Nx.Defn.jit_apply(&chain/1, [Nx.tensor([0.0])], compiler: compiler)
        assert Nx.to_list(result) == want
        assert %ExBurn.Backend{} = result.data
      end
    end

    test "a model predicts Nx tensors in place and returns one on ExBurn.Backend" do
      model =
        ExBurn.Layers.input("x", shape: {nil, 3})
        |> ExBurn.Layers.dense(2, name: "out")
        |> ExBurn.Model.compile(seed: 3)

      x = Nx.tensor([[1.0, 2.0, 3.0], [0.5, -1.0, 2.0]])
      {:ok, from_binary} = ExBurn.Model.predict(model, x)
      {:ok, in_place} = ExBurn.Model.predict(model, Nx.backend_transfer(x, ExBurn.Backend))
      assert %ExBurn.Backend{} = from_binary.data
      assert Nx.shape(in_place) == {2, 2}
      assert Nx.to_list(in_place) == Nx.to_list(from_binary)
      # the same as the ExBurn.Tensor path
      {:ok, t} =
        ExBurn.Model.predict(model, ExBurn.Backend.burn_tensor(Nx.backend_transfer(x, ExBurn.Backend)))

      assert ExBurn.Tensor.to_list(t) == Nx.to_list(in_place)
    end

    # ---- gradients ----

    defn(grad_square_sum(x), do: grad(x, &Nx.sum(&1 * &1)))
    defn(grad_trig(x), do: grad(x, &Nx.sum(Nx.sin(&1) * Nx.cos(&1) + Nx.tanh(&1))))

    defn(grad_softmax(x),
      do: grad(x, fn x -> Nx.sum(Nx.exp(x) / Nx.sum(Nx.exp(x)) * Nx.iota(Nx.shape(x))) end)
    )

    defn(grad_dot(x), do: grad(x, &Nx.sum(Nx.dot(&1, Nx.transpose(&1)))))
    defn(grad_max_pool(x), do: grad(x, &Nx.sum(Nx.window_max(&1, {2, 2}, strides: [2, 2]))))

    defn(grad_slice_pad(x),
      do: grad(x, &Nx.sum(Nx.pad(Nx.slice(&1, [0, 1], [2, 2]), 0.0, [{1, 0, 0}, {0, 1, 1}]) ** 2))
    )

    defn(grad_while(x),
      do: grad(x, fn x -> elem(while({x, i = 0}, i < 3, do: {x * x, i + 1}), 0) |> Nx.sum() end)
    )

    defn(grad_cond(x), do: grad(x, fn x -> if Nx.sum(x) > 0, do: Nx.sum(x ** 3), else: Nx.sum(x) end))

    test "grad through the compiler equals the evaluator" do
      x = Nx.tensor([[0.5, -1.0, 2.0, 0.25], [1.5, 0.75, -0.5, 3.0]])

      for fun <- [
            &grad_square_sum/1,
            &grad_trig/1,
            &grad_softmax/1,
            &grad_dot/1,
            &grad_max_pool/1,
            &grad_slice_pad/1,
            &grad_while/1,
            &grad_cond/1
          ] do
        assert_all_close(burn_jit(fun, [x]), reference(fun, [x]))
      end
    end

    test "grad of an MLP loss equals the evaluator" do
      key = Nx.Random.key(42)
      {w1, key} = Nx.Random.normal(key, shape: {4, 8})
      {w2, key} = Nx.Random.normal(key, shape: {8, 3})
      {x, _key} = Nx.Random.uniform(key, shape: {5, 4})
      b1 = Nx.broadcast(0.1, {8})
      b2 = Nx.broadcast(-0.1, {3})
      y = Nx.tensor([0, 1, 2, 1, 0]) |> Nx.new_axis(1) |> Nx.equal(Nx.iota({1, 3})) |> Nx.as_type(:f32)
      args = [w1, b1, w2, b2, x, y]
      assert_all_close(burn_jit(&mlp_grad/6, args), reference(&mlp_grad/6, args))
      assert_all_close(burn_jit(&mlp_loss/6, args), reference(&mlp_loss/6, args))
    end

    defp op_name({name, _attrs}), do: name
    defp op_name(name) when is_atom(name), do: name

    # Nx.Defn.Expr stores put_slice's integer starts as constant expressions; read back from
    # the device on every run they made each put_slice wait for the GPU's queue.
    test "constant slice and put_slice starts stay static in the program; tensor starts stay dynamic" do
      fun = fn x, u, i ->
        {Nx.put_slice(x, [1, 2], u), Nx.put_slice(x, [i, 0], u), Nx.slice(x, [0, i], [2, 2])}
      end

      args = [Nx.iota({4, 5}, type: :f32), Nx.tensor([[10.0, 20.0], [30.0, 40.0]]), Nx.tensor(3)]
      expr = apply(Nx.Defn.debug_expr(fun), Enum.map(args, &Nx.to_template/1))
      %{term: term} = ExBurn.Defn.Builder.build(expr, 3)

      starts =
        for %{op: {op, attrs}} <- term.instrs,
            op in [:put_slice, :slice],
            do: {op, attrs[:starts], attrs[:dynamic] || []}

      assert {:put_slice, [1, 2], []} in starts
      assert {:put_slice, [0, 0], [0]} in starts
      assert {:slice, [0, 0], [1]} in starts

      for {got, want} <- Enum.zip(Tuple.to_list(burn_jit(fun, args)), Tuple.to_list(reference(fun, args))),
          do: assert(Nx.to_flat_list(got) == Nx.to_flat_list(want))
    end
  end
end
