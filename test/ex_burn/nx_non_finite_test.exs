if Code.ensure_loaded?(Nx) and Code.ensure_loaded?(Axon) do
  defmodule ExBurn.NxNonFiniteTest do
    @moduledoc """
    The layers of native training on NaN and infinities against Axon's definitions (Nx ops)
    evaluated on Nx.BinaryBackend: every activation of `ExBurn.Layers.activations/0`, softmax
    rows, max and average pools. One documented difference: tanh(±inf) is ±1 (IEEE, as XLA
    and Burn compute it), where the BinaryBackend answers NaN for any non-finite input to
    Erlang's math functions. Training-path (autodiff) values and dropout: src/train/net.rs.
    """
    use ExBurn.Test.NxCase, async: true

    @moduletag :axon

    alias ExBurn.{Layers, Model, Tensor, Training}

    @x [:nan, :infinity, :neg_infinity, -1.0, 0.0, 2.0, -30.0, 30.0]

    # {activation, positions where ExBurn deliberately differs from the BinaryBackend}
    @ieee_over_binary_backend %{tanh: %{1 => 1.0, 2 => -1.0}}

    defp ours(layers, rows) do
      model = Model.compile(layers, seed: 1)
      model |> Training.predict(Tensor.new(rows)) |> Tensor.to_list()
    end

    defp reference(fun, rows) do
      [Nx.tensor(rows, type: :f32, backend: Nx.BinaryBackend)]
      |> then(&on_binary(fun, &1))
      |> Nx.to_list()
    end

    defp same?(a, b) when is_float(a) and is_float(b), do: abs(a - b) <= 1.0e-5 * max(1.0, abs(b))
    defp same?(a, b), do: a == b

    defp assert_same(got, want, label) do
      pairs = Enum.zip(List.flatten(got), List.flatten(want))
      assert length(pairs) == length(List.flatten(want))

      assert Enum.all?(pairs, fn {g, w} -> same?(g, w) end),
             "#{label}: got #{inspect(got)}, want #{inspect(want)}"
    end

    test "every activation equals Axon's on NaN, infinities and finite values" do
      for act <- Layers.activations() -- [:softmax, :log_softmax] do
        got = ours(Layers.input("x", shape: {nil, length(@x)}) |> Layers.activation(act), [@x])
        [want] = reference(&apply(Axon.Activations, act, [&1]), [@x])

        want =
          Enum.reduce(Map.get(@ieee_over_binary_backend, act, %{}), want, fn {i, v}, w ->
            List.replace_at(w, i, v)
          end)

        assert_same(got, [want], act)
      end
    end

    test "softmax and log_softmax rows with NaN or infinities equal Axon's" do
      rows = [
        [:nan, 1.0, 2.0],
        [:infinity, 1.0, 2.0],
        [:neg_infinity, 1.0, 2.0],
        [:infinity, :infinity, 1.0],
        [:neg_infinity, :neg_infinity, :neg_infinity],
        [1.0, 2.0, 3.0]
      ]

      for act <- [:softmax, :log_softmax] do
        got = ours(Layers.input("x", shape: {nil, 3}) |> Layers.activation(act), rows)
        assert_same(got, reference(&apply(Axon.Activations, act, [&1]), rows), act)
      end
    end

    test "max pools are NaN wherever the window holds NaN; average pools propagate both" do
      rows = [
        [[1.0], [:nan], [2.0], [:infinity], [:neg_infinity], [3.0]],
        [[:nan], [1.0], [:neg_infinity], [:neg_infinity], [5.0], [:nan]]
      ]

      input = Layers.input("x", shape: {nil, 6, 1})

      for {layer, axon} <- [
            {&Layers.max_pool(&1, kernel_size: 2), &Axon.Layers.max_pool(&1, kernel_size: {2})},
            {&Layers.max_pool(&1, kernel_size: 3, strides: 1),
             &Axon.Layers.max_pool(&1, kernel_size: {3}, strides: [1])},
            {&Layers.avg_pool(&1, kernel_size: 2), &Axon.Layers.avg_pool(&1, kernel_size: {2})}
          ] do
        assert_same(ours(layer.(input), rows), reference(axon, rows), inspect(layer))
      end
    end
  end
end
