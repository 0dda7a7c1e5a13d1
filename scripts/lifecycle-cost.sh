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
# each ratio against the same round's switched-off run, then the medians.
#
# The server is built apart (feature `cost-breakdown`, in target/cost-breakdown):
# no production build can leave anything out. Run from the repository after
# `cargo build --release -p leakscope-probe` (or a `cargo xtask bench`).
# ROUNDS (default 5), SECONDS_EACH (default 6), CALLS (tools/call a session, default 1:
# a session mostly being born, as the bench's saturation rounds; more is a session doing work).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
probe_bin=$root/target/release/leakscope-probe
work=$root/target/lifecycle-cost
mkdir -p "$work"
rounds=${ROUNDS:-5}
seconds=${SECONDS_EACH:-6}
calls=${CALLS:-1}
echo "building fixture-server-cooperative with the feature cost-breakdown (target/cost-breakdown)" >&2
CARGO_TARGET_DIR=$root/target/cost-breakdown cargo build --quiet --release \
  --manifest-path "$root/Cargo.toml" -p leakscope-fixtures \
  --bin fixture-server-cooperative --features cost-breakdown
server_bin=$root/target/cost-breakdown/release/fixture-server-cooperative
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

run() { # run SKIP ("off": not switched on) -> "sessions/s server_us probe_us"
  local skip=$1 probe=""
  LEAKSCOPE_COST_SKIP=$skip "$server_bin" --composition leaky --keep-alive 5s >"$work/server.out" 2>/dev/null &
  local server=$!
  for _ in $(seq 100); do grep -q http "$work/server.out" && break; sleep 0.1; done
  local url
  url=$(grep -o 'http[^ ]*' "$work/server.out" | head -1)
  if [ "$skip" != off ]; then
    "$probe_bin" attach --pid "$server" --out "$work/r.lsrec" --force --sample 512KiB >/dev/null 2>&1 &
    probe=$!
    sleep 2
  fi
  local s0 p0=0 s1 p1=0
  s0=$(ticks "$server"); [ -n "$probe" ] && p0=$(ticks "$probe")
  "$root/target/release/churn" --url "$url" --max-time "${seconds}s" --rate 1000000 --count 100000000 \
    --concurrency 16 --calls "$calls" 2>/dev/null | tail -1 >"$work/churn.json" || true
  s1=$(ticks "$server"); [ -n "$probe" ] && p1=$(ticks "$probe")
  if [ -n "$probe" ]; then kill -INT "$probe"; wait "$probe" || true; fi
  kill "$server"; wait "$server" 2>/dev/null || true
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
run off >/dev/null
for round in $(seq "$rounds"); do
  read -r off off_server _ < <(run off)
  line="$round: off $off/s (server $off_server us)"
  for config in "${configs[@]}"; do
    label=${config%%|*}
    read -r on server probe < <(run "${config#*|}")
    ratio=$(python3 -c "print(f'{$on / $off:.2f}')")
    echo "$label|$ratio|$server|$probe" >>"$results"
    line="$line | $label ${ratio}x (server $server + probe $probe us)"
  done
  echo "$line"
done
python3 - "$results" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    label, ratio, server, probe = line.strip().split("|")
    rows.setdefault(label, []).append((float(ratio), float(server), float(probe)))
print("medians:")
for label, runs in rows.items():
    ratios = [r[0] for r in runs]
    print(f"  {label}: {statistics.median(ratios):.2f}x ({min(ratios):.2f}x-{max(ratios):.2f}x), "
          f"server {statistics.median(r[1] for r in runs):.0f} us, probe {statistics.median(r[2] for r in runs):.1f} us a session")
PY
