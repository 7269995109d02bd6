"""Daemon tools: confinement to the workspace, results, truncation."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agentd.agent.tools import DaemonTools, client_tool_specs, truncate_result
from agentd.errors import PathOutsideWorkspace, ToolError
from agentd.paths import is_within, open_inside, resolve_inside


@pytest.fixture
def root(tmp_path: Path) -> Path:
    ws = tmp_path / "p"
    ws.mkdir()
    (ws / "a.txt").write_text("one\ntwo\nthree\n")
    (ws / "sub").mkdir()
    (ws / "sub" / "b.py").write_text("def find_me():\n    pass\n")
    evil = tmp_path / "p-evil"
    evil.mkdir()
    (evil / "secret.txt").write_text("secret")
    (tmp_path / "outside.txt").write_text("outside")
    return ws


def test_is_within_compares_components(tmp_path: Path) -> None:
    assert is_within(tmp_path / "p" / "x", tmp_path / "p")
    assert not is_within(tmp_path / "p-evil" / "x", tmp_path / "p")


@pytest.mark.parametrize(
    "path",
    ["../outside.txt", "../p-evil/secret.txt", "/etc/passwd", "sub/../../outside.txt", "a\x00b"],
)
def test_escapes_are_refused(root: Path, path: str) -> None:
    with pytest.raises(PathOutsideWorkspace):
        resolve_inside(root, path)


def test_symlink_pointing_out_is_refused(root: Path) -> None:
    (root / "link").symlink_to(root.parent / "outside.txt")
    with pytest.raises(PathOutsideWorkspace):
        DaemonTools(root).read_file("link")
    (root / "dirlink").symlink_to(root.parent / "p-evil")
    with pytest.raises(PathOutsideWorkspace):
        DaemonTools(root).list_dir("dirlink")


def test_symlink_inside_is_fine(root: Path) -> None:
    (root / "alias").symlink_to(root / "a.txt")
    assert "two" in DaemonTools(root).read_file("alias")


def test_descriptor_checked_after_open(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A swap between the check and the open: the opened fd points outside.
    real_open = os.open

    def swapped_open(path: str | os.PathLike[str], flags: int, *a: int) -> int:
        return real_open(root.parent / "outside.txt", flags & ~os.O_NOFOLLOW)

    monkeypatch.setattr("agentd.paths.os.open", swapped_open)
    with pytest.raises(PathOutsideWorkspace):
        open_inside(root, "a.txt")


def test_read_file_numbers_lines_and_slices(root: Path) -> None:
    tools = DaemonTools(root)
    assert tools.read_file("a.txt") == "1  one\n2  two\n3  three"
    assert tools.read_file("a.txt", offset=2, limit=1) == "2  two"
    with pytest.raises(ToolError):
        tools.read_file("sub")


def test_binary_refused(root: Path) -> None:
    (root / "bin").write_bytes(b"\x00\x01\x02")
    with pytest.raises(ToolError):
        DaemonTools(root).read_file("bin")


def test_list_and_search(root: Path) -> None:
    tools = DaemonTools(root)
    assert tools.list_dir(".") == "a.txt\nsub/"
    assert tools.search("FIND_ME") == "sub/b.py:1: def find_me():"
    assert tools.search("t[wh]", regex=True).count("a.txt") == 2
    assert tools.search("nothing here") == "no matches"
    with pytest.raises(ToolError):
        tools.search("(", regex=True)


async def test_run_dispatches_and_filters_unknown_arguments(root: Path) -> None:
    out = await DaemonTools(root).run("read_file", {"path": "a.txt", "invented": 1})
    assert out.startswith("1  one")
    with pytest.raises(ToolError):
        await DaemonTools(root).run("rm_rf", {})


def test_truncation_says_so() -> None:
    text = "x" * 5000
    cut = truncate_result(text, 1000)
    assert cut.startswith("x" * 1000) and "truncated: 5,000 characters" in cut
    assert truncate_result("short", 1000) == "short"


def test_client_tool_specs() -> None:
    specs = client_tool_specs(
        [
            "edit_file",
            "unknown",
            {"name": "open_url", "description": "Open a URL", "parameters": {"type": "object"}},
        ]
    )
    assert [s.name for s in specs] == ["edit_file", "open_url"]
