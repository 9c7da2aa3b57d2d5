defmodule ExBurn.Error do
  @moduledoc """
  The one exception ExBurn raises.

  Fields a caller can match on:

    * `:kind` - a stable atom: `:shape`, `:dtype`, `:unsupported_dtype`, `:unsupported`,
      `:device_unavailable`, `:device`, `:deallocated`, `:argument`, `:io`, `:corrupt`,
      `:out_of_memory` (the memory guard refused a request, or the device ran out),
      `:non_finite` (training met NaN or infinity), `:cancelled` (a `timeout:` passed, or the
      calling process exited), `:execution`, `:panic`, `:nif_not_loaded`
    * `:op` - the operation that failed (an atom), when known
    * `:message` - a human-readable explanation
    * `:details` - an optional map of extra context (shapes, types)
  """
  defexception [:kind, :op, :message, :details]

  @type t :: %__MODULE__{kind: atom(), op: atom() | nil, message: String.t(), details: map() | nil}

  @impl true
  def message(%__MODULE__{kind: kind, op: op, message: msg}) do
    prefix = if op, do: "#{op}: ", else: ""
    "#{prefix}#{msg} (#{kind})"
  end

  @doc """
  Builds an error without raising it.

  ## Options

    * `:kind` - the error kind (default `:execution`)
    * `:op` - the operation
    * `:message` (or `:reason`) - the explanation
    * `:details` - extra context

  ## Examples

      iex> ExBurn.Error.new(kind: :shape, op: :add, message: "bad shapes")
      %ExBurn.Error{kind: :shape, op: :add, message: "bad shapes", details: nil}
  """
  @spec new(keyword()) :: t()
  def new(opts) when not is_list(opts),
    do:
      new(
        kind: :argument,
        op: :new,
        message: "options must be a keyword list, got #{ExBurn.Format.term(opts)}"
      )
      |> raise()

  def new(opts) do
    unless ExBurn.Format.at_most?(opts, 64) and Keyword.keyword?(opts),
      do: refuse("options must be a keyword list, got #{ExBurn.Format.term(opts)}")

    kind = Keyword.get(opts, :kind, :execution)
    op = Keyword.get(opts, :op)

    unless is_atom(kind) and is_atom(op),
      do: refuse("kind and op must be atoms, got #{ExBurn.Format.term({kind, op})}")

    %__MODULE__{
      kind: kind,
      op: op,
      message: text(Keyword.get(opts, :message) || Keyword.get(opts, :reason) || "unknown error"),
      details: Keyword.get(opts, :details)
    }
  end

  defp refuse(message), do: raise(%__MODULE__{kind: :argument, op: :new, message: message})

  # Messages are strings; another term is shown bounded (never formatted in full).
  defp text(m) when is_binary(m), do: m
  defp text(m) when is_atom(m), do: Atom.to_string(m)
  defp text(m), do: ExBurn.Format.term(m)

  @doc """
  Wraps an `{:error, reason}` tuple (a string or a `{kind, message}` pair) in an error.

  ## Examples

      iex> ExBurn.Error.from_tuple({:error, {:shape, "bad"}}, op: :add)
      %ExBurn.Error{kind: :shape, op: :add, message: "bad", details: nil}
  """
  @spec from_tuple({:error, term()}, keyword()) :: t()
  def from_tuple({:error, {kind, msg}}, opts)
      when is_atom(kind) and is_list(opts) and (is_binary(msg) or is_atom(msg)),
      do: new(Keyword.merge(opts, kind: kind, message: to_string(msg)))

  def from_tuple({:error, msg}, opts) when is_list(opts) and (is_binary(msg) or is_atom(msg)),
    do: new(Keyword.put(opts, :message, to_string(msg)))

  def from_tuple(other, _opts),
    do:
      raise(
        new(
          kind: :argument,
          op: :from_tuple,
          message: "expected {:error, reason}, got #{ExBurn.Format.term(other)}"
        )
      )

  @doc "Formats an error with its kind, op and details for logs."
  @spec format_error(t()) :: String.t()
  def format_error(%__MODULE__{details: nil} = e), do: message(e)
  def format_error(%__MODULE__{details: d} = e), do: message(e) <> " " <> ExBurn.Format.term(d)

  def format_error(other),
    do:
      raise(
        new(
          kind: :argument,
          op: :format_error,
          message: "expected an ExBurn.Error, got #{ExBurn.Format.term(other)}"
        )
      )
end
