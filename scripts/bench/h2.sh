#!/usr/bin/env bash
# HTTP/2 benchmark: ratewall, nginx and HAProxy each terminating TLS and serving HTTP/2 (ALPN
# h2) in front of the same plain HTTP/1.1 upstream, h2load as the client; scripts/bench/tls.sh's
# h2 mode (its comment says how it measures and what the environment may set).
#   bash scripts/bench/h2.sh                          3 rounds x 3 proxies, about 2 minutes
#   SYSTEMS="nginx ratewall" ROUNDS=5 bash scripts/bench/h2.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
MODES=${MODES:-h2} RUN_DIR=${RUN_DIR:-/tmp/ratewall-bench-h2} exec bash scripts/bench/tls.sh "$@"
