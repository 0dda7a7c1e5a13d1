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
bin=$root/target/release
before=$1
after=${2:-$bin/leakscope-probe}
rounds=${ROUNDS:-4}
seconds=${SECONDS_EACH:-10}
sessions=${SESSIONS:-60000}
session_rate=${RATE:-300}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# Starts a server; sets $server (its pid) and $url.
start_server() {
    coproc SERVER { exec "$bin/fixture-server" --composition leaky --keep-alive 2s; }
    server=$SERVER_PID
    read -r line <&"${SERVER[0]}"
    url=$(echo "$line" | grep -oE 'http://127\.0\.0\.1:[0-9]+/mcp')
}

# Attaches probe $1 sampled to $server; sets $probe (its pid).
attach() {
    "$1" attach --pid "$server" --out "$scratch/run.lsrec" --force --sample \
        >"$scratch/probe.out" 2>"$scratch/probe.err" &
    probe=$!
    for _ in $(seq 1 200); do
        grep -qs attached "$scratch/probe.out" && return
        sleep 0.1
    done
    echo "the probe did not attach: $(cat "$scratch/probe.err")" >&2
    exit 1
}

stop() {
    kill -INT "$probe"
    wait "$probe" || true
    kill "$server"
    wait "$server" 2>/dev/null || true
}

for round in $(seq 1 "$rounds"); do
    for name in before after; do
        start_server
        if [ $name = before ]; then attach "$before"; else attach "$after"; fi
        report=$("$bin/churn" --url "$url" --max-time "${seconds}s" --rate 1000000 \
            --count 100000000 --concurrency 16 2>/dev/null | tail -n 1 || true)
        stop
        rate=$(echo "$report" | python3 -c 'import json,sys; r=json.load(sys.stdin); print("%.0f" % (r["created"]/r["elapsed_s"]))')
        echo "round $round $name: $rate sessions/s"
    done
done
for name in before after; do
    start_server
    if [ $name = before ]; then attach "$before"; else attach "$after"; fi
    at_attach=$(awk '/RssAnon/ {print $2}' "/proc/$probe/status")
    "$bin/churn" --url "$url" --max-time 900s --rate "$session_rate" --count "$sessions" \
        --concurrency 16 >/dev/null 2>&1 || true
    sleep 3
    at_end=$(awk '/RssAnon/ {print $2}' "/proc/$probe/status")
    stop
    echo "$name: the probe's RssAnon $at_attach kB at attach, $at_end kB after $sessions abandoned sessions at $session_rate a second"
done
