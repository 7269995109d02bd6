"""docs/protocol.md and agentd/lsp/schema.json must say what the code does."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import TypeAdapter

from agentd import events
from agentd.lsp import ext
from agentd.lsp.schema import SCHEMA_PATH, render
from agentd.lsp.updates import update_to_wire

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "protocol.md").read_text()


def test_schema_json_is_generated_from_the_models() -> None:
    assert SCHEMA_PATH.read_text() == render(), "run: python -m agentd.lsp.schema"


@pytest.mark.parametrize(
    "method",
    [*ext.REQUESTS, *ext.SERVER_REQUESTS, *ext.CLIENT_NOTIFICATIONS, *ext.SERVER_NOTIFICATIONS],
)
def test_every_method_has_a_section(method: str) -> None:
    assert f"### {method}\n" in DOC


def test_no_section_for_a_method_the_code_does_not_have() -> None:
    documented = set(re.findall(r"^### ([a-zA-Z$]+/[a-zA-Z/]+)$", DOC, re.M))
    known = {
        *ext.REQUESTS,
        *ext.SERVER_REQUESTS,
        *ext.CLIENT_NOTIFICATIONS,
        *ext.SERVER_NOTIFICATIONS,
    }
    assert documented - known <= {"$/cancelRequest", "window/logMessage"}


def test_update_kinds_table_matches_the_models() -> None:
    table = re.findall(r"^\| `([a-z_]+)` \|", DOC.split("### agent/update")[1], re.M)
    assert table[: len(ext.UPDATE_KINDS)] == ext.UPDATE_KINDS


@pytest.mark.parametrize(
    "model_name",
    [
        "PromptParams",
        "ToolResultParams",
        "RecallParams",
        "RequestPermissionParams",
        "ElicitParams",
        "CompactParams",
    ],
)
def test_documented_param_fields_exist(model_name: str) -> None:
    model = getattr(ext, model_name)
    for field in model.model_fields.values():
        assert field.alias and f"{field.alias}" in DOC


def test_stop_reasons_documented() -> None:
    reasons = ext.PromptResult.model_fields["stop_reason"].annotation.__args__  # type: ignore[union-attr]
    for reason in reasons:
        assert f"| `{reason}` |" in DOC


SAMPLES: list[events.Update] = [
    events.MessageChunk("hi"),
    events.ThoughtChunk("hmm"),
    events.ToolCallStarted("c1", "read_file", {"path": "a"}, "daemon"),
    events.ToolCallStarted("c2", "mcp__db__query", {"sql": "x"}, "daemon", server="db"),
    events.ToolCallUpdate("c1", "completed", "text"),
    events.ToolCallUpdate("c1", "cancelled"),
    events.ToolCallStarted(
        "c2", "search", {"query": "x", "path": "src"}, "daemon", [events.Location("/w/src")]
    ),
    events.ToolCallUpdate(
        "c2", "completed", "src/a.py\n3:x\n", [events.Location("/w/src/a.py", 3)]
    ),
    events.MemoryDelivered("user_query", "local", ["/m/a.md"]),
    events.UsageReport(1, 2, 3),
    events.UsageReport(1, 2, 3, 900, 32_000),
    events.CompactionReport("started", "window", 900),
    events.CompactionReport("done", "threshold", 900, 300, 2, 8, "The summary."),
    events.CompactionReport("failed", "overflow", 900, 900, message="It failed."),
    events.UsageReport(100, 2, 3, 900, 32_000, cache_read_tokens=90, cache_write_tokens=4),
    events.UserMessage("hello"),
    events.PromptEnded("cancelled"),
    events.PromptEnded(
        "error", {"kind": "http", "message": "The model answered 500.", "status": 500}
    ),
]


@pytest.mark.parametrize("update", SAMPLES, ids=lambda u: type(u).__name__)
def test_runtime_updates_validate_against_the_models(update: events.Update) -> None:
    wire = update_to_wire(update)
    parsed = TypeAdapter(ext.AgentUpdate).validate_python(wire)
    assert ext.dump(parsed) == wire


def test_permission_params_and_answers_validate_against_the_models() -> None:
    from agentd.agent.permission import PermissionRequest
    from agentd.lsp.permission import permission_params

    request = PermissionRequest("c1", "mcp__db__query", {"sql": "x"}, "db: query", "db", "query")
    wire = permission_params("s1", request)
    assert ext.dump(ext.RequestPermissionParams.model_validate(wire)) == wire
    for outcome in (
        {"outcome": "selected", "optionId": "allow_always"},
        {"outcome": "cancelled"},
    ):
        ext.RequestPermissionResult.model_validate({"outcome": outcome})
