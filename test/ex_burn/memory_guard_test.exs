defmodule ExBurn.MemoryGuardTest do
  # The memory guard in a child VM whose memory is really limited: by `ulimit -v` (RLIMIT_AS)
  # and, where this machine lets a test create one, by a cgroup. A request the limit cannot
  # hold must come back as ExBurn.Error of kind :out_of_memory, with the VM alive; without the
  # guard the allocation fails and the VM aborts (or the kernel kills it).
  use ExUnit.Case, async: false

  alias ExBurn.Test.ChildVM

  @moduletag :tmp_dir

  # The child's address space: the BEAM reserves about 2.1 GB of it at start (its literal area
  # and thread stacks) and mimalloc up to 1 GiB when the NIF loads; this leaves ExBurn about
  # 1 GB (measured: a 2.2 GB limit still starts the VM, with mimalloc's arena smaller).
  @address_space_kb 4_200_000

  # Runs in the child: each check prints `CHECK name ok|FAIL detail`, then `DONE`.
  @child """
  alias ExBurn.BurnBridge, as: B
  say = &IO.puts/1
  avail = fn -> Enum.find(ExBurn.device_info().devices, &(&1.device == :cpu)).memory_available end
  try_op = fn f ->
    try do
      f.()
      :ok
    rescue
      e in ExBurn.Error -> {e.kind, Exception.message(e)}
    end
  end
  check = fn name, ok?, detail -> say.("CHECK \#{name} \#{if ok?, do: "ok", else: "FAIL"} \#{detail}") end
  mib = fn b -> "\#{div(b, 1_048_576)} MiB" end

  r = avail.()
  say.("READY \#{r}")

  # 1. more than what is left: refused, and the VM goes on
  big = div(r, 4) + 64_000_000
  got = try_op.(fn -> B.zeros({big}, :f32) end)
  check.("larger_than_left", match?({:out_of_memory, _}, got), "\#{mib.(4 * big)} of \#{mib.(r)}: \#{inspect(got)}")
  check.("alive_after_refusal", try_op.(fn -> B.sum(B.iota({1000}, :f32)) end) == :ok, "")

  case System.get_env("GUARD_CHECKS", "all") do
    "all" ->
      # 2. ops whose result fits but whose peak (intermediates included) does not
      n = div(r, 6)
      got = try_op.(fn -> B.iota({n}, :bf16) end)
      check.("iota_bf16_peak", match?({:out_of_memory, _}, got), "result \#{mib.(2 * n)} of \#{mib.(r)}: \#{inspect(got)}")

      u8 = B.full({div(r, 6)}, 1, :u8)
      got = try_op.(fn -> B.sum(u8) end)
      check.("sum_u8_peak", match?({:out_of_memory, _}, got), "input \#{mib.(div(r, 6))}: \#{inspect(got)}")
      ExBurn.Tensor.free(u8)

      # 3. two requests that each fit but not together: one is refused while the other runs
      # (iota in f32 plans about 30 bytes an element)
      r = avail.()
      each = div(r * 6, 10 * 30)
      attempt = fn ->
        try_op.(fn ->
          t = B.iota({each}, :f32)
          ExBurn.Tensor.free(t)
        end)
      end

      outcomes =
        Enum.reduce_while(1..40, [], fn _, acc ->
          now = Task.await_many([Task.async(attempt), Task.async(attempt)], :infinity)
          acc = now ++ acc
          if Enum.any?(acc, &match?({:out_of_memory, _}, &1)), do: {:halt, acc}, else: {:cont, acc}
        end)

      held = Enum.find(outcomes, &match?({:out_of_memory, _}, &1))
      check.("concurrent_one_refused", held != nil and elem(held, 1) =~ "held by work in progress", inspect(held))
      check.("concurrent_one_ran", :ok in outcomes, "\#{length(outcomes)} attempts")

    _ ->
      :ok
  end

  check.("alive_at_end", try_op.(fn -> B.sum(B.iota({1000}, :f32)) end) == :ok, "")
  say.("DONE")
  """

  defp run_child(dir, shell_prefix, env) do
    script = Path.join(dir, "guard_child.exs")
    File.write!(script, @child)
    wrapper = script <> ".child.exs"
    # the child halts when its stdin (this test) goes away
    File.write!(wrapper, """
    spawn(fn -> IO.read(:stdio, :eof); System.halt(0) end)
    Code.eval_file(#{inspect(script)})
    """)

    elixir = System.find_executable("elixir") || raise "elixir is not on the PATH"
    ebin = Path.expand(Path.join([Mix.Project.build_path(), "lib", "ex_burn", "ebin"]))
    command = "#{shell_prefix} exec #{elixir} -pa #{ebin} #{wrapper}"

    port =
      Port.open({:spawn_executable, System.find_executable("bash")}, [
        :binary,
        :exit_status,
        :stderr_to_stdout,
        {:line, 65_536},
        args: ["-c", command],
        cd: dir,
        env: Enum.map(env, fn {k, v} -> {String.to_charlist(k), String.to_charlist(v)} end)
      ])

    {status, lines} = ChildVM.await_exit(port, 300_000)
    {status, lines}
  end

  defp checks(status, lines) do
    output = Enum.join(lines, "\n")
    assert status == 0, "the child VM died (status #{inspect(status)}):\n#{output}"
    assert "DONE" in lines, "the child did not finish:\n#{output}"

    for "CHECK " <> rest <- lines do
      [name, verdict | detail] = String.split(rest, " ", parts: 3)
      assert verdict == "ok", "#{name}: #{Enum.join(detail, " ")}\n#{output}"
      name
    end
  end

  @tag timeout: 600_000
  test "under ulimit -v: refusals instead of an aborted VM, one ledger for concurrent requests",
       %{tmp_dir: dir} do
    {status, lines} = run_child(dir, "ulimit -v #{@address_space_kb};", [])
    done = checks(status, lines)

    for name <- ~w(larger_than_left alive_after_refusal iota_bf16_peak sum_u8_peak
                   concurrent_one_refused concurrent_one_ran alive_at_end) do
      assert name in done, "check #{name} did not run:\n#{Enum.join(lines, "\n")}"
    end

    refusal = Enum.find(lines, &String.starts_with?(&1, "CHECK larger_than_left"))
    assert refusal =~ "RLIMIT_AS"
  end

  @tag timeout: 300_000
  test "in a cgroup with a memory limit, on the cgroup or one of its ancestors", %{tmp_dir: dir} do
    case cgroup_hierarchy() do
      {:skip, reason} ->
        IO.puts("\n  [memory guard] cgroup test skipped: #{reason}")

      {:ok, version, root} ->
        limit = 600 * 1_048_576
        name = "exburn_guard_#{System.unique_integer([:positive])}"

        for nested? <- [false, true] do
          parent = Path.join(root, name)
          leaf = if nested?, do: Path.join(parent, "vm"), else: parent
          File.mkdir!(parent)

          try do
            write_limit(version, root, parent, limit)

            if nested? do
              # (v2: a cgroup that hands a controller to its children holds no process)
              if version == :v2, do: File.write(Path.join(parent, "cgroup.subtree_control"), "+memory")
              File.mkdir!(leaf)
            end

            procs = Path.join(leaf, "cgroup.procs")
            {status, lines} = run_child(dir, "echo $$ > #{procs};", [{"GUARD_CHECKS", "cgroup"}])
            done = checks(status, lines)
            assert "larger_than_left" in done
            refusal = Enum.find(lines, &String.starts_with?(&1, "CHECK larger_than_left"))
            assert refusal =~ "cgroup (#{version})", refusal
          after
            if nested?, do: File.rmdir(leaf)
            File.rmdir(parent)
          end
        end
    end
  end

  # Where a test may create a cgroup with a memory limit: `{:ok, :v2 | :v1, directory}`.
  defp cgroup_hierarchy do
    mounts = File.read!("/proc/self/mountinfo") |> String.split("\n", trim: true)

    find = fn fstype, opt ->
      Enum.find_value(mounts, fn line ->
        with [left, right] <- String.split(line, " - ", parts: 2),
             [^fstype, _source, options | _] <- String.split(right, " "),
             true <- opt == nil or opt in String.split(options, ","),
             [_, _, _, _, point | _] <- String.split(left, " ") do
          point
        else
          _ -> nil
        end
      end)
    end

    v2 = find.("cgroup2", nil)
    v1 = find.("cgroup", "memory")

    cond do
      v2 && "memory" in controllers(v2) && writable?(v2) ->
        {:ok, :v2, v2}

      v1 && writable?(v1) ->
        {:ok, :v1, v1}

      true ->
        {:skip,
         "no writable cgroup hierarchy with a memory controller (v2: #{inspect(v2)}, v1 memory: #{inspect(v1)})"}
    end
  end

  defp controllers(dir) do
    case File.read(Path.join(dir, "cgroup.controllers")) do
      {:ok, text} -> String.split(text)
      _ -> []
    end
  end

  defp writable?(dir) do
    probe = Path.join(dir, "exburn_probe_#{System.unique_integer([:positive])}")

    case File.mkdir(probe) do
      :ok ->
        File.rmdir(probe)
        true

      _ ->
        false
    end
  end

  defp write_limit(:v2, root, dir, limit) do
    # the parent must hand the memory controller down to its children
    File.write(Path.join(root, "cgroup.subtree_control"), "+memory")
    File.write!(Path.join(dir, "memory.max"), Integer.to_string(limit))
  end

  defp write_limit(:v1, _root, dir, limit) do
    File.write!(Path.join(dir, "memory.limit_in_bytes"), Integer.to_string(limit))
  end
end
