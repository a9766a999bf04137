#!/usr/bin/env bash
# The README's quick-start demo as a newcomer runs it: its curl command, taken from the README,
# against the real binary on config/ratewall.yaml and the demo upstream, prints ten 200s and
# two 429s, as the README shows. Addresses are rewritten to free loopback ports.
set -euo pipefail
src=$1
build=$2
fail() { echo "FAIL: $*" >&2; exit 1; }
command -v curl >/dev/null || { echo "curl is not installed: skipped"; exit 0; }

readme_command=$(grep -m1 "^\$ curl -s -o /dev/null -w '%{http_code} ' 'http://127.0.0.1:8080/api/hello?\[1-12\]'; echo$" \
  "$src/README.md" | sed 's/^\$ //') || fail "the README's demo command is not where it was"
expected=$(grep -A1 -F -- "$readme_command" "$src/README.md" | sed -n 2p)
[[ $expected == "200 200 200 200 200 200 200 200 200 200 429 429" ]] ||
  fail "the README's demo shows: $expected"

work=$(mktemp -d /tmp/ratewall-quickstart-XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
# A free port for the demo upstream (it takes a fixed port): bound, read, released.
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$build/ratewall-demo-upstream" "$port" >"$work/upstream.log" 2>&1 &
pids+=($!)
sed -e 's/listen: 127.0.0.1:8080/listen: 127.0.0.1:0/' \
    -e "s/targets: \[127.0.0.1:8000\]/targets: [127.0.0.1:$port]/" \
    -e 's/^  listen: 127.0.0.1:9090/  listen: 127.0.0.1:0/' \
    "$src/config/ratewall.yaml" >"$work/ratewall.yaml"
"$build/ratewall" --config "$work/ratewall.yaml" >"$work/gw.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  grep -q "listening on" "$work/gw.log" && break
  sleep 0.1
done
gw=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\) .*/\1/p' "$work/gw.log")
[[ -n $gw ]] || fail "the gateway did not start: $(cat "$work/gw.log")"
for _ in $(seq 50); do
  curl -s -o /dev/null "http://127.0.0.1:$port/" && break
  sleep 0.1
done
got=$(bash -c "${readme_command//127.0.0.1:8080/127.0.0.1:$gw}")
[[ $got == "$expected " || $got == "$expected" ]] || fail "the demo printed: $got"
echo "quick start test: ok ($got)"
