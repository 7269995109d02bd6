"""Units of modes, plans, slash commands, images and the model choice: the
pieces both front ends share, checked without a daemon."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

import pytest

from agentd.agent import modes
from agentd.agent.commands import CommandCall, parse_command
from agentd.agent.plan import parse_plan
from agentd.agent.tools import CLIENT_TOOL_SPECS, DAEMON_TOOL_SPECS
from agentd.config import load_settings
from agentd.errors import InvalidParams, ToolError
from agentd.events import PlanEntry, PlanUpdated
from agentd.messages import ImagePart, Message, TextPart
from agentd.params import prompt_input
from agentd.providers import anthropic, openai
from agentd.transcript import (
    MISSING_IMAGE,
    SessionCatalog,
    TranscriptWriter,
    collect_orphan_images,
    load,
    meta_path,
    sessions_dir,
)
from agentd.vision import family_takes_images, peek_images

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(32)).decode()


# --- modes --------------------------------------------------------------------------------


def test_ask_mode_offers_only_read_only_tools_and_auto_edit_skips_asking_for_edits() -> None:
    specs = [*DAEMON_TOOL_SPECS.values(), *CLIENT_TOOL_SPECS.values()]
    names = {s.name for s in modes.offered(modes.ASK, specs)}
    assert names == {"read_file", "list_dir", "search", "glob"}
    assert {s.name for s in modes.offered(modes.CODE, specs)} == {s.name for s in specs}
    assert modes.asks_before(modes.CODE, "edit_file")
    assert not modes.asks_before(modes.AUTO_EDIT, "edit_file")
    assert not modes.asks_before(modes.AUTO_EDIT, "write_file")
    assert modes.asks_before(modes.AUTO_EDIT, "run_command")
    assert modes.asks_before(modes.AUTO_EDIT, "mcp__db__drop_table")


# --- plans and commands -----------------------------------------------------------------


def test_a_plan_is_validated_entry_by_entry() -> None:
    plan = parse_plan({"entries": [{"content": " a ", "priority": "high", "status": "pending"}]})
    assert plan == [PlanEntry("a", "high", "pending")]
    # Priority and status default as the model most likely means them.
    assert parse_plan({"entries": [{"content": "b"}]}) == [PlanEntry("b", "medium", "pending")]
    cases: list[tuple[dict[str, Any], str]] = [
        ({}, "entries must be a list"),
        ({"entries": ["x"]}, "entries[0] must be an object"),
        ({"entries": [{"content": ""}]}, "entries[0].content"),
        ({"entries": [{"content": "c", "status": "done"}]}, "entries[0].status"),
        ({"entries": [{"content": "c"}] * 51}, "at most 50"),
    ]
    for bad, words in cases:
        with pytest.raises(ToolError, match=words.replace("[", r"\[").replace("]", r"\]")):
            parse_plan(bad)


def test_a_prompt_is_a_command_only_when_it_starts_with_a_known_name() -> None:
    assert parse_command("/compact keep the decisions") == CommandCall(
        "compact", "keep the decisions"
    )
    assert parse_command("  /init\nstress the tests") == CommandCall("init", "stress the tests")
    assert parse_command([TextPart("/memory"), ImagePart("image/png", PNG)]) == CommandCall(
        "memory", ""
    )
    for not_a_command in ("/etc/hosts?", "/memorize this", "reset", "", [], [ImagePart("a", "b")]):
        assert parse_command(not_a_command) is None  # type: ignore[arg-type]


# --- images at the boundary, and to the providers ----------------------------------------


def test_prompt_content_with_images_keeps_the_order_and_checks_each_image() -> None:
    content = prompt_input(
        [
            {"type": "text", "text": "compare"},
            {"type": "image", "data": PNG, "mimeType": "image/png"},
            {"type": "text", "text": "with"},
            {"type": "resource_link", "uri": "file:///a.py", "name": "a.py"},
            {"type": "image", "data": PNG, "mimeType": "image/webp"},
        ],
        max_image_bytes=1024,
    )
    assert content == [
        TextPart("compare"),
        ImagePart("image/png", PNG),
        TextPart("with\n\n[a.py](file:///a.py)"),
        ImagePart("image/webp", PNG),
    ]
    # Without images the prompt stays text, as before.
    assert prompt_input([{"type": "text", "text": "hi"}], 1024) == "hi"

    def field_of(block: dict[str, str], limit: int = 1024) -> str:
        with pytest.raises(InvalidParams) as info:
            prompt_input([{"type": "text", "text": "x"}, block], limit)
        assert info.value.data is not None
        return str(info.value.data["fields"][0]["field"])

    assert field_of({"type": "image", "data": PNG, "mimeType": "image/svg+xml"}) == (
        "prompt.1.mimeType"
    )
    assert field_of({"type": "image", "data": "%%%", "mimeType": "image/png"}) == "prompt.1.data"
    assert field_of({"type": "image", "data": PNG, "mimeType": "image/png"}, limit=16) == (
        "prompt.1.data"
    )


def test_images_go_to_openai_as_image_url_parts_and_to_anthropic_as_image_blocks() -> None:
    message = Message("user", [TextPart("what is it?"), ImagePart("image/png", PNG)])
    (chat,) = openai.to_chat_messages("", [message])
    assert chat == {
        "role": "user",
        "content": [
            {"type": "text", "text": "what is it?"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
        ],
    }
    (anth,) = anthropic.to_anthropic_messages([message])
    assert anth["content"] == [
        {"type": "text", "text": "what is it?"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
    ]
    # A message without images is sent exactly as before (a plain string for OpenAI).
    (plain,) = openai.to_chat_messages("", [Message("user", [TextPart("hi")])])
    assert plain == {"role": "user", "content": "hi"}


# --- which models take images --------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "takes"),
    [
        ("gpt-4o-mini", True),
        ("gpt-5", True),
        ("o3", True),
        ("o3-mini", False),
        ("claude-sonnet-4-5", True),
        ("claude-3-5-haiku-latest", True),
        ("gemini-2.5-flash", True),
        ("qwen2.5-vl-72b-instruct", True),
        ("llama3.2-vision", True),
        ("gpt-3.5-turbo", False),
        ("deepseek-chat", False),
        ("qwen2.5-coder:7b", False),
        ("test-model", False),
    ],
)
def test_families_that_take_images(model: str, takes: bool) -> None:
    assert family_takes_images(model) is takes


CONFIGS = [
    ("", {}, {}),
    ('model = "gpt-4o"\n', {}, {}),
    ('model = "local"\nsupports_images = true\n', {}, {}),
    ('model = "local"\n', {}, {"supportsImages": True}),
    ('model = "local"\nmodels = ["other", { id = "eyes", supports_images = true }]\n', {}, {}),
    ('models = [{ id = "x", supportsImages = false }]\n', {"AGENTD_MODEL": "deepseek-chat"}, {}),
    ('model = "gpt-4o"\nsupports_images = false\n', {}, {}),
    ("", {"AGENTD_PROVIDER": "anthropic"}, {}),
    ("", {"AGENTD_MODEL": "test-model"}, {"models": ["gpt-4.1"]}),
    ("this is = = not toml", {"AGENTD_MODEL": "test-model"}, {}),
]


@pytest.mark.parametrize(("toml", "env", "options"), CONFIGS)
def test_the_handshake_peek_agrees_with_the_settings(
    tmp_path: Path, toml: str, env: dict[str, str], options: dict[str, object]
) -> None:
    config = tmp_path / "config.toml"
    config.write_text(toml)
    settings = load_settings(options, env=env, config_file=config)
    expected = any(takes for _, takes in settings.model_choices())
    assert peek_images(options, env=env, config_file=config) is expected


# --- the transcript: images beside it, settings, the plan, the listing ------------------


def test_image_folders_whose_transcript_is_gone_are_collected(tmp_path: Path) -> None:
    folder = sessions_dir(tmp_path / "ws", tmp_path / "home")
    kept = TranscriptWriter(folder / "kept.jsonl", "kept", tmp_path / "ws")
    kept.append(Message("user", [TextPart("a"), ImagePart("image/png", PNG)]))
    kept.close()
    gone = TranscriptWriter(folder / "gone.jsonl", "gone", tmp_path / "ws")
    gone.append(Message("user", [TextPart("a"), ImagePart("image/png", PNG)]))
    gone.close()
    (folder / "gone.jsonl").unlink()
    # Outside the sessions folder: reached only through symlinks, never removed.
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_bytes(b"x")
    (folder / "gone.images" / "link").symlink_to(outside / "precious")
    (folder / "linked.images").symlink_to(outside, target_is_directory=True)

    assert collect_orphan_images(tmp_path / "home") == 1
    assert not (folder / "gone.images").exists()
    assert len(list((folder / "kept.images").iterdir())) == 1
    assert (folder / "linked.images").is_symlink()
    assert (outside / "precious").read_bytes() == b"x"
    # Nothing to do (no projects folder at all) is not an error.
    assert collect_orphan_images(tmp_path / "nowhere") == 0


def test_the_listing_and_the_collector_walk_the_projects_alike_but_for_symlinks(
    tmp_path: Path,
) -> None:
    """One walker serves both: entries that are not project folders, and
    sessions folders that cannot be listed, are skipped by both; a project
    folder that is a symlink is listed (reading through it is harmless) but
    never collected from (removing through it is not)."""
    home = tmp_path / "home"
    root = tmp_path / "ws"
    root.mkdir()
    folder = sessions_dir(root, home)
    for sid in ("kept", "gone"):
        w = TranscriptWriter(folder / f"{sid}.jsonl", sid, root)
        w.append(Message("user", [TextPart(f"question {sid}"), ImagePart("image/png", PNG)]))
        w.close()
    (folder / "gone.jsonl").unlink()
    elsewhere = tmp_path / "elsewhere"
    w = TranscriptWriter(elsewhere / "sessions" / "linked.jsonl", "linked", root)
    w.append(Message("user", [TextPart("question linked")]))
    w.close()
    (elsewhere / "sessions" / "orphan.images").mkdir()
    projects = home / "projects"
    (projects / "linked").symlink_to(elsewhere, target_is_directory=True)
    os.mkfifo(projects / "fifo")
    (projects / "file").write_text("not a project")
    for name, make in (("fifo-sessions", os.mkfifo), ("file-sessions", Path.touch)):
        (projects / name).mkdir()
        make(projects / name / "sessions")
    (projects / "empty").mkdir()

    assert collect_orphan_images(home) == 1
    assert not (folder / "gone.images").exists()
    assert (elsewhere / "sessions" / "orphan.images").is_dir()
    listed = sorted(i.session_id for i in SessionCatalog(home).list(None))
    assert listed == ["kept", "linked"]


def test_the_transcript_exists_before_its_first_image(tmp_path: Path) -> None:
    # An image folder without its transcript counts as garbage (above): the
    # writer must never leave one, even for an instant, at a session's first prompt.
    path = tmp_path / "s.jsonl"
    w = TranscriptWriter(path, "s", tmp_path)
    store = w._store_image
    seen: list[bool] = []

    def spy(data: str) -> str:
        seen.append(path.exists())
        return store(data)

    w._store_image = spy  # type: ignore[method-assign]
    w.append(Message("user", [TextPart("a"), ImagePart("image/png", PNG)]))
    w.close()
    assert seen == [True]


def test_images_are_stored_once_beside_the_transcript_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    w = TranscriptWriter(path, "s", tmp_path)
    w.append(Message("user", [TextPart("a"), ImagePart("image/png", PNG)]))
    w.append(Message("user", [TextPart("b"), ImagePart("image/png", PNG)]))
    w.sync()
    w.close()
    assert PNG not in path.read_text()
    (stored,) = (tmp_path / "s.images").iterdir()
    assert stored.read_bytes() == base64.b64decode(PNG)
    loaded = load(path)
    assert loaded is not None
    assert [m.images[0].data for m in loaded.history] == [PNG, PNG]
    stored.unlink()
    loaded = load(path)
    assert loaded is not None
    assert loaded.history[0].parts == [TextPart("a"), TextPart(MISSING_IMAGE)]
    # A FIFO where the image was is not waited on (no writer would ever come).
    os.mkfifo(stored)
    loaded = load(path)
    assert loaded is not None
    assert loaded.history[1].parts == [TextPart("b"), TextPart(MISSING_IMAGE)]


def test_mode_and_model_survive_a_reset_and_the_plan_does_not(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    w = TranscriptWriter(path, "s", tmp_path)
    w.config(mode="ask")  # before anything else: no file yet
    assert not path.exists()
    w.append(Message("user", [TextPart("q")]))
    w.note(PlanUpdated([PlanEntry("p", "low", "pending")]))
    loaded = load(path)
    assert loaded is not None
    assert (loaded.mode, loaded.plan) == ("ask", [PlanEntry("p", "low", "pending")])
    w.config(model="small")
    w.reset()
    w.close()
    loaded = load(path)
    assert loaded is not None
    assert (loaded.mode, loaded.model, loaded.plan) == ("ask", "small", [])


def test_the_catalog_reads_meta_files_caches_them_and_falls_back_to_the_transcript(
    tmp_path: Path,
) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    folder = sessions_dir(root, tmp_path)
    for i in range(3):
        w = TranscriptWriter(folder / f"s{i}.jsonl", f"s{i}", root)
        w.append(Message("user", [TextPart(f"question {i}\nmore")]))
        w.close()
        os.utime(folder / f"s{i}.jsonl", (1000 + i, 1000 + i))
    catalog = SessionCatalog(tmp_path)
    listed = catalog.list(root)
    assert [(i.session_id, i.title, i.updated_at) for i in listed] == [
        ("s2", "question 2", 1002),
        ("s1", "question 1", 1001),
        ("s0", "question 0", 1000),
    ]
    assert json.loads(meta_path(folder / "s0.jsonl").read_text())["title"] == "question 0"
    # An older transcript without its meta file is read whole.
    meta_path(folder / "s1.jsonl").unlink()
    assert [i.title for i in SessionCatalog(tmp_path).list(root)][1] == "question 1"
    # A session whose transcript changed is read again (its meta file with it);
    # the others come from the cache.
    meta_path(folder / "s0.jsonl").write_text("not read: the transcript did not change")
    w = TranscriptWriter(folder / "s2.jsonl", "s2", root, offset=1, title="question 2")
    w.reset()
    w.append(Message("user", [TextPart("a new start")]))
    w.close()
    titles = {i.session_id: i.title for i in catalog.list(root)}
    assert titles == {"s2": "a new start", "s1": "question 1", "s0": "question 0"}
    assert [i.session_id for i in catalog.list(None)] == ["s2", "s1", "s0"]
