#!/usr/bin/env bash
# The main job on a built-in default: set up, build, and run the accuracy study of every recipe
# on blockscale's synthetic tensors (the training driver takes over once it exists).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
./tools/setup.sh
./build/blockscale study "$@"
