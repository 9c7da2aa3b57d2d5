# Core engine benchmarks: NIF round trip of a small eager op, and f32 matmul throughput,
# each against a named peer measured in the same run. Results: bench/results/core_<device>.md
#
#     mix run bench/core.exs            # CPU
#     EX_BURN_BENCH_DEVICE=cuda mix run bench/core.exs
Code.require_file("support/bench.exs", __DIR__)
alias ExBurn.{BurnBridge, Tensor}

device = ExBurn.Device.normalize!(String.to_atom(System.get_env("EX_BURN_BENCH_DEVICE", "cpu")))
gpu? = device != :cpu
# A call is done when its result is on the host (CPU) or when the device has finished all its
# work (GPU: `ExBurn.Device.synchronize/1`, as the peer's `torch.cuda.synchronize()`).
sync = fn t -> if gpu?, do: ExBurn.Device.synchronize(device), else: Tensor.to_binary(t, limit: 1) end

a = Tensor.new([1.0, 2.0, 3.0, 4.0], device: device)
b = Tensor.new([5.0, 6.0, 7.0, 8.0], device: device)

info_ns = Bench.median_call_ns(fn -> ExBurn.Nif.tensor_info(a.ref) end, 200, 1000)
raw_ns = Bench.median_call_ns(fn -> ExBurn.Nif.eval_op(:add, [a.ref, b.ref], device) end, 200, 1000)
add_ns = Bench.median_call_ns(fn -> BurnBridge.add(a, b) end, 200, 1000)

rows = [
  ["metadata NIF (`tensor_info`, the NIF floor)", "#{round(info_ns)} ns", "1.0x"],
  ["eager add, raw NIF call (`eval_op`)", "#{round(raw_ns)} ns", "#{Float.round(raw_ns / info_ns, 1)}x"],
  [
    "eager add, `BurnBridge.add/2` (struct in and out)",
    "#{round(add_ns)} ns",
    "#{Float.round(add_ns / info_ns, 1)}x"
  ]
]

gflops = fn n, us -> Float.round(2 * n ** 3 / us / 1000, 1) end
gpu_batch = 10

# The peer in the same run: NumPy (OpenBLAS) on the CPU; PyTorch on the same GPU, at the same
# precision: f32 inputs with TF32 tensor cores allowed (ExBurn's default `dot_precision`),
# full f32 (`precision: :highest` against `allow_tf32 = False`), bf16 inputs.
peer = fn n, runs, kind ->
  code =
    case device do
      :cpu ->
        """
        import numpy as np, time
        a = np.random.rand(#{n}, #{n}).astype(np.float32); b = np.random.rand(#{n}, #{n}).astype(np.float32)
        a @ b
        ts = []
        for _ in range(#{runs}):
            t = time.perf_counter(); a @ b; ts.append(time.perf_counter() - t)
        ts.sort(); print(ts[len(ts)//2] * 1e6)
        """

      _gpu ->
        {tf32, dtype} =
          case kind do
            :tf32 -> {"True", "torch.float32"}
            :fp32 -> {"False", "torch.float32"}
            :bf16 -> {"True", "torch.bfloat16"}
          end

        """
        import torch, time
        torch.backends.cuda.matmul.allow_tf32 = #{tf32}
        a = torch.rand(#{n}, #{n}, device="cuda", dtype=#{dtype}); b = torch.rand(#{n}, #{n}, device="cuda", dtype=#{dtype})
        for _ in range(3): a @ b
        torch.cuda.synchronize(); ts = []
        for _ in range(#{runs}):
            t = time.perf_counter()
            for _ in range(#{gpu_batch}): c = a @ b
            torch.cuda.synchronize(); ts.append((time.perf_counter() - t) / #{gpu_batch})
        ts.sort(); print(ts[len(ts)//2] * 1e6)
        """
    end

  name =
    case {device, kind} do
      {:cpu, _} -> "NumPy (OpenBLAS)"
      {_, :tf32} -> "PyTorch (TF32 allowed)"
      {_, :fp32} -> "PyTorch (full f32)"
      {_, :bf16} -> "PyTorch (bf16)"
    end

  {name, Bench.python(code)}
end

cases =
  if device == :cpu,
    do: [{1024, :tf32}, {4096, :tf32}],
    else: [{1024, :tf32}, {4096, :tf32}, {8192, :tf32}, {4096, :fp32}, {8192, :bf16}]

matmul_rows =
  for {n, kind} <- cases do
    type = if kind == :bf16, do: {:bf, 16}, else: {:f, 32}
    x = BurnBridge.random_uniform({n, n}, seed: 1, device: device) |> BurnBridge.as_type(type)
    y = BurnBridge.random_uniform({n, n}, seed: 2, device: device) |> BurnBridge.as_type(type)
    opts = if kind == :fp32, do: [precision: :highest], else: []
    runs = if n > 2048 and device == :cpu, do: 3, else: 7
    # first call: kernel compilation or library initialisation
    sync.(BurnBridge.matmul(x, y, opts))

    # on a GPU: batches of back-to-back calls, each batch ended by one synchronisation (as the
    # peer), per call; the products are queued while the host goes on
    batch = if gpu?, do: gpu_batch, else: 1

    us =
      Bench.median_us(
        fn -> sync.(Enum.reduce(1..batch, nil, fn _, _ -> BurnBridge.matmul(x, y, opts) end)) end,
        runs
      ) / batch

    {peer_col, ratio} =
      case peer.(n, runs, kind) do
        {name, out} when is_binary(out) ->
          {peer_us, _} = Float.parse(out)
          {"#{name} #{gflops.(n, peer_us)} GFLOP/s", "#{Float.round(peer_us / us, 2)}x"}

        {name, nil} ->
          {"n/a (#{name} missing)", "-"}
      end

    label =
      case kind do
        :tf32 -> "f32 matmul #{n}x#{n}"
        :fp32 -> "f32 matmul #{n}x#{n}, `precision: :highest`"
        :bf16 -> "bf16 matmul #{n}x#{n}"
      end

    [label, "#{gflops.(n, us)} GFLOP/s (#{Float.round(us / 1000, 2)} ms)", peer_col, ratio]
  end

Bench.write(
  "bench/results/core_#{ExBurn.Device.family(device)}.md",
  "Core engine on #{inspect(device)}",
  """
  Machine: #{Bench.machine()}. Device: #{ExBurn.Native.call(:device_info, [device]).name}.
  Run: `mix run bench/core.exs` (#{Date.utc_today()}). Medians; ratios are against the peer in the same run.

  ## NIF round trip (goal: eager add <= 2 us)
  """,
  ["call", "median per call", "vs NIF floor"],
  rows
)

# GPU memory while a loop drops its results: 40 products of 8192^2 f32 (256 MiB each), every
# result dropped at once; the process's peak (nvidia-smi every 100 ms) with ExBurn's prompt
# collection (`collect_after`, default) and without it (`:never`, the BEAM's own garbage
# collection only), against the same loop in PyTorch and JAX (bench/matmul_loop.py).
memory_rows =
  if gpu? do
    n = 8192
    m = BurnBridge.random_uniform({n, n}, seed: 3, device: device)

    ours =
      for setting <- [268_435_456, :never] do
        ExBurn.configure!(default_device: device, collect_after: setting)

        task =
          Task.async(fn ->
            sampler = Bench.gpu_sampler()
            for _ <- 1..40, do: BurnBridge.matmul(m, m)
            ExBurn.Device.synchronize(device)
            Bench.gpu_peak(sampler)
          end)

        {setting, Task.await(task, :infinity)}
      end

    ExBurn.configure!(default_device: device)

    peers =
      for name <- ["torch", "jax"], into: %{} do
        out =
          Bench.python(
            "import runpy, sys; sys.argv = ['x', '#{name}', '#{n}', '40']; runpy.run_path('#{Path.join(__DIR__, "matmul_loop.py")}')"
          )

        {name,
         with(
           o when is_binary(o) <- out,
           [_, v] <- Regex.run(~r/_loop_peak (\d+)/, o),
           do: v,
           else: (_ -> "-")
         )}
      end

    [
      [
        "GPU memory, 40 products of 8192^2 f32, each result dropped (process peak)",
        "#{elem(List.keyfind(ours, 268_435_456, 0), 1)} MiB (`collect_after` 256 MiB, default); " <>
          "#{elem(List.keyfind(ours, :never, 0), 1)} MiB (`:never`)",
        "PyTorch #{peers["torch"]} MiB, JAX #{peers["jax"]} MiB",
        "-"
      ]
    ]
  else
    []
  end

Bench.write(
  "bench/results/core_#{ExBurn.Device.family(device)}_matmul.md",
  "Matrix products on #{inspect(device)}",
  "Machine: #{Bench.machine()}. Device: #{ExBurn.Native.call(:device_info, [device]).name}. " <>
    "Run: `mix run bench/core.exs` (#{Date.utc_today()}). Ratio > 1 means ExBurn is faster than the peer in the same run. " <>
    if(gpu?,
      do:
        "Per product: medians of rounds of #{gpu_batch} back-to-back calls, each round ended by one " <>
          "synchronisation (ExBurn: `ExBurn.Device.synchronize/1`; PyTorch: `torch.cuda.synchronize()`).",
      else: "Per product: medians of single calls, each ending with one element read back."
    ),
  ["case", "ExBurn", "peer", "ExBurn / peer speed"],
  matmul_rows ++ memory_rows
)
