# Core engine benchmarks: NIF round trip of a small eager op, and f32 matmul throughput,
# each against a named peer measured in the same run. Results: bench/results/core_<device>.md
#
#     mix run bench/core.exs            # CPU
#     EX_BURN_BENCH_DEVICE=cuda mix run bench/core.exs
Code.require_file("support/bench.exs", __DIR__)
alias ExBurn.{BurnBridge, Tensor}

device = ExBurn.Device.normalize!(String.to_atom(System.get_env("EX_BURN_BENCH_DEVICE", "cpu")))
sync = fn t -> Tensor.to_binary(t, limit: 1) end

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

# The peer in the same run: NumPy (OpenBLAS) on the CPU; PyTorch on the same GPU with f32 inputs
# and TF32 tensor cores allowed, as Burn's CUDA matmul kernels use them.
peer = fn n, runs ->
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
        """
        import torch, time
        torch.backends.cuda.matmul.allow_tf32 = True
        a = torch.rand(#{n}, #{n}, device="cuda"); b = torch.rand(#{n}, #{n}, device="cuda")
        for _ in range(3): a @ b
        torch.cuda.synchronize(); ts = []
        for _ in range(#{runs}):
            t = time.perf_counter(); c = a @ b; torch.cuda.synchronize(); ts.append(time.perf_counter() - t)
        ts.sort(); print(ts[len(ts)//2] * 1e6)
        """
    end

  name = if device == :cpu, do: "NumPy (OpenBLAS)", else: "PyTorch (TF32 allowed)"
  {name, Bench.python(code)}
end

matmul_rows =
  for n <- [1024, 4096] do
    x = BurnBridge.random_uniform({n, n}, seed: 1, device: device)
    y = BurnBridge.random_uniform({n, n}, seed: 2, device: device)
    runs = if n > 2048 and device == :cpu, do: 3, else: 7
    us = Bench.median_us(fn -> sync.(BurnBridge.matmul(x, y)) end, runs)

    {peer_col, ratio} =
      case peer.(n, runs) do
        {name, out} when is_binary(out) ->
          {peer_us, _} = Float.parse(out)
          {"#{name} #{gflops.(n, peer_us)} GFLOP/s", "#{Float.round(peer_us / us, 2)}x"}

        {name, nil} ->
          {"n/a (#{name} missing)", "-"}
      end

    ["f32 matmul #{n}x#{n}", "#{gflops.(n, us)} GFLOP/s (#{Float.round(us / 1000, 2)} ms)", peer_col, ratio]
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

Bench.write(
  "bench/results/core_#{ExBurn.Device.family(device)}_matmul.md",
  "f32 matmul on #{inspect(device)}",
  "Machine: #{Bench.machine()}. Device: #{ExBurn.Native.call(:device_info, [device]).name}. Ratio > 1 means ExBurn is faster than the peer in the same run.",
  ["case", "ExBurn", "peer", "ExBurn / peer speed"],
  matmul_rows
)
