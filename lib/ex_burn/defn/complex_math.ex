defmodule ExBurn.Defn.Complex.Math do
  @moduledoc false
  # Complex arithmetic and elementary functions written as real engine ops on the two parts,
  # for `ExBurn.Defn.Complex`. A value is `{:c, re, im, shape, part_type}` where `re`/`im` are
  # recipe references (`im` may be `:zero`); every function takes and returns the recipe `r`.
  # The formulas are those of the `Complex` library that Nx's binary backend uses (principal
  # branches), and so are the special values at infinity of `sqrt`, `modulus`, `arg` (log),
  # `phase` (cbrt), `polar` at angle 0, division by an infinite real, and `asin`/`acos` of
  # non-finite values. Elsewhere non-finite parts follow IEEE arithmetic on the parts.

  alias ExBurn.Defn.Recipe

  @doc "The elementary functions on complex values this module defines."
  def functions,
    do: ~w(log log1p expm1 sigmoid rsqrt cbrt sin cos tan sinh cosh tanh asin acos atan asinh acosh atanh)a

  @doc "`fun(x)` for one of `functions/0`."
  def apply(fun, x, r), do: fun(fun, x, r)

  defp fun(:log, x, r), do: log(x, r)
  defp fun(:log1p, x, r), do: x |> add(const(x, 1.0, 0.0), r) |> then(fn {v, r} -> log(v, r) end)

  defp fun(:expm1, x, r) do
    {e, r} = exp(x, r)
    add(e, const(x, -1.0, 0.0), r)
  end

  defp fun(:sigmoid, x, r) do
    {n, r} = neg(x, r)
    {e, r} = exp(n, r)
    {d, r} = add(e, const(x, 1.0, 0.0), r)
    divide(const(x, 1.0, 0.0), d, r)
  end

  defp fun(:rsqrt, x, r) do
    {s, r} = sqrt(x, r)
    divide(const(x, 1.0, 0.0), s, r)
  end

  # from_polar(cbrt(|z|), phase(z) / 3)
  defp fun(:cbrt, {:c, _, _, _, ft} = x, r) do
    {m, r} = modulus(x, r)
    {m, r} = un(r, :cbrt, m)
    {t, r} = phase(x, r)
    {t, r} = scale(r, t, 1 / 3, ft)
    polar(x, m, t, r)
  end

  defp fun(:sin, x, r), do: trig(x, r, {:sin, :cosh}, {:cos, :sinh}, 1.0)
  defp fun(:cos, x, r), do: trig(x, r, {:cos, :cosh}, {:sin, :sinh}, -1.0)
  defp fun(:sinh, x, r), do: trig(x, r, {:sinh, :cos}, {:cosh, :sin}, 1.0)
  defp fun(:cosh, x, r), do: trig(x, r, {:cosh, :cos}, {:sinh, :sin}, 1.0)

  defp fun(:tan, x, r) do
    {s, r} = fun(:sin, x, r)
    {c, r} = fun(:cos, x, r)
    divide(s, c, r)
  end

  defp fun(:tanh, x, r) do
    {s, r} = fun(:sinh, x, r)
    {c, r} = fun(:cosh, x, r)
    divide(s, c, r)
  end

  # As Complex.asin/acos: a non-finite part gives NaN + NaN i.
  defp fun(name, x, r) when name in [:asin, :acos] do
    {y, r} = arc(name, x, r)
    nan_unless_finite(x, y, r)
  end

  # i/2 (log(1 - i z) - log(1 + i z))
  defp fun(:atan, x, r) do
    {iz, r} = multiply(const(x, 0.0, 1.0), x, r)
    {a, r} = subtract(const(x, 1.0, 0.0), iz, r)
    {b, r} = add(const(x, 1.0, 0.0), iz, r)
    {a, r} = log(a, r)
    {b, r} = log(b, r)
    {d, r} = subtract(a, b, r)
    multiply(const(x, 0.0, 0.5), d, r)
  end

  # log(z + sqrt(z z + 1))
  defp fun(:asinh, x, r), do: arc_hyperbolic(x, 1.0, r)
  # log(z + sqrt(z z - 1))
  defp fun(:acosh, x, r), do: arc_hyperbolic(x, -1.0, r)

  # log((1 + z) / (1 - z)) / 2
  defp fun(:atanh, x, r) do
    {a, r} = add(const(x, 1.0, 0.0), x, r)
    {b, r} = subtract(const(x, 1.0, 0.0), x, r)
    {q, r} = divide(a, b, r)
    {l, r} = log(q, r)
    multiply(const(x, 0.5, 0.0), l, r)
  end

  # -i log(i z + sqrt(1 - z z))
  defp arc(:asin, x, r) do
    {zz, r} = multiply(x, x, r)
    {t, r} = subtract(const(x, 1.0, 0.0), zz, r)
    {t, r} = sqrt(t, r)
    {iz, r} = multiply(const(x, 0.0, 1.0), x, r)
    {t, r} = add(iz, t, r)
    {t, r} = log(t, r)
    multiply(const(x, 0.0, -1.0), t, r)
  end

  # -i log(z + sqrt(z z - 1))
  defp arc(:acos, x, r) do
    {zz, r} = multiply(x, x, r)
    {t, r} = add(zz, const(x, -1.0, 0.0), r)
    {t, r} = sqrt(t, r)
    {t, r} = add(x, t, r)
    {t, r} = log(t, r)
    multiply(const(x, 0.0, -1.0), t, r)
  end

  defp nan_unless_finite({:c, re, im, _, ft}, y, r) do
    {{:c, yr, yi, shape, _}, r} = materialize_value(y, r)
    {finite, r} = both(r, :logical_and, re, im, &finite/2)
    {nan, r} = scalar(r, ft, :nan)
    {yr, r} = Recipe.emit(r, :select, [out: ft], [finite, yr, nan])
    {yi, r} = Recipe.emit(r, :select, [out: ft], [finite, yi, nan])
    {{:c, yr, yi, shape, ft}, r}
  end

  defp arc_hyperbolic(x, c, r) do
    {zz, r} = multiply(x, x, r)
    {t, r} = add(zz, const(x, c, 0.0), r)
    {t, r} = sqrt(t, r)
    {t, r} = add(x, t, r)
    log(t, r)
  end

  # re = f1(x) g1(y), im = sign f2(x) g2(y)
  defp trig({:c, re, im, shape, ft}, r, {f1, g1}, {f2, g2}, sign) do
    im = zeroed(im, shape, ft)
    {im, r} = materialize(r, im)
    {a, r} = un(r, f1, re)
    {b, r} = un(r, g1, im)
    {c, r} = un(r, f2, re)
    {d, r} = un(r, g2, im)
    {new_re, r} = bin(r, :multiply, a, b, ft)
    {new_im, r} = bin(r, :multiply, c, d, ft)
    {new_im, r} = if sign < 0, do: un(r, :neg, new_im), else: {new_im, r}
    {{:c, new_re, new_im, shape, ft}, r}
  end

  # ---- arithmetic ----

  # Constants (see `const/3`) become scalar references where they are used.
  defp lift({:const, _, _, _, _} = c, r), do: materialize_const(c, r)
  defp lift(v, r), do: {v, r}

  @doc "a + b"
  def add(a, b, r) do
    {a, r} = lift(a, r)
    {b, r} = lift(b, r)
    add_values(a, b, r)
  end

  defp add_values({:c, ar, ai, shape, ft}, {:c, br, bi, _, _}, r) do
    {re, r} = part_op(r, :add, ar, br, ft)
    {im, r} = part_op(r, :add, ai, bi, ft)
    {{:c, re, im, shape, ft}, r}
  end

  @doc "a - b"
  def subtract(a, b, r) do
    {nb, r} = neg(b, r)
    add(a, nb, r)
  end

  @doc "-a"
  def neg(a, r) do
    {a, r} = lift(a, r)
    neg_value(a, r)
  end

  defp neg_value({:c, re, im, shape, ft}, r) do
    {re, r} = if re == :zero, do: {:zero, r}, else: un(r, :neg, re)
    {im, r} = if im == :zero, do: {:zero, r}, else: un(r, :neg, im)
    {{:c, re, im, shape, ft}, r}
  end

  @doc "a * b"
  def multiply(a, b, r) do
    {a, r} = lift(a, r)
    {b, r} = lift(b, r)
    multiply_values(a, b, r)
  end

  defp multiply_values({:c, ar, ai, shape, ft}, {:c, br, bi, _, _}, r) do
    {rr, r} = mul(r, ar, br, ft)
    {ii, r} = mul(r, ai, bi, ft)
    {ri, r} = mul(r, ar, bi, ft)
    {ir, r} = mul(r, ai, br, ft)
    {ii, r} = if ii == :zero, do: {:zero, r}, else: un(r, :neg, ii)
    {re, r} = part_op(r, :add, rr, ii, ft)
    {im, r} = part_op(r, :add, ri, ir, ft)
    {{:c, re, im, shape, ft}, r}
  end

  @doc "a / b = a conj(b) / |b|^2"
  def divide(a, b, r) do
    {a, r} = lift(a, r)
    {b, r} = lift(b, r)
    divide_values(a, b, r)
  end

  # As Complex.divide: a finite numerator over an infinite real divisor (zero imaginary part)
  # is 0 + 0i (the formula would give Inf / Inf).
  # A real numerator over a complex divisor keeps its zero imaginary part in the products (as
  # Complex does: 0 * Inf is NaN).
  defp divide_values({:c, _, ai, _, _} = a, {:c, br, bi, shape, ft} = b, r) do
    {{:c, ar, ai, _, _} = a, r} = if ai == :zero and bi != :zero, do: materialize_value(a, r), else: {a, r}
    {nbi, r} = if bi == :zero, do: {:zero, r}, else: un(r, :neg, bi)
    {num, r} = multiply(a, {:c, br, nbi, shape, ft}, r)
    {den, r} = abs2(b, r)
    {{:c, nr, ni, s, _}, r} = materialize_value(num, r)
    {re, r} = bin(r, :divide, nr, den, ft)
    {im, r} = bin(r, :divide, ni, den, ft)
    {finite, r} = both(r, :logical_and, ar, ai, &finite/2)
    {inf_re, r} = un(r, :is_infinity, br)

    {real, r} =
      if bi == :zero do
        {inf_re, r}
      else
        {zero_im, r} = eq(r, bi, 0.0, ft)
        Recipe.emit(r, :logical_and, [], [inf_re, zero_im])
      end

    {zero_case, r} = Recipe.emit(r, :logical_and, [], [finite, real])
    {zero, r} = scalar(r, ft, 0.0)
    {re, r} = Recipe.emit(r, :select, [out: ft], [zero_case, zero, re])
    {im, r} = Recipe.emit(r, :select, [out: ft], [zero_case, zero, im])
    {{:c, re, im, s, ft}, r}
  end

  @doc "exp(a)"
  def exp({:c, re, im, shape, ft}, r) do
    {im, r} = materialize(r, zeroed(im, shape, ft))
    {e, r} = un(r, :exp, re)
    {c, r} = un(r, :cos, im)
    {s, r} = un(r, :sin, im)
    {new_re, r} = bin(r, :multiply, e, c, ft)
    {new_im, r} = bin(r, :multiply, e, s, ft)
    {{:c, new_re, new_im, shape, ft}, r}
  end

  @doc "log(a) = log|a| + i atan2(im, re), as Complex.log (see `arg/2`)"
  def log({:c, _, _, shape, ft} = x, r) do
    {m, r} = modulus(x, r)
    {l, r} = un(r, :log, m)
    {t, r} = arg(x, r)
    {{:c, l, t, shape, ft}, r}
  end

  @doc """
  The principal square root: t = sqrt((|z| + |re|) / 2); re >= 0: (t, im / 2t); else
  (|im| / 2t, copysign(t, im)). Special values as Complex.sqrt, in its order: a NaN part gives
  NaN + NaN i, an infinite imaginary part Inf + im i, re = Inf gives Inf + 0i, re = -Inf 0 + Inf i.
  """
  def sqrt({:c, re, im, shape, ft}, r) do
    {im, r} = materialize(r, zeroed(im, shape, ft))
    {{:c, new_re, new_im, _, _}, r} = sqrt_finite({:c, re, im, shape, ft}, r)
    {zero, r} = scalar(r, ft, 0.0)
    {inf, r} = scalar(r, ft, :infinity)
    {nan, r} = scalar(r, ft, :nan)
    {neg_inf, r} = scalar(r, ft, :neg_infinity)

    cases = [
      {re, neg_inf, {zero, inf}},
      {re, inf, {inf, zero}},
      {im, neg_inf, {inf, neg_inf}},
      {im, inf, {inf, inf}}
    ]

    {new_re, new_im, r} =
      Enum.reduce(cases, {new_re, new_im, r}, fn {part, value, {cr, ci}}, {nr, ni, r} ->
        {hit, r} = Recipe.emit(r, :equal, [], [part, value])
        {nr, r} = Recipe.emit(r, :select, [out: ft], [hit, cr, nr])
        {ni, r} = Recipe.emit(r, :select, [out: ft], [hit, ci, ni])
        {nr, ni, r}
      end)

    {any_nan, r} = both(r, :logical_or, re, im, &un(&1, :is_nan, &2))
    {new_re, r} = Recipe.emit(r, :select, [out: ft], [any_nan, nan, new_re])
    {new_im, r} = Recipe.emit(r, :select, [out: ft], [any_nan, nan, new_im])
    {{:c, new_re, new_im, shape, ft}, r}
  end

  defp sqrt_finite({:c, re, im, shape, ft}, r) do
    {im, r} = materialize(r, zeroed(im, shape, ft))
    {sq, r} = abs2({:c, re, im, shape, ft}, r)
    {mag, r} = un(r, :sqrt, sq)
    {abs_re, r} = un(r, :abs, re)
    {sum, r} = bin(r, :add, mag, abs_re, ft)
    {t, r} = scale(r, sum, 0.5, ft)
    {t, r} = un(r, :sqrt, t)
    {two_t, r} = bin(r, :add, t, t, ft)
    {zero, r} = scalar(r, ft, 0.0)
    {is_zero, r} = Recipe.emit(r, :equal, [], [t, zero])
    {im_over, r} = bin(r, :divide, im, two_t, ft)
    {abs_im, r} = un(r, :abs, im)
    {abs_im_over, r} = bin(r, :divide, abs_im, two_t, ft)
    {neg_t, r} = un(r, :neg, t)
    {im_neg, r} = Recipe.emit(r, :less, [], [im, zero])
    {signed_t, r} = Recipe.emit(r, :select, [out: ft], [im_neg, neg_t, t])
    {re_pos, r} = Recipe.emit(r, :greater_equal, [], [re, zero])
    {new_re, r} = Recipe.emit(r, :select, [out: ft], [re_pos, t, abs_im_over])
    {new_im, r} = Recipe.emit(r, :select, [out: ft], [re_pos, im_over, signed_t])
    {new_re, r} = Recipe.emit(r, :select, [out: ft], [is_zero, zero, new_re])
    {new_im, r} = Recipe.emit(r, :select, [out: ft], [is_zero, im, new_im])
    {{:c, new_re, new_im, shape, ft}, r}
  end

  @doc """
  a ** b as Complex.pow: for |a| = rho, phase(a) = t, s = rho ** re(b) exp(-im(b) t) and
  u = re(b) t + im(b) log(rho), s cos u + i s sin u; a = 0 gives 1 for b = 0 and 0 otherwise,
  b = 1 gives a, b = -1 gives 1 / a; a non-finite part gives NaN + NaN i (but 0 ** Inf is 0).
  `a` and `b` have the same shape and both parts.
  """
  def pow({:c, ar, ai, shape, ft} = a, {:c, br, bi, _, _}, r) do
    {rho, r} = modulus(a, r)
    {t, r} = phase(a, r)
    {s, r} = bin(r, :pow, rho, br, ft)
    {k, r} = bin(r, :multiply, bi, t, ft)
    {k, r} = un(r, :neg, k)
    {k, r} = un(r, :exp, k)
    {s, r} = bin(r, :multiply, s, k, ft)
    {u, r} = bin(r, :multiply, br, t, ft)
    {l, r} = un(r, :log, rho)
    {l, r} = bin(r, :multiply, bi, l, ft)
    {u, r} = bin(r, :add, u, l, ft)
    {{:c, re, im, _, _}, r} = polar(a, s, u, r)
    {{:c, inv_re, inv_im, _, _}, r} = divide(const(a, 1.0, 0.0), a, r)

    {zero, r} = scalar(r, ft, 0.0)
    {one, r} = scalar(r, ft, 1.0)
    {nan, r} = scalar(r, ft, :nan)
    {b_real, r} = eq(r, bi, 0.0, ft)
    {a_zero, r} = both_eq(r, ar, ai, 0.0, ft)
    {b_zero, r} = both_eq(r, br, bi, 0.0, ft)
    {b_one, r} = eq(r, br, 1.0, ft)
    {b_one, r} = Recipe.emit(r, :logical_and, [], [b_one, b_real])
    {b_minus_one, r} = eq(r, br, -1.0, ft)
    {b_minus_one, r} = Recipe.emit(r, :logical_and, [], [b_minus_one, b_real])
    {a_finite, r} = both(r, :logical_and, ar, ai, &finite/2)
    {b_finite, r} = both(r, :logical_and, br, bi, &finite/2)
    {finite, r} = Recipe.emit(r, :logical_and, [], [a_finite, b_finite])
    {not_finite, r} = un(r, :logical_not, finite)
    {b_inf, r} = eq(r, br, :infinity, ft)
    {zero_to_inf, r} = Recipe.emit(r, :logical_and, [], [a_zero, b_inf])
    {zero_to_inf, r} = Recipe.emit(r, :logical_and, [], [zero_to_inf, b_real])
    {zero_or_one, r} = Recipe.emit(r, :select, [out: ft], [b_zero, one, zero])

    # lowest precedence first
    cases = [
      {b_minus_one, inv_re, inv_im},
      {b_one, ar, ai},
      {a_zero, zero_or_one, zero},
      {not_finite, nan, nan},
      {zero_to_inf, zero, zero}
    ]

    {re, im, r} =
      Enum.reduce(cases, {re, im, r}, fn {hit, cr, ci}, {re, im, r} ->
        {re, r} = Recipe.emit(r, :select, [out: ft], [hit, cr, re])
        {im, r} = Recipe.emit(r, :select, [out: ft], [hit, ci, im])
        {re, im, r}
      end)

    {{:c, re, im, shape, ft}, r}
  end

  @doc "|a|^2 as a real reference"
  def abs2({:c, re, im, _shape, ft}, r) do
    {rr, r} = mul(r, re, re, ft)
    {ii, r} = mul(r, im, im, ft)
    part_op(r, :add, rr, ii, ft)
  end

  @doc """
  |a| as a real reference, with Complex.abs's special values: NaN when both parts are NaN,
  otherwise Inf when a part is not finite.
  """
  def modulus({:c, re, im, _shape, ft} = x, r) do
    {sq, r} = abs2(x, r)
    {m, r} = un(r, :sqrt, sq)
    {finite, r} = both(r, :logical_and, re, im, &finite/2)
    {inf, r} = scalar(r, ft, :infinity)
    {m, r} = Recipe.emit(r, :select, [out: ft], [finite, m, inf])

    if im == :zero do
      {m, r}
    else
      {nan_re, r} = un(r, :is_nan, re)
      {nan_im, r} = un(r, :is_nan, im)
      {both_nan, r} = Recipe.emit(r, :logical_and, [], [nan_re, nan_im])
      {nan, r} = scalar(r, ft, :nan)
      Recipe.emit(r, :select, [out: ft], [both_nan, nan, m])
    end
  end

  @doc """
  atan2(im, re) as Complex.atan2 computes it for Complex.log: IEEE atan2, except that a finite
  imaginary part over re = -Inf gives +pi.
  """
  @spec arg(tuple(), Recipe.t()) :: {Recipe.ref(), Recipe.t()}
  def arg({:c, re, im, shape, ft}, r) do
    {im, r} = materialize(r, zeroed(im, shape, ft))
    {t, r} = Recipe.emit(r, :atan2, [out: ft], [im, re])
    {neg_inf, r} = scalar(r, ft, :neg_infinity)
    {re_neg_inf, r} = Recipe.emit(r, :equal, [], [re, neg_inf])
    {im_finite, r} = finite(r, im)
    {hit, r} = Recipe.emit(r, :logical_and, [], [re_neg_inf, im_finite])
    {pi, r} = scalar(r, ft, :math.pi())
    Recipe.emit(r, :select, [out: ft], [hit, pi, t])
  end

  @doc """
  The phase as Complex.phase computes it (for cbrt): `arg/2`, except -Inf - Inf i gives 5 pi / 4
  and NaN +- Inf i gives +- pi / 2.
  """
  def phase({:c, re, im, shape, ft}, r) do
    {im, r} = materialize(r, zeroed(im, shape, ft))
    {t, r} = arg({:c, re, im, shape, ft}, r)
    {neg_inf, r} = scalar(r, ft, :neg_infinity)
    {re_neg_inf, r} = Recipe.emit(r, :equal, [], [re, neg_inf])
    {im_neg_inf, r} = Recipe.emit(r, :equal, [], [im, neg_inf])
    {hit, r} = Recipe.emit(r, :logical_and, [], [re_neg_inf, im_neg_inf])
    {v, r} = scalar(r, ft, 5 * :math.pi() / 4)
    {t, r} = Recipe.emit(r, :select, [out: ft], [hit, v, t])
    {re_nan, r} = un(r, :is_nan, re)
    {im_inf, r} = un(r, :is_infinity, im)
    {hit, r} = Recipe.emit(r, :logical_and, [], [re_nan, im_inf])
    {zero, r} = scalar(r, ft, 0.0)
    {im_pos, r} = Recipe.emit(r, :greater, [], [im, zero])
    {half_pi, r} = scalar(r, ft, :math.pi() / 2)
    {neg_half_pi, r} = scalar(r, ft, -:math.pi() / 2)
    {v, r} = Recipe.emit(r, :select, [out: ft], [im_pos, half_pi, neg_half_pi])
    Recipe.emit(r, :select, [out: ft], [hit, v, t])
  end

  @doc "m (cos t + i sin t) for real references m and t; t = 0 gives m + 0i (as Complex.from_polar)"
  def polar({:c, _, _, shape, ft}, m, t, r) do
    {c, r} = un(r, :cos, t)
    {s, r} = un(r, :sin, t)
    {re, r} = bin(r, :multiply, m, c, ft)
    {im, r} = bin(r, :multiply, m, s, ft)
    {zero, r} = scalar(r, ft, 0.0)
    {t_zero, r} = Recipe.emit(r, :equal, [], [t, zero])
    {re, r} = Recipe.emit(r, :select, [out: ft], [t_zero, m, re])
    {im, r} = Recipe.emit(r, :select, [out: ft], [t_zero, zero, im])
    {{:c, re, im, shape, ft}, r}
  end

  @doc "The constant re + im i, labelled with `like`'s shape and part type (a scalar broadcast by the ops)."
  def const({:c, _, _, shape, ft}, re, im), do: {:const, re, im, shape, ft}

  # ---- helpers ----

  # Constants become scalar references on first use.
  defp materialize_const({:const, re, im, shape, ft}, r) do
    {re_ref, r} = scalar(r, ft, re)
    {im_ref, r} = if im == 0.0, do: {:zero, r}, else: scalar(r, ft, im)
    {{:c, re_ref, im_ref, shape, ft}, r}
  end

  defp zeroed(:zero, shape, ft), do: {:zero, shape, ft}
  defp zeroed(ref, _shape, _ft), do: ref

  defp materialize(r, {:zero, shape, ft}),
    do: Recipe.emit(r, :full, [shape: Tuple.to_list(shape), dtype: ft, value: 0.0], [])

  defp materialize(r, ref), do: {ref, r}

  defp materialize_value({:c, re, im, shape, ft}, r) do
    {re, r} = materialize(r, zeroed(re, shape, ft))
    {im, r} = materialize(r, zeroed(im, shape, ft))
    {{:c, re, im, shape, ft}, r}
  end

  defp scalar(r, ft, v) when is_atom(v), do: Recipe.emit(r, :full, [shape: [], dtype: ft, value: v], [])
  defp scalar(r, ft, v), do: Recipe.emit(r, :full, [shape: [], dtype: ft, value: v * 1.0], [])

  # Whether a part is finite (neither NaN nor infinite).
  defp finite(r, ref) do
    {nan, r} = un(r, :is_nan, ref)
    {inf, r} = un(r, :is_infinity, ref)
    {bad, r} = Recipe.emit(r, :logical_or, [], [nan, inf])
    un(r, :logical_not, bad)
  end

  # `test` of both parts joined with `join`; a `:zero` part is left out (finite, not NaN).
  defp both(r, join, re, im, test) do
    {results, r} = [re, im] |> Enum.reject(&(&1 == :zero)) |> Enum.map_reduce(r, &test.(&2, &1))

    case results do
      [a] -> {a, r}
      [a, b] -> Recipe.emit(r, join, [], [a, b])
    end
  end

  # Whether a part equals `value`.
  defp eq(r, ref, value, ft) do
    {v, r} = scalar(r, ft, value)
    Recipe.emit(r, :equal, [], [ref, v])
  end

  defp both_eq(r, re, im, value, ft) do
    {a, r} = eq(r, re, value, ft)
    {b, r} = eq(r, im, value, ft)
    Recipe.emit(r, :logical_and, [], [a, b])
  end

  defp scale(r, ref, k, ft) do
    {s, r} = scalar(r, ft, k)
    bin(r, :multiply, ref, s, ft)
  end

  defp un(r, op, ref), do: Recipe.emit(r, op, [], [ref])
  defp bin(r, op, a, b, ft), do: Recipe.emit(r, op, [out: ft], [a, b])

  defp mul(r, :zero, _b, _ft), do: {:zero, r}
  defp mul(r, _a, :zero, _ft), do: {:zero, r}
  defp mul(r, a, b, ft), do: bin(r, :multiply, a, b, ft)

  defp part_op(r, :add, :zero, b, _ft), do: {b, r}
  defp part_op(r, :add, a, :zero, _ft), do: {a, r}
  defp part_op(r, op, a, b, ft), do: bin(r, op, a, b, ft)
end
