#!/usr/bin/env bash
# Installs the MCP test tools into target/mcp-tools (nothing outside the package
# registries): a Python virtualenv with the MCP SDK (PyPI `mcp`) and Prometheus' client
# (`prometheus-client`, for its metrics parsers), and from npm Node 22,
# the conformance suite, the reference server and the TypeScript SDKs' clients (versions
# pinned in package.json).
# Idempotent; the Rust tests make the virtualenv themselves if it is missing.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
tools="$root/target/mcp-tools"
mkdir -p "$tools"
if ! "$tools/venv/bin/python" -c 'import mcp, mcp_types, prometheus_client' 2>/dev/null; then
    python3 -m venv "$tools/venv"
    "$tools/venv/bin/pip" install --quiet --disable-pip-version-check mcp==2.3.0 \
        prometheus-client==0.26.0
fi
if ! cmp -s "$root/tests/mcp/package.json" "$tools/package.json" \
    || [ ! -x "$tools/node_modules/.bin/conformance" ]; then
    cp "$root/tests/mcp/package.json" "$tools/package.json"
    (cd "$tools" && npm install --no-audit --no-fund --loglevel=error)
fi
"$tools/node_modules/.bin/node" --version >/dev/null
