#!/usr/bin/env python3
"""What a sampled recording's bytes would be with fewer or smaller records.

A model, for planning changes to the format before making them (see
docs/plans/issue-28-recorder-cost.md, "The disk"): it re-codes a recording's
records as the writer does (a byte of record kind, the time as a zigzag delta
from the record before, every integer as a varint) and compresses the result
with `zstd -6` in ~200 KB chunks (a sampled recording's one-second frames).
On the bench's day of session churn it came within ~3% of the real file of
format 12 (1,147 KB against 1,178 KB). It measured the changes of format 13
before they were made: times in microseconds (-33%), a task poll's end
without its arg (-7% more), one zstd stream for the frames (-12% more, against
frames of a second's ~36 KB compressed alone).

Usage, after `cargo xtask bench` (or `--only always-on`):
    ./target/release/leakscope dump target/bench/disk-sessions-sampled.lsrec > /tmp/day.jsonl
    python3 scripts/day-bytes-model.py /tmp/day.jsonl
Needs the `zstd` command.
"""

import collections
import json
import subprocess
import sys

CHUNK = 200_000


def varint(n, out):
    n = int(n)
    while n >= 128:
        out.append((n & 127) | 128)
        n >>= 7
    out.append(n)


def zigzag(n):
    return (n << 1) if n >= 0 else ((-n) << 1) - 1


def read(path):
    records = []
    for line in open(path):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if len(record) != 1:
            continue  # the header
        ((kind, fields),) = record.items()
        if isinstance(fields, dict) and kind not in ("stack", "mapping"):
            records.append((kind, fields))
    return records


def polls_holding_only_frees(records):
    """Indexes of the task polls (entry and end) whose thread recorded
    nothing but frees inside them."""
    drop, open_polls = set(), collections.defaultdict(list)
    for i, (kind, fields) in enumerate(records):
        tid = fields.get("tid")
        if tid is None:
            continue
        stack = open_polls[tid]
        if kind == "scope" and fields["kind"] == "task-poll":
            stack.append({"at": i, "frees": False, "other": False})
            continue
        if kind == "scope" and fields["kind"] == "task-poll-end":
            if stack:
                poll = stack.pop()
                if poll["frees"] and not poll["other"]:
                    drop.update((poll["at"], i))
                elif stack and (poll["frees"] or poll["other"]):
                    stack[-1]["other"] = True
            continue
        for poll in stack:
            poll["frees" if kind == "free" else "other"] = True
    return drop


def encode(records, keep=lambda i: True, address_deltas=False, poll_end_arg=True, time_unit=1):
    out, kinds = bytearray(), {}
    previous_ts, previous_address = 0, collections.defaultdict(int)
    for i, (kind, fields) in enumerate(records):
        if not keep(i):
            continue
        out.append(kinds.setdefault(kind, len(kinds)))
        if "ts" in fields:
            ts = fields["ts"] // time_unit
            varint(zigzag(ts - previous_ts), out)
            previous_ts = ts
        tid = fields.get("tid", 0)
        for name, value in fields.items():
            if name == "ts":
                continue
            if address_deltas and name in ("addr", "old", "new"):
                varint(zigzag(int(value) - previous_address[tid]), out)
                previous_address[tid] = int(value)
            elif not poll_end_arg and name == "arg" and fields.get("kind") == "task-poll-end":
                varint(0, out)
            elif isinstance(value, bool):
                out.append(int(value))
            elif isinstance(value, int):
                varint(value, out)
            elif value is None:
                out.append(0)
            else:
                out.append(1)  # an enum's variant, a fact (rare here)
    return bytes(out)


def compressed(raw, chunk=CHUNK):
    total = 0
    for at in range(0, len(raw), chunk):
        run = subprocess.run(
            ["zstd", "-6", "-q", "-c"], input=raw[at : at + chunk], capture_output=True, check=True
        )
        total += len(run.stdout)
    return total


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    records = read(sys.argv[1])
    drop = polls_holding_only_frees(records)
    format_13 = {"time_unit": 1000, "poll_end_arg": False}
    variants = [
        ("as written (format 12's coding)", {}, CHUNK),
        ("no task poll holding only frees", {"keep": lambda i: i not in drop}, CHUNK),
        ("a task poll's end without its arg", {"poll_end_arg": False}, CHUNK),
        ("addresses as deltas per thread", {"address_deltas": True}, CHUNK),
        ("times in microseconds", {"time_unit": 1000}, CHUNK),
        ("format 13, frames of ~36 KB alone", format_13, 36_000),
        ("format 13, one stream", format_13, 1 << 40),
    ]
    base = None
    for name, options, chunk in variants:
        raw = encode(records, **options)
        size = compressed(raw, chunk)
        base = base or size
        print(f"{name:36} raw {len(raw):>9} B  zstd-6 {size:>9} B  {100 * (size / base - 1):+5.1f}%")


if __name__ == "__main__":
    main()
