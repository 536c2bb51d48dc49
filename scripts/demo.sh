#!/usr/bin/env bash
# Installs what is missing, builds phos, and shows simgpu at work: a context, a module, copies
# and a kernel on a modelled A100, with the modelled timings.
#
# Environment: PHOS_SIMGPU_PROFILE (default a100-pcie4), PHOS_SIMGPU_TIME_SCALE (default 10:
# copies are bound by the modelled link, and the profile's 3.1 s context creation takes 31 s of
# wall time), PHOS_DEMO_MIB (default 128).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
build_dir=${PHOS_BUILD_DIR:-build}
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build_dir" -j2 --target simgpu_tour

export PHOS_SIMGPU_PROFILE=${PHOS_SIMGPU_PROFILE:-a100-pcie4}
export PHOS_SIMGPU_TIME_SCALE=${PHOS_SIMGPU_TIME_SCALE:-10}
export PHOS_LOG_LEVEL=${PHOS_LOG_LEVEL:-warn}
echo
echo "== simgpu: the CUDA driver API on a modelled ${PHOS_SIMGPU_PROFILE} =="
echo "(context creation is modelled at the profile's 3.1 s, x${PHOS_SIMGPU_TIME_SCALE} time scale: it takes a while;"
echo " this is the cost phosd's context pool will take off the invocation path)"
"$build_dir/bin/simgpu_tour" "${PHOS_DEMO_MIB:-128}"
echo
echo "Not built yet: phosd, phos-fn, snapshots and restore (see README.md, 'What works')."
