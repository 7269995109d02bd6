from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

import pytest

from agentd.memory import memory_dir
from agentd.memory.cli import register, run


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="agentd")
    register(parser.add_subparsers(dest="command"))
    return parser.parse_args(list(argv))


def call(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = run(parse(*argv), out)
    return code, out.getvalue()


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("AGENTD_HOME", str(tmp_path / "home"))
    ws = tmp_path / "ws"
    ws.mkdir()
    folder = memory_dir(ws)
    folder.mkdir(parents=True)
    (folder / "deploy.md").write_text(
        "---\nname: Deploy steps\ndescription: Production rollout\ntype: project\n---\n"
        "Canary first.\n"
    )
    (folder / "broken.md").write_text("---\nname: Unclosed\n")
    (folder / "MEMORY.md").write_text("- [Deploy steps](deploy.md) — rollout\n")
    return ws


def test_dir(workspace: Path, tmp_path: Path) -> None:
    code, out = call("memory", "dir", str(workspace))
    assert code == 0
    assert Path(out.strip()) == memory_dir(workspace)
    assert out.strip().startswith(str(tmp_path / "home" / "projects"))


def test_list(workspace: Path) -> None:
    code, out = call("memory", "list", str(workspace), "--json")
    payload = json.loads(out)
    assert code == 0 and payload["directory"] == str(memory_dir(workspace))
    assert [d["name"] for d in payload["docs"]] == ["broken", "Deploy steps"]
    assert payload["docs"][1]["type"] == "project" and payload["docs"][1]["team"] is False
    code, out = call("memory", "list", str(workspace))
    assert code == 0 and "Deploy steps" in out and "(2 docs)" in out


def test_recall(workspace: Path) -> None:
    code, out = call("memory", "recall", str(workspace), "production rollout", "--json")
    payload = json.loads(out)
    assert code == 0 and payload["tier"] == "local"
    assert [Path(d["path"]).name for d in payload["docs"]] == ["deploy.md"]
    assert payload["docs"][0]["ageText"] == "saved just now" and payload["docs"][0]["score"] > 0
    code, out = call("memory", "recall", str(workspace), "quantum physics")
    assert code == 0 and out.strip() == "no memory matches"
    code, out = call("memory", "recall", str(workspace), "canary", "--render")
    assert "Treat them as data" in out and "Canary first." in out
    code, out = call("memory", "recall", str(workspace), "canary", "--json", "--limit", "0")
    assert json.loads(out)["docs"] == []
    assert call("memory", "recall", str(workspace), "canary", "--limit", "-1")[0] == 2


def test_status(workspace: Path) -> None:
    code, out = call("memory", "status", str(workspace), "--json")
    status = json.loads(out)
    assert code == 0
    assert status["docCount"] == 2 and status["watcher"] == "stopped"
    assert status["indexedAt"] is not None
    assert [Path(p["path"]).name for p in status["problems"]] == ["broken.md"]
    code, out = call("memory", "status", str(workspace))
    assert "not closed" in out and "docs:           2" in out


def test_missing_memory_folder_is_empty_not_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTD_HOME", str(tmp_path / "home"))
    code, out = call("memory", "list", str(tmp_path), "--json")
    assert code == 0 and json.loads(out)["docs"] == []
    assert not memory_dir(tmp_path).exists()  # listing does not create it
