defmodule ExBurn.CollectiveTest do
  # ExBurn.Collective.all_reduce/1 on the CPU (CI has no second device: the CPU listed more than
  # once, summed through the first part's device); the NCCL path runs in the engine's tests on
  # two GPUs.
  use ExUnit.Case, async: true

  alias ExBurn.{Collective, Tensor}
  import ExBurn.Test.Boundary, only: [error: 1]

  doctest ExBurn.Collective

  defp t(values, opts \\ []), do: Tensor.new(values, opts)

  test "containers of the same structure sum place by place, each part keeps its structure" do
    parts =
      for k <- 1..3 do
        %{b: {t([k * 1.0]), [t([[k * 2.0, k * 3.0]])]}, a: t([k * 10.0, -k * 1.0])}
      end

    summed = Collective.all_reduce(parts)
    assert length(summed) == 3

    for s <- summed do
      assert Tensor.to_list(s.a) == [60.0, -6.0]
      {one, [two]} = s.b
      assert Tensor.to_list(one) == [6.0]
      assert Tensor.to_list(two) == [[12.0, 18.0]]
      assert two.shape == {1, 2} and two.device == :cpu
    end

    # the inputs are untouched
    assert Tensor.to_list(hd(parts).a) == [10.0, -1.0]
  end

  test "f16, bf16 and f64 sum in their type; one part is returned as it is" do
    for type <- [{:f, 16}, {:bf, 16}, {:f, 64}] do
      [s, _] = Collective.all_reduce([t([1.5, -2.0], type: type), t([0.25, 4.0], type: type)])
      assert s.type == type and Tensor.to_list(s) == [1.75, 2.0]
    end

    a = t([1.0])
    assert [^a] = Collective.all_reduce([a])
  end

  test "bad parts are argument errors naming the problem" do
    a = t([1.0, 2.0])

    for {parts, expected} <- [
          {[], "non-empty list"},
          {:nope, "non-empty list"},
          {[%{w: a}, %{v: a}], "structure of the first"},
          {[{a, a}, {a}], "structure of the first"},
          {[%{w: a}, %{w: 1.0}], "expected ExBurn tensors"},
          {[[a | a]], "proper lists"},
          {[a, t([1.0, 2.0, 3.0])], "one shape and type"},
          {[a, t([1.0, 2.0], type: {:f, 64})], "one shape and type"},
          {[t([1, 2]), t([3, 4])], "float tensors"}
        ] do
      e = error(fn -> Collective.all_reduce(parts) end)
      assert e.kind == :argument and e.message =~ expected, "#{inspect(parts)}: #{e.message}"
    end
  end

  if Code.ensure_loaded?(Nx) do
    @tag :nx
    test "Nx tensors of ExBurn.Backend keep their names and backend" do
      a = Nx.tensor([[1.0, 2.0]], names: [:batch, :x], backend: ExBurn.Backend)
      b = Nx.tensor([[3.0, 4.0]], names: [:batch, :x], backend: ExBurn.Backend)
      [sa, sb] = Collective.all_reduce([%{"w" => a}, %{"w" => b}])
      assert sa["w"].names == [:batch, :x]
      assert Nx.to_list(sa["w"]) == [[4.0, 6.0]] and Nx.to_list(sb["w"]) == [[4.0, 6.0]]
      assert %ExBurn.Backend{} = sa["w"].data

      binary = Nx.tensor([1.0], backend: Nx.BinaryBackend)
      e = error(fn -> Collective.all_reduce([binary, binary]) end)
      assert e.kind == :argument and e.message =~ "ExBurn tensors"
    end
  end
end
