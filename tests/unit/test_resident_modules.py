"""What the LSP daemon keeps resident after its warm-up (issue 20: RSS after
the warm-up <= 60 MB; the figure is in `bench/core_bench.py`, not here).

The warm-up (`agentd.warmup.Warmup`, built with the LSP front end's imports)
runs in a fresh interpreter exactly as the daemon runs it after `initialize`;
then its `sys.modules` must not hold what only later work needs: memory
extraction and its secret rules (first needed after a reply), MCP's SDK (only
with servers configured), the ACP front end, and httpx's command-line client.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

NOT_RESIDENT = (
    "agentd.memory.extraction",
    "detect_secrets",
    "mcp",
    "agentd.acp",
    "httpx._main",
    "click",
)

SCRIPT = """
import asyncio, sys
from agentd.lsp.server import AgentdServer

async def main():
    server = AgentdServer()
    server.warmup.options = {"memory": {"enabled": True}}
    app = await server.warmup.wait()
    await app.aclose()

asyncio.run(main())
names = sys.argv[1].split(",")
loaded = [m for m, module in sys.modules.items() if module is not None]
print(",".join(n for n in names if any(m == n or m.startswith(n + ".") for m in loaded)))
"""


def test_the_lsp_warm_up_leaves_later_work_unimported(tmp_path: Path) -> None:
    env = {
        "AGENTD_HOME": str(tmp_path / "home"),
        "AGENTD_CONFIG_DIR": str(tmp_path / "config"),
        "AGENTD_API_KEY": "sk-test",
        "PATH": "/usr/bin:/bin",
    }
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, ",".join(NOT_RESIDENT)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""
