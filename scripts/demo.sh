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
echo "== 2. phosd: deploy mlp, then cold boot, stop-the-world, phos restore and warm side by side =="
echo "(time scale 1: the times are wall-clock, and the modelled device runs at the profile's speed)"
data_dir=$(mktemp -d /tmp/phos-demo-XXXXXX)
port=$(( 20000 + RANDOM % 20000 ))
endpoint="http://127.0.0.1:$port"
PHOS_SIMGPU_TIME_SCALE=1 "$build_dir/bin/phosd" --listen "127.0.0.1:$port" --data-dir "$data_dir" --gpu sim \
  --functions-dir "$build_dir/bin/functions" --keep-alive-ms 100 >"$data_dir/phosd.log" 2>&1 &
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
for _ in $(seq 200); do
  curl -s "$endpoint/metrics" | grep -q 'phos_ctxpool_contexts{device="0",state="ready"} [1-9]' && break
  sleep 0.1
done
echo "context pool ready: $(curl -s "$endpoint/metrics" | grep -o 'phos_ctxpool_contexts{device="0",state="ready"} [0-9]*' | grep -o '[0-9]*$') context(s)"
# The admin token phosd made at its first start: deploys need it.
phos_fn=("$build_dir/bin/phos-fn" --endpoint "$endpoint" --token-file "$data_dir/admin.token")
model_mib=${PHOS_DEMO_MODEL_MIB:-256}
# One warm instance, room for one more: each restore below gets the free instance range. The
# sample request records the order in which the function first touches its buffers.
"${phos_fn[@]}" deploy mlp "$build_dir/bin/functions/mlp" --instances 1 --max-instances 2 \
  --sample '{"seed": 0}' -- --size-mib "$model_mib" --layers 8
"${phos_fn[@]}" ls
# Until only the warm instance is left (the previous restore's instance has ended).
settle() {
  for _ in $(seq 200); do
    "${phos_fn[@]}" ls --json | grep -q '"busy":0,"idle":1,"queued":0,"starting":0' && return
    sleep 0.05
  done
}
# One invocation in MODE; prints its stage times (ms from the request's arrival in phosd).
invoke() {
  local mode=$1 seed=$2
  settle
  curl -s -D "$data_dir/headers" -o "$data_dir/response" -X POST -H "X-Phos-Restore-Mode: $mode" \
    --data "{\"seed\": $seed}" "$endpoint/v1/functions/mlp/invoke"
  tr -d '\r' <"$data_dir/headers" | awk -v mode="$mode" '
    tolower($1) == "x-phos-restore-mode:" { served = $2 }
    tolower($1) ~ /^x-phos-stage-/ { name = tolower($1); sub(/^x-phos-stage-/, "", name); sub(/-us:$/, "", name); t[name] = $2 / 1000 }
    END {
      printf "%-15s %-15s", mode, served
      split("lease cpu-resume first-launch first-byte resident", order, " ")
      for (i = 1; i <= 5; ++i) printf (order[i] in t) ? " %10.1f" : " %10s", (order[i] in t) ? t[order[i]] : "-"
      printf "\n"
    }'
}
echo
printf '%-15s %-15s %10s %10s %10s %10s %10s\n' "asked" "served by" "lease" "cpu-resume" "1st-launch" "1st-byte" "resident"
echo "(ms after the request reached phosd; cold boot and stop-the-world create a context: ${PHOS_SIMGPU_PROFILE}'s 3.1 s)"
seed=1
for mode in cold-boot stop-the-world phos warm; do
  invoke "$mode" "$seed"
  seed=$((seed + 1))
done
echo "  last response: $(cat "$data_dir/response")"
echo
echo "Stages: lease = context leased (pooled) or created; cpu-resume = the function's process forked from its"
echo "parked template and ready; first-launch = its first kernel; first-byte = response; resident = every buffer"
echo "loaded (phos keeps loading while kernels run: first-byte can come before resident)."
echo "At time scale 1 this host's memory bandwidth, not the modelled PCIe link, sets the load rate;"
echo "build/bin/restore_bench measures every mode against the bound on the modelled device (docs/benchmarks.md)."
