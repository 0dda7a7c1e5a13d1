# What the side-by-side measurement scripts share (sourced, not run): starting a
# fixture server, attaching a probe to it sampled, driving it at saturation with
# `churn`, reading CPU time, and the `cost-breakdown` build. Each script measured
# these the same way with its own copy; one copy keeps their figures comparable.
#
# The sourcing script sets `root` (the repository) first.

bin=$root/target/release

# Starts `BINARY ARGS...` (a fixture server, maybe under valgrind: anything that
# prints its URL on its first line) with its output in $scratch/server.out; sets
# $server (its pid) and $url, and $probe empty (none attached yet). Waits up to
# a minute (callgrind starts slowly). A caller that runs several servers in one
# shell declares `local probe` in the function that runs each, so that a value
# the caller reads into a variable of that name cannot reach `stop`.
start_server() {
    # Emptied first: the server's child truncates it only once it runs, and a
    # read before that would find the last run's URL.
    : >"$scratch/server.out"
    probe=""
    "$@" >"$scratch/server.out" 2>/dev/null &
    server=$!
    for _ in $(seq 600); do
        grep -qs http "$scratch/server.out" && break
        sleep 0.1
    done
    url=$(grep -oE 'http://127\.0\.0\.1:[0-9]+/mcp' "$scratch/server.out" | head -1)
    if [ -z "$url" ]; then
        echo "the server did not start: $*" >&2
        kill "$server" 2>/dev/null || true
        exit 1
    fi
}

# Attaches `PROBE` (a leakscope-probe) to $server, sampled at 512 KiB, recording
# to $scratch/run.lsrec; sets $probe (its pid) once it says it attached, and
# 2 s after.
attach_sampled() {
    : >"$scratch/probe.out"
    "$1" attach --pid "$server" --out "$scratch/run.lsrec" --force --sample 512KiB \
        >"$scratch/probe.out" 2>"$scratch/probe.err" &
    probe=$!
    for _ in $(seq 200); do
        if grep -qs attached "$scratch/probe.out"; then
            # Its start-up work (the target's symbols, the first stacks) kept
            # out of what the caller measures next, as the scripts' fixed
            # waits did.
            sleep 2
            return
        fi
        sleep 0.1
    done
    echo "the probe did not attach: $(cat "$scratch/probe.err")" >&2
    kill "$probe" "$server" 2>/dev/null || true
    exit 1
}

# Stops the probe (if one was attached: $probe non-empty) and the server.
stop() {
    if [ -n "${probe:-}" ]; then
        kill -INT "$probe"
        wait "$probe" || true
    fi
    probe=""
    kill "$server"
    wait "$server" 2>/dev/null || true
}

# CPU time (user + system) of a process so far, in clock ticks.
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# `churn` at saturation against $url for SECONDS s, 16 sessions in flight, CALLS
# tool calls a session; prints churn's JSON summary (one line).
saturate() {
    "$bin/churn" --url "$url" --max-time "$1s" --rate 1000000 --count 100000000 \
        --concurrency 16 --calls "$2" 2>/dev/null | tail -n 1 || true
}

# Builds fixture-server-cooperative with the feature `cost-breakdown` (parts of
# a recording can be left out: inproc/src/recorder/cost.rs) in its own target
# directory (no production build can leave anything out); sets $breakdown.
build_cost_breakdown() {
    echo "building fixture-server-cooperative with the feature cost-breakdown (target/cost-breakdown)" >&2
    CARGO_TARGET_DIR=$root/target/cost-breakdown cargo build --quiet --release \
        --manifest-path "$root/Cargo.toml" -p leakscope-fixtures \
        --bin fixture-server-cooperative --features cost-breakdown
    breakdown=$root/target/cost-breakdown/release/fixture-server-cooperative
}
