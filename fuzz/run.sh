#!/usr/bin/env bash
# Runs toolhost's fuzz targets (cargo-fuzz with libFuzzer, AddressSanitizer on).
#
#   fuzz/run.sh                  every target for 60 s each
#   fuzz/run.sh --seconds 600    every target for 10 min each
#   fuzz/run.sh --ci             every target for 20 s on its corpus (the CI gate)
#   fuzz/run.sh mcp_http sse_stream --seconds 300
#
# cargo-fuzz needs the nightly toolchain (AddressSanitizer and libFuzzer's coverage are
# unstable flags): the machine image's `nightly` if rustup has one, else the stable
# toolchain with RUSTC_BOOTSTRAP=1 (the same compiler features, allowed on stable).
# cargo-fuzz itself comes from crates.io, into target/cargo-fuzz.
#
# New inputs that reach new coverage are added to fuzz/corpus/TARGET (minimise with
# `--minimise` before committing); a crash, hang or leak stops with the input in
# fuzz/artifacts/TARGET and this script exits non-zero. Each finding, once fixed, goes
# into fuzz/regressions/TARGET, which the normal test suite replays.
set -euo pipefail
cd "$(dirname "$0")"

seconds=60
ci=false
minimise=false
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --ci) ci=true; seconds=20; shift ;;
    --minimise) minimise=true; shift ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    -*) echo "error: unknown option $1 (see --help)"; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done

cargo_fuzz_version=0.13.2
if ! [ -x target/cargo-fuzz/bin/cargo-fuzz ] \
  || ! target/cargo-fuzz/bin/cargo-fuzz --version | grep -q "$cargo_fuzz_version"; then
  cargo install cargo-fuzz --version "$cargo_fuzz_version" --locked --root target/cargo-fuzz --quiet
fi
export PATH="$PWD/target/cargo-fuzz/bin:$PATH"

if command -v rustup >/dev/null && rustup toolchain list | grep -q '^nightly'; then
  toolchain=(+nightly)
else
  echo "note: no nightly toolchain; using stable with RUSTC_BOOTSTRAP=1"
  toolchain=()
  export RUSTC_BOOTSTRAP=1
fi

# The MCP targets serve the example plugin hello-tools (read-only tools: a fuzzed call
# must not write files), so calls reach a real plugin tool; the
# plugin_worker target loads the fuzzed plugin fixture in workers of the toolhost binary.
plugins="$PWD/target/fuzz-plugins"
mkdir -p "$plugins"
cargo build --quiet --locked --manifest-path ../Cargo.toml --release --target-dir "$PWD/target/plugin-build" \
  -p hello-tools
cargo build --quiet --locked --manifest-path ../tests/fixtures/Cargo.toml --release \
  --target-dir "$PWD/target/plugin-build" -p fixture-fuzzed
cp "$PWD/target/plugin-build/release/libhello_tools.so" "$plugins/"
cargo build --quiet --locked --manifest-path ../Cargo.toml -p toolhost-cli
export TOOLHOST_FUZZ_PLUGINS="$plugins"
export TOOLHOST_FUZZ_FIXTURE="$PWD/target/plugin-build/release/libfixture_fuzzed.so"
export TOOLHOST_FUZZ_WORKER="$PWD/../target/debug/toolhost"

if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(cargo "${toolchain[@]}" fuzz list)
fi

cargo "${toolchain[@]}" fuzz build -O

# A whole input of the slowest target (an MCP session through a real host) takes
# milliseconds; 10 s is a hang. RSS over 2 GB is a leak or an unbounded allocation.
failed=()
for target in "${targets[@]}"; do
  mkdir -p "corpus/$target"
  echo "==> $target: ${seconds}s"
  log="target/fuzz-logs/$target.log"
  mkdir -p target/fuzz-logs
  if cargo "${toolchain[@]}" fuzz run -O "$target" "corpus/$target" -- \
      -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
      -print_final_stats=1 -detect_leaks=1 >"$log" 2>&1; then
    grep -E '^stat::(number_of_executed_units|peak_rss_mb|slowest_unit_time_sec|new_units_added)' "$log" \
      | sed "s/^/$target /" || true
    grep -E '#[0-9]+[[:space:]]+DONE' "$log" | tail -1 | sed "s/^/$target /" || true
  else
    echo "FINDING in $target: see fuzz/$log and fuzz/artifacts/$target"
    tail -40 "$log"
    failed+=("$target")
  fi
  if $minimise; then
    cargo "${toolchain[@]}" fuzz cmin -O "$target" "corpus/$target" >/dev/null 2>&1
  fi
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "error: findings in ${failed[*]}"
  exit 1
fi
echo "ok: ${#targets[@]} targets ran ${seconds}s each with no crash, hang or leak"
