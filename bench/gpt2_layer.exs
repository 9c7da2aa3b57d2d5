# One GPT-2-small transformer layer (pre-layer-norm, d 768, 12 heads, MLP 3072, causal
# attention, tanh GELU), batch 8 x 512 tokens, f32, through `Nx.Defn.jit` with
# `ExBurn.Compiler`: forward, and forward + backward (`value_and_grad` of mean(y^2) with respect
# to every parameter), against PyTorch (eager, scaled_dot_product_attention) and JAX (jax.jit)
# on the same device in the same run (bench/gpt2_layer.py; TF32 matmuls allowed everywhere, as
# ExBurn's default `dot_precision`). Medians after warm-up; the first call (compilation, kernel
# compilation, autotuning) is reported separately. Needs Nx.
#
#     EX_BURN_BENCH_DEVICE=cuda mix run bench/gpt2_layer.exs
#
# EX_BURN_BENCH_PEERS (default "torch jax"; empty: no peers), EX_BURN_BENCH_ROUNDS (20); the
# CUDA memory pools follow the engine's `cuda_memory` setting (EX_BURN_CUDA_MEMORY, see
# native/ex_burn_cuda/src/memory.rs).
#
# Results: bench/results/gpt2_layer_<device>.md
Code.require_file("support/bench.exs", __DIR__)
Code.require_file("support/gpt2.exs", __DIR__)
Application.ensure_all_started(:nx)

device = ExBurn.Device.normalize!(String.to_atom(System.get_env("EX_BURN_BENCH_DEVICE", "cpu")))
Nx.default_backend({ExBurn.Backend, device: device})

defmodule Bench.Gpt2Layer do
  import Nx.Defn

  @b 8
  @s 512
  @d 768
  @heads 12
  @hd 64

  defn(heads(t), do: t |> Nx.reshape({@b, @s, @heads, @hd}) |> Nx.transpose(axes: [0, 2, 1, 3]))

  defn layer(p, x) do
    h = Bench.Gpt2.layer_norm(x, p.ln1_g, p.ln1_b)
    qkv = Nx.dot(h, p.w_qkv) + p.b_qkv
    q = heads(Nx.slice_along_axis(qkv, 0, @d, axis: 2))
    k = heads(Nx.slice_along_axis(qkv, @d, @d, axis: 2))
    v = heads(Nx.slice_along_axis(qkv, 2 * @d, @d, axis: 2))
    scores = Nx.dot(q, [3], [0, 1], k, [3], [0, 1]) / 8.0
    causal = Nx.greater_equal(Nx.iota({@s, 1}), Nx.iota({1, @s}))
    scores = Nx.select(Nx.broadcast(causal, {@b, @heads, @s, @s}), scores, -1.0e9)
    e = Nx.exp(scores - Nx.reduce_max(scores, axes: [3], keep_axes: true))
    probs = e / Nx.sum(e, axes: [3], keep_axes: true)
    att = Nx.dot(probs, [3], [0, 1], v, [2], [0, 1])
    att = att |> Nx.transpose(axes: [0, 2, 1, 3]) |> Nx.reshape({@b, @s, @d})
    x = x + Nx.dot(att, p.w_o) + p.b_o
    h = Bench.Gpt2.layer_norm(x, p.ln2_g, p.ln2_b)
    x + Nx.dot(Bench.Gpt2.gelu(Nx.dot(h, p.w_1) + p.b_1), p.w_2) + p.b_2
  end

  defn(loss_and_grad(p, x), do: value_and_grad(p, fn p -> Nx.mean(layer(p, x) ** 2) end))
end

rounds = String.to_integer(System.get_env("EX_BURN_BENCH_ROUNDS", "20"))
key = Nx.Random.key(0)
{d, f} = {768, 3072}

normal = fn shape, i ->
  Nx.multiply(elem(Nx.Random.normal(Nx.Random.fold_in(key, i), shape: shape), 0), 0.02)
end

params = %{
  ln1_g: Nx.broadcast(1.0, {d}),
  ln1_b: Nx.broadcast(0.0, {d}),
  w_qkv: normal.({d, 3 * d}, 1),
  b_qkv: normal.({3 * d}, 2),
  w_o: normal.({d, d}, 3),
  b_o: normal.({d}, 4),
  ln2_g: Nx.broadcast(1.0, {d}),
  ln2_b: Nx.broadcast(0.0, {d}),
  w_1: normal.({d, f}, 5),
  b_1: normal.({f}, 6),
  w_2: normal.({f, d}, 7),
  b_2: normal.({d}, 8)
}

x = elem(Nx.Random.normal(Nx.Random.fold_in(key, 9), shape: {8, 512, d}), 0)

# The work is done when the device has finished everything queued (as the peers'
# `synchronize`); reading one element of every result leaf instead (EX_BURN_BENCH_SYNC=read)
# adds one device round trip per leaf (13 for the gradients).
sync =
  case System.get_env("EX_BURN_BENCH_SYNC", "device") do
    "read" ->
      fn out -> [out] |> Nx.Defn.Composite.flatten_list() |> Enum.each(&Nx.to_binary(&1, limit: 1)) end

    _ ->
      fn _out -> ExBurn.Device.synchronize(device) end
  end

fwd = Nx.Defn.jit(&Bench.Gpt2Layer.layer/2, compiler: ExBurn.Compiler)
fwd_bwd = Nx.Defn.jit(&Bench.Gpt2Layer.loss_and_grad/2, compiler: ExBurn.Compiler)

# The process's peak GPU memory over all runs below: nvidia-smi sampled every 100 ms.
sampler = if ExBurn.Device.family(device) == :cuda, do: Bench.gpu_sampler()

first = fn f -> f |> :timer.tc() |> elem(0) |> Kernel./(1.0e6) end
first_fwd = first.(fn -> sync.(fwd.(params, x)) end)
first_bwd = first.(fn -> sync.(fwd_bwd.(params, x)) end)
ms = fn f -> Bench.median_us(fn -> sync.(f.()) end, rounds, 3) / 1000 end
ours = %{"fwd" => ms.(fn -> fwd.(params, x) end), "fwd_bwd" => ms.(fn -> fwd_bwd.(params, x) end)}

# Where the time goes: how long the call takes to return (the host has queued the work; on a
# GPU the kernels may still run) against the whole call with its results read back. Equal
# medians mean the host is the bottleneck (the device waits for work), not the kernels.
host_ms = fn f ->
  times =
    for _ <- 1..rounds do
      t0 = System.monotonic_time(:microsecond)
      out = f.()
      t1 = System.monotonic_time(:microsecond)
      sync.(out)
      t1 - t0
    end

  times |> Enum.sort() |> Enum.at(div(rounds, 2)) |> Kernel./(1000)
end

host = %{"fwd" => host_ms.(fn -> fwd.(params, x) end), "fwd_bwd" => host_ms.(fn -> fwd_bwd.(params, x) end)}

ours_mib = if ExBurn.Device.family(device) == :cuda, do: Bench.gpu_mib()
peak_mib = if sampler, do: Bench.gpu_peak(sampler)
memory_config = ExBurn.engine_config().cuda_memory

# Each peer in its own process (so that their memory is measured apart).
peer =
  for name <- String.split(System.get_env("EX_BURN_BENCH_PEERS", "torch jax")), reduce: %{} do
    acc ->
      case System.cmd("python3", [Path.join(__DIR__, "gpt2_layer.py"), to_string(rounds), name],
             stderr_to_stdout: true
           ) do
        {out, 0} ->
          for line <- String.split(out, "\n", trim: true),
              [_, key, v] <- [Regex.run(~r/^((?:torch|jax)_(?:fwd|fwd_bwd|mem)) (\S+)$/, line)],
              into: acc,
              do:
                {key, if(String.ends_with?(key, "_mem"), do: String.to_integer(v), else: String.to_float(v))}

        {out, _} ->
          IO.puts("peer #{name} unavailable:\n" <> out) && acc
      end
  end

rows =
  for {key, label} <- [{"fwd", "forward"}, {"fwd_bwd", "forward + backward (value_and_grad)"}] do
    t = ours[key]
    best = [peer["torch_" <> key], peer["jax_" <> key]] |> Enum.reject(&is_nil/1) |> Enum.min(fn -> nil end)
    cell = fn v -> if v, do: "#{Float.round(v, 3)} ms", else: "-" end

    [
      label,
      "#{Float.round(t, 3)} ms",
      cell.(peer["torch_" <> key]),
      cell.(peer["jax_" <> key]),
      if(best, do: "#{Float.round(best / t, 2)}x", else: "-")
    ]
  end

Bench.write(
  "bench/results/gpt2_layer_#{ExBurn.Device.family(device)}.md",
  "GPT-2-small layer (b8 x s512, d768, 12 heads, MLP 3072), f32, on #{inspect(device)}",
  "Machine: #{Bench.machine()}. Device: #{ExBurn.Native.call(:device_info, [device]).name}. " <>
    "Run: `EX_BURN_BENCH_DEVICE=... mix run bench/gpt2_layer.exs` (#{Date.utc_today()}). " <>
    "Medians of #{rounds} calls after 3 warm-up calls; each call ends when the device has " <>
    "finished (ExBurn: `ExBurn.Device.synchronize/1`#{if System.get_env("EX_BURN_BENCH_SYNC") == "read", do: " replaced by reading one element of every result", else: ""}; the peers: their synchronize). Ratio = best peer time / ExBurn time (> 1: ExBurn faster).\n\n" <>
    "First call (tracing, compilation, kernel compilation, autotuning): forward #{Float.round(first_fwd, 1)} s, " <>
    "forward + backward #{Float.round(first_bwd, 1)} s. Host time until the call returns (work queued, " <>
    "results not read; medians): forward #{Float.round(host["fwd"], 3)} ms, forward + backward " <>
    "#{Float.round(host["fwd_bwd"], 3)} ms." <>
    if(ours_mib,
      do:
        " GPU memory of the process (nvidia-smi, CUDA context included): ExBurn " <>
          "(`cuda_memory: #{inspect(memory_config)}`) peak #{peak_mib} MiB (sampled every 100 ms), " <>
          "#{ours_mib} MiB after the runs; after their runs PyTorch #{peer["torch_mem"] || "-"} MiB, " <>
          "JAX (no preallocation) #{peer["jax_mem"] || "-"} MiB.",
      else: ""
    ),
  [
    "case",
    "ExBurn (Nx.Defn.jit, ExBurn.Compiler)",
    "PyTorch eager (SDPA)",
    "JAX (jax.jit)",
    "ExBurn / best peer"
  ],
  rows
)
