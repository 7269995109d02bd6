from __future__ import annotations

import os
from pathlib import Path

import pytest

from agentd.memory import InstructionFiles
from agentd.memory.instructions import MAX_TOTAL_CHARS, find_repo_root


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path, Path]:
    repo = tmp_path / "repo"
    ws = repo / "packages" / "app"
    ws.mkdir(parents=True)
    (repo / ".git").mkdir()
    config = tmp_path / "config"
    config.mkdir()
    return repo, ws, config


def test_no_files_renders_empty(tree: tuple[Path, Path, Path]) -> None:
    _, ws, config = tree
    assert InstructionFiles(ws, config).render() == ""


def test_order_from_user_to_repo_root_to_workspace(tree: tuple[Path, Path, Path]) -> None:
    repo, ws, config = tree
    (config / "AGENTS.md").write_text("USER-LEVEL")
    (repo / "AGENTS.md").write_text("REPO-ROOT")
    (repo / "packages" / "AGENTS.md").write_text("PACKAGES")
    (ws / "AGENTS.md").write_text("WORKSPACE")
    (ws / "AGENTD.md").write_text("AGENTD-SPECIFIC")
    (repo.parent / "AGENTS.md").write_text("ABOVE-THE-REPO")  # not read
    text = InstructionFiles(ws, config).render()
    order = [text.index(k) for k in ("USER-LEVEL", "REPO-ROOT", "PACKAGES", "WORKSPACE", "AGENTD-")]
    assert order == sorted(order)
    assert "ABOVE-THE-REPO" not in text
    assert f"Contents of {ws / 'AGENTS.md'} (project instructions)" in text


def test_without_a_repository_only_the_workspace_root(tmp_path: Path) -> None:
    ws = tmp_path / "a" / "b"
    ws.mkdir(parents=True)
    (tmp_path / "a" / "AGENTS.md").write_text("PARENT")
    (ws / "AGENTS.md").write_text("HERE")
    assert find_repo_root(ws) == ws.resolve()
    text = InstructionFiles(ws, tmp_path / "no-config").render()
    assert "HERE" in text and "PARENT" not in text


def test_imports_depth_loops_and_containment(tree: tuple[Path, Path, Path], tmp_path: Path) -> None:
    repo, ws, config = tree
    docs = repo / "docs"
    docs.mkdir()
    (ws / "AGENTS.md").write_text(
        "Top. See @../../docs/one.md and `@ignored-in-code.md`.\n"
        "```\n@also-ignored.md\n```\n"
        "Mail me at someone@example.com. Also @" + str(tmp_path / "outside.md") + "\n"
        "And @missing.md\n"
    )
    (docs / "one.md").write_text("LEVEL-ONE @two.md")
    (docs / "two.md").write_text("LEVEL-TWO @three.md")
    (docs / "three.md").write_text("LEVEL-THREE @four.md @one.md")
    (docs / "four.md").write_text("LEVEL-FOUR")
    (tmp_path / "outside.md").write_text("OUTSIDE")
    (config / "AGENTS.md").write_text("user @shared.md")
    (config / "shared.md").write_text("CONFIG-IMPORT")
    files = InstructionFiles(ws, config)
    text = files.render()
    for present in ("Top.", "LEVEL-ONE", "LEVEL-TWO", "LEVEL-THREE", "CONFIG-IMPORT"):
        assert present in text
    for absent in ("LEVEL-FOUR", "OUTSIDE"):
        assert absent not in text
    problems = "\n".join(files.problems)
    assert "more than 3 levels" in problems
    assert "import loop refused" in problems
    assert "outside the project and the config dir" in problems
    assert "missing.md not found" in problems
    assert "ignored-in-code" not in problems and "also-ignored" not in problems
    assert "example.com" not in problems


def test_symlinked_import_escaping_is_refused(
    tree: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    _, ws, config = tree
    (tmp_path / "secret.md").write_text("SECRET")
    (ws / "link.md").symlink_to(tmp_path / "secret.md")
    (ws / "AGENTS.md").write_text("x @link.md")
    files = InstructionFiles(ws, config)
    assert "SECRET" not in files.render()
    assert any("outside" in p for p in files.problems)


def test_budget_is_shared_fairly(tree: tuple[Path, Path, Path]) -> None:
    repo, ws, config = tree
    (config / "AGENTS.md").write_text("U" * 50_000)
    (repo / "AGENTS.md").write_text("small repo rules")
    (ws / "AGENTS.md").write_text("W" * 50_000)
    text = InstructionFiles(ws, config).render()
    assert len(text) <= MAX_TOTAL_CHARS
    assert "small repo rules" in text  # a huge file cannot push out a small one
    assert text.count("U") > 5_000 and text.count("W") > 5_000
    assert "truncated" in text


def test_reloads_when_files_change(tree: tuple[Path, Path, Path]) -> None:
    _, ws, config = tree
    files = InstructionFiles(ws, config)
    assert files.render() == ""
    agents = ws / "AGENTS.md"
    agents.write_text("first version @extra.md")
    assert "first version" in files.render()
    extra = ws / "extra.md"
    extra.write_text("EXTRA")  # an import that appears later counts too
    assert "EXTRA" in files.render()
    agents.write_text("second version, longer")
    assert "second version" in files.render()
    cached = files.render()
    assert files.render() is cached  # unchanged files: no re-read
    # Same size, new mtime: still noticed.
    agents.write_text("third  version, longer")
    st = agents.stat()
    os.utime(agents, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert "third" in files.render()
    agents.unlink()
    assert files.render() == ""


def test_binary_and_invalid_utf8(tree: tuple[Path, Path, Path]) -> None:
    _, ws, config = tree
    (ws / "AGENTS.md").write_bytes(b"caf\xe9 rules")
    (ws / "AGENTD.md").write_bytes(b"\x00\x01\x02")
    files = InstructionFiles(ws, config)
    text = files.render()
    assert "caf\ufffd rules" in text
    assert any("binary" in p for p in files.problems)


def test_only_the_files_that_exist_are_read(
    tree: tuple[Path, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stats that decide whether to render also say which candidates exist:
    a missing one costs no read (a `realpath` walk and a failed open each, on
    the path of a session's first prompt). One that appears later is read by
    the next render."""
    repo, ws, config = tree
    (repo / "AGENTS.md").write_text("REPO-ROOT")
    read: list[Path] = []
    real_read = InstructionFiles._read

    def counted(self: InstructionFiles, path: Path) -> str | None:
        read.append(path)
        return real_read(self, path)

    monkeypatch.setattr(InstructionFiles, "_read", counted)
    files = InstructionFiles(ws, config)
    assert "REPO-ROOT" in files.render()
    assert read == [repo / "AGENTS.md"]
    (ws / "AGENTS.md").write_text("WORKSPACE")
    assert files.cached() is None
    assert "WORKSPACE" in files.render()


def test_cached_is_the_text_until_a_file_changes_and_none_after(
    tree: tuple[Path, Path, Path],
) -> None:
    """`cached` (the event loop's check on every prompt, stats only) gives the
    last render's text while no file changed, and None as soon as one did: a
    candidate created, edited (the same size too), or deleted, an import edited,
    or the user's file created; `render` then reads the change."""
    _, ws, config = tree
    files = InstructionFiles(ws, config)
    assert files.cached() is None  # never rendered
    assert files.render() == ""
    assert files.cached() == ""
    agents = ws / "AGENTS.md"
    agents.write_text("first @extra.md")
    assert files.cached() is None
    (ws / "extra.md").write_text("EXTRA")
    text = files.render()
    assert "first" in text and "EXTRA" in text
    assert files.cached() is text
    agents.write_text("frist @extra.md")  # same size, new mtime
    st = agents.stat()
    os.utime(agents, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert files.cached() is None
    assert "frist" in files.render()
    (ws / "extra.md").write_text("MORE")
    assert files.cached() is None
    assert "MORE" in files.render()
    config.mkdir(parents=True, exist_ok=True)
    (config / "AGENTS.md").write_text("user rule")
    assert files.cached() is None
    assert "user rule" in files.render()
    agents.unlink()
    assert files.cached() is None
    assert "frist" not in files.render()
    assert files.cached() is not None
    # What appears where nothing was, a link or a link to nothing, is a change too.
    (ws / "elsewhere.md").write_text("linked rule")
    agents.symlink_to(ws / "elsewhere.md")
    assert files.cached() is None
    assert "linked rule" in files.render()
    agents.unlink()
    files.render()
    (ws / "AGENTD.md").symlink_to(ws / "missing.md")
    assert files.cached() is not None  # a dangling link reads as nothing, as render's stat
