#!/bin/bash
# Two builds of fixture-server-cooperative, each recording sampled, side by side
# at saturation (issue 28): what a change to the recorder's path costs in
# throughput, where instruction counts can mislead (a table that saved 2% of the
# instructions once cost 2-4% of the throughput: docs/plans/issue-28-recorder-cost.md).
#
# Usage: scripts/builds-side-by-side.sh BEFORE_BINARY
#   BEFORE_BINARY: a fixture-server-cooperative built from the commit to compare
#   against, e.g. `git worktree add /tmp/before COMMIT && cd /tmp/before &&
#   CARGO_TARGET_DIR=/tmp/before-target cargo build --release -p leakscope-fixtures
#   --bin fixture-server-cooperative`. "after" is this tree's target/release one
#   (`cargo build --release --workspace --bins` first).
# Each round runs, order reversed every other round: the unprobed fixture-server,
# this tree's build switched off, BEFORE and this tree's build each attached with
# `--sample 512KiB`, for SECONDS_EACH (default 6) of `churn --concurrency 16`,
# CALLS tool calls a session (default 1). Prints for each: HTTP requests/s, the
# server's CPU a request (µs, user + system), the probe's, and the ratio to the
# round's unprobed run. ROUNDS: default 4.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/scripts/side-by-side.sh"
before_bin=${1:?usage: scripts/builds-side-by-side.sh BEFORE_BINARY}
work=$root/target/side-by-side
scratch=$work
mkdir -p "$work"
rounds=${ROUNDS:-4}
seconds=${SECONDS_EACH:-6}
calls=${CALLS:-1}

# run TOOL: prints "requests/s server-µs-a-request probe-µs-a-request"
run() {
  local tool=$1 server_bin=$bin/fixture-server-cooperative probe=""
  [ "$tool" = unprobed ] && server_bin=$bin/fixture-server
  [ "$tool" = before ] && server_bin=$before_bin
  start_server "$server_bin" --composition leaky --keep-alive 5s
  if [ "$tool" = before ] || [ "$tool" = after ]; then
    attach_sampled "$bin/leakscope-probe"
  fi
  local s0 p0=0 s1 p1=0
  s0=$(ticks "$server")
  [ -n "${probe:-}" ] && p0=$(ticks "$probe")
  saturate "$seconds" "$calls" >"$work/churn.json"
  s1=$(ticks "$server")
  [ -n "${probe:-}" ] && p1=$(ticks "$probe")
  stop
  python3 - "$work/churn.json" "$((s1 - s0))" "$((p1 - p0))" <<'PY'
import json, os, sys
churn = json.load(open(sys.argv[1]))
tick_us = 1e6 / os.sysconf("SC_CLK_TCK")
requests = max(churn["requests"], 1)
print(f"{churn['requests'] / churn['elapsed_s']:.0f} "
      f"{int(sys.argv[2]) * tick_us / requests:.1f} {int(sys.argv[3]) * tick_us / requests:.2f}")
PY
}

run off >/dev/null # warm-up, discarded
for round in $(seq "$rounds"); do
  order="unprobed off before after"
  [ $((round % 2)) = 0 ] && order="after before off unprobed"
  declare -A got
  for tool in $order; do got[$tool]=$(run "$tool"); done
  unprobed=${got[unprobed]%% *}
  line="round $round: unprobed ${got[unprobed]}"
  for tool in off before after; do
    line="$line | $tool ${got[$tool]} $(python3 -c "print(f'{${got[$tool]%% *} / $unprobed:.3f}x')")"
  done
  echo "$line"
done
