defmodule ExBurn.DatasetTest do
  use ExUnit.Case, async: true

  alias ExBurn.{BurnBridge, Dataset, Tensor}

  @moduletag :tmp_dir

  defp ds(n) do
    x = BurnBridge.iota({n, 2}, :f32)
    y = BurnBridge.iota({n}, :s64)
    {x, y}
  end

  test "loader cuts batches in order or shuffled, keeping pairs together" do
    batches = Dataset.loader(ds(10), batch_size: 4) |> Enum.to_list()
    assert Enum.map(batches, fn {x, _} -> elem(x.shape, 0) end) == [4, 4, 2]
    assert Enum.map(batches, fn {_, y} -> Tensor.to_list(y) end) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert Dataset.loader(ds(10), batch_size: 4, drop_last: true) |> Enum.count() == 2

    shuffled = Dataset.loader(ds(10), batch_size: 10, shuffle: true, seed: 3) |> Enum.to_list()
    [{x, y}] = shuffled
    ys = Tensor.to_list(y)
    assert Enum.sort(ys) == Enum.to_list(0..9) and ys != Enum.to_list(0..9)
    # each row still matches its label: x = [2i, 2i+1]
    assert Tensor.to_list(x) == Enum.map(ys, fn i -> [2.0 * i, 2.0 * i + 1] end)

    assert ys ==
             Dataset.loader(ds(10), batch_size: 10, shuffle: true, seed: 3)
             |> Enum.to_list()
             |> hd()
             |> elem(1)
             |> Tensor.to_list()
  end

  test "split by ratio" do
    {{xt, yt}, {xv, yv}} = Dataset.split(ds(10), ratio: 0.7, shuffle: false)
    assert {elem(xt.shape, 0), elem(xv.shape, 0)} == {7, 3}
    assert Tensor.to_list(yt) == Enum.to_list(0..6)
    assert Tensor.to_list(yv) == [7, 8, 9]
    {{_, a}, {_, b}} = Dataset.split(ds(10), seed: 1)
    assert Enum.sort(Tensor.to_list(a) ++ Tensor.to_list(b)) == Enum.to_list(0..9)
  end

  test "normalize and normalize_with_stats" do
    x = Tensor.new([[1.0, 10.0], [3.0, 30.0]])
    {n, stats} = Dataset.normalize(x)
    [[a, b], [c, d]] = Tensor.to_list(n)
    for {got, want} <- [{a, -1.0}, {b, -1.0}, {c, 1.0}, {d, 1.0}], do: assert_in_delta(got, want, 1.0e-5)
    [[m1, m2]] = Tensor.to_list(stats.mean)
    assert {m1, m2} == {2.0, 20.0}
    [[z1, _]] = Dataset.normalize_with_stats(Tensor.new([[2.0, 20.0]]), stats) |> Tensor.to_list()
    assert_in_delta z1, 0.0, 1.0e-6
  end

  test "one_hot and stats" do
    assert Dataset.one_hot(Tensor.new([2, 0]), num_classes: 3) |> Tensor.to_list() == [
             [0.0, 0.0, 1.0],
             [1.0, 0.0, 0.0]
           ]

    s = Dataset.stats({Tensor.new([[0.0, 2.0], [4.0, 6.0]]), Tensor.new([1, 0])})
    assert %{samples: 2, input_shape: {2}, mean: 3.0, min: min, max: 6.0, classes: 2} = s
    assert min == 0.0
    assert_in_delta s.std, :math.sqrt(5.0), 1.0e-6
  end

  defp idx(type_code, dims, payload),
    do: <<0, 0, type_code, length(dims)>> <> for(d <- dims, into: <<>>, do: <<d::big-32>>) <> payload

  test "IDX files: ubyte images and labels, big-endian ints and floats, gzip", %{tmp_dir: dir} do
    images = idx(0x08, [2, 2, 3], :binary.list_to_bin(Enum.to_list(0..11)))
    File.write!(Path.join(dir, "train-images-idx3-ubyte"), images)
    File.write!(Path.join(dir, "train-labels-idx1-ubyte.gz"), :zlib.gzip(idx(0x08, [2], <<7, 3>>)))
    t = Dataset.read_idx(Path.join(dir, "train-images-idx3-ubyte"))
    assert {t.shape, t.type} == {{2, 2, 3}, {:u, 8}}
    assert Tensor.to_list(t) == [[[0, 1, 2], [3, 4, 5]], [[6, 7, 8], [9, 10, 11]]]
    assert Dataset.read_idx(Path.join(dir, "train-labels-idx1-ubyte.gz")) |> Tensor.to_list() == [7, 3]

    ints = idx(0x0C, [2], <<-5::big-signed-32, 70000::big-signed-32>>)
    File.write!(Path.join(dir, "ints"), ints)
    assert Dataset.read_idx(Path.join(dir, "ints")) |> Tensor.to_list() == [-5, 70000]
    File.write!(Path.join(dir, "floats"), idx(0x0D, [1], <<1.5::big-float-32>>))
    assert Dataset.read_idx(Path.join(dir, "floats")) |> Tensor.to_list() == [1.5]

    File.write!(Path.join(dir, "bad"), binary_part(images, 0, 20))
    assert %ExBurn.Error{kind: :corrupt} = catch_error(Dataset.read_idx(Path.join(dir, "bad")))
    File.write!(Path.join(dir, "foreign"), "PK\x03\x04zip")
    assert %ExBurn.Error{kind: :corrupt} = catch_error(Dataset.read_idx(Path.join(dir, "foreign")))
  end

  test "mnist reads a directory of IDX files", %{tmp_dir: dir} do
    for {prefix, n} <- [{"train", 3}, {"t10k", 2}] do
      File.write!(
        Path.join(dir, "#{prefix}-images-idx3-ubyte"),
        idx(0x08, [n, 28, 28], :binary.copy(<<255>>, n * 784))
      )

      File.write!(Path.join(dir, "#{prefix}-labels-idx1-ubyte"), idx(0x08, [n], :binary.copy(<<4>>, n)))
    end

    {{x, y}, {xt, _}} = Dataset.mnist(dir)
    assert {x.shape, x.type, y.type, xt.shape} == {{3, 784}, {:f, 32}, {:s, 64}, {2, 784}}
    assert x |> BurnBridge.reduce_max() |> Tensor.to_list() == 1.0
  end
end
