#!/usr/bin/env bash
# The main job on a built-in default: set up, build, then train a small MoE model in every recipe
# on the synthetic corpus when a GPU is present (loss and step-time table, runs/main/compare.svg),
# else run the accuracy study of every recipe on blockscale's synthetic tensors.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# Only the CLI is built, so the first result comes in minutes: into build/ when a GPU is present,
# else into build-cpu/ without the CUDA parts (a machine without a GPU runs none of them).
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  ./tools/setup.sh blockscale
  ./build/blockscale train --device gpu --compare bf16,fp8_block,mxfp8,nvfp4 --d-model 256 --d-ff 256 \
    --layers 2 --heads 4 --experts 4 --top-k 2 --seq-len 128 --batch 8 --steps 300 --eval-every 50 \
    --log-every 50 --out runs/main --overwrite "$@"
else
  BLOCKSCALE_BUILD_DIR=build-cpu BLOCKSCALE_CMAKE_ARGS="-DBLOCKSCALE_CUDA=OFF -DBUILD_TESTING=OFF ${BLOCKSCALE_CMAKE_ARGS:-}" \
    ./tools/setup.sh blockscale
  ./build-cpu/blockscale study "$@"
fi
