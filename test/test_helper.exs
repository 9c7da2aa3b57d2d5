# Tests that need an optional library or a GPU are tagged and run only when it is present:
#   :nx   - Nx is loadable (e.g. from ERL_LIBS)
#   :axon - Axon is loadable
#   :telemetry - telemetry is loadable (started below)
#   :cuda - the loaded library has a usable CUDA device
exclude =
  [
    nx: not Code.ensure_loaded?(Nx),
    axon: not Code.ensure_loaded?(Axon),
    telemetry: not Code.ensure_loaded?(:telemetry),
    cuda: not ExBurn.cuda_available?()
  ]
  |> Enum.filter(fn {_tag, skip?} -> skip? end)
  |> Enum.map(fn {tag, _} -> tag end)

# Optional libraries put on the code path through ERL_LIBS are loadable but not started.
for app <- [:nx, :axon, :telemetry], Application.load(app) in [:ok, {:error, {:already_loaded, app}}] do
  {:ok, _} = Application.ensure_all_started(app)
end

ExUnit.start(exclude: exclude)
