#!/usr/bin/env bash
# A short narrated tour of what ratewall's limits do, offline: `ratewall simulate` replays
# scripts/examples/trace.csv through config/examples/simulate.yaml on a simulated clock.
# Nothing listens and nothing is sent; the output is the same on every run.
#
#   bash scripts/demo.sh            # builds ratewall first when needed
#   RATEWALL=path/to/ratewall bash scripts/demo.sh
set -euo pipefail
cd "$(dirname "$0")/.."

RATEWALL=${RATEWALL:-build/ratewall}
CONFIG=config/examples/simulate.yaml
TRACE=scripts/examples/trace.csv

if [[ ! -x $RATEWALL ]] || ! "$RATEWALL" simulate --help >/dev/null 2>&1; then
  echo "Building ratewall first (scripts/build.sh ratewall)..."
  bash scripts/build.sh ratewall >/dev/null
  if ! "$RATEWALL" simulate --help >/dev/null 2>&1; then
    echo "$RATEWALL has no 'simulate' command; build it from this tree (scripts/build.sh)." >&2
    exit 1
  fi
fi

out=$("$RATEWALL" simulate --config "$CONFIG" --trace "$TRACE")
# The decisions are the first table (up to the first empty line); the summaries follow.
decisions=$(sed '/^$/q' <<<"$out" | sed '/^$/d')
header=$(head -n 1 <<<"$decisions")

say() {
  printf '\n\033[1m== %s\033[0m\n' "$1"
  shift
  for line in "$@"; do
    printf '   %s\n' "$line"
  done
  echo
}

# Prints the decisions between two times (seconds, inclusive) whose line matches a pattern.
show() {
  echo "$header"
  awk -v from="$1" -v to="$2" -v pattern="${3:-.}" \
    'NR > 1 && $1 + 0 >= from && $1 + 0 <= to && $0 ~ pattern' <<<"$decisions"
}

say "The setup ($CONFIG)" \
  "Route 'search' (GET /api/search): a token bucket of 5 requests, refilled at 2 per second." \
  "The premium plan gets a bucket of 20 refilled at 10 per second." \
  "Route 'default' (everything else): 10 requests per calendar minute." \
  "Clients are told apart by API key, else by IP. Keys and users appear only as keyed hashes."

say "1. Bursts" \
  "alice (free plan) sends 7 searches in the same instant. The bucket holds 5: five pass," \
  "remaining counts down to 0, and the next two get 429 with Retry-After: one token comes" \
  "back every 0.5 s."
show 0 0 'free'

say "2. Independent clients" \
  "At t=0.1 an anonymous client (203.0.113.7) searches too. alice's empty bucket is hers" \
  "alone: this client starts with a full bucket of its own. Its third request carries a" \
  "made-up API key; unknown keys are ignored (unknown_api_key: ip), so it cannot buy a" \
  "fresh quota - it is still counted as its IP."
show 0.1 0.1

say "3. Tiers" \
  "bob (premium) sends 12 searches at once. His plan's bucket holds 20: all pass, 8 left."
show 0.2 0.2

say "4. Refill" \
  "One second after her burst alice has earned 2 tokens back (2 per second): two searches" \
  "pass, the third is told to retry in 0.5 s. After 2.5 quiet seconds the bucket is full" \
  "again and a burst of 5 passes."
show 1 3.5 'free'

say "5. Another route, another kind of limit" \
  "The default route counts requests per calendar minute: 203.0.113.9 spends its 10" \
  "(a POST to /api/search is not the GET-only search route, so it counts here too), is" \
  "denied until the minute is over (retry 30 s at t=30), and may go again at t=60." \
  "A request whose cost (12, the last CSV column) exceeds what the window can ever hold" \
  "is refused for good: no Retry-After, since waiting would not help."
show 10 60

say "Summary per route and per subject" \
  "Every client was limited on its own, by the plan its key carries."
sed -n '/^per route/,$p' <<<"$out"

echo
echo "Try it on your own traffic: $RATEWALL simulate --config FILE --trace TRACE.csv [--json]"
echo "(CSV columns: time_s,method,path,api_key,user,ip[,cost]; see docs/operations.md)."
