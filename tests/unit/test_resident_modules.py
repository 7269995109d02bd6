"""What the LSP daemon keeps resident after its warm-up (issue 20: RSS after
the warm-up <= 60 MB; the figure is in `bench/core_bench.py`, not here).

The warm-up (`agentd.warmup.Warmup`, built with the LSP front end's imports)
runs in a fresh interpreter exactly as the daemon runs it after `initialize`;
then its `sys.modules` must not hold what only later work needs: memory
extraction and its secret rules (first needed after a reply), MCP's SDK (only
with servers configured), the ACP front end, and httpx's command-line client.
Nor what the imports leave behind for nothing: attrs' copies of
lsprotocol's namespace in the globals of its generated methods, and the
source lines of those methods in `linecache` (`agentd.lsp.attrs_globals`,
`agentd.heap`).
"""

from __future__ import annotations

import json
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

# Both probes start the same way: the real LSP warm-up, memory on, to its end.
WARM_UP = """
import asyncio
from agentd.lsp.server import AgentdServer

async def main():
    server = AgentdServer()
    server.warmup.options = {"memory": {"enabled": True}}
    app = await server.warmup.wait()
    await app.aclose()

asyncio.run(main())
"""

SCRIPT = (
    WARM_UP
    + """
import sys
names = sys.argv[1].split(",")
loaded = [m for m, module in sys.modules.items() if module is not None]
print(",".join(n for n in names if any(m == n or m.startswith(n + ".") for m in loaded)))
"""
)


def _probe(tmp_path: Path, script: str, *args: str) -> str:
    """`script`'s output, run in a fresh interpreter with a home of its own."""
    env = {
        "AGENTD_HOME": str(tmp_path / "home"),
        "AGENTD_CONFIG_DIR": str(tmp_path / "config"),
        "AGENTD_API_KEY": "sk-test",
        "PATH": "/usr/bin:/bin",
    }
    out = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_the_lsp_warm_up_leaves_later_work_unimported(tmp_path: Path) -> None:
    out = _probe(tmp_path, SCRIPT, ",".join(NOT_RESIDENT))
    assert out.strip() == ""


# After the warm-up: the globals of every method attrs generated for an
# lsprotocol class, against the names its class's generated code loads; attrs' source lines in
# linecache; and the classes still working as pygls uses them (the converter's
# round trip, construction, equality, repr).
LEFTOVERS = (
    WARM_UP
    + """
import json, linecache, types
from agentd.lsp.protocol import agentd_converter

def loaded(code):
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= loaded(const)
    return names

from lsprotocol import types as lsp
extra = 0
methods = 0
for cls in vars(lsp).values():
    if not isinstance(cls, type):
        continue
    generated = [
        func
        for func in vars(cls).values()
        if isinstance(func, types.FunctionType)
        and func.__code__.co_filename.startswith("<attrs generated")
    ]
    # A class's generated methods share one globals dict.
    wanted = {"__builtins__"}.union(*(loaded(func.__code__) for func in generated))
    for func in generated:
        methods += 1
        extra += len(set(func.__globals__) - wanted)
converter = agentd_converter()
params = {"processId": 7, "rootUri": "file:///w", "capabilities": {"workspace": {}}}
init = converter.structure(params, lsp.InitializeParams)
position = lsp.Position(line=1, character=2)
print(json.dumps({
    "methods": methods,
    "extra_globals": extra,
    "attrs_source_lines": sum(1 for k in linecache.cache if k.startswith("<attrs generated")),
    "round_trip": init.root_uri == "file:///w"
    and converter.structure(converter.unstructure(init), lsp.InitializeParams) == init,
    "eq": position == lsp.Position(1, 2) and position != lsp.Position(2, 1),
    "repr": repr(lsp.Range(start=position, end=position)),
}))
"""
)


def test_the_lsp_warm_up_frees_what_attrs_kept_for_lsprotocol(tmp_path: Path) -> None:
    found = json.loads(_probe(tmp_path, LEFTOVERS))
    assert found["methods"] > 1000  # every class's __init__, __repr__, __eq__
    assert found["extra_globals"] == 0
    assert found["attrs_source_lines"] == 0
    assert found["round_trip"] is True
    assert found["eq"] is True
    assert found["repr"] == "1:2-1:2"
