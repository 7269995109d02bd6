"""ACP `additionalDirectories`: folders beside `cwd` a session's tools may use,
end to end with the ACP package's client: the real daemon over stdio, the
bundled model server's scripted tool calls. Every message agentd sends is
checked against the ACP schema by the harness."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from acp import RequestError, text_block

from agentd.testing.daemon import daemon_env
from agentd.testing.model_server import ModelServer
from tests.acp.harness import EditorClient, connect_acp
from tests.acp.test_acp_e2e import main_requests, start, tool
from tests.acp.test_acp_sessions import bad_field

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio]


@pytest.fixture
def shared(tmp_path: Path) -> Path:
    """A second folder, outside the workspace, as an editor's other root."""
    root = tmp_path / "shared"
    (root / "lib").mkdir(parents=True)
    (root / "lib" / "util.py").write_text("SHARED_ANSWER = 7\n")
    return root


def last_tool_result(model_server: ModelServer) -> str:
    """The newest tool result the model was sent."""
    messages = main_requests(model_server)[-1]["body"]["messages"]
    return str([m for m in messages if m["role"] == "tool"][-1]["content"])


async def test_an_additional_root_is_advertised_read_searched_and_told_to_the_model(
    daemon: Any, editor: EditorClient, workspace: Path, shared: Path, model_server: ModelServer
) -> None:
    result = await start(daemon, fs=False)  # the daemon's own read_file
    caps = result.agent_capabilities.session_capabilities
    assert caps is not None and caps.additional_directories is not None
    new = await daemon.new_session(
        cwd=str(workspace), mcp_servers=[], additional_directories=[str(shared)]
    )
    sid = str(new.session_id)

    target = str(shared / "lib" / "util.py")
    await daemon.prompt(session_id=sid, prompt=tool("read_file", path=target))
    assert last_tool_result(model_server) == "1  SHARED_ANSWER = 7"
    system = main_requests(model_server)[0]["body"]["messages"][0]["content"]
    assert f"- {shared}\n" in system

    await daemon.prompt(session_id=sid, prompt=tool("search", query="SHARED", path=str(shared)))
    found = last_tool_result(model_server)
    assert found.startswith(f"(paths relative to {shared})\n")
    assert "lib/util.py" in found
    # Without a path, search stays in cwd (the workspace), as its description says.
    await daemon.prompt(session_id=sid, prompt=tool("search", query="SHARED_ANSWER"))
    assert "lib/util.py" not in last_tool_result(model_server)
    # A relative path is cwd's: the shared file is not found through it.
    await daemon.prompt(session_id=sid, prompt=tool("read_file", path="lib/util.py"))
    assert "SHARED_ANSWER" not in last_tool_result(model_server)


async def test_a_symlink_in_an_additional_root_pointing_out_is_refused(
    daemon: Any, workspace: Path, shared: Path, tmp_path: Path, model_server: ModelServer
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP SECRET\n")
    (shared / "leak.txt").symlink_to(secret)
    (shared / "out").symlink_to(tmp_path)
    await start(daemon, fs=False)
    new = await daemon.new_session(
        cwd=str(workspace), mcp_servers=[], additional_directories=[str(shared)]
    )
    sid = str(new.session_id)
    for path in (shared / "leak.txt", shared / "out" / "secret.txt"):
        await daemon.prompt(session_id=sid, prompt=tool("read_file", path=str(path)))
        refused = last_tool_result(model_server)
        assert "TOP SECRET" not in refused
        assert "outside the workspace roots" in refused


async def test_client_fs_reads_reach_additional_roots_and_nothing_else(
    daemon: Any, editor: EditorClient, workspace: Path, shared: Path, tmp_path: Path,
    model_server: ModelServer,
) -> None:  # fmt: skip
    await start(daemon)  # the editor's fs/read_text_file
    new = await daemon.new_session(
        cwd=str(workspace), mcp_servers=[], additional_directories=[str(shared)]
    )
    sid = str(new.session_id)
    target = str(shared / "lib" / "util.py")
    await daemon.prompt(session_id=sid, prompt=tool("read_file", path=target))
    (read,) = editor.requests("fs/read_text_file")
    assert read["params"]["path"] == target
    (tmp_path / "elsewhere.txt").write_text("no\n")
    await daemon.prompt(
        session_id=sid, prompt=tool("read_file", path=str(tmp_path / "elsewhere.txt"))
    )
    assert len(editor.requests("fs/read_text_file")) == 1  # refused before asking the editor
    assert "outside the workspace roots" in last_tool_result(model_server)


async def test_the_list_is_kept_listed_replaced_by_load_and_given_to_forks(
    editor: EditorClient, workspace: Path, shared: Path, tmp_path: Path, model_server: ModelServer
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "note.txt").write_text("OTHER ROOT\n")
    env = daemon_env(model_server.openai_base_url, tmp_path)
    async with connect_acp(editor, env, tmp_path / "stderr.log") as conn:
        await start(conn, fs=False)
        new = await conn.new_session(
            cwd=str(workspace),
            mcp_servers=[],
            # The cwd itself and a repeat (through a `..`) are dropped.
            additional_directories=[str(shared), str(workspace), f"{shared}/lib/.."],
        )
        sid = str(new.session_id)
        await conn.prompt(session_id=sid, prompt=[text_block("hello")])
        (listed,) = (await conn.list_sessions(cwd=str(workspace))).sessions
        assert listed.additional_directories == [str(shared)]
    assert editor.schema_problems == []

    # A second daemon: the list was kept with the session.
    again = EditorClient()
    async with connect_acp(again, env, tmp_path / "stderr.log") as conn:
        await start(conn, fs=False)
        (listed,) = (await conn.list_sessions(cwd=str(workspace))).sessions
        assert listed.additional_directories == [str(shared)]
        # A load that names another list: that one is the session's now.
        await conn.load_session(
            cwd=str(workspace), session_id=sid, mcp_servers=[], additional_directories=[str(other)]
        )
        await conn.prompt(session_id=sid, prompt=tool("read_file", path=str(other / "note.txt")))
        assert last_tool_result(model_server) == "1  OTHER ROOT"
        await conn.prompt(
            session_id=sid, prompt=tool("read_file", path=str(shared / "lib" / "util.py"))
        )
        assert "outside the workspace roots" in last_tool_result(model_server)
        (listed,) = (await conn.list_sessions(cwd=str(workspace))).sessions
        assert listed.additional_directories == [str(other)]

        # A fork has the request's list, not the source's.
        forked = await conn.fork_session(
            session_id=sid, cwd=str(workspace), mcp_servers=[], additional_directories=[str(shared)]
        )
        fork = str(forked.session_id)
        await conn.prompt(
            session_id=fork, prompt=tool("read_file", path=str(shared / "lib" / "util.py"))
        )
        assert last_tool_result(model_server) == "1  SHARED_ANSWER = 7"
        listing = {s.session_id: s for s in (await conn.list_sessions(cwd=str(workspace))).sessions}
        assert listing[fork].additional_directories == [str(shared)]
        assert listing[sid].additional_directories == [str(other)]

        # A resume without the list: the session has none (ACP's words), and
        # says so once it has written its next line.
        await conn.resume_session(cwd=str(workspace), session_id=sid, mcp_servers=[])
        await conn.prompt(session_id=sid, prompt=tool("read_file", path=str(other / "note.txt")))
        assert "outside the workspace" in last_tool_result(model_server)
        listing = {s.session_id: s for s in (await conn.list_sessions(cwd=str(workspace))).sessions}
        assert listing[sid].additional_directories is None
    assert again.schema_problems == []


def hostile_entries(tmp_path: Path) -> list[tuple[str, Any]]:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "plain.txt").write_text("x")
    return [
        ("relative", "shared"),
        ("missing", str(tmp_path / "nowhere")),
        ("a file", str(tmp_path / "plain.txt")),
        ("a FIFO", str(fifo)),
        ("a device", "/dev/null"),
        ("a lone surrogate", str(tmp_path) + "/\ud800"),
        ("a NUL", str(tmp_path) + "/a\x00b"),
        ("absurdly long", "/" + "a" * 100_000),
        ("not a string", 7),
    ]


async def test_hostile_entries_are_refused_naming_the_entry(
    daemon: Any, workspace: Path, shared: Path, tmp_path: Path
) -> None:
    await start(daemon)
    raw = daemon._conn  # the raw request: the ACP client would refuse some values itself
    for why, bad in hostile_entries(tmp_path):
        for method, extra in (
            ("session/new", {}),
            ("session/load", {"sessionId": "x"}),
            ("session/resume", {"sessionId": "x"}),
            ("session/fork", {"sessionId": "x"}),
        ):
            params = {
                "cwd": str(workspace),
                "mcpServers": [],
                "additionalDirectories": [str(shared), bad],
                **extra,
            }
            with pytest.raises(RequestError) as info:
                await raw.send_request(method, params)
            assert bad_field(info.value)["field"] == "additionalDirectories.1", (why, method)
    too_many = [str(shared)] * 65
    with pytest.raises(RequestError) as info:
        await raw.send_request(
            "session/new",
            {"cwd": str(workspace), "mcpServers": [], "additionalDirectories": too_many},
        )
    assert bad_field(info.value)["field"] == "additionalDirectories"
    # Null is the schema's "none", as omitted is; and the daemon still serves.
    made = await raw.send_request(
        "session/new", {"cwd": str(workspace), "mcpServers": [], "additionalDirectories": None}
    )
    assert made["sessionId"]


async def test_writes_never_reach_agentd_s_own_folders_through_a_root_holding_them(
    daemon: Any, editor: EditorClient, workspace: Path, tmp_path: Path, model_server: ModelServer
) -> None:
    """A root that holds `$AGENTD_HOME` and the config folder (a home folder
    added beside the workspace; here the test's folder holds both) lets the
    editor write anywhere in it but there: a transcript, a lock or the
    settings rewritten by a tool would change what the daemon does."""
    await start(daemon)
    new = await daemon.new_session(
        cwd=str(workspace), mcp_servers=[], additional_directories=[str(tmp_path)]
    )
    sid = str(new.session_id)
    home = tmp_path / "agentd-home"
    for target in (
        home / "live-sessions.lock",
        home / "projects" / "p" / "memory" / "note.md",
        tmp_path / "agentd-config" / "config.toml",
    ):
        for name, args in (
            ("write_file", {"content": "x"}),
            ("edit_file", {"old_text": "a", "new_text": "b"}),
        ):
            await daemon.prompt(session_id=sid, prompt=tool(name, path=str(target), **args))
            assert "agentd's own" in last_tool_result(model_server), (name, target)
    assert editor.writes == [] and editor.requests("session/request_permission") == []
    # Beside them, the root is the editor's to write in.
    beside = tmp_path / "notes.md"
    await daemon.prompt(session_id=sid, prompt=tool("write_file", path=str(beside), content="ok"))
    assert editor.writes == [(str(beside), "ok")]
