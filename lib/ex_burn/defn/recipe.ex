defmodule ExBurn.Defn.Recipe do
  @moduledoc false
  # Internal to the Defn compiler and the Nx backend.
  # A recipe under construction: engine instructions over numbered values, as
  # `ExBurn.Defn.Lower.lower/3` returns them (`0..n-1` are the inputs, instruction `k` defines
  # value `n + k`). Used where one Nx op becomes several engine ops.

  defstruct inputs: [], next: 0, instrs: []

  @type t :: %__MODULE__{inputs: list(), next: non_neg_integer(), instrs: list()}
  @type ref :: non_neg_integer()

  @doc "A recipe reading `inputs` (values `0..length(inputs)-1`)."
  @spec new(list()) :: t()
  def new(inputs), do: %__MODULE__{inputs: inputs, next: length(inputs)}

  @doc "Appends engine op `op` with `attrs` on values `args`; returns its value."
  @spec emit(t(), atom(), keyword(), [ref()]) :: {ref(), t()}
  def emit(%__MODULE__{} = r, op, attrs, args) do
    {r.next, %{r | next: r.next + 1, instrs: [{op, attrs, args} | r.instrs]}}
  end

  @doc """
  Appends a recipe returned by `ExBurn.Defn.Lower.lower/3` whose inputs are the values `refs`;
  returns the value of its result.
  """
  @spec embed(t(), {list(), list()}, [ref()]) :: {ref(), t()}
  def embed(%__MODULE__{} = r, {_inputs, instrs}, refs) do
    {values, r} =
      Enum.reduce(instrs, {List.to_tuple(refs), r}, fn {op, attrs, args}, {values, r} ->
        {ref, r} = emit(r, op, attrs, Enum.map(args, &elem(values, &1)))
        {:erlang.append_element(values, ref), r}
      end)

    {elem(values, tuple_size(values) - 1), r}
  end

  @doc "The finished recipe `{inputs, instrs}`; its result is the last instruction's value."
  @spec finish(t()) :: {list(), list()}
  def finish(%__MODULE__{inputs: inputs, instrs: instrs}), do: {inputs, Enum.reverse(instrs)}
end
