defmodule ExBurn.ModelTest do
  use ExUnit.Case, async: true

  alias ExBurn.{BurnBridge, Layers, Model, Tensor, Training}

  @moduletag :tmp_dir

  defp data(n) do
    x = BurnBridge.random_normal({n, 4}, seed: 5)
    y = x |> BurnBridge.sum(axes: [1]) |> BurnBridge.greater(0) |> BurnBridge.as_type(:s64)
    {x, y}
  end

  defp model do
    Layers.input("x", shape: {nil, 4})
    |> Layers.dense(8, activation: :tanh, name: "h")
    |> Layers.dense(2, name: "out")
    |> Model.compile(optimizer: :adam, learning_rate: 0.01)
  end

  test "summary counts parameters" do
    s = Model.summary(model())
    assert s =~ "Total params: 58"
    assert s =~ ~r/h\s+dense\s+\{nil, 8\}\s+40/
  end

  test "save -> load gives identical predictions and identical continued training", %{tmp_dir: dir} do
    {x, y} = data(64)
    m = Training.fit(model(), {x, y}, epochs: 2, batch_size: 16, verbose: false)
    path = Path.join(dir, "m.safetensors")
    :ok = Model.save(m, path)
    {:ok, back} = Model.load(path, device: :cpu)
    assert {back.loss, back.optimizer, back.learning_rate} == {:cross_entropy, :adam, 0.01}
    assert Tensor.to_list(Training.predict(m, x)) == Tensor.to_list(Training.predict(back, x))
    {l1, _} = Training.train_step(m, {x, y})
    {l2, _} = Training.train_step(back, {x, y})
    assert l1 == l2
    assert Tensor.to_list(Training.predict(m, x)) == Tensor.to_list(Training.predict(back, x))
    {:ok, via_template} = Model.load(m, path)
    assert via_template.device == :cpu
  end

  test "serialize_params round trip and clone independence" do
    {x, y} = data(32)
    m = model()
    {:ok, copy} = m |> Model.serialize_params() |> Model.deserialize_params()
    assert Tensor.to_list(Training.predict(m, x)) == Tensor.to_list(Training.predict(copy, x))
    c = Model.clone(m)
    Training.train_step(m, {x, y})
    refute Tensor.to_list(Training.predict(m, x)) == Tensor.to_list(Training.predict(c, x))
  end

  test "truncated, corrupt and foreign files give :corrupt", %{tmp_dir: dir} do
    path = Path.join(dir, "m.safetensors")
    :ok = Model.save(model(), path)
    bin = File.read!(path)

    for {name, content} <- [
          truncated: binary_part(bin, 0, div(byte_size(bin), 2)),
          garbage: "hello",
          flipped: flip(bin)
        ] do
      p = Path.join(dir, "#{name}.safetensors")
      File.write!(p, content)
      assert {:error, %ExBurn.Error{kind: :corrupt}} = Model.load(p, []), "#{name}"
    end

    assert {:error, %ExBurn.Error{kind: :io}} = Model.load(Path.join(dir, "missing"), [])
  end

  defp flip(bin) do
    pos = byte_size(bin) - 5
    <<head::binary-size(pos), b, rest::binary>> = bin
    head <> <<Bitwise.bxor(b, 0x10)>> <> rest
  end

  test "export and import_params by name", %{tmp_dir: dir} do
    m = model()
    path = Path.join(dir, "params.safetensors")
    :ok = Model.export(m, path, metadata: %{note: "test"})
    other = model() |> Model.put_parameters(%{"h.bias" => BurnBridge.ones({8})})

    refute Tensor.to_list(Model.parameters(other)["h.kernel"]) ==
             Tensor.to_list(Model.parameters(m)["h.kernel"]) and false

    Model.import_params(other, path)
    assert Tensor.to_list(Model.parameters(other)["h.bias"]) == Tensor.to_list(Model.parameters(m)["h.bias"])

    assert %ExBurn.Error{kind: :argument} =
             catch_error(Model.import_params(other, path, rename: &("x" <> &1)))
  end

  test "quantize and to_device" do
    {x, _} = data(8)
    m = model()
    h = Model.quantize(m, {:bf, 16})
    assert Model.parameters(h)["h.kernel"].type == {:bf, 16}
    {:ok, out} = Model.predict(h, x)
    assert out.shape == {8, 2}
    assert Model.to_device(m, :cpu) == m
    assert %ExBurn.Error{kind: :dtype} = catch_error(Model.quantize(m, :s8))
  end
end
