#!/usr/bin/env bash
# The Docker image without a Docker daemon: the Dockerfile runs what the README's "Docker"
# section documents (config/examples/docker.yaml as /etc/ratewall/ratewall.yaml, a non-root
# user, a health check, the state directory), that configuration is valid and puts the admin
# API on loopback without a token, and the image's HEALTHCHECK command succeeds against the
# real binary. Only 127.0.0.1 is used: the addresses of the image's file are rewritten to it.
set -euo pipefail
src=$1
binary=$2
dockerfile=$src/Dockerfile
readme=$src/README.md
fail() { echo "FAIL: $*" >&2; exit 1; }
has() { grep -qF -- "$2" "$1" || fail "$1 lacks: $2"; }

# What the Dockerfile runs.
has "$dockerfile" 'COPY config/examples/docker.yaml /etc/ratewall/ratewall.yaml'
has "$dockerfile" 'CMD ["--config", "/etc/ratewall/ratewall.yaml"]'
has "$dockerfile" 'ENTRYPOINT ["/usr/local/bin/ratewall"]'
has "$dockerfile" 'USER ratewall'
has "$dockerfile" 'ENV STATE_DIRECTORY=/var/lib/ratewall'
has "$dockerfile" 'EXPOSE 8080 9090'
# ... is what the README says it runs.
section=$(awk '/^### Docker$/,/^## What a request goes through/' "$readme")
[[ -n $section ]] || fail "the README has no Docker section"
for text in 'ratewall --config /etc/ratewall/ratewall.yaml' 'config/examples/docker.yaml' \
            '-p 8080:8080' '-p 9090:9090' 'RATEWALL_ADMIN_TOKEN' '/var/lib/ratewall' \
            '0.0.0.0:8080' '0.0.0.0:9090' 'listen_without_token: 127.0.0.1:9090' 'HEALTHCHECK' \
            'ratewall'; do
  grep -qF -- "$text" <<<"$section" || fail "the README's Docker section lacks: $text"
done
config=$src/config/examples/docker.yaml
has "$config" 'listen: 0.0.0.0:8080'
has "$config" 'listen: 0.0.0.0:9090'
has "$config" 'listen_without_token: 127.0.0.1:9090'
"$binary" check "$config" >/dev/null || fail "ratewall check $config"

# The image's file on this machine's loopback, without a token: the admin API must stay on
# loopback and say so, and the HEALTHCHECK command must pass against it.
work=$(mktemp -d /tmp/ratewall-docker-XXXXXX)
pid=
cleanup() {
  if [[ -n $pid ]]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
sed -e 's/listen: 0.0.0.0:8080/listen: 127.0.0.1:0/' \
    -e 's/listen_without_token: 127.0.0.1:9090/listen_without_token: 127.0.0.1:0/' \
    "$config" >"$work/ratewall.yaml"
env -u RATEWALL_ADMIN_TOKEN STATE_DIRECTORY="$work" "$binary" --config "$work/ratewall.yaml" \
  >"$work/out.log" 2>&1 &
pid=$!
for _ in $(seq 100); do
  grep -q "listening on" "$work/out.log" && break
  sleep 0.1
done
grep -q "listening on" "$work/out.log" || fail "the gateway did not start: $(cat "$work/out.log")"
grep -q "admin API on 127.0.0.1:0 only (loopback): RATEWALL_ADMIN_TOKEN is not set" \
  "$work/out.log" || fail "the log does not say the admin API stays on loopback"
port=$(sed -n 's/.*admin on 127\.0\.0\.1:\([0-9]*\),.*/\1/p' "$work/out.log")
[[ -n $port ]] || fail "no admin port in the log: $(cat "$work/out.log")"
probe=$(sed -n 's/^ *CMD \["bash", "-c", "\(.*\)"\]$/\1/p' "$dockerfile" | sed 's/\\\\/\\/g')
[[ $probe == *"/dev/tcp/127.0.0.1/9090"* ]] || fail "unexpected HEALTHCHECK command: $probe"
bash -c "${probe//9090/$port}" || fail "the HEALTHCHECK command fails against the gateway"
# And fails when nothing answers (the check is not one that always passes).
kill "$pid"; wait "$pid" 2>/dev/null || true; pid=
if bash -c "${probe//9090/$port}" 2>/dev/null; then
  fail "the HEALTHCHECK command passes with the gateway stopped"
fi
echo "docker test: ok"
