#!/bin/bash
# A trial on a real server no test here contains (issue 28): Apollo MCP Server
# 2.1.0 from crates.io, built plainly (`cargo install --locked`: release, no
# frame pointers), 100 sessions made and abandoned, reaped by rmcp's 300 s
# keep-alive, under a sampled eBPF recording of 12 minutes; then the report.
# What it should say: every session closed, no leak; any small growth said as
# seen, with what would decide.
#
# Run as root from the repository, after `cargo build --release -p leakscope-probe
# -p leakscope-analyzer -p leakscope-fixtures` (or a `cargo xtask bench`).
# The first run builds Apollo (~30 min on 2 cores) into target/apollo.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/target/release
work=$root/target/apollo
minutes=${MINUTES:-12}
mkdir -p "$work"
if [ ! -x "$work/inst/bin/apollo-mcp-server" ]; then
  CARGO_TARGET_DIR=$work/target cargo install apollo-mcp-server@2.1.0 --locked --root "$work/inst"
fi
src=$(ls -d ~/.cargo/registry/src/*/apollo-mcp-server-2.1.0 2>/dev/null | head -1)
schema=$work/schema.graphql
[ -f "$schema" ] || cp "$src/src/introspection/tools/testdata/schema.graphql" "$schema"
cat > "$work/config.yaml" <<YAML
endpoint: http://127.0.0.1:1/graphql
transport:
  type: streamable_http
  address: 127.0.0.1
  port: 8765
schema:
  source: local
  path: $schema
introspection:
  introspect:
    enabled: true
YAML
cd "$work"
rm -rf trial.lsrec trial-report
"$work/inst/bin/apollo-mcp-server" "$work/config.yaml" > server.log 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for _ in $(seq 100); do curl -s -o /dev/null http://127.0.0.1:8765/mcp && break; sleep 0.3; done
"$bin/leakscope-probe" attach --pid $server --sample --out trial.lsrec 2> probe.log &
probe=$!
sleep 5
# Apollo has no `echo` tool: each session's tools/call fails (churn counts it
# as failed), after initialize and notifications/initialized made the session.
"$bin/churn" --url http://127.0.0.1:8765/mcp --count 100 --rate 20 > churn.json || true
for m in $(seq "$minutes"); do
  sleep 60
  echo "minute $m: $(grep VmRSS /proc/$server/status)"
done
kill -INT $probe
wait $probe || true
"$bin/leakscope" report trial.lsrec --out trial-report
python3 -c "import json; s=json.load(open('trial-report/summary.json')); print(s['verdict_kind'], '|', s['verdict'])"
