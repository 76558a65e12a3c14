#!/usr/bin/env bash
# Set up, build, and run the full test suite. GPU tests skip themselves without a GPU; the
# opt-in exhaustive tests (label "exhaustive") run with: ctest --test-dir build -L exhaustive
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
./tools/setup.sh
ctest --test-dir build -LE exhaustive --output-on-failure -j "$(nproc)" "$@"
