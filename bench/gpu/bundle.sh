#!/usr/bin/env bash
# Packs what a GPU run needs into .device/ (git-ignored), to be carried to the device machine:
# the cuda variant's NIF and engine test binary (built here, stripped, xz), and Debian's
# Erlang/Elixir runtime (the device image has none).
#
#   EX_BURN_VARIANT=cuda bin/setup-style build first:
#     CARGO_TARGET_DIR=~/.cache/ex_burn/target-cuda cargo build --release -p ex_burn_nif --features cuda
#     CARGO_TARGET_DIR=~/.cache/ex_burn/target-cuda cargo test --release -p ex_burn_core --features cuda --no-run
set -euo pipefail
cd "$(dirname "$0")/../.."
tgt="${CUDA_TARGET_DIR:-$HOME/.cache/ex_burn/target-cuda}/release"
mkdir -p .device
strip -o .device/nif.so "$tgt/libex_burn_nif.so"
engine=$(ls -t "$tgt"/deps/engine-* | grep -v '\.d$' | head -1)
strip -o .device/engine "$engine"
strip -o .device/burn_mlp_bench "$tgt/examples/burn_mlp_bench"
xz -T2 -6 -f .device/nif.so .device/engine .device/burn_mlp_bench
if [ ! -f .device/beam.tar.xz ] || [ "${REBUNDLE_BEAM:-0}" = 1 ]; then
  erts=$(cd /usr/lib/erlang && ls -d erts-*)
  libs=$(cd /usr/lib/erlang/lib && ls -d kernel-* stdlib-* compiler-* crypto-* sasl-* syntax_tools-* \
         public_key-* asn1-* ssl-* inets-* tools-* runtime_tools-* parsetools-* 2>/dev/null | sed 's|^|usr/lib/erlang/lib/|')
  tar -C / -cJf .device/beam.tar.xz usr/lib/erlang/bin usr/lib/erlang/releases "usr/lib/erlang/$erts" $libs usr/lib/elixir
fi
ls -la .device
