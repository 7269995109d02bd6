"""The command line: version, help, and the entry points editors and people use."""

from __future__ import annotations

import subprocess
import sys

from agentd import PROTOCOL_VERSION, __version__


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentd", *args], capture_output=True, text=True, timeout=60
    )


def test_version() -> None:
    out = run("--version")
    assert out.returncode == 0
    assert out.stdout.strip() == f"agentd {__version__} (protocol {PROTOCOL_VERSION})"


def test_help_lists_the_subcommands() -> None:
    out = run("--help")
    assert out.returncode == 0
    for command in ("serve", "demo", "model-server", "memory"):
        assert command in out.stdout
    serve = run("serve", "--help")
    assert "--acp" in serve.stdout and "--tcp" in serve.stdout


def test_model_server_refuses_a_non_loopback_host() -> None:
    out = run("model-server", "--host", "0.0.0.0", "--port", "0")
    assert out.returncode == 2
    assert "loopback" in out.stderr
