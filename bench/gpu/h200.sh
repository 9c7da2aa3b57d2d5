#!/usr/bin/env bash
# Runs on the device machine (bench/gpu/bundle.sh made .device/): unpacks the runtime and the
# cuda build, runs the engine tests on CUDA, checks the missing-headers error, then the
# benchmarks named in $EX_BURN_GPU_STEPS (default: engine core). Logs and results go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
export CUDA_PATH=${CUDA_PATH:-/usr/local/cuda}
export LD_LIBRARY_PATH="$CUDA_PATH/lib64:${LD_LIBRARY_PATH:-}"
mkdir -p /tmp/exb priv/native "$OUT"
xz -dc .device/engine.xz > /tmp/exb/engine && chmod +x /tmp/exb/engine
xz -dc .device/nif.so.xz > priv/native/libex_burn_nif.so
xz -dc .device/burn_mlp_bench.xz > /tmp/exb/burn_mlp_bench && chmod +x /tmp/exb/burn_mlp_bench
tar -C / -xJf .device/beam.tar.xz
export PATH=/usr/lib/erlang/bin:/usr/lib/elixir/bin:$PATH LANG=C.UTF-8 MIX_ENV=${MIX_ENV:-dev}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
ls "$CUDA_PATH/lib64" | grep -i nvrtc | head -3 | tee -a "$OUT/gpu.txt"
steps=${EX_BURN_GPU_STEPS:-"engine core training classifier"}
for step in $steps; do
  case $step in
    engine)
      echo "== engine tests on cuda"
      EX_BURN_TEST_DEVICE=cuda /tmp/exb/engine --nocapture --test-threads=4 2>&1 | tee "$OUT/engine_cuda.log" | grep -E 'agreement|precision|test result|FAILED|panicked' ;
      echo "== missing CUDA headers"
      EX_BURN_TEST_DEVICE=cuda CUDA_PATH=/nonexistent /tmp/exb/engine tensor::transfer --nocapture 2>&1 | grep -E 'CUDA|panicked|test result' | head -5 | tee "$OUT/missing_headers.log" ;;
    core)
      echo "== bench/core.exs on cuda"
      mix compile 2>&1 | tail -1
      EX_BURN_BENCH_DEVICE=cuda mix run bench/core.exs 2>&1 | tail -25
      cp bench/results/core_cuda*.md "$OUT/" 2>/dev/null ;;
    training)
      echo "== bench/training.exs on cuda"
      mix compile 2>&1 | tail -1
      EX_BURN_BENCH_DEVICE=cuda EX_BURN_BURN_BENCH=/tmp/exb/burn_mlp_bench mix run bench/training.exs 2>&1 | tail -12
      cp bench/results/training_cuda.md "$OUT/" 2>/dev/null ;;
    classifier)
      echo "== examples/train_classifier.exs on cuda"
      EX_BURN_DEFAULT_DEVICE=cuda mix run examples/train_classifier.exs 2>&1 | grep -E "Epoch|accuracy|training|Reloaded|finished|Error" | tee "$OUT/classifier_cuda.log" ;;
    *) echo "unknown step $step" ;;
  esac
done
