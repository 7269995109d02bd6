"""ACP next edit suggestions: `nes/*` and the `document/*` notifications, over
the real daemon with the ACP package's client and the bundled model server
answering the prediction with an enqueued rewritten region."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from acp import RequestError
from acp.schema import SuggestNesResponse

from agentd.nes.predict import CURSOR, END, START
from agentd.testing.daemon import TEST_MODEL, daemon_env
from agentd.testing.model_server import ModelServer
from tests.acp.harness import CLIENT_INFO, EditorClient, capabilities, connect_acp
from tests.acp.test_acp_e2e import last_response, start
from tests.acp.test_acp_sessions import bad_field

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio]

# An astral character (two UTF-16 code units, one str character) before the cursor.
EMOJI = "\U0001f600"
TEXT = "def greet():\n    return 1\n\nx = 0\n"


async def request(conn: Any, method: str, params: dict[str, Any]) -> Any:
    """A request the ACP package's client has no method for (unstable ones)."""
    return await conn._conn.send_request(method, params)


async def notify(conn: Any, method: str, params: dict[str, Any]) -> None:
    await conn._conn.send_notification(method, params)


async def nes_session(conn: Any, workspace: Path) -> str:
    result = await request(conn, "nes/start", {"workspaceUri": workspace.as_uri()})
    return str(result["sessionId"])


async def open_doc(conn: Any, sid: str, uri: str, text: str, version: int = 1) -> None:
    params = {"sessionId": sid, "uri": uri, "languageId": "python", "version": version}
    await notify(conn, "document/didOpen", {**params, "text": text})


def edit_reply(region: str) -> dict[str, Any]:
    return {"text": f"{START}\n{region}{END}"}


def suggest_params(sid: str, uri: str, version: int, line: int, character: int) -> dict[str, Any]:
    return {
        "sessionId": sid,
        "uri": uri,
        "version": version,
        "position": {"line": line, "character": character},
        "triggerKind": "automatic",
    }


async def test_suggest_edits_the_region_at_utf16_positions(
    daemon: Any, editor: EditorClient, workspace: Path, model_server: ModelServer
) -> None:
    await start(daemon)
    caps = last_response(editor, "initialize")["result"]["agentCapabilities"]
    assert caps["positionEncoding"] == "utf-16"
    assert caps["nes"]["events"]["document"]["didChange"] == {"syncKind": "incremental"}
    assert set(caps["nes"]["context"]) == {"recentFiles", "editHistory", "openFiles", "diagnostics"}
    sid = await nes_session(daemon, workspace)
    uri = (workspace / "greet.py").as_uri()
    await open_doc(daemon, sid, uri, TEXT)
    # Ranged: the user types `"😀 hi"` over `1` on line 1 (UTF-16 columns 11..12).
    change = {
        "range": {"start": {"line": 1, "character": 11}, "end": {"line": 1, "character": 12}},
        "text": f'"{EMOJI} hi"',
    }
    await notify(
        daemon,
        "document/didChange",
        {"sessionId": sid, "uri": uri, "version": 2, "contentChanges": [change]},
    )
    edited = f'def greet():\n    return "{EMOJI} hi"\n\nx = 0\n'
    # The model appends to the string: `"😀 hi"` -> `"😀 hi" + name`.
    model_server.enqueue(edit_reply(edited.replace('hi"', f'hi" + name{CURSOR}')), "nes")
    # The cursor sits after `hi"`: UTF-16 column 11 + 1 + 2 + 3 + 1 = 18.
    result = await request(daemon, "nes/suggest", suggest_params(sid, uri, 2, 1, 18))

    SuggestNesResponse.model_validate(result)
    (suggestion,) = result["suggestions"]
    assert suggestion["kind"] == "edit" and suggestion["uri"] == uri
    (edit,) = suggestion["edits"]
    # Inserted after the closing quote (UTF-16 column 18: the emoji counts two).
    assert edit["range"] == {
        "start": {"line": 1, "character": 18},
        "end": {"line": 1, "character": 18},
    }
    assert edit["newText"] == " + name"
    assert suggestion["cursorPosition"] == {"line": 1, "character": 25}
    (sent,) = model_server.requests("nes")
    body = sent["body"]
    assert body["model"] == TEST_MODEL  # no fast model configured: the main one
    assert "tools" not in body or body["tools"] == []
    prompt = json.dumps(body["messages"], ensure_ascii=False)
    assert f'return \\"{EMOJI} hi\\"{CURSOR}' in prompt and START in prompt
    # No chat request, nothing else asked of the model.
    assert model_server.requests("main") == []

    # The outcome is remembered for the next suggestions' context.
    await notify(daemon, "nes/accept", {"sessionId": sid, "id": suggestion["id"]})
    model_server.enqueue(edit_reply(edited), "nes")
    again = await request(daemon, "nes/suggest", suggest_params(sid, uri, 2, 1, 18))
    assert again == {"suggestions": []}  # the region came back unchanged
    assert "accepted in" in json.dumps(model_server.requests("nes")[-1]["body"]["messages"])
    assert await request(daemon, "nes/close", {"sessionId": sid}) == {}
    with pytest.raises(RequestError) as missing:
        await request(daemon, "nes/suggest", suggest_params(sid, uri, 2, 1, 18))
    assert missing.value.code == -32002


async def test_stale_versions_and_outside_uris_get_no_suggestion(
    daemon: Any, workspace: Path, model_server: ModelServer, tmp_path: Path
) -> None:
    await start(daemon)
    sid = await nes_session(daemon, workspace)
    uri = (workspace / "a.py").as_uri()
    await open_doc(daemon, sid, uri, TEXT, version=3)
    # The editor's version is 3: a suggestion for 2 would be made on another text.
    assert await request(daemon, "nes/suggest", suggest_params(sid, uri, 2, 0, 0)) == {
        "suggestions": []
    }
    # An out-of-order change drops the document until the next didOpen.
    change = {"sessionId": sid, "uri": uri, "version": 3, "contentChanges": [{"text": "new"}]}
    await notify(daemon, "document/didChange", change)
    assert await request(daemon, "nes/suggest", suggest_params(sid, uri, 3, 0, 0)) == {
        "suggestions": []
    }
    # Outside the workspace (and not `file:`): never kept, never read from disk.
    outside = tmp_path / "outside.py"
    outside.write_text(TEXT)
    for other in (outside.as_uri(), "untitled:Untitled-1", (workspace / ".." / "x.py").as_uri()):
        await open_doc(daemon, sid, other, TEXT)
        assert await request(daemon, "nes/suggest", suggest_params(sid, other, 1, 0, 0)) == {
            "suggestions": []
        }
    # A bad range in a change drops the document too, never a wrong text.
    await open_doc(daemon, sid, uri, f"a{EMOJI}b\n", version=1)
    inside_pair = {"start": {"line": 0, "character": 2}, "end": {"line": 0, "character": 2}}
    await notify(
        daemon,
        "document/didChange",
        {
            "sessionId": sid,
            "uri": uri,
            "version": 2,
            "contentChanges": [{"range": inside_pair, "text": "x"}],
        },
    )
    assert await request(daemon, "nes/suggest", suggest_params(sid, uri, 2, 0, 0)) == {
        "suggestions": []
    }
    # A closed document is forgotten.
    await open_doc(daemon, sid, uri, TEXT, version=5)
    await notify(daemon, "document/didSave", {"sessionId": sid, "uri": uri})
    await notify(daemon, "document/didClose", {"sessionId": sid, "uri": uri})
    assert await request(daemon, "nes/suggest", suggest_params(sid, uri, 5, 0, 0)) == {
        "suggestions": []
    }
    assert model_server.requests("nes") == []


async def test_a_new_suggest_and_cancel_request_end_the_one_in_flight(
    daemon: Any, editor: EditorClient, workspace: Path, model_server: ModelServer
) -> None:
    await start(daemon)
    sid = await nes_session(daemon, workspace)
    uri = (workspace / "a.py").as_uri()
    await open_doc(daemon, sid, uri, TEXT)
    # The first prediction stalls after its headers until its stream is closed.
    model_server.enqueue({"text": "never", "stallAfter": 0}, "nes")
    first = asyncio.create_task(request(daemon, "nes/suggest", suggest_params(sid, uri, 1, 1, 4)))
    stalled = await model_server.wait_for(lambda e: e["type"] == "request")
    model_server.enqueue(edit_reply(TEXT.replace("return 1", "return 2")), "nes")
    second = await request(daemon, "nes/suggest", suggest_params(sid, uri, 1, 1, 4))
    assert second["suggestions"][0]["edits"][0]["newText"] == "2"
    # Superseded: answered with no suggestion, its model stream closed.
    assert await first == {"suggestions": []}
    await model_server.wait_for(lambda e: e["type"] == "disconnect" and e["id"] == stalled["id"])

    # `$/cancel_request` names the request: -32800, its stream closed too.
    model_server.enqueue({"text": "never", "stallAfter": 0}, "nes")
    third = asyncio.create_task(request(daemon, "nes/suggest", suggest_params(sid, uri, 1, 1, 4)))
    seen = {e["id"] for e in model_server.requests()}
    stalled = await model_server.wait_for(lambda e: e["type"] == "request" and e["id"] not in seen)
    (third_id,) = [i for i, m in editor.sent_methods.items() if m == "nes/suggest"][-1:]
    await notify(daemon, "$/cancel_request", {"requestId": third_id})
    with pytest.raises(RequestError) as cancelled:
        await third
    assert cancelled.value.code == -32800
    await model_server.wait_for(lambda e: e["type"] == "disconnect" and e["id"] == stalled["id"])


async def test_a_model_error_is_a_short_error_reply(
    daemon: Any, workspace: Path, model_server: ModelServer
) -> None:
    await start(daemon)
    sid = await nes_session(daemon, workspace)
    uri = (workspace / "a.py").as_uri()
    await open_doc(daemon, sid, uri, TEXT)
    model_server.enqueue({"status": 400, "errorBody": {"error": {"message": "bad model"}}}, "nes")
    with pytest.raises(RequestError) as failed:
        await request(daemon, "nes/suggest", suggest_params(sid, uri, 1, 0, 0))
    assert failed.value.code == -32603 and "bad model" in str(failed.value)


async def test_hostile_params_are_refused_or_dropped(
    daemon: Any, workspace: Path, model_server: ModelServer, tmp_path: Path
) -> None:
    await start(daemon)
    refusals: list[tuple[dict[str, Any], str]] = [
        ({}, "workspaceUri"),
        ({"workspaceUri": "relative/dir"}, "workspaceUri"),
        ({"workspaceUri": f"{workspace}/\ud800"}, "workspaceUri"),
        ({"workspaceUri": (tmp_path / "missing").as_uri()}, "workspaceUri"),
        (
            {"workspaceFolders": [{"uri": str(tmp_path / "nope"), "name": "x"}]},
            "workspaceFolders.0.uri",
        ),
        ({"workspaceFolders": [{"uri": "/", "name": "x"}] * 65}, "workspaceFolders"),
    ]
    for params, field in refusals:
        with pytest.raises(RequestError) as refused:
            await request(daemon, "nes/start", params)
        assert bad_field(refused.value)["field"] == field
    sid = await nes_session(daemon, workspace)
    uri = (workspace / "a.py").as_uri()
    await open_doc(daemon, sid, uri, TEXT)
    for params, field in [
        ({**suggest_params(sid, uri, -1, 0, 0)}, "version"),
        (
            {**suggest_params(sid, uri, 1, 0, 0), "position": {"line": -1, "character": 0}},
            "position.line",
        ),
        ({**suggest_params(sid, uri, 1, 9, 0)}, "position"),
        ({**suggest_params(sid, "file:///\ud800", 1, 0, 0)}, "uri"),
        (
            {**suggest_params(sid, uri, 1, 0, 0), "context": {"editHistory": [{"uri": 1}]}},
            "context.editHistory.0.uri",
        ),
    ]:
        with pytest.raises(RequestError) as refused:
            await request(daemon, "nes/suggest", params)
        assert bad_field(refused.value)["field"] == field

    big = f"{workspace.as_uri()}/big.py"
    # Dropped notifications: none answered, none kept, the daemon still serves.
    await open_doc(daemon, sid, big, "x" * (2 * 1024 * 1024))
    await open_doc(daemon, sid, (workspace / "s.py").as_uri(), "lone \ud800")
    await open_doc(daemon, sid, (workspace / "n.py").as_uri(), TEXT, version=-1)
    await notify(daemon, "document/didOpen", {"sessionId": sid, "uri": 7})
    await notify(daemon, "document/didChange", {"sessionId": sid, "uri": uri, "version": 2})
    await notify(daemon, "document/didFocus", {"sessionId": sid, "uri": uri, "version": 1})
    await notify(daemon, "nes/reject", {"sessionId": sid, "id": "unknown", "reason": 3})
    for n in range(10_000):
        await open_doc(daemon, sid, f"{workspace.as_uri()}/f{n}.py", "pass\n")
    for name in ("big.py", "s.py", "n.py"):
        other = f"{workspace.as_uri()}/{name}"
        assert await request(daemon, "nes/suggest", suggest_params(sid, other, 1, 0, 0)) == {
            "suggestions": []
        }
    # The first document fell out of the session's 64; the last ones are kept.
    assert await request(daemon, "nes/suggest", suggest_params(sid, uri, 1, 0, 0)) == {
        "suggestions": []
    }
    model_server.enqueue(edit_reply("pass  # ok\n"), "nes")
    last = f"{workspace.as_uri()}/f9999.py"
    kept = await request(daemon, "nes/suggest", suggest_params(sid, last, 1, 0, 0))
    assert kept["suggestions"][0]["edits"][0]["newText"] == "  # ok"
    assert len(model_server.requests("nes")) == 1


async def test_utf8_positions_the_focused_document_and_a_dirty_context(
    daemon: Any, editor: EditorClient, workspace: Path, model_server: ModelServer
) -> None:
    caps = capabilities()
    caps.position_encodings = ["utf-7", "utf-8", "utf-16"]
    await daemon.initialize(protocol_version=1, client_capabilities=caps, client_info=CLIENT_INFO)
    result = last_response(editor, "initialize")["result"]
    assert result["agentCapabilities"]["positionEncoding"] == "utf-8"
    sid = await nes_session(daemon, workspace)
    uri, other = (workspace / "a.py").as_uri(), (workspace / "b.py").as_uri()
    await open_doc(daemon, sid, uri, f's = "{EMOJI}"\n')
    await open_doc(daemon, sid, other, "FOCUSED_TEXT = 1\n")
    focus = {"line": 0, "character": 0}
    await notify(
        daemon,
        "document/didFocus",
        {
            "sessionId": sid,
            "uri": other,
            "version": 1,
            "position": focus,
            "visibleRange": {"start": focus, "end": focus},
        },
    )
    model_server.enqueue(edit_reply(f's = "{EMOJI}!"\n'), "nes")
    params = suggest_params(sid, uri, 1, 0, 9)  # after the emoji's four UTF-8 bytes
    params["context"] = {"editHistory": [{"uri": uri, "diff": "+lone \ud800"}]}
    (suggestion,) = (await request(daemon, "nes/suggest", params))["suggestions"]
    (edit,) = suggestion["edits"]
    assert edit["range"]["start"] == {"line": 0, "character": 9} and edit["newText"] == "!"
    prompt = json.dumps(model_server.requests("nes")[0]["body"]["messages"])
    assert "FOCUSED_TEXT" in prompt and "lone \\ufffd" in prompt


async def test_the_fast_model_predicts_when_one_is_configured(
    editor: EditorClient, workspace: Path, model_server: ModelServer, tmp_path: Path
) -> None:
    env = daemon_env(model_server.openai_base_url, tmp_path, AGENTD_FAST_MODEL="fast-nes-model")
    async with connect_acp(editor, env, tmp_path / "agentd-stderr.log") as daemon:
        await start(daemon)
        sid = await nes_session(daemon, workspace)
        uri = (workspace / "a.py").as_uri()
        await open_doc(daemon, sid, uri, TEXT)
        model_server.enqueue(edit_reply(TEXT), "nes")
        assert await request(daemon, "nes/suggest", suggest_params(sid, uri, 1, 0, 0)) == {
            "suggestions": []
        }
    (sent,) = model_server.requests("nes")
    assert sent["body"]["model"] == "fast-nes-model"
    assert editor.schema_problems == []
