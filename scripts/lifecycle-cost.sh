#!/bin/bash
# What a sampled cooperative recording costs at saturation, and how much of it
# is the lifecycle alone (issue 28): paired 8 s runs of fixture-server-cooperative
# at saturation (churn, 16 sessions in flight), the build switched off, then
# switched on by `attach --sample 512KiB`, then `--sample 1TiB` (no allocation
# sampled: what is still written is the sessions' and tasks' lifecycle and the
# blocks recorded whole). Prints sessions/s and CPU per session of the server
# and of the probe for each; the ratios are taken within a round.
#
# Run from the repository after `cargo build --release -p leakscope-probe
# -p leakscope-fixtures` (or a `cargo xtask bench`). ROUNDS (default 3),
# SECONDS_EACH (default 8).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/target/release
work=$root/target/lifecycle-cost
mkdir -p "$work"
rounds=${ROUNDS:-3}
seconds=${SECONDS_EACH:-8}
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

run() { # run MODE SAMPLE -> "sessions/s server_us probe_us"
  local mode=$1 sample=$2 probe=""
  "$bin/fixture-server-cooperative" --composition leaky --keep-alive 5s >"$work/server.out" 2>/dev/null &
  local server=$!
  for _ in $(seq 100); do grep -q http "$work/server.out" && break; sleep 0.1; done
  local url
  url=$(grep -o 'http[^ ]*' "$work/server.out" | head -1)
  if [ "$mode" = on ]; then
    "$bin/leakscope-probe" attach --pid "$server" --out "$work/r.lsrec" --force --sample "$sample" >/dev/null 2>&1 &
    probe=$!
    sleep 2
  fi
  local s0 p0=0 s1 p1=0
  s0=$(ticks "$server"); [ -n "$probe" ] && p0=$(ticks "$probe")
  "$bin/churn" --url "$url" --max-time "${seconds}s" --rate 1000000 --count 100000000 \
    --concurrency 16 2>/dev/null | tail -1 >"$work/churn.json" || true
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

echo "round: off | 512KiB (vs off) | 1TiB, lifecycle only (vs off); sessions/s, server and probe CPU us a session"
for round in $(seq "$rounds"); do
  read -r off off_server _ < <(run off -)
  read -r sampled sampled_server sampled_probe < <(run on 512KiB)
  read -r life life_server life_probe < <(run on 1TiB)
  python3 -c "
off, s, l = $off, $sampled, $life
print(f'$round: {off:.0f} ({$off_server} us) | {s:.0f} ({$sampled_server} + {$sampled_probe} us) {s / off:.2f}x | {l:.0f} ({$life_server} + {$life_probe} us) {l / off:.2f}x')"
done
