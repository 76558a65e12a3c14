#!/usr/bin/env bash
# Installs what blockscale's build and tests need, only where it is missing, then configures and
# builds (tools/setup.sh [TARGET...]: only those targets). Sourced by run.sh and test.sh; safe to run again (idempotent).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Debian packages: compiler, CMake, Eigen, GoogleTest, nlohmann-json (safetensors headers),
# CLI11 (the command line), Python for the oracle tests and the Python package (headers, venv).
need=()
for pkg in build-essential cmake libeigen3-dev libgtest-dev nlohmann-json3-dev libcli11-dev python3 python3-dev \
           python3-venv; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if ((${#need[@]})); then
  echo "setup: installing ${need[*]}"
  sudo_cmd=()
  [ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "${need[@]}"
fi

# numpy, ml_dtypes, safetensors: independent oracles of the codec and file I/O tests;
# nanobind and scikit-build-core: the Python package's build (pyproject.toml).
if ! python3 -c "import numpy, ml_dtypes, safetensors, nanobind, scikit_build_core" >/dev/null 2>&1; then
  echo "setup: installing numpy, ml_dtypes, safetensors, nanobind and scikit-build-core (pip)"
  pypkgs=(numpy ml_dtypes safetensors nanobind scikit-build-core)
  python3 -m pip install -q "${pypkgs[@]}" 2>/dev/null ||
    python3 -m pip install -q --break-system-packages "${pypkgs[@]}"
fi

# The CUDA toolkit is optional (BLOCKSCALE_CUDA=AUTO); find nvcc where it usually lives.
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi

# Into BLOCKSCALE_BUILD_DIR (default build/): the targets named as arguments, or everything.
# The cuDNN frontend's headers (header-only, from its PyPI wheel) for the training step's fused
# attention, where CUDA builds: into .deps/ (git-ignored), once.
frontend=.deps/cudnn_frontend
if command -v nvcc >/dev/null 2>&1 && [ ! -f "$frontend/include/cudnn_frontend.h" ]; then
  echo "setup: fetching the cuDNN frontend headers (pip download nvidia-cudnn-frontend)"
  mkdir -p .deps/wheels
  wheels=()
  python3 -m pip download -q --no-deps --only-binary=:all: -d .deps/wheels nvidia-cudnn-frontend==1.32.0 &&
    wheels=(.deps/wheels/nvidia_cudnn_frontend-1.32.0-*.whl)
  if ! ((${#wheels[@]})) || ! python3 - "$frontend" "${wheels[0]}" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[2]) as z:
    z.extractall(sys.argv[1], [n for n in z.namelist() if n.startswith("include/")])
PY
  then
    echo "setup: no cuDNN frontend headers (the download or its unpacking failed): the training step keeps its reference attention"
  fi
fi

build_dir=${BLOCKSCALE_BUILD_DIR:-build}
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release ${BLOCKSCALE_CMAKE_ARGS:-} >/dev/null
targets=()
for t in "$@"; do targets+=(--target "$t"); done
echo "setup: building ${*:-everything} in $build_dir"
cmake --build "$build_dir" -j "$(nproc)" "${targets[@]}"
