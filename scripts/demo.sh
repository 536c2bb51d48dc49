#!/usr/bin/env bash
# Installs what is missing, builds phos, and shows it at work on the simulated GPU (simgpu):
#   1. simgpu itself: a context, a module, copies and a kernel on a modelled A100, with the
#      modelled timings;
#   2. phosd serving a GPU function: the mlp function deployed with phos-fn and invoked over
#      HTTP, its CUDA and cuBLAS calls executed by phosd; first and warm latencies.
#
# Environment: PHOS_SIMGPU_PROFILE (default a100-pcie4); PHOS_DEMO_MIB (copy size of part 1,
# default 128); PHOS_DEMO_MODEL_MIB (mlp weights, default 256).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
build_dir=${PHOS_BUILD_DIR:-build}
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build_dir" -j2 --target simgpu_tour phosd phos-fn mlp

export PHOS_SIMGPU_PROFILE=${PHOS_SIMGPU_PROFILE:-a100-pcie4}
export PHOS_LOG_LEVEL=${PHOS_LOG_LEVEL:-warn}

echo
echo "== 1. simgpu: the CUDA driver API on a modelled ${PHOS_SIMGPU_PROFILE} (time scale 10) =="
echo "(context creation is modelled at the profile's 3.1 s, x10 time scale: it takes a while;"
echo " this is the cost phosd's context pool will take off the invocation path)"
PHOS_SIMGPU_TIME_SCALE=10 "$build_dir/bin/simgpu_tour" "${PHOS_DEMO_MIB:-128}"

echo
echo "== 2. phosd: the mlp function over HTTP (time scale 1: latencies are wall-clock) =="
data_dir=$(mktemp -d /tmp/phos-demo-XXXXXX)
port=$(( 20000 + RANDOM % 20000 ))
endpoint="http://127.0.0.1:$port"
PHOS_SIMGPU_TIME_SCALE=1 "$build_dir/bin/phosd" --listen "127.0.0.1:$port" --data-dir "$data_dir" --gpu sim \
  >"$data_dir/phosd.log" 2>&1 &
phosd_pid=$!
cleanup() {
  kill "$phosd_pid" 2>/dev/null || true
  wait "$phosd_pid" 2>/dev/null || true
  rm -rf "$data_dir"
}
trap cleanup EXIT
for _ in $(seq 100); do
  curl -sf "$endpoint/healthz" >/dev/null && break
  sleep 0.1
done

# phosd's context pool creates contexts (3.1 s each on this profile) in the background; deploy
# once one is ready, so that the first invocation leases it instead of creating one.
for _ in $(seq 200); do
  curl -s "$endpoint/metrics" | grep -q 'phos_ctxpool_contexts{device="0",state="ready"} [1-9]' && break
  sleep 0.1
done
echo "context pool ready: $(curl -s "$endpoint/metrics" | grep -o 'state="ready"} [0-9]*' | grep -o '[0-9]*$') context(s)"

phos_fn=("$build_dir/bin/phos-fn" --endpoint "$endpoint")
model_mib=${PHOS_DEMO_MODEL_MIB:-256}
"${phos_fn[@]}" deploy mlp "$build_dir/bin/functions/mlp" -- --size-mib "$model_mib" --layers 8
"${phos_fn[@]}" ls

invoke() {
  curl -s -o "$data_dir/response" -w '%{time_total}' -X POST --data "$1" "$endpoint/v1/functions/mlp/invoke"
}
echo
t=$(invoke '{"seed": 1}')
printf 'first invocation (waits for the instance: pooled context, %s MiB of weights):   %6.0f ms\n' \
  "$model_mib" "$(awk "BEGIN { print $t * 1000 }")"
echo "  response: $(cat "$data_dir/response")"
for seed in 2 3 4 5; do
  t=$(invoke "{\"seed\": $seed}")
  printf 'warm invocation, seed %s:                                          %6.1f ms\n' "$seed" \
    "$(awk "BEGIN { print $t * 1000 }")"
done
echo "  response: $(cat "$data_dir/response")"
echo
echo "Not built yet: snapshots (deploy captures a pre-entry image) and concurrent restore."
