"""agentd's import directions, checked (docs/architecture.md draws the same picture).

A *unit* is a top-level module of `agentd` (`agentd.errors`) or a subpackage
with everything below it (`agentd.memory` holds `agentd.memory.extraction`).
Units are stacked in layers; a unit imports only itself and units of lower
layers, so every arrow between units runs one way (down) and no two units
import each other. Type-only imports (`if TYPE_CHECKING:`) and imports
inside functions count as much as any other: they are dependencies too.

    cli, __main__       argv -> serve / demo / model-server / memory subcommands
    demo                a whole session against the bundled model server
    lsp, acp            the two front ends (the wire)
    warmup              builds the App in a thread after `initialize` is answered
    app                 wires settings, provider, memory and the core together
    agent               sessions, the turn engine, recall prefetch, daemon tools
    mcp                 MCP servers: connections (the SDK), a session's MCP tools
    memory              the store, index, watcher, local recall, extraction
    config, session_files, nes   the settings model; forking and deleting
                        transcripts; next edit suggestions (documents, the prediction)
    providers, transcript, testing, vision   model access over HTTP; session
                        transcripts on disk; the model server and test/benchmark
                        plumbing; which models take images
    tasks, stdio, layout, paths, params, files, decode, answers, heap,
    image_billing, turn_ends, jsonenc   small shared pieces (turn_ends: where a stored prompt ended)
    agentd, messages, events, errors   the vocabulary: nothing of agentd imported

Within a unit, modules may import each other, but not in a circle at run time.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "agentd"
WIRE = ("pygls", "lsprotocol", "acp")

# Lowest first. A unit may import units of strictly lower layers (and itself).
LAYERS: list[set[str]] = [
    {"agentd", "agentd.messages", "agentd.events", "agentd.errors"},
    {
        "agentd.tasks",
        "agentd.stdio",
        "agentd.layout",
        "agentd.paths",
        "agentd.params",
        "agentd.files",
        "agentd.decode",
        "agentd.answers",
        "agentd.heap",
        "agentd.image_billing",
        "agentd.turn_ends",
        "agentd.jsonenc",
    },
    {"agentd.providers", "agentd.transcript", "agentd.testing", "agentd.vision"},
    {"agentd.config", "agentd.session_files", "agentd.nes"},
    {"agentd.memory"},
    {"agentd.agent"},
    {"agentd.mcp"},
    {"agentd.app"},
    {"agentd.warmup"},
    {"agentd.lsp", "agentd.acp"},
    {"agentd.demo"},
    {"agentd.cli"},
    {"agentd.__main__"},
]
LAYER = {unit: i for i, units in enumerate(LAYERS) for unit in units}

IMPORT = re.compile(r"^(\s*)(?:from\s+([\w.]+)\s+import\s+(.+)|import\s+([\w.]+))")
TYPE_CHECKING_BLOCK = re.compile(r"^(\s*)if TYPE_CHECKING:")


def module_name(path: Path) -> str:
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def unit_of(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "agentd"
    if (PKG / parts[1]).is_dir():
        return f"agentd.{parts[1]}"
    return ".".join(parts[:2])


def imports(path: Path) -> list[tuple[str, bool]]:
    """(imported module, at run time?) for each import in the file.

    A line scan rather than ast.parse: CPython 3.11's parser can raise
    SystemError ("recursion depth mismatch") when run inside a busy test process.
    `from agentd.x import y` counts as importing `agentd.x.y` when that is a module
    (and `agentd.x` only when it also takes a name that is not one).
    """
    out: list[tuple[str, bool]] = []
    type_only_indent: int | None = None
    for line in path.read_text(encoding="utf-8").splitlines():
        indent = len(line) - len(line.lstrip())
        if type_only_indent is not None and line.strip() and indent <= type_only_indent:
            type_only_indent = None
        guard = TYPE_CHECKING_BLOCK.match(line)
        if guard is not None:
            type_only_indent = len(guard.group(1))
            continue
        m = IMPORT.match(line)
        if m is None:
            continue
        runtime = type_only_indent is None
        if m.group(4):
            out.append((m.group(4), runtime))
            continue
        base = m.group(2)
        names = [n.split(" as ")[0].strip() for n in m.group(3).strip("() \\").split(",")]
        modules = [f"{base}.{n}" for n in names if n and _is_module(f"{base}.{n}")]
        out.extend((module, runtime) for module in modules)
        # A name that is not a module, or names on the next lines: the base itself.
        if not modules or len(modules) < len([n for n in names if n]):
            out.append((base, runtime))
    return out


def _is_module(name: str) -> bool:
    path = PKG.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def agentd_graph() -> dict[str, list[tuple[str, bool]]]:
    """Each agentd module -> the agentd modules it imports (and whether at run time)."""
    graph: dict[str, list[tuple[str, bool]]] = {}
    for path in sorted(PKG.rglob("*.py")):
        graph[module_name(path)] = [
            (name, runtime) for name, runtime in imports(path) if name.split(".")[0] == "agentd"
        ]
    return graph


def test_every_unit_has_a_layer() -> None:
    units = {unit_of(m) for m in agentd_graph()}
    assert units - LAYER.keys() == set(), "add the new unit to LAYERS (and docs/architecture.md)"


def test_imports_run_down_the_layers() -> None:
    offenders = []
    for module, targets in agentd_graph().items():
        unit = unit_of(module)
        for target, _ in targets:
            other = unit_of(target)
            if other != unit and LAYER[other] >= LAYER[unit]:
                offenders.append(f"{module} imports {target}")
    assert offenders == []


def test_the_vocabulary_imports_nothing_of_agentd() -> None:
    graph = agentd_graph()
    assert graph["agentd.messages"] == []
    assert graph["agentd.events"] == []
    assert graph["agentd.errors"] == []
    assert graph["agentd"] == []


def test_no_module_imports_itself_back_at_run_time() -> None:
    graph: dict[str, set[str]] = defaultdict(set)
    # Built once: rebuilt for every import it took minutes on a busy machine.
    full = agentd_graph()
    for module, targets in full.items():
        for target, runtime in targets:
            if runtime and target != module and target in full:
                graph[module].add(target)
    cycles = []
    for start in list(graph):
        stack, seen = [(start, [start])], set()
        while stack:
            node, trail = stack.pop()
            for nxt in graph.get(node, ()):
                # A package's __init__ importing its own modules is not a way back.
                if nxt == start and not start.startswith(f"{node}."):
                    cycles.append(" -> ".join([*trail, nxt]))
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*trail, nxt]))
    assert cycles == []


@pytest.mark.parametrize("package", ["agent", "memory", "providers", "mcp"])
def test_core_packages_do_not_import_the_wire(package: str) -> None:
    offenders = []
    for path in (PKG / package).rglob("*.py"):
        for name, _ in imports(path):
            top = name.split(".")[0]
            if top in WIRE or name.startswith(("agentd.lsp", "agentd.acp")):
                offenders.append(f"{path.relative_to(PKG)}: {name}")
    assert offenders == []


@pytest.mark.parametrize(
    "modules",
    [
        "agentd.cli, agentd.lsp.server, agentd.lsp.handlers",
        "agentd.cli, agentd.acp.server, agentd.acp.handlers",
    ],
)
def test_serving_starts_without_heavy_imports(modules: str) -> None:
    """Neither front end imports pydantic/httpx/the core before answering initialize."""
    import subprocess
    import sys

    code = (
        f"import sys, {modules};"
        "heavy = ('pydantic', 'httpx', 'agentd.app', 'agentd.memory', 'agentd.agent.core');"
        "print(','.join(m for m in heavy if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
