#!/bin/bash
# Instructions a session, part by part, of a sampled cooperative recording
# (issue 28): the deterministic side of scripts/lifecycle-cost.sh.
#
# callgrind counts the instructions fixture-server (unprobed) and
# fixture-server-cooperative (built with the feature `cost-breakdown`, as
# lifecycle-cost.sh builds it) retire over SESSIONS (default 500) sessions of
# `churn` after 30 not counted: the build switched off, switched on by
# `attach --sample 512KiB` whole, and with parts of the recording left out
# (LEAKSCOPE_COST_SKIP, inproc/src/recorder/cost.rs). Each figure is printed
# against the unprobed server's. Instructions count work, not time (no cache
# miss, no lock wait): they tell each part's share without this machine's
# noise, the rounds of lifecycle-cost.sh what it costs in throughput.
# The dumps stay in target/lifecycle-instructions (NAME.out, for
# callgrind_annotate). Run from the repository after `cargo build --release --workspace --bins`.
# COMPOSITION (default leaky), CALLS (tools/call a session, default 1).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/scripts/side-by-side.sh"
work=$root/target/lifecycle-instructions
scratch=$work
mkdir -p "$work"
sessions=${SESSIONS:-500}
composition=${COMPOSITION:-leaky}
calls=${CALLS:-1}
command -v callgrind_control >/dev/null || { echo "callgrind_control not found (apt-get install valgrind)" >&2; exit 1; }
build_cost_breakdown

churn() { # churn URL COUNT
  "$bin/churn" --url "$1" --rate 1000000 --concurrency 4 --count "$2" --max-time 600s \
    --calls "$calls" 2>/dev/null | tail -1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["created"])'
}

run() { # run NAME BINARY SKIP ("off": not switched on) -> instructions a session
  local name=$1 binary=$2 skip=$3 probe=""
  rm -f "$work"/callgrind.out*
  LEAKSCOPE_COST_SKIP=$skip start_server valgrind --tool=callgrind \
    --callgrind-out-file="$work/callgrind.out" --dump-instr=no \
    "$binary" --composition "$composition" --keep-alive 5s
  [ "$skip" != off ] && attach_sampled "$bin/leakscope-probe"
  churn "$url" 30 >/dev/null
  callgrind_control -z "$server" >/dev/null 2>&1
  local created
  created=$(churn "$url" "$sessions")
  callgrind_control -d "$server" >/dev/null 2>&1
  stop
  local total
  total=$(grep -m1 -E '^(summary|totals):' "$work/callgrind.out.1" | awk '{print $2}')
  # Kept for callgrind_annotate: where a part's instructions go.
  cp "$work/callgrind.out.1" "$work/$name.out"
  echo $((total / created))
}

unprobed=$(run unprobed "$bin/fixture-server" off)
echo "unprobed (fixture-server): $((unprobed / 1000)).$((unprobed % 1000 / 100))k instructions a session"
# label|LEAKSCOPE_COST_SKIP
configs=(
  "switched off|off"
  "nothing kept (sampling only)|polls,whole,facts,buffer"
  "no polls|polls"
  "no whole blocks or facts|whole,facts"
  "whole recording|"
)
for config in "${configs[@]}"; do
  label=${config%%|*}
  skip=${config#*|}
  n=$(run "$(echo "${skip:-whole}" | tr , -)" "$breakdown" "$skip")
  python3 -c "print(f'$label: {$n / 1000:.1f}k, {$n / $unprobed:.3f}x unprobed ({($n - $unprobed) / 1000:+.1f}k)')"
done
