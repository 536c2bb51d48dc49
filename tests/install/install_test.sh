#!/bin/bash
# Install: phos installed into a scratch prefix from the build, then used as a user would, from
# outside the source tree. Checks, in order:
#   1. nothing installed names the build or source directory;
#   2. the installed programs, the C API and CHANGELOG.md say the same version;
#   3. `phos-fn new` (installed) writes a project that builds against the installed phos
#      (find_package(phos)), and whose own test passes (libphos's embedded daemon runs it);
#   4. the function, deployed into a phosd started from the installed bin/, answers a request
#      with y = a * x + b; a C program built with pkg-config's flags for phos (the C API example)
#      deploys the installed mlp there by its path and invokes it.
#
#   install_test.sh BUILD_DIR SOURCE_DIR VERSION
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=../testing/phosd.sh
source "$(dirname "$0")/../testing/phosd.sh"
build_dir=$1
source_dir=$2
version=$3

scratch=$(mktemp -d /tmp/phos-install-test-XXXXXX)
# Readable by the uids sandboxed functions run as: the installed libraries and the built function lie here.
chmod 755 "$scratch"
cleanup() {
  stop_phosd
  rm -rf "$scratch"
}
trap cleanup EXIT

prefix=$scratch/prefix
cmake --install "$build_dir" --prefix "$prefix" >"$scratch/install.log" || { cat "$scratch/install.log"; fail "cmake --install"; }
for f in bin/phosd bin/phos-fn bin/phos-snapshot lib/libphos.so.1 lib/phos/libphos-simgpu.so \
         lib/phos/frontend/libcudart.so.13 lib/phos/frontend/libcublas.so.13 lib/phos/functions/mlp \
         lib/phos/modules/mlp-fn.simgpu.so include/phos.h include/phos/fn.h include/phos/kernel.h \
         include/phos/fn/decoder_kernels.cuh lib/cmake/phos/phos-config.cmake lib/pkgconfig/phos.pc \
         share/bash-completion/completions/phos-fn; do
  [[ -e $prefix/$f ]] || fail "not installed: $f"
done

# 1. Nothing installed refers back to where it was built.
for dir in "$(realpath "$build_dir")" "$(realpath "$source_dir")"; do
  rc=0
  hits=$(grep -rl -- "$dir" "$prefix") || rc=$?
  ((rc == 1)) || fail "installed files name $dir (grep: $rc): $hits"
done
echo "ok: nothing under $prefix names the build or source directory"

# 2. One version.
[[ $("$prefix/bin/phosd" --version | head -1) == "phosd $version" ]] || fail "phosd --version: $("$prefix/bin/phosd" --version)"
[[ $("$prefix/bin/phos-fn" --version | head -1) == "phos-fn $version" ]] || fail "phos-fn --version"
[[ $(PKG_CONFIG_PATH=$prefix/lib/pkgconfig pkg-config --modversion phos) == "$version" ]] || fail "phos.pc's version"
formats=$("$prefix/bin/phosd" --version | sed -n 2,3p | paste -sd ';')
manifest=$(sed -n 's/^snapshot manifest format \([0-9]*\), store format \([0-9]*\).*/\1 \2/p' <<<"$formats")
wire=$(sed -n 's/.*wire protocol \([0-9]*\).*/\1/p' <<<"$formats")
read -r m s <<<"$manifest"
grep -q "^Formats: snapshot manifest format $m, store format $s, wire protocol $wire, HTTP API v1.$" \
  "$prefix/share/doc/phos/CHANGELOG.md" || fail "CHANGELOG.md's formats line differs from phosd --version ($formats)"
echo "ok: phosd, phos-fn, phos.pc and CHANGELOG.md say $version (formats: $formats)"

# 3. A function project of the user's own, outside the tree.
cd "$scratch"
"$prefix/bin/phos-fn" new scale >/dev/null || fail "phos-fn new"
[[ -f scale/CMakeLists.txt && -f scale/kernels.cuh && -f scale/main.cc && -f scale/test/function_test.cc ]] ||
  fail "phos-fn new wrote: $(find scale -type f)"
if grep -rqw hello scale; then fail "phos-fn new left the template's name in: $(grep -rlw hello scale)"; fi
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
cmake -S scale -B scale/build "${generator[@]}" "${launcher[@]}" -DCMAKE_PREFIX_PATH="$prefix" \
  >"$scratch/configure.log" 2>&1 || { cat "$scratch/configure.log"; fail "configuring the project"; }
cmake --build scale/build -j2 >"$scratch/build.log" 2>&1 || { cat "$scratch/build.log"; fail "building the project"; }
[[ -x scale/build/scale && -f scale/build/modules/scale-fn.simgpu.so ]] || fail "the build made no scale or its module"
ctest --test-dir scale/build --output-on-failure >"$scratch/ctest.log" 2>&1 || { cat "$scratch/ctest.log"; fail "the project's own test"; }
echo "ok: phos-fn new's project builds against the installed phos, and its test passes"

# 4. The installed phosd serves it.
start_phosd "$scratch/phosd.log" "$prefix/bin/phosd" --gpu sim --data-dir "$scratch/data" \
  --functions-dir "$prefix/lib/phos/functions" \
  --trusted-modules-dir "$prefix/lib/phos/modules" --trusted-modules-dir "$scratch/scale/build/modules"
fn=("$prefix/bin/phos-fn" --endpoint "$endpoint" --token-file "$scratch/data/admin.token")
"${fn[@]}" deploy scale scale/build/scale --upload >"$scratch/deploy.log" 2>&1 || { cat "$scratch/deploy.log" "$scratch/phosd.log"; fail "deploy"; }
answer=$("${fn[@]}" invoke scale --data '{"a": 2, "b": 1, "x": [1, 2, 3, -4.5]}') || { cat "$scratch/phosd.log"; fail "invoke"; }
[[ $answer == '{"y":[3.0,5.0,7.0,-8.0]}' ]] || fail "invoke answered $answer, not y = 2x + 1 = [3, 5, 7, -8]"
# shellcheck disable=SC2046  # pkg-config's words are separate arguments
cc -std=c99 -o gateway "$source_dir/examples/capi/gateway.c" \
  $(PKG_CONFIG_PATH=$prefix/lib/pkgconfig pkg-config --cflags --libs phos) -Wl,-rpath,"$prefix/lib" ||
  fail "building the C API example with pkg-config's flags"
PHOS_TOKEN=$(cat "$scratch/data/admin.token") ./gateway "$endpoint" "$prefix/lib/phos/functions/mlp" 7 \
  >"$scratch/gateway.log" 2>&1 || { cat "$scratch/gateway.log" "$scratch/phosd.log"; fail "the C API example"; }
grep -q '"checksum"' "$scratch/gateway.log" || fail "the installed mlp did not answer: $(cat "$scratch/gateway.log")"
echo "ok: the installed phosd serves the project's function ($answer) and, through libphos, the installed mlp"
