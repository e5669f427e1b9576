#!/usr/bin/env bash
# Run the pi-conform adapter suite against your Pi host tool adapter and keep the reports.
#
# pi-conform mints a grant for ADAPTER_ID/ADAPTER_VERSION in a private directory, starts
# ADAPTER_COMMAND with `sh -c` ({socket}, {grants} and {root} replaced by paths there), runs
# every case, stops the adapter and removes what it made. Arguments are passed on to
# `pi-conform adapter` (e.g. `--id adapter.stat` to run a part of the suite).
#
#   ADAPTER_COMMAND        how to start your adapter, with {socket} and {grants}   (required)
#   ADAPTER_ID             the adapterId your adapter answers to                   (required)
#   ADAPTER_VERSION        the adapterVersion your adapter answers to              (required)
#   REPORT_DIR             where the reports go (default: pi-conform-reports)
#   PI_CONFORM             the pi-conform binary (default: pi-conform on PATH)
#   PI_CONFORM_BASELINE    a baseline file of known failures (optional)
#   PI_CONFORM_TIME_SCALE  multiply every step's time budget (optional; slow machines: 3)
#
# Writes REPORT_DIR/pi-conform.junit.xml, pi-conform.html and pi-conform.txt (the log).
# Exits with pi-conform's code: 0 conformant, 1 a MUST failed, 2 usage error, 3 a stale
# baseline entry, 4 the adapter did not start or answers nothing, 5 inconclusive.
set -euo pipefail

usage() { echo "pi-conform-adapter: $*" >&2; exit 2; }
[ -n "${ADAPTER_COMMAND:-}" ] || usage "set ADAPTER_COMMAND: how to start your adapter, with {socket} and {grants}"
[ -n "${ADAPTER_ID:-}" ] || usage "set ADAPTER_ID: the adapterId your adapter answers to"
[ -n "${ADAPTER_VERSION:-}" ] || usage "set ADAPTER_VERSION: the adapterVersion your adapter answers to"
REPORT_DIR="${REPORT_DIR:-pi-conform-reports}"
PI_CONFORM="${PI_CONFORM:-pi-conform}"

command -v "$PI_CONFORM" >/dev/null || usage "$PI_CONFORM not found (set PI_CONFORM, or put pi-conform on PATH)"
mkdir -p "$REPORT_DIR"

args=(adapter --command "$ADAPTER_COMMAND" --adapter-id "$ADAPTER_ID" --adapter-version "$ADAPTER_VERSION"
      --junit "$REPORT_DIR/pi-conform.junit.xml" --html "$REPORT_DIR/pi-conform.html" --color never)
if [ -n "${PI_CONFORM_BASELINE:-}" ]; then args+=(--baseline "$PI_CONFORM_BASELINE"); fi
if [ -n "${PI_CONFORM_TIME_SCALE:-}" ]; then args+=(--time-scale "$PI_CONFORM_TIME_SCALE"); fi

"$PI_CONFORM" --version
set +e
"$PI_CONFORM" "${args[@]}" "$@" 2>&1 | tee "$REPORT_DIR/pi-conform.txt"
code=${PIPESTATUS[0]}
set -e

case $code in
    0) what="conformant" ;;
    1) what="a MUST failed: see the failures above, or $REPORT_DIR/pi-conform.html" ;;
    2) what="usage error: nothing was judged" ;;
    3) what="conformant, but a baseline entry is stale: remove it from the baseline" ;;
    4) what="unreachable: the adapter did not start, or nothing answered on its socket" ;;
    5) what="inconclusive: the adapter answered, but the suite could not run (see above)" ;;
    *) what="unexpected exit code" ;;
esac
echo "pi-conform-adapter: exit $code ($what); reports in $REPORT_DIR" >&2
exit "$code"
