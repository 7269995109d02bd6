"""MCP pieces without a daemon: names, schemas, results, configuration, the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from agentd.config import load_settings
from agentd.mcp import names
from agentd.mcp.results import IMAGE_MAX_BYTES, result_images, result_text
from agentd.messages import (
    ImagePart,
    Message,
    ToolResultPart,
    message_from_json,
    message_to_json,
)
from tests.mcp.conftest import SERVER

NAME = r"^[A-Za-z0-9_-]{1,64}$"


def test_plain_names_are_kept() -> None:
    assert names.tool_name("db", "query") == "mcp__db__query"
    assert names.tool_name("my-db", "run_query") == "mcp__my-db__run_query"
    assert names.display_name("mcp__db__run__query") == "run__query"


@pytest.mark.parametrize(
    ("server", "tool"),
    [
        ("my.db", "query"),
        ("db", "query.all"),
        ("a__b", "c"),
        ("a", "b__c"),
        ("a_", "c"),
        ("_a", "c"),
        ("数据库", "查询"),
        ("s" * 80, "t" * 80),
        ("", ""),
    ],
)
def test_names_fit_both_providers_and_never_collide(server: str, tool: str) -> None:
    import re

    name = names.tool_name(server, tool)
    assert re.match(NAME, name), name
    assert name.startswith("mcp__")
    # Deterministic, and distinct from the plain name of any other pair.
    assert name == names.tool_name(server, tool)
    assert name != names.tool_name("a", "b_c") and name != names.tool_name("a_b", "c")


def test_ambiguous_splits_get_distinct_names() -> None:
    pairs = [("a__b", "c"), ("a", "b__c"), ("a_", "_c"), ("a", "_c"), ("a_", "c")]
    assert len({names.tool_name(s, t) for s, t in pairs}) == len(pairs)
    long = [("s" * 70, f"tool{i}") for i in range(50)]
    assert len({names.tool_name(s, t) for s, t in long}) == 50


def test_schemas_are_normalised_for_the_providers() -> None:
    assert names.input_schema(None) == {"type": "object", "properties": {}}
    schema = names.input_schema(
        {"anyOf": [{"type": "object"}], "properties": {"x": {"type": "string"}}, "required": "x"}
    )
    assert schema == {"type": "object", "properties": {"x": {"type": "string"}}}
    kept = {"type": "object", "properties": {"a": {"$ref": "#/$defs/A"}}, "$defs": {"A": {}}}
    assert names.input_schema(kept) == kept


def block(kind: str, **fields: Any) -> Any:
    return SimpleNamespace(type=kind, **fields)


def test_results_become_text() -> None:
    result = SimpleNamespace(
        content=[
            block("text", text="hello"),
            block("resource_link", name="spec", uri="file:///spec.md", title=None, description="d"),
            block("resource", resource=SimpleNamespace(uri="mem://a", text="body")),
            block(
                "resource", resource=SimpleNamespace(uri="mem://b", blob="AAAA", mime_type="a/b")
            ),
            block("image", data="AAAA", mime_type="image/png"),
        ],
        structured_content={"ignored": "because text carries it"},
        is_error=False,
    )
    text, is_error = result_text(result)
    assert not is_error
    assert text.split("\n\n") == [
        "hello",
        "[spec](file:///spec.md) d",
        '<resource uri="mem://a">\nbody\n</resource>',
        "[resource mem://b: a/b, 3 bytes, not shown]",
        "[image image/png, 3 bytes]",
    ]
    assert result_images(result) == (ImagePart("image/png", "AAAA"),)


def test_only_images_models_take_travel_beside_the_text() -> None:
    big = "A" * (IMAGE_MAX_BYTES * 4 // 3 + 8)
    result = SimpleNamespace(
        content=[
            block("image", data="PHN2Zz4=", mime_type="image/svg+xml"),
            block("image", data=big, mime_type="image/jpeg"),
            block("audio", data="AAAA", mime_type="audio/wav"),
            block("image", data="AAAA", mime_type="image/webp"),
        ],
        structured_content=None,
        is_error=False,
    )
    text, _ = result_text(result)
    assert text.split("\n\n") == [
        "[image image/svg+xml, 6 bytes, not shown]",
        f"[image image/jpeg, {len(big) * 3 // 4:,} bytes, not shown]",
        "[audio audio/wav, 3 bytes, not shown]",
        "[image image/webp, 3 bytes]",
    ]
    assert result_images(result) == (ImagePart("image/webp", "AAAA"),)


def test_images_of_a_result_survive_the_transcript() -> None:
    part = ToolResultPart("c1", "shot", False, (ImagePart("image/png", "AAAA"),))
    message = Message("user", [part])
    assert message_from_json(json.loads(json.dumps(message_to_json(message)))) == message
    plain = Message("user", [ToolResultPart("c2", "text")])
    assert "images" not in json.dumps(message_to_json(plain))


def test_structured_only_and_errors() -> None:
    text, is_error = result_text(
        SimpleNamespace(content=[], structured_content={"a": 1}, is_error=True)
    )
    assert json.loads(text) == {"a": 1} and is_error
    assert result_text(SimpleNamespace(content=[], structured_content=None, is_error=False))[0]


def test_config_file_servers_keep_their_names_and_env(tmp_path: Path) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_text(
        "[mcp_servers.my_db]\n"
        'command = "srv"\nargs = ["-v"]\nenv = { MY_TOKEN = "t", lower_case = "l" }\n'
        "trusted_tools = ['read']\n"
        "[mcp_servers.web]\n"
        'url = "https://mcp.example/mcp"\nheaders = { Authorization = "Bearer x" }\n'
        "[mcp_servers.broken]\n"
        'args = ["no command"]\n'
        "[mcp]\nstartup_wait = 0.5\n"
    )
    s = load_settings({"mcpServers": {"ed": {"url": "http://127.0.0.1:1/mcp"}}}, {}, cfg)
    assert set(s.mcp_servers) == {"my_db", "web", "ed"}
    db = s.mcp_servers["my_db"]
    assert db.env == {"MY_TOKEN": "t", "lower_case": "l"} and db.trusted_tools == ["read"]
    assert db.transport == "stdio"
    assert s.mcp_servers["web"].headers == {"Authorization": "Bearer x"}
    assert s.mcp_servers["web"].transport == "http"
    assert s.mcp.startup_wait == 0.5
    assert any("'broken' ignored" in p for p in s.problems)


def test_editor_servers_in_acp_list_shape(tmp_path: Path) -> None:
    servers = [
        {"name": "a", "command": "x", "args": [], "env": [{"name": "K", "value": "v"}]},
        {"type": "sse", "name": "b", "url": "http://h/sse", "headers": []},
    ]
    s = load_settings({"mcpServers": servers}, {}, tmp_path / "none.toml")
    assert s.mcp_servers["a"].env == {"K": "v"}
    assert s.mcp_servers["b"].transport == "sse"


def test_the_config_cannot_name_an_editors_own_server(tmp_path: Path) -> None:
    # Only an ACP editor's session/new can: the server is reached over its connection.
    cfg = tmp_path / "config.toml"
    cfg.write_text('[mcp_servers.ed]\ntype = "acp"\nserver_id = "srv-1"\n')
    s = load_settings(None, {}, cfg)
    assert s.mcp_servers == {}
    assert [p for p in s.problems if "'ed' ignored" in p and '"acp"' in p]
    servers = [{"type": "acp", "name": "also", "serverId": "srv-2"}]
    s = load_settings({"mcpServers": servers}, {}, tmp_path / "none.toml")
    assert s.mcp_servers == {}
    assert [p for p in s.problems if "'also' ignored" in p]


def cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "cfg"
    config.mkdir(exist_ok=True)
    (config / "config.toml").write_text(
        f'[mcp_servers.calc]\ncommand = "{sys.executable}"\nargs = ["{SERVER}"]\n'
        'env = { SECRET_TOKEN = "do-not-print" }\n'
    )
    env = {"PATH": "/usr/bin:/bin", "AGENTD_CONFIG_DIR": str(config), "HOME": str(tmp_path)}
    return subprocess.run(
        [sys.executable, "-m", "agentd", "mcp", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_cli_list_shows_the_configuration_without_secrets(tmp_path: Path) -> None:
    out = cli(tmp_path, "list", "--json")
    assert out.returncode == 0, out.stderr
    (calc,) = json.loads(out.stdout)["servers"]
    assert calc["name"] == "calc" and calc["env"] == ["SECRET_TOKEN"]
    assert "do-not-print" not in out.stdout + out.stderr


@pytest.mark.e2e
def test_cli_status_starts_the_server_and_lists_its_tools(tmp_path: Path) -> None:
    out = cli(tmp_path, "status")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("calc") and "ready" in out.stdout and "add" in out.stdout
