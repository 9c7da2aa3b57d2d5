defmodule ExBurn.Test.ChildVM do
  @moduledoc false
  # Runs Elixir code in a separate OS process (a fresh BEAM with this project's compiled ExBurn
  # on its code path), for tests that must survive the child: kill -9, crashes, fuzzing. The
  # child halts when its stdin closes, so a failed test never leaves it running.

  @doc "Starts `script` (a file) with `args` (in `opts[:cd]`, default the project); returns the port."
  def start(script, args \\ [], opts \\ []) do
    elixir = System.find_executable("elixir") || raise "elixir is not on the PATH"
    ebin = Path.expand(Path.join([Mix.Project.build_path(), "lib", "ex_burn", "ebin"]))
    wrapper = script <> ".child.exs"
    File.write!(wrapper, guard_code(script))

    Port.open({:spawn_executable, elixir}, [
      :binary,
      :exit_status,
      :stderr_to_stdout,
      {:line, 65_536},
      args: ["-pa", ebin, wrapper | args],
      cd: Keyword.get(opts, :cd, File.cwd!())
    ])
  end

  # Halts the child when the test process (its stdin) goes away, then runs the script.
  defp guard_code(script) do
    """
    spawn(fn -> IO.read(:stdio, :eof); System.halt(0) end)
    Code.eval_file(#{inspect(script)})
    """
  end

  @doc "The child's OS pid."
  def os_pid(port), do: port |> Port.info(:os_pid) |> elem(1)

  @doc "Waits for a line starting with `prefix`; returns the line."
  def await_line(port, prefix, timeout \\ 60_000) do
    receive do
      {^port, {:data, {:eol, line}}} ->
        if String.starts_with?(line, prefix), do: line, else: await_line(port, prefix, timeout)

      {^port, {:exit_status, status}} ->
        raise "child exited with status #{status} before printing #{inspect(prefix)}"
    after
      timeout -> raise "child printed no #{inspect(prefix)} line within #{timeout} ms"
    end
  end

  @doc "Kills the child with SIGKILL and waits for it to be gone; returns its exit status."
  def kill9(port) do
    {_, 0} = System.cmd("kill", ["-9", Integer.to_string(os_pid(port))])
    await_exit(port, 10_000)
  end

  @doc "Waits for the child's exit; returns `{status, lines}` of what it printed since."
  def await_exit(port, timeout, lines \\ []) do
    receive do
      {^port, {:data, {:eol, line}}} -> await_exit(port, timeout, [line | lines])
      {^port, {:data, {:noeol, line}}} -> await_exit(port, timeout, [line | lines])
      {^port, {:exit_status, status}} -> {status, Enum.reverse(lines)}
    after
      timeout ->
        Port.close(port)
        {:timeout, Enum.reverse(lines)}
    end
  end
end
