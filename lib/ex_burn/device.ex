defmodule ExBurn.Device do
  @moduledoc """
  Devices: `:cpu`, `{:cuda, i}`, `{:vulkan, i}` and `{:metal, i}`.

  `:cuda`, `:vulkan` and `:metal` alone mean device 0. The CPU device exists in every build;
  a GPU device exists only in the library variant that contains its backend. Using a device
  the loaded library lacks raises `ExBurn.Error` of kind `:device_unavailable`.
  """

  @type t :: :cpu | {:cuda | :vulkan | :metal, non_neg_integer()}

  @doc """
  Normalises a device term.

  ## Examples

      iex> ExBurn.Device.normalize!(:cuda)
      {:cuda, 0}
      iex> ExBurn.Device.normalize!(:cpu)
      :cpu
  """
  @spec normalize!(term()) :: t()
  def normalize!(:cpu), do: :cpu
  def normalize!(family) when family in [:cuda, :vulkan, :metal], do: {family, 0}

  def normalize!({family, i} = d)
      when family in [:cuda, :vulkan, :metal] and is_integer(i) and i >= 0 and i <= 0xFFFFFFFF,
      do: d

  def normalize!(other) do
    raise ExBurn.Error.new(
            kind: :argument,
            message:
              "unknown device #{ExBurn.Options.short(other)} (expected :cpu, {:cuda, i}, {:vulkan, i} or {:metal, i})"
          )
  end

  @doc false
  # The most bytes one allocation on `device` may take: the configured memory limit or what
  # the device has available, whichever is smaller (nil when neither is known).
  def room(device) do
    info = ExBurn.Native.call(:device_info, [normalize!(device)], :room)

    case Enum.reject([info.memory_limit, info.memory_available], &is_nil/1) do
      [] -> nil
      limits -> Enum.min(limits)
    end
  end

  @doc "The device family (`:cpu`, `:cuda`, `:vulkan`, `:metal`)."
  @spec family(t()) :: atom()
  def family(device) do
    case normalize!(device) do
      :cpu -> :cpu
      {family, _} -> family
    end
  end

  @doc """
  How many devices of `family` (`:cpu`, `:cuda`, `:vulkan`, `:metal`) this build can reach:
  1 for the CPU, the GPUs the driver reports for CUDA (0 without a driver or in a build
  without the backend).
  """
  @spec count(atom()) :: non_neg_integer()
  def count(:cpu), do: 1

  def count(family) when family in [:cuda, :vulkan, :metal] do
    case ExBurn.Native.call(:device_info, [{family, 0}], :device_count) do
      %{count: n} when is_integer(n) and n >= 0 -> n
      _ -> 0
    end
  rescue
    ExBurn.Error -> 0
  end

  def count(other) do
    raise ExBurn.Error.new(
            kind: :argument,
            op: :device_count,
            message:
              "expected a device family (:cpu, :cuda, :vulkan or :metal), got #{ExBurn.Format.term(other)}"
          )
  end

  @doc """
  Waits until the work queued on `device` has finished, as `torch.cuda.synchronize()` does.

  Operations on a GPU return as soon as their work is queued; reading a tensor waits for the
  work that computes it. This waits for all of it at once (for timing, or before handing the
  device to other code). Queued GPU work that failed is reported here as `ExBurn.Error` (as it
  is at the next read otherwise). Returns `:ok`.

  ## Examples

      iex> ExBurn.Device.synchronize(:cpu)
      :ok
  """
  @spec synchronize(t()) :: :ok
  def synchronize(device), do: ExBurn.Native.call(:device_sync, [normalize!(device)])
end
