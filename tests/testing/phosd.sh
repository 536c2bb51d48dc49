# shellcheck shell=bash
# Shell helpers for the tests that run an installed phosd (tests/install, tests/package); sourced.

# fail MESSAGE: the test fails, saying why.
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# start_phosd LOG PHOSD [ARGS...]: starts PHOSD ARGS --listen 127.0.0.1:<a free port> in the
# background, its output to LOG; sets phosd_pid and endpoint (http://127.0.0.1:<port>) and
# returns once /healthz answers, or fails (with LOG) when phosd exits or 30 s pass.
start_phosd() {
  local log=$1
  shift
  local port
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  endpoint=http://127.0.0.1:$port
  "$@" --listen "127.0.0.1:$port" >"$log" 2>&1 &
  phosd_pid=$!
  for _ in $(seq 1 300); do
    curl -sf "$endpoint/healthz" >/dev/null 2>&1 && return 0
    kill -0 "$phosd_pid" 2>/dev/null || { cat "$log"; fail "phosd exited"; }
    sleep 0.1
  done
  cat "$log"
  fail "phosd did not answer /healthz at $endpoint within 30 s"
}

# stop_phosd: ends the phosd start_phosd started, if any.
stop_phosd() {
  if [[ -n ${phosd_pid:-} ]]; then
    kill "$phosd_pid" 2>/dev/null || true
    wait "$phosd_pid" 2>/dev/null || true
    phosd_pid=""
  fi
}
