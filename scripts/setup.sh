#!/usr/bin/env bash
# Installs what phos needs to build and test, and nothing that is already there.
# Idempotent: a second run on a ready machine makes no changes and takes about a second.
set -euo pipefail

# Debian packages the build uses. Keep in step with the find_package() calls in CMakeLists.txt.
packages=(
  build-essential cmake ninja-build pkg-config ccache
  libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libopenblas-dev
  libuv1-dev libhttp-parser-dev libcli11-dev nlohmann-json3-dev prometheus-cpp-dev
  curl libcurl4-openssl-dev
  libprotobuf-dev protobuf-compiler librocksdb-dev libxxhash-dev libzstd-dev liburing-dev
  libssl-dev  # SHA-256 of artifacts and tokens, constant-time token comparison (libcrypto)
  libelf-dev  # phos-fn check reads programs' and libraries' dynamic symbols (frontend/surface)
  criu
  bubblewrap  # phosd --sandbox: each function in its own namespaces (docs/design.md, Sandbox)
  python3  # scripts/make-checkpoint.py (standard library only)
  python3-yaml  # scripts/openapi_json.py: docs/openapi.yaml as JSON for phosd; the API walker test
  python3-setuptools python3-wheel python3-pip  # python/: phos for Python built and installed offline by pip
  golang-go  # go/: phos for Go, a cgo binding; its test (GoBinding) is registered only when go is found
  gnuplot-nox  # bench/coldstart draws the plots in docs/plots
  clang libclang-rt-14-dev  # scripts/fuzz.sh: clang with libFuzzer and the ASan/UBSan runtimes
  wrk  # bench/load.sh: warm invokes under load
  valgrind  # the C API example under --leak-check=full (a long test)
  libxml2-dev  # objstore/: S3's XML answers (ListObjectsV2, errors)
  etcd-server  # cluster/: the etcd its tests start on loopback (tests/testing/etcd.h)
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The CUDA toolkit provides the headers simgpu implements (cuda.h) and, when nvcc is present, the
# GPU variants of kernels. phos needs CUDA 13: its frontend libraries are libcudart.so.13 and
# libcublas.so.13 (cmake/PhosCuda.cmake says why the build does not follow other versions).
cuda_home=${CUDA_HOME:-/usr/local/cuda}
header="$cuda_home/include/cuda.h"
if [[ ! -f $header ]]; then
  echo "setup: CUDA headers not found at $header." >&2
  echo "setup: install the CUDA 13 toolkit there, or set CUDA_HOME to its root." >&2
  exit 1
fi
version=$(sed -n 's/^#define CUDA_VERSION \([0-9]*\).*/\1/p' "$header")
if [[ -z $version || $version -lt 13000 || $version -ge 14000 ]]; then
  echo "setup: $header is CUDA version ${version:-unknown}; phos needs CUDA 13 (13000 to 13999)." >&2
  exit 1
fi
# s3rver (npm): an S3 server on loopback for the object store's and the remote tier's tests. Not
# fatal: without it those tests skip, saying why. npm from Debian when the machine has none (a
# machine whose Node.js comes with its own npm keeps it: Debian's would conflict with it).
s3rver_dir=${PHOS_NODE_TOOLS:-$HOME/.cache/phos/node}
if [[ ! -x $s3rver_dir/node_modules/.bin/s3rver ]]; then
  if ! command -v npm >/dev/null; then
    echo "setup: installing nodejs npm"
    { "${sudo_cmd[@]}" apt-get update -qq && "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends nodejs npm; } \
      >/dev/null || echo "setup: npm could not be installed" >&2
  fi
  echo "setup: installing s3rver into $s3rver_dir"
  mkdir -p "$s3rver_dir"
  if ! command -v npm >/dev/null ||
    ! npm install --prefix "$s3rver_dir" --no-audit --no-fund --loglevel=error s3rver@3.7.1 >/dev/null; then
    echo "setup: s3rver could not be installed; the object store's tests will skip" >&2
  fi
fi

echo "setup: ready (CUDA headers $((version / 1000)).$((version % 1000 / 10)) at $cuda_home)"
