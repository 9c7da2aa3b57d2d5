if Code.ensure_loaded?(Nx) do
  defmodule ExBurn.Backend do
    @moduledoc """
    An `Nx.Backend` on Burn: tensors live on a Burn device (CPU, or a GPU in the GPU builds).

        Nx.default_backend(ExBurn.Backend)
        Nx.default_backend({ExBurn.Backend, device: {:cuda, 0}})

    ## Options

      * `:device` - where new tensors are created (default `ExBurn.default_device/0`)

    Every operation callback is generated from the op vocabulary of `ExBurn.Defn.Lower`, the
    table `ExBurn.Compiler` also uses: one eager op is one engine op (or a cast and the op), run
    in one NIF call. Results have exactly Nx's output type. Tensors of other backends given as
    arguments are copied onto the device of the first ExBurn argument.

    `block/4` runs the `Nx.Block`s listed by `ExBurn.Defn.Lower.native_blocks/0` natively and
    every other block through its default implementation (built from supported ops).

    Callbacks the engine cannot do are listed by `unsupported_callbacks/0` (computed as
    `Nx.Backend.behaviour_info(:callbacks)` minus the defined ones); they raise `ExBurn.Error`
    of kind `:unsupported` naming the op. Complex tensors are stored as pairs of floats (see
    `ExBurn.Defn.Complex` for the ops they support); types Burn lacks (f8, `f8_e4m3fn`, 2/4-bit
    integers) are held in a wider type, every result rounded or wrapped to the values
    `Nx.BinaryBackend` stores (see `ExBurn.Defn.Narrow`).
    """

    @behaviour Nx.Backend

    alias ExBurn.Defn.{Complex, Lower, Narrow}
    alias ExBurn.{Native, Op, Tensor}
    alias Nx.Tensor, as: T

    defstruct [:tensor]

    @type t :: %__MODULE__{tensor: Tensor.t()}

    # ---- conversions ----

    @doc "Wraps an `ExBurn.Tensor` as an `Nx.Tensor` of this backend (no copy)."
    @spec nx_tensor(Tensor.t()) :: Nx.Tensor.t()
    def nx_tensor(%Tensor{shape: shape, type: type} = t), do: wrap_as(t, %{shape: shape, type: type})

    @doc "The `ExBurn.Tensor` of an `Nx.Tensor` (copied onto the default device when it lives on another backend)."
    @spec burn_tensor(Nx.Tensor.t()) :: Tensor.t()
    def burn_tensor(%T{} = t), do: to_device(t, device_of([t]))

    # ---- options, data in and out ----

    @impl true
    def init(opts) do
      opts = ExBurn.Options.validate!(opts, [device: [type: {:or, [nil, :device]}, default: nil]], :backend)
      [device: opts[:device] || ExBurn.default_device()]
    end

    @impl true
    def from_binary(%T{} = out, binary, opts) do
      check_type!(:from_binary, out.type)
      {type, shape} = Complex.storage(out.type, out.shape)
      binary |> Narrow.decode(out.type) |> Tensor.from_binary(shape, type, device: opts[:device]) |> wrap(out)
    end

    # Complex tensors hold two floats per element; emulated types are converted to Nx's layout.
    @impl true
    def to_binary(%T{type: {:c, _}} = t, limit), do: Tensor.to_binary(burn(t), limit: 2 * limit)
    def to_binary(%T{} = t, limit), do: burn(t) |> Tensor.to_binary(limit: limit) |> Narrow.encode(t.type)

    @impl true
    def inspect(%T{} = t, inspect_opts) do
      limit =
        if inspect_opts.limit == :infinity, do: Nx.size(t), else: min(inspect_opts.limit + 1, Nx.size(t))

      Nx.Backend.inspect(t, to_binary(t, limit), inspect_opts)
    end

    @impl true
    def backend_deallocate(%T{data: %__MODULE__{tensor: t}}) do
      if Native.call(:tensor_deallocate, [t.ref], :backend_deallocate), do: :ok, else: :already_deallocated
    end

    @impl true
    def backend_copy(%T{} = t, __MODULE__, opts) do
      tensor = burn(t)
      copy = Native.call(:tensor_to_device, [tensor.ref, opts[:device]], :backend_copy)
      wrap(Tensor.wrap(copy), t)
    end

    def backend_copy(%T{} = t, backend, opts), do: backend.from_binary(t, to_binary(t, Nx.size(t)), opts)

    @impl true
    def backend_transfer(%T{data: %__MODULE__{tensor: %Tensor{device: d}}} = t, __MODULE__, opts) do
      if opts[:device] == d, do: t, else: move(t, __MODULE__, opts)
    end

    def backend_transfer(%T{} = t, backend, opts), do: move(t, backend, opts)

    defp move(t, backend, opts) do
      copy = backend_copy(t, backend, opts)
      backend_deallocate(t)
      copy
    end

    # A lazy stream of batches (as Nx.BinaryBackend returns): each slice is cut when taken.
    @impl true
    def to_batched(%T{} = out, %T{} = t, opts) do
      batch = elem(out.shape, 0)
      total = elem(t.shape, 0)
      full = div(total, batch)
      rest = rem(total, batch)
      last = if rest != 0 and opts[:leftover] == :repeat, do: full, else: full - 1

      Stream.map(0..last//1, fn
        ^full ->
          tail = batch_slice(%{out | shape: put_elem(out.shape, 0, rest)}, t, full * batch, rest)
          head = batch_slice(%{out | shape: put_elem(out.shape, 0, batch - rest)}, t, 0, batch - rest)
          run(:concatenate, out, [[tail, head], 0])

        i ->
          batch_slice(out, t, i * batch, batch)
      end)
    end

    defp batch_slice(out, t, start, len) do
      rank = tuple_size(t.shape)
      starts = [start | List.duplicate(0, rank - 1)]
      lengths = [len | t.shape |> Tuple.to_list() |> tl()]
      run(:slice, %{out | shape: List.to_tuple(lengths)}, [t, starts, lengths, List.duplicate(1, rank)])
    end

    # ---- blocks ----

    @impl true
    def block(struct, output, args, fun) do
      {tensors, _opts} = Enum.split_while(args, &(not is_list(&1)))

      case Lower.block(struct, tensors) do
        {name, lowered} -> run(name, output, lowered)
        nil -> apply(fun, [struct | args])
      end
    end

    # ---- op callbacks, generated from the op table ----

    @lowered Enum.filter(Nx.Backend.behaviour_info(:callbacks), fn {name, _} ->
               name in Lower.ops() and not Lower.fold?(name) and
                 name not in [:atan2, :bitcast, :triangular_solve]
             end)

    for {name, arity} <- @lowered do
      args = Macro.generate_arguments(arity - 1, __MODULE__)

      @impl true
      @doc "Runs `Nx.#{name}` as the engine op(s) `ExBurn.Defn.Lower` maps it to."
      if Lower.creation?(name) do
        {op_args, [opts]} = Enum.split(args, -1)

        def unquote(name)(out, unquote_splicing(args)),
          do: create(unquote(name), out, unquote(op_args), unquote(opts))
      else
        def unquote(name)(out, unquote_splicing(args)), do: run(unquote(name), out, unquote(args))
      end
    end

    @impl true
    @doc """
    Runs `Nx.atan2`. On complex tensors Nx defines it for zero imaginary parts only: as
    `Nx.BinaryBackend` (Complex.atan2), any other imaginary part raises `ArithmeticError`
    (checked with one scalar read per complex argument).
    """
    def atan2(out, a, b) do
      for %T{type: {:c, _}} = t <- [a, b],
          t |> Nx.imag() |> Nx.not_equal(0) |> Nx.any() |> Nx.to_number() == 1 do
        raise ArithmeticError, "Complex.atan2 only accepts real numbers as arguments"
      end

      run(:atan2, out, [a, b])
    end

    @impl true
    @doc """
    Runs `Nx.bitcast`. To or from an emulated type (`ExBurn.Defn.Narrow`) it goes through the
    tensor's binary in Nx's layout.
    """
    def bitcast(out, t) do
      if Narrow.emulated?(out.type) or Narrow.emulated?(t.type),
        do: from_binary(out, Nx.to_binary(t), device: device_of([t])),
        else: run(:bitcast, out, [t])
    end

    @impl true
    @doc """
    Runs `Nx.LinAlg.triangular_solve/3`. A zero on the diagonal of `a` raises `ArgumentError`
    ("can't solve for singular matrix"), as in `Nx.BinaryBackend`: one scalar read per call.
    Inside a compiled program nothing can raise: a singular system gives Inf/NaN there, as on
    EXLA.
    """
    def triangular_solve(out, a, b, opts) do
      if a |> Nx.take_diagonal() |> Nx.equal(0) |> Nx.any() |> Nx.to_number() == 1 do
        raise ArgumentError, "can't solve for singular matrix"
      end

      run(:triangular_solve, out, [a, b, opts])
    end

    # Folds: the function becomes a sub-program over (element, acc) of Nx's output type. A
    # function that cannot be traced into one (a closure of Nx.Defn.Evaluator, which refuses
    # expression arguments, or one that is not element-wise) is applied element by element on
    # the host, as Nx.BinaryBackend does, and the result copied back.

    @impl true
    @doc """
    Runs `Nx.reduce/4`. An element-wise function runs on the device (on whole slices); any
    other function, and functions given by `Nx.Defn.Evaluator`, are applied element by element
    on the host as `Nx.BinaryBackend` does.
    """
    def reduce(out, t, acc, opts, fun) do
      case fold_body(fun, out) do
        {:ok, body} -> run(:reduce, out, [t, acc, opts, body])
        :host -> on_host(out, [t, acc], &Nx.BinaryBackend.reduce(out, &1, &2, opts, fun))
      end
    end

    @impl true
    @doc "Runs `Nx.window_reduce/5`, on the device or the host as `reduce/5`."
    def window_reduce(out, t, acc, window, opts, fun) do
      case fold_body(fun, out) do
        {:ok, body} ->
          run(:window_reduce, out, [t, acc, window, opts, body])

        :host ->
          on_host(out, [t, acc], &Nx.BinaryBackend.window_reduce(out, &1, &2, window, opts, fun))
      end
    end

    defp fold_body(fun, %{type: type}) do
      if match?({:module, Nx.Defn.Evaluator}, Function.info(fun, :module)) do
        :host
      else
        scalar = Nx.template({}, type)
        {:ok, fun |> Nx.Defn.debug_expr_apply([scalar, scalar]) |> ExBurn.Defn.Builder.fold_body(type)}
      end
    rescue
      e in ExBurn.Error -> if e.kind == :unsupported, do: :host, else: reraise(e, __STACKTRACE__)
    end

    # Computes `fun` of `args` copied to Nx.BinaryBackend (the default backend meanwhile, for
    # tensors the function creates) and brings the result back to the device of `args`.
    defp on_host(out, args, fun) do
      device = device_of(args)
      host = Enum.map(args, &Nx.backend_copy(&1, Nx.BinaryBackend))
      result = Nx.with_default_backend(Nx.BinaryBackend, fn -> apply(fun, host) end)
      from_binary(out, Nx.to_binary(result), device: device)
    end

    # ---- unsupported callbacks (derived) ----

    @unsupported (Nx.Backend.behaviour_info(:callbacks) -- Module.definitions_in(__MODULE__, :def))
                 |> Enum.sort()

    @doc """
    The `Nx.Backend` callbacks ExBurn does not implement (each raises `ExBurn.Error` of kind
    `:unsupported` naming the op): `Nx.Backend.behaviour_info(:callbacks)` minus the callbacks
    this module defines.
    """
    @spec unsupported_callbacks() :: [{atom(), arity()}]
    def unsupported_callbacks, do: @unsupported

    for {name, arity} <- @unsupported do
      args = for i <- 1..arity//1, do: Macro.var(:"_arg#{i}", __MODULE__)

      @impl true
      @doc false
      def unquote(name)(unquote_splicing(args)) do
        raise ExBurn.Error.new(
                kind: :unsupported,
                op: unquote(name),
                message: "Nx.#{unquote(name)} is not supported by ExBurn.Backend (Burn has no equivalent)"
              )
      end
    end

    # ---- running recipes ----

    defp create(name, out, args, opts) do
      {[], instrs} = Lower.lower(name, out, args)
      [] |> execute(instrs, opts[:device]) |> wrap(out)
    end

    defp run(name, out, args) do
      {inputs, instrs} = Lower.lower(name, out, args)
      device = device_of(inputs)
      inputs |> Enum.map(&to_device(&1, device)) |> execute(instrs, device) |> wrap(out)
    end

    # Through Nx, invalid argument values (out-of-range indices, negative shifts, integer
    # division by zero) raise ArgumentError, as Nx.BinaryBackend does; ExBurn's own API raises
    # ExBurn.Error of kind :argument for them.
    defp execute(inputs, instrs, device) do
      values =
        Enum.reduce(instrs, List.to_tuple(inputs), fn {op, attrs, args}, values ->
          ins = Enum.map(args, &elem(values, &1))
          :erlang.append_element(values, Op.eval1(op, ins, attrs, device: device))
        end)

      elem(values, tuple_size(values) - 1)
    rescue
      e in ExBurn.Error ->
        if e.kind == :argument,
          do: reraise(ArgumentError, strip_op(e.message, e.op), __STACKTRACE__),
          else: reraise(e, __STACKTRACE__)
    end

    defp strip_op(message, op), do: String.replace_prefix(message, "#{op}: ", "")

    defp device_of(inputs) do
      Enum.find_value(inputs, ExBurn.default_device(), fn
        %T{data: %__MODULE__{tensor: %Tensor{device: d}}} -> d
        _ -> nil
      end)
    end

    # ExBurn tensors as they are; tensors of other backends are copied onto `device`.
    defp to_device(%T{data: %__MODULE__{tensor: t}}, _device), do: t

    defp to_device(%T{} = t, device) do
      check_type!(:backend_transfer, t.type)
      {type, shape} = Complex.storage(t.type, t.shape)
      t |> Nx.to_binary() |> Narrow.decode(t.type) |> Tensor.from_binary(shape, type, device: device)
    end

    defp burn(%T{data: %__MODULE__{tensor: t}}), do: t

    # Wraps an engine result in Nx's output template (complex: its storage); converts when the
    # engine's type differs.
    defp wrap(%Tensor{} = t, %{shape: _, type: _} = out) do
      case Complex.storage(out.type, out.shape) do
        {_type, shape} when shape != t.shape ->
          raise ExBurn.Error.new(
                  kind: :shape,
                  op: :wrap,
                  message: "engine result has shape #{inspect(t.shape)}, Nx expects #{inspect(shape)}"
                )

        {type, _shape} when type != t.type ->
          wrap(Op.eval1(:as_type, [t], dtype: type), out)

        _ ->
          wrap_as(t, out)
      end
    end

    defp wrap_as(t, %T{} = out), do: %{out | data: %__MODULE__{tensor: t}}

    defp wrap_as(t, %{shape: shape, type: type}) do
      names = List.duplicate(nil, tuple_size(shape))
      %T{data: %__MODULE__{tensor: t}, shape: shape, type: type, names: names}
    end

    defp check_type!(op, type) do
      unless type in ExBurn.Type.supported() or Complex.complex?(type) or Narrow.emulated?(type) do
        raise ExBurn.Error.new(
                kind: :unsupported_dtype,
                op: op,
                message: "type #{inspect(type)} is not supported by ExBurn.Backend"
              )
      end
    end
  end
end
