defmodule ExBurn.Dataset do
  @moduledoc """
  Datasets as `{inputs, targets}` pairs of `ExBurn.Tensor`s (samples on the first axis), and
  the helpers training needs: batching, splitting, normalisation, one-hot encoding,
  statistics, and a reader for the MNIST IDX format.

  Every operation runs on the tensors' device (no host copies), through `ExBurn.BurnBridge`.
  """

  alias ExBurn.{BurnBridge, Tensor}

  @type dataset :: {Tensor.t(), Tensor.t()}

  defp n(%Tensor{shape: s}), do: elem(s, 0)

  defp rows(%Tensor{} = t, %Tensor{} = idx), do: ExBurn.Op.eval1(:take, [t, idx], axis: 0)

  defp slice_rows(%Tensor{shape: s} = t, lo, len) do
    r = tuple_size(s)
    BurnBridge.slice(t, [lo | List.duplicate(0, r - 1)], [len | s |> Tuple.to_list() |> tl()])
  end

  defp permutation(count, seed, device) do
    {count}
    |> BurnBridge.random_uniform(seed: seed, device: device)
    |> then(&ExBurn.Op.eval1(:argsort, [&1], axis: 0))
  end

  @doc """
  A stream of `{inputs, targets}` batches cut on the device.

  ## Options

    * `:batch_size` - default 32
    * `:shuffle` - default `false`
    * `:seed` - shuffling seed (default 0)
    * `:drop_last` - drop a final smaller batch (default `false`)
  """
  @spec loader(dataset(), keyword()) :: Enumerable.t()
  def loader({x, y}, opts \\ []) do
    opts = Keyword.validate!(opts, batch_size: 32, shuffle: false, seed: 0, drop_last: false)
    count = n(x)
    bs = opts[:batch_size]
    {x, y} = if opts[:shuffle], do: shuffle({x, y}, opts[:seed]), else: {x, y}
    last = if opts[:drop_last], do: div(count, bs) * bs, else: count

    0
    |> Stream.iterate(&(&1 + bs))
    |> Stream.take_while(&(&1 < last))
    |> Stream.map(fn lo ->
      len = min(bs, count - lo)
      {slice_rows(x, lo, len), slice_rows(y, lo, len)}
    end)
  end

  @doc "The dataset in a seeded random order."
  @spec shuffle(dataset(), integer()) :: dataset()
  def shuffle({x, y}, seed \\ 0) do
    perm = permutation(n(x), seed, x.device)
    {rows(x, perm), rows(y, perm)}
  end

  @doc """
  Splits into `{train, validation}`.

  ## Options

    * `:ratio` - fraction for training (default 0.8)
    * `:shuffle` - shuffle first (default `true`)
    * `:seed` - shuffling seed (default 0)
  """
  @spec split(dataset(), keyword()) :: {dataset(), dataset()}
  def split({x, y}, opts \\ []) do
    opts = Keyword.validate!(opts, ratio: 0.8, shuffle: true, seed: 0)
    {x, y} = if opts[:shuffle], do: shuffle({x, y}, opts[:seed]), else: {x, y}
    count = n(x)
    k = round(count * opts[:ratio])
    {{slice_rows(x, 0, k), slice_rows(y, 0, k)}, {slice_rows(x, k, count - k), slice_rows(y, k, count - k)}}
  end

  @doc """
  Standardises features to zero mean and unit variance; returns `{normalized, stats}` where
  `stats` (`%{mean, std}`) feeds `normalize_with_stats/2` for other data.

  ## Options

    * `:axes` - axes to average over (default `[0]`, per feature)
    * `:epsilon` - added to the standard deviation (default 1.0e-7)
  """
  @spec normalize(Tensor.t(), keyword()) :: {Tensor.t(), %{mean: Tensor.t(), std: Tensor.t()}}
  def normalize(%Tensor{} = x, opts \\ []) do
    opts = Keyword.validate!(opts, axes: [0], epsilon: 1.0e-7)
    x = to_float(x)
    mean = BurnBridge.mean(x, axes: opts[:axes], keep_axes: true)
    centered = BurnBridge.subtract(x, mean)
    var = BurnBridge.mean(BurnBridge.multiply(centered, centered), axes: opts[:axes], keep_axes: true)
    std = BurnBridge.add(BurnBridge.sqrt(var), opts[:epsilon])
    stats = %{mean: mean, std: std}
    {normalize_with_stats(x, stats), stats}
  end

  @doc "Applies `(x - mean) / std` with statistics from `normalize/2`."
  @spec normalize_with_stats(Tensor.t(), %{mean: Tensor.t(), std: Tensor.t()}) :: Tensor.t()
  def normalize_with_stats(%Tensor{} = x, %{mean: mean, std: std}) do
    x |> to_float() |> BurnBridge.subtract(mean) |> BurnBridge.divide(std)
  end

  defp to_float(%Tensor{type: t} = x),
    do: if(ExBurn.Type.float?(t), do: x, else: BurnBridge.as_type(x, {:f, 32}))

  @doc """
  One-hot encodes integer labels `[n]` into `[n, num_classes]`.

  ## Options

    * `:num_classes` - required
    * `:type` - default `{:f, 32}`
  """
  @spec one_hot(Tensor.t(), keyword()) :: Tensor.t()
  def one_hot(%Tensor{} = labels, opts) do
    opts = Keyword.validate!(opts, [:num_classes, type: {:f, 32}])
    c = opts[:num_classes] || raise ArgumentError, "one_hot needs :num_classes"
    classes = BurnBridge.iota({1, c}, :s64, device: labels.device)
    col = BurnBridge.reshape(BurnBridge.as_type(labels, {:s, 64}), {n(labels), 1})
    classes |> BurnBridge.equal(col) |> BurnBridge.as_type(opts[:type])
  end

  @doc """
  Summary statistics: `%{samples, input_shape, input_type, mean, std, min, max, classes}`
  (`classes` counts distinct labels for integer targets).
  """
  @spec stats(dataset()) :: map()
  def stats({x, y}) do
    xf = to_float(x)
    scalar = fn t -> Tensor.to_list(t) end
    mean = scalar.(BurnBridge.mean(xf))

    var =
      scalar.(
        BurnBridge.mean(BurnBridge.multiply(BurnBridge.subtract(xf, mean), BurnBridge.subtract(xf, mean)))
      )

    classes =
      if ExBurn.Type.float?(y.type) and tuple_size(y.shape) == 2 do
        elem(y.shape, 1)
      else
        if ExBurn.Type.float?(y.type),
          do: nil,
          else: y |> Tensor.to_list() |> List.flatten() |> Enum.uniq() |> length()
      end

    %{
      samples: n(x),
      input_shape: x.shape |> Tuple.delete_at(0),
      input_type: x.type,
      mean: mean,
      std: :math.sqrt(max(var, 0.0)),
      min: scalar.(BurnBridge.reduce_min(xf)),
      max: scalar.(BurnBridge.reduce_max(xf)),
      classes: classes
    }
  end

  @idx_types %{
    0x08 => {:u, 8},
    0x09 => {:s, 8},
    0x0B => {:s, 16},
    0x0C => {:s, 32},
    0x0D => {:f, 32},
    0x0E => {:f, 64}
  }

  @doc """
  Reads an IDX file (the MNIST format: big-endian header with type code and dimensions,
  optionally gzip-compressed) into a tensor.

  ## Options

    * `:device` - default `ExBurn.default_device/0`
  """
  @spec read_idx(Path.t(), keyword()) :: Tensor.t()
  def read_idx(path, opts \\ []) do
    opts = Keyword.validate!(opts, [:device])
    bin = File.read!(path)
    bin = if match?(<<0x1F, 0x8B, _::binary>>, bin), do: :zlib.gunzip(bin), else: bin
    parse_idx(bin, opts[:device])
  end

  @doc false
  def parse_idx(<<0, 0, code, ndims, rest::binary>>, device) when is_map_key(@idx_types, code) do
    head = ndims * 4

    case rest do
      <<dims::binary-size(head), data::binary>> ->
        shape = for <<d::unsigned-big-32 <- dims>>, do: d
        type = @idx_types[code]
        count = Enum.product(shape)
        size = count * ExBurn.Type.byte_size(type)

        if byte_size(data) != size do
          raise ExBurn.Error.new(
                  kind: :corrupt,
                  op: :read_idx,
                  message: "IDX data has #{byte_size(data)} bytes, header says #{size}"
                )
        end

        Tensor.from_binary(to_little(data, type), List.to_tuple(shape), type, device: device)

      _ ->
        raise ExBurn.Error.new(kind: :corrupt, op: :read_idx, message: "truncated IDX header")
    end
  end

  def parse_idx(_bin, _device),
    do: raise(ExBurn.Error.new(kind: :corrupt, op: :read_idx, message: "not an IDX file"))

  defp to_little(data, {_, 8}), do: data

  defp to_little(data, {:s, b}),
    do: for(<<x::signed-big-size(b) <- data>>, into: <<>>, do: <<x::signed-little-size(b)>>)

  defp to_little(data, {:f, b}), do: for(<<x::binary-size(div(b, 8)) <- data>>, into: <<>>, do: reverse(x))

  defp reverse(bin), do: bin |> :binary.bin_to_list() |> Enum.reverse() |> :binary.list_to_bin()

  @doc """
  Reads the MNIST files in `dir` (`train-images-idx3-ubyte`, `train-labels-idx1-ubyte`, and
  the `t10k-` test files, optionally `.gz`) as `{{x_train, y_train}, {x_test, y_test}}` with
  images as `{:f, 32}` in [0, 1] of shape `[n, 784]` and labels `{:s, 64}`.

  ## Options

    * `:device` - default `ExBurn.default_device/0`
  """
  @spec mnist(Path.t(), keyword()) :: {dataset(), dataset()}
  def mnist(dir, opts \\ []) do
    find = fn base ->
      Enum.find([Path.join(dir, base), Path.join(dir, base <> ".gz")], &File.exists?/1) ||
        raise ExBurn.Error.new(kind: :io, op: :mnist, message: "#{base} not found in #{dir}")
    end

    load = fn prefix ->
      images = read_idx(find.("#{prefix}-images-idx3-ubyte"), opts)
      labels = read_idx(find.("#{prefix}-labels-idx1-ubyte"), opts)
      {count, _, _} = images.shape

      x =
        images |> BurnBridge.reshape({count, 784}) |> BurnBridge.as_type({:f, 32}) |> BurnBridge.divide(255.0)

      {x, BurnBridge.as_type(labels, {:s, 64})}
    end

    {load.("train"), load.("t10k")}
  end
end
