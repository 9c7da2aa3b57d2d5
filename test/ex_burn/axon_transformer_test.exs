if Code.ensure_loaded?(Axon) do
  defmodule ExBurn.AxonTransformerTest do
    @moduledoc """
    Axon models of the kind Bumblebee builds, run with ExBurn as backend and compiler against
    Nx.BinaryBackend + Nx.Defn.Evaluator: a small transformer encoder (embeddings, multi-head
    attention, layer norm, feed-forward) and a channels-last CNN. Same initial parameters,
    same inputs: outputs agree to 1e-4 and the first 20 Axon.Loop training steps give the same
    losses to 1e-3.
    """
    use ExUnit.Case, async: false

    @moduletag :axon

    @heads 2
    @dim 16

    setup do
      Application.ensure_all_started(:nx)
      Application.ensure_all_started(:axon)
      Nx.default_backend(Nx.BinaryBackend)
      :ok
    end

    def attention(q, k, v, _opts) do
      split = fn t ->
        {b, s, d} = Nx.shape(t)
        t |> Nx.reshape({b, s, @heads, div(d, @heads)}) |> Nx.transpose(axes: [0, 2, 1, 3])
      end

      {q, k, v} = {split.(q), split.(k), split.(v)}
      scale = :math.sqrt(div(@dim, @heads))
      scores = Nx.dot(q, [3], [0, 1], k, [3], [0, 1]) |> Nx.divide(scale)
      weights = Axon.Activations.softmax(scores, axis: -1)
      out = Nx.dot(weights, [3], [0, 1], v, [2], [0, 1])
      {b, h, s, d} = Nx.shape(out)
      out |> Nx.transpose(axes: [0, 2, 1, 3]) |> Nx.reshape({b, s, h * d})
    end

    defp encoder do
      ids = Axon.input("ids", shape: {nil, 8})
      x = Axon.embedding(ids, 32, @dim, name: "tokens")
      q = Axon.dense(x, @dim, name: "q")
      k = Axon.dense(x, @dim, name: "k")
      v = Axon.dense(x, @dim, name: "v")
      att = Axon.layer(&__MODULE__.attention/4, [q, k, v], name: "attention") |> Axon.dense(@dim, name: "o")
      x = x |> Axon.add(att) |> Axon.layer_norm(name: "ln1")
      ff = x |> Axon.dense(32, activation: :gelu, name: "ff1") |> Axon.dense(@dim, name: "ff2")
      x = x |> Axon.add(ff) |> Axon.layer_norm(name: "ln2")

      x
      |> Axon.nx(&Nx.mean(&1, axes: [1]))
      |> Axon.dense(4, activation: :softmax, name: "head")
    end

    defp cnn do
      Axon.input("image", shape: {nil, 8, 8, 3})
      |> Axon.conv(4, kernel_size: 3, padding: :same, activation: :relu, name: "c1")
      |> Axon.max_pool(kernel_size: 2)
      |> Axon.conv(6, kernel_size: {2, 2}, strides: 2, name: "c2")
      |> Axon.flatten()
      |> Axon.dense(4, activation: :softmax, name: "head")
    end

    defp ids(n), do: Nx.iota({n, 8}) |> Nx.multiply(7) |> Nx.remainder(32)

    defp images(n),
      do: Nx.iota({n, 8, 8, 3}, type: :f32) |> Nx.multiply(0.37) |> Nx.sin()

    defp labels(n),
      do:
        Nx.iota({n})
        |> Nx.remainder(4)
        |> Nx.equal(Nx.iota({1, 4}) |> Nx.transpose())
        |> Nx.transpose()
        |> Nx.as_type(:f32)

    defp exburn(t), do: Nx.backend_transfer(t, ExBurn.Backend)
    defp binary(t), do: Nx.backend_transfer(t, Nx.BinaryBackend)

    defp init(model, input) do
      {init_fn, _} = Axon.build(model)
      init_fn.(Nx.to_template(input), Axon.ModelState.empty())
    end

    defp max_diff(a, b),
      do: Nx.subtract(binary(a), binary(b)) |> Nx.abs() |> Nx.reduce_max() |> Nx.to_number()

    for {name, build, input} <- [
          {"transformer encoder", :encoder, :ids},
          {"channels-last CNN", :cnn, :images}
        ] do
      test "#{name}: outputs under ExBurn equal the binary backend's to 1e-4" do
        model = unquote(build)()
        x = unquote(input)(6)
        state = init(model, x)

        {_, reference} = Axon.build(model, compiler: Nx.Defn.Evaluator)
        want = reference.(state, x)

        {_, predict} = Axon.build(model, compiler: ExBurn.Compiler)
        got = predict.(Nx.Defn.Composite.traverse(state, &exburn/1), exburn(x))

        assert Nx.shape(got) == Nx.shape(want)
        diff = max_diff(got, want)
        assert diff < 1.0e-4, "largest difference #{diff}"
      end

      test "#{name}: the first 20 Axon.Loop steps give the binary backend's losses to 1e-3" do
        model = unquote(build)()
        x = unquote(input)(16)
        y = labels(16)
        state = init(model, x)
        want = losses(model, state, x, y, Nx.Defn.Evaluator, &binary/1)
        got = losses(model, state, x, y, ExBurn.Compiler, &exburn/1)
        assert length(got) == 20

        for {g, w, step} <- Enum.zip([got, want, 1..20]) do
          assert abs(g - w) < 1.0e-3, "step #{step}: #{g} vs #{w}"
        end
      end
    end

    # Losses of 20 training steps (SGD) on batches of 4 cycling over the data.
    defp losses(model, state, x, y, compiler, place) do
      batches =
        Stream.cycle(0..3)
        |> Stream.map(fn i ->
          {place.(Nx.slice_along_axis(x, i * 4, 4)), place.(Nx.slice_along_axis(y, i * 4, 4))}
        end)

      parent = self()

      model
      |> Axon.Loop.trainer(:categorical_cross_entropy, Polaris.Optimizers.sgd(learning_rate: 0.05), log: 0)
      |> Axon.Loop.handle_event(:iteration_completed, fn loop_state ->
        send(parent, {:loss, Nx.to_number(loop_state.step_state.loss)})
        {:continue, loop_state}
      end)
      |> Axon.Loop.run(batches, Nx.Defn.Composite.traverse(state, place),
        epochs: 1,
        iterations: 20,
        compiler: compiler
      )

      for _ <- 1..20 do
        receive do
          {:loss, l} -> l
        after
          0 -> flunk("missing loss")
        end
      end
    end
  end
end
