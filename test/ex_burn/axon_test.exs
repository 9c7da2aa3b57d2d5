# Compiled only when Axon is loadable (e.g. ERL_LIBS with Axon and Nx built for the running
# Elixir), like the Nx tests: without it, the calls below would be compile warnings.
if Code.ensure_loaded?(Axon) do
  defmodule ExBurn.AxonTest do
    use ExUnit.Case, async: true
    @moduletag :axon

    alias ExBurn.{Model, Training}

    test "an Axon MLP compiles to the same spec as the ExBurn.Layers one and trains" do
      axon =
        Axon.input("x", shape: {nil, 8})
        |> Axon.dense(16, activation: :relu, name: "hidden")
        |> Axon.dropout(rate: 0.2)
        |> Axon.dense(3, activation: :softmax, name: "out")

      layers =
        ExBurn.Layers.input("x", shape: {nil, 8})
        |> ExBurn.Layers.dense(16, activation: :relu, name: "hidden")
        |> ExBurn.Layers.dropout(rate: 0.2)
        |> ExBurn.Layers.dense(3, activation: :softmax, name: "out")

      m = Model.compile(axon, seed: 1)
      assert Enum.map(m.spec.layers, & &1.op) == Enum.map(ExBurn.Layers.to_spec(layers).layers, & &1.op)

      assert Map.keys(Model.parameters(m)) |> Enum.sort() == [
               "hidden.bias",
               "hidden.kernel",
               "out.bias",
               "out.kernel"
             ]

      x = ExBurn.BurnBridge.random_normal({32, 8}, seed: 2)
      y = ExBurn.BurnBridge.random_uniform({32}, min: 0, max: 3, type: :s64, seed: 3)
      {loss, _} = Training.train_step(m, {x, y})
      assert is_float(loss)
    end

    test "an Axon CNN converts convs, pools and flatten" do
      axon =
        Axon.input("img", shape: {nil, 12, 12, 1})
        |> Axon.conv(4, kernel_size: {3, 3}, padding: :same, activation: :relu)
        |> Axon.max_pool(kernel_size: 2)
        |> Axon.flatten()
        |> Axon.dense(2)

      info = Model.info(Model.compile(axon))

      assert Enum.map(info.layers, & &1.output_shape) ==
               [{nil, 12, 12, 1}, {nil, 12, 12, 4}, {nil, 12, 12, 4}, {nil, 6, 6, 4}, {nil, 144}, {nil, 2}]

      assert Enum.map(info.layers, & &1.name) == [
               "img",
               "conv_0",
               "relu_0",
               "max_pool_0",
               "flatten_0",
               "dense_0"
             ]
    end

    test "layers that cannot be converted are named in the error" do
      axon = Axon.input("x", shape: {nil, 4, 4}) |> Axon.lstm(8, name: "memory") |> then(&elem(&1, 0))
      e = catch_error(Model.compile(axon))
      assert %ExBurn.Error{kind: :unsupported} = e
      assert e.message =~ "lstm" or e.message =~ "memory"
    end
  end
end
