"""A prompt's params over the real daemon, both front ends (`session/prompt`,
`agent/prompt`): a prompt of text only is read without pydantic
(`agentd.params.text_prompt`); anything else is validated as every params
are. Each hostile case answers the very -32602 pydantic's validation gives
in process (message and fields), a prompt of text blocks reaches the model
as their texts joined, and lone surrogates pass the boundary and are
replaced in what the model is sent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentd.acp import params as acp_params
from agentd.errors import InvalidParams
from agentd.lsp import ext as lsp_ext
from agentd.params import prompt_input, text_prompt, validate_params
from agentd.testing.daemon import daemon_env
from agentd.testing.model_server import ModelServer
from agentd.testing.raw_client import RawDaemon

pytestmark = pytest.mark.e2e

SID = "<the session's id>"
TEXT = {"type": "text", "text": "hello"}

# Each a prompt's params, SID standing for the session's real id.
HOSTILE_BOTH: list[Any] = [
    {"prompt": [TEXT]},
    {"sessionId": 5, "prompt": [TEXT]},
    {"sessionId": None, "prompt": [TEXT]},
    {"sessionId": ["x"], "prompt": [TEXT]},
    {"sessionId": 10**40, "prompt": [TEXT]},
    {"sessionId": SID},
    {"sessionId": SID, "prompt": None},
    {"sessionId": SID, "prompt": 7},
    {"sessionId": SID, "prompt": {"type": "text", "text": "x"}},
    {"sessionId": SID, "prompt": [5]},
    {"sessionId": SID, "prompt": ["text"]},
    {"sessionId": SID, "prompt": [{"type": "text"}]},
    {"sessionId": SID, "prompt": [{"type": "text", "text": 5}]},
    {"sessionId": SID, "prompt": [{"type": "text", "text": None}]},
    {"sessionId": SID, "prompt": [{"type": "text", "text": ["a"]}]},
    {"sessionId": SID, "prompt": [{"text": "x"}]},
    {"sessionId": SID, "prompt": [{"type": "txt", "text": "x"}]},
    {"sessionId": SID, "prompt": [{"type": ["text"], "text": "x"}]},
    {"sessionId": SID, "prompt": [TEXT, {"type": "text", "text": 1.5}]},
    {"sessionId": SID, "prompt": [TEXT, {"type": "image", "data": "", "mimeType": "image/png"}]},
    [SID, [TEXT]],
]
HOSTILE = {
    # (LSP: params that are no object or array are answered before validation:
    # see the test below.)
    "acp": [*HOSTILE_BOTH, "a string", {"sessionId": SID, "prompt": "a string, not blocks"}],
    "lsp": HOSTILE_BOTH,
}


def with_sid(value: Any, sid: str) -> Any:
    if value == SID:
        return sid
    if isinstance(value, dict):
        return {k: with_sid(v, sid) for k, v in value.items()}
    if isinstance(value, list):
        return [with_sid(v, sid) for v in value]
    return value


def expected_error(wire: str, params: Any) -> tuple[str, Any]:
    """The -32602 the params' validation gives in process: message and data."""
    method = "session/prompt" if wire == "acp" else "agent/prompt"
    model = acp_params.PromptParams if wire == "acp" else lsp_ext.PromptParams
    with pytest.raises(InvalidParams) as caught:
        p: Any = validate_params(method, model, params)
        # What the handlers do next with validated blocks (images checked there).
        blocks = (
            p.prompt
            if isinstance(p.prompt, str)
            else [b.model_dump(by_alias=True) for b in p.prompt]
        )
        prompt_input(blocks, 1 << 20)
    return caught.value.message, caught.value.data


async def started(wire: str, env: dict[str, str], workspace: Path) -> tuple[RawDaemon, str]:
    d = await RawDaemon.spawn(env, acp=wire == "acp")
    return d, await d.open_session(workspace)


@pytest.mark.parametrize("wire", ["acp", "lsp"])
async def test_each_hostile_prompt_answers_the_validation_s_minus_32602(
    model_server: ModelServer, tmp_path: Path, workspace: Path, wire: str
) -> None:
    d, sid = await started(wire, daemon_env(model_server.openai_base_url, tmp_path), workspace)
    method = "session/prompt" if wire == "acp" else "agent/prompt"
    try:
        for i, case in enumerate(HOSTILE[wire]):
            params = with_sid(case, sid)
            assert text_prompt(params, blocks_only=wire == "acp") is None, case
            d.request(100 + i, method, params)
            reply = await d.response(100 + i)
            message, data = expected_error(wire, params)
            assert reply["error"]["code"] == -32602, case
            assert (reply["error"]["message"], reply["error"].get("data")) == (message, data)
            assert data["fields"], case  # each names its field
        assert model_server.requests("main") == []
    finally:
        await d.close()


async def test_lsp_params_that_are_no_object_or_array_answer_minus_32602_naming_params(
    model_server: ModelServer, tmp_path: Path, workspace: Path
) -> None:
    """JSON-RPC's params are an object or an array; anything else is refused
    before any handler runs, naming `params` as every other -32602 names its
    field, for agentd's methods and LSP's alike."""
    d, _ = await started("lsp", daemon_env(model_server.openai_base_url, tmp_path), workspace)
    cases: list[tuple[str, Any]] = [
        ("agent/prompt", "a string"),
        ("agent/prompt", 5),
        ("agent/newSession", True),
        ("agent/listSessions", "\ud800"),
        ("shutdown", 1.5),
    ]
    try:
        for i, (method, params) in enumerate(cases):
            d.request(200 + i, method, params)
            error = (await d.response(200 + i))["error"]
            assert error["code"] == -32602, method
            assert error["message"] == (
                f"Invalid params for {method}: params: must be an object or array"
            )
            assert error["data"] == {
                "fields": [{"field": "params", "message": "must be an object or array"}]
            }
        # The daemon goes on answering (the refused shutdown did not shut it).
        d.request(300, "agent/listSessions", {"workspaceRoot": str(workspace)})
        assert "result" in await d.response(300)
        assert model_server.requests("main") == []
    finally:
        await d.close()


@pytest.mark.parametrize("wire", ["acp", "lsp"])
async def test_a_text_prompt_reaches_the_model_as_its_blocks_joined(
    model_server: ModelServer, tmp_path: Path, workspace: Path, wire: str
) -> None:
    """Blocks with keys the models ignore, a lone surrogate (passed by the
    boundary as by pydantic, replaced in the history), and over LSP a
    string, each as the model is sent it."""
    d, sid = await started(wire, daemon_env(model_server.openai_base_url, tmp_path), workspace)
    method = "session/prompt" if wire == "acp" else "agent/prompt"
    blocks = [
        {"type": "text", "text": "first", "annotations": {"priority": 1}, "_meta": {}},
        {"type": "text", "text": "odd \ud800 half"},
        {"type": "text", "text": ""},
    ]
    prompts: list[Any] = [blocks] if wire == "acp" else [blocks, "a plain string"]
    wanted = ["first\n\nodd \ufffd half\n\n", "a plain string"]
    try:
        for i, prompt in enumerate(prompts):
            d.request(10 + i, method, {"sessionId": sid, "prompt": prompt, "extra": 1})
            reply = await d.response(10 + i)
            assert "result" in reply, reply
            sent = model_server.requests("main")[-1]["body"]["messages"][-1]["content"]
            texts = sent if isinstance(sent, str) else [p["text"] for p in sent]
            assert wanted[i] in (texts if isinstance(texts, str) else "".join(texts))
    finally:
        await d.close()
