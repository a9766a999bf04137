# Shared by the scripts in scripts/bench (sourced, not run): a run directory removed at exit
# with every process started into `pids`, and a wait for a server to answer. Source it from the
# repository's root.

ROOT=$(pwd)
ROUNDS=${ROUNDS:-3}                           # interleaved rounds; medians are reported
DURATION=${DURATION:-10}                      # seconds of load per system and round
BIN=${BIN:-$ROOT/build-release/ratewall}      # the gateway measured
SHARED=${SHARED:-$ROOT/../shared/bench}       # the peers' configurations and wrk script

# Makes $RUN (a fresh directory under /tmp named after $1) and ends the processes in `pids`, by
# PID, and removes $RUN when the script exits.
bench_run_dir() {  # name
  RUN=$(mktemp -d "/tmp/ratewall-$1-XXXXXX")
  pids=()
  trap bench_cleanup EXIT
}
bench_cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2> /dev/null || true; done
  wait 2> /dev/null || true
  rm -rf "$RUN"
}

# Waits up to 30 s for an HTTP answer, any answer, on 127.0.0.1:port.
wait_ready() {  # port
  for _ in $(seq 150); do
    curl -s -o /dev/null "http://127.0.0.1:$1/" && return 0
    sleep 0.2
  done
  echo "$(basename "$0"): nothing answers on port $1" >&2
  return 1
}
