"""The Python engine skips and finds exactly what ripgrep does.

Random trees with random `.gitignore`/`.ignore`/`.rgignore` files (negations,
anchors, folder-only lines, `**`, classes, alternations), hidden entries,
binary and oversized files, searched from the root and from subfolders (where
the ancestors' rules come in), with the hidden / no_ignore / glob / type
filters: `glob` and `search` give the same text on both engines, and plain
`rg` run directly lists the same files as the ripgrep engine.
"""

from __future__ import annotations

import random
import subprocess
from pathlib import Path
from typing import Any

import pytest

from agentd.agent.tools import DaemonTools, ToolConfig
from agentd.agent.tools.ripgrep import find_rg
from agentd.agent.tools.specs import SEARCH_MAX_FILE_BYTES

pytestmark = pytest.mark.skipif(find_rg() is None, reason="needs the ripgrep wheel")

NAMES = ["a", "b", "src", "build", "x", ".hid", "keep", "[c]", "d e", "x.y"]
EXTS = [".py", ".log", ".md", ".txt", "", ".min.js"]
LINES = [
    "*.log",
    "!keep.log",
    "build/",
    "/top.txt",
    "src/**/gen_*",
    "**/x",
    "a/**",
    "*.py",
    "!*.py",
    "[ab]*.md",
    "?.txt",
    "*.{md,txt}",
    "\\#hash",
    "# comment",
    "",
    "x.y/",
    "/b",
    "!/b/keep*",
    "d e",
    ".hid",
    "!.hid",
    "*.min.js",
    "src/*.py",
    "**",
    "!src/",
    "keep/**/",
]


def make_tree(rng: random.Random, root: Path) -> None:
    def fill(folder: Path, depth: int) -> None:
        for _ in range(rng.randint(1, 5)):
            name = rng.choice(NAMES)
            if depth < 3 and rng.random() < 0.35:
                sub = folder / name
                if not sub.exists():
                    sub.mkdir()
                    fill(sub, depth + 1)
            else:
                f = folder / (name + rng.choice(EXTS))
                if f.exists():
                    continue
                if rng.random() < 0.05:
                    f.write_bytes(b"needle\x00binary")
                else:
                    f.write_text(f"line one\nthe needle is here {f.name}\nNeedle again\n")
        for ignore in (".gitignore", ".ignore", ".rgignore"):
            if rng.random() < 0.3:
                (folder / ignore).write_text("\n".join(rng.sample(LINES, rng.randint(1, 5))))

    fill(root, 0)
    (root / "top.txt").write_text("needle at the top\n")
    (root / "big.txt").write_bytes(b"needle\n" + b"x" * SEARCH_MAX_FILE_BYTES)
    if rng.random() < 0.5:
        (root / ".git" / "info").mkdir(parents=True)
        (root / ".git" / "info" / "exclude").write_text(rng.choice(LINES) + "\n")
        (root / ".git" / "needle.txt").write_text("needle inside .git\n")


def folders(root: Path) -> list[str]:
    out = ["."]
    for p in sorted(root.rglob("*")):
        if p.is_dir() and ".git" not in p.parts:
            out.append(p.relative_to(root).as_posix())
    return out


@pytest.mark.parametrize("seed", range(40))
def test_engines_agree_on_random_trees(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    root = tmp_path / "w"
    root.mkdir()
    make_tree(rng, root)
    py = DaemonTools(root, ToolConfig(search_engine="python"))
    rg = DaemonTools(root, ToolConfig(search_engine="ripgrep"))
    for path in rng.sample(folders(root), min(3, len(folders(root)))):
        for flags in (
            {},
            {"hidden": True},
            {"no_ignore": True},
            {"hidden": True, "no_ignore": True},
        ):
            cases: list[tuple[str, dict[str, Any]]] = [
                ("glob", {"pattern": "**", "sort": "path", "max_results": 1000}),
                ("glob", {"pattern": "*.md", "sort": "path"}),
                ("search", {"query": "needle", "max_results": 500}),
                ("search", {"query": "NEEDLE", "case": "insensitive", "files_only": True}),
                ("search", {"query": "ne+dle (is|again)", "regex": True, "context": 1}),
                ("search", {"query": "needle", "glob": ["*.txt", "!top*"]}),
                ("search", {"query": "needle", "type": "md"}),
            ]
            for tool, args in cases:
                a = py.call(tool, path=path, **args, **flags)
                b = rg.call(tool, path=path, **args, **flags)
                assert a == b, (seed, path, tool, args, flags)


@pytest.mark.parametrize("seed", range(10))
def test_the_ripgrep_engine_lists_what_plain_rg_lists(tmp_path: Path, seed: int) -> None:
    """The floor of the benchmark is the same search: same files as plain `rg`."""
    rng = random.Random(1000 + seed)
    root = tmp_path / "w"
    root.mkdir()
    make_tree(rng, root)
    (root / ".git").mkdir(exist_ok=True)  # plain rg needs a repo for .gitignore
    rg = find_rg()
    assert rg is not None
    plain = subprocess.run(
        [rg, "--no-config", "--files", "--no-ignore-global", "-g", "!.git"],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split("\n")
    ours = DaemonTools(root, ToolConfig(search_engine="ripgrep")).call(
        "glob", pattern="**", sort="path", max_results=1000
    )
    expected = sorted(p for p in plain if p)
    assert ours.split("\n") == expected or (not expected and ours.startswith("No files"))
