if Code.ensure_loaded?(Nx) do
  defmodule ExBurn.GpuExitTest do
    # A VM that halts while one of its processes issues GPU work exits with the status it was
    # given. The GPU libraries' exit handlers used to run while ExBurn's device thread still ran
    # queued cuBLAS products: SIGSEGV (status 139) instead of the VM's status. Each run is a
    # separate VM started with this one's code paths. Runs only where the loaded library has a
    # usable CUDA device.
    use ExUnit.Case, async: false

    @moduletag :nx
    @moduletag :cuda

    @child ~S"""
    {:ok, _} = Application.ensure_all_started([:nx, :ex_burn])
    dev = {ExBurn.Backend, device: {:cuda, 0}}
    a = Nx.iota({2048, 2048}, type: :f32, backend: dev) |> Nx.divide(4.0e6)

    Task.start(fn ->
      Enum.reduce(1..1_000_000, a, fn _, acc ->
        next = Nx.dot(acc, a) |> Nx.multiply(1.0e-3)
        if acc != a, do: Nx.backend_deallocate(acc)
        next
      end)
    end)

    Process.sleep(1500)
    System.halt(3)
    """

    defp child_status do
      paths = Enum.flat_map(:code.get_path(), &["-pa", List.to_string(&1)])
      elixir = System.find_executable("elixir")
      {_out, status} = System.cmd(elixir, paths ++ ["-e", @child], stderr_to_stdout: true)
      status
    end

    test "halting while another process issues GPU work exits with the given status" do
      assert [child_status(), child_status(), child_status()] == [3, 3, 3]
    end
  end
end
