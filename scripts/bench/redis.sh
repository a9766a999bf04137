#!/usr/bin/env bash
# ratewall with the Redis store against nginx and HAProxy, interleaved in one run by
# ../shared/bench/peers.sh with WITH_REDIS=1 (redis-server on 127.0.0.1:18379, pinned to the
# proxies' core). Compare with scripts/bench.sh (the memory store) run the same way.
#   bash scripts/bench/redis.sh            full run
#   bash scripts/bench/redis.sh --smoke    each system once, 150 requests
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
PEERS=${PEERS_SCRIPT:-$ROOT/../shared/bench/peers.sh}
[[ -f $PEERS ]] || { echo "bench: $PEERS not found" >&2; exit 2; }
WITH_PEERS=1 bash scripts/setup.sh
BUILD_DIR=${BUILD_DIR:-build-release} BUILD_TYPE=Release bash scripts/build.sh ratewall
export WITH_REDIS=1
# Every gateway sharing a Redis needs the same secret; ratewall refuses to start without one.
export RATEWALL_HASH_KEY=${RATEWALL_HASH_KEY:-bench-secret}
export GATEWAY_NAME=${GATEWAY_NAME:-ratewall-redis}
export GATEWAY_CMD="exec $ROOT/${BUILD_DIR:-build-release}/ratewall --config $ROOT/scripts/bench/redis-{mode}.yaml"
exec bash "$PEERS" "$@"
