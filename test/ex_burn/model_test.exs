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

  @tag timeout: 120_000
  test "a save killed midway (kill -9) leaves the previous checkpoint loadable", %{tmp_dir: dir} do
    path = Path.join(dir, "ckpt.safetensors")

    big =
      Layers.input("x", shape: {nil, 512})
      |> Layers.dense(2048, name: "a")
      |> Layers.dense(2048, name: "b")
      |> Model.compile(optimizer: :adam)

    :ok = Model.save(big, path)
    good = File.read!(path)
    # A separate OS process saves the same path in a loop; kill -9 it mid-write.
    script = Path.join(dir, "saver.exs")

    File.write!(script, """
    m = ExBurn.Layers.input("x", shape: {nil, 512}) |> ExBurn.Layers.dense(2048, name: "a") |> ExBurn.Layers.dense(2048, name: "b") |> ExBurn.Model.compile(optimizer: :adam, seed: 9)
    IO.puts("ready")
    Stream.repeatedly(fn -> ExBurn.Model.save(m, #{inspect(path)}) end) |> Stream.run()
    """)

    # The kill can land between two writes; try a few times until one tears a write.
    tmp_left = Enum.find_value(1..5, [], fn _ -> kill_saver_mid_write(script, dir) end)
    assert tmp_left != [], "the kill should have interrupted a write"
    {:ok, loaded} = Model.load(path, [])
    assert Model.info(loaded).param_count == Model.info(big).param_count

    IO.puts(
      "\n  [kill -9] saver killed mid-write (#{length(tmp_left)} torn temp file left); checkpoint loads"
    )

    assert byte_size(good) > 0
  end

  # Runs the saver script in its own OS process, kills it (-9) as soon as a temporary file
  # exists and returns the temporary files left (nil when the kill fell between two writes).
  defp kill_saver_mid_write(script, dir) do
    port =
      Port.open({:spawn_executable, System.find_executable("mix")}, [
        :binary,
        :exit_status,
        args: ["run", "--no-compile", script],
        # The project is compiled for this environment only (a clean clone has no _build/dev).
        env: [{~c"MIX_ENV", to_charlist(Mix.env())}],
        cd: File.cwd!()
      ])

    {:os_pid, os_pid} = Port.info(port, :os_pid)
    assert_receive {^port, {:data, "ready" <> _}}, 60_000
    assert wait_for_tmp(dir, 400), "the saver never started writing"
    {_, 0} = System.cmd("kill", ["-9", Integer.to_string(os_pid)])
    assert_receive {^port, {:exit_status, _}}, 10_000

    case dir |> File.ls!() |> Enum.filter(&String.contains?(&1, ".tmp-")) do
      [] -> nil
      left -> left
    end
  end

  defp wait_for_tmp(_dir, 0), do: false

  defp wait_for_tmp(dir, n) do
    if dir |> File.ls!() |> Enum.any?(&String.contains?(&1, ".tmp-")) do
      true
    else
      Process.sleep(5)
      wait_for_tmp(dir, n - 1)
    end
  end
end
