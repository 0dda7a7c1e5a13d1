#!/bin/bash
# Two builds of leakscope-probe recording sampled by eBPF, side by side on
# fixture-server --composition leaky (issue 28): the server's throughput at
# saturation under each, and the probe's own memory (RssAnon) after many
# abandoned sessions. Run as root.
#
# Usage: scripts/probes-side-by-side.sh BEFORE_PROBE [AFTER_PROBE]
#   BEFORE_PROBE: a leakscope-probe built from the commit to compare against
#   (`git worktree add /tmp/before COMMIT && cd /tmp/before &&
#   CARGO_TARGET_DIR=/tmp/before-target cargo build --release -p leakscope-probe`);
#   AFTER_PROBE: default this tree's target/release/leakscope-probe.
# ROUNDS (default 4) rounds of SECONDS_EACH (default 10) s of `churn
# --concurrency 16` at saturation, a fresh server per run, the order as given;
# then, for each probe, SESSIONS (default 60000) sessions at RATE (default 300)
# a second and the probe's RssAnon at attach and after. (`sessions/s` is what the server
# answered; the figures move with what else the machine runs.)
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/scripts/side-by-side.sh"
before=$1
after=${2:-$bin/leakscope-probe}
rounds=${ROUNDS:-4}
seconds=${SECONDS_EACH:-10}
sessions=${SESSIONS:-60000}
session_rate=${RATE:-300}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

for round in $(seq 1 "$rounds"); do
    for name in before after; do
        start_server "$bin/fixture-server" --composition leaky --keep-alive 2s
        if [ $name = before ]; then attach_sampled "$before"; else attach_sampled "$after"; fi
        report=$(saturate "$seconds" 1)
        stop
        rate=$(echo "$report" | python3 -c 'import json,sys; r=json.load(sys.stdin); print("%.0f" % (r["created"]/r["elapsed_s"]))')
        echo "round $round $name: $rate sessions/s"
    done
done
for name in before after; do
    start_server "$bin/fixture-server" --composition leaky --keep-alive 2s
    if [ $name = before ]; then attach_sampled "$before"; else attach_sampled "$after"; fi
    at_attach=$(awk '/RssAnon/ {print $2}' "/proc/$probe/status")
    "$bin/churn" --url "$url" --max-time 900s --rate "$session_rate" --count "$sessions" \
        --concurrency 16 >/dev/null 2>&1 || true
    sleep 3
    at_end=$(awk '/RssAnon/ {print $2}' "/proc/$probe/status")
    stop
    echo "$name: the probe's RssAnon $at_attach kB at attach, $at_end kB after $sessions abandoned sessions at $session_rate a second"
done
