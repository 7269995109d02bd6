"""The core never imports the wire (rust-analyzer's invariant, checked)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "agentd"
WIRE = ("pygls", "lsprotocol", "acp")


IMPORT = re.compile(r"^\s*(?:from|import)\s+([\w.]+)", re.M)


@pytest.mark.parametrize("package", ["agent", "memory", "providers"])
def test_core_packages_do_not_import_the_wire(package: str) -> None:
    # A line scan rather than ast.parse: CPython 3.11's parser can raise
    # SystemError ("recursion depth mismatch") when run inside a busy test process.
    offenders = []
    for path in (PKG / package).rglob("*.py"):
        for name in IMPORT.findall(path.read_text()):
            top = name.split(".")[0]
            if top in WIRE or name.startswith(("agentd.lsp", "agentd.acp")):
                offenders.append(f"{path.relative_to(PKG)}: {name}")
    assert offenders == []


def test_serving_starts_without_heavy_imports() -> None:
    """`agentd serve` must not import pydantic/httpx before answering initialize."""
    import subprocess
    import sys

    code = (
        "import sys, agentd.cli, agentd.lsp.server, agentd.lsp.handlers;"
        "heavy = ('pydantic', 'httpx', 'agentd.app', 'agentd.memory');"
        "print(','.join(m for m in heavy if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
