defmodule ExBurn.Defn.Complex do
  @moduledoc false
  # Internal to the Defn compiler and the Nx backend.
  # Complex numbers on an engine without complex types: a `{:c, 64}` (`{:c, 128}`) tensor of
  # shape `s` is stored as an `{:f, 32}` (`{:f, 64}`) tensor of shape `s ++ {2}` holding the real
  # and imaginary parts side by side, which is exactly Nx's binary layout (data moves in and out
  # unchanged).
  #
  # `ExBurn.Defn.Lower` sends every op with a complex input or output here. Ops that act on each
  # part alone (shape and indexing ops, `add`, `subtract`, `negate`, `sum`, ...) reuse the real
  # lowering once per part; arithmetic, `dot`, `abs`, `exp`, `sqrt`, comparisons, `fft`/`ifft`
  # (a DFT as real matrix products in f64, rounded once, like Nx's binary backend) and
  # `triangular_solve` (the engine's real solve on a 2n x 2n real embedding) are written out on
  # the parts; `reduce`/`window_reduce` apply the function's element-wise ops to the parts of
  # each reduced slice in turn. Other ops on complex tensors raise `ExBurn.Error` of kind
  # `:unsupported`.

  alias ExBurn.Defn.{Lower, Recipe}
  alias ExBurn.Defn.Complex.Math

  # The elementary functions lowered by Complex.Math (declared there once).
  @elementary Math.functions()

  @complex [{:c, 64}, {:c, 128}]

  # Ops that apply to the real and imaginary parts independently.
  @per_part ~w(reshape squeeze broadcast transpose reverse pad slice put_slice concatenate stack
               gather take take_along_axis select indexed_add indexed_put add subtract negate sum
               cumulative_sum window_sum)a

  # Argument positions of per-part ops that are shared by both parts (indices, predicates,
  # dynamic slice starts) rather than complex values.
  @shared %{gather: [1], take: [1], take_along_axis: [1], select: [0], indexed_add: [1], indexed_put: [1]}
  @shared_starts %{slice: 1, put_slice: 1}

  @doc "Whether `type` is complex."
  @spec complex?(term()) :: boolean()
  def complex?(type), do: type in @complex

  @doc """
  The engine type and shape holding a tensor of Nx `type` and `shape` (complex: the float part
  type and a trailing axis of 2; emulated types: their storage type, see
  `ExBurn.Defn.Narrow.storage/1`; other types unchanged).

  ## Examples

      iex> ExBurn.Defn.Complex.storage({:c, 64}, {3})
      {{:f, 32}, {3, 2}}
      iex> ExBurn.Defn.Complex.storage({:s, 8}, {3})
      {{:s, 8}, {3}}
      iex> ExBurn.Defn.Complex.storage({:f, 8}, {3})
      {{:f, 32}, {3}}
  """
  @spec storage(tuple(), tuple()) :: {tuple(), tuple()}
  def storage({:c, bits}, shape), do: {{:f, div(bits, 2)}, Tuple.insert_at(shape, tuple_size(shape), 2)}
  def storage(type, shape), do: {ExBurn.Defn.Narrow.storage(type), shape}

  @doc "Lowers Nx op `name` with complex inputs or output into a recipe of real engine ops."
  @spec lower(atom(), Lower.tensor(), list()) :: Lower.recipe()
  def lower(name, out, args) do
    inputs = args |> Enum.flat_map(&List.wrap/1) |> Enum.filter(&tensor?/1)
    r = Recipe.new(inputs)
    {values, {r, _}} = Enum.map_reduce(args, {r, 0}, &value/2)
    {result, r} = op(name, out, values, r)
    r |> result(result) |> Recipe.finish()
  end

  # ---- values: {:c, re, im, shape, part_type} (im may be :zero) or {:r, ref, shape, type} ----

  defp tensor?(%{shape: _, type: _}), do: true
  defp tensor?(_), do: false

  defp value(list, acc) when is_list(list) do
    if Enum.any?(list, &tensor?/1), do: Enum.map_reduce(list, acc, &value/2), else: {list, acc}
  end

  defp value(%{shape: shape, type: {:c, bits}}, {r, i}) do
    ft = {:f, div(bits, 2)}
    {re, r} = part(r, i, shape, 0)
    {im, r} = part(r, i, shape, 1)
    {{:c, re, im, shape, ft}, {r, i + 1}}
  end

  defp value(%{shape: shape, type: type}, {r, i}), do: {{:r, i, shape, type}, {r, i + 1}}
  defp value(other, acc), do: {other, acc}

  defp part(r, ref, shape, k) do
    dims = Tuple.to_list(shape)
    zeros = List.duplicate(0, length(dims))
    attrs = [starts: zeros ++ [k], lengths: dims ++ [1], strides: nil, dynamic: []]
    {s, r} = Recipe.emit(r, :slice, attrs, [ref])
    Recipe.emit(r, :reshape, [shape: dims], [s])
  end

  defp result(r, {:c, re, im, shape, ft}) do
    {re, r} = materialize(r, re, shape, ft)
    {im, r} = materialize(r, im, shape, ft)
    r |> Recipe.emit(:stack, [axis: tuple_size(shape)], [re, im]) |> elem(1)
  end

  defp result(r, {:r, _ref, _shape, _type}), do: r

  defp materialize(r, :zero, shape, ft), do: full(r, shape, ft, 0.0)
  defp materialize(r, ref, _shape, _ft), do: {ref, r}

  defp full(r, shape, type, value),
    do: Recipe.emit(r, :full, [shape: Tuple.to_list(shape), dtype: type, value: value], [])

  # NaN parts as Nx's NaN (positive): x86's invalid operations (Inf * 0) give a negative NaN.
  defp positive_nan(r, ref, ft) do
    {nan, r} = full(r, {}, ft, :nan)
    {is_nan, r} = Recipe.emit(r, :is_nan, [], [ref])
    Recipe.emit(r, :select, [out: ft], [is_nan, nan, ref])
  end

  # ---- ops ----

  defp op(name, out, values, r) when name in @per_part do
    {ft, _} = storage(out.type, out.shape)
    shared = Map.get(@shared, name, [])
    starts = Map.get(@shared_starts, name)

    {values, r} =
      values
      |> Enum.with_index()
      |> Enum.map_reduce(r, fn {v, i}, r ->
        if i in shared or i == starts, do: {{:shared, v}, r}, else: as_complex(r, v, ft)
      end)

    {[re, im], r} =
      Enum.map_reduce([:re, :im], r, fn which, r ->
        args = Enum.map(values, &pick(&1, which))
        embed_real(r, name, %{out | type: ft}, args)
      end)

    {{:c, re, im, out.shape, ft}, r}
  end

  defp op(:constant, out, [number], r) do
    {ft, _} = storage(out.type, out.shape)
    {re_v, im_v} = number_parts(number)
    {re, r} = full(r, out.shape, ft, re_v)
    {im, r} = full(r, out.shape, ft, im_v)
    {{:c, re, im, out.shape, ft}, r}
  end

  defp op(name, out, args, r) when name in [:eye, :iota] do
    {ft, _} = storage(out.type, out.shape)
    {re, r} = embed_real(r, name, %{out | type: ft}, args)
    {{:c, re, :zero, out.shape, ft}, r}
  end

  defp op(:as_type, %{type: {:c, _}} = out, [x], r) do
    {ft, _} = storage(out.type, out.shape)
    {re, im, r} = parts(r, x, ft)
    {{:c, re, im, out.shape, ft}, r}
  end

  # complex to real keeps the real part
  defp op(:as_type, out, [{:c, re, _im, _shape, _ft}], r), do: real(r, re, out)

  defp op(:multiply, out, [a, b], r) do
    {ft, _} = storage(out.type, out.shape)
    {ar, ai, r} = parts(r, a, ft)
    {br, bi, r} = parts(r, b, ft)
    {{rr, ii, ri, ir}, r} = products(r, {ar, ai}, {br, bi}, ft)
    {re, r} = sub(r, rr, ii, ft)
    {im, r} = add(r, ri, ir, ft)
    {{:c, re, im, out.shape, ft}, r}
  end

  defp op(:divide, out, [a, b], r) do
    {ft, _} = storage(out.type, out.shape)
    {ar, ai, r} = parts(r, a, ft)
    {br, bi, r} = parts(r, b, ft)
    {{:c, re, im, _, _}, r} = Math.divide({:c, ar, ai, out.shape, ft}, {:c, br, bi, out.shape, ft}, r)
    {{:c, re, im, out.shape, ft}, r}
  end

  defp op(:conjugate, out, [x], r) do
    {ft, _} = storage(out.type, out.shape)
    {re, im, r} = parts(r, x, ft)
    # a zero imaginary part becomes -0.0, as in Nx
    {im, r} = materialize(r, im, out.shape, ft)
    {im, r} = Recipe.emit(r, :neg, [], [im])
    {{:c, re, im, out.shape, ft}, r}
  end

  defp op(:sqrt, out, [x], r) do
    {ft, _} = storage(out.type, out.shape)
    {re, im, r} = parts(r, x, ft)
    {{:c, re, im, _, _}, r} = Math.sqrt({:c, re, im, out.shape, ft}, r)
    {{:c, re, im, out.shape, ft}, r}
  end

  defp op(:real, out, [x], r) do
    {re, _im, r} = parts(r, x, out.type)
    real(r, re, out)
  end

  defp op(:imag, out, [x], r) do
    {_re, im, r} = parts(r, x, out.type)
    {im, r} = materialize(r, im, out.shape, out.type)
    real(r, im, out)
  end

  defp op(:abs, out, [x], r) do
    {re, im, r} = parts(r, x, out.type)
    {ref, r} = Math.modulus({:c, re, im, out.shape, out.type}, r)
    real(r, ref, out)
  end

  defp op(:exp, out, [x], r) do
    {ft, _} = storage(out.type, out.shape)
    {re, im, r} = parts(r, x, ft)
    {im, r} = materialize(r, im, out.shape, ft)
    {e, r} = Recipe.emit(r, :exp, [], [re])
    {c, r} = Recipe.emit(r, :cos, [], [im])
    {s, r} = Recipe.emit(r, :sin, [], [im])
    {new_re, r} = mul(r, e, c, ft)
    {new_im, r} = mul(r, e, s, ft)
    {{:c, new_re, new_im, out.shape, ft}, r}
  end

  defp op(name, out, [a, b], r) when name in [:equal, :not_equal] do
    ft = wider(part_type(a), part_type(b))
    {ar, ai, r} = parts(r, a, ft)
    {br, bi, r} = parts(r, b, ft)
    {ai, r} = materialize(r, ai, out.shape, ft)
    {bi, r} = materialize(r, bi, out.shape, ft)
    {eq_re, r} = Recipe.emit(r, name, [], [ar, br])
    {eq_im, r} = Recipe.emit(r, name, [], [ai, bi])
    join = if name == :equal, do: :logical_and, else: :logical_or
    {ref, r} = Recipe.emit(r, join, [], [eq_re, eq_im])
    real(r, ref, out)
  end

  defp op(name, out, [{:c, re, im, _shape, _ft}], r) when name in [:is_nan, :is_infinity] do
    {a, r} = Recipe.emit(r, name, [], [re])
    {b, r} = Recipe.emit(r, name, [], [im])
    {ref, r} = Recipe.emit(r, :logical_or, [], [a, b])
    real(r, ref, out)
  end

  defp op(:dot, out, [a, ca, ba, b, cb, bb], r) do
    {ft, _} = storage(out.type, out.shape)
    {ar, ai, r} = parts(r, a, ft)
    {br, bi, r} = parts(r, b, ft)
    attrs = Lower.dot_attrs(ca, ba, cb, bb, ft)
    {rr, r} = dot(r, ar, br, attrs)
    {ii, r} = dot(r, ai, bi, attrs)
    {ri, r} = dot(r, ar, bi, attrs)
    {ir, r} = dot(r, ai, br, attrs)
    {re, r} = sub(r, rr, ii, ft)
    {im, r} = add(r, ri, ir, ft)
    {{:c, re, im, out.shape, ft}, r}
  end

  defp op(name, out, [x, opts], r) when name in [:fft, :ifft], do: fft(name, out, x, opts, r)

  defp op(name, out, [x], r) when name in @elementary do
    {ft, _} = storage(out.type, out.shape)
    {x, r} = as_complex(r, x, ft)
    Math.apply(name, x, r)
  end

  # In f64, rounded once (Nx.BinaryBackend computes Complex.pow in f64): i ** 2 is -1 + 0i in f32.
  defp op(:pow, out, [a, b], r) do
    {ft, _} = storage(out.type, out.shape)
    {a, r} = broadcast_value_to(r, a, out.shape)
    {b, r} = broadcast_value_to(r, b, out.shape)
    {{:c, re, im, _, _}, r} = Math.pow(a, b, r)
    {re, r} = Recipe.emit(r, :as_type, [dtype: ft], [re])
    {im, r} = Recipe.emit(r, :as_type, [dtype: ft], [im])
    {{:c, re, im, out.shape, ft}, r}
  end

  # Nx defines atan2 on complex numbers with zero imaginary parts (the phase of b + a i) and
  # raises ArithmeticError for others (Complex.atan2); `ExBurn.Backend.atan2/3` raises so before
  # running this, and a compiled program, which cannot raise, gives NaN + NaN i there.
  defp op(:atan2, out, [a, b], r) do
    {ft, _} = storage(out.type, out.shape)
    {ar, ai, r} = parts(r, a, ft)
    {br, bi, r} = parts(r, b, ft)
    {re, r} = bin(r, :atan2, ar, br, ft)

    {masks, r} =
      [{ai, value_shape(a)}, {bi, value_shape(b)}]
      |> Enum.reject(fn {im, _shape} -> im == :zero end)
      |> Enum.map_reduce(r, fn {im, shape}, r ->
        {zero, r} = full(r, {}, ft, 0.0)
        {mask, r} = Recipe.emit(r, :not_equal, [], [im, zero])
        broadcast_to(r, mask, shape, out.shape)
      end)

    case masks do
      [] ->
        {{:c, re, :zero, out.shape, ft}, r}

      masks ->
        {nonreal, r} =
          Enum.reduce(tl(masks), {hd(masks), r}, fn m, {acc, r} ->
            Recipe.emit(r, :logical_or, [], [acc, m])
          end)

        {nan, r} = full(r, {}, ft, :nan)
        {zero, r} = full(r, out.shape, ft, 0.0)
        {re, r} = Recipe.emit(r, :select, [out: ft], [nonreal, nan, re])
        {im, r} = Recipe.emit(r, :select, [out: ft], [nonreal, nan, zero])
        {{:c, re, im, out.shape, ft}, r}
    end
  end

  # A product over axes as a tree of complex multiplications (exact where the factors allow,
  # e.g. 1 * 2i * 3 = 6i; a polar product would give cos(pi/2) * 6 = -2.6e-7 in f32). Like
  # Nx's fold from 1, the first factor is multiplied by 1 + 0i first: exact for finite factors,
  # and an infinite part makes the other part NaN (Inf * 0), as in Nx.
  defp op(:product, out, [x, opts], r) do
    {ft, _} = storage(out.type, out.shape)
    {{:c, re, im, shape, _}, r} = as_complex(r, x, ft)
    rank = tuple_size(shape)
    axes = opts[:axes] || Enum.to_list(0..(rank - 1)//1)
    kept = Enum.to_list(0..(rank - 1)//1) -- axes
    kept_dims = Enum.map(kept, &elem(shape, &1))
    n = axes |> Enum.map(&elem(shape, &1)) |> Enum.product()

    flat = fn r, ref ->
      {ref, r} = Recipe.emit(r, :transpose, [axes: kept ++ axes], [ref])
      Recipe.emit(r, :reshape, [shape: kept_dims ++ [n]], [ref])
    end

    {re, r} = flat.(r, re)
    {im, r} = flat.(r, im)
    {re, im, r} = identity_first(r, re, im, kept_dims, n, ft)
    {re, im, r} = product_tree(r, re, im, kept_dims, n, ft)
    dims = Tuple.to_list(out.shape)
    {re, r} = Recipe.emit(r, :reshape, [shape: dims], [re])
    {im, r} = Recipe.emit(r, :reshape, [shape: dims], [im])
    {re, r} = positive_nan(r, re, ft)
    {im, r} = positive_nan(r, im, ft)
    {{:c, re, im, out.shape, ft}, r}
  end

  # As Nx.BinaryBackend: a window_reduce of multiply from 1.
  defp op(:window_product, out, [x, window, opts], r) do
    multiply = %{fold_ops: [{2, :multiply, out.type, [{:fold_value, 0}, {:fold_value, 1}]}], result: 2}
    {ft, _} = storage(out.type, out.shape)
    {one, r} = full(r, {}, ft, 1.0)
    {{:c, re, im, shape, ft}, r} = window_fold(out, x, {:c, one, :zero, {}, ft}, window, opts, multiply, r)
    {re, r} = positive_nan(r, re, ft)
    {im, r} = positive_nan(r, im, ft)
    {{:c, re, im, shape, ft}, r}
  end

  defp op(name, out, [x, opts], r) when name in [:all, :any] do
    {re, im, r} = parts(r, x, part_type(x))
    shape = value_shape(x)
    {zero, r} = full(r, {}, part_type(x), 0.0)
    {a, r} = Recipe.emit(r, :not_equal, [], [re, zero])

    {nz, r} =
      if im == :zero do
        {a, r}
      else
        {b, r} = Recipe.emit(r, :not_equal, [], [im, zero])
        Recipe.emit(r, :logical_or, [], [a, b])
      end

    mask = %{shape: shape, type: {:u, 8}, ref: nz}
    {ref, r} = embed_real(r, name, out, [mask, opts])
    {{:r, ref, out.shape, out.type}, r}
  end

  # (ar + ai i) * (kr + ki i) as four real convolutions.
  defp op(:conv, out, [x, k, opts], r) do
    {ft, _} = storage(out.type, out.shape)
    {xr, xi, r} = parts(r, x, ft)
    {kr, ki, r} = parts(r, k, ft)
    real_out = %{out | type: ft}

    conv = fn
      r, a, b when a == :zero or b == :zero ->
        {:zero, r}

      r, a, b ->
        ta = %{shape: value_shape(x), type: ft, ref: a}
        tb = %{shape: value_shape(k), type: ft, ref: b}
        embed_real(r, :conv, real_out, [ta, tb, opts])
    end

    {rr, r} = conv.(r, xr, kr)
    {ii, r} = conv.(r, xi, ki)
    {ri, r} = conv.(r, xr, ki)
    {ir, r} = conv.(r, xi, kr)
    {re, r} = sub(r, rr, ii, ft)
    {im, r} = add(r, ri, ir, ft)
    {{:c, re, im, out.shape, ft}, r}
  end

  defp op(:triangular_solve, out, [a, b, opts], r), do: triangular_solve(out, a, b, opts, r)

  defp op(:reduce, out, [x, acc, opts, %{fold_ops: _} = body], r), do: fold(out, x, acc, opts, body, r)

  defp op(:window_reduce, out, [x, acc, window, opts, %{fold_ops: _} = body], r),
    do: window_fold(out, x, acc, window, opts, body, r)

  defp op(name, _out, _values, _r) do
    raise ExBurn.Error.new(
            kind: :unsupported,
            op: name,
            message: "#{name} on complex tensors is not supported by ExBurn"
          )
  end

  # (1 + 0i) times the first entry of the last axis (length n) of the parts.
  defp identity_first(r, re, im, _kept_dims, 0, _ft), do: {re, im, r}

  defp identity_first(r, re, im, kept_dims, n, ft) do
    zeros = Enum.map(kept_dims, fn _ -> 0 end)

    cut = fn r, ref, start, len ->
      attrs = [starts: zeros ++ [start], lengths: kept_dims ++ [len], strides: nil, dynamic: []]
      Recipe.emit(r, :slice, attrs, [ref])
    end

    {re0, r} = cut.(r, re, 0, 1)
    {im0, r} = cut.(r, im, 0, 1)
    {one, r} = full(r, {}, ft, 1.0)
    {zero, r} = full(r, {}, ft, 0.0)
    {{rr, ii, ri, ir}, r} = products(r, {re0, im0}, {one, zero}, ft)
    {new_re, r} = sub(r, rr, ii, ft)
    {new_im, r} = add(r, ri, ir, ft)

    if n == 1 do
      {new_re, new_im, r}
    else
      axis = length(kept_dims)
      {re_rest, r} = cut.(r, re, 1, n - 1)
      {im_rest, r} = cut.(r, im, 1, n - 1)
      {re, r} = Recipe.emit(r, :concatenate, [axis: axis], [new_re, re_rest])
      {im, r} = Recipe.emit(r, :concatenate, [axis: axis], [new_im, im_rest])
      {re, im, r}
    end
  end

  # Multiplies the last axis (length n) of the parts down to length 1: halves times halves,
  # an odd length padded with 1 + 0i; an empty product is 1.
  defp product_tree(r, _re, _im, kept_dims, 0, ft) do
    {re, r} = full(r, List.to_tuple(kept_dims ++ [1]), ft, 1.0)
    {im, r} = full(r, List.to_tuple(kept_dims ++ [1]), ft, 0.0)
    {re, im, r}
  end

  defp product_tree(r, re, im, _kept_dims, 1, _ft), do: {re, im, r}

  defp product_tree(r, re, im, kept_dims, n, ft) when rem(n, 2) == 1 do
    config = Enum.map(kept_dims, fn _ -> {0, 0, 0} end) ++ [{0, 1, 0}]
    {one, r} = full(r, {}, ft, 1.0)
    {zero, r} = full(r, {}, ft, 0.0)
    {re, r} = Recipe.emit(r, :pad, [config: config], [re, one])
    {im, r} = Recipe.emit(r, :pad, [config: config], [im, zero])
    product_tree(r, re, im, kept_dims, n + 1, ft)
  end

  defp product_tree(r, re, im, kept_dims, n, ft) do
    h = div(n, 2)
    zeros = Enum.map(kept_dims, fn _ -> 0 end)

    half = fn r, ref, start ->
      attrs = [starts: zeros ++ [start], lengths: kept_dims ++ [h], strides: nil, dynamic: []]
      Recipe.emit(r, :slice, attrs, [ref])
    end

    {ar, r} = half.(r, re, 0)
    {ai, r} = half.(r, im, 0)
    {br, r} = half.(r, re, h)
    {bi, r} = half.(r, im, h)
    {{rr, ii, ri, ir}, r} = products(r, {ar, ai}, {br, bi}, ft)
    {re, r} = sub(r, rr, ii, ft)
    {im, r} = add(r, ri, ir, ft)
    product_tree(r, re, im, kept_dims, h, ft)
  end

  # ---- folds of a function (reduce, window_reduce) ----

  # As the engine folds real tensors, and Nx.BinaryBackend any: the accumulator, broadcast to
  # the kept positions, meets each reduced position's slice in row-major order, through the
  # function's ops (`ExBurn.Defn.Builder.fold_body/2`) applied to whole slices; unrolled here,
  # one application per reduced position.
  defp fold(out, x, acc, opts, body, r) do
    {ft, _} = storage(out.type, out.shape)
    {{:c, xr, xi, shape, _}, r} = as_complex(r, x, ft)
    {{:c, ar, ai, _, _}, r} = as_complex(r, acc, ft)
    rank = tuple_size(shape)
    axes = Enum.sort(opts[:axes] || Enum.to_list(0..(rank - 1)//1))
    kept = Enum.to_list(0..(rank - 1)//1) -- axes
    rest = Enum.map(kept, &elem(shape, &1))
    n = axes |> Enum.map(&elem(shape, &1)) |> Enum.product()

    flat = fn r, ref ->
      {ref, r} = Recipe.emit(r, :transpose, [axes: axes ++ kept], [ref])
      Recipe.emit(r, :reshape, [shape: [n | rest]], [ref])
    end

    {xr, r} = flat.(r, xr)
    {xi, r} = flat.(r, xi)
    {state, r} = broadcast_value(r, {:c, ar, ai, {}, ft}, rest)

    {{:c, re, im, _, _}, r} =
      Enum.reduce(0..(n - 1)//1, {state, r}, fn i, {state, r} ->
        slice = fn r, ref ->
          attrs = [
            starts: [i | Enum.map(rest, fn _ -> 0 end)],
            lengths: [1 | rest],
            strides: nil,
            dynamic: []
          ]

          {s, r} = Recipe.emit(r, :slice, attrs, [ref])
          Recipe.emit(r, :reshape, [shape: rest], [s])
        end

        {er, r} = slice.(r, xr)
        {ei, r} = slice.(r, xi)
        fold_step(r, body, {:c, er, ei, List.to_tuple(rest), ft}, state, ft)
      end)

    dims = Tuple.to_list(out.shape)
    {re, r} = Recipe.emit(r, :reshape, [shape: dims], [re])
    {im, r} = Recipe.emit(r, :reshape, [shape: dims], [im])
    {{:c, re, im, out.shape, ft}, r}
  end

  # The input padded with the accumulator; each window offset (row-major) is a strided view
  # holding that element of every window.
  defp window_fold(out, x, acc, window, opts, body, r) do
    {ft, _} = storage(out.type, out.shape)
    {{:c, xr, xi, shape, _}, r} = as_complex(r, x, ft)
    {{:c, ar, ai, _, _}, r} = as_complex(r, acc, ft)
    rank = tuple_size(shape)
    dims = Tuple.to_list(window)
    strides = opts[:strides] || List.duplicate(1, rank)
    dilations = opts[:window_dilations] || List.duplicate(1, rank)
    padding = opts[:padding] || List.duplicate({0, 0}, rank)
    config = Enum.map(padding, fn {lo, hi} -> {lo, hi, 0} end)
    {xr, r} = Recipe.emit(r, :pad, [config: config], [xr, ar])
    {xi, r} = Recipe.emit(r, :pad, [config: config], [xi, ai])
    counts = Tuple.to_list(out.shape)
    extent = Enum.zip_with(counts, strides, fn c, s -> (c - 1) * s + 1 end)
    {state, r} = broadcast_value(r, {:c, ar, ai, {}, ft}, counts)

    offsets =
      Enum.reduce(Enum.reverse(dims), [[]], fn d, acc ->
        for o <- 0..(d - 1)//1, rest <- acc, do: [o | rest]
      end)

    Enum.reduce(offsets, {state, r}, fn offset, {state, r} ->
      starts = Enum.zip_with(offset, dilations, &(&1 * &2))
      attrs = [starts: starts, lengths: extent, strides: strides, dynamic: []]
      {er, r} = Recipe.emit(r, :slice, attrs, [xr])
      {ei, r} = Recipe.emit(r, :slice, attrs, [xi])
      fold_step(r, body, {:c, er, ei, out.shape, ft}, state, ft)
    end)
  end

  defp broadcast_value(r, {:c, re, im, _shape, ft}, dims) do
    {re, r} = Recipe.emit(r, :broadcast, [shape: dims, axes: []], [re])
    {im, r} = Recipe.emit(r, :broadcast, [shape: dims, axes: []], [im])
    {{:c, re, im, List.to_tuple(dims), ft}, r}
  end

  # One application of the function's ops on values of the slice shape; the result is
  # converted to the accumulator's type.
  defp fold_step(r, %{fold_ops: ops, result: result}, element, {:c, _, _, shape, _} = state, ft) do
    {values, r} =
      Enum.reduce(ops, {%{0 => element, 1 => state}, r}, fn {k, name, type, args}, {values, r} ->
        args = fold_args(args, values)
        out = %{shape: shape, type: type}

        {value, r} =
          if complex?(type) or Enum.any?(List.flatten(args), &match?({:c, _, _, _, _}, &1)) do
            op(name, out, args, r)
          else
            {ref, r} = embed_real(r, name, out, Enum.map(args, &placeholder/1))
            {{:r, ref, shape, type}, r}
          end

        {Map.put(values, k, value), r}
      end)

    as_complex(r, values[result], ft)
  end

  defp fold_args(args, values) when is_list(args), do: Enum.map(args, &fold_args(&1, values))
  defp fold_args({:fold_value, k}, values), do: values[k]
  defp fold_args(other, _values), do: other

  # ---- triangular solve on the engine's real one ----

  # A real `a` solves the real and imaginary parts of `b` separately (`:conjugate` is then
  # `:none`). A complex `a` is first brought to a lower (upper) triangular left-side system
  # A x = b: `:conjugate` conjugates a (as Nx.BinaryBackend does: no transpose), `:transpose`
  # and a right-side solve (x A = b is A^T x^T = b^T) transpose a and flip `:lower`. Rows of A
  # and b are divided by A's diagonal (complex division), so A gets a unit diagonal, and the
  # unit-triangular complex matrix becomes the real 2n x 2n matrix of 2x2 blocks
  # [[re, -im], [im, re]] at rows 2i..2i+1, columns 2j..2j+1: with identity blocks on the
  # diagonal it is triangular like A, and the engine's real solve (in f64) applies to b as
  # interleaved real rows (re, im). Entries on the unused side of the diagonal are ignored,
  # as both Nx and the real solve ignore them; a zero on the diagonal gives Inf/NaN (no raise,
  # like the real solve). Everything runs in f64, rounded once to the part type.
  defp triangular_solve(out, a, b, opts, r) do
    {ft, _} = storage(out.type, out.shape)

    case a do
      {:c, _re, im, _shape, _ft} when im != :zero -> triangular_solve_complex_a(out, a, b, opts, ft, r)
      _ -> triangular_solve_real_a(out, a, b, opts, ft, r)
    end
  end

  defp triangular_solve_real_a(out, a, b, opts, ft, r) do
    {ar, :zero, r} = parts(r, a, ft)
    {br, bi, r} = parts(r, b, ft)
    a_t = %{shape: value_shape(a), type: ft, ref: ar}
    real_out = %{out | type: ft}

    solve = fn
      r, :zero ->
        {:zero, r}

      r, part ->
        embed_real(r, :triangular_solve, real_out, [a_t, %{shape: out.shape, type: ft, ref: part}, opts])
    end

    {re, r} = solve.(r, br)
    {im, r} = solve.(r, bi)
    {{:c, re, im, out.shape, ft}, r}
  end

  defp triangular_solve_complex_a(out, a, b, opts, ft, r) do
    wt = {:f, 64}
    a_shape = value_shape(a)
    rank = tuple_size(a_shape)
    batch = rank - 2
    n = elem(a_shape, rank - 1)
    batch_dims = a_shape |> Tuple.to_list() |> Enum.take(batch)
    vector? = tuple_size(out.shape) == rank - 1
    left? = Keyword.get(opts, :left_side, true)
    transform = Keyword.get(opts, :transform_a, :none)
    transpose_a? = if left?, do: transform == :transpose, else: transform != :transpose
    lower? = Keyword.get(opts, :lower, true) != transpose_a?
    swap = Enum.to_list(0..(batch - 1)//1) ++ [batch + 1, batch]

    {ar, ai, r} = parts(r, a, wt)
    {ai, r} = if transform == :conjugate, do: Recipe.emit(r, :neg, [], [ai]), else: {ai, r}
    {ar, r} = if transpose_a?, do: Recipe.emit(r, :transpose, [axes: swap], [ar]), else: {ar, r}
    {ai, r} = if transpose_a?, do: Recipe.emit(r, :transpose, [axes: swap], [ai]), else: {ai, r}

    {br, bi, r} = parts(r, b, wt)
    {bi, r} = materialize(r, bi, out.shape, wt)
    transpose_b? = not left? and not vector?
    {br, r} = if transpose_b?, do: Recipe.emit(r, :transpose, [axes: swap], [br]), else: {br, r}
    {bi, r} = if transpose_b?, do: Recipe.emit(r, :transpose, [axes: swap], [bi]), else: {bi, r}
    # b as a left-side right-hand side: [..., n] or [..., n, m]
    b_dims = if transpose_b?, do: batch_dims ++ [n, elem(out.shape, rank - 2)], else: Tuple.to_list(out.shape)
    b_shape = List.to_tuple(b_dims)

    # the diagonal, [..., n], and a mask of it, [..., n, n]
    {i, r} = Recipe.emit(r, :iota, [shape: [n, n], dtype: {:s, 32}, axis: 0], [])
    {j, r} = Recipe.emit(r, :iota, [shape: [n, n], dtype: {:s, 32}, axis: 1], [])
    {eye, r} = Recipe.emit(r, :equal, [], [i, j])
    {eye, r} = Recipe.emit(r, :broadcast, [shape: Tuple.to_list(a_shape), axes: [batch, batch + 1]], [eye])
    {zero, r} = full(r, {}, wt, 0.0)
    {one, r} = full(r, {}, wt, 1.0)

    diagonal = fn r, part ->
      {d, r} = Recipe.emit(r, :select, [out: wt], [eye, part, zero])
      Recipe.emit(r, :sum, [axes: [batch + 1], keep_axes: false, out: wt], [d])
    end

    {dr, r} = diagonal.(r, ar)
    {di, r} = diagonal.(r, ai)

    # rows divided by the diagonal entry of their row
    by_row = fn r, ref, dims ->
      Recipe.emit(r, :broadcast, [shape: dims, axes: Enum.to_list(0..batch)], [ref])
    end

    a_dims = Tuple.to_list(a_shape)
    {dra, r} = by_row.(r, dr, a_dims)
    {dia, r} = by_row.(r, di, a_dims)
    {{:c, ur, ui, _, _}, r} = Math.divide({:c, ar, ai, a_shape, wt}, {:c, dra, dia, a_shape, wt}, r)
    {ur, r} = Recipe.emit(r, :select, [out: wt], [eye, one, ur])
    {ui, r} = Recipe.emit(r, :select, [out: wt], [eye, zero, ui])

    {{:c, vr, vi, _, _}, r} =
      if vector? do
        Math.divide({:c, br, bi, b_shape, wt}, {:c, dr, di, b_shape, wt}, r)
      else
        {drb, r} = by_row.(r, dr, b_dims)
        {dib, r} = by_row.(r, di, b_dims)
        Math.divide({:c, br, bi, b_shape, wt}, {:c, drb, dib, b_shape, wt}, r)
      end

    # the real embedding [..., 2n, 2n] and the interleaved right-hand side [..., 2n(, m)]
    {nui, r} = Recipe.emit(r, :neg, [], [ui])
    {row0, r} = Recipe.emit(r, :stack, [axis: batch + 2], [ur, nui])
    {row1, r} = Recipe.emit(r, :stack, [axis: batch + 2], [ui, ur])
    {e, r} = Recipe.emit(r, :stack, [axis: batch + 1], [row0, row1])
    {e, r} = Recipe.emit(r, :reshape, [shape: batch_dims ++ [2 * n, 2 * n]], [e])
    {v, r} = Recipe.emit(r, :stack, [axis: batch + 1], [vr, vi])
    real_dims = batch_dims ++ [2 * n] ++ Enum.drop(b_dims, batch + 1)
    {v, r} = Recipe.emit(r, :reshape, [shape: real_dims], [v])
    attrs = [lower: lower?, left_side: true, transform_a: :none]
    {x, r} = Recipe.emit(r, :triangular_solve, attrs, [e, v])

    # de-interleaved, back to the caller's layout and part type
    pair_dims = batch_dims ++ [n, 2] ++ Enum.drop(b_dims, batch + 1)
    {x, r} = Recipe.emit(r, :reshape, [shape: pair_dims], [x])

    part = fn r, k ->
      starts = pair_dims |> Enum.map(fn _ -> 0 end) |> List.replace_at(batch + 1, k)
      lengths = List.replace_at(pair_dims, batch + 1, 1)
      {p, r} = Recipe.emit(r, :slice, [starts: starts, lengths: lengths, strides: nil, dynamic: []], [x])
      {p, r} = Recipe.emit(r, :reshape, [shape: b_dims], [p])
      {p, r} = if transpose_b?, do: Recipe.emit(r, :transpose, [axes: swap], [p]), else: {p, r}
      Recipe.emit(r, :as_type, [dtype: ft], [p])
    end

    {re, r} = part.(r, 0)
    {im, r} = part.(r, 1)
    {{:c, re, im, out.shape, ft}, r}
  end

  # ---- FFT: a DFT along `axis` as real matrix products in f64 ----

  defp fft(name, out, x, opts, r) do
    {ft, _} = storage(out.type, out.shape)
    axis = opts[:axis]
    n = opts[:length]
    {xr, xi, r} = parts(r, x, {:f, 64})
    shape = value_shape(x)
    last = tuple_size(shape) - 1

    perm =
      Enum.map(0..last, fn
        ^axis -> last
        ^last -> axis
        i -> i
      end)

    moved = Enum.reduce(Enum.with_index(perm), shape, fn {p, i}, s -> put_elem(s, i, elem(shape, p)) end)
    {xr, r} = move_and_fit(r, xr, perm, moved, n)
    {xi, r} = if xi == :zero, do: {:zero, r}, else: move_and_fit(r, xi, perm, moved, n)
    {c, s, r} = twiddles(r, n, if(name == :fft, do: -1, else: 1))
    attrs = Lower.dot_attrs([last], [], [0], [], {:f, 64})
    {xr_c, r} = dot(r, xr, c, attrs)
    {xi_s, r} = dot(r, xi, s, attrs)
    {xr_s, r} = dot(r, xr, s, attrs)
    {xi_c, r} = dot(r, xi, c, attrs)
    {re, r} = sub(r, xr_c, xi_s, {:f, 64})
    {im, r} = add(r, xr_s, xi_c, {:f, 64})
    result_shape = put_elem(moved, last, n)
    {re, r} = finish_part(r, re, name, n, opts[:eps], ft, perm, result_shape)
    {im, r} = finish_part(r, im, name, n, opts[:eps], ft, perm, result_shape)
    {{:c, re, im, out.shape, ft}, r}
  end

  # Puts the transformed axis last and pads (zeros) or crops it to `n`.
  defp move_and_fit(r, ref, perm, moved, n) do
    {ref, r} = Recipe.emit(r, :transpose, [axes: perm], [ref])
    last = tuple_size(moved) - 1
    len = elem(moved, last)

    cond do
      len < n ->
        {zero, r} = full(r, {}, {:f, 64}, 0.0)
        config = List.duplicate({0, 0, 0}, last) ++ [{0, n - len, 0}]
        Recipe.emit(r, :pad, [config: config], [ref, zero])

      len > n ->
        dims = moved |> put_elem(last, n) |> Tuple.to_list()
        attrs = [starts: List.duplicate(0, last + 1), lengths: dims, strides: nil, dynamic: []]
        Recipe.emit(r, :slice, attrs, [ref])

      true ->
        {ref, r}
    end
  end

  # cos and sin of sign * 2 pi (j k mod n) / n, an n x n matrix each.
  defp twiddles(r, n, sign) do
    {j, r} = Recipe.emit(r, :iota, [shape: [n, n], dtype: {:s, 64}, axis: 0], [])
    {k, r} = Recipe.emit(r, :iota, [shape: [n, n], dtype: {:s, 64}, axis: 1], [])
    {jk, r} = Recipe.emit(r, :multiply, [out: {:s, 64}], [j, k])
    {nn, r} = full(r, {}, {:s, 64}, n)
    {m, r} = Recipe.emit(r, :remainder, [out: {:s, 64}], [jk, nn])
    {m, r} = Recipe.emit(r, :as_type, [dtype: {:f, 64}], [m])
    {step, r} = full(r, {}, {:f, 64}, sign * 2 * :math.pi() / n)
    {angle, r} = Recipe.emit(r, :multiply, [out: {:f, 64}], [m, step])
    {c, r} = Recipe.emit(r, :cos, [], [angle])
    {s, r} = Recipe.emit(r, :sin, [], [angle])
    {c, s, r}
  end

  # Scales (inverse), zeroes magnitudes up to eps, rounds to the part type, moves the axis back.
  defp finish_part(r, :zero, _name, _n, _eps, ft, perm, shape) do
    {ref, r} = full(r, shape, ft, 0.0)
    Recipe.emit(r, :transpose, [axes: perm], [ref])
  end

  defp finish_part(r, ref, name, n, eps, ft, perm, _shape) do
    {ref, r} =
      if name == :ifft do
        {nn, r} = full(r, {}, {:f, 64}, n * 1.0)
        bin(r, :divide, ref, nn, {:f, 64})
      else
        {ref, r}
      end

    {ref, r} = zero_small(r, ref, eps)
    {ref, r} = Recipe.emit(r, :as_type, [dtype: ft], [ref])
    Recipe.emit(r, :transpose, [axes: perm], [ref])
  end

  defp zero_small(r, ref, nil), do: {ref, r}

  defp zero_small(r, ref, eps) do
    {mag, r} = Recipe.emit(r, :abs, [], [ref])
    {limit, r} = full(r, {}, {:f, 64}, eps * 1.0)
    {small, r} = Recipe.emit(r, :less_equal, [], [mag, limit])
    {zero, r} = full(r, {}, {:f, 64}, 0.0)
    Recipe.emit(r, :select, [out: {:f, 64}], [small, zero, ref])
  end

  # ---- helpers ----

  # Embeds the real lowering of `name` on placeholder arguments (maps with the `:ref` of the
  # value they stand for), wiring each input the lowering reads to its value.
  defp embed_real(r, name, out, args) do
    {inputs, _} = recipe = Lower.lower_real(name, out, args)
    Recipe.embed(r, recipe, Enum.map(inputs, & &1.ref))
  end

  defp real(r, ref, out) do
    {ref, r} = Recipe.emit(r, :as_type, [dtype: out.type], [ref])
    {{:r, ref, out.shape, out.type}, r}
  end

  # The parts of a value in float type `ft` (real values get a zero imaginary part).
  defp parts(r, {:c, re, im, _shape, ft}, ft), do: {re, im, r}

  defp parts(r, {:c, re, im, _shape, _other}, ft) do
    {re, r} = Recipe.emit(r, :as_type, [dtype: ft], [re])
    {im, r} = if im == :zero, do: {:zero, r}, else: Recipe.emit(r, :as_type, [dtype: ft], [im])
    {re, im, r}
  end

  defp parts(r, {:r, ref, _shape, _type}, ft) do
    {re, r} = Recipe.emit(r, :as_type, [dtype: ft], [ref])
    {re, :zero, r}
  end

  # The four part products of (ar + ai i)(br + bi i): {ar br, ai bi, ar bi, ai br}.
  defp products(r, {ar, ai}, {br, bi}, ft) do
    {rr, r} = mul(r, ar, br, ft)
    {ii, r} = mul(r, ai, bi, ft)
    {ri, r} = mul(r, ar, bi, ft)
    {ir, r} = mul(r, ai, br, ft)
    {{rr, ii, ri, ir}, r}
  end

  # A value as a complex one of part type `ft`, both parts materialised (for per-part ops).
  defp as_complex(r, list, ft) when is_list(list), do: Enum.map_reduce(list, r, &as_complex(&2, &1, ft))

  defp as_complex(r, value, ft) when is_tuple(value) and elem(value, 0) in [:c, :r] do
    shape = value_shape(value)
    {re, im, r} = parts(r, value, ft)
    {im, r} = materialize(r, im, shape, ft)
    {{:c, re, im, shape, ft}, r}
  end

  defp as_complex(r, other, _ft), do: {other, r}

  defp value_shape({:c, _, _, shape, _}), do: shape
  defp value_shape({:r, _, shape, _}), do: shape

  defp part_type({:c, _, _, _, ft}), do: ft
  defp part_type({:r, _, _, {:f, _} = t}), do: t
  defp part_type({:r, _, _, _}), do: {:f, 32}

  defp wider({:f, a}, {:f, b}), do: {:f, max(a, b)}

  # The placeholder tensor of one part (shared arguments as they are) for the real lowering.
  defp pick({:shared, v}, _which), do: placeholder(v)
  defp pick({:c, re, _im, shape, ft}, :re), do: %{shape: shape, type: ft, ref: re}
  defp pick({:c, _re, im, shape, ft}, :im), do: %{shape: shape, type: ft, ref: im}
  defp pick(list, which) when is_list(list), do: Enum.map(list, &pick(&1, which))
  defp pick(other, _which), do: other

  defp placeholder({:r, ref, shape, type}), do: %{shape: shape, type: type, ref: ref}
  defp placeholder(list) when is_list(list), do: Enum.map(list, &placeholder/1)
  defp placeholder(other), do: other

  defp mul(r, :zero, _b, _ft), do: {:zero, r}
  defp mul(r, _a, :zero, _ft), do: {:zero, r}
  defp mul(r, a, b, ft), do: bin(r, :multiply, a, b, ft)

  defp add(r, :zero, b, _ft), do: {b, r}
  defp add(r, a, :zero, _ft), do: {a, r}
  defp add(r, a, b, ft), do: bin(r, :add, a, b, ft)

  defp sub(r, a, :zero, _ft), do: {a, r}
  defp sub(r, :zero, b, _ft), do: Recipe.emit(r, :neg, [], [b])
  defp sub(r, a, b, ft), do: bin(r, :subtract, a, b, ft)

  defp bin(r, op, a, b, ft), do: Recipe.emit(r, op, [out: ft], [a, b])

  # A value as a complex one in f64 of shape `shape` (Nx's broadcast).
  defp broadcast_value_to(r, value, shape) do
    {{:c, re, im, from, ft}, r} = as_complex(r, value, {:f, 64})
    {re, r} = broadcast_to(r, re, from, shape)
    {im, r} = broadcast_to(r, im, from, shape)
    {{:c, re, im, shape, ft}, r}
  end

  # Nx's broadcast of an operand of shape `from` to the result shape `to` (trailing axes aligned).
  defp broadcast_to(r, ref, from, from), do: {ref, r}

  defp broadcast_to(r, ref, from, to) do
    offset = tuple_size(to) - tuple_size(from)
    axes = Enum.to_list(offset..(tuple_size(to) - 1)//1)
    Recipe.emit(r, :broadcast, [shape: Tuple.to_list(to), axes: axes], [ref])
  end

  defp dot(r, :zero, _y, _attrs), do: {:zero, r}
  defp dot(r, _x, :zero, _attrs), do: {:zero, r}
  defp dot(r, x, y, attrs), do: Recipe.emit(r, :dot, attrs, [x, y])

  defp number_parts(%{__struct__: Complex, re: re, im: im}), do: {re, im}
  defp number_parts(n), do: {n, 0.0}
end
