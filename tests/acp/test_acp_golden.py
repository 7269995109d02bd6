"""Every golden ACP message is valid against the published ACP JSON Schema,
and every golden file is still produced by a test."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.acp.harness import (
    GOLDEN,
    NOTIFICATION_DEFS,
    REQUEST_DEFS,
    RESPONSE_DEFS,
    schema,
    schema_errors,
)

GOLDEN_FILES = sorted(GOLDEN.glob("*.json"))
RESPONSES = {
    "initialize_response": "initialize",
    "session_new_response": "session/new",
    "session_load_response": "session/load",
    "session_resume_response": "session/resume",
    "session_list_response": "session/list",
    "session_fork_response": "session/fork",
    "session_delete_response": "session/delete",
    "session_set_mode_response": "session/set_mode",
    "session_set_config_option_response": "session/set_config_option",
    "session_prompt_response_end_turn": "session/prompt",
    "session_prompt_response_cancelled": "session/prompt",
}


def definition_and_instance(name: str, message: dict[str, Any]) -> tuple[str, Any] | None:
    method = message.get("method")
    if isinstance(method, str) and method.startswith("_"):
        return None  # an extension notification: any object (checked below)
    if method is not None:
        defs = REQUEST_DEFS if "id" in message else NOTIFICATION_DEFS
        return defs[method], message["params"]
    if "error" in message:
        return "Error", message["error"]
    return RESPONSE_DEFS[RESPONSES[name]], message["result"]


@pytest.mark.parametrize("path", GOLDEN_FILES, ids=[p.stem for p in GOLDEN_FILES])
def test_golden_message_matches_the_acp_schema(path: Path) -> None:
    message = json.loads(path.read_text(encoding="utf-8"))
    assert message["jsonrpc"] == "2.0"
    target = definition_and_instance(path.stem, message)
    if target is None:
        assert isinstance(message["params"], dict)
        assert message["params"]["sessionId"]
        return
    definition, instance = target
    assert schema_errors(instance, definition) == []
    # The envelope too: the schema's root accepts it as an agent message.
    import jsonschema

    root = schema()
    agent = {"$defs": root["$defs"], **root["anyOf"][0]}
    assert list(jsonschema.Draft202012Validator(agent).iter_errors(message)) == []


def test_every_golden_file_is_checked_by_a_test() -> None:
    tests = Path(__file__).parents[1]
    sources = "".join(
        p.read_text(encoding="utf-8")
        for folder in ("acp", "mcp")  # MCP's ACP messages are pinned by tests/mcp
        for p in (tests / folder).glob("test_*.py")
    )
    used = set(re.findall(r'check_golden\(\s*"([^"]+)"', sources))
    used |= {m.replace("/", "_") for m in REQUEST_DEFS if m.startswith("terminal/")}
    assert {p.stem for p in GOLDEN_FILES} <= used
