# The run of a release artifact on its own machine (or emulator), used by bin/release-check:
# loads the library, runs ExBurn.smoke_test/0, a matmul with exact expected values, and a short
# deterministic training run whose losses are printed to 8 significant digits so that two
# architectures can be compared. Needs only ExBurn (no Nx, no Hex). Exit status 1 on any wrong
# number.
#
#     elixir -pa <ex_burn>/ebin bin/release-smoke.exs
{:ok, _} = Application.ensure_all_started(:ex_burn)
alias ExBurn.{BurnBridge, Layers, Model, Tensor, Training}

check = fn
  true, _what -> :ok
  false, what -> IO.puts("FAILED: #{what}") && System.halt(1)
end

IO.puts("architecture #{:erlang.system_info(:system_architecture)} (OTP #{System.otp_release()})")
info = ExBurn.device_info()
IO.puts("library #{info.target} native #{info.version} NIF #{info.nif_version} backends #{Enum.join(info.backends, ",")}")
IO.puts("smoke_test #{inspect(ExBurn.smoke_test())}")
check.(ExBurn.smoke_test() == :ok, "smoke_test")

# f32 matmul of small integers: exact in any summation order.
a = Tensor.new(for(i <- 0..3, do: for(j <- 0..4, do: i * 5 + j - 7.0)))
b = Tensor.new(for(i <- 0..4, do: for(j <- 0..2, do: rem(i * 3 + j * 2, 7) - 3.0)))
got = a |> BurnBridge.matmul(b) |> Tensor.to_list()
a_l = Tensor.to_list(a)
b_l = Tensor.to_list(b)

want =
  for row <- a_l do
    for j <- 0..2, do: row |> Enum.with_index() |> Enum.map(fn {x, k} -> x * Enum.at(Enum.at(b_l, k), j) end) |> Enum.sum()
  end

IO.puts("matmul #{inspect(got)}")
check.(got == want, "matmul: expected #{inspect(want)}")

# s64 arithmetic and a reduction.
ints = Tensor.new(Enum.to_list(1..1000), type: :s64)
sum = ints |> BurnBridge.multiply(ints) |> BurnBridge.sum() |> Tensor.to_list()
IO.puts("sum of squares 1..1000 #{sum}")
check.(sum == 333_833_500, "s64 sum")

# Training: fixed data from a formula (no host RNG), fixed initialisation seed, no shuffle,
# no dropout. The same on every machine up to float summation order.
n = 256
xs = for i <- 0..(n - 1), do: for(j <- 0..7, do: :math.sin(i * 0.37 + j * 1.3))
ys = for [x0, x1, x2 | _] <- xs, do: if(x0 + x1 * x2 > 0.1, do: 1, else: if(x0 > x1, do: 2, else: 0))
x = Tensor.new(xs)
y = Tensor.new(ys, type: :s64)

model =
  Layers.input("x", shape: {nil, 8})
  |> Layers.dense(16, activation: :tanh)
  |> Layers.dense(3)
  |> Model.compile(loss: :cross_entropy, optimizer: :adam, learning_rate: 0.01, seed: 7)

model = Training.fit(model, {x, y}, epochs: 5, batch_size: 32, shuffle: false, verbose: false)

for {%{loss: loss}, epoch} <- Enum.with_index(model.history, 1) do
  IO.puts("loss epoch #{epoch} #{:erlang.float_to_binary(loss, [{:scientific, 7}])}")
end

losses = Enum.map(model.history, & &1.loss)
check.(length(losses) == 5 and Enum.all?(losses, &is_float/1), "five finite losses")
check.(List.last(losses) < hd(losses), "the loss decreases")
IO.puts("release smoke: ok")
