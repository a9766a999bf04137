#!/usr/bin/env bash
# Quick start: installs what is missing, builds, starts the demo upstream on 127.0.0.1:8000 and
# runs ratewall in the foreground on config/ratewall.yaml (127.0.0.1:8080). Ctrl-C stops both.
#   CONFIG=path/to/file.yaml bash scripts/run.sh   runs another configuration
#   NO_DEMO_UPSTREAM=1 bash scripts/run.sh         uses your own upstream instead
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh ratewall ratewall-demo-upstream
BUILD_DIR=${BUILD_DIR:-build}
CONFIG=${CONFIG:-config/ratewall.yaml}

demo_pid=""
cleanup() {
  if [[ -n $demo_pid ]]; then
    kill "$demo_pid" 2>/dev/null || true
    wait "$demo_pid" 2>/dev/null || true
  fi
}
trap cleanup EXIT
if [[ "${NO_DEMO_UPSTREAM:-0}" != 1 ]]; then
  "$BUILD_DIR/ratewall-demo-upstream" 8000 &
  demo_pid=$!
fi

cat >&2 <<'MSG'
ratewall on http://127.0.0.1:8080 in front of the demo upstream. Try, in another terminal:
  curl -s -o /dev/null -w '%{http_code} ' 'http://127.0.0.1:8080/api/hello?[1-12]'; echo
  curl -si -H 'X-API-Key: demo-key' http://127.0.0.1:8080/api/hello
MSG
"$BUILD_DIR/ratewall" --config "$CONFIG" &
gw_pid=$!
trap 'kill -TERM $gw_pid 2>/dev/null || true' INT TERM
wait "$gw_pid" || true
