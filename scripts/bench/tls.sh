#!/usr/bin/env bash
# TLS benchmark: ratewall, nginx and HAProxy each terminating TLS in front of the same plain
# HTTP/1.1 upstream, measured as ../shared/bench/peers.sh measures (its upstream, its nginx and
# HAProxy configurations with a TLS listener instead of the plain one and HAProxy's
# http-reuse always instead of safe, its wrk key script):
# interleaved rounds, wrk on core 0, upstream and proxy on core 1, each proxy started fresh,
# checked, warmed up, measured and stopped. One worker thread each; every proxy does the
# "allowed" job of scripts/bench.sh (a per-key limit consulted on every request, never hit).
# Same throwaway EC P-256 certificate, made with openssl into a temporary directory, for all.
#   keepalive  wrk's default: each of the 50 connections makes one handshake, then is reused
#   close      wrk -H "Connection: close": one connection, so one handshake, per request
#   h2         h2load: HTTP/2 over TLS (ALPN h2), H2_CONNS connections of H2_STREAMS concurrent
#              streams each (10 x 5: as many requests in flight as wrk's 50 connections), one
#              X-API-Key on every request; to the upstream each proxy speaks HTTP/1.1 as in the
#              other modes. Every proxy offers h2 and http/1.1 by ALPN in every mode (wrk
#              offers none and speaks HTTP/1.1).
#
#   bash scripts/bench/tls.sh            3 rounds x 2 modes x 3 proxies, about 4 minutes
#   bash scripts/bench/tls.sh --smoke    start each proxy once and run the TLS checks, no wrk
#   MODES=h2 bash scripts/bench/tls.sh   HTTP/2 only (scripts/bench/h2.sh)
#   SYSTEMS="nginx haproxy" DURATION=2 WARMUP=1 ROUNDS=1 bash scripts/bench/tls.sh
#
# Before measuring, each proxy must answer 200 over TLS and, with openssl s_client, negotiate
# TLS_VERSION, answer "Connection: close" with "Connection: close" and close the connection
# after the response; otherwise the script stops with a message. Whether a second connection
# resumes the first one's session is reported: wrk resumes TLS sessions (it keeps the session
# across its SSL_clear), so in close mode a handshake is a resumption wherever the proxy issues
# session tickets (OpenSSL's default, kept by nginx and HAProxy).
#
# Environment (defaults in brackets):
#   ROUNDS [3]  DURATION [10] (s, 1..12)  WARMUP [2] (s, 0..12)  CONNS [50]  THREADS [1] (wrk)
#   LOADGEN_CPU [0]  SUT_CPU [1]  MODES ["keepalive close"]  SYSTEMS ["nginx haproxy ratewall"]
#   H2_CONNS [10]  H2_STREAMS [5] (h2 mode: h2load -c and -m)
#   TLS_VERSION [1.3]  1.2: every proxy accepts 1.2 and up, and the clients are held to exactly
#       TLS_VERSION (wrk and s_client by an OpenSSL configuration file, curl by --tls-max)
#   RUN_DIR [/tmp/ratewall-bench-tls]  logs, rendered configurations, results.tsv, results.md
#   BUILD_DIR [build-release]  built as scripts/bench.sh builds it (Release), unless
#   RATEWALL_BIN is set: that binary is used as is
#   PEERS_SCRIPT [../shared/bench/peers.sh]  its directory holds the shared configurations
# Exit status: 0 on success, non-zero when a server does not start or fails a check, or wrk
# fails. Every process started is stopped by its process group on exit.
set -Eeuo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
PEERS_SCRIPT=${PEERS_SCRIPT:-$ROOT/../shared/bench/peers.sh}
SHARED=$(dirname "$PEERS_SCRIPT")
RUN_DIR=${RUN_DIR:-/tmp/ratewall-bench-tls}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10}
WARMUP=${WARMUP:-2}
CONNS=${CONNS:-50}
THREADS=${THREADS:-1}
LOADGEN_CPU=${LOADGEN_CPU:-0}
SUT_CPU=${SUT_CPU:-1}
MODES=${MODES:-"keepalive close"}
H2_CONNS=${H2_CONNS:-10}
H2_STREAMS=${H2_STREAMS:-5}
SYSTEMS=${SYSTEMS:-"nginx haproxy ratewall"}
TLS_VERSION=${TLS_VERSION:-1.3}
BUILD_DIR=${BUILD_DIR:-build-release}
RATEWALL_BIN=${RATEWALL_BIN:-}

HOST=127.0.0.1
PORT_UPSTREAM=18080   # fixed by the shared nginx-upstream.conf
declare -A PORT=([nginx]=18441 [haproxy]=18442 [ratewall]=18443)   # ratewall's: tls.yaml
MARKER=".ratewall-bench-tls"
RESULTS_TSV="$RUN_DIR/results.tsv"
RESULTS_MD="$RUN_DIR/results.md"
CHECKS_TSV="$RUN_DIR/checks.tsv"
export WRK_KEYS=${WRK_KEYS:-1000}
export WRK_KEY_ORDER=${WRK_KEY_ORDER:-rr}
export WRK_KEYS_LUA="$SHARED/wrk-keys.lua"
LUA="$ROOT/scripts/bench/tls-keys.lua"

SMOKE=0
case "${1:-}" in
  --smoke) SMOKE=1 ;;
  -h | --help) sed -n '2,/^set -E/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  "") ;;
  *) echo "unknown argument: $1 (use --smoke or --help)" >&2; exit 2 ;;
esac

log() { printf '[tls %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# ---------------------------------------------------------------- checks of the setup
for f in nginx-upstream.conf nginx-peer.conf.tmpl haproxy.cfg.tmpl wrk-keys.lua; do
  [[ -f $SHARED/$f ]] || die "$SHARED/$f not found (set PEERS_SCRIPT to ../shared/bench/peers.sh)"
done
for v in ROUNDS DURATION WARMUP CONNS THREADS LOADGEN_CPU SUT_CPU H2_CONNS H2_STREAMS; do
  [[ ${!v} =~ ^[0-9]+$ ]] || die "$v must be a non-negative integer (got '${!v}')"
done
((DURATION >= 1 && DURATION <= 12)) || die "DURATION must be 1..12 s (each load run is capped at 15 s)"
((WARMUP <= 12)) || die "WARMUP must be 0..12 s"
((ROUNDS >= 1 && ROUNDS <= 20)) || die "ROUNDS must be 1..20"
((CONNS >= THREADS && THREADS >= 1)) || die "need CONNS >= THREADS >= 1"
((H2_CONNS >= 1 && H2_STREAMS >= 1)) || die "need H2_CONNS >= 1 and H2_STREAMS >= 1"
[[ $TLS_VERSION == 1.2 || $TLS_VERSION == 1.3 ]] || die "TLS_VERSION must be 1.2 or 1.3"
read -r -a MODE_LIST <<< "$MODES"
read -r -a SYSTEM_LIST <<< "$SYSTEMS"
for m in "${MODE_LIST[@]}"; do [[ $m == keepalive || $m == close || $m == h2 ]] || die "unknown mode '$m'"; done
for s in "${SYSTEM_LIST[@]}"; do [[ -n ${PORT[$s]:-} ]] || die "unknown system '$s' (nginx, haproxy, ratewall)"; done
((${#MODE_LIST[@]} > 0 && ${#SYSTEM_LIST[@]} > 0)) || die "MODES and SYSTEMS must not be empty"
NCPU=$(nproc)
((LOADGEN_CPU < NCPU && SUT_CPU < NCPU)) || die "LOADGEN_CPU/SUT_CPU must be < nproc ($NCPU)"
[[ $LOADGEN_CPU != "$SUT_CPU" ]] || log "WARNING: LOADGEN_CPU == SUT_CPU: wrk shares the core with the proxy"

WITH_PEERS=1 bash scripts/setup.sh
for t in nginx haproxy wrk h2load openssl curl taskset setsid timeout ss awk sed sort; do
  command -v "$t" > /dev/null 2>&1 || die "missing tool: $t"
done
if [[ " ${SYSTEM_LIST[*]} " == *" ratewall "* ]]; then
  if [[ -z $RATEWALL_BIN ]]; then
    BUILD_DIR=$BUILD_DIR BUILD_TYPE=Release bash scripts/build.sh ratewall
    RATEWALL_BIN="$ROOT/$BUILD_DIR/ratewall"
  fi
  [[ -x $RATEWALL_BIN ]] || die "ratewall binary $RATEWALL_BIN not found"
fi

# ---------------------------------------------------------------- processes
PIDS=()           # process groups started here (setsid: pgid == pid), stopped in reverse
WRK_PID=""
CERT_DIR=""
UPSTREAM_PID=""
SYS_PID=""

is_running() { kill -0 "$1" 2> /dev/null && [[ $(awk '{print $3}' "/proc/$1/stat" 2> /dev/null) != Z ]]; }

stop_group() {  # pid: TERM to its group, KILL after 5 s
  local pid=$1 i p kept=()
  kill -TERM -- "-$pid" 2> /dev/null || true
  for ((i = 0; i < 50; i++)); do is_running "$pid" || break; sleep 0.1; done
  if is_running "$pid"; then
    log "pid $pid did not stop on TERM, sending KILL to its process group"
  fi
  kill -KILL -- "-$pid" 2> /dev/null || true
  wait "$pid" 2> /dev/null || true
  for p in "${PIDS[@]}"; do [[ $p == "$pid" ]] || kept+=("$p"); done
  PIDS=("${kept[@]}")
}

cleanup() {
  local rc=$? i
  trap - EXIT INT TERM
  if [[ -n $WRK_PID ]]; then kill -TERM "$WRK_PID" 2> /dev/null || true; wait "$WRK_PID" 2> /dev/null || true; fi
  for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do stop_group "${PIDS[i]}"; done
  [[ -n $CERT_DIR ]] && rm -rf "$CERT_DIR"
  exit "$rc"
}

STARTED_PID=""
spawn() {  # logfile cmd...: in its own process group, pinned to SUT_CPU
  local logf=$1
  shift
  setsid taskset -c "$SUT_CPU" "$@" > "$logf" 2>&1 < /dev/null &
  STARTED_PID=$!
  PIDS+=("$STARTED_PID")
}

port_listening() { [[ -n $(ss -Hltn "sport = :$1" 2> /dev/null) ]]; }
ensure_port_free() {
  ! port_listening "$1" || die "port $HOST:$1 is already in use by a process this script did not start: $(ss -Hltnp "sport = :$1" | head -1)"
}
wait_port_free() {
  local i
  for ((i = 0; i < 100; i++)); do port_listening "$1" || return 0; sleep 0.05; done
  die "port $1 still in use after stopping its server"
}

http_code() {  # scheme port -> status code of GET / (000 when there is no answer)
  local tls=()
  [[ $1 == https ]] && tls=(-k --tlsv"$TLS_VERSION" --tls-max "$TLS_VERSION")
  curl -s -o /dev/null -m 2 "${tls[@]}" -w '%{http_code}' -H 'X-API-Key: readiness-probe' \
    "$1://$HOST:$2/" 2> /dev/null || true
}

wait_ready() {  # scheme port pid name logfile: until GET / answers 200
  local scheme=$1 port=$2 pid=$3 name=$4 logf=$5 code="" deadline=$(($(date +%s) + 10))
  while :; do
    if ! is_running "$pid"; then
      tail -n 20 "$logf" >&2 || true
      die "$name (pid $pid) exited while starting; log: $logf"
    fi
    if port_listening "$port"; then
      code=$(http_code "$scheme" "$port")
      [[ $code == 200 ]] && return 0
    fi
    if (($(date +%s) >= deadline)); then
      tail -n 20 "$logf" >&2 || true
      die "$name does not answer 200 on $scheme://$HOST:$port/ after 10 s (last status: ${code:-not listening}); log: $logf"
    fi
    sleep 0.05
  done
}

# ---------------------------------------------------------------- certificate and configurations
make_certificate() {
  CERT_DIR=$(mktemp -d /tmp/ratewall-bench-tls-cert.XXXXXX)
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -subj /CN=localhost -addext subjectAltName=DNS:localhost,IP:127.0.0.1 \
    -keyout "$CERT_DIR/key.pem" -out "$CERT_DIR/cert.pem" > "$CERT_DIR/openssl.log" 2>&1 \
    || { cat "$CERT_DIR/openssl.log" >&2; die "openssl could not make the certificate"; }
  cat "$CERT_DIR/cert.pem" "$CERT_DIR/key.pem" > "$CERT_DIR/cert+key.pem"   # HAProxy's crt
  # The clients (wrk, s_client) negotiate exactly TLS_VERSION, whatever the proxy accepts.
  cat > "$CERT_DIR/client.cnf" << EOF
openssl_conf = openssl_init
[openssl_init]
ssl_conf = ssl_sect
[ssl_sect]
system_default = system_default_sect
[system_default_sect]
MinProtocol = TLSv$TLS_VERSION
MaxProtocol = TLSv$TLS_VERSION
EOF
}

render_nginx() {  # dir
  local protocols="TLSv1.3"
  [[ $TLS_VERSION == 1.2 ]] && protocols="TLSv1.2 TLSv1.3"
  sed -e 's#@RATE@#1000000r/s#g' -e 's#@BURST@#1000000#g' \
    -e "s#^\( *\)listen 127.0.0.1:18081 backlog=4096;#\1listen $HOST:${PORT[nginx]} ssl http2 backlog=4096;\n\1ssl_certificate $CERT_DIR/cert.pem;\n\1ssl_certificate_key $CERT_DIR/key.pem;\n\1ssl_protocols $protocols;#" \
    "$SHARED/nginx-peer.conf.tmpl" > "$1/nginx.conf"
  grep -q "listen $HOST:${PORT[nginx]} ssl http2" "$1/nginx.conf" \
    || die "$SHARED/nginx-peer.conf.tmpl no longer has 'listen 127.0.0.1:18081 backlog=4096;' to replace"
}

# http-reuse always instead of safe: with safe, the first request of a client connection never
# takes an idle upstream connection, so in close mode (one request per client connection)
# HAProxy would open an upstream connection per request, where nginx reuses its pool.
render_haproxy() {  # dir
  sed -e 's#@LIMIT@#1000000000#g' \
    -e "s#^\( *\)bind 127.0.0.1:18082\$#\1bind $HOST:${PORT[haproxy]} ssl crt $CERT_DIR/cert+key.pem ssl-min-ver TLSv$TLS_VERSION alpn h2,http/1.1#" \
    -e 's#^\( *\)http-reuse safe$#\1http-reuse always#' \
    "$SHARED/haproxy.cfg.tmpl" > "$1/haproxy.cfg"
  if ! grep -q "bind $HOST:${PORT[haproxy]} ssl" "$1/haproxy.cfg" || ! grep -q 'http-reuse always' "$1/haproxy.cfg"; then
    die "$SHARED/haproxy.cfg.tmpl no longer has 'bind 127.0.0.1:18082' and 'http-reuse safe' to replace"
  fi
  haproxy -c -q -f "$1/haproxy.cfg" > "$1/check.log" 2>&1 \
    || { cat "$1/check.log" >&2; die "haproxy configuration check failed ($1/haproxy.cfg)"; }
}

render_ratewall() {  # next to the certificate: its paths are relative to the config file
  sed -e "s#^\( *\)min_version: .*#\1min_version: \"$TLS_VERSION\"#" \
    "$ROOT/scripts/bench/tls.yaml" > "$CERT_DIR/ratewall.yaml"
  "$RATEWALL_BIN" check "$CERT_DIR/ratewall.yaml" > "$RUN_DIR/ratewall-check.log" 2>&1 \
    || { cat "$RUN_DIR/ratewall-check.log" >&2; die "ratewall check failed on scripts/bench/tls.yaml"; }
}

start_upstream() {
  local d="$RUN_DIR/upstream"
  mkdir -p "$d/tmp"
  ensure_port_free "$PORT_UPSTREAM"
  spawn "$d/stdout.log" nginx -p "$d/" -e "$d/error.log" -c "$SHARED/nginx-upstream.conf"
  UPSTREAM_PID=$STARTED_PID
  wait_ready http "$PORT_UPSTREAM" "$UPSTREAM_PID" upstream "$d/error.log"
}

start_system() {  # sys: sets SYS_PID
  local sys=$1 d="$RUN_DIR/$1" logf
  mkdir -p "$d/tmp"
  ensure_port_free "${PORT[$sys]}"
  case $sys in
    nginx)
      logf="$d/error.log"
      spawn "$d/stdout.log" nginx -p "$d/" -e "$d/error.log" -c "$d/nginx.conf" ;;
    haproxy)
      logf="$d/stdout.log"
      spawn "$logf" haproxy -db -f "$d/haproxy.cfg" ;;
    ratewall)
      logf="$d/stdout.log"
      spawn "$logf" "$RATEWALL_BIN" --config "$CERT_DIR/ratewall.yaml" ;;
  esac
  SYS_PID=$STARTED_PID
  wait_ready https "${PORT[$sys]}" "$SYS_PID" "$sys" "$logf"
}

stop_system() {  # sys
  stop_group "$SYS_PID"
  SYS_PID=""
  wait_port_free "${PORT[$1]}"
}

# ---------------------------------------------------------------- TLS checks
# One request with "Connection: close" through openssl s_client, whose input stays open for
# 3 s: it ends sooner only when the proxy closes the connection. Prints "elapsed_ms exit_code".
s_client_request() {  # port outfile [s_client options...]
  local port=$1 out=$2 t0 rc=0
  shift 2
  t0=$(date +%s%N)
  OPENSSL_CONF=$CERT_DIR/client.cnf timeout 5 openssl s_client -connect "$HOST:$port" \
    -servername localhost -ign_eof "$@" > "$out" 2>&1 \
    < <(printf 'GET / HTTP/1.1\r\nHost: localhost\r\nX-API-Key: readiness-probe\r\nConnection: close\r\n\r\n'; sleep 3) \
    || rc=$?
  echo "$((($(date +%s%N) - t0) / 1000000)) $rc"
}

check_tls() {  # sys: the proxy is running; appends a row to CHECKS_TSV, dies on a failed check
  local sys=$1 d="$RUN_DIR/$1" ms rc protocol cipher group status header closes resumes h2
  read -r ms rc < <(s_client_request "${PORT[$sys]}" "$d/s_client-1.txt" -sess_out "$d/session.pem")
  read -r protocol cipher < <(awk '/^(New|Reused), TLSv/ { sub(/,$/, "", $2); print $2, $5; exit }' "$d/s_client-1.txt")
  group=$(awk -F'[:,] *' '/^Server Temp Key:/ { print $2; exit }' "$d/s_client-1.txt")
  status=$(awk '/^HTTP\/1\.[01] / { print $2; exit }' "$d/s_client-1.txt")
  header=no
  grep -aqiE '^connection: *close' "$d/s_client-1.txt" && header=yes
  closes=no
  [[ $rc == 0 && $ms -lt 2500 ]] && closes=yes
  h2=$(OPENSSL_CONF=$CERT_DIR/client.cnf curl -s -k --http2 -o /dev/null -m 2 -w '%{http_version}' \
    -H 'X-API-Key: readiness-probe' "https://$HOST:${PORT[$sys]}/" 2> /dev/null || true)
  [[ $h2 == 2 ]] && h2=yes || h2=no
  resumes=no
  if [[ -s $d/session.pem ]]; then
    s_client_request "${PORT[$sys]}" "$d/s_client-2.txt" -sess_in "$d/session.pem" > /dev/null
    grep -aq '^Reused, TLSv' "$d/s_client-2.txt" && resumes=yes
  fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$sys" "${protocol:-none}" "${cipher:-none}" "${group:-?}" \
    "${status:-none}" "$header" "$closes" "$resumes" "$h2" >> "$CHECKS_TSV"
  log "$sys: ${protocol:-no TLS} ${cipher:-} ${group:-}, status ${status:-none}, 'Connection: close' answered: $header, closed after the response: $closes (${ms} ms), session resumed: $resumes, HTTP/2 by ALPN: $h2"
  [[ $protocol == "TLSv$TLS_VERSION" ]] || die "$sys did not negotiate TLSv$TLS_VERSION with openssl s_client (see $d/s_client-1.txt)"
  [[ $status == 200 ]] || die "$sys did not answer 200 over TLS to openssl s_client (see $d/s_client-1.txt)"
  if [[ " ${MODE_LIST[*]} " == *" close "* ]]; then
    [[ $header == yes ]] || die "$sys does not answer 'Connection: close' to a request that has it (see $d/s_client-1.txt)"
    [[ $closes == yes ]] || die "$sys keeps the connection open after answering 'Connection: close' (see $d/s_client-1.txt)"
  fi
  if [[ " ${MODE_LIST[*]} " == *" h2 "* ]]; then
    [[ $h2 == yes ]] || die "$sys does not answer curl --http2 over HTTP/2 (ALPN h2)"
  fi
}

# ---------------------------------------------------------------- measurement
cpu_snapshot() {  # "busy total" jiffies of cpuN
  awk -v c="cpu$1" '$1 == c { t = 0; for (i = 2; i <= 9; i++) t += $i; print t - $5 - $6, t }' /proc/stat
}

group_ticks() {  # utime+stime (clock ticks) of every process of the given sessions
  local sid p t=0
  for sid in "$@"; do
    for p in $(ps -o pid= -s "$sid" 2> /dev/null); do
      t=$((t + $(awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$p/stat" 2> /dev/null || echo 0)))
    done
  done
  echo "$t"
}

passive_opens() {  # TCP connections accepted on this host so far
  awk '/^Tcp:/ { if (!c) { for (i = 1; i <= NF; i++) if ($i == "PassiveOpens") c = i } else { print $c; exit } }' /proc/net/snmp
}

run_wrk() {  # mode duration port outfile [wrk options...]
  local mode=$1 dur=$2 port=$3 out=$4 close=()
  shift 4
  [[ $mode == close ]] && close=(-H "Connection: close")
  taskset -c "$LOADGEN_CPU" timeout -k 1 $((dur + 3)) env OPENSSL_CONF="$CERT_DIR/client.cnf" \
    wrk -t"$THREADS" -c"$CONNS" -d"${dur}s" "${close[@]}" "$@" -s "$LUA" "https://$HOST:$port/" > "$out" 2>&1 &
  WRK_PID=$!
  local rc=0
  wait "$WRK_PID" || rc=$?
  WRK_PID=""
  return "$rc"
}

# h2 mode: h2load for DURATION s, then the RESULT line wrk-keys.lua prints, made from h2load's
# per-request log (status and microseconds to the end of the response; -1 for a failed stream).
run_h2load() {  # duration port outfile
  local dur=$1 port=$2 out=$3 rc=0
  taskset -c "$LOADGEN_CPU" timeout -k 1 $((dur + 5)) env OPENSSL_CONF="$CERT_DIR/client.cnf" \
    h2load -t1 -c"$H2_CONNS" -m"$H2_STREAMS" -D "$dur" -H 'X-API-Key: h2-bench-key' \
    --log-file="$out.log" "https://$HOST:$port/" > "$out" 2>&1 &
  WRK_PID=$!
  wait "$WRK_PID" || rc=$?
  WRK_PID=""
  ((rc == 0)) || return "$rc"
  local secs
  # "finished in 10.00s," (or "123.45ms," for a run that ended early)
  secs=$(awk '/^finished in / { v = $3; sub(/,$/, "", v)
    if (v ~ /ms$/) { sub(/ms$/, "", v); v /= 1000 } else { sub(/s$/, "", v) }
    print v; exit }' "$out")
  [[ -n $secs ]] || return 1
  sort -t$'\t' -k3,3n "$out.log" | awk -F'\t' -v secs="$secs" '
    $2 == -1 { err++; next }  # a failed stream: an error, not a request (as wrk counts them)
    { n++; d[n] = $3; if ($2 == 200) ok++; else if ($2 == 429) lim++; else other++ }
    function pct(p,   i) { i = int(p * n / 100 + 0.999999); if (i < 1) i = 1; return d[i] }
    END {
      if (!n) exit 1
      printf "RESULT requests=%d duration_us=%d rps=%.1f p50_us=%d p90_us=%d p99_us=%d max_us=%d n200=%d n429=%d nother=%d err_connect=0 err_read=%d err_write=0 err_timeout=0\n",
        n, secs * 1e6, n / secs, pct(50), pct(90), pct(99), d[n], ok, lim, other, err
    }' >> "$out"
}

CLK_TCK=$(getconf CLK_TCK)

measure() {  # sys mode round
  local sys=$1 mode=$2 round=$3 d="$RUN_DIR/$1" tag="$1/$2"
  start_system "$sys"
  local run=(run_wrk "$mode")
  [[ $mode == h2 ]] && run=(run_h2load)
  if ((WARMUP > 0)); then
    "${run[@]}" "$WARMUP" "${PORT[$sys]}" "$d/warmup-$mode-r$round.txt" \
      || die "warm-up load failed for $tag (see $d/warmup-$mode-r$round.txt)"
  fi
  local out="$d/wrk-$mode-r$round.txt" lg0 sut0 tk0 op0 lg1 sut1 tk1 op1
  lg0=$(cpu_snapshot "$LOADGEN_CPU"); sut0=$(cpu_snapshot "$SUT_CPU")
  tk0=$(group_ticks "$UPSTREAM_PID" "$SYS_PID"); op0=$(passive_opens)
  local latency=(--latency)
  [[ $mode == h2 ]] && latency=()
  "${run[@]}" "$DURATION" "${PORT[$sys]}" "$out" "${latency[@]}" || die "load failed for $tag (see $out)"
  lg1=$(cpu_snapshot "$LOADGEN_CPU"); sut1=$(cpu_snapshot "$SUT_CPU")
  tk1=$(group_ticks "$UPSTREAM_PID" "$SYS_PID"); op1=$(passive_opens)
  stop_system "$sys"
  local res
  res=$(grep '^RESULT ' "$out" | tail -1) || die "no RESULT line in $out"
  # shellcheck disable=SC2034  # set by eval below
  local requests duration_us rps p50_us p90_us p99_us max_us n200 n429 nother err_connect err_read err_write err_timeout
  eval "$(echo "${res#RESULT }" | tr ' ' '\n' | grep -E '^[a-z0-9_]+=[0-9.]+$')"
  local lgb sutb procs_us core_us conns errs=$((err_connect + err_read + err_write + err_timeout))
  lgb=$(awk -v a="$lg0" -v b="$lg1" 'BEGIN { split(a, x, " "); split(b, y, " "); printf "%.1f", 100 * (y[1] - x[1]) / (y[2] - x[2]) }')
  sutb=$(awk -v a="$sut0" -v b="$sut1" 'BEGIN { split(a, x, " "); split(b, y, " "); printf "%.1f", 100 * (y[1] - x[1]) / (y[2] - x[2]) }')
  procs_us=$(awk -v t=$((tk1 - tk0)) -v hz="$CLK_TCK" -v n="$requests" 'BEGIN { printf "%.2f", (n > 0 ? t * 1e6 / hz / n : 0) }')
  core_us=$(awk -v a="$sut0" -v b="$sut1" -v hz="$CLK_TCK" -v n="$requests" 'BEGIN { split(a, x, " "); split(b, y, " "); printf "%.2f", (n > 0 ? (y[1] - x[1]) * 1e6 / hz / n : 0) }')
  conns=$(awk -v o=$((op1 - op0)) -v n="$requests" 'BEGIN { printf "%.3f", (n > 0 ? o / n : 0) }')
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$sys" "$mode" "$round" "$rps" \
    "$p50_us" "$p99_us" "$n200" "$((n429 + nother))" "$errs" "$lgb" "$sutb" "$procs_us" "$core_us" \
    "$requests" "$conns" >> "$RESULTS_TSV"
  log "$(printf 'round %d/%d %-18s %9.0f req/s  p50 %6.2f ms  p99 %6.2f ms  200=%-8s non-200=%s err=%s  conns/req %s  cpu loadgen %s%% sut %s%%  sut procs %s us/req, sut core %s us/req' \
    "$round" "$ROUNDS" "$tag" "$rps" "$(awk -v v="$p50_us" 'BEGIN { print v / 1000 }')" \
    "$(awk -v v="$p99_us" 'BEGIN { print v / 1000 }')" "$n200" "$((n429 + nother))" "$errs" "$conns" \
    "$lgb" "$sutb" "$procs_us" "$core_us")"
  if [[ $mode == close ]] && awk -v c="$conns" 'BEGIN { exit !(c < 0.9) }'; then
    log "WARNING: $tag: $conns new connections per request: wrk did not reconnect for every request"
  fi
}

all_ticks() {  # "pid name ticks" of every process (for the note on CPU used by others)
  local f
  for f in /proc/[0-9]*/stat; do
    awk '{ c = $0; sub(/^[0-9]+ \(/, "", c); sub(/\) .*$/, "", c); r = $0; sub(/^.*\) /, "", r); split(r, a, " "); print $1, c, a[12] + a[13] }' "$f" 2> /dev/null || true
  done
}

# ---------------------------------------------------------------- summary
summarize() {
  awk -F'\t' -v rounds="$ROUNDS" '
    function median(arr, n,    i, j, t, b) {
      for (i = 1; i <= n; i++) b[i] = arr[i]
      for (i = 2; i <= n; i++) { t = b[i]; j = i - 1; while (j >= 1 && b[j] > t) { b[j + 1] = b[j]; j-- } b[j + 1] = t }
      return (n % 2) ? b[(n + 1) / 2] : (b[n / 2] + b[n / 2 + 1]) / 2
    }
    function minv(arr, n,   i, m) { m = arr[1]; for (i = 2; i <= n; i++) if (arr[i] < m) m = arr[i]; return m }
    function maxv(arr, n,   i, m) { m = arr[1]; for (i = 2; i <= n; i++) if (arr[i] > m) m = arr[i]; return m }
    BEGIN { label["nginx"] = "nginx"; label["haproxy"] = "HAProxy"; label["ratewall"] = "ratewall" }
    {
      k = $1 "/" $2
      if (!(k in seen)) { seen[k] = 1; order[++nk] = k; sysof[k] = $1; modeof[k] = $2 }
      if (!($2 in mseen)) { mseen[$2] = 1; morder[++nm] = $2 }
      n[k]++; i = n[k]
      rps[k, i] = $4; p50[k, i] = $5; p99[k, i] = $6; c200[k, i] = $7; bad[k, i] = $8 + $9
      lg[k, i] = $10; sut[k, i] = $11; procs[k, i] = $12; core[k, i] = $13; conns[k, i] = $15
      rps_r[k, $3] = $4; core_r[k, $3] = $13; procs_r[k, $3] = $12
    }
    # median over rounds of (value of a / value of b) in the same round and mode
    function ratio(va, vb, a, b,    r, m, x) {
      m = 0
      for (r = 1; r <= rounds; r++) if (((a, r) in va) && ((b, r) in vb) && vb[b, r] > 0) x[++m] = va[a, r] / vb[b, r]
      return m ? sprintf("%.2fx", median(x, m)) : "-"
    }
    END {
      print "| system | mode | req/s (median) | req/s min-max (spread) | p50 ms | p99 ms | 200 / run | non-200 + errors | new conns / req | loadgen CPU % | SUT CPU % | saturated | SUT procs CPU us/req | SUT core us/req |"
      print "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|"
      for (o = 1; o <= nk; o++) {
        k = order[o]; m = n[k]
        for (i = 1; i <= m; i++) { a1[i] = rps[k, i]; a2[i] = p50[k, i]; a3[i] = p99[k, i]; a4[i] = c200[k, i]; a5[i] = bad[k, i]; a6[i] = conns[k, i]; a7[i] = lg[k, i]; a8[i] = sut[k, i]; a9[i] = procs[k, i]; a10[i] = core[k, i] }
        med = median(a1, m); lo = minv(a1, m); hi = maxv(a1, m)
        lgm = median(a7, m); sutm = median(a8, m)
        flag = (sutm >= 95) ? ((lgm >= 95) ? "both" : "SUT") : ((lgm >= 95) ? "loadgen" : "neither")
        printf "| %s | %s | %.0f | %.0f-%.0f (%.0f%%) | %.2f | %.2f | %.0f | %.0f | %.3f | %.0f | %.0f | %s | %.2f | %.2f |\n", \
          label[sysof[k]], modeof[k], med, lo, hi, (med > 0 ? 100 * (hi - lo) / med : 0), median(a2, m) / 1000, median(a3, m) / 1000, \
          median(a4, m), median(a5, m), median(a6, m), lgm, sutm, flag, median(a9, m), median(a10, m)
      }
      print ""
      print "Ratios (median over rounds of the ratio within a round; req/s: higher is better, CPU per request: lower is better):"
      print ""
      print "| ratio | mode | req/s | SUT core us/req | SUT procs CPU us/req |"
      print "|---|---|---:|---:|---:|"
      np = split("haproxy/nginx ratewall/nginx ratewall/haproxy", pairs, " ")
      for (mi = 1; mi <= nm; mi++) for (p = 1; p <= np; p++) {
        split(pairs[p], ab, "/"); a = ab[1] "/" morder[mi]; b = ab[2] "/" morder[mi]
        if (!(a in seen) || !(b in seen)) continue
        printf "| %s ÷ %s | %s | %s | %s | %s |\n", label[ab[1]], label[ab[2]], morder[mi], \
          ratio(rps_r, rps_r, a, b), ratio(core_r, core_r, a, b), ratio(procs_r, procs_r, a, b)
      }
      print ""
      printf "Per-run req/s (rounds in run order):\n\n| system/mode |"
      for (r = 1; r <= rounds; r++) printf " round %d |", r
      printf "\n|---|"; for (r = 1; r <= rounds; r++) printf "---:|"; printf "\n"
      for (o = 1; o <= nk; o++) {
        k = order[o]; printf "| %s |", k
        for (r = 1; r <= rounds; r++) printf " %s |", ((k, r) in rps_r) ? sprintf("%.0f", rps_r[k, r]) : "-"
        printf "\n"
      }
    }' "$RESULTS_TSV"
}

checks_table() {
  echo "| system | protocol | cipher | key exchange | status | answers 'Connection: close' | closes after it | resumes a session | HTTP/2 by ALPN |"
  echo "|---|---|---|---|---:|---|---|---|---|"
  awk -F'\t' 'BEGIN { label["nginx"] = "nginx"; label["haproxy"] = "HAProxy"; label["ratewall"] = "ratewall" }
    { printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", label[$1], $2, $3, $4, $5, $6, $7, $8, $9 }' "$CHECKS_TSV"
}

# ---------------------------------------------------------------- main
if [[ -e $RUN_DIR && ! -e $RUN_DIR/$MARKER && -n $(ls -A "$RUN_DIR" 2> /dev/null) ]]; then
  die "RUN_DIR $RUN_DIR exists and was not made by this script (no $MARKER); refusing to clear it"
fi
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM
mkdir -p "$RUN_DIR"
find "$RUN_DIR" -mindepth 1 -maxdepth 1 ! -name "$MARKER" -exec rm -rf {} +
touch "$RUN_DIR/$MARKER"
: > "$CHECKS_TSV"

make_certificate
for s in "${SYSTEM_LIST[@]}"; do
  mkdir -p "$RUN_DIR/$s"
  case $s in
    nginx) render_nginx "$RUN_DIR/nginx" ;;
    haproxy) render_haproxy "$RUN_DIR/haproxy" ;;
    ratewall) render_ratewall ;;
  esac
done

log "run dir: $RUN_DIR; pinning: wrk -> cpu$LOADGEN_CPU, upstream+proxy -> cpu$SUT_CPU; TLSv$TLS_VERSION, EC P-256 certificate"
start_upstream
log "upstream nginx pid $UPSTREAM_PID on $HOST:$PORT_UPSTREAM"

# Each proxy once, before any load: TLS 200, version, Connection: close honoured, resumption.
for s in "${SYSTEM_LIST[@]}"; do
  start_system "$s"
  check_tls "$s"
  stop_system "$s"
done
if ((SMOKE)); then
  checks_table
  exit 0
fi

CONFIGS=()
for m in "${MODE_LIST[@]}"; do for s in "${SYSTEM_LIST[@]}"; do CONFIGS+=("$s $m"); done; done
{
  echo "# TLS benchmark $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo
  echo "- host: $NCPU CPUs, $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo), kernel $(uname -r)"
  echo "- $(nginx -v 2>&1); $(haproxy -v 2> /dev/null | head -1 | cut -d' ' -f1-3); $( (wrk -v 2>&1 || true) | head -1 | cut -d' ' -f1-2); $(openssl version | cut -d' ' -f1-2)$([[ -n $RATEWALL_BIN ]] && echo "; $("$RATEWALL_BIN" --version 2>&1 | head -1)")"
  echo "- TLSv$TLS_VERSION, one self-signed EC P-256 certificate for every proxy, HTTP/1.1 to a plain nginx upstream (keep-alive); each proxy: one worker thread, its default session resumption; HAProxy with http-reuse always (peers.sh: safe)"
  echo "- load: wrk -t$THREADS -c$CONNS -d${DURATION}s --latency -s tls-keys.lua (wrk-keys.lua, WRK_KEYS=$WRK_KEYS, order=$WRK_KEY_ORDER), close mode adds -H 'Connection: close'; h2 mode: h2load -t1 -c$H2_CONNS -m$H2_STREAMS -D ${DURATION} -H 'X-API-Key: h2-bench-key' (one key), latencies from its --log-file; warm-up ${WARMUP}s before each run, $ROUNDS interleaved rounds"
  echo "- pinning: wrk on cpu$LOADGEN_CPU; upstream + proxy on cpu$SUT_CPU"
  echo "- order of one round: $(printf '%s, ' "${CONFIGS[@]}" | sed 's/ /\//g; s/,\//, /g; s/, $//')"
  echo
  echo "TLS checks (openssl s_client, before any load):"
  echo
  checks_table
} > "$RUN_DIR/header.md"

all_ticks > "$RUN_DIR/ticks-start.txt"
T0=$(date +%s)
for ((round = 1; round <= ROUNDS; round++)); do
  for cfg in "${CONFIGS[@]}"; do
    read -r s m <<< "$cfg"
    measure "$s" "$m" "$round"
  done
done
T1=$(date +%s)
all_ticks > "$RUN_DIR/ticks-end.txt"

# CPU used meanwhile by processes this script did not start (our proxies are gone by now).
FOREIGN=$(awk -v self=$$ -v up="$UPSTREAM_PID" -v hz="$CLK_TCK" '
  NR == FNR { s[$1] = $NF; next }
  { if ($1 == self || $1 == up) next
    d = $NF - (($1 in s) ? s[$1] : 0); if (d <= 0) next
    name = $0; sub(/^[0-9]+ /, "", name); sub(/ [0-9]+$/, "", name)
    if (name ~ /^(wrk|nginx|haproxy|ratewall|timeout|taskset|curl|openssl|ss|awk|ps|sed|grep|env|date|sleep|find|tr|bash|cat)$/) next
    printf "%s(%s) %.1fs\n", name, $1, d / hz }' "$RUN_DIR/ticks-start.txt" "$RUN_DIR/ticks-end.txt" \
  | sort -k2 -t' ' -rn | head -5 | tr '\n' ';' || true)

{
  cat "$RUN_DIR/header.md"
  echo
  echo "- wall time of the measurement loop: $((T1 - T0)) s; CPU used meanwhile by processes not started by this script (top 5, approx.): ${FOREIGN:-none}"
  echo
  summarize
  echo
  echo "Notes: p50/p99 are wrk's closed-loop latencies, h2load's in h2 mode (medians over rounds). '200 / run' = median count per ${DURATION}s run."
  echo "'new conns / req' = TCP connections accepted on the host (/proc/net/snmp PassiveOpens) per completed request: about 0 in keepalive mode, about 1 in close mode (more if a proxy opens upstream connections per request)."
  echo "'SUT procs CPU us/req' = user+sys CPU of the upstream + proxy processes per completed request (/proc/<pid>/stat, 10 ms ticks; excludes softirq)."
  echo "'SUT core us/req' = all busy time of the SUT core (incl. kernel softirq network work, and anything else scheduled there) per completed request."
  echo "'saturated' = which core was >= 95% busy (median): SUT = proxy+upstream core (wanted), loadgen = wrk core (the result is a wrk ceiling: compare CPU per request), both = both cores (compare CPU per request too), neither = latency/wake-up bound."
  echo "Raw data: $RESULTS_TSV (system mode round rps p50_us p99_us n200 non200 errors loadgen% sut% sut_procs_us_per_req sut_core_us_per_req requests new_conns_per_req); wrk outputs under $RUN_DIR/<system>/."
} > "$RESULTS_MD"
cat "$RESULTS_MD"
