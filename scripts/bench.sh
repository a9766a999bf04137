#!/usr/bin/env bash
# Gateway benchmark: ratewall against nginx and HAProxy doing the same job, interleaved in one
# run by ../shared/bench/peers.sh (wrk on core 0; upstream and proxy on core 1).
#   bash scripts/bench.sh            full run (3 rounds, about 4 minutes)
#   bash scripts/bench.sh --smoke    each system once, 150 requests
#   MODES="allowed limited denied" bash scripts/bench.sh   also the 429-only mode (denied.yaml)
# Environment is passed through to peers.sh (ROUNDS, DURATION, ...).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PEERS_SH=${PEERS_SCRIPT:-$ROOT/../shared/bench/peers.sh}
[[ -f $PEERS_SH ]] || { echo "bench: $PEERS_SH not found" >&2; exit 2; }
WITH_PEERS=1 bash scripts/setup.sh
BUILD_DIR=${BUILD_DIR:-build-release} BUILD_TYPE=Release bash scripts/build.sh ratewall
export GATEWAY_NAME=${GATEWAY_NAME:-ratewall}
export GATEWAY_CMD="exec $ROOT/${BUILD_DIR:-build-release}/ratewall --config $ROOT/scripts/bench/{mode}.yaml"
exec bash "$PEERS_SH" "$@"
