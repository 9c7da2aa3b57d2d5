defmodule ExBurn.Defn.Lower do
  @moduledoc false
  # Internal to the Defn compiler and the Nx backend.
  # THE mapping from Nx operations to the engine's op table, shared by `ExBurn.Backend` (eager)
  # and `ExBurn.Compiler` (programs), so the two cannot drift apart.
  #
  # `lower/3` takes an Nx op name as it appears in `Nx.Backend` callbacks and `Nx.Defn.Expr`
  # nodes, the output template `out` and the op's arguments (tensors are anything with `:shape`
  # and `:type`), and returns a *recipe* `{inputs, instrs}`: the tensors the recipe reads, and
  # engine instructions `{op, attrs, args}` numbered like a program (`0..length(inputs)-1` are
  # the inputs, instruction `k` defines value `length(inputs) + k`); the last instruction's value
  # is the result. Most ops are one instruction; a few cast first or after so that the result
  # has Nx's type `out.type` exactly.
  #
  # This module does not need Nx: it only reads shapes and types.

  @typedoc "Anything with a shape and an Nx type (an `Nx.Tensor`, a template, a value)."
  @type tensor :: %{
          required(:shape) => tuple(),
          required(:type) => {atom(), pos_integer()},
          optional(atom()) => term()
        }
  @typedoc "One engine instruction: op name, attributes, argument value numbers."
  @type instr :: {atom(), keyword(), [non_neg_integer()]}
  @typedoc "Tensors read by the recipe and its instructions."
  @type recipe :: {[tensor()], [instr()]}

  # The engine ops by the Nx operation each is (the op table's `nx` fact: its own name unless
  # the table says otherwise): Nx name => {family, engine name}. Ops Nx has none of (`nil`)
  # are left out.
  @by_nx for {family, op, facts} <- ExBurn.Op.table(),
             nx = Map.get(facts, :nx, op),
             nx != nil,
             into: %{},
             do: {nx, {family, op}}

  # Element-wise unary ops other than float functions: Nx name => engine name.
  @unary for {nx, {:unary, op}} <- @by_nx, op not in ExBurn.Op.float_functions(), into: %{}, do: {nx, op}

  # Float functions: the input is converted to Nx's output type first (s64 -> f32, f16 stays).
  @float_unary ExBurn.Op.float_functions()

  # Binary ops whose result type Nx gives as `out`.
  @binary_typed ExBurn.Op.names(:binary)

  # Binary ops with a boolean result.
  @binary_pred ExBurn.Op.names(:compare) ++ ExBurn.Op.names(:logical)

  @reductions ExBurn.Op.names(:reduce)
  @typed_reductions ExBurn.Op.typed_reductions()
  @windows ExBurn.Op.names(:window)
  @window_scatters ExBurn.Op.names(:window_scatter)
  @cumulative ExBurn.Op.names(:cumulative)
  # Nx ops with no tensor inputs (their last callback argument is backend options); Nx's
  # `constant` becomes the engine's `full` with the output's shape.
  @creation ~w(constant eye iota)a
  @folds for {nx, {:program, _}} <- @by_nx, do: nx
  # Ops on complex tensors only (lowered by ExBurn.Defn.Complex).
  @complex_only ~w(conjugate real imag fft ifft)a

  @ops Enum.uniq(Map.keys(@by_nx) ++ @creation ++ @complex_only)

  # Engine ops that map elements independently (allowed in the bodies of reduce folds).
  @elementwise ExBurn.Op.elementwise()

  # Element-wise Nx ops (real and complex).
  @nx_elementwise for({nx, {_family, op}} <- @by_nx, op in @elementwise, do: nx) ++ [:conjugate, :real, :imag]

  @doc """
  The Nx op names this module lowers (the op vocabulary of the backend and the compiler).

  `take`, `take_along_axis`, `logical_not` and the `cumulative_*` ops are `Nx.Block`s in Nx 0.13;
  they are listed so blocks can be lowered natively.
  """
  @spec ops() :: [atom()]
  def ops, do: @ops

  # `Nx.Block`s the engine runs natively: struct module => Nx op name.
  @blocks %{
    Nx.Block.LogicalNot => :logical_not,
    Nx.Block.CumulativeSum => :cumulative_sum,
    Nx.Block.CumulativeProduct => :cumulative_product,
    Nx.Block.CumulativeMax => :cumulative_max,
    Nx.Block.CumulativeMin => :cumulative_min,
    Nx.Block.Take => :take,
    Nx.Block.TakeAlongAxis => :take_along_axis
  }

  @doc """
  The `Nx.Block` structs lowered natively (others run their default implementation).
  """
  @spec native_blocks() :: [module()]
  def native_blocks, do: Map.keys(@blocks)

  @doc """
  The Nx op and arguments a native `Nx.Block` stands for, or `nil` when the block has no
  native lowering. `tensors` are the block's tensor arguments.
  """
  @spec block(struct(), list()) :: {atom(), list()} | nil
  def block(%mod{} = struct, tensors) do
    case @blocks do
      %{^mod => name} ->
        opts = struct |> Map.from_struct() |> Map.to_list()
        {name, if(opts == [], do: tensors, else: tensors ++ [opts])}

      %{} ->
        nil
    end
  end

  @doc """
  Whether engine op `name` maps elements independently (the ops a function given to
  `Nx.reduce/4` or `Nx.window_reduce/5` may use).
  """
  @spec elementwise?(atom()) :: boolean()
  def elementwise?(name), do: name in @elementwise

  @doc """
  Whether Nx op `name` (an `Nx.Backend` callback or `Nx.Defn.Expr` op) maps elements
  independently: the ops a function given to `Nx.reduce/4` or `Nx.window_reduce/5` of complex
  type may use (`ExBurn.Defn.Complex` applies them slice by slice).
  """
  @spec nx_elementwise?(atom()) :: boolean()
  def nx_elementwise?(name), do: name in @nx_elementwise

  @doc """
  Whether Nx op `name` takes a function (`reduce`, `window_reduce`): its last argument must be
  given as the body of that function (see `ExBurn.Defn.Builder.fold_body/2`).
  """
  @spec fold?(atom()) :: boolean()
  def fold?(name), do: name in @folds

  @doc "Whether `name` is an op with no tensor inputs (its last callback argument is backend options)."
  @spec creation?(atom()) :: boolean()
  def creation?(name), do: name in @creation

  @doc """
  Lowers Nx op `name` with output template `out` and Nx's arguments `args` (without `out`,
  and without the backend options of creation ops) into a recipe.

  Raises `ExBurn.Error` of kind `:unsupported` for ops outside `ops/0` and of kind
  `:unsupported_dtype` when a type is not one Burn holds.

  ## Examples

      iex> a = %{shape: {2}, type: {:s, 32}}
      iex> ExBurn.Defn.Lower.lower(:add, %{shape: {2}, type: {:s, 32}}, [a, a])
      {[a, a], [{:add, [out: {:s, 32}], [0, 1]}]}
      iex> ExBurn.Defn.Lower.lower(:exp, %{shape: {2}, type: {:f, 32}}, [a])
      {[a], [{:as_type, [dtype: {:f, 32}], [0]}, {:exp, [], [1]}]}
  """
  @spec lower(atom(), tensor(), list()) :: recipe()
  def lower(name, out, args) do
    types = Enum.map([out | tensors(args)], & &1.type)

    cond do
      Enum.any?(types, &ExBurn.Defn.Complex.complex?/1) -> ExBurn.Defn.Complex.lower(name, out, args)
      Enum.any?(types, &ExBurn.Defn.Narrow.emulated?/1) -> ExBurn.Defn.Narrow.lower(name, out, args, &lower/3)
      true -> lower_real(name, out, args)
    end
  end

  @doc """
  Lowers an op whose inputs and output are all real (`lower/3` without the complex dispatch;
  `ExBurn.Defn.Complex` lowers each part of a complex op with it).
  """
  @spec lower_real(atom(), tensor(), list()) :: recipe()
  def lower_real(name, out, args) do
    check_type!(name, out.type)
    do_lower(name, out, args)
  end

  @doc """
  The attributes of an engine `dot` with the given contracting and batch axes and result type,
  at the configured f32 precision (`ExBurn.dot_precision/0`); `ExBurn.Defn.Complex` builds its
  part dots with them too.
  """
  @spec dot_attrs([integer()], [integer()], [integer()], [integer()], {atom(), pos_integer()}) ::
          keyword()
  def dot_attrs(contract_a, batch_a, contract_b, batch_b, out_type) do
    [
      contract_a: contract_a,
      batch_a: batch_a,
      contract_b: contract_b,
      batch_b: batch_b,
      out: out_type,
      precision: ExBurn.dot_precision()
    ]
  end

  defp tensors(args) do
    args |> Enum.flat_map(&List.wrap/1) |> Enum.filter(&match?(%{shape: _, type: _}, &1))
  end

  defp check_type!(name, type) do
    unless type in ExBurn.Type.supported() do
      raise ExBurn.Error.new(
              kind: :unsupported_dtype,
              op: name,
              message:
                "type #{inspect(type)} is not supported by Burn (complex, f8 and sub-byte integers are not)"
            )
    end
  end

  # ---- element-wise ----

  defp do_lower(name, _out, [t]) when is_map_key(@unary, name), do: one([t], {@unary[name], [], [0]})
  defp do_lower(name, out, [t]) when name in @float_unary, do: cast_then([t], out.type, &{name, [], &1})

  defp do_lower(name, out, [a, b]) when name in @binary_typed,
    do: one([a, b], {name, [out: out.type], [0, 1]})

  defp do_lower(name, _out, [a, b]) when name in @binary_pred, do: one([a, b], {name, [], [0, 1]})

  defp do_lower(:as_type, out, [t]), do: one([t], {:as_type, [dtype: out.type], [0]})
  defp do_lower(:bitcast, out, [t]), do: one([t], {:bitcast, [dtype: out.type], [0]})
  defp do_lower(:select, out, [p, t, f]), do: one([p, t, f], {:select, [out: out.type], [0, 1, 2]})
  defp do_lower(:clip, out, [t, lo, hi]), do: cast_then([t, lo, hi], out.type, &{:clip, [], &1})

  # ---- creation ----

  defp do_lower(:constant, out, [number]),
    do: {[], [{:full, [shape: dims(out), dtype: out.type, value: number!(:constant, number)], []}]}

  defp do_lower(:eye, out, []), do: {[], [{:eye, [shape: dims(out), dtype: out.type], []}]}

  defp do_lower(:iota, out, [axis]),
    do: {[], [{:iota, [shape: dims(out), dtype: out.type, axis: axis], []}]}

  # ---- reductions ----

  defp do_lower(name, out, [t, opts]) when name in @reductions do
    attrs = [axes: opts[:axes], keep_axes: opts[:keep_axes] || false]
    attrs = if name in @typed_reductions, do: attrs ++ [out: out.type], else: attrs
    then_cast([t], out.type, {name, attrs, [0]}, result_type(name, out, t))
  end

  defp do_lower(name, out, [t, opts]) when name in [:argmax, :argmin] do
    attrs = [axis: opts[:axis], keep_axis: opts[:keep_axis] || false, tie_break: opts[:tie_break] || :low]
    one([t], {name, attrs ++ [out: out.type], [0]})
  end

  defp do_lower(name, out, [t, window, opts]) when name in @windows do
    attrs = [
      window_dims: Tuple.to_list(window),
      strides: opts[:strides],
      padding: opts[:padding],
      window_dilations: opts[:window_dilations]
    ]

    cast_then([t], out.type, &{name, attrs, &1})
  end

  defp do_lower(name, out, [t, source, init, window, opts]) when name in @window_scatters do
    attrs = [window_dims: Tuple.to_list(window), strides: opts[:strides], padding: opts[:padding]]
    cast_then([t, source, init], out.type, &{name, attrs, &1})
  end

  # ---- folds with a function, given as the engine program `body` of (element, acc) ----

  defp do_lower(:reduce, out, [t, acc, opts, body]) do
    attrs = [axes: opts[:axes], keep_axes: opts[:keep_axes] || false, body: body]
    cast_then([t, acc], out.type, &{:reduce, attrs, &1})
  end

  defp do_lower(:window_reduce, out, [t, acc, window, opts, body]) do
    attrs = [
      window_dims: Tuple.to_list(window),
      strides: opts[:strides],
      padding: opts[:padding],
      window_dilations: opts[:window_dilations],
      body: body
    ]

    cast_then([t, acc], out.type, &{:window_reduce, attrs, &1})
  end

  # ---- linear algebra, nn ----

  defp do_lower(:dot, out, [a, ca, ba, b, cb, bb]) do
    one([a, b], {:dot, dot_attrs(ca, ba, cb, bb, out.type), [0, 1]})
  end

  defp do_lower(:conv, out, [t, k, opts]) do
    keys = ~w(strides padding input_dilation kernel_dilation feature_group_size batch_group_size
              input_permutation kernel_permutation output_permutation)a

    attrs = Keyword.take(opts, keys) ++ [out: out.type, precision: ExBurn.dot_precision()]
    one([t, k], {:conv, attrs, [0, 1]})
  end

  defp do_lower(:triangular_solve, out, [a, b, opts]) do
    attrs = [
      lower: Keyword.get(opts, :lower, true),
      left_side: Keyword.get(opts, :left_side, true),
      # :conjugate transposes nothing; on real matrices (the only ones Burn holds) it is :none
      transform_a: if(opts[:transform_a] == :transpose, do: :transpose, else: :none)
    ]

    cast_then([a, b], out.type, &{:triangular_solve, attrs, &1})
  end

  # ---- shape ----

  defp do_lower(:reshape, out, [t]), do: one([t], {:reshape, [shape: dims(out)], [0]})
  defp do_lower(:squeeze, _out, [t, axes]), do: one([t], {:squeeze, [axes: axes], [0]})

  defp do_lower(:broadcast, out, [t, shape, axes]),
    do: cast_then([t], out.type, &{:broadcast, [shape: Tuple.to_list(shape), axes: axes], &1})

  defp do_lower(:transpose, _out, [t, axes]), do: one([t], {:transpose, [axes: axes], [0]})
  defp do_lower(:reverse, _out, [t, axes]), do: one([t], {:reverse, [axes: axes], [0]})

  defp do_lower(:pad, out, [t, value, config]),
    do: cast_then([t, value], out.type, &{:pad, [config: config], &1})

  defp do_lower(:slice, _out, [t, starts, lengths, strides]) do
    {static, dynamic, inputs} = split_starts(starts)
    attrs = [starts: static, lengths: lengths, strides: strides, dynamic: dynamic]
    one([t | inputs], {:slice, attrs, Enum.to_list(0..length(inputs))})
  end

  defp do_lower(:put_slice, out, [t, starts, update]) do
    {static, dynamic, inputs} = split_starts(starts)
    n = length(inputs)
    {casts, [rt, ru]} = casts([t, update], out.type, n + 2)
    attrs = [starts: static, dynamic: dynamic]
    {[t, update | inputs], casts ++ [{:put_slice, attrs, [rt, ru | Enum.to_list(2..(n + 1)//1)]}]}
  end

  defp do_lower(name, out, [tensors, axis]) when name in [:concatenate, :stack],
    do: cast_then(tensors, out.type, &{name, [axis: axis], &1})

  # ---- indexing ----

  defp do_lower(:gather, _out, [t, idx, opts]), do: one([t, idx], {:gather, [axes: opts[:axes]], [0, 1]})

  defp do_lower(name, out, [t, idx, upd, opts]) when name in [:indexed_add, :indexed_put],
    do: one([t, idx, upd], {name, [axes: opts[:axes], out: out.type], [0, 1, 2]})

  defp do_lower(name, _out, [t, idx, opts]) when name in [:take, :take_along_axis],
    do: one([t, idx], {name, [axis: opts[:axis]], [0, 1]})

  # ---- sorting and scans ----

  defp do_lower(:sort, _out, [t, opts]),
    do: one([t], {:sort, [axis: opts[:axis], descending: opts[:direction] == :desc], [0]})

  defp do_lower(:argsort, out, [t, opts]),
    do: one([t], {:argsort, [axis: opts[:axis], descending: opts[:direction] == :desc, out: out.type], [0]})

  defp do_lower(name, out, [t, opts]) when name in @cumulative,
    do: cast_then([t], out.type, &{name, [axis: opts[:axis], reverse: opts[:reverse] || false], &1})

  defp do_lower(name, _out, _args) do
    raise ExBurn.Error.new(kind: :unsupported, op: name, message: "#{name} is not supported by ExBurn")
  end

  # ---- helpers ----

  defp one(inputs, instr), do: {inputs, [instr]}

  # Casts the inputs whose type differs from `type`, then applies `fun` to the value numbers.
  defp cast_then(inputs, type, fun) do
    {casts, refs} = casts(inputs, type, length(inputs))
    {inputs, casts ++ [fun.(refs)]}
  end

  # Cast instructions for `inputs` (value numbers 0..) not of `type`; new values start at `next`.
  defp casts(inputs, type, next) do
    {casts, refs, _} =
      inputs
      |> Enum.with_index()
      |> Enum.reduce({[], [], next}, fn
        {%{type: ^type}, i}, {cs, refs, n} -> {cs, [i | refs], n}
        {_t, i}, {cs, refs, n} -> {[{:as_type, [dtype: type], [i]} | cs], [n | refs], n + 1}
      end)

    {Enum.reverse(casts), Enum.reverse(refs)}
  end

  # Applies `instr` (producing `produced`), then casts to `type` when Nx's type differs.
  defp then_cast(inputs, type, instr, type), do: one(inputs, instr)

  defp then_cast(inputs, type, instr, _produced),
    do: {inputs, [instr, {:as_type, [dtype: type], [length(inputs)]}]}

  # The type the engine produces for a reduction.
  defp result_type(name, _out, _t) when name in [:all, :any], do: {:u, 8}
  defp result_type(name, out, _t) when name in @typed_reductions, do: out.type
  defp result_type(_name, _out, t), do: t.type

  defp dims(%{shape: shape}), do: Tuple.to_list(shape)

  # Slice starts: integers stay attributes; tensors become inputs (their axes are `dynamic`).
  defp split_starts(starts) do
    starts
    |> Enum.with_index()
    |> Enum.reduce({[], [], []}, fn
      {s, _i}, {st, dy, ins} when is_integer(s) -> {[s | st], dy, ins}
      {t, i}, {st, dy, ins} -> {[0 | st], [i | dy], [t | ins]}
    end)
    |> then(fn {st, dy, ins} -> {Enum.reverse(st), Enum.reverse(dy), Enum.reverse(ins)} end)
  end

  defp number!(_op, n) when is_number(n) or n in [:nan, :infinity, :neg_infinity], do: n

  defp number!(op, other) do
    raise ExBurn.Error.new(
            kind: :unsupported_dtype,
            op: op,
            message: "#{inspect(other)} is not a number for a real tensor"
          )
  end
end
