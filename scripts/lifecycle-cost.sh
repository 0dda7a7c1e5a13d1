#!/bin/bash
# What a sampled cooperative recording costs at saturation, part by part (issue 28).
#
# Paired runs of fixture-server-cooperative at saturation (churn, 16 sessions in
# flight), each round: the build switched off, then switched on by
# `attach --sample 512KiB` whole, then with parts of the recording left out
# (LEAKSCOPE_COST_SKIP, inproc/src/recorder/cost.rs: polls, blocks recorded
# whole and their frees, session facts, the buffer and all after it). What a part
# costs is the throughput it gives back when left out. Prints sessions/s and
# the CPU per session of the server (user + system) and of the probe for each,
# each ratio against the same round's switched-off run and its unprobed
# server's (fixture-server: no leakscope in it at all), then the medians.
#
# The server is built apart (feature `cost-breakdown`, in target/cost-breakdown):
# no production build can leave anything out. Run from the repository after
# `cargo build --release --workspace --bins` (or a `cargo xtask bench`).
# ROUNDS (default 5), SECONDS_EACH (default 6), CALLS (tools/call a session, default 1:
# a session mostly being born, as the bench's saturation rounds; more is a session doing work).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/scripts/side-by-side.sh"
work=$root/target/lifecycle-cost
scratch=$work
mkdir -p "$work"
rounds=${ROUNDS:-5}
seconds=${SECONDS_EACH:-6}
calls=${CALLS:-1}
build_cost_breakdown

run() { # run BINARY SKIP ("off": not switched on) -> "sessions/s server_us probe_us"
  local skip=$2 probe=""
  LEAKSCOPE_COST_SKIP=$skip start_server "$1" --composition leaky --keep-alive 5s
  [ "$skip" != off ] && attach_sampled "$bin/leakscope-probe"
  local s0 p0=0 s1 p1=0
  s0=$(ticks "$server"); [ -n "${probe:-}" ] && p0=$(ticks "$probe")
  saturate "$seconds" "$calls" >"$work/churn.json"
  s1=$(ticks "$server"); [ -n "${probe:-}" ] && p1=$(ticks "$probe")
  stop
  python3 - "$work/churn.json" "$((s1 - s0))" "$((p1 - p0))" <<'PY'
import json, os, sys
churn = json.load(open(sys.argv[1]))
tick_us = 1e6 / os.sysconf("SC_CLK_TCK")
n = max(churn["created"], 1)
print(f'{churn["created"] / churn["elapsed_s"]:.0f} {int(sys.argv[2]) * tick_us / n:.1f} {int(sys.argv[3]) * tick_us / n:.1f}')
PY
}

# label|LEAKSCOPE_COST_SKIP
configs=(
  "whole recording|"
  "no polls|polls"
  "no whole blocks or facts|whole,facts"
  "nothing kept (sampling only)|polls,whole,facts,buffer"
)
results=$work/results.txt
: >"$results"
# A first run is discarded: the first server after a build ran slower (its
# round's ratios all read over 1.0x).
run "$breakdown" off >/dev/null
for round in $(seq "$rounds"); do
  read -r unprobed unprobed_server _ < <(run "$bin/fixture-server" off)
  read -r off off_server _ < <(run "$breakdown" off)
  off_ratio=$(python3 -c "print(f'{$off / $unprobed:.2f}')")
  echo "switched off|1.00|$off_ratio|$off_server|0" >>"$results"
  line="$round: unprobed $unprobed/s (server $unprobed_server us), off $off/s, ${off_ratio}x (server $off_server us)"
  for config in "${configs[@]}"; do
    label=${config%%|*}
    read -r on server probe_us < <(run "$breakdown" "${config#*|}")
    ratio=$(python3 -c "print(f'{$on / $off:.2f}')")
    vs_unprobed=$(python3 -c "print(f'{$on / $unprobed:.2f}')")
    echo "$label|$ratio|$vs_unprobed|$server|$probe_us" >>"$results"
    line="$line | $label ${ratio}x off, ${vs_unprobed}x unprobed (server $server + probe $probe_us us)"
  done
  echo "$line"
done
python3 - "$results" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    label, ratio, vs_unprobed, server, probe = line.strip().split("|")
    rows.setdefault(label, []).append((float(ratio), float(vs_unprobed), float(server), float(probe)))
print("medians (against the build switched off; against the unprobed server):")
for label, runs in rows.items():
    ratios = [r[0] for r in runs]
    unprobed = [r[1] for r in runs]
    print(f"  {label}: {statistics.median(ratios):.2f}x ({min(ratios):.2f}x-{max(ratios):.2f}x); "
          f"{statistics.median(unprobed):.2f}x ({min(unprobed):.2f}x-{max(unprobed):.2f}x), "
          f"server {statistics.median(r[2] for r in runs):.0f} us, probe {statistics.median(r[3] for r in runs):.1f} us a session")
PY
