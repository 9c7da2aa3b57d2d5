# ExBurn quickstart: tensors of several types, element-wise math, reductions and a matmul on
# the default device (the CPU unless configured otherwise). Run with:
#
#     bin/setup && mix run examples/quickstart.exs
alias ExBurn.{BurnBridge, Tensor}

IO.puts(ExBurn.summary())

# Tensors of several types, from lists or binaries.
f32 = Tensor.new([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
s8 = Tensor.new([120, -120, 7], type: :s8)
bf16 = Tensor.new([0.5, 1.5, 2.5], type: :bf16)
u16 = Tensor.from_binary(<<1::16-little, 2::16-little, 65535::16-little>>, {3}, {:u, 16})
IO.inspect([f32, s8, bf16, u16], label: "tensors")

# Element-wise math with Nx semantics: integers wrap, numbers take the tensor's type.
IO.inspect(BurnBridge.add(s8, 10), label: "s8 + 10 (wraps)")
IO.inspect(BurnBridge.exp(bf16), label: "exp(bf16)")
IO.inspect(BurnBridge.sqrt(u16), label: "sqrt(u16) -> f32")
IO.inspect(BurnBridge.round(Tensor.new([0.5, 1.5, -2.5])), label: "round half away from zero")

# Reductions and a matmul.
IO.inspect(BurnBridge.sum(f32, axes: [1]), label: "row sums")
IO.inspect(BurnBridge.argmax(f32, axis: 0), label: "argmax over rows")
IO.inspect(BurnBridge.matmul(f32, BurnBridge.transpose(f32)), label: "f32 @ f32^T")

# A larger matmul, timed.
n = 1024
a = BurnBridge.random_uniform({n, n}, seed: 1)
b = BurnBridge.random_normal({n, n}, seed: 2)

{us, c} =
  :timer.tc(fn ->
    c = BurnBridge.matmul(a, b)
    _ = Tensor.to_binary(c, limit: 1)
    c
  end)

IO.puts(
  "#{n}x#{n} f32 matmul: #{Float.round(us / 1000, 1)} ms (#{Float.round(2 * n ** 3 / us / 1000, 1)} GFLOP/s)"
)

IO.inspect(BurnBridge.mean(c), label: "mean of the product")
:ok = ExBurn.smoke_test()
IO.puts("quickstart finished")
