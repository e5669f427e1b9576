#!/usr/bin/env bash
# Installs what tests/html_browser.rs needs to open the HTML report in headless Chromium:
# puppeteer-core and @sparticuz/chromium (which ships a Chromium build), into
# target/browser-test/ (ignored by git) or the directory given as $1. Needs node >= 20 and npm
# with registry access. Without them the test skips itself with the reason.
set -euo pipefail
cd "$(dirname "$0")/.."
dest="${1:-target/browser-test}"
mkdir -p "$dest"
cd "$dest"
[ -f package.json ] || npm init -y >/dev/null
npm install --no-audit --no-fund puppeteer-core @sparticuz/chromium
echo "installed into $(pwd)/node_modules; run: PI_CONFORM_BROWSER_MODULES=$(pwd)/node_modules cargo test --test html_browser -- --nocapture"
