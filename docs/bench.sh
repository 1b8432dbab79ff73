#!/usr/bin/env bash
# Runs every benchmark in the repository and writes what each printed, with the date, the
# machine and the commit, to docs/bench/NAME.md, which the book's benchmarks page
# (docs/book/src/benchmarks.md) includes: every figure the docs show comes from a run of a
# benchmark here. Run it on
# an otherwise idle machine:
#
#   bash docs/bench.sh            # all of them (about 15 minutes on 2 cores)
#   bash docs/bench.sh dispatch   # only the named ones; the others keep their last run
#
# The MCP benchmark compares with the Python SDK's and Node's servers: it runs
# tests/mcp/setup.sh first (PyPI and npm). The search benchmark compares with ripgrep.
set -euo pipefail
cd "$(dirname "$0")/.."

page=docs/book/src/benchmarks.md
sections=docs/bench
mkdir -p target/bench-out

# name | cargo arguments | what it measures (no figures: those come from the run)
benches=(
  "dispatch|-p toolhost-cli --bench dispatch|One trivial echo call through the full registry and dispatcher path (policy, schema validation, timeout, cancel token, result) on a current-thread runtime: from a release-built plugin through its typed and its untyped interface, and compiled into the host as a native tool (the baseline), interleaved in one run; and plugin loads (private copy with sha256, dlopen, version and layout checks, metadata). What a plugin call pays on top of a native one is the hand-off to a plugin thread (which keeps a blocking plugin from stalling the host) and the arguments crossing as JSON text."
  "outputs|-p toolhost-cli --bench outputs|A 10 MB result through \`toolhost serve --mcp stdio\`, with the default output budget and with it off (\`max_chars = 0\`, \`max_lines = 0\`): time per call, the host's peak memory and the bytes the client gets. With the budget the host keeps one copy of the text (written to \`outputs/\` off the call's thread) and sends the cut."
  "audit|-p toolhost-cli --bench audit|MCP stdio tools/call round trips (echo from a .so, one compiled client) with the audit log off (the baseline), on, and on with arguments, interleaved in rounds in the same run. The writer gathers lines for a short while after each write, so calls under load never wake it."
  "startup|-p toolhost-cli --bench startup|\`toolhost call time_now\` and \`toolhost list\` as whole processes, with one plugin in the folder and with every bundled plugin and the test fixtures that load (the large folder), the plugin index cold (removed before each run, so every plugin loads) and warm (answered from the index: \`list\` loads nothing, \`call\` only the plugin it calls), interleaved."
  "isolation|-p toolhost-cli --bench isolation|The echo round trip in-process and in a worker process, and over MCP stdio to the same tool, with a socketpair ping-pong between two threads as the floor, first as the kernel places the threads, then pinned to one core; reloads by rename with callers running, in each mode; a worker's crash to the next successful call; and the worker round trip under each containment (cgroup, PID namespace, process group) and with no sandbox."
  "operators|-p toolhost-cli --bench operators|A plugin replaced by rename to the first call served by the new generation, and to \`notifications/tools/list_changed\` at an MCP stdio client, with the immediate path (the default) beside the debounce alone (\`[reload] immediate = false\`); and start-up with 100 distinct plugins (\`toolhost list\` and \`serve\` to \`READY=1\`) with the load pool beside one load thread, and the process alone."
  "reload|-p toolhost-cli --bench reload|Reloads of a release plugin, alternating two builds, each installed by rename into a watched folder while a client calls it in a loop: file in place to first call on the new generation, failed calls, memory kept per reload, against the rescan alone (\`toolhost reload\`, no watcher) as the baseline; then re-adds of one file with the same bytes (the mapping is reused) against different bytes each time."
  "mcp|-p toolhost-cli --bench mcp|tools/call round trips over stdio from one compiled client (raw JSON-RPC lines): toolhost serving \`echo\` from a release .so, a minimal rmcp server with the same echo compiled in (the floor for an rmcp server), the Python SDK's server and server-everything's echo (Node); over streamable HTTP, toolhost with a bearer token, with \`--no-auth\`, and a minimal rmcp HTTP server; and an MCP server as toolhost's tool source (\`[[mcp_servers]]\`), called directly and through toolhost, over stdio and HTTP."
  "replicas|-p toolhost-cli --bench replicas|Many replicas on one PostgreSQL (run as a throwaway user; needs root, Debian's postgresql and haproxy). First the cost per call of \`[state] backend = \"postgres\"\` against files: MCP stdio round trips of \`echo\` (one audit line, which with the database is committed before the answer) and of an \`echo\` whose output the budget cuts and keeps, files and postgres side by side, interleaved; and a lasting approval check in process, from the file, from the shared state's cache (kept while the change listener is connected) and read from the database each time. Then 2026-07-28 \`tools/call\`s over HTTP through HAProxy with \`contrib/haproxy.cfg\` to one, two and three replicas, beside one replica reached directly. On one 2-core machine the rate cannot rise with replicas: every replica, HAProxy, PostgreSQL and the load generator share the same two cores, so more replicas only add processes competing for them; the rows show what HAProxy and the shared state cost, and spreading works."
  "search|-p toolhost-workspace --bench search|\`grep\`, \`find_files\` and a recursive \`list_dir\` over a large real source tree (the crate sources cargo downloaded), side by side with ripgrep run with the same options: median wall times, their ratio, and both tools' counts, which must agree."
)

wanted=("$@")
machine="$(lscpu 2>/dev/null | awk -F: '/Model name/ {gsub(/^ +/, "", $2); print $2; exit}'), $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo) memory, Linux $(uname -r)"
commit=$(git describe --always --dirty 2>/dev/null || echo unknown)
rustc=$(rustc --version)

for entry in "${benches[@]}"; do
  IFS='|' read -r name args what <<<"$entry"
  if [ ${#wanted[@]} -gt 0 ] && ! printf '%s\n' "${wanted[@]}" | grep -qx "$name"; then
    continue
  fi
  if [ "$name" = mcp ]; then
    bash tests/mcp/setup.sh >/dev/null
  fi
  echo "==> $name: cargo bench $args" >&2
  # What the benchmark prints is the section; cargo's own output (and a failed build's
  # errors) goes to the terminal. shellcheck disable=SC2086: the arguments are words.
  # shellcheck disable=SC2086
  cargo bench --locked $args | tee "target/bench-out/$name.txt" >&2
  mkdir -p "$sections"
  {
    printf '## %s\n\n' "$name"
    printf '```sh\ncargo bench %s\n```\n\n' "$args"
    printf '%s\n\n' "$what"
    printf 'Measured %s on %s (commit %s, %s):\n\n' "$(date -u +%Y-%m-%d)" "$machine" "$commit" "$rustc"
    printf '```text\n'
    cat "target/bench-out/$name.txt"
    printf '```\n'
  } >"$sections/$name.md"
done

echo "wrote the sections in $sections/; $page includes them" >&2
