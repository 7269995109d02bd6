#!/usr/bin/env bash
# CI entry point for the VS Code extension: install, build, typecheck, test,
# package. Exits non-zero on any failure and ends with "N passed, N failed"
# summarising every JS test.
#
# Needs: Node 20 + npm, the agentd executable (env AGENTD_BIN, default
# `agentd` on PATH) for the protocol tests, and Chromium at /usr/bin/chromium
# (or CHROMIUM_PATH) for the webview tests (Debian: apt-get install chromium).
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")"
export AGENTD_BIN="${AGENTD_BIN:-agentd}"
RESULTS=test-artifacts/vitest-results.json
status=0
step() { echo; echo "== $*"; }
fail() { echo "FAILED: $*" >&2; status=1; }

step "npm ci"
npm ci --no-audit --no-fund || { echo "npm ci failed"; echo "0 passed, 1 failed"; exit 1; }

step "build"
node esbuild.mjs --production || fail "build"

step "typecheck"
npx tsc --noEmit -p . || fail "typecheck"

step "tests (AGENTD_BIN=$AGENTD_BIN)"
if ! command -v "$AGENTD_BIN" >/dev/null 2>&1; then
  echo "warning: $AGENTD_BIN is not runnable; the protocol tests against the real daemon will fail" >&2
fi
mkdir -p test-artifacts
rm -f "$RESULTS"
npx vitest run || fail "tests"

step "package"
npx vsce package --no-dependencies -o dist/agentd-vscode.vsix || fail "package"

# The summary comes from vitest's JSON reporter; a run that crashed before
# writing it counts as one failure.
summary=$(node -e '
  const fs = require("fs");
  try {
    const r = JSON.parse(fs.readFileSync(process.argv[1], "utf8"));
    let passed = 0, failed = 0, skipped = 0;
    for (const file of r.testResults) {
      const tests = file.assertionResults || [];
      const ok = tests.filter((t) => t.status === "passed").length;
      const bad = tests.filter((t) => t.status === "failed").length;
      passed += ok;
      if (file.status === "failed") {
        // A failing hook or import fails the file: what did not pass failed.
        failed += Math.max(1, tests.length - ok);
      } else {
        failed += bad;
        skipped += tests.length - ok - bad;
      }
    }
    if (skipped) console.error(`(${skipped} skipped or todo)`);
    console.log(`${passed} passed, ${failed} failed`);
  } catch {
    console.log("0 passed, 1 failed");
  }
' "$RESULTS")
case "$summary" in
  *" 0 failed") ;;
  *) status=1 ;;
esac
echo
echo "$summary"
exit $status
