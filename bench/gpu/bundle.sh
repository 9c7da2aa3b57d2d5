#!/usr/bin/env bash
# Packs what a GPU run needs into .device/ (git-ignored), to be carried to the device machine:
# for each CUDA build variant (fusion, nofusion) its NIF, engine test binary and Burn
# benchmark binary (stripped, xz), and Debian's Erlang/Elixir runtime (the device image has
# none). Build first (x86_64 here), with the profile released NIFs use (`dist`; PROFILE=release
# bundles release builds instead):
#   CARGO_TARGET_DIR=~/.cache/ex_burn/target-cuda cargo build --profile dist -p ex_burn_nif --features cuda
#   CARGO_TARGET_DIR=~/.cache/ex_burn/target-cuda cargo test --release -p ex_burn_cuda --features cuda,fusion --test engine --no-run
#   (the engine's tests with the CUDA kernels installed: native/ex_burn_cuda/tests/engine.rs)
#   CARGO_TARGET_DIR=~/.cache/ex_burn/target-cuda cargo build --profile dist -p ex_burn_core --features cuda,fusion --example burn_mlp_bench
#   (and the same without fusion into ~/.cache/ex_burn/target-cuda-nofusion)
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .device
for variant in ${VARIANTS:-fusion nofusion}; do
  case $variant in
    fusion) tgt="$HOME/.cache/ex_burn/target-cuda/${PROFILE:-dist}" ;;
    nofusion) tgt="$HOME/.cache/ex_burn/target-cuda-nofusion/${PROFILE:-dist}" ;;
  esac
  [ -f "$tgt/libex_burn_nif.so" ] || { echo "skip $variant (not built)"; continue; }
  mkdir -p ".device/$variant"
  # The engine test binary from the release profile (an LTO test build only takes longer).
  engine=$(ls -t "$(dirname "$tgt")/${ENGINE_PROFILE:-release}"/deps/engine-* | grep -v '\.d$' | head -1)
  strip -o ".device/$variant/nif.so" "$tgt/libex_burn_nif.so"
  strip -o ".device/$variant/engine" "$engine"
  strip -o ".device/$variant/burn_mlp_bench" "$tgt/examples/burn_mlp_bench"
  xz -T2 -6 -f ".device/$variant/nif.so" ".device/$variant/engine" ".device/$variant/burn_mlp_bench"
  # optional: the launch-cost probe (cargo build ... --example launch_bench)
  if [ -f "$tgt/examples/launch_bench" ]; then
    strip -o ".device/$variant/launch_bench" "$tgt/examples/launch_bench"
    xz -T2 -6 -f ".device/$variant/launch_bench"
  fi
done
if [ ! -f .device/beam.tar.xz ] || [ "${REBUNDLE_BEAM:-0}" = 1 ]; then
  erts=$(cd /usr/lib/erlang && ls -d erts-*)
  libs=$(cd /usr/lib/erlang/lib && ls -d kernel-* stdlib-* compiler-* crypto-* sasl-* syntax_tools-* \
         public_key-* asn1-* ssl-* inets-* tools-* runtime_tools-* parsetools-* 2>/dev/null | sed 's|^|usr/lib/erlang/lib/|')
  # shellcheck disable=SC2086
  tar -C / -cJf .device/beam.tar.xz usr/lib/erlang/bin usr/lib/erlang/releases "usr/lib/erlang/$erts" $libs usr/lib/elixir
fi
rm -f .device/nif.so.xz .device/engine.xz .device/burn_mlp_bench.xz
du -sh .device .device/*
