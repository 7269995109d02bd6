from __future__ import annotations

from pathlib import Path

import pytest

from agentd.memory import agentd_home, memory_dir, project_slug, team_memory_dir


def test_slug_is_readable_and_stable(tmp_path: Path) -> None:
    root = tmp_path / "work" / "my-app"
    root.mkdir(parents=True)
    slug = project_slug(root)
    assert slug.startswith("work-my-app-")
    assert slug == project_slug(root / "." / "sub" / "..")
    assert all(c.isalnum() or c in "._-" for c in slug)


def test_slugs_never_collide(tmp_path: Path) -> None:
    # Same last components, different parents; and names that sanitise alike.
    roots = [
        tmp_path / "a" / "x" / "app",
        tmp_path / "b" / "x" / "app",
        tmp_path / "c" / "x y",
        tmp_path / "c" / "x-y",
        tmp_path / "c" / "x_y",
        tmp_path / "项目",
        tmp_path / "プロジェクト",
    ]
    slugs = {project_slug(r) for r in roots}
    assert len(slugs) == len(roots)


def test_slug_follows_symlinks(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    assert project_slug(link) == project_slug(real)


def test_non_ascii_and_root_names_stay_usable(tmp_path: Path) -> None:
    assert project_slug(tmp_path / "项目").split("-")[-1]
    assert project_slug(Path("/")).startswith("root-")
    assert project_slug(tmp_path / "café").endswith(project_slug(tmp_path / "café")[-12:])
    assert "cafe" in project_slug(tmp_path / "café")


def test_memory_dir_layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTD_HOME", str(tmp_path / "home"))
    ws = tmp_path / "ws"
    assert agentd_home() == tmp_path / "home"
    expected = tmp_path / "home" / "projects" / project_slug(ws) / "memory"
    assert memory_dir(ws) == expected
    assert memory_dir(ws, home=tmp_path / "other").parts[-4:-2] == ("other", "projects")
    assert not expected.exists()  # does not create
    assert team_memory_dir(ws) == ws.resolve() / ".agentd" / "memory"


def test_agentd_home_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTD_HOME", raising=False)
    assert agentd_home().name == "agentd"
