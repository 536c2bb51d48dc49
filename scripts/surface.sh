#!/usr/bin/env bash
# Regenerates frontend/surface/nvidia/*.txt: the functions each NVIDIA library phos stands in for
# (or will) exports, read from the CUDA toolkit with `nm -D --defined-only`. The lists are
# committed, so that a machine without the toolkit's libraries still builds phos's compatibility
# table; run this after moving to a new toolkit, then scripts/compatibility.sh.
#   scripts/surface.sh            # the toolkit at $CUDA_HOME, else /usr/local/cuda
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cuda_home=${CUDA_HOME:-/usr/local/cuda}
out="$root/frontend/surface/nvidia"
include="$cuda_home/include"

# The value of `#define NAME <number>` in a toolkit header.
define() { sed -n "s/^#define $2 *\([0-9][0-9]*\).*/\1/p" "$include/$1" | head -n 1; }

cuda_version=$(define cuda.h CUDA_VERSION)
if [[ -z $cuda_version ]]; then
  echo "surface: no CUDA_VERSION in $include/cuda.h" >&2
  exit 1
fi
toolkit="CUDA toolkit $((cuda_version / 1000)).$((cuda_version % 1000 / 10))"
cublas_version="cuBLAS $(define cublas_api.h CUBLAS_VER_MAJOR).$(define cublas_api.h CUBLAS_VER_MINOR).$(define cublas_api.h CUBLAS_VER_PATCH)"
nccl_version="NCCL $(define nccl.h NCCL_MAJOR).$(define nccl.h NCCL_MINOR).$(define nccl.h NCCL_PATCH)"

# list NAME FILE DESCRIPTION PATTERN: the functions of FILE whose names match PATTERN (an
# extended regular expression over the whole name), without symbol versions, sorted, after a
# first line naming the toolkit they came from.
list() {
  local name=$1 file="$cuda_home/lib64/$2" description=$3 pattern=$4
  if [[ ! -f $file ]]; then
    echo "surface: $file not found" >&2
    exit 1
  fi
  {
    echo "# $toolkit: $2 ($description), nm -D --defined-only, functions matching ^($pattern)\$"
    # Function symbols only: T (text), W (weak), i (indirect); nm prints a name as name@@VERSION.
    nm -D --defined-only "$file" | awk '$2 ~ /^[TWi]$/ { sub(/@.*/, "", $3); print $3 }' |
      grep -E "^($pattern)\$" | LC_ALL=C sort -u
  } >"$out/$name.txt"
  echo "surface: $name.txt: $(($(wc -l <"$out/$name.txt") - 1)) functions from $file"
}

mkdir -p "$out"
# cudart's __cuda* functions are the registration and launch entries nvcc's generated code calls:
# a program with kernels imports them as it imports cudaMalloc.
list cudart libcudart.so.13 "CUDA runtime" 'cuda.*|__cuda.*'
list cublas libcublas.so.13 "$cublas_version" 'cublas.*'
list cublasLt libcublasLt.so.13 "cuBLASLt of $cublas_version" 'cublasLt.*'
# pnccl* are the profiling aliases of the same functions, which programs do not call.
list nccl libnccl.so.2 "$nccl_version" 'nccl.*'
list driver stubs/libcuda.so "the driver API's link stub, soname libcuda.so.1" 'cu.*'
