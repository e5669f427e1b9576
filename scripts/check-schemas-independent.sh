#!/usr/bin/env bash
# Compile the schemas (the two protocol schemas and the report schema) with two independent validators: Python `jsonschema` (meta-schema
# check) and ajv in strict mode (draft 2020-12). Needs python3 and npm (registry access).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q 'jsonschema>=4.18'
python3 - <<'PY'
import json
from jsonschema import Draft202012Validator
for f in ("schemas/tool-adapter.schema.json", "schemas/protocol-v2.schema.json", "schemas/report.schema.json"):
    Draft202012Validator.check_schema(json.load(open(f)))
    print("python jsonschema: meta-schema ok", f)
PY
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm init -y >/dev/null && npm install -s ajv@8 >/dev/null)
cat > "$tmp/check.js" <<'JS'
const Ajv2020 = require("ajv/dist/2020");
const fs = require("fs");
for (const f of process.argv.slice(2)) {
  const ajv = new Ajv2020({ strict: true, allErrors: true });
  ajv.compile(JSON.parse(fs.readFileSync(f)));
  console.log("ajv strict: compiled", f);
}
JS
NODE_PATH="$tmp/node_modules" node "$tmp/check.js" schemas/tool-adapter.schema.json schemas/protocol-v2.schema.json schemas/report.schema.json
