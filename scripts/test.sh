#!/usr/bin/env bash
# Installs what is missing, builds phos and runs the default CTest suite (everything except the
# 'long', 'gpu' and 'fuzz' labels). Usage: scripts/test.sh [extra ctest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
build_dir=${PHOS_BUILD_DIR:-build}
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPHOS_WERROR=ON
cmake --build "$build_dir" -j2
cd "$build_dir"
ctest -j2 --output-on-failure --timeout 300 -LE '^(long|gpu|fuzz)$' "$@"
