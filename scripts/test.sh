#!/usr/bin/env bash
# Installs what is missing, builds phos and runs the default CTest suite (everything except the
# 'long', 'gpu' and 'fuzz' labels). Usage: scripts/test.sh [--sanitize KIND] [extra ctest arguments]
#
# --sanitize address|undefined|thread builds phos with that sanitizer in its own build directory
# (build-<kind>, or PHOS_BUILD_DIR) and runs the same suite under it. Every process of a test
# inherits the sanitizer's options below, so a report anywhere fails the test that produced it:
#   - in the test process, the sanitizer ends it with a failing exit code;
#   - in a process the test starts (phosd, phos-fn, a client program), it ends that process with a
#     failing exit code, which the test checks; a report at exit (a leak) too;
#   - in a function process phosd starts, it ends the instance (the invoke fails), and the phosd
#     fixture fails the test on any report in phosd's or a function's log (tests/integration,
#     PhosdTest::TearDown), which is where those processes' standard error goes.
# Reports are written to standard error (no log_path): a sandboxed function sees a read-only host
# and could not write a report file anywhere the test can read.
set -euo pipefail
cd "$(dirname "$0")/.."

sanitizer=""
ctest_args=()
while (($#)); do
  case $1 in
    --sanitize)
      if (($# < 2)); then echo "test: --sanitize takes address, undefined or thread" >&2; exit 2; fi
      sanitizer=$2; shift 2 ;;
    --sanitize=*) sanitizer=${1#--sanitize=}; shift ;;
    *) ctest_args+=("$1"); shift ;;
  esac
done

case $sanitizer in
  '') ;;
  address) short=asan ;;
  undefined) short=ubsan ;;
  thread) short=tsan ;;
  *) echo "test: --sanitize takes address, undefined or thread, not '$sanitizer'" >&2; exit 2 ;;
esac

scripts/setup.sh
if [[ -z $sanitizer ]]; then
  build_dir=${PHOS_BUILD_DIR:-build}
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPHOS_WERROR=ON
  cmake --build "$build_dir" -j2
  cd "$build_dir"
  ctest -j2 --output-on-failure --timeout 300 -LE '^(long|gpu|fuzz)$' "${ctest_args[@]}"
  exit
fi

supp=$PWD/scripts/sanitizers
# Suppression files hold only entries with a written reason (see each file).
case $sanitizer in
  address)
    # detect_leaks: LeakSanitizer runs at every process's exit (a leak makes its exit code 1).
    # allow_user_segv_handler: simgpu's fault guard installs its own SIGSEGV/SIGBUS handler (device
    # memory guarded by mprotect) and hands every fault it does not own back to ASan's.
    export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:check_initialization_order=1:strict_init_order=1:allow_user_segv_handler=1:suppressions=$supp/address.supp"
    export LSAN_OPTIONS="suppressions=$supp/leak.supp:print_suppressions=0"
    ;;
  undefined)
    # The build passes -fno-sanitize-recover=all: the first report ends the process.
    export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$supp/undefined.supp"
    ;;
  thread)
    export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$supp/thread.supp"
    ;;
esac

# PHOS_WITH_CUDA=OFF: nvcc would only add fatbin variants of the kernels, which nothing here runs
# (no GPU); the simgpu modules every test loads are built either way, with the sanitizer.
build_dir=${PHOS_BUILD_DIR:-build-$short}
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPHOS_WERROR=ON \
  -DPHOS_WITH_CUDA=OFF -DPHOS_SANITIZE="$sanitizer"
cmake --build "$build_dir" -j2
cd "$build_dir"
# Instrumented code runs several times slower: a larger per-test timeout, the same assertions.
ctest -j2 --output-on-failure --timeout 900 -LE '^(long|gpu|fuzz)$' "${ctest_args[@]}"
