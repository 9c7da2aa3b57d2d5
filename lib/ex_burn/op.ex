defmodule ExBurn.Op do
  @moduledoc """
  The op vocabulary shared with the native engine, and the eager entry point.

  Every tensor operation of ExBurn (the Nx backend, `ExBurn.BurnBridge`, compiled programs)
  is a value of the engine's op table: an atom for ops without attributes (`:exp`) or
  `{name, attrs}` with a map of attributes. `eval/4` runs one op: an eager op is a
  one-instruction program, one NIF call. Attributes the op does not have are refused
  (`ExBurn.Error` of kind `:argument` naming them and the accepted ones).
  """

  alias ExBurn.{Native, Options, Tensor}

  # The engine's op vocabulary, generated from the native op table (native/ex_burn_core/src/
  # op/table.rs, see its `vocabulary` module) into op/table.eterm: one `{family, name, facts}`
  # per op, in the table's order. Read here at compile time (no library needs to be loaded);
  # test/ex_burn/op_table_test.exs checks it against the loaded library, and the engine's
  # tests check it against the table. `ExBurn.BurnBridge` and `ExBurn.Defn.Lower` derive
  # their op lists from it.
  @table_path Path.join(__DIR__, "op/table.eterm")
  @external_resource @table_path
  {:ok, table} = :file.consult(@table_path)
  @table table

  @families @table
            |> Enum.chunk_by(&elem(&1, 0))
            |> Enum.map(fn [{family, _, _} | _] = ops -> {family, Enum.map(ops, &elem(&1, 1))} end)

  @float_functions for {:unary, name, %{float: true}} <- @table, do: name
  @typed_reductions for {:reduce, name, %{typed: true}} <- @table, do: name
  @elementwise for {_family, name, %{elementwise: true}} <- @table, do: name

  @doc """
  The engine's op names of `family` (`:unary`, `:binary`, `:compare`, `:logical`, `:reduce`,
  `:arg`, `:cumulative`, `:window`, `:window_scatter`, `:other`, or `:program` for the steps
  only programs have), or every family as a keyword list when called without one.

  ## Examples

      iex> ExBurn.Op.names(:logical)
      [:logical_and, :logical_or, :logical_xor]
  """
  @spec names() :: keyword([atom()])
  @spec names(atom()) :: [atom()]
  def names, do: @families

  def names(family) do
    case List.keyfind(@families, family, 0) do
      {_, names} ->
        names

      nil ->
        Options.fail(
          :names,
          "unknown op family #{Options.short(family)}; families: #{inspect(Keyword.keys(@families))}"
        )
    end
  end

  @doc """
  The op vocabulary as the engine declares it: `{family, name, facts}` per op, in the table's
  order. `facts` holds what differs from the plain case: `:nx` (the Nx operation it is when
  Nx names it otherwise, `nil` when Nx has none), `float: true` (integer input computes in
  `{:f, 32}`), `typed: true` (the `out` attribute is the accumulation type), `elementwise:
  true` (maps each element independently).

  ## Examples

      iex> List.keyfind(ExBurn.Op.table(), :neg, 1)
      {:unary, :neg, %{nx: :negate, elementwise: true}}
  """
  @spec table() :: [{atom(), atom(), map()}]
  def table, do: @table

  @doc "Unary float functions: integer input computes in `{:f, 32}`, as in Nx."
  @spec float_functions() :: [atom()]
  def float_functions, do: @float_functions

  @doc "Reductions whose `out` attribute gives the accumulation and result type."
  @spec typed_reductions() :: [atom()]
  def typed_reductions, do: @typed_reductions

  @doc "Ops that map each element independently (what the function of a fold may use)."
  @spec elementwise() :: [atom()]
  def elementwise, do: @elementwise

  @doc """
  The op vocabulary of the loaded native engine, in the form of `table/0` (which must equal it).
  """
  @spec native_table() :: [{atom(), atom(), map()}]
  def native_table, do: Native.call(:op_table, [], :op_table)

  @doc """
  Encodes an op and its attributes for the engine.

  Scalar attributes (`:value`) are tagged with `scalar/1`; types are normalised.

  ## Examples

      iex> ExBurn.Op.encode(:exp, [])
      :exp
      iex> ExBurn.Op.encode(:sum, axes: [0], keep_axes: true)
      {:sum, %{axes: [0], keep_axes: true}}
  """
  @spec encode(atom(), keyword()) :: atom() | {atom(), map()}
  def encode(name, _attrs) when not is_atom(name),
    do: Options.fail(:encode, "the op name must be an atom, got #{Options.short(name)}")

  def encode(name, []), do: name
  def encode(name, attrs), do: {name, attrs |> attrs!(name) |> Map.new(&encode_attr(&1, name))}

  defp encode_attr({:value, v}, op), do: {:value, scalar(v, op)}
  defp encode_attr({k, v}, _op) when k in [:dtype, :out] and not is_nil(v), do: {k, ExBurn.Type.normalize!(v)}
  defp encode_attr(kv, _op), do: kv

  @doc """
  Tags a number for the engine: `{:f, float}`, `{:i, int}`, `{:u, int}` (above the s64
  range), or `:nan`, `:infinity`, `:neg_infinity`.
  """
  @spec scalar(number() | atom(), atom()) :: tuple() | atom()
  def scalar(x, op \\ :scalar)
  def scalar(x, _op) when x in [:nan, :infinity, :neg_infinity], do: x
  def scalar(x, _op) when is_float(x), do: {:f, x}

  def scalar(x, _op) when is_integer(x) and x > 9_223_372_036_854_775_807 and x <= 18_446_744_073_709_551_615,
    do: {:u, x}

  def scalar(x, _op)
      when is_integer(x) and x >= -9_223_372_036_854_775_808 and x <= 9_223_372_036_854_775_807,
      do: {:i, x}

  def scalar(x, op) do
    Options.fail(
      op,
      "expected a number in the 64-bit range or :nan, :infinity, :neg_infinity, got #{Options.short(x)}"
    )
  end

  # Inputs per NIF call: decoding one costs about a microsecond on a normal scheduler, so
  # longer joins (concatenate, stack) run as a tree of calls and other ops (which take one to
  # three) refuse longer lists before reading them, as they do attribute lists longer than
  # any op has.
  @per_call 1_024
  @max_attrs 64

  @eval_opts [
    device: [
      type: {:or, [nil, :device]},
      default: nil,
      doc: "where creation ops (no inputs) place their result (default: `ExBurn.default_device/0`)"
    ]
  ]

  @doc """
  Runs one op on `inputs` and returns its result tensors. An op takes at most 1,024 inputs;
  `:concatenate` and `:stack` take any number (more than 1,024 run as a tree of joins, after
  checking that the parts and the result fit the device together).

  ## Options

  #{Options.docs(@eval_opts)}
  """
  @spec eval(atom(), [Tensor.t()], keyword(), keyword()) :: [Tensor.t()]
  def eval(name, inputs, attrs \\ [], opts \\ []) do
    unless is_atom(name), do: Options.fail(:eval, "the op name must be an atom, got #{Options.short(name)}")
    opts = Options.validate!(opts, @eval_opts, name)
    refs = refs!(inputs, name)
    attrs = attrs!(attrs, name)
    device = device_of(inputs, opts[:device])
    op = encode(name, attrs)

    if ExBurn.Format.at_most?(refs, @per_call) do
      :eval_op |> Native.call([op, refs, device], name) |> Enum.map(&Tensor.wrap/1)
    else
      fits!(inputs, device, name)
      [Tensor.wrap(joined(op, encode(:concatenate, Keyword.take(attrs, [:axis])), refs, device, name))]
    end
  end

  # The parts of a tree join and its result live together: both must fit the device (one
  # call is checked by the engine; the parts of a tree each fit on their own).
  defp fits!(inputs, device, name) do
    elements = Enum.reduce(inputs, 0, &(Tensor.numel(&1) + &2))
    bytes = 2 * elements * (inputs |> Enum.map(&ExBurn.Type.byte_size(&1.type)) |> Enum.max())

    case ExBurn.Device.room(device) do
      room when is_integer(room) and bytes > room ->
        raise ExBurn.Error.new(
                kind: :out_of_memory,
                op: name,
                message:
                  "joining #{length(inputs)} tensors would take #{bytes} bytes on #{inspect(device)} " <>
                    "(the parts and the result), more than the #{room} bytes it can hold; " <>
                    "refused before allocating"
              )

      _ ->
        :ok
    end
  end

  # A join of many tensors as a tree of joins of at most @per_call each (every call decodes
  # its inputs on a normal scheduler: a bounded number of them); `concat` joins the parts.
  # NIF calls cost the process no reductions: it yields between them, so a long join never
  # holds its scheduler for more than one call.
  defp joined(op, concat, refs, device, name) do
    parts =
      for chunk <- Enum.chunk_every(refs, @per_call) do
        [part] = Native.call(:eval_op, [op, chunk, device], name)
        :erlang.yield()
        part
      end

    case parts do
      [one] ->
        one

      _ ->
        result = joined(concat, concat, Enum.map(parts, &elem(&1, 0)), device, name)
        for {ref, _, _, _} <- parts, do: Native.call(:tensor_deallocate, [ref], name)
        result
    end
  end

  @doc "Like `eval/4` for ops with one result."
  @spec eval1(atom(), [Tensor.t()], keyword(), keyword()) :: Tensor.t()
  def eval1(name, inputs, attrs \\ [], opts \\ []) do
    case eval(name, inputs, attrs, opts) do
      [t] -> t
      other -> Options.fail(name, "the op gives #{length(other)} results, not one")
    end
  end

  defp refs!(inputs, op) when is_list(inputs) do
    unless op in [:concatenate, :stack] or ExBurn.Format.at_most?(inputs, @per_call),
      do:
        Options.fail(
          op,
          "at most #{@per_call} inputs per op (concatenate and stack take more), got #{Options.short(inputs)}"
        )

    unless Options.proper_list?(inputs), do: Options.fail(op, "expected a proper list of ExBurn.Tensor")

    Enum.map(inputs, fn
      %Tensor{ref: r} -> r
      other -> Options.fail(op, "expected a list of ExBurn.Tensor, got an element #{Options.short(other)}")
    end)
  end

  defp refs!(other, op), do: Options.fail(op, "expected a list of ExBurn.Tensor, got #{Options.short(other)}")

  defp attrs!(attrs, op) do
    if is_list(attrs) and ExBurn.Format.at_most?(attrs, @max_attrs) and Keyword.keyword?(attrs),
      do: attrs,
      else:
        Options.fail(
          op,
          "attributes must be a keyword list of at most #{@max_attrs} entries, got #{Options.short(attrs)}"
        )
  end

  defp device_of([%Tensor{device: d} | _], _device), do: d
  defp device_of([], nil), do: ExBurn.default_device()
  defp device_of([], device), do: device
end
