# Shared by the GPT-2 benchmarks (bench/gpt2_layer.exs, bench/gpt2_small.exs,
# bench/gpt2_generate.exs): GPT-2's layer norm and tanh GELU, the parameters' names and shapes,
# and starting weights written to a file that the Python peers read (bench/gpt2_common.py
# lists the same shapes in the same order).
defmodule Bench.Gpt2 do
  @moduledoc false
  import Nx.Defn

  @doc """
  Starts Nx with ExBurn on `EX_BURN_BENCH_DEVICE` (default `cpu`) as the default backend:
  `{device, size}`, the size from `GPT2_SIZE` (`small`, the default, or `tiny`).
  """
  def setup do
    Application.ensure_all_started(:nx)
    device = ExBurn.Device.normalize!(String.to_atom(System.get_env("EX_BURN_BENCH_DEVICE", "cpu")))
    Nx.default_backend({ExBurn.Backend, device: device})
    {device, System.get_env("GPT2_SIZE", "small")}
  end

  defn layer_norm(x, g, b) do
    mean = Nx.mean(x, axes: [-1], keep_axes: true)
    var = Nx.mean((x - mean) ** 2, axes: [-1], keep_axes: true)
    (x - mean) * Nx.rsqrt(var + 1.0e-5) * g + b
  end

  defn(gelu(x), do: 0.5 * x * (1 + Nx.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3))))

  @doc "The parameters' names and shapes in file order, for `c` (d, layers, vocab) and `positions`."
  def shapes(c, positions) do
    {d, f} = {c.d, 4 * c.d}

    layer =
      [ln1_g: {d}, ln1_b: {d}, w_qkv: {d, 3 * d}, b_qkv: {3 * d}, w_o: {d, d}, b_o: {d}] ++
        [ln2_g: {d}, ln2_b: {d}, w_1: {d, f}, b_1: {f}, w_2: {f, d}, b_2: {d}]

    [{"wte", {c.vocab, d}}, {"wpe", {positions, d}}] ++
      for(i <- 0..(c.layers - 1), {k, s} <- layer, do: {"h#{i}.#{k}", s}) ++
      [{"ln_f_g", {d}}, {"ln_f_b", {d}}]
  end

  @doc """
  Starting weights for `shapes` (N(0, 0.02) from `seed`, layer-norm gains 1, biases 0), written
  to `file` as f32 in order: `{params, count}`, the parameters as a map (`"h0" => %{"w_qkv" =>
  ...}`, `"wte" => ...`) and their number.
  """
  def weights(shapes, seed, file) do
    key = Nx.Random.key(seed)

    flat =
      for {{name, shape}, i} <- Enum.with_index(shapes) do
        leaf = name |> String.split(".") |> List.last()

        t =
          cond do
            String.ends_with?(leaf, "_g") ->
              Nx.broadcast(Nx.tensor(1.0, type: :f32), shape)

            String.starts_with?(leaf, "b_") or String.ends_with?(leaf, "_b") ->
              Nx.broadcast(Nx.tensor(0.0, type: :f32), shape)

            true ->
              Nx.multiply(elem(Nx.Random.normal(Nx.Random.fold_in(key, i), shape: shape), 0), 0.02)
          end

        {name, t}
      end

    File.write!(file, Enum.map(flat, fn {_, t} -> Nx.to_binary(t) end))

    params =
      Enum.reduce(flat, %{}, fn {name, t}, acc ->
        case String.split(name, ".") do
          [layer, leaf] -> Map.update(acc, layer, %{leaf => t}, &Map.put(&1, leaf, t))
          [top] -> Map.put(acc, top, t)
        end
      end)

    {params, flat |> Enum.map(fn {_, t} -> Nx.size(t) end) |> Enum.sum()}
  end

  @doc "`{batch, len}` token ids `(i * 7919 + 13) rem vocab` (the peers make the same)."
  def tokens(batch, len, vocab) do
    Nx.iota({batch, len}, type: :s64)
    |> Nx.multiply(7919)
    |> Nx.add(13)
    |> Nx.remainder(vocab)
    |> Nx.as_type(:s32)
  end
end
