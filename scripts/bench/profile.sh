#!/usr/bin/env bash
# Where a request's cost goes, for ratewall and the peers doing the same job (../shared/bench):
# user-space instructions per request (callgrind) and system calls per request (perf's syscall
# tracepoints; `strace -c` where perf cannot count), forwarded (allowed) and answered 429 (denied).
#   bash scripts/bench/profile.sh                  nginx, HAProxy and ratewall, allowed and denied
#   SYSTEMS="ratewall" MODES=denied bash scripts/bench/profile.sh
# Each system runs alone on core 1 beside the shared nginx upstream; wrk runs on core 0 with the
# peers' 1000 keys. Callgrind counts 5 s of wrk (10 connections) after a 3 s warm-up it does not
# count; the system calls are counted over 5 s of wrk (50 connections) after a 2 s warm-up.
# Results: a markdown table on stdout and in $RUN_DIR/profile.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
BENCH=${BENCH_DIR:-$ROOT/../shared/bench}
RUN_DIR=${RUN_DIR:-/tmp/ratewall-profile}
SYSTEMS=${SYSTEMS:-"nginx haproxy ratewall"}
MODES=${MODES:-"allowed denied"}
DURATION=${DURATION:-5}
[[ -f $BENCH/nginx-upstream.conf ]] || { echo "profile: $BENCH not found" >&2; exit 2; }

WITH_PEERS=1 WITH_PROFILE=1 bash scripts/setup.sh
BUILD_DIR=${BUILD_DIR:-build-release} BUILD_TYPE=Release bash scripts/build.sh ratewall
GATEWAY=$ROOT/${BUILD_DIR:-build-release}/ratewall

rm -rf "$RUN_DIR"
mkdir -p "$RUN_DIR"
pids=()
stop_all() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2> /dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2> /dev/null || true; done
}
trap stop_all EXIT

up=$RUN_DIR/upstream
mkdir -p "$up/tmp"
taskset -c 1 nginx -p "$up/" -e "$up/error.log" -c "$BENCH/nginx-upstream.conf" &
pids+=($!)

port_of() { case $1 in nginx) echo 18081 ;; haproxy) echo 18082 ;; ratewall) echo 18083 ;; esac; }

# The peers' configurations, rendered as peers.sh renders them; one process each (nginx without
# its master), so that the process measured is the one doing the work.
render() {  # system mode dir
  local sys=$1 mode=$2 d=$3
  case $sys in
    nginx)
      local rate="1000000r/s" burst=1000000
      [[ $mode == denied ]] && rate="1r/m" && burst=0
      sed -e "s#@RATE@#$rate#g" -e "s#@BURST@#$burst#g" -e "s# burst=0 # #" \
        -e "s#^master_process on;#master_process off;#" "$BENCH/nginx-peer.conf.tmpl" > "$d/nginx.conf"
      ;;
    haproxy)
      local limit=1000000000
      [[ $mode == denied ]] && limit=0
      sed -e "s#@LIMIT@#$limit#g" "$BENCH/haproxy.cfg.tmpl" > "$d/haproxy.cfg"
      ;;
  esac
}

command_of() {  # system dir mode
  case $1 in
    nginx) echo "nginx -p $2/ -e $2/error.log -c $2/nginx.conf" ;;
    haproxy) echo "haproxy -db -f $2/haproxy.cfg" ;;
    ratewall) echo "$GATEWAY --config $ROOT/scripts/bench/$3.yaml" ;;
  esac
}

source scripts/bench/lib.sh  # wait_ready

load() {  # port connections seconds output
  (cd "$BENCH" && WRK_KEYS=1000 taskset -c 0 timeout -k 1 $(($3 + 5)) \
    wrk -t1 -c"$2" -d"$3"s -s wrk-keys.lua "http://127.0.0.1:$1/" > "$4" 2>&1)
}

requests_of() { grep -oP 'requests=\K[0-9]+' "$1"; }

stop() {  # pid
  kill -TERM "$1" 2> /dev/null || true
  wait "$1" 2> /dev/null || true
}

perf_works() { perf stat -e raw_syscalls:sys_enter -o /dev/null -- true > /dev/null 2>&1; }

# System calls per request: "total recv send epoll_wait epoll_ctl" on stdout.
count_syscalls() {  # system mode dir
  local sys=$1 mode=$2 d=$3 port
  port=$(port_of "$sys")
  # shellcheck disable=SC2046
  setsid taskset -c 1 $(command_of "$sys" "$d" "$mode") > "$d/server.log" 2>&1 &
  local pid=$!
  wait_ready "$port"
  load "$port" 50 2 "$d/warmup.txt"
  local tracer
  if perf_works; then
    local ev=raw_syscalls:sys_enter
    for s in recvfrom recvmsg read sendmsg sendto writev write epoll_wait epoll_ctl; do
      ev=$ev,syscalls:sys_enter_$s
    done
    perf stat -x, -e "$ev" -p "$pid" -o "$d/syscalls.txt" &
  else
    strace -c -f -o "$d/syscalls.txt" -p "$pid" &
  fi
  tracer=$!
  load "$port" 50 "$DURATION" "$d/wrk-syscalls.txt"
  kill -INT "$tracer"
  wait "$tracer" || true
  stop "$pid"
  local n
  n=$(requests_of "$d/wrk-syscalls.txt")
  if perf_works; then
    awk -F, -v n="$n" '
      NF > 2 { split($3, e, ":"); name = e[2]; sub(/^sys_enter_?/, "", name); c[name] = $1 }
      END {
        printf "%.2f %.2f %.2f %.2f %.2f\n", c[""] / n, (c["recvfrom"] + c["recvmsg"] + c["read"]) / n,
          (c["sendmsg"] + c["sendto"] + c["writev"] + c["write"]) / n, c["epoll_wait"] / n, c["epoll_ctl"] / n
      }' "$d/syscalls.txt"
  else
    awk -v n="$n" '
      $NF ~ /^(recvfrom|recvmsg|read)$/ { r += $(NF - 2) } $NF ~ /^(sendmsg|sendto|writev|write)$/ { s += $(NF - 2) }
      $NF == "epoll_wait" { w = $(NF - 2) } $NF == "epoll_ctl" { c = $(NF - 2) } $NF == "total" { t = $(NF - 1) }
      END { printf "%.2f %.2f %.2f %.2f %.2f\n", t / n, r / n, s / n, w / n, c / n }' "$d/syscalls.txt"
  fi
}

# User-space instructions per request, the libraries and the kernel's entry stubs included.
count_instructions() {  # system mode dir
  local sys=$1 mode=$2 d=$3 port
  port=$(port_of "$sys")
  # shellcheck disable=SC2046
  setsid taskset -c 1 valgrind --tool=callgrind --instr-atstart=no \
    --callgrind-out-file="$d/callgrind.out" $(command_of "$sys" "$d" "$mode") > "$d/callgrind.log" 2>&1 &
  local pid=$!
  wait_ready "$port"
  load "$port" 10 3 "$d/warmup-callgrind.txt"
  callgrind_control -i on "$pid" > /dev/null 2>&1
  load "$port" 10 "$DURATION" "$d/wrk-callgrind.txt"
  callgrind_control -i off "$pid" > /dev/null 2>&1
  stop "$pid"
  local n total
  n=$(requests_of "$d/wrk-callgrind.txt")
  total=$(callgrind_annotate "$d/callgrind.out" 2> /dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1; exit }')
  echo $((total / n))
}

wait_ready 18080
{
  echo "| system | mode | instructions / request | system calls / request | recv | send | epoll_wait | epoll_ctl |"
  echo "|---|---|---:|---:|---:|---:|---:|---:|"
} > "$RUN_DIR/profile.md"
for mode in $MODES; do
  for sys in $SYSTEMS; do
    d=$RUN_DIR/$sys-$mode
    mkdir -p "$d/tmp"
    render "$sys" "$mode" "$d"
    read -r total recv send ewait ectl < <(count_syscalls "$sys" "$mode" "$d")
    instr=$(count_instructions "$sys" "$mode" "$d")
    echo "| $sys | $mode | $instr | $total | $recv | $send | $ewait | $ectl |" | tee -a "$RUN_DIR/profile.md" >&2
  done
done
cat "$RUN_DIR/profile.md"
