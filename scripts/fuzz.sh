#!/usr/bin/env bash
# Seed every fuzz target from the golden vectors, then fuzz each for SECONDS (default 60),
# one job each, one after the other. Prints the executions, the corpus size and the outcome
# per target; exits 1 if any target found a crash (artifacts in fuzz/artifacts/<target>/,
# logs in fuzz/artifacts/logs/), 2 if the build failed.
#
# Needs a nightly toolchain and cargo-fuzz: `rustup toolchain install nightly`,
# `cargo install cargo-fuzz`. The fuzz crate builds into fuzz/target, apart from the main one.
#
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]
set -uo pipefail
cd "$(dirname "$0")/.."
secs="${1:-60}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(ndjson command descriptor frame_to_adapter frame_to_daemon bind_request path)
fi
unset CARGO_TARGET_DIR

python3 scripts/fuzz_seeds.py fuzz/corpus || exit 2
cd fuzz
# Build every target once, then run the binaries themselves: `cargo fuzz run` would rebuild
# whenever a source file changed in between, and the timing would no longer be the fuzzing.
cargo +nightly fuzz build || exit 2
triple=$(rustc +nightly -vV | sed -n 's/^host: //p')
bin="target/$triple/release"
mkdir -p artifacts/logs
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_odr_violation=0}"

count_artifacts() { find "artifacts/$1" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) 2>/dev/null | wc -l; }

crashed=()
printf '%-18s %12s %8s  %s\n' target execs corpus result
for t in "${targets[@]}"; do
  log="artifacts/logs/$t.log"
  before=$(count_artifacts "$t")
  mkdir -p "artifacts/$t" "corpus/$t"
  "$bin/$t" -artifact_prefix="$PWD/artifacts/$t/" -max_total_time="$secs" -timeout=25 -print_final_stats=1 \
    "corpus/$t" >"$log" 2>&1
  rc=$?
  after=$(count_artifacts "$t")
  execs=$(sed -n 's/^stat::number_of_executed_units: *\([0-9]*\).*/\1/p' "$log" | tail -1)
  if [ -z "$execs" ]; then
    execs=$(grep -oE '^#[0-9]+' "$log" | tail -1 | tr -d '#')
  fi
  corpus=$(find "corpus/$t" -type f | wc -l)
  if [ "$rc" -ne 0 ] || [ "$after" -gt "$before" ]; then
    result="CRASH (exit $rc; see $log and artifacts/$t/)"
    crashed+=("$t")
  else
    result="no crash"
  fi
  printf '%-18s %12s %8s  %s\n' "$t" "${execs:-?}" "$corpus" "$result"
done

if [ ${#crashed[@]} -ne 0 ]; then
  echo "crashes in: ${crashed[*]}"
  exit 1
fi
echo "no crash in ${#targets[@]} targets (${secs}s each)"
