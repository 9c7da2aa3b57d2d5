# Greedy generation with a key/value cache on a whole GPT-2 small (12 layers, d 768, 12 heads,
# vocabulary 50,257): a 32-token prompt, then 128 new tokens, at batch 1 and 16, f32 with TF32
# products. Written as Bumblebee writes generation: one `Nx.Defn.jit` program holds the
# prompt's pass and a `while` loop that feeds each chosen token back, the cache updated in
# place with `put_slice` at the current position and attention masked to the positions filled
# so far. Against PyTorch eager (the same loop in Python over a preallocated cache) and JAX (the
# same program, `jax.lax.fori_loop` in `jax.jit`) on the same device in the same run
# (bench/gpt2_generate.py), from the same weights (a file this script writes) and prompts; the
# tokens each contender chose are compared with ExBurn's.
#
#     EX_BURN_BENCH_DEVICE=cuda bin/nx-run bench/gpt2_generate.exs
#
# GPT2_SIZE=tiny (2 layers, d 64, vocabulary 512, 8-token prompt, 16 new tokens) checks the
# script on a CPU; EX_BURN_BENCH_PEERS (default "torch jax"), EX_BURN_BENCH_ROUNDS (5).
#
# Results: bench/results/gpt2_generate_<device>.md
Code.require_file("support/bench.exs", __DIR__)
Code.require_file("support/gpt2.exs", __DIR__)
{device, size} = Bench.Gpt2.setup()

cfg =
  case size do
    "small" -> %{layers: 12, d: 768, heads: 12, vocab: 50_257, ctx: 1024, prompt: 32, new: 128}
    "tiny" -> %{layers: 2, d: 64, heads: 4, vocab: 512, ctx: 64, prompt: 8, new: 16}
  end
  |> then(fn c -> %{c | new: String.to_integer(System.get_env("GPT2_NEW", "#{c.new}"))} end)

defmodule Bench.Gpt2Generate do
  @moduledoc false
  import Nx.Defn

  # `t` new tokens at positions pos..pos+t-1 through every layer; each layer's keys and values
  # are written into `cache` ({layers, 2, batch, heads, max, head size}) at `pos`. Returns the
  # last position's logits and the cache.
  defn step(params, tokens, pos, cache, opts \\ []) do
    c = opts[:c]
    {b, t} = Nx.shape(tokens)
    {_, _, _, h, max, hd} = Nx.shape(cache)
    d = c.d
    positions = Nx.iota({t}) + pos
    x = Nx.take(params["wte"], tokens) + Nx.take(params["wpe"], positions)
    # key position j is visible to the query at position pos + i when j <= pos + i
    visible = Nx.less_equal(Nx.iota({1, 1, 1, max}), Nx.reshape(positions, {1, 1, t, 1}))

    {x, cache} = layers(params, x, cache, visible, pos, b: b, t: t, h: h, hd: hd, d: d, n: c.layers)

    x = Bench.Gpt2.layer_norm(x, params["ln_f_g"], params["ln_f_b"])
    last = Nx.slice_along_axis(x, t - 1, 1, axis: 1) |> Nx.reshape({b, d})
    {Nx.dot(last, [1], params["wte"], [1]), cache}
  end

  deftransformp layers(params, x, cache, visible, pos, o) do
    Enum.reduce(0..(o[:n] - 1), {x, cache}, fn i, {x, cache} ->
      block(params["h#{i}"], x, cache, visible, pos, Keyword.put(o, :layer, i))
    end)
  end

  defn block(p, x, cache, visible, pos, opts \\ []) do
    {b, t, h, hd, d, i} = {opts[:b], opts[:t], opts[:h], opts[:hd], opts[:d], opts[:layer]}
    n = Bench.Gpt2.layer_norm(x, p["ln1_g"], p["ln1_b"])
    qkv = Nx.dot(n, p["w_qkv"]) + p["b_qkv"]
    heads = fn u -> u |> Nx.reshape({b, t, h, hd}) |> Nx.transpose(axes: [0, 2, 1, 3]) end
    q = heads.(Nx.slice_along_axis(qkv, 0, d, axis: 2))
    k = heads.(Nx.slice_along_axis(qkv, d, d, axis: 2))
    v = heads.(Nx.slice_along_axis(qkv, 2 * d, d, axis: 2))
    zero = Nx.tensor(0, type: :s32)
    pos = Nx.as_type(pos, :s32)
    cache = Nx.put_slice(cache, [i, 0, zero, zero, pos, zero], Nx.reshape(k, {1, 1, b, h, t, hd}))
    cache = Nx.put_slice(cache, [i, 1, zero, zero, pos, zero], Nx.reshape(v, {1, 1, b, h, t, hd}))
    {_, _, _, _, max, _} = Nx.shape(cache)
    keys = cache[[i, 0]] |> Nx.reshape({b, h, max, hd})
    values = cache[[i, 1]] |> Nx.reshape({b, h, max, hd})
    scores = Nx.dot(q, [3], [0, 1], keys, [3], [0, 1]) / Nx.sqrt(hd)
    scores = Nx.select(Nx.broadcast(visible, {b, h, t, max}), scores, -1.0e9)
    e = Nx.exp(scores - Nx.reduce_max(scores, axes: [3], keep_axes: true))
    probs = e / Nx.sum(e, axes: [3], keep_axes: true)
    att = Nx.dot(probs, [3], [0, 1], values, [2], [0, 1])
    att = att |> Nx.transpose(axes: [0, 2, 1, 3]) |> Nx.reshape({b, t, d})
    x = x + Nx.dot(att, p["w_o"]) + p["b_o"]
    n = Bench.Gpt2.layer_norm(x, p["ln2_g"], p["ln2_b"])
    {x + Nx.dot(Bench.Gpt2.gelu(Nx.dot(n, p["w_1"]) + p["b_1"]), p["w_2"]) + p["b_2"], cache}
  end

  @doc "The prompt's pass, then `new` greedy tokens fed back one by one: {batch, new} ids."
  defn generate(params, prompt, opts \\ []) do
    c = opts[:c]
    {b, plen} = Nx.shape(prompt)
    hd = div(c.d, c.heads)
    cache = Nx.broadcast(0.0, {c.layers, 2, b, c.heads, plen + c.new, hd})
    {logits, cache} = step(params, prompt, 0, cache, c: c)
    first = Nx.argmax(logits, axis: 1) |> Nx.as_type(:s32)
    out = Nx.broadcast(Nx.tensor(0, type: :s32), {b, c.new})
    out = Nx.put_slice(out, [0, 0], Nx.reshape(first, {b, 1}))

    {_, _, out, _, _} =
      while {i = 1, first, out, cache, params}, i < c.new do
        {logits, cache} = step(params, Nx.reshape(first, {b, 1}), plen + i - 1, cache, c: c)
        next = Nx.argmax(logits, axis: 1) |> Nx.as_type(:s32)
        {i + 1, next, Nx.put_slice(out, [0, i], Nx.reshape(next, {b, 1})), cache, params}
      end

    out
  end
end

rounds = String.to_integer(System.get_env("EX_BURN_BENCH_ROUNDS", "5"))
weights_file = Path.join(System.tmp_dir!(), "ex_burn_gpt2gen_#{size}_weights.f32")
{params, _} = Bench.Gpt2.weights(Bench.Gpt2.shapes(cfg, cfg.ctx), 7, weights_file)

prompt = fn b -> Bench.Gpt2.tokens(b, cfg.prompt, cfg.vocab) end

gen = Nx.Defn.jit(&Bench.Gpt2Generate.generate(&1, &2, c: cfg), compiler: ExBurn.Compiler)

ours =
  for b <- [1, 16], into: %{} do
    p = prompt.(b)
    {first_us, _} = :timer.tc(fn -> Nx.to_binary(gen.(params, p)) end)
    IO.puts("batch #{b}: first call #{Float.round(first_us / 1.0e6, 2)} s")
    # the chosen tokens are read back: generation is done when the host has them
    us = Bench.median_us(fn -> Nx.to_binary(gen.(params, p)) end, rounds, 1)
    ids = gen.(params, p) |> Nx.to_flat_list()
    {b, %{ms: us / 1000, first_s: first_us / 1.0e6, ids: ids}}
  end

peer =
  Bench.peers(
    Path.join(__DIR__, "gpt2_generate.py"),
    "torch jax",
    [size, weights_file, to_string(rounds)],
    ~S"\w+_(?:ms|ids)_\d+"
  )

names = [{"torch", "PyTorch eager (static cache, Python loop)"}, {"jax", "JAX (jax.jit, fori_loop)"}]

agree = fn b, name ->
  case peer["#{name}_ids_#{b}"] do
    nil ->
      "-"

    v ->
      theirs = v |> String.split(" ") |> Enum.map(&String.to_integer/1)
      same = Enum.zip(ours[b].ids, theirs) |> Enum.count(fn {x, y} -> x == y end)
      "#{same}/#{length(theirs)}"
  end
end

tps = fn b, ms -> round(b * cfg.new / ms * 1000) end

rows =
  for b <- [1, 16] do
    ms = ours[b].ms

    peer_ms =
      Enum.map(names, fn {n, _} ->
        with v when is_binary(v) <- peer["#{n}_ms_#{b}"], do: String.to_float(v)
      end)

    best = peer_ms |> Enum.reject(&is_nil/1) |> Enum.min(fn -> nil end)

    [to_string(b), "#{Float.round(ms, 1)} ms (#{tps.(b, ms)} tokens/s)"] ++
      Enum.map(peer_ms, fn
        nil -> "-"
        v -> "#{Float.round(v, 1)} ms (#{tps.(b, v)} tokens/s)"
      end) ++
      [if(best, do: "#{Float.round(best / ms, 2)}x", else: "-")] ++
      Enum.map(names, fn {n, _} -> agree.(b, n) end)
  end

IO.inspect(Map.new(ours, fn {b, o} -> {b, Map.delete(o, :ids)} end), label: "ExBurn")

Bench.write(
  "bench/results/gpt2_generate_#{ExBurn.Device.family(device)}.md",
  "GPT-2 #{size} greedy generation with a key/value cache (#{cfg.prompt}-token prompt, #{cfg.new} new tokens), f32 / TF32, on #{inspect(device)}",
  "Machine: #{Bench.machine()}. Device: #{ExBurn.Native.call(:device_info, [device]).name}. " <>
    "Run: `EX_BURN_BENCH_DEVICE=... bin/nx-run bench/gpt2_generate.exs` (#{Date.utc_today()}). " <>
    "Time of one whole generation (prompt pass and #{cfg.new} tokens, ids read back), median of " <>
    "#{rounds} after one warm-up; tokens/s counts new tokens of every sequence. First ExBurn " <>
    "call (tracing, compilation): batch 1 #{Float.round(ours[1].first_s, 1)} s, batch 16 " <>
    "#{Float.round(ours[16].first_s, 1)} s. The last columns: how many of ExBurn's chosen tokens " <>
    "each peer chose too (random weights leave close logits, where TF32 rounding can pick another " <>
    "token and the sequences part).",
  ["batch", "ExBurn (one Nx.Defn.jit program, `while`)"] ++
    Enum.map(names, &elem(&1, 1)) ++
    ["ExBurn / best peer"] ++ Enum.map(names, fn {n, _} -> "same tokens as #{n}" end),
  rows
)
