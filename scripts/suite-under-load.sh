#!/usr/bin/env bash
# Runs the default CTest suite N times in a row while `yes > /dev/null` keeps every core busy,
# and stops at the first failing run. It shows that the tests depend on no timing a loaded host
# cannot keep. Usage: scripts/suite-under-load.sh [N=10] [extra ctest arguments]
# Expects a built tree (scripts/test.sh builds one); PHOS_BUILD_DIR as in scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

runs=${1:-10}
shift || true
build_dir=${PHOS_BUILD_DIR:-build}
[[ -f $build_dir/CTestTestfile.cmake ]] || { echo "no build in $build_dir: run scripts/test.sh first" >&2; exit 2; }

load=()
stop_load() { ((${#load[@]})) && kill "${load[@]}" 2>/dev/null; wait 2>/dev/null || true; }
trap stop_load EXIT
for _ in $(seq "$(nproc)"); do
  yes > /dev/null &
  load+=($!)
done
echo "load: ${#load[@]} x yes > /dev/null"

for run in $(seq "$runs"); do
  start=$(date +%s)
  if ! (cd "$build_dir" && ctest -j2 --output-on-failure --timeout 300 -LE '^(long|gpu|fuzz)$' "$@" \
          > "ctest-under-load-$run.log" 2>&1); then
    echo "run $run/$runs: FAILED after $(($(date +%s) - start)) s; see $build_dir/ctest-under-load-$run.log"
    grep -E '^\s*[0-9]+ - .*\((Failed|Timeout|SEGFAULT|Subprocess aborted|Exception)' \
      "$build_dir/ctest-under-load-$run.log" || true
    exit 1
  fi
  echo "run $run/$runs: $(grep -E 'tests passed' "$build_dir/ctest-under-load-$run.log") in $(($(date +%s) - start)) s"
done
echo "$runs runs under load: all passed"
