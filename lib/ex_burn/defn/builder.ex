if Code.ensure_loaded?(Nx) do
  defmodule ExBurn.Defn.Builder do
    @moduledoc false
    # Internal to the Defn compiler and the Nx backend.
    # Lowers an `Nx.Defn.Expr` container into an engine program, in pure Elixir.
    #
    # The program is a map the engine decodes (`ex_burn_core::Program`): `inputs`, `consts`,
    # `instrs` (each `%{op: op, args: [value numbers]}`) and `outputs`. Tensor ops go through
    # `ExBurn.Defn.Lower`, the table the eager backend uses. `while` becomes an instruction whose
    # condition and body are sub-programs over the loop state; `cond` evaluates its predicates in
    # the enclosing scope and runs one branch sub-program; values a branch needs from the
    # enclosing scope (and tensors captured by the function) are passed to sub-programs as inputs.
    # `block`s with a native lowering become engine ops, the others are inlined from their default
    # implementation. Functions given to `reduce`/`window_reduce` become sub-programs (see
    # `fold_body/2`). Hooks are `hook` instructions: the engine logs their values in execution
    # order (per iteration inside `while`, only when taken inside `cond`) and the runner calls the
    # hook functions in that order after the run.
    #
    # Unsupported expressions raise `ExBurn.Error` of kind `:unsupported` naming the op, at
    # compile time.

    alias ExBurn.Defn.Lower
    alias Nx.Defn.{Composite, Expr, Tree}
    alias Nx.Tensor, as: T

    # Values are referenced while building as {:in, i} (an input), {:cap, j} (a value captured
    # from the enclosing scope, sub-programs), {:c, j} (a constant, root) or {:v, k} (the k-th
    # instruction result); `finish/2` turns them into value numbers.

    defstruct instrs: [],
              count: 0,
              own_inputs: 0,
              params: %{},
              cache: %{},
              scope_ids: %{},
              parent: nil,
              captures: [],
              capture_keys: %{},
              consts: [],
              const_keys: %{},
              hooks: [],
              skip_hooks: MapSet.new()

    @typedoc """
    A compiled program: the engine term, its constant tensors, its hooks (by the id its `hook`
    instructions log them under: callback spec and value template), the expression ids of those
    hooks and its number of outputs.
    """
    @type program :: %{
            term: map(),
            constants: [Nx.Tensor.t()],
            hooks: %{pos_integer() => {term(), Nx.Container.t()}},
            hook_nodes: [term()],
            outputs: non_neg_integer()
          }

    @unsupported [:fun]

    @doc """
    Lowers the expression container `outputs` (whose `:parameter` nodes are the `inputs`
    program inputs) into a program.

    Returns the engine term, the constants in order, the hooks (by id: callback spec and value
    template), the expression ids of those hooks and the number of outputs.

    ## Options

      * `:seeds` - a map of expression id to the value reference(s) that stand for it, e.g.
        `{:in, k}` for a `runtime_call` result passed as input `k` (default `%{}`)
      * `:skip_hooks` - expression ids of hooks that only pass their values through (already
        called by an earlier program), instead of becoming `hook` instructions (default none)
    """
    @spec build(Nx.Container.t(), non_neg_integer(), keyword()) :: program()
    def build(outputs, inputs, opts \\ []) do
      b = %__MODULE__{
        own_inputs: inputs,
        params: Map.new(0..(inputs - 1)//1, &{&1, {:in, &1}}),
        scope_ids: Tree.scope_ids(outputs),
        cache: Keyword.get(opts, :seeds, %{}),
        skip_hooks: MapSet.new(Keyword.get(opts, :skip_hooks, []))
      }

      {refs, b} = lower_container(b, outputs)
      {term, _} = finish(b, refs)
      hooks = Map.new(b.hooks, fn {id, spec, template, _node} -> {id, {spec, template}} end)

      %{
        term: term,
        constants: Enum.reverse(b.consts),
        hooks: hooks,
        hook_nodes: Enum.map(b.hooks, &elem(&1, 3)),
        outputs: length(refs),
        used: used_inputs(term)
      }
    end

    @doc """
    The body of a function given to `Nx.reduce/4` or `Nx.window_reduce/5` of Nx type `type`,
    from its expression over parameters 0 (the element) and 1 (the accumulator). It runs on
    whole slices at once, so it may only use element-wise ops and no captured tensors or hooks;
    otherwise this raises `ExBurn.Error` of kind `:unsupported`.

    For a real `type` the body is the engine program the fold op runs. For a complex `type` it
    is `%{fold_ops: ops, result: k}`, the function's Nx ops in order as `{k, op, type, args}`
    (value `k`; tensor arguments `{:fold_value, j}`, values 0 and 1 being the parameters), which
    `ExBurn.Defn.Complex` applies slice by slice on the real and imaginary parts.
    """
    @spec fold_body(Nx.Tensor.t(), Nx.Type.t()) :: map()
    def fold_body(expr, type) do
      if ExBurn.Defn.Complex.complex?(type), do: fold_ops(expr), else: fold_program(expr)
    end

    defp fold_program(expr) do
      %{term: term, constants: constants, hooks: hooks} = build(expr, 2)
      ops = Enum.map(term.instrs, &op_name(&1.op))

      if constants != [] or hooks != %{} or not Enum.all?(ops, &Lower.elementwise?/1) do
        raise ExBurn.Error.new(
                kind: :unsupported,
                op: :reduce,
                message:
                  "functions given to reduce/window_reduce must be element-wise, without captured " <>
                    "tensors or hooks (got #{inspect(Enum.uniq(ops))})"
              )
      end

      term
    end

    defp op_name({name, _attrs}), do: name
    defp op_name(name), do: name

    defp fold_ops(expr) do
      {result, {ops, _cache, _next}} = fold_op(expr, {[], %{}, 2})
      %{fold_ops: Enum.reverse(ops), result: result}
    end

    defp fold_op(%T{data: %Expr{id: id, op: op, args: args}} = t, {ops, cache, next} = acc) do
      cond do
        Map.has_key?(cache, id) ->
          {cache[id], acc}

        op == :parameter ->
          [pos] = args
          {pos, {ops, Map.put(cache, id, pos), next}}

        op == :metadata ->
          fold_op(hd(args), acc)

        op == :constant or Lower.nx_elementwise?(op) ->
          {args, {ops, cache, next}} =
            Tree.apply_args(t, acc, fn arg, acc ->
              {k, acc} = fold_op(arg, acc)
              {{:fold_value, k}, acc}
            end)

          {next, {[{next, op, t.type, args} | ops], Map.put(cache, id, next), next + 1}}

        true ->
          raise ExBurn.Error.new(
                  kind: :unsupported,
                  op: :reduce,
                  message:
                    "functions given to reduce/window_reduce must be element-wise, without captured " <>
                      "tensors or hooks (got #{inspect(op)})"
                )
      end
    end

    # ---- expressions ----

    defp lower_container(b, container) do
      {refs, b} =
        Composite.reduce(container, {[], b}, fn t, {acc, b} ->
          {r, b} = lower(b, Nx.devectorize(t))
          {[r | acc], b}
        end)

      {refs |> Enum.reverse() |> List.flatten(), b}
    end

    defp lower(b, %T{data: %Expr{id: id, op: op}} = t) do
      cond do
        Map.has_key?(b.cache, id) ->
          {b.cache[id], b}

        b.parent != nil and op not in [:constant, :tensor, :parameter] and
            Map.has_key?(b.parent.scope_ids, id) ->
          capture(b, {:node, id}, &lower(&1, t))

        true ->
          {ref, b} = lower_op(op, t.data.args, t, b)
          {ref, %{b | cache: Map.put(b.cache, id, ref)}}
      end
    end

    defp lower(_b, other) do
      raise ExBurn.Error.new(kind: :argument, op: :defn, message: "cannot lower #{inspect(other)}")
    end

    defp lower_op(:parameter, [pos], t, b) do
      case b.params do
        %{^pos => ref} -> {ref, b}
        nil -> capture(b, {:param, pos}, &lower(&1, t))
      end
    end

    defp lower_op(:tensor, [tensor], t, %{parent: nil} = b) do
      key = t.data.id

      case b.const_keys do
        %{^key => ref} ->
          {ref, b}

        %{} ->
          ref = {:c, length(b.consts)}
          {ref, %{b | consts: [tensor | b.consts], const_keys: Map.put(b.const_keys, key, ref)}}
      end
    end

    defp lower_op(:tensor, _args, t, b), do: capture(b, {:tensor, t.data.id}, &lower(&1, t))

    defp lower_op(:metadata, [expr, _meta], _t, b) do
      {refs, b} = lower_container(b, expr)
      {single_or_list(expr, refs), b}
    end

    defp lower_op(:elem, [tuple, i], _t, b) do
      {refs, b} = lower(b, tuple)
      {Enum.at(refs, i), b}
    end

    defp lower_op(:while, [initial, _arg, condition, body], t, b) do
      {init_refs, b} = lower_container(b, initial)
      n = length(init_refs)
      child = child(b, Map.new(0..(n - 1)//1, &{&1, {:in, &1}}), n)
      {cond_ref, child} = lower(%{child | scope_ids: Tree.scope_ids(condition)}, condition)
      {cond_part, child} = take_part(child, [cond_ref])
      {body_refs, child} = lower_container(%{child | scope_ids: Tree.scope_ids(body)}, body)
      {body_part, child} = take_part(child, body_refs)
      {[cond_prog, body_prog], cap_refs, b} = close_child(child, [cond_part, body_part])
      {refs, b} = emit(b, :while, [cond: cond_prog, body: body_prog, state: n], init_refs ++ cap_refs, n)
      {single_or_list(t, refs), b}
    end

    # Clauses are decided in order: a later predicate is computed only when the earlier ones
    # are false (it may be invalid otherwise, e.g. an index checked by an earlier clause), so
    # `cond(p1 -> a; p2 -> b; true -> c)` runs as `cond(p1 -> a; true -> cond(p2 -> b; true -> c))`.
    defp lower_op(:cond, [[first | [_ | _] = rest], last], t, b) do
      inner = %{t | data: %{t.data | id: make_ref(), args: [rest, last]}}
      lower_op(:cond, [[first], inner], t, b)
    end

    defp lower_op(:cond, [clauses, last], t, b) do
      {pred_refs, b} = Enum.map_reduce(clauses, b, fn {pred, _}, b -> lower(b, pred) end)
      branches = Enum.map(clauses, &elem(&1, 1)) ++ [last]
      child = child(b, nil, 0)

      {parts, child} =
        Enum.map_reduce(branches, child, fn branch, child ->
          child = %{child | scope_ids: Tree.scope_ids(branch, b.scope_ids)}
          {refs, child} = lower_container(child, branch)
          take_part(child, refs)
        end)

      {progs, cap_refs, b} = close_child(child, parts)
      results = length(elem(hd(parts), 1))
      {refs, b} = emit(b, :cond, [branches: progs], pred_refs ++ cap_refs, results)
      {single_or_list(t, refs), b}
    end

    defp lower_op(:block, [struct, in_args, expr, _callback], t, b) do
      {tensors, _opts} = Enum.split_while(in_args, &(not is_list(&1)))
      {refs, b} = Enum.map_reduce(tensors, b, &lower(&2, &1))
      args = Enum.zip_with(tensors, refs, &with_ref/2)

      case Lower.block(struct, args) do
        {name, lowered} ->
          emit_recipe(b, Lower.lower(name, t, lowered))

        nil ->
          outer = b.params
          b = %{b | params: Map.new(Enum.with_index(refs), fn {r, i} -> {i, r} end)}
          {out, b} = lower_container(b, expr)
          {single_or_list(t, out), %{b | params: outer}}
      end
    end

    # A hook is an instruction that hands its values to the engine's hook log (in execution
    # order, also inside while/cond); the runner calls the hook functions after the run.
    defp lower_op(:hook, [expr, spec, _template, _ref], t, b) do
      {refs, b} = lower_container(b, expr)

      if MapSet.member?(b.skip_hooks, t.data.id) do
        {single_or_list(t, refs), b}
      else
        {_, b} = emit_hook(b, t.data.id, refs, spec, expr)
        {single_or_list(t, refs), b}
      end
    end

    # Nx < 0.13 expresses hooks as a token attached to each hooked leaf: the token's hooks
    # (newest first) become `hook` instructions once, in the order they were declared, before
    # the value they are attached to.
    defp lower_op(:attach_token, [token, expr], _t, b) do
      {_, b} = lower(b, token)
      lower(b, expr)
    end

    defp lower_op(:token, [%{hooks: hooks}], t, b) do
      b =
        hooks
        |> Enum.reverse()
        |> Enum.with_index()
        |> Enum.reduce(b, fn {%{expr: expr, name: name, callback: callback}, i}, b ->
          {refs, b} = lower_container(b, expr)
          node = {t.data.id, i}

          if MapSet.member?(b.skip_hooks, node),
            do: b,
            else: b |> emit_hook(node, refs, {:named, name, callback}, expr) |> elem(1)
        end)

      {[], b}
    end

    defp lower_op(op, args, t, b) when op in [:reduce, :window_reduce] do
      {fun, args} = List.pop_at(args, -1)
      %T{data: %Expr{op: :fun, args: [_params, body, _mfa]}} = fun
      {tensors, rest} = Enum.split(args, 2)
      {refs, b} = Enum.map_reduce(tensors, b, &lower(&2, &1))
      lowered = Enum.zip_with(tensors, refs, &with_ref/2) ++ rest ++ [fold_body(body, t.type)]
      emit_recipe(b, Lower.lower(op, t, lowered))
    end

    # Root-scope runtime calls are run by ExBurn.Compiler between programs and seeded as
    # inputs; one reached here depends on a while/cond scope.
    defp lower_op(:runtime_call, _args, _t, _b) do
      raise ExBurn.Error.new(
              kind: :unsupported,
              op: :runtime_call,
              message:
                "Nx.runtime_call inside while or cond is not supported by ExBurn.Compiler " <>
                  "(its program runs without returning to Elixir); call it outside the loop or branch"
            )
    end

    defp lower_op(op, _args, _t, _b) when op in @unsupported do
      raise ExBurn.Error.new(
              kind: :unsupported,
              op: op,
              message: "Nx.#{op} is not supported by ExBurn.Compiler (Burn has no equivalent)"
            )
    end

    # Nx.Defn.Expr turns put_slice's integer starts into constant expressions: they become
    # integers again here, so that the engine does not read them back from the device (on a
    # GPU each read waits for the queue to drain, for every put_slice of a backward pass).
    defp lower_op(op, [x, starts | rest], t, b) when op in [:slice, :put_slice] and is_list(starts) do
      starts = Enum.map(starts, &static_index/1)
      generic_op(%{t | data: %{t.data | args: [x, starts | rest]}}, b)
    end

    defp lower_op(_op, _args, t, b), do: generic_op(t, b)

    defp static_index(%T{shape: {}, data: %Expr{op: :constant, args: [n]}}) when is_integer(n), do: n
    defp static_index(other), do: other

    defp generic_op(t, b) do
      {args, b} =
        Tree.apply_args(t, b, fn arg, b ->
          {ref, b} = lower(b, arg)
          {with_ref(arg, ref), b}
        end)

      emit_recipe(b, Lower.lower(t.data.op, t, args))
    end

    # ---- emission ----

    defp with_ref(%T{} = t, ref), do: %{t | data: {:ref, ref}}

    # A `hook` instruction logging `hrefs` under a fresh id; `node` names the hook for
    # `:skip_hooks`. Returns the instruction's (empty) results.
    defp emit_hook(b, node, refs, spec, expr) do
      {spec, hooked, hrefs, b} =
        case spec do
          {:token_hook, hooked, inner} ->
            {hrefs, b} = lower_container(b, hooked)
            {inner, hooked, hrefs, b}

          spec ->
            {spec, expr, refs, b}
        end

      id = System.unique_integer([:positive])
      {out, b} = emit(b, :hook, [id: id, inputs: length(hrefs)], hrefs, 0)
      # The value's template, not the expression: programs are cached, and an expression
      # copied out of its DAG (into ETS or a message) costs time exponential in its depth.
      template = Composite.traverse(hooked, &Nx.to_template/1)
      {out, %{b | hooks: [{id, spec, template, node} | b.hooks]}}
    end

    defp emit_recipe(b, {inputs, instrs}) do
      refs = Enum.map(inputs, fn %{data: {:ref, r}} -> r end)

      {values, b} =
        Enum.reduce(instrs, {List.to_tuple(refs), b}, fn {op, attrs, args}, {values, b} ->
          {ref, b} = emit(b, op, attrs, Enum.map(args, &elem(values, &1)), 1)
          {:erlang.append_element(values, ref), b}
        end)

      {elem(values, tuple_size(values) - 1), b}
    end

    defp emit(b, op, attrs, args, results) do
      refs = for k <- b.count..(b.count + results - 1)//1, do: {:v, k}
      b = %{b | instrs: [{ExBurn.Op.encode(op, attrs), args} | b.instrs], count: b.count + results}
      {if(op in [:while, :cond, :hook], do: refs, else: hd(refs)), b}
    end

    defp single_or_list(%T{type: {:tuple, _}}, refs), do: refs
    defp single_or_list(%T{}, [ref]), do: ref
    defp single_or_list(_container, refs), do: refs

    # ---- sub-programs ----

    # A child builder for sub-programs of `parent`; `params` nil means parameters belong to the
    # enclosing scope (cond branches).
    defp child(parent, params, own_inputs),
      do: %__MODULE__{
        parent: parent,
        params: params,
        own_inputs: own_inputs,
        skip_hooks: parent.skip_hooks
      }

    # A value of the enclosing scope used inside a sub-program becomes one more input.
    defp capture(b, key, lower_in_parent) do
      case b.capture_keys do
        %{^key => refs} ->
          {refs, b}

        %{} ->
          {parent_refs, parent} = lower_in_parent.(b.parent)
          n = length(b.captures)
          list = List.wrap(parent_refs)
          local = Enum.map(0..(length(list) - 1)//1, &{:cap, n + &1})
          local = if is_list(parent_refs), do: local, else: hd(local)

          {local,
           %{
             b
             | parent: parent,
               captures: b.captures ++ list,
               capture_keys: Map.put(b.capture_keys, key, local)
           }}
      end
    end

    # Ends the current sub-program of a child (its instructions and outputs) and resets it for
    # the next one, keeping the captures they share.
    defp take_part(child, outputs) do
      {{Enum.reverse(child.instrs), outputs}, %{child | instrs: [], count: 0, cache: %{}}}
    end

    # The parent gets the child's hooks (the engine logs them from inside sub-programs).
    defp close_child(child, parts) do
      progs = Enum.map(parts, fn {instrs, outputs} -> finish_part(child, instrs, outputs) end)
      parent = child.parent
      {progs, child.captures, %{parent | hooks: child.hooks ++ parent.hooks}}
    end

    defp finish_part(child, instrs, outputs) do
      b = %{child | instrs: Enum.reverse(instrs)}
      {term, _} = finish(b, outputs)
      term
    end

    # The program inputs an engine term reads (sub-programs get theirs as arguments of their
    # instruction, so the root's instructions and outputs name them all).
    defp used_inputs(%{inputs: n, instrs: instrs, outputs: outputs}) do
      instrs
      |> Enum.flat_map(& &1.args)
      |> Enum.concat(outputs)
      |> Enum.filter(&(&1 < n))
      |> Enum.uniq()
      |> Enum.sort()
    end

    # The engine term: references become value numbers.
    defp finish(b, outputs) do
      n_in = b.own_inputs + length(b.captures)
      n_c = length(b.consts)

      number = fn
        {:in, i} -> i
        {:cap, j} -> b.own_inputs + j
        {:c, j} -> n_in + j
        {:v, k} -> n_in + n_c + k
      end

      instrs =
        b.instrs
        |> Enum.reverse()
        |> Enum.map(fn {op, args} -> %{op: op, args: Enum.map(args, number)} end)

      {%{inputs: n_in, consts: n_c, instrs: instrs, outputs: Enum.map(outputs, number)}, b}
    end
  end
end
