#!/usr/bin/env bash
# Regenerates docs/compatibility.md from NVIDIA's export lists (frontend/surface/nvidia/), the
# functions phos's built libraries export and frontend/surface/refused.tsv, with the build's
# `phos-fn check --table`. Builds what it needs first.
#   scripts/compatibility.sh [BUILD_DIR]     # default: build
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
cmake --build "$build" --target phos-fn phos-cudart phos-cuda phos-cublas phos-cublasLt phos-nccl >/dev/null
"$build/bin/phos-fn" check --table >"$root/docs/compatibility.md.tmp"
mv "$root/docs/compatibility.md.tmp" "$root/docs/compatibility.md"
echo "compatibility: docs/compatibility.md written"
