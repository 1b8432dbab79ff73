#!/usr/bin/env bash
# Runs the MCP conformance suite's two requirement sets (2025-11-25, and 2026-07-28 with
# the tasks extension and the pending scenarios) against `toolhost serve --mcp http`
# loaded with the conformance fixture plugin (tests/fixtures/conformance), prints each
# summary, and fails on any failure not listed in that set's baseline
# (conformance-baseline-SET.yml), or on a baseline entry that passes.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
bash tests/mcp/setup.sh
cargo build --quiet --locked -p toolhost-cli
# The test fixtures are a workspace of their own; the same target dir.
cargo build --quiet --locked --manifest-path tests/fixtures/Cargo.toml --target-dir target \
    -p fixture-conformance
work=$(mktemp -d)
server=
cleanup() {
    [ -n "$server" ] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
mkdir "$work/plugins" "$work/config"
cp target/debug/libfixture_conformance.so "$work/plugins/"
XDG_CONFIG_HOME="$work/config" TOOLHOST_LOG=info,rmcp=warn target/debug/toolhost serve \
    --mcp http --listen 127.0.0.1:0 --no-auth --plugins "$work/plugins" \
    --control "$work/control.sock" 2>"$work/serve.log" &
server=$!
url=
for _ in $(seq 1 600); do
    url=$(grep -o 'http://127.0.0.1:[0-9]*/mcp' "$work/serve.log" | head -n 1 || true)
    [ -n "$url" ] && break
    kill -0 "$server" 2>/dev/null || break
    sleep 0.1
done
if [ -z "$url" ]; then
    echo "toolhost serve --mcp http did not come up:" >&2
    cat "$work/serve.log" >&2
    exit 1
fi
status=0
for set in 2025-11-25 2026-07-28; do
    echo "conformance suite, requirement set $set, against $url"
    PATH="$root/target/mcp-tools/node_modules/.bin:$PATH" conformance server --url "$url" \
        --requirements "$set" \
        --expected-failures "tests/mcp/conformance-baseline-$set.yml" >"$work/$set.log" 2>&1 \
        || status=$?
    sed -n '/=== SUMMARY ===/,$p' "$work/$set.log"
    if [ "$status" -ne 0 ]; then
        echo "requirement set $set failed (exit $status); its full output:" >&2
        cat "$work/$set.log" >&2
        exit "$status"
    fi
done
