defmodule ExBurn.LayersTest do
  use ExUnit.Case, async: true

  alias ExBurn.Layers

  test "names are generated per kind in graph order (named layers count, as in Axon)" do
    spec =
      Layers.input("x", shape: {nil, 4})
      |> Layers.dense(8, activation: :relu)
      |> Layers.dense(8, activation: :tanh, name: "second")
      |> Layers.dense(2)
      |> Layers.to_spec()

    assert Enum.map(spec.layers, & &1.name) == ["x", "dense_0", "relu_0", "second", "second_tanh", "dense_2"]
    assert Enum.map(spec.layers, & &1.inputs) == [[], [0], [1], [2], [3], [4]]
    assert spec.output == 5
  end

  test "residual graphs join branches with add and concatenate" do
    x = Layers.input("x", shape: {nil, 6})
    a = Layers.dense(x, 6, name: "a")
    b = Layers.dense(x, 6, name: "b")
    joined = Layers.add(a, b, name: "sum") |> Layers.concatenate(x, name: "cat")
    spec = Layers.to_spec(joined)
    names = Enum.map(spec.layers, & &1.name)
    assert names == ["x", "a", "b", "sum", "cat"]
    assert Enum.at(spec.layers, 3).inputs == [1, 2]
    assert Enum.at(spec.layers, 4).inputs == [3, 0]
    info = ExBurn.Model.info(joined)
    assert List.last(info.layers).output_shape == {nil, 12}
    assert info.param_count == 2 * (6 * 6 + 6)
  end

  test "shape errors and duplicate names are reported" do
    bad = Layers.input("x", shape: {nil, 4, 4}) |> Layers.add(Layers.input("y", shape: {nil, 4}))
    assert %ExBurn.Error{kind: :shape} = catch_error(ExBurn.Model.info(bad))
    dup = Layers.input("x", shape: {nil, 4}) |> Layers.dense(2, name: "x")
    assert %ExBurn.Error{kind: :argument} = catch_error(Layers.to_spec(dup))
    assert %ExBurn.Error{kind: :argument, op: :input} = catch_error(Layers.input("x", shape: {4}))
  end

  test "conv, pools, norms and embeddings infer shapes" do
    img = Layers.input("img", shape: {nil, 10, 10, 3})

    model =
      img
      |> Layers.conv(4, kernel_size: {3, 3}, padding: :same, strides: 2)
      |> Layers.batch_norm()
      |> Layers.avg_pool(kernel_size: {2, 2})
      |> Layers.global_avg_pool()
      |> Layers.layer_norm()

    shapes = ExBurn.Model.info(model).layers |> Enum.map(& &1.output_shape)
    assert shapes == [{nil, 10, 10, 3}, {nil, 5, 5, 4}, {nil, 5, 5, 4}, {nil, 2, 2, 4}, {nil, 4}, {nil, 4}]

    tokens = Layers.input("ids", shape: {nil, 7}, type: :s64) |> Layers.embedding(100, 16) |> Layers.flatten()
    assert List.last(ExBurn.Model.info(tokens).layers).output_shape == {nil, 112}
  end

  test "cnn, embedding and batch-norm models train" do
    alias ExBurn.{BurnBridge, Training}
    x = BurnBridge.random_normal({16, 8, 8, 1}, seed: 1)
    y = BurnBridge.random_uniform({16}, min: 0, max: 2, type: :s64, seed: 2)

    cnn =
      Layers.input("img", shape: {nil, 8, 8, 1})
      |> Layers.conv(4, kernel_size: 3, activation: :relu)
      |> Layers.batch_norm()
      |> Layers.max_pool(kernel_size: 2, padding: :same)
      |> Layers.flatten()
      |> Layers.dense(2)
      |> ExBurn.Model.compile(optimizer: :sgd, learning_rate: 0.05, momentum: 0.9)

    {l1, _} = Training.train_step(cnn, {x, y})
    Enum.each(1..5, fn _ -> Training.train_step(cnn, {x, y}) end)
    {l2, _} = Training.train_step(cnn, {x, y})
    assert l2 < l1

    ids = BurnBridge.random_uniform({16, 5}, min: 0, max: 20, type: :s64, seed: 3)

    emb =
      Layers.input("ids", shape: {nil, 5}, type: :s64)
      |> Layers.embedding(20, 4)
      |> Layers.layer_norm()
      |> Layers.flatten()
      |> Layers.dense(2, activation: :log_softmax)
      |> ExBurn.Model.compile()

    {l, _} = Training.train_step(emb, {ids, y})
    assert is_float(l)
    assert Training.predict(emb, ids).shape == {16, 2}
  end
end
