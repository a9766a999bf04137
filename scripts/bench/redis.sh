#!/usr/bin/env bash
# ratewall with the Redis store against ratewall with the memory store, nginx and HAProxy, in
# one run. ../shared/bench/peers.sh (WITH_REDIS=1: redis-server on 127.0.0.1:18379, pinned to
# the proxies' core) measures one gateway per invocation, so each round invokes it twice, once
# per store, each time with nginx and HAProxy too; the rounds alternate the two stores. The
# table gives medians over the rounds, each ratio taken within its own invocation or round.
#   bash scripts/bench/redis.sh            3 rounds, about 8 minutes
#   bash scripts/bench/redis.sh --smoke    each system once, 150 requests, both stores
# Environment: ROUNDS (3), RUN_DIR (/tmp/ratewall-bench-redis); the rest goes to peers.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
PEERS_SH=${PEERS_SCRIPT:-$ROOT/../shared/bench/peers.sh}
[[ -f $PEERS_SH ]] || { echo "bench: $PEERS_SH not found" >&2; exit 2; }
WITH_PEERS=1 bash scripts/setup.sh
BUILD_DIR=${BUILD_DIR:-build-release}
BUILD_DIR=$BUILD_DIR BUILD_TYPE=Release bash scripts/build.sh ratewall
BIN="$ROOT/$BUILD_DIR/ratewall"
ROUNDS=${ROUNDS:-3}
OUT=${RUN_DIR:-/tmp/ratewall-bench-redis}
export WITH_REDIS=1
# Every gateway sharing a Redis needs the same secret; ratewall refuses to start without one.
export RATEWALL_HASH_KEY=${RATEWALL_HASH_KEY:-bench-secret}

run_store() {  # store round [peers.sh args]
  local store=$1 round=$2
  shift 2
  local config="$ROOT/scripts/bench/{mode}.yaml"
  [[ $store == redis ]] && config="$ROOT/scripts/bench/redis-{mode}.yaml"
  mkdir -p "$OUT/$store-r$round"
  RUN_DIR="$OUT/$store-r$round" ROUNDS=1 DIRECT=0 GATEWAY_NAME="ratewall-$store" \
    GATEWAY_CMD="exec $BIN --config $config" bash "$PEERS_SH" "$@"
}

if [[ ${1:-} == --smoke ]]; then
  run_store memory 1 --smoke
  run_store redis 1 --smoke
  exit 0
fi

mkdir -p "$OUT"
: > "$OUT/all.tsv"
for ((round = 1; round <= ROUNDS; round++)); do
  # Alternate which store goes first, so that drift of the host favours neither.
  stores="memory redis"
  ((round % 2 == 0)) && stores="redis memory"
  for store in $stores; do
    run_store "$store" "$round" > "$OUT/$store-r$round.md"
    # system mode round rps p50 p99 n200 n429 ... : tag every row with its invocation.
    awk -v inv="$store-r$round" -v round="$round" 'BEGIN { OFS = "\t" } { $3 = round; print inv, $0 }' \
      "$OUT/$store-r$round/results.tsv" >> "$OUT/all.tsv"
  done
done

awk -F'\t' '
  function median(list,   n, a, i, j, t) {
    n = split(list, a, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  {
    inv = $1; sys = $2; mode = $3; round = $4; rps = $5; p99 = $7 / 1000; n200 = $8; n429 = $9
    key = sys SUBSEP mode
    if (!(key in seen)) { seen[key] = 1; order[++count] = key }
    rpsl[key] = rpsl[key] " " rps; p99l[key] = p99l[key] " " p99
    okl[key] = okl[key] " " n200; deniedl[key] = deniedl[key] " " n429
    at[inv, sys, mode] = rps
    if (sys ~ /^ratewall-/) gw[round, sys, mode] = rps
    invs[inv] = 1; modes[mode] = 1; rounds[round] = 1
  }
  END {
    # vs nginx: each system against the nginx of its own invocation.
    for (inv in invs) for (k = 1; k <= count; k++) {
      split(order[k], p, SUBSEP)
      if ((inv, p[1], p[2]) in at && (inv, "nginx", p[2]) in at)
        vs[order[k]] = vs[order[k]] " " at[inv, p[1], p[2]] / at[inv, "nginx", p[2]]
    }
    print "| system | mode | req/s (median) | p99 ms | 200 | 429 | vs nginx | Redis ÷ memory |"
    print "|---|---|---:|---:|---:|---:|---:|---:|"
    for (k = 1; k <= count; k++) {
      split(order[k], p, SUBSEP)
      ratio = ""
      if (p[1] == "ratewall-redis") {
        list = ""
        for (r in rounds) if ((r, "ratewall-memory", p[2]) in gw && (r, "ratewall-redis", p[2]) in gw)
          list = list " " sprintf("%.2f", gw[r, "ratewall-redis", p[2]] / gw[r, "ratewall-memory", p[2]])
        if (list != "") ratio = sprintf("%.2f (rounds:%s)", median(list), list)
      }
      printf "| %s | %s | %.0f | %.2f | %.0f | %.0f | %.2fx | %s |\n", p[1], p[2], median(rpsl[order[k]]),
        median(p99l[order[k]]), median(okl[order[k]]), median(deniedl[order[k]]), median(vs[order[k]]), ratio
    }
  }' "$OUT/all.tsv" | tee "$OUT/results.md"
echo "Raw rows: $OUT/all.tsv; each invocation's report: $OUT/<store>-r<round>.md"
