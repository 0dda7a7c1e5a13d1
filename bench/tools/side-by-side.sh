#!/usr/bin/env bash
# side-by-side.sh - per-call cost of malloc(64)+free pairs under other heap tools.
#
# Usage: bench/tools/side-by-side.sh [N]        (N pairs, default 1000000)
#
# Prints exactly one line per tool, in this order:
#   tool=<name> ns_per_pair=<x> n=<pairs actually run>
#   tool=<name> skipped=<reason>                 (reason never contains spaces)
# Tools: unprobed, bcc_memleak, heaptrack, valgrind_dhat.
# Diagnostics go to stderr; stdout carries only the result lines.
# Exit status is 0 whenever the lines were printed (even if every tool was
# skipped) and 2 for a usage error.
#
# Environment knobs:
#   BCC_KERNEL_SOURCE   kernel headers for bcc; defaults to /opt/bcc-kernel-src
#                       when that exists and /lib/modules/$(uname -r)/build does not
#   MEMLEAK_ATTACH_TIMEOUT  seconds to wait for memleak to attach (default 120)
#   RUN_TIMEOUT         seconds any single measured run may take (default 600)
#   DHAT_N              pairs for valgrind_dhat (default: N, capped at 2000000)
#   KEEP_WORKDIR=1      keep the temp dir (tool logs) and print its path on stderr
set -euo pipefail

N="${1:-1000000}"
if ! [[ "$N" =~ ^[1-9][0-9]*$ ]]; then
    echo "usage: $0 [N]   (N = positive integer number of malloc/free pairs)" >&2
    exit 2
fi

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SRC="$HERE/pairs.c"
MEMLEAK_ATTACH_TIMEOUT="${MEMLEAK_ATTACH_TIMEOUT:-120}"
RUN_TIMEOUT="${RUN_TIMEOUT:-600}"
TOOLS=(unprobed bcc_memleak heaptrack valgrind_dhat)

WORK="$(mktemp -d "${TMPDIR:-/tmp}/side-by-side.XXXXXX")"
BG_PIDS=()

cleanup() {
    local p
    # Background children still alive (only after an interrupt): TERM them and
    # reap them, so a killed memleak has detached its uprobes before we exit
    # (teardown under load takes ~2 s here) and cannot disturb a next run.
    for p in "${BG_PIDS[@]:-}"; do
        [[ -n "$p" ]] && stop_pid "$p"
    done
    if [[ "${KEEP_WORKDIR:-0}" == 1 ]]; then
        echo "side-by-side: logs kept in $WORK" >&2
    else
        rm -rf "$WORK"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log() { echo "side-by-side: $*" >&2; }
result() { echo "tool=$1 ns_per_pair=$2 n=$3"; }
skip() { echo "tool=$1 skipped=$2"; }

# Turn the last meaningful line of a log into a space-free reason token.
reason_from() {
    local prefix="$1" file="$2" line=""
    if [[ -s "$file" ]]; then
        line="$(sed 's/^==[0-9]*==[[:space:]]*//' "$file" | grep -v '^[[:space:]]*$' | tail -n 1 || true)"
    fi
    line="$(printf '%s' "$line" | tr -c 'A-Za-z0-9._:/=+-' '_' | sed 's/__*/_/g; s/^_//; s/_$//' | cut -c1-120)"
    if [[ -n "$line" ]]; then echo "${prefix}:${line}"; else echo "$prefix"; fi
}

# Extract the float from the last ns_per_pair= line in a file; empty if none.
parse_ns() {
    grep -o 'ns_per_pair=[0-9][0-9.]*' "$1" 2>/dev/null | tail -n 1 | cut -d= -f2 || true
}

# alive PID: running and not yet a zombie (kill -0 alone is true for zombies).
alive() {
    kill -0 "$1" 2>/dev/null || return 1
    [[ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null || echo Z)" != Z ]]
}

# Drop a reaped pid from BG_PIDS so cleanup can never signal a reused pid.
forget_pid() {
    local p keep=()
    for p in "${BG_PIDS[@]:-}"; do
        [[ -n "$p" && "$p" != "$1" ]] && keep+=("$p")
    done
    BG_PIDS=("${keep[@]:-}")
}

# wait_pid_timeout PID SECS -> returns PID's exit code, or 124 after killing it on timeout.
wait_pid_timeout() {
    local pid="$1" secs="$2" deadline rc=0
    deadline=$(( $(date +%s) + secs ))
    while alive "$pid"; do
        if (( $(date +%s) >= deadline )); then
            kill -KILL "$pid" 2>/dev/null || true
            wait "$pid" 2>/dev/null || true
            forget_pid "$pid"
            return 124
        fi
        sleep 0.05
    done
    wait "$pid" 2>/dev/null || rc=$?
    forget_pid "$pid"
    return "$rc"
}

# Stop a background process politely, then firmly; never fails.
stop_pid() {
    local pid="$1"
    kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; forget_pid "$pid"; return 0; }
    # SIGINT is ignored by background jobs of a non-interactive shell, so use TERM.
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do
        alive "$pid" || break
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    forget_pid "$pid"
}

# ---------------------------------------------------------------- build
PAIRS="$WORK/pairs"
if ! command -v cc >/dev/null 2>&1; then
    for t in "${TOOLS[@]}"; do skip "$t" "no_C_compiler_cc"; done
    exit 0
fi
if ! cc -O1 -o "$PAIRS" "$SRC" 2>"$WORK/cc.err"; then
    cat "$WORK/cc.err" >&2
    for t in "${TOOLS[@]}"; do skip "$t" "$(reason_from pairs_c_compile_failed "$WORK/cc.err")"; done
    exit 0
fi

# ---------------------------------------------------------------- unprobed
run_unprobed() {
    local rc=0 ns
    timeout "$RUN_TIMEOUT" "$PAIRS" "$N" >"$WORK/unprobed.out" 2>"$WORK/unprobed.err" || rc=$?
    ns="$(parse_ns "$WORK/unprobed.out")"
    if (( rc != 0 )) || [[ -z "$ns" ]]; then
        skip unprobed "$(reason_from "pairs_failed_rc=$rc" "$WORK/unprobed.err")"
    else
        result unprobed "$ns" "$N"
    fi
}

# ---------------------------------------------------------------- bcc memleak
# memleak_attach CMD PID ATTEMPT: start bcc memleak on PID and wait until
# all its uprobes are attached. On success sets MEMLEAK_PID and returns 0; on
# failure stops it, sets MEMLEAK_FAIL to a reason token and returns 1.
MEMLEAK_PID=""
MEMLEAK_FAIL=""
memleak_attach() {
    local ml="$1" pid="$2" attempt="$3" mpid deadline perf prev_perf=-1 stable=0
    local out="$WORK/memleak.$attempt.out" err="$WORK/memleak.$attempt.err"
    # Interval far longer than the run (no periodic report during timing);
    # the default sample rate (-s 1) already traces every allocation.
    # PYTHONUNBUFFERED so the "Attaching to pid" line reaches the log at once.
    PYTHONUNBUFFERED=1 "$ml" -p "$pid" 3600 </dev/null >"$out" 2>"$err" 3>&- &
    mpid=$!
    BG_PIDS+=("$mpid")

    # Attach signal: memleak prints "Attaching to pid" after compiling the BPF
    # program (~2 s here) but BEFORE attaching the uprobes; it then opens one
    # perf_event fd per uprobe/uretprobe (20 with glibc: 9 alloc functions x2
    # + free + munmap, free/munmap last). Wait for the line, then for the
    # perf_event fd count to reach 20 or stay unchanged for 1 s.
    deadline=$(( $(date +%s) + MEMLEAK_ATTACH_TIMEOUT ))
    while (( $(date +%s) < deadline )); do
        alive "$mpid" || break
        if grep -q 'Attaching to pid' "$out" 2>/dev/null; then
            perf="$(find "/proc/$mpid/fd" -mindepth 1 -maxdepth 1 -lname 'anon_inode:\[perf_event\]' 2>/dev/null | wc -l)"
            if (( perf >= 20 )); then MEMLEAK_PID="$mpid"; return 0; fi
            if (( perf > 0 && perf == prev_perf )); then
                stable=$((stable + 1))
                if (( stable >= 10 )); then MEMLEAK_PID="$mpid"; return 0; fi
            else
                stable=0
            fi
            prev_perf=$perf
        fi
        sleep 0.1
    done
    stop_pid "$mpid"
    if grep -q 'Attaching to pid' "$out" 2>/dev/null && [[ -s "$err" ]]; then
        MEMLEAK_FAIL="$(reason_from memleak_attach_failed "$err")"
    elif [[ -s "$err" ]]; then
        MEMLEAK_FAIL="$(reason_from memleak_failed "$err")"
    else
        MEMLEAK_FAIL="memleak_attach_timeout_${MEMLEAK_ATTACH_TIMEOUT}s"
    fi
    return 1
}

run_bcc_memleak() {
    local ml="" fifo pid mpid rc=0 ns attached=0

    for c in memleak-bpfcc memleak; do
        if command -v "$c" >/dev/null 2>&1; then ml="$c"; break; fi
    done
    [[ -n "$ml" ]] || { skip bcc_memleak "memleak-bpfcc_not_installed"; return; }
    (( $(id -u) == 0 )) || { skip bcc_memleak "needs_root"; return; }

    if [[ ! -e /sys/kernel/tracing/events && ! -e /sys/kernel/debug/tracing/events ]]; then
        mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
        if [[ ! -e /sys/kernel/tracing/events ]]; then
            skip bcc_memleak "tracefs_not_mounted"; return
        fi
    fi
    if [[ -z "${BCC_KERNEL_SOURCE:-}" && ! -e "/lib/modules/$(uname -r)/build" \
          && -d /opt/bcc-kernel-src ]]; then
        export BCC_KERNEL_SOURCE=/opt/bcc-kernel-src
    fi

    fifo="$WORK/memleak.go"
    mkfifo "$fifo"
    # Open the fifo read-write on fd 3 first: on Linux that never blocks, and
    # because a writer now exists the child's "< fifo" open does not block
    # either, so the child execs pairs immediately and $! is pairs' own pid.
    exec 3<>"$fifo"
    "$PAIRS" --wait "$N" <"$fifo" >"$WORK/memleak_pairs.out" 2>"$WORK/memleak_pairs.err" 3>&- &
    pid=$!
    BG_PIDS+=("$pid")

    # Wait until pairs is parked in fgets (libc mapped, ready to be probed).
    for _ in $(seq 1 200); do
        grep -q 'waiting' "$WORK/memleak_pairs.err" 2>/dev/null && break
        alive "$pid" || break
        sleep 0.05
    done
    if ! grep -q 'waiting' "$WORK/memleak_pairs.err" 2>/dev/null; then
        stop_pid "$pid"
        exec 3>&-
        skip bcc_memleak "$(reason_from pairs_did_not_start "$WORK/memleak_pairs.err")"
        return
    fi

    # Up to two attempts: one transient "Failed to attach BPF to uprobe" was
    # seen once right after a previous memleak had been killed mid-run.
    local attempt reason=""
    for attempt in 1 2; do
        if memleak_attach "$ml" "$pid" "$attempt"; then
            attached=1; break
        fi
        reason="$MEMLEAK_FAIL"
        log "bcc_memleak attempt $attempt failed: $reason"
        # retry only on a failed attach, not on a compile error or timeout
        [[ "$reason" == memleak_attach_failed* ]] || break
        alive "$pid" || break
        sleep 3
    done
    if (( attached == 0 )); then
        stop_pid "$pid"
        exec 3>&-
        skip bcc_memleak "$reason"
        return
    fi
    mpid="$MEMLEAK_PID"
    sleep 0.5

    echo go >&3
    exec 3>&-
    wait_pid_timeout "$pid" "$RUN_TIMEOUT" || rc=$?
    local ml_alive=1
    alive "$mpid" || ml_alive=0
    stop_pid "$mpid"
    ns="$(parse_ns "$WORK/memleak_pairs.out")"
    if (( rc != 0 )) || [[ -z "$ns" ]]; then
        skip bcc_memleak "$(reason_from "pairs_failed_rc=$rc" "$WORK/memleak_pairs.err")"
    elif (( ml_alive == 0 )); then
        skip bcc_memleak "$(reason_from memleak_exited_during_run "$WORK/memleak.$attempt.err")"
    else
        result bcc_memleak "$ns" "$N"
    fi
}

# ---------------------------------------------------------------- heaptrack
run_heaptrack() {
    local rc=0 ns
    command -v heaptrack >/dev/null 2>&1 || { skip heaptrack "heaptrack_not_installed"; return; }
    mkdir -p "$WORK/heaptrack"
    # heaptrack appends .zst/.gz to the -o name itself.
    timeout "$RUN_TIMEOUT" heaptrack -o "$WORK/heaptrack/heaptrack.pairs" "$PAIRS" "$N" \
        </dev/null >"$WORK/heaptrack.out" 2>"$WORK/heaptrack.err" || rc=$?
    ns="$(parse_ns "$WORK/heaptrack.out")"
    if (( rc != 0 )) || [[ -z "$ns" ]]; then
        skip heaptrack "$(reason_from "heaptrack_failed_rc=$rc" "$WORK/heaptrack.err")"
    else
        result heaptrack "$ns" "$N"
    fi
}

# ---------------------------------------------------------------- valgrind dhat
run_valgrind_dhat() {
    local rc=0 ns n
    command -v valgrind >/dev/null 2>&1 || { skip valgrind_dhat "valgrind_not_installed"; return; }
    # dhat costs ~2.3 us/pair here (1M pairs ~3 s), so N is used as is up to 2M.
    n="${DHAT_N:-$N}"
    (( n > 2000000 )) && [[ -z "${DHAT_N:-}" ]] && n=2000000
    timeout "$RUN_TIMEOUT" valgrind --tool=dhat --dhat-out-file="$WORK/dhat.out" "$PAIRS" "$n" \
        </dev/null >"$WORK/dhat.stdout" 2>"$WORK/dhat.err" || rc=$?
    ns="$(parse_ns "$WORK/dhat.stdout")"
    if (( rc != 0 )) || [[ -z "$ns" ]]; then
        skip valgrind_dhat "$(reason_from "valgrind_failed_rc=$rc" "$WORK/dhat.err")"
    else
        result valgrind_dhat "$ns" "$n"
    fi
}

# Each runner prints its own line; a runner that dies unexpectedly still
# yields a skipped line instead of a silent omission.
# (Runners run in the main shell, not a subshell, so BG_PIDS reaches cleanup.)
for t in "${TOOLS[@]}"; do
    : >"$WORK/$t.line"
    : >"$WORK/$t.runner.err"
    "run_$t" >"$WORK/$t.line" 2>"$WORK/$t.runner.err" || true
    # pass the runner's own diagnostics (log lines, shell errors) through
    [[ -s "$WORK/$t.runner.err" ]] && cat "$WORK/$t.runner.err" >&2
    if grep -q "^tool=$t " "$WORK/$t.line"; then
        grep "^tool=$t " "$WORK/$t.line" | head -n 1
    else
        skip "$t" "$(reason_from runner_error "$WORK/$t.runner.err")"
    fi
done
