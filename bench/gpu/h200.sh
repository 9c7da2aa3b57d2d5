#!/usr/bin/env bash
# Runs on the device machine (bench/gpu/bundle.sh made .device/): unpacks the runtime and, for
# each build variant in $VARIANTS (default: fusion nofusion), runs the steps in
# $EX_BURN_GPU_STEPS (default: engine core training classifier; also nx, defn, gpt2, gpt2mem, profile, nsys, launch, kernels;
# ENGINE_FILTER: test-name filters for the engine step). Logs and results go to $OUT,
# prefixed by the variant.
set -uo pipefail
cd "$(dirname "$0")/../.."
export CUDA_PATH=${CUDA_PATH:-/usr/local/cuda}
export LD_LIBRARY_PATH="$CUDA_PATH/lib64:${LD_LIBRARY_PATH:-}"
mkdir -p /tmp/exb priv/native "$OUT"
tar -C / -xJf .device/beam.tar.xz
export PATH=/usr/lib/erlang/bin:/usr/lib/elixir/bin:$PATH LANG=C.UTF-8 MIX_ENV=${MIX_ENV:-dev}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
ls "$CUDA_PATH/lib64" | grep -i nvrtc | head -3 | tee -a "$OUT/gpu.txt"
mix compile 2>&1 | tail -1
# Elixir >= 1.17 with Nx/Axon built for it, for the Nx steps: packed by the caller as
# .device/ex118.tar.xz from builds outside the repository (never committed).
elixir118() {
  [ -f .device/ex118.tar.xz ] || { echo "no .device/ex118.tar.xz"; return 1; }
  [ -d /opt/exburn-tools/erl_libs ] || { mkdir -p /opt/exburn-tools && tar -C /opt/exburn-tools -xJf .device/ex118.tar.xz; }
  export PATH=/opt/exburn-tools/elixir-1.18/bin:$PATH ERL_LIBS=/opt/exburn-tools/erl_libs
}
for v in ${VARIANTS:-fusion nofusion}; do
  [ -d ".device/$v" ] || continue
  echo "######## variant $v"
  xz -dc ".device/$v/engine.xz" > /tmp/exb/engine && chmod +x /tmp/exb/engine
  xz -dc ".device/$v/burn_mlp_bench.xz" > /tmp/exb/burn_mlp_bench && chmod +x /tmp/exb/burn_mlp_bench
  xz -dc ".device/$v/nif.so.xz" > priv/native/libex_burn_nif.so
  for step in ${EX_BURN_GPU_STEPS:-engine core training classifier}; do
    case $step in
      engine)
        echo "== engine tests on cuda ($v)"
        EX_BURN_TEST_DEVICE=cuda timeout "${ENGINE_TIMEOUT:-420}" /tmp/exb/engine ${ENGINE_FILTER:-} --nocapture --test-threads=${ENGINE_THREADS:-4} > "$OUT/${v}_engine.log" 2>&1
        grep -E 'agreement|precision|test result|FAILED' "$OUT/${v}_engine.log" | grep -v '^agreement' | head -30
        grep -E '^agreement' "$OUT/${v}_engine.log" | awk '$NF+0 > 1e-4 || /e-[0-3]$/' | head -10
        echo "== missing CUDA headers ($v)"
        EX_BURN_TEST_DEVICE=cuda CUDA_PATH=/nonexistent /tmp/exb/engine tensor::transfer --nocapture 2>&1 | grep -E 'CUDA' | head -2 ;;
      core)
        echo "== bench/core.exs on cuda ($v)"
        EX_BURN_BENCH_DEVICE=cuda timeout 150 mix run bench/core.exs > "$OUT/${v}_core.log" 2>&1
        grep -E '^\|' "$OUT/${v}_core.log" | tail -6
        for f in bench/results/core_cuda*.md; do cp "$f" "$OUT/${v}_$(basename "$f")"; done ;;
      training)
        echo "== bench/training.exs on cuda ($v)"
        rm -f bench/results/training_cuda.md
        EX_BURN_BENCH_DEVICE=cuda EX_BURN_BURN_BENCH=/tmp/exb/burn_mlp_bench timeout "${TRAINING_TIMEOUT:-400}" mix run bench/training.exs > "$OUT/${v}_training.log" 2>&1
        grep -E '^\||100K' "$OUT/${v}_training.log" | tail -5
        cp bench/results/training_cuda.md "$OUT/${v}_training_cuda.md" 2>/dev/null ;;
      classifier)
        echo "== examples/train_classifier.exs on cuda ($v)"
        EX_BURN_DEFAULT_DEVICE=cuda timeout 150 mix run examples/train_classifier.exs 2>&1 | grep -E "Epoch|accuracy|training|Reloaded|finished|Error" | tee "$OUT/${v}_classifier.log" ;;
      nx)
        echo "== Nx tests on cuda ($v)"
        elixir118 && EX_BURN_TEST_DEVICE=cuda MIX_ENV=test MIX_BUILD_PATH=/tmp/exb_build_118 timeout "${NX_TIMEOUT:-300}" \
          mix do compile --no-prune-code-paths + test ${NX_TESTS:-test/ex_burn/nx_doctest_test.exs} > "$OUT/${v}_nx.log" 2>&1
        grep -E "doctests?, .*tests?, .*failures?" "$OUT/${v}_nx.log" | tail -2 ;;
      defn)
        echo "== bench/defn.exs on cuda ($v)"
        rm -f bench/results/defn_cuda.md
        elixir118 && EX_BURN_BENCH_DEVICE=cuda MIX_ENV=test MIX_BUILD_PATH=/tmp/exb_build_118 timeout 200 \
          mix do compile --no-prune-code-paths + run bench/defn.exs > "$OUT/${v}_defn.log" 2>&1
        grep -E '^\|' "$OUT/${v}_defn.log" | tail -8
        cp bench/results/defn_cuda.md "$OUT/${v}_defn_cuda.md" 2>/dev/null ;;
      gpt2)
        echo "== bench/gpt2_layer.exs on cuda ($v)"
        elixir118 && EX_BURN_BENCH_DEVICE=cuda MIX_ENV=test MIX_BUILD_PATH=/tmp/exb_build_118 timeout 400 \
          mix do compile --no-prune-code-paths + run bench/gpt2_layer.exs > "$OUT/${v}_gpt2.log" 2>&1
        grep -E '^\||First call' "$OUT/${v}_gpt2.log" | tail -6
        cp bench/results/gpt2_layer_cuda.md "$OUT/${v}_gpt2_layer_cuda.md" 2>/dev/null ;;
      gpt2mem)
        # The layer without peers under each CUDA memory configuration (EX_BURN_CUDA_MEMORY),
        # then cold first calls (fresh kernel/autotune cache) at two autotune levels.
        elixir118 || continue
        run_gpt2() { EX_BURN_BENCH_DEVICE=cuda EX_BURN_BENCH_PEERS= MIX_ENV=test MIX_BUILD_PATH=/tmp/exb_build_118 \
          timeout 300 mix do compile --no-prune-code-paths + run bench/gpt2_layer.exs > "$OUT/${v}_gpt2_$1.log" 2>&1
          echo "-- $1"; grep -E '^\|' "$OUT/${v}_gpt2_$1.log" | tail -2
          grep -oE 'First call[^.]*\.[^.]*\.|GPU memory[^|]*' bench/results/gpt2_layer_cuda.md | head -2
          cp bench/results/gpt2_layer_cuda.md "$OUT/${v}_gpt2_$1.md" 2>/dev/null; }
        for mem in pooled exclusive; do EX_BURN_CUDA_MEMORY=$mem run_gpt2 "mem_$mem"; done
        for level in balanced minimal; do
          EX_BURN_CACHE_DIR=/tmp/exb_cold_$level CUBECL_AUTOTUNE_LEVEL=$level run_gpt2 "cold_$level"
        done ;;
      profile)
        # The GPT-2 layer (no peers, 10 rounds) with EX_BURN_PROFILE=$PROFILE_MODE (default 1: host
        # time by program step; sync: device time by step; native/ex_burn_core/src/profile.rs),
        # the last table of the run.
        elixir118 || continue
        EX_BURN_PROFILE=${PROFILE_MODE:-1} EX_BURN_BENCH_DEVICE=cuda EX_BURN_BENCH_PEERS= EX_BURN_BENCH_ROUNDS=10 MIX_ENV=test \
          MIX_BUILD_PATH=/tmp/exb_build_118 timeout 300 mix do compile --no-prune-code-paths + run bench/gpt2_layer.exs \
          > "$OUT/${v}_profile.log" 2>&1
        awk '/ex_burn profile, runs/ {buf=""} {buf=buf $0 "\n"} END {printf "%s", buf}' "$OUT/${v}_profile.log" | grep -E '^ex_burn|^  ' | head -40
        grep -E '^\|' "$OUT/${v}_profile.log" | tail -2 ;;
      nsys)
        # Where the GPT-2 layer's time goes: an Nsight Systems trace of the bench (no peers, 10
        # rounds), summarised by CUDA API call and by kernel. Needs nsys on the machine.
        NSYS=$(ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
        [ -n "$NSYS" ] || { echo "no nsys"; ls /usr/local/cuda/bin | head -40; continue; }
        elixir118 || continue
        export EX_BURN_BENCH_DEVICE=cuda EX_BURN_BENCH_PEERS= EX_BURN_BENCH_ROUNDS=10 MIX_ENV=test MIX_BUILD_PATH=/tmp/exb_build_118
        mix do compile --no-prune-code-paths + run bench/gpt2_layer.exs > "$OUT/${v}_nsys_warm.log" 2>&1
        timeout 400 "$NSYS" profile -t cuda,osrt --sample=none --cpuctxsw=none -o "/tmp/exb/gpt2" --force-overwrite true \
          mix run --no-compile bench/gpt2_layer.exs > "$OUT/${v}_nsys.log" 2>&1
        "$NSYS" stats --report cuda_api_sum,cuda_gpu_kern_sum,osrt_sum --format csv -o "$OUT/${v}_nsys" /tmp/exb/gpt2.nsys-rep > "$OUT/${v}_nsys_stats.log" 2>&1
        head -15 "$OUT/${v}_nsys_cuda_api_sum.csv"; head -12 "$OUT/${v}_nsys_cuda_gpu_kern_sum.csv" | cut -c1-200
        unset EX_BURN_BENCH_DEVICE EX_BURN_BENCH_PEERS EX_BURN_BENCH_ROUNDS ;;
      kernels)
        # Which CubeCL kernels the GPT-2 bench launches and their GPU time: CubeCL's own profiler
        # (every kernel timed alone, so not a speed run), EX_BURN_BENCH_ROUNDS=1 (12 calls:
        # 6 forward, 6 forward + backward, the first two compiling and autotuning).
        elixir118 || continue
        rm -f /tmp/cubecl.log
        CUBECL_DEBUG_LOG=/tmp/cubecl.log CUBECL_DEBUG_OPTION=profile EX_BURN_BENCH_DEVICE=cuda EX_BURN_BENCH_PEERS= \
          EX_BURN_BENCH_ROUNDS=1 MIX_ENV=test MIX_BUILD_PATH=/tmp/exb_build_118 timeout 300 \
          mix do compile --no-prune-code-paths + run bench/gpt2_layer.exs > "$OUT/${v}_kernels.log" 2>&1
        grep -E '^\| [0-9.]+(ns|µs|us|ms|s) +\| ' /tmp/cubecl.log | sed -E 's/^\| ([0-9.]+)(ns|µs|us|ms|s) +\| //' | sed -E 's/<.*//; s/ .*//' | sort | uniq -c | sort -rn | head -40 | tee "$OUT/${v}_kernels.txt"
        grep -cE '^\| [0-9.]+(ns|µs|us|ms|s) +\| ' /tmp/cubecl.log
        grep -E '^\| [0-9.]+(ns|µs|us|ms|s) +\| ' /tmp/cubecl.log | head -3
        xz -c /tmp/cubecl.log > "$OUT/${v}_cubecl.log.xz" ;;
      launch)
        # What a kernel launch costs apart from its work (native/ex_burn_core/examples/launch_bench.rs).
        [ -f ".device/$v/launch_bench.xz" ] || { echo "no launch_bench"; continue; }
        xz -dc ".device/$v/launch_bench.xz" > /tmp/exb/launch_bench && chmod +x /tmp/exb/launch_bench
        timeout 120 /tmp/exb/launch_bench cuda 2>&1 | tee "$OUT/${v}_launch.log" ;;
      *) echo "unknown step $step" ;;
    esac
  done
done
