#!/usr/bin/env bash
# The whole test suite, from a fresh clone: creates .venv, installs agentd with
# its test dependencies, then runs lint, types, the Python tests (unit, e2e over
# stdio against the bundled model server) and the editor clients' suites.
# Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${AGENTD_VENV:-.venv}"
PY="${PYTHON:-python3}"

step() { printf '\n== %s ==\n' "$*"; }

step "install ($VENV)"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q -e '.[dev]'

step "ruff"
"$VENV/bin/ruff" check agentd tests bench
"$VENV/bin/ruff" format --check agentd tests bench

step "mypy --strict agentd tests"
"$VENV/bin/mypy"

step "pytest"
"$VENV/bin/python" -m pytest -q -p no:cacheprovider

# The VS Code webview tests drive headless Chromium (Debian's package).
if [ ! -x "${CHROMIUM_PATH:-/usr/bin/chromium}" ] && command -v apt-get >/dev/null 2>&1 \
    && [ "$(id -u)" = 0 ]; then
  step "install chromium (apt-get)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi

export AGENTD_BIN="$PWD/$VENV/bin/agentd"
for client in editor-clients/vscode editor-clients/nvim; do
  if [ -f "$client/test.sh" ]; then
    step "$client"
    bash "$client/test.sh"
  fi
done
step "all test suites passed"
