#!/usr/bin/env bash
# Regenerates frontend/surface/nvidia/*.txt: the functions each NVIDIA library phos stands in for
# (or will) exports, read with `nm -D --defined-only` from the CUDA toolkit and from NCCL (a
# package of its own: unpacked into the toolkit's tree, or Debian's libnccl2 and libnccl-dev under
# /usr). The lists are committed, so that a machine without these libraries still builds phos's
# compatibility table; run this after moving to a new toolkit or NCCL, then
# scripts/compatibility.sh.
#   scripts/surface.sh            # the toolkit at $CUDA_HOME, else /usr/local/cuda
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cuda_home=${CUDA_HOME:-/usr/local/cuda}
out="$root/frontend/surface/nvidia"
include="$cuda_home/include"
triplet=$(gcc -print-multiarch)

# The first of the given files that exists; fails naming them all when none does.
first_file() {
  for f in "$@"; do
    if [[ -f $f ]]; then
      echo "$f"
      return
    fi
  done
  echo "surface: none of $* found" >&2
  exit 1
}

# The value of `#define NAME <number>` in a header.
define() { sed -n "s/^#define $2 *\([0-9][0-9]*\).*/\1/p" "$1" | head -n 1; }
# MAJOR.MINOR.PATCH from a header's three defines.
version() { echo "$(define "$1" "$2").$(define "$1" "$3").$(define "$1" "$4")"; }

cuda_version=$(define "$include/cuda.h" CUDA_VERSION)
if [[ -z $cuda_version ]]; then
  echo "surface: no CUDA_VERSION in $include/cuda.h" >&2
  exit 1
fi
toolkit="CUDA toolkit $((cuda_version / 1000)).$((cuda_version % 1000 / 10))"
cublas_version="cuBLAS $(version "$include/cublas_api.h" CUBLAS_VER_MAJOR CUBLAS_VER_MINOR CUBLAS_VER_PATCH)"
nccl_lib=$(first_file "$cuda_home/lib64/libnccl.so.2" "/usr/lib/$triplet/libnccl.so.2")
nccl_h=$(first_file "$include/nccl.h" "/usr/include/nccl.h")
nccl_version="NCCL $(version "$nccl_h" NCCL_MAJOR NCCL_MINOR NCCL_PATCH)"

# list NAME FILE ORIGIN DESCRIPTION PATTERN: the functions of FILE whose names match PATTERN (an
# extended regular expression over the whole name), without symbol versions, sorted, after a
# first line naming where they came from (ORIGIN). Written beside the list, then moved over it,
# so that a failure leaves the committed list as it was.
list() {
  local name=$1 file=$2 origin=$3 description=$4 pattern=$5
  if [[ ! -f $file ]]; then
    echo "surface: $file not found" >&2
    exit 1
  fi
  local tmp="$out/$name.txt.tmp"
  {
    echo "# $origin: ${file#"$cuda_home/lib64/"} ($description), nm -D --defined-only, functions matching ^($pattern)\$"
    # Function symbols only: T (text), W (weak), i (indirect); nm prints a name as name@@VERSION.
    nm -D --defined-only "$file" | awk '$2 ~ /^[TWi]$/ { sub(/@.*/, "", $3); print $3 }' |
      grep -E "^($pattern)\$" | LC_ALL=C sort -u
  } >"$tmp"
  mv "$tmp" "$out/$name.txt"
  echo "surface: $name.txt: $(($(wc -l <"$out/$name.txt") - 1)) functions from $file"
}

mkdir -p "$out"
# cudart's __cuda* functions are the registration and launch entries nvcc's generated code calls:
# a program with kernels imports them as it imports cudaMalloc.
list cudart "$cuda_home/lib64/libcudart.so.13" "$toolkit" "CUDA runtime" 'cuda.*|__cuda.*'
list cublas "$cuda_home/lib64/libcublas.so.13" "$toolkit" "$cublas_version" 'cublas.*'
list cublasLt "$cuda_home/lib64/libcublasLt.so.13" "$toolkit" "cuBLASLt of $cublas_version" 'cublasLt.*'
# pnccl* are the profiling aliases of the same functions, which programs do not call.
list nccl "$nccl_lib" "$nccl_version" "its version from $(basename "$nccl_h")" 'nccl.*'
list driver "$cuda_home/lib64/stubs/libcuda.so" "$toolkit" "the driver API's link stub, soname libcuda.so.1" 'cu.*'
