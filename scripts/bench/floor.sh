#!/usr/bin/env bash
# What a proxy's own work costs, apart from what no proxy can avoid on this machine. peers.sh's
# "SUT core us/req" counts everything on the proxies' core: the upstream's work on a forwarded
# request and the kernel's for every recv and send. This measures those floors beside ratewall
# and the nginx peer, interleaved, with peers.sh's pinning (wrk on core 0, everything else on
# core 1) and load (wrk -t1 -c50, the peers' 1000 keys):
#   upstream   wrk straight to the upstream (nginx, return 200): its share of a forwarded request
#   bare-429   nginx answering every request 429 with no limit to check: the cheapest local
#              answer (one recv, one send)
#   nginx-allowed / nginx-denied, ratewall-allowed / ratewall-denied: as in peers.sh
# Prints the SUT core's us per request (median of ROUNDS) and, for each proxy, its own share:
# forwarded minus upstream, 429 minus bare-429; and how much more ratewall's is than nginx's.
#   bash scripts/bench/floor.sh        (needs build-release/ratewall, nginx, wrk; ~4 minutes)
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/bench/lib.sh  # ROOT, ROUNDS, DURATION, BIN, SHARED
bench_run_dir floor
[[ -x $BIN ]] || { echo "floor: $BIN not found (bash scripts/build.sh)" >&2; exit 2; }

mkdir -p "$RUN/upstream/tmp"
setsid taskset -c 1 nginx -p "$RUN/upstream/" -e "$RUN/upstream/error.log" \
  -c "$SHARED/nginx-upstream.conf" > /dev/null 2>&1 < /dev/null &
pids+=($!)

# The bare responder: the upstream's configuration on another port, answering 429.
sed -e 's#listen 127.0.0.1:18080#listen 127.0.0.1:18084#' -e 's#^master_process on;#master_process off;#' \
  -e 's#return 200 "ok\\n";#return 429 "{\\"title\\":\\"Too Many Requests\\"}\\n";#' \
  "$SHARED/nginx-upstream.conf" > "$RUN/bare.conf"
grep -q 'return 429' "$RUN/bare.conf" || { echo "floor: could not render the bare responder" >&2; exit 2; }

render_nginx() {  # mode -> config path
  local rate=1000000r/s burst=1000000
  [[ $1 == denied ]] && rate=1r/m && burst=0
  sed -e "s#@RATE@#$rate#g" -e "s#@BURST@#$burst#g" -e "s# burst=0 # #" \
    -e "s#^master_process on;#master_process off;#" "$SHARED/nginx-peer.conf.tmpl" > "$RUN/nginx-$1.conf"
  echo "$RUN/nginx-$1.conf"
}

port_of() {
  case $1 in
    upstream) echo 18080 ;; bare-429) echo 18084 ;; nginx-*) echo 18081 ;; ratewall-*) echo 18083 ;;
  esac
}

start() {  # system -> pid on stdout ("" for the upstream, always running)
  local d=$RUN/$1
  mkdir -p "$d/tmp"
  case $1 in
    upstream) return 0 ;;
    bare-429) setsid taskset -c 1 nginx -p "$d/" -e "$d/error.log" -c "$RUN/bare.conf" > /dev/null 2>&1 < /dev/null & ;;
    nginx-*) setsid taskset -c 1 nginx -p "$d/" -e "$d/error.log" -c "$(render_nginx "${1#nginx-}")" > /dev/null 2>&1 < /dev/null & ;;
    ratewall-*) setsid taskset -c 1 "$BIN" --config "$ROOT/scripts/bench/${1#ratewall-}.yaml" > "$d/log" 2>&1 < /dev/null & ;;
  esac
  echo $!
}


busy() { awk '$1 == "cpu1" { t = 0; for (i = 2; i <= 9; i++) t += $i; print t - $5 - $6 }' /proc/stat; }

measure() {  # system -> "us_per_request req_per_s"
  local port out b0 b1 n
  port=$(port_of "$1")
  out=$RUN/$1.wrk
  (cd "$SHARED" && WRK_KEYS=1000 taskset -c 0 timeout -k 1 $((DURATION + 5)) \
    wrk -t1 -c50 -d2s -s wrk-keys.lua "http://127.0.0.1:$port/" > /dev/null 2>&1) || true
  b0=$(busy)
  (cd "$SHARED" && WRK_KEYS=1000 taskset -c 0 timeout -k 1 $((DURATION + 5)) \
    wrk -t1 -c50 -d"${DURATION}"s -s wrk-keys.lua "http://127.0.0.1:$port/" > "$out" 2>&1)
  b1=$(busy)
  n=$(grep -oP 'requests=\K[0-9]+' "$out")
  awk -v b=$((b1 - b0)) -v hz="$(getconf CLK_TCK)" -v n="$n" -v d="$DURATION" \
    'BEGIN { printf "%.2f %.0f\n", b * 1e6 / hz / n, n / d }'
}

systems="upstream bare-429 nginx-allowed ratewall-allowed nginx-denied ratewall-denied"
wait_ready 18080
for round in $(seq "$ROUNDS"); do
  for s in $systems; do
    pid=$(start "$s")
    wait_ready "$(port_of "$s")"
    read -r us rps < <(measure "$s")
    echo "$s $us $rps" >> "$RUN/results"
    echo "round $round $s: $us us/req on the SUT core, $rps req/s" >&2
    [[ -n $pid ]] && { kill -TERM "$pid" 2> /dev/null || true; wait "$pid" 2> /dev/null || true; }
  done
done

median() { grep "^$1 " "$RUN/results" | awk '{print $2}' | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
up=$(median upstream)
floor=$(median bare-429)
echo "| system | SUT core us/req (median of $ROUNDS) | its own share | ratewall's own share - nginx's |"
echo "|---|---:|---:|---:|"
echo "| upstream alone | $up | | |"
echo "| bare 429 (nginx, no limit) | $floor | | |"
for mode in allowed denied; do
  base=$up
  [[ $mode == denied ]] && base=$floor
  n=$(median "nginx-$mode")
  r=$(median "ratewall-$mode")
  awk -v n="$n" -v r="$r" -v b="$base" -v m="$mode" 'BEGIN {
    printf "| nginx %s | %s | %.2f | |\n", m, n, n - b
    printf "| ratewall %s | %s | %.2f | %+.2f |\n", m, r, r - b, r - n }'
done
