#!/usr/bin/env bash
# `pip install .` of the repository into a fresh virtual environment, then the emulator tests
# against that install (not the build tree). The environment sees the system's packages (numpy,
# ml_dtypes, and the build tools scikit-build-core and nanobind that tools/setup.sh installs), so
# the install needs no network: --no-build-isolation. The package is built unoptimised (Debug):
# it compiles in three quarters of the time, and its bytes must still be the CLI's, built -O3.
# Skips (exit 77) where those build tools are missing and cannot be fetched (a GPU machine
# without network): the install would fail for want of them, not of anything in the package.
set -euo pipefail
python=$1 src=$2 cli=$3
venv=$(mktemp -d)
trap 'rm -rf "$venv"' EXIT
"$python" -m venv --system-site-packages "$venv"
# Asked of the environment's own interpreter: it sees the system's packages but not a user's
# (~/.local), which is where the build tools may sit for "$python".
if ! "$venv/bin/python" -c "import scikit_build_core, nanobind" >/dev/null 2>&1; then
  echo "pip_install_test: skipped: a virtual environment of $python sees no scikit-build-core or nanobind (tools/setup.sh installs them system-wide)"
  exit 77
fi
"$venv/bin/python" -m pip install -q --no-build-isolation --no-deps -Ccmake.build-type=Debug "$src"
cd "$venv"  # not the source tree: the import must find the installed package
"$venv/bin/python" -c "import blockscale, sys; print('installed', blockscale.__version__, blockscale.__file__)"
BLOCKSCALE_CLI=$cli "$venv/bin/python" "$src/tests/python/test_emulator.py"
