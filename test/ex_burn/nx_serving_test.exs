# Compiled only when Nx is loadable (the Nx-free build has no Nx modules to refer to).
if Code.ensure_loaded?(Nx) do
  defmodule ExBurn.NxServingTest do
    @moduledoc "`ExBurn.Serving`: inline, supervised, partitioned, a model, and two BEAM nodes."
    use ExBurn.Test.NxCase, async: false

    import Nx.Defn

    defn(scale(x), do: x * 2 + 1)
    defn(affine(params, x), do: Nx.dot(x, params.w) + params.b)

    defp params, do: %{w: Nx.tensor([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]]), b: Nx.tensor([0.5, -0.5])}

    test "runs a defn function inline, on ExBurn tensors" do
      serving = ExBurn.Serving.new(&scale/1)
      out = ExBurn.Serving.run(serving, Nx.tensor([[1.0, 2.0], [3.0, 4.0]]))
      assert %ExBurn.Backend{} = out.data
      assert Nx.to_list(out) == [[3.0, 5.0], [7.0, 9.0]]
    end

    test "output: :host answers with Nx.BinaryBackend tensors of the same values" do
      input = Nx.tensor([[1.0, 2.0], [3.0, 4.0]])
      out = ExBurn.Serving.run(ExBurn.Serving.new(&scale/1, output: :host), input)
      assert %Nx.BinaryBackend{} = out.data
      assert Nx.to_list(out) == Nx.to_list(ExBurn.Serving.run(ExBurn.Serving.new(&scale/1), input))

      serving = ExBurn.Serving.build({&affine/2, params()}, batch_size: 4, output: :host)
      start_supervised!({Nx.Serving, serving: serving, name: ExBurn.HostServing})
      out = ExBurn.Serving.run(ExBurn.HostServing, Nx.tensor([[1.0, 1.0, 1.0]]))
      assert %Nx.BinaryBackend{} = out.data
      assert Nx.to_list(out) == [[2.5, 2.5]]

      error = assert_raise ExBurn.Error, fn -> ExBurn.Serving.new(&scale/1, output: :gpu) end
      assert error.kind == :argument and error.message =~ ":host"
    end

    test "a function with parameters gets them as arguments" do
      serving = ExBurn.Serving.new({&affine/2, params()})
      out = ExBurn.Serving.run(serving, Nx.tensor([[1.0, 1.0, 1.0]]))
      assert Nx.to_list(out) == [[2.5, 2.5]]
    end

    test "build sets batch size and process options" do
      serving = ExBurn.Serving.build(&scale/1, batch_size: 4, batch_timeout: 7, partitions: true)
      assert serving.batch_size == 4
      assert serving.process_options[:batch_timeout] == 7
      assert serving.process_options[:partitions] == true
      assert ExBurn.Serving.with_timeout(serving, 3).process_options[:batch_timeout] == 3
    end

    test "supervised: concurrent requests are batched and answered" do
      serving = ExBurn.Serving.build({&affine/2, params()}, batch_size: 8, batch_timeout: 20)
      start_supervised!({Nx.Serving, serving: serving, name: ExBurn.TestServing})

      results =
        1..12
        |> Task.async_stream(fn i ->
          ExBurn.Serving.run(ExBurn.TestServing, Nx.tensor([[i * 1.0, 0.0, 1.0]]))
        end)
        |> Enum.map(fn {:ok, out} -> Nx.to_list(out) end)

      assert results == for(i <- 1..12, do: [[i + 1.5, 0.5]])
      status = ExBurn.Serving.status(ExBurn.TestServing)
      assert status.running and status.local != nil
      assert status.nodes == %{node() => 1}
    end

    test "partitions: one serving process per max_concurrency" do
      serving =
        ExBurn.Serving.build(&scale/1, batch_size: 2, partitions: true, defn_options: [max_concurrency: 2])

      start_supervised!({Nx.Serving, serving: serving, name: ExBurn.TestPartitions})
      assert ExBurn.Serving.status(ExBurn.TestPartitions).nodes == %{node() => 2}

      assert Nx.to_list(ExBurn.Serving.run(ExBurn.TestPartitions, Nx.tensor([[0.0], [1.0], [2.0]]))) == [
               [1.0],
               [3.0],
               [5.0]
             ]
    end

    test "partitions over a list of devices: one serving process each" do
      serving =
        ExBurn.Serving.build(&scale/1,
          batch_size: 2,
          partitions: true,
          defn_options: [devices: [:cpu, :cpu, :cpu]]
        )

      start_supervised!({Nx.Serving, serving: serving, name: ExBurn.TestDevicePartitions})
      assert ExBurn.Serving.status(ExBurn.TestDevicePartitions).nodes == %{node() => 3}

      results =
        1..12
        |> Task.async_stream(
          fn i -> ExBurn.Serving.run(ExBurn.TestDevicePartitions, Nx.tensor([[i * 1.0]])) end,
          max_concurrency: 12
        )
        |> Enum.map(fn {:ok, out} -> Nx.to_list(out) end)

      assert results == for(i <- 1..12, do: [[2.0 * i + 1.0]])
    end

    test "each batch is a telemetry span naming its device" do
      test = self()
      id = {__MODULE__, make_ref()}

      :telemetry.attach(
        id,
        [:ex_burn, :serving, :batch, :stop],
        fn _, m, meta, _ -> send(test, {:batch, m, meta}) end,
        nil
      )

      try do
        serving = ExBurn.Serving.new(&scale/1)
        assert Nx.to_list(ExBurn.Serving.run(serving, Nx.tensor([[1.0], [2.0]]))) == [[3.0], [5.0]]
        assert_receive {:batch, %{duration: d}, %{device: :cpu, size: 2}} when is_integer(d)
      after
        :telemetry.detach(id)
      end
    end

    test "a compiled ExBurn.Model serves its predictions" do
      layers = ExBurn.Layers.input("x", shape: {nil, 3}) |> ExBurn.Layers.dense(2, name: "out")
      model = ExBurn.Model.compile(layers, seed: 1)
      x = Nx.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]])
      {:ok, want} = ExBurn.Model.predict(model, ExBurn.Backend.burn_tensor(x))
      out = ExBurn.Serving.run(ExBurn.Serving.new(model), x)
      assert Nx.to_list(out) == ExBurn.Tensor.to_list(want)
    end

    test "status of a serving that is not running" do
      assert %{running: false, local: nil, nodes: nodes} = ExBurn.Serving.status(ExBurn.NotStarted)
      assert nodes == %{}
    end

    @remote_serving """
    {:ok, _} = Application.ensure_all_started(:nx)
    serving = ExBurn.Serving.build(&Nx.negate/1, batch_size: 4, batch_timeout: 5)
    spawn(fn ->
      {:ok, _} = Nx.Serving.start_link(serving: serving, name: ExBurn.RemoteServing)
      Process.sleep(:infinity)
    end)
    """

    @tag :distributed
    test "to_host copies every tensor in any container and leaves the rest as it is" do
      t = Nx.tensor([1.0, 2.0], backend: ExBurn.Backend)
      host = Nx.backend_copy(t, Nx.BinaryBackend)
      plain = {:a, [1, 2.0], %{k: "v"}, %ExBurn.Error{kind: :argument}}

      term = [plain, {t, :x, [t | :tail]}, %{a: t, b: [1, {2, t}]}, [1 | t], fn -> :ok end]
      [p, {a, :x, [b | :tail]}, %{a: c, b: [1, {2, d}]}, [1 | e], f] = ExBurn.Serving.to_host(term)

      for copied <- [a, b, c, d, e] do
        assert %Nx.Tensor{data: %Nx.BinaryBackend{}} = copied
        assert Nx.to_list(copied) == [1.0, 2.0]
      end

      assert p === plain and is_function(f, 0)
      # tensor-free terms (and host tensors) come back as the same term, not a copy
      big = List.duplicate(%{shape: {2}, list: [1, 2]}, 200_000)
      assert :erts_debug.same(ExBurn.Serving.to_host(big), big)
      pair = {host, big}
      assert :erts_debug.same(ExBurn.Serving.to_host(pair), pair)
      {copied, rest} = ExBurn.Serving.to_host({t, big})
      assert Nx.to_list(copied) == [1.0, 2.0] and :erts_debug.same(rest, big)
    end

    test "a serving on another BEAM node answers {:distributed, name} requests" do
      case start_peer() do
        {:ok, peer, node} ->
          try do
            # Test modules live only in this node's memory: the serving is built over there.
            :erpc.call(node, Code, :eval_string, [@remote_serving])
            assert_eventually(fn -> ExBurn.Serving.status(ExBurn.RemoteServing).nodes == %{node => 1} end)
            out = ExBurn.Serving.run({:distributed, ExBurn.RemoteServing}, Nx.tensor([[1.0], [2.0]]))
            assert %Nx.BinaryBackend{} = out.data
            assert Nx.to_list(out) == [[-1.0], [-2.0]]
          after
            :peer.stop(peer)
          end

        {:skip, reason} ->
          IO.puts("\n  [distributed] skipped: #{reason}")
      end
    end

    # A plain Nx.Serving, as Bumblebee builds them, on ExBurn: made cross-node safe in one call.
    @plain_serving """
    {:ok, _} = Application.ensure_all_started(:nx)
    serving =
      Nx.Serving.new(fn opts -> Nx.Defn.jit(&%{y: Nx.multiply(&1, 3), n: Nx.sum(&1, axes: [1])}, opts) end,
        compiler: ExBurn.Compiler)
      |> Nx.Serving.batch_size(4)
    serving = ExBurn.Serving.distributed(serving)
    spawn(fn ->
      {:ok, _} = Nx.Serving.start_link(serving: serving, name: ExBurn.PlainServing, batch_timeout: 5)
      Process.sleep(:infinity)
    end)
    """

    @tag :distributed
    test "distributed/1: a plain Nx.Serving on one peer answers a client on another peer and here" do
      with {:ok, server, server_node} <- start_peer(),
           {:ok, client, client_node} <- start_peer() do
        try do
          :erpc.call(server_node, Code, :eval_string, [@plain_serving])
          assert_eventually(fn -> ExBurn.Serving.status(ExBurn.PlainServing).nodes == %{server_node => 1} end)

          # from this node, through Nx.Serving directly (the client-side copy as documented)
          batch = Nx.Batch.stack([ExBurn.Backend.nx_tensor(ExBurn.Tensor.new([1.0, 2.0]))])
          out = Nx.Serving.batched_run({:distributed, ExBurn.PlainServing}, batch, &ExBurn.Serving.to_host/1)
          assert %Nx.BinaryBackend{} = out.y.data
          assert Nx.to_list(out.y) == [[3.0, 6.0]] and Nx.to_list(out.n) == [3.0]

          # from a second peer, which also sends an ExBurn tensor
          {:ok, _} = :erpc.call(client_node, Application, :ensure_all_started, [:nx])
          true = :erpc.call(client_node, Node, :connect, [server_node])

          assert_eventually(fn ->
            :erpc.call(client_node, :pg, :get_members, [Nx.Serving.PG, ExBurn.PlainServing]) != []
          end)

          remote = """
          x = Nx.tensor([[4.0, 5.0]], backend: ExBurn.Backend)
          out = ExBurn.Serving.run({:distributed, ExBurn.PlainServing}, x)
          {out.y.data.__struct__, Nx.to_list(out.y), Nx.to_list(out.n)}
          """

          {result, _binding} = :erpc.call(client_node, Code, :eval_string, [remote])
          assert result == {Nx.BinaryBackend, [[12.0, 15.0]], [9.0]}
        after
          :peer.stop(client)
          :peer.stop(server)
        end
      else
        {:skip, reason} -> IO.puts("\n  [distributed] skipped: #{reason}")
      end
    end

    # A peer node with this node's code paths (needs `epmd`; the test is skipped without it).
    defp start_peer do
      with :ok <- ensure_distributed() do
        args = Enum.flat_map(:code.get_path(), &[~c"-pa", &1])

        {:ok, peer, node} =
          :peer.start_link(%{name: :"exburn_peer_#{System.unique_integer([:positive])}", args: args})

        :ok = :erpc.call(node, :code, :add_pathsa, [:code.get_path()])
        {:ok, peer, node}
      end
    end

    defp ensure_distributed do
      if Node.alive?() do
        :ok
      else
        System.cmd("epmd", ["-daemon"], stderr_to_stdout: true)

        case Node.start(:"exburn_test_#{System.unique_integer([:positive])}", :shortnames) do
          {:ok, _} -> :ok
          {:error, reason} -> {:skip, "cannot start distribution: #{inspect(reason)}"}
        end
      end
    rescue
      e in ErlangError -> {:skip, Exception.message(e)}
    end

    defp assert_eventually(fun, tries \\ 50) do
      cond do
        fun.() -> :ok
        tries == 0 -> flunk("condition not met")
        true -> Process.sleep(20) && assert_eventually(fun, tries - 1)
      end
    end
  end
end
