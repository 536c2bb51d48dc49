#!/usr/bin/env bash
# Warm invokes under load: a phosd of its own on simgpu serves mlp (16 MiB, 4 layers, 2 warm
# instances) to wrk for --seconds. The reference answer is the warm one, which instances restored
# in two modes must repeat; every answer under load is compared with it (bench/load.lua), statuses
# outside 2xx are counted, and phosd's RSS, descriptors and threads are sampled before and after.
#
#   bench/load.sh [--seconds 60] [--connections 8] [--threads 2]
#
# Exits 1 when any answer was not 2xx or not the reference, or a socket error occurred.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=60
connections=8
threads=2
while (($#)); do
  case $1 in
    --seconds) seconds=$2; shift 2 ;;
    --connections) connections=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    *) echo "usage: bench/load.sh [--seconds N] [--connections N] [--threads N]" >&2; exit 2 ;;
  esac
done

build=${PHOS_BUILD_DIR:-build}
for tool in "$build/bin/phosd" "$build/bin/phos-fn" "$build/bin/functions/mlp" /usr/bin/wrk; do
  [[ -x $tool ]] || { echo "load: $tool missing (cmake --build $build --target phosd phos-fn mlp; scripts/setup.sh)" >&2; exit 2; }
done

export PHOS_SIMGPU_PROFILE=${PHOS_SIMGPU_PROFILE:-ci} PHOS_SIMGPU_TIME_SCALE=${PHOS_SIMGPU_TIME_SCALE:-1}
data=$(mktemp -d /tmp/phos-load-XXXXXX)
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
endpoint=http://127.0.0.1:$port
"$build/bin/phosd" --listen "127.0.0.1:$port" --data-dir "$data/data" --gpu sim --functions-dir "$build/bin/functions" \
  >"$data/phosd.log" 2>&1 &
phosd=$!
trap 'kill $phosd 2>/dev/null; wait $phosd 2>/dev/null; rm -rf "$data"' EXIT
until curl -sf "$endpoint/healthz" >/dev/null; do
  kill -0 $phosd 2>/dev/null || { cat "$data/phosd.log" >&2; exit 1; }
  sleep 0.1
done

# Deploys need the admin token phosd made at its first start; invokes of an open function do not.
"$build/bin/phos-fn" --endpoint "$endpoint" --token-file "$data/data/admin.token" deploy mlp "$build/bin/functions/mlp" --instances 2 --max-instances 2 \
  -- --size-mib 16 --layers 4 >/dev/null
body='{"seed": 7}'
expected=$(curl -sf -X POST --data-binary "$body" "$endpoint/v1/functions/mlp/invoke")
# The reference: the same request on instances restored from the snapshot in two other modes.
for mode in phos eager; do
  again=$(curl -sf -X POST -H "X-Phos-Restore-Mode: $mode" --data-binary "$body" "$endpoint/v1/functions/mlp/invoke")
  [[ $again == "$expected" ]] || { echo "load: the $mode answer differs from the warm one" >&2; exit 1; }
done

sample() {
  local rss fds threads
  rss=$(awk '/^VmRSS/ {print $2}' "/proc/$phosd/status")
  fds=$(ls "/proc/$phosd/fd" | wc -l)
  threads=$(ls "/proc/$phosd/task" | wc -l)
  echo "$1: rss ${rss} KiB, fds $fds, threads $threads"
}
# Warm-up, then the samples around the measured run are taken with the same instances idle.
PHOS_LOAD_BODY=$body PHOS_LOAD_EXPECTED=$expected wrk -t "$threads" -c "$connections" -d 5s -s bench/load.lua \
  "$endpoint/v1/functions/mlp/invoke" >/dev/null
sleep 1
sample before
out=$(PHOS_LOAD_BODY=$body PHOS_LOAD_EXPECTED=$expected wrk -t "$threads" -c "$connections" -d "${seconds}s" \
  --latency -s bench/load.lua "$endpoint/v1/functions/mlp/invoke")
sleep 1
sample after
echo "wrk -t $threads -c $connections -d ${seconds}s (mlp 16 MiB x 4 layers, 2 warm instances, profile $PHOS_SIMGPU_PROFILE, time scale $PHOS_SIMGPU_TIME_SCALE)"
sed -n '/^requests /,$p' <<<"$out"
grep -q '^errors: non-2xx 0 wrong-answer 0 connect 0 read 0 write 0 timeout 0$' <<<"$out"
