"""agentd's own folders reached through a root that holds them (a home folder
opened as the workspace), over both front ends (the real daemon over stdio,
raw messages): the daemon's tools must not read the transcripts, caches,
locks or settings there, the memory notes excepted; the editor's tools are
refused there before the editor is asked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentd.testing.daemon import agentd_home, daemon_env, memory_folder
from agentd.testing.model_server import ModelServer
from agentd.testing.raw_client import RawDaemon

pytestmark = pytest.mark.e2e

SECRET = "FENCE_SECRET_7c1"
NOTE = "---\nname: deploy\ndescription: how to deploy\ntype: project\n---\n\nFENCE_NOTE_2b9\n"


def _prompt(d: RawDaemon, msg_id: int, sid: str, text: str) -> None:
    if d.framing == "acp":
        blocks = [{"type": "text", "text": text}]
        d.request(msg_id, "session/prompt", {"sessionId": sid, "prompt": blocks})
    else:
        d.request(msg_id, "agent/prompt", {"sessionId": sid, "prompt": text})


def _tool_result(model_server: ModelServer) -> str:
    messages = model_server.requests("main")[-1]["body"]["messages"]
    return str([m for m in messages if m["role"] == "tool"][-1]["content"])


async def _run_tool(
    d: RawDaemon, model_server: ModelServer, msg_id: int, sid: str, tool: str, **args: Any
) -> str:
    _prompt(d, msg_id, sid, f"!tool {tool} {json.dumps(args)}")
    reply = await d.response(msg_id)
    assert reply["result"]["stopReason"] == "end_turn", reply
    return _tool_result(model_server)


@pytest.fixture
def home_folder(tmp_path: Path, workspace: Path) -> Path:
    """The test's folder as a user's home: agentd's data and config folders
    inside it, with a secret in every kind of file agentd keeps there, a
    memory note, and a plain file beside them."""
    home = agentd_home(tmp_path)
    note = memory_folder(workspace, tmp_path) / "deploy.md"
    note.write_text(NOTE)
    (note.parent / ".cursors.json").write_text(json.dumps({SECRET: 1}))
    sessions = note.parent.parent / "sessions"
    sessions.mkdir()
    (sessions / "old.jsonl").write_text(json.dumps({"type": "session", "k": SECRET}) + "\n")
    cache = home / "cache" / "memory-index"
    cache.mkdir(parents=True)
    (cache / "x.jsonl").write_text(SECRET + "\n")
    config = tmp_path / "agentd-config"
    config.mkdir()
    (config / "config.toml").write_text(f"# {SECRET}\n")
    (tmp_path / "plain.txt").write_text(f"{SECRET} in a plain file\n")
    # A symlink in the root to a transcript: resolved, it is still agentd's.
    (tmp_path / "link.jsonl").symlink_to(sessions / "old.jsonl")
    return tmp_path


@pytest.mark.parametrize("engine", ["ripgrep", "python"])
@pytest.mark.parametrize("acp", [False, True], ids=["lsp", "acp"])
async def test_the_tools_do_not_read_agentd_s_folders_inside_a_root(
    model_server: ModelServer, home_folder: Path, acp: bool, engine: str
) -> None:
    root = home_folder
    home = agentd_home(root)
    sessions = next(home.glob("projects/*/sessions"))
    (root / "agentd-config" / "config.toml").write_text(
        f'# {SECRET}\n[tools]\nsearchEngine = "{engine}"\n'
    )
    env = daemon_env(model_server.openai_base_url, root, AGENTD_MEMORY="off")
    d = await RawDaemon.spawn(env, acp=acp)
    try:
        sid = await d.open_session(root)
        n = iter(range(10, 100))
        for path, why in (
            (sessions / "old.jsonl", "agentd's own data folder"),
            (home / "cache" / "memory-index" / "x.jsonl", "agentd's own data folder"),
            (sessions.parent / "memory" / ".cursors.json", "agentd's own data folder"),
            (root / "agentd-config" / "config.toml", "agentd's own config folder"),
            (root / "link.jsonl", "agentd's own data folder"),
        ):
            for shown in (str(path), str(path.relative_to(root))):
                said = await _run_tool(d, model_server, next(n), sid, "read_file", path=shown)
                assert why in said and SECRET not in said, (shown, said)
        # The memory notes stay the user's to read through the tools.
        said = await _run_tool(
            d,
            model_server,
            next(n),
            sid,
            "read_file",
            path=str(sessions.parent / "memory/deploy.md"),
        )
        assert "FENCE_NOTE_2b9" in said, said
        # This session's own transcript holds the secret too (the prompts
        # name it): searched from the root, only the plain file matches.
        said = await _run_tool(
            d, model_server, next(n), sid, "search", query=SECRET, hidden=True, no_ignore=True
        )
        assert "plain.txt" in said, said
        for kept in ("sessions/", "old.jsonl", "x.jsonl", "config.toml", ".cursors"):
            assert kept not in said, (kept, said)
        assert "not shown: the tools do not read them" in said, said
        said = await _run_tool(
            d, model_server, next(n), sid, "search", query="FENCE_NOTE", hidden=True
        )
        assert "deploy.md" in said, said
        said = await _run_tool(
            d, model_server, next(n), sid, "glob", pattern="**/*", hidden=True, no_ignore=True
        )
        assert "deploy.md" in said and "plain.txt" in said, said
        for kept in ("sessions/", "old.jsonl", "x.jsonl", "config.toml", ".cursors"):
            assert kept not in said, (kept, said)
        # Links into them are listed without their target (a link to a
        # memory note keeps its own, as any other link does).
        (root / "cfg").symlink_to(root / "agentd-config", target_is_directory=True)
        (root / "note-link.md").symlink_to(sessions.parent / "memory/deploy.md")
        said = await _run_tool(d, model_server, next(n), sid, "list_dir", depth=6)
        assert "deploy.md" in said and "plain.txt" in said, said
        assert "link.jsonl -> [in agentd's own data folder" in said, said
        assert "cfg -> [in agentd's own config folder" in said, said
        assert f"note-link.md -> {sessions.parent / 'memory/deploy.md'}" in said, said
        tree = said.split("\n\n")[0]  # (the note below it names the folders)
        for kept in ("old.jsonl", "config.toml", ".cursors.json", "cache/", "sessions", "-config"):
            assert kept not in tree, (kept, said)
        # Started inside them: refused, naming why.
        for tool, args in (
            ("list_dir", {"path": str(home / "cache")}),
            ("search", {"query": "x", "path": str(sessions)}),
            ("glob", {"pattern": "*", "path": str(root / "agentd-config")}),
        ):
            said = await _run_tool(d, model_server, next(n), sid, tool, **args)
            assert "agentd's own" in said and SECRET not in said, (tool, said)
        # Started at the data folder: only the way to the notes is there.
        said = await _run_tool(
            d, model_server, next(n), sid, "search", query=SECRET, path=str(home), hidden=True
        )
        assert "No matches" in said, said
    finally:
        await d.close()


async def _answer_editor(d: RawDaemon, msg_id: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Read to the reply to `msg_id`, answering every request the daemon
    makes of the editor with an error (the turn goes on); those requests too."""
    asked: list[dict[str, Any]] = []
    while True:
        msg = await d.read_message()
        if "method" in msg and "id" in msg:
            asked.append(msg)
            error = {"code": -32603, "message": "the test editor runs nothing"}
            d.send({"jsonrpc": "2.0", "id": msg["id"], "error": error})
        elif "method" in msg:
            d.notifications.append(msg)
            update = msg["params"].get("update", {})
            if update.get("kind") == "tool_call" and update.get("executor") == "client":
                # An LSP editor asked to run it: answered, and counted.
                asked.append(msg)
                result = {"sessionId": msg["params"]["sessionId"], "content": "ran"}
                d.notify("agent/toolResult", {**result, "toolCallId": update["toolCallId"]})
        elif msg.get("id") == msg_id:
            return msg, asked


@pytest.mark.parametrize("acp", [False, True], ids=["lsp", "acp"])
async def test_the_editor_s_tools_are_refused_in_agentd_s_folders_before_it_is_asked(
    model_server: ModelServer, home_folder: Path, acp: bool
) -> None:
    root = home_folder
    home = agentd_home(root)
    transcript = next(home.glob("projects/*/sessions/old.jsonl"))
    note = next(home.glob("projects/*/memory/deploy.md"))
    env = daemon_env(model_server.openai_base_url, root, AGENTD_MEMORY="off")
    d = await RawDaemon.spawn(env, acp=acp)
    try:
        if acp:
            caps = {"fs": {"readTextFile": True, "writeTextFile": True}}
            d.request(0, "initialize", {"protocolVersion": 1, "clientCapabilities": caps})
            await d.response(0)
            d.request(1, "session/new", {"cwd": str(root), "mcpServers": []})
        else:
            await d.initialize({"clientTools": ["read_file", "write_file", "edit_file"]})
            d.request(1, "agent/newSession", {"workspaceRoot": str(root)})
        sid = (await d.response(1))["result"]["sessionId"]
        calls = [
            ("write_file", {"path": str(transcript), "content": "x"}, "agentd's own data folder"),
            (
                "write_file",
                {"path": "agentd-config/config.toml", "content": "x"},
                "agentd's own config folder",
            ),
            ("edit_file", {"path": str(note), "old_text": "a", "new_text": "b"}, "agentd's own"),
            ("read_file", {"path": str(transcript)}, "not read by the tools"),
            ("read_file", {"path": "link.jsonl"}, "not read by the tools"),
        ]
        for n, (tool, args, why) in enumerate(calls, start=10):
            _prompt(d, n, sid, f"!tool {tool} {json.dumps(args)}")
            reply, asked = await _answer_editor(d, n)
            assert reply["result"]["stopReason"] == "end_turn", reply
            assert asked == [], (tool, asked)
            said = _tool_result(model_server)
            assert why in said, (tool, said)
            assert SECRET not in said
        # Beside them the editor is asked as before (it refuses here).
        _prompt(d, 30, sid, '!tool read_file {"path": "plain.txt"}')
        reply, asked = await _answer_editor(d, 30)
        assert len(asked) == 1, asked
    finally:
        await d.close()


@pytest.mark.parametrize("acp", [False, True], ids=["lsp", "acp"])
async def test_run_command_is_refused_a_cwd_in_agentd_s_folders_before_it_is_asked(
    model_server: ModelServer, home_folder: Path, acp: bool
) -> None:
    """A command may write where it runs: a `cwd` in agentd's folders (the
    memory notes' folder included, as for writes) is refused in the daemon,
    naming why, before the user is asked to approve it or the editor to run
    it; elsewhere in the root the editor is asked as before."""
    root = home_folder
    home = agentd_home(root)
    sessions = next(home.glob("projects/*/sessions"))
    env = daemon_env(model_server.openai_base_url, root, AGENTD_MEMORY="off")
    d = await RawDaemon.spawn(env, acp=acp)
    try:
        if acp:
            caps = {"terminal": True}
            d.request(0, "initialize", {"protocolVersion": 1, "clientCapabilities": caps})
            await d.response(0)
            d.request(1, "session/new", {"cwd": str(root), "mcpServers": []})
        else:
            await d.initialize({"clientTools": ["run_command"]})
            d.request(1, "agent/newSession", {"workspaceRoot": str(root)})
        sid = (await d.response(1))["result"]["sessionId"]
        for n, (cwd, why) in enumerate(
            (
                (str(sessions), "agentd's own data folder"),
                ("agentd-config", "agentd's own config folder"),
                (str(sessions.parent / "memory"), "agentd's own data folder"),
                (str(home), "agentd's own data folder"),
            ),
            start=10,
        ):
            args = {"command": "cat *", "cwd": cwd}
            _prompt(d, n, sid, f"!tool run_command {json.dumps(args)}")
            reply, asked = await _answer_editor(d, n)
            assert reply["result"]["stopReason"] == "end_turn", reply
            assert asked == [], (cwd, asked)
            said = _tool_result(model_server)
            assert said.startswith("cwd: ") and why in said, (cwd, said)
            assert "commands do not run there" in said and SECRET not in said, said
        # Beside them (and with no cwd: the root) the editor is asked as before.
        for n, args in enumerate(({"command": "ls", "cwd": "."}, {"command": "ls"}), start=30):
            _prompt(d, n, sid, f"!tool run_command {json.dumps(args)}")
            reply, asked = await _answer_editor(d, n)
            assert len(asked) == 1, (args, asked)
    finally:
        await d.close()


@pytest.mark.parametrize("acp", [False, True], ids=["lsp", "acp"])
async def test_paths_that_read_two_ways_or_hold_a_lone_surrogate_reach_none_of_them(
    model_server: ModelServer, home_folder: Path, acp: bool
) -> None:
    """`lnk/../agentd-home/...` is the transcript to an editor that takes
    `..` away before it follows symlinks (VS Code's client) and nothing
    under the link's target to the kernel: the LSP editor used to be asked
    to read and write it. A lone surrogate (`\\ud83d/..`, `\\udc80/..`) in
    any tool's path or `cwd`, sent by the model, never leads into the
    folders either (the arguments are cleaned before the tools see them, and
    the fence refuses one that is not)."""
    root = home_folder
    home = agentd_home(root)
    transcript = next(home.glob("projects/*/sessions/old.jsonl"))
    below = transcript.relative_to(home)
    (root / "deep" / "er").mkdir(parents=True)
    (root / "lnk").symlink_to(root / "deep" / "er", target_is_directory=True)
    env = daemon_env(model_server.openai_base_url, root, AGENTD_MEMORY="off")
    d = await RawDaemon.spawn(env, acp=acp)
    try:
        if acp:
            caps = {"fs": {"readTextFile": True, "writeTextFile": True}, "terminal": True}
            d.request(0, "initialize", {"protocolVersion": 1, "clientCapabilities": caps})
            await d.response(0)
            d.request(1, "session/new", {"cwd": str(root), "mcpServers": []})
        else:
            tools = ["read_file", "write_file", "edit_file", "run_command"]
            await d.initialize({"clientTools": tools})
            d.request(1, "agent/newSession", {"workspaceRoot": str(root)})
        sid = (await d.response(1))["result"]["sessionId"]
        paths = [f"lnk/../agentd-home/{below}"]
        for half in ("\\ud83d", "\\udc80"):
            # The escape as text in the prompt: the model server decodes it
            # into a lone surrogate in the tool call's arguments.
            paths += [f"agentd-home/{half}/../{below}", f"{home}/{half}/../{below}"]
        n = iter(range(10, 200))
        for path in paths:
            folder = path.rsplit("/", 1)[0]
            editor_calls: tuple[tuple[str, dict[str, Any]], ...] = (
                ("read_file", {"path": path}),
                ("write_file", {"path": path, "content": "x"}),
                ("edit_file", {"path": path, "old_text": "a", "new_text": "b"}),
                ("run_command", {"command": "cat *", "cwd": folder}),
            )
            for tool, args in editor_calls:
                msg_id = next(n)
                text = json.dumps(args, ensure_ascii=False).replace("\\\\u", "\\u")
                _prompt(d, msg_id, sid, f"!tool {tool} {text}")
                reply, asked = await _answer_editor(d, msg_id)
                assert reply["result"]["stopReason"] == "end_turn", reply
                assert asked == [], (tool, path, asked)
                said = _tool_result(model_server)
                assert "agentd's own data folder" in said and SECRET not in said, (path, said)
            # The daemon's own tools, started there or reading it.
            daemon_calls: tuple[tuple[str, dict[str, Any]], ...] = (
                ("search", {"query": "k", "path": folder, "hidden": True, "no_ignore": True}),
                ("glob", {"pattern": "*", "path": folder}),
                ("list_dir", {"path": folder}),
            )
            for tool, args in daemon_calls:
                said = await _run_tool(d, model_server, next(n), sid, tool, **args)
                assert SECRET not in said and "old.jsonl" not in said, (tool, path, said)
        assert transcript.read_text() == json.dumps({"type": "session", "k": SECRET}) + "\n"
    finally:
        await d.close()
