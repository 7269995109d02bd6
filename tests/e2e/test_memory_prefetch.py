"""Recall prefetch over the real daemon: never waited on, delivered at the user
query or at the next tool result, aborted with its prompt."""

from __future__ import annotations

import asyncio
import functools
import json
from pathlib import Path
from typing import Any

import pytest
from pygls.exceptions import JsonRpcException

from agentd.layout import memory_dir
from agentd.testing.daemon import agentd_home, daemon_command, daemon_env, memory_folder
from agentd.testing.model_server import ModelServer
from tests.lsp_client import AgentdClient, start_client

pytestmark = pytest.mark.e2e


# For tests whose outcome depends on when the main request counts as sent: the
# model server of tests/conftest.py, once sending a stream's headers at once and
# once holding them until the first token (as several OpenAI-compatible servers
# and proxies do).
both_servers = pytest.mark.parametrize(
    "model_server", [False, True], ids=["headers-at-once", "headers-held"], indirect=True
)


def disconnected(request_id: Any, event: dict[str, Any]) -> bool:
    """A model server log predicate: the client left request `request_id`'s stream."""
    return bool(event["type"] == "disconnect" and event["id"] == request_id)


def write_topic(
    folder: Path, name: str, description: str, body: str, kind: str = "project"
) -> Path:
    path = folder / f"{name.lower().replace(' ', '-')}.md"
    path.write_text(f"---\nname: {name}\ndescription: {description}\ntype: {kind}\n---\n\n{body}\n")
    return path


def memory_updates(client: AgentdClient, sid: str) -> list[dict[str, Any]]:
    return [
        u["update"]
        for u in client.updates
        if u["sessionId"] == sid and u["update"]["kind"] == "memory"
    ]


def user_contents(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["body"]["messages"] if m["role"] == "user"]


@pytest.fixture
def topics(tmp_path: Path, workspace: Path) -> dict[str, Path]:
    folder = memory_folder(workspace, tmp_path)
    return {
        "deploy": write_topic(
            folder,
            "Deploy checklist",
            "How we ship releases to production",
            "Run the smoke tests, then tag the release and deploy with make ship.",
        ),
        "style": write_topic(
            folder,
            "Answer style",
            "The user likes terse answers",
            "Keep replies short; no summaries at the end.",
            kind="user",
        ),
        "db": write_topic(
            folder,
            "Database notes",
            "Postgres connection pooling",
            "Pool size is 20 per service; pgbouncer runs in transaction mode.",
        ),
    }


async def new_memory_client(
    model_server: ModelServer, tmp_path: Path, **memory: Any
) -> AgentdClient:
    return await start_client(
        daemon_env(model_server.openai_base_url, tmp_path),
        {"clientTools": ["run_command"], "memory": memory}
        if memory
        else {"clientTools": ["run_command"]},
    )


@both_servers
async def test_local_tier_delivers_at_the_user_query(
    model_server: ModelServer, tmp_path: Path, workspace: Path, topics: dict[str, Path]
) -> None:
    model_server.set_latency("recall", 5.0)  # the model tier is slow; nothing waits for it
    # A reply that streams for a while, so the side query is out before the prompt ends.
    model_server.enqueue({"chunks": ["Run ", "make ", "ship."], "chunkDelay": 0.2})
    c = await new_memory_client(model_server, tmp_path)
    try:
        sid = await c.new_session(workspace)
        await c.request("memory/status", {"workspaceRoot": str(workspace)})  # index ready
        result = await c.prompt(sid, "how do we deploy a release to production?")
        assert result["stopReason"] == "end_turn"
        (delivery,) = memory_updates(c, sid)
        assert delivery == {
            "kind": "memory",
            "point": "user_query",
            "tier": "local",
            "docs": [str(topics["deploy"])],
        }
        first = model_server.requests("main")[0]
        content = user_contents(first)[-1]
        # Memory goes first in the user message, as a reminder presenting it as data.
        assert content.startswith("<system-reminder>")
        assert "make ship" in content
        assert content.rstrip().endswith("how do we deploy a release to production?")
        # No tool calls: the slow side query was aborted at the prompt's end.
        recall = await model_server.wait_for(
            lambda e: e["type"] == "request" and e["purpose"] == "recall"
        )
        await model_server.wait_for(lambda e: e["type"] == "disconnect" and e["id"] == recall["id"])
    finally:
        await c.lsp.shutdown_session()


@both_servers
async def test_side_query_starts_once_the_main_request_is_out(
    model_server: ModelServer, tmp_path: Path, workspace: Path, topics: dict[str, Path]
) -> None:
    """The recall side query goes out once the main request's body is written,
    not when its response starts: with the headers held until a first token
    that is 600 s away, the side query still reaches the server, after the
    main request, while the main request waits for its first token."""
    model_server.enqueue({"text": "late", "ttft": 600})
    c = await new_memory_client(model_server, tmp_path)
    try:
        sid = await c.new_session(workspace)
        await c.request("memory/status", {"workspaceRoot": str(workspace)})
        task = asyncio.ensure_future(c.prompt(sid, "how do we deploy a release?", msg_id="s1"))
        recall = await model_server.wait_for(
            lambda e: e["type"] == "request" and e["purpose"] == "recall"
        )
        (main,) = model_server.requests("main")
        assert main["id"] < recall["id"]
        assert not [
            e for e in model_server.log if e["type"] == "first_chunk" and e["id"] == main["id"]
        ]
        c.cancel("s1")
        with pytest.raises(JsonRpcException):
            await task
        await model_server.wait_for(lambda e: e["type"] == "disconnect" and e["id"] == main["id"])
    finally:
        await c.lsp.shutdown_session()


@both_servers
async def test_side_query_never_reaches_the_server_before_the_main_request(
    model_server: ModelServer, tmp_path: Path, workspace: Path, topics: dict[str, Path]
) -> None:
    """Prompts of growing size (up to a main request body of about 1 MB): each
    prompt's recall request is logged by the server after its main request."""
    c = await new_memory_client(model_server, tmp_path)
    try:
        await c.request("memory/status", {"workspaceRoot": str(workspace)})
        for i, size in enumerate((0, 10_000, 100_000, 1_000_000)):
            marker = f"[n{i}]"
            # A slow first token keeps the prompt open until its side query is out.
            model_server.add_rule(marker, {"text": "done", "ttft": 0.3}, times=1)
            sid = await c.new_session(workspace)
            await c.prompt(sid, f"deploy the release {marker} " + "x" * size)
            mains = [r for r in model_server.requests("main") if marker in str(r["body"])]
            recalls = [r for r in model_server.requests("recall") if marker in str(r["body"])]
            assert len(mains) == 1 and len(recalls) == 1, size
            assert mains[0]["id"] < recalls[0]["id"], size
    finally:
        await c.lsp.shutdown_session()


@both_servers
async def test_model_tier_arrives_after_tool_results(
    model_server: ModelServer, tmp_path: Path, workspace: Path, topics: dict[str, Path]
) -> None:
    # The model tier picks a doc that shares no word with the prompt.
    model_server.enqueue(
        {
            "toolCalls": [
                {"name": "select_memories", "arguments": {"paths": [str(topics["style"])]}}
            ],
            "ttft": 0.3,
        },
        purpose="recall",
    )
    model_server.enqueue(
        {"toolCalls": [{"id": "r1", "name": "run_command", "arguments": {"command": "make"}}]}
    )
    c = await new_memory_client(model_server, tmp_path)

    async def run_after_recall(update: dict[str, Any]) -> tuple[str, bool]:
        # The editor answers only once the daemon reports the model tier settled,
        # so the delivery point is deterministic: the first tool result after it.
        while True:
            status = await c.request("memory/status", {"workspaceRoot": str(workspace)})
            if any(h["tier"] == "model" and h["settled"] for h in status["prefetch"]):
                return ("build ok", False)
            await model_server.wait_for(lambda e: e["type"] == "complete")

    c.tool_handler = run_after_recall
    try:
        sid = await c.new_session(workspace)
        await c.request("memory/status", {"workspaceRoot": str(workspace)})
        await c.prompt(sid, "please build it")
        deliveries = memory_updates(c, sid)
        assert deliveries == [
            {
                "kind": "memory",
                "point": "tool_result",
                "tier": "model",
                "docs": [str(topics["style"])],
            }
        ]
        second = model_server.requests("main")[1]["body"]["messages"]
        # OpenAI order: the tool message right after the assistant's calls, then the reminder.
        assert second[-3]["role"] == "assistant" and second[-3]["tool_calls"]
        assert second[-2] == {"role": "tool", "tool_call_id": "r1", "content": "build ok"}
        assert second[-1]["role"] == "user" and "terse answers" in second[-1]["content"]
        recall = model_server.requests("recall")[0]
        assert recall["headers"]["x-agentd-purpose"] == "recall"
        assert recall["body"]["tool_choice"]["function"]["name"] == "select_memories"
    finally:
        await c.lsp.shutdown_session()


async def test_surfaced_doc_is_not_delivered_again(
    model_server: ModelServer, tmp_path: Path, workspace: Path, topics: dict[str, Path]
) -> None:
    c = await new_memory_client(model_server, tmp_path, modelTier=False)
    try:
        sid = await c.new_session(workspace)
        await c.request("memory/status", {"workspaceRoot": str(workspace)})
        await c.prompt(sid, "deploy the release")
        await c.prompt(sid, "deploy the release again")
        assert [d["docs"] for d in memory_updates(c, sid)] == [[str(topics["deploy"])]]
        # A new session starts with nothing surfaced.
        sid2 = await c.new_session(workspace)
        await c.prompt(sid2, "deploy the release")
        assert len(memory_updates(c, sid2)) == 1
        assert model_server.requests("recall") == []  # model tier off: no side query at all
    finally:
        await c.lsp.shutdown_session()


async def test_memory_disabled_means_no_side_query(
    model_server: ModelServer, tmp_path: Path, workspace: Path, topics: dict[str, Path]
) -> None:
    c = await new_memory_client(model_server, tmp_path, enabled=False)
    try:
        sid = await c.new_session(workspace)
        await c.prompt(sid, "deploy the release")
        assert memory_updates(c, sid) == []
        assert model_server.requests("recall") == []
        # No memory reminder (the date's is there: it is no memory).
        assert "<memory " not in user_contents(model_server.requests("main")[0])[-1]
    finally:
        await c.lsp.shutdown_session()


@both_servers
async def test_cancel_closes_the_side_query(
    model_server: ModelServer, tmp_path: Path, workspace: Path, topics: dict[str, Path]
) -> None:
    model_server.set_latency("recall", 30.0)
    model_server.enqueue({"chunks": ["x "] * 100, "chunkDelay": 0.05})
    c = await new_memory_client(model_server, tmp_path)
    try:
        sid = await c.new_session(workspace)
        task = asyncio.ensure_future(c.prompt(sid, "deploy now", msg_id="c1"))
        recall = await model_server.wait_for(
            lambda e: e["type"] == "request" and e["purpose"] == "recall"
        )
        await c.wait_for_update(lambda u: u["update"]["kind"] == "message_chunk")
        c.cancel("c1")
        with pytest.raises(JsonRpcException):
            await task
        await model_server.wait_for(lambda e: e["type"] == "disconnect" and e["id"] == recall["id"])
        status = await c.request("memory/status", {"workspaceRoot": str(workspace)})
        assert status["deliveries"].get("aborted.cancelled.model") == 1
        assert not any(k.endswith(".failed") for k in status["deliveries"])
    finally:
        await c.lsp.shutdown_session()


@both_servers
async def test_second_prompt_and_reset_abort_unsettled_side_queries(
    model_server: ModelServer, tmp_path: Path, workspace: Path, topics: dict[str, Path]
) -> None:
    model_server.set_latency("recall", 30.0)
    for _ in range(2):
        model_server.enqueue({"chunks": ["a ", "b ", "c"], "chunkDelay": 0.2})
    c = await new_memory_client(model_server, tmp_path)
    try:
        sid = await c.new_session(workspace)
        await c.prompt(sid, "first deploy")
        await c.prompt(sid, "second deploy")
        await c.request("agent/resetSession", {"sessionId": sid})
        recalls = model_server.requests("recall")
        assert len(recalls) == 2
        for r in recalls:
            await model_server.wait_for(functools.partial(disconnected, r["id"]))
    finally:
        await c.lsp.shutdown_session()


async def test_memory_requests_and_watcher(
    model_server: ModelServer, tmp_path: Path, workspace: Path, topics: dict[str, Path]
) -> None:
    c = await new_memory_client(model_server, tmp_path)
    try:
        root = str(workspace)
        listed = await c.request("memory/list", {"workspaceRoot": root})
        assert {d["name"] for d in listed["docs"]} == {
            "Deploy checklist",
            "Answer style",
            "Database notes",
        }
        found = await c.request("memory/recall", {"workspaceRoot": root, "query": "pgbouncer pool"})
        assert [d["path"] for d in found["docs"]] == [str(topics["db"])]
        assert found["tier"] == "local"
        nothing = await c.request(
            "memory/recall", {"workspaceRoot": root, "query": "quantum banana"}
        )
        assert nothing["docs"] == []
        # An edit on disk shows in the next recall, with a memory/changed notification.
        topics["db"].write_text(
            "---\nname: Database notes\ndescription: Postgres\ntype: project\n---\n"
            "Use quantum bananas.\n"
        )
        await c.wait_for_memory_changed(str(topics["db"]))
        found = await c.request("memory/recall", {"workspaceRoot": root, "query": "quantum banana"})
        assert [d["path"] for d in found["docs"]] == [str(topics["db"])]
        topics["db"].unlink()
        await c.wait_for_memory_changed(str(topics["db"]), count=2)
        found = await c.request("memory/recall", {"workspaceRoot": root, "query": "quantum banana"})
        assert found["docs"] == []
        status = await c.request("memory/status", {"workspaceRoot": root})
        assert status["docCount"] == 2 and status["watcher"] == "running"
    finally:
        await c.lsp.shutdown_session()


async def _wait_model_settled(c: AgentdClient, model_server: ModelServer, root: Path) -> None:
    while True:
        status = await c.request("memory/status", {"workspaceRoot": str(root)})
        if any(h["tier"] == "model" and h["settled"] for h in status["prefetch"]):
            return
        await model_server.wait_for(lambda e: e["type"] == "complete")


@both_servers
async def test_anthropic_order_tool_results_then_memory(
    model_server: ModelServer, tmp_path: Path, workspace: Path, topics: dict[str, Path]
) -> None:
    model_server.enqueue(
        {
            "toolCalls": [
                {"name": "select_memories", "arguments": {"paths": [str(topics["style"])]}}
            ]
        },
        purpose="recall",
    )
    model_server.enqueue(
        {"toolCalls": [{"id": "tu1", "name": "run_command", "arguments": {"command": "make"}}]}
    )
    env = daemon_env(
        model_server.openai_base_url,
        tmp_path,
        AGENTD_PROVIDER="anthropic",
        AGENTD_BASE_URL=model_server.base_url,
    )
    c = await start_client(env, {"clientTools": ["run_command"]})

    async def answer(update: dict[str, Any]) -> tuple[str, bool]:
        await _wait_model_settled(c, model_server, workspace)
        return ("built", False)

    c.tool_handler = answer
    try:
        sid = await c.new_session(workspace)
        await c.request("memory/status", {"workspaceRoot": str(workspace)})
        await c.prompt(sid, "please build it")
        assert [d["tier"] for d in memory_updates(c, sid)] == ["model"]
        last = model_server.requests("main")[1]["body"]["messages"][-1]
        assert last["role"] == "user"
        kinds = [block["type"] for block in last["content"]]
        # Anthropic requires the tool_result blocks first; the reminder follows.
        assert kinds == ["tool_result", "text"]
        assert last["content"][0]["tool_use_id"] == "tu1"
        assert "terse answers" in last["content"][1]["text"]
    finally:
        await c.lsp.shutdown_session()


@both_servers
async def test_slow_side_query_arrives_at_a_later_tool_result(
    model_server: ModelServer, tmp_path: Path, workspace: Path, topics: dict[str, Path]
) -> None:
    """A 3 s side query with several tool steps: no hard timeout, delivered at the
    first tool-result point after it settles, exactly once."""
    model_server.set_latency("recall", 3.0)
    model_server.set_default_arguments("select_memories", {"paths": [str(topics["style"])]})
    for i in range(3):
        model_server.enqueue(
            {"toolCalls": [{"id": f"s{i}", "name": "run_command", "arguments": {"command": "x"}}]}
        )
    c = await new_memory_client(model_server, tmp_path)
    answered = 0

    async def answer(update: dict[str, Any]) -> tuple[str, bool]:
        nonlocal answered
        answered += 1
        if answered == 3:  # the last step waits until the side query has answered
            await _wait_model_settled(c, model_server, workspace)
        return ("ok", False)

    c.tool_handler = answer
    try:
        sid = await c.new_session(workspace)
        await c.request("memory/status", {"workspaceRoot": str(workspace)})
        await c.prompt(sid, "do the steps")
        (delivery,) = memory_updates(c, sid)
        assert delivery["point"] == "tool_result" and delivery["tier"] == "model"
        carrying = [
            i
            for i, r in enumerate(model_server.requests("main"))
            if "terse answers" in (r["body"]["messages"][-1].get("content") or "")
        ]
        assert len(carrying) == 1 and 1 <= carrying[0] <= 3
        recall = model_server.requests("recall")[0]
        assert not any(
            e["type"] == "disconnect" and e["id"] == recall["id"] for e in model_server.log
        )
    finally:
        await c.lsp.shutdown_session()


async def test_model_tier_delivers_what_no_lexical_tier_can(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    """The three `semantic-no-lexical` cases of qwen-code's eval share no word
    with their note: the local tier recalls nothing for them, the side query
    shows the model every note's header, and the note the model picks arrives
    at the tool-result point, after the tool results."""
    import json

    eval_path = Path(__file__).resolve().parents[1] / "data" / "qwen-code-recall-eval.json"
    data = json.loads(eval_path.read_text(encoding="utf-8"))
    folder = memory_folder(workspace, tmp_path)
    paths = {}
    for d in data["docs"]:
        paths[d["id"]] = folder / f"{d['id']}.md"
        front = {"name": d["title"], "description": d["description"], "type": d["type"]}
        # A JSON string is a valid YAML scalar.
        head = "".join(f"{k}: {json.dumps(v, ensure_ascii=False)}\n" for k, v in front.items())
        paths[d["id"]].write_text(f"---\n{head}---\n{d['body']}\n", encoding="utf-8")
    cases = [c for c in data["cases"] if c["category"] == "semantic-no-lexical"]
    assert len(cases) == 3
    for case in cases:
        (target,) = case["relevantIds"]
        # The bundled server stands in for the fast model's judgement.
        reply = {
            "toolCalls": [{"name": "select_memories", "arguments": {"paths": [str(paths[target])]}}]
        }
        model_server.add_rule(case["query"], reply, purpose="recall", times=1)
        model_server.add_rule(
            case["query"],
            {"toolCalls": [{"name": "run_command", "arguments": {"command": "ls"}}]},
            times=1,
        )
    c = await new_memory_client(model_server, tmp_path)

    async def run_after_recall(update: dict[str, Any]) -> tuple[str, bool]:
        await _wait_model_settled(c, model_server, workspace)
        return ("ok", False)

    c.tool_handler = run_after_recall
    try:
        status = await c.request("memory/status", {"workspaceRoot": str(workspace)})
        assert status["docCount"] == len(data["docs"])
        for case in cases:
            (target,) = case["relevantIds"]
            doc = next(d for d in data["docs"] if d["id"] == target)
            sid = await c.new_session(workspace)
            result = await c.prompt(sid, case["query"])
            assert result["stopReason"] == "end_turn"
            assert memory_updates(c, sid) == [
                {
                    "kind": "memory",
                    "point": "tool_result",
                    "tier": "model",
                    "docs": [str(paths[target])],
                }
            ], case["query"]
            recall = next(
                r
                for r in model_server.requests("recall")
                if case["query"] in r["body"]["messages"][-1]["content"]
            )
            shown = recall["body"]["messages"][-1]["content"]
            assert all(str(p) in shown for p in paths.values())
            mains = [
                r
                for r in model_server.requests("main")
                if case["query"] in str(r["body"]["messages"])
            ]
            assert len(mains) == 2
            assert "<memory " not in user_contents(mains[0])[-1]  # no local recall
            last = mains[1]["body"]["messages"]
            assert last[-2]["role"] == "tool" and last[-1]["role"] == "user"
            assert doc["body"] in last[-1]["content"]
    finally:
        await c.lsp.shutdown_session()


async def test_initial_indexing_of_a_large_folder_reports_progress(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    from lsprotocol import types

    folder = memory_folder(workspace, tmp_path)
    for i in range(250):
        write_topic(folder, f"Note {i}", f"Fact number {i}", f"Body of note {i} about topic {i}.")
    config_env = daemon_env(model_server.openai_base_url, tmp_path)
    from pytest_lsp import ClientServerConfig, LanguageClient

    config = ClientServerConfig(server_command=daemon_command(), server_env=config_env)
    lsp = await config.start()
    assert isinstance(lsp, LanguageClient)
    try:
        await lsp.initialize_session(
            types.InitializeParams(
                capabilities=types.ClientCapabilities(
                    window=types.WindowClientCapabilities(work_done_progress=True)
                ),
            )
        )
        first = asyncio.ensure_future(lsp.wait_for_notification("$/progress"))
        sid = await lsp.protocol.send_request_async(  # type: ignore[no-untyped-call]
            "agent/newSession", {"workspaceRoot": str(workspace)}
        )
        assert sid is not None
        await asyncio.wait_for(first, 20)
        while not any(
            any(getattr(v, "kind", "") == "end" for v in values)
            for values in lsp.progress_reports.values()
        ):
            await asyncio.wait_for(lsp.wait_for_notification("$/progress"), 20)
        (reports,) = lsp.progress_reports.values()
        # pytest-lsp types them as ProgressParams; they are the progress values.
        values: list[Any] = list(reports)
        assert values[0].kind == "begin" and "indexing memory" in values[0].title
        assert values[-1].kind == "end"
    finally:
        await lsp.shutdown_session()


def write_filler(folder: Path, n: int) -> None:
    for i in range(n):
        write_topic(
            folder,
            f"Filler note {i}",
            f"Unrelated notes about subsystem {i}",
            f"Subsystem {i} keeps its own counters; nothing here is about shipping.",
        )


@pytest.mark.parametrize("notes", [3, 100])
async def test_a_prompt_sent_the_instant_its_session_exists_gets_the_local_tier(
    model_server: ModelServer, tmp_path: Path, workspace: Path, topics: dict[str, Path], notes: int
) -> None:
    """The project's first index is built when the session is created; a prompt
    written the moment the session reply is read must still find the matching
    note in its first model request (100 notes: indexed in a worker thread)."""
    write_filler(memory_folder(workspace, tmp_path), notes - len(topics))
    # A bound no machine reaches: what is tested is that the prompt waits for
    # the first index, not how fast this machine builds it.
    c = await new_memory_client(model_server, tmp_path, modelTier=False, firstIndexWait=60)
    try:
        sid = await c.new_session(workspace)
        await c.prompt(sid, "how do we deploy a release to production?")
        first = model_server.requests("main")[0]
        content = user_contents(first)[-1]
        assert content.startswith("<system-reminder>") and "make ship" in content
        (delivery,) = memory_updates(c, sid)
        assert (delivery["point"], delivery["docs"]) == ("user_query", [str(topics["deploy"])])
    finally:
        await c.lsp.shutdown_session()


async def test_initialize_with_roots_indexes_their_memory_before_any_session(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    """A root named by `initialize` whose memory folder exists is indexed as soon
    as the daemon is warm, before any session: its progress starts with no
    session created. A root agentd never saw gets no memory folder."""
    from lsprotocol import types
    from pytest_lsp import ClientServerConfig, LanguageClient

    folder = memory_folder(workspace, tmp_path)
    for i in range(250):
        write_topic(folder, f"Note {i}", f"Fact number {i}", f"Body of note {i} about topic {i}.")
    unseen = tmp_path / "unseen-project"
    unseen.mkdir()
    env = daemon_env(model_server.openai_base_url, tmp_path)
    lsp = await ClientServerConfig(server_command=daemon_command(), server_env=env).start()
    assert isinstance(lsp, LanguageClient)
    try:
        first = asyncio.ensure_future(lsp.wait_for_notification("$/progress"))
        await lsp.initialize_session(
            types.InitializeParams(
                capabilities=types.ClientCapabilities(
                    window=types.WindowClientCapabilities(work_done_progress=True)
                ),
                workspace_folders=[
                    types.WorkspaceFolder(uri=workspace.as_uri(), name="ws"),
                    types.WorkspaceFolder(uri=unseen.as_uri(), name="unseen"),
                ],
            )
        )
        await asyncio.wait_for(first, 20)
        (values,) = lsp.progress_reports.values()
        begin: Any = next(iter(values))
        assert begin.kind == "begin" and "indexing memory" in begin.title
        status = await lsp.protocol.send_request_async(  # type: ignore[no-untyped-call]
            "memory/status", {"workspaceRoot": str(workspace)}
        )
        assert status is not None
        assert not memory_dir(unseen, agentd_home(tmp_path)).exists()
    finally:
        await lsp.shutdown_session()


async def test_the_memory_update_follows_the_request_and_precedes_the_answer(
    model_server: ModelServer, tmp_path: Path, workspace: Path, topics: dict[str, Path]
) -> None:
    """A delivery's `memory` update is sent once the request carrying the notes
    is out (its write no longer comes before the request's bytes), still before
    the answer's first chunk; its transcript note is written as before."""
    model_server.enqueue({"chunks": ["Run ", "make ship."]})
    c = await new_memory_client(model_server, tmp_path, modelTier=False)
    try:
        sid = await c.new_session(workspace)
        await c.request("memory/status", {"workspaceRoot": str(workspace)})  # index ready
        result = await c.prompt(sid, "how do we deploy a release to production?")
        assert result["stopReason"] == "end_turn"
        kinds = c.kinds(sid)
        assert kinds.count("memory") == 1
        assert kinds.index("memory") < kinds.index("message_chunk")
        (transcript,) = (agentd_home(tmp_path) / "projects").glob(f"*/sessions/{sid}.jsonl")
        notes = [json.loads(line) for line in transcript.read_text().splitlines()]
        memory = [n["note"] for n in notes if n["type"] == "note" and n["note"]["kind"] == "memory"]
        assert [n["docs"] for n in memory] == [[str(topics["deploy"])]]
    finally:
        await c.lsp.shutdown_session()


async def test_the_memory_update_is_sent_when_the_request_never_goes_out(
    tmp_path: Path, workspace: Path, topics: dict[str, Path]
) -> None:
    """Nothing listens on the endpoint: the request is never written, and the
    prompt ends with an error. The notes it would have carried are still
    reported, before the prompt's reply."""
    env = daemon_env("http://127.0.0.1:9/v1", tmp_path)
    c = await start_client(env, {"maxRetries": 0, "memory": {"modelTier": False}})
    try:
        sid = await c.new_session(workspace)
        await c.request("memory/status", {"workspaceRoot": str(workspace)})  # index ready
        result = await c.prompt(sid, "how do we deploy a release to production?")
        assert result["stopReason"] == "error"
        (delivery,) = memory_updates(c, sid)
        assert (delivery["point"], delivery["docs"]) == ("user_query", [str(topics["deploy"])])
    finally:
        await c.lsp.shutdown_session()
