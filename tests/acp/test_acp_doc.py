"""The ACP section of docs/protocol.md and the README snippets must say what the code does."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from agentd.acp import server
from agentd.acp.handlers import HANDLERS, STOP_REASONS
from agentd.acp.updates import TOOL_KINDS

ROOT = Path(__file__).resolve().parents[2]
PROTOCOL = ROOT / "docs" / "protocol.md"
README = ROOT / "README.md"


def acp_doc() -> str:
    return PROTOCOL.read_text(encoding="utf-8").split("## ACP mode", 1)[1]


def table(doc: str, heading: str) -> dict[str, str]:
    body = doc.split(heading, 1)[1].split("\n### ", 1)[0]
    return dict(re.findall(r"^\| `([a-z_]+)` \| `([a-z_]+)` \|$", body, re.M))


@pytest.mark.parametrize(
    "method", ["initialize", *HANDLERS, *server.NOTIFICATIONS_SENT, "session/cancel"]
)
def test_every_method_is_documented(method: str) -> None:
    assert f"`{method}`" in acp_doc()


def test_stop_reason_table_matches_the_code() -> None:
    assert table(acp_doc(), "### ACP stop reasons") == STOP_REASONS


def test_tool_kind_table_matches_the_code() -> None:
    assert table(acp_doc(), "Tool kinds:") == TOOL_KINDS


def test_documented_initialize_result_has_the_real_shape(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As documented: the default model, which takes images, and no config file.
    monkeypatch.delenv("AGENTD_MODEL", raising=False)
    monkeypatch.delenv("AGENTD_PROVIDER", raising=False)
    monkeypatch.setenv("AGENTD_CONFIG_DIR", str(tmp_path))
    block = acp_doc().split("### ACP lifecycle", 1)[1].split("```json", 1)[1].split("```", 1)[0]
    documented = json.loads(block)
    real = server.AcpServer(lambda data: None).initialize(
        {
            "protocolVersion": 1,
            "clientCapabilities": {
                "fs": {"readTextFile": True, "writeTextFile": True},
                "terminal": True,
            },
        }
    )
    assert documented.keys() == real.keys()
    caps, real_caps = documented["agentCapabilities"], real["agentCapabilities"]
    assert caps.keys() == real_caps.keys()
    assert caps["promptCapabilities"] == real_caps["promptCapabilities"]
    assert caps["sessionCapabilities"] == real_caps["sessionCapabilities"]
    assert caps["_meta"]["agentd"].keys() == real_caps["_meta"]["agentd"].keys()
    assert set(real_caps["_meta"]["agentd"]["extMethods"]) <= set(
        caps["_meta"]["agentd"]["extMethods"]
    )


def test_readme_snippets_are_valid_and_run_the_acp_server() -> None:
    text = README.read_text(encoding="utf-8")
    blocks = re.findall(r"```json\n(.*?)```", text, re.S)
    assert len(blocks) == 2  # Zed, JetBrains
    for block in blocks:
        (entry,) = json.loads(block)["agent_servers"].values()
        assert (entry["command"], entry["args"]) == ("agentd", ["serve", "--acp"])
    lua = re.findall(r"```lua\n(.*?)```", text, re.S)
    assert len(lua) == 2  # CodeCompanion, avante
    for block in lua:
        assert '"agentd", "serve", "--acp"' in block or 'args = { "serve", "--acp" }' in block
