if Code.ensure_loaded?(Axon) do
  defmodule ExBurn.GenerationTest do
    @moduledoc """
    Text generation as Bumblebee builds it, through `Nx.Defn.jit(fun, compiler: ExBurn.Compiler)`
    against `Nx.Defn.Evaluator` on `Nx.BinaryBackend`: small Axon transformers with a key/value
    cache (`ExBurn.Test.Generation`: a decoder-only model and an encoder-decoder with
    cross-attention), a `while` loop over positions with the cache in its state; greedy search,
    sampling (`Nx.Random`, the key in the loop state) and contrastive search; Bumblebee's logits
    processors; a `:token` hook per step and an early stop on an end token through the loop
    condition. Batches of 1 and 2 (the second left-padded): same token ids, same lengths, and the
    hook called with the same values in the same order.
    """

    use ExUnit.Case, async: false

    alias ExBurn.Test.Generation, as: G

    @moduletag :nx
    @moduletag :axon

    @max_length 16
    @decoder [heads: 4, blocks: 2]
    @encoder_decoder [heads: 2, blocks: 2]
    @start_token 1
    # each run (compile + generate) gets this long before the test fails instead of hanging
    @timeout 60_000

    setup_all do
      Application.ensure_all_started(:nx)
      Application.ensure_all_started(:axon)
      %{models: %{decoder: decoder_model(), encoder_decoder: encoder_decoder_model()}}
    end

    setup do
      Nx.default_backend(Nx.BinaryBackend)
      :ok
    end

    # ---- models and inputs ----

    defp decoder_model do
      model = G.decoder(@decoder)
      template = decoder_template(model_batch: 1, prompt: 4, cache: G.init_cache(1, @max_length, @decoder))
      %{model: model, encoder: nil, params: G.init(model, template, 7), opts: @decoder}
    end

    defp encoder_decoder_model do
      opts = @encoder_decoder ++ [source_length: 6]
      encoder = G.encoder(opts)
      decoder = G.decoder(opts ++ [cross: true])

      encoder_params =
        G.init(
          encoder,
          %{"input_ids" => Nx.template({1, 6}, :s64), "attention_mask" => Nx.template({1, 6}, :s64)},
          11
        )

      template =
        decoder_template(model_batch: 1, prompt: 1, cache: G.init_cache(1, @max_length, opts))
        |> Map.merge(%{
          "encoder_hidden_state" => Nx.template({1, 6, 32}, :f32),
          "encoder_attention_mask" => Nx.template({1, 6}, :s64)
        })

      params = %{"encoder" => encoder_params, "decoder" => G.init(decoder, template, 13)}

      %{
        model: decoder,
        encoder: encoder,
        params: params,
        opts: opts ++ [decoder_start_token_id: @start_token]
      }
    end

    defp decoder_template(opts) do
      shape = {opts[:model_batch], opts[:prompt]}

      %{
        "input_ids" => Nx.template(shape, :s64),
        "attention_mask" => Nx.template(shape, :s64),
        "position_ids" => Nx.template(shape, :s64),
        "cache" => opts[:cache]
      }
    end

    # Prompts (decoder-only) or sources (encoder-decoder); the second row is left-padded.
    defp inputs(:decoder, batch),
      do: inputs([[5, 7, 9, 11], [0, 0, 13, 2]], [[1, 1, 1, 1], [0, 0, 1, 1]], batch)

    defp inputs(:encoder_decoder, batch),
      do:
        inputs(
          [[3, 14, 15, 9, 26, 5], [0, 0, 27, 18, 28, 4]],
          [[1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 1]],
          batch
        )

    # (rows repeat for batches over 2)
    defp inputs(ids, mask, batch) do
      rows = &Enum.take(Stream.cycle(&1), batch)

      %{
        "input_ids" => Nx.tensor(rows.(ids), type: :s64),
        "attention_mask" => Nx.tensor(rows.(mask), type: :s64),
        "seed" => Nx.tensor(rows.([17, 42]), type: :s64)
      }
    end

    defp generate_fun(%{model: model, encoder: encoder, opts: opts}, gen_opts) do
      G.generate_fun(model, opts ++ [encoder: encoder, max_length: @max_length] ++ gen_opts)
    end

    # ---- running ----

    # Runs `fun` under `compiler` (the reference on Nx.BinaryBackend, ExBurn with its backend as
    # the process default, parameters and inputs on it); returns the token ids, lengths and the
    # hook calls in order.
    defp run(compiler, fun, params, inputs) do
      test = self()
      ref = make_ref()
      hooks = %{token: fn data -> send(test, {ref, hook_values(data)}) end}

      task =
        Task.async(fn ->
          {backend, params, inputs} =
            case compiler do
              ExBurn.Compiler -> {ExBurn.Backend, exburn(params), exburn(inputs)}
              Nx.Defn.Evaluator -> {Nx.BinaryBackend, params, inputs}
            end

          Nx.default_backend(backend)
          out = Nx.Defn.jit(fun, compiler: compiler, hooks: hooks).(params, inputs)
          %{tokens: Nx.to_list(out.token_ids), length: Nx.to_list(out.length)}
        end)

      case Task.yield(task, @timeout) || Task.shutdown(task, :brutal_kill) do
        {:ok, result} -> Map.put(result, :hooks, drain(ref, []))
        nil -> flunk("#{inspect(compiler)}: no result within #{@timeout} ms")
      end
    end

    defp hook_values(data), do: Map.new(data, fn {k, v} -> {k, Nx.to_list(v)} end)

    defp drain(ref, acc) do
      receive do
        {^ref, values} -> drain(ref, [values | acc])
      after
        0 -> Enum.reverse(acc)
      end
    end

    defp exburn(container), do: Nx.Defn.Composite.traverse(container, &Nx.backend_copy(&1, ExBurn.Backend))

    # The end token: one that sequence 0 generates for the first time at step 3 or later and
    # sequence 1 never generates, from a reference run without one (the runs agree until then),
    # so that sequence 0 stops early and sequence 1 runs on to the maximum length.
    defp end_token(setup, gen_opts) do
      fun = generate_fun(setup, gen_opts ++ [eos_token_id: nil])
      %{tokens: [first, second]} = run(Nx.Defn.Evaluator, fun, setup.params, inputs(setup.kind, 2))

      first
      |> Enum.with_index()
      |> Enum.find_value(fn {token, i} ->
        if i >= 3 and token not in Enum.take(first, i) and token not in second, do: token
      end) || flunk("no end token candidate in #{inspect({first, second})}")
    end

    defp assert_same_generation(setup, gen_opts) do
      eos = end_token(setup, gen_opts)
      fun = generate_fun(setup, gen_opts ++ [eos_token_id: eos])

      for batch <- [1, 2] do
        inputs = inputs(setup.kind, batch)
        want = run(Nx.Defn.Evaluator, fun, setup.params, inputs)
        got = run(ExBurn.Compiler, fun, setup.params, inputs)

        assert got.tokens == want.tokens, "batch #{batch}: token ids"
        assert got.length == want.length, "batch #{batch}: lengths"
        assert got.hooks == want.hooks, "batch #{batch}: hook calls"

        # the reference itself stopped where expected: sequence 0 on the end token, early (one
        # hook call per step, the loop ending when every sequence has)
        [length0 | _] = want.length
        assert Enum.at(hd(want.tokens), length0 - 1) == eos
        assert length0 < @max_length - prompt_length(setup.kind)
        assert length(want.hooks) == Enum.max(want.length)
        if batch == 2, do: assert(Enum.at(want.length, 1) > length0)
      end
    end

    defp prompt_length(:decoder), do: 4
    defp prompt_length(:encoder_decoder), do: 1

    defp setup_for(models, kind), do: Map.put(models[kind], :kind, kind)

    # ---- tests ----

    for kind <- [:decoder, :encoder_decoder], strategy <- [:greedy, :sampling] do
      test "#{kind}, #{strategy}: token ids and :token hook calls equal the evaluator's (batch 1 and 2)",
           %{models: models} do
        assert_same_generation(setup_for(models, unquote(kind)), strategy: unquote(strategy))
      end
    end

    # Bumblebee's logits processors, vectorized over the batch: a `while` inside the loop
    # (no-repeat n-grams), a multi-clause `cond` (forced tokens), `cond` on the length (minimum
    # length), `indexed_put` of -inf (suppressed tokens), top-k, top-p and temperature.
    test "decoder, greedy with logits processors", %{models: models} do
      processors = [
        no_repeat_ngram: 2,
        forced_tokens: [{5, 3}, {7, 4}, {9, 8}],
        min_length: {10, [49]},
        suppressed_tokens: [41]
      ]

      assert_same_generation(setup_for(models, :decoder), strategy: :greedy, processors: processors)
    end

    test "encoder_decoder, sampling with temperature, top-k and top-p", %{models: models} do
      processors = [temperature: 0.7, top_k: 8, top_p: 0.9]
      assert_same_generation(setup_for(models, :encoder_decoder), strategy: :sampling, processors: processors)
    end

    # the loop follows top-k paths per sequence: inputs and cache repeated, chosen with take
    test "decoder, contrastive search", %{models: models} do
      assert_same_generation(setup_for(models, :decoder), strategy: :contrastive, top_k: 3, penalty_alpha: 0.6)
    end

    test "decoder, greedy with hook/2 on a value of the loop state instead of a token", %{models: models} do
      assert_same_generation(setup_for(models, :decoder), strategy: :greedy, hook_style: :value)
    end

    test "compiling for new batch sizes stays as fast as the first ones and the evaluator's, hooks cost little",
         %{models: models} do
      setup = setup_for(models, :decoder)
      fun = generate_fun(setup, strategy: :greedy, eos_token_id: 2)
      no_hooks = generate_fun(setup, strategy: :greedy, eos_token_id: 2, hook_style: :none)

      # Batch sizes no other test uses (no program cached yet), one new shape per compile. Each
      # figure is the fastest of three, so that a pause of the machine does not count.
      times = for batch <- 3..10, do: compile_time(ExBurn.Compiler, fun, setup.params, batch)
      early = times |> Enum.take(3) |> Enum.min()
      late = times |> Enum.take(-3) |> Enum.min()
      evaluator = Enum.min(for batch <- 3..5, do: compile_time(Nx.Defn.Evaluator, fun, setup.params, batch))

      without =
        Enum.min(for batch <- 11..13, do: compile_time(ExBurn.Compiler, no_hooks, setup.params, batch))

      with = Enum.min(for batch <- 14..16, do: compile_time(ExBurn.Compiler, fun, setup.params, batch))

      IO.puts(
        "\ngeneration compile times (ms): batch sizes 3-5 #{ms(early)}, 8-10 #{ms(late)} " <>
          "(evaluator #{ms(evaluator)}); without hooks #{ms(without)}, with #{ms(with)}"
      )

      assert late < 3 * early
      assert late < 10 * evaluator
      assert with < 3 * without
    end

    # Microseconds to compile `fun` for `batch` with `compiler` (both build on compile).
    defp compile_time(compiler, fun, params, batch) do
      inputs = inputs(:decoder, batch)
      templates = for arg <- [params, inputs], do: Nx.Defn.Composite.traverse(arg, &Nx.to_template/1)
      # only the time comes back: a compiled function may hold an expression, whose copy into a
      # message is exponential in its depth
      task =
        Task.async(fn ->
          {time, _compiled} = :timer.tc(fn -> Nx.Defn.compile(fun, templates, compiler: compiler) end)
          time
        end)

      case Task.yield(task, @timeout) || Task.shutdown(task, :brutal_kill) do
        {:ok, time} -> time
        nil -> flunk("compiling for batch #{batch}: no result within #{@timeout} ms")
      end
    end

    defp ms(us), do: Float.round(us / 1000, 1)
  end
end
