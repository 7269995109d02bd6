"""Daemon tools: confinement to the workspace, results, truncation."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentd.agent.tools import (
    DaemonTools,
    ToolConfig,
    client_tool_specs,
    glob_files,
    search,
    truncate_result,
)
from agentd.agent.tools.fs import Root
from agentd.agent.tools.worker import StopToken
from agentd.errors import PathOutsideWorkspace, ToolError
from agentd.paths import is_within, pin_root, real_root, resolve_inside

ENGINES = ["python", "ripgrep"]


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


def test_a_root_stays_the_folder_it_resolved_to_first(root: Path, tmp_path: Path) -> None:
    link = tmp_path / "link"
    link.symlink_to(root)
    assert real_root(link) == root
    # Re-pointed: refused, neither followed nor kept quietly.
    link.unlink()
    link.symlink_to(tmp_path / "p-evil")
    with pytest.raises(PathOutsideWorkspace, match="now leads to"):
        resolve_inside(link, "secret.txt")
    # A resolved root replaced by a symlink: the same.
    assert pin_root(root) == root and DaemonTools(root).call("read_file", path="a.txt")
    root.rename(tmp_path / "moved")
    root.symlink_to(tmp_path / "p-evil")
    with pytest.raises(PathOutsideWorkspace, match="now leads to"):
        DaemonTools(root).call("read_file", path="secret.txt")
    # Named again by the editor (a new session there): it is that folder from now on.
    root.unlink()
    (tmp_path / "moved").rename(root)
    assert "two" in DaemonTools(pin_root(root)).call("read_file", path="a.txt")


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
        DaemonTools(root).call("read_file", path="link")
    (root / "dirlink").symlink_to(root.parent / "p-evil")
    with pytest.raises(PathOutsideWorkspace):
        DaemonTools(root).call("list_dir", path="dirlink")


def test_symlink_inside_is_fine(root: Path) -> None:
    (root / "alias").symlink_to(root / "a.txt")
    assert "two" in DaemonTools(root).call("read_file", path="alias")


def test_a_folder_swapped_for_a_symlink_after_the_check_is_not_followed(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The path is checked (resolve_inside), then `sub` becomes a symlink to a
    # folder outside before it is opened: the component-wise O_NOFOLLOW open refuses.
    def check_then_swap(r: Path, user_path: str) -> Path:
        resolved = resolve_inside(r, user_path)
        (root / "sub").rename(root / "sub.real")
        (root / "sub").symlink_to(root.parent / "p-evil")
        (root.parent / "p-evil" / "b.py").write_text("outside\n")
        return resolved

    monkeypatch.setattr("agentd.agent.tools.fs.resolve_inside", check_then_swap)
    with Root(root) as r, pytest.raises(PathOutsideWorkspace):
        r.open_file(r.parts("sub/b.py"))


def test_read_file_numbers_lines_and_slices(root: Path) -> None:
    tools = DaemonTools(root)
    assert tools.call("read_file", path="a.txt") == "1  one\n2  two\n3  three"
    assert tools.call("read_file", path="a.txt", offset=2, limit=1) == "2  two"
    with pytest.raises(ToolError):
        tools.call("read_file", path="sub")


def test_binary_refused(root: Path) -> None:
    (root / "bin").write_bytes(b"\x00\x01\x02")
    with pytest.raises(ToolError):
        DaemonTools(root).call("read_file", path="bin")


@pytest.mark.parametrize("engine", ENGINES)
def test_list_and_search(root: Path, engine: str) -> None:
    tools = DaemonTools(root, ToolConfig(search_engine=engine))
    assert tools.call("list_dir", path=".") == "sub/\na.txt  (14 B)"
    assert tools.call("search", query="find_me") == "sub/b.py\n1:def find_me():\n"
    # Smart case: an uppercase letter makes the query case-sensitive.
    assert tools.call("search", query="FIND_ME").startswith("No matches.")
    assert tools.call("search", query="FIND_ME", case="insensitive") == (
        "sub/b.py\n1:def find_me():\n"
    )
    assert tools.call("search", query="t[wh]", regex=True).count(":t") == 2
    assert tools.call("search", query="nothing here").startswith("No matches.")
    with pytest.raises(ToolError, match="invalid regex"):
        tools.call("search", query="(", regex=True)


async def test_run_dispatches_and_filters_unknown_arguments(root: Path) -> None:
    out = await DaemonTools(root).run("read_file", {"path": "a.txt", "invented": 1})
    assert out.text.startswith("1  one")
    assert out.locations[0].path == str(root / "a.txt")
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


def _agentd_folders(tmp_path: Path) -> tuple[Path, list[tuple[Path, str]]]:
    """A data folder with a memory note, its dot files and a transcript."""
    home = tmp_path / "home"
    memory = home / "projects" / "w-1" / "memory"
    memory.mkdir(parents=True)
    (memory / "deploy.md").write_text("NOTE\n")
    (memory / ".cursors.json").write_text("{}")
    (memory / "deploy.md.d").mkdir()
    (memory / "deploy.md.d" / "x.md").write_text("NESTED\n")
    (home / "projects" / "w-1" / "sessions").mkdir()
    (home / "projects" / "w-1" / "sessions" / "s.jsonl").write_text("TRANSCRIPT\n")
    return home, [(home, "data folder, $AGENTD_HOME"), (tmp_path / "cfg", "config folder")]


def test_a_root_inside_agentd_s_data_folder_reads_only_the_notes(tmp_path: Path) -> None:
    """The fence's shapes from below: a workspace opened at the memory folder,
    at a project's folder, at the sessions folder."""
    home, own = _agentd_folders(tmp_path)
    memory = home / "projects" / "w-1" / "memory"
    with Root(memory, own) as root:
        assert root.parts("deploy.md") == ("deploy.md",)
        for hidden in (".cursors.json", "deploy.md.d/x.md", "../sessions/s.jsonl"):
            with pytest.raises(PathOutsideWorkspace):
                root.parts(hidden)
    with Root(home / "projects" / "w-1", own) as root:
        assert root.parts("memory/deploy.md") == ("memory", "deploy.md")
        with pytest.raises(PathOutsideWorkspace, match="agentd's own data folder"):
            root.parts("sessions/s.jsonl")
    sessions = Root(home / "projects" / "w-1" / "sessions", own)
    with sessions, pytest.raises(PathOutsideWorkspace, match="only its memory notes"):
        sessions.parts(".")


@pytest.mark.parametrize("engine", ENGINES)
def test_walks_leave_agentd_s_folders_out_but_the_notes(tmp_path: Path, engine: str) -> None:
    _, own = _agentd_folders(tmp_path)
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "config.toml").write_text("# SETTINGS\n")
    (tmp_path / "plain.md").write_text("NOTE-like\n")
    root = Root(tmp_path, own)
    config = ToolConfig(search_engine=engine)
    try:
        args = {"pattern": "**/*", "hidden": True, "no_ignore": True, "sort": "path"}
        found = glob_files.run(root, args, config, StopToken(20)).text
        assert found.splitlines()[:2] == ["home/projects/w-1/memory/deploy.md", "plain.md"]
        assert "not shown: the tools do not read them" in found
        for query in ("TRANSCRIPT", "NESTED", "SETTINGS"):
            said = search.run(root, {"query": query, "hidden": True}, config, StopToken(20)).text
            assert said.startswith("No matches"), (query, said)
        said = search.run(root, {"query": "NOTE"}, config, StopToken(20)).text
        assert "home/projects/w-1/memory/deploy.md" in said and "plain.md" in said
    finally:
        root.close()
