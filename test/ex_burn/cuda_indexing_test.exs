if Code.ensure_loaded?(Nx) do
  defmodule ExBurn.CudaIndexingTest do
    # Scatter-adds and windows at device-computed positions on an NVIDIA GPU, written as Nx and
    # Axon users write them. Scatter-adds are f32 additions in the order of the updates on every
    # device: the GPU's results equal the CPU's (and an in-order reference) bit for bit, and the
    # Evaluator's (which sums repeated indices in f64) closely. Windows are copies: equal to the
    # Evaluator's. Runs only where the loaded library has a usable CUDA device.
    use ExUnit.Case, async: false

    @moduletag :nx
    @moduletag :cuda

    @gpu {ExBurn.Backend, device: {:cuda, 0}}

    # values of both signs spread over many binades, so that the order of additions shows
    defp spread(n, seed) do
      :rand.seed(:exsss, {seed, seed + 1, seed + 2})

      for _ <- 1..n do
        (:rand.uniform() - 0.5) * :math.pow(2, :rand.uniform(30) - 15)
      end
    end

    defp ids(m, max, seed) do
      :rand.seed(:exsss, {seed, 7, 11})
      # a third of them on one row, as frequent tokens are
      for j <- 1..m, do: if(rem(j, 3) == 0, do: div(max, 2), else: :rand.uniform(max) - 1)
    end

    defp on_gpu(t), do: Nx.backend_transfer(t, @gpu)
    defp on_cpu(t), do: Nx.backend_transfer(t, {ExBurn.Backend, device: :cpu})
    defp bits(t), do: t |> Nx.backend_copy(Nx.BinaryBackend) |> Nx.to_binary()

    defp f32(x), do: with(<<y::float-32>> <- <<x::float-32>>, do: y)

    # row `r` of `base` plus each update for it, one f32 addition at a time in the order of the
    # updates (what the engine computes on every device; Nx.BinaryBackend sums repeats in f64)
    defp in_order(base, rows, upd) do
      cols = elem(Nx.shape(base), 1)
      start = base |> Nx.to_flat_list() |> Enum.map(&f32/1) |> Enum.chunk_every(cols)
      start = start |> Enum.with_index() |> Map.new(fn {row, r} -> {r, row} end)

      rows
      |> Enum.zip(Nx.to_list(upd))
      |> Enum.reduce(start, fn {r, u}, acc ->
        Map.update!(acc, r, fn row -> Enum.zip_with(row, u, &f32(&1 + &2)) end)
      end)
      |> Enum.sort()
      |> Enum.flat_map(fn {_, row} -> row end)
      |> Nx.tensor(type: :f32)
      |> Nx.reshape(Nx.shape(base))
    end

    test "indexed_add of rows and of elements adds in the order of the updates, as on the CPU" do
      for {rows, cols, m, seed} <- [{1, 1, 5, 1}, {37, 5, 400, 2}, {300, 16, 1500, 3}] do
        rows_of = ids(m, rows, seed)
        idx = Nx.tensor(rows_of, type: :s64) |> Nx.reshape({m, 1})
        upd = Nx.tensor(spread(m * cols, seed), type: :f32) |> Nx.reshape({m, cols})
        values = Nx.tensor(spread(rows * cols, seed + 9), type: :f32) |> Nx.reshape({rows, cols})

        for base <- [Nx.broadcast(0.0, {rows, cols}), values] do
          got = Nx.indexed_add(on_gpu(base), on_gpu(idx), on_gpu(upd), axes: [0])
          assert bits(got) == bits(in_order(base, rows_of, upd)), "#{rows}x#{cols}, #{m} updates"
        end
      end

      # larger: the GPU's sums equal the CPU's bit for bit, rows and single elements
      for {rows, cols, m, seed} <- [{3000, 64, 2048, 4}, {50, 768, 8192, 5}] do
        idx = Nx.tensor(ids(m, rows, seed), type: :s64) |> Nx.reshape({m, 1})
        upd = Nx.tensor(spread(m * cols, seed), type: :f32) |> Nx.reshape({m, cols})
        base = Nx.broadcast(0.0, {rows, cols})
        cpu = Nx.indexed_add(on_cpu(base), on_cpu(idx), on_cpu(upd), axes: [0])
        gpu = Nx.indexed_add(on_gpu(base), on_gpu(idx), on_gpu(upd), axes: [0])
        assert bits(gpu) == bits(cpu), "#{rows}x#{cols}, #{m} updates"

        if rows * cols * m < 1.0e9,
          do: assert(bits(cpu) == bits(in_order(base, Nx.to_flat_list(idx), upd)))

        cols_idx = Nx.tensor(ids(m, cols, seed + 1), type: :s64) |> Nx.reshape({m, 1})
        both = Nx.concatenate([idx, cols_idx], axis: 1)
        one = upd |> Nx.slice_along_axis(0, 1, axis: 1) |> Nx.reshape({m})
        cpu = Nx.indexed_add(on_cpu(base), on_cpu(both), on_cpu(one))
        gpu = Nx.indexed_add(on_gpu(base), on_gpu(both), on_gpu(one))
        assert bits(gpu) == bits(cpu), "elements of #{rows}x#{cols}, #{m} updates"
      end
    end

    defmodule Grads do
      import Nx.Defn

      # an embedding's gradient and a picked-logit gradient, as a model's loss makes them
      defn(embedding(emb, ids, c), do: grad(emb, fn e -> Nx.sum(Nx.take(e, ids) * c) end))

      defn picked(logits, targets, c) do
        grad(logits, fn l -> Nx.sum(Nx.take_along_axis(l, Nx.new_axis(targets, 2), axis: 2) * c) end)
      end

      # reads a window at the loop's position and writes it one row further on
      defn shift(cache, n) do
        {_, cache, _} =
          while {i = 0, cache, n}, i < n do
            row = Nx.slice(cache, [i, 0], [1, 8])
            {i + 1, Nx.put_slice(cache, [i + 1, 0], row * 2.0 + 1.0), n}
          end

        cache
      end
    end

    test "gradients of take and take_along_axis on the GPU equal the CPU's, bit for bit" do
      {vocab, d, b, t} = {500, 48, 4, 64}
      emb = Nx.tensor(spread(vocab * d, 5), type: :f32) |> Nx.reshape({vocab, d})
      ids = Nx.tensor(ids(b * t, vocab, 6), type: :s64) |> Nx.reshape({b, t})
      c = Nx.tensor(spread(b * t * d, 7), type: :f32) |> Nx.reshape({b, t, d})
      logits = Nx.tensor(spread(b * t * vocab, 8), type: :f32) |> Nx.reshape({b, t, vocab})
      targets = Nx.tensor(ids(b * t, vocab, 9), type: :s64) |> Nx.reshape({b, t})
      c1 = Nx.tensor(spread(b * t, 10), type: :f32) |> Nx.reshape({b, t, 1})

      for {fun, args} <- [{&Grads.embedding/3, [emb, ids, c]}, {&Grads.picked/3, [logits, targets, c1]}] do
        cpu = Nx.Defn.jit(fun, compiler: ExBurn.Compiler, device: :cpu)
        gpu = Nx.Defn.jit(fun, compiler: ExBurn.Compiler, device: {:cuda, 0})
        on_cpu = apply(cpu, Enum.map(args, &on_cpu/1))
        assert bits(apply(gpu, Enum.map(args, &on_gpu/1))) == bits(on_cpu)
        want = apply(Nx.Defn.jit(fun, compiler: Nx.Defn.Evaluator), args)
        assert Nx.to_number(Nx.all_close(on_cpu, want, rtol: 1.0e-5, atol: 1.0e-6)) == 1
      end
    end

    test "a while loop's windows at its own position equal the Evaluator's" do
      cache = Nx.iota({12, 8}, type: :f32) |> Nx.divide(7)
      # past the end the starts clamp, as Nx clamps them
      for n <- [0, 3, 11, 15] do
        want = Nx.Defn.jit(&Grads.shift/2, compiler: Nx.Defn.Evaluator).(cache, n)
        gpu = Nx.Defn.jit(&Grads.shift/2, compiler: ExBurn.Compiler, device: {:cuda, 0})
        assert bits(gpu.(on_gpu(cache), n)) == bits(want), "#{n} iterations"
      end
    end
  end
end
