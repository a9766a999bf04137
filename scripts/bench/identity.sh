#!/usr/bin/env bash
# What naming the client costs a whole gateway process: the same allowed-mode route identified
# by the client address, then by a JWT claim (one client's HS256 token, so each request takes
# the per-thread cache's path: cache lookup, exp check, subject hash). wrk on core 0; the nginx
# upstream and ratewall (one worker thread) on core 1; ROUNDS rounds of DURATION seconds each,
# interleaved; prints requests per second per round and the medians.
#   bash scripts/bench/identity.sh          (needs build-release/ratewall, nginx, wrk, openssl)
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/bench/lib.sh  # ROOT, ROUNDS, DURATION, BIN, SHARED
bench_run_dir identity-bench

mkdir -p "$RUN/upstream/tmp"
setsid taskset -c 1 nginx -p "$RUN/upstream/" -e "$RUN/upstream/error.log" \
  -c "$SHARED/nginx-upstream.conf" > /dev/null 2>&1 < /dev/null &
pids+=($!)

b64url() { openssl base64 -A | tr '+/' '-_' | tr -d '='; }
export RATEWALL_BENCH_JWT_SECRET=bench-secret-0123456789abcdef0123456789
header=$(printf '{"alg":"HS256","typ":"JWT"}' | b64url)
payload=$(printf '{"sub":"client-1","exp":%d}' $(( $(date +%s) + 3600 )) | b64url)
signature=$(printf '%s' "$header.$payload" |
  openssl dgst -sha256 -hmac "$RATEWALL_BENCH_JWT_SECRET" -binary | b64url)
token="$header.$payload.$signature"

write_config() {  # name, identify_by, extra identity keys
  cat > "$RUN/$1.yaml" <<YAML
server: { listen: 127.0.0.1:18083, threads: 1 }
admin: { enabled: false }
log: { access: off }
identity: { $3 }
upstreams:
  api: { targets: [127.0.0.1:18080] }
routes:
  - name: all
    match: { path_prefix: / }
    upstream: api
    identify_by: $2
    limits: [{ name: high, algorithm: token_bucket, rate: 1000000/s, burst: 1000000 }]
YAML
}
write_config ip "[ip]" "ipv6_prefix: 64"
write_config jwt "[jwt:sub, ip]" "jwt: { hs256_secret_env: RATEWALL_BENCH_JWT_SECRET }"

run() {  # config name -> requests per second
  setsid taskset -c 1 "$BIN" --config "$RUN/$1.yaml" > "$RUN/$1.log" 2>&1 < /dev/null &
  local gw=$!
  for _ in $(seq 50); do
    grep -q "listening on" "$RUN/$1.log" && break
    sleep 0.1
  done
  local out
  out=$(taskset -c 0 timeout $((DURATION + 5)) wrk -t1 -c32 -d"${DURATION}s" \
    -H "Authorization: Bearer $token" http://127.0.0.1:18083/ 2>&1)
  kill "$gw"
  wait "$gw" 2>/dev/null || true
  echo "$out" | awk '/Requests\/sec/ {print int($2)}'
}

declare -A results
for round in $(seq "$ROUNDS"); do
  for mode in ip jwt; do
    r=$(run "$mode")
    results[$mode]+="$r "
    echo "round $round $mode: $r req/s"
  done
done
median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ip=$(echo "${results[ip]}" | median)
jwt=$(echo "${results[jwt]}" | median)
echo "median: ip $ip req/s, jwt:sub $jwt req/s, ratio $(awk -v a="$jwt" -v b="$ip" 'BEGIN {printf "%.3f", a / b}')"
