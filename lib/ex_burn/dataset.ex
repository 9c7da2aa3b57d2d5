defmodule ExBurn.Dataset do
  @moduledoc """
  Datasets as `{inputs, targets}` pairs of `ExBurn.Tensor`s (samples on the first axis), and
  the helpers training needs: batching, splitting, normalisation, one-hot encoding,
  statistics, and a reader for the MNIST IDX format.

  Every operation runs on the tensors' device (no host copies), through `ExBurn.BurnBridge`.
  """

  alias ExBurn.{BurnBridge, Options, Tensor}

  @type dataset :: {Tensor.t(), Tensor.t()}

  defp n(%Tensor{shape: s}), do: elem(s, 0)

  # A dataset: two tensors of rank >= 1 with the same number of samples.
  defp dataset!({%Tensor{shape: xs} = x, %Tensor{shape: ys} = y}, op)
       when tuple_size(xs) > 0 and tuple_size(ys) > 0 do
    if elem(xs, 0) != elem(ys, 0) do
      Options.fail(op, "inputs and targets have #{elem(xs, 0)} and #{elem(ys, 0)} samples")
    end

    {x, y}
  end

  defp dataset!(other, op),
    do: Options.fail(op, "expected {inputs, targets} tensors of rank >= 1, got #{Options.short(other)}")

  defp tensor!(%Tensor{} = t, _op), do: t
  defp tensor!(other, op), do: Tensor.not_a_tensor(other, op)

  @seed {:number, 0, 18_446_744_073_709_551_615}

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

  @loader_opts [
    batch_size: [type: :pos_integer, default: 32, doc: "samples per batch"],
    shuffle: [type: :boolean, default: false, doc: "shuffle once, seeded by `:seed`"],
    seed: [type: @seed, default: 0, doc: "shuffling seed (an integer)"],
    drop_last: [type: :boolean, default: false, doc: "drop a final smaller batch"]
  ]

  @doc """
  A stream of `{inputs, targets}` batches cut on the device.

  ## Options

  #{Options.docs(@loader_opts)}
  """
  @spec loader(dataset(), keyword()) :: Enumerable.t()
  def loader(data, opts \\ []) do
    {x, y} = dataset!(data, :loader)
    opts = Options.validate!(opts, @loader_opts, :loader)
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
  def shuffle(data, seed \\ 0) do
    {x, y} = dataset!(data, :shuffle)
    Options.check!(seed, @seed, "seed", :shuffle)
    unless is_integer(seed), do: Options.fail(:shuffle, "the seed must be an integer")
    perm = permutation(n(x), seed, x.device)
    {rows(x, perm), rows(y, perm)}
  end

  @split_opts [
    ratio: [type: {:number, 0, 1}, default: 0.8, doc: "fraction for training"],
    shuffle: [type: :boolean, default: true, doc: "shuffle first"],
    seed: [type: @seed, default: 0, doc: "shuffling seed (an integer)"]
  ]

  @doc """
  Splits into `{train, validation}`.

  ## Options

  #{Options.docs(@split_opts)}
  """
  @spec split(dataset(), keyword()) :: {dataset(), dataset()}
  def split(data, opts \\ []) do
    {x, y} = dataset!(data, :split)
    opts = Options.validate!(opts, @split_opts, :split)
    {x, y} = if opts[:shuffle], do: shuffle({x, y}, opts[:seed]), else: {x, y}
    count = n(x)
    k = round(count * opts[:ratio])
    {{slice_rows(x, 0, k), slice_rows(y, 0, k)}, {slice_rows(x, k, count - k), slice_rows(y, k, count - k)}}
  end

  @normalize_opts [
    axes: [
      type: {:list, :non_neg_integer},
      default: [0],
      doc: "axes to average over (per feature by default)"
    ],
    epsilon: [type: :non_neg_number, default: 1.0e-7, doc: "added to the standard deviation"]
  ]

  @doc """
  Standardises features to zero mean and unit variance; returns `{normalized, stats}` where
  `stats` (`%{mean, std}`) feeds `normalize_with_stats/2` for other data.

  ## Options

  #{Options.docs(@normalize_opts)}
  """
  @spec normalize(Tensor.t(), keyword()) :: {Tensor.t(), %{mean: Tensor.t(), std: Tensor.t()}}
  def normalize(x, opts \\ []) do
    x = tensor!(x, :normalize)
    opts = Options.validate!(opts, @normalize_opts, :normalize)
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
  def normalize_with_stats(%Tensor{} = x, %{mean: %Tensor{} = mean, std: %Tensor{} = std}) do
    x |> to_float() |> BurnBridge.subtract(mean) |> BurnBridge.divide(std)
  end

  def normalize_with_stats(x, stats) do
    Options.fail(
      :normalize_with_stats,
      "expected a tensor and %{mean: tensor, std: tensor}, got #{Options.short(x)} and #{Options.short(stats)}"
    )
  end

  defp to_float(%Tensor{type: t} = x),
    do: if(ExBurn.Type.float?(t), do: x, else: BurnBridge.as_type(x, {:f, 32}))

  @one_hot_opts [
    num_classes: [type: :pos_integer, required: true, doc: "the number of classes"],
    type: [type: :type, default: {:f, 32}, doc: "element type of the result"]
  ]

  @doc """
  One-hot encodes integer labels `[n]` into `[n, num_classes]`.

  ## Options

  #{Options.docs(@one_hot_opts)}
  """
  @spec one_hot(Tensor.t(), keyword()) :: Tensor.t()
  def one_hot(labels, opts) do
    labels = tensor!(labels, :one_hot)
    opts = Options.validate!(opts, @one_hot_opts, :one_hot)
    c = opts[:num_classes]

    if tuple_size(labels.shape) != 1 or ExBurn.Type.float?(labels.type) do
      Options.fail(
        :one_hot,
        "expected integer labels of shape {n}, got #{Options.short(labels.type)} #{Options.short(labels.shape)}"
      )
    end

    classes = BurnBridge.iota({1, c}, :s64, device: labels.device)
    col = BurnBridge.reshape(BurnBridge.as_type(labels, {:s, 64}), {n(labels), 1})
    classes |> BurnBridge.equal(col) |> BurnBridge.as_type(opts[:type])
  end

  @doc """
  Summary statistics: `%{samples, input_shape, input_type, mean, std, min, max, classes}`
  (`classes` counts distinct labels for integer targets, on the device). Statistics of data
  holding NaN or infinities are `:nan`, `:infinity` or `:neg_infinity`, as
  `ExBurn.Tensor.to_list/1` reads them.
  """
  @spec stats(dataset()) :: map()
  def stats(data) do
    {x, y} = dataset!(data, :stats)
    xf = to_float(x)
    scalar = fn t -> Tensor.to_list(t) end
    mean = scalar.(BurnBridge.mean(xf))
    centered = BurnBridge.subtract(xf, mean)
    var = scalar.(BurnBridge.mean(BurnBridge.multiply(centered, centered)))

    classes =
      cond do
        ExBurn.Type.float?(y.type) and tuple_size(y.shape) == 2 -> elem(y.shape, 1)
        ExBurn.Type.float?(y.type) -> nil
        true -> distinct(y)
      end

    %{
      samples: n(x),
      input_shape: x.shape |> Tuple.delete_at(0),
      input_type: x.type,
      mean: mean,
      std: sqrt(var),
      min: scalar.(BurnBridge.reduce_min(xf)),
      max: scalar.(BurnBridge.reduce_max(xf)),
      classes: classes
    }
  end

  # The square root of a variance read back: a number, or :infinity / :nan.
  defp sqrt(v) when is_number(v), do: :math.sqrt(max(v, 0.0))
  defp sqrt(:infinity), do: :infinity
  defp sqrt(_nan), do: :nan

  # Distinct values of an integer tensor: sorted on the device, the changes between
  # neighbours counted there (nothing proportional to the data comes to the host).
  defp distinct(%Tensor{} = y) do
    case Tensor.numel(y) do
      0 ->
        0

      n ->
        sorted = ExBurn.Op.eval1(:sort, [BurnBridge.reshape(y, {n})], axis: 0)
        later = BurnBridge.slice(sorted, [1], [n - 1])
        earlier = BurnBridge.slice(sorted, [0], [n - 1])
        1 + (later |> BurnBridge.not_equal(earlier) |> BurnBridge.sum() |> Tensor.to_list())
    end
  end

  @idx_types %{
    0x08 => {:u, 8},
    0x09 => {:s, 8},
    0x0B => {:s, 16},
    0x0C => {:s, 32},
    0x0D => {:f, 32},
    0x0E => {:f, 64}
  }

  @device_opts [device: [type: {:or, [nil, :device]}, default: nil, doc: "default `ExBurn.default_device/0`"]]

  @doc """
  Reads an IDX file (the MNIST format: big-endian header with type code and dimensions,
  optionally gzip-compressed) into a tensor.

  ## Options

  #{Options.docs(@device_opts)}
  """
  @spec read_idx(Path.t(), keyword()) :: Tensor.t()
  def read_idx(path, opts \\ []) do
    opts = Options.validate!(opts, @device_opts, :read_idx)
    Options.check!(path, :string, "path", :read_idx)

    bin = read_regular(path)
    bin = if match?(<<0x1F, 0x8B, _::binary>>, bin), do: gunzip(bin), else: bin
    parse_idx(bin, opts[:device])
  end

  # A regular file that fits in memory (a FIFO would block, a huge file exhaust the host).
  defp read_regular(path) do
    with {:ok, %File.Stat{type: :regular, size: size}} <- File.stat(path),
         :ok <- fits(size, "the file #{path}"),
         {:ok, bin} <- File.read(path) do
      bin
    else
      {:ok, %File.Stat{type: type}} -> io!("cannot read #{path}: it is not a regular file (#{type})")
      {:error, reason} -> io!("cannot read #{path}: #{:file.format_error(reason)}")
    end
  end

  defp io!(message), do: raise(ExBurn.Error.new(kind: :io, op: :read_idx, message: message))
  defp corrupt!(message), do: raise(ExBurn.Error.new(kind: :corrupt, op: :read_idx, message: message))

  # Raises :out_of_memory when `bytes` cannot fit in host memory.
  defp fits(bytes, what) do
    case ExBurn.Device.room(:cpu) do
      room when is_integer(room) and bytes > room ->
        raise ExBurn.Error.new(
                kind: :out_of_memory,
                op: :read_idx,
                message: "#{what} would take #{bytes} bytes, more than the #{room} the host can hold"
              )

      _ ->
        :ok
    end
  end

  # Inflates gzip data no further than the IDX header inside it declares, after checking that
  # size against host memory (a small file can inflate to any size).
  defp gunzip(bin) do
    z = :zlib.open()

    try do
      :ok = :zlib.inflateInit(z, 31)
      inflate(z, :zlib.safeInflate(z, bin), [], 0, nil)
    rescue
      _ in ErlangError -> corrupt!("bad gzip data")
    after
      :zlib.close(z)
    end
  end

  defp inflate(z, {status, out}, acc, size, limit) do
    acc = [acc | out]
    size = size + IO.iodata_length(out)
    limit = limit || declared_size(acc, size)

    cond do
      limit && size > limit ->
        corrupt!("the gzip data inflates past the #{limit} bytes its IDX header declares")

      status == :finished ->
        IO.iodata_to_binary(acc)

      true ->
        inflate(z, :zlib.safeInflate(z, []), acc, size, limit)
    end
  end

  # The file size an IDX header declares (once `size` bytes hold it; nil before).
  defp declared_size(acc, size) when size >= 4 do
    case IO.iodata_to_binary(acc) do
      <<0, 0, code, ndims, dims::binary>>
      when is_map_key(@idx_types, code) and byte_size(dims) >= ndims * 4 ->
        count = for(<<d::unsigned-big-32 <- binary_part(dims, 0, ndims * 4)>>, do: d) |> Enum.product()
        total = 4 + ndims * 4 + count * ExBurn.Type.byte_size(@idx_types[code])
        fits(total, "the IDX data")
        total

      <<0, 0, code, _ndims, _::binary>> when is_map_key(@idx_types, code) ->
        nil

      _ ->
        corrupt!("not an IDX file")
    end
  end

  defp declared_size(_acc, _size), do: nil

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
    Options.check!(dir, :string, "dir", :mnist)
    opts = Options.validate!(opts, @device_opts, :mnist)

    find = fn base ->
      Enum.find([Path.join(dir, base), Path.join(dir, base <> ".gz")], &File.exists?/1) ||
        raise ExBurn.Error.new(kind: :io, op: :mnist, message: "#{base} not found in #{dir}")
    end

    load = fn prefix ->
      images = read_idx(find.("#{prefix}-images-idx3-ubyte"), opts)
      labels = read_idx(find.("#{prefix}-labels-idx1-ubyte"), opts)

      count =
        case images.shape do
          {count, 28, 28} ->
            count

          other ->
            raise ExBurn.Error.new(
                    kind: :corrupt,
                    op: :mnist,
                    message: "images of shape #{Options.short(other)}, not {n, 28, 28}"
                  )
        end

      x =
        images |> BurnBridge.reshape({count, 784}) |> BurnBridge.as_type({:f, 32}) |> BurnBridge.divide(255.0)

      {x, BurnBridge.as_type(labels, {:s, 64})}
    end

    {load.("train"), load.("t10k")}
  end
end
