if Code.ensure_loaded?(Axon) do
  defmodule ExBurn.Test.Generation do
    @moduledoc false
    # Text generation as Bumblebee writes it, for the compiler's generation tests: small Axon
    # transformers with a key/value cache (decoder-only and encoder-decoder) and a `defn`
    # generation loop (greedy, sampling with `Nx.Random` or contrastive search; logits
    # processors; a `:token` hook per step; early stop on an end token through the loop
    # condition). The code follows the shape of Bumblebee's lib/bumblebee/text/generation.ex,
    # generation/logits_processing.ex and layers/decoder.ex.

    import Nx.Defn

    @vocab 50
    @dim 32
    @max_positions 32
    @pad 0

    # ---- models ----

    @doc """
    A decoder-only model (inputs `input_ids`, `attention_mask`, `position_ids`, `cache`; outputs
    `logits` and the updated `cache`), or with `cross: true` the decoder of an encoder-decoder
    (also `encoder_hidden_state` and `encoder_attention_mask`, attended to in every block).
    """
    def decoder(opts) do
      heads = Keyword.fetch!(opts, :heads)
      blocks = Keyword.fetch!(opts, :blocks)
      cross? = Keyword.get(opts, :cross, false)

      ids = Axon.input("input_ids", shape: {nil, nil})
      mask = Axon.input("attention_mask", shape: {nil, nil})
      positions = Axon.input("position_ids", shape: {nil, nil})
      cache = Axon.input("cache")

      {encoder_hidden, encoder_mask} =
        if cross?,
          do:
            {Axon.input("encoder_hidden_state", shape: {nil, nil, @dim}),
             Axon.input("encoder_attention_mask", shape: {nil, nil})},
          else: {nil, nil}

      x = embeddings(ids, positions, "decoder")
      {mask, cache} = cached_attention_mask(mask, cache)
      offset = Axon.nx(cache, & &1.offset)

      {x, cache} =
        Enum.reduce(0..(blocks - 1), {x, cache}, fn i, {x, cache} ->
          name = "decoder.block#{i}"
          block_cache = Axon.nx(cache, &elem(&1.blocks, i))
          self_cache = Axon.nx(block_cache, & &1.self_attention)

          {att, self_cache} =
            x
            |> Axon.layer_norm(name: "#{name}.ln1")
            |> then(&attention(&1, &1, mask, self_cache, offset, heads, true, "#{name}.self"))

          x = Axon.add(x, att)

          {x, block_cache} =
            if cross? do
              cross_cache = Axon.nx(block_cache, & &1.cross_attention)
              h = Axon.layer_norm(x, name: "#{name}.ln_cross")

              {att, cross_cache} =
                attention(h, encoder_hidden, encoder_mask, cross_cache, offset, heads, false, "#{name}.cross")

              {Axon.add(x, att), put_block(block_cache, self_cache, cross_cache)}
            else
              {x, put_block(block_cache, self_cache, nil)}
            end

          {mlp(x, name), put_block_cache(cache, i, block_cache)}
        end)

      hidden_state = Axon.layer_norm(x, name: "decoder.ln_final")
      logits = Axon.dense(hidden_state, @vocab, name: "decoder.head")

      cache = Axon.layer(&update_cache_offset/3, [cache, ids])
      Axon.container(%{logits: logits, hidden_state: hidden_state, cache: cache})
    end

    @doc "The encoder of the encoder-decoder: one block of self-attention over the source (no cache)."
    def encoder(opts) do
      heads = Keyword.fetch!(opts, :heads)
      ids = Axon.input("input_ids", shape: {nil, nil})
      mask = Axon.input("attention_mask", shape: {nil, nil})
      positions = Axon.nx(ids, &Nx.iota(Nx.shape(&1), axis: 1))
      x = embeddings(ids, positions, "encoder")
      h = Axon.layer_norm(x, name: "encoder.ln1")
      {att, nil} = attention(h, h, mask, nil, nil, heads, false, "encoder.self")
      x = x |> Axon.add(att) |> mlp("encoder.block0") |> Axon.layer_norm(name: "encoder.ln_final")
      Axon.container(%{hidden_state: x})
    end

    defp embeddings(ids, positions, name) do
      Axon.add(
        Axon.embedding(ids, @vocab, @dim, name: "#{name}.tokens"),
        Axon.embedding(positions, @max_positions, @dim, name: "#{name}.positions")
      )
    end

    defp mlp(x, name) do
      h =
        x
        |> Axon.layer_norm(name: "#{name}.ln2")
        |> Axon.dense(4 * @dim, activation: :gelu, name: "#{name}.ff1")
        |> Axon.dense(@dim, name: "#{name}.ff2")

      Axon.add(x, h)
    end

    # Multi-head attention of `query_input` over `kv_input`; with a cache, keys and values are
    # appended to it (self-attention) or computed once at offset 0 and reused (cross-attention).
    defp attention(query_input, kv_input, key_mask, cache, offset, heads, causal?, name) do
      split = &Axon.nx(&1, fn t -> split_heads(t, heads) end)
      q = query_input |> Axon.dense(@dim, name: "#{name}.q") |> split.()
      k = kv_input |> Axon.dense(@dim, name: "#{name}.k") |> split.()
      v = kv_input |> Axon.dense(@dim, name: "#{name}.v") |> split.()

      {k, v, cache} =
        if cache do
          Axon.layer(&update_attention_cache/5, [k, v, cache, offset]) |> unwrap_tuple(3)
        else
          {k, v, nil}
        end

      offset = offset || Axon.constant(Nx.tensor(0))

      out =
        Axon.layer(&attention_impl/6, [q, k, v, key_mask, offset], causal: causal?)
        |> Axon.dense(@dim, name: "#{name}.o")

      {out, cache}
    end

    defp split_heads(t, heads) do
      {b, s, d} = Nx.shape(t)
      Nx.reshape(t, {b, s, heads, div(d, heads)})
    end

    defp unwrap_tuple(layer, n),
      do: 0..(n - 1) |> Enum.map(&Axon.nx(layer, fn t -> elem(t, &1) end)) |> List.to_tuple()

    defp put_block(block_cache, self_cache, nil) do
      Axon.layer(fn block, s, _ -> %{block | self_attention: s} end, [block_cache, self_cache])
    end

    defp put_block(block_cache, self_cache, cross_cache) do
      Axon.layer(fn block, s, c, _ -> %{block | self_attention: s, cross_attention: c} end, [
        block_cache,
        self_cache,
        cross_cache
      ])
    end

    defp put_block_cache(cache, i, block_cache) do
      Axon.layer(fn cache, block, _ -> put_in(cache, [:blocks, Access.elem(i)], block) end, [
        cache,
        block_cache
      ])
    end

    @doc false
    def update_cache_offset(cache, ids, _opts), do: update_in(cache.offset, &Nx.add(&1, Nx.axis_size(ids, 1)))

    defp cached_attention_mask(mask, cache) do
      Axon.layer(
        fn mask, cache, _ ->
          mask = Nx.put_slice(cache.attention_mask, [0, Nx.as_type(cache.offset, {:s, 64})], mask)
          {mask, %{cache | attention_mask: mask}}
        end,
        [mask, cache]
      )
      |> unwrap_tuple(2)
    end

    @doc false
    deftransform update_attention_cache(key, value, cache, offset, _opts \\ []) do
      if Nx.shape(key) == Nx.shape(cache.key),
        do: replace_attention_cache(key, value, cache, offset),
        else: append_attention_cache(key, value, cache, offset)
    end

    defnp replace_attention_cache(key, value, cache, offset) do
      if offset == 0 do
        {key, value, %{cache | key: key, value: value}}
      else
        {cache.key, cache.value, cache}
      end
    end

    defnp append_attention_cache(key, value, cache, offset) do
      key = Nx.put_slice(cache.key, [0, offset, 0, 0], key)
      value = Nx.put_slice(cache.value, [0, offset, 0, 0], value)
      {key, value, %{key: key, value: value}}
    end

    @doc false
    defn attention_impl(query, key, value, key_mask, offset, opts \\ []) do
      query = Nx.transpose(query, axes: [0, 2, 1, 3])
      key = Nx.transpose(key, axes: [0, 2, 1, 3])
      value = Nx.transpose(value, axes: [0, 2, 1, 3])
      scores = Nx.dot(query, [3], [0, 1], key, [3], [0, 1]) / Nx.sqrt(Nx.axis_size(query, 3))

      key_mask = key_mask |> Nx.new_axis(1) |> Nx.new_axis(1)
      mask = key_mask and causal_mask(query, key, offset, opts[:causal])
      bias = Nx.select(mask, Nx.tensor(0.0, type: Nx.type(scores)), Nx.Constants.min_finite(Nx.type(scores)))
      weights = Axon.Activations.softmax(scores + bias, axis: -1)

      weights
      |> Nx.dot([3], [0, 1], value, [2], [0, 1])
      |> Nx.transpose(axes: [0, 2, 1, 3])
      |> flatten_heads()
    end

    deftransformp causal_mask(query, key, offset, causal?) do
      if causal? do
        Nx.greater_equal(
          Nx.add(Nx.iota({Nx.axis_size(query, 2), 1}), offset),
          Nx.iota({1, Nx.axis_size(key, 2)})
        )
      else
        Nx.tensor(1, type: :u8)
      end
    end

    deftransformp flatten_heads(t) do
      {b, s, h, d} = Nx.shape(t)
      Nx.reshape(t, {b, s, h * d})
    end

    @doc "Initial parameters of `model` for `template` inputs, from the fixed `seed`."
    def init(model, template, seed) do
      Nx.with_default_backend(Nx.BinaryBackend, fn ->
        {init_fn, _} = Axon.build(model, seed: seed)
        init_fn.(template, Axon.ModelState.empty())
      end)
    end

    @doc "A fresh cache (`Bumblebee.Layers.Decoder.init_cache/3`'s shape)."
    def init_cache(batch, max_length, opts) do
      heads = Keyword.fetch!(opts, :heads)
      zeros = fn length -> Nx.broadcast(0.0, {batch, length, heads, div(@dim, heads)}) end
      block = %{self_attention: %{key: zeros.(max_length), value: zeros.(max_length)}}

      block =
        case opts[:source_length] do
          nil -> block
          length -> Map.put(block, :cross_attention, %{key: zeros.(length), value: zeros.(length)})
        end

      %{
        blocks: block |> List.duplicate(Keyword.fetch!(opts, :blocks)) |> List.to_tuple(),
        offset: Nx.tensor(0),
        attention_mask: Nx.broadcast(0, {batch, max_length})
      }
    end

    # ---- generation ----

    @doc """
    The generation function of `(params, inputs)` for a decoder-only model, or an encoder-decoder
    with `encoder:` (the encoder model; params are then `%{"encoder" => .., "decoder" => ..}`).
    Inputs: `input_ids` (the prompt, or the source of an encoder-decoder; left-padded with
    token 0), `attention_mask` and `seed` (one integer per batch entry). Returns
    `%{token_ids: .., length: ..}` as Bumblebee's `generate` does.

    ## Options

      * `:strategy` - `:greedy`, `:sampling` or `:contrastive` (decoder-only, with `:top_k` and
        `:penalty_alpha`)
      * `:max_length` - the length of the generated sequences (prompt included)
      * `:eos_token_id` - the end token (nil: none)
      * `:heads`, `:blocks` - the decoder's, for the cache
      * `:encoder` - the encoder model (encoder-decoder)
      * `:decoder_start_token_id` - the first decoder token (encoder-decoder)
      * `:processors` - logits processors applied per step, in order, as `{name, option}`:
        `suppressed_tokens`, `min_length`, `no_repeat_ngram`, `forced_tokens`, `temperature`,
        `top_k`, `top_p`
      * `:hook_style` - `:token` (Bumblebee's `hook_token`, default), `:value` (`hook/2` on a
        value of the loop state) or `:none` (no hook, to measure what hooks cost)
    """
    def generate_fun(decoder, opts) do
      {_, predict} = Axon.build(decoder)
      {prepare, update} = input_callbacks(opts)

      opts =
        Keyword.take(opts, [:strategy, :eos_token_id, :top_k, :penalty_alpha]) ++
          [
            pad_token_id: @pad,
            hook_style: Keyword.get(opts, :hook_style, :token),
            processors: Keyword.get(opts, :processors, [])
          ]

      predict_fun = fn params, inputs -> predict.(decoder_params(params), inputs) end
      fn params, inputs -> generate_impl(inputs, predict_fun, params, prepare, update, opts) end
    end

    defp decoder_params(%{"decoder" => params}), do: params
    defp decoder_params(params), do: params

    defp input_callbacks(opts) do
      max_length = Keyword.fetch!(opts, :max_length)

      case opts[:encoder] do
        nil ->
          prepare = fn inputs, _params ->
            inputs = prepare_decoder_inputs(inputs, max_length, opts)
            {inputs, inputs["input_ids"], padded_batch_item?(inputs["input_ids"]), max_length}
          end

          {prepare, &update_decoder_inputs/3}

        encoder ->
          {_, encoder_predict} = Axon.build(encoder)

          prepare = fn inputs, params ->
            source_ids = inputs["input_ids"]
            encoder_outputs = encoder_predict.(params["encoder"], inputs)
            batch = Nx.axis_size(source_ids, 0)
            start = Nx.broadcast(Keyword.fetch!(opts, :decoder_start_token_id), {batch, 1})

            inputs =
              %{
                "input_ids" => start,
                "encoder_hidden_state" => encoder_outputs.hidden_state,
                "encoder_attention_mask" => inputs["attention_mask"]
              }
              |> prepare_decoder_inputs(max_length, opts ++ [source_length: Nx.axis_size(source_ids, 1)])

            {inputs, start, padded_batch_item?(source_ids), max_length}
          end

          {prepare, &update_decoder_inputs/3}
      end
    end

    defp padded_batch_item?(input), do: input |> Nx.equal(@pad) |> Nx.all(axes: [1])

    defp prepare_decoder_inputs(inputs, max_length, opts) do
      input_ids = inputs["input_ids"]
      mask = inputs["attention_mask"] || Nx.broadcast(1, input_ids)
      positions = mask |> Nx.cumulative_sum(axis: 1) |> Nx.subtract(Nx.select(mask, 1, 0))
      cache = init_cache(Nx.axis_size(input_ids, 0), max_length, opts)

      inputs
      |> Map.put("attention_mask", mask)
      |> Map.put("position_ids", positions)
      |> Map.put("cache", cache)
    end

    defp update_decoder_inputs(inputs, cache, token_ids) do
      inputs
      |> Map.replace!("input_ids", token_ids)
      |> Map.replace!("attention_mask", Nx.broadcast(1, token_ids))
      |> Map.update!("position_ids", fn positions ->
        positions
        |> Nx.slice_along_axis(Nx.axis_size(positions, -1) - 1, 1, axis: -1)
        |> Nx.add(1)
      end)
      |> Map.replace!("cache", cache)
    end

    defn generate_impl(inputs, predict_fun, params, prepare_inputs_fun, update_inputs_fun, opts \\ []) do
      {seed, inputs} = pop_seed(inputs)
      {inputs, input_ids, padded?, max_length} = prepare_inputs_fun.(inputs, params)
      length = Nx.axis_size(input_ids, 1)

      step_opts = [
        max_length: max_length,
        pad_token_id: opts[:pad_token_id],
        eos_token_id: opts[:eos_token_id],
        hook_style: opts[:hook_style],
        processors: opts[:processors],
        top_k: opts[:top_k],
        penalty_alpha: opts[:penalty_alpha]
      ]

      state =
        case opts[:strategy] do
          :greedy ->
            greedy(inputs, input_ids, padded?, predict_fun, params, update_inputs_fun, step_opts)

          :sampling ->
            sampling(inputs, input_ids, padded?, predict_fun, params, seed, update_inputs_fun, step_opts)

          :contrastive ->
            contrastive(
              inputs,
              input_ids,
              padded?,
              predict_fun,
              params,
              update_inputs_fun,
              step_opts
            )
        end

      %{token_ids: state.sequences[[.., length..-1//1]], length: state.finished_length - length}
    end

    deftransformp(pop_seed(inputs), do: Map.pop!(inputs, "seed"))

    defnp greedy(inputs, input_ids, padded?, predict_fun, params, update_inputs_fun, opts \\ []) do
      state = init_sequences(input_ids, padded?, opts[:max_length], opts[:pad_token_id])

      # the loop runs on one token at a time: a longer prompt is run once before it
      {state, inputs} =
        if state.length > 1 do
          greedy_step(state, inputs, predict_fun, params, update_inputs_fun, opts)
        else
          {state, inputs}
        end

      {state, _inputs, _params} =
        while {state, inputs, params}, continue?(state.finished_length) do
          {state, inputs} = greedy_step(state, inputs, predict_fun, params, update_inputs_fun, opts)
          {state, inputs, params}
        end

      state
    end

    defnp greedy_step(state, inputs, predict_fun, params, update_inputs_fun, opts \\ []) do
      outputs = predict_fun.(params, inputs)
      logits = process_logits(outputs.logits[[.., -1]], state, opts[:processors])
      token_id = Nx.argmax(logits, axis: -1)
      state = update_sequences(state, token_id, opts)
      inputs = update_inputs_fun.(inputs, outputs.cache, Nx.new_axis(token_id, -1))
      {state, inputs}
    end

    defnp sampling(inputs, input_ids, padded?, predict_fun, params, seed, update_inputs_fun, opts \\ []) do
      state = init_sequences(input_ids, padded?, opts[:max_length], opts[:pad_token_id])
      prng_key = seed |> Nx.vectorize(:batch) |> Nx.Random.key()

      {state, inputs, prng_key} =
        if state.length > 1 do
          sampling_step(state, inputs, predict_fun, params, prng_key, update_inputs_fun, opts)
        else
          {state, inputs, prng_key}
        end

      {state, _inputs, _params, _key} =
        while {state, inputs, params, prng_key}, continue?(state.finished_length) do
          {state, inputs, prng_key} =
            sampling_step(state, inputs, predict_fun, params, prng_key, update_inputs_fun, opts)

          {state, inputs, params, prng_key}
        end

      state
    end

    defnp sampling_step(state, inputs, predict_fun, params, prng_key, update_inputs_fun, opts \\ []) do
      key = Nx.Random.split(prng_key)
      {key, prng_key} = {key[1], key[0]}
      outputs = predict_fun.(params, inputs)
      logits = process_logits(outputs.logits[[.., -1]], state, opts[:processors])
      scores = Axon.Activations.softmax(logits)
      token_id = batched_choice(key, scores)
      state = update_sequences(state, token_id, opts)
      inputs = update_inputs_fun.(inputs, outputs.cache, Nx.new_axis(token_id, -1))
      {state, inputs, prng_key}
    end

    # Contrastive search (decoder-only): the loop follows top-k candidate paths per sequence
    # (inputs and cache repeated k times) and picks the one whose hidden state is least like the
    # context's, then mirrors the chosen path's cache over its chunk.
    defnp contrastive(inputs, input_ids, padded?, predict_fun, params, update_inputs_fun, opts \\ []) do
      top_k = opts[:top_k]
      state = init_sequences(input_ids, padded?, opts[:max_length], opts[:pad_token_id])

      outputs = predict_fun.(params, inputs)
      {batch, _, hidden_size} = Nx.shape(outputs.hidden_state)
      joint_hidden_state = Nx.broadcast(0.0, {batch, opts[:max_length], hidden_size})
      joint_hidden_state = Nx.put_slice(joint_hidden_state, [0, 0, 0], outputs.hidden_state)

      logits = process_logits(outputs.logits[[.., -1]], state, opts[:processors])
      {top_k_scores, top_k_token_ids} = Nx.top_k(Axon.Activations.softmax(logits, axis: -1), k: top_k)
      inputs = expand_inputs(inputs, top_k)
      cache = traverse_cache(outputs.cache, &repeat_interleave(&1, top_k))
      inputs = update_inputs_fun.(inputs, cache, Nx.reshape(top_k_token_ids, {:auto, 1}))

      {state, _inputs, _params, _joint, _top_k} =
        while {state, inputs, params, joint_hidden_state, {top_k_scores, top_k_token_ids}},
              continue?(state.finished_length) do
          outputs = predict_fun.(params, inputs)
          hidden_state = outputs.hidden_state
          context = repeat_interleave(joint_hidden_state, top_k)

          selected =
            contrastive_rank(context, hidden_state, state.length, top_k_scores, opts[:penalty_alpha], top_k)

          hidden_state = chunked_take(hidden_state, top_k, selected)
          joint_hidden_state = Nx.put_slice(joint_hidden_state, [0, state.length, 0], hidden_state)
          token_id = top_k_token_ids |> Nx.flatten() |> chunked_take(top_k, selected)
          state = update_sequences(state, token_id, opts)

          logits = chunked_take(outputs.logits[[.., -1]], top_k, selected)
          logits = process_logits(logits, state, opts[:processors])
          {top_k_scores, top_k_token_ids} = Nx.top_k(Axon.Activations.softmax(logits, axis: -1), k: top_k)

          cache =
            traverse_cache(outputs.cache, &(&1 |> chunked_take(top_k, selected) |> repeat_interleave(top_k)))

          inputs = update_inputs_fun.(inputs, cache, Nx.reshape(top_k_token_ids, {:auto, 1}))
          {state, inputs, params, joint_hidden_state, {top_k_scores, top_k_token_ids}}
        end

      state
    end

    defnp contrastive_rank(context, hidden_state, length, top_k_scores, alpha, top_k) do
      similarity =
        normalize(context)
        |> Nx.dot([-1], [0], normalize(hidden_state), [-1], [0])
        |> Nx.squeeze(axes: [-1])

      current? = Nx.iota(Nx.shape(similarity), axis: -1) < length
      penalty = current? |> Nx.select(similarity, Nx.Constants.neg_infinity()) |> Nx.reduce_max(axes: [-1])
      score = (1.0 - alpha) * Nx.flatten(top_k_scores) - alpha * penalty
      score |> Nx.reshape({:auto, top_k}) |> Nx.argmax(axis: -1)
    end

    defnp normalize(t) do
      norm = t |> Nx.pow(2) |> Nx.sum(axes: [-1], keep_axes: true) |> Nx.sqrt()
      t / Nx.select(norm == 0.0, 1.0, norm)
    end

    deftransformp expand_inputs(inputs, times) do
      Map.new(inputs, fn
        {"cache", cache} -> {"cache", cache}
        {key, value} -> {key, repeat_interleave(value, times)}
      end)
    end

    # Applies `fun` to every batched tensor of the cache (the offset is not).
    deftransformp traverse_cache(cache, fun) do
      blocks =
        cache.blocks
        |> Tuple.to_list()
        |> Enum.map(&Nx.Defn.Composite.traverse(&1, fun))
        |> List.to_tuple()

      %{cache | blocks: blocks, attention_mask: fun.(cache.attention_mask)}
    end

    # Repeats each batch entry `times` times, the copies adjacent.
    deftransformp repeat_interleave(t, times) do
      reps = List.duplicate(1, Nx.rank(t)) |> List.insert_at(1, times)
      t |> Nx.new_axis(1) |> Nx.tile(reps) |> Nx.flatten(axes: [0, 1])
    end

    # Entry `idx[i]` of each chunk `i` of `chunk` entries.
    deftransformp chunked_take(t, chunk, idx) do
      flat = idx |> Nx.shape() |> Nx.iota() |> Nx.multiply(chunk) |> Nx.add(idx)
      Nx.take(t, flat, axis: 0)
    end

    deftransformp batched_choice(key, scores) do
      vocab = Nx.iota({Nx.axis_size(scores, 1)})
      {tokens, _} = Nx.Random.choice(key, vocab, Nx.vectorize(scores, :batch), samples: 1)
      tokens |> Nx.squeeze() |> Nx.devectorize()
    end

    # ---- logits processors (Bumblebee's lib/bumblebee/text/generation/logits_processing.ex) ----

    # Applies `processors` (`{name, option}`) to the logits of each batch entry, vectorized
    # over the batch as Bumblebee does: each sees its own sequence and the current length.
    deftransformp process_logits(logits, state, processors) do
      logits = Nx.vectorize(logits, :batch)

      context = %{
        sequence: Nx.vectorize(state.sequences, :batch),
        length: state.length,
        input_length: state.input_length
      }

      processors
      |> Enum.reduce(logits, fn {name, option}, logits -> processor(name, logits, context, option) end)
      |> Nx.devectorize(keep_names: false)
    end

    defp processor(:suppressed_tokens, logits, _context, ids) do
      indices = ids |> Nx.tensor() |> Nx.new_axis(-1)
      values = Nx.broadcast(Nx.Constants.neg_infinity(Nx.type(logits)), {Nx.size(indices)})
      Nx.indexed_put(logits, indices, values)
    end

    defp processor(:min_length, logits, context, {min_length, eos_ids}),
      do: min_length_processor(logits, context, min_length: min_length, eos_token_ids: eos_ids)

    defp processor(:no_repeat_ngram, logits, context, n),
      do: no_repeat_ngram_processor(logits, context, ngram_length: n)

    defp processor(:forced_tokens, logits, context, forced) do
      clauses = for {i, id} <- forced, do: {Nx.equal(context.length, i), force_token_id(logits, id)}
      Nx.Defn.Expr.cond(clauses, logits)
    end

    defp processor(:temperature, logits, _context, t), do: Nx.divide(logits, t)
    defp processor(:top_k, logits, _context, k), do: top_k_processor(logits, top_k: k)
    defp processor(:top_p, logits, _context, p), do: top_p_processor(logits, top_p: p)

    defnp min_length_processor(logits, context, opts \\ []) do
      if context.length < opts[:min_length] do
        ignore_token_ids(logits, opts[:eos_token_ids])
      else
        logits
      end
    end

    defnp no_repeat_ngram_processor(logits, context, opts \\ []) do
      ngram_length = opts[:ngram_length]

      if context.length + 1 < ngram_length do
        logits
      else
        # the last n - 1 tokens: a token that followed them before is not taken again
        n1 = ngram_length - 1
        last = Nx.slice_along_axis(context.sequence, context.length - n1, n1, axis: 0)

        {_, _, _, _, logits} =
          while {i = 0, last, sequence = context.sequence, length = context.length, logits},
                i + n1 < length do
            earlier = Nx.slice_along_axis(sequence, i, n1, axis: 0)
            indices = Nx.new_axis(sequence[i + n1], -1)
            updates = Nx.select(Nx.all(earlier == last), Nx.Constants.neg_infinity(Nx.type(logits)), 0)
            {i + 1, last, sequence, length, Nx.indexed_add(logits, indices, updates)}
          end

        logits
      end
    end

    defnp top_k_processor(logits, opts \\ []) do
      {top, _} = Nx.top_k(logits, k: opts[:top_k])
      Nx.select(logits < top[-1], Nx.Constants.neg_infinity(Nx.type(logits)), logits)
    end

    defnp top_p_processor(logits, opts \\ []) do
      sorted = Nx.argsort(logits)

      cumulative =
        logits
        |> Nx.take_along_axis(sorted)
        |> Axon.Activations.softmax()
        |> Nx.cumulative_sum()

      ordered_ignore = cumulative <= 1 - opts[:top_p]
      ignore = Nx.indexed_put(Nx.fill(ordered_ignore, 0), Nx.new_axis(sorted, -1), Nx.flatten(ordered_ignore))
      Nx.select(ignore, Nx.Constants.neg_infinity(Nx.type(logits)), logits)
    end

    deftransformp force_token_id(logits, id) do
      logits
      |> Nx.fill(Nx.Constants.neg_infinity(), type: Nx.type(logits))
      |> Nx.put_slice([id], Nx.tensor([0], type: Nx.type(logits)))
    end

    deftransformp ignore_token_ids(logits, ids) do
      Enum.reduce(ids, logits, fn id, logits ->
        Nx.put_slice(logits, [id], Nx.broadcast(Nx.Constants.neg_infinity(Nx.type(logits)), {1}))
      end)
    end

    defnp init_sequences(input_ids, padded?, max_length, pad_token_id) do
      {batch, length} = Nx.shape(input_ids)
      sequences = Nx.broadcast(pad_token_id, {batch, max_length})
      sequences = Nx.put_slice(sequences, [0, 0], input_ids)

      %{
        sequences: sequences,
        input_length: length,
        length: length,
        finished_length: Nx.select(padded?, 1, 0),
        streamed: %{
          token_id: pad_token_id |> Nx.broadcast({batch}) |> Nx.as_type(:s64),
          finished?: Nx.broadcast(Nx.tensor(0, type: :u8), {batch}),
          length: Nx.broadcast(Nx.tensor(0, type: :s64), {batch})
        }
      }
    end

    defnp(continue?(finished_length), do: Nx.any(finished_length == 0))

    defnp update_sequences(state, token_id, opts \\ []) do
      pad_token_id = opts[:pad_token_id]
      eos_token_id = opts[:eos_token_id]
      hook_style = opts[:hook_style]

      %{sequences: sequences, length: length, input_length: input_length, finished_length: finished_length} =
        state

      token_id = Nx.select(finished_length > 0, pad_token_id, token_id)
      sequences = Nx.put_slice(sequences, [0, length], Nx.new_axis(token_id, -1))
      length = length + 1
      {batch, max_length} = Nx.shape(sequences)

      finished_length =
        Nx.select(
          finished_length == 0 and (eos_token?(token_id, eos_token_id) or length == max_length),
          length,
          finished_length
        )

      data = %{
        token_id: token_id,
        finished?: finished_length > 0,
        length: Nx.broadcast(length - input_length, {batch})
      }

      state = %{state | sequences: sequences, length: length, finished_length: finished_length}
      stream_token(state, data, hook_style)
    end

    # A hook per generated token (Bumblebee's streaming), either through a token attached to the
    # state as Bumblebee does (`:token`; tokens are deprecated in Nx 0.13, hence apply/3, which
    # keeps the build free of warnings) or with `hook/2` on a value the loop returns (`:value`).
    deftransformp stream_token(state, data, hook_style) do
      case hook_style do
        :token ->
          kernel = Nx.Defn.Kernel
          {token, _} = apply(kernel, :hook_token, [apply(kernel, :create_token, []), data, :token])
          apply(kernel, :attach_token, [token, state])

        :none ->
          state

        :value ->
          data = %{data | token_id: Nx.as_type(data.token_id, :s64), length: Nx.as_type(data.length, :s64)}
          %{state | streamed: Nx.Defn.Kernel.hook(data, :token)}
      end
    end

    deftransformp eos_token?(token_id, eos_token_id) do
      if eos_token_id do
        token_id
        |> Nx.vectorize(:batch)
        |> Nx.equal(Nx.tensor(List.wrap(eos_token_id)))
        |> Nx.any()
        |> Nx.devectorize()
      else
        Nx.tensor(false)
      end
    end
  end
end
